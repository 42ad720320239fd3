//! The Vulkan side (ash only; nothing here knows CUDA): instance and device selection,
//! exportable and imported memory and images, host-pointer import, semaphores with their signal ledgers,
//! and one-shot command helpers.

mod commands;
mod context;
mod host_memory;
mod image;
mod memory;
mod semaphore;
mod sparse;

pub use context::{
    physical_device_uuids, Capabilities, DeviceChoice, DeviceInfo, ExistingVulkan, Validation,
    VulkanConfig, VulkanContext, MIN_API_VERSION,
};
pub use host_memory::HostImportedBuffer;
pub use image::{
    acquire_barrier, cmd_acquire_images, cmd_release_images, release_barrier, AsVkImage,
    BoundImage, Image, ImageDesc, ImageOptions, ImageRegion, ImageRequirements, ImageSupport,
    SHARED_LAYOUT,
};
pub use memory::{
    AllocateInfo, AsVkBuffer, BoundBuffer, Buffer, BufferDesc, BufferRequirements, Dedicated,
    DeviceMemory, ExternalUse, HostBuffer,
};
pub use semaphore::{Semaphore, SemaphoreDesc, SemaphoreKind, SemaphoreOp, SEMAPHORE_DROP_TIMEOUT};
pub use sparse::SparseBuffer;
