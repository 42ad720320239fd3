//! The particle demo as a user runs it, on any Vulkan device (lavapipe in CI), under the
//! validation layer: headless PNGs checked against the CPU simulation, the same image for the
//! same seed, the HUD drawn in its corner only, clear errors for bad input, and (under Xvfb) a
//! window that presents and closes.

use crate::particles;
use cuvk_dev::testing::xvfb;

use std::process::Command;

use particles::{check_frame, run_demo, temp_dir};

/// Whether the demo finds a Vulkan device, asked once of the demo itself (a child process), so
/// this test process never loads a Vulkan driver next to the demo runs.
fn vulkan_present() -> bool {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PRESENT.get_or_init(|| {
        let dir = temp_dir("probe");
        let o = Command::new(particles::demo_binary())
            .args([
                "--headless",
                "--sim",
                "vulkan",
                "--frames",
                "1",
                "--particles",
                "16",
                "--size",
                "8x8",
                "--out",
                dir.to_str().unwrap(),
            ])
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
fn headless_vulkan_frames_show_the_particles_where_the_simulation_puts_them() {
    if !vulkan_present() {
        eprintln!("SKIP: no Vulkan device");
        return;
    }
    let (a, b, c) = (temp_dir("png-a"), temp_dir("png-b"), temp_dir("png-c"));
    let args = |out: &std::path::Path, seed: &str| -> Vec<String> {
        [
            "--headless",
            "--sim",
            "vulkan",
            "--frames",
            "60",
            "--particles",
            "20000",
            "--size",
            "320x240",
            "--seed",
            seed,
            // The HUD's numbers change from run to run; the picture must not.
            "--hud",
            "off",
            "--out",
            out.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    for (dir, seed) in [(&a, "7"), (&b, "7"), (&c, "8")] {
        let argv = args(dir, seed);
        let out = run_demo(&argv.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(out.status.success(), "demo failed");
    }
    let share = check_frame(&a.join("frame_00060.png"), 320, 240, 20_000, 7, 60);
    assert!(
        share > 0.99,
        "only {:.2}% of the particles' pixels are lit",
        100.0 * share
    );
    let read = |d: &std::path::Path| particles::read_png(&d.join("frame_00060.png")).2;
    assert!(read(&a) == read(&b), "same seed, different image");
    assert!(read(&a) != read(&c), "different seed, same image");
    for d in [a, b, c] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// `--composite depth` (issue 38): the galaxies as lit opaque spheres, the same picture for
/// the same seed, and spheres where the glow mode lights pixels.
#[test]
fn headless_opaque_spheres_are_drawn_deterministically() {
    if !vulkan_present() {
        eprintln!("SKIP: no Vulkan device");
        return;
    }
    let (a, b) = (temp_dir("opaque-a"), temp_dir("opaque-b"));
    for dir in [&a, &b] {
        let out = run_demo(&[
            "--headless",
            "--sim",
            "vulkan",
            "--composite",
            "depth",
            "--frames",
            "20",
            "--particles",
            "20000",
            "--size",
            "320x240",
            "--hud",
            "off",
            "--out",
            dir.to_str().unwrap(),
        ]);
        if String::from_utf8_lossy(&out.stderr).contains("64-bit buffer atomics") {
            eprintln!("SKIP: the device has no 64-bit buffer atomics");
            return;
        }
        assert!(
            out.status.success(),
            "demo failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (w, h, rgba) = particles::read_png(&a.join("frame_00020.png"));
    assert_eq!((w, h), (320, 240));
    // Background is a dark blue gradient; a sphere is brighter than it in some channel.
    let lit = rgba
        .chunks(4)
        .filter(|p| p[0] > 60 || p[1] > 60 || p[2] > 80)
        .count();
    assert!(lit > 500, "only {lit} pixels show spheres");
    let again = particles::read_png(&b.join("frame_00020.png")).2;
    assert!(rgba == again, "the same run drew two different pictures");
    // The flag took: the glow of the same frame is another picture.
    let glow = temp_dir("opaque-glow");
    let out = run_demo(&[
        "--headless",
        "--sim",
        "vulkan",
        "--composite",
        "add",
        "--frames",
        "20",
        "--particles",
        "20000",
        "--size",
        "320x240",
        "--hud",
        "off",
        "--out",
        glow.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    assert!(
        particles::read_png(&glow.join("frame_00020.png")).2 != rgba,
        "--composite depth drew the glow"
    );
    for d in [a, b, glow] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn the_hud_writes_its_text_in_the_top_left_corner_and_nowhere_else() {
    if !vulkan_present() {
        eprintln!("SKIP: no Vulkan device");
        return;
    }
    let (w, h) = (640u32, 360u32);
    let (on, off) = (temp_dir("hud-on"), temp_dir("hud-off"));
    for (dir, hud) in [(&on, "on"), (&off, "off")] {
        let size = format!("{w}x{h}");
        let out = run_demo(&[
            "--headless",
            "--sim",
            "vulkan",
            "--frames",
            "3",
            "--particles",
            "20000",
            "--size",
            &size,
            "--hud",
            hud,
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "demo failed");
    }
    let read = |d: &std::path::Path| particles::read_png(&d.join("frame_00003.png")).2;
    let (a, b) = (read(&on), read(&off));
    fn pixel(img: &[u8], i: usize) -> &[u8] {
        &img[4 * i..4 * i + 3]
    }
    let changed: Vec<(u32, u32)> = (0..(w * h) as usize)
        .filter(|&i| pixel(&a, i) != pixel(&b, i))
        .map(|i| (i as u32 % w, i as u32 / w))
        .collect();
    let right = changed.iter().map(|p| p.0).max().unwrap_or(0);
    let bottom = changed.iter().map(|p| p.1).max().unwrap_or(0);
    // Text: the HUD's pale letters (the picture under the panel is dimmed, never brightened).
    let ink = changed
        .iter()
        .filter(|&&(x, y)| pixel(&a, (y * w + x) as usize).iter().all(|&c| c > 180))
        .count();
    eprintln!(
        "HUD: {} pixels changed, within x < {right}, y < {bottom}; {ink} of them letters",
        changed.len()
    );
    assert!(
        right < w * 2 / 3 && bottom < h / 6,
        "the HUD reaches ({right}, {bottom})"
    );
    assert!(ink > 300, "the HUD shows no text ({ink} letter pixels)");
    for d in [on, off] {
        let _ = std::fs::remove_dir_all(d);
    }
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
            vec!["--headless", "--particles", "0", "--out", out],
            "--particles must be at least 1",
        ),
        (
            vec![
                "--headless",
                "--sim",
                "vulkan",
                "--particles",
                "4000000000",
                "--out",
                out,
            ],
            // GPU memory or maxStorageBufferRange, whichever limit the device hits first.
            "4000000000 particles need",
        ),
        (
            vec!["--headless", "--particles", "many", "--out", out],
            "not a whole number",
        ),
        (
            vec!["--headless", "--sim", "fortran", "--out", out],
            "--sim must be cuda or vulkan",
        ),
        (
            vec!["--headless", "--hud", "maybe", "--out", out],
            "--hud must be on or off",
        ),
        (
            vec!["--headless", "--composite", "sum", "--out", out],
            "--composite must be add or depth",
        ),
        (vec!["--publish"], "--publish needs a value"),
        (
            vec!["--publish", "galaxies", "--particles", "0"],
            "--publish needs a name and at least 1 particle",
        ),
        (
            vec!["--view", "galaxies", "--size", "0x10", "--out", out],
            "--size must look like 1280x720",
        ),
        (
            vec!["--serve", "galaxies", "--bogus"],
            "--serve takes --particles",
        ),
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
    // An --out that cannot be a directory (a file is in the way).
    let file = out_dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let bad_out = file.join("frames");
    let o = run_demo(&[
        "--headless",
        "--sim",
        "vulkan",
        "--particles",
        "1000",
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
        "--particles",
        "1000",
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
fn window_under_xvfb_presents_frames_and_closes_cleanly() {
    if !xvfb::tools_present() {
        return;
    }
    let display = format!(":{}", 90 + std::process::id() % 9);
    let mut demo = Command::new(particles::demo_binary());
    demo.args([
        "--sim",
        "vulkan",
        "--particles",
        "30000",
        "--size",
        "640x480",
        "--exit-after",
        "150",
        "--resize-at",
        "60:520x360",
    ]);
    let xvfb::WindowRun {
        status,
        seen,
        err,
        shot,
    } = xvfb::run_window(&display, "800x600x24", demo);
    assert!(status.success(), "demo exited with {status}: {err}");
    assert!(
        seen.iter().any(|l| l == "swapchain recreated at 520x360"),
        "the resize did not recreate the swapchain: {seen:?}"
    );
    assert!(
        seen.iter().any(|l| l == "closed after 150 frames"),
        "did not close cleanly"
    );
    let (w, h, rgb) = xvfb::parse_xwd(&shot.expect("no screenshot taken"));
    let bright = rgb
        .iter()
        .filter(|p| p.iter().map(|&c| c as u32).sum::<u32>() > 40)
        .count();
    let dark_bg = rgb.iter().filter(|p| p.iter().all(|&c| c < 30)).count();
    eprintln!("screenshot {w}x{h}: {bright} bright pixels, {dark_bg} dark pixels");
    assert!(bright > 500, "the window shows no particles");
    assert!(dark_bg > 10_000, "the window shows no background");
}

/// On a CPU Vulkan device (lavapipe: 1.5 fps at the 1M-particle default) the demo picks a
/// particle count and frame count that finish in seconds where the user chose none, and says
/// so; what the user chose is kept.
#[test]
fn a_cpu_device_gets_defaults_that_finish_in_seconds() {
    if !vulkan_present() {
        return;
    }
    let dir = temp_dir("cpu-defaults");
    let run = |extra: &[&str]| {
        let o = Command::new(particles::demo_binary())
            .args(["--headless", "--sim", "vulkan", "--size", "64x36", "--out"])
            .arg(&dir)
            .args(extra)
            .env("XDG_RUNTIME_DIR", "/tmp")
            .output()
            .expect("run the demo");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let out = run(&["--frames", "2"]);
    let cpu = out.contains("is a CPU Vulkan device");
    if !cpu {
        eprintln!("SKIP a_cpu_device_gets_defaults_that_finish_in_seconds: not a CPU device");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    assert!(out.contains("100000 particles by default"), "{out}");
    assert!(out.contains("; 100000 particles;"), "{out}");
    // Chosen by the user: kept, and nothing said.
    let out = run(&["--frames", "2", "--particles", "5000"]);
    assert!(!out.contains("by default"), "{out}");
    assert!(out.contains("; 5000 particles;"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
