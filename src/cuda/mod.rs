//! The CUDA side: device discovery by UUID, imported external memory with checked mapped
//! buffers and mipmapped arrays (levels, surfaces, textures), external semaphores, pinned host memory, virtual memory management, multicast
//! objects, and NVRTC kernel compilation.

mod array;
mod device;
mod events;
mod external_memory;
mod external_semaphore;
pub mod host;
mod kernels;
pub mod multicast;
pub mod vmm;

pub use crate::rules::image_format::{ArrayDesc, ArrayFlags};
pub use array::{
    AddressMode, ArrayLevel, FilterMode, MipmappedArray, SurfaceObject, TextureDesc, TextureObject,
    TextureSource,
};
pub use device::{
    context, devices, driver_present, init, open, ordinal_for_uuid, uuid_of, CudaDeviceChoice,
    CudaDeviceInfo,
};
pub(crate) use events::events_complete;
pub use external_memory::{ImportedMemory, MapOptions, MappedRange};
pub use external_semaphore::{CudaSemaphoreType, ExternalSemaphore};
pub use kernels::{compile_module, compile_ptx};
// What an import was made with ([`ImportedMemory::layout`]).
pub use crate::rules::layout::ImportLayout;
