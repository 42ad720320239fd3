//! A particle field in Bevy with `bevy_cuvk`: the particles are simulated on the GPU every
//! frame and drawn into an image that an ordinary Bevy `Sprite` shows, with Bevy's frame-time
//! diagnostics on screen. Where CUDA pairs with Bevy's Vulkan device (`CuvkStatus::Ready`) the
//! step runs as a CUDA kernel (`particles.cu`) on the memory Bevy draws (a `CuvkBuffer`):
//! inside Bevy's queue (NVX) where the driver can, else on a CUDA stream; without CUDA it runs
//! as WGSL compute (`particles.wgsl`), and the reason CUDA is unavailable is printed.
//!
//! ```sh
//! cargo run --release --example particles                        # a window
//! cargo run --release --example particles -- --headless --frames 300 --out out
//! ```
//!
//! Options: `--headless` (no window: frames rendered to an image, PNGs written),
//! `--frames N` (steps to run, then exit; headless default 120), `--out DIR` (PNG directory,
//! default `out`), `--every K` (also save every K-th step), `--particles N` (default 262144),
//! `--size WxH` (default 1280x720), `--sim auto|wgsl` (`wgsl`: do not open CUDA),
//! `--launch auto|inline|stream` (how CUDA kernels run: inside Bevy's queue through NVX, or
//! on a CUDA stream; auto: inline where the device can), `--no-cuvk` (leave the plugin out:
//! plain Bevy, the baseline), `--check` (headless: compare the last frame of the simulation
//! with the CPU reference, exit status 1 on a mismatch — the GPU machine's test of a path
//! without a separate test binary; use few `--frames`, e.g. 8, as float rounding grows).

mod capture;
mod cuda;
mod reference;
mod sim;

use std::path::PathBuf;
use std::time::Duration;

use bevy::app::ScheduleRunnerPlugin;
use bevy::camera::RenderTarget;
use bevy::core_pipeline::tonemapping::Tonemapping;
use bevy::diagnostic::{DiagnosticsStore, FrameTimeDiagnosticsPlugin};
use bevy::prelude::*;
use bevy::render::RenderPlugin;
use bevy::text::FontSize;
use bevy::window::{ExitCondition, WindowResolution};
use bevy::winit::WinitPlugin;
use bevy_cuvk::{CuvkPlugin, CuvkStatus};

use capture::{CapturePlugin, CaptureSettings, CheckResult, ExitRequested};
use sim::{Launch, ParticleSim, ParticleSimPlugin};

/// Command-line options.
#[derive(Debug, Clone)]
struct Options {
    headless: bool,
    frames: Option<u32>,
    out: PathBuf,
    every: Option<u32>,
    particles: u32,
    width: u32,
    height: u32,
    use_cuda: bool,
    /// Leave CuvkPlugin out (a plain Bevy app: the baseline).
    no_cuvk: bool,
    /// How CUDA kernels run.
    launch: Launch,
    /// Compare the last frame with the CPU reference; fail on a mismatch.
    check: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: particles [--headless] [--frames N] [--out DIR] [--every K] [--particles N] \
         [--size WxH] [--sim auto|wgsl] [--launch auto|inline|stream] [--no-cuvk] [--check]"
    );
    std::process::exit(2)
}

fn parse() -> Options {
    let mut o = Options {
        headless: false,
        frames: None,
        out: PathBuf::from("out"),
        every: None,
        particles: 1 << 18,
        width: 1280,
        height: 720,
        use_cuda: true,
        no_cuvk: false,
        launch: Launch::Auto,
        check: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--headless" => o.headless = true,
            "--frames" => o.frames = Some(value().parse().unwrap_or_else(|_| usage())),
            "--out" => o.out = PathBuf::from(value()),
            "--every" => o.every = Some(value().parse().unwrap_or_else(|_| usage())),
            "--particles" => o.particles = value().parse().unwrap_or_else(|_| usage()),
            "--size" => {
                let v = value();
                let (w, h) = v.split_once('x').unwrap_or_else(|| usage());
                o.width = w.parse().unwrap_or_else(|_| usage());
                o.height = h.parse().unwrap_or_else(|_| usage());
            }
            "--sim" => match value().as_str() {
                "auto" => o.use_cuda = true,
                "wgsl" => o.use_cuda = false,
                _ => usage(),
            },
            "--no-cuvk" => o.no_cuvk = true,
            "--check" => o.check = true,
            "--launch" => {
                o.launch = match value().as_str() {
                    "auto" => Launch::Auto,
                    "inline" => Launch::Inline,
                    "stream" => Launch::Stream,
                    _ => usage(),
                }
            }
            "--help" | "-h" => usage(),
            _ => usage(),
        }
    }
    if o.headless && o.frames.is_none() {
        o.frames = Some(120);
    }
    o
}

fn main() -> AppExit {
    let o = parse();
    let cuvk = CuvkPlugin {
        use_cuda: o.use_cuda,
        ..default()
    };
    let mut app = App::new();
    let plugins = if o.no_cuvk {
        DefaultPlugins.build()
    } else {
        DefaultPlugins.build().add_before::<RenderPlugin>(cuvk)
    };
    if o.headless {
        app.add_plugins((
            plugins
                .set(WindowPlugin {
                    primary_window: None,
                    // Exit is ours (after the last PNG), not on "no window left".
                    exit_condition: ExitCondition::DontExit,
                    ..default()
                })
                // No display needed: ScheduleRunnerPlugin drives the frames.
                .disable::<WinitPlugin>(),
            ScheduleRunnerPlugin::run_loop(Duration::ZERO),
        ));
    } else {
        app.add_plugins(plugins.set(WindowPlugin {
            primary_window: Some(Window {
                title: "bevy_cuvk particles".into(),
                resolution: WindowResolution::new(o.width, o.height),
                ..default()
            }),
            ..default()
        }));
    }
    app.add_plugins((
        FrameTimeDiagnosticsPlugin::default(),
        ParticleSimPlugin,
        CapturePlugin,
    ))
    .insert_resource(ClearColor(Color::BLACK))
    // Pending for ever with --no-cuvk (the plugin inserts it otherwise).
    .init_resource::<CuvkStatus>()
    .insert_resource(CaptureSettings {
        headless: o.headless,
        out: o.out.clone(),
        every: o.every,
        last: o.frames,
        check: o.check,
        width: o.width,
        height: o.height,
    })
    .insert_resource(Stats::default())
    .insert_resource(OptionsRes(o))
    .add_systems(Startup, setup)
    .add_systems(
        Update,
        (
            report_status.run_if(resource_changed::<CuvkStatus>),
            update_hud,
            count_presented,
        ),
    )
    .add_systems(Last, print_summary_on_exit);
    app.run()
}

#[derive(Resource)]
struct OptionsRes(Options);

#[derive(Component)]
struct Hud;

fn setup(
    mut commands: Commands,
    mut images: ResMut<Assets<Image>>,
    options: Res<OptionsRes>,
    capture: Res<CaptureSettings>,
) {
    let o = &options.0;
    let mut sim = ParticleSim::new(&mut images, o.particles, o.width, o.height, o.frames);
    sim.launch = o.launch;
    let sprite = Sprite {
        image: sim.image.clone(),
        custom_size: Some(Vec2::new(o.width as f32, o.height as f32)),
        ..default()
    };
    commands.spawn(sprite);
    let mut camera = commands.spawn((Camera2d, Tonemapping::None));
    if o.headless {
        let target = capture::target_image(&mut images, &capture);
        // UI picks a window's camera by default: name this one (it renders into an image).
        camera.insert((
            RenderTarget::Image(target.clone().into()),
            IsDefaultUiCamera,
        ));
        commands.insert_resource(capture::Target(target));
    }
    commands.insert_resource(sim);
    commands.spawn((
        Text::new("starting"),
        TextFont {
            font_size: FontSize::Px(18.0),
            ..default()
        },
        TextColor(Color::srgb(0.92, 0.92, 0.95)),
        Node {
            position_type: PositionType::Absolute,
            top: px(10.0),
            left: px(12.0),
            ..default()
        },
        Hud,
    ));
}

/// In a window: says when 30 frames were presented (the Xvfb test takes its screenshot then).
fn count_presented(options: Res<OptionsRes>, mut frames: Local<u32>) {
    if options.0.headless {
        return;
    }
    *frames += 1;
    if *frames == 30 {
        println!("presented 30 frames");
    }
}

/// Prints the status once it is known (and what the example runs on).
fn report_status(status: Res<CuvkStatus>) {
    match &*status {
        CuvkStatus::Pending => {}
        CuvkStatus::Ready {
            inline_kernels,
            device,
        } => println!(
            "cuvk: CUDA ready on {device} (inline kernels: {inline_kernels}); \
             simulating with a CUDA kernel on a shared buffer (stream path)"
        ),
        CuvkStatus::Unavailable { reason } => {
            println!("cuvk: CUDA unavailable: {reason}");
            println!("cuvk: simulating in WGSL compute (the fallback path)");
        }
    }
}

/// Frame-time statistics for the summary.
#[derive(Resource, Default)]
struct Stats {
    frame_ms: Vec<f64>,
}

fn update_hud(
    diagnostics: Res<DiagnosticsStore>,
    status: Res<CuvkStatus>,
    sim: Option<Res<ParticleSim>>,
    time: Res<Time<Real>>,
    mut stats: ResMut<Stats>,
    mut hud: Query<&mut Text, With<Hud>>,
) {
    let fps = diagnostics
        .get(&FrameTimeDiagnosticsPlugin::FPS)
        .and_then(|d| d.smoothed())
        .unwrap_or(0.0);
    let ms = diagnostics
        .get(&FrameTimeDiagnosticsPlugin::FRAME_TIME)
        .and_then(|d| d.smoothed())
        .unwrap_or(0.0);
    let steps = sim.as_ref().map_or(0, |s| s.steps());
    if steps > 1 {
        stats.frame_ms.push(time.delta_secs_f64() * 1000.0);
    }
    let path = match (&*status, sim.as_ref()) {
        (CuvkStatus::Ready { .. }, Some(s)) => s.path(),
        (CuvkStatus::Unavailable { .. }, _) => "WGSL compute (no CUDA)".into(),
        _ => "starting".into(),
    };
    let count = sim.as_ref().map_or(0, |s| s.count);
    for mut text in &mut hud {
        **text =
            format!("{count} particles | {path}\n{fps:.1} fps | {ms:.2} ms/frame | step {steps}");
    }
}

/// Prints the frame-time summary and exits, once the last frame is done.
fn print_summary_on_exit(
    requested: Res<ExitRequested>,
    check: Res<CheckResult>,
    stats: Res<Stats>,
    sim: Option<Res<ParticleSim>>,
    mut exits: MessageWriter<AppExit>,
) {
    if !requested.0 {
        return;
    }
    if let Some(s) = sim.as_ref() {
        println!("simulation: {}", s.path());
    }
    exits.write(match check.0 {
        Some(false) => AppExit::error(),
        _ => AppExit::Success,
    });
    let mut ms = stats.frame_ms.clone();
    if ms.is_empty() {
        return;
    }
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
    let mean = ms.iter().sum::<f64>() / ms.len() as f64;
    println!(
        "frames: {} steps, frame time mean {mean:.2} ms ({:.1} fps), p50 {:.2} ms, p99 {:.2} ms",
        sim.map_or(0, |s| s.steps()),
        1000.0 / mean,
        pct(0.5),
        pct(0.99)
    );
}
