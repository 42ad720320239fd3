//! The demo's engine: particle storage for each mode, the two simulations, the frame loop
//! ordered by the frame pacer (CUDA modes) or a local timeline (Vulkan mode), and the frame
//! statistics of the HUD. The picture is drawn by [`canvas`].

// Paths relative to this file: the wgpu demo includes it from elsewhere.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::cuda::host::HostAllocFlags;
use cuvk::cudarc::driver::{
    sys, CudaEvent, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use cuvk::vulkan::{
    record_kernel_barrier, AsVkBuffer, CuFunction, CuModule, KernelArg, LaunchDims, SemaphoreOp,
    VulkanContext,
};
use cuvk::{Bridge, BufferUsage, FramePacer, SharedBuffer, StagingBuffer};
use cuvk_dev::{CommandSlots, ComputePipeline, PrivateAllocator, PrivateBuffer};

use crate::demo::{
    frame_periods, percentile, record_to_swapchain, timestamp_queries, write_png, Devices,
    FrameTimes, LoopFrame, Sync, Target,
};
use crate::sim::{initial_state, OrbitCamera, Params};
use cuvk_dev::canvas::{self, hud, Canvas, CanvasShaders};

/// Which API simulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimKind {
    Cuda,
    Vulkan,
}

/// Where the CUDA simulation's kernel runs (zero-copy mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    /// In the Vulkan queue where the driver has `VK_NVX_binary_import`, else the CUDA context.
    Auto,
    /// Inside the frame's Vulkan command buffer (`VK_NVX_binary_import`): no context switch.
    Vulkan,
    /// On a CUDA stream, ordered with Vulkan by the frame pacer's semaphores.
    Cuda,
}

/// How CUDA's result reaches Vulkan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transfer {
    /// Shared memory: Vulkan draws from the buffers CUDA wrote.
    ZeroCopy,
    /// What users do without interop: CUDA → pinned host memory → Vulkan buffer.
    Staging,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub particles: usize,
    pub seed: u64,
    pub width: u32,
    pub height: u32,
    pub sim: SimKind,
    pub launch: Launch,
    pub transfer: Transfer,
    pub frames_in_flight: u32,
    /// Where CUDA waits for Vulkan's release of a frame (the pacer's `AcquireWait`).
    pub acquire: cuvk::AcquireWait,
    pub shader_dir: PathBuf,
    /// Lit opaque spheres, nearest per pixel (`--composite depth`), instead of the glow.
    pub opaque: bool,
}

/// The shader files the demo reads at start-up.
#[derive(Clone)]
pub struct Shaders {
    pub sim: Vec<u8>,
    pub splat: Vec<u8>,
    pub resolve: Vec<u8>,
    pub hud: Vec<u8>,
    pub spheres: Vec<u8>,
    pub spheres_resolve: Vec<u8>,
    pub particles_cu: String,
}

impl Shaders {
    /// The canvas's opaque mode's two shaders.
    pub fn spheres(&self) -> cuvk_dev::canvas::SphereShaders<'_> {
        cuvk_dev::canvas::SphereShaders {
            spheres: &self.spheres,
            resolve: &self.spheres_resolve,
        }
    }

    /// The canvas's three shaders.
    pub fn canvas(&self) -> CanvasShaders<'_> {
        CanvasShaders {
            splat: &self.splat,
            resolve: &self.resolve,
            hud: &self.hud,
        }
    }

    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        let read = |name: &str| {
            std::fs::read(dir.join(name))
                .with_context(|| format!("cannot read shader {}", dir.join(name).display()))
        };
        Ok(Self {
            sim: read("sim.spv")?,
            splat: read("particles_splat.spv")?,
            resolve: read("particles_resolve.spv")?,
            hud: read("particles_hud.spv")?,
            spheres: read("particles_spheres.spv")?,
            spheres_resolve: read("particles_spheres_resolve.spv")?,
            particles_cu: String::from_utf8(read("particles.cu")?)
                .context("particles.cu is not UTF-8")?,
        })
    }
}

/// Particle buffers, per mode. Slot `s` holds the state of frames with `number % K == s`.
#[allow(clippy::large_enum_variant)] // one per engine
enum Store {
    ZeroCopy {
        pos: Vec<SharedBuffer<[f32; 4]>>,
        vel: Vec<SharedBuffer<[f32; 4]>>,
    },
    Vulkan {
        pos: Vec<PrivateBuffer>,
        vel: Vec<PrivateBuffer>,
    },
    Staging {
        pos: [CudaSlice<f32>; 2],
        vel: [CudaSlice<f32>; 2],
        staging: Vec<StagingBuffer>,
        draw: Vec<PrivateBuffer>,
    },
}

impl Store {
    /// Per slot, the buffer the frame's positions are drawn from.
    fn draw_buffers(&self) -> Vec<&dyn AsVkBuffer> {
        fn all<B: AsVkBuffer>(v: &[B]) -> Vec<&dyn AsVkBuffer> {
            v.iter().map(|b| b as &dyn AsVkBuffer).collect()
        }
        match self {
            Store::ZeroCopy { pos, .. } => all(pos),
            Store::Vulkan { pos, .. } => all(pos),
            Store::Staging { draw, .. } => all(draw),
        }
    }
}

struct CudaSide {
    stream: Arc<CudaStream>,
    step: CudaFunction,
    events: Vec<(CudaEvent, CudaEvent)>,
    grid: u32,
}

impl CudaSide {
    /// Compiles the simulation kernel for `n` particles, with its own stream and a pair of
    /// timing events per command slot (`2k`).
    fn new(bridge: &Bridge, particles_cu: &str, k: usize, n: usize) -> anyhow::Result<Self> {
        let module = cuvk::cuda::compile_module(bridge.cuda(), "particles.cu", particles_cu)?;
        let stream = bridge.cuda().new_stream()?;
        let events = (0..2 * k)
            .map(|_| {
                let e = |_| {
                    bridge
                        .cuda()
                        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                };
                Ok((e(0)?, e(1)?))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Self {
            stream,
            step: module.load_function("step")?,
            events,
            // One thread per particle, as the Vulkan dispatch does.
            grid: (n as u32).div_ceil(256).max(1),
        })
    }
}

pub struct Engine {
    vk: Arc<VulkanContext>,
    /// The engine's own (non-shared) memory; shared memory is cuvk's.
    alloc: Arc<PrivateAllocator>,
    opts: Options,
    params: Params,
    store: Store,
    sync: Sync,
    cuda: Option<CudaSide>,
    /// The CUDA simulation kernel loaded into the Vulkan device (inline launches).
    inline: Option<CuFunction>,
    canvas: Canvas,
    /// For a new canvas on resize.
    shaders: Shaders,
    sim: Option<(ComputePipeline, Vec<vk::DescriptorSet>)>,
    cmds: CommandSlots,
    queries: vk::QueryPool,
    timestamp_ns: f64,
    pending: Vec<Option<FrameTimes>>, // per command slot: the CPU-side times of its last frame
    pub times: Vec<FrameTimes>,
    pub camera: OrbitCamera,
    /// The camera turns a step each frame (a drag in the window stops it).
    pub orbit: bool,
    /// The HUD (count, simulation path, fps, frame-time percentiles) is drawn.
    pub hud: bool,
    pub bgra: bool,
    pub paused: bool,
}

const STORAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::STORAGE_BUFFER;

/// A device-local buffer (also a transfer source and destination) that CUDA never sees: the
/// engine's own memory, from gpu-allocator.
fn device_local(
    alloc: &Arc<PrivateAllocator>,
    name: &str,
    bytes: u64,
    usage: vk::BufferUsageFlags,
) -> anyhow::Result<PrivateBuffer> {
    Ok(PrivateBuffer::gpu_only(alloc, name, bytes, usage)?)
}

/// Copies `data` to the start of `dst` through a host-visible staging buffer (waits).
fn upload<T: bytemuck::Pod>(
    alloc: &Arc<PrivateAllocator>,
    dst: &mut dyn AsVkBuffer,
    data: &[T],
) -> anyhow::Result<()> {
    let bytes = std::mem::size_of_val(data) as u64;
    let mut host = PrivateBuffer::upload(alloc, "upload staging", bytes)?;
    host.write(data)?;
    alloc.context().copy_buffer(&host, 0, dst, 0, bytes)?;
    Ok(())
}

/// GPU memory the particle buffers of `opts` need, in bytes.
pub fn bytes_needed(opts: &Options) -> u64 {
    let per_set = opts.particles as u64 * 16;
    let k = u64::from(opts.frames_in_flight);
    match (opts.sim, opts.transfer) {
        (SimKind::Cuda, Transfer::Staging) => per_set * (4 + k),
        _ => per_set * 2 * k,
    }
}

/// Initial particle positions and velocities ([`initial_state`]).
type InitialState = (Vec<[f32; 4]>, Vec<[f32; 4]>);

/// The Vulkan simulation's particle buffers (K slots of positions and velocities, the initial
/// state in slot 0) and the local timeline that orders its frames.
fn vulkan_particles(
    alloc: &Arc<PrivateAllocator>,
    opts: &Options,
    (pos0, vel0): &InitialState,
) -> anyhow::Result<(Store, Sync)> {
    let k = opts.frames_in_flight as usize;
    let bytes = (opts.particles * 16) as u64;
    let mut pos = Vec::new();
    let mut vel = Vec::new();
    for _ in 0..k {
        pos.push(device_local(alloc, "particle positions", bytes, STORAGE)?);
        vel.push(device_local(alloc, "particle velocities", bytes, STORAGE)?);
    }
    upload(alloc, &mut pos[0], pos0)?;
    upload(alloc, &mut vel[0], vel0)?;
    let sync = Sync::local(alloc.context(), k)?;
    Ok((Store::Vulkan { pos, vel }, sync))
}

/// The CUDA simulation: its kernel and stream, the particle storage of `opts.transfer`, and
/// the frame pacer that orders CUDA's writes and Vulkan's reads.
fn cuda_particles(
    bridge: &Bridge,
    alloc: &Arc<PrivateAllocator>,
    shaders: &Shaders,
    opts: &Options,
    initial: &InitialState,
) -> anyhow::Result<(Store, Sync, CudaSide)> {
    let k = opts.frames_in_flight as usize;
    let side = CudaSide::new(bridge, &shaders.particles_cu, k, opts.particles)?;
    let store = match opts.transfer {
        Transfer::ZeroCopy => zero_copy_store(bridge, k, opts.particles, initial)?,
        Transfer::Staging => {
            staging_store(bridge, alloc, &side.stream, k, opts.particles, initial)?
        }
    };
    let mut pacer = FramePacer::new(bridge, k as u32)?;
    pacer.set_acquire_wait(opts.acquire);
    let sync = Sync::Pacer(pacer);
    Ok((store, sync, side))
}

/// Whether this run launches the CUDA kernel inside the Vulkan queue.
fn launches_inline(bridge: &Bridge, opts: &Options) -> anyhow::Result<bool> {
    let supported = cuvk::vulkan::cuda_kernels_supported(bridge.vulkan());
    Ok(match (opts.launch, opts.transfer) {
        (Launch::Cuda, _) | (_, Transfer::Staging) => false,
        (Launch::Auto, Transfer::ZeroCopy) => supported.is_ok(),
        (Launch::Vulkan, Transfer::ZeroCopy) => {
            supported.context("--launch inline needs VK_NVX_binary_import (NVIDIA drivers)")?;
            true
        }
    })
}

/// The CUDA simulation launched inside the Vulkan queue: the same `particles.cu` kernel,
/// compiled to PTX and loaded into the Vulkan device, on shared buffers; frames are ordered
/// by one local timeline, as in the all-Vulkan mode (no CUDA stream, no semaphore handoff).
fn inline_particles(
    bridge: &Bridge,
    shaders: &Shaders,
    opts: &Options,
    initial: &InitialState,
) -> anyhow::Result<(Store, Sync, CuFunction)> {
    let k = opts.frames_in_flight as usize;
    let ptx = cuvk::cuda::compile_ptx(bridge.cuda(), "particles.cu", &shaders.particles_cu)?;
    let step = CuModule::from_ptx(bridge.vulkan(), &ptx)?.function("step")?;
    let store = zero_copy_store(bridge, k, opts.particles, initial)?;
    let sync = Sync::local(bridge.vulkan(), k)?;
    Ok((store, sync, step))
}

/// K slots of shared buffers: CUDA writes them, Vulkan draws from them.
fn zero_copy_store(
    bridge: &Bridge,
    k: usize,
    n: usize,
    (pos0, vel0): &InitialState,
) -> anyhow::Result<Store> {
    let mut pos = Vec::new();
    let mut vel = Vec::new();
    for _ in 0..k {
        pos.push(bridge.create_buffer::<[f32; 4]>(n, BufferUsage::STORAGE_BUFFER)?);
        vel.push(bridge.create_buffer::<[f32; 4]>(n, BufferUsage::STORAGE_BUFFER)?);
    }
    pos[0].cuda_write(pos0)?;
    vel[0].cuda_write(vel0)?;
    Ok(Store::ZeroCopy { pos, vel })
}

/// CUDA's own double-buffered state, and per slot a pinned staging buffer and the Vulkan
/// buffer it is copied into for drawing.
fn staging_store(
    bridge: &Bridge,
    alloc: &Arc<PrivateAllocator>,
    s: &Arc<CudaStream>,
    k: usize,
    n: usize,
    (pos0, vel0): &InitialState,
) -> anyhow::Result<Store> {
    let flat = |v: &[[f32; 4]]| v.iter().flatten().copied().collect::<Vec<f32>>();
    let pos = [s.clone_htod(&flat(pos0))?, s.alloc_zeros::<f32>(n * 4)?];
    let vel = [s.clone_htod(&flat(vel0))?, s.alloc_zeros::<f32>(n * 4)?];
    let mut staging = Vec::new();
    let mut draw = Vec::new();
    for _ in 0..k {
        staging.push(StagingBuffer::new(
            bridge,
            n * 16,
            HostAllocFlags::default(),
            vk::BufferUsageFlags::empty(),
        )?);
        draw.push(device_local(
            alloc,
            "draw positions",
            (n * 16) as u64,
            STORAGE,
        )?);
    }
    s.synchronize()?;
    Ok(Store::Staging {
        pos,
        vel,
        staging,
        draw,
    })
}

/// The Vulkan simulation's compute pipeline, with one descriptor set per slot (reading the
/// previous slot, writing this one); `None` when CUDA simulates.
fn vulkan_sim_pipeline(
    vk: &Arc<VulkanContext>,
    sim_spv: &[u8],
    store: &Store,
    k: usize,
) -> anyhow::Result<Option<(ComputePipeline, Vec<vk::DescriptorSet>)>> {
    let Store::Vulkan { pos, vel } = store else {
        return Ok(None);
    };
    let push = std::mem::size_of::<Params>() as u32;
    let p = ComputePipeline::new(vk, sim_spv, 4, push, k as u32)?;
    let sets = (0..k)
        .map(|s| {
            let prev = (s + k - 1) % k;
            p.descriptor_set(&[&pos[prev], &vel[prev], &pos[s], &vel[s]])
        })
        .collect::<cuvk::Result<Vec<_>>>()?;
    Ok(Some((p, sets)))
}

impl Engine {
    pub fn new(dev: &Devices, shaders: &Shaders, opts: Options) -> anyhow::Result<Self> {
        let vk = dev.vk.clone();
        let alloc = PrivateAllocator::new(&vk)?;
        let k = opts.frames_in_flight as usize;
        let params = Params::new(opts.particles as u32);
        let initial = initial_state(opts.particles, opts.seed);
        let (store, sync, cuda, inline) = match opts.sim {
            SimKind::Vulkan => {
                let (store, sync) = vulkan_particles(&alloc, &opts, &initial)?;
                (store, sync, None, None)
            }
            SimKind::Cuda => {
                let bridge = dev
                    .bridge
                    .as_ref()
                    .context("the CUDA simulation needs a CUDA device (use --sim vulkan)")?;
                if launches_inline(bridge, &opts)? {
                    let (store, sync, step) = inline_particles(bridge, shaders, &opts, &initial)?;
                    (store, sync, None, Some(step))
                } else {
                    let (store, sync, side) =
                        cuda_particles(bridge, &alloc, shaders, &opts, &initial)?;
                    (store, sync, Some(side), None)
                }
            }
        };
        let mut canvas = Canvas::new(
            &alloc,
            &shaders.canvas(),
            &store.draw_buffers(),
            opts.width,
            opts.height,
        )?;
        if opts.opaque {
            canvas.enable_spheres(&shaders.spheres(), &store.draw_buffers())?;
        }
        let sim = vulkan_sim_pipeline(&vk, &shaders.sim, &store, k)?;
        let cmds = CommandSlots::new(&vk, 2 * k)?;
        let (queries, timestamp_ns) = timestamp_queries(&vk, 4 * 2 * k as u32)?;
        Ok(Self {
            vk,
            alloc,
            opts,
            params,
            store,
            sync,
            cuda,
            inline,
            canvas,
            shaders: shaders.clone(),
            sim,
            cmds,
            queries,
            timestamp_ns,
            pending: vec![None; 2 * k],
            times: Vec::new(),
            camera: OrbitCamera::default(),
            orbit: true,
            hud: true,
            bgra: false,
            paused: false,
        })
    }

    /// Where the simulation runs, for the log.
    pub fn sim_path(&self) -> &'static str {
        match (&self.cuda, &self.inline) {
            (Some(_), _) => {
                "CUDA kernel on a CUDA stream, frames ordered by the pacer's semaphores"
            }
            (None, Some(_)) => "CUDA kernel inside the Vulkan queue (VK_NVX_binary_import)",
            (None, None) => "Vulkan compute shader",
        }
    }

    /// Where the simulation runs, in a few words for the HUD.
    fn sim_label(&self) -> &'static str {
        match (&self.cuda, &self.inline, self.opts.transfer) {
            (Some(_), _, Transfer::Staging) => "CUDA stream + pinned staging copy",
            (Some(_), _, Transfer::ZeroCopy) => "CUDA stream, zero-copy + semaphores",
            (None, Some(_), _) => "CUDA kernel inside the Vulkan queue (NVX)",
            (None, None, _) => "Vulkan compute shader",
        }
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Renders at a new size from now on (waits for the GPU; the simulation goes on).
    pub fn resize(&mut self, width: u32, height: u32) -> anyhow::Result<()> {
        self.wait_idle()?;
        self.canvas = Canvas::new(
            &self.alloc,
            &self.shaders.canvas(),
            &self.store.draw_buffers(),
            width,
            height,
        )?;
        if self.opts.opaque {
            let draw = self.store.draw_buffers();
            self.canvas.enable_spheres(&self.shaders.spheres(), &draw)?;
        }
        self.opts.width = width;
        self.opts.height = height;
        Ok(())
    }

    /// Restarts the simulation from its initial state (waits for the GPU first).
    pub fn reset(&mut self) -> anyhow::Result<()> {
        self.wait_idle()?;
        let (pos0, vel0) = initial_state(self.opts.particles, self.opts.seed);
        let last = self.last_frame() as usize % self.opts.frames_in_flight as usize;
        let parity = (self.last_frame() % 2) as usize;
        match &mut self.store {
            Store::ZeroCopy { pos, vel } => {
                pos[last].cuda_write(&pos0)?;
                vel[last].cuda_write(&vel0)?;
            }
            Store::Vulkan { pos, vel } => {
                upload(&self.alloc, &mut pos[last], &pos0)?;
                upload(&self.alloc, &mut vel[last], &vel0)?;
            }
            Store::Staging { pos, vel, .. } => {
                let s = &self.cuda.as_ref().context("CUDA side")?.stream;
                s.memcpy_htod(
                    &pos0.iter().flatten().copied().collect::<Vec<f32>>(),
                    &mut pos[parity],
                )?;
                s.memcpy_htod(
                    &vel0.iter().flatten().copied().collect::<Vec<f32>>(),
                    &mut vel[parity],
                )?;
                s.synchronize()?;
            }
        }
        Ok(())
    }

    /// The number of the last frame submitted.
    pub fn last_frame(&self) -> u64 {
        self.sync.last_frame()
    }

    fn begin(&mut self) -> anyhow::Result<LoopFrame> {
        self.sync.begin(Duration::from_secs(10))
    }

    /// Runs one frame into `target`. Returns when it is submitted (or, for a PNG, written).
    pub fn frame(&mut self, target: Target<'_>) -> anyhow::Result<()> {
        let t0 = Instant::now();
        let frame = self.begin()?;
        let wait_ms = t0.elapsed().as_secs_f64() * 1e3;
        let c = frame.command_slot();
        self.collect(c)?;
        let simulate = !self.paused;
        if self.orbit {
            self.camera.orbit();
        }
        self.run_cuda(&frame, simulate)?;
        let cmd = self.record(&frame, &target, simulate)?;
        let stage = vk::PipelineStageFlags::ALL_COMMANDS;
        let mut waits = Vec::new();
        let mut signals = Vec::new();
        if let Target::Swapchain {
            acquired, rendered, ..
        } = &target
        {
            waits.push(SemaphoreOp {
                semaphore: acquired,
                value: 0,
                stage: vk::PipelineStageFlags::TRANSFER,
            });
            signals.push(SemaphoreOp {
                semaphore: rendered,
                value: 0,
                stage: vk::PipelineStageFlags::empty(),
            });
        }
        // SAFETY: the command buffer and everything it uses live in `self`, which waits for
        // the GPU before dropping them.
        unsafe {
            self.sync
                .submit(&self.vk, &frame, cmd, stage, &waits, signals)?
        };
        self.pending[c] = Some(FrameTimes {
            number: frame.number(),
            wait: wait_ms,
            ..Default::default()
        });
        if let Target::Offscreen(Some(path)) = target {
            self.wait_for(frame.number())?;
            write_png(
                path,
                self.canvas.width,
                self.canvas.height,
                &self.canvas.readback.read::<u8>()?,
            )?;
        }
        Ok(())
    }

    /// Waits on the host until frame `number` has completed on the GPU.
    pub fn wait_for(&self, number: u64) -> anyhow::Result<()> {
        self.sync.wait_for(number, Duration::from_secs(30))
    }

    /// Waits for every submitted frame and collects the remaining timings.
    pub fn wait_idle(&mut self) -> anyhow::Result<()> {
        self.wait_for(self.last_frame())?;
        if let Some(c) = &self.cuda {
            c.stream.synchronize()?;
        }
        for c in 0..self.pending.len() {
            self.collect(c)?;
        }
        Ok(())
    }

    /// Reads the timings of the frame that last used command slot `c` (it has completed).
    fn collect(&mut self, c: usize) -> anyhow::Result<()> {
        let Some(cpu) = self.pending[c].take() else {
            return Ok(());
        };
        let mut ts = [0u64; 3];
        // SAFETY: the frame that wrote these queries has completed (begin_frame / wait_idle).
        unsafe {
            self.vk.device().get_query_pool_results(
                self.queries,
                4 * c as u32,
                &mut ts,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )?;
        }
        let ms = |a: u64, b: u64| b.saturating_sub(a) as f64 * self.timestamp_ns * 1e-6;
        let sim = match &self.cuda {
            Some(side) => side.events[c].0.elapsed_ms(&side.events[c].1)? as f64,
            None => ms(ts[0], ts[1]),
        };
        let end_ns = ts[2] as f64 * self.timestamp_ns;
        self.times.push(FrameTimes {
            sim,
            draw: ms(ts[1], ts[2]),
            end_ns,
            ..cpu
        });
        Ok(())
    }

    /// Timings of the collected frames in frame order, with `frame` = GPU frame period.
    pub fn frame_times(&self) -> Vec<FrameTimes> {
        frame_periods(&self.times)
    }

    /// The HUD's text: particle count, simulation path, and the recent frame statistics.
    fn hud_lines(&self) -> [String; hud::LINES] {
        hud::lines(self.opts.particles, self.sim_label(), self.recent_stats())
    }

    /// Frame rate and p50/p99 of the GPU frame period over the last 120 frames measured, once
    /// there are any.
    fn recent_stats(&self) -> Option<hud::Stats> {
        const WINDOW: usize = 120;
        let tail = &self.times[self.times.len().saturating_sub(WINDOW + 1)..];
        let mut periods: Vec<f64> = frame_periods(tail).iter().map(|f| f.frame).collect();
        let mean = periods.iter().sum::<f64>() / periods.len().max(1) as f64;
        (mean > 0.0).then(|| hud::Stats {
            fps: 1e3 / mean,
            p50_ms: percentile(&mut periods, 0.5),
            p99_ms: percentile(&mut periods, 0.99),
        })
    }

    fn run_cuda(&mut self, frame: &LoopFrame, simulate: bool) -> anyhow::Result<()> {
        let Some(side) = &self.cuda else {
            return Ok(());
        };
        let (Sync::Pacer(pacer), LoopFrame::Paced(frame)) = (&self.sync, frame) else {
            bail!("CUDA simulation without a pacer")
        };
        let s = &side.stream;
        let k = self.opts.frames_in_flight as usize;
        let (slot, prev) = (frame.slot(), (frame.slot() + k - 1) % k);
        let cfg = LaunchConfig {
            grid_dim: (side.grid, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let (ev0, ev1) = &side.events[frame.command_slot()];
        let params = self.params;
        match &mut self.store {
            Store::ZeroCopy { pos, vel } => {
                pacer.cuda_acquire(frame, s)?;
                ev0.record(s)?;
                let (pi, vi, po, vo) = (
                    pos[prev].cuda_ptr(),
                    vel[prev].cuda_ptr(),
                    pos[slot].cuda_ptr(),
                    vel[slot].cuda_ptr(),
                );
                let mut b = s.launch_builder(&side.step);
                let p = params.for_frame(simulate);
                b.arg(&pi).arg(&vi).arg(&po).arg(&vo).arg(&p);
                // SAFETY: all four pointers are live mappings of `count` float4 each; slot was
                // released by Vulkan (cuda_acquire) and prev is only read.
                unsafe { b.launch(cfg) }?;
                ev1.record(s)?;
            }
            Store::Staging {
                pos, vel, staging, ..
            } => {
                let n = frame.number() as usize;
                let (src, dst) = ((n + 1) % 2, n % 2);
                ev0.record(s)?;
                let p = params.for_frame(simulate);
                {
                    let (pos_lo, pos_hi) = pos.split_at_mut(1);
                    let (vel_lo, vel_hi) = vel.split_at_mut(1);
                    let (pi, po) = if src == 0 {
                        (&pos_lo[0], &mut pos_hi[0])
                    } else {
                        (&pos_hi[0], &mut pos_lo[0])
                    };
                    let (vi, vo) = if src == 0 {
                        (&vel_lo[0], &mut vel_hi[0])
                    } else {
                        (&vel_hi[0], &mut vel_lo[0])
                    };
                    let mut b = s.launch_builder(&side.step);
                    b.arg(pi).arg(vi).arg(po).arg(vo).arg(&p);
                    // SAFETY: four CUDA buffers of count float4 each.
                    unsafe { b.launch(cfg) }?;
                }
                ev1.record(s)?;
                pacer.cuda_acquire(frame, s)?;
                staging[slot].cuda_download(s, &pos[dst])?;
            }
            // No CUDA work this frame: the pacer still wants acquire before release.
            Store::Vulkan { .. } => pacer.cuda_acquire(frame, s)?,
        }
        pacer.cuda_release(frame, s)?;
        Ok(())
    }

    fn record(
        &self,
        frame: &LoopFrame,
        target: &Target<'_>,
        simulate: bool,
    ) -> anyhow::Result<vk::CommandBuffer> {
        let d = self.vk.device();
        let (c, slot) = (frame.command_slot(), frame.slot());
        let q0 = 4 * c as u32;
        let all = vk::PipelineStageFlags::ALL_COMMANDS;
        // A full barrier: `src` writes of earlier commands are visible to everything after.
        let barrier = |cmd: vk::CommandBuffer, src: vk::AccessFlags| {
            let rw = vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE;
            let b = [vk::MemoryBarrier::default()
                .src_access_mask(src)
                .dst_access_mask(rw)];
            // SAFETY: `cmd` is recording (below); the barrier is well formed.
            unsafe {
                d.cmd_pipeline_barrier(cmd, all, all, vk::DependencyFlags::empty(), &b, &[], &[])
            };
        };
        let cv = &self.canvas;
        let (w, h) = (cv.width, cv.height);
        // SAFETY: the command slot's previous frame completed (begin); every handle is ours
        // and outlives the submission.
        unsafe {
            let cmd = self.cmds.begin(c)?;
            d.cmd_reset_query_pool(cmd, self.queries, q0, 4);
            d.cmd_write_timestamp(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, self.queries, q0);
            // Everything earlier frames wrote is visible to this frame.
            barrier(cmd, vk::AccessFlags::MEMORY_WRITE);
            match (&self.store, &self.sync) {
                (Store::ZeroCopy { pos, .. }, Sync::Pacer(p)) => {
                    p.record_acquire_from_cuda(
                        cmd,
                        &[&pos[slot]],
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::AccessFlags::SHADER_READ,
                    );
                }
                (Store::Staging { staging, draw, .. }, _) => {
                    let region = [vk::BufferCopy {
                        src_offset: 0,
                        dst_offset: 0,
                        size: (self.opts.particles * 16) as u64,
                    }];
                    d.cmd_copy_buffer(
                        cmd,
                        staging[slot].vk_buffer(),
                        draw[slot].vk_buffer(),
                        &region,
                    );
                    barrier(cmd, vk::AccessFlags::TRANSFER_WRITE);
                }
                _ => {}
            }
            if let (Some(step), Store::ZeroCopy { pos, vel }) = (&self.inline, &self.store) {
                let k = pos.len();
                let prev = (slot + k - 1) % k;
                let addr = |b: &SharedBuffer<[f32; 4]>| {
                    b.device_address()
                        .map(KernelArg::address)
                        .context("shared buffers need device addresses for inline launches")
                };
                let args = [
                    addr(&pos[prev])?,
                    addr(&vel[prev])?,
                    addr(&pos[slot])?,
                    addr(&vel[slot])?,
                    KernelArg::value(&self.params.for_frame(simulate)),
                ];
                // One thread per particle, as the CUDA-context launch and the Vulkan dispatch.
                let dims = LaunchDims::linear(self.params.count.div_ceil(256).max(1), 256);
                step.record_launch(cmd, &dims, &args)?;
                record_kernel_barrier(&self.vk, cmd);
            }
            if let Some((sim, sets)) = &self.sim {
                let p = self.params.for_frame(simulate);
                sim.record_dispatch(
                    cmd,
                    sets[slot],
                    bytemuck::bytes_of(&p),
                    self.params.count.div_ceil(256).clamp(1, 65535),
                );
                barrier(cmd, vk::AccessFlags::SHADER_WRITE);
            }
            d.cmd_write_timestamp(
                cmd,
                vk::PipelineStageFlags::ALL_COMMANDS,
                self.queries,
                q0 + 1,
            );
            let hud = self.hud.then(|| self.hud_lines());
            let draw = canvas::Frame {
                slot,
                first: 0,
                particles: self.params.count,
                camera: &self.camera,
                bgra: self.bgra,
                hud: hud.as_ref(),
                exposure: None,
            };
            if cv.is_opaque() {
                cv.record_opaque(d, cmd, &draw, &barrier);
            } else {
                cv.record(d, cmd, &draw, &barrier);
            }
            d.cmd_write_timestamp(
                cmd,
                vk::PipelineStageFlags::ALL_COMMANDS,
                self.queries,
                q0 + 2,
            );
            if let (Store::ZeroCopy { pos, .. }, Sync::Pacer(p)) = (&self.store, &self.sync) {
                p.record_release_to_cuda(
                    cmd,
                    &[&pos[slot]],
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::AccessFlags::SHADER_READ,
                );
            }
            barrier(cmd, vk::AccessFlags::SHADER_WRITE);
            match target {
                Target::Offscreen(Some(_)) => cv.record_readback(d, cmd),
                Target::Offscreen(None) => {}
                Target::Swapchain { image, .. } => {
                    record_to_swapchain(d, cmd, cv.pixels.vk_buffer(), *image, w, h)
                }
            }
            d.end_command_buffer(cmd)?;
            Ok(cmd)
        }
    }

    /// Final particle positions (for comparing the simulations). Waits for the GPU.
    pub fn positions(&mut self) -> anyhow::Result<Vec<[f32; 4]>> {
        self.wait_idle()?;
        let last = self.last_frame();
        let slot = (last % u64::from(self.opts.frames_in_flight)) as usize;
        let bytes = (self.opts.particles * 16) as u64;
        let mut host = PrivateBuffer::readback(&self.alloc, "positions readback", bytes)?;
        match &self.store {
            Store::ZeroCopy { pos, .. } => return Ok(pos[slot].cuda_read()?),
            Store::Vulkan { pos, .. } => self.vk.copy_buffer(&pos[slot], 0, &mut host, 0, bytes)?,
            Store::Staging { draw, .. } => {
                self.vk.copy_buffer(&draw[slot], 0, &mut host, 0, bytes)?
            }
        }
        Ok(host.read()?)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.wait_idle();
        let d = self.vk.device();
        // SAFETY: all frames completed (waited above, or the device is lost and idle anyway).
        unsafe {
            let _ = d.device_wait_idle();
            d.destroy_query_pool(self.queries, None);
        }
    }
}
