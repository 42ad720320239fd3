//! The demos' own, non-shared Vulkan memory through `gpu-allocator`, as an engine's would be.
//!
//! `gpu-allocator` cannot allocate exportable memory, so what CUDA shares stays cuvk's own
//! (`SharedPool`, `SharedBuffer`, `StagingBuffer`); everything else (draw buffers, canvases,
//! upload staging, readbacks) sits beside it in this allocator.

use std::sync::{Arc, Mutex, MutexGuard};

use cuvk::ash::vk;
use cuvk::vulkan::{AsVkBuffer, VulkanContext};
use cuvk::{Error, Result};
use gpu_allocator::vulkan::{
    Allocation, AllocationCreateDesc, AllocationScheme, Allocator, AllocatorCreateDesc,
};
use gpu_allocator::{AllocationError, AllocationSizes, AllocatorDebugSettings, MemoryLocation};

use cuvk::VkResultExt;

fn alloc_err(call: &'static str, e: AllocationError) -> Error {
    match e {
        AllocationError::OutOfMemory => Error::Vulkan {
            call,
            result: vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
        },
        _ => Error::Vulkan {
            call,
            result: vk::Result::ERROR_UNKNOWN,
        },
    }
}

/// A `gpu-allocator` allocator on a cuvk context. Its buffers hold an `Arc` of it, so it (and
/// the context, which it holds) outlives every allocation it made.
pub struct PrivateAllocator {
    // Dropped before `ctx`: the allocator frees its memory blocks on the context's device.
    allocator: Mutex<Allocator>,
    ctx: Arc<VulkanContext>,
}

impl PrivateAllocator {
    /// An allocator for `ctx`'s device (with buffer device addresses where the context has them).
    pub fn new(ctx: &Arc<VulkanContext>) -> Result<Arc<Self>> {
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: ctx.instance().clone(),
            device: ctx.device().clone(),
            physical_device: ctx.physical_device(),
            debug_settings: AllocatorDebugSettings::default(),
            buffer_device_address: ctx.info().capabilities.buffer_device_address,
            allocation_sizes: AllocationSizes::default(),
        })
        .map_err(|e| alloc_err("gpu_allocator::Allocator::new", e))?;
        Ok(Arc::new(Self {
            allocator: Mutex::new(allocator),
            ctx: ctx.clone(),
        }))
    }

    /// The context it allocates on.
    pub fn context(&self) -> &Arc<VulkanContext> {
        &self.ctx
    }

    fn lock(&self) -> MutexGuard<'_, Allocator> {
        // A poisoned lock only means another thread panicked mid-call; the allocator is fine.
        self.allocator.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A `vk::Buffer` in memory from a [`PrivateAllocator`] (not exportable: for what CUDA never sees).
/// Freed on drop.
pub struct PrivateBuffer {
    alloc: Arc<PrivateAllocator>,
    buffer: vk::Buffer,
    allocation: Option<Allocation>,
    size: u64,
}

impl PrivateBuffer {
    /// A buffer of `size` bytes with `usage` (plus transfer source and destination) in memory
    /// at `location`.
    pub fn new(
        alloc: &Arc<PrivateAllocator>,
        name: &str,
        size: u64,
        usage: vk::BufferUsageFlags,
        location: MemoryLocation,
    ) -> Result<Self> {
        let usage = usage | vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
        let device = alloc.ctx.device();
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid device; the create info lives across the call.
        let buffer = unsafe { device.create_buffer(&info, None) }.vk("vkCreateBuffer")?;
        // Built first so that its Drop destroys the buffer if a step below fails.
        let mut me = Self {
            alloc: alloc.clone(),
            buffer,
            allocation: None,
            size,
        };
        // SAFETY: the buffer was created on this device above.
        let requirements = unsafe { device.get_buffer_memory_requirements(buffer) };
        let allocation = alloc
            .lock()
            .allocate(&AllocationCreateDesc {
                name,
                requirements,
                location,
                linear: true,
                allocation_scheme: AllocationScheme::GpuAllocatorManaged,
            })
            .map_err(|e| alloc_err("gpu_allocator::Allocator::allocate", e))?;
        // SAFETY: buffer and memory are on this device; the allocation was made for the
        // buffer's requirements, so the offset is aligned and the range large enough.
        let bound =
            unsafe { device.bind_buffer_memory(buffer, allocation.memory(), allocation.offset()) };
        me.allocation = Some(allocation);
        bound.vk("vkBindBufferMemory")?;
        Ok(me)
    }

    /// Device-local memory, for the GPU alone.
    pub fn gpu_only(
        alloc: &Arc<PrivateAllocator>,
        name: &str,
        size: u64,
        usage: vk::BufferUsageFlags,
    ) -> Result<Self> {
        Self::new(alloc, name, size, usage, MemoryLocation::GpuOnly)
    }

    /// Host-visible memory the GPU writes and the host reads ([`Self::read`]).
    pub fn readback(alloc: &Arc<PrivateAllocator>, name: &str, size: u64) -> Result<Self> {
        Self::new(
            alloc,
            name,
            size,
            vk::BufferUsageFlags::empty(),
            MemoryLocation::GpuToCpu,
        )
    }

    /// Host-visible memory the host writes ([`Self::write`]) and the GPU reads.
    pub fn upload(alloc: &Arc<PrivateAllocator>, name: &str, size: u64) -> Result<Self> {
        Self::new(
            alloc,
            name,
            size,
            vk::BufferUsageFlags::empty(),
            MemoryLocation::CpuToGpu,
        )
    }

    fn mapped(&self) -> Result<&[u8]> {
        self.allocation
            .as_ref()
            .and_then(|a| a.mapped_slice())
            .map(|s| &s[..self.size as usize])
            .ok_or(cuvk::MemoryError::NotHostVisible.into())
    }

    /// Reads the whole buffer as elements of `T` (its size must be whole elements). Host-visible
    /// memory from `gpu-allocator` is always host-coherent, so no invalidate is needed.
    pub fn read<T: bytemuck::Pod>(&self) -> Result<Vec<T>> {
        let bytes = self.mapped()?;
        let elem = std::mem::size_of::<T>();
        if elem == 0 || bytes.len() % elem != 0 {
            return Err(cuvk::LayoutError::PartialElement {
                bytes: bytes.len() as u64,
                element_size: elem as u64,
            }
            .into());
        }
        let mut out = vec![T::zeroed(); bytes.len() / elem];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(bytes);
        Ok(out)
    }

    /// Writes `data` at the start of the buffer (coherent memory: no flush needed).
    pub fn write<T: bytemuck::Pod>(&mut self, data: &[T]) -> Result<()> {
        let src: &[u8] = bytemuck::cast_slice(data);
        let size = self.size as usize;
        let dst = self
            .allocation
            .as_mut()
            .and_then(|a| a.mapped_slice_mut())
            .ok_or(cuvk::MemoryError::NotHostVisible)?;
        if src.len() > size {
            return Err(cuvk::LayoutError::OutOfBounds {
                offset: 0,
                size: src.len() as u64,
                end: src.len() as u64,
                container: "buffer",
                container_size: size as u64,
            }
            .into());
        }
        dst[..src.len()].copy_from_slice(src);
        Ok(())
    }
}

impl Drop for PrivateBuffer {
    fn drop(&mut self) {
        // SAFETY: the buffer is owned by this value and was created on this device; whoever
        // recorded commands on it waited for them before dropping it (as for cuvk's buffers).
        unsafe { self.alloc.ctx.device().destroy_buffer(self.buffer, None) };
        if let Some(allocation) = self.allocation.take() {
            if let Err(e) = self.alloc.lock().free(allocation) {
                eprintln!("cuvk-dev: gpu-allocator could not free a buffer's memory: {e}");
            }
        }
    }
}

// SAFETY: `buffer` is owned by this value and destroyed only on its drop, so it is live while
// `&self` is borrowed; it was created on `alloc.ctx`'s device (the context `vk_context`
// reports) with exactly `size` bytes and bound, before `new` returned, to an allocation made
// for its memory requirements (so at least `size` bytes). The host only sees its memory
// through `read` (`&self`) and `write` (`&mut self`), so a GPU write recorded through the
// `&mut` helpers cannot change memory a live Rust reference points at.
unsafe impl AsVkBuffer for PrivateBuffer {
    fn vk_buffer(&self) -> vk::Buffer {
        self.buffer
    }
    fn vk_size(&self) -> u64 {
        self.size
    }
    fn vk_context(&self) -> &Arc<VulkanContext> {
        &self.alloc.ctx
    }
}
