//! The pair of devices — one Vulkan device and the CUDA device with the same UUID — and the
//! memory they share: [`SharedAllocation`] and the typed [`SharedBuffer`] views into it.

use std::marker::PhantomData;
use std::sync::Arc;

use ash::vk;
use cudarc::driver::{
    result, sys, CudaContext, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop,
};

use crate::cuda::vmm::{AddressReservation, VmmAllocation, VmmMapping};
use crate::cuda::{self, ImportedMemory, MapOptions, MappedRange};
use crate::error::{CudaResultExt, Error, Result};
use crate::layout;
use crate::vulkan::{
    AllocateInfo, AsVkBuffer, BoundBuffer, Buffer, DeviceChoice, DeviceMemory, Validation,
    VulkanConfig, VulkanContext,
};
use crate::Uuid;

/// Buffer usages for shared buffers (Vulkan's flags). Every shared buffer is also a transfer
/// source and destination.
pub type BufferUsage = vk::BufferUsageFlags;

/// Which CUDA device the bridge pairs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaDeviceChoice {
    /// The CUDA device with this ordinal.
    Ordinal(usize),
    /// The CUDA device with this UUID.
    Uuid(Uuid),
}

impl Default for CudaDeviceChoice {
    fn default() -> Self {
        CudaDeviceChoice::Ordinal(0)
    }
}

/// Options for [`Bridge::new`].
#[derive(Debug, Clone, Default)]
pub struct BridgeConfig {
    /// The CUDA device; the Vulkan device is the one with the same UUID.
    pub cuda_device: CudaDeviceChoice,
    /// Validation layer use on the Vulkan side.
    pub validation: Validation,
    /// Extra Vulkan instance extensions (e.g. for a window surface).
    pub instance_extensions: Vec<&'static std::ffi::CStr>,
    /// Extra Vulkan device extensions (e.g. `VK_KHR_swapchain`).
    pub device_extensions: Vec<&'static std::ffi::CStr>,
}

/// Whether a buffer gets a dedicated allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dedicated {
    /// Exactly when `VkMemoryDedicatedRequirements` prefers or requires it.
    #[default]
    Auto,
    /// Always (the CUDA import then maps only at offset 0).
    Always,
}

/// One Vulkan device and the CUDA device with the same UUID.
pub struct Bridge {
    vulkan: Arc<VulkanContext>,
    cuda: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    uuid: Uuid,
}

impl Bridge {
    /// Opens the CUDA device `config.cuda_device` and creates a Vulkan device on the physical
    /// device with the same `deviceUUID`.
    pub fn new(config: BridgeConfig) -> Result<Self> {
        let ordinal = match config.cuda_device {
            CudaDeviceChoice::Ordinal(o) => o,
            CudaDeviceChoice::Uuid(u) => cuda::ordinal_for_uuid(u)?,
        };
        let cuda = cuda::context(ordinal)?;
        let uuid = Uuid::from_cuda(
            result::device::get_uuid(cuda.cu_device())
                .cuda("cuDeviceGetUuid")?
                .bytes,
        );
        let vulkan = VulkanContext::new(VulkanConfig {
            validation: config.validation,
            device: DeviceChoice::Uuid(uuid),
            instance_extensions: config.instance_extensions,
            device_extensions: config.device_extensions,
        })?;
        Self::from_parts(vulkan, cuda)
    }

    /// Pairs an existing Vulkan context (e.g. wrapped from an engine with
    /// [`VulkanContext::from_existing`]) with a CUDA context, checking that both are the same
    /// GPU ([`Error::DeviceMismatch`] otherwise).
    pub fn from_parts(vulkan: Arc<VulkanContext>, cuda: Arc<CudaContext>) -> Result<Self> {
        let uuid = Uuid::from_cuda(
            result::device::get_uuid(cuda.cu_device())
                .cuda("cuDeviceGetUuid")?
                .bytes,
        );
        if vulkan.info().device_uuid != uuid {
            return Err(Error::DeviceMismatch {
                vulkan: vulkan.info().device_uuid,
                cuda: uuid,
            });
        }
        let stream = cuda.default_stream();
        Ok(Self {
            vulkan,
            cuda,
            stream,
            uuid,
        })
    }

    /// The Vulkan side.
    pub fn vulkan(&self) -> &Arc<VulkanContext> {
        &self.vulkan
    }
    /// The CUDA context.
    pub fn cuda(&self) -> &Arc<CudaContext> {
        &self.cuda
    }
    /// The CUDA stream buffers report to cudarc (the context's default stream).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    /// The UUID both devices share.
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    /// Creates a buffer of `len` elements in its own allocation, dedicated when Vulkan
    /// prefers or requires it, shared with CUDA.
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
        let usage = usage | transfer_usage();
        let buffer = Buffer::new(&self.vulkan, bytes, usage, true)?;
        let req = buffer.requirements();
        let is_dedicated =
            dedicated == Dedicated::Always || req.requires_dedicated || req.prefers_dedicated;
        let allocation = SharedAllocation::allocate(
            self,
            req.size,
            req.memory_type_bits,
            usage,
            is_dedicated.then_some(&buffer),
        )?;
        allocation.bind_buffer(buffer, 0, len, false)
    }

    /// Allocates `size` bytes of exportable, non-dedicated device memory, imported into CUDA,
    /// in which several [`SharedBuffer`]s of `usage` can live at different offsets.
    pub fn create_allocation(
        &self,
        size: u64,
        usage: BufferUsage,
    ) -> Result<Arc<SharedAllocation>> {
        let usage = usage | transfer_usage();
        // A probe buffer tells which memory types buffers of this usage may use.
        let probe = Buffer::new(&self.vulkan, size, usage, true)?;
        let req = probe.requirements();
        if req.requires_dedicated {
            return Err(Error::Unsupported(format!(
                "this device requires dedicated allocations for exportable buffers of usage \
                 {usage:?}: use Bridge::create_buffer, one buffer per allocation"
            )));
        }
        drop(probe);
        SharedAllocation::allocate(self, size, req.memory_type_bits, usage, None)
    }
}

impl Bridge {
    /// The reverse direction: CUDA allocates `len` elements (`cuMemCreate`, exportable as a
    /// POSIX FD), maps them with an accessible virtual address, and Vulkan imports the same
    /// memory (`VkImportMemoryFdInfoKHR`) behind a buffer.
    ///
    /// Importing CUDA-exported memory into Vulkan is outside the Vulkan specification (it
    /// works on NVIDIA's drivers, measured); where the driver refuses, this returns
    /// [`Error::Unsupported`] and frees everything it made.
    pub fn create_buffer_from_cuda<T: bytemuck::Pod>(
        &self,
        len: usize,
        usage: BufferUsage,
    ) -> Result<SharedBuffer<T>> {
        let bytes = layout::bytes_for::<T>(len)?;
        let (granularity, _) = cuda::vmm::allocation_granularity(&self.cuda, true)?;
        let size = layout::align_up(bytes, granularity).ok_or(layout::LayoutError::Overflow {
            offset: bytes,
            size: granularity,
        })?;
        let memory = VmmAllocation::new(&self.cuda, size, true)?;
        let reservation = AddressReservation::new(&self.cuda, size)?;
        let mapping = reservation.map(0, &memory, size)?.enable_access()?;
        let bound = import_into_vulkan(&self.vulkan, &memory, bytes, usage | transfer_usage())?;
        Ok(SharedBuffer::assemble(
            bound,
            CudaSide::Vmm(mapping),
            self.stream.clone(),
            len,
        ))
    }
}

/// Imports a CUDA VMM allocation into Vulkan and binds a buffer of `bytes` and `usage` to it.
pub(crate) fn import_into_vulkan(
    vk: &Arc<VulkanContext>,
    memory: &VmmAllocation,
    bytes: u64,
    usage: vk::BufferUsageFlags,
) -> Result<BoundBuffer> {
    let buffer = Buffer::with_handle_types(
        vk,
        bytes,
        usage,
        crate::handle::MEMORY_HANDLE_TYPE,
        vk::ExternalMemoryFeatureFlags::IMPORTABLE,
    )?;
    let r = buffer.requirements();
    let dedicated = r.requires_dedicated.then_some(&buffer);
    let imported = import_vmm_memory(vk, memory, r.memory_type_bits, dedicated)?;
    buffer.bind(Arc::new(imported), 0)
}

/// Imports a CUDA VMM allocation as Vulkan memory of a device-local type in `type_bits`.
pub(crate) fn import_vmm_memory(
    vk: &Arc<VulkanContext>,
    memory: &VmmAllocation,
    type_bits: u32,
    dedicated: Option<&Buffer>,
) -> Result<DeviceMemory> {
    let handle = memory.export()?;
    // SAFETY: the handle was just exported from `memory`, an allocation of exactly
    // `memory.size()` bytes on the same GPU; only device-local types the caller's buffer
    // accepts are allowed.
    unsafe {
        DeviceMemory::import(vk, handle, memory.size(), type_bits & device_local_types(vk), dedicated)
    }
    .map_err(|e| match e {
        Error::Vulkan { result, .. } => Error::Unsupported(format!(
            "the Vulkan driver refused memory allocated by CUDA ({result}); importing cuMemCreate memory is outside the Vulkan specification"
        )),
        other => other,
    })
}

fn device_local_types(vk: &VulkanContext) -> u32 {
    let p = vk.memory_properties();
    (0..p.memory_type_count)
        .filter(|&i| {
            p.memory_types[i as usize]
                .property_flags
                .contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
        })
        .fold(0, |bits, i| bits | (1 << i))
}

fn transfer_usage() -> vk::BufferUsageFlags {
    vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST
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
    fn allocate(
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
        let fd = memory.export()?;
        // SAFETY: the handle was just exported from `memory`, whose allocation size is
        // `memory.size()` and whose dedicated-ness is `memory.is_dedicated()`; the import keeps
        // `memory` alive through the exporter Arc.
        let imported = unsafe {
            ImportedMemory::import(
                &bridge.cuda,
                fd,
                memory.size(),
                memory.is_dedicated(),
                Some(memory.clone()),
            )
        }?;
        Ok(Arc::new(Self {
            memory,
            imported,
            usage,
            stream: bridge.stream.clone(),
        }))
    }

    /// A typed buffer of `len` elements at byte `offset`, seen by Vulkan and CUDA.
    pub fn buffer<T: bytemuck::Pod>(
        self: &Arc<Self>,
        offset: u64,
        len: usize,
    ) -> Result<SharedBuffer<T>> {
        self.buffer_with(offset, len, false)
    }

    /// As [`Self::buffer`]; with `allow_overlap`, the range may overlap live buffers (the views
    /// then alias: CUDA requires volatile accesses to them).
    pub fn buffer_with<T: bytemuck::Pod>(
        self: &Arc<Self>,
        offset: u64,
        len: usize,
        allow_overlap: bool,
    ) -> Result<SharedBuffer<T>> {
        if self.memory.is_dedicated() {
            return Err(Error::DedicatedHoldsOneBuffer);
        }
        let bytes = layout::bytes_for::<T>(len)?;
        // Check the range before creating anything, so the error names the allocation.
        layout::check_range(offset, bytes, "allocation", self.size())?;
        let buffer = Buffer::new(self.memory.context(), bytes, self.usage, true)?;
        self.bind_buffer(buffer, offset, len, allow_overlap)
    }

    fn bind_buffer<T: bytemuck::Pod>(
        self: &Arc<Self>,
        buffer: Buffer,
        offset: u64,
        len: usize,
        allow_overlap: bool,
    ) -> Result<SharedBuffer<T>> {
        let bytes = buffer.size();
        let options = MapOptions {
            vulkan_alignment: buffer.requirements().alignment,
            allow_overlap,
        };
        // Validate the CUDA mapping rules before binding, so no driver sees a bad request.
        layout::validate_mapping(
            layout::ImportLayout {
                allocation_size: self.imported.size(),
                dedicated: self.imported.is_dedicated(),
            },
            layout::MappingRequest {
                offset,
                size: bytes,
                vulkan_alignment: options.vulkan_alignment,
                allow_overlap: true, // overlap is checked under the lock in `map`
            },
            [],
        )?;
        let bound = buffer.bind(self.memory.clone(), offset)?;
        let mapping = self.imported.map(offset, bytes, options)?;
        let cuda = CudaSide::Imported {
            mapping,
            allocation: self.clone(),
        };
        Ok(SharedBuffer::assemble(
            bound,
            cuda,
            self.stream.clone(),
            len,
        ))
    }

    /// Allocation size in bytes.
    pub fn size(&self) -> u64 {
        self.memory.size()
    }
    /// Whether it is a dedicated allocation (one buffer, at offset 0).
    pub fn is_dedicated(&self) -> bool {
        self.memory.is_dedicated()
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

/// How a shared buffer's memory is seen by CUDA.
enum CudaSide {
    /// Vulkan allocated it; CUDA imported it and maps a range (the usual direction).
    Imported {
        mapping: MappedRange,
        allocation: Arc<SharedAllocation>,
    },
    /// CUDA allocated it (`cuMemCreate`) and maps it; Vulkan imported it (the reverse).
    Vmm(VmmMapping),
}

impl CudaSide {
    fn device_ptr(&self) -> sys::CUdeviceptr {
        match self {
            CudaSide::Imported { mapping, .. } => mapping.device_ptr(),
            CudaSide::Vmm(m) => m.device_ptr(),
        }
    }
}

/// `len` elements of `T` in shared memory, seen as a `vk::Buffer` (descriptors, copies) and as
/// a CUDA device pointer (kernels, cudarc copies). Drop in any order is safe: the buffer
/// keeps its allocation alive, and the allocation's CUDA import keeps the Vulkan memory alive.
///
/// The two APIs do not order their accesses by themselves: finish CUDA work (stream sync or an
/// exported semaphore) before Vulkan reads, and the reverse.
pub struct SharedBuffer<T> {
    bound: BoundBuffer,
    cuda: CudaSide,
    device_ptr: sys::CUdeviceptr,
    stream: Arc<CudaStream>,
    len: usize,
    _element: PhantomData<T>,
}

impl<T> SharedBuffer<T> {
    fn assemble(bound: BoundBuffer, cuda: CudaSide, stream: Arc<CudaStream>, len: usize) -> Self {
        Self {
            device_ptr: cuda.device_ptr(),
            bound,
            cuda,
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
    /// Byte offset inside its allocation (0 for CUDA-allocated buffers).
    pub fn offset(&self) -> u64 {
        match &self.cuda {
            CudaSide::Imported { mapping, .. } => mapping.range().start,
            CudaSide::Vmm(_) => 0,
        }
    }
    /// The Vulkan buffer handle (valid while `self` lives).
    pub fn vk_buffer(&self) -> vk::Buffer {
        self.bound.buffer().handle()
    }
    /// The CUDA device pointer.
    pub fn cuda_ptr(&self) -> sys::CUdeviceptr {
        self.device_ptr
    }
    /// The CUDA device pointer by reference, for `launch_builder(..).arg(buf.kernel_arg())`.
    pub fn kernel_arg(&self) -> &sys::CUdeviceptr {
        &self.device_ptr
    }
    /// The Vulkan-allocated memory it lives in; `None` for buffers CUDA allocated
    /// ([`Bridge::create_buffer_from_cuda`]).
    pub fn allocation(&self) -> Option<&Arc<SharedAllocation>> {
        match &self.cuda {
            CudaSide::Imported { allocation, .. } => Some(allocation),
            CudaSide::Vmm(_) => None,
        }
    }

    /// Copies the buffer to the host through CUDA (on the bridge's stream, then synchronises).
    pub fn cuda_read(&self) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); self.len];
        let stream = &self.stream;
        stream.context().bind_to_thread().cuda("cuCtxSetCurrent")?;
        // SAFETY: `out` has exactly byte_size bytes; the device range is our live mapping.
        unsafe { result::memcpy_dtoh_async(&mut out, self.cuda_ptr(), stream.cu_stream()) }
            .cuda("cuMemcpyDtoHAsync")?;
        stream.synchronize().cuda("cuStreamSynchronize")?;
        Ok(out)
    }

    /// Copies `data` (exactly `len` elements) into the buffer through CUDA, and synchronises.
    pub fn cuda_write(&self, data: &[T]) -> Result<()> {
        if data.len() != self.len {
            return Err(Error::InvalidArgument(format!(
                "cuda_write of {} elements into a buffer of {}",
                data.len(),
                self.len
            )));
        }
        let stream = &self.stream;
        stream.context().bind_to_thread().cuda("cuCtxSetCurrent")?;
        // SAFETY: the device range is our live mapping of exactly data's byte size.
        unsafe { result::memcpy_htod_async(self.cuda_ptr(), data, stream.cu_stream()) }
            .cuda("cuMemcpyHtoDAsync")?;
        stream.synchronize().cuda("cuStreamSynchronize")
    }
}

impl<T> AsVkBuffer for SharedBuffer<T> {
    fn vk_buffer(&self) -> vk::Buffer {
        self.bound.vk_buffer()
    }
    fn vk_size(&self) -> u64 {
        self.bound.vk_size()
    }
    fn vk_context(&self) -> &Arc<VulkanContext> {
        self.bound.vk_context()
    }
}

impl<T> DeviceSlice<T> for SharedBuffer<T> {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

// Shared buffers carry no cudarc events: ordering against Vulkan is explicit (semaphores or
// synchronisation), so the guards returned here do nothing on drop.
impl<T> DevicePtr<T> for SharedBuffer<T> {
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.device_ptr, SyncOnDrop::Sync(None))
    }
}

impl<T> DevicePtrMut<T> for SharedBuffer<T> {
    fn device_ptr_mut<'a>(
        &'a mut self,
        _stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.device_ptr, SyncOnDrop::Sync(None))
    }
}
