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
