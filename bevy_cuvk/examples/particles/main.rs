//! A particle field in Bevy with `bevy_cuvk`: the particles are simulated on the GPU every
//! frame and drawn into an image that an ordinary Bevy `Sprite` shows, with Bevy's frame-time
//! diagnostics on screen. Where CUDA pairs with Bevy's Vulkan device (`CuvkStatus::Ready`) the
//! step runs as a CUDA kernel (`particles.cu`) on the memory Bevy draws (a `CuvkBuffer`):
//! inside Bevy's queue (NVX) where the driver can, else on a CUDA stream; without CUDA it runs
//! as WGSL compute (`particles.wgsl`), and the reason CUDA is unavailable is printed.
//!
//! ```sh
//! cargo run --release -p bevy_cuvk --example bevy_particles                        # a window
//! cargo run --release -p bevy_cuvk --example bevy_particles -- --headless --frames 300 --out out
//! cargo run --release --example particles -- --publish galaxies &    # a simulation elsewhere
//! cargo run --release -p bevy_cuvk --example bevy_particles -- --view galaxies
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
//!
//! `--view NAME`: no simulation here — Bevy attaches to the publisher `NAME` in another
//! process (`particles --publish NAME`; `bevy_cuvk::CuvkSubscriber`) and draws its newest
//! frame every frame from the publisher's memory (`view.rs`), with its own orbit camera
//! (`--yaw R` to start elsewhere); it ends when the publisher does. PNGs as above.

mod bench;
mod capture;
mod cuda;
mod reference;
mod sim;
mod verify;
mod view;

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
    /// `--verify`: the exactness run instead of the demo (see verify.rs).
    verify: bool,
    /// `--unordered`: the verify run's negative control (no ordering at all).
    unordered: bool,
    /// `--swapped`: the inline path's other negative control (the kernel after the check).
    swapped: bool,
    /// `--image`: the verify run on a shared image instead of a buffer.
    image: bool,
    /// `--exit-at N`: the verify run exits at update N, with GPU work in flight (drop orders).
    exit_at: Option<u32>,
    /// `--elements`, `--rounds`: the verify run's buffer and work.
    elements: u32,
    rounds: u32,
    /// `--sync`: wait for the GPU at the end of every frame (what `--bench` measures).
    sync: bool,
    /// `--skip N`: frames left out of the frame-time statistics (warm-up).
    skip: u32,
    /// `--bench`: the benchmark (see bench.rs), with `--json PATH`.
    bench: bool,
    json: Option<PathBuf>,
    /// `--counts`: the particle counts `--bench` measures.
    counts: Vec<u32>,
    /// `--view NAME`: draw what a publisher in another process simulates (no simulation here).
    view: Option<String>,
    /// `--yaw R`: the viewer's starting camera yaw (radians).
    yaw: f32,
}

fn usage() -> ! {
    eprintln!(
        "usage: bevy_particles [--headless] [--frames N] [--out DIR] [--every K] [--particles N] \
         [--size WxH] [--sim auto|wgsl] [--launch auto|inline|stream] [--no-cuvk] [--check] \
         [--sync] [--skip N]\n\
         \x20      bevy_particles --verify [--launch inline|stream] [--image] [--unordered|--swapped] [--exit-at N] [--frames N] \
         [--elements N] [--rounds R]\n\
         \x20      bevy_particles --bench [--counts N[,N...]] [--frames N] [--json PATH]\n\
         \x20      bevy_particles --view NAME [--headless] [--frames N] [--out DIR] [--every K] [--size WxH] [--yaw R]"
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
        verify: false,
        unordered: false,
        swapped: false,
        image: false,
        exit_at: None,
        elements: 1 << 22,
        rounds: 256,
        sync: false,
        skip: 1,
        bench: false,
        json: None,
        counts: vec![1_000_000, 4_000_000],
        view: None,
        yaw: 0.3,
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
            "--counts" => {
                o.counts = value()
                    .split(',')
                    .map(|c| c.parse().unwrap_or_else(|_| usage()))
                    .collect()
            }
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
            "--verify" => o.verify = true,
            "--unordered" => o.unordered = true,
            "--swapped" => o.swapped = true,
            "--image" => o.image = true,
            "--exit-at" => o.exit_at = Some(value().parse().unwrap_or_else(|_| usage())),
            "--elements" => o.elements = value().parse().unwrap_or_else(|_| usage()),
            "--rounds" => o.rounds = value().parse().unwrap_or_else(|_| usage()),
            "--sync" => o.sync = true,
            "--skip" => o.skip = value().parse().unwrap_or_else(|_| usage()),
            "--bench" => o.bench = true,
            "--view" => o.view = Some(value()),
            "--yaw" => o.yaw = value().parse().unwrap_or_else(|_| usage()),
            "--json" => o.json = Some(PathBuf::from(value())),
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
    if o.bench {
        return bench::run(&o);
    }
    if o.verify {
        return run_verify(&o);
    }
    let cuvk = CuvkPlugin {
        use_cuda: o.use_cuda,
        ..default()
    };
    let sync = o.sync;
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
    app.add_plugins((FrameTimeDiagnosticsPlugin::default(), CapturePlugin));
    match &o.view {
        Some(name) => {
            app.add_plugins(view::ViewPlugin)
                .insert_resource(view::ViewSettings {
                    name: name.clone(),
                    yaw: o.yaw,
                    ended: Default::default(),
                    publisher_frame: Default::default(),
                    particles: Default::default(),
                })
                .add_systems(Update, end_when_the_publisher_ends);
        }
        None => {
            app.add_plugins(ParticleSimPlugin);
        }
    }
    app.insert_resource(ClearColor(Color::BLACK))
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
    if let Some(render_app) = app.get_sub_app_mut(bevy::render::RenderApp) {
        render_app.insert_resource(FrameSync(sync)).add_systems(
            bevy::render::Render,
            wait_for_gpu.in_set(bevy::render::RenderSystems::Cleanup),
        );
    }
    app.run()
}

/// `--sync`: whether each frame waits for its GPU work (main and render worlds).
#[derive(Resource, Clone, Copy)]
struct FrameSync(bool);

/// `--sync`: after the frame's submission, waits until the GPU has run it, so that the frame
/// time includes the frame's GPU work on every path (`--bench`).
fn wait_for_gpu(sync: Option<Res<FrameSync>>, device: Res<bevy::render::renderer::RenderDevice>) {
    if sync.is_some_and(|s| s.0) {
        if let Err(e) = device
            .wgpu_device()
            .poll(bevy_cuvk::wgpu::PollType::wait_indefinitely())
        {
            error!("waiting for the GPU: {e}");
        }
    }
}

/// `--verify`: a headless app with the plugin and the verify run only; the exit status says
/// whether every frame was exact (ordered), or whether races were seen (`--unordered`).
fn run_verify(o: &Options) -> AppExit {
    if o.swapped && (o.launch != Launch::Inline || o.unordered) {
        eprintln!("--swapped is the inline path's control: --launch inline, without --unordered");
        return AppExit::from_code(2);
    }
    if o.image && (o.elements == 0 || !o.elements.is_multiple_of(verify::IMAGE_WIDTH)) {
        eprintln!(
            "--image needs --elements a multiple of {} (the image's width)",
            verify::IMAGE_WIDTH
        );
        return AppExit::from_code(2);
    }
    let settings = verify::VerifySettings {
        inline: o.launch == Launch::Inline,
        image: None,
        ordered: !o.unordered,
        swapped: o.swapped,
        frames: o.frames.unwrap_or(1000),
        elements: o.elements,
        rounds: o.rounds,
        outcome: Default::default(),
    };
    let ordered = settings.ordered && !settings.swapped;
    let outcome = settings.outcome.clone();
    let exit_at = o.exit_at;
    let (image, width, height) = (
        o.image,
        verify::IMAGE_WIDTH,
        o.elements / verify::IMAGE_WIDTH,
    );
    let mut app = App::new();
    app.add_plugins((
        DefaultPlugins
            .build()
            .add_before::<RenderPlugin>(CuvkPlugin::default())
            // Nearest sampling: the sprite's pixels are the image's texels, exactly.
            .set(ImagePlugin::default_nearest())
            .set(WindowPlugin {
                primary_window: None,
                exit_condition: ExitCondition::DontExit,
                ..default()
            })
            .disable::<WinitPlugin>(),
        ScheduleRunnerPlugin::run_loop(Duration::ZERO),
        verify::VerifyPlugin,
    ))
    .add_systems(
        Startup,
        move |mut commands: Commands, mut images: ResMut<Assets<Image>>| {
            let mut settings = settings.clone();
            if image && height > 0 {
                settings.image = Some(verify::spawn_sprite(
                    &mut commands,
                    &mut images,
                    width,
                    height,
                ));
            }
            commands.insert_resource(settings);
        },
    )
    .add_systems(
        Update,
        move |mut exits: MessageWriter<AppExit>, mut said: Local<bool>, mut updates: Local<u32>| {
            *updates += 1;
            if exit_at == Some(*updates) && !*said {
                // Drop orders: the app (CUDA kernels, Bevy's frames, shared memory) goes away
                // mid-run, with work in flight.
                *said = true;
                println!(
                    "verify: exiting at update {} with GPU work in flight",
                    *updates
                );
                exits.write(AppExit::Success);
                return;
            }
            let done = outcome.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let (Some(done), false) = (done, *said) {
                *said = true;
                println!("{}", done.line(ordered));
                let ok = done.error.is_none() && (done.exact() == ordered);
                exits.write(if ok {
                    AppExit::Success
                } else {
                    AppExit::error()
                });
            }
        },
    );
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
    if o.view.is_some() {
        sim = sim.with_image_format(&mut images, view::FORMAT);
    }
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

/// `--view`: once the publisher is gone (or attaching failed), the summary and the exit.
fn end_when_the_publisher_ends(settings: Res<view::ViewSettings>, mut exit: ResMut<ExitRequested>) {
    if settings.ended.load(std::sync::atomic::Ordering::Acquire) {
        exit.0 = true;
    }
}

/// Prints the status once it is known (and what the example runs on).
fn report_status(status: Res<CuvkStatus>, view: Option<Res<view::ViewSettings>>) {
    match &*status {
        CuvkStatus::Pending => {}
        CuvkStatus::Ready {
            inline_kernels,
            device,
        } if view.is_some() => {
            println!("cuvk: CUDA ready on {device} (inline kernels: {inline_kernels})")
        }
        CuvkStatus::Ready {
            inline_kernels,
            device,
        } => println!(
            "cuvk: CUDA ready on {device} (inline kernels: {inline_kernels}); \
             simulating with a CUDA kernel on a shared buffer"
        ),
        CuvkStatus::Unavailable { reason, .. } => {
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

#[allow(clippy::too_many_arguments)] // a Bevy system's parameters
fn update_hud(
    options: Res<OptionsRes>,
    diagnostics: Res<DiagnosticsStore>,
    status: Res<CuvkStatus>,
    sim: Option<Res<ParticleSim>>,
    time: Res<Time<Real>>,
    view: Option<Res<view::ViewSettings>>,
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
    if steps > options.0.skip.max(1) {
        stats.frame_ms.push(time.delta_secs_f64() * 1000.0);
    }
    let path = match (&*status, sim.as_ref()) {
        (CuvkStatus::Ready { .. }, Some(s)) => s.path(),
        (CuvkStatus::Unavailable { .. }, _) => "WGSL compute (no CUDA)".into(),
        _ => "starting".into(),
    };
    let count = sim.as_ref().map_or(0, |s| s.count);
    for mut text in &mut hud {
        **text = match view.as_deref() {
            Some(v) => format!(
                "{} particles | {path}\n{fps:.1} fps | {ms:.2} ms/frame | frame {steps} | \
                 publisher frame {}",
                v.particles.load(std::sync::atomic::Ordering::Acquire),
                v.publisher_frame.load(std::sync::atomic::Ordering::Acquire)
            ),
            None => format!(
                "{count} particles | {path}\n{fps:.1} fps | {ms:.2} ms/frame | step {steps}"
            ),
        };
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
