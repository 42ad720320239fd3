//! Depth-correct sort-last compositing (issue 38): every rank draws its share of an opaque
//! scene into a picture of `u64` samples — depth (an order-preserving key) over RGBA8, the
//! nearest kept per pixel, `u64::MAX` where nothing was drawn (the layout of
//! `rules::composite`, and of the particle canvas's opaque mode) — and the composite keeps,
//! per pixel, the nearest sample of all ranks: one `ncclReduce` with `ncclMin` on
//! `ncclUint64`, no custom reduction. A minimum does not depend on how the samples were
//! split or in what order they were drawn, so the composite of N GPUs is the one-GPU picture
//! bit for bit.

use std::time::Duration;

use super::{Communicator, ReduceOp};
use crate::error::Result;
use crate::{SharedBuffer, StreamOrder, UseMarks};

/// The value of a pixel no rank drew.
pub const EMPTY_SAMPLE: u64 = u64::MAX;

/// Composites the ranks' depth pictures of one size ([`Self::composite`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DepthCompositor {
    width: u32,
    height: u32,
}

impl DepthCompositor {
    /// A compositor for `width`×`height` pictures, agreed with every other rank (a
    /// collective: every rank calls it, waiting at most `timeout` in all for the others);
    /// ranks of different widths or heights are refused on every rank
    /// ([`crate::PeerError::SizeMismatch`]).
    pub fn new(comm: &Communicator, width: u32, height: u32, timeout: Duration) -> Result<Self> {
        // Width and height both: 640×360 and 360×640 have as many pixels.
        let deadline = std::time::Instant::now() + timeout;
        let left = || deadline.saturating_duration_since(std::time::Instant::now());
        comm.agree_on_len(width as usize, left())?;
        comm.agree_on_len(height as usize, left())?;
        Ok(Self { width, height })
    }

    /// Samples per picture (`width × height`): the length of the buffer each rank draws into.
    pub fn pixels(&self) -> usize {
        self.width as usize * self.height as usize
    }

    /// Keeps in `root`'s `samples`, per pixel, the nearest of every rank's (a collective),
    /// ordered on the GPU as [`Communicator::reduce_into`]: after Vulkan's last use of
    /// `samples` (`marks` on `order`); the returned value is released after the composite,
    /// for Vulkan's next use (root's resolve) to wait on — and for
    /// [`Communicator::wait_cuda`] to bound (a rank lost mid-composite is
    /// [`crate::PeerError::RankLost`]). Non-root ranks' samples are only read. A buffer of
    /// another length than [`Self::pixels`] is refused (`Peer.SizeMismatch`) before NCCL.
    pub fn composite(
        &self,
        comm: &Communicator,
        samples: &mut SharedBuffer<u64>,
        root: usize,
        order: &StreamOrder,
        marks: &UseMarks,
    ) -> Result<u64> {
        if samples.len() != self.pixels() {
            return Err(crate::PeerError::SizeMismatch {
                rank: comm.rank(),
                len: samples.len() as u64,
                min: self.pixels() as u64,
                max: self.pixels() as u64,
            }
            .into());
        }
        comm.reduce_into(samples, ReduceOp::Min, root, order, marks)
    }
}
