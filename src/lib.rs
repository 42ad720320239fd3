//! `cuvk`: zero-copy interop between Vulkan (through [`ash`]) and CUDA (through [`cudarc`]).
//!
//! Vulkan allocates exportable device memory; the bridge exports it as an opaque FD (Linux) or
//! Win32 handle (Windows), imports it into CUDA with `cuImportExternalMemory`, and maps
//! buffers with `cuExternalMemoryGetMappedBuffer`. Every offset, size and alignment is checked
//! before a driver sees it ([`LayoutError`] names the rule), and every handle is owned by a type that frees it
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
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

//! ## Layout
//!
//! - [`vulkan`] (ash only) and [`cuda`] (cudarc only) do not import each other; they share
//!   only the pure rules' types (a CUDA array description is the format table's `ArrayDesc`);
//! - the pairings, where they meet, are at the crate root: [`Bridge`], [`SharedBuffer`],
//!   [`SharedPool`], [`SharedImage`], [`FramePacer`], ...;
//! - every difference between file descriptors and NT handles lives in one private module;
//!   the handle types it settles on are re-exported here ([`OwnedExternalHandle`]); the
//!   process transport ([`ipc`]) is Linux-only and speaks to the OS through `rustix`;
//! - the pure rules and bookkeeping (ranges, alignment, the image format table, PTX
//!   signatures, the pool's books, timeline ledgers) are private and tested without a GPU;
//!   what users touch of them is re-exported here: the refusals ([`LayoutError`],
//!   [`ImageError`], [`MemoryError`], ...), [`AlignmentRule`], [`FORMATS`] and [`format_info`],
//!   [`PoolStats`] and [`PoolReport`];
//! - `wgpu` (feature `wgpu`) makes the same pairings on a wgpu device.

pub mod cuda;
mod error;
mod interop;
pub mod ipc;
#[cfg(feature = "nccl")]
#[cfg_attr(docsrs, doc(cfg(feature = "nccl")))]
pub mod nccl;
mod platform;
mod rules;
mod teardown;
mod uuid;
pub mod vulkan;
#[cfg(feature = "wgpu")]
#[cfg_attr(docsrs, doc(cfg(feature = "wgpu")))]
#[clippy::msrv = "1.87"] // wgpu 30's own minimum
pub mod wgpu;
mod wgpu_hal_glue;

// Errors: the one error type, its kinds, and every structured refusal it carries.
pub use error::{
    ApiVersion, Capability, DeviceObject, DeviceOwner, Error, ErrorKind, Exportable,
    ExtensionState, FrameStep, Importer, InlineKernelsMissing, LaunchError, MemoryError, PeerError,
    Result, Rule, SyncError, VkResultExt,
};
#[cfg(feature = "wgpu")]
pub use error::{NotTextureReason, WgpuError, WgpuObject};
pub use rules::image_format::{ImageError, TextureRule};
pub use rules::layout::{AlignmentRule, ElementFormat, LayoutError, CUDA_MAPPED_OFFSET_ALIGNMENT};
pub use rules::ptx::{PtxError, MAX_KERNEL_PARAM_BYTES};

// The image format table: which Vulkan formats CUDA can share, and how.
pub use rules::image_format::{
    format_info, FormatInfo, FormatRefusal, ImageKind, NumericClass, FORMATS,
};

// The pairings users build on: where Vulkan and CUDA meet.
pub use interop::{
    can_access_peer, device_pointer_range, enable_peer_access, import_semaphore, AcquireWait,
    Bridge, BridgeConfig, BufferPlacement, BufferUsage, Frame, FramePacer, FrameSemaphores,
    FrameSubmit, GrowableBuffer, SemaphoreSubmit, SharedAllocation, SharedBuffer, SharedImage,
    SharedPool, SharedSemaphore, StagingBuffer, StreamOrder, TextureLevels, TextureOptions,
    TextureRead, UseMarks, VulkanView, DEFAULT_SLOT_TIMEOUT, MAX_FRAMES_IN_FLIGHT,
};
pub use vulkan::image::ImageDesc;
pub use vulkan::memory::Dedicated;
pub use vulkan::pool::PoolDesc;

// Pool statistics and reports.
pub use rules::suballoc::{BlockReport, PoolReport, PoolStats};

// OS handles and the extensions that carry them.
pub use platform::{
    OwnedExternalHandle, RawExternalHandle, MEMORY_EXTENSION, MEMORY_HANDLE_TYPE,
    SEMAPHORE_EXTENSION, SEMAPHORE_HANDLE_TYPE,
};
pub use uuid::Uuid;

// How long drops wait for the GPU before they give up, log and leak.
pub use teardown::DEFAULT_DROP_TIMEOUT;

/// Re-exported so users name the same versions this crate was built with: write
/// `cuvk::ash::vk`, not a direct `ash` dependency (or depend on ash 0.38 with the `loaded`
/// feature, exactly).
pub use ash;
/// Re-exported so users name the same versions this crate was built with: write
/// `cuvk::cudarc::driver`, not a direct `cudarc` dependency (or depend on cudarc 0.19 with
/// `driver`, `nvrtc`, `dynamic-loading` and `cuda-13000`, exactly).
pub use cudarc;

/// The README's code examples, compiled as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
