//! Running the particle demo binary, and judging its PNG frames against the CPU simulation
//! ([`cuvk_dev::testing::particles`], whose helpers are re-exported here; the demo's own
//! [`check_frame`] replaces the plain-points one the wgpu particle test uses). Shared by the CI
//! and GPU tests (`particles_cli`, `gpu_particles`).

use std::path::{Path, PathBuf};
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

/// Red + green + blue of pixel (x, y).
fn brightness(rgba: &[u8], w: u32, x: u32, y: u32) -> u32 {
    let i = ((y * w + x) * 4) as usize;
    rgba[i..i + 3].iter().map(|&c| u32::from(c)).sum()
}

/// Brighter than any star of the background (particles_resolve.comp keeps them below it): a pixel this
/// bright has particles on it or close by.
const BRIGHT: u32 = 150;

/// Whether pixel (x, y) is a bright point: brighter than [`BRIGHT`] and than every pixel two
/// away from it. The glow and dense regions are smooth; a lone particle is such a point.
fn point(rgba: &[u8], w: u32, h: u32, x: u32, y: u32) -> bool {
    let b = brightness(rgba, w, x, y);
    let ring = [
        (-2, -2),
        (0, -2),
        (2, -2),
        (-2, 0),
        (2, 0),
        (-2, 2),
        (0, 2),
        (2, 2),
    ];
    b > BRIGHT
        && ring.iter().all(|&(dx, dy)| {
            let (xx, yy) = (x as i64 + dx, y as i64 + dy);
            let inside = (0..w as i64).contains(&xx) && (0..h as i64).contains(&yy);
            !inside || brightness(rgba, w, xx as u32, yy as u32) < b
        })
}

/// Checks a frame of the demo drawn with `--hud off` after `frames` frames from `seed`: right
/// size, bright somewhere; lit (see [`lit`]) within a pixel of where the CPU simulation puts
/// each particle, seen by the camera after `frames` steps of its orbit; and every bright point
/// (a lone particle: see [`point`]) within a pixel of a predicted particle, but for 1% (the
/// simulation or the camera disagree otherwise). Returns the share of predicted particles found
/// lit.
pub fn check_frame(path: &Path, w: u32, h: u32, particles: usize, seed: u64, frames: u64) -> f64 {
    let (pw, ph, rgba) = read_png(path);
    assert_eq!((pw, ph), (w, h), "{}: wrong size", path.display());
    let params = sim::Params::new(particles as u32);
    let (mut pos, mut vel) = sim::initial_state(particles, seed);
    for _ in 0..frames {
        sim::step_cpu(&params, &mut pos, &mut vel);
    }
    let vp = sim::OrbitCamera::orbited(frames).view_proj(w as f32 / h as f32);
    let pixels: Vec<(u32, u32)> = pos
        .iter()
        .filter_map(|p| sim::project(&vp, *p, w, h))
        .collect();
    assert!(
        pixels.len() > particles / 2,
        "most particles should be on screen ({} of {particles})",
        pixels.len()
    );
    let around = |x: u32, y: u32| {
        let xs = x.saturating_sub(1)..=(x + 1).min(w - 1);
        xs.flat_map(move |xx| (y.saturating_sub(1)..=(y + 1).min(h - 1)).map(move |yy| (xx, yy)))
    };
    let found = pixels
        .iter()
        .filter(|&&(x, y)| around(x, y).any(|(xx, yy)| lit(&rgba, w, xx, yy)))
        .count();
    let mut near = vec![false; (w * h) as usize];
    for &(x, y) in &pixels {
        for (xx, yy) in around(x, y) {
            near[(yy * w + xx) as usize] = true;
        }
    }
    let all = (0..h).flat_map(|y| (0..w).map(move |x| (x, y)));
    let bright = all
        .clone()
        .filter(|&(x, y)| brightness(&rgba, w, x, y) > BRIGHT)
        .count();
    let points: Vec<(u32, u32)> = all.filter(|&(x, y)| point(&rgba, w, h, x, y)).collect();
    let stray = points
        .iter()
        .filter(|&&(x, y)| !near[(y * w + x) as usize])
        .count();
    let share = found as f64 / pixels.len() as f64;
    eprintln!(
        "{}: {bright} bright pixels, {} bright points ({stray} where no particle is); {found} of {} predicted particle pixels lit ({:.3}%)",
        path.display(),
        points.len(),
        pixels.len(),
        100.0 * share
    );
    assert!(
        bright > 100,
        "{}: no bright pixels ({bright})",
        path.display()
    );
    assert!(
        stray * 100 <= points.len(),
        "{}: {stray} of {} bright points are where the simulation puts no particle",
        path.display(),
        points.len()
    );
    share
}
