//! Where Vulkan and CUDA meet: the [`Bridge`] (one GPU seen by both APIs, paired by UUID),
//! shared buffers and allocations, the [`SharedPool`] allocator, shared images, CUDA-allocated
//! buffers Vulkan imports, shared semaphores, GPU ordering of CUDA streams and Vulkan ([`StreamOrder`]), frame pacing, growable buffers and staging through
//! pinned host memory.

mod bridge;
mod cuda_allocated;
pub(crate) mod frame;
mod growable;
mod pacer;
mod peer;
pub(crate) mod pool;
mod semaphore;
mod shared_buffer;
mod shared_image;
mod staging;
mod stream_order;

pub use bridge::{Bridge, BridgeConfig, BufferUsage};
pub use frame::{Frame, MAX_FRAMES_IN_FLIGHT};
pub use growable::{GrowableBuffer, VulkanView};
pub use pacer::{
    AcquireWait, FramePacer, FrameSemaphores, FrameSubmit, SemaphoreSubmit, DEFAULT_SLOT_TIMEOUT,
};
pub use peer::{can_access_peer, device_pointer_range, enable_peer_access};
pub use pool::SharedPool;
pub use semaphore::{import_semaphore, SharedSemaphore};
pub use shared_buffer::{BufferPlacement, SharedAllocation, SharedBuffer};
pub use shared_image::{SharedImage, TextureLevels, TextureOptions, TextureRead};
pub use staging::StagingBuffer;
pub use stream_order::{StreamOrder, UseMarks};
