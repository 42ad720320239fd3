//! The example headless, as the GPU machine runs it: `--check` compares its last frame with
//! the CPU reference and sets the exit status; PNGs are written.

use std::process::Command;

use crate::app::{serial, vulkan_present};
use crate::window::example_binary;

#[test]
fn example_headless_check_passes_and_writes_the_png() {
    if !vulkan_present() {
        return;
    }
    let _serial = serial();
    let out = std::env::temp_dir().join(format!("bevy_cuvk_cli_{}", std::process::id()));
    let run = Command::new(example_binary())
        .args([
            "--headless",
            "--frames",
            "8",
            "--check",
            "--particles",
            "16384",
        ])
        .args(["--size", "256x128", "--out"])
        .arg(&out)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    eprintln!("{stdout}{stderr}");
    assert!(run.status.success(), "exit status {}", run.status);
    assert!(
        stdout.lines().any(|l| l.starts_with("cuvk: CUDA")),
        "status printed"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("check (") && l.ends_with("PASS")),
        "the check ran and passed"
    );
    let png = out.join("frame_00008.png");
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let reader = decoder.read_info().unwrap();
    assert_eq!((reader.info().width, reader.info().height), (256, 128));
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("ERROR") || l.contains("Validation Error"))
        .collect();
    assert!(errors.is_empty(), "errors logged: {errors:?}");
    let _ = std::fs::remove_dir_all(out);
}

/// `--verify` (CUDA writes, Bevy's compute pass checks every element, each frame): where there
/// is no CUDA it says why and fails; with CUDA (`REQUIRE_GPU=1`) every frame must be exact.
/// The GPU machine runs the full set (1,000 frames, both paths, buffer and image, negative
/// controls, exits mid-run): bevy_cuvk/gpu-test.sh.
#[test]
fn verify_is_exact_with_cuda_and_says_why_not_without() {
    if !vulkan_present() {
        return;
    }
    let _serial = serial();
    let require_gpu = std::env::var("REQUIRE_GPU").as_deref() == Ok("1");
    for extra in [
        &["--launch", "inline"][..],
        &["--launch", "stream", "--image"],
    ] {
        let run = Command::new(example_binary())
            .args(["--verify", "--frames", "30", "--elements", "65536"])
            .args(["--rounds", "4"])
            .args(extra)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&run.stdout);
        eprintln!("{stdout}{}", String::from_utf8_lossy(&run.stderr));
        let line = stdout
            .lines()
            .find(|l| l.starts_with("verify ("))
            .expect("the verify line");
        if require_gpu || !line.contains("ERROR CUDA unavailable") {
            assert!(line.ends_with(": PASS"), "{extra:?}: {line}");
            assert!(run.status.success(), "{extra:?}: {}", run.status);
        } else {
            assert!(!run.status.success(), "no CUDA must fail the run");
            eprintln!("SKIP (no CUDA): {line}");
        }
    }
}
