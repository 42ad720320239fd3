//! Pools: blocks of shared memory that buffers are sub-allocated from.

use std::sync::Arc;

use cuvk::ash::vk;
use cuvk::vulkan::VulkanPool;
use cuvk::{Error, MemoryError, PoolDesc, PoolStats, SharedPool};

use crate::bridge::{bridge_of, CuvkBridge};
use crate::buffer::{CBuffer, CBufferKind, CuvkBuffer};
use crate::error::{desc_in, desc_out, guard, out, CResult, CuvkResult};
use crate::handle::{insert, remove, with, HandleObject, Kind};

/// A pool of shared memory that buffers are sub-allocated from.
pub type CuvkPool = u64;

/// How a pool divides memory (`cuvk_pool_create`).
#[repr(C)]
pub struct CuvkPoolDesc {
    /// `sizeof(CuvkPoolDesc)`.
    pub struct_size: u32,
    /// `VkBufferUsageFlags` of every buffer of the pool (transfer source/destination added).
    pub vk_usage: u32,
    /// Bytes per block; 0: 64 MiB.
    pub block_size: u64,
    /// Buffers larger than this get their own allocation; 0: half a block. At most
    /// `block_size`.
    pub dedicated_threshold: u64,
    /// Empty blocks kept for reuse (others are released when they become empty).
    pub keep_empty_blocks: u32,
}

/// A pool's totals (`cuvk_pool_stats`).
#[repr(C)]
pub struct CuvkPoolStats {
    /// `sizeof(CuvkPoolStats)`, set by the caller.
    pub struct_size: u32,
    /// Blocks buffers are sub-allocated from.
    pub blocks: u64,
    /// Buffers in their own allocation.
    pub own_allocations: u64,
    /// Live buffers.
    pub buffers: u64,
    /// Bytes the live buffers asked for.
    pub requested_bytes: u64,
    /// Bytes their ranges and own allocations take.
    pub used_bytes: u64,
    /// Device memory held.
    pub reserved_bytes: u64,
    /// Free bytes in blocks.
    pub free_bytes: u64,
    /// The largest free range of any block (a lower bound within 12.5%).
    pub largest_free_range: u64,
    /// Share of free bytes outside each block's largest free range (0 to 1).
    pub fragmentation: f64,
}

/// A pool, shared with CUDA or Vulkan-only.
pub(crate) enum CPool {
    Shared(SharedPool),
    VulkanOnly(VulkanPool),
}

impl CPool {
    fn stats(&self) -> PoolStats {
        match self {
            CPool::Shared(p) => p.stats(),
            CPool::VulkanOnly(p) => p.stats(),
        }
    }
}

/// Creates a pool over the bridge's device: blocks of exportable memory (imported into CUDA
/// once each unless the bridge is Vulkan-only) that buffers are sub-allocated from. Buffers
/// from it are ordinary `CuvkBuffer`s; destroying the pool keeps live buffers valid (each
/// keeps its block).
///
/// # Safety
/// `desc` must point to a filled `CuvkPoolDesc`; `out_pool` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_pool_create(
    bridge: CuvkBridge,
    desc: *const CuvkPoolDesc,
    out_pool: *mut CuvkPool,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let out_pool = unsafe { out(out_pool, "out_pool") }?;
        // SAFETY: the caller passes a readable descriptor or null (checked).
        let d = unsafe { desc_in(desc, "desc") }?;
        let b = bridge_of(bridge)?;
        let block_size = match d.block_size {
            0 => PoolDesc::DEFAULT_BLOCK_SIZE,
            size => size,
        };
        let desc = PoolDesc {
            usage: vk::BufferUsageFlags::from_raw(d.vk_usage),
            block_size,
            dedicated_threshold: match d.dedicated_threshold {
                0 => block_size / 2,
                t => t,
            },
            keep_empty_blocks: d.keep_empty_blocks as usize,
        };
        let pool = match &b.cuda {
            Some(bridge) => CPool::Shared(bridge.create_pool(desc)?),
            None => CPool::VulkanOnly(VulkanPool::new(&b.vk, desc)?),
        };
        *out_pool = insert(Arc::new(pool));
        Ok(())
    })
}

fn pool_of(handle: CuvkPool) -> CResult<Arc<CPool>> {
    with::<Arc<CPool>, _>(handle, |p| Ok(p.clone()))
}

impl HandleObject for Arc<CPool> {
    const KIND: Kind = Kind::Pool;
}

/// Creates a buffer of `size` bytes (the pool's usage) in the pool: a `CuvkBuffer` for
/// `cuvk_buffer_info` and `cuvk_buffer_destroy`, which returns its range to the pool.
///
/// # Safety
/// `out_buffer` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_pool_buffer_create(
    pool: CuvkPool,
    size: u64,
    out_buffer: *mut CuvkBuffer,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let out_buffer = unsafe { out(out_buffer, "out_buffer") }?;
        // Outside the table lock: other threads use other handles meanwhile.
        let p = pool_of(pool)?;
        let buffer = match &*p {
            CPool::Shared(p) => {
                let len = usize::try_from(size)
                    .map_err(|_| Error::from(MemoryError::HostSizeOverflow { bytes: size }))?;
                CBufferKind::Shared(p.create_buffer::<u8>(len, p.desc().usage)?)
            }
            CPool::VulkanOnly(p) => CBufferKind::Pooled(p.create_buffer(size, p.desc().usage)?),
        };
        *out_buffer = insert(CBuffer { buffer });
        Ok(())
    })
}

/// Fills `stats` (whose `struct_size` the caller sets) with the pool's totals.
///
/// # Safety
/// `stats` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_pool_stats(pool: CuvkPool, stats: *mut CuvkPoolStats) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let out_stats = unsafe { desc_out(stats, "stats") }?;
        let s = pool_of(pool)?.stats();
        out_stats.blocks = s.blocks as u64;
        out_stats.own_allocations = s.own_allocations as u64;
        out_stats.buffers = s.buffers as u64;
        out_stats.requested_bytes = s.requested_bytes;
        out_stats.used_bytes = s.used_bytes;
        out_stats.reserved_bytes = s.reserved_bytes;
        out_stats.free_bytes = s.free_bytes;
        out_stats.largest_free_range = s.largest_free_range;
        out_stats.fragmentation = s.fragmentation;
        Ok(())
    })
}

/// Destroys a pool. Its buffers stay valid until destroyed (each keeps its block); empty
/// blocks are released now, the others when their last buffer is destroyed.
#[no_mangle]
pub extern "C" fn cuvk_pool_destroy(pool: CuvkPool) -> CuvkResult {
    guard(|| remove::<Arc<CPool>>(pool))
}

crate::error::c_structs!(CuvkPoolDesc, CuvkPoolStats);
