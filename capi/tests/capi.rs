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

/// The `(name, code)` of the `CUVK_RULE_*` constants in the checked-in header: its
/// `CUVK_RULE_X = 123,` lines.
fn header_rules() -> Vec<(String, u32)> {
    let h = std::fs::read_to_string(file("include/cuvk.h")).expect("read capi/include/cuvk.h");
    h.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("CUVK_RULE_"))
        .map(|l| {
            let (name, value) = l
                .trim_end_matches(',')
                .split_once(" = ")
                .unwrap_or_else(|| panic!("not a `CUVK_RULE_X = N,` line: {l}"));
            let code = value.parse().unwrap_or_else(|_| panic!("bad code: {l}"));
            (name.to_string(), code)
        })
        .collect()
}

/// The `(name, code)` of the constants of the Rust enum `CuvkRule` (src/error.rs), named as
/// cbindgen names them in C (`CuvkRuleImageCubeNot2d` is `CUVK_RULE_IMAGE_CUBE_NOT2D`).
fn rust_enum_rules() -> Vec<(String, u32)> {
    let src = std::fs::read_to_string(file("src/error.rs")).expect("read capi/src/error.rs");
    src.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("CuvkRule") && l.contains(" = "))
        .map(|l| {
            let (name, value) = l.trim_end_matches(',').split_once(" = ").unwrap();
            let code = match value.strip_prefix("0x") {
                Some(hex) => u32::from_str_radix(hex, 16),
                None => value.parse(),
            }
            .unwrap_or_else(|_| panic!("bad code: {l}"));
            (words(name).join("_"), code)
        })
        .collect()
}

/// The words of a CamelCase name: a new word at each upper-case letter after a lower-case one
/// (`NotUtf8` is `Not`, `Utf8`; `CubeNot2D` is `Cube`, `Not2D`).
fn words(camel: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut prev_lower = false;
    for c in camel.chars() {
        if out.is_empty() || (c.is_ascii_uppercase() && prev_lower) {
            out.push(String::new());
        }
        out.last_mut().unwrap().push(c.to_ascii_uppercase());
        prev_lower = c.is_ascii_lowercase();
    }
    out
}

/// The word of each rule group (`code >> 8`, from 1), as the header's `CuvkRule` lists them.
const GROUPS: [&str; 14] = [
    "Layout",
    "Image",
    "Texture",
    "Ptx",
    "Memory",
    "Sync",
    "Launch",
    "Unsupported",
    "Device",
    "OsHandle",
    "Wgpu",
    "Ipc",
    "Peer",
    "Argument",
];

/// The C name of `rule`, derived from cuvk alone: `CUVK_RULE_`, its group's word, `_`, the
/// last part of `Rule::name` in SCREAMING_SNAKE_CASE, where words the group's word ends with
/// and the name starts with are written once (`DeviceMismatch` in group Device is
/// `CUVK_RULE_DEVICE_MISMATCH`, `HandleNotOpen` in OsHandle `CUVK_RULE_OS_HANDLE_NOT_OPEN`).
fn c_name(rule: cuvk::Rule) -> String {
    let group = GROUPS
        .get(((rule.code() >> 8) as usize).wrapping_sub(1))
        .unwrap_or_else(|| {
            panic!("{rule:?}: a new group needs its word in GROUPS (and CuvkRule's doc)")
        });
    let g = words(group);
    let v = words(rule.name().rsplit('.').next().unwrap());
    let overlap = (1..v.len().min(g.len() + 1))
        .rev()
        .find(|&k| g[g.len() - k..] == v[..k])
        .unwrap_or(0);
    format!("CUVK_RULE_{}_{}", g.join("_"), v[overlap..].join("_"))
}

#[test]
fn c_rule_names_follow_from_cuvks_rule_names() {
    let cases = [
        ("Peer.NoPeerAccess", "CUVK_RULE_PEER_NO_PEER_ACCESS"),
        (
            "Image.UnsupportedImageType",
            "CUVK_RULE_IMAGE_UNSUPPORTED_IMAGE_TYPE",
        ),
        ("Memory.MemoryShared", "CUVK_RULE_MEMORY_SHARED"),
        (
            "Memory.MemoryTypeNotAllowed",
            "CUVK_RULE_MEMORY_TYPE_NOT_ALLOWED",
        ),
        (
            "Image.Texture.LinearFilterNeedsFloatReads",
            "CUVK_RULE_TEXTURE_LINEAR_FILTER_NEEDS_FLOAT_READS",
        ),
        ("Image.CubeNot2D", "CUVK_RULE_IMAGE_CUBE_NOT2D"),
        ("WrongDevice", "CUVK_RULE_DEVICE_WRONG_DEVICE"),
        ("DeviceMismatch", "CUVK_RULE_DEVICE_MISMATCH"),
        ("HandleNotOpen", "CUVK_RULE_OS_HANDLE_NOT_OPEN"),
        ("NotUtf8", "CUVK_RULE_ARGUMENT_NOT_UTF8"),
    ];
    for (name, c) in cases {
        let rule = cuvk::Rule::ALL
            .iter()
            .copied()
            .find(|r| r.name() == name)
            .unwrap_or_else(|| panic!("no cuvk rule {name}"));
        assert_eq!(c_name(rule), c, "{name}");
    }
}

/// By construction: the C enum — the checked-in header, and the Rust `CuvkRule` it is
/// generated from — has exactly cuvk's rules (`cuvk::Rule::ALL`), each under the name derived
/// from cuvk's rule name with cuvk's code, beside `NONE` (0) and `OTHER` (1). A rule cuvk
/// adds without its constant, a constant without a rule, a code or a name that differs, each
/// fails here. (`c_rules!` in src/rule.rs does not compile without every constant listed, so
/// the mapping from cuvk's codes to the enum covers it all.)
#[test]
fn every_cuvk_rule_is_a_c_constant_of_the_same_code_and_derived_name() {
    let expected: Vec<(String, u32)> = cuvk::Rule::ALL
        .iter()
        .map(|&r| (c_name(r), r.code()))
        .collect();
    for (source, found) in [
        ("capi/include/cuvk.h", header_rules()),
        (
            "the Rust enum CuvkRule (capi/src/error.rs)",
            rust_enum_rules(),
        ),
    ] {
        let mut sentinels = vec![];
        let mut rules = vec![];
        for (name, code) in found {
            match name.as_str() {
                "CUVK_RULE_NONE" | "CUVK_RULE_OTHER" => sentinels.push((name, code)),
                _ => rules.push((name, code)),
            }
        }
        assert_eq!(
            sentinels,
            [
                ("CUVK_RULE_NONE".to_string(), 0),
                ("CUVK_RULE_OTHER".to_string(), 1)
            ],
            "{source}"
        );
        for (name, code) in &expected {
            assert!(
                rules.contains(&(name.clone(), *code)),
                "{source} lacks {name} = {code:#06x} (cuvk::Rule {:?}); it has {:?}",
                cuvk::Rule::from_code(*code).unwrap(),
                rules
                    .iter()
                    .filter(|(n, c)| n == name || c == code)
                    .collect::<Vec<_>>()
            );
        }
        for (name, code) in &rules {
            assert!(
                expected.contains(&(name.clone(), *code)),
                "{source} has {name} = {code:#06x}, which is no cuvk rule by that name and code"
            );
        }
        assert_eq!(rules.len(), expected.len(), "{source}: a constant twice");
    }
}

/// An argument the C boundary refuses is a `cuvk::Error`, which carries its rule: no code
/// there fails with `CUVK_ERROR_INVALID_ARGUMENT` by hand (which would be a refusal without
/// a rule).
#[test]
fn the_c_boundary_refuses_arguments_only_with_rules() {
    for entry in std::fs::read_dir(file("src")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|n| n == "error.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("CuvkErrorInvalidArgument"),
            "{} fails with CuvkErrorInvalidArgument by hand: refuse with a cuvk::Error (a rule)",
            path.display()
        );
    }
}
