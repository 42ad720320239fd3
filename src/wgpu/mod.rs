//! The same sharing on wgpu's own device (feature `wgpu`, wgpu 30, Vulkan backend): shared
//! buffers as `wgpu::Buffer`s and images as `wgpu::Texture`s, CUDA ↔ wgpu ordering through
//! timeline semaphores carried by wgpu's submissions, K frames in flight, and CUDA kernels
//! launched inside wgpu's queue.
//!
//! - [`WgpuDevice`] opens a wgpu device with what sharing needs (external memory and semaphore
//!   extensions, timeline semaphores, buffer device addresses) or adopts one an application
//!   opened, checked by [`crate::vulkan::VulkanContext::from_existing`]'s rules; cuvk's view of
//!   the `VkDevice` never submits on wgpu's queue itself: every submission goes through wgpu.
//! - [`WgpuBridge`] pairs it with the CUDA device of the same UUID and makes
//!   [`WgpuSharedBuffer`]s (one `VkBuffer` seen as a `wgpu::Buffer` and a
//!   [`crate::SharedBuffer`]) and [`WgpuSharedImage`]s.
//! - [`WgpuDevice::submit`] and [`WgpuFramePacer`] order wgpu's work after and before CUDA's on
//!   the GPU; [`WgpuDevice::kernel_commands`] records CUDA kernels into a wgpu command buffer.
//!
//! Without CUDA, [`WgpuDevice::wrap_buffer`] and [`WgpuDevice::import_buffer`] wrap cuvk's
//! Vulkan buffers (of this device, or imported from another one) the same way, and
//! [`WgpuDevice::wrap_image`] its images.
//!
//! ```no_run
//! use cuvk::wgpu::{wgpu, WgpuBridge, WgpuBridgeConfig};
//! # fn main() -> cuvk::Result<()> {
//! let bridge = WgpuBridge::new(WgpuBridgeConfig::default())?;
//! let particles = bridge.create_buffer::<[f32; 4]>(1 << 20, wgpu::BufferUsages::STORAGE)?;
//! // particles.wgpu goes into bind groups; particles.shared.kernel_arg() into a CUDA launch.
//! # Ok(()) }
//! ```
//!
//! # Both directions
//!
//! - **CUDA writes, wgpu reads** (a simulation drawn by wgpu): [`WgpuFramePacer`] per frame —
//!   CUDA waits for the slot ([`WgpuFramePacer::cuda_acquire`]), writes, signals
//!   ([`WgpuFramePacer::cuda_release`]); wgpu's submission ([`WgpuFramePacer::submit`]) waits
//!   for that signal and lists the buffers CUDA wrote.
//! - **wgpu writes, CUDA reads**: the same frame. List every shared buffer wgpu touches in the
//!   frame, read or written, in [`WgpuFramePacer::submit`]'s `shared`: it is acquired from
//!   CUDA before wgpu's command buffers and released back after them, in the same submission,
//!   and the submission signals the pacer's `vulkan_done` timeline with the frame number. CUDA
//!   reads what wgpu wrote in frame N after waiting for `vulkan_done >= N` on its stream — which
//!   [`WgpuFramePacer::cuda_acquire`] of frame N + K does, or directly
//!   `ExternalSemaphore::wait` (`crate::import_semaphore`) on a timeline signalled by
//!   [`WgpuDevice::submit`]. Images: the [`WgpuDevice::acquire_images`] /
//!   [`WgpuDevice::release_images`] command buffers around wgpu's (see below).
//! - `queue.write_buffer` data is copied at the start of the *next* submission on the queue,
//!   before its command buffers (wgpu's pending writes), also when that submission is empty or
//!   is [`WgpuDevice::submit`]'s: a `write_buffer` made before `WgpuDevice::submit` is covered
//!   by its signals. `queue.write_texture` runs likewise, outside the image's acquire: use
//!   `copy_buffer_to_texture` in a command buffer for shared images.
//!
//! # Images: layout and ownership
//!
//! Between uses a shared image is in `GENERAL`, owned by `VK_QUEUE_FAMILY_EXTERNAL`
//! ([`crate::vulkan::SHARED_LAYOUT`]). wgpu is told so: the texture's initial state is
//! `TextureUses::STORAGE_READ_WRITE`, the state wgpu-hal maps to `GENERAL` for colour formats,
//! and it is marked initialised (wgpu never clears it). wgpu tracks layouts but not
//! queue-family ownership, so a frame that uses the texture in wgpu submits, in one
//! submission (one `queue.submit` or [`WgpuDevice::submit`]):
//! [`WgpuDevice::acquire_images`] (ownership `EXTERNAL` → wgpu's family, `GENERAL` kept),
//! wgpu's command buffers (wgpu moves the layout as it needs from `GENERAL`), then the two of
//! [`WgpuDevice::release_images`] (a wgpu-tracked transition back to `GENERAL`, then ownership
//! back to `EXTERNAL`). CUDA or another `VkDevice` may use the image after that submission
//! completed (a semaphore signalled by it, or a host wait).
//!
//! # Other threads submitting on the same queue
//!
//! wgpu 30 has no submission that carries semaphores of the caller's: wgpu-hal's Vulkan queue
//! only keeps lists of waits and signals that the *next* `vkQueueSubmit` on the queue takes,
//! whichever thread makes it. A submission another thread makes between cuvk attaching its
//! operations and its own `queue.submit` would take them, and cuvk's work would run
//! unordered. So [`WgpuDevice::submit`] and [`WgpuFramePacer::submit`] are `unsafe`: the
//! caller promises that no other submission is made on the queue while they run, which the
//! queue's submit lock makes easy to keep — cuvk holds [`WgpuDevice::submit_lock`] for each of
//! its submissions, and an application that submits on other threads holds it around its
//! own `queue.submit` calls (the crate's tests race such a thread against cuvk's submissions).
//!
//! (A design without the contract — waits attached before the work's submission, signals
//! after it on an empty submission made by a thread of cuvk's — kept the order against any
//! other thread on lavapipe, but deadlocked on the H200: wgpu's `Device::poll(Wait)` holds
//! the device's fence while the signals it waits for are queued behind that fence.)

mod buffer;
mod device;
mod hal_vk;
mod image;
mod queue_order;
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
