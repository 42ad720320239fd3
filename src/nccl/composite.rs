//! Depth-correct sort-last compositing (issue 38): every rank draws its share of an opaque
//! scene into a picture of `u64` samples — depth (an order-preserving key) over RGBA8, the
//! nearest kept per pixel, `u64::MAX` where nothing was drawn (the layout of
//! `rules::composite`, and of the particle canvas's opaque mode) — and the composite keeps,
//! per pixel, the nearest sample of all ranks with `ncclMin` on `ncclUint64`, no custom
//! reduction. A minimum does not depend on how the samples were split, in what order they
//! were drawn or how the ranks combine them, so the composite of N GPUs is the one-GPU
//! picture bit for bit, whatever the [`CompositeSchedule`].
//!
//! Nothing here assumes two ranks or one node: the schedules are NCCL collectives over the
//! communicator's ranks, on whatever transport NCCL picked (NVLink, PCIe, InfiniBand,
//! sockets).

use std::ffi::c_void;
use std::time::Duration;

use super::{check, Communicator, ReduceOp};
use crate::error::Result;
use crate::{SharedBuffer, StreamOrder, UseMarks};

/// The value of a pixel no rank drew.
pub const EMPTY_SAMPLE: u64 = u64::MAX;

/// `ncclUint64`.
const UINT64: i32 = 5;

/// Where the composite goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompositeTo {
    /// One rank's samples (the one that resolves and shows the picture).
    Rank(usize),
    /// Every rank's samples (each can resolve, save or hand on the picture).
    All,
}

/// How the ranks combine their pictures. Both give the same samples, bit for bit; which is
/// faster depends on the transport and the number of ranks (BENCHMARKS.md has both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CompositeSchedule {
    /// One `ncclReduce` (to a rank) or `ncclAllReduce` (to all) with `ncclMin`: NCCL picks
    /// its ring or tree. Only the destination's samples change.
    #[default]
    Reduce,
    /// `ncclReduceScatter`: every rank composites one band of the picture (the bandwidth of
    /// binary swap: each rank sends and receives (N-1)/N of a picture, every link busy in
    /// both directions), then the bands are gathered — to the rank with `ncclSend`/`ncclRecv`,
    /// to all with `ncclAllGather`. Every rank's samples change (its band holds the
    /// composite of that band; the rest, to a rank, is left as it was).
    ReduceScatter,
}

/// Composites the ranks' depth pictures of one size ([`Self::composite`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DepthCompositor {
    width: u32,
    height: u32,
    schedule: CompositeSchedule,
}

impl DepthCompositor {
    /// A compositor for `width`×`height` pictures, agreed with every other rank (a
    /// collective: every rank calls it, waiting at most `timeout` in all for the others);
    /// ranks of different widths or heights are refused on every rank
    /// ([`crate::PeerError::SizeMismatch`]). Its schedule is [`CompositeSchedule::Reduce`]
    /// until [`Self::with_schedule`].
    pub fn new(comm: &Communicator, width: u32, height: u32, timeout: Duration) -> Result<Self> {
        // Width and height both: 640×360 and 360×640 have as many pixels.
        let deadline = std::time::Instant::now() + timeout;
        let left = || deadline.saturating_duration_since(std::time::Instant::now());
        comm.agree_on_len(width as usize, left())?;
        comm.agree_on_len(height as usize, left())?;
        Ok(Self {
            width,
            height,
            schedule: CompositeSchedule::default(),
        })
    }

    /// The same compositor with another schedule (every rank must use the same one: NCCL
    /// would wait for collectives the others never make, until [`Communicator::wait_cuda`]'s
    /// bound).
    #[must_use]
    pub fn with_schedule(self, schedule: CompositeSchedule) -> Self {
        Self { schedule, ..self }
    }

    /// The schedule it composites with.
    pub fn schedule(&self) -> CompositeSchedule {
        self.schedule
    }

    /// Samples per picture (`width × height`): the length of the buffer each rank draws into.
    pub fn pixels(&self) -> usize {
        self.width as usize * self.height as usize
    }

    /// Keeps, per pixel, the nearest of every rank's samples in `to`'s `samples` (a
    /// collective: every rank calls it with the same `to`), ordered on the GPU as
    /// [`Communicator::reduce_into`]: after Vulkan's last use of `samples` (`marks` on
    /// `order`); the returned value is released after the composite, for Vulkan's next use
    /// (the resolve) to wait on — and for [`Communicator::wait_cuda`] to bound (a rank lost
    /// mid-composite is [`crate::PeerError::RankLost`]). Refused before NCCL, changing
    /// nothing: a buffer of another length than [`Self::pixels`] (`Peer.SizeMismatch`), a
    /// rank outside the communicator (`Peer.RankOutOfRange`), a buffer on another GPU.
    pub fn composite(
        &self,
        comm: &Communicator,
        samples: &mut SharedBuffer<u64>,
        to: CompositeTo,
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
        if let CompositeTo::Rank(root) = to {
            comm.check_root(root)?;
        }
        match (self.schedule, to) {
            (CompositeSchedule::Reduce, CompositeTo::Rank(root)) => {
                comm.reduce_into(samples, ReduceOp::Min, root, order, marks)
            }
            (CompositeSchedule::Reduce, CompositeTo::All) => {
                comm.enqueue(samples, order, marks, |c| all_reduce_min(c, 0, c.len))
            }
            (CompositeSchedule::ReduceScatter, to) => {
                let (rank, world) = (comm.rank(), comm.world());
                comm.enqueue(samples, order, marks, |c| {
                    let band = c.len / world;
                    // The few samples past the last whole band (len % world): reduced alone.
                    let tail = band * world;
                    if band > 0 {
                        reduce_scatter_min(c, rank, band)?;
                        match to {
                            CompositeTo::All => all_gather(c, rank, band)?,
                            CompositeTo::Rank(root) => gather(c, rank, world, root, band)?,
                        }
                    }
                    if tail < c.len {
                        all_reduce_min(c, tail, c.len - tail)?;
                    }
                    Ok(())
                })
            }
        }
    }
}

/// The address of sample `at` of the enqueued buffer.
fn at(c: &super::Enqueue, at: usize) -> *mut c_void {
    c.ptr.cast::<u64>().wrapping_add(at).cast()
}

/// `ncclAllReduce` with `ncclMin` of samples `[first, first + count)`, in place.
fn all_reduce_min(c: &super::Enqueue, first: usize, count: usize) -> Result<()> {
    let p = at(c, first);
    // SAFETY: `[first, first + count)` lies in the buffer of `c.len` u64 on this GPU (the
    // callers' bounds), used on `c.stream` after Vulkan's last use (see `enqueue`).
    let code =
        unsafe { (c.nccl.all_reduce)(p, p, count, UINT64, ReduceOp::Min as i32, c.comm, c.stream) };
    check(c.nccl, code, "ncclAllReduce", c.comm)
}

/// `ncclReduceScatter` with `ncclMin`, in place: rank r's band `[r·band, (r+1)·band)` gets
/// the composite of that band.
fn reduce_scatter_min(c: &super::Enqueue, rank: usize, band: usize) -> Result<()> {
    // SAFETY: `band × world ≤ c.len` samples on this GPU; in place as NCCL defines it
    // (the receive buffer is the send buffer at rank × band), on `c.stream` (see `enqueue`).
    let code = unsafe {
        (c.nccl.reduce_scatter)(
            c.ptr,
            at(c, rank * band),
            band,
            UINT64,
            ReduceOp::Min as i32,
            c.comm,
            c.stream,
        )
    };
    check(c.nccl, code, "ncclReduceScatter", c.comm)
}

/// Every rank's band to every rank (`ncclAllGather`, in place).
fn all_gather(c: &super::Enqueue, rank: usize, band: usize) -> Result<()> {
    // SAFETY: as `reduce_scatter_min`: in place, the send buffer is the receive buffer at
    // rank × band.
    let code =
        unsafe { (c.nccl.all_gather)(at(c, rank * band), c.ptr, band, UINT64, c.comm, c.stream) };
    check(c.nccl, code, "ncclAllGather", c.comm)
}

/// Every rank's band to `root` (point-to-point sends in one NCCL group).
fn gather(c: &super::Enqueue, rank: usize, world: usize, root: usize, band: usize) -> Result<()> {
    // SAFETY: no arguments; the group is ended below on every path.
    let started = unsafe { (c.nccl.group_start)() };
    check(c.nccl, started, "ncclGroupStart", c.comm)?;
    let mut result = Ok(());
    for peer in (0..world).filter(|&p| p != root) {
        let step = if rank == root {
            // SAFETY: band `peer` of the buffer (within `c.len`), written on `c.stream`.
            let code = unsafe {
                (c.nccl.recv)(
                    at(c, peer * band),
                    band,
                    UINT64,
                    peer as i32,
                    c.comm,
                    c.stream,
                )
            };
            check(c.nccl, code, "ncclRecv", c.comm)
        } else if peer == rank {
            // SAFETY: this rank's band (within `c.len`), read on `c.stream`.
            let code = unsafe {
                (c.nccl.send)(
                    at(c, rank * band),
                    band,
                    UINT64,
                    root as i32,
                    c.comm,
                    c.stream,
                )
            };
            check(c.nccl, code, "ncclSend", c.comm)
        } else {
            continue;
        };
        if step.is_err() {
            result = step;
            break;
        }
    }
    // SAFETY: ends the group started above.
    let ended = unsafe { (c.nccl.group_end)() };
    result.and(check(c.nccl, ended, "ncclGroupEnd", c.comm))
}
