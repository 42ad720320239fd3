//! The same sharing on wgpu's own device (feature `wgpu`, wgpu 30, Vulkan backend): shared
//! buffers as `wgpu::Buffer`s, CUDA ↔ wgpu ordering through timeline semaphores attached to
//! wgpu's submissions, K frames in flight, and CUDA kernels launched inside wgpu's queue.
//!
//! - [`WgpuDevice`] opens a wgpu device with what sharing needs (external memory and semaphore
//!   extensions, timeline semaphores, buffer device addresses) or adopts one an application
//!   opened, checked by [`crate::vulkan::VulkanContext::from_existing`]'s rules; cuvk's view of
//!   the `VkDevice` never submits on wgpu's queue (wgpu-hal has no queue lock to share).
//! - [`WgpuBridge`] pairs it with the CUDA device of the same UUID and makes
//!   [`WgpuSharedBuffer`]s: one `VkBuffer` seen as a `wgpu::Buffer` and a [`crate::SharedBuffer`].
//! - [`WgpuDevice::submit`] and [`WgpuFramePacer`] order wgpu's work after and before CUDA's on
//!   the GPU; [`WgpuDevice::kernel_commands`] records CUDA kernels into a wgpu command buffer.
//!
//! Without CUDA, [`WgpuDevice::wrap_buffer`] and [`WgpuDevice::import_buffer`] wrap cuvk's
//! Vulkan buffers (of this device, or imported from another one) the same way.
//!
//! ```no_run
//! use cuvk::wgpu::{wgpu, WgpuBridge, WgpuBridgeConfig};
//! # fn main() -> cuvk::Result<()> {
//! let bridge = WgpuBridge::new(WgpuBridgeConfig::default())?;
//! let particles = bridge.create_buffer::<[f32; 4]>(1 << 20, wgpu::BufferUsages::STORAGE)?;
//! // particles.wgpu goes into bind groups; particles.shared.kernel_arg() into a CUDA launch.
//! # Ok(()) }
//! ```

mod buffer;
mod device;
mod image;
mod submit;

/// Re-exported so users name the wgpu version this crate was built with.
pub use ::wgpu;

pub use buffer::{vk_buffer_usage, WgpuSharedBuffer};
pub use device::{adapter_for, adapter_uuid, create_instance, WgpuConfig, WgpuDevice};
pub use image::{texture_format, texture_usages, TextureImage, WgpuSharedImage};
pub use submit::{KernelLaunch, PacedBuffer, WgpuFramePacer};

use std::sync::Arc;

use cudarc::driver::CudaContext;

use crate::cuda::CudaDeviceChoice;
use crate::vulkan::{DeviceChoice, Validation};
use crate::{Bridge, Result, Uuid, SEMAPHORE_EXTENSION};

/// Options for [`WgpuBridge::new`]. The default: CUDA device 0, no validation layer, no wgpu
/// features beyond what cuvk enables itself, the adapter's own limits.
#[derive(Debug, Clone, Default)]
pub struct WgpuBridgeConfig {
    /// The CUDA device (default: ordinal 0); the wgpu adapter is the Vulkan device with the
    /// same UUID.
    pub cuda_device: CudaDeviceChoice,
    /// Validation layer use on the wgpu instance (default: off).
    pub validation: Validation,
    /// The wgpu features to enable (default: none).
    pub features: ::wgpu::Features,
    /// The wgpu limits to require; `None` (the default) asks for the adapter's own.
    pub limits: Option<::wgpu::Limits>,
}

/// A wgpu device and the CUDA device with the same UUID.
pub struct WgpuBridge {
    wgpu: WgpuDevice,
    bridge: Bridge,
}

impl WgpuBridge {
    /// Opens the CUDA device `config.cuda_device`, then a wgpu device on the Vulkan adapter
    /// with the same `deviceUUID` ([`WgpuDevice::new`]).
    pub fn new(config: WgpuBridgeConfig) -> Result<Self> {
        let (cuda, uuid) = crate::cuda::open(config.cuda_device)?;
        let wgpu = WgpuDevice::new(WgpuConfig {
            validation: config.validation,
            device: DeviceChoice::Uuid(uuid),
            features: config.features,
            limits: config.limits,
        })?;
        Self::from_parts(wgpu, cuda)
    }

    /// Pairs a wgpu device (opened or adopted by [`WgpuDevice`]) with a CUDA context,
    /// checking that both are the same GPU ([`crate::Error::DeviceMismatch`] otherwise) and
    /// that the device can share semaphores with CUDA ([`crate::Error::MissingExtension`]
    /// otherwise: `NotEnabled` for a device wgpu opened on its own, which does not enable the
    /// external semaphore extension; open it with [`WgpuDevice::open`]).
    pub fn from_parts(wgpu: WgpuDevice, cuda: Arc<CudaContext>) -> Result<Self> {
        let vk = wgpu.vulkan();
        if !vk.info().capabilities.external_semaphore {
            return Err(crate::Error::MissingExtension {
                extension: SEMAPHORE_EXTENSION.to_string_lossy().into_owned(),
                state: vk.extension_state(SEMAPHORE_EXTENSION),
                needed_for: "ordering CUDA and wgpu work on the GPU (WgpuFramePacer)",
            });
        }
        let bridge = Bridge::from_parts(vk.clone(), cuda)?;
        Ok(Self { wgpu, bridge })
    }

    /// The wgpu side.
    pub fn wgpu(&self) -> &WgpuDevice {
        &self.wgpu
    }
    /// The wgpu device.
    pub fn device(&self) -> &::wgpu::Device {
        self.wgpu.device()
    }
    /// The wgpu queue.
    pub fn queue(&self) -> &::wgpu::Queue {
        self.wgpu.queue()
    }
    /// The CUDA ↔ Vulkan bridge on wgpu's `VkDevice` (shared allocations, semaphores, CUDA
    /// context and stream). Its Vulkan context has no queue: submit through wgpu.
    pub fn bridge(&self) -> &Bridge {
        &self.bridge
    }
    /// The UUID both devices share.
    pub fn uuid(&self) -> Uuid {
        self.bridge.uuid()
    }
}
