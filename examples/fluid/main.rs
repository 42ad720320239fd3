//! Fluid demo: a 2D stable-fluids simulation whose CUDA kernels write velocity and dye into
//! images through surfaces — inside the Vulkan queue through image handles where the driver
//! can, else on a CUDA stream on shared images — drawn by Vulkan sampling the dye image (a
//! Vulkan compute fallback simulates where there is no CUDA). Mouse drags stir it.
//!
//!     cargo run --release --example fluid                   # window, or headless without a display
//!     cargo run --release --example fluid -- --headless --frames 240 --out out
//!     cargo run --release --example fluid -- --bench
//!
//! Options: --size N (grid N×N, 512), --window WxH (window or PNG size, 800x800), --frames N
//! (240), --out DIR (out), --save-every K (0: last frame only), --headless, --sim cuda|vulkan,
//! --launch auto|inline|cuda (where fluid.cu runs: inside the Vulkan queue through image
//! handles, VK_NVX_binary_import + VK_NVX_image_view_handle, or on a CUDA stream; auto: inline
//! where the device can), --seed N, --iterations N (Jacobi, even, 40), --frames-in-flight K
//! (2..4, 3), --shaders DIR, --bench (frame times at 512², 1024², 2048²), --dump FILE (fields
//! after the last frame; with --bench: the table as JSON), --exit-after N, --resize-at F:WxH.
//! Window: drag to stir, Space pauses, E toggles the jets, R clears, Esc quits.

#[path = "../common/window.rs"]
mod driver;
mod engine;
mod pipeline;
mod window;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use cuvk::vulkan::Validation;
// The fluid's parameters, scripted jets and CPU reference step, shared with the tests
// (dev/src/sim/fluid.rs).
use cuvk_dev::{demo, logger, sim::fluid as sim};
use demo::{
    check_out_dir, check_validation, exit_code, has_display, percentile, usage, write_bench_json,
    Devices, FrameTimes, Target,
};
use engine::{Engine, Launch, Options, Shaders, SimKind};

pub struct Args {
    pub opts: Options,
    pub sim_forced: bool,
    pub frames: u64,
    pub out: PathBuf,
    pub save_every: u64,
    pub headless: bool,
    pub bench: bool,
    pub dump: Option<PathBuf>,
    pub exit_after: Option<u64>,
    /// Window: after this many frames, ask the window for another size (exercises resizing).
    pub resize_at: Option<(u64, u32, u32)>,
}

fn parse_size(v: &str, what: &str) -> anyhow::Result<(u32, u32)> {
    let bad = || usage(format!("{what} must look like 800x600, not '{v}'"));
    let (w, h) = v.split_once('x').ok_or_else(bad)?;
    let (w, h): (u32, u32) = (w.parse().map_err(|_| bad())?, h.parse().map_err(|_| bad())?);
    if w == 0 || h == 0 || w > 8192 || h > 8192 {
        bail!(usage(format!(
            "{what} must be between 1x1 and 8192x8192, not {v}"
        )));
    }
    Ok((w, h))
}

fn parse() -> anyhow::Result<Args> {
    let default_shaders = if Path::new("shaders/fluid_draw.spv").exists() {
        PathBuf::from("shaders")
    } else {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders"))
    };
    let mut a = Args {
        opts: Options {
            grid: 512,
            width: 800,
            height: 800,
            sim: SimKind::Cuda,
            launch: Launch::Auto,
            seed: 1,
            frames_in_flight: 3,
            iterations: sim::DEFAULT_ITERATIONS,
            shader_dir: default_shaders,
        },
        sim_forced: false,
        frames: 240,
        out: PathBuf::from("out"),
        save_every: 0,
        headless: false,
        bench: false,
        dump: None,
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
            "--size" => {
                let n = num(value(&arg, &mut it)?, &arg)?;
                if !(16..=8192).contains(&n) {
                    bail!(usage(format!(
                        "--size (the grid's side) must be 16 to 8192, not {n}"
                    )));
                }
                a.opts.grid = n as u32;
            }
            "--window" => {
                (a.opts.width, a.opts.height) = parse_size(&value(&arg, &mut it)?, "--window")?
            }
            "--frames" => a.frames = num(value(&arg, &mut it)?, &arg)?,
            "--out" => a.out = PathBuf::from(value(&arg, &mut it)?),
            "--save-every" => a.save_every = num(value(&arg, &mut it)?, &arg)?,
            "--headless" => a.headless = true,
            "--bench" => a.bench = true,
            "--seed" => a.opts.seed = num(value(&arg, &mut it)?, &arg)?,
            "--shaders" => a.opts.shader_dir = PathBuf::from(value(&arg, &mut it)?),
            "--dump" => a.dump = Some(PathBuf::from(value(&arg, &mut it)?)),
            "--exit-after" => a.exit_after = Some(num(value(&arg, &mut it)?, &arg)?),
            "--iterations" => {
                let n = num(value(&arg, &mut it)?, &arg)?;
                if n == 0 || n % 2 != 0 || n > 1000 {
                    bail!(usage(format!(
                        "--iterations must be even, 2 to 1000 (the solve ends where it began), not {n}"
                    )));
                }
                a.opts.iterations = n as u32;
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
            "--launch" => {
                a.opts.launch = match value(&arg, &mut it)?.as_str() {
                    "auto" => Launch::Auto,
                    "inline" => Launch::Inline,
                    "cuda" => Launch::Cuda,
                    v => bail!(usage(format!(
                        "--launch must be auto, inline or cuda, not '{v}'"
                    ))),
                }
            }
            "--sim" => {
                a.sim_forced = true;
                a.opts.sim = match value(&arg, &mut it)?.as_str() {
                    "cuda" => SimKind::Cuda,
                    "vulkan" => SimKind::Vulkan,
                    v => bail!(usage(format!("--sim must be cuda or vulkan, not '{v}'"))),
                }
            }
            "-h" | "--help" => bail!(usage(
                include_str!("main.rs")
                    .lines()
                    .skip(5)
                    .take_while(|l| l.starts_with("//!"))
                    .map(|l| l.trim_start_matches("//!"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )),
            other => bail!(usage(format!("unknown argument '{other}' (try --help)"))),
        }
    }
    if a.frames == 0 {
        bail!(usage("--frames must be at least 1"));
    }
    if a.opts.sim == SimKind::Vulkan && a.opts.launch != Launch::Auto {
        bail!(usage(format!(
            "--launch {} says where fluid.cu's kernels run, and --sim vulkan runs none (drop one)",
            a.opts.launch.name()
        )));
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
    // A benchmark runs without the validation layer (it costs CPU time per call) unless
    // CUVK_VALIDATION=1 asks for it.
    let default = if args.bench {
        Validation::Off
    } else {
        Validation::IfAvailable
    };
    let validation = default.or_from_env();
    let cuda = args.opts.sim == SimKind::Cuda;
    let launch = args.opts.launch;
    // --launch inline or cuda asks for CUDA as --sim cuda does; without a CUDA GPU that is
    // bad input (exit 2), not a fallback.
    let dev = match demo::open_devices(
        validation,
        cuda,
        args.sim_forced || launch != Launch::Auto,
        "the Vulkan compute shaders",
        instance_ext,
        device_ext,
    ) {
        Err(e)
            if launch != Launch::Auto
                && e.downcast_ref::<cuvk::Error>()
                    .is_some_and(|e| e.is_unavailable()) =>
        {
            bail!(usage(format!(
                "--launch {}: {}, and there is no CUDA GPU here: {e:#}",
                launch.name(),
                launch_needs(launch)
            )))
        }
        other => other?,
    };
    let why = choose_sim(&dev, &mut args.opts)?;
    println!("launch: {why}");
    Ok(dev)
}

/// What each `--launch` needs, for the messages that refuse it.
fn launch_needs(launch: Launch) -> &'static str {
    match launch {
        Launch::Inline => {
            "fluid.cu runs inside the Vulkan queue only with a CUDA device (NVRTC compiles it) \
             whose Vulkan driver has VK_NVX_binary_import and VK_NVX_image_view_handle"
        }
        Launch::Cuda | Launch::Auto => "fluid.cu runs on a CUDA stream only with a CUDA device",
    }
}

/// Whether fluid.cu can run inside `dev`'s Vulkan queue through image handles, or why not.
pub fn inline_support(dev: &Devices) -> Result<(), String> {
    if dev.bridge.is_none() {
        return Err("no CUDA device (NVRTC compiles fluid.cu for it)".into());
    }
    cuvk::vulkan::cuda_kernels_supported(&dev.vk)
        .and_then(|()| cuvk::vulkan::image_handles_supported(&dev.vk))
        .map_err(|e| e.to_string())
}

/// Resolves `--sim` and `--launch` against the devices: sets `opts.sim` to the path that will
/// run and returns it with the reason, for the log (`launch: ...`). Refuses `--launch inline`
/// where the device cannot (bad input: exit 2).
pub fn choose_sim(dev: &Devices, opts: &mut Options) -> anyhow::Result<String> {
    if opts.sim == SimKind::Vulkan {
        return Ok("none, the Vulkan compute shaders simulate (--sim vulkan)".into());
    }
    if dev.bridge.is_none() {
        opts.sim = SimKind::Vulkan;
        return Ok("none, the Vulkan compute shaders simulate (no CUDA GPU)".into());
    }
    let inline = inline_support(dev);
    let (sim, why) = match (opts.launch, inline) {
        (Launch::Auto | Launch::Inline, Ok(())) => (
            SimKind::Inline,
            "inline (VK_NVX_binary_import + VK_NVX_image_view_handle)".to_string(),
        ),
        (Launch::Inline, Err(e)) => bail!(usage(format!(
            "--launch inline: {}: {e}",
            launch_needs(Launch::Inline)
        ))),
        (Launch::Auto, Err(e)) => (
            SimKind::Cuda,
            format!("cuda (a CUDA stream and the pacer's semaphores; not inline: {e})"),
        ),
        (Launch::Cuda, _) => (
            SimKind::Cuda,
            "cuda (a CUDA stream and the pacer's semaphores: --launch cuda)".to_string(),
        ),
    };
    opts.sim = sim;
    Ok(why)
}

/// Refuses grids the GPU cannot hold, before allocating anything.
pub fn check_memory(dev: &Devices, opts: &Options) -> anyhow::Result<()> {
    // SAFETY: valid instance and physical device.
    let limits = unsafe {
        dev.vk
            .instance()
            .get_physical_device_properties(dev.vk.physical_device())
    }
    .limits;
    if opts.grid > limits.max_image_dimension2_d {
        bail!(usage(format!(
            "--size {}: {} makes 2D images of at most {} texels a side (maxImageDimension2D)",
            opts.grid,
            dev.vk.info().name,
            limits.max_image_dimension2_d
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
    if let (Some(b), SimKind::Cuda | SimKind::Inline) = (&dev.bridge, opts.sim) {
        b.cuda().bind_to_thread()?;
        have = have.min(cuvk::cudarc::driver::result::mem_get_info()?.0 as u64);
    }
    if need > have {
        bail!(usage(format!(
            "a {0}×{0} grid needs {1} MiB of GPU memory (velocity ×2, pressure ×2, scratch, dye ×{2}); {3} has {4} MiB available",
            opts.grid,
            need >> 20,
            opts.frames_in_flight,
            dev.vk.info().name,
            have >> 20
        )));
    }
    Ok(())
}

/// p50 and p99 of frame (GPU frame period), sim, draw and wait times, and the mean frame
/// period, skipping `warmup` frames.
fn summary(engine: &Engine, warmup: usize) -> ([(f64, f64); 4], f64) {
    let all = engine.frame_times();
    let t = &all[warmup.min(all.len())..];
    let col = |f: fn(&FrameTimes) -> f64| {
        let mut v: Vec<f64> = t.iter().map(f).collect();
        (percentile(&mut v, 0.5), percentile(&mut v, 0.99))
    };
    let mean = t.iter().map(|f| f.frame).sum::<f64>() / t.len().max(1) as f64;
    (
        [
            col(|x| x.frame),
            col(|x| x.sim),
            col(|x| x.draw),
            col(|x| x.wait),
        ],
        mean,
    )
}

fn headless(args: &mut Args) -> anyhow::Result<()> {
    check_out_dir(&args.out)?;
    let shaders = Shaders::load(&args.opts.shader_dir)?;
    let dev = open_devices(args, vec![], vec![])?;
    check_memory(&dev, &args.opts)?;
    println!(
        "device: {}; grid {}×{}; output {}x{}; {} Jacobi iterations; {} frames in flight",
        dev.vk.info().describe(),
        args.opts.grid,
        args.opts.grid,
        args.opts.width,
        args.opts.height,
        args.opts.iterations,
        args.opts.frames_in_flight
    );
    let mut engine = Engine::new(&dev, &shaders, args.opts.clone())?;
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
    let ([f, s, d, w], mean) = summary(&engine, (args.frames as usize / 10).min(10));
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
        let bytes = engine.dump()?;
        std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))?;
        println!(
            "wrote the fields after frame {} to {}",
            args.frames,
            path.display()
        );
    }
    drop(engine);
    check_validation(&dev)
}

fn bench(args: &mut Args) -> anyhow::Result<()> {
    let shaders = Shaders::load(&args.opts.shader_dir)?;
    let dev = open_devices(args, vec![], vec![])?;
    let has_cuda = dev.bridge.is_some();
    let has_inline = inline_support(&dev).is_ok();
    let frames = args.frames.max(60);
    let warmup = 20;
    println!("device: {}", dev.vk.info().describe());
    println!(
        "{frames} frames per row, the first {warmup} not counted; output {}x{}; {} Jacobi iterations; {} frames in flight",
        args.opts.width, args.opts.height, args.opts.iterations, args.opts.frames_in_flight
    );
    println!("| grid      | simulation            | frame mean ms | frame p50 ms | frame p99 ms | sim p50 ms | draw p50 ms |");
    println!("|-----------|-----------------------|---------------|--------------|--------------|------------|-------------|");
    let mut json = Vec::new();
    for n in [512u32, 1024, 2048] {
        let mut modes = vec![("all-Vulkan", SimKind::Vulkan)];
        if has_cuda {
            modes.push(("CUDA + shared images", SimKind::Cuda));
        }
        if has_inline {
            modes.push(("CUDA inline in Vulkan", SimKind::Inline));
        }
        for (name, sim) in modes {
            let opts = Options {
                grid: n,
                sim,
                ..args.opts.clone()
            };
            let grid = format!("{n}²");
            if check_memory(&dev, &opts).is_err() {
                println!("| {grid:<9} | {name:<21} | does not fit in GPU memory |");
                continue;
            }
            let mut engine = Engine::new(&dev, &shaders, opts)?;
            for _ in 0..frames {
                engine.frame(Target::Offscreen(None))?;
            }
            engine.wait_idle()?;
            let ([f, s, d, _], mean) = summary(&engine, warmup);
            println!(
                "| {grid:<9} | {name:<21} | {mean:>13.3} | {:>12.3} | {:>12.3} | {:>10.3} | {:>11.3} |",
                f.0, f.1, s.0, d.0
            );
            json.push(format!("{{\"grid\":{n},\"simulation\":\"{name}\",\"frame_mean_ms\":{mean:.4},\"frame_p50_ms\":{:.4},\"frame_p99_ms\":{:.4},\"sim_p50_ms\":{:.4},\"draw_p50_ms\":{:.4}}}", f.0, f.1, s.0, d.0));
        }
    }
    if let Some(path) = &args.dump {
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
    exit_code(run())
}
