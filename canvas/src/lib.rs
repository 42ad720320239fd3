//! `cuvk-canvas`: the particle picture `cuvk` draws — an HDR compute splat, a glow, a tone map
//! and a HUD ([`canvas`]) — with the Vulkan helpers it is built from: a `gpu-allocator`
//! allocator for memory nobody shares ([`PrivateAllocator`], [`PrivateBuffer`]), a minimal compute
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

pub use alloc::{PrivateAllocator, PrivateBuffer};
pub use command_slots::CommandSlots;
pub use compute::ComputePipeline;
pub use gpu_allocator::MemoryLocation;
