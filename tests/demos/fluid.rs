//! Running the fluid demo binary and judging what it wrote: PNG frames (not blank, colourful,
//! dye where the scripted jets put it) and field dumps (compared with the CPU reference step
//! or with another simulation). Shared by the CI and GPU tests (`fluid_cli`, `gpu_fluid`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use cuvk_dev::sim::fluid as sim;
pub use cuvk_dev::testing::read_png;

use crate::demo;

/// The fluid demo binary, once per test process (see [`demo::binary`]); `$CUVK_FLUID_BIN`
/// overrides it.
pub fn demo_binary() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| demo::binary("fluid", "CUVK_FLUID_BIN"))
        .clone()
}

/// Runs the demo under the validation layer, printing what it said.
pub fn run_demo(args: &[&str]) -> Output {
    let out = Command::new(demo_binary())
        .args(args)
        .env("CUVK_VALIDATION", "1")
        .env(
            "XDG_RUNTIME_DIR",
            std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| "/tmp".into()),
        )
        .output()
        .expect("run the fluid demo");
    eprintln!(
        "$ fluid {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Whether this machine has a CUDA GPU (the driver library and a device). Loads no Vulkan
/// driver.
pub fn gpu_present() -> bool {
    matches!(cuvk::cuda::devices(), Ok(d) if !d.is_empty())
}

pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cuvk-fluid-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Brightness (sum of RGB) and saturation (max - min) of a pixel.
fn pixel(rgba: &[u8], w: u32, x: u32, y: u32) -> (u32, u32) {
    let i = ((y * w + x) * 4) as usize;
    let (r, g, b) = (rgba[i] as u32, rgba[i + 1] as u32, rgba[i + 2] as u32);
    (r + g + b, r.max(g).max(b) - r.min(g).min(b))
}

/// What a frame shows.
#[derive(Debug)]
pub struct FrameStats {
    /// Pixels brighter than the background the draw shader paints.
    pub dyed: usize,
    /// Pixels with clearly coloured (saturated) dye.
    pub colourful: usize,
    /// Of the scripted jets at the frame, how many have bright dye at their nozzle.
    pub jets_found: usize,
    pub jets: usize,
}

/// Checks a frame of a `grid`² run drawn at `w`×`h` (square: the grid fills it): the size,
/// and counts dye, colour and the jets of `seed` at frame `frame` that are visible.
pub fn frame_stats(path: &Path, w: u32, h: u32, grid: u32, seed: u64, frame: u64) -> FrameStats {
    let (pw, ph, rgba) = read_png(path);
    assert_eq!((pw, ph), (w, h), "{}: wrong size", path.display());
    assert_eq!(w, h, "frame_stats maps a square grid onto a square image");
    let mut dyed = 0;
    let mut colourful = 0;
    for y in 0..h {
        for x in 0..w {
            let (bright, sat) = pixel(&rgba, w, x, y);
            dyed += usize::from(bright > 150);
            colourful += usize::from(bright > 150 && sat > 60);
        }
    }
    let script = sim::Script::new(seed, grid, grid);
    let jets = script.emitters(frame);
    let scale = w as f32 / grid as f32;
    let jets_found = jets
        .iter()
        .filter(|e| {
            let (cx, cy) = (e.pos[0] * scale, e.pos[1] * scale);
            // Brightest pixel within a quarter of the splat radius of the nozzle.
            let r = (0.25 * script.radius() * scale).max(1.0);
            let mut best = 0;
            for y in (cy - r).max(0.0) as u32..=((cy + r) as u32).min(h - 1) {
                for x in (cx - r).max(0.0) as u32..=((cx + r) as u32).min(w - 1) {
                    best = best.max(pixel(&rgba, w, x, y).0);
                }
            }
            best > 200
        })
        .count();
    let stats = FrameStats {
        dyed,
        colourful,
        jets_found,
        jets: jets.len(),
    };
    eprintln!("{}: {stats:?} of {} pixels", path.display(), w * h);
    stats
}

/// The CPU reference's fields after `frames` steps of a `grid`² run from `seed`.
pub fn cpu_reference(grid: u32, seed: u64, frames: u64, iterations: u32) -> sim::Fields {
    let script = sim::Script::new(seed, grid, grid);
    let mut f = sim::Fields::new(grid, grid);
    for n in 1..=frames {
        let p = sim::Params::new(grid, grid, &script.emitters(n));
        sim::step_cpu(&mut f, &p, iterations);
    }
    f
}

/// How far two states are apart, per field, relative to the field's largest magnitude.
#[derive(Debug)]
pub struct Difference {
    /// max |a - b| over velocity components, and the largest |velocity| component of `a`.
    pub velocity_max: f32,
    pub velocity_scale: f32,
    /// The same for the dye (RGBA).
    pub dye_max: f32,
    pub dye_scale: f32,
    /// Components that differ at all.
    pub differing: usize,
    pub components: usize,
}

impl Difference {
    pub fn velocity_rel(&self) -> f32 {
        self.velocity_max / self.velocity_scale.max(f32::MIN_POSITIVE)
    }
    pub fn dye_rel(&self) -> f32 {
        self.dye_max / self.dye_scale.max(f32::MIN_POSITIVE)
    }
}

pub fn difference(a: &sim::Fields, b: &sim::Fields) -> Difference {
    let mut d = Difference {
        velocity_max: 0.0,
        velocity_scale: 0.0,
        dye_max: 0.0,
        dye_scale: 0.0,
        differing: 0,
        components: 0,
    };
    for (x, y) in a.velocity.iter().zip(&b.velocity) {
        for c in 0..2 {
            d.velocity_max = d.velocity_max.max((x[c] - y[c]).abs());
            d.velocity_scale = d.velocity_scale.max(x[c].abs());
            d.differing += usize::from(x[c] != y[c]);
            d.components += 1;
        }
    }
    for (x, y) in a.dye.iter().zip(&b.dye) {
        for c in 0..4 {
            d.dye_max = d.dye_max.max((x[c] - y[c]).abs());
            d.dye_scale = d.dye_scale.max(x[c].abs());
            d.differing += usize::from(x[c] != y[c]);
            d.components += 1;
        }
    }
    d
}

/// Reads a `--dump` file of a `grid`² run.
pub fn read_dump(path: &Path, grid: u32) -> sim::Fields {
    let bytes = std::fs::read(path).expect("read dump");
    sim::Fields::from_dump(&bytes, grid, grid).unwrap_or_else(|| {
        panic!(
            "{}: not a {grid}² dump ({} bytes)",
            path.display(),
            bytes.len()
        )
    })
}
