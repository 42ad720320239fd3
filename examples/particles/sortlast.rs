//! The particle demo's multi-GPU mode: sort-last rendering on NCCL.
//!
//!     cargo run --release --example particles -- --gpus 4 --particles 1000000000
//!     cargo run --release --example particles -- --gpus 4 --bench          # the 1/2/4-GPU table
//!     torchrun --nproc-per-node 4 target/release/examples/particles --gpus 4   # or mpirun, srun
//!
//! One process per GPU (rank). Each rank simulates its share of the galaxies' stars (every
//! rank integrates the two cores too, identically; rank 0 alone draws them) and splats them
//! into HDR counts in shared memory on its own GPU, with its own Vulkan device; an NCCL reduce
//! (integer sum: the picture equals the one-GPU picture exactly, whatever the order of the
//! sums) gathers every rank's counts into rank 0's shared buffer; rank 0 resolves, tone-maps
//! and writes PNGs. Per frame only the picture crosses GPUs (7.4 MB at 1280x720), whatever the
//! particle count. Every step is ordered on the GPU by the rank's `StreamOrder` (CUDA sim ->
//! Vulkan splat -> NCCL -> Vulkan resolve), no host wait per frame; the host waits only for
//! the frame two back, bounded: a rank that dies makes the others stop with an error.
//!
//! Started without RANK in the environment, the program is its own launcher: it makes the NCCL
//! id and starts one process per GPU (RANK, WORLD_SIZE, LOCAL_RANK, CUVK_NCCL_ID). Started by
//! torchrun / mpirun (RANK, WORLD_SIZE, LOCAL_RANK set), rank 0 hands the id to the others over
//! TCP at MASTER_ADDR:MASTER_PORT, so the same program runs across nodes.
//!
//! Options (besides --particles, --frames, --size, --seed, --out, --hud, --shaders):
//! --gpus N, --bench, --net (NCCL forced onto its network transport: NCCL_P2P_DISABLE=1
//! NCCL_SHM_DISABLE=1, a stand-in for several nodes), --save-every K, --rank-timeout SECS (10),
//! --fail-at RANK:FRAME (that rank aborts at that frame: the others must stop in time),
//! --composite add|depth (summed glow, or opaque spheres composited by depth),
//! --schedule reduce|scatter (depth: one ncclReduce, or reduce-scatter then gather).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::cuda::CudaDeviceChoice;
use cuvk::cudarc::driver::{sys, CudaEvent, CudaFunction, LaunchConfig, PushKernelArg};
use cuvk::nccl::{Communicator, CompositeSchedule, CompositeTo, DepthCompositor, NcclId, ReduceOp};
use cuvk::vulkan::{cmd_acquire_buffers, cmd_release_buffers, AsVkBuffer, Validation};
use cuvk::{Bridge, BridgeConfig, BufferUsage, FrameSubmit, SharedBuffer, StreamOrder};
use cuvk_dev::canvas::{self, Canvas};
use cuvk_dev::demo::{percentile, usage, write_png};
use cuvk_dev::sim::particles as sim;
use cuvk_dev::{CommandSlots, PrivateAllocator};

use crate::engine::Shaders;

/// Particles per chunk: a chunk's position buffer (16 bytes each) stays under the 4 GiB a
/// Vulkan storage buffer binds on NVIDIA (maxStorageBufferRange).
const CHUNK: usize = 128 << 20;
/// Frames the bench and the timings skip at the start.
const WARMUP: usize = 20;

#[derive(Clone, Debug)]
struct Config {
    gpus: usize,
    particles: usize,
    frames: u64,
    width: u32,
    height: u32,
    seed: u64,
    out: PathBuf,
    save_every: u64,
    hud: bool,
    shader_dir: PathBuf,
    bench: bool,
    net: bool,
    /// `--composite depth`: opaque spheres, the nearest sample per pixel (ncclMin), instead
    /// of the glow's summed counts.
    opaque: bool,
    /// `--schedule reduce|scatter`: how `--composite depth` combines the ranks' pictures.
    schedule: CompositeSchedule,
    rank_timeout: Duration,
    fail_at: Option<(usize, u64)>,
    /// Rank 0 writes its timings here (the bench's launcher reads them).
    report: Option<PathBuf>,
    /// The arguments as given (the launcher passes them on).
    args: Vec<String>,
}

fn parse(args: Vec<String>, shader_dir: PathBuf) -> anyhow::Result<Config> {
    let mut c = Config {
        gpus: 0,
        particles: 0,
        frames: 0,
        width: 1280,
        height: 720,
        seed: 1,
        out: PathBuf::from("out"),
        save_every: 0,
        hud: true,
        shader_dir,
        bench: false,
        net: false,
        opaque: false,
        schedule: CompositeSchedule::Reduce,
        rank_timeout: Duration::from_secs(10),
        fail_at: None,
        report: None,
        args: args.clone(),
    };
    let mut it = args.into_iter();
    let num = |v: Option<String>, name: &str| -> anyhow::Result<u64> {
        let v = v.ok_or_else(|| usage(format!("{name} needs a value")))?;
        v.replace('_', "")
            .parse::<u64>()
            .map_err(|_| usage(format!("{name}: '{v}' is not a whole number")))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--gpus" => c.gpus = num(it.next(), &arg)? as usize,
            "--particles" => c.particles = num(it.next(), &arg)? as usize,
            "--frames" => c.frames = num(it.next(), &arg)?,
            "--seed" => c.seed = num(it.next(), &arg)?,
            "--save-every" => c.save_every = num(it.next(), &arg)?,
            "--rank-timeout" => c.rank_timeout = Duration::from_secs(num(it.next(), &arg)?),
            "--out" => c.out = PathBuf::from(it.next().context("--out needs a value")?),
            "--shaders" => {
                c.shader_dir = PathBuf::from(it.next().context("--shaders needs a value")?)
            }
            "--report" => {
                c.report = Some(PathBuf::from(it.next().context("--report needs a value")?))
            }
            "--headless" => {}
            "--bench" => c.bench = true,
            "--net" => c.net = true,
            "--composite" => {
                c.opaque = match it.next().as_deref() {
                    Some("add") => false,
                    Some("depth") => true,
                    v => bail!(usage(format!(
                        "--composite must be add or depth, not {v:?}"
                    ))),
                }
            }
            "--schedule" => {
                c.schedule = match it.next().as_deref() {
                    Some("reduce") => CompositeSchedule::Reduce,
                    Some("scatter") => CompositeSchedule::ReduceScatter,
                    v => bail!(usage(format!(
                        "--schedule must be reduce or scatter, not {v:?}"
                    ))),
                }
            }
            "--hud" => {
                c.hud = match it.next().as_deref() {
                    Some("on") => true,
                    Some("off") => false,
                    v => bail!(usage(format!("--hud must be on or off, not {v:?}"))),
                }
            }
            "--size" => {
                let v = it.next().context("--size needs a value")?;
                let (w, h) = v
                    .split_once('x')
                    .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
                    .ok_or_else(|| usage(format!("--size must look like 1280x720, not '{v}'")))?;
                (c.width, c.height) = (w, h);
                if !(1..=8192).contains(&w) || !(1..=8192).contains(&h) {
                    bail!(usage(format!(
                        "--size must be between 1x1 and 8192x8192, not {v}"
                    )));
                }
            }
            "--fail-at" => {
                let v = it.next().context("--fail-at needs RANK:FRAME")?;
                c.fail_at = Some(
                    v.split_once(':')
                        .and_then(|(r, f)| Some((r.parse().ok()?, f.parse().ok()?)))
                        .ok_or_else(|| {
                            usage(format!("--fail-at must look like 1:30, not '{v}'"))
                        })?,
                );
            }
            other => bail!(usage(format!(
                "--gpus mode takes --gpus --particles --frames --size --seed --out --hud \
                 --shaders --save-every --bench --net --composite --schedule --rank-timeout --fail-at, not \
                 '{other}'"
            ))),
        }
    }
    if c.gpus == 0 {
        bail!(usage("--gpus must be at least 1"));
    }
    if c.particles == 0 {
        c.particles = if c.bench { 400_000_000 } else { 20_000_000 };
    }
    if c.frames == 0 {
        c.frames = if c.bench { 120 } else { 300 };
    }
    if c.particles < 2 + c.gpus || c.particles > u32::MAX as usize {
        bail!(usage(format!(
            "--particles must be between {} (the two cores and a star per GPU) and {}",
            2 + c.gpus,
            u32::MAX
        )));
    }
    Ok(c)
}

/// Entry point of `--gpus N`: the launcher, a rank started by it, or a rank started by
/// torchrun / mpirun.
pub fn main(args: Vec<String>, shader_dir: PathBuf) -> ExitCode {
    cuvk_dev::demo::exit_code(run(args, shader_dir))
}

fn run(args: Vec<String>, shader_dir: PathBuf) -> anyhow::Result<()> {
    let cfg = parse(args, shader_dir)?;
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<usize>().ok());
    match (env("RANK"), env("WORLD_SIZE")) {
        (Some(rank), Some(world)) => {
            if world != cfg.gpus {
                bail!(usage(format!(
                    "WORLD_SIZE is {world} but --gpus is {}",
                    cfg.gpus
                )));
            }
            let local = env("LOCAL_RANK").unwrap_or(rank);
            let id = nccl_id(rank, world)?;
            run_rank(&cfg, rank, world, local, id)
        }
        _ if cfg.bench => bench(&cfg),
        _ => {
            let code = launch(&cfg, cfg.gpus, cfg.net, &[])?;
            if code != 0 {
                bail!("a rank failed (see above)");
            }
            Ok(())
        }
    }
}

/// The NCCL id: from CUVK_NCCL_ID (our launcher), else rank 0 makes it and serves it over TCP
/// at MASTER_ADDR:MASTER_PORT to the other ranks (torchrun, mpirun, across nodes).
fn nccl_id(rank: usize, world: usize) -> anyhow::Result<NcclId> {
    if let Ok(hex) = std::env::var("CUVK_NCCL_ID") {
        return NcclId::from_hex(&hex).context("CUVK_NCCL_ID is not 256 hex digits");
    }
    let addr = std::env::var("MASTER_ADDR").unwrap_or_else(|_| "127.0.0.1".into());
    let port: u16 = std::env::var("MASTER_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .context("RANK is set but neither CUVK_NCCL_ID nor MASTER_PORT is")?;
    if rank == 0 {
        let id = NcclId::new()?;
        let listener = std::net::TcpListener::bind(("0.0.0.0", port))
            .with_context(|| format!("rank 0 serving the NCCL id on port {port}"))?;
        for _ in 1..world {
            let (mut peer, _) = listener.accept()?;
            peer.write_all(&id.to_bytes())?;
        }
        Ok(id)
    } else {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match std::net::TcpStream::connect((addr.as_str(), port)) {
                Ok(mut s) => {
                    let mut bytes = [0u8; 128];
                    s.read_exact(&mut bytes)?;
                    return Ok(NcclId::from_bytes(bytes));
                }
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(e) => {
                    return Err(e).context(format!("rank {rank}: reaching rank 0 at {addr}:{port}"))
                }
            }
        }
    }
}

/// Starts `gpus` ranks of this program with `extra` arguments; returns the first failing
/// rank's exit code (0: all succeeded). A rank that fails gives the others the rank timeout
/// and a little more to notice and stop by themselves; then they are killed.
fn launch(cfg: &Config, gpus: usize, net: bool, extra: &[String]) -> anyhow::Result<i32> {
    let have = cuvk::cuda::devices()?.len();
    if gpus > have {
        bail!(usage(format!(
            "--gpus {gpus}: this machine has {have} CUDA GPU(s)"
        )));
    }
    let id = NcclId::new()?.to_hex();
    let exe = std::env::current_exe()?;
    let mut args: Vec<String> = Vec::new();
    let mut it = cfg.args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            // Replaced by `extra` where the bench sets them.
            "--gpus" | "--particles" | "--frames" | "--report" => {
                it.next();
            }
            "--bench" | "--net" => {}
            _ => args.push(a.clone()),
        }
    }
    let mut children: Vec<Child> = Vec::new();
    for rank in 0..gpus {
        let mut cmd = Command::new(&exe);
        cmd.arg("--gpus")
            .arg(gpus.to_string())
            .args(&args)
            .args(extra);
        if !extra.iter().any(|a| a == "--particles") {
            cmd.arg("--particles").arg(cfg.particles.to_string());
        }
        if !extra.iter().any(|a| a == "--frames") {
            cmd.arg("--frames").arg(cfg.frames.to_string());
        }
        cmd.env("RANK", rank.to_string())
            .env("WORLD_SIZE", gpus.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("CUVK_NCCL_ID", &id)
            // NVLink SHARP needs multicast objects: never on shared machines, off unless asked.
            .env(
                "NCCL_NVLS_ENABLE",
                std::env::var("NCCL_NVLS_ENABLE").unwrap_or("0".into()),
            );
        if net {
            cmd.env("NCCL_P2P_DISABLE", "1")
                .env("NCCL_SHM_DISABLE", "1");
        }
        children.push(cmd.spawn().context("starting a rank")?);
    }
    let mut codes: Vec<Option<i32>> = vec![None; gpus];
    let mut failed_at: Option<Instant> = None;
    let grace = cfg.rank_timeout + Duration::from_secs(10);
    while codes.iter().any(Option::is_none) {
        for (rank, child) in children.iter_mut().enumerate() {
            if codes[rank].is_none() {
                if let Some(status) = child.try_wait()? {
                    let code = status.code().unwrap_or(128);
                    if code != 0 {
                        eprintln!("rank {rank} exited with {status}");
                        failed_at.get_or_insert_with(Instant::now);
                    }
                    codes[rank] = Some(code);
                }
            }
        }
        if failed_at.is_some_and(|t| t.elapsed() > grace) {
            for (rank, child) in children.iter_mut().enumerate() {
                if codes[rank].is_none() {
                    eprintln!("rank {rank} did not stop within {grace:?} of a failure: killed");
                    child.kill().ok();
                    child.wait().ok();
                    codes[rank] = Some(137);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(codes.into_iter().flatten().find(|&c| c != 0).unwrap_or(0))
}

/// One rank's particle buffers: per slot (frame parity), chunks of positions and velocities.
struct Particles {
    pos: [Vec<SharedBuffer<[f32; 4]>>; 2],
    vel: [Vec<SharedBuffer<[f32; 4]>>; 2],
    /// Each chunk's first index among this rank's particles, and its length.
    chunks: Vec<(usize, usize)>,
    /// The first star of this rank's share (its particles are the cores, then stars lo..).
    lo: usize,
}

fn grid(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(256).clamp(1, 1 << 20), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl Particles {
    fn new(bridge: &Bridge, total: usize, rank: usize, world: usize) -> anyhow::Result<Self> {
        let (lo, hi) = sim::rank_share(total, rank, world);
        let n = 2 + (hi - lo);
        let chunks: Vec<(usize, usize)> = (0..n)
            .step_by(CHUNK)
            .map(|s| (s, CHUNK.min(n - s)))
            .collect();
        let make = || -> anyhow::Result<Vec<SharedBuffer<[f32; 4]>>> {
            chunks
                .iter()
                .map(|&(_, len)| Ok(bridge.create_buffer(len, BufferUsage::STORAGE_BUFFER)?))
                .collect()
        };
        Ok(Self {
            pos: [make()?, make()?],
            vel: [make()?, make()?],
            chunks,
            lo,
        })
    }

    fn count(&self) -> usize {
        self.chunks.iter().map(|c| c.1).sum()
    }

    /// The global index of this rank's particle `i` (0, 1: the cores).
    fn global(&self, i: usize) -> u64 {
        if i < 2 {
            i as u64
        } else {
            (self.lo + i - 2) as u64
        }
    }

    /// Writes the initial state into slot `slot` on the GPU (counter-based: each particle
    /// depends on the seed and its global index only).
    fn init(
        &self,
        stream: &Arc<cuvk::cudarc::driver::CudaStream>,
        init: &CudaFunction,
        slot: usize,
        seed: u64,
    ) -> anyhow::Result<()> {
        let scene = sim::scene();
        for (c, &(start, len)) in self.chunks.iter().enumerate() {
            // Chunk 0 holds the cores (global 0, 1) and then the first stars (global lo..):
            // two runs of consecutive global indices.
            let runs: Vec<(usize, usize)> = if start == 0 {
                vec![(0, 2.min(len)), (2, len.saturating_sub(2))]
            } else {
                vec![(0, len)]
            };
            for (at, n) in runs.into_iter().filter(|r| r.1 > 0) {
                let (p, v) = (
                    self.pos[slot][c].cuda_ptr() + 16 * at as u64,
                    self.vel[slot][c].cuda_ptr() + 16 * at as u64,
                );
                let first = self.global(start + at);
                let n32 = n as u32;
                let mut b = stream.launch_builder(init);
                b.arg(&p)
                    .arg(&v)
                    .arg(&first)
                    .arg(&n32)
                    .arg(&seed)
                    .arg(&scene);
                // SAFETY: p and v hold at least n float4 from `at` (inside the chunk).
                unsafe { b.launch(grid(n)) }?;
            }
        }
        Ok(())
    }

    /// Enqueues one step, slot `prev` -> slot `next`, every chunk.
    fn step(
        &self,
        stream: &Arc<cuvk::cudarc::driver::CudaStream>,
        step: &CudaFunction,
        prev: usize,
        next: usize,
        params: &sim::Params,
    ) -> anyhow::Result<()> {
        let cores = self.pos[prev][0].cuda_ptr();
        for (c, &(start, len)) in self.chunks.iter().enumerate() {
            // The kernel compares the global index with the cores' (0, 1) only: chunk 0's
            // local indices are right for that, other chunks' start past them.
            let first = start as u64;
            let n = len as u32;
            let (pi, vi) = (self.pos[prev][c].cuda_ptr(), self.vel[prev][c].cuda_ptr());
            let (po, vo) = (self.pos[next][c].cuda_ptr(), self.vel[next][c].cuda_ptr());
            let mut b = stream.launch_builder(step);
            b.arg(&cores)
                .arg(&pi)
                .arg(&vi)
                .arg(&po)
                .arg(&vo)
                .arg(&first)
                .arg(&n)
                .arg(params);
            // SAFETY: every pointer is a live chunk of `len` float4 (cores: chunk 0, >= 2 of
            // them); `next` was acquired from Vulkan, `prev` is only read.
            unsafe { b.launch(grid(len)) }?;
        }
        Ok(())
    }
}

/// What rank 0 measures (milliseconds).
#[derive(Default)]
struct Timings {
    periods: Vec<f64>,
    sim: Vec<f64>,
    nccl: Vec<f64>,
}

fn run_rank(
    cfg: &Config,
    rank: usize,
    world: usize,
    local: usize,
    id: NcclId,
) -> anyhow::Result<()> {
    let bridge = Bridge::new(BridgeConfig {
        cuda_device: CudaDeviceChoice::Ordinal(local),
        validation: Validation::IfAvailable.or_from_env(),
        ..Default::default()
    })
    .with_context(|| format!("rank {rank}: opening GPU {local}"))?;
    let vk = bridge.vulkan().clone();
    let cuda = bridge.cuda().clone();
    let comm = Communicator::init(&cuda, &id, rank, world)
        .with_context(|| format!("rank {rank}: NCCL"))?;
    let stream = comm.stream().clone();
    let shaders = Shaders::load(&cfg.shader_dir)?;
    let module = cuvk::cuda::compile_module(&cuda, "particles.cu", &shaders.particles_cu)?;
    let (step, init) = (
        module.load_function("step_chunk")?,
        module.load_function("init_particles")?,
    );
    let particles = Particles::new(&bridge, cfg.particles, rank, world)?;
    let (w, h) = (cfg.width, cfg.height);
    // 8 bytes per pixel in both modes: the glow's two u32 counts (summed as one u64: the low
    // count never carries, it is at most the particle count), or the opaque mode's packed
    // sample (depth over colour, the minimum kept: `DepthCompositor`).
    let mut hdr: SharedBuffer<u64> =
        bridge.create_buffer((w * h) as usize, BufferUsage::STORAGE_BUFFER)?;
    // Every rank must composite pictures of one size: checked with the others before any frame.
    let compositor =
        DepthCompositor::new(&comm, w, h, cfg.rank_timeout)?.with_schedule(cfg.schedule);
    particles.init(&stream, &init, 1, cfg.seed)?;
    // Empty: no counts, or no sample (all ones).
    let empty: u32 = if cfg.opaque { u32::MAX } else { 0 };
    // SAFETY: the HDR buffer is `w h` u64 (`2 w h` u32) of live memory on this GPU.
    unsafe { sys::cuMemsetD32Async(hdr.cuda_ptr(), empty, 2 * hdr.len(), stream.cu_stream()) }
        .result()?;
    let order = StreamOrder::new(&bridge)?;
    let pos_marks = [order.marks(), order.marks()];
    let hdr_marks = order.marks();
    // The initial state and the cleared counts before anything else.
    order.cuda_release(&[&pos_marks[1], &hdr_marks], &stream)?;
    let alloc = PrivateAllocator::new(&vk)?;
    let draw: Vec<&dyn AsVkBuffer> = particles
        .pos
        .iter()
        .flatten()
        .map(|b| b as &dyn AsVkBuffer)
        .collect();
    // SAFETY: `hdr` outlives the canvas (dropped after it, below) and its commands (waited for).
    let mut canvas = unsafe { Canvas::with_hdr(&alloc, &shaders.canvas(), &draw, w, h, &hdr) }?;
    if cfg.opaque {
        canvas.enable_spheres(&shaders.spheres(), &draw)?;
    }
    let mut cmds = CommandSlots::new(&vk, 4)?;
    let params = sim::Params::new(cfg.particles as u32);
    let d = vk.device();
    let qf = vk.queue_family_index();
    let barrier = |cmd: vk::CommandBuffer, src: vk::AccessFlags| {
        // SAFETY: only called with the command buffer being recorded (ours, and the canvas's
        // calls between its passes on the buffer it records into).
        unsafe { cuvk_dev::demo::full_barrier(d, cmd, src) }
    };
    let events: Vec<[CudaEvent; 4]> = (0..2)
        .map(|_| {
            let e = || cuda.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT));
            Ok([e()?, e()?, e()?, e()?])
        })
        .collect::<anyhow::Result<_>>()?;
    let mut pending: [Option<(u64, u64)>; 2] = [None, None]; // per frame parity: (cuda, vulkan) values
    let mut timings = Timings::default();
    let mut last_done: Option<Instant> = None;
    let exposure = canvas.exposure_for(cfg.particles as u64);
    let n_chunks = particles.chunks.len();
    if rank == 0 {
        std::fs::create_dir_all(&cfg.out)
            .with_context(|| format!("creating {}", cfg.out.display()))?;
        println!(
            "sort-last on {world} GPU(s): {} particles ({} per rank, chunks of at most {}), {w}x{h}, NCCL {}",
            cfg.particles,
            particles.count(),
            CHUNK,
            cuvk::nccl::version()?
        );
    }
    let mut hud_lines = canvas::hud::Stats {
        fps: 0.0,
        p50_ms: 0.0,
        p99_ms: 0.0,
    };
    let started = Instant::now();
    for f in 0..cfg.frames {
        let (s, prev, cs) = ((f % 2) as usize, ((f + 1) % 2) as usize, (f % 2) as usize);
        // The frame two back used this parity's buffers and command slots: wait for it,
        // bounded (a lost rank aborts the communicator and ends the run with an error).
        if let Some((cuda_value, vulkan_value)) = pending[cs].take() {
            comm.wait_cuda(&order, cuda_value, cfg.rank_timeout)?;
            order.wait_vulkan(vulkan_value, cfg.rank_timeout)?;
            let now = Instant::now();
            if let Some(t) = last_done.replace(now) {
                timings.periods.push((now - t).as_secs_f64() * 1e3);
            }
            if rank == 0 && f >= 4 {
                let [e0, e1, e2, e3] = &events[cs];
                timings.sim.push(f64::from(e0.elapsed_ms(e1)?));
                timings.nccl.push(f64::from(e2.elapsed_ms(e3)?));
            }
        }
        if cfg.fail_at == Some((rank, f)) {
            eprintln!("rank {rank}: --fail-at {rank}:{f}: aborting");
            std::process::abort();
        }
        let [e0, e1, e2, e3] = &events[cs];
        // CUDA: this rank's share of the simulation into slot s.
        order.cuda_acquire(&pos_marks[s], &stream)?;
        e0.record(&stream)?;
        particles.step(&stream, &step, prev, s, &params)?;
        e1.record(&stream)?;
        order.cuda_release(&[&pos_marks[s]], &stream)?;
        // Vulkan: splat it into the HDR counts (non-root ranks start from zero each frame;
        // rank 0's resolve clears its counts).
        let camera = cuvk_dev::sim::particles::OrbitCamera::orbited(f + 1);
        let shared: Vec<&dyn AsVkBuffer> = particles.pos[s]
            .iter()
            .map(|b| b as &dyn AsVkBuffer)
            .chain([&hdr as &dyn AsVkBuffer])
            .collect();
        let compute = vk::PipelineStageFlags::COMPUTE_SHADER;
        let rw = vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE;
        // SAFETY: the command slot's last submission completed (waited for above, two frames
        // back); every buffer lives until the end of the run, which waits for the GPU.
        let splat_cmd = unsafe {
            let cmd = cmds.begin(2 * cs)?;
            barrier(cmd, vk::AccessFlags::MEMORY_WRITE);
            cmd_acquire_buffers(d, cmd, qf, &shared, compute, rw);
            // Every rank but 0 starts each frame empty (rank 0's resolve empties its own; in
            // the opaque mode every rank empties, a cheap fill, so no frame depends on it).
            if rank != 0 || cfg.opaque {
                d.cmd_fill_buffer(cmd, hdr.vk_buffer(), 0, vk::WHOLE_SIZE, empty);
                barrier(cmd, vk::AccessFlags::TRANSFER_WRITE);
            }
            for (c, &(_, len)) in particles.chunks.iter().enumerate() {
                let frame = canvas::Frame {
                    slot: s * n_chunks + c,
                    // Every rank integrates the cores; rank 0 alone draws them.
                    first: if c == 0 && rank != 0 { 2 } else { 0 },
                    particles: len as u32,
                    camera: &camera,
                    bgra: false,
                    hud: None,
                    exposure: Some(exposure),
                };
                if cfg.opaque {
                    canvas.record_spheres(cmd, &frame);
                } else {
                    canvas.record_splat(d, cmd, &frame);
                }
            }
            cmd_release_buffers(d, cmd, qf, &shared, compute, rw);
            d.end_command_buffer(cmd)?;
            cmd
        };
        let cmds_a = [splat_cmd];
        // SAFETY: as above.
        let mut vulkan_value = unsafe {
            order.vulkan_submit(
                &[&pos_marks[s], &hdr_marks],
                &FrameSubmit::new(&cmds_a, compute),
            )
        }?;
        // NCCL: every rank's counts summed into rank 0's, after this rank's splat.
        order.cuda_acquire(&hdr_marks, &stream)?;
        e2.record(&stream)?;
        let cuda_value = if cfg.opaque {
            compositor.composite(&comm, &mut hdr, CompositeTo::Rank(0), &order, &hdr_marks)?
        } else {
            comm.reduce_into(&mut hdr, ReduceOp::Sum, 0, &order, &hdr_marks)?
        };
        e3.record(&stream)?;
        if rank == 0 {
            let save = f + 1 == cfg.frames || (cfg.save_every > 0 && (f + 1) % cfg.save_every == 0);
            let lines = cfg.hud.then(|| hud_text(cfg, world, &hud_lines));
            let hdr_only: [&dyn AsVkBuffer; 1] = [&hdr];
            // SAFETY: as above.
            let resolve_cmd = unsafe {
                let cmd = cmds.begin(2 * cs + 1)?;
                barrier(cmd, vk::AccessFlags::MEMORY_WRITE);
                cmd_acquire_buffers(d, cmd, qf, &hdr_only, compute, rw);
                let frame = canvas::Frame {
                    slot: 0,
                    first: 0,
                    particles: cfg.particles as u32,
                    camera: &camera,
                    bgra: false,
                    hud: lines.as_ref(),
                    exposure: Some(exposure),
                };
                if cfg.opaque {
                    canvas.record_sphere_resolve(d, cmd, &frame, &barrier);
                } else {
                    canvas.record_resolve(d, cmd, &frame, &barrier);
                }
                cmd_release_buffers(d, cmd, qf, &hdr_only, compute, rw);
                barrier(cmd, vk::AccessFlags::SHADER_WRITE);
                if save {
                    canvas.record_readback(d, cmd);
                }
                d.end_command_buffer(cmd)?;
                cmd
            };
            let cmds_b = [resolve_cmd];
            // SAFETY: as above.
            vulkan_value =
                unsafe { order.vulkan_submit(&[&hdr_marks], &FrameSubmit::new(&cmds_b, compute)) }?;
            if save {
                comm.wait_cuda(&order, cuda_value, cfg.rank_timeout)?;
                order.wait_vulkan(vulkan_value, cfg.rank_timeout)?;
                let path = cfg.out.join(format!("multi_{world}gpu_{:04}.png", f + 1));
                write_png(&path, w, h, &canvas.readback.read::<u8>()?)?;
                println!("wrote {}", path.display());
            }
            if timings.periods.len() >= 10 {
                let mut recent: Vec<f64> = timings.periods.iter().rev().take(60).copied().collect();
                let mean = recent.iter().sum::<f64>() / recent.len() as f64;
                hud_lines = canvas::hud::Stats {
                    fps: 1e3 / mean,
                    p50_ms: percentile(&mut recent, 0.5),
                    p99_ms: percentile(&mut recent, 0.99),
                };
            }
        }
        pending[cs] = Some((cuda_value, vulkan_value));
    }
    for p in pending.iter().flatten() {
        comm.wait_cuda(&order, p.0, cfg.rank_timeout)?;
        order.wait_vulkan(p.1, cfg.rank_timeout)?;
    }
    let total = started.elapsed();
    // SAFETY: every submission of these command buffers completed (waited for above).
    unsafe { cmds.assume_idle() };
    drop(canvas);
    if rank == 0 {
        report(cfg, world, &mut timings, total)?;
    }
    Ok(())
}

fn hud_text(cfg: &Config, world: usize, s: &canvas::hud::Stats) -> [String; canvas::hud::LINES] {
    let mut lines: [String; canvas::hud::LINES] = Default::default();
    let text = [
        format!("{} particles", canvas::hud::thousands(cfg.particles as u64)),
        format!("{world} GPU(s), sort-last on NCCL"),
        format!(
            "{:.0} fps  p50 {:.2} ms  p99 {:.2} ms",
            s.fps, s.p50_ms, s.p99_ms
        ),
    ];
    for (l, t) in lines.iter_mut().zip(text) {
        *l = t;
    }
    lines
}

/// Rank 0's summary line (and the bench's report file).
fn report(cfg: &Config, world: usize, t: &mut Timings, total: Duration) -> anyhow::Result<()> {
    let skip = WARMUP.min(t.periods.len().saturating_sub(1));
    let mut periods = t.periods[skip..].to_vec();
    let (p50, p99) = (
        percentile(&mut periods, 0.5),
        percentile(&mut periods, 0.99),
    );
    let mean = periods.iter().sum::<f64>() / periods.len().max(1) as f64;
    let sim = percentile(&mut t.sim, 0.5);
    let nccl = percentile(&mut t.nccl, 0.5);
    println!(
        "{world} GPU(s), {} particles: frame p50 {p50:.2} ms p99 {p99:.2} ms ({:.1} fps); rank 0: sim {sim:.2} ms, NCCL reduce {nccl:.3} ms ({:.1}% of the frame); {} frames in {:.1} s",
        cfg.particles,
        1e3 / mean,
        100.0 * nccl / p50,
        cfg.frames,
        total.as_secs_f64()
    );
    if let Some(path) = &cfg.report {
        std::fs::write(path, format!("{p50} {p99} {mean} {sim} {nccl}\n"))?;
    }
    Ok(())
}

/// The 1/2/4-GPU table: strong scaling at `--particles` (400M), NVLink and NCCL's network
/// transport, and 1,000,000,000 particles on 4 GPUs.
fn bench(cfg: &Config) -> anyhow::Result<()> {
    let have = cuvk::cuda::devices()?.len();
    let most = cfg.gpus.min(have);
    let mut runs: Vec<(usize, bool, usize)> = Vec::new();
    for g in [1, 2, 4, 8] {
        if g <= most {
            runs.push((g, false, cfg.particles));
        }
    }
    for g in [2, 4, 8] {
        if g <= most {
            runs.push((g, true, cfg.particles));
        }
    }
    if most >= 4 {
        runs.push((4, false, 1_000_000_000));
    }
    let topo = Command::new("nvidia-smi")
        .args(["topo", "-m"])
        .output()
        .ok();
    if let Some(o) = &topo {
        println!("{}", String::from_utf8_lossy(&o.stdout));
    }
    std::fs::create_dir_all(&cfg.out)?;
    let mut rows = Vec::new();
    let mut one_gpu: Option<f64> = None;
    for (g, net, n) in runs {
        let report = cfg.out.join(format!("bench_{g}_{net}_{n}.txt"));
        let extra = vec![
            "--particles".to_string(),
            n.to_string(),
            "--frames".to_string(),
            cfg.frames.to_string(),
            "--report".to_string(),
            report.display().to_string(),
            "--hud".to_string(),
            "off".to_string(),
        ];
        let code = launch(cfg, g, net, &extra)?;
        if code != 0 {
            bail!("bench run ({g} GPUs, net {net}, {n} particles) failed");
        }
        let text = std::fs::read_to_string(&report)?;
        let v: Vec<f64> = text
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let [p50, p99, mean, sim, nccl] = v[..] else {
            bail!("bad report {text}");
        };
        if g == 1 && !net && n == cfg.particles {
            one_gpu = Some(p50);
        }
        let scale = match (one_gpu, n == cfg.particles) {
            (Some(one), true) => format!("{:.2}x", p50 / one),
            _ => "-".into(),
        };
        rows.push(format!(
            "| {g} | {} | {} | {p50:.2} | {p99:.2} | {:.1} | {scale} | {sim:.2} | {nccl:.3} | {:.1}% |",
            if net { "network (P2P, SHM off)" } else { "NVLink" },
            canvas::hud::thousands(n as u64),
            1e3 / mean,
            100.0 * nccl / p50
        ));
    }
    println!("\n| GPUs | NCCL transport | particles | frame p50 ms | p99 ms | fps | vs 1 GPU | sim ms (rank 0) | NCCL reduce ms | NCCL share |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!("{r}");
    }
    Ok(())
}

/// Where the default shaders are (as the one-GPU mode finds them).
pub fn default_shaders() -> PathBuf {
    if Path::new("shaders/splat.spv").exists() {
        PathBuf::from("shaders")
    } else {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders"))
    }
}
