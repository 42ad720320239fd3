//! [`InlineKernel`]: a CUDA kernel loaded into Bevy's Vulkan device, recorded into Bevy's own
//! command buffers (the inline path: `VK_NVX_binary_import`, no CUDA stream, no cross-API
//! semaphore, no host wait).

use std::mem::ManuallyDrop;
use std::time::Duration;

use bevy::log::error;
use cuvk::ash::vk;
use cuvk::vulkan::{
    record_barrier_before_kernel, record_kernel_barrier, CuFunction, CuModule, KernelArg,
    LaunchDims,
};

use crate::{CuvkDevice, CuvkError};

/// The Vulkan work a kernel recorded by [`InlineKernel::record`] is ordered after: what Bevy's
/// passes write and read (compute and graphics shaders, copies, attachments).
const BEFORE_KERNEL: (vk::PipelineStageFlags, vk::AccessFlags) = (
    vk::PipelineStageFlags::from_raw(
        vk::PipelineStageFlags::COMPUTE_SHADER.as_raw()
            | vk::PipelineStageFlags::TRANSFER.as_raw()
            | vk::PipelineStageFlags::VERTEX_SHADER.as_raw()
            | vk::PipelineStageFlags::FRAGMENT_SHADER.as_raw()
            | vk::PipelineStageFlags::COLOR_ATTACHMENT_OUTPUT.as_raw(),
    ),
    vk::AccessFlags::from_raw(
        vk::AccessFlags::SHADER_WRITE.as_raw()
            | vk::AccessFlags::TRANSFER_WRITE.as_raw()
            | vk::AccessFlags::COLOR_ATTACHMENT_WRITE.as_raw(),
    ),
);

/// A CUDA kernel (from PTX) loaded into Bevy's `VkDevice`, to be recorded into command buffers
/// that Bevy's render graph submits among its own ([`Self::record`]).
///
/// The Vulkan module outlives every command buffer that launches it, by construction: on drop
/// it waits (bounded by cuvk's drop timeout) for Bevy's submitted work, and past the timeout
/// leaks the module with an error logged rather than destroy it under the GPU.
pub struct InlineKernel {
    function: ManuallyDrop<CuFunction>,
    device: wgpu::Device,
    timeout: Duration,
}

impl std::fmt::Debug for InlineKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlineKernel").finish_non_exhaustive()
    }
}

impl Drop for InlineKernel {
    fn drop(&mut self) {
        let poll = self.device.poll(wgpu::PollType::Wait {
            submission_index: None,
            timeout: Some(self.timeout),
        });
        match poll {
            // SAFETY: dropped once, here, after every submission that could launch it
            // completed (no command buffer recorded from it can be submitted any more: they
            // borrowed `self`, and wgpu submits what it was given before this poll returns).
            Ok(_) => unsafe { ManuallyDrop::drop(&mut self.function) },
            Err(e) => error!(
                "InlineKernel dropped while Bevy's GPU work did not complete within {:?} ({e}); \
                 leaking its CUDA module rather than destroying what the GPU may still run",
                self.timeout
            ),
        }
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
            function: ManuallyDrop::new(function),
            device: self.wgpu_device().clone(),
            timeout: self.vulkan().drop_timeout(),
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
    /// # Safety
    /// The kernel reads and writes only memory that the arguments allow it to (in bounds of
    /// live buffers of this device — e.g. a [`crate::CuvkBuffer`]'s device address — which stay
    /// alive until the command buffer has executed), and nothing a live Rust reference points
    /// at.
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
