//! Running a windowed demo under Xvfb: the X server (killed on drop), the demo's output read
//! line by line with a screenshot after 30 presented frames, and the XWD screenshot parser.
//! Shared by the particle, fluid and wgpu particle CLI tests.

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Whether Xvfb and xwd are installed; without them the window test skips (returns false),
/// or fails where `REQUIRE_VULKAN=1` demands them.
pub fn tools_present() -> bool {
    let have = |tool: &str| {
        Command::new("which")
            .arg(tool)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !have("Xvfb") || !have("xwd") {
        assert_ne!(
            std::env::var("REQUIRE_VULKAN").as_deref(),
            Ok("1"),
            "Xvfb and xwd are required (Debian xvfb, x11-apps)"
        );
        eprintln!("SKIP: Xvfb or xwd not installed");
        return false;
    }
    true
}

/// What a windowed demo run left: its exit status, stdout lines, stderr, and the screenshot
/// taken when it printed "presented 30 frames".
pub struct WindowRun {
    pub status: ExitStatus,
    pub seen: Vec<String>,
    pub err: String,
    pub shot: Option<Vec<u8>>,
}

/// Waits until the X server of `display` (":N") accepts a connection on its socket
/// `/tmp/.X11-unix/XN` (at most 10 s; a fixed 700 ms pause was once too short on a loaded
/// machine, and the demo then failed to open its window). A stale socket left by a killed
/// server refuses connections, so it is not mistaken for the new one.
fn wait_for_display(display: &str) {
    let socket = format!("/tmp/.X11-unix/X{}", display.trim_start_matches(':'));
    let start = Instant::now();
    while std::os::unix::net::UnixStream::connect(&socket).is_err()
        && start.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts Xvfb on `display` with a `screen` (e.g. "800x600x24") screen, runs `demo` in it under
/// the validation layer until it exits (at most 120 s), then stops Xvfb and prints what the
/// demo printed.
pub fn run_window(display: &str, screen: &str, mut demo: Command) -> WindowRun {
    // Killed on drop, also when the test panics: a leaked Xvfb holds the test's stdout open, so a
    // caller reading it through a pipe would wait forever.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let xvfb = KillOnDrop(
        Command::new("Xvfb")
            .args([display, "-screen", "0", screen, "-nolisten", "tcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_display(display);
    let mut demo = demo
        .env("DISPLAY", display)
        .env("CUVK_VALIDATION", "1")
        .env("XDG_RUNTIME_DIR", "/tmp")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(demo.stdout.take().unwrap()).lines();
    let start = Instant::now();
    let mut seen = Vec::new();
    let mut shot = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if line == "presented 30 frames" {
            let o = Command::new("xwd")
                .args(["-root", "-silent", "-display", display])
                .output()
                .unwrap();
            assert!(o.status.success(), "xwd failed");
            shot = Some(o.stdout);
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "window demo too slow: {seen:?}"
        );
    }
    let status = demo.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut demo.stderr.take().unwrap(), &mut err).unwrap();
    drop(xvfb);
    eprintln!("{}\n{err}", seen.join("\n"));
    WindowRun {
        status,
        seen,
        err,
        shot,
    }
}

/// Parses an XWD screenshot (32 bits per pixel, ZPixmap) into (width, height, rgb rows).
pub fn parse_xwd(data: &[u8]) -> (u32, u32, Vec<[u8; 3]>) {
    let be = |i: usize| u32::from_be_bytes(data[i * 4..i * 4 + 4].try_into().unwrap());
    let (header, w, h) = (be(0) as usize, be(4), be(5));
    let (byte_order, bpp, line, ncolors) = (be(7), be(11), be(12) as usize, be(19) as usize);
    let (rmask, gmask, bmask) = (be(14), be(15), be(16));
    assert_eq!(bpp, 32, "expected a 32-bit screenshot");
    let pixels = &data[header + 12 * ncolors..];
    let channel = |v: u32, mask: u32| ((v & mask) >> mask.trailing_zeros()) as u8;
    let mut out = Vec::with_capacity((w * h) as usize);
    for y in 0..h as usize {
        for x in 0..w as usize {
            let b: [u8; 4] = pixels[y * line + x * 4..y * line + x * 4 + 4]
                .try_into()
                .unwrap();
            let v = if byte_order == 0 {
                u32::from_le_bytes(b)
            } else {
                u32::from_be_bytes(b)
            };
            out.push([channel(v, rmask), channel(v, gmask), channel(v, bmask)]);
        }
    }
    (w, h, out)
}
