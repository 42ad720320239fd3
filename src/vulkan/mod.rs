//! The Vulkan side (ash only; nothing here knows CUDA): instance and device selection,
//! exportable and imported memory and images, sub-allocation of exportable memory
//! ([`VulkanPool`]), host-pointer import, semaphores with their signal ledgers, one-shot
//! command helpers, and CUDA kernels inside Vulkan queues with the image handles they take
//! ([`CuModule`], [`InlineImageHandle`]), and the WebGPU usage tables every wgpu version shares
//! ([`webgpu`]).

mod barriers;
mod commands;
mod context;
mod cuda_kernels;
mod driver_lock;
mod host_memory;
pub(crate) mod image;
mod image_handles;
mod image_transfer;
pub(crate) mod memory;
pub(crate) mod pool;
mod semaphore;
mod sparse;
pub mod webgpu;

pub use barriers::{
    acquire_barrier, cmd_acquire_buffers, cmd_acquire_images, cmd_release_buffers,
    cmd_release_images, ownership_barriers, release_barrier, OwnershipTransfer,
};
pub use context::{
    physical_device_uuids, timeline_semaphore_supported, validation_layer_available, Capabilities,
    DeviceChoice, DeviceInfo, ExistingVulkan, Validation, VulkanConfig, VulkanContext,
    MIN_API_VERSION,
};
pub use cuda_kernels::{
    cuda_kernels_supported, limits as cuda_launch_limits, record_barrier_before_kernel,
    record_kernel_barrier, record_kernel_to_kernel_barrier, CuFunction, CuModule, KernelArg,
    LaunchDims,
};
pub use driver_lock::{driver_lock, DriverLockGuard};
pub use host_memory::HostImportedBuffer;
pub use image::{
    AsVkImage, BoundImage, Image, ImageOptions, ImageRequirements, ImageSupport, SHARED_LAYOUT,
};
pub(crate) use image_handles::ImageViewHandleLoader;
pub use image_handles::{
    image_handles_supported, BorderColor, InlineImageHandle, InlineImageKind, InlineLevels,
    InlineTextureDesc, RawViewDescriptor, SamplerAddressMode, SamplerFilter, ViewLayers,
};
pub use image_transfer::ImageRegion;
pub use memory::{
    shared_buffer_usage, AllocateInfo, AsVkBuffer, BoundBuffer, Buffer, BufferDesc,
    BufferRequirements, DeviceMemory, ExternalUse, HostAccess, HostBuffer,
};
pub(crate) use pool::{PoolCore, PoolLease};
pub use pool::{PooledBuffer, VulkanPool};
// Descriptors of the pairings: public at the crate root only (one path per item).
pub(crate) use image::ImageDesc;
pub(crate) use memory::{delegate_as_vk_buffer, Dedicated};
pub(crate) use pool::PoolDesc;
pub use semaphore::{ProgressSignal, Semaphore, SemaphoreDesc, SemaphoreKind, SemaphoreOp};
pub use sparse::SparseBuffer;
// What a kernel's PTX declares ([`CuModule::kernels`], [`CuFunction::signature`]).
pub use crate::rules::ptx::{KernelSignature, PtxParam};
