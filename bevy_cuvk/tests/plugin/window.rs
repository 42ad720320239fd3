//! The example in a window under Xvfb (skips without Xvfb and xwd): it opens a window,
//! presents frames of particles with the HUD, prints why CUDA is unavailable, and closes
//! cleanly after its last step.

use std::path::PathBuf;
use std::process::Command;

use cuvk_dev::testing::xvfb;

use crate::app::{serial, vulkan_present};

/// The example binary: `BEVY_CUVK_PARTICLES_BIN`, beside this test (staged), or built here
/// with `cargo build --example bevy_particles` for this test binary's profile and target dir
/// (`cargo test --all-targets` builds examples only as `examples/<name>-<hash>`, and a binary
/// left by an earlier build may be stale). Built once per test process.
pub fn example_binary() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(find_or_build).clone()
}

fn find_or_build() -> PathBuf {
    if let Some(bin) = std::env::var_os("BEVY_CUVK_PARTICLES_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    let staged = dir.join("bevy_particles");
    if staged.is_file() {
        return staged;
    }
    // cargo's layout: <target dir>/<profile>/deps/<test binary>.
    assert_eq!(
        dir.file_name().and_then(|n| n.to_str()),
        Some("deps"),
        "bevy_particles is not beside {} and this is not a cargo build: set \
         BEVY_CUVK_PARTICLES_BIN",
        exe.display()
    );
    let profile_dir = dir.parent().unwrap();
    let target_dir = profile_dir.parent().unwrap();
    let profile = profile_dir.file_name().unwrap().to_str().unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args(["build", "--example", "bevy_particles", "--target-dir"])
        .arg(target_dir)
        .arg("--manifest-path")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"));
    match profile {
        "debug" => {}
        "release" => {
            build.arg("--release");
        }
        other => {
            build.args(["--profile", other]);
        }
    }
    let status = build.status().unwrap();
    assert!(status.success(), "{build:?}: {status}");
    let built = profile_dir.join("examples").join("bevy_particles");
    assert!(built.is_file(), "{build:?} left no {}", built.display());
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
