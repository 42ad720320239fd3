//! The fluid demo on a real GPU: the CUDA simulation (kernels writing shared images through
//! surfaces) against the Vulkan fallback and the CPU reference from the same seed, the same
//! kernels inside the Vulkan queue (image handles) against both bit for bit, and the frames
//! they draw. Skips without a GPU.
//!
//! Why these tolerances: the three implementations run the same passes with the same
//! operations in the same order in f32, with no fused multiply-add (CUDA `__fadd_rn` /
//! `__fmul_rn`, GLSL `precise`), no division, and dye rounded to half floats by integer
//! operations before the store (so the store's own rounding, which Vulkan leaves to the
//! implementation, never matters). So every add, subtract and multiply rounds alike, and what
//! may differ is the vorticity force's reciprocal square root: CUDA's `rsqrtf` and Vulkan's
//! `inversesqrt` are approximations of a few ULP (on the H200 they gave the same bits), the
//! CPU's `1 / sqrt` is correctly rounded. Such a last-bit difference does not stay small: the
//! flow is chaotic (vortices stretch and fold neighbouring values apart), so per-texel
//! comparison is meaningful over a few steps only. Measured on the H200: CUDA and Vulkan gave
//! the same bits after 12 and after 300 steps; CUDA against the CPU, 12 steps at 128², differed
//! by 7.4e-5 (velocity) and 1.1e-4 (dye) of the largest value — the tolerances below leave 7×
//! and 9× that — and after 300 steps at 256² by 72% per texel: decorrelated. Over many steps
//! the test compares what chaos leaves nearly alone: the kinetic energy, set by the forcing
//! (CUDA vs CPU: 0.13% apart), and the dye totals, set by the jets and the dissipation up to
//! what the walls and the (not exactly conservative) advection lose (CUDA vs CPU: 5.3%).

use crate::fluid;

use std::path::{Path, PathBuf};

use fluid::{cpu_reference, difference, frame_stats, read_dump, read_png, run_demo, temp_dir};

fn gpu() -> bool {
    match cuvk::cuda::devices() {
        Ok(d) if !d.is_empty() => true,
        other => {
            assert_ne!(
                std::env::var("REQUIRE_GPU").as_deref(),
                Ok("1"),
                "no CUDA GPU: {other:?}"
            );
            eprintln!("SKIP: no CUDA GPU");
            false
        }
    }
}

/// How a run simulates: the arguments that pick the path.
const CUDA: &[&str] = &["--sim", "cuda", "--launch", "cuda"];
const INLINE: &[&str] = &["--sim", "cuda", "--launch", "inline"];
const VULKAN: &[&str] = &["--sim", "vulkan"];

/// Runs `frames` frames of a `grid`² fluid from seed 3 on the path `mode` picks; returns the
/// dump.
fn run(dir: &Path, mode: &[&str], grid: u32, frames: u64, window: &str) -> PathBuf {
    let (dump, out) = try_run(dir, mode, grid, frames, window);
    assert!(out.status.success(), "demo failed: {mode:?}");
    dump
}

/// As [`run`], returning the demo's output whether it succeeded or not.
fn try_run(
    dir: &Path,
    mode: &[&str],
    grid: u32,
    frames: u64,
    window: &str,
) -> (PathBuf, std::process::Output) {
    let dump = dir.join("fields.bin");
    let (grid_s, frames_s) = (grid.to_string(), frames.to_string());
    let mut argv = mode.to_vec();
    argv.extend([
        "--headless",
        "--size",
        &grid_s,
        "--window",
        window,
        "--frames",
        &frames_s,
        "--seed",
        "3",
        "--out",
        dir.to_str().unwrap(),
        "--dump",
        dump.to_str().unwrap(),
    ]);
    let out = run_demo(&argv);
    (dump, out)
}

#[test]
fn cuda_vulkan_and_cpu_simulations_agree() {
    if !gpu() {
        return;
    }
    let (grid, frames) = (128, 12);
    let (dc, dv) = (temp_dir("gpu-short-cuda"), temp_dir("gpu-short-vulkan"));
    let cuda = read_dump(&run(&dc, CUDA, grid, frames, "128x128"), grid);
    let vulkan = read_dump(&run(&dv, VULKAN, grid, frames, "128x128"), grid);
    let cpu = cpu_reference(grid, 3, frames, fluid::sim::DEFAULT_ITERATIONS);
    for (name, other) in [("Vulkan", &vulkan), ("CPU", &cpu)] {
        let d = difference(&cuda, other);
        eprintln!(
            "CUDA vs {name} after {frames} steps ({grid}²): velocity max |diff| {:e} of {:e} ({:e} relative), dye {:e} of {:e} ({:e}); {} of {} components differ",
            d.velocity_max, d.velocity_scale, d.velocity_rel(), d.dye_max, d.dye_scale,
            d.dye_rel(), d.differing, d.components
        );
        assert!(
            d.velocity_scale > 0.1 && d.dye_scale > 0.1,
            "nothing moved: {d:?}"
        );
        assert!(
            d.velocity_rel() < 5e-4,
            "CUDA vs {name}: velocity differs: {d:?}"
        );
        assert!(d.dye_rel() < 1e-3, "CUDA vs {name}: dye differs: {d:?}");
    }
    // The frames drawn from the two simulations' dye: the same drawing, near-identical dye.
    let (pc, pv) = (
        read_png(&dc.join(format!("frame_{frames:05}.png"))).2,
        read_png(&dv.join(format!("frame_{frames:05}.png"))).2,
    );
    let off = pc
        .iter()
        .zip(&pv)
        .filter(|(a, b)| (**a as i32 - **b as i32).abs() > 2)
        .count();
    eprintln!(
        "frame {frames}: {off} of {} channel values differ by more than 2",
        pc.len()
    );
    assert!(
        off * 1000 <= pc.len(),
        "the two simulations' frames differ: {off}"
    );
    for d in [dc, dv] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn cuda_vulkan_and_cpu_agree_on_what_chaos_leaves_alone() {
    if !gpu() {
        return;
    }
    let (grid, frames) = (256, 300);
    let (dc, dv) = (temp_dir("gpu-long-cuda"), temp_dir("gpu-long-vulkan"));
    let cuda = read_dump(&run(&dc, CUDA, grid, frames, "256x256"), grid);
    let vulkan = read_dump(&run(&dv, VULKAN, grid, frames, "256x256"), grid);
    let cpu = cpu_reference(grid, 3, frames, fluid::sim::DEFAULT_ITERATIONS);
    let (tc, ec) = (cuda.dye_total(), cuda.energy());
    eprintln!("CUDA after {frames} steps ({grid}²): dye totals {tc:?}, kinetic energy {ec}");
    assert!(ec > 1.0, "no motion");
    for (name, other) in [("Vulkan", &vulkan), ("CPU", &cpu)] {
        let d = difference(&cuda, other);
        let (t, e) = (other.dye_total(), other.energy());
        eprintln!(
            "{name}: dye totals {t:?}, kinetic energy {e}; per texel vs CUDA: velocity max |diff| {:e} ({:e} relative), dye {:e} ({:e}); {} of {} components differ",
            d.velocity_max, d.velocity_rel(), d.dye_max, d.dye_rel(), d.differing, d.components
        );
        // Vulkan rounds as CUDA does (the same bits on the H200): its flow has not
        // decorrelated, so both statistics agree closely. The CPU's has.
        let (dye_tol, energy_tol) = if name == "Vulkan" {
            (0.01, 0.01)
        } else {
            (0.15, 0.05)
        };
        for c in 0..4 {
            let rel = (tc[c] - t[c]).abs() / tc[c];
            assert!(tc[c] > 1.0, "channel {c}: no dye");
            assert!(
                rel < dye_tol,
                "CUDA vs {name}: dye total of channel {c} differs by {rel}"
            );
        }
        let rel = (ec - e).abs() / ec;
        assert!(
            rel < energy_tol,
            "CUDA vs {name}: kinetic energy differs by {rel}"
        );
    }
    for d in [dc, dv] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn cuda_frames_show_colourful_dye_where_the_jets_put_it() {
    if !gpu() {
        return;
    }
    let dir = temp_dir("gpu-png");
    run(&dir, CUDA, 512, 240, "512x512");
    let s = frame_stats(&dir.join("frame_00240.png"), 512, 512, 512, 3, 240);
    let pixels = 512 * 512;
    assert!(s.dyed > pixels / 20, "too little dye: {s:?}");
    assert!(s.colourful > s.dyed / 4, "the dye is not colourful: {s:?}");
    assert!(s.dyed < pixels * 95 / 100, "no background left: {s:?}");
    assert!(s.jets_found >= s.jets - 1, "jets without fresh dye: {s:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The inline path's launch line, or `None` (printed) where this GPU's Vulkan driver cannot run
/// kernels with image handles (a failure under REQUIRE_GPU=1: every CUDA GPU's Vulkan driver is
/// NVIDIA's, which has them since driver 580).
fn inline_available(out: &std::process::Output) -> bool {
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout
                .lines()
                .any(|l| l == "launch: inline (VK_NVX_binary_import + VK_NVX_image_view_handle)"),
            "--launch inline ran without saying so: {stdout}"
        );
        return true;
    }
    assert_eq!(out.status.code(), Some(2), "--launch inline failed: {err}");
    assert_ne!(
        std::env::var("REQUIRE_GPU").as_deref(),
        Ok("1"),
        "REQUIRE_GPU=1 and no inline path: {err}"
    );
    eprintln!("SKIP: no kernels with image handles inside the Vulkan queue here: {err}");
    false
}

#[test]
fn inline_cuda_and_vulkan_simulations_are_bit_identical() {
    if !gpu() {
        return;
    }
    // Long enough for chaos to amplify any last-bit difference into a visible one (the CPU's
    // correctly rounded 1 / sqrt decorrelates from the GPUs' by 300 steps): equal dumps mean
    // every pass rounded alike on every texel of every step.
    let (grid, frames) = (256, 300);
    let (di, dc, dv) = (
        temp_dir("gpu-bits-inline"),
        temp_dir("gpu-bits-cuda"),
        temp_dir("gpu-bits-vulkan"),
    );
    let (inline_dump, out) = try_run(&di, INLINE, grid, frames, "256x256");
    if !inline_available(&out) {
        let _ = std::fs::remove_dir_all(di);
        return;
    }
    let cuda_dump = run(&dc, CUDA, grid, frames, "256x256");
    let vulkan_dump = run(&dv, VULKAN, grid, frames, "256x256");
    let bytes = |p: &Path| std::fs::read(p).expect("read dump");
    let inline = bytes(&inline_dump);
    let inline_fields = read_dump(&inline_dump, grid);
    assert!(inline_fields.energy() > 1.0, "no motion");
    for (name, dump) in [
        ("CUDA context", &cuda_dump),
        ("Vulkan compute", &vulkan_dump),
    ] {
        let d = difference(&inline_fields, &read_dump(dump, grid));
        eprintln!(
            "inline vs {name} after {frames} steps ({grid}²): velocity max |diff| {:e}, dye {:e}; {} of {} components differ",
            d.velocity_max, d.dye_max, d.differing, d.components
        );
        assert!(
            inline == bytes(dump),
            "inline vs {name}: the fields are not bit-identical: {d:?}"
        );
    }
    // The same dye drawn by the same pass: the same picture.
    let png = |d: &Path| read_png(&d.join(format!("frame_{frames:05}.png"))).2;
    assert!(
        png(&di) == png(&dc),
        "inline and CUDA-context frames differ"
    );
    let s = frame_stats(
        &di.join(format!("frame_{frames:05}.png")),
        256,
        256,
        grid,
        3,
        frames,
    );
    assert!(s.dyed > 256 * 256 / 20, "too little dye: {s:?}");
    for d in [di, dc, dv] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn launch_auto_picks_the_inline_path_where_the_gpu_has_it() {
    if !gpu() {
        return;
    }
    let dir = temp_dir("gpu-auto");
    let (_, inline) = try_run(&dir, INLINE, 64, 2, "64x64");
    let has_inline = inline_available(&inline);
    let (_, out) = try_run(&dir, &["--launch", "auto"], 64, 2, "64x64");
    assert!(out.status.success(), "--launch auto failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("launch: "))
        .expect("a launch line");
    eprintln!("{line}");
    if has_inline {
        assert_eq!(
            line,
            "launch: inline (VK_NVX_binary_import + VK_NVX_image_view_handle)"
        );
    } else {
        assert!(
            line.starts_with("launch: cuda (") && line.contains("not inline: "),
            "{line}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
