//! Headless frames (as Bevy 0.19's `headless_renderer` example: the camera renders into an
//! image, no window, `ScheduleRunnerPlugin` drives the loop), read back with Bevy's
//! `Readback` and written as PNGs; and the exit after the last step.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bevy::prelude::*;
use bevy::render::gpu_readback::{Readback, ReadbackComplete};
use bevy::render::render_resource::{TextureFormat, TextureUsages};

use crate::reference;
use crate::sim::ParticleSim;

/// Where and when to write frames.
#[derive(Resource, Debug, Clone)]
pub struct CaptureSettings {
    pub headless: bool,
    pub out: PathBuf,
    /// Also save every K-th step.
    pub every: Option<u32>,
    /// The last step: saved (headless), then the app exits.
    pub last: Option<u32>,
    /// After the last step, compare the simulation's image with the CPU reference.
    pub check: bool,
    pub width: u32,
    pub height: u32,
}

/// The image the headless camera renders into.
#[derive(Resource)]
pub struct Target(pub Handle<Image>);

/// A render-target image for the headless camera (copyable to a buffer).
pub fn target_image(images: &mut Assets<Image>, settings: &CaptureSettings) -> Handle<Image> {
    let mut image = Image::new_target_texture(
        settings.width,
        settings.height,
        TextureFormat::Rgba8UnormSrgb,
        None,
    );
    image.texture_descriptor.usage |= TextureUsages::COPY_SRC;
    images.add(image)
}

/// Set when the last frame is done: the app prints its summary and exits.
#[derive(Resource, Default)]
pub struct ExitRequested(pub bool);

/// `--check`'s outcome: `Some(false)` makes the exit status a failure.
#[derive(Resource, Default)]
pub struct CheckResult(pub Option<bool>);

pub struct CapturePlugin;

impl Plugin for CapturePlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<ExitRequested>()
            .init_resource::<CheckResult>()
            .add_systems(PostUpdate, request_frames);
    }
}

#[derive(Default)]
struct CaptureState {
    next_every: u32,
    last_requested: bool,
}

fn request_frames(
    mut commands: Commands,
    settings: Res<CaptureSettings>,
    sim: Option<Res<ParticleSim>>,
    target: Option<Res<Target>>,
    mut state: Local<CaptureState>,
    mut exit: ResMut<ExitRequested>,
) {
    let Some(sim) = sim else { return };
    let steps = sim.steps();
    let last_reached = settings.last.is_some_and(|n| steps >= n);
    let Some(target) = target.filter(|_| settings.headless) else {
        if last_reached {
            exit.0 = true;
        }
        return;
    };
    if let Some(k) = settings.every.filter(|&k| k > 0) {
        if state.next_every == 0 {
            state.next_every = k;
        }
        if steps >= state.next_every && !last_reached {
            request(&mut commands, &target.0, &settings, steps, false);
            state.next_every = (steps / k + 1) * k;
        }
    }
    if last_reached && !state.last_requested {
        state.last_requested = true;
        let n = settings.last.unwrap_or(steps);
        request(&mut commands, &target.0, &settings, n, !settings.check);
        if settings.check {
            request_check(&mut commands, &sim, n);
        }
    }
}

/// Reads the simulation's image back once and compares it with the CPU reference of `steps`
/// steps (`--check`): prints the outcome, then exits (failing on a mismatch).
fn request_check(commands: &mut Commands, sim: &ParticleSim, steps: u32) {
    let done = Arc::new(AtomicBool::new(false));
    let (count, width, height, seed) = (sim.count, sim.width, sim.height, sim.seed);
    let path = sim.path();
    commands
        .spawn(Readback::texture(sim.image.clone()))
        .observe(
            move |event: On<ReadbackComplete>,
                  mut commands: Commands,
                  mut exits: ResMut<ExitRequested>,
                  mut result: ResMut<CheckResult>| {
                if done.swap(true, Ordering::AcqRel) {
                    return;
                }
                commands.entity(event.entity).try_despawn();
                let aspect = width as f32 / height as f32;
                let reference_after = |n: u32| {
                    let mut particles = reference::initial_particles(count, aspect, seed);
                    for s in 0..n {
                        reference::step(
                            &mut particles,
                            &reference::params(s, count, width, height, true),
                        );
                    }
                    reference::draw(
                        &particles,
                        &reference::params(n, count, width, height, false),
                    )
                };
                let row = width as usize * 4;
                let padded = row.div_ceil(256) * 256;
                let gpu: Vec<u8> = event
                    .data
                    .chunks(padded)
                    .take(height as usize)
                    .flat_map(|r| r[..row.min(r.len())].iter().copied())
                    .collect();
                let off = |want: &[u8]| {
                    gpu.chunks_exact(4)
                        .zip(want.chunks_exact(4))
                        .filter(|(p, q)| p.iter().zip(q.iter()).any(|(a, b)| a.abs_diff(*b) > 2))
                        .count()
                };
                let pixels = (width * height) as usize;
                let mismatched = off(&reference_after(steps));
                let control = off(&reference_after(steps.saturating_sub(1)));
                let pass = mismatched <= pixels / 200 && control > 10 * mismatched.max(10);
                println!(
                "check ({path}): after {steps} steps {mismatched} of {pixels} pixels differ from \
                 the CPU reference by more than 2 (one step fewer: {control}): {}",
                if pass { "PASS" } else { "FAIL" }
            );
                result.0 = Some(pass);
                exits.0 = true;
            },
        );
}

/// Reads the target back once and writes `frame_NNNNN.png`; exits after it when `exit`.
fn request(
    commands: &mut Commands,
    target: &Handle<Image>,
    settings: &CaptureSettings,
    step: u32,
    exit: bool,
) {
    let path = settings.out.join(format!("frame_{step:05}.png"));
    let (width, height) = (settings.width, settings.height);
    let done = Arc::new(AtomicBool::new(false));
    commands.spawn(Readback::texture(target.clone())).observe(
        move |event: On<ReadbackComplete>,
              mut commands: Commands,
              mut exits: ResMut<ExitRequested>| {
            if done.swap(true, Ordering::AcqRel) {
                return;
            }
            commands.entity(event.entity).try_despawn();
            match save_png(&path, width, height, &event.data) {
                Ok(()) => println!("wrote {}", path.display()),
                Err(e) => eprintln!("could not write {}: {e}", path.display()),
            }
            if exit {
                exits.0 = true;
            }
        },
    );
}

/// Writes RGBA8 rows (padded to 256 bytes each, as texture copies are) as a PNG.
pub fn save_png(
    path: &std::path::Path,
    width: u32,
    height: u32,
    data: &[u8],
) -> std::io::Result<()> {
    let row = width as usize * 4;
    let padded = row.div_ceil(256) * 256;
    let mut pixels = Vec::with_capacity(row * height as usize);
    for y in 0..height as usize {
        let start = y * padded;
        let Some(r) = data.get(start..start + row) else {
            return Err(std::io::Error::other("readback shorter than the image"));
        };
        pixels.extend_from_slice(r);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut encoder = png::Encoder::new(file, width, height);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(std::io::Error::other)?;
    writer
        .write_image_data(&pixels)
        .map_err(std::io::Error::other)?;
    writer.finish().map_err(std::io::Error::other)
}
