//! Checking the particle demos' PNG frames against a CPU prediction of where the particles
//! are (the simulation of [`crate::sim::particles`]). Running the demo is the test binaries'
//! own business (`tests/demos/particles.rs`, `tests/wgpu/particles_cli.rs`).

use std::path::{Path, PathBuf};

pub use super::read_png;
pub use crate::sim::particles as sim;

/// A fresh, empty `cuvk-<name>-<pid>` folder in the temporary directory.
pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cuvk-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
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
