//! Running the particle demo binary and checking the PNG it writes against a CPU prediction
//! of where the particles are. Shared by the CI and GPU tests (`#[path]`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "../../examples/particles/sim.rs"]
pub mod sim;

/// The demo binary, once per test process. Staged (the GPU machine: `.gpu/bin/particles` beside
/// `.gpu/bin/test-*`, no cargo there): the binary beside this test binary. Under cargo: built
/// here with `cargo build --example particles` for the profile and target dir this test binary
/// was built for, because `cargo test --test X` does not build examples and
/// `cargo test --all-targets` builds them only as test harnesses (`examples/particles-<hash>`),
/// and because a `particles` left by an earlier build may be stale. `$CUVK_PARTICLES_BIN`
/// overrides both.
pub fn demo_binary() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(find_demo_binary).clone()
}

fn find_demo_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("CUVK_PARTICLES_BIN") {
        let bin = PathBuf::from(bin);
        assert!(
            bin.is_file(),
            "CUVK_PARTICLES_BIN={} is not a file",
            bin.display()
        );
        return bin;
    }
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    let staged = dir.join("particles");
    if staged.is_file() {
        return staged;
    }
    // cargo's layout: <target dir>[/<triple>]/<profile>/deps/<test binary>.
    let profile_dir = match dir.file_name() {
        Some(n) if n == "deps" => dir.parent().expect("profile dir"),
        _ => panic!(
            "the particles demo is neither beside {} (staged) nor is this a cargo build \
             (no deps/ folder); set CUVK_PARTICLES_BIN",
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
        .args(["build", "--example", "particles", "--target-dir"])
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
    if !cfg!(feature = "capi") {
        build.arg("--no-default-features");
    }
    let built = profile_dir.join("examples/particles");
    eprintln!("building the particles demo: {build:?}");
    match build.status() {
        Ok(st) if st.success() => {}
        // No cargo (or it failed to start): a demo already built there still does.
        Err(e) if built.is_file() => {
            eprintln!("cannot run {cargo:?} ({e}); using {}", built.display())
        }
        other => panic!("cannot build the particles demo with {build:?}: {other:?}"),
    }
    assert!(
        built.is_file(),
        "{build:?} succeeded but left no {}",
        built.display()
    );
    built
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

pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cuvk-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// RGBA pixels of a PNG and its size.
pub fn read_png(path: &Path) -> (u32, u32, Vec<u8>) {
    let dec = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(path).expect("open png"),
    ));
    let mut reader = dec.read_info().expect("png header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("png data");
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

/// A pixel is lit when it is brighter than the background the resolve shader paints.
pub fn lit(rgba: &[u8], w: u32, x: u32, y: u32) -> bool {
    let i = ((y * w + x) * 4) as usize;
    rgba[i] as u32 + rgba[i + 1] as u32 + rgba[i + 2] as u32 > 40
}

/// Checks a demo frame: right size, not blank, and lit where the CPU simulation of `frames`
/// steps from `seed` puts the particles (within one pixel, for rounding differences).
/// Returns the share of predicted particles found lit.
pub fn check_frame(path: &Path, w: u32, h: u32, particles: usize, seed: u64, frames: u64) -> f64 {
    let (pw, ph, rgba) = read_png(path);
    assert_eq!((pw, ph), (w, h), "{}: wrong size", path.display());
    let lit_count = (0..h)
        .flat_map(|y| (0..w).map(move |x| (x, y)))
        .filter(|&(x, y)| lit(&rgba, w, x, y))
        .count();
    assert!(
        lit_count > 100,
        "{}: blank image ({lit_count} lit pixels)",
        path.display()
    );
    let params = sim::Params::new(particles as u32);
    let (mut pos, mut vel) = sim::initial_state(particles, seed);
    for _ in 0..frames {
        sim::step_cpu(&params, &mut pos, &mut vel);
    }
    let vp = sim::Camera::default().view_proj(w as f32 / h as f32);
    let (mut predicted, mut found) = (0usize, 0usize);
    let mut mask = vec![false; (w * h) as usize];
    for p in &pos {
        if let Some((x, y)) = sim::project(&vp, *p, w, h) {
            predicted += 1;
            for yy in y.saturating_sub(1)..=(y + 1).min(h - 1) {
                for xx in x.saturating_sub(1)..=(x + 1).min(w - 1) {
                    mask[(yy * w + xx) as usize] = true;
                }
            }
            let near = (x.saturating_sub(1)..=(x + 1).min(w - 1)).any(|xx| {
                (y.saturating_sub(1)..=(y + 1).min(h - 1)).any(|yy| lit(&rgba, w, xx, yy))
            });
            found += usize::from(near);
        }
    }
    assert!(
        predicted > particles / 2,
        "most particles should be on screen ({predicted} of {particles})"
    );
    let share = found as f64 / predicted as f64;
    let stray = (0..h)
        .flat_map(|y| (0..w).map(move |x| (x, y)))
        .filter(|&(x, y)| lit(&rgba, w, x, y) && !mask[(y * w + x) as usize])
        .count();
    eprintln!(
        "{}: {lit_count} lit pixels ({stray} where no particle should be); {found} of {predicted} predicted particle pixels lit ({:.3}%)",
        path.display(),
        100.0 * share
    );
    assert!(
        stray * 100 <= lit_count,
        "{}: {stray} of {lit_count} lit pixels are where the simulation puts no particle",
        path.display()
    );
    share
}
