//! A shared buffer that grows without moving: one virtual address range is reserved up front,
//! and each growth maps another CUDA allocation (a "chunk") behind it, so the CUDA pointer
//! never changes and nothing is copied. Vulkan sees the chunks one of two ways
//! ([`VulkanView`]): a `vk::Buffer` per chunk ([`GrowableBuffer::vk_chunks`]), or one
//! sparse-binding `vk::Buffer` over the whole reservation whose pieces are bound as chunks
//! arrive ([`GrowableBuffer::vk_buffer`]); BENCHMARKS.md compares their growth cost.

use std::marker::PhantomData;
use std::sync::Arc;

use ash::vk;
use cudarc::driver::sys;

use crate::cuda::vmm::{AddressReservation, VmmAllocation, VmmMapping};
use crate::error::MemoryError;
use crate::error::Result;
use crate::interop::cuda_allocated::{import_into_vulkan, import_vmm_memory};
use crate::interop::{Bridge, BufferUsage};
use crate::rules::layout::{self, AlignmentRule};
use crate::vulkan::{AsVkBuffer, BoundBuffer, SparseBuffer, VulkanContext};

/// How Vulkan sees a [`GrowableBuffer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VulkanView {
    /// One `vk::Buffer` per chunk (no device feature needed).
    #[default]
    PerChunk,
    /// One sparse-binding `vk::Buffer` over the whole reservation (needs `sparseBinding`).
    Sparse,
}

enum VkSide {
    PerChunk(Vec<BoundBuffer>),
    Sparse(SparseBuffer),
}

/// Elements of `T` in CUDA virtual memory that can grow up to a reserved maximum.
pub struct GrowableBuffer<T> {
    vulkan: Arc<VulkanContext>,
    cuda: Arc<cudarc::driver::CudaContext>,
    // Vulkan's views are dropped before the CUDA mappings; the reservation outlives both.
    vk: VkSide,
    mappings: Vec<VmmMapping>,
    reservation: Arc<AddressReservation>,
    chunk_bytes: u64,
    usage: vk::BufferUsageFlags,
    _element: PhantomData<T>,
}

impl<T: bytemuck::Pod> GrowableBuffer<T> {
    /// Reserves room for `max_bytes` (rounded up to whole chunks) and maps nothing yet; Vulkan
    /// sees one buffer per chunk. `chunk_bytes` must be a multiple of the CUDA allocation
    /// granularity (2 MiB measured).
    pub fn new(
        bridge: &Bridge,
        max_bytes: u64,
        chunk_bytes: u64,
        usage: BufferUsage,
    ) -> Result<Self> {
        Self::with_view(bridge, max_bytes, chunk_bytes, usage, VulkanView::PerChunk)
    }

    /// As [`Self::new`], choosing how Vulkan sees the buffer.
    pub fn with_view(
        bridge: &Bridge,
        max_bytes: u64,
        chunk_bytes: u64,
        usage: BufferUsage,
        view: VulkanView,
    ) -> Result<Self> {
        let g = bridge.vmm_granularity()?;
        if chunk_bytes == 0 {
            return Err(layout::LayoutError::ZeroSize { offset: 0 }.into());
        }
        layout::check_aligned("size", chunk_bytes, g, AlignmentRule::Granularity)?;
        if !chunk_bytes.is_multiple_of(std::mem::size_of::<T>().max(1) as u64) {
            return Err(MemoryError::ChunkNotWholeElements {
                chunk_bytes,
                element_size: std::mem::size_of::<T>() as u64,
            }
            .into());
        }
        let reserve = max_bytes
            .div_ceil(chunk_bytes)
            .max(1)
            .checked_mul(chunk_bytes)
            .ok_or(layout::LayoutError::Overflow {
                offset: max_bytes,
                size: chunk_bytes,
            })?;
        let usage = usage | vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
        let vk_side = match view {
            VulkanView::PerChunk => VkSide::PerChunk(Vec::new()),
            VulkanView::Sparse => {
                let sparse = SparseBuffer::new(bridge.vulkan(), reserve, usage)?;
                layout::check_aligned(
                    "size",
                    chunk_bytes,
                    sparse.alignment(),
                    AlignmentRule::VulkanBuffer,
                )?;
                VkSide::Sparse(sparse)
            }
        };
        Ok(Self {
            vulkan: bridge.vulkan().clone(),
            cuda: bridge.cuda().clone(),
            vk: vk_side,
            mappings: Vec::new(),
            reservation: AddressReservation::new(bridge.cuda(), reserve)?,
            chunk_bytes,
            usage,
            _element: PhantomData,
        })
    }

    /// Maps chunks until at least `len` elements fit. The CUDA pointer stays where it was and
    /// earlier contents stay in place.
    pub fn grow_to(&mut self, len: usize) -> Result<()> {
        let bytes = layout::bytes_for::<T>(len)?;
        layout::check_range(
            0,
            bytes.max(1),
            "address reservation",
            self.reservation.size(),
        )?;
        while self.capacity_bytes() < bytes {
            self.add_chunk()?;
        }
        Ok(())
    }

    /// Maps one more chunk: a CUDA allocation mapped at the end, made accessible, and imported
    /// into Vulkan (a new buffer, or bound into the sparse buffer at the same offset).
    pub fn add_chunk(&mut self) -> Result<()> {
        let offset = self.capacity_bytes();
        let memory = VmmAllocation::new(
            &self.cuda,
            self.chunk_bytes,
            crate::cuda::vmm::VmmExport::OsHandle,
        )?;
        let mapping = self
            .reservation
            .map(offset, &memory, self.chunk_bytes)?
            .enable_access()?;
        match &mut self.vk {
            VkSide::PerChunk(buffers) => buffers.push(import_into_vulkan(
                &self.vulkan,
                &memory,
                self.chunk_bytes,
                self.usage,
            )?),
            VkSide::Sparse(sparse) => {
                let imported =
                    import_vmm_memory(&self.vulkan, &memory, sparse.memory_type_bits(), None)?;
                sparse.bind(offset, Arc::new(imported))?;
            }
        }
        self.mappings.push(mapping);
        Ok(())
    }

    /// The CUDA device pointer of element 0: the same for the buffer's whole life.
    pub fn cuda_ptr(&self) -> sys::CUdeviceptr {
        self.reservation.base()
    }
    /// Bytes currently mapped.
    pub fn capacity_bytes(&self) -> u64 {
        self.mappings.len() as u64 * self.chunk_bytes
    }
    /// Elements that currently fit.
    pub fn capacity(&self) -> usize {
        (self.capacity_bytes() / std::mem::size_of::<T>().max(1) as u64) as usize
    }
    /// Bytes reserved: the most it can grow to.
    pub fn reserved_bytes(&self) -> u64 {
        self.reservation.size()
    }
    /// Size of one chunk in bytes.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }
    /// Vulkan's per-chunk view: each chunk's byte offset and its `vk::Buffer` (empty for a
    /// [`VulkanView::Sparse`] buffer).
    pub fn vk_chunks(&self) -> impl Iterator<Item = (u64, &BoundBuffer)> {
        let buffers: &[BoundBuffer] = match &self.vk {
            VkSide::PerChunk(b) => b,
            VkSide::Sparse(_) => &[],
        };
        buffers
            .iter()
            .enumerate()
            .map(|(i, b)| (i as u64 * self.chunk_bytes, b))
    }

    /// Vulkan's sparse view: one buffer over the whole reservation, once every chunk of it is
    /// bound (`None` before, and for [`VulkanView::PerChunk`]). A sparse buffer created
    /// without residency must be fully bound before any device access, so a partly grown
    /// buffer is seen chunk by chunk only through the CUDA pointer.
    pub fn vk_buffer(&self) -> Option<&dyn AsVkBuffer> {
        match &self.vk {
            VkSide::Sparse(s) if self.capacity_bytes() == self.reserved_bytes() => Some(s),
            VkSide::Sparse(_) | VkSide::PerChunk(_) => None,
        }
    }
}
