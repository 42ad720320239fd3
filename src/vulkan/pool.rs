//! Sub-allocation of exportable device memory: blocks of `VkDeviceMemory` allocated
//! exportable, and a `VkBuffer` created and bound at a sub-range of a block for each request
//! ([`VulkanPool`], usable on any Vulkan device). The bookkeeping is
//! [`crate::rules::suballoc::PoolLayout`]; this module adds the device memory.
//!
//! The core is generic over what each block carries besides its memory: nothing for
//! [`VulkanPool`], the CUDA import and its one mapping for
//! [`SharedPool`](crate::SharedPool) (which lives in `interop`, where CUDA and Vulkan meet;
//! this module knows no CUDA).
//!
//! Why one `VkBuffer` per sub-buffer, not one per block with views: every user of a
//! [`AsVkBuffer`] (descriptors, the copy helpers, engines) expects offset 0 of the handle to be
//! the buffer's first byte and `vk_size` its size. A buffer bound at the range's offset keeps
//! that contract; `vkCreateBuffer` + `vkBindBufferMemory` cost microseconds, not the
//! allocation, export and import a pool saves.

use std::sync::{Arc, Mutex, MutexGuard};

use ash::vk;

use crate::error::MemoryError;
use crate::error::{ErrorKind, Result};
use crate::rules::layout::{self, ImportLayout, Placement, PlacementRequest};
use crate::rules::suballoc::{
    BlockId, PoolConfig, PoolLayout, PoolReport, PoolStats, RangeRequest, Route, SubRange,
};
use crate::vulkan::memory::memory_type_for;
use crate::vulkan::memory::shared_buffer_usage;
use crate::vulkan::{
    AllocateInfo, BoundBuffer, Buffer, BufferDesc, DeviceMemory, ExternalUse, VulkanContext,
};

/// How a pool divides exportable memory ([`VulkanPool::new`], `Bridge::create_pool`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolDesc {
    /// The usage every buffer of the pool is created with (transfer source and destination
    /// are added). A buffer may ask for any subset of it.
    pub usage: vk::BufferUsageFlags,
    /// Size of each block in bytes ([`PoolDesc::DEFAULT_BLOCK_SIZE`]). When a block of this
    /// size cannot be allocated (out of memory), halves of it down to an eighth are tried.
    pub block_size: u64,
    /// Buffers larger than this many bytes get their own allocation (default: half a block,
    /// as VMA does). At most `block_size`. Buffers Vulkan prefers or requires dedicated get
    /// their own (dedicated) allocation whatever their size.
    pub dedicated_threshold: u64,
    /// Empty blocks kept for reuse (default 1). A block that becomes empty beyond that is
    /// released at once; `trim` releases every empty block; dropping the pool releases every
    /// empty block, and each other block when its last buffer is dropped.
    pub keep_empty_blocks: usize,
}

impl PoolDesc {
    /// The default block size: 64 MiB (a quarter of VMA's and gpu-allocator's 256 MiB device
    /// blocks: shared memory is usually a smaller part of a renderer's memory).
    pub const DEFAULT_BLOCK_SIZE: u64 = 64 << 20;

    /// Blocks of [`Self::DEFAULT_BLOCK_SIZE`] for buffers of `usage`, half a block as the
    /// dedicated threshold, one empty block kept.
    pub fn new(usage: vk::BufferUsageFlags) -> Self {
        Self {
            usage,
            block_size: Self::DEFAULT_BLOCK_SIZE,
            dedicated_threshold: Self::DEFAULT_BLOCK_SIZE / 2,
            keep_empty_blocks: 1,
        }
    }

    /// The same with blocks of `block_size` bytes and half of that as the dedicated threshold.
    pub fn with_block_size(self, block_size: u64) -> Self {
        Self {
            block_size,
            dedicated_threshold: block_size / 2,
            ..self
        }
    }
}

impl Default for PoolDesc {
    /// [`PoolDesc::new`] for storage buffers.
    fn default() -> Self {
        Self::new(vk::BufferUsageFlags::STORAGE_BUFFER)
    }
}

/// What a block carries besides its memory, made once per block (and per own allocation).
pub(crate) type Attach<X> = Box<dyn Fn(&Arc<DeviceMemory>) -> Result<X> + Send + Sync>;

/// One block (or own allocation) of a pool: its memory and what the pool attached to it.
/// Every lease of a range in it holds it, so it outlives every buffer in it.
pub(crate) struct Block<X> {
    // Dropped first: an attachment (the CUDA import) may use the memory.
    pub(crate) extra: X,
    pub(crate) memory: Arc<DeviceMemory>,
}

/// The pool machinery shared by [`VulkanPool`] and [`SharedPool`](crate::SharedPool).
pub(crate) struct PoolCore<X: Send + Sync + 'static> {
    ctx: Arc<VulkanContext>,
    desc: PoolDesc,
    /// `desc.usage` with transfer source and destination: every buffer is created with it.
    usage: vk::BufferUsageFlags,
    memory_type_bits: u32,
    attach: Attach<X>,
    layout: Mutex<PoolLayout<Arc<Block<X>>>>,
}

fn allocate_info(size: u64, memory_type_bits: u32) -> AllocateInfo {
    AllocateInfo {
        size,
        memory_type_bits,
        properties: vk::MemoryPropertyFlags::DEVICE_LOCAL,
        exportable: true,
    }
}

impl<X: Send + Sync + 'static> PoolCore<X> {
    /// Checks `desc` against the device (exportable buffers of its usage, not dedicated-only;
    /// a block no larger than the memory heap) and makes an empty pool. No memory is
    /// allocated until the first buffer.
    pub(crate) fn new(
        ctx: &Arc<VulkanContext>,
        desc: PoolDesc,
        attach: Attach<X>,
    ) -> Result<Arc<Self>> {
        let usage = shared_buffer_usage(ctx, desc.usage);
        // A probe buffer tells the alignment and memory types of every buffer of this usage
        // (identical for all buffers of one usage, flags and handle types, by the spec).
        let probe = Buffer::new(
            ctx,
            BufferDesc {
                size: 4096,
                usage,
                external: ExternalUse::Export,
            },
        )?;
        let req = probe.requirements();
        if req.requires_dedicated {
            return Err(MemoryError::DedicatedOnlyUsage { usage }.into());
        }
        layout::check_power_of_two(req.alignment)?;
        let unit = req.alignment.max(layout::CUDA_MAPPED_OFFSET_ALIGNMENT);
        let pool_layout = PoolLayout::new(PoolConfig {
            block_size: desc.block_size,
            min_unit: unit,
            dedicated_threshold: desc.dedicated_threshold,
            keep_empty_blocks: desc.keep_empty_blocks,
        })?;
        // A block larger than the heap is refused now, not at the first buffer.
        memory_type_for(ctx, &allocate_info(desc.block_size, req.memory_type_bits))?;
        Ok(Arc::new(Self {
            ctx: ctx.clone(),
            desc,
            usage,
            memory_type_bits: req.memory_type_bits,
            attach,
            layout: Mutex::new(pool_layout),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, PoolLayout<Arc<Block<X>>>> {
        // A poisoned lock means a thread panicked between two consistent states of the
        // layout (every method leaves it consistent before it can panic).
        self.layout.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The public entry points' checks of a request of `bytes` bytes for a buffer of `usage`:
    /// not empty, within the pool's usage, and — for a request that will get its own
    /// allocation — no larger than the memory heap. Nothing is created before they pass.
    pub(crate) fn check_request(&self, bytes: u64, usage: vk::BufferUsageFlags) -> Result<()> {
        if bytes == 0 {
            return Err(layout::LayoutError::ZeroSize { offset: 0 }.into());
        }
        let requested = shared_buffer_usage(&self.ctx, usage);
        if !self.usage.contains(requested) {
            return Err(MemoryError::UsageNotInPool {
                requested,
                pool: self.usage,
            }
            .into());
        }
        if bytes > self.desc.dedicated_threshold {
            memory_type_for(&self.ctx, &allocate_info(bytes, self.memory_type_bits))?;
        }
        Ok(())
    }

    /// A buffer of `bytes` bytes (checked by [`Self::check_request`]) bound at a range whose
    /// offset is a multiple of the Vulkan alignment and of `min_alignment` (a power of two),
    /// and the lease that returns the range when dropped (after the buffer).
    pub(crate) fn allocate(
        self: &Arc<Self>,
        bytes: u64,
        min_alignment: u64,
    ) -> Result<(BoundBuffer, PoolLease<X>)> {
        let buffer = Buffer::new_export_unchecked(&self.ctx, bytes, self.usage, false)?;
        let r = buffer.requirements();
        layout::check_power_of_two(r.alignment)?;
        layout::check_power_of_two(min_alignment)?;
        let req = RangeRequest {
            size: r.size,
            alignment: r.alignment.max(min_alignment),
            requested: bytes,
        };
        let dedicated = r.requires_dedicated || r.prefers_dedicated;
        let in_block = if dedicated {
            None
        } else {
            self.allocate_range(&req)?
        };
        let mut lease = match in_block {
            Some(lease) => lease,
            None => self.allocate_own(&buffer, r.size, r.memory_type_bits, bytes, dedicated)?,
        };
        let memory = lease.block.memory.clone();
        // The range the books chose, through the rules once; the bind (and, in a SharedPool,
        // the CUDA pointer arithmetic) consume the proof.
        let placement = layout::place(
            ImportLayout {
                allocation_size: memory.size(),
                dedicated: memory.is_dedicated(),
            },
            PlacementRequest {
                offset: lease.offset,
                size: bytes,
                vulkan_alignment: r.alignment,
                vulkan_size: r.size,
                element_alignment: min_alignment,
            },
        )?;
        let bound = buffer.bind_placed(memory, &placement)?;
        lease.placement = Some(placement);
        lease.release_if_empty = false;
        Ok((bound, lease))
    }

    /// A block's memory of `size` bytes (dedicated to `dedicated` if given) and its attachment.
    fn new_block(
        &self,
        size: u64,
        memory_type_bits: u32,
        dedicated: Option<&Buffer>,
    ) -> Result<Arc<Block<X>>> {
        let memory = Arc::new(DeviceMemory::allocate(
            &self.ctx,
            allocate_info(size, memory_type_bits),
            dedicated,
        )?);
        let extra = (self.attach)(&memory)?;
        Ok(Arc::new(Block { extra, memory }))
    }

    fn allocate_own(
        self: &Arc<Self>,
        buffer: &Buffer,
        size: u64,
        memory_type_bits: u32,
        requested: u64,
        dedicated: bool,
    ) -> Result<PoolLease<X>> {
        let block = self.new_block(size, memory_type_bits, dedicated.then_some(buffer))?;
        let id = self.lock().add_own(size, requested, block.clone());
        log::debug!("pool: own allocation of {size} bytes (dedicated: {dedicated})");
        Ok(PoolLease {
            core: self.clone(),
            block,
            id,
            range: None,
            offset: 0,
            release_if_empty: false,
            placement: None,
        })
    }

    /// A range of a block for `req`, making a block if none has room; `None` when the
    /// layout routes `req` to its own allocation.
    fn allocate_range(self: &Arc<Self>, req: &RangeRequest) -> Result<Option<PoolLease<X>>> {
        let sizes = {
            let mut layout = self.lock();
            if layout.route(req) == Route::Own {
                return Ok(None);
            }
            if let Some((id, range, block)) = layout.allocate(req) {
                let block = block.clone();
                drop(layout);
                return Ok(Some(self.lease(block, id, range, false)));
            }
            layout.new_block_sizes(req)
        };
        // No block has room: make one, outside the lock (other threads keep allocating and
        // freeing meanwhile). When memory is short, smaller blocks are tried.
        let mut out_of_memory = None;
        for size in sizes {
            let block = match self.new_block(size, self.memory_type_bits, None) {
                Ok(block) => block,
                Err(e) if e.kind() == ErrorKind::OutOfMemory => {
                    log::debug!("pool: a block of {size} bytes could not be allocated: {e}");
                    out_of_memory = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let added = self.lock().add_block(size, block.clone(), req);
            return match added {
                Ok((id, range)) => {
                    log::debug!("pool: new block of {size} bytes");
                    Ok(Some(self.lease(block, id, range, true)))
                }
                Err(_) => Err(MemoryError::PoolRequestTooLarge {
                    size: req.size,
                    alignment: req.alignment,
                    block_size: size,
                }
                .into()),
            };
        }
        Err(out_of_memory.unwrap_or_else(|| {
            MemoryError::PoolRequestTooLarge {
                size: req.size,
                alignment: req.alignment,
                block_size: 0,
            }
            .into()
        }))
    }

    fn lease(
        self: &Arc<Self>,
        block: Arc<Block<X>>,
        id: BlockId,
        range: SubRange,
        fresh: bool,
    ) -> PoolLease<X> {
        PoolLease {
            core: self.clone(),
            block,
            id,
            offset: range.offset(),
            range: Some(range),
            release_if_empty: fresh,
            placement: None,
        }
    }

    pub(crate) fn desc(&self) -> PoolDesc {
        self.desc
    }

    pub(crate) fn stats(&self) -> PoolStats {
        self.lock().stats()
    }

    pub(crate) fn report(&self) -> PoolReport {
        self.lock().report()
    }

    /// Releases every empty block (their memory is freed outside the lock).
    pub(crate) fn trim(&self) {
        let released = self.lock().trim();
        drop(released);
    }

    /// The pool's owner is gone: release empty blocks now, the others as they empty.
    pub(crate) fn close(&self) {
        let released = self.lock().close();
        drop(released);
    }
}

/// A range of a pool block (or a whole own allocation), held by the buffer bound to it and
/// given back to the pool when dropped — after the buffer, which is declared before it.
/// It holds the block, so the memory outlives the buffer by construction.
pub(crate) struct PoolLease<X: Send + Sync + 'static> {
    core: Arc<PoolCore<X>>,
    block: Arc<Block<X>>,
    id: BlockId,
    range: Option<SubRange>,
    offset: u64,
    /// Set while the buffer is being made in a block made for it: if that fails, the block
    /// is released rather than kept empty, so a failed call leaves no new block behind.
    release_if_empty: bool,
    /// The checked placement of the buffer in the block's memory, once it is bound.
    placement: Option<Placement>,
}

impl<X: Send + Sync + 'static> PoolLease<X> {
    /// Byte offset in the block's memory.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }
    /// The placement the rules checked (range and alignment in the block's memory).
    pub(crate) fn placement(&self) -> Option<&Placement> {
        self.placement.as_ref()
    }
    /// The block.
    pub(crate) fn block(&self) -> &Arc<Block<X>> {
        &self.block
    }
    /// Whether it is a whole own allocation rather than a range of a shared block.
    pub(crate) fn is_own(&self) -> bool {
        self.range.is_none()
    }
}

impl<X: Send + Sync + 'static> Drop for PoolLease<X> {
    fn drop(&mut self) {
        let released = {
            let mut layout = self.core.lock();
            match self.range.take() {
                Some(range) => match layout.free(self.id, range, self.release_if_empty) {
                    Ok(released) => released,
                    Err(range) => {
                        log::error!("pool: {range:?} does not belong to its block; not freed");
                        None
                    }
                },
                None => layout.free_own(self.id),
            }
        };
        // Outside the lock: the last reference frees the block's memory (and its CUDA import).
        drop(released);
    }
}

/// A pool of exportable device memory on a Vulkan device, with no CUDA: each buffer is a
/// `VkBuffer` bound at a range of a block ([`PooledBuffer`]). The blocks are exportable like
/// a [`SharedPool`](crate::SharedPool)'s (whose CUDA side this pool lacks), so the same
/// sub-allocation runs on any Vulkan device (lavapipe in CI); dropping the pool while
/// buffers live is fine (see [`PoolDesc::keep_empty_blocks`]). Thread-safe.
pub struct VulkanPool {
    core: Arc<PoolCore<()>>,
}

impl std::fmt::Debug for VulkanPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanPool")
            .field("desc", &self.core.desc)
            .field("stats", &self.core.stats())
            .finish()
    }
}

impl VulkanPool {
    /// An empty pool on `ctx` as `desc` says, after checking that buffers of `desc.usage`
    /// can be exported and sub-allocated and that a block fits the memory heap.
    pub fn new(ctx: &Arc<VulkanContext>, desc: PoolDesc) -> Result<Self> {
        Ok(Self {
            core: PoolCore::new(ctx, desc, Box::new(|_| Ok(())))?,
        })
    }

    /// A buffer of `size` bytes whose usage is `usage` (a subset of the pool's; it is created
    /// with the pool's), in a range of a block, or in its own allocation when larger than
    /// the dedicated threshold or wanted dedicated by Vulkan.
    pub fn create_buffer(&self, size: u64, usage: vk::BufferUsageFlags) -> Result<PooledBuffer> {
        self.core.check_request(size, usage)?;
        let (bound, lease) = self.core.allocate(size, 1)?;
        Ok(PooledBuffer { bound, lease })
    }

    /// What the pool was created with.
    pub fn desc(&self) -> PoolDesc {
        self.core.desc()
    }
    /// Totals over blocks and own allocations.
    pub fn stats(&self) -> PoolStats {
        self.core.stats()
    }
    /// Every block and the totals, printable.
    pub fn report(&self) -> PoolReport {
        self.core.report()
    }
    /// Releases every empty block now.
    pub fn trim(&self) {
        self.core.trim()
    }
}

impl Drop for VulkanPool {
    fn drop(&mut self) {
        self.core.close();
    }
}

/// A buffer of a [`VulkanPool`]: a `VkBuffer` bound at a range of a block, whose offset 0 is
/// its first byte. Dropping it destroys the buffer, then returns the range.
pub struct PooledBuffer {
    // Declared first: the VkBuffer is destroyed before its range can be reused.
    bound: BoundBuffer,
    lease: PoolLease<()>,
}

impl std::fmt::Debug for PooledBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBuffer")
            .field("size", &self.size())
            .field("offset", &self.offset())
            .field("own_allocation", &self.is_own_allocation())
            .finish()
    }
}

impl PooledBuffer {
    /// The buffer.
    pub fn buffer(&self) -> &Buffer {
        self.bound.buffer()
    }
    /// The block's memory it is bound to.
    pub fn memory(&self) -> &Arc<DeviceMemory> {
        self.bound.memory()
    }
    /// Byte offset in the block's memory.
    pub fn offset(&self) -> u64 {
        self.lease.offset()
    }
    /// Size in bytes (as asked for).
    pub fn size(&self) -> u64 {
        self.bound.buffer().size()
    }
    /// Whether it has its own allocation rather than a range of a shared block.
    pub fn is_own_allocation(&self) -> bool {
        self.lease.is_own()
    }
}

super::memory::delegate_as_vk_buffer!([] PooledBuffer => bound);
