//! `bevy_cuvk`: CUDA inside Bevy's renderer through [`cuvk`], with no copies.
//!
//! [`CuvkPlugin`] enables what sharing needs on Bevy's own Vulkan device (external memory and
//! semaphore extensions, buffer device addresses, the NVX extensions for CUDA kernels inside
//! Vulkan queues where the driver has them), adopts that device into cuvk when the renderer
//! starts and pairs it with the CUDA device of the same UUID. [`CuvkStatus`] (a resource in
//! both worlds) says whether CUDA is ready or why not; [`CuvkDevice`] (present when ready) is
//! the pairing. Bevy keeps running without CUDA.
//!
//! - [`CuvkDevice::create_buffer`]: a [`CuvkBuffer`], one memory that is a Bevy render buffer
//!   and a CUDA buffer, kept alive until Bevy's GPU work on it completed;
//! - CUDA work each frame, inside Bevy's queue ([`CuvkDevice::load_inline_kernel`] and
//!   [`InlineKernel::record`]: the inline path, NVX) or on a CUDA stream ordered with Bevy's
//!   frames ([`StreamSync`]: the stream path);
//! - [`CuvkDevice::create_image`]: a [`CuvkImage`], one image that is a Bevy `Image` (put it
//!   behind a `Handle<Image>` with [`CuvkImages`]: sprites, materials and UI sample it) and a
//!   CUDA array; the plugin hands it between CUDA and Bevy's queue every frame; inline kernels
//!   write it through an [`InlineImage`] ([`CuvkImage::inline_surface`]);
//! - [`CuvkSubscriber`] (Linux): Bevy as a viewer of a cuvk publisher in another process
//!   (`particles --publish NAME`): its slots as Bevy buffers, the newest frame each frame;
//! - the rest of cuvk (pools, semaphores) through [`CuvkDevice::bridge`].
//!
//! What Bevy's command buffers of a frame may still name is never freed under them: dropped
//! buffers, kernels and image handles (and whatever [`CuvkDevice::drop_after_frame`] is
//! given) are freed once the GPU has run everything submitted by the end of that frame, the
//! app's exit included. The README has a whole app: a CUDA kernel writing the image a
//! `Sprite` shows.
//!
//! ```no_run
//! use bevy::prelude::*;
//! use bevy_cuvk::{CuvkPlugin, CuvkPluginGroupExt, CuvkStatus};
//!
//! fn main() {
//!     App::new()
//!         // CuvkPlugin must come before RenderPlugin (it configures device creation).
//!         .add_plugins(DefaultPlugins.with_cuvk(CuvkPlugin::default()))
//!         .add_systems(Update, report.run_if(resource_changed::<CuvkStatus>))
//!         .run();
//! }
//!
//! fn report(status: Res<CuvkStatus>) {
//!     match &*status {
//!         CuvkStatus::Ready { inline_kernels, device } => info!("CUDA on {device} ({inline_kernels})"),
//!         CuvkStatus::Unavailable { reason, .. } => info!("WGSL fallback: {reason}"),
//!         CuvkStatus::Pending => {}
//!     }
//! }
//! ```
//!
//! Versions: Bevy 0.19.1 (Rust 1.95) on wgpu 29, whose Vulkan queue can signal a semaphore
//! after Bevy's submission but not wait for one: CUDA → Bevy ordering is a host wait before
//! Bevy's submission, or the kernels recorded inside Bevy's own command buffers (NVX).
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![warn(missing_docs)]

mod buffer;
mod device;
mod extensions;
mod image;
mod kernel;
mod late;
mod plugin;
mod status;
mod stream;
#[cfg(target_os = "linux")]
mod subscriber;

pub use buffer::CuvkBuffer;
pub use device::CuvkDevice;
pub use image::{vk_format, CuvkImage, CuvkImages, InlineImage};
pub use kernel::InlineKernel;
pub use plugin::{CuvkPlugin, CuvkPluginGroupExt, CuvkSystems};
pub use status::{CuvkError, CuvkStatus};
pub use stream::StreamSync;
#[cfg(target_os = "linux")]
pub use subscriber::{CuvkSubscriber, HeldFrame};

/// Re-exported so users name the cuvk this crate was built with.
pub use cuvk;
/// Re-exported: the wgpu Bevy 0.19.1 renders with (29), as this crate names it.
pub use wgpu;

/// The README's code, compiled as doctests so that it stays true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
