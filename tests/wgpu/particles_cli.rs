//! The wgpu particle example as a user runs it, under the validation layer: headless PNGs
//! checked against the CPU simulation (WGSL fallback on any Vulkan device, lavapipe in CI; the
//! CUDA zero-copy and write-buffer paths where there is a GPU), bad input refused with exit code
//! 2, and a window under Xvfb that presents and closes cleanly.

use cuvk_dev::testing::particles;
use cuvk_dev::testing::xvfb;

use std::path::PathBuf;
use std::process::{Command, Output};

use particles::{check_frame, temp_dir};

/// The example binary: staged beside the test binary on the GPU machine, or cargo's examples.
fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    for candidate in [
        dir.join("wgpu_particles"),
        dir.join("../examples/wgpu_particles"),
    ] {
        if candidate.exists() {
            return candidate;
        }
    }
    panic!("wgpu_particles example not built next to {}", exe.display());
}

fn run(args: &[&str]) -> Output {
    let out = Command::new(binary())
        .args(args)
        .env("CUVK_VALIDATION", "1")
        .env(
            "XDG_RUNTIME_DIR",
            std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| "/tmp".into()),
        )
        .env_remove("DISPLAY")
        .output()
        .expect("run the wgpu particle example");
    eprintln!(
        "$ wgpu_particles {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn required(var: &str) -> bool {
    std::env::var(var).as_deref() == Ok("1")
}

/// Whether the example finds a Vulkan device for wgpu (asked of the example itself, once per
/// process: tests run on parallel threads and would share the probe's directory).
fn vulkan_present() -> bool {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PRESENT.get_or_init(probe_vulkan)
}

fn probe_vulkan() -> bool {
    let dir = temp_dir("wgpu-probe");
    let o = run(&[
        "--headless",
        "--sim",
        "wgsl",
        "--frames",
        "1",
        "--particles",
        "16",
        "--size",
        "8x8",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_dir_all(dir);
    assert!(
        o.status.success() || !required("REQUIRE_VULKAN"),
        "no Vulkan device for wgpu"
    );
    o.status.success()
}

fn headless_frame(sim: &str, transfer: &str, draw: &str, launch: &str) -> Option<f64> {
    let dir = temp_dir(&format!("wgpu-{sim}-{transfer}-{draw}-{launch}"));
    let o = run(&[
        "--headless",
        "--launch",
        launch,
        "--sim",
        sim,
        "--transfer",
        transfer,
        "--draw",
        draw,
        "--frames",
        "6",
        "--particles",
        "20000",
        "--size",
        "320x240",
        "--seed",
        "7",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() && sim == "cuda" && err.contains("CUDA") && !required("REQUIRE_GPU") {
        eprintln!("SKIP {sim}/{transfer}: no CUDA GPU");
        return None;
    }
    assert!(o.status.success(), "{sim}/{transfer} failed: {err}");
    let share = check_frame(&dir.join("frame_00006.png"), 320, 240, 20_000, 7, 6);
    let _ = std::fs::remove_dir_all(dir);
    Some(share)
}

#[test]
fn headless_wgsl_frames_show_the_particles_where_the_simulation_puts_them() {
    let _shared = cuvk_dev::testing::shared();
    if !vulkan_present() {
        eprintln!("SKIP: no Vulkan device");
        return;
    }
    for draw in ["splat", "points"] {
        let share = headless_frame("wgsl", "zero-copy", draw, "auto").unwrap();
        assert!(share > 0.99, "{draw}: only {:.2}% lit", 100.0 * share);
    }
}

#[test]
fn headless_cuda_frames_inline_zero_copy_and_write_buffer_match_the_simulation() {
    let _shared = cuvk_dev::testing::shared();
    // Inline (the kernel in wgpu's command buffers) only where the driver has
    // VK_NVX_binary_import: `auto` falls back to the stream elsewhere.
    for (transfer, launch) in [
        ("zero-copy", "auto"),
        ("zero-copy", "cuda"),
        ("write-buffer", "auto"),
    ] {
        if let Some(share) = headless_frame("cuda", transfer, "splat", launch) {
            assert!(
                share > 0.99,
                "{transfer}/{launch}: only {:.2}% lit",
                100.0 * share
            );
        }
    }
}

#[test]
fn bad_input_gives_a_clear_message_and_exit_code_2() {
    let _shared = cuvk_dev::testing::shared();
    for (argv, expect) in [
        (
            vec!["--headless", "--transfer", "teleport"],
            "--transfer must be",
        ),
        (
            vec!["--headless", "--frames-in-flight", "9"],
            "--frames-in-flight must be",
        ),
        (
            vec!["--headless", "--particles", "0"],
            "--particles must be",
        ),
        (vec!["--headless", "--size", "big"], "--size must look like"),
        (vec!["--headless", "--draw", "crayon"], "--draw must be"),
        (vec!["--headless", "--launch", "later"], "--launch must be"),
    ] {
        let o = run(&argv);
        assert_eq!(o.status.code(), Some(2), "{argv:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(expect),
            "{argv:?}"
        );
    }
}

#[test]
fn window_under_xvfb_presents_frames_and_closes_cleanly() {
    let _shared = cuvk_dev::testing::shared();
    if !xvfb::tools_present() {
        return;
    }
    if !vulkan_present() {
        eprintln!("SKIP: no Vulkan device");
        return;
    }
    let display = format!(":{}", 80 + std::process::id() % 9);
    let mut demo = Command::new(binary());
    demo.args([
        "--sim",
        "wgsl",
        "--particles",
        "30000",
        "--size",
        "640x480",
        "--exit-after",
        "90",
    ]);
    let xvfb::WindowRun {
        status,
        seen,
        err,
        shot,
    } = xvfb::run_window(&display, "800x600x24", demo);
    assert!(status.success(), "exited with {status}: {err}");
    assert!(seen.iter().any(|l| l == "presented 30 frames"), "{seen:?}");
    assert!(
        seen.iter().any(|l| l == "closed after 90 frames"),
        "{seen:?}"
    );
    // The screenshot after 30 presented frames shows particles, not a blank window.
    let (w, h, rgb) = xvfb::parse_xwd(&shot.expect("no screenshot taken"));
    let lit = rgb.iter().filter(|p| p.iter().any(|&c| c > 40)).count();
    eprintln!("screenshot {w}x{h}: {lit} lit pixels");
    assert!(
        lit > 200,
        "the window shows no particles ({lit} lit pixels)"
    );
}
