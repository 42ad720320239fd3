//! [`SharedPool`]: an allocator for memory shared with CUDA.
//!
//! Allocating, exporting and importing one `VkDeviceMemory` per buffer costs about 0.3 ms
//! (BENCHMARKS.md), 10–13× a `cuMemAlloc`, and no general Vulkan allocator can allocate
//! exportable memory. A pool allocates exportable blocks, imports each into CUDA once and maps
//! it once, and hands out [`SharedBuffer`]s as sub-ranges: a `VkBuffer` bound at the range's
//! offset, and the CUDA pointer `block mapping + offset` (a mapped buffer is one linear range
//! of device addresses, so a pointer inside it is as valid as its start).
//!
//! Every rule of a mapped buffer still holds, by construction: the blocks are non-dedicated
//! allocations imported without `CUDA_EXTERNAL_MEMORY_DEDICATED` (a request Vulkan wants
//! dedicated gets its own dedicated allocation, mapped at offset 0); offsets are multiples of
//! the Vulkan buffer's alignment, of CUDA's 16-byte mapped-offset rule and of the element's
//! alignment; ranges of live buffers never overlap ([`crate::rules::suballoc`], property-tested).

use std::sync::Arc;

use cudarc::driver::CudaStream;

use crate::cuda::MapOptions;
use crate::error::Result;
use crate::interop::shared_buffer::{CudaBlock, CudaSide};
use crate::interop::{Bridge, BufferUsage, SharedAllocation, SharedBuffer};
use crate::rules::layout::{self, LayoutError, CUDA_MAPPED_OFFSET_ALIGNMENT};
use crate::rules::suballoc::{PoolReport, PoolStats};
use crate::vulkan::{PoolCore, PoolDesc};

/// An allocator for memory shared with CUDA: exportable blocks imported into CUDA once and
/// mapped once, handing out [`SharedBuffer`]s as sub-ranges — a `VkBuffer` bound at the
/// range's offset (its offset 0 is the buffer's first byte, as for any `SharedBuffer`) and
/// the CUDA pointer `block mapping + offset`. One allocation, export and import per buffer
/// costs about 0.3 ms (BENCHMARKS.md); a pool buffer costs microseconds.
///
/// Every rule of a mapped buffer holds by construction: blocks are non-dedicated allocations
/// imported without `CUDA_EXTERNAL_MEMORY_DEDICATED`; offsets are multiples of the Vulkan
/// buffer's alignment, of CUDA's 16 bytes and of `align_of::<T>()`; live ranges never
/// overlap (the pool's range books, property-tested).
///
/// - Blocks are [`PoolDesc::block_size`] (64 MiB by default); buffers above
///   [`PoolDesc::dedicated_threshold`] (half a block) and buffers Vulkan prefers or requires
///   dedicated get their own allocation, imported and mapped alone.
/// - A buffer holds its block: dropping buffers and the pool in any order is safe. Dropping
///   a buffer (after waiting for its own CUDA work, as every [`SharedBuffer`] does) destroys
///   its `VkBuffer` and returns its range — or, while another holder still has the Vulkan
///   buffer (a `wgpu::Buffer` made of it, a frame pacer), when that last holder lets go. Empty blocks are released as
///   [`PoolDesc::keep_empty_blocks`] says; [`Self::trim`] releases them all.
/// - Thread-safe: `&SharedPool` can allocate from any thread. Blocks are made outside the
///   pool's lock, so frees on other threads do not wait for a block allocation.
/// - [`Self::stats`] and [`Self::report`] tell what is reserved, used and free.
///
/// ```no_run
/// use cuvk::{Bridge, BridgeConfig, BufferUsage, PoolDesc, SharedBuffer};
/// # fn main() -> cuvk::Result<()> {
/// let bridge = Bridge::new(BridgeConfig::default())?;
/// let pool = bridge.create_pool(PoolDesc::new(BufferUsage::STORAGE_BUFFER))?;
/// let a: SharedBuffer<f32> = pool.create_buffer(1 << 18, BufferUsage::STORAGE_BUFFER)?;
/// let b: SharedBuffer<u32> = pool.create_buffer(1000, BufferUsage::STORAGE_BUFFER)?;
/// println!("{}", pool.report()); // one 64 MiB block, two buffers
/// # drop((a, b)); Ok(()) }
/// ```
pub struct SharedPool {
    core: Arc<PoolCore<CudaBlock>>,
    stream: Arc<CudaStream>,
}

impl std::fmt::Debug for SharedPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPool")
            .field("desc", &self.core.desc())
            .field("stats", &self.core.stats())
            .finish()
    }
}

impl Bridge {
    /// A [`SharedPool`] of exportable memory on this bridge's devices, after checking that
    /// buffers of `desc.usage` can be exported and sub-allocated, that the block size and
    /// threshold are consistent, and that a block fits the memory heap. No memory is allocated
    /// until the first buffer.
    pub fn create_pool(&self, desc: PoolDesc) -> Result<SharedPool> {
        let cuda = self.cuda.clone();
        let stream = self.stream.clone();
        let usage = crate::vulkan::shared_buffer_usage(&self.vulkan, desc.usage);
        let attach_stream = stream.clone();
        let core = PoolCore::new(
            &self.vulkan,
            desc,
            Box::new(move |memory| {
                let allocation =
                    SharedAllocation::import(memory.clone(), &cuda, usage, attach_stream.clone())?;
                // The whole block, mapped once: offset 0, so valid for dedicated imports too.
                let mapping =
                    allocation
                        .cuda_memory()
                        .map(0, memory.size(), MapOptions::default())?;
                Ok(CudaBlock {
                    mapping,
                    allocation,
                })
            }),
        )?;
        Ok(SharedPool { core, stream })
    }
}

impl SharedPool {
    /// A buffer of `len` elements of `T` with `usage` (a subset of the pool's usage; the
    /// buffer is created with the pool's), seen by Vulkan and CUDA, in a range of a pool
    /// block — or in its own allocation when larger than the dedicated threshold or wanted
    /// dedicated by Vulkan.
    ///
    /// Refused before anything is created: zero elements, `len × size_of::<T>()` overflowing,
    /// a usage outside the pool's, an own allocation larger than the memory heap. When the
    /// device is out of memory the error says so (kind `OutOfMemory`) and the pool is as it
    /// was; smaller requests may still succeed.
    pub fn create_buffer<T: bytemuck::Pod>(
        &self,
        len: usize,
        usage: BufferUsage,
    ) -> Result<SharedBuffer<T>> {
        let bytes = layout::bytes_for::<T>(len)?;
        self.core.check_request(bytes, usage)?;
        let events = SharedBuffer::<T>::new_events(&self.stream)?;
        let element = std::mem::align_of::<T>() as u64;
        let (bound, lease) = self
            .core
            .allocate(bytes, element.max(CUDA_MAPPED_OFFSET_ALIGNMENT))?;
        // The pool placed the range through the rules (range in the block, Vulkan, CUDA and
        // element alignment): its placement is what makes the CUDA pointer arithmetic sound.
        if lease.placement().map(|p| p.range()) != Some(lease.offset()..lease.offset() + bytes) {
            return Err(LayoutError::OutOfBounds {
                offset: lease.offset(),
                size: bytes,
                end: lease.offset().saturating_add(bytes),
                container: "pool block",
                container_size: lease.block().extra.mapping.size(),
            }
            .into());
        }
        Ok(SharedBuffer::from_parts(
            bound,
            CudaSide::Pooled(lease),
            self.stream.clone(),
            len,
            events,
        ))
    }

    /// What the pool was created with.
    pub fn desc(&self) -> PoolDesc {
        self.core.desc()
    }
    /// Totals over blocks and own allocations: blocks, buffers, bytes reserved, used, free,
    /// the largest free range and fragmentation.
    pub fn stats(&self) -> PoolStats {
        self.core.stats()
    }
    /// Every block with its use, and the totals; `Display` prints a table.
    pub fn report(&self) -> PoolReport {
        self.core.report()
    }
    /// Releases every empty block now (its CUDA mapping, import and Vulkan memory).
    pub fn trim(&self) {
        self.core.trim()
    }
}

impl Drop for SharedPool {
    /// Releases the empty blocks; each other block is released when its last buffer drops.
    fn drop(&mut self) {
        self.core.close();
    }
}
