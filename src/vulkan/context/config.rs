//! What a context is asked for and what it found: the validation layer, which device, the
//! extensions, and the device's facts and interop capabilities.

use std::ffi::CStr;

use ash::vk;

use crate::uuid::Uuid;

/// The lowest Vulkan version the bridge uses (timeline semaphores, `*2` queries are core).
pub const MIN_API_VERSION: u32 = vk::API_VERSION_1_2;

/// Whether to run under the Khronos validation layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Validation {
    /// No layer.
    #[default]
    Off,
    /// Enable it if it is installed; every message is recorded (see
    /// [`VulkanContext::validation_messages`](super::VulkanContext::validation_messages)).
    IfAvailable,
    /// Fail with [`Error::ValidationLayerMissing`](crate::Error::ValidationLayerMissing) if it is not installed.
    Required,
}

impl Validation {
    /// `Required` when the environment variable `CUVK_VALIDATION` is `1`, else `self`.
    pub fn or_from_env(self) -> Self {
        match std::env::var("CUVK_VALIDATION").as_deref() {
            Ok("1") => Validation::Required,
            _ => self,
        }
    }
}

/// Which physical device to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// The best device that supports what interop needs: discrete, then integrated, then
    /// virtual GPUs, then CPU implementations; in enumeration order within a kind.
    #[default]
    First,
    /// The device whose `deviceUUID` is this (e.g. a CUDA device's UUID).
    Uuid(Uuid),
}

/// Options for [`VulkanContext::new`](super::VulkanContext::new).
#[derive(Debug, Clone, Default)]
pub struct VulkanConfig {
    /// Validation layer use.
    pub validation: Validation,
    /// Device selection.
    pub device: DeviceChoice,
    /// Extra instance extensions (e.g. the surface extensions a window needs).
    pub instance_extensions: Vec<&'static CStr>,
    /// Extra device extensions (e.g. `VK_KHR_swapchain`); each must be supported.
    pub device_extensions: Vec<&'static CStr>,
}

/// What the chosen device can do for interop, gathered once (as wgpu-hal gathers limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Memory export/import through the platform handle (`VK_KHR_external_memory_fd`/`_win32`).
    pub external_memory: bool,
    /// Semaphore export/import through the platform handle (`VK_KHR_external_semaphore_fd`/`_win32`).
    pub external_semaphore: bool,
    /// `VK_EXT_external_memory_host`.
    pub external_memory_host: bool,
    /// The `sparseBinding` feature is enabled and the queue can bind sparse memory.
    pub sparse_binding: bool,
    /// The `bufferDeviceAddress` feature is enabled: shared buffers get device addresses.
    pub buffer_device_address: bool,
    /// `shaderInt64` and `shaderBufferInt64Atomics` are enabled: shaders may keep 64-bit
    /// minima (the depth-composited particle mode packs depth over colour in a `u64`). A device
    /// an engine made ([`crate::vulkan::VulkanContext::from_existing`]) reports `false`.
    pub int64_atomics: bool,
    /// `VK_NVX_binary_import` is enabled and buffers have device addresses: CUDA kernels can
    /// be launched inside Vulkan command buffers ([`crate::vulkan::CuModule`]).
    pub cuda_kernels: bool,
    /// `VK_NVX_image_view_handle` is enabled and CUDA kernels can run in Vulkan queues
    /// (`cuda_kernels`): such kernels reach images through
    /// [`crate::vulkan::InlineImageHandle`]s ([`crate::vulkan::image_handles_supported`] says
    /// why not).
    pub image_handles: bool,
}

/// Facts about the chosen physical device.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// `deviceName`.
    pub name: String,
    /// `deviceUUID`: equals CUDA's UUID for the same GPU.
    pub device_uuid: Uuid,
    /// `driverUUID`.
    pub driver_uuid: Uuid,
    /// `apiVersion` of the device.
    pub api_version: u32,
    /// Vendor id (0x10de for NVIDIA).
    pub vendor_id: u32,
    /// Discrete, integrated, virtual GPU or CPU implementation (lavapipe is `CPU`).
    pub device_type: vk::PhysicalDeviceType,
    /// `nonCoherentAtomSize`.
    pub non_coherent_atom_size: u64,
    /// `maxStorageBufferRange`: the largest range a storage-buffer descriptor may cover.
    pub max_storage_buffer_range: u64,
    /// `minImportedHostPointerAlignment`, when `VK_EXT_external_memory_host` is there.
    pub min_imported_host_pointer_alignment: Option<u64>,
    /// Interop capabilities.
    pub capabilities: Capabilities,
}

impl DeviceInfo {
    /// "name (uuid)", for messages.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.name, self.device_uuid)
    }
}
