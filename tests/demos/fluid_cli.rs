//! The fluid demo as a user runs it, on any Vulkan device (lavapipe in CI), under the
//! validation layer: the Vulkan fallback's fields checked against the CPU reference step,
//! headless PNGs that show colourful dye where the scripted jets put it (the same image for
//! the same seed), `--launch` choosing a path it can run (or refusing clearly), clear errors
//! for bad input, and (under Xvfb) a window that presents frames and closes.

use crate::fluid;
use cuvk_dev::testing::xvfb;

use std::process::Command;

use fluid::{cpu_reference, difference, frame_stats, read_dump, read_png, run_demo, temp_dir};

/// Whether the demo finds a Vulkan device, asked once of the demo itself (a child process), so
/// this test process never loads a Vulkan driver next to the demo runs.
fn vulkan_present() -> bool {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PRESENT.get_or_init(|| {
        let dir = temp_dir("probe");
        let o = Command::new(fluid::demo_binary())
            .args([
                "--headless",
                "--sim",
                "vulkan",
                "--frames",
                "1",
                "--size",
                "16",
            ])
            .args(["--window", "8x8", "--out", dir.to_str().unwrap()])
            .env("XDG_RUNTIME_DIR", "/tmp")
            .output()
            .expect("run the demo");
        let _ = std::fs::remove_dir_all(dir);
        let ok = o.status.success();
        assert!(
            ok || std::env::var("REQUIRE_VULKAN").as_deref() != Ok("1"),
            "no Vulkan device: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        ok
    })
}

#[test]
fn vulkan_fallback_computes_what_the_cpu_reference_computes() {
    if !vulkan_present() {
        eprintln!("SKIP: no Vulkan device");
        return;
    }
    let dir = temp_dir("reference");
    let dump = dir.join("fields.bin");
    let (grid, frames, seed) = (64, 10, 5);
    let out = run_demo(&[
        "--headless",
        "--sim",
        "vulkan",
        "--size",
        "64",
        "--window",
        "64x64",
        "--frames",
        "10",
        "--seed",
        "5",
        "--out",
        dir.to_str().unwrap(),
        "--dump",
        dump.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "demo failed");
    let gpu = read_dump(&dump, grid);
    let cpu = cpu_reference(grid, seed, frames, fluid::sim::DEFAULT_ITERATIONS);
    let d = difference(&cpu, &gpu);
    eprintln!(
        "Vulkan vs CPU after {frames} steps: velocity max |diff| {:e} of {:e} ({:e} relative), dye {:e} of {:e} ({:e}); {} of {} components differ",
        d.velocity_max, d.velocity_scale, d.velocity_rel(), d.dye_max, d.dye_scale, d.dye_rel(),
        d.differing, d.components
    );
    assert!(d.velocity_scale > 0.1, "the jets did not move the fluid");
    assert!(d.dye_scale > 0.1, "the jets left no dye");
    // Every operation is an add, subtract or multiply, correctly rounded on both sides and
    // never fused (NoContraction, checked by tests/vulkan/shaders.rs); the dye is rounded to half
    // floats by integer operations before its store (whose own rounding Vulkan leaves open;
    // lavapipe truncates). The one approximation is the vorticity force's inversesqrt (a few
    // ULP; the CPU's 1 / sqrt is exact): lavapipe matched the CPU bit for bit. A reciprocal
    // square root that differs in its last bits moved velocity by 7.4e-5 and dye by 1.1e-4 of
    // their largest values over 12 steps (CUDA vs CPU on the H200, tests/demos/gpu_fluid.rs): the
    // tolerances leave 7× and 9× that.
    assert!(d.velocity_rel() < 5e-4, "velocity differs: {d:?}");
    assert!(d.dye_rel() < 1e-3, "dye differs: {d:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn headless_frames_show_colourful_dye_where_the_jets_put_it() {
    if !vulkan_present() {
        eprintln!("SKIP: no Vulkan device");
        return;
    }
    let (a, b, c) = (temp_dir("png-a"), temp_dir("png-b"), temp_dir("png-c"));
    for (dir, seed) in [(&a, "7"), (&b, "7"), (&c, "8")] {
        let out = run_demo(&[
            "--headless",
            "--sim",
            "vulkan",
            "--size",
            "96",
            "--window",
            "192x192",
            "--frames",
            "40",
            "--save-every",
            "20",
            "--seed",
            seed,
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "demo failed");
    }
    let s = frame_stats(&a.join("frame_00040.png"), 192, 192, 96, 7, 40);
    let pixels = 192 * 192;
    assert!(s.dyed > pixels / 50, "too little dye: {s:?}");
    assert!(s.colourful > s.dyed / 4, "the dye is not colourful: {s:?}");
    assert!(s.dyed < pixels * 9 / 10, "no background left: {s:?}");
    assert!(
        s.jets_found >= s.jets - 1,
        "the jets' nozzles should show fresh dye (one may be between bursts): {s:?}"
    );
    let early = frame_stats(&a.join("frame_00020.png"), 192, 192, 96, 7, 20);
    assert!(
        early.dyed < s.dyed,
        "the dye should spread: {early:?} then {s:?}"
    );
    let read = |d: &std::path::Path| read_png(&d.join("frame_00040.png")).2;
    assert!(read(&a) == read(&b), "same seed, different image");
    assert!(read(&a) != read(&c), "different seed, same image");
    for d in [a, b, c] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// The `launch: ...` line a run printed.
fn launch_line(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("launch: "))
        .unwrap_or_else(|| {
            panic!(
                "no 'launch:' line in {:?}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
        .to_string()
}

#[test]
fn launch_auto_runs_what_the_device_can_and_inline_refuses_where_it_cannot() {
    if !vulkan_present() {
        eprintln!("SKIP: no Vulkan device");
        return;
    }
    let (grid, frames, seed) = (48, 6, 4);
    let run = |name: &str, extra: &[&str]| {
        let dir = temp_dir(name);
        let dump = dir.join("fields.bin");
        let mut argv = vec![
            "--headless",
            "--size",
            "48",
            "--window",
            "48x48",
            "--frames",
            "6",
        ];
        argv.extend(["--seed", "4", "--out", dir.to_str().unwrap()]);
        argv.extend(["--dump", dump.to_str().unwrap()]);
        argv.extend(extra);
        let out = run_demo(&argv);
        (dir, dump, out)
    };
    // auto: whatever this device can run, said on one line, and the CPU reference's fields.
    let (auto_dir, auto_dump, out) = run("launch-auto", &["--launch", "auto"]);
    assert!(out.status.success(), "--launch auto failed");
    let line = launch_line(&out);
    eprintln!("{line}");
    let cuda = fluid::gpu_present();
    if cuda {
        assert!(
            line.starts_with("launch: inline (") || line.starts_with("launch: cuda ("),
            "{line}"
        );
    } else {
        // lavapipe (CI): no CUDA, so the Vulkan compute shaders, and the reason.
        assert_eq!(
            line, "launch: none, the Vulkan compute shaders simulate (no CUDA GPU)",
            "without CUDA, auto falls back to the compute shaders"
        );
        let (vk_dir, vk_dump, out) = run("launch-auto-vulkan", &["--sim", "vulkan"]);
        assert!(out.status.success());
        assert_eq!(
            std::fs::read(&auto_dump).unwrap(),
            std::fs::read(&vk_dump).unwrap(),
            "the fallback is the compute-shader simulation"
        );
        let _ = std::fs::remove_dir_all(vk_dir);
    }
    let d = difference(
        &cpu_reference(grid, seed, frames, fluid::sim::DEFAULT_ITERATIONS),
        &read_dump(&auto_dump, grid),
    );
    assert!(
        d.velocity_rel() < 5e-4 && d.dye_rel() < 1e-3,
        "auto vs CPU: {d:?}"
    );
    let _ = std::fs::remove_dir_all(auto_dir);
    // inline: runs where the device has the NVX extensions and a CUDA device compiles the
    // kernels; elsewhere bad input, exit 2, saying what is missing, and nothing written.
    let (dir, dump, out) = run("launch-inline", &["--launch", "inline"]);
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        assert_eq!(
            launch_line(&out),
            "launch: inline (VK_NVX_binary_import + VK_NVX_image_view_handle)"
        );
    } else {
        assert_eq!(out.status.code(), Some(2), "--launch inline: {err}");
        assert!(
            err.contains("--launch inline: fluid.cu runs inside the Vulkan queue only with")
                && err.contains("VK_NVX_image_view_handle"),
            "{err}"
        );
        if !cuda {
            assert!(err.contains("no CUDA GPU"), "{err}");
        }
        assert!(!dump.exists(), "a refused run wrote its dump");
    }
    let _ = std::fs::remove_dir_all(dir);
    // cuda: the CUDA-context path, or (no CUDA) bad input as well.
    let (dir, _, out) = run("launch-cuda", &["--launch", "cuda"]);
    if cuda {
        assert!(out.status.success(), "--launch cuda failed");
        assert!(launch_line(&out).starts_with("launch: cuda ("));
    } else {
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--launch cuda: ") && err.contains("no CUDA GPU"),
            "{err}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_input_gives_a_clear_message_and_a_failing_exit() {
    if !vulkan_present() {
        eprintln!("SKIP: no Vulkan device");
        return;
    }
    let out_dir = temp_dir("bad");
    let out = out_dir.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--headless", "--size", "8", "--out", out],
            "--size (the grid's side) must be 16 to 8192, not 8",
        ),
        (
            vec!["--headless", "--size", "lots", "--out", out],
            "not a whole number",
        ),
        (
            vec!["--headless", "--iterations", "7", "--out", out],
            "--iterations must be even",
        ),
        (
            vec!["--headless", "--window", "0x10", "--out", out],
            "--window must be between 1x1 and 8192x8192",
        ),
        (
            vec!["--headless", "--window", "wide", "--out", out],
            "--window must look like 800x600",
        ),
        (
            vec!["--headless", "--frames", "0", "--out", out],
            "--frames must be at least 1",
        ),
        (
            vec!["--headless", "--sim", "fortran", "--out", out],
            "--sim must be cuda or vulkan",
        ),
        (
            vec!["--headless", "--frames-in-flight", "9", "--out", out],
            "--frames-in-flight must be 2, 3 or 4",
        ),
        (
            vec!["--headless", "--launch", "vulkan", "--out", out],
            "--launch must be auto, inline or cuda, not 'vulkan'",
        ),
        (
            vec![
                "--headless",
                "--sim",
                "vulkan",
                "--launch",
                "inline",
                "--out",
                out,
            ],
            "--launch inline says where fluid.cu's kernels run, and --sim vulkan runs none",
        ),
        (vec!["--colour", "blue"], "unknown argument '--colour'"),
    ];
    for (argv, expect) in cases {
        let o = run_demo(&argv);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{argv:?}");
        assert!(
            err.contains(expect),
            "{argv:?}: stderr lacks '{expect}': {err}"
        );
    }
    // The largest grid: lavapipe's memory is the limit it hits (its images would allow
    // 16384); a GPU with that much memory simply runs it (one frame, in a folder of its own).
    let big = temp_dir("big");
    let o = run_demo(&[
        "--headless",
        "--sim",
        "vulkan",
        "--size",
        "8192",
        "--frames",
        "1",
        "--out",
        big.to_str().unwrap(),
    ]);
    if o.status.success() {
        eprintln!("(this device holds an 8192² grid)");
    } else {
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("8192×8192 grid needs"), "{err}");
    }
    let _ = std::fs::remove_dir_all(big);
    // An --out that cannot be a directory (a file is in the way).
    let file = out_dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let bad_out = file.join("frames");
    let o = run_demo(&[
        "--headless",
        "--sim",
        "vulkan",
        "--size",
        "32",
        "--out",
        bad_out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not writable"));
    // A missing shader file: a clear message, a failing exit, and no PNG left behind.
    let empty = temp_dir("no-shaders");
    let o = run_demo(&[
        "--headless",
        "--sim",
        "vulkan",
        "--size",
        "32",
        "--shaders",
        empty.to_str().unwrap(),
        "--out",
        out,
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cannot read shader") && err.contains(".spv"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(&out_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| n != "a-file")
        .collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
    let _ = std::fs::remove_dir_all(out_dir);
    let _ = std::fs::remove_dir_all(empty);
}

#[test]
fn window_under_xvfb_presents_the_fluid_and_closes_cleanly() {
    if !xvfb::tools_present() {
        return;
    }
    // Another display number than the particle test's (90..99), which may run beside this.
    let display = format!(":{}", 110 + std::process::id() % 9);
    let mut demo = Command::new(fluid::demo_binary());
    demo.args(["--sim", "vulkan", "--size", "96", "--window", "400x400"])
        .args(["--exit-after", "100", "--resize-at", "50:360x240"]);
    let xvfb::WindowRun {
        status,
        seen,
        err,
        shot,
    } = xvfb::run_window(&display, "640x480x24", demo);
    assert!(status.success(), "demo exited with {status}: {err}");
    assert!(
        seen.iter().any(|l| l == "swapchain recreated at 360x240"),
        "the resize did not recreate the swapchain: {seen:?}"
    );
    assert!(
        seen.iter().any(|l| l == "closed after 100 frames"),
        "did not close cleanly"
    );
    let (w, h, rgb) = xvfb::parse_xwd(&shot.expect("no screenshot taken"));
    let colourful = rgb
        .iter()
        .filter(|p| {
            let (hi, lo) = (
                *p.iter().max().unwrap() as u32,
                *p.iter().min().unwrap() as u32,
            );
            hi > 100 && hi - lo > 50
        })
        .count();
    let dark = rgb.iter().filter(|p| p.iter().all(|&c| c < 40)).count();
    eprintln!("screenshot {w}x{h}: {colourful} colourful pixels, {dark} dark pixels");
    assert!(colourful > 300, "the window shows no dye");
    assert!(dark > 10_000, "the window shows no background");
}
