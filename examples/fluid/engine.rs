//! The fluid demo's engine: the fields (shared images CUDA writes through surfaces, Vulkan
//! images that fluid.cu's kernels reach through image handles inside the Vulkan queue, or
//! plain Vulkan storage images for the fallback), the three simulations of one stable-fluids
//! step, the compute pass that samples the dye and draws it, and the frame loop ordered by the
//! frame pacer (CUDA context) or a local timeline (inline kernels, Vulkan compute).
//!
//! Frame N (from 1) starts from velocity `vel[(N+1) % 2]` and ends in `vel[N % 2]`; it
//! advects the dye of slot `(N-1) % K` into slot `N % K`, which Vulkan then samples. On the
//! CUDA-context path only the dye slots are shared between the two APIs within a frame; the
//! pacer keeps CUDA from writing a slot until Vulkan has drawn it (K frames earlier). Inline,
//! the kernels are commands of the frame's own command buffer, before the draw: one queue, no
//! handoff.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::cuda::SurfaceObject;
use cuvk::cudarc::driver::{sys, CudaEvent, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cuvk::vulkan::{
    cmd_acquire_images, cmd_release_images, image_handles_supported, record_kernel_barrier,
    record_kernel_to_kernel_barrier, AsVkBuffer, AsVkImage, BoundImage, CuFunction, CuModule,
    ImageOptions, ImageRegion, InlineImageHandle, KernelArg, LaunchDims, SemaphoreOp, ViewLayers,
    VulkanContext,
};
use cuvk::{Bridge, FramePacer, ImageDesc, SharedImage};
use cuvk_dev::{CommandSlots, MemoryLocation, PrivateAllocator, PrivateBuffer};

use crate::demo::{
    frame_periods, record_to_swapchain, timestamp_queries, write_png, Devices, FrameTimes,
    LoopFrame, Sync, Target,
};
use crate::pipeline::{image_view, Pass, Resource, Sampler, SetLayout};
use crate::sim::{hue, Emitter, Params, Script, MAX_EMITTERS, PRESSURE_KEEP};

/// Which path simulates. `--sim cuda` asks for a CUDA simulation (`Cuda` until `--launch` is
/// resolved against the devices: `crate::choose_sim`); the engine runs what this says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimKind {
    /// fluid.cu's kernels on a CUDA stream, on shared images through CUDA surface objects;
    /// frames ordered with Vulkan by the pacer's semaphores.
    Cuda,
    /// fluid.cu's kernels inside the frame's Vulkan command buffer (`VK_NVX_binary_import`),
    /// on Vulkan images through image handles (`VK_NVX_image_view_handle`): no CUDA stream, no
    /// semaphore between the APIs.
    Inline,
    /// The passes as Vulkan compute shaders on Vulkan storage images.
    Vulkan,
}

/// Where a CUDA simulation's kernels run (`--launch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    /// Inline where the device can (`cuda_kernels_supported` and `image_handles_supported`),
    /// else on a CUDA stream.
    Auto,
    /// Inside the Vulkan queue through image handles (refused where the device cannot).
    Inline,
    /// On a CUDA stream (the CUDA-context path).
    Cuda,
}

impl Launch {
    /// As `--launch` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Launch::Auto => "auto",
            Launch::Inline => "inline",
            Launch::Cuda => "cuda",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    /// Grid texels per side.
    pub grid: u32,
    /// Output (window or PNG) pixels.
    pub width: u32,
    pub height: u32,
    pub sim: SimKind,
    /// Where a CUDA simulation's kernels run (resolved into `sim` by `crate::choose_sim`).
    pub launch: Launch,
    pub seed: u64,
    pub frames_in_flight: u32,
    /// Jacobi iterations per step (even).
    pub iterations: u32,
    pub shader_dir: PathBuf,
}

/// The simulation passes, in the order a step runs them (kernel names in fluid.cu, shader
/// files `<name>.spv`).
pub const PASSES: [&str; 7] = [
    "fluid_curl",
    "fluid_force",
    "fluid_advect_velocity",
    "fluid_divergence",
    "fluid_jacobi",
    "fluid_gradient",
    "fluid_advect_dye",
];

/// The shader files the demo reads at start-up.
pub struct Shaders {
    pub passes: Vec<Vec<u8>>,
    pub draw: Vec<u8>,
    pub fluid_cu: String,
}

impl Shaders {
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        let read = |name: &str| {
            std::fs::read(dir.join(name))
                .with_context(|| format!("cannot read shader {}", dir.join(name).display()))
        };
        Ok(Self {
            passes: PASSES
                .iter()
                .map(|p| read(&format!("{p}.spv")))
                .collect::<anyhow::Result<_>>()?,
            draw: read("fluid_draw.spv")?,
            fluid_cu: String::from_utf8(read("fluid.cu")?).context("fluid.cu is not UTF-8")?,
        })
    }
}

const VELOCITY: vk::Format = vk::Format::R32G32_SFLOAT;
const SCALAR: vk::Format = vk::Format::R32_SFLOAT;
const DYE: vk::Format = vk::Format::R16G16B16A16_SFLOAT;

/// Bytes of GPU memory the fields of `opts` take.
pub fn bytes_needed(opts: &Options) -> u64 {
    let texels = u64::from(opts.grid) * u64::from(opts.grid);
    // velocity ×2 (8 B), pressure ×2 + scratch (4 B), dye ×K (8 B)
    texels * (2 * 8 + 3 * 4 + 8 * u64::from(opts.frames_in_flight))
}

/// Where the simulation's images come from.
#[derive(Clone, Copy)]
enum Backing<'a> {
    /// Shared with CUDA (the CUDA-context path: surface objects).
    Shared(&'a Bridge),
    /// Vulkan's own, with an image handle for kernels inside the Vulkan queue.
    Inline,
    /// Vulkan's own (the compute-shader fallback).
    Local,
}

/// An image of the simulation: shared with CUDA (a surface for its kernels), Vulkan's own with
/// a surface handle for inline kernels, or Vulkan's own.
enum Store {
    Shared {
        // Declared first: dropped before the image (either order is safe).
        surface: SurfaceObject,
        image: SharedImage,
    },
    /// Not shared with a CUDA context (inline kernels run in the Vulkan device's): plain
    /// device-local memory, no ownership transfers; between uses in `GENERAL`, owned by the
    /// queue's family, as the compute fallback's images.
    Inline {
        // The handle keeps the image alive too (either drop order is safe).
        surface: InlineImageHandle,
        image: Arc<BoundImage>,
    },
    Local(BoundImage),
}

struct Field {
    vk: Arc<VulkanContext>,
    view: vk::ImageView,
    store: Store,
}

impl Field {
    fn new(
        vk: &Arc<VulkanContext>,
        backing: Backing<'_>,
        format: vk::Format,
        n: u32,
        extra_usage: vk::ImageUsageFlags,
    ) -> anyhow::Result<Self> {
        let usage = vk::ImageUsageFlags::STORAGE
            | vk::ImageUsageFlags::TRANSFER_SRC
            | vk::ImageUsageFlags::TRANSFER_DST
            | extra_usage;
        let desc = ImageDesc::d2(format, n, n, usage);
        let store = match backing {
            Backing::Shared(b) => {
                let image = b.create_image(&desc)?;
                Store::Shared {
                    surface: image.surface(0)?,
                    image,
                }
            }
            Backing::Inline => {
                let image = Arc::new(BoundImage::new(vk, &desc, ImageOptions::LOCAL)?);
                Store::Inline {
                    surface: InlineImageHandle::surface(&image, 0, ViewLayers::All)?,
                    image,
                }
            }
            Backing::Local => Store::Local(BoundImage::new(vk, &desc, ImageOptions::LOCAL)?),
        };
        let mut me = Self {
            vk: vk.clone(),
            view: vk::ImageView::null(),
            store,
        };
        me.view = image_view(vk, me.image().vk_image(), format)?;
        me.clear()?;
        Ok(me)
    }

    fn image(&self) -> &dyn AsVkImage {
        match &self.store {
            Store::Shared { image, .. } => image,
            Store::Inline { image, .. } => &**image,
            Store::Local(image) => image,
        }
    }

    /// Zero everywhere (waits; the GPU must not be using the image).
    fn clear(&mut self) -> anyhow::Result<()> {
        let zero = vk::ClearColorValue { float32: [0.0; 4] };
        let image: &mut dyn AsVkImage = match &mut self.store {
            Store::Shared { image, .. } => image,
            Store::Local(image) => image,
            // Shared with its handle: cleared through a shared borrow.
            Store::Inline { image, .. } => return clear_bound_image(&self.vk, image, zero),
        };
        self.vk.clear_color_image(image, zero)?;
        Ok(())
    }

    /// The CUDA surface object (shared images only).
    fn surface(&self) -> anyhow::Result<&sys::CUsurfObject> {
        match &self.store {
            Store::Shared { surface, .. } => Ok(surface.kernel_arg()),
            _ => bail!("only a shared image has a CUDA surface object"),
        }
    }

    /// The surface handle for kernels inside the Vulkan queue, as a kernel argument (inline
    /// images only).
    fn inline_surface(&self) -> anyhow::Result<KernelArg> {
        match &self.store {
            Store::Inline { surface, .. } => Ok(surface.kernel_arg()),
            _ => bail!("only an inline field has a surface handle for kernels in Vulkan queues"),
        }
    }

    /// The whole image, tightly packed (waits; the GPU must not be writing it).
    fn read(&self, alloc: &Arc<PrivateAllocator>) -> anyhow::Result<Vec<u8>> {
        let desc = self.image().vk_image_desc();
        let texel = cuvk::format_info(desc.format)?.texel_bytes();
        let bytes = u64::from(desc.extent.width) * u64::from(desc.extent.height) * u64::from(texel);
        let mut host = PrivateBuffer::readback(alloc, "field readback", bytes)?;
        self.vk
            .copy_image_to_buffer(self.image(), ImageRegion::level(desc, 0), &mut host, 0)?;
        Ok(host.read()?)
    }
}

/// Clears every texel of `image` to `color` with `vkCmdClearColorImage` and waits, as
/// `VulkanContext::clear_color_image` does (acquired in `TRANSFER_DST_OPTIMAL`, released back to
/// the protocol's `GENERAL`), for an image the engine holds in an `Arc` beside its inline handle
/// (so it cannot lend it mutably).
fn clear_bound_image(
    ctx: &VulkanContext,
    image: &BoundImage,
    color: vk::ClearColorValue,
) -> anyhow::Result<()> {
    let family = ctx.queue_family_index();
    let layout = vk::ImageLayout::TRANSFER_DST_OPTIMAL;
    let range = [image.desc().full_range()];
    let images: [(&dyn AsVkImage, vk::ImageLayout); 1] = [(image, layout)];
    let (stage, access) = (
        vk::PipelineStageFlags::TRANSFER,
        vk::AccessFlags::TRANSFER_WRITE,
    );
    // SAFETY: a live image of this device (borrowed across the wait), not external, in the
    // protocol's state between uses (the engine waited for the GPU: reset / new), with
    // TRANSFER_DST usage (Field::new); no host view of its memory exists (device-local).
    unsafe {
        ctx.submit_and_wait(|d, cmd| {
            cmd_acquire_images(d, cmd, family, &images, stage, access);
            d.cmd_clear_color_image(cmd, image.handle(), layout, &color, &range);
            cmd_release_images(d, cmd, family, &images, stage, access);
        })
    }?;
    Ok(())
}

impl Drop for Field {
    fn drop(&mut self) {
        // SAFETY: the engine waited for the GPU before dropping its fields; the view is ours.
        unsafe { self.vk.device().destroy_image_view(self.view, None) };
    }
}

/// The simulation's images.
struct Fields {
    vel: [Field; 2],
    pressure: [Field; 2],
    /// Curl, then divergence, within a step.
    scratch: Field,
    /// One per frame slot: CUDA writes slot N % K in frame N, Vulkan samples it.
    dye: Vec<Field>,
}

impl Fields {
    fn new(vk: &Arc<VulkanContext>, backing: Backing<'_>, opts: &Options) -> anyhow::Result<Self> {
        let n = opts.grid;
        let none = vk::ImageUsageFlags::empty();
        let f = |format| Field::new(vk, backing, format, n, none);
        Ok(Self {
            vel: [f(VELOCITY)?, f(VELOCITY)?],
            pressure: [f(SCALAR)?, f(SCALAR)?],
            scratch: f(SCALAR)?,
            dye: (0..opts.frames_in_flight)
                .map(|_| Field::new(vk, backing, DYE, n, vk::ImageUsageFlags::SAMPLED))
                .collect::<anyhow::Result<_>>()?,
        })
    }

    fn all_mut(&mut self) -> impl Iterator<Item = &mut Field> {
        self.vel
            .iter_mut()
            .chain(self.pressure.iter_mut())
            .chain(std::iter::once(&mut self.scratch))
            .chain(self.dye.iter_mut())
    }
}

/// Which images a step reads and writes: frame `number`'s parities and slots.
#[derive(Clone, Copy, Debug)]
struct StepIndices {
    /// Velocity at the start (`(N+1) % 2`) and at the end (`N % 2`).
    a: usize,
    b: usize,
    /// Dye read (`(N-1) % K`) and written (`N % K`).
    prev: usize,
    slot: usize,
}

impl StepIndices {
    fn of(number: u64, k: usize) -> Self {
        let n = number as usize;
        Self {
            a: (n + 1) % 2,
            b: n % 2,
            prev: (n + k - 1) % k,
            slot: n % k,
        }
    }
}

/// The CUDA simulation: the kernels of fluid.cu on their own stream, timing events per
/// command slot.
struct CudaSim {
    stream: Arc<CudaStream>,
    kernels: Vec<CudaFunction>,
    events: Vec<(CudaEvent, CudaEvent)>,
}

impl CudaSim {
    fn new(bridge: &Bridge, source: &str, command_slots: usize) -> anyhow::Result<Self> {
        let module = cuvk::cuda::compile_module(bridge.cuda(), "fluid.cu", source)?;
        let kernels = PASSES
            .iter()
            .map(|name| module.load_function(name))
            .collect::<Result<_, _>>()?;
        let events = (0..command_slots)
            .map(|_| {
                let e = || {
                    bridge
                        .cuda()
                        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                };
                Ok((e()?, e()?))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self {
            stream: bridge.cuda().new_stream()?,
            kernels,
            events,
        })
    }

    /// Enqueues one step (not synchronised): the passes of [`crate::sim::step_cpu`].
    fn step(
        &self,
        fields: &Fields,
        p: &Params,
        ix: StepIndices,
        iterations: u32,
    ) -> anyhow::Result<()> {
        let s = &self.stream;
        let n = p.width;
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(16), p.height.div_ceil(16), 1),
            block_dim: (16, 16, 1),
            shared_mem_bytes: 0,
        };
        let k = |i: usize| &self.kernels[i];
        let surf = Field::surface;
        let (va, vb) = (surf(&fields.vel[ix.a])?, surf(&fields.vel[ix.b])?);
        let (p0, p1) = (surf(&fields.pressure[0])?, surf(&fields.pressure[1])?);
        let scratch = surf(&fields.scratch)?;
        // SAFETY: (every launch below) each surface is a live SURFACE_LDST level of an n×n
        // image of the format the kernel reads and writes (Fields::new); the kernels stay
        // within the grid; the images outlive the launches (the engine waits for the stream
        // before dropping them).
        unsafe {
            if !p.is_paused() {
                s.launch_builder(k(0))
                    .arg(p)
                    .arg(va)
                    .arg(scratch)
                    .launch(cfg)?;
                s.launch_builder(k(1))
                    .arg(p)
                    .arg(va)
                    .arg(scratch)
                    .arg(vb)
                    .launch(cfg)?;
                s.launch_builder(k(2)).arg(p).arg(vb).arg(va).launch(cfg)?;
                s.launch_builder(k(3))
                    .arg(p)
                    .arg(va)
                    .arg(scratch)
                    .launch(cfg)?;
                for i in 0..iterations {
                    let (from, to) = if i % 2 == 0 { (p0, p1) } else { (p1, p0) };
                    let scale = if i == 0 { PRESSURE_KEEP } else { 1.0f32 };
                    s.launch_builder(k(4))
                        .arg(p)
                        .arg(from)
                        .arg(scratch)
                        .arg(to)
                        .arg(&scale)
                        .launch(cfg)?;
                }
                s.launch_builder(k(5))
                    .arg(p)
                    .arg(p0)
                    .arg(va)
                    .arg(vb)
                    .launch(cfg)?;
            } else {
                // Paused: the force pass with no force copies the velocity to where the next
                // frame looks for it.
                s.launch_builder(k(1))
                    .arg(p)
                    .arg(va)
                    .arg(scratch)
                    .arg(vb)
                    .launch(cfg)?;
            }
            s.launch_builder(k(6))
                .arg(p)
                .arg(vb)
                .arg(surf(&fields.dye[ix.prev])?)
                .arg(surf(&fields.dye[ix.slot])?)
                .launch(cfg)?;
        }
        Ok(())
    }
}

/// The CUDA simulation inside the Vulkan queue: the same kernels of fluid.cu, compiled to PTX
/// with NVRTC and loaded into the Vulkan device (`VK_NVX_binary_import`), reading and writing
/// the fields through their surface handles (`VK_NVX_image_view_handle`), recorded into the
/// frame's command buffer before the draw. No CUDA stream, no semaphore between the APIs: the
/// frames are ordered by the local timeline, as the compute fallback's are.
struct InlineSim {
    /// One per pass ([`PASSES`]); each holds the module alive.
    kernels: Vec<CuFunction>,
}

impl InlineSim {
    fn new(bridge: &Bridge, source: &str) -> anyhow::Result<Self> {
        let ptx = cuvk::cuda::compile_ptx(bridge.cuda(), "fluid.cu", source)?;
        let module = CuModule::from_ptx(bridge.vulkan(), &ptx)?;
        let kernels = PASSES
            .iter()
            .map(|name| module.function(name))
            .collect::<Result<_, _>>()?;
        Ok(Self { kernels })
    }

    /// Records one step, the kernel barrier after each pass: the launches of
    /// [`CudaSim::step`], with the same arguments in the same order (surface handles where
    /// that passes CUDA surface objects; each launch is checked against the kernel's PTX
    /// signature).
    ///
    /// # Safety
    /// `cmd` is recording on `ctx`'s device (the kernels'); the fields outlive the commands
    /// and are in `GENERAL`, owned by the queue's family, when they run.
    unsafe fn record(
        &self,
        ctx: &VulkanContext,
        cmd: vk::CommandBuffer,
        fields: &Fields,
        p: &Params,
        ix: StepIndices,
        iterations: u32,
    ) -> anyhow::Result<()> {
        let dims = LaunchDims {
            grid: [p.width.div_ceil(16), p.height.div_ceil(16), 1],
            block: [16, 16, 1],
            shared_mem_bytes: 0,
        };
        let params = KernelArg::value(p);
        let h = Field::inline_surface;
        let (va, vb) = (h(&fields.vel[ix.a])?, h(&fields.vel[ix.b])?);
        let (p0, p1) = (h(&fields.pressure[0])?, h(&fields.pressure[1])?);
        let scratch = h(&fields.scratch)?;
        let launch = |pass: usize, args: &[&KernelArg]| -> anyhow::Result<()> {
            let mut all = vec![params.clone()];
            all.extend(args.iter().map(|&a| a.clone()));
            // SAFETY: forwarded from the caller; each handle is a live surface of an n×n
            // image of the format the kernel reads and writes (Fields::new), and the kernels
            // stay within the grid.
            unsafe {
                self.kernels[pass].record_launch(cmd, &dims, &all)?;
                // Between passes only the next kernel reads: the barrier to every later
                // command made a 1024² step 0.13 ms slower over its 46 passes (H200).
                record_kernel_to_kernel_barrier(ctx, cmd);
            }
            Ok(())
        };
        if !p.is_paused() {
            launch(0, &[&va, &scratch])?;
            launch(1, &[&va, &scratch, &vb])?;
            launch(2, &[&vb, &va])?;
            launch(3, &[&va, &scratch])?;
            for i in 0..iterations {
                let (from, to) = if i % 2 == 0 { (&p0, &p1) } else { (&p1, &p0) };
                let scale = if i == 0 { PRESSURE_KEEP } else { 1.0f32 };
                launch(4, &[from, &scratch, to, &KernelArg::value(&scale)])?;
            }
            launch(5, &[&p0, &va, &vb])?;
        } else {
            // Paused: the force pass with no force copies the velocity (as CudaSim::step).
            launch(1, &[&va, &scratch, &vb])?;
        }
        let (prev, slot) = (h(&fields.dye[ix.prev])?, h(&fields.dye[ix.slot])?);
        launch(6, &[&vb, &prev, &slot])?;
        // SAFETY: as above: the chain's writes, visible to every later command (the draw).
        unsafe { record_kernel_barrier(ctx, cmd) };
        Ok(())
    }
}

/// The Vulkan simulation: the passes as compute shaders, descriptor sets for each parity and
/// slot, and the parameters in a uniform buffer per command slot.
struct VulkanSim {
    passes: Vec<Pass>,
    // Sets live as long as their layouts (declared after the passes: dropped after them).
    curl: [vk::DescriptorSet; 2],
    force: [vk::DescriptorSet; 2],
    advect_velocity: [vk::DescriptorSet; 2],
    divergence: [vk::DescriptorSet; 2],
    jacobi: [vk::DescriptorSet; 2],
    gradient: [vk::DescriptorSet; 2],
    /// `[slot][parity of the velocity it reads]`.
    advect_dye: Vec<[vk::DescriptorSet; 2]>,
    params: Vec<vk::DescriptorSet>,
    ubos: Vec<PrivateBuffer>,
    _layouts: [SetLayout; 3],
}

impl VulkanSim {
    fn new(
        alloc: &Arc<PrivateAllocator>,
        shaders: &Shaders,
        fields: &Fields,
        command_slots: usize,
    ) -> anyhow::Result<Self> {
        let vk = alloc.context();
        let k = fields.dye.len();
        let img = vk::DescriptorType::STORAGE_IMAGE;
        let two = SetLayout::new(vk, &[img, img], 6)?;
        let three = SetLayout::new(vk, &[img, img, img], (6 + 2 * k) as u32)?;
        let params = SetLayout::new(
            vk,
            &[vk::DescriptorType::UNIFORM_BUFFER],
            command_slots as u32,
        )?;
        let pass_layout = |i: usize| if matches!(i, 0 | 2 | 3) { &two } else { &three };
        let passes = shaders
            .passes
            .iter()
            .enumerate()
            .map(|(i, spv)| {
                Pass::new(
                    vk,
                    spv,
                    &[pass_layout(i), &params],
                    if i == 4 { 4 } else { 0 },
                )
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let v = |f: &Field| Resource::StorageImage(f.view);
        let (vel, pr, scratch) = (&fields.vel, &fields.pressure, &fields.scratch);
        let per_parity = |layout: &SetLayout, f: &dyn Fn(usize) -> Vec<Resource>| {
            Ok::<_, anyhow::Error>([layout.allocate(&f(0))?, layout.allocate(&f(1))?])
        };
        let ubos = (0..command_slots)
            .map(|_| {
                PrivateBuffer::new(
                    alloc,
                    "params uniforms",
                    std::mem::size_of::<Params>() as u64,
                    vk::BufferUsageFlags::UNIFORM_BUFFER,
                    MemoryLocation::CpuToGpu,
                )
            })
            .collect::<cuvk::Result<Vec<_>>>()?;
        Ok(Self {
            curl: per_parity(&two, &|a| vec![v(&vel[a]), v(scratch)])?,
            force: per_parity(&three, &|a| vec![v(&vel[a]), v(scratch), v(&vel[1 - a])])?,
            advect_velocity: per_parity(&two, &|a| vec![v(&vel[a]), v(&vel[1 - a])])?,
            divergence: per_parity(&two, &|a| vec![v(&vel[a]), v(scratch)])?,
            jacobi: per_parity(&three, &|i| vec![v(&pr[i]), v(scratch), v(&pr[1 - i])])?,
            gradient: per_parity(&three, &|a| vec![v(&pr[0]), v(&vel[a]), v(&vel[1 - a])])?,
            advect_dye: (0..k)
                .map(|s| {
                    let prev = (s + k - 1) % k;
                    per_parity(&three, &|b| {
                        vec![v(&vel[b]), v(&fields.dye[prev]), v(&fields.dye[s])]
                    })
                })
                .collect::<anyhow::Result<_>>()?,
            params: ubos
                .iter()
                .map(|u| params.allocate(&[Resource::Uniform(u.vk_buffer())]))
                .collect::<anyhow::Result<_>>()?,
            ubos,
            passes,
            _layouts: [two, three, params],
        })
    }

    /// Records one step, a barrier after each pass (the passes of [`CudaSim::step`]).
    ///
    /// # Safety
    /// `cmd` is recording; the fields and the uniform buffer of `command_slot` (holding `p`)
    /// outlive the commands.
    unsafe fn record(
        &self,
        d: &cuvk::ash::Device,
        cmd: vk::CommandBuffer,
        p: &Params,
        ix: StepIndices,
        command_slot: usize,
        iterations: u32,
    ) {
        let ps = self.params[command_slot];
        let size = (p.width, p.height);
        let run = |pass: usize, set: vk::DescriptorSet, push: &[u8]| {
            // SAFETY: forwarded from the caller.
            unsafe {
                self.passes[pass].record(cmd, &[set, ps], push, size);
                compute_barrier(d, cmd);
            }
        };
        if !p.is_paused() {
            run(0, self.curl[ix.a], &[]);
            run(1, self.force[ix.a], &[]);
            run(2, self.advect_velocity[ix.b], &[]);
            run(3, self.divergence[ix.a], &[]);
            for i in 0..iterations {
                let scale = if i == 0 { PRESSURE_KEEP } else { 1.0f32 };
                run(4, self.jacobi[(i % 2) as usize], &scale.to_ne_bytes());
            }
            run(5, self.gradient[ix.a], &[]);
        } else {
            run(1, self.force[ix.a], &[]);
        }
        run(6, self.advect_dye[ix.slot][ix.b], &[]);
    }
}

/// A compute→compute barrier: shader writes before it are visible to shader reads and writes
/// after it.
///
/// # Safety
/// `cmd` is recording on `d`.
unsafe fn compute_barrier(d: &cuvk::ash::Device, cmd: vk::CommandBuffer) {
    let b = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE)
        .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
    let cs = vk::PipelineStageFlags::COMPUTE_SHADER;
    // SAFETY: forwarded from the caller.
    unsafe { d.cmd_pipeline_barrier(cmd, cs, cs, vk::DependencyFlags::empty(), &b, &[], &[]) };
}

#[allow(clippy::large_enum_variant)] // one per engine
enum Sim {
    Cuda(CudaSim),
    Inline(InlineSim),
    Vulkan(VulkanSim),
}

/// What depends on the output size: the draw pass, its sets (one per dye slot), the pixels
/// and their readback buffer.
struct Canvas {
    width: u32,
    height: u32,
    draw: Pass,
    sets: Vec<vk::DescriptorSet>,
    _layout: SetLayout,
    pixels: PrivateBuffer,
    readback: PrivateBuffer,
}

impl Canvas {
    fn new(
        alloc: &Arc<PrivateAllocator>,
        draw_spv: &[u8],
        fields: &Fields,
        sampler: vk::Sampler,
        width: u32,
        height: u32,
    ) -> anyhow::Result<Self> {
        let vk = alloc.context();
        let bytes = u64::from(width) * u64::from(height) * 4;
        let pixels = PrivateBuffer::gpu_only(
            alloc,
            "canvas pixels",
            bytes,
            vk::BufferUsageFlags::STORAGE_BUFFER,
        )?;
        let readback = PrivateBuffer::readback(alloc, "canvas readback", bytes)?;
        let layout = SetLayout::new(
            vk,
            &[
                vk::DescriptorType::COMBINED_IMAGE_SAMPLER,
                vk::DescriptorType::STORAGE_BUFFER,
            ],
            fields.dye.len() as u32,
        )?;
        let draw = Pass::new(vk, draw_spv, &[&layout], 32)?;
        let sets = fields
            .dye
            .iter()
            .map(|d| {
                layout.allocate(&[
                    Resource::Sampled(d.view, sampler),
                    Resource::StorageBuffer(pixels.vk_buffer()),
                ])
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self {
            width,
            height,
            draw,
            sets,
            _layout: layout,
            pixels,
            readback,
        })
    }

    /// The draw pass's push constants: output size, packing, exposure, and the mapping from
    /// output uv to dye uv that covers the output with the (square) grid, cropping its edges.
    fn push(&self, bgra: bool, exposure: f32) -> Vec<u8> {
        let (w, h) = (self.width as f32, self.height as f32);
        let (scale, offset) = if w >= h {
            ([1.0, h / w], [0.0, 0.5 * (1.0 - h / w)])
        } else {
            ([w / h, 1.0], [0.5 * (1.0 - w / h), 0.0])
        };
        let mut v: Vec<u8> = Vec::with_capacity(32);
        v.extend_from_slice(bytemuck::cast_slice(&[
            self.width,
            self.height,
            u32::from(bgra),
        ]));
        v.extend_from_slice(bytemuck::cast_slice(&[
            exposure, scale[0], scale[1], offset[0], offset[1],
        ]));
        v
    }

    /// Output pixel → grid texel coordinates (the inverse of the draw's mapping).
    fn to_grid(&self, grid: u32, x: f32, y: f32) -> [f32; 2] {
        let (w, h) = (self.width as f32, self.height as f32);
        let (sx, sy, ox, oy) = if w >= h {
            (1.0, h / w, 0.0, 0.5 * (1.0 - h / w))
        } else {
            (w / h, 1.0, 0.5 * (1.0 - w / h), 0.0)
        };
        let g = grid as f32;
        [(x / w * sx + ox) * g, (y / h * sy + oy) * g]
    }
}

pub struct Engine {
    vk: Arc<VulkanContext>,
    /// The engine's own (non-shared) buffers; shared images are cuvk's.
    alloc: Arc<PrivateAllocator>,
    opts: Options,
    script: Script,
    // Field order is drop order: the GPU work is waited for in Drop; the canvas and the
    // simulation (descriptor sets, pipelines) go before the images they point at.
    canvas: Canvas,
    sim: Sim,
    fields: Fields,
    sampler: Sampler,
    sync: Sync,
    draw_spv: Vec<u8>,
    cmds: CommandSlots,
    queries: vk::QueryPool,
    timestamp_ns: f64,
    pending: Vec<Option<FrameTimes>>,
    times: Vec<FrameTimes>,
    /// The mouse's splat for the next frame: where, and the drag (texels) since the last.
    stir: Option<([f32; 2], [f32; 2])>,
    pub paused: bool,
    /// Whether the scripted jets run (the window's E key).
    pub jets: bool,
    pub bgra: bool,
    pub exposure: f32,
}

impl Engine {
    pub fn new(dev: &Devices, shaders: &Shaders, opts: Options) -> anyhow::Result<Self> {
        let vk = dev.vk.clone();
        let alloc = PrivateAllocator::new(&vk)?;
        let k = opts.frames_in_flight as usize;
        let command_slots = 2 * k;
        let bridge = || {
            dev.bridge
                .as_ref()
                .context("the CUDA simulation needs a CUDA device (use --sim vulkan)")
        };
        let (fields, sim, sync) = match opts.sim {
            SimKind::Cuda => {
                let b = bridge()?;
                let fields = Fields::new(&vk, Backing::Shared(b), &opts)?;
                let sim = Sim::Cuda(CudaSim::new(b, &shaders.fluid_cu, command_slots)?);
                (fields, sim, Sync::Pacer(FramePacer::new(b, k as u32)?))
            }
            SimKind::Inline => {
                // NVRTC compiles fluid.cu for the bridge's CUDA device; the kernels then run in
                // its Vulkan device, which must take image handles.
                let b = bridge()?;
                image_handles_supported(&vk).context(
                    "fluid.cu inside the Vulkan queue needs VK_NVX_binary_import and \
                     VK_NVX_image_view_handle (use --launch cuda)",
                )?;
                let fields = Fields::new(&vk, Backing::Inline, &opts)?;
                let sim = Sim::Inline(InlineSim::new(b, &shaders.fluid_cu)?);
                (fields, sim, Sync::local(&vk, k)?)
            }
            SimKind::Vulkan => {
                let fields = Fields::new(&vk, Backing::Local, &opts)?;
                let sim = Sim::Vulkan(VulkanSim::new(&alloc, shaders, &fields, command_slots)?);
                (fields, sim, Sync::local(&vk, k)?)
            }
        };
        let sampler = Sampler::linear(&vk)?;
        let canvas = Canvas::new(
            &alloc,
            &shaders.draw,
            &fields,
            sampler.handle,
            opts.width,
            opts.height,
        )?;
        let cmds = CommandSlots::new(&vk, command_slots)?;
        let (queries, timestamp_ns) = timestamp_queries(&vk, 4 * command_slots as u32)?;
        Ok(Self {
            script: Script::new(opts.seed, opts.grid, opts.grid),
            vk,
            alloc,
            canvas,
            sim,
            fields,
            sampler,
            sync,
            draw_spv: shaders.draw.clone(),
            cmds,
            queries,
            timestamp_ns,
            pending: vec![None; command_slots],
            times: Vec::new(),
            stir: None,
            paused: false,
            jets: true,
            bgra: false,
            exposure: 4.5,
            opts,
        })
    }

    /// Where the simulation runs, for the log.
    pub fn sim_path(&self) -> &'static str {
        match self.sim {
            Sim::Cuda(_) => {
                "CUDA kernels writing shared images through surfaces, frames ordered by the pacer's semaphores"
            }
            Sim::Inline(_) => {
                "CUDA kernels inside the Vulkan queue writing Vulkan images through image handles (VK_NVX_binary_import + VK_NVX_image_view_handle), frames ordered by one timeline"
            }
            Sim::Vulkan(_) => "Vulkan compute shaders on Vulkan storage images",
        }
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Draws at a new size from now on (waits for the GPU; the simulation goes on).
    pub fn resize(&mut self, width: u32, height: u32) -> anyhow::Result<()> {
        self.wait_idle()?;
        self.canvas = Canvas::new(
            &self.alloc,
            &self.draw_spv,
            &self.fields,
            self.sampler.handle,
            width,
            height,
        )?;
        self.opts.width = width;
        self.opts.height = height;
        Ok(())
    }

    /// Clears the fluid: no motion, no dye (waits for the GPU first).
    pub fn reset(&mut self) -> anyhow::Result<()> {
        self.wait_idle()?;
        for f in self.fields.all_mut() {
            f.clear()?;
        }
        Ok(())
    }

    /// Mouse drag from output pixel `from` to `to`: force along the drag and dye, next frame.
    pub fn stir(&mut self, from: [f32; 2], to: [f32; 2]) {
        let g = self.opts.grid;
        let (a, b) = (
            self.canvas.to_grid(g, from[0], from[1]),
            self.canvas.to_grid(g, to[0], to[1]),
        );
        let drag = match self.stir {
            Some((_, d)) => [d[0] + b[0] - a[0], d[1] + b[1] - a[1]],
            None => [b[0] - a[0], b[1] - a[1]],
        };
        self.stir = Some((b, drag));
    }

    /// The parameters of frame `number`: the script's jets (and the mouse), or a pause.
    pub fn params_for(&mut self, number: u64) -> Params {
        let n = self.opts.grid;
        if self.paused {
            self.stir = None;
            return Params::paused(n, n);
        }
        let mut emitters = if self.jets {
            self.script.emitters(number)
        } else {
            Vec::new()
        };
        if let Some((pos, drag)) = self.stir.take() {
            let r = 1.6 * self.script.radius();
            let rgb = hue(number as f32 / 240.0);
            let len = (drag[0] * drag[0] + drag[1] * drag[1]).sqrt();
            let limit = 0.06 * n as f32;
            let k = if len > limit { limit / len } else { 1.0 };
            emitters.push(Emitter {
                pos,
                force: [drag[0] * k, drag[1] * k],
                color: [rgb[0] * 0.6, rgb[1] * 0.6, rgb[2] * 0.6, 1.0 / (r * r)],
            });
        }
        emitters.truncate(MAX_EMITTERS);
        Params::new(n, n, &emitters)
    }

    /// The number of the last frame submitted.
    pub fn last_frame(&self) -> u64 {
        self.sync.last_frame()
    }

    fn begin(&mut self) -> anyhow::Result<LoopFrame> {
        self.sync.begin(Duration::from_secs(30))
    }

    /// Runs one frame into `target`. Returns when it is submitted (or, for a PNG, written).
    pub fn frame(&mut self, target: Target<'_>) -> anyhow::Result<()> {
        let t0 = Instant::now();
        let frame = self.begin()?;
        let wait_ms = t0.elapsed().as_secs_f64() * 1e3;
        let c = frame.command_slot();
        self.collect(c)?;
        let params = self.params_for(frame.number());
        let ix = StepIndices::of(frame.number(), self.fields.dye.len());
        match (&mut self.sim, &self.sync, &frame) {
            (Sim::Cuda(cuda), Sync::Pacer(pacer), LoopFrame::Paced(f)) => {
                let s = &cuda.stream;
                // Dye slot N % K was last drawn by frame N - K: wait (on the GPU) for it.
                pacer.cuda_acquire(f, s)?;
                let (ev0, ev1) = &cuda.events[c];
                ev0.record(s)?;
                cuda.step(&self.fields, &params, ix, self.opts.iterations)?;
                ev1.record(s)?;
                pacer.cuda_release(f, s)?;
            }
            (Sim::Vulkan(v), _, _) => v.ubos[c].write(std::slice::from_ref(&params))?,
            // The parameters travel in the launches (the driver copies them at record time).
            (Sim::Inline(_), _, _) => {}
            _ => bail!("the CUDA simulation runs under the pacer"),
        }
        let cmd = self.record(&frame, &target, &params, ix)?;
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
            self.sync.submit(
                &self.vk,
                &frame,
                cmd,
                vk::PipelineStageFlags::COMPUTE_SHADER,
                &waits,
                signals,
            )?
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

    fn record(
        &self,
        frame: &LoopFrame,
        target: &Target<'_>,
        params: &Params,
        ix: StepIndices,
    ) -> anyhow::Result<vk::CommandBuffer> {
        let d = self.vk.device();
        let c = frame.command_slot();
        let q0 = 4 * c as u32;
        let cv = &self.canvas;
        let dye = self.fields.dye[ix.slot].image();
        let general = vk::ImageLayout::GENERAL;
        let cs = vk::PipelineStageFlags::COMPUTE_SHADER;
        // SAFETY: the command slot's previous frame completed (begin); every handle is ours
        // and outlives the submission.
        unsafe {
            let cmd = self.cmds.begin(c)?;
            d.cmd_reset_query_pool(cmd, self.queries, q0, 4);
            d.cmd_write_timestamp(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, self.queries, q0);
            // Everything earlier frames wrote is visible to this frame.
            let all = vk::PipelineStageFlags::ALL_COMMANDS;
            let b = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
                .dst_access_mask(vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE)];
            d.cmd_pipeline_barrier(cmd, all, all, vk::DependencyFlags::empty(), &b, &[], &[]);
            match (&self.sim, &self.sync) {
                (Sim::Vulkan(v), _) => {
                    v.record(d, cmd, params, ix, c, self.opts.iterations);
                }
                // The kernels' last barrier makes the dye visible to the draw; the images stay
                // in GENERAL with the queue's family (no CUDA context to hand them to).
                (Sim::Inline(s), _) => {
                    s.record(
                        &self.vk,
                        cmd,
                        &self.fields,
                        params,
                        ix,
                        self.opts.iterations,
                    )?;
                }
                (Sim::Cuda(_), Sync::Pacer(p)) => {
                    // The dye CUDA just wrote: from VK_QUEUE_FAMILY_EXTERNAL, staying in
                    // GENERAL (CUDA may read it for the next step while this draws it).
                    p.record_image_acquire_from_cuda(
                        cmd,
                        &[(dye, general)],
                        cs,
                        vk::AccessFlags::SHADER_READ,
                    );
                }
                (Sim::Cuda(_), _) => bail!("the CUDA simulation runs under the pacer"),
            }
            d.cmd_write_timestamp(
                cmd,
                vk::PipelineStageFlags::ALL_COMMANDS,
                self.queries,
                q0 + 1,
            );
            cv.draw.record(
                cmd,
                &[cv.sets[ix.slot]],
                &cv.push(self.bgra, self.exposure),
                (cv.width, cv.height),
            );
            d.cmd_write_timestamp(
                cmd,
                vk::PipelineStageFlags::ALL_COMMANDS,
                self.queries,
                q0 + 2,
            );
            if let (Sim::Cuda(_), Sync::Pacer(p)) = (&self.sim, &self.sync) {
                p.record_image_release_to_cuda(
                    cmd,
                    &[(dye, general)],
                    cs,
                    vk::AccessFlags::SHADER_READ,
                );
            }
            let b = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                .dst_access_mask(vk::AccessFlags::TRANSFER_READ)];
            d.cmd_pipeline_barrier(
                cmd,
                cs,
                vk::PipelineStageFlags::TRANSFER,
                vk::DependencyFlags::empty(),
                &b,
                &[],
                &[],
            );
            let (w, h) = (cv.width, cv.height);
            match target {
                Target::Offscreen(Some(_)) => {
                    let region = [vk::BufferCopy {
                        src_offset: 0,
                        dst_offset: 0,
                        size: u64::from(w * h * 4),
                    }];
                    d.cmd_copy_buffer(cmd, cv.pixels.vk_buffer(), cv.readback.vk_buffer(), &region);
                }
                Target::Offscreen(None) => {}
                Target::Swapchain { image, .. } => {
                    record_to_swapchain(d, cmd, cv.pixels.vk_buffer(), *image, w, h)
                }
            }
            d.end_command_buffer(cmd)?;
            Ok(cmd)
        }
    }

    /// Waits on the host until frame `number` has completed on the GPU.
    pub fn wait_for(&self, number: u64) -> anyhow::Result<()> {
        self.sync.wait_for(number, Duration::from_secs(60))
    }

    /// Waits for every submitted frame and collects the remaining timings.
    pub fn wait_idle(&mut self) -> anyhow::Result<()> {
        self.wait_for(self.last_frame())?;
        if let Sim::Cuda(c) = &self.sim {
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
        // SAFETY: the frame that wrote these queries has completed (begin / wait_idle).
        unsafe {
            self.vk.device().get_query_pool_results(
                self.queries,
                4 * c as u32,
                &mut ts,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )?;
        }
        let ms = |a: u64, b: u64| b.saturating_sub(a) as f64 * self.timestamp_ns * 1e-6;
        let sim = match &self.sim {
            Sim::Cuda(side) => side.events[c].0.elapsed_ms(&side.events[c].1)? as f64,
            Sim::Inline(_) | Sim::Vulkan(_) => ms(ts[0], ts[1]),
        };
        self.times.push(FrameTimes {
            sim,
            draw: ms(ts[1], ts[2]),
            end_ns: ts[2] as f64 * self.timestamp_ns,
            ..cpu
        });
        Ok(())
    }

    /// Timings of the collected frames in frame order, with `frame` = GPU frame period.
    pub fn frame_times(&self) -> Vec<FrameTimes> {
        frame_periods(&self.times)
    }

    /// The fields after the last frame: velocity (RG32F texels) then dye (RGBA16F texels),
    /// each grid × grid, tightly packed — what `--dump` writes. Waits for the GPU.
    pub fn dump(&mut self) -> anyhow::Result<Vec<u8>> {
        self.wait_idle()?;
        let last = self.last_frame();
        let ix = StepIndices::of(last, self.fields.dye.len());
        let mut out = self.fields.vel[ix.b].read(&self.alloc)?;
        out.extend(self.fields.dye[ix.slot].read(&self.alloc)?);
        Ok(out)
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
