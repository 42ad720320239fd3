//! Staging between CUDA and Vulkan through one pinned host region: CUDA copies into it
//! (`cuMemcpyDtoHAsync`, pinned speed) and Vulkan uses the same bytes as a buffer
//! (`VK_EXT_external_memory_host`), so the path "CUDA result → host → Vulkan buffer" takes
//! two DMA copies and no CPU copy. The particle demo's `--transfer staging` mode uses it as
//! the baseline that shows what zero-copy saves.

use ash::vk;
use cudarc::driver::{result, sys, CudaStream};

use crate::cuda::host::{HostAllocFlags, PinnedBuffer};
use crate::error::{CudaResultExt, Result};
use crate::layout;
use crate::vulkan::{AsVkBuffer, HostImportedBuffer, VulkanContext};
use crate::Bridge;

/// Pinned host memory that is also a Vulkan buffer.
pub struct StagingBuffer {
    // Declared first so it is dropped first: the Vulkan import must not outlive the memory.
    vk: HostImportedBuffer<'static>,
    pinned: PinnedBuffer<u8>,
}

impl StagingBuffer {
    /// At least `bytes` of pinned memory (rounded up to Vulkan's host-pointer alignment),
    /// imported into the bridge's Vulkan device as a buffer of `usage`.
    pub fn new(
        bridge: &Bridge,
        bytes: usize,
        flags: HostAllocFlags,
        usage: vk::BufferUsageFlags,
    ) -> Result<Self> {
        let align = bridge
            .vulkan()
            .info()
            .min_imported_host_pointer_alignment
            .unwrap_or(4096);
        let size = layout::align_up(bytes as u64, align).ok_or(layout::LayoutError::Overflow {
            offset: bytes as u64,
            size: align,
        })?;
        let mut pinned = PinnedBuffer::<u8>::new(bridge.cuda(), size as usize, flags)?;
        let (ptr, len) = (pinned.as_mut_slice().as_mut_ptr(), pinned.byte_size());
        // SAFETY: the slice is the pinned allocation, which lives in `self` beside the import
        // and is dropped after it (field order); nothing else hands out &mut to it while the
        // import exists (StagingBuffer exposes shared access only).
        let region: &'static mut [u8] = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
        let vk = HostImportedBuffer::new(bridge.vulkan(), region, usage)?;
        Ok(Self { vk, pinned })
    }

    /// Size in bytes.
    pub fn byte_size(&self) -> usize {
        self.pinned.byte_size()
    }

    /// The bytes. Read them only after the copies that wrote them completed.
    pub fn bytes(&self) -> &[u8] {
        self.vk.as_bytes()
    }

    /// Enqueues a copy of `bytes` from device memory at `src` into the start of the buffer.
    pub fn cuda_download(
        &self,
        stream: &CudaStream,
        src: sys::CUdeviceptr,
        bytes: usize,
    ) -> Result<()> {
        layout::check_range(0, bytes as u64, "staging buffer", self.byte_size() as u64)?;
        stream.context().bind_to_thread().cuda("cuCtxSetCurrent")?;
        // SAFETY: the destination is our pinned region, at least `bytes` long (checked); the
        // source is device memory the caller vouches for.
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                self.pinned.host_ptr().cast(),
                src,
                bytes,
                stream.cu_stream(),
            )
        }
        .result()
        .cuda("cuMemcpyDtoHAsync")
    }

    /// Enqueues a copy of the first `bytes` of the buffer to device memory at `dst`.
    pub fn cuda_upload(
        &self,
        stream: &CudaStream,
        dst: sys::CUdeviceptr,
        bytes: usize,
    ) -> Result<()> {
        layout::check_range(0, bytes as u64, "staging buffer", self.byte_size() as u64)?;
        stream.context().bind_to_thread().cuda("cuCtxSetCurrent")?;
        // SAFETY: the source is our pinned region, at least `bytes` long (checked).
        unsafe { result::memcpy_htod_async(dst, &self.bytes()[..bytes], stream.cu_stream()) }
            .cuda("cuMemcpyHtoDAsync")
    }
}

impl AsVkBuffer for StagingBuffer {
    fn vk_buffer(&self) -> vk::Buffer {
        self.vk.vk_buffer()
    }
    fn vk_size(&self) -> u64 {
        self.vk.vk_size()
    }
    fn vk_context(&self) -> &std::sync::Arc<VulkanContext> {
        self.vk.vk_context()
    }
}
