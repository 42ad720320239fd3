//! Finding (and, under cargo, building) the demo binaries the tests run (the particle and
//! fluid test support, `particles.rs` and `fluid.rs`).

use std::path::PathBuf;
use std::process::Command;

/// The example binary `name` (a demo the tests run as a user would). `$<env>` names it
/// explicitly. Staged (the GPU machine: `.gpu/bin/<name>` beside `.gpu/bin/test-*`, no cargo
/// there): the binary beside this test binary. Under cargo: built here with
/// `cargo build --example <name>` for the profile and target dir this test binary was built
/// for, because `cargo test --test X` does not build examples and `cargo test --all-targets`
/// builds them only as test harnesses (`examples/<name>-<hash>`), and because a binary left by
/// an earlier build may be stale. Call it once per test process (keep the path).
pub fn binary(name: &str, env: &str) -> PathBuf {
    if let Some(bin) = std::env::var_os(env) {
        let bin = PathBuf::from(bin);
        assert!(bin.is_file(), "{env}={} is not a file", bin.display());
        return bin;
    }
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    let staged = dir.join(name);
    if staged.is_file() {
        return staged;
    }
    // cargo's layout: <target dir>[/<triple>]/<profile>/deps/<test binary>.
    let profile_dir = match dir.file_name() {
        Some(n) if n == "deps" => dir.parent().expect("profile dir"),
        _ => panic!(
            "the {name} demo is neither beside {} (staged) nor is this a cargo build \
             (no deps/ folder); set {env}",
            exe.display()
        ),
    };
    let target_dir = profile_dir
        .ancestors()
        .skip(1)
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .unwrap_or_else(|| panic!("no cargo target dir above {}", profile_dir.display()));
    let profile = profile_dir
        .file_name()
        .unwrap()
        .to_str()
        .expect("profile name");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(&cargo);
    build
        .args(["build", "--example", name, "--target-dir"])
        .arg(target_dir);
    // cargo sets CARGO_MANIFEST_DIR for the test processes it runs; else the current directory.
    if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
        build
            .arg("--manifest-path")
            .arg(PathBuf::from(dir).join("Cargo.toml"));
    }
    match profile {
        "debug" => {}
        "release" => {
            build.arg("--release");
        }
        other => {
            build.args(["--profile", other]);
        }
    }
    if let Some(triple) = profile_dir.parent().filter(|p| *p != target_dir) {
        build.arg("--target").arg(triple.file_name().unwrap());
    }
    // The same features as this test binary: a build with others would rebuild the library
    // in the shared target dir under the running `cargo test` (its doctests then link it).
    if cfg!(feature = "wgpu") {
        build.args(["--features", "wgpu"]);
    }
    if !cfg!(feature = "default") {
        build.arg("--no-default-features");
    }
    let built = profile_dir.join("examples").join(name);
    eprintln!("building the {name} demo: {build:?}");
    match build.status() {
        Ok(st) if st.success() => {}
        // No cargo (or it failed to start): a demo already built there still does.
        Err(e) if built.is_file() => {
            eprintln!("cannot run {cargo:?} ({e}); using {}", built.display())
        }
        other => panic!("cannot build the {name} demo with {build:?}: {other:?}"),
    }
    assert!(
        built.is_file(),
        "{build:?} succeeded but left no {}",
        built.display()
    );
    built
}
