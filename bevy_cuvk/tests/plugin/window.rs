//! The example in a window under Xvfb (skips without Xvfb and xwd): it opens a window,
//! presents frames of particles with the HUD, prints why CUDA is unavailable, and closes
//! cleanly after its last step.

use std::path::PathBuf;
use std::process::Command;

use cuvk_dev::testing::xvfb;

use crate::app::{serial, vulkan_present};

/// The example binary: `BEVY_CUVK_PARTICLES_BIN`, beside this test (staged), or cargo's
/// `examples/` folder of this profile (`cargo test` builds the examples).
pub fn example_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("BEVY_CUVK_PARTICLES_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    let staged = dir.join("bevy_particles");
    if staged.is_file() {
        return staged;
    }
    let built = dir
        .parent()
        .unwrap()
        .join("examples")
        .join("bevy_particles");
    assert!(
        built.is_file(),
        "the bevy_particles example is not built ({}); run cargo test (which builds it) or set \
         BEVY_CUVK_PARTICLES_BIN",
        built.display()
    );
    built
}

#[test]
fn example_in_a_window_under_xvfb_presents_particles_and_closes() {
    if !vulkan_present() || !xvfb::tools_present() {
        return;
    }
    let _serial = serial();
    let display = format!(":{}", 80 + std::process::id() % 9);
    let mut demo = Command::new(example_binary());
    demo.args([
        "--particles",
        "60000",
        "--size",
        "640x360",
        "--frames",
        "60",
    ])
    .env("RUST_LOG", "warn");
    let xvfb::WindowRun {
        status,
        seen,
        err,
        shot,
    } = xvfb::run_window(&display, "800x600x24", demo);
    assert!(status.success(), "example exited with {status}: {err}");
    assert!(
        seen.iter().any(|l| l.starts_with("cuvk: CUDA")),
        "the example prints the status: {seen:?}"
    );
    assert!(
        seen.iter().any(|l| l.starts_with("frames: 60 steps")),
        "the example ran its 60 steps and printed its summary: {seen:?}"
    );
    // Bevy 0.19 / wgpu 29's swapchain on lavapipe under Xvfb draws these two from the
    // validation layer also without the plugin (`--no-cuvk`: 8 in 40 frames): allowed, and
    // nothing else.
    const BEVY_SWAPCHAIN: [&str; 2] = [
        "VUID-VkPresentInfoKHR-pImageIndices-01296",
        "VUID-vkAcquireNextImageKHR-semaphore-01286",
    ];
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("ERROR") || l.contains("Validation Error"))
        .filter(|l| l.contains("VUID-") || !l.contains("objects:"))
        .filter(|l| !BEVY_SWAPCHAIN.iter().any(|v| l.contains(v)))
        .collect();
    assert!(errors.is_empty(), "errors logged: {errors:?}");
    let (w, h, rgb) = xvfb::parse_xwd(&shot.expect("no screenshot taken"));
    let bright = rgb
        .iter()
        .filter(|p| p.iter().map(|&c| c as u32).sum::<u32>() > 120)
        .count();
    let dark = rgb.iter().filter(|p| p.iter().all(|&c| c < 40)).count();
    eprintln!("screenshot {w}x{h}: {bright} bright pixels, {dark} dark pixels");
    assert!(bright > 2_000, "the window shows no particles");
    assert!(dark > 10_000, "the window shows no background");
}
