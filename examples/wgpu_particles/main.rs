//! Particles simulated by CUDA in memory wgpu draws from, with no copy: cuvk's wgpu integration
//! as a wgpu user copies it. `WgpuBridge` opens the wgpu device on the CUDA GPU,
//! `create_buffer` makes buffers both see, `WgpuFramePacer` orders CUDA's step and wgpu's draw
//! on the GPU with K frames in flight. Without CUDA, a WGSL compute shader simulates instead.
//!
//!     cargo run --release --features wgpu --example wgpu_particles              # window, or headless
//!     cargo run --release --features wgpu --example wgpu_particles -- --headless --frames 300
//!     cargo run --release --features wgpu --example wgpu_particles -- --bench
//!
//! Options: --particles N (1000000), --frames N (300), --headless, --out DIR (out-wgpu),
//! --save-every K (0: last frame only), --size WxH (1280x720), --sim cuda|wgsl, --transfer
//! zero-copy|write-buffer (CUDA → host → Queue::write_buffer, what wgpu users do today),
//! --launch auto|inline|cuda (zero-copy: the CUDA kernel inside wgpu's command buffers where the
//! driver has VK_NVX_binary_import, or on a CUDA stream paced by WgpuFramePacer; auto: inline
//! where it can), --draw splat|points (compute splat resolved by a render pass, or points),
//! --frames-in-flight K (2..4, 3), --seed N, --exit-after N (window), --bench [--json FILE].

#[allow(dead_code)] // the native demo's engine: the benchmark's comparison rows
#[path = "../particles/engine.rs"]
mod engine;
mod scene;
mod window;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use cuvk::vulkan::{DeviceChoice, Validation};
use cuvk::wgpu::{wgpu, WgpuBridge, WgpuBridgeConfig, WgpuConfig, WgpuDevice};
use cuvk_dev::{demo, logger, sim::particles as sim};
use scene::{Draw, Mode, Renderer, Scene};

/// Bad command-line input: exit code 2.
#[derive(Debug)]
struct Usage(String);
impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Usage {}
fn usage(msg: impl Into<String>) -> anyhow::Error {
    Usage(msg.into()).into()
}

/// Where the zero-copy path's CUDA kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    /// Inside wgpu's queue where the driver can, else on a CUDA stream.
    Auto,
    /// Inside wgpu's command buffers (`VK_NVX_binary_import`); an error where it cannot.
    Inline,
    /// On a CUDA stream, ordered with wgpu by `WgpuFramePacer`.
    Cuda,
}

#[derive(Clone)]
pub struct Args {
    pub particles: usize,
    pub frames: u64,
    pub headless: bool,
    pub out: PathBuf,
    pub save_every: u64,
    pub size: (u32, u32),
    pub sim: Option<&'static str>,
    pub mode: Mode,
    pub launch: Launch,
    pub draw: Draw,
    pub k: u32,
    pub seed: u64,
    pub exit_after: Option<u64>,
    pub bench: bool,
    pub json: Option<PathBuf>,
}

fn parse() -> anyhow::Result<Args> {
    let mut a = Args {
        particles: 1_000_000,
        frames: 300,
        headless: false,
        out: PathBuf::from("out-wgpu"),
        save_every: 0,
        size: (1280, 720),
        sim: None,
        mode: Mode::ZeroCopy,
        launch: Launch::Auto,
        draw: Draw::Splat,
        k: 3,
        seed: 1,
        exit_after: None,
        bench: false,
        json: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| usage(format!("{arg} needs a value")))
        };
        let num = |v: String| {
            v.replace('_', "")
                .parse::<u64>()
                .map_err(|_| usage(format!("{arg}: '{v}' is not a whole number")))
        };
        match arg.as_str() {
            "--particles" => a.particles = num(value()?)? as usize,
            "--frames" => a.frames = num(value()?)?,
            "--headless" => a.headless = true,
            "--out" => a.out = PathBuf::from(value()?),
            "--save-every" => a.save_every = num(value()?)?,
            "--seed" => a.seed = num(value()?)?,
            "--exit-after" => a.exit_after = Some(num(value()?)?),
            "--bench" => a.bench = true,
            "--json" => a.json = Some(PathBuf::from(value()?)),
            "--frames-in-flight" => {
                a.k = num(value()?)? as u32;
                if !(2..=4).contains(&a.k) {
                    bail!(usage("--frames-in-flight must be 2, 3 or 4"));
                }
            }
            "--sim" => {
                a.sim = Some(match value()?.as_str() {
                    "cuda" => "cuda",
                    "wgsl" => "wgsl",
                    v => bail!(usage(format!("--sim must be cuda or wgsl, not '{v}'"))),
                })
            }
            "--launch" => {
                a.launch = match value()?.as_str() {
                    "auto" => Launch::Auto,
                    "inline" => Launch::Inline,
                    "cuda" => Launch::Cuda,
                    v => bail!(usage(format!(
                        "--launch must be auto, inline or cuda, not '{v}'"
                    ))),
                }
            }
            "--draw" => {
                a.draw = match value()?.as_str() {
                    "splat" => Draw::Splat,
                    "points" => Draw::Points,
                    v => bail!(usage(format!("--draw must be splat or points, not '{v}'"))),
                }
            }
            "--transfer" => {
                a.mode = match value()?.as_str() {
                    "zero-copy" => Mode::ZeroCopy,
                    "write-buffer" => Mode::WriteBuffer,
                    v => bail!(usage(format!(
                        "--transfer must be zero-copy or write-buffer, not '{v}'"
                    ))),
                }
            }
            "--size" => {
                let v = value()?;
                let (w, h) = v
                    .split_once('x')
                    .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
                    .filter(|&(w, h): &(u32, u32)| {
                        (1..=8192).contains(&w) && (1..=8192).contains(&h)
                    })
                    .ok_or_else(|| usage(format!("--size must look like 1280x720, not '{v}'")))?;
                a.size = (w, h);
            }
            "-h" | "--help" => bail!(usage(
                include_str!("main.rs")
                    .lines()
                    .take_while(|l| l.starts_with("//!"))
                    .map(|l| l.trim_start_matches("//!"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )),
            other => bail!(usage(format!("unknown argument '{other}' (try --help)"))),
        }
    }
    if a.particles == 0 || a.particles > u32::MAX as usize {
        bail!(usage("--particles must be between 1 and 4294967295"));
    }
    if a.frames == 0 {
        bail!(usage("--frames must be at least 1"));
    }
    Ok(a)
}

/// The wgpu device: paired with CUDA where there is CUDA (or `--sim cuda` demands it), else
/// a wgpu device alone and the WGSL simulation.
pub struct Devices {
    pub bridge: Option<WgpuBridge>,
    pub wgpu: WgpuDevice,
}

/// Validation: where the layer is installed, except for the benchmark (CUVK_VALIDATION=1 forces
/// it on).
fn validation(args: &Args) -> Validation {
    let default = if args.bench {
        Validation::Off
    } else {
        Validation::IfAvailable
    };
    default.or_from_env()
}

pub fn open(args: &mut Args) -> anyhow::Result<Devices> {
    let validation = validation(args);
    if args.sim != Some("wgsl") {
        match WgpuBridge::new(WgpuBridgeConfig {
            validation,
            ..Default::default()
        }) {
            Ok(b) => {
                args.mode = zero_copy_mode(args.mode, args.launch, &b)?;
                return Ok(Devices {
                    wgpu: b.wgpu().clone(),
                    bridge: Some(b),
                });
            }
            Err(e) if e.is_unavailable() && args.sim.is_none() => {
                println!("no CUDA GPU ({e}): simulating with the WGSL compute shader instead");
            }
            Err(e) => return Err(e).context("opening CUDA device 0 and its wgpu device"),
        }
    }
    args.mode = Mode::Wgsl;
    let wgpu = WgpuDevice::new(WgpuConfig {
        validation,
        device: DeviceChoice::First,
        ..Default::default()
    })?;
    Ok(Devices { bridge: None, wgpu })
}

/// The zero-copy path `launch` picks on `bridge`: the kernel inside wgpu's queue where the
/// driver has `VK_NVX_binary_import` (and `auto` or `inline` asks for it), else on a stream.
fn zero_copy_mode(mode: Mode, launch: Launch, bridge: &WgpuBridge) -> anyhow::Result<Mode> {
    if mode != Mode::ZeroCopy || launch == Launch::Cuda {
        return Ok(mode);
    }
    match cuvk::vulkan::cuda_kernels_supported(bridge.wgpu().vulkan()) {
        Ok(()) => Ok(Mode::Inline),
        Err(e) if launch == Launch::Inline => {
            Err(e).context("--launch inline needs VK_NVX_binary_import (NVIDIA drivers)")
        }
        Err(_) => Ok(Mode::ZeroCopy),
    }
}

fn check_memory(dev: &Devices, args: &Args) -> anyhow::Result<()> {
    let bytes = args.particles as u64 * 16;
    let max = dev.wgpu.device().limits().max_buffer_size;
    if bytes > max {
        bail!(usage(format!(
            "{} particles need a {} MiB buffer; the wgpu device allows {} MiB",
            args.particles,
            bytes >> 20,
            max >> 20
        )));
    }
    let slots = match args.mode {
        Mode::ZeroCopy | Mode::Inline => 2 * u64::from(args.k),
        _ => 4,
    };
    let heap = dev.wgpu.vulkan().memory_properties();
    let largest = heap.memory_heaps[..heap.memory_heap_count as usize]
        .iter()
        .map(|h| h.size)
        .max()
        .unwrap_or(0);
    if bytes * slots > largest {
        bail!(usage(format!(
            "{} particles need {} MiB of GPU memory; the largest heap has {} MiB",
            args.particles,
            (bytes * slots) >> 20,
            largest >> 20
        )));
    }
    Ok(())
}

/// Frame period statistics (ms) after `warmup` frames: mean, p50, p99.
pub fn stats(starts: &[Instant], warmup: usize) -> (f64, f64, f64) {
    let mut d: Vec<f64> = starts
        .windows(2)
        .skip(warmup)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1e3)
        .collect();
    if d.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let mean = d.iter().sum::<f64>() / d.len() as f64;
    d.sort_by(|a, b| a.total_cmp(b));
    let at = |p: f64| d[((d.len() - 1) as f64 * p).round() as usize];
    (mean, at(0.5), at(0.99))
}

/// An offscreen RGBA8 target and a buffer to read it back.
struct Offscreen {
    texture: wgpu::Texture,
    view: wgpu::TextureView,
    readback: wgpu::Buffer,
    row: u32,
}

impl Offscreen {
    fn new(device: &wgpu::Device, (w, h): (u32, u32)) -> Self {
        let texture = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("frame"),
            size: wgpu::Extent3d {
                width: w,
                height: h,
                depth_or_array_layers: 1,
            },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: wgpu::TextureFormat::Rgba8Unorm,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
            view_formats: &[],
        });
        let row = (w * 4).next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: u64::from(row * h),
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
            mapped_at_creation: false,
        });
        let view = texture.create_view(&Default::default());
        Self {
            texture,
            view,
            readback,
            row,
        }
    }

    /// Commands that copy the frame into the readback buffer.
    fn copy(&self, device: &wgpu::Device) -> wgpu::CommandEncoder {
        let mut enc = device.create_command_encoder(&Default::default());
        enc.copy_texture_to_buffer(
            self.texture.as_image_copy(),
            wgpu::TexelCopyBufferInfo {
                buffer: &self.readback,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(self.row),
                    rows_per_image: None,
                },
            },
            self.texture.size(),
        );
        enc
    }

    /// Waits for the copy and writes it as a PNG.
    fn save(&self, device: &wgpu::Device, path: &Path) -> anyhow::Result<()> {
        let slice = self.readback.slice(..);
        slice.map_async(wgpu::MapMode::Read, |r| {
            if let Err(e) = r {
                eprintln!("map failed: {e}");
            }
        });
        device.poll(wgpu::PollType::wait_indefinitely())?;
        let (w, h) = (self.texture.width(), self.texture.height());
        let rgba: Vec<u8> = {
            let mapped = slice.get_mapped_range()?;
            mapped
                .chunks(self.row as usize)
                .flat_map(|r| &r[..(w * 4) as usize])
                .copied()
                .collect()
        };
        self.readback.unmap();
        demo::write_png(path, w, h, &rgba)
    }
}

fn headless(args: &mut Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)
        .and_then(|_| std::fs::write(args.out.join(".probe"), b""))
        .and_then(|_| std::fs::remove_file(args.out.join(".probe")))
        .map_err(|e| usage(format!("--out {}: not writable: {e}", args.out.display())))?;
    let dev = open(args)?;
    check_memory(&dev, args)?;
    let device = dev.wgpu.device();
    println!(
        "device: {}; {} particles; {:?}, draw {:?}; {} frames in flight",
        dev.wgpu.vulkan().info().describe(),
        args.particles,
        args.mode,
        args.draw,
        args.k
    );
    let target = Offscreen::new(device, args.size);
    let renderer = Renderer::new(
        device,
        args.size,
        wgpu::TextureFormat::Rgba8Unorm,
        args.particles,
        args.draw,
    );
    let mut scene = Scene::new(
        dev.bridge.as_ref(),
        device,
        args.mode,
        args.particles,
        args.seed,
        args.k,
        renderer,
    )?;
    let mut starts = Vec::with_capacity(args.frames as usize);
    let mut written = Vec::new();
    let t = Instant::now();
    for n in 1..=args.frames {
        starts.push(Instant::now());
        let save = n == args.frames || (args.save_every > 0 && n % args.save_every == 0);
        let copy = save.then(|| target.copy(device));
        scene.frame(device, dev.wgpu.queue(), &target.view, copy)?;
        if save {
            let path = args.out.join(format!("frame_{n:05}.png"));
            target.save(device, &path)?;
            written.push(path);
        }
    }
    scene.wait_idle(device)?;
    let secs = t.elapsed().as_secs_f64();
    let (mean, p50, p99) = stats(&starts, (args.frames as usize / 10).min(10));
    println!(
        "{} frames in {secs:.2} s ({:.1} fps incl. PNG writes); frame period mean {mean:.3} ms, p50 {p50:.3} ms, p99 {p99:.3} ms",
        args.frames,
        args.frames as f64 / secs
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
    drop(scene);
    check_validation(&dev.wgpu)
}

pub fn check_validation(w: &WgpuDevice) -> anyhow::Result<()> {
    let msgs = w.validation_messages();
    if !msgs.is_empty() {
        bail!(
            "{} Vulkan validation message(s), first: {}",
            msgs.len(),
            msgs[0]
        );
    }
    Ok(())
}

/// Zero-copy against CUDA → host → `Queue::write_buffer` in wgpu, and against cuvk's native
/// Vulkan demo (examples/particles, its zero-copy and pinned-staging paths) in the same run.
fn bench(args: &mut Args) -> anyhow::Result<()> {
    let dev = open(args)?;
    let Some(bridge) = dev.bridge.as_ref() else {
        bail!("--bench compares CUDA paths: it needs a CUDA GPU");
    };
    let frames = args.frames.max(120);
    let warmup = 20;
    println!(
        "device: {}; {frames} frames per row, K = {}",
        dev.wgpu.vulkan().info().describe(),
        args.k
    );
    println!("| particles | path                            | frame mean ms | frame p50 ms | frame p99 ms |");
    println!("|-----------|---------------------------------|---------------|--------------|--------------|");
    let mut rows = Vec::new();
    let mut row = |n: usize, name: &str, s: (f64, f64, f64)| {
        println!(
            "| {n:>9} | {name:<31} | {:>13.3} | {:>12.3} | {:>12.3} |",
            s.0, s.1, s.2
        );
        rows.push((n, name.to_string(), s));
    };
    let native = {
        let b = cuvk::Bridge::new(cuvk::BridgeConfig {
            validation: validation(args),
            ..Default::default()
        })?;
        demo::Devices {
            vk: b.vulkan().clone(),
            bridge: Some(b),
        }
    };
    let shader_dir = if Path::new("shaders/splat.spv").exists() {
        PathBuf::from("shaders")
    } else {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders"))
    };
    let shaders = engine::Shaders::load(&shader_dir)?;
    let device = dev.wgpu.device();
    for n in [1_000_000usize, 10_000_000] {
        let inline = cuvk::vulkan::cuda_kernels_supported(dev.wgpu.vulkan()).is_ok();
        for (name, mode, draw) in [
            ("wgpu, inline kernel (cuvk)", Mode::Inline, Draw::Splat),
            ("wgpu, zero-copy (cuvk)", Mode::ZeroCopy, Draw::Splat),
            (
                "wgpu, CUDA->host->write_buffer",
                Mode::WriteBuffer,
                Draw::Splat,
            ),
            (
                "wgpu, zero-copy, raster points",
                Mode::ZeroCopy,
                Draw::Points,
            ),
        ] {
            let a = Args {
                particles: n,
                mode,
                ..args.clone()
            };
            if check_memory(&dev, &a).is_err() {
                println!("| {n:>9} | {name:<31} | does not fit |");
                continue;
            }
            if mode == Mode::Inline && !inline {
                println!("| {n:>9} | {name:<31} | no VK_NVX_binary_import |");
                continue;
            }
            let target = Offscreen::new(device, args.size);
            let renderer =
                Renderer::new(device, args.size, wgpu::TextureFormat::Rgba8Unorm, n, draw);
            let mut scene = Scene::new(Some(bridge), device, mode, n, args.seed, args.k, renderer)?;
            let mut starts = Vec::new();
            for _ in 0..frames {
                starts.push(Instant::now());
                scene.frame(device, dev.wgpu.queue(), &target.view, None)?;
            }
            scene.wait_idle(device)?;
            starts.push(Instant::now());
            row(n, name, stats(&starts, warmup));
        }
        for (name, transfer, launch) in [
            (
                "native Vulkan, inline kernel",
                engine::Transfer::ZeroCopy,
                engine::Launch::Vulkan,
            ),
            (
                "native Vulkan, zero-copy",
                engine::Transfer::ZeroCopy,
                engine::Launch::Cuda,
            ),
            (
                "native Vulkan, pinned staging",
                engine::Transfer::Staging,
                engine::Launch::Cuda,
            ),
        ] {
            if launch == engine::Launch::Vulkan && !inline {
                println!("| {n:>9} | {name:<31} | no VK_NVX_binary_import |");
                continue;
            }
            let opts = engine::Options {
                particles: n,
                seed: args.seed,
                width: args.size.0,
                height: args.size.1,
                sim: engine::SimKind::Cuda,
                launch,
                transfer,
                frames_in_flight: args.k,
                acquire: cuvk::AcquireWait::Gpu,
                shader_dir: shader_dir.clone(),
                opaque: false,
            };
            let mut e = engine::Engine::new(&native, &shaders, opts)?;
            let mut starts = Vec::new();
            for _ in 0..frames {
                starts.push(Instant::now());
                e.frame(demo::Target::Offscreen(None))?;
            }
            e.wait_idle()?;
            starts.push(Instant::now());
            row(n, name, stats(&starts, warmup));
        }
    }
    let mean = |n: usize, prefix: &str| {
        rows.iter()
            .find(|r| r.0 == n && r.1.starts_with(prefix))
            .map(|r| r.2 .0)
    };
    for n in [1_000_000usize, 10_000_000] {
        if let (Some(z), Some(w), Some(v)) = (
            mean(n, "wgpu, zero"),
            mean(n, "wgpu, CUDA"),
            mean(n, "native Vulkan, zero"),
        ) {
            println!(
                "{n} particles: zero-copy is {:.1}x faster than write_buffer in wgpu; the wgpu zero-copy frame costs {:.2}x the native Vulkan one",
                w / z,
                z / v
            );
        }
        if let (Some(wi), Some(vi)) = (mean(n, "wgpu, inline"), mean(n, "native Vulkan, inline")) {
            println!(
                "{n} particles: the wgpu inline-kernel frame costs {:.2}x the native Vulkan inline one",
                wi / vi
            );
        }
    }
    if let Some(path) = &args.json {
        let rows: Vec<String> = rows
            .iter()
            .map(|(n, name, s)| {
                format!(
                    "{{\"particles\":{n},\"path\":\"{name}\",\"frame_mean_ms\":{:.4},\"frame_p50_ms\":{:.4},\"frame_p99_ms\":{:.4}}}",
                    s.0, s.1, s.2
                )
            })
            .collect();
        std::fs::write(
            path,
            format!(
                "{{\"device\":\"{}\",\"frames\":{frames},\"rows\":[{}]}}\n",
                dev.wgpu.vulkan().info().name,
                rows.join(",")
            ),
        )?;
        println!("wrote {}", path.display());
    }
    drop(native);
    check_validation(&dev.wgpu)
}

fn run() -> anyhow::Result<()> {
    let mut args = parse()?;
    if args.bench {
        return bench(&mut args);
    }
    let display = std::env::var_os("DISPLAY").is_some_and(|d| !d.is_empty());
    if !args.headless && !display {
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
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<Usage>() => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
