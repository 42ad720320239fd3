//! Particle demo: two disc galaxies colliding, N particles simulated by CUDA (or a Vulkan
//! compute shader where there is no CUDA) in shared memory and drawn by Vulkan from that same
//! memory (HDR splat, glow, tone map, HUD), frames ordered on the GPU.
//!
//!     cargo run --release --example particles                   # window, or headless without a display
//!     cargo run --release --example particles -- --headless --frames 450 --out out
//!     cargo run --release --example particles -- --bench
//!
//! Options: --particles N (1000000), --frames N (450), --out DIR (out), --save-every K (0: last
//! frame only), --headless, --sim cuda|vulkan, --launch auto|inline|cuda (where the CUDA
//! kernel runs: inside the Vulkan queue via VK_NVX_binary_import, or on a CUDA stream; auto
//! picks the Vulkan queue where the driver has it), --transfer zero-copy|staging, --seed N,
//! --size WxH (1280x720), --frames-in-flight K (2..4, 3), --hud on|off (on: particle count,
//! simulation path, fps and frame-time percentiles drawn in the picture), --shaders DIR,
//! --bench, --dump-positions FILE, --exit-after N (window: close after N frames),
//! --resize-at F:WxH (window: request a new size after F frames), --acquire gpu|host (CUDA
//! path: where CUDA waits for Vulkan's release of a frame, on its stream or on the host).
//! --gpus N: several GPUs (and nodes), one process each, drawing one picture through NCCL
//! (sort-last rendering; sortlast.rs has its options and how torchrun / mpirun start it).
//! --serve NAME: draw what a simulation in another process writes (serve.rs; the producer is
//! examples/ipc_producer.rs or Python).
//! The window: drag turns the camera (stopping its orbit; O resumes it), wheel zooms, H toggles
//! the HUD, Space pauses, R restarts the collision, Esc quits.

#[path = "../common/window.rs"]
mod driver;
mod engine;
mod fanout;
mod serve;
mod sortlast;
mod window;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use cuvk::vulkan::Validation;
// The simulation's parameters, initial state, CPU reference and camera, shared with the tests
// (dev/src/sim/particles.rs).
use cuvk_dev::{demo, logger, sim::particles as sim};
use demo::{
    check_out_dir, check_validation, exit_code, has_display, percentile, usage, write_bench_json,
    Devices, FrameTimes, Target,
};
use engine::{Engine, Launch, Options, Shaders, SimKind, Transfer};

pub struct Args {
    pub opts: Options,
    pub sim_forced: bool,
    pub frames: u64,
    /// Whether --particles / --frames were given (a CPU device gets smaller defaults).
    pub particles_given: bool,
    pub frames_given: bool,
    pub out: PathBuf,
    pub save_every: u64,
    pub headless: bool,
    pub bench: bool,
    pub dump: Option<PathBuf>,
    /// Draw the HUD (particle count, simulation path, fps, frame-time percentiles).
    pub hud: bool,
    pub exit_after: Option<u64>,
    /// Window: after this many frames, ask the window for another size (exercises resizing).
    pub resize_at: Option<(u64, u32, u32)>,
}

fn parse() -> anyhow::Result<Args> {
    let default_shaders = if Path::new("shaders/splat.spv").exists() {
        PathBuf::from("shaders")
    } else {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders"))
    };
    let mut a = Args {
        opts: Options {
            particles: 1_000_000,
            seed: 1,
            width: 1280,
            height: 720,
            sim: SimKind::Cuda,
            launch: Launch::Auto,
            transfer: Transfer::ZeroCopy,
            frames_in_flight: 3,
            acquire: cuvk::AcquireWait::Gpu,
            shader_dir: default_shaders,
            opaque: false,
        },
        sim_forced: false,
        frames: 450,
        particles_given: false,
        frames_given: false,
        out: PathBuf::from("out"),
        save_every: 0,
        headless: false,
        bench: false,
        dump: None,
        hud: true,
        exit_after: None,
        resize_at: None,
    };
    let mut it = std::env::args().skip(1);
    let value = |name: &str, it: &mut dyn Iterator<Item = String>| {
        it.next()
            .ok_or_else(|| usage(format!("{name} needs a value")))
    };
    while let Some(arg) = it.next() {
        let num = |v: String, name: &str| {
            v.replace('_', "")
                .parse::<u64>()
                .map_err(|_| usage(format!("{name}: '{v}' is not a whole number")))
        };
        match arg.as_str() {
            "--particles" => {
                a.opts.particles = num(value(&arg, &mut it)?, &arg)? as usize;
                a.particles_given = true;
            }
            "--frames" => {
                a.frames = num(value(&arg, &mut it)?, &arg)?;
                a.frames_given = true;
            }
            "--out" => a.out = PathBuf::from(value(&arg, &mut it)?),
            "--save-every" => a.save_every = num(value(&arg, &mut it)?, &arg)?,
            "--headless" => a.headless = true,
            "--bench" => a.bench = true,
            "--seed" => a.opts.seed = num(value(&arg, &mut it)?, &arg)?,
            "--shaders" => a.opts.shader_dir = PathBuf::from(value(&arg, &mut it)?),
            "--dump-positions" => a.dump = Some(PathBuf::from(value(&arg, &mut it)?)),
            "--exit-after" => a.exit_after = Some(num(value(&arg, &mut it)?, &arg)?),
            "--hud" => {
                a.hud = match value(&arg, &mut it)?.as_str() {
                    "on" => true,
                    "off" => false,
                    v => bail!(usage(format!("--hud must be on or off, not '{v}'"))),
                }
            }
            "--resize-at" => {
                // FRAME:WxH, e.g. 40:800x500
                let v = value(&arg, &mut it)?;
                let parsed = v.split_once(':').and_then(|(f, s)| {
                    let (w, h) = s.split_once('x')?;
                    Some((f.parse().ok()?, w.parse().ok()?, h.parse().ok()?))
                });
                a.resize_at = Some(parsed.ok_or_else(|| {
                    usage(format!("--resize-at must look like 40:800x500, not '{v}'"))
                })?);
            }
            "--frames-in-flight" => {
                let k = num(value(&arg, &mut it)?, &arg)?;
                if !(2..=4).contains(&k) {
                    bail!(usage(format!(
                        "--frames-in-flight must be 2, 3 or 4, not {k}"
                    )));
                }
                a.opts.frames_in_flight = k as u32;
            }
            "--composite" => {
                a.opts.opaque = match value(&arg, &mut it)?.as_str() {
                    "add" => false,
                    "depth" => true,
                    v => bail!(usage(format!(
                        "--composite must be add or depth, not '{v}'"
                    ))),
                };
            }
            "--acquire" => {
                a.opts.acquire = match value(&arg, &mut it)?.as_str() {
                    "gpu" => cuvk::AcquireWait::Gpu,
                    "host" => cuvk::AcquireWait::Host,
                    v => bail!(usage(format!("--acquire must be gpu or host, not '{v}'"))),
                };
            }
            "--launch" => {
                a.opts.launch = match value(&arg, &mut it)?.as_str() {
                    "auto" => Launch::Auto,
                    // One name for CUDA kernels inside Vulkan queues across the demos: inline
                    // (`vulkan`, 0.2's name, still accepted).
                    "inline" | "vulkan" => Launch::Vulkan,
                    "cuda" => Launch::Cuda,
                    v => bail!(usage(format!(
                        "--launch must be auto, inline or cuda, not '{v}'"
                    ))),
                };
            }
            "--sim" => {
                a.sim_forced = true;
                a.opts.sim = match value(&arg, &mut it)?.as_str() {
                    "cuda" => SimKind::Cuda,
                    "vulkan" => SimKind::Vulkan,
                    v => bail!(usage(format!("--sim must be cuda or vulkan, not '{v}'"))),
                }
            }
            "--transfer" => {
                a.opts.transfer = match value(&arg, &mut it)?.as_str() {
                    "zero-copy" => Transfer::ZeroCopy,
                    "staging" => Transfer::Staging,
                    v => bail!(usage(format!(
                        "--transfer must be zero-copy or staging, not '{v}'"
                    ))),
                }
            }
            "--size" => {
                let v = value(&arg, &mut it)?;
                let (w, h) = v
                    .split_once('x')
                    .ok_or_else(|| usage(format!("--size must look like 1280x720, not '{v}'")))?;
                a.opts.width = num(w.into(), "--size width")? as u32;
                a.opts.height = num(h.into(), "--size height")? as u32;
                if a.opts.width == 0
                    || a.opts.height == 0
                    || a.opts.width > 8192
                    || a.opts.height > 8192
                {
                    bail!(usage(format!(
                        "--size must be between 1x1 and 8192x8192, not {v}"
                    )));
                }
            }
            "-h" | "--help" => bail!(usage(
                include_str!("main.rs")
                    .lines()
                    .skip(3)
                    .take_while(|l| l.starts_with("//!"))
                    .map(|l| l.trim_start_matches("//!"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )),
            other => bail!(usage(format!("unknown argument '{other}' (try --help)"))),
        }
    }
    if a.opts.particles == 0 {
        bail!(usage("--particles must be at least 1"));
    }
    if a.opts.particles > u32::MAX as usize {
        bail!(usage(format!(
            "--particles {} is more than the shaders index (at most {})",
            a.opts.particles,
            u32::MAX
        )));
    }
    if a.frames == 0 {
        bail!(usage("--frames must be at least 1"));
    }
    Ok(a)
}

/// Opens the devices: the CUDA + Vulkan bridge where CUDA is there (or demanded), else Vulkan
/// alone, with the extensions a window needs.
pub fn open_devices(
    args: &mut Args,
    instance_ext: Vec<&'static std::ffi::CStr>,
    device_ext: Vec<&'static std::ffi::CStr>,
) -> anyhow::Result<Devices> {
    let validation = Validation::IfAvailable.or_from_env();
    let cuda = args.opts.sim == SimKind::Cuda;
    let dev = demo::open_devices(
        validation,
        cuda,
        args.sim_forced,
        "the Vulkan compute shader",
        instance_ext,
        device_ext,
    )?;
    if cuda && dev.bridge.is_none() {
        args.opts.sim = SimKind::Vulkan;
    }
    cpu_device_defaults(args, &dev);
    Ok(dev)
}

/// Particles and frames a CPU Vulkan device (lavapipe: 1.5 fps at 1M particles) draws in
/// seconds rather than minutes, where the user did not choose them.
const CPU_PARTICLES: usize = 100_000;
const CPU_FRAMES: u64 = 90;

/// On a CPU device (no GPU), smaller defaults for what the user did not set, said on screen.
fn cpu_device_defaults(args: &mut Args, dev: &Devices) {
    if dev.vk.info().device_type != cuvk::ash::vk::PhysicalDeviceType::CPU || args.bench {
        return;
    }
    let mut changed = Vec::new();
    if !args.particles_given {
        args.opts.particles = CPU_PARTICLES;
        changed.push(format!("{CPU_PARTICLES} particles"));
    }
    if !args.frames_given && args.headless {
        args.frames = CPU_FRAMES;
        changed.push(format!("{CPU_FRAMES} frames"));
    }
    if !changed.is_empty() {
        println!(
            "{} is a CPU Vulkan device (no GPU): {} by default, so the demo finishes in \
             seconds (--particles / --frames choose others)",
            dev.vk.info().name,
            changed.join(" and ")
        );
    }
}

/// Refuses particle counts the GPU cannot hold, before allocating anything.
fn check_memory(dev: &Devices, opts: &Options) -> anyhow::Result<()> {
    let buffer = opts.particles as u64 * 16;
    let range = dev.vk.info().max_storage_buffer_range;
    if buffer > range {
        bail!(usage(format!(
            "{} particles need a {} MiB position buffer; {} binds storage buffers of at most {} MiB (maxStorageBufferRange): at most {} particles",
            opts.particles,
            buffer >> 20,
            dev.vk.info().name,
            range >> 20,
            range / 16
        )));
    }
    let need = engine::bytes_needed(opts);
    let props = dev.vk.memory_properties();
    let heap = (0..props.memory_heap_count as usize)
        .filter(|&i| {
            props.memory_heaps[i]
                .flags
                .contains(cuvk::ash::vk::MemoryHeapFlags::DEVICE_LOCAL)
        })
        .map(|i| props.memory_heaps[i].size)
        .max()
        .unwrap_or(0);
    let mut have = heap;
    if let Some(b) = &dev.bridge {
        b.cuda().bind_to_thread()?;
        have = have.min(cuvk::cudarc::driver::result::mem_get_info()?.0 as u64);
    }
    if need > have {
        bail!(usage(format!(
            "{} particles need {} MiB of GPU memory ({} frames in flight × position + velocity); {} has {} MiB available",
            opts.particles,
            need >> 20,
            opts.frames_in_flight,
            dev.vk.info().name,
            have >> 20
        )));
    }
    Ok(())
}

/// p50 and p99 of frame (GPU frame period), sim, draw and wait times, skipping `warmup` frames.
fn summary(engine: &Engine, warmup: usize) -> [(f64, f64); 4] {
    let all = engine.frame_times();
    let t = &all[warmup.min(all.len())..];
    summary_of(t)
}

/// Mean GPU frame period after `warmup` frames: the throughput (pipelined frames arrive in
/// bursts, so the median period alone can mislead).
fn mean_frame(engine: &Engine, warmup: usize) -> f64 {
    let all = engine.frame_times();
    let t = &all[warmup.min(all.len())..];
    t.iter().map(|f| f.frame).sum::<f64>() / t.len().max(1) as f64
}

fn summary_of(t: &[FrameTimes]) -> [(f64, f64); 4] {
    let col = |f: fn(&FrameTimes) -> f64| {
        let mut v: Vec<f64> = t.iter().map(f).collect();
        (percentile(&mut v, 0.5), percentile(&mut v, 0.99))
    };
    [
        col(|x| x.frame),
        col(|x| x.sim),
        col(|x| x.draw),
        col(|x| x.wait),
    ]
}

fn headless(args: &mut Args) -> anyhow::Result<()> {
    check_out_dir(&args.out)?;
    let shaders = Shaders::load(&args.opts.shader_dir)?;
    let dev = open_devices(args, vec![], vec![])?;
    check_memory(&dev, &args.opts)?;
    println!(
        "device: {}; {} particles; transfer {:?}; {} frames in flight",
        dev.vk.info().describe(),
        args.opts.particles,
        args.opts.transfer,
        args.opts.frames_in_flight
    );
    let mut engine = Engine::new(&dev, &shaders, args.opts.clone())?;
    engine.hud = args.hud;
    println!("simulation: {}", engine.sim_path());
    let t = Instant::now();
    let mut written = Vec::new();
    for n in 1..=args.frames {
        let save = n == args.frames || (args.save_every > 0 && n % args.save_every == 0);
        let path = args.out.join(format!("frame_{n:05}.png"));
        engine.frame(Target::Offscreen(save.then_some(path.as_path())))?;
        if save {
            written.push(path);
        }
    }
    engine.wait_idle()?;
    let secs = t.elapsed().as_secs_f64();
    let warmup = (args.frames as usize / 10).min(10);
    let [f, s, d, w] = summary(&engine, warmup);
    let mean = mean_frame(&engine, warmup);
    println!(
        "{} frames in {secs:.2} s ({:.1} fps incl. PNG writes); GPU frame period mean {mean:.3} ms, p50 {:.3} ms p99 {:.3} ms; sim p50 {:.3} ms p99 {:.3}; draw p50 {:.3} ms p99 {:.3}; wait p50 {:.3} ms p99 {:.3}",
        args.frames,
        args.frames as f64 / secs,
        f.0, f.1, s.0, s.1, d.0, d.1, w.0, w.1
    );
    println!(
        "wrote {} PNG file(s) to {}: {}",
        written.len(),
        args.out.display(),
        written
            .last()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    if let Some(path) = &args.dump {
        let pos = engine.positions()?;
        std::fs::write(path, bytemuck::cast_slice::<[f32; 4], u8>(&pos))
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote final positions to {}", path.display());
    }
    drop(engine);
    check_validation(&dev)
}

fn bench(args: &mut Args) -> anyhow::Result<()> {
    use cuvk::AcquireWait;
    let shaders = Shaders::load(&args.opts.shader_dir)?;
    let dev = open_devices(args, vec![], vec![])?;
    let dev_args = args;
    let has_cuda = dev.bridge.is_some();
    let has_inline = cuvk::vulkan::cuda_kernels_supported(&dev.vk).is_ok();
    println!("device: {}", dev.vk.info().describe());
    println!("| particles | mode                      | frame mean ms | frame p50 ms | frame p99 ms | sim p50 ms | draw p50 ms |");
    println!("|-----------|---------------------------|---------------|--------------|--------------|------------|-------------|");
    let frames = dev_args.frames.max(60);
    let mut json = Vec::new();
    for n in [100_000usize, 1_000_000, 10_000_000] {
        let mut modes = vec![(
            "all-Vulkan",
            SimKind::Vulkan,
            Transfer::ZeroCopy,
            Launch::Cuda,
            AcquireWait::Gpu,
        )];
        if has_cuda {
            let (gpu, host) = (AcquireWait::Gpu, AcquireWait::Host);
            let cuda = [
                ("CUDA + zero-copy", Transfer::ZeroCopy, Launch::Cuda, gpu),
                (
                    "CUDA zero-copy, host wait",
                    Transfer::ZeroCopy,
                    Launch::Cuda,
                    host,
                ),
                ("CUDA + staging copy", Transfer::Staging, Launch::Cuda, gpu),
                (
                    "CUDA inline in Vulkan",
                    Transfer::ZeroCopy,
                    Launch::Vulkan,
                    gpu,
                ),
            ];
            for (name, transfer, launch, acquire) in cuda {
                if launch == Launch::Vulkan && !has_inline {
                    continue;
                }
                modes.push((name, SimKind::Cuda, transfer, launch, acquire));
            }
        }
        for (name, sim, transfer, launch, acquire) in modes {
            let opts = Options {
                particles: n,
                sim,
                transfer,
                launch,
                acquire,
                ..dev_args.opts.clone()
            };
            if check_memory(&dev, &opts).is_err() {
                println!("| {n:>9} | {name:<25} | does not fit in GPU memory |");
                continue;
            }
            let mut engine = Engine::new(&dev, &shaders, opts)?;
            for _ in 0..frames {
                engine.frame(Target::Offscreen(None))?;
            }
            engine.wait_idle()?;
            let [f, s, d, _] = summary(&engine, 20);
            let mean = mean_frame(&engine, 20);
            println!(
                "| {n:>9} | {name:<25} | {mean:>13.3} | {:>12.3} | {:>12.3} | {:>10.3} | {:>11.3} |",
                f.0, f.1, s.0, d.0
            );
            json.push(format!("{{\"particles\":{n},\"mode\":\"{name}\",\"frame_mean_ms\":{mean:.4},\"frame_p50_ms\":{:.4},\"frame_p99_ms\":{:.4},\"sim_p50_ms\":{:.4},\"draw_p50_ms\":{:.4}}}", f.0, f.1, s.0, d.0));
        }
    }
    if let Some(path) = &dev_args.dump {
        write_bench_json(path, &dev, frames, &json)?;
    }
    check_validation(&dev)
}

fn run() -> anyhow::Result<()> {
    let mut args = parse()?;
    if args.bench {
        return bench(&mut args);
    }
    if !args.headless && !has_display() {
        println!(
            "no display (DISPLAY unset): running headless, PNG frames to {}",
            args.out.display()
        );
        args.headless = true;
    }
    if args.headless {
        headless(&mut args)
    } else {
        window::run(args)
    }
}

fn main() -> ExitCode {
    logger::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--gpus") {
        // Several GPUs, one process each: sort-last rendering on NCCL (sortlast.rs).
        return sortlast::main(args, sortlast::default_shaders());
    }
    if args.iter().any(|a| a == "--publish") {
        // The simulation, served to any number of viewers (fanout.rs, cuvk::ipc::Publisher).
        return fanout::publish_main(args);
    }
    if args.iter().any(|a| a == "--view") {
        // One viewer of a published simulation (fanout.rs, cuvk::ipc::Subscriber).
        return fanout::view_main(args, sortlast::default_shaders());
    }
    if args.iter().any(|a| a == "--serve") {
        // A viewer of a simulation in another process (serve.rs, cuvk::ipc).
        return serve::main(args, sortlast::default_shaders());
    }
    exit_code(run())
}
