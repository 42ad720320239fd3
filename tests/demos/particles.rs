//! Running the particle demo binary; what it wrote is judged by
//! [`cuvk_dev::testing::particles`] (shared with the wgpu particle test), re-exported here.
//! Shared by the CI and GPU tests (`particles_cli`, `gpu_particles`).

use std::path::PathBuf;
use std::process::{Command, Output};

pub use cuvk_dev::testing::particles::*;

use crate::demo;

/// The particle demo binary, once per test process (see [`demo::binary`]);
/// `$CUVK_PARTICLES_BIN` overrides it.
pub fn demo_binary() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| demo::binary("particles", "CUVK_PARTICLES_BIN"))
        .clone()
}

pub fn run_demo(args: &[&str]) -> Output {
    let out = Command::new(demo_binary())
        .args(args)
        .env("CUVK_VALIDATION", "1")
        .env(
            "XDG_RUNTIME_DIR",
            std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| "/tmp".into()),
        )
        .output()
        .expect("run the particles demo");
    eprintln!(
        "$ particles {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
