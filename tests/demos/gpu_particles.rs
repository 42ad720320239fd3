//! The particle demo on a real GPU: the CUDA simulation's PNG checked against the CPU
//! simulation, the CUDA and Vulkan simulations compared to float tolerance from the same seed,
//! and the staging path drawing the same image as zero-copy. Skips without a GPU.

use crate::particles;

use particles::{check_frame, read_png, run_demo, temp_dir};

fn gpu() -> bool {
    match cuvk::cuda::devices() {
        Ok(d) if !d.is_empty() => true,
        other => {
            assert_ne!(
                std::env::var("REQUIRE_GPU").as_deref(),
                Ok("1"),
                "no CUDA GPU: {other:?}"
            );
            eprintln!("SKIP: no CUDA GPU");
            false
        }
    }
}

fn run(dir: &std::path::Path, extra: &[&str]) {
    let mut argv = vec![
        "--headless",
        "--frames",
        "50",
        "--particles",
        "100000",
        "--size",
        "640x360",
        "--seed",
        "3",
        // The HUD's numbers change from run to run and its text names the path: the images of
        // the paths are compared without it.
        "--hud",
        "off",
        "--out",
        dir.to_str().unwrap(),
    ];
    argv.extend_from_slice(extra);
    let out = run_demo(&argv);
    assert!(out.status.success(), "demo failed: {argv:?}");
}

#[test]
fn cuda_simulation_frames_match_the_cpu_simulation() {
    if !gpu() {
        return;
    }
    let d = temp_dir("gpu-cuda");
    run(&d, &["--sim", "cuda"]);
    let share = check_frame(&d.join("frame_00050.png"), 640, 360, 100_000, 3, 50);
    assert!(share > 0.99, "{share}");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn cuda_inline_and_vulkan_simulations_agree_and_staging_draws_the_same_image() {
    if !gpu() {
        return;
    }
    let (dc, dv, ds, di) = (
        temp_dir("sim-cuda"),
        temp_dir("sim-vulkan"),
        temp_dir("sim-staging"),
        temp_dir("sim-inline"),
    );
    let (fc, fv, fs, fi) = (
        dc.join("pos.bin"),
        dv.join("pos.bin"),
        ds.join("pos.bin"),
        di.join("pos.bin"),
    );
    run(
        &dc,
        &[
            "--sim",
            "cuda",
            "--launch",
            "cuda",
            "--dump-positions",
            fc.to_str().unwrap(),
        ],
    );
    // The same kernel launched inside the Vulkan queue (VK_NVX_binary_import).
    run(
        &di,
        &[
            "--sim",
            "cuda",
            "--launch",
            "vulkan",
            "--dump-positions",
            fi.to_str().unwrap(),
        ],
    );
    run(
        &dv,
        &["--sim", "vulkan", "--dump-positions", fv.to_str().unwrap()],
    );
    run(
        &ds,
        &[
            "--sim",
            "cuda",
            "--transfer",
            "staging",
            "--dump-positions",
            fs.to_str().unwrap(),
        ],
    );
    let load = |p: &std::path::Path| -> Vec<f32> {
        bytemuck::cast_slice(&std::fs::read(p).unwrap()).to_vec()
    };
    let (c, v, s, i) = (load(&fc), load(&fv), load(&fs), load(&fi));
    assert_eq!(c.len(), 100_000 * 4);
    let max_diff = c
        .iter()
        .zip(&v)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let exact = c.iter().zip(&v).filter(|(a, b)| a == b).count();
    eprintln!("CUDA vs Vulkan after 50 steps: max |difference| {max_diff:e}, {exact} of {} values identical", c.len());
    assert!(max_diff < 1e-4, "simulations diverge: {max_diff}");
    assert_eq!(c, s, "the staging path simulated differently");
    assert_eq!(
        c, i,
        "the kernel inside the Vulkan queue simulated differently"
    );
    let img = |d: &std::path::Path| read_png(&d.join("frame_00050.png")).2;
    assert!(
        img(&dc) == img(&ds),
        "staging drew a different image than zero-copy"
    );
    assert!(
        img(&dc) == img(&di),
        "the inline launch drew a different image than the CUDA context"
    );
    for d in [dc, dv, ds, di] {
        let _ = std::fs::remove_dir_all(d);
    }
}
