//! Sharing Vulkan memory and timeline semaphores between processes: one process publishes
//! buffers, images and timelines over a Unix domain socket, their descriptors passed beside
//! the messages (`SCM_RIGHTS`); another attaches and imports them.
//!
//! Layers: the versioned description format ([`Message`], [`encode`], [`decode`]: a 16-byte
//! header — `b"CUVK"`, version, kind, body length, descriptor count — and a fixed
//! little-endian body per [`MessageKind`]), checked on decode so that everything a peer could
//! get wrong is an [`IpcError`] naming the rule and its numbers; [`Channel`] and [`Listener`]
//! carry whole messages and their descriptors; [`Server`] / [`Attached`] publish and import
//! buffers and timelines; [`FrameServer`] / [`FrameClient`] order frames between a viewer and
//! a producer (all but the format Linux only: on other platforms they do not exist). On
//! Windows, `ipc::nt` holds the handle step that replaces `SCM_RIGHTS` there (NT handles
//! duplicated into the attacher's process); its transport is not in this release.
//!
//! # Descriptor ownership
//!
//! A descriptor is consumed only on success and closed exactly once:
//!
//! - [`Channel::send`] borrows its descriptors: the peer receives duplicates, and the
//!   sender's stay open and stay the sender's;
//! - [`Channel::recv`] wraps every descriptor in an [`OwnedFd`](std::os::fd::OwnedFd) the
//!   moment it arrives. On success they are the caller's; on any refusal (a bad header or body,
//!   a descriptor count other than the header's, truncated control data, a peer that closed
//!   mid-message) every one that arrived is closed before the error returns — never leaked,
//!   never closed twice.
//!
//! ```no_run
//! # #[cfg(target_os = "linux")]
//! # fn main() -> Result<(), cuvk::ipc::IpcError> {
//! use std::time::Duration;
//! use cuvk::ipc::{Channel, Listener, Message};
//! let listener = Listener::bind("particles")?; // abstract name \0cuvk-particles
//! let peer: Channel = listener.accept(Duration::from_secs(5))?;
//! let (msg, fds) = peer.recv(Duration::from_secs(1))?;
//! if let Message::Buffer(info) = msg {
//!     // fds[0] is the memory of `info` (info.memory_size bytes): import it.
//!     # let _ = (info, fds);
//! }
//! # Ok(()) }
//! # #[cfg(not(target_os = "linux"))]
//! # fn main() {}
//! ```

#[cfg(target_os = "linux")]
mod channel;
#[cfg(target_os = "linux")]
mod describe;
mod error;
mod wire;

#[cfg(target_os = "linux")]
mod frames;
#[cfg(windows)]
pub mod nt;
#[cfg(target_os = "linux")]
mod share;

#[cfg(target_os = "linux")]
pub use channel::{Channel, Listener};
pub use error::IpcError;
#[cfg(target_os = "linux")]
pub use frames::{FrameClient, FrameServer};
#[cfg(target_os = "linux")]
pub use share::{Attached, Link, Server};
pub use wire::{
    decode, encode, BufferInfo, FrameNotice, Header, Hello, ImageInfo, ImageShape, Message,
    MessageKind, TimelineInfo, TimelineRole, HEADER_LEN, MAX_FDS, VERSION,
};
