//! Each particle path renders the frame the CPU reference predicts: the same initial
//! particles, `STEPS` steps on the GPU inside Bevy's frames (WGSL compute; a CUDA kernel on a
//! stream; a CUDA kernel inside Bevy's queue), the storage image the sprite shows read back,
//! against `reference::step` and `reference::draw` on the CPU. The CUDA paths need the GPU
//! machine (they skip without a CUDA driver, fail with `REQUIRE_GPU=1`).

use std::sync::{Arc, Mutex};

use bevy::prelude::*;
use bevy::render::gpu_readback::{Readback, ReadbackComplete};
use bevy_cuvk::CuvkPlugin;

use crate::app::{
    assert_silent, headless_app, record_wgpu_messages, serial, start, update_until, vulkan_present,
    Order,
};
use crate::reference;
use crate::sim::{Launch, ParticleSim, ParticleSimPlugin};

const COUNT: u32 = 16_384;
const WIDTH: u32 = 256;
const HEIGHT: u32 = 128;
const STEPS: u32 = 8;

/// How two RGBA8 pictures differ: (largest channel difference, pixels off by more than 2,
/// pixels off by more than 16).
fn difference(a: &[u8], b: &[u8]) -> (u8, usize, usize) {
    let mut max = 0;
    let (mut off2, mut off16) = (0, 0);
    for (p, q) in a.chunks_exact(4).zip(b.chunks_exact(4)) {
        let d = p
            .iter()
            .zip(q)
            .map(|(x, y)| x.abs_diff(*y))
            .max()
            .unwrap_or(0);
        max = max.max(d);
        off2 += usize::from(d > 2);
        off16 += usize::from(d > 16);
    }
    (max, off2, off16)
}

fn cpu_frame(steps: u32) -> Vec<u8> {
    let aspect = WIDTH as f32 / HEIGHT as f32;
    let mut particles = reference::initial_particles(COUNT, aspect, 1);
    for s in 0..steps {
        reference::step(
            &mut particles,
            &reference::params(s, COUNT, WIDTH, HEIGHT, true),
        );
    }
    reference::draw(
        &particles,
        &reference::params(steps, COUNT, WIDTH, HEIGHT, false),
    )
}

/// Runs `STEPS` steps of the example's simulation (the path `launch` and CUDA's availability
/// choose) and reads the sprite's image back; returns the path taken and the pixels.
fn gpu_frame(use_cuda: bool, launch: Launch) -> (String, Vec<u8>) {
    record_wgpu_messages();
    let cuvk = CuvkPlugin {
        use_cuda,
        ..default()
    };
    let mut app = headless_app(cuvk, Order::Before);
    app.add_plugins(ParticleSimPlugin);
    start(&mut app);
    let mut sim = {
        let mut images = app.world_mut().resource_mut::<Assets<Image>>();
        ParticleSim::new(&mut images, COUNT, WIDTH, HEIGHT, Some(STEPS))
    };
    sim.launch = launch;
    assert_eq!(sim.seed, 1);
    app.insert_resource(sim.clone());
    let updates = update_until(&mut app, 300, |_| sim.steps() >= STEPS);
    eprintln!("{STEPS} steps after {updates} updates on: {}", sim.path());

    let got: Arc<Mutex<Option<Vec<u8>>>> = Arc::default();
    let slot = got.clone();
    app.world_mut()
        .spawn(Readback::texture(sim.image.clone()))
        .observe(move |event: On<ReadbackComplete>| {
            slot.lock()
                .unwrap()
                .get_or_insert_with(|| event.data.clone());
        });
    update_until(&mut app, 50, |_| got.lock().unwrap().is_some());
    assert_eq!(sim.steps(), STEPS, "the simulation stopped at STEPS");
    let gpu = got.lock().unwrap().take().unwrap();
    drop(app);
    assert_silent("the frames and the app's drop");
    // 256 pixels x 4 bytes: rows are not padded.
    assert_eq!(gpu.len(), (WIDTH * HEIGHT * 4) as usize);
    (sim.path(), gpu)
}

/// The frame matches the CPU reference within float rounding, and not the frame before.
fn assert_matches_reference(gpu: &[u8]) {
    let want = cpu_frame(STEPS);
    let lit = want
        .chunks_exact(4)
        .filter(|p| p[0] > 40 || p[2] > 40)
        .count();
    let (max, off2, off16) = difference(gpu, &want);
    let pixels = (WIDTH * HEIGHT) as usize;
    eprintln!(
        "GPU vs CPU after {STEPS} steps: {lit} lit pixels, max channel difference {max}, \
         {off2} pixels off by > 2, {off16} by > 16 (of {pixels})"
    );
    assert!(lit > pixels / 20, "the reference frame shows particles");
    // Float rounding (fused multiply-adds, sqrt, exp) may move a particle's splat slightly:
    // a handful of pixels may differ, a wrong step would differ everywhere.
    assert!(off2 <= pixels / 200, "{off2} pixels differ by more than 2");
    assert!(
        off16 <= pixels / 1000,
        "{off16} pixels differ by more than 16"
    );

    // Negative control: the frame one step earlier is far from what the GPU drew.
    let (_, early2, _) = difference(gpu, &cpu_frame(STEPS - 1));
    eprintln!("negative control (one step fewer on the CPU): {early2} pixels off by > 2");
    assert!(
        early2 > 10 * off2.max(10),
        "the comparison tells steps apart"
    );
}

#[test]
fn wgsl_path_draws_the_frame_the_cpu_reference_predicts() {
    if !vulkan_present() {
        return;
    }
    let _serial = serial();
    let (path, gpu) = gpu_frame(false, Launch::Auto);
    assert!(path.starts_with("WGSL compute"), "{path}");
    assert_matches_reference(&gpu);
}

/// Whether CUDA can run here; without it the CUDA tests skip (fail with `REQUIRE_GPU=1`).
fn cuda_present() -> bool {
    if bevy_cuvk::cuvk::cuda::driver_present() {
        return true;
    }
    assert_ne!(
        std::env::var("REQUIRE_GPU").as_deref(),
        Ok("1"),
        "REQUIRE_GPU=1 but there is no CUDA driver"
    );
    eprintln!("SKIP: no CUDA driver");
    false
}

#[test]
fn cuda_stream_path_writes_what_bevy_draws() {
    if !vulkan_present() || !cuda_present() {
        return;
    }
    let _serial = serial();
    let (path, gpu) = gpu_frame(true, Launch::Stream);
    assert!(path.contains("stream path"), "{path}");
    assert_matches_reference(&gpu);
}

#[test]
fn cuda_inline_path_writes_what_bevy_draws() {
    if !vulkan_present() || !cuda_present() {
        return;
    }
    let _serial = serial();
    let (path, gpu) = gpu_frame(true, Launch::Inline);
    if path.starts_with("WGSL") {
        // The device has no NVX extensions: nothing to test here.
        eprintln!("SKIP: no inline kernels on this device ({path})");
        return;
    }
    assert!(path.contains("inline path"), "{path}");
    assert_matches_reference(&gpu);
}
