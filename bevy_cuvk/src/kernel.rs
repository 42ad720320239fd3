//! [`InlineKernel`]: a CUDA kernel loaded into Bevy's Vulkan device, recorded into Bevy's own
//! command buffers (the inline path: `VK_NVX_binary_import`, no CUDA stream, no cross-API
//! semaphore, no host wait).

use cuvk::ash::vk;
use cuvk::vulkan::{
    record_barrier_before_kernel, record_kernel_barrier, CuFunction, CuModule, KernelArg,
    LaunchDims,
};

use crate::late::LateDrop;
use crate::{CuvkDevice, CuvkError};

/// The Vulkan work a kernel recorded by [`InlineKernel::record`] is ordered after: every
/// earlier command of Bevy's queue and its writes (shaders, copies, attachments, and the reads
/// of vertex, index and indirect buffers, which a kernel must not overwrite under them).
const BEFORE_KERNEL: (vk::PipelineStageFlags, vk::AccessFlags) = (
    vk::PipelineStageFlags::ALL_COMMANDS,
    vk::AccessFlags::MEMORY_WRITE,
);

/// A CUDA kernel (from PTX) loaded into Bevy's `VkDevice`, to be recorded into command buffers
/// that Bevy's render graph submits among its own ([`Self::record`]).
///
/// # Where to record it
///
/// In a system of Bevy's `RenderGraph` schedule (the render world), in
/// `RenderGraphSystems::Render` and before `camera_driver` (the system in that set that runs
/// every camera's passes). Bevy submits the command buffers of the `RenderGraph` systems in one
/// submission (`RenderGraphSystems::Submit`), in the order the systems ran, so this order puts
/// the kernel after the plugin's acquisition of the shared images ([`crate::CuvkSystems::Acquire`],
/// in `RenderGraphSystems::Begin`) and before the cameras that draw what it wrote (a sprite of a
/// [`crate::CuvkImage`], a mesh reading a [`crate::CuvkBuffer`]). A kernel that reads what the
/// cameras drew goes `.after(camera_driver).before(CuvkSystems::Release)` instead.
///
/// ```no_run
/// use bevy::core_pipeline::schedule::camera_driver;
/// use bevy::prelude::*;
/// use bevy::render::renderer::{RenderContext, RenderGraph, RenderGraphSystems};
/// use bevy::render::RenderApp;
/// use bevy_cuvk::cuvk::vulkan::{KernelArg, LaunchDims};
/// use bevy_cuvk::{CuvkBuffer, CuvkDevice, InlineKernel};
///
/// /// Made in the render world once `CuvkDevice` is there (a `Render` system).
/// #[derive(Resource)]
/// struct Step {
///     kernel: InlineKernel,
///     particles: CuvkBuffer<[f32; 4]>,
/// }
///
/// fn record_step(mut ctx: RenderContext, step: Option<Res<Step>>, cuvk: Option<Res<CuvkDevice>>) {
///     let (Some(step), Some(cuvk)) = (step, cuvk) else { return };
///     let Some(address) = step.particles.shared().device_address() else { return };
///     let n = step.particles.len() as u32;
///     let args = [KernelArg::address(address), KernelArg::value(&n)];
///     // SAFETY: the kernel (`void step(float4* p, unsigned n)`) touches p[0..n) only, inside
///     // the buffer, which outlives the submission (as does the kernel's module).
///     match unsafe { step.kernel.record(&cuvk, &LaunchDims::linear(n.div_ceil(256), 256), &args) } {
///         Ok(commands) => ctx.add_command_buffer(commands),
///         Err(e) => error!("step: {e}"),
///     }
/// }
///
/// fn build(app: &mut App) {
///     if let Some(render_app) = app.get_sub_app_mut(RenderApp) {
///         render_app.add_systems(
///             RenderGraph,
///             record_step.in_set(RenderGraphSystems::Render).before(camera_driver),
///         );
///     }
/// }
/// ```
///
/// (`camera_driver` is `bevy::core_pipeline::schedule::camera_driver`: Bevy's feature
/// `bevy_core_pipeline`, which 2D and 3D rendering have anyway.)
///
/// # Dropping it
///
/// The Vulkan module outlives the command buffers that launch it: dropped, it is handed to the
/// plugin, which destroys it once the GPU has run everything submitted by the end of the frame
/// (a command buffer recorded this frame and submitted by Bevy's render graph included), so it
/// may be dropped at any time, the app's exit with frames in flight included.
pub struct InlineKernel {
    function: LateDrop<CuFunction>,
}

impl std::fmt::Debug for InlineKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlineKernel").finish_non_exhaustive()
    }
}

impl CuvkDevice {
    /// Loads `name` from `ptx` (NVRTC's output, e.g. `cuvk::cuda::compile_ptx`) into Bevy's
    /// Vulkan device. Needs inline kernels ([`crate::CuvkStatus::Ready`]'s `inline_kernels`):
    /// refused with cuvk's error otherwise, as are PTX cuvk cannot parse and a missing entry.
    pub fn load_inline_kernel(&self, ptx: &str, name: &str) -> Result<InlineKernel, CuvkError> {
        let shared = |source| CuvkError::Shared { source };
        let module = CuModule::from_ptx(self.vulkan(), ptx).map_err(shared)?;
        let function = module.function(name).map_err(shared)?;
        Ok(InlineKernel {
            function: LateDrop::new(function, self.late().clone()),
        })
    }
}

impl InlineKernel {
    /// The kernel, for recording it with other commands ([`CuvkDevice::record_vulkan`]).
    pub fn function(&self) -> &CuFunction {
        &self.function
    }

    /// One launch as a command buffer of Bevy's device, for the render graph to submit
    /// (`RenderContext::add_command_buffer`): a barrier after Bevy's earlier shader, copy and
    /// attachment work, the kernel, and a barrier that makes its writes visible to every later
    /// command. The arguments are checked against the kernel's PTX signature and the
    /// dimensions against the device's limits first ([`CuvkError::Shared`]).
    ///
    /// Images go to the kernel as handles ([`crate::CuvkImage::inline_surface`] /
    /// [`crate::CuvkImage::inline_texture`], [`crate::InlineImage::kernel_arg`]); a shared image
    /// it touches must be registered in [`crate::CuvkImages`] and the launch recorded between
    /// [`crate::CuvkSystems::Acquire`] and [`crate::CuvkSystems::Release`] (see [`InlineKernel`]
    /// for where), so that it belongs to Bevy's queue, in `GENERAL`, while the kernel runs.
    ///
    /// # Safety
    /// The kernel reads and writes only memory that the arguments allow it to (in bounds of
    /// live buffers of this device — e.g. a [`crate::CuvkBuffer`]'s device address — which stay
    /// alive until the command buffer has executed, and inside the images of its image handles,
    /// which [`crate::InlineImage`] keeps alive by construction), and nothing a live Rust
    /// reference points at. The command buffer is submitted in the frame it was recorded in
    /// (handed to Bevy's render graph, `RenderContext::add_command_buffer`), so that the module
    /// outlives it; `device` is the device the kernel was loaded on.
    pub unsafe fn record(
        &self,
        device: &CuvkDevice,
        dims: &LaunchDims,
        args: &[KernelArg],
    ) -> Result<wgpu::CommandBuffer, CuvkError> {
        self.function
            .validate_launch(dims, args)
            .map_err(|source| CuvkError::Shared { source })?;
        let vulkan = device.vulkan();
        // SAFETY: a recording command buffer of Bevy's device; barriers and a launch whose
        // arguments were checked and whose memory the caller vouches for.
        unsafe {
            device.record_vulkan(|cmd| {
                record_barrier_before_kernel(vulkan, cmd, BEFORE_KERNEL.0, BEFORE_KERNEL.1);
                self.function
                    .record_launch(cmd, dims, args)
                    .map_err(|source| CuvkError::Shared { source })?;
                record_kernel_barrier(vulkan, cmd);
                Ok(())
            })
        }
    }
}
