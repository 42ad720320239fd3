//! Pure sub-allocation bookkeeping behind [`SharedPool`](crate::SharedPool) and
//! [`VulkanPool`](crate::vulkan::VulkanPool): which byte ranges of which memory blocks are
//! live, where the next buffer goes, when a request gets its own allocation, when an empty
//! block is released, and the statistics a user prints. Nothing here touches a GPU: every
//! decision is a function of numbers, unit- and property-tested (see the tests at the bottom).
//!
//! The ranges inside one block are kept by [`offset_allocator`] — Sebastian Aaltonen's O(1)
//! two-level segregated-fit allocator, the one Bevy uses — counting in units of a power of
//! two bytes. [`BlockRanges`] adds what it lacks: byte offsets, any power-of-two alignment
//! (by reserving `alignment - unit` bytes of slack and aligning inside the reservation),
//! ownership checks and accounting. [`PoolLayout`] adds the blocks: first-fit placement over
//! the blocks in creation order, routing of large requests to their own allocation, the sizes
//! to try for a new block, and the release policy for empty blocks.

use std::fmt;

use offset_allocator::{Allocation, Allocator};

use crate::error::MemoryError;
use crate::error::Result;
use crate::rules::layout::{self, LayoutError};

/// The most `offset-allocator` nodes one block keeps. Each live range and each free gap is a
/// node (about 28 bytes of host memory), so a block holds at most about 32,000 live ranges;
/// past that it refuses further ranges and the pool places them in another block.
pub const MAX_NODES_PER_BLOCK: u32 = 1 << 16;

/// The most units one block is divided into (`offset-allocator` counts in `u32`); larger
/// blocks count in larger units.
pub const MAX_UNITS_PER_BLOCK: u64 = 1 << 31;

/// A request for a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeRequest {
    /// Bytes the range must hold (for a Vulkan buffer: `VkMemoryRequirements::size`).
    pub size: u64,
    /// Power of two the range's offset must be a multiple of.
    pub alignment: u64,
    /// Bytes the user asked for (at most `size`), counted in the statistics.
    pub requested: u64,
}

impl RangeRequest {
    #[cfg(test)]
    /// `size` bytes at a multiple of `alignment`, all of them requested by the user.
    pub fn new(size: u64, alignment: u64) -> Self {
        Self {
            size,
            alignment,
            requested: size,
        }
    }
}

/// A live range of a [`BlockRanges`]: give it back with [`BlockRanges::free`] (or
/// [`PoolLayout::free`]). It is not `Clone`, so a range is freed at most once.
pub struct SubRange {
    block: u64,
    offset: u64,
    size: u64,
    start: u64,
    reserved: u64,
    requested: u64,
    handle: Allocation<u32>,
}

impl fmt::Debug for SubRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubRange")
            .field("block", &self.block)
            .field("offset", &self.offset)
            .field("size", &self.size)
            .field("reserved", &(self.start..self.start + self.reserved))
            .finish()
    }
}

impl SubRange {
    /// Byte offset in the block: a multiple of the requested alignment.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    #[cfg(test)]
    /// Bytes asked for (`RangeRequest::size`).
    pub fn size(&self) -> u64 {
        self.size
    }
    #[cfg(test)]
    /// `offset..offset + size`.
    pub fn range(&self) -> std::ops::Range<u64> {
        self.offset..self.offset + self.size
    }
    #[cfg(test)]
    /// The bytes taken from the block for it (whole units, alignment slack included); they
    /// contain [`Self::range`] and no other live range's reservation.
    pub fn reserved(&self) -> std::ops::Range<u64> {
        self.start..self.start + self.reserved
    }
}

/// The live ranges of one memory block of `size` bytes, counted in units of a power of two
/// bytes (at least the `min_unit` it was created with; larger for blocks of more than
/// [`MAX_UNITS_PER_BLOCK`] units).
pub struct BlockRanges {
    id: u64,
    size: u64,
    geometry: Geometry,
    allocator: Allocator<u32>,
    live: usize,
    used: u64,
    requested: u64,
}

impl fmt::Debug for BlockRanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockRanges")
            .field("id", &self.id)
            .field("size", &self.size)
            .field("unit", &self.geometry.unit)
            .field("live", &self.live)
            .field("used", &self.used)
            .finish()
    }
}

/// The unit a block of `size` bytes counts in: the smallest power of two at least `min_unit`
/// (a power of two) that divides it into at most [`MAX_UNITS_PER_BLOCK`] units.
pub fn unit_for(size: u64, min_unit: u64) -> Result<u64, LayoutError> {
    layout::check_power_of_two(min_unit)?;
    let mut unit = min_unit;
    while size / unit > MAX_UNITS_PER_BLOCK {
        unit *= 2;
    }
    Ok(unit)
}

/// How a block of some size is counted: its unit, how many units, and the largest request
/// (in units) it holds when empty — `offset-allocator` files free space in size classes
/// (3-bit mantissa floats), so a block whose unit count is not a class boundary holds less
/// than its size in one range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geometry {
    unit: u64,
    units: u32,
    capacity: u32,
}

impl Geometry {
    /// The geometry of a block of `size` bytes counted in units of at least `min_unit`.
    fn of(size: u64, min_unit: u64) -> Result<Self, LayoutError> {
        let unit = unit_for(size, min_unit)?;
        let units = size / unit;
        if units == 0 {
            return Err(LayoutError::OutOfBounds {
                offset: 0,
                size: unit,
                end: unit,
                container: "block",
                container_size: size,
            });
        }
        // At most MAX_UNITS_PER_BLOCK (2^31) by unit_for.
        let units = u32::try_from(units).unwrap_or(u32::MAX >> 1);
        let capacity = Allocator::<u32>::with_max_allocs(units, 8)
            .storage_report()
            .largest_free_region;
        Ok(Self {
            unit,
            units,
            capacity,
        })
    }

    /// Units a request takes: its size plus the slack that lets any offset the allocator
    /// returns (a multiple of the unit) be aligned up inside the reservation. `None` when
    /// the request is empty, its alignment is not a power of two, or it is larger than the
    /// block.
    fn units_for(&self, req: &RangeRequest) -> Option<u32> {
        if req.size == 0 || !req.alignment.is_power_of_two() {
            return None;
        }
        let slack = req.alignment.saturating_sub(self.unit);
        let bytes = req.size.checked_add(slack)?;
        let units = bytes.div_ceil(self.unit);
        u32::try_from(units).ok().filter(|&u| u <= self.units)
    }

    /// Whether an empty block of this geometry holds `req`.
    fn fits_when_empty(&self, req: &RangeRequest) -> bool {
        self.units_for(req)
            .is_some_and(|need| offset_allocator::ext::min_allocator_size(need) <= self.capacity)
    }
}

impl BlockRanges {
    /// The ranges of an empty block of `size` bytes with identity `id` (unique among the
    /// blocks whose ranges may meet), counting in units of at least `min_unit` bytes (a power
    /// of two). Errors if the block is smaller than one unit.
    pub fn new(id: u64, size: u64, min_unit: u64) -> Result<Self, LayoutError> {
        let geometry = Geometry::of(size, min_unit)?;
        let nodes = geometry
            .units
            .saturating_mul(2)
            .saturating_add(4)
            .clamp(8, MAX_NODES_PER_BLOCK);
        Ok(Self {
            id,
            size,
            geometry,
            allocator: Allocator::with_max_allocs(geometry.units, nodes),
            live: 0,
            used: 0,
            requested: 0,
        })
    }

    #[cfg(test)]
    /// Whether `req` fits this block when it is empty (whatever is live now).
    pub fn fits_when_empty(&self, req: &RangeRequest) -> bool {
        self.geometry.fits_when_empty(req)
    }

    /// A range for `req`, or `None` if the block has no free range large enough (or no
    /// bookkeeping node left, or the request is empty or its alignment not a power of two).
    pub fn allocate(&mut self, req: &RangeRequest) -> Option<SubRange> {
        let need = self.geometry.units_for(req)?;
        let handle = self.allocator.allocate(need)?;
        let start = u64::from(handle.offset) * self.geometry.unit;
        let reserved = u64::from(need) * self.geometry.unit;
        // start + reserved <= size < u64::MAX and alignment - unit <= reserved - size: the
        // aligned offset cannot overflow and the range ends inside the reservation.
        let Some(offset) = layout::align_up(start, req.alignment) else {
            self.allocator.free(handle);
            return None;
        };
        self.live += 1;
        self.used += reserved;
        self.requested += req.requested.min(req.size);
        Some(SubRange {
            block: self.id,
            offset,
            size: req.size,
            start,
            reserved,
            requested: req.requested.min(req.size),
            handle,
        })
    }

    /// Gives a range back. A range of another block is handed back unchanged.
    pub fn free(&mut self, range: SubRange) -> std::result::Result<(), SubRange> {
        if range.block != self.id {
            return Err(range);
        }
        self.allocator.free(range.handle);
        self.live -= 1;
        self.used -= range.reserved;
        self.requested -= range.requested;
        Ok(())
    }

    /// The block's identity.
    pub fn id(&self) -> u64 {
        self.id
    }
    /// The block's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
    #[cfg(test)]
    /// The unit it counts in.
    pub fn unit(&self) -> u64 {
        self.geometry.unit
    }
    /// Number of live ranges.
    pub fn live(&self) -> usize {
        self.live
    }
    /// Whether no range is live.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }
    /// Bytes reserved by live ranges (whole units, alignment slack included).
    pub fn used_bytes(&self) -> u64 {
        self.used
    }
    /// Bytes the users of the live ranges asked for.
    pub fn requested_bytes(&self) -> u64 {
        self.requested
    }
    /// Bytes not reserved by a live range (`size - used`, including a tail shorter than
    /// one unit).
    pub fn free_bytes(&self) -> u64 {
        self.size - self.used
    }
    /// The largest free range as `offset-allocator` reports it: the size class of the largest
    /// free gap, a lower bound within 12.5% (0 when its bookkeeping nodes are used up).
    pub fn largest_free_range(&self) -> u64 {
        u64::from(self.allocator.storage_report().largest_free_region) * self.geometry.unit
    }

    fn report(&self) -> BlockReport {
        BlockReport {
            size: self.size,
            own: false,
            buffers: self.live,
            requested_bytes: self.requested,
            used_bytes: self.used,
            free_bytes: self.free_bytes(),
            largest_free_range: self.largest_free_range(),
        }
    }
}

/// How a [`PoolLayout`] divides memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Size of each block in bytes (smaller blocks are tried when a full one cannot be had).
    pub block_size: u64,
    /// The smallest unit ranges are counted in: a power of two, at least every alignment most
    /// requests need (a larger alignment costs slack).
    pub min_unit: u64,
    /// Requests larger than this many bytes get their own allocation (at most `block_size`).
    pub dedicated_threshold: u64,
    /// How many empty blocks are kept for reuse; a block that becomes empty beyond that is
    /// released at once.
    pub keep_empty_blocks: usize,
}

/// A block (or own allocation) of a [`PoolLayout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockId {
    slot: usize,
    id: u64,
}

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A range of a shared block.
    Block,
    /// Its own allocation: larger than the dedicated threshold, or than any block can hold.
    Own,
}

enum Slot<B> {
    Vacant,
    Block {
        // Boxed: offset-allocator keeps its 256 bins inline (about 1.2 KiB).
        ranges: Box<BlockRanges>,
        payload: B,
    },
    Own {
        id: u64,
        size: u64,
        requested: u64,
        payload: B,
    },
}

/// The blocks of a pool and the ranges in them; `B` is what the caller keeps per block (the
/// device memory), handed back when the block is released so that it is freed outside any
/// lock the caller holds around the layout.
///
/// Policy: a request larger than `dedicated_threshold` (or than an empty block holds) goes to
/// its own allocation; otherwise to the first block, in creation order, with room, or to a
/// new block. A block that becomes empty is kept while fewer than `keep_empty_blocks` other
/// empty blocks are kept, and released otherwise; [`Self::trim`] releases every empty block;
/// after [`Self::close`] every block is released as soon as it is empty.
pub struct PoolLayout<B = ()> {
    config: PoolConfig,
    geometry: Geometry,
    slots: Vec<Slot<B>>,
    vacant: Vec<usize>,
    next_id: u64,
    empty_blocks: usize,
    closed: bool,
}

impl<B> fmt::Debug for PoolLayout<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolLayout")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<B> PoolLayout<B> {
    /// An empty layout, after checking the configuration: `min_unit` a power of two, a block
    /// at least one unit, the threshold in `1..=block_size`.
    pub fn new(config: PoolConfig) -> Result<Self> {
        let unit = unit_for(config.block_size, config.min_unit)?;
        let geometry = Geometry::of(config.block_size, config.min_unit);
        let Ok(geometry) = geometry else {
            return Err(MemoryError::PoolBlockTooSmall {
                block_size: config.block_size,
                unit,
            }
            .into());
        };
        if config.dedicated_threshold == 0 || config.dedicated_threshold > config.block_size {
            return Err(MemoryError::PoolThreshold {
                threshold: config.dedicated_threshold,
                block_size: config.block_size,
            }
            .into());
        }
        Ok(Self {
            config,
            geometry,
            slots: Vec::new(),
            vacant: Vec::new(),
            next_id: 0,
            empty_blocks: 0,
            closed: false,
        })
    }

    /// Whether an empty block of `size` bytes holds `req`.
    fn fresh_block_fits(&self, size: u64, req: &RangeRequest) -> bool {
        if size == self.config.block_size {
            return self.geometry.fits_when_empty(req);
        }
        Geometry::of(size, self.config.min_unit).is_ok_and(|g| g.fits_when_empty(req))
    }

    /// Where `req` goes: its own allocation when it is larger than the dedicated threshold or
    /// than an empty block of `block_size` holds (alignment slack included).
    pub fn route(&self, req: &RangeRequest) -> Route {
        if req.size > self.config.dedicated_threshold || !self.geometry.fits_when_empty(req) {
            Route::Own
        } else {
            Route::Block
        }
    }

    /// A range for `req` in the first block with room, or `None` (then create a block of one
    /// of [`Self::new_block_sizes`] and call [`Self::add_block`]).
    pub fn allocate(&mut self, req: &RangeRequest) -> Option<(BlockId, SubRange, &B)> {
        for (slot, s) in self.slots.iter_mut().enumerate() {
            if let Slot::Block { ranges, payload } = s {
                let was_empty = ranges.is_empty();
                if let Some(range) = ranges.allocate(req) {
                    if was_empty {
                        self.empty_blocks -= 1;
                    }
                    let id = BlockId {
                        slot,
                        id: ranges.id(),
                    };
                    return Some((id, range, payload));
                }
            }
        }
        None
    }

    /// Sizes to try, in order, for a new block that must hold `req`: `block_size`, then
    /// halves of it down to an eighth (when memory is short) while they still hold `req`.
    pub fn new_block_sizes(&self, req: &RangeRequest) -> Vec<u64> {
        let mut sizes = Vec::with_capacity(4);
        let mut size = self.config.block_size;
        while sizes.len() < 4 && self.fresh_block_fits(size, req) {
            sizes.push(size);
            size /= 2;
        }
        sizes
    }

    /// Adds a new empty block of `size` bytes, whose memory is `payload`, and takes a range
    /// for `req` from it. If the block cannot hold `req`, nothing is added and `payload` is
    /// handed back.
    pub fn add_block(
        &mut self,
        size: u64,
        payload: B,
        req: &RangeRequest,
    ) -> std::result::Result<(BlockId, SubRange), B> {
        let Ok(mut ranges) = BlockRanges::new(self.next_id, size, self.config.min_unit) else {
            return Err(payload);
        };
        let Some(range) = ranges.allocate(req) else {
            return Err(payload);
        };
        self.next_id += 1;
        let id = ranges.id();
        let slot = self.insert(Slot::Block {
            ranges: Box::new(ranges),
            payload,
        });
        Ok((BlockId { slot, id }, range))
    }

    /// Records an allocation of `size` bytes made for one buffer that asked for `requested`.
    pub fn add_own(&mut self, size: u64, requested: u64, payload: B) -> BlockId {
        let id = self.next_id;
        self.next_id += 1;
        let slot = self.insert(Slot::Own {
            id,
            size,
            requested,
            payload,
        });
        BlockId { slot, id }
    }

    fn insert(&mut self, s: Slot<B>) -> usize {
        match self.vacant.pop() {
            Some(slot) => {
                self.slots[slot] = s;
                slot
            }
            None => {
                self.slots.push(s);
                self.slots.len() - 1
            }
        }
    }

    #[cfg(test)]
    /// What the caller keeps for a block.
    pub fn payload(&self, block: BlockId) -> Option<&B> {
        match self.slots.get(block.slot)? {
            Slot::Block { ranges, payload } if ranges.id() == block.id => Some(payload),
            Slot::Own { id, payload, .. } if *id == block.id => Some(payload),
            _ => None,
        }
    }

    /// Gives `range` back to `block`. Returns the block's payload if the block is released
    /// (it became empty and the policy, or `release_if_empty`, says so). A range that does
    /// not belong to `block` is handed back unchanged.
    pub fn free(
        &mut self,
        block: BlockId,
        range: SubRange,
        release_if_empty: bool,
    ) -> std::result::Result<Option<B>, SubRange> {
        let Some(Slot::Block { ranges, .. }) = self.slots.get_mut(block.slot) else {
            return Err(range);
        };
        if ranges.id() != block.id {
            return Err(range);
        }
        ranges.free(range)?;
        if !ranges.is_empty() {
            return Ok(None);
        }
        if release_if_empty || self.closed || self.empty_blocks >= self.config.keep_empty_blocks {
            Ok(self.vacate(block.slot))
        } else {
            self.empty_blocks += 1;
            Ok(None)
        }
    }

    /// Forgets an own allocation, handing back its payload (`None` if `block` is not one).
    pub fn free_own(&mut self, block: BlockId) -> Option<B> {
        match self.slots.get(block.slot) {
            Some(Slot::Own { id, .. }) if *id == block.id => self.vacate(block.slot),
            _ => None,
        }
    }

    fn vacate(&mut self, slot: usize) -> Option<B> {
        let s = std::mem::replace(self.slots.get_mut(slot)?, Slot::Vacant);
        self.vacant.push(slot);
        match s {
            Slot::Block { payload, .. } | Slot::Own { payload, .. } => Some(payload),
            Slot::Vacant => None,
        }
    }

    /// Releases every empty block, handing back their payloads.
    pub fn trim(&mut self) -> Vec<B> {
        let empty: Vec<usize> = (0..self.slots.len())
            .filter(|&i| matches!(&self.slots[i], Slot::Block { ranges, .. } if ranges.is_empty()))
            .collect();
        self.empty_blocks = 0;
        empty.into_iter().filter_map(|i| self.vacate(i)).collect()
    }

    /// Releases every empty block now and every other block as soon as it becomes empty
    /// (the pool's owner is gone; only live ranges keep blocks).
    pub fn close(&mut self) -> Vec<B> {
        self.closed = true;
        self.trim()
    }

    #[cfg(test)]
    /// Number of empty blocks kept.
    pub fn empty_blocks(&self) -> usize {
        self.empty_blocks
    }

    /// Totals over every block and own allocation.
    pub fn stats(&self) -> PoolStats {
        let mut s = PoolStats::default();
        let mut largest_sum = 0u64;
        for slot in &self.slots {
            match slot {
                Slot::Vacant => {}
                Slot::Block { ranges, .. } => {
                    s.blocks += 1;
                    s.buffers += ranges.live();
                    s.requested_bytes += ranges.requested_bytes();
                    s.used_bytes += ranges.used_bytes();
                    s.reserved_bytes += ranges.size();
                    s.free_bytes += ranges.free_bytes();
                    let largest = ranges.largest_free_range();
                    s.largest_free_range = s.largest_free_range.max(largest);
                    largest_sum += largest;
                }
                Slot::Own {
                    size, requested, ..
                } => {
                    s.own_allocations += 1;
                    s.buffers += 1;
                    s.requested_bytes += requested;
                    s.used_bytes += size;
                    s.reserved_bytes += size;
                }
            }
        }
        s.fragmentation = if s.free_bytes == 0 {
            0.0
        } else {
            1.0 - largest_sum as f64 / s.free_bytes as f64
        };
        s
    }

    /// Every block and own allocation, and the totals.
    pub fn report(&self) -> PoolReport {
        let blocks = self
            .slots
            .iter()
            .filter_map(|slot| match slot {
                Slot::Vacant => None,
                Slot::Block { ranges, .. } => Some(ranges.report()),
                Slot::Own {
                    size, requested, ..
                } => Some(BlockReport {
                    size: *size,
                    own: true,
                    buffers: 1,
                    requested_bytes: *requested,
                    used_bytes: *size,
                    free_bytes: 0,
                    largest_free_range: 0,
                }),
            })
            .collect();
        PoolReport {
            stats: self.stats(),
            blocks,
        }
    }
}

/// A pool's totals: what it holds, what its buffers use, what is free.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PoolStats {
    /// Blocks that ranges are sub-allocated from.
    pub blocks: usize,
    /// Buffers in their own allocation (above the threshold, or wanted dedicated by Vulkan).
    pub own_allocations: usize,
    /// Live buffers (in blocks and in own allocations).
    pub buffers: usize,
    /// Bytes the live buffers asked for.
    pub requested_bytes: u64,
    /// Bytes taken by live buffers: their ranges (Vulkan's size rounding and alignment slack
    /// included) and their own allocations.
    pub used_bytes: u64,
    /// Device memory held: every block and own allocation.
    pub reserved_bytes: u64,
    /// `reserved_bytes - used_bytes`: free bytes in blocks.
    pub free_bytes: u64,
    /// The largest free range of any block (a lower bound within 12.5%, see
    /// the largest free range of a block).
    pub largest_free_range: u64,
    /// The share of free bytes outside each block's largest free range, 0 (every block's free
    /// space in one range) to 1 (all in small gaps).
    pub fragmentation: f64,
}

impl PoolStats {
    /// `reserved_bytes / requested_bytes` (1.0 when nothing is requested).
    pub fn overhead(&self) -> f64 {
        if self.requested_bytes == 0 {
            1.0
        } else {
            self.reserved_bytes as f64 / self.requested_bytes as f64
        }
    }
}

/// One block or own allocation in a [`PoolReport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockReport {
    /// Size in bytes.
    pub size: u64,
    /// Whether it is one buffer's own allocation rather than a shared block.
    pub own: bool,
    /// Live buffers in it.
    pub buffers: usize,
    /// Bytes they asked for.
    pub requested_bytes: u64,
    /// Bytes their ranges take.
    pub used_bytes: u64,
    /// Bytes free.
    pub free_bytes: u64,
    /// Its largest free range (a lower bound within 12.5%).
    pub largest_free_range: u64,
}

/// A pool's blocks and totals, shaped like `gpu-allocator`'s `AllocatorReport` (blocks with
/// their use, then totals); its `Display` is a table to print.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolReport {
    /// The totals.
    pub stats: PoolStats,
    /// Every block, then own allocation, in slot order.
    pub blocks: Vec<BlockReport>,
}

/// `bytes` in the largest binary unit that keeps it at least 1.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

impl fmt::Display for PoolReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.stats;
        writeln!(
            f,
            "pool: {} blocks + {} own allocations, {} buffers; reserved {}, used {} \
             (requested {}), free {}, largest free range {}, fragmentation {:.3}, \
             overhead {:.3}",
            s.blocks,
            s.own_allocations,
            s.buffers,
            format_bytes(s.reserved_bytes),
            format_bytes(s.used_bytes),
            format_bytes(s.requested_bytes),
            format_bytes(s.free_bytes),
            format_bytes(s.largest_free_range),
            s.fragmentation,
            s.overhead()
        )?;
        writeln!(
            f,
            "| #    | kind  |       size | buffers |       used |       free | largest free |"
        )?;
        writeln!(
            f,
            "|------|-------|------------|---------|------------|------------|--------------|"
        )?;
        for (i, b) in self.blocks.iter().enumerate() {
            writeln!(
                f,
                "| {i:>4} | {} | {:>10} | {:>7} | {:>10} | {:>10} | {:>12} |",
                if b.own { "own  " } else { "block" },
                format_bytes(b.size),
                b.buffers,
                format_bytes(b.used_bytes),
                format_bytes(b.free_bytes),
                format_bytes(b.largest_free_range)
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;

    fn config(block_size: u64) -> PoolConfig {
        PoolConfig {
            block_size,
            min_unit: 256,
            dedicated_threshold: block_size / 2,
            keep_empty_blocks: 1,
        }
    }

    #[test]
    fn aligned_ranges_inside_reservations() {
        let mut b = BlockRanges::new(7, MIB, 256).unwrap();
        let a = b.allocate(&RangeRequest::new(100, 16)).unwrap();
        assert_eq!(a.offset(), 0);
        assert_eq!(a.reserved(), 0..256);
        // A 4 KiB alignment in 256-byte units: slack of 3840 bytes, offset aligned inside.
        let c = b.allocate(&RangeRequest::new(1000, 4096)).unwrap();
        assert_eq!(c.offset() % 4096, 0);
        assert!(c.reserved().start <= c.offset() && c.range().end <= c.reserved().end);
        assert_eq!(b.live(), 2);
        assert_eq!(b.used_bytes(), 256 + 256 * (1000 + 3840u64).div_ceil(256));
        b.free(a).unwrap();
        b.free(c).unwrap();
        assert!(b.is_empty());
        assert_eq!(b.used_bytes(), 0);
        assert_eq!(b.largest_free_range(), MIB);
    }

    #[test]
    fn a_range_of_another_block_is_refused() {
        let mut a = BlockRanges::new(1, MIB, 256).unwrap();
        let mut b = BlockRanges::new(2, MIB, 256).unwrap();
        let r = a.allocate(&RangeRequest::new(4096, 256)).unwrap();
        let r = b.free(r).unwrap_err();
        assert_eq!(b.live(), 0);
        a.free(r).unwrap();
    }

    #[test]
    fn bad_requests_are_none() {
        let mut b = BlockRanges::new(1, MIB, 256).unwrap();
        assert!(b.allocate(&RangeRequest::new(0, 256)).is_none());
        assert!(b.allocate(&RangeRequest::new(16, 48)).is_none());
        assert!(b.allocate(&RangeRequest::new(MIB + 1, 256)).is_none());
        assert!(b.allocate(&RangeRequest::new(u64::MAX, 1 << 63)).is_none());
        assert!(BlockRanges::new(1, 100, 256).is_err());
        assert!(BlockRanges::new(1, MIB, 48).is_err());
    }

    #[test]
    fn huge_blocks_count_in_larger_units() {
        let b = BlockRanges::new(1, 1 << 45, 16).unwrap();
        assert_eq!(b.unit(), 1 << 14);
        assert_eq!(unit_for(1 << 20, 16).unwrap(), 16);
    }

    #[test]
    fn a_block_that_is_not_a_size_class_holds_less_than_its_size() {
        // 17 units: offset-allocator files the free range in the 16-unit class.
        let b = BlockRanges::new(1, 17 * 256, 256).unwrap();
        assert!(b.fits_when_empty(&RangeRequest::new(16 * 256, 256)));
        assert!(!b.fits_when_empty(&RangeRequest::new(17 * 256, 256)));
        let mut b = b;
        assert!(b.allocate(&RangeRequest::new(17 * 256, 256)).is_none());
        assert!(b.allocate(&RangeRequest::new(16 * 256, 256)).is_some());
    }

    #[test]
    fn a_block_out_of_nodes_refuses_then_recovers() {
        // 2^20 units of 16 bytes: nodes run out before space does.
        let mut b = BlockRanges::new(1, 16 * MIB, 16).unwrap();
        let mut live = Vec::new();
        while let Some(r) = b.allocate(&RangeRequest::new(16, 16)) {
            live.push(r);
        }
        assert!(live.len() < MAX_NODES_PER_BLOCK as usize);
        assert!(b.free_bytes() > 0);
        let n = live.len();
        for r in live {
            b.free(r).unwrap();
        }
        assert!(b.is_empty());
        assert!(n > 1000);
        assert!(b.allocate(&RangeRequest::new(16 * MIB, 16)).is_some());
    }

    #[test]
    fn config_is_checked() {
        let mut c = config(MIB);
        c.dedicated_threshold = 2 * MIB;
        let e = PoolLayout::<()>::new(c).unwrap_err();
        assert!(e.to_string().contains("1..=1048576"), "{e}");
        c.dedicated_threshold = 0;
        assert!(PoolLayout::<()>::new(c).is_err());
        let mut c = config(128);
        c.dedicated_threshold = 64;
        let e = PoolLayout::<()>::new(c).unwrap_err();
        assert!(e.to_string().contains("256-byte unit"), "{e}");
        let mut c = config(MIB);
        c.min_unit = 100;
        assert!(PoolLayout::<()>::new(c).is_err());
    }

    #[test]
    fn routing_and_new_block_sizes() {
        let l = PoolLayout::<()>::new(config(64 * MIB)).unwrap();
        assert_eq!(l.route(&RangeRequest::new(32 * MIB, 256)), Route::Block);
        assert_eq!(l.route(&RangeRequest::new(32 * MIB + 1, 256)), Route::Own);
        // A huge element alignment's slack makes a request too large for any block.
        let mut c = config(64 * MIB);
        c.dedicated_threshold = 64 * MIB;
        let l = PoolLayout::<()>::new(c).unwrap();
        assert_eq!(l.route(&RangeRequest::new(64 * MIB, 256)), Route::Block);
        assert_eq!(l.route(&RangeRequest::new(63 * MIB, 4 * MIB)), Route::Own);
        assert_eq!(
            l.new_block_sizes(&RangeRequest::new(MIB, 256)),
            vec![64 * MIB, 32 * MIB, 16 * MIB, 8 * MIB]
        );
        assert_eq!(
            l.new_block_sizes(&RangeRequest::new(20 * MIB, 256)),
            vec![64 * MIB, 32 * MIB]
        );
    }

    #[test]
    fn release_policy_keeps_one_empty_block() {
        let mut l = PoolLayout::new(config(MIB)).unwrap();
        let req = RangeRequest::new(MIB / 2, 256);
        assert!(l.allocate(&req).is_none());
        let (a, ra) = l.add_block(MIB, "a", &req).unwrap();
        let (b, rb) = match l.allocate(&req) {
            Some((id, r, _)) => (id, r),
            None => l.add_block(MIB, "b", &req).unwrap(),
        };
        let (c, rc) = match l.allocate(&req) {
            Some((id, r, _)) => (id, r),
            None => l.add_block(MIB, "c", &req).unwrap(),
        };
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(l.stats().blocks, 2);
        // c's block empties first: kept (no other empty block).
        assert_eq!(l.free(c, rc, false).unwrap(), None);
        assert_eq!(l.empty_blocks(), 1);
        assert_eq!(l.free(a, ra, false).unwrap(), None);
        // a's block empties while c's is kept: released.
        assert_eq!(l.free(b, rb, false).unwrap(), Some("a"));
        assert_eq!(l.stats().blocks, 1);
        // The kept block is reused.
        let (d, rd, &payload) = l.allocate(&req).unwrap();
        assert_eq!(payload, "c");
        assert_eq!(d, c);
        assert_eq!(l.empty_blocks(), 0);
        assert_eq!(l.free(d, rd, false).unwrap(), None);
        assert_eq!(l.trim(), vec!["c"]);
        assert_eq!(l.stats(), PoolStats::default());
        // After close, a block is released as soon as it empties; release_if_empty forces it.
        let (e, re) = l.add_block(MIB, "e", &req).unwrap();
        assert_eq!(l.free(e, re, true).unwrap(), Some("e"));
        let (f, rf) = l.add_block(MIB, "f", &req).unwrap();
        assert!(l.close().is_empty());
        assert_eq!(l.free(f, rf, false).unwrap(), Some("f"));
    }

    #[test]
    fn own_allocations_are_counted_and_released() {
        let mut l = PoolLayout::new(config(MIB)).unwrap();
        let o = l.add_own(3 * MIB, 3 * MIB - 5, 9u8);
        assert_eq!(l.payload(o), Some(&9));
        let s = l.stats();
        assert_eq!((s.own_allocations, s.buffers), (1, 1));
        assert_eq!(s.reserved_bytes, 3 * MIB);
        assert_eq!(s.requested_bytes, 3 * MIB - 5);
        assert_eq!(l.free_own(o), Some(9));
        assert_eq!(l.free_own(o), None);
        assert_eq!(l.payload(o), None);
        assert_eq!(l.stats(), PoolStats::default());
    }

    #[test]
    fn report_prints_a_table() {
        let mut l = PoolLayout::new(config(MIB)).unwrap();
        let req = RangeRequest::new(300 * KIB, 256);
        let (_b, _r) = l.add_block(MIB, (), &req).unwrap();
        let _o = l.add_own(2 * MIB, 2 * MIB, ());
        let text = l.report().to_string();
        assert!(
            text.contains("1 blocks + 1 own allocations, 2 buffers"),
            "{text}"
        );
        assert!(text.contains("| block |    1.0 MiB |"), "{text}");
        assert!(text.contains("| own   |    2.0 MiB |"), "{text}");
        assert_eq!(format_bytes(1000), "1000 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc { size: u64, align_log: u32 },
        Free(usize),
    }

    fn ops(max_size: u64) -> impl Strategy<Value = Vec<Op>> {
        let op = prop_oneof![
            3 => (1u64..=max_size, 0u32..14).prop_map(|(size, align_log)| Op::Alloc { size, align_log }),
            2 => any::<usize>().prop_map(Op::Free),
        ];
        proptest::collection::vec(op, 1..300)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Random allocate/free sequences in one block: ranges and reservations never overlap,
        /// every offset has its alignment, everything lies in the block, the accounting adds
        /// up, whatever fits an empty block is granted there, and freeing everything returns
        /// the block to one free range as large as itself.
        #[test]
        fn block_ranges_never_overlap_and_return_to_empty(
            size_log in 12u32..24,
            unit_log in 4u32..10,
            ops in ops(1 << 20),
        ) {
            let size = 1u64 << size_log;
            let mut b = BlockRanges::new(3, size, 1 << unit_log).unwrap();
            let mut live: Vec<SubRange> = Vec::new();
            for op in ops {
                match op {
                    Op::Alloc { size: s, align_log } => {
                        let req = RangeRequest::new(s, 1 << align_log);
                        let fits_empty = b.fits_when_empty(&req);
                        let was_empty = b.is_empty();
                        match b.allocate(&req) {
                            Some(r) => {
                                prop_assert!(fits_empty);
                                prop_assert_eq!(r.offset() % req.alignment, 0);
                                prop_assert_eq!(r.size(), s);
                                prop_assert!(r.reserved().start <= r.offset());
                                prop_assert!(r.range().end <= r.reserved().end);
                                prop_assert!(r.reserved().end <= size);
                                for other in &live {
                                    prop_assert!(!layout::overlaps(&r.reserved(), &other.reserved()),
                                        "{:?} overlaps {:?}", r, other);
                                }
                                live.push(r);
                            }
                            None => prop_assert!(!(was_empty && fits_empty), "an empty block refused {:?}", req),
                        }
                    }
                    Op::Free(i) if !live.is_empty() => {
                        let r = live.swap_remove(i % live.len());
                        prop_assert!(b.free(r).is_ok());
                    }
                    Op::Free(_) => {}
                }
                let used: u64 = live.iter().map(|r| r.reserved().end - r.reserved().start).sum();
                prop_assert_eq!(b.used_bytes(), used);
                prop_assert_eq!(b.live(), live.len());
                prop_assert_eq!(b.used_bytes() + b.free_bytes(), size);
                prop_assert!(b.largest_free_range() <= b.free_bytes());
            }
            for r in live.drain(..) {
                prop_assert!(b.free(r).is_ok());
            }
            prop_assert!(b.is_empty());
            prop_assert_eq!(b.free_bytes(), size);
            prop_assert_eq!(b.largest_free_range(), size);
            let whole = b.allocate(&RangeRequest::new(size, 1 << unit_log));
            prop_assert!(whole.is_some());
        }

        /// Random workloads over a whole pool, with new blocks made as the layout asks: ranges
        /// of one block never overlap, own allocations take what the policy routes there, the
        /// totals always add up, no more empty blocks are kept than configured, and freeing
        /// everything leaves at most the kept empty blocks, which trim releases.
        #[test]
        fn pool_layout_keeps_its_books(
            keep in 0usize..3,
            threshold_div in 1u64..8,
            ops in ops(3 << 20),
        ) {
            let block = 4 * MIB;
            let cfg = PoolConfig {
                block_size: block,
                min_unit: 256,
                dedicated_threshold: block / threshold_div,
                keep_empty_blocks: keep,
            };
            let mut l: PoolLayout<u64> = PoolLayout::new(cfg).unwrap();
            let mut live: Vec<(BlockId, Option<SubRange>, u64)> = Vec::new();
            let mut payloads = 0u64;
            for op in ops {
                match op {
                    Op::Alloc { size, align_log } => {
                        let req = RangeRequest { size, alignment: 1 << align_log, requested: size - size / 3 };
                        match l.route(&req) {
                            Route::Own => {
                                prop_assert!(size > cfg.dedicated_threshold || req.alignment > 256);
                                payloads += 1;
                                let id = l.add_own(size, req.requested, payloads);
                                live.push((id, None, size));
                            }
                            Route::Block => {
                                prop_assert!(size <= cfg.dedicated_threshold);
                                let (id, r) = match l.allocate(&req) {
                                    Some((id, r, &p)) => {
                                        prop_assert_eq!(l.payload(id), Some(&p));
                                        (id, r)
                                    }
                                    None => {
                                        let sizes = l.new_block_sizes(&req);
                                        prop_assert_eq!(sizes.first(), Some(&block));
                                        payloads += 1;
                                        let added = l.add_block(block, payloads, &req);
                                        prop_assert!(added.is_ok());
                                        added.unwrap()
                                    }
                                };
                                prop_assert_eq!(r.offset() % req.alignment, 0);
                                prop_assert!(l.payload(id).is_some());
                                for (other, o, _) in &live {
                                    if let (true, Some(o)) = (*other == id, o) {
                                        prop_assert!(!layout::overlaps(&r.reserved(), &o.reserved()));
                                    }
                                }
                                live.push((id, Some(r), size));
                            }
                        }
                    }
                    Op::Free(i) if !live.is_empty() => {
                        let (id, r, _) = live.swap_remove(i % live.len());
                        match r {
                            Some(r) => { prop_assert!(l.free(id, r, false).is_ok()); }
                            None => { prop_assert!(l.free_own(id).is_some()); }
                        }
                    }
                    Op::Free(_) => {}
                }
                let s = l.stats();
                prop_assert_eq!(s.buffers, live.len());
                prop_assert_eq!(s.used_bytes + s.free_bytes, s.reserved_bytes);
                prop_assert!(s.requested_bytes <= s.used_bytes);
                prop_assert!(l.empty_blocks() <= keep);
                prop_assert!((0.0..=1.0).contains(&s.fragmentation));
                let report = l.report();
                prop_assert_eq!(report.blocks.len(), s.blocks + s.own_allocations);
                prop_assert_eq!(report.blocks.iter().map(|b| b.size).sum::<u64>(), s.reserved_bytes);
            }
            for (id, r, _) in live.drain(..) {
                match r {
                    Some(r) => { prop_assert!(l.free(id, r, false).is_ok()); }
                    None => { prop_assert!(l.free_own(id).is_some()); }
                }
            }
            let s = l.stats();
            prop_assert_eq!((s.buffers, s.used_bytes, s.requested_bytes, s.own_allocations), (0, 0, 0, 0));
            prop_assert!(s.blocks <= keep);
            prop_assert_eq!(s.blocks, l.empty_blocks());
            prop_assert_eq!(l.trim().len(), s.blocks);
            prop_assert_eq!(l.stats(), PoolStats::default());
        }
    }
}
