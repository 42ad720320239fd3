//! Memory both APIs see: [`SharedAllocation`] (exportable Vulkan memory imported into CUDA
//! once) and the typed [`SharedBuffer`] views into it.
//!
//! Every request is validated once, here at the public entry point ([`layout`] rules, Vulkan
//! bind rules, the element's alignment), before any object is created; the internals it
//! then calls take validated values.

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use ash::vk;
use cudarc::driver::{
    result, sys, CudaContext, CudaEvent, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice,
    SyncOnDrop,
};

use crate::cuda::vmm::VmmMapping;
use crate::cuda::{ImportedMemory, MappedRange};
use crate::error::MemoryError;
use crate::error::{CudaResultExt, Result};
use crate::interop::Bridge;
use crate::rules::layout::{self, ImportLayout, PlacementRequest};
use crate::vulkan::{
    AllocateInfo, AsVkBuffer, BoundBuffer, Buffer, BufferDesc, DeviceMemory, ExternalUse,
    PoolLease, VulkanContext,
};

use crate::interop::BufferUsage;

pub(crate) use crate::vulkan::Dedicated;

/// Options for [`SharedAllocation::buffer_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BufferPlacement {
    /// Byte offset inside the allocation.
    pub offset: u64,
    /// Allow the range to overlap live buffers: the views then alias (CUDA requires volatile
    /// accesses for writes through one to be seen through the other).
    pub allow_overlap: bool,
}

pub(crate) fn transfer_usage() -> vk::BufferUsageFlags {
    vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST
}

fn exportable_buffer(vk: &Arc<VulkanContext>, size: u64, usage: BufferUsage) -> Result<Buffer> {
    Buffer::new(
        vk,
        BufferDesc {
            size,
            usage,
            external: ExternalUse::Export,
        },
    )
}

impl Bridge {
    /// Creates a buffer of `len` elements in its own allocation, dedicated when Vulkan
    /// prefers or requires it, shared with CUDA. The Vulkan buffer's usage is `usage` plus
    /// what every shared buffer gets ([`crate::vulkan::shared_buffer_usage`]:
    /// `TRANSFER_SRC | TRANSFER_DST`, and `SHADER_DEVICE_ADDRESS` where the device has
    /// buffer device addresses).
    pub fn create_buffer<T: bytemuck::Pod>(
        &self,
        len: usize,
        usage: BufferUsage,
    ) -> Result<SharedBuffer<T>> {
        self.create_buffer_with(len, usage, Dedicated::Auto)
    }

    /// As [`Self::create_buffer`], choosing the dedicated policy.
    pub fn create_buffer_with<T: bytemuck::Pod>(
        &self,
        len: usize,
        usage: BufferUsage,
        dedicated: Dedicated,
    ) -> Result<SharedBuffer<T>> {
        let bytes = layout::bytes_for::<T>(len)?;
        let usage = crate::vulkan::shared_buffer_usage(&self.vulkan, usage);
        let buffer = exportable_buffer(&self.vulkan, bytes, usage)?;
        let req = buffer.requirements();
        let is_dedicated = match dedicated {
            Dedicated::Always => true,
            Dedicated::Auto => req.requires_dedicated || req.prefers_dedicated,
            Dedicated::WhenRequired => req.requires_dedicated,
        };
        let allocation = SharedAllocation::allocate(
            self,
            req.size,
            req.memory_type_bits,
            usage,
            is_dedicated.then_some(&buffer),
        )?;
        // Offset 0 of an allocation made for exactly this buffer: every rule holds.
        allocation.place_buffer(buffer, len, BufferPlacement::default())
    }

    /// Allocates `size` bytes of exportable, non-dedicated device memory, imported into CUDA,
    /// in which several [`SharedBuffer`]s of `usage` can live at different offsets.
    pub fn create_allocation(
        &self,
        size: u64,
        usage: BufferUsage,
    ) -> Result<Arc<SharedAllocation>> {
        let usage = crate::vulkan::shared_buffer_usage(&self.vulkan, usage);
        // A probe buffer tells which memory types buffers of this usage may use.
        let probe = exportable_buffer(&self.vulkan, size, usage)?;
        let req = probe.requirements();
        if req.requires_dedicated {
            return Err(MemoryError::DedicatedOnlyUsage { usage }.into());
        }
        drop(probe);
        SharedAllocation::allocate(self, size, req.memory_type_bits, usage, None)
    }
}

/// Exportable Vulkan device memory imported into CUDA: the one allocation behind one or more
/// [`SharedBuffer`]s. CUDA's import keeps the Vulkan memory alive; each buffer keeps this alive.
pub struct SharedAllocation {
    memory: Arc<DeviceMemory>,
    imported: Arc<ImportedMemory>,
    usage: vk::BufferUsageFlags,
    stream: Arc<CudaStream>,
}

impl SharedAllocation {
    pub(crate) fn allocate(
        bridge: &Bridge,
        size: u64,
        memory_type_bits: u32,
        usage: vk::BufferUsageFlags,
        dedicated: Option<&Buffer>,
    ) -> Result<Arc<Self>> {
        let memory = Arc::new(DeviceMemory::allocate(
            &bridge.vulkan,
            AllocateInfo {
                size,
                memory_type_bits,
                properties: vk::MemoryPropertyFlags::DEVICE_LOCAL,
                exportable: true,
            },
            dedicated,
        )?);
        Self::import(memory, &bridge.cuda, usage, bridge.stream.clone())
    }

    /// Exports `memory` (allocated exportable) and imports it into `cuda` once, with the
    /// dedicated flag exactly when it is a dedicated allocation.
    pub(crate) fn import(
        memory: Arc<DeviceMemory>,
        cuda: &Arc<CudaContext>,
        usage: vk::BufferUsageFlags,
        stream: Arc<CudaStream>,
    ) -> Result<Arc<Self>> {
        let fd = memory.export()?;
        // SAFETY: the handle was just exported from `memory`, whose allocation size and
        // dedicated-ness its import layout says; the import keeps `memory` alive through the
        // exporter Arc.
        let imported = unsafe {
            ImportedMemory::import(cuda, fd, memory.import_layout(), Some(memory.clone()))
        }?;
        Ok(Arc::new(Self {
            memory,
            imported,
            usage,
            stream,
        }))
    }

    /// A typed buffer of `len` elements at byte `offset`, seen by Vulkan and CUDA. The offset
    /// must suit Vulkan (the buffer's alignment), CUDA (16 bytes) and `T` (`align_of::<T>()`),
    /// and the range must not overlap a live buffer.
    pub fn buffer<T: bytemuck::Pod>(
        self: &Arc<Self>,
        offset: u64,
        len: usize,
    ) -> Result<SharedBuffer<T>> {
        self.buffer_with(
            len,
            BufferPlacement {
                offset,
                allow_overlap: false,
            },
        )
    }

    /// As [`Self::buffer`], with every placement option.
    pub fn buffer_with<T: bytemuck::Pod>(
        self: &Arc<Self>,
        len: usize,
        placement: BufferPlacement,
    ) -> Result<SharedBuffer<T>> {
        if self.memory.is_dedicated() {
            return Err(MemoryError::DedicatedHoldsOneBuffer.into());
        }
        let bytes = layout::bytes_for::<T>(len)?;
        // The range is checked before the buffer is created, so the error names the allocation
        // (and nothing is created for a request that cannot fit).
        layout::check_range(placement.offset, bytes, "allocation", self.size())?;
        let buffer = exportable_buffer(self.memory.context(), bytes, self.usage)?;
        self.place_buffer(buffer, len, placement)
    }

    /// Places `buffer` (of `len` elements of `T`) in this allocation: every range and alignment
    /// rule once ([`layout::place`]); the mapping and the bind consume the proof.
    fn place_buffer<T: bytemuck::Pod>(
        self: &Arc<Self>,
        buffer: Buffer,
        len: usize,
        placement: BufferPlacement,
    ) -> Result<SharedBuffer<T>> {
        let bytes = buffer.size();
        let r = buffer.requirements();
        let placed = layout::place(
            self.import_layout(),
            PlacementRequest {
                offset: placement.offset,
                size: bytes,
                vulkan_alignment: r.alignment,
                vulkan_size: r.size,
                element_alignment: std::mem::align_of::<T>() as u64,
            },
        )?;
        let mapping = self.imported.map_placed(&placed, placement.allow_overlap)?;
        let bound = buffer.bind_placed(self.memory.clone(), &placed)?;
        let cuda = CudaSide::Imported {
            mapping,
            allocation: self.clone(),
        };
        SharedBuffer::assemble(bound, cuda, self.stream.clone(), len)
    }

    fn import_layout(&self) -> ImportLayout {
        self.imported.layout()
    }

    /// Allocation size in bytes.
    pub fn size(&self) -> u64 {
        self.memory.size()
    }
    /// Whether it is a dedicated allocation (one buffer, at offset 0).
    pub fn is_dedicated(&self) -> bool {
        self.memory.is_dedicated()
    }
    /// The usage every buffer in it is created with.
    pub fn usage(&self) -> vk::BufferUsageFlags {
        self.usage
    }
    /// The Vulkan memory.
    pub fn vk_memory(&self) -> &Arc<DeviceMemory> {
        &self.memory
    }
    /// The CUDA import.
    pub fn cuda_memory(&self) -> &Arc<ImportedMemory> {
        &self.imported
    }
}

/// What a pool block carries besides its Vulkan memory: the one CUDA import and the one
/// mapping of the whole block.
pub(crate) struct CudaBlock {
    // Freed first (cuMemFree), then the import (cuDestroyExternalMemory), which holds the
    // Vulkan memory.
    pub(crate) mapping: MappedRange,
    pub(crate) allocation: Arc<SharedAllocation>,
}

impl CudaBlock {
    /// The CUDA address of the block's first byte.
    pub(crate) fn device_ptr(&self) -> sys::CUdeviceptr {
        self.mapping.device_ptr()
    }
}

/// How a shared buffer's memory is seen by CUDA.
pub(crate) enum CudaSide {
    /// Vulkan allocated it; CUDA imported it and maps a range (the usual direction).
    Imported {
        mapping: MappedRange,
        allocation: Arc<SharedAllocation>,
    },
    /// CUDA allocated it (`cuMemCreate`) and maps it; Vulkan imported it (the reverse).
    Vmm(VmmMapping),
    /// A range of a [`SharedPool`](crate::SharedPool) block, which CUDA imported and mapped
    /// once: the device pointer is the block's mapping plus the offset. The lease holds the
    /// block and returns the range to the pool when dropped.
    Pooled(PoolLease<CudaBlock>),
}

impl CudaSide {
    fn device_ptr(&self) -> sys::CUdeviceptr {
        match self {
            CudaSide::Imported { mapping, .. } => mapping.device_ptr(),
            CudaSide::Vmm(m) => m.device_ptr(),
            // Inside the block's one linear mapping (the pool checked offset + size fit it).
            CudaSide::Pooled(lease) => lease.block().extra.device_ptr() + lease.offset(),
        }
    }
}

/// A shared buffer's read and write events (none when the context does not track events).
pub(crate) type BufferEvents = (Option<CudaEvent>, Option<CudaEvent>);

/// `len` elements of `T` in shared memory, seen as a `vk::Buffer` (descriptors, copies) and as
/// a CUDA device pointer (kernels, cudarc copies). Drop in any order is safe: the buffer
/// keeps its allocation alive, and the allocation's CUDA import keeps the Vulkan memory alive.
///
/// On the CUDA side it keeps cudarc's stream contract the way `CudaSlice` does: a read or
/// write on any stream waits for the last write (and a write for the last reads) through
/// events, so cudarc copies on different streams are ordered.
/// The two APIs do not order their accesses by themselves: finish CUDA work (stream sync or
/// an exported semaphore) before Vulkan reads, and the reverse.
///
/// Drop waits for both events (in single-stream mode, for the buffer's stream), but never
/// longer than the context's drop timeout
/// ([`VulkanContext::set_drop_timeout`](crate::vulkan::VulkanContext::set_drop_timeout)): if
/// the work has not finished by then (a stream that waits for a value nobody writes), it logs
/// an error and leaks the memory and its mapping until that work finishes, if ever, rather
/// than free them under the GPU or hang.
pub struct SharedBuffer<T> {
    read: Option<CudaEvent>,
    write: Option<CudaEvent>,
    // Taken apart in Drop, once the events say the GPU is done with them (see BufferParts).
    bound: ManuallyDrop<Arc<BoundBuffer>>,
    cuda: ManuallyDrop<CudaSide>,
    device_ptr: sys::CUdeviceptr,
    stream: Arc<CudaStream>,
    len: usize,
    _element: PhantomData<T>,
}

impl<T> SharedBuffer<T> {
    pub(crate) fn assemble(
        bound: BoundBuffer,
        cuda: CudaSide,
        stream: Arc<CudaStream>,
        len: usize,
    ) -> Result<Self> {
        let events = Self::new_events(&stream)?;
        Ok(Self::from_parts(bound, cuda, stream, len, events))
    }

    /// The read and write events a buffer on `stream` needs: made before anything else of a
    /// pool buffer, so that nothing can fail once its range is taken.
    pub(crate) fn new_events(stream: &Arc<CudaStream>) -> Result<BufferEvents> {
        let ctx = stream.context();
        Ok(if ctx.is_event_tracking() {
            (
                Some(ctx.new_event(None).cuda("cuEventCreate")?),
                Some(ctx.new_event(None).cuda("cuEventCreate")?),
            )
        } else {
            (None, None)
        })
    }

    /// Puts a buffer together from its parts (`len` elements fit `bound` and the CUDA side).
    pub(crate) fn from_parts(
        bound: BoundBuffer,
        cuda: CudaSide,
        stream: Arc<CudaStream>,
        len: usize,
        (read, write): BufferEvents,
    ) -> Self {
        Self {
            read,
            write,
            device_ptr: cuda.device_ptr(),
            bound: ManuallyDrop::new(Arc::new(bound)),
            cuda: ManuallyDrop::new(cuda),
            stream,
            len,
            _element: PhantomData,
        }
    }
}

impl<T: bytemuck::Pod> SharedBuffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether it holds no elements (never true: zero-size buffers are rejected).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Size in bytes.
    pub fn byte_size(&self) -> u64 {
        self.bound.buffer().size()
    }
    /// Byte offset inside its allocation (a pool buffer: inside its pool block; 0 for
    /// CUDA-allocated buffers).
    pub fn offset(&self) -> u64 {
        match &*self.cuda {
            CudaSide::Imported { mapping, .. } => mapping.range().start,
            CudaSide::Vmm(_) => 0,
            CudaSide::Pooled(lease) => lease.offset(),
        }
    }
    /// The Vulkan buffer handle (valid while `self` lives).
    pub fn vk_buffer(&self) -> vk::Buffer {
        self.bound.buffer().handle()
    }
    /// The Vulkan buffer and the memory it is bound to, shared (a wgpu::Buffer made of this
    /// buffer keeps them alive until wgpu is done with it).
    pub fn vulkan_buffer(&self) -> &Arc<BoundBuffer> {
        &self.bound
    }
    /// The Vulkan buffer's device address, where the device has `bufferDeviceAddress` (the
    /// pointer a CUDA kernel launched in a Vulkan queue takes).
    pub fn device_address(&self) -> Option<u64> {
        self.bound.device_address()
    }
    /// The CUDA device pointer. For kernels on other streams than [`Bridge::stream`], prefer
    /// [`DevicePtr::device_ptr`] / [`DevicePtrMut::device_ptr_mut`], which order the access.
    pub fn cuda_ptr(&self) -> sys::CUdeviceptr {
        self.device_ptr
    }
    /// The CUDA device pointer by reference, for `launch_builder(..).arg(buf.kernel_arg())`.
    pub fn kernel_arg(&self) -> &sys::CUdeviceptr {
        &self.device_ptr
    }
    /// The Vulkan-allocated memory it lives in (for a pool buffer: its pool block, whose
    /// whole range the pool maps, so [`SharedAllocation::buffer`] refuses to overlap it);
    /// `None` for buffers CUDA allocated ([`Bridge::create_buffer_from_cuda`]).
    pub fn allocation(&self) -> Option<&Arc<SharedAllocation>> {
        match &*self.cuda {
            CudaSide::Imported { allocation, .. } => Some(allocation),
            CudaSide::Vmm(_) => None,
            CudaSide::Pooled(lease) => Some(&lease.block().extra.allocation),
        }
    }

    /// Whether it came from a [`SharedPool`](crate::SharedPool).
    pub fn is_pooled(&self) -> bool {
        matches!(*self.cuda, CudaSide::Pooled(_))
    }

    /// Whether kernels and copies on `ctx`'s GPU may touch it: its own GPU always, other GPUs
    /// only for a buffer made by [`Bridge::create_peer_buffer`](crate::Bridge::create_peer_buffer)
    /// for them.
    pub fn accessible_from(&self, ctx: &CudaContext) -> bool {
        match &*self.cuda {
            CudaSide::Vmm(mapping) => mapping.accessible_from().contains(&ctx.cu_device()),
            _ => ctx.cu_device() == self.stream.context().cu_device(),
        }
    }

    /// The CUDA ordinal of the GPU the memory lives on.
    pub fn cuda_ordinal(&self) -> usize {
        self.stream.context().ordinal()
    }

    /// Copies the buffer to the host through CUDA (ordered after the last write on any
    /// stream), and synchronises.
    pub fn cuda_read(&self) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); self.len];
        let stream = self.stream.clone();
        stream.context().bind_to_thread().cuda("cuCtxSetCurrent")?;
        let (src, _record) = self.device_ptr(&stream);
        // SAFETY: `out` has exactly byte_size bytes; the device range is our live mapping.
        unsafe { result::memcpy_dtoh_async(&mut out, src, stream.cu_stream()) }
            .cuda("cuMemcpyDtoHAsync")?;
        stream.synchronize().cuda("cuStreamSynchronize")?;
        Ok(out)
    }

    /// Copies `data` (exactly `len` elements) into the buffer through CUDA (ordered after the
    /// last reads and writes on any stream), and synchronises.
    pub fn cuda_write(&mut self, data: &[T]) -> Result<()> {
        if data.len() != self.len {
            return Err(MemoryError::CopyLength {
                given: data.len(),
                len: self.len,
            }
            .into());
        }
        let stream = self.stream.clone();
        stream.context().bind_to_thread().cuda("cuCtxSetCurrent")?;
        let (dst, _record) = self.device_ptr_mut(&stream);
        // SAFETY: the device range is our live mapping of exactly data's byte size.
        unsafe { result::memcpy_htod_async(dst, data, stream.cu_stream()) }
            .cuda("cuMemcpyHtoDAsync")?;
        stream.synchronize().cuda("cuStreamSynchronize")
    }
}

/// What a shared buffer frees once the GPU is done with it, in this order (field order): the
/// Vulkan view (shared with a wgpu::Buffer made of it, feature `wgpu`, which may keep it and
/// its memory alive longer), then the CUDA mapping (and through it the allocation).
struct BufferParts {
    _bound: Arc<BoundBuffer>,
    _cuda: Option<CudaSide>,
}

impl Drop for BufferParts {
    fn drop(&mut self) {
        // Another holder of the Vulkan buffer (a wgpu::Buffer made of it, a frame pacer) may
        // still use it: its range (pool lease) or CUDA mapping must not be freed, and so
        // reused, before the last holder is done. They go with the buffer then.
        if Arc::strong_count(&self._bound) > 1 {
            if let Some(cuda) = self._cuda.take() {
                self._bound.keep_until_dropped(Box::new(cuda));
            }
        }
    }
}

impl<T> Drop for SharedBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `bound` and `cuda` are not used again (ManuallyDrop leaves
        // nothing for the fields' own drops).
        let parts = unsafe {
            BufferParts {
                _bound: ManuallyDrop::take(&mut self.bound),
                _cuda: Some(ManuallyDrop::take(&mut self.cuda)),
            }
        };
        let budget = parts._bound.vk_context().drop_budget().clone();
        let ctx = self.stream.context().clone();
        ctx.record_err(ctx.bind_to_thread());
        // Wait for this buffer's own CUDA work (never the whole device) before the mapping
        // is freed: its events where cudarc tracks streams, else its stream (cudarc records
        // no events in single-stream mode). Kernels launched with a raw `kernel_arg` on other
        // streams are the launcher's to finish (cudarc's launches are `unsafe`).
        if ctx.is_managing_stream_synchronization() {
            let events = [self.read.take(), self.write.take()];
            let finished = budget.poll(|| crate::cuda::events_complete(events.iter().flatten()));
            budget.release("SharedBuffer", finished, parts, || {
                Box::new(move || crate::cuda::events_complete(events.iter().flatten()))
            });
        } else {
            let stream = self.stream.clone();
            let finished = budget.poll(|| stream_done(&stream));
            budget.release("SharedBuffer", finished, parts, || {
                Box::new(move || stream_done(&stream))
            });
        }
    }
}

/// Whether `stream` has finished all its work (`cuStreamQuery`; an error counts as done, as
/// in [`events_done`]).
fn stream_done(stream: &CudaStream) -> bool {
    let ctx = stream.context();
    ctx.record_err(ctx.bind_to_thread());
    // SAFETY: a live stream of this context (the Arc keeps it).
    match unsafe { sys::cuStreamQuery(stream.cu_stream()) }.result() {
        Ok(()) => true,
        Err(e) if e.0 == sys::cudaError_enum::CUDA_ERROR_NOT_READY => false,
        Err(e) => {
            ctx.record_err(Err::<(), _>(e));
            true
        }
    }
}

crate::vulkan::delegate_as_vk_buffer!([<T>] SharedBuffer<T> => bound, keep_alive: |b| {
    // The buffer and its memory; the CUDA mapping stays with them while they are shared
    // (see `BufferParts`).
    Some(Arc::clone(&*b.bound) as Arc<dyn std::any::Any + Send + Sync>)
});

impl<T> DeviceSlice<T> for SharedBuffer<T> {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

// The stream contract of cudarc's own CudaSlice: a read waits for the last write and records
// the read event; a write waits for the last reads and writes and records the write event.
impl<T> DevicePtr<T> for SharedBuffer<T> {
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        if stream.context().is_managing_stream_synchronization() {
            if let Some(write) = self.write.as_ref() {
                stream.context().record_err(stream.wait(write));
            }
        }
        (
            self.device_ptr,
            SyncOnDrop::record_event(&self.read, stream),
        )
    }
}

impl<T> DevicePtrMut<T> for SharedBuffer<T> {
    fn device_ptr_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        if stream.context().is_managing_stream_synchronization() {
            for event in [&self.read, &self.write].into_iter().flatten() {
                stream.context().record_err(stream.wait(event));
            }
        }
        (
            self.device_ptr,
            SyncOnDrop::record_event(&self.write, stream),
        )
    }
}
