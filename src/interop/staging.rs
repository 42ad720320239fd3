//! Staging between CUDA and Vulkan through one pinned host region: CUDA copies into it
//! (`cuMemcpyDtoHAsync`, pinned speed) and Vulkan uses the same bytes as a buffer
//! (`VK_EXT_external_memory_host`), so the path "CUDA result → host → Vulkan buffer" takes
//! two DMA copies and no CPU copy. The particle demo's `--transfer staging` mode uses it as
//! the baseline that shows what zero-copy saves.

use std::mem::ManuallyDrop;

use ash::vk;
use cudarc::driver::{sys, CudaEvent, CudaStream, DevicePtr, DevicePtrMut};

use crate::cuda::host::{HostAllocFlags, PinnedBuffer};
use crate::error::{CudaResultExt, Result};
use crate::interop::Bridge;
use crate::rules::layout;
use crate::vulkan::{AsVkBuffer, HostImportedBuffer};

/// Pinned host memory that is also a Vulkan buffer.
///
/// Host views and GPU copies cannot overlap: every copy (CUDA or Vulkan) into or out of it
/// borrows it mutably, so no `&[u8]` from [`Self::bytes`] is alive meanwhile, and `bytes` /
/// `bytes_mut` first wait for the last CUDA copy enqueued (its event), so an in-flight copy
/// is never seen half done.
///
/// ```compile_fail
/// # fn f(staging: &mut cuvk::StagingBuffer, stream: &cuvk::cudarc::driver::CudaStream,
/// #      src: &cuvk::SharedBuffer<u8>) -> cuvk::Result<()> {
/// let view = staging.bytes()?;
/// staging.cuda_download(stream, src)?; // error: `staging` is borrowed by `view`
/// println!("{}", view[0]);
/// # Ok(()) }
/// ```
///
/// Raw device pointers are accepted only by the `unsafe` forms:
///
/// ```compile_fail
/// # fn f(staging: &mut cuvk::StagingBuffer, stream: &cuvk::cudarc::driver::CudaStream) {
/// staging.cuda_upload_raw(stream, 0x1000, 16); // error: call to unsafe function
/// # }
/// ```
///
/// Drop waits for the last CUDA copy, but never longer than the context's drop timeout
/// ([`crate::vulkan::VulkanContext::set_drop_timeout`]): if the copy has not finished by then (its stream
/// waits for a value nobody writes), it logs an error and leaks the pinned memory and its
/// Vulkan import until the copy finishes, if ever, rather than free them under the GPU or
/// hang.
pub struct StagingBuffer {
    // Taken apart in Drop once the last copy is done (see StagingParts).
    vk: ManuallyDrop<HostImportedBuffer<'static>>,
    pinned: ManuallyDrop<PinnedBuffer<u8>>,
    // Recorded after each CUDA copy; waited for before the host sees the bytes.
    pending: Option<CudaEvent>,
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
        let pinned = PinnedBuffer::<u8>::new(bridge.cuda(), size as usize, flags)?;
        let (ptr, len) = (pinned.host_ptr(), pinned.byte_size());
        // SAFETY: the pinned allocation, which lives in `self` beside the import and is freed
        // after it (field order). The import only hands the address to Vulkan; the host reads
        // and writes the bytes through `pinned` alone (`bytes` / `bytes_mut`), never through
        // this slice, so no reference derived from it is used while another is live.
        let region: &'static mut [u8] = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
        let vk = HostImportedBuffer::new(bridge.vulkan(), region, usage)?;
        Ok(Self {
            vk: ManuallyDrop::new(vk),
            pinned: ManuallyDrop::new(pinned),
            pending: None,
        })
    }

    /// Size in bytes.
    pub fn byte_size(&self) -> usize {
        self.pinned.byte_size()
    }

    /// The host address of the bytes, for code outside Rust (the C ABI) that orders its own
    /// accesses; Rust code uses [`Self::bytes`] / [`Self::bytes_mut`].
    pub fn host_ptr(&self) -> *mut u8 {
        self.pinned.host_ptr()
    }

    /// The bytes, after the last CUDA copy into or out of them completed. Vulkan copies are
    /// the caller's to wait for (the safe helpers wait before returning).
    pub fn bytes(&self) -> Result<&[u8]> {
        self.wait_pending()?;
        Ok(self.pinned.as_slice())
    }

    /// The bytes, mutably, after the last CUDA copy completed.
    pub fn bytes_mut(&mut self) -> Result<&mut [u8]> {
        self.wait_pending()?;
        Ok(self.pinned.as_mut_slice())
    }

    fn wait_pending(&self) -> Result<()> {
        match &self.pending {
            Some(event) => event.synchronize().cuda("cuEventSynchronize"),
            None => Ok(()),
        }
    }

    /// Enqueues on `stream` a copy of all of `src` into the start of the buffer (ordered after
    /// the last write of `src` on any stream, as cudarc orders its own copies).
    pub fn cuda_download<T, S: DevicePtr<T>>(
        &mut self,
        stream: &CudaStream,
        src: &S,
    ) -> Result<()> {
        let bytes = src.num_bytes();
        layout::check_range(0, bytes as u64, "staging buffer", self.byte_size() as u64)?;
        let (ptr, _record) = src.device_ptr(stream);
        // SAFETY: `src` is a live typed owner of at least `bytes` device bytes, ordered on
        // `stream` by its guard; the range fits (checked).
        unsafe { self.cuda_download_raw(stream, ptr, bytes) }
    }

    /// Enqueues on `stream` a copy of the start of the buffer into all of `dst` (ordered after
    /// the last reads and writes of `dst` on any stream).
    pub fn cuda_upload<T, D: DevicePtrMut<T>>(
        &mut self,
        stream: &CudaStream,
        dst: &mut D,
    ) -> Result<()> {
        let bytes = dst.num_bytes();
        layout::check_range(0, bytes as u64, "staging buffer", self.byte_size() as u64)?;
        let (ptr, _record) = dst.device_ptr_mut(stream);
        // SAFETY: `dst` is a live typed owner of at least `bytes` device bytes, borrowed
        // mutably and ordered on `stream` by its guard; the range fits (checked).
        unsafe { self.cuda_upload_raw(stream, ptr, bytes) }
    }

    /// Enqueues a copy of `bytes` from device memory at `src` into the start of the buffer.
    ///
    /// # Safety
    /// `src..src + bytes` must be device memory of `stream`'s context that stays allocated,
    /// and is not written by other work, until the copy completes; it must not be host memory
    /// that a live Rust reference points at (a mapped pinned buffer).
    pub unsafe fn cuda_download_raw(
        &mut self,
        stream: &CudaStream,
        src: sys::CUdeviceptr,
        bytes: usize,
    ) -> Result<()> {
        layout::check_range(0, bytes as u64, "staging buffer", self.byte_size() as u64)?;
        stream.context().bind_to_thread().cuda("cuCtxSetCurrent")?;
        let event = self.prepare_copy(stream)?;
        // SAFETY: the destination is our pinned region, at least `bytes` long (checked) and
        // borrowed mutably; the source is the caller's promise.
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                self.pinned.host_ptr().cast(),
                src,
                bytes,
                stream.cu_stream(),
            )
        }
        .result()
        .cuda("cuMemcpyDtoHAsync")?;
        self.record_pending(stream, event)
    }

    /// Enqueues a copy of the first `bytes` of the buffer to device memory at `dst`.
    ///
    /// # Safety
    /// `dst..dst + bytes` must be device memory of `stream`'s context that stays allocated,
    /// and is not read or written by other work, until the copy completes; it must not be host
    /// memory that a live Rust reference points at (a mapped pinned buffer).
    pub unsafe fn cuda_upload_raw(
        &mut self,
        stream: &CudaStream,
        dst: sys::CUdeviceptr,
        bytes: usize,
    ) -> Result<()> {
        layout::check_range(0, bytes as u64, "staging buffer", self.byte_size() as u64)?;
        stream.context().bind_to_thread().cuda("cuCtxSetCurrent")?;
        let event = self.prepare_copy(stream)?;
        // SAFETY: the source is our pinned region, at least `bytes` long (checked) and
        // borrowed mutably; the destination is the caller's promise.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                dst,
                self.pinned.host_ptr().cast(),
                bytes,
                stream.cu_stream(),
            )
        }
        .result()
        .cuda("cuMemcpyHtoDAsync")?;
        self.record_pending(stream, event)
    }

    /// Orders a new copy on `stream` after the previous one (which may be on another
    /// stream: `bytes` waits for one event only, so copies must complete in order), and gets
    /// the event that will follow the new copy — created before the copy is enqueued, so a
    /// failure here leaves nothing in flight.
    fn prepare_copy(&mut self, stream: &CudaStream) -> Result<CudaEvent> {
        match self.pending.take() {
            Some(prev) => {
                if let Err(e) = stream.wait(&prev).cuda("cuStreamWaitEvent") {
                    self.pending = Some(prev);
                    return Err(e);
                }
                Ok(prev)
            }
            None => stream.context().new_event(None).cuda("cuEventCreate"),
        }
    }

    /// Records `event` after the copy just enqueued on `stream`; without it the copy could not
    /// be waited for later, so a failed record waits for the stream now.
    fn record_pending(&mut self, stream: &CudaStream, event: CudaEvent) -> Result<()> {
        if let Err(e) = event.record(stream).cuda("cuEventRecord") {
            stream.synchronize().cuda("cuStreamSynchronize")?;
            return Err(e);
        }
        self.pending = Some(event);
        Ok(())
    }
}

/// What a staging buffer frees once its last copy is done, in this order (field order): the
/// Vulkan import must not outlive the memory it imports.
struct StagingParts {
    _vk: HostImportedBuffer<'static>,
    _pinned: PinnedBuffer<u8>,
}

impl Drop for StagingBuffer {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `vk` and `pinned` are not used again (ManuallyDrop leaves
        // nothing for the fields' own drops).
        let parts = unsafe {
            StagingParts {
                _vk: ManuallyDrop::take(&mut self.vk),
                _pinned: ManuallyDrop::take(&mut self.pinned),
            }
        };
        // The pinned memory must not be freed under an in-flight copy: wait (bounded) for ours.
        let budget = parts._vk.vk_context().drop_budget().clone();
        let pending = self.pending.take();
        let finished = budget.poll(|| crate::cuda::events_complete(&pending));
        budget.release("StagingBuffer", finished, parts, || {
            Box::new(move || crate::cuda::events_complete(&pending))
        });
    }
}

crate::vulkan::delegate_as_vk_buffer!([] StagingBuffer => vk);
