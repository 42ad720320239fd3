//! `cuvk-canvas`: the particle picture `cuvk` draws — an HDR compute splat, a glow, a tone map
//! and a HUD ([`canvas`]) — with the Vulkan helpers it is built from: a `gpu-allocator`
//! allocator for memory nobody shares ([`DevAllocator`], [`DevBuffer`]), a minimal compute
//! pipeline ([`ComputePipeline`]), a ring of command buffers ([`CommandSlots`]) and the demos'
//! cameras ([`camera`]).
//!
//! Published so that what ships draws with it (the Python module's `ParticleRenderer`);
//! `cuvk`'s examples and tests reach it through their scaffolding crate.

#![warn(missing_docs)]

mod alloc;
pub mod camera;
pub mod canvas;
mod command_slots;
mod compute;

pub use alloc::{DevAllocator, DevBuffer};
pub use command_slots::CommandSlots;
pub use compute::ComputePipeline;
pub use gpu_allocator::MemoryLocation;

use cuvk::ash::vk;
use cuvk::{Error, Result};

/// Attaches the Vulkan function's name to a `vk::Result`.
pub(crate) trait VkResultExt<T> {
    fn vk(self, call: &'static str) -> Result<T>;
}

impl<T> VkResultExt<T> for std::result::Result<T, vk::Result> {
    fn vk(self, call: &'static str) -> Result<T> {
        self.map_err(|result| Error::Vulkan { call, result })
    }
}
