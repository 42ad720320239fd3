//! Sharing Vulkan memory and timeline semaphores between processes: one process publishes
//! buffers, images and timelines over a Unix domain socket, their descriptors passed beside
//! the messages (`SCM_RIGHTS`); another attaches and imports them.
//!
//! - [`FrameServer`] / [`FrameClient`]: a viewer (Vulkan) and a producer (CUDA) in two
//!   processes, frames ordered on the GPU by two timelines, K in flight;
//! - with the `ipc-objects` feature, `Server` / `Attached` / `Link`: publish and import
//!   buffers, images and timelines, and one-way frame notices, for custom protocols (a layer
//!   that may change with any minor release);
//! - what a viewer's buffer holds ([`BufferInfo`]) and why a connection was refused or failed
//!   ([`IpcError`]).
//!
//! The wire format and the transport underneath are private (their versions may change with
//! any release; both sides of a connection run the same cuvk). What a description says is
//! checked with the rules of an in-process request: a lie is the `LayoutError`, `ImageError`
//! or `MemoryError` a user of the in-process API knows; what is the wire's own (magic,
//! version, descriptor counts, the GPU and driver) is an [`IpcError`]. All but the
//! descriptions and errors are Linux only. A descriptor received is owned the moment it
//! arrives and closed exactly once on any refusal.

#[cfg(target_os = "linux")]
mod channel;
#[cfg(target_os = "linux")]
mod describe;
mod error;
mod wire;

#[cfg(target_os = "linux")]
mod frames;
// Fan-out (issue 37): the publisher and its consumers, behind `ipc-objects` (the object layer
// they build on may change with any minor release).
#[cfg(target_os = "linux")]
#[cfg_attr(not(feature = "ipc-objects"), allow(dead_code))]
mod publish;
#[cfg(target_os = "linux")]
#[cfg_attr(not(feature = "ipc-objects"), allow(dead_code))]
mod subscribe;
// The handle step a Windows transport will use (type-checked; no transport in this release).
#[cfg(windows)]
#[allow(dead_code)]
mod nt;
// Without `ipc-objects` only the frame protocol uses it: what that leaves unused is not dead.
#[cfg(target_os = "linux")]
#[cfg_attr(not(feature = "ipc-objects"), allow(dead_code))]
mod share;

pub use error::IpcError;
#[cfg(target_os = "linux")]
pub use frames::{FrameClient, FrameServer};
#[cfg(all(target_os = "linux", feature = "ipc-objects"))]
pub use publish::{Publisher, PublisherDesc};
#[cfg(all(target_os = "linux", feature = "ipc-objects"))]
pub use share::{Attached, Link, Server};
#[cfg(all(target_os = "linux", feature = "ipc-objects"))]
pub use subscribe::{CudaSubscriber, Held, Subscriber};
pub use wire::{BufferInfo, ImageShape, MessageKind};
#[cfg(feature = "ipc-objects")]
pub use wire::{ImageInfo, TimelineInfo, TimelineRole};

/// A raw peer for cuvk's own tests (feature `ipc-test-peer`): the transport and the messages,
/// to play a server or client that lies. Not part of the API: it changes with the wire.
#[cfg(all(target_os = "linux", feature = "ipc-test-peer"))]
#[doc(hidden)]
pub mod test_peer {
    pub use super::channel::{Channel, Listener};
    pub use super::wire::{encode, FrameNotice, Hello, Message, HEADER_LEN};
}
