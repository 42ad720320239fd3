//! The C ABI: the checked-in header is what cbindgen generates from the code, it declares
//! exactly the functions the library exports, and the C example (an "engine" owning its
//! Vulkan device) builds with the system C compiler and runs every path — the Vulkan-only part
//! and all error paths everywhere (lavapipe in CI), the CUDA part where there is a GPU —
//! under the validation layer, ending alive with no validation message.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// This crate's folder (`capi/`), found at run time, not at the path the test was compiled
/// in: release test binaries are staged to another machine and run there, from the root of a
/// copy of the repository at another path. `$CUVK_REPO_DIR/capi` when that is set; else
/// `capi/` under the current directory (staged binaries run from the repository root); else
/// the current directory (cargo runs tests from the package root).
fn crate_dir() -> PathBuf {
    let cwd = std::env::current_dir().expect("current directory");
    let candidates = match std::env::var_os("CUVK_REPO_DIR") {
        Some(dir) if !dir.is_empty() => vec![PathBuf::from(dir).join("capi")],
        _ => vec![cwd.join("capi"), cwd.clone()],
    };
    candidates
        .iter()
        .find(|d| d.join("cbindgen.toml").is_file() && d.join("include").is_dir())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "the capi crate (cbindgen.toml, include/) is not at any of {candidates:?}: run \
                 the tests from the repository root or capi/, or set CUVK_REPO_DIR to the \
                 repository"
            )
        })
}

/// `rel` (relative to the capi crate) under [`crate_dir`]; panics with what it looked for
/// when it is not there, rather than letting a test pass or skip without the file.
fn file(rel: &str) -> PathBuf {
    let path = crate_dir().join(rel);
    assert!(path.exists(), "{} not found", path.display());
    path
}

fn generated_header() -> String {
    let config = cbindgen::Config::from_file(file("cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_src(file("src/lib.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen")
        .write(&mut out);
    String::from_utf8(out).expect("utf-8 header")
}

#[test]
fn checked_in_header_matches_the_code() {
    let generated = generated_header();
    let path = if std::env::var("CUVK_WRITE_HEADER").as_deref() == Ok("1") {
        let path = crate_dir().join("include/cuvk.h");
        std::fs::write(&path, &generated).unwrap();
        path
    } else {
        file("include/cuvk.h")
    };
    let checked_in = std::fs::read_to_string(&path).expect("read capi/include/cuvk.h");
    assert!(
        checked_in == generated,
        "capi/include/cuvk.h is stale: regenerate it with \
         CUVK_WRITE_HEADER=1 cargo test -p cuvk-capi --test capi"
    );
}

/// The cdylib next to this test binary (cargo: target/<profile>/; staged: the same folder).
/// Under cargo (which does not build a cdylib-only library for its integration tests) it is
/// built first, in this test's profile, so that a stale library is never what is checked.
fn cdylib() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    if let Some(cargo) = std::env::var_os("CARGO") {
        let release = dir.parent().is_some_and(|p| p.ends_with("release"));
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "cuvk-capi", "--lib"]);
        if release {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build -p cuvk-capi");
        assert!(status.success(), "cargo build -p cuvk-capi failed");
    }
    [dir.join("../libcuvk.so"), dir.join("libcuvk.so")]
        .into_iter()
        .find(|p| p.exists())
}

/// The cdylib, or `None` after printing why the test skips (a failure with REQUIRE_VULKAN=1).
fn cdylib_or_skip() -> Option<PathBuf> {
    let lib = cdylib();
    if lib.is_none() {
        assert_ne!(
            std::env::var("REQUIRE_VULKAN").as_deref(),
            Ok("1"),
            "libcuvk.so not built"
        );
        eprintln!("SKIP: libcuvk.so not next to the test binary");
    }
    lib
}

fn header_functions() -> BTreeSet<String> {
    let h = std::fs::read_to_string(file("include/cuvk.h")).expect("read capi/include/cuvk.h");
    h.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .zip(
            h.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .skip(1),
        )
        .filter(|(a, _)| a.starts_with("cuvk_"))
        .map(|(a, _)| a.to_string())
        .collect()
}

#[test]
fn header_declares_exactly_the_exported_symbols() {
    let Some(lib) = cdylib_or_skip() else {
        return;
    };
    let nm = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm (binutils)");
    let exported: BTreeSet<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|s| s.starts_with("cuvk_"))
        .map(String::from)
        .collect();
    let declared = header_functions();
    eprintln!("{} exported cuvk_ functions", exported.len());
    assert!(!exported.is_empty());
    assert_eq!(
        exported, declared,
        "exported symbols and header declarations differ"
    );
}

#[test]
fn c_example_builds_and_runs_every_path() {
    let Some(lib) = cdylib_or_skip() else {
        return;
    };
    if !Path::new("/usr/include/vulkan/vulkan.h").exists()
        || Command::new("cc").arg("--version").output().is_err()
    {
        assert_ne!(
            std::env::var("REQUIRE_VULKAN").as_deref(),
            Ok("1"),
            "cc and the Vulkan headers (libvulkan-dev) are required"
        );
        eprintln!("SKIP: no C compiler or Vulkan headers");
        return;
    }
    let libdir = lib.parent().unwrap().canonicalize().unwrap();
    let exe = std::env::temp_dir().join(format!("cuvk-capi-example-{}", std::process::id()));
    let build = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
        .arg("-I")
        .arg(file("include"))
        .arg(file("examples/example.c"))
        .arg("-L")
        .arg(&libdir)
        .args(["-lcuvk", "-lvulkan", "-ldl"])
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run cc");
    assert!(
        build.status.success(),
        "the C example does not build:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let run = Command::new(&exe)
        .env("XDG_RUNTIME_DIR", "/tmp")
        .output()
        .expect("run the C example");
    let stdout = String::from_utf8_lossy(&run.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&run.stderr));
    let _ = std::fs::remove_file(&exe);
    assert!(run.status.success(), "the C example failed");
    assert!(
        stdout.contains("capi example: OK"),
        "the C example did not finish"
    );
}
