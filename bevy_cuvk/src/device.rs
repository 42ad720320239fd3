//! Adopting Bevy's Vulkan device into cuvk and pairing it with the CUDA device of the same
//! UUID; raw Vulkan commands (CUDA kernels inside Bevy's queue) in Bevy's command buffers.

use std::sync::Arc;

use bevy::prelude::Resource;
use bevy::render::renderer::raw_vulkan_init::AdditionalVulkanFeatures;
use bevy::render::renderer::{RenderDevice, RenderQueue};
use cuvk::ash::vk;
use cuvk::cuda::CudaDeviceChoice;
use cuvk::cudarc::driver::CudaContext;
use cuvk::vulkan::VulkanContext;
use cuvk::Bridge;
use wgpu::hal;

use crate::extensions::{BufferDeviceAddress, CallbackRan};
use crate::late::LateWork;
use crate::status::CuvkError;

/// The wgpu-hal API every `as_hal` call names.
type Vk = hal::api::Vulkan;

/// The highest instance `apiVersion` wgpu-hal 29 creates its instance with: what the
/// instance's core functions are bounded by.
const WGPU_HAL_MAX_API_VERSION: u32 = vk::API_VERSION_1_3;

/// Bevy's Vulkan device seen by cuvk, paired with the CUDA device of the same GPU: a resource
/// in the main world and in the render world while [`crate::CuvkStatus`] is `Ready`.
///
/// Shared memory, images and semaphores made through [`Self::bridge`] live on Bevy's own
/// `VkDevice`, which stays alive (cuvk holds the `wgpu::Device`) until the last object made
/// from it is dropped, in whatever order Bevy drops its resources. cuvk's context has no queue
/// of its own: it never submits behind Bevy's back.
#[derive(Resource, Clone)]
pub struct CuvkDevice {
    bridge: Arc<Bridge>,
    device: wgpu::Device,
    queue: wgpu::Queue,
    late: Arc<LateWork>,
}

impl std::fmt::Debug for CuvkDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuvkDevice")
            .field("device", &self.describe())
            .field("inline_kernels", &self.inline_kernels())
            .finish_non_exhaustive()
    }
}

impl CuvkDevice {
    /// The pairing: shared buffers, images, pools and semaphores are made here
    /// (`bridge().create_buffer(..)`, ...).
    pub fn bridge(&self) -> &Bridge {
        &self.bridge
    }
    /// cuvk's view of Bevy's `VkDevice` (no queue: it never submits).
    pub fn vulkan(&self) -> &Arc<VulkanContext> {
        self.bridge.vulkan()
    }
    /// The CUDA context of the same GPU.
    pub fn cuda(&self) -> &Arc<CudaContext> {
        self.bridge.cuda()
    }
    /// Bevy's wgpu device (the one `RenderDevice` wraps).
    pub fn wgpu_device(&self) -> &wgpu::Device {
        &self.device
    }
    /// Bevy's wgpu queue (the one `RenderQueue` wraps).
    pub fn wgpu_queue(&self) -> &wgpu::Queue {
        &self.queue
    }
    /// Whether CUDA kernels can be recorded into Bevy's command buffers (NVX).
    pub fn inline_kernels(&self) -> bool {
        self.vulkan().info().capabilities.cuda_kernels
    }
    /// What the plugin does after Bevy's submission of each frame.
    pub(crate) fn late(&self) -> &Arc<LateWork> {
        &self.late
    }
    /// Drops `value` once the GPU has run everything submitted by the end of this frame —
    /// what the plugin does with dropped [`crate::CuvkBuffer`]s, [`crate::InlineKernel`]s and
    /// [`crate::InlineImage`]s — for other objects that Bevy's command buffers of this frame
    /// may name: an `InlineImageHandle` made through [`Self::bridge`] or
    /// `SharedImage::inline_surface`, memory made through the bridge, a `CuModule`.
    ///
    /// "The end of this frame" is the plugin's own empty submission in
    /// `RenderGraphSystems::Finish`, after Bevy's; `value` is dropped on the thread that next
    /// polls Bevy's device (or submits to its queue) after the GPU has run it. Handed over after
    /// the last frame (the app ending), it is dropped when the last owner of this device's
    /// state goes (this resource, its clones, and every buffer, kernel and handle made from it),
    /// after a wait for Bevy's GPU work bounded by the context's drop timeout; past the timeout
    /// it is leaked, with an error logged.
    pub fn drop_after_frame<T: Send + 'static>(&self, value: T) {
        self.late.bury(value);
    }
    /// "name (UUID)" of the GPU.
    pub fn describe(&self) -> String {
        self.vulkan().info().describe()
    }
    /// Every message the validation layer reported so far, where the plugin was asked to
    /// record them and Bevy's instance has `VK_EXT_debug_utils` (wgpu's validation flags).
    pub fn validation_messages(&self) -> Vec<String> {
        self.vulkan().validation_messages()
    }
}

/// What adoption needs of the plugin's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdoptOptions {
    pub use_cuda: bool,
    pub record_validation: bool,
    pub added_after_render: bool,
}

/// Adopts Bevy's device into a [`VulkanContext`] (checked by cuvk's rules for an engine's
/// device), then opens the CUDA device with its UUID.
pub(crate) fn adopt(
    options: AdoptOptions,
    render_device: &RenderDevice,
    render_queue: &RenderQueue,
    extra: Option<&AdditionalVulkanFeatures>,
) -> Result<CuvkDevice, CuvkError> {
    if options.added_after_render {
        return Err(CuvkError::AddedAfterRenderPlugin);
    }
    let device = render_device.wgpu_device().clone();
    let queue: wgpu::Queue = (**render_queue.0).clone();
    let backend = device.adapter_info().backend;
    if backend != wgpu::Backend::Vulkan {
        return Err(CuvkError::NotVulkan {
            backend: backend.to_str().to_owned(),
        });
    }
    let ran = extra.is_some_and(|e| e.has::<CallbackRan>());
    if !ran {
        return Err(CuvkError::CallbackNotRun);
    }
    let address = extra.is_some_and(|e| e.has::<BufferDeviceAddress>());
    let vulkan = wrap(&device, address, options.record_validation)?;
    if !options.use_cuda {
        return Err(CuvkError::Disabled);
    }
    let uuid = vulkan.info().device_uuid;
    let cuda = match cuvk::cuda::open(CudaDeviceChoice::Uuid(uuid)) {
        Ok((cuda, _)) => cuda,
        Err(source @ cuvk::Error::CudaUnavailable) => {
            return Err(CuvkError::NoCudaDriver { source })
        }
        Err(source) => {
            return Err(CuvkError::Cuda {
                device: vulkan.info().describe(),
                source,
            })
        }
    };
    let describe = vulkan.info().describe();
    let bridge = Bridge::from_parts(vulkan, cuda).map_err(|source| CuvkError::Cuda {
        device: describe,
        source,
    })?;
    let late = Arc::new(LateWork::new(
        device.clone(),
        bridge.vulkan().drop_timeout(),
    ));
    Ok(CuvkDevice {
        bridge: Arc::new(bridge),
        device,
        queue,
        late,
    })
}

/// cuvk's context for the wgpu device (no queue), keeping a clone of the device alive.
fn wrap(
    device: &wgpu::Device,
    buffer_device_address: bool,
    record_validation: bool,
) -> Result<Arc<VulkanContext>, CuvkError> {
    // SAFETY: the hal device is only read: its handles go to a context that never submits and
    // keeps a clone of the wgpu::Device (so the VkDevice and VkInstance) alive.
    let Some(hal) = (unsafe { device.as_hal::<Vk>() }) else {
        return Err(CuvkError::NotVulkan {
            backend: device.adapter_info().backend.to_str().to_owned(),
        });
    };
    let shared = hal.shared_instance();
    let validation_log = record_validation
        && shared
            .extensions()
            .contains(&cuvk::ash::ext::debug_utils::NAME);
    // SAFETY: wgpu's live physical device and device of this instance.
    let existing = unsafe {
        cuvk::existing_vulkan_from_wgpu_hal!(&hal, WGPU_HAL_MAX_API_VERSION, buffer_device_address)
    };
    // SAFETY: the handles are wgpu's live instance, physical device and device; the version,
    // extensions and features are what wgpu-hal created them with (the bufferDeviceAddress
    // feature as cuvk's device callback recorded it); the context gets no queue, so it never
    // submits behind wgpu's back; `keep_alive` (a wgpu::Device clone) keeps the device and the
    // instance alive until the context and everything made from it are gone.
    unsafe { VulkanContext::from_existing_kept(existing, Box::new(device.clone()), validation_log) }
        .map_err(|source| CuvkError::Vulkan {
            device: device.adapter_info().name.clone(),
            source,
        })
}

impl CuvkDevice {
    /// Records raw Vulkan commands — CUDA kernels through cuvk's
    /// [`cuvk::vulkan::CuFunction::record_launch`] (the inline path), barriers — into a command
    /// buffer of Bevy's device, for the render graph to submit in order
    /// (`RenderContext::add_command_buffer`) among Bevy's own.
    ///
    /// wgpu does not track what these commands touch: `record` adds the barriers they need
    /// (cuvk's `record_barrier_before_kernel` / `record_kernel_barrier` around a kernel).
    ///
    /// # Safety
    /// `record` records only valid commands into the command buffer it is given (in the
    /// recording state; it must not begin, end, reset or submit it), on objects of this device
    /// that outlive the command buffer's execution, with the barriers they need against
    /// Bevy's work before and after.
    pub unsafe fn record_vulkan(
        &self,
        record: impl FnOnce(vk::CommandBuffer) -> Result<(), CuvkError>,
    ) -> Result<wgpu::CommandBuffer, CuvkError> {
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("cuvk raw Vulkan commands"),
            });
        // SAFETY: a dedicated encoder of Bevy's device, used through hal only here (no wgpu
        // commands mixed in); its raw command buffer is only recorded into, by `record`,
        // whose commands the caller promises are valid.
        let recorded = unsafe {
            encoder.as_hal_mut::<hal::api::Vulkan, _, _>(|hal| match hal {
                Some(hal) => record(hal.raw_handle()),
                None => Err(CuvkError::NotVulkan {
                    backend: self.device.adapter_info().backend.to_str().to_owned(),
                }),
            })
        };
        recorded?;
        Ok(encoder.finish())
    }
}
