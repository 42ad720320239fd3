//! What the particle, fluid and wgpu particle demos share: the devices, frame timings and
//! targets, the swapchain copy and PNG writing of their engines, and the command-line helpers of
//! their `main`s (usage errors, the output folder check, percentiles, opening the devices, the
//! validation check).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::vulkan::{Semaphore, Validation, VulkanConfig, VulkanContext};
use cuvk::{Bridge, BridgeConfig};

/// The devices, made once and shared by every engine (benchmark runs make several).
pub struct Devices {
    pub vk: Arc<VulkanContext>,
    pub bridge: Option<Bridge>,
}

/// Per-frame timings in milliseconds. `frame` is the GPU's frame period: the time between this
/// frame's last GPU command and the previous frame's (timestamps), so pipelined frames are
/// measured by how often they complete, not by how fast the CPU enqueues them.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameTimes {
    pub number: u64,
    pub end_ns: f64,
    pub frame: f64,
    pub sim: f64,
    pub draw: f64,
    pub wait: f64,
}

/// Where a frame's pixels go.
pub enum Target<'a> {
    /// Offscreen; with `Some(path)`, written there as PNG once the frame completes.
    Offscreen(Option<&'a Path>),
    /// A swapchain image: copied in, then the caller presents it.
    Swapchain {
        image: vk::Image,
        acquired: &'a Semaphore,
        rendered: &'a Semaphore,
    },
}

/// Records copying the pixel buffer into a swapchain image and its layout transitions.
///
/// # Safety
/// `cmd` must be recording; `image` must be an acquired swapchain image of `w`×`h` pixels.
pub unsafe fn record_to_swapchain(
    d: &cuvk::ash::Device,
    cmd: vk::CommandBuffer,
    pixels: vk::Buffer,
    image: vk::Image,
    w: u32,
    h: u32,
) {
    let range = vk::ImageSubresourceRange {
        aspect_mask: vk::ImageAspectFlags::COLOR,
        base_mip_level: 0,
        level_count: 1,
        base_array_layer: 0,
        layer_count: 1,
    };
    let to_dst = [vk::ImageMemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::empty())
        .dst_access_mask(vk::AccessFlags::TRANSFER_WRITE)
        .old_layout(vk::ImageLayout::UNDEFINED)
        .new_layout(vk::ImageLayout::TRANSFER_DST_OPTIMAL)
        .image(image)
        .subresource_range(range)];
    // SAFETY: recording state; the image is a live swapchain image acquired for this frame.
    unsafe {
        d.cmd_pipeline_barrier(
            cmd,
            vk::PipelineStageFlags::TRANSFER,
            vk::PipelineStageFlags::TRANSFER,
            vk::DependencyFlags::empty(),
            &[],
            &[],
            &to_dst,
        );
        let region = [vk::BufferImageCopy::default()
            .image_subresource(vk::ImageSubresourceLayers {
                aspect_mask: vk::ImageAspectFlags::COLOR,
                mip_level: 0,
                base_array_layer: 0,
                layer_count: 1,
            })
            .image_extent(vk::Extent3D {
                width: w,
                height: h,
                depth: 1,
            })];
        d.cmd_copy_buffer_to_image(
            cmd,
            pixels,
            image,
            vk::ImageLayout::TRANSFER_DST_OPTIMAL,
            &region,
        );
        let to_present = [vk::ImageMemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(vk::AccessFlags::empty())
            .old_layout(vk::ImageLayout::TRANSFER_DST_OPTIMAL)
            .new_layout(vk::ImageLayout::PRESENT_SRC_KHR)
            .image(image)
            .subresource_range(range)];
        d.cmd_pipeline_barrier(
            cmd,
            vk::PipelineStageFlags::TRANSFER,
            vk::PipelineStageFlags::BOTTOM_OF_PIPE,
            vk::DependencyFlags::empty(),
            &[],
            &[],
            &to_present,
        );
    }
}

/// Records a full barrier: `src` writes of earlier commands are visible to everything after
/// (the barrier the canvas's passes want).
///
/// # Safety
/// `cmd` must be a command buffer of `d` in the recording state.
pub unsafe fn full_barrier(d: &cuvk::ash::Device, cmd: vk::CommandBuffer, src: vk::AccessFlags) {
    let all = vk::PipelineStageFlags::ALL_COMMANDS;
    let b = [vk::MemoryBarrier::default()
        .src_access_mask(src)
        .dst_access_mask(vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE)];
    // SAFETY: `cmd` is recording (the caller's contract); the barrier is well formed.
    unsafe { d.cmd_pipeline_barrier(cmd, all, all, vk::DependencyFlags::empty(), &b, &[], &[]) };
}

/// Records, into command slot `slot` of `cmds`, `canvas` drawing `frame` from `shared` (as
/// [`record_shared_draw`]), and ends it: the command buffer to submit, and the slot's fence to
/// submit it with (the validation layer cannot see that an exported timeline's value means
/// the submission completed; the fence tells it).
///
/// # Safety
/// The slot's previous use has completed; `shared` is `frame.slot`'s buffer; it, the canvas
/// and `cmds` outlive the commands.
#[allow(clippy::too_many_arguments)]
pub unsafe fn record_view_frame(
    vk_ctx: &cuvk::vulkan::VulkanContext,
    cmds: &cuvk_canvas::CommandSlots,
    slot: usize,
    canvas: &cuvk_canvas::canvas::Canvas,
    shared: &dyn cuvk::vulkan::AsVkBuffer,
    frame: &cuvk_canvas::canvas::Frame<'_>,
    readback: bool,
) -> cuvk::Result<(vk::CommandBuffer, vk::Fence)> {
    // SAFETY: the caller's contract: the slot is free, the objects outlive the commands.
    unsafe {
        let cmd = cmds.begin(slot)?;
        let qf = vk_ctx.queue_family_index();
        record_shared_draw(vk_ctx.device(), cmd, qf, canvas, shared, frame, readback);
        cuvk::VkResultExt::vk(
            vk_ctx.device().end_command_buffer(cmd),
            "vkEndCommandBuffer",
        )?;
        Ok((cmd, cmds.fence(slot)))
    }
}

/// Records `canvas` drawing `frame` from `shared`, a particle buffer CUDA or another process
/// writes (owned by the external queue family between uses): acquired, drawn, released back,
/// then, where `readback`, copied to the canvas's readback buffer.
///
/// # Safety
/// `cmd` is recording on the canvas's device, whose queue family is `queue_family`; `shared`
/// is `frame.slot`'s buffer; both and the canvas outlive the commands.
pub unsafe fn record_shared_draw(
    d: &cuvk::ash::Device,
    cmd: vk::CommandBuffer,
    queue_family: u32,
    canvas: &cuvk_canvas::canvas::Canvas,
    shared: &dyn cuvk::vulkan::AsVkBuffer,
    frame: &cuvk_canvas::canvas::Frame<'_>,
    readback: bool,
) {
    let barrier = |cmd: vk::CommandBuffer, src: vk::AccessFlags| {
        // SAFETY: only called with `cmd`, recording (the caller's contract).
        unsafe { full_barrier(d, cmd, src) }
    };
    let (shared, compute, read) = (
        [shared],
        vk::PipelineStageFlags::COMPUTE_SHADER,
        vk::AccessFlags::SHADER_READ,
    );
    // SAFETY: the caller's contract.
    unsafe {
        barrier(cmd, vk::AccessFlags::MEMORY_WRITE);
        cuvk::vulkan::cmd_acquire_buffers(d, cmd, queue_family, &shared, compute, read);
        canvas.record(d, cmd, frame, &barrier);
        cuvk::vulkan::cmd_release_buffers(d, cmd, queue_family, &shared, compute, read);
        barrier(cmd, vk::AccessFlags::SHADER_WRITE);
        if readback {
            canvas.record_readback(d, cmd);
        }
    }
}

/// `count` exportable device-local buffers of `bytes` each (storage, copies both ways), zeroed:
/// the slots a viewer publishes.
pub fn zeroed_exportable_buffers(
    vk: &Arc<VulkanContext>,
    count: usize,
    bytes: u64,
) -> cuvk::Result<Vec<Arc<cuvk::vulkan::BoundBuffer>>> {
    let usage = vk::BufferUsageFlags::STORAGE_BUFFER
        | vk::BufferUsageFlags::TRANSFER_SRC
        | vk::BufferUsageFlags::TRANSFER_DST;
    (0..count)
        .map(|_| {
            let local = vk::MemoryPropertyFlags::DEVICE_LOCAL;
            let mut b = cuvk::vulkan::BoundBuffer::new_exportable(vk, bytes, usage, local)?;
            vk.fill_buffer(&mut b, 0, bytes, 0)?;
            Ok(Arc::new(b))
        })
        .collect()
}

/// The benchmarks' bridge on the default device, its device line printed first (what
/// BENCHMARKS.md quotes).
pub fn bench_bridge() -> anyhow::Result<cuvk::Bridge> {
    let bridge = cuvk::Bridge::new(cuvk::BridgeConfig::default())?;
    println!(
        "device: {} (uuid {})",
        bridge.vulkan().info().name,
        bridge.uuid()
    );
    Ok(bridge)
}

/// Writes RGBA8 pixels as a PNG, through a temporary file renamed into place, so a failure
/// leaves no half-written image.
pub fn write_png(path: &Path, w: u32, h: u32, rgba: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("png.partial");
    let result = (|| -> anyhow::Result<()> {
        let file = std::fs::File::create(&tmp)?;
        let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w, h);
        enc.set_color(png::ColorType::Rgba);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header()?;
        writer.write_image_data(&rgba[..(w * h * 4) as usize])?;
        writer.finish()?;
        Ok(())
    })();
    match result {
        Ok(()) => {
            std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e.context(format!("writing {}", path.display())))
        }
    }
}

/// Bad command-line input: reported with exit code 2.
#[derive(Debug)]
pub struct Usage(String);
impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Usage {}

pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    Usage(msg.into()).into()
}

/// A command line read flag by flag: each demo mode's parser is a `match` on
/// [`Flags::next_flag`] whose arms take their values here, with one wording for every mistake.
pub struct Flags(std::vec::IntoIter<String>);

impl Flags {
    /// The arguments (without the program name).
    pub fn new(args: Vec<String>) -> Self {
        Self(args.into_iter())
    }
    /// The next flag, if any.
    pub fn next_flag(&mut self) -> Option<String> {
        self.0.next()
    }
    /// The value after `flag`.
    pub fn value(&mut self, flag: &str) -> anyhow::Result<String> {
        self.0
            .next()
            .ok_or_else(|| usage(format!("{flag} needs a value")))
    }
    /// A whole number after `flag` (`1_000_000` reads as a million).
    pub fn num(&mut self, flag: &str) -> anyhow::Result<u64> {
        let v = self.value(flag)?;
        v.replace('_', "")
            .parse()
            .map_err(|_| usage(format!("{flag}: '{v}' is not a whole number")))
    }
    /// `on` or `off` after `flag`.
    pub fn on_off(&mut self, flag: &str) -> anyhow::Result<bool> {
        match self.value(flag)?.as_str() {
            "on" => Ok(true),
            "off" => Ok(false),
            v => bail!(usage(format!("{flag} must be on or off, not '{v}'"))),
        }
    }
    /// `WxH` after `flag`, each 1..=8192.
    pub fn size(&mut self, flag: &str) -> anyhow::Result<(u32, u32)> {
        let v = self.value(flag)?;
        v.split_once('x')
            .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
            .filter(|&(w, h): &(u32, u32)| (1..=8192).contains(&w) && (1..=8192).contains(&h))
            .ok_or_else(|| {
                usage(format!(
                    "{flag} must look like 1280x720, between 1x1 and 8192x8192, not '{v}'"
                ))
            })
    }
}

/// The command line of a demo mode that views frames made elsewhere (`particles --serve
/// NAME`): what to draw, how big, how long, where the PNGs go.
pub struct ViewerArgs {
    /// The name to serve or attach to.
    pub name: String,
    /// Particles per frame.
    pub particles: usize,
    /// Frames to draw.
    pub frames: u64,
    /// Width and height in pixels.
    pub size: (u32, u32),
    /// Where PNGs go.
    pub out: PathBuf,
    /// Save every this many frames (0: only the last).
    pub save_every: u64,
    /// Draw the HUD.
    pub hud: bool,
    /// Where the SPIR-V shaders are.
    pub shader_dir: PathBuf,
}

impl ViewerArgs {
    /// Reads `mode NAME` and the flags it takes; `frames` by default.
    pub fn parse(
        mode: &str,
        args: Vec<String>,
        shader_dir: PathBuf,
        frames: u64,
    ) -> anyhow::Result<Self> {
        let mut c = Self {
            name: String::new(),
            particles: 1_000_000,
            frames,
            size: (1280, 720),
            out: PathBuf::from("out"),
            save_every: 0,
            hud: true,
            shader_dir,
        };
        let mut f = Flags::new(args);
        while let Some(a) = f.next_flag() {
            match a.as_str() {
                m if m == mode => c.name = f.value(&a)?,
                "--particles" => c.particles = f.num(&a)? as usize,
                "--frames" => c.frames = f.num(&a)?,
                "--save-every" => c.save_every = f.num(&a)?,
                "--out" => c.out = f.value(&a)?.into(),
                "--shaders" => c.shader_dir = f.value(&a)?.into(),
                "--headless" => {}
                "--hud" => c.hud = f.on_off(&a)?,
                "--size" => c.size = f.size(&a)?,
                other => bail!(usage(format!(
                    "{mode} takes --particles --frames --size --out --save-every --hud --shaders, not '{other}'"
                ))),
            }
        }
        if c.name.is_empty() || c.particles == 0 || c.frames == 0 {
            bail!(usage(format!(
                "{mode} needs a name, and at least 1 particle and 1 frame"
            )));
        }
        Ok(c)
    }
}

/// Opens the devices: the CUDA + Vulkan bridge where `cuda` asks for it and CUDA is there, else
/// Vulkan alone, with the extensions a window needs. Without a CUDA GPU it falls back to Vulkan
/// alone (saying so; the caller sees `bridge: None`) unless `cuda_forced`; `fallback` names what
/// simulates then.
pub fn open_devices(
    validation: Validation,
    cuda: bool,
    cuda_forced: bool,
    fallback: &str,
    instance_ext: Vec<&'static std::ffi::CStr>,
    device_ext: Vec<&'static std::ffi::CStr>,
) -> anyhow::Result<Devices> {
    if cuda {
        match Bridge::new(BridgeConfig {
            validation,
            instance_extensions: instance_ext.clone(),
            device_extensions: device_ext.clone(),
            ..Default::default()
        }) {
            Ok(b) => {
                return Ok(Devices {
                    vk: b.vulkan().clone(),
                    bridge: Some(b),
                })
            }
            Err(e) if e.is_unavailable() && !cuda_forced => {
                println!("no CUDA GPU ({e}): simulating with {fallback} instead");
            }
            Err(e) => {
                return Err(e).context("opening CUDA device 0 and the Vulkan device with its UUID")
            }
        }
    }
    let vk = VulkanContext::new(VulkanConfig {
        validation,
        instance_extensions: instance_ext,
        device_extensions: device_ext,
        ..Default::default()
    })?;
    Ok(Devices { vk, bridge: None })
}

/// Makes sure `dir` exists and takes files before any frame is rendered.
pub fn check_out_dir(dir: &Path) -> anyhow::Result<()> {
    let probe = dir.join(".cuvk-write-test");
    std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&probe, b""))
        .and_then(|_| std::fs::remove_file(&probe))
        .map_err(|e| usage(format!("--out {}: not writable: {e}", dir.display())))
}

pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

pub fn check_validation(dev: &Devices) -> anyhow::Result<()> {
    let msgs = dev.vk.validation_messages();
    if !msgs.is_empty() {
        bail!(
            "{} Vulkan validation message(s), first: {}",
            msgs.len(),
            msgs[0]
        );
    }
    Ok(())
}

pub fn has_display() -> bool {
    std::env::var_os("DISPLAY").is_some_and(|d| !d.is_empty())
}

/// `--bench --dump FILE`: the benchmark's rows (JSON objects) as one JSON document.
pub fn write_bench_json(
    path: &Path,
    dev: &Devices,
    frames: u64,
    rows: &[String],
) -> anyhow::Result<()> {
    std::fs::write(
        path,
        format!(
            "{{\"device\":\"{}\",\"frames\":{frames},\"rows\":[{}]}}\n",
            dev.vk.info().name,
            rows.join(",")
        ),
    )?;
    println!("wrote {}", path.display());
    Ok(())
}

/// The exit code of a demo run: 2 for bad command-line input ([`Usage`]), 1 for other errors,
/// which go to stderr.
pub fn exit_code(result: anyhow::Result<()>) -> ExitCode {
    match result {
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

/// Frame ordering of a demo's loop: the frame pacer where CUDA simulates, one local timeline
/// otherwise (the same K frames in flight and 2K command slots).
#[allow(clippy::large_enum_variant)] // one per engine
pub enum Sync {
    Pacer(cuvk::FramePacer),
    Local {
        timeline: Arc<Semaphore>,
        next: u64,
        k: u64,
    },
}

/// One frame of the loop: handed out by the pacer, or numbered the same way without one.
#[derive(Clone, Copy)]
pub enum LoopFrame {
    Paced(cuvk::Frame),
    Local(crate::UnpacedFrame),
}

impl LoopFrame {
    pub fn number(&self) -> u64 {
        match self {
            LoopFrame::Paced(f) => f.number(),
            LoopFrame::Local(f) => f.number,
        }
    }
    /// The data slot: `number % K` (the fluid demo keeps its data per command slot).
    pub fn slot(&self) -> usize {
        match self {
            LoopFrame::Paced(f) => f.slot(),
            LoopFrame::Local(f) => f.slot,
        }
    }
    /// The command slot: `number % 2K`.
    pub fn command_slot(&self) -> usize {
        match self {
            LoopFrame::Paced(f) => f.command_slot(),
            LoopFrame::Local(f) => f.command_slot,
        }
    }
}

impl Sync {
    /// A local timeline for `k` frames in flight.
    pub fn local(vk: &Arc<VulkanContext>, k: usize) -> anyhow::Result<Self> {
        Ok(Sync::Local {
            timeline: Semaphore::new(vk, cuvk::vulkan::SemaphoreDesc::LOCAL_TIMELINE)?,
            next: 1,
            k: k as u64,
        })
    }

    /// The number of the last frame submitted.
    pub fn last_frame(&self) -> u64 {
        match self {
            Sync::Pacer(p) => p.vulkan_done().highest_signal(),
            Sync::Local { next, .. } => next - 1,
        }
    }

    /// The next frame; a local loop waits (at most `timeout`) until frame `N - 2K`, the last
    /// user of its command slot, has completed.
    pub fn begin(&mut self, timeout: std::time::Duration) -> anyhow::Result<LoopFrame> {
        match self {
            Sync::Pacer(p) => Ok(LoopFrame::Paced(p.begin_frame()?)),
            Sync::Local { timeline, next, k } => {
                let number = *next;
                if let Some(prev) = number.checked_sub(2 * *k).filter(|&n| n > 0) {
                    timeline.wait_host(prev, timeout)?;
                }
                *next += 1;
                Ok(LoopFrame::Local(crate::unpaced_frame(number, *k as u32)))
            }
        }
    }

    /// Submits `frame`'s command buffer, waiting for `waits` and signalling `signals` plus the
    /// frame's own semaphores (the pacer's, or the local timeline at the frame number).
    ///
    /// # Safety
    /// As `VulkanContext::submit_with_semaphores`.
    pub unsafe fn submit<'a>(
        &'a self,
        vk: &VulkanContext,
        frame: &LoopFrame,
        cmd: vk::CommandBuffer,
        wait_stage: vk::PipelineStageFlags,
        waits: &[cuvk::vulkan::SemaphoreOp<'_>],
        mut signals: Vec<cuvk::vulkan::SemaphoreOp<'a>>,
    ) -> anyhow::Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe {
            match (self, frame) {
                (Sync::Pacer(p), LoopFrame::Paced(f)) => p.vulkan_submit(
                    f,
                    &cuvk::FrameSubmit::new(&[cmd], wait_stage)
                        .waits(waits)
                        .signals(&signals),
                )?,
                (Sync::Pacer(_), LoopFrame::Local(_)) => bail!("an unpaced frame under the pacer"),
                (Sync::Local { timeline, .. }, _) => {
                    signals.push(cuvk::vulkan::SemaphoreOp {
                        semaphore: timeline,
                        value: frame.number(),
                        stage: vk::PipelineStageFlags::empty(),
                    });
                    vk.submit_with_semaphores(&[cmd], waits, &signals, vk::Fence::null())?
                }
            }
        }
        Ok(())
    }

    /// Waits on the host (at most `timeout`) until frame `number` has completed on the GPU.
    pub fn wait_for(&self, number: u64, timeout: std::time::Duration) -> anyhow::Result<()> {
        match self {
            Sync::Pacer(p) => p.frames_complete().wait_host(number, timeout)?,
            Sync::Local { timeline, .. } => timeline.wait_host(number, timeout)?,
        }
        Ok(())
    }
}

/// A pool of `count` timestamp queries, reset once on the GPU, and the nanoseconds per tick.
pub fn timestamp_queries(
    vk: &Arc<VulkanContext>,
    count: u32,
) -> anyhow::Result<(vk::QueryPool, f64)> {
    let qinfo = vk::QueryPoolCreateInfo::default()
        .query_type(vk::QueryType::TIMESTAMP)
        .query_count(count);
    // SAFETY: valid device; the engine destroys it in Drop.
    let queries = unsafe { vk.device().create_query_pool(&qinfo, None) }?;
    // SAFETY: valid instance/physical device.
    let timestamp_ns = unsafe {
        vk.instance()
            .get_physical_device_properties(vk.physical_device())
    }
    .limits
    .timestamp_period as f64;
    // SAFETY: queries are reset before use; resetting on the host needs hostQueryReset, so
    // reset them all once on the GPU here.
    unsafe { vk.submit_and_wait(|d, cmd| d.cmd_reset_query_pool(cmd, queries, 0, count))? };
    Ok((queries, timestamp_ns))
}

/// Seconds each of `spans` pieces of GPU work took, measured with timestamps in one
/// synchronous submission: `before` is recorded first, then for each `i` a timestamp,
/// `span(i)` and another timestamp, then `after`. `span` should end with a barrier if the
/// next span must not overlap it.
///
/// # Safety
/// Everything the closures record must be valid on `vk`'s device and use only what outlives
/// the call (it waits for the submission).
pub unsafe fn gpu_span_seconds(
    vk: &VulkanContext,
    spans: u32,
    before: impl FnOnce(&cuvk::ash::Device, vk::CommandBuffer),
    mut span: impl FnMut(&cuvk::ash::Device, vk::CommandBuffer, u32),
    after: impl FnOnce(&cuvk::ash::Device, vk::CommandBuffer),
) -> anyhow::Result<Vec<f64>> {
    let dev = vk.device();
    let count = 2 * spans;
    let info = vk::QueryPoolCreateInfo::default()
        .query_type(vk::QueryType::TIMESTAMP)
        .query_count(count);
    // SAFETY: valid device; destroyed below, after the synchronous submission.
    let pool = unsafe { dev.create_query_pool(&info, None) }?;
    // SAFETY: the caller vouches for what the closures record; the pool outlives the wait.
    let recorded = unsafe {
        vk.submit_and_wait(|dev, cmd| {
            dev.cmd_reset_query_pool(cmd, pool, 0, count);
            before(dev, cmd);
            for i in 0..spans {
                dev.cmd_write_timestamp(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, pool, 2 * i);
                span(dev, cmd, i);
                dev.cmd_write_timestamp(
                    cmd,
                    vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                    pool,
                    2 * i + 1,
                );
            }
            after(dev, cmd);
        })
    };
    let mut ticks = vec![0u64; count as usize];
    let read = recorded.and_then(|_| {
        // SAFETY: every query was written by the completed submission.
        unsafe { dev.get_query_pool_results(pool, 0, &mut ticks, vk::QueryResultFlags::TYPE_64) }
            .map_err(|result| cuvk::Error::Vulkan {
                call: "vkGetQueryPoolResults",
                result,
            })
    });
    // SAFETY: no submission uses the pool any more.
    unsafe { dev.destroy_query_pool(pool, None) };
    read?;
    // SAFETY: valid instance and physical device.
    let tick_ns = unsafe {
        vk.instance()
            .get_physical_device_properties(vk.physical_device())
    }
    .limits
    .timestamp_period as f64;
    Ok(ticks
        .chunks(2)
        .map(|t| (t[1] - t[0]) as f64 * tick_ns * 1e-9)
        .collect())
}

/// `times` in frame order with `frame` = the GPU frame period (the time since the previous
/// frame's last timestamp); the first frame, with no previous one, is left out.
pub fn frame_periods(times: &[FrameTimes]) -> Vec<FrameTimes> {
    let mut t = times.to_vec();
    t.sort_by_key(|f| f.number);
    for i in 1..t.len() {
        t[i].frame = (t[i].end_ns - t[i - 1].end_ns) * 1e-6;
    }
    if !t.is_empty() {
        t.remove(0); // no previous frame to measure against
    }
    t
}
