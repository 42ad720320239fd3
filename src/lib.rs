//! `cuvk`: zero-copy interop between Vulkan (through [`ash`]) and CUDA (through [`cudarc`]).
//!
//! Vulkan allocates exportable device memory; the bridge exports it as an opaque FD (Linux) or
//! Win32 handle (Windows), imports it into CUDA with `cuImportExternalMemory`, and maps
//! buffers with `cuExternalMemoryGetMappedBuffer`. Every offset, size and alignment is checked
//! before a driver sees it ([`layout`]), and every handle is owned by a type that frees it
//! exactly once, in the right order: a CUDA mapping keeps its imported memory alive, which
//! keeps the Vulkan memory alive.
//!
//! ```no_run
//! use cuvk::{Bridge, BridgeConfig, BufferUsage};
//! # fn main() -> cuvk::Result<()> {
//! let bridge = Bridge::new(BridgeConfig::default())?; // the Vulkan device CUDA device 0 is
//! let particles = bridge.create_buffer::<[f32; 4]>(1 << 20, BufferUsage::STORAGE_BUFFER)?;
//! // particles.vk_buffer() goes into descriptors; particles.kernel_arg() into a CUDA launch.
//! # Ok(()) }
//! ```
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![deny(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

//! ## Layout
//!
//! - [`vulkan`] (ash only) and [`cuda`] (cudarc only) do not know each other;
//! - [`interop`] pairs them: [`Bridge`], [`SharedBuffer`], [`SharedPool`], [`SharedImage`],
//!   [`FramePacer`], ...;
//! - [`platform`] holds every OS difference (file descriptors vs NT handles);
//! - [`layout`], [`suballoc`], [`image_format`] and [`timeline`] are pure rules and
//!   bookkeeping, tested without a GPU;
//! - `wgpu` (feature `wgpu`) makes the same pairings on a wgpu device.

#[cfg(feature = "capi")]
pub mod capi;
pub mod cuda;
pub mod error;
pub mod image_format;
pub mod interop;
pub mod layout;
pub mod platform;
pub mod ptx;
pub mod suballoc;
pub mod timeline;
mod uuid;
pub mod vulkan;
#[cfg(feature = "wgpu")]
#[cfg_attr(docsrs, doc(cfg(feature = "wgpu")))]
#[clippy::msrv = "1.87"] // wgpu 30's own minimum
pub mod wgpu;

pub use error::{Error, ErrorKind, Result};
pub use image_format::ImageKind;
pub use interop::{
    Bridge, BridgeConfig, BufferPlacement, BufferUsage, Dedicated, Frame, FramePacer,
    GrowableBuffer, SharedAllocation, SharedBuffer, SharedImage, SharedPool, SharedSemaphore,
    StagingBuffer, TextureLevels, TextureOptions, TextureRead, VulkanView,
};
pub use suballoc::{PoolReport, PoolStats};
pub use uuid::Uuid;
pub use vulkan::{ImageDesc, PoolDesc};

/// Re-exported so users name the same versions this crate was built with.
pub use ash;
/// Re-exported so users name the same versions this crate was built with.
pub use cudarc;

/// The README's code examples, compiled as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
