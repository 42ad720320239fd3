//! One sparse-binding `vk::Buffer` whose memory is bound piece by piece (`vkQueueBindSparse`):
//! the Vulkan view of a growable buffer that needs a single descriptor.

use std::sync::Arc;

use ash::vk;

use crate::error::{Capability, DeviceObject, MemoryError};
use crate::error::{Error, Result, VkResultExt};
use crate::platform::MEMORY_HANDLE_TYPE;
use crate::rules::layout::{self, AlignmentRule};
use crate::vulkan::memory::external_buffer_features;
use crate::vulkan::{AsVkBuffer, DeviceMemory, VulkanContext};

/// A sparse-binding buffer for external memory, with the memory bound into it kept alive.
pub struct SparseBuffer {
    ctx: Arc<VulkanContext>,
    buffer: vk::Buffer,
    size: u64,
    alignment: u64,
    memory_type_bits: u32,
    // Freed after the buffer is destroyed (Drop::drop runs before fields drop).
    bound: Vec<Arc<DeviceMemory>>,
}

impl SparseBuffer {
    /// Creates a sparse-binding buffer of `size` bytes for memory of this platform's external
    /// handle type. Needs the `sparseBinding` feature on a queue that binds sparse memory.
    pub fn new(ctx: &Arc<VulkanContext>, size: u64, usage: vk::BufferUsageFlags) -> Result<Self> {
        if !ctx.info().capabilities.sparse_binding {
            return Err(Capability::SparseBinding.into());
        }
        if size == 0 {
            return Err(layout::LayoutError::ZeroSize { offset: 0 }.into());
        }
        let flags = vk::BufferCreateFlags::SPARSE_BINDING;
        let features = external_buffer_features(ctx, flags, usage, MEMORY_HANDLE_TYPE)?;
        if !features.contains(vk::ExternalMemoryFeatureFlags::IMPORTABLE) {
            return Err(Capability::SparseImport {
                usage,
                handle_type: MEMORY_HANDLE_TYPE,
            }
            .into());
        }
        let mut external =
            vk::ExternalMemoryBufferCreateInfo::default().handle_types(MEMORY_HANDLE_TYPE);
        let create = vk::BufferCreateInfo::default()
            .flags(flags)
            .size(size)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .push_next(&mut external);
        // SAFETY: valid device; the create info lives across the call.
        let buffer =
            unsafe { ctx.device().create_buffer(&create, None) }.vk("vkCreateBuffer(sparse)")?;
        // SAFETY: the buffer was just created on this device.
        let req = unsafe { ctx.device().get_buffer_memory_requirements(buffer) };
        Ok(Self {
            ctx: ctx.clone(),
            buffer,
            size,
            alignment: req.alignment,
            memory_type_bits: req.memory_type_bits,
            bound: Vec::new(),
        })
    }

    /// The sparse block size: bind offsets and sizes must be multiples of it.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }
    /// Memory types memory bound into it may have.
    pub fn memory_type_bits(&self) -> u32 {
        self.memory_type_bits
    }

    /// Binds all of `memory` at `offset` (checked: inside the buffer, aligned to the sparse
    /// block size, memory of an allowed type on this device) and waits for the bind.
    pub fn bind(&mut self, offset: u64, memory: Arc<DeviceMemory>) -> Result<()> {
        if !self.ctx.same_device(memory.context()) {
            return Err(Error::WrongDevice {
                object: crate::DeviceObject::Memory,
                owner: crate::DeviceOwner::VulkanDevice,
            });
        }
        let size = memory.size();
        layout::check_range(offset, size, "sparse buffer", self.size)?;
        layout::check_aligned(
            "offset",
            offset,
            self.alignment,
            AlignmentRule::VulkanBuffer,
        )?;
        layout::check_aligned("size", size, self.alignment, AlignmentRule::VulkanBuffer)?;
        if self.memory_type_bits & (1 << memory.memory_type_index()) == 0 {
            return Err(MemoryError::MemoryTypeNotAllowed {
                object: DeviceObject::Buffer,
                memory_type: memory.memory_type_index(),
                type_bits: self.memory_type_bits,
            }
            .into());
        }
        let binds = [vk::SparseMemoryBind::default()
            .resource_offset(offset)
            .size(size)
            .memory(memory.handle())
            .memory_offset(0)];
        let buffer_binds = [vk::SparseBufferMemoryBindInfo::default()
            .buffer(self.buffer)
            .binds(&binds)];
        let info = [vk::BindSparseInfo::default().buffer_binds(&buffer_binds)];
        let device = self.ctx.device();
        // SAFETY: valid device; destroyed below on every path.
        let fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }
            .vk("vkCreateFence")?;
        let result = {
            let queue = self.ctx.lock_queue();
            // SAFETY: the queue is locked; everything bound was checked above.
            unsafe { device.queue_bind_sparse(*queue, &info, fence) }.vk("vkQueueBindSparse")
        }
        .and_then(|_| {
            // SAFETY: the fence was submitted with the bind.
            unsafe { device.wait_for_fences(&[fence], true, u64::MAX) }.vk("vkWaitForFences")
        });
        // SAFETY: signalled (or never submitted): nothing pending on it.
        unsafe { device.destroy_fence(fence, None) };
        result?;
        self.bound.push(memory);
        Ok(())
    }
}

impl Drop for SparseBuffer {
    fn drop(&mut self) {
        // SAFETY: ours; every bind was waited for in `bind`, and submissions that use the
        // buffer were promised complete by their (unsafe) recorders, as for any Buffer; its
        // memory is freed after (the `bound` field drops after this).
        unsafe { self.ctx.device().destroy_buffer(self.buffer, None) };
    }
}

// SAFETY: the handle is owned by this value (destroyed only on its drop), created on the
// context it names with the size or description it reports; host views of its memory are
// only lent through `&self` methods that the `&mut` GPU-write helpers exclude.
unsafe impl AsVkBuffer for SparseBuffer {
    fn vk_buffer(&self) -> vk::Buffer {
        self.buffer
    }
    fn vk_size(&self) -> u64 {
        self.size
    }
    fn vk_context(&self) -> &Arc<VulkanContext> {
        &self.ctx
    }
}
