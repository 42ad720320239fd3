//! A shared buffer that grows without moving: one virtual address range is reserved up front,
//! and each growth maps another CUDA allocation (a "chunk") behind it, so the CUDA pointer
//! never changes and nothing is copied. Vulkan sees each chunk as its own `vk::Buffer` over
//! the imported chunk memory (listed by [`GrowableBuffer::vk_chunks`]), so a shader binds the
//! chunks it needs; a single sparse-bound Vulkan buffer was not built (see BENCHMARKS.md).

use std::marker::PhantomData;
use std::sync::Arc;

use ash::vk;
use cudarc::driver::sys;

use crate::bridge::import_into_vulkan;
use crate::cuda::vmm::{allocation_granularity, AddressReservation, VmmAllocation, VmmMapping};
use crate::error::{Error, Result};
use crate::layout::{self, AlignmentRule};
use crate::vulkan::{BoundBuffer, VulkanContext};
use crate::{Bridge, BufferUsage};

struct Chunk {
    // Vulkan's view is dropped before the CUDA mapping; the reservation outlives both.
    vk: BoundBuffer,
    _cuda: VmmMapping,
}

/// Elements of `T` in CUDA virtual memory that can grow up to a reserved maximum.
pub struct GrowableBuffer<T> {
    vulkan: Arc<VulkanContext>,
    cuda: Arc<cudarc::driver::CudaContext>,
    chunks: Vec<Chunk>,
    reservation: Arc<AddressReservation>,
    chunk_bytes: u64,
    usage: vk::BufferUsageFlags,
    _element: PhantomData<T>,
}

impl<T: bytemuck::Pod> GrowableBuffer<T> {
    /// Reserves room for `max_bytes` (rounded up to whole chunks) and maps nothing yet.
    /// `chunk_bytes` must be a multiple of the CUDA allocation granularity (2 MiB measured).
    pub fn new(
        bridge: &Bridge,
        max_bytes: u64,
        chunk_bytes: u64,
        usage: BufferUsage,
    ) -> Result<Self> {
        let (g, _) = allocation_granularity(bridge.cuda(), true)?;
        if chunk_bytes == 0 {
            return Err(layout::LayoutError::ZeroSize { offset: 0 }.into());
        }
        layout::check_aligned("size", chunk_bytes, g, AlignmentRule::Granularity)?;
        if chunk_bytes % std::mem::size_of::<T>().max(1) as u64 != 0 {
            return Err(Error::InvalidArgument(format!(
                "chunk of {chunk_bytes} bytes does not hold whole elements of {} bytes",
                std::mem::size_of::<T>()
            )));
        }
        let reserve = max_bytes
            .div_ceil(chunk_bytes)
            .max(1)
            .checked_mul(chunk_bytes)
            .ok_or(layout::LayoutError::Overflow {
                offset: max_bytes,
                size: chunk_bytes,
            })?;
        Ok(Self {
            vulkan: bridge.vulkan().clone(),
            cuda: bridge.cuda().clone(),
            chunks: Vec::new(),
            reservation: AddressReservation::new(bridge.cuda(), reserve)?,
            chunk_bytes,
            usage: usage | vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
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
    /// into Vulkan as a buffer.
    pub fn add_chunk(&mut self) -> Result<()> {
        let offset = self.capacity_bytes();
        let memory = VmmAllocation::new(&self.cuda, self.chunk_bytes, true)?;
        let mapping = self
            .reservation
            .map(offset, &memory, self.chunk_bytes)?
            .enable_access()?;
        let vk = import_into_vulkan(&self.vulkan, &memory, self.chunk_bytes, self.usage)?;
        self.chunks.push(Chunk { vk, _cuda: mapping });
        Ok(())
    }

    /// The CUDA device pointer of element 0: the same for the buffer's whole life.
    pub fn cuda_ptr(&self) -> sys::CUdeviceptr {
        self.reservation.base()
    }
    /// Bytes currently mapped.
    pub fn capacity_bytes(&self) -> u64 {
        self.chunks.len() as u64 * self.chunk_bytes
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
    /// Vulkan's view: each chunk's byte offset in the buffer and its `vk::Buffer`.
    pub fn vk_chunks(&self) -> impl Iterator<Item = (u64, &BoundBuffer)> {
        self.chunks
            .iter()
            .enumerate()
            .map(|(i, c)| (i as u64 * self.chunk_bytes, &c.vk))
    }
}
