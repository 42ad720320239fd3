//! Scaffolding shared by `cuvk`'s examples, tests and benchmarks: `cuvk-canvas`'s picture and
//! Vulkan helpers (re-exported), frame numbering for loops without CUDA, and descriptor counting for leak checks; the CUDA
//! kernels and the Vulkan checker the examples and the GPU tests both use ([`kernels`],
//! [`image_kernels`], [`checker`]), the demos' simulations ([`sim`]) and what else they share
//! ([`demo`]), the examples' logger and statistics, and the integration tests' helpers
//! ([`testing`]). Not part of `cuvk`'s public API (and not published).

pub mod checker;
pub mod demo;
pub mod image_kernels;
pub mod kernels;
pub mod logger;
pub mod sim;
pub mod stats;
pub mod testing;

// The picture and its Vulkan helpers live in the published `cuvk-canvas` (the Python module
// draws with them); the examples and tests keep reaching them here.
pub use cuvk_canvas::{
    canvas, CommandSlots, ComputePipeline, MemoryLocation, PrivateAllocator, PrivateBuffer,
};

use cuvk::{Error, Result};

/// Frame `number`'s data slot and command slot when `frames_in_flight` frames are in flight,
/// numbered as [`cuvk::FramePacer`] numbers them: for loops with the same structure that run
/// without CUDA (a Vulkan-only fallback ordered by one timeline).
pub fn unpaced_frame(number: u64, frames_in_flight: u32) -> UnpacedFrame {
    let k = u64::from(frames_in_flight.max(1));
    UnpacedFrame {
        number,
        slot: (number % k) as usize,
        command_slot: (number % (2 * k)) as usize,
    }
}

/// A frame numbered like the pacer's, without a pacer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnpacedFrame {
    /// Frame number, from 1.
    pub number: u64,
    /// Data slot: `number % K`.
    pub slot: usize,
    /// Command slot: `number % 2K`.
    pub command_slot: usize,
}

/// Number of open file descriptors of this process (for leak checks in tests and benches).
#[cfg(target_os = "linux")]
pub fn open_fd_count() -> Result<usize> {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .map_err(|source| Error::Io {
            call: "read_dir(/proc/self/fd)",
            source,
        })
}
