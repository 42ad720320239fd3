//! The Vulkan side: instance and device selection, exportable and imported memory, staging
//! buffers and one-shot command helpers.

mod command_slots;
mod commands;
mod compute;
mod context;
mod host_memory;
mod memory;
mod semaphore;
mod sparse;

pub use command_slots::CommandSlots;
pub use compute::ComputePipeline;
pub use context::{
    physical_device_uuids, Capabilities, DeviceChoice, DeviceInfo, Validation, VulkanConfig,
    VulkanContext, MEMORY_EXTENSION, MIN_API_VERSION, SEMAPHORE_EXTENSION,
};
pub use host_memory::HostImportedBuffer;
pub use memory::{
    AllocateInfo, AsVkBuffer, BoundBuffer, Buffer, BufferRequirements, DeviceMemory, HostBuffer,
};
pub use semaphore::{Semaphore, SemaphoreKind, SemaphoreOp};
pub use sparse::SparseBuffer;
