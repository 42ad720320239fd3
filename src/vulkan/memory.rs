//! Vulkan buffers and device memory: exportable, imported, and host-visible for staging.

use std::sync::{Arc, Mutex};

use ash::vk;

use crate::error::{Capability, DeviceObject, MemoryError};
use crate::error::{Error, Importer, Result, VkResultExt};
use crate::platform::{self, OwnedExternalHandle, MEMORY_EXTENSION, MEMORY_HANDLE_TYPE};
use crate::rules::layout::{self, AlignmentRule};
use crate::vulkan::VulkanContext;

/// Whether a buffer or image gets a dedicated allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Dedicated {
    /// Exactly when `VkMemoryDedicatedRequirements` prefers or requires it.
    #[default]
    Auto,
    /// Always (the CUDA import then maps only at offset 0).
    Always,
    /// Only where Vulkan requires it: other buffers (an importer's own, an engine's alias) may
    /// then be bound to the memory, which a dedicated allocation forbids.
    WhenRequired,
}

/// The one resource a dedicated allocation was made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dedication {
    Buffer(vk::Buffer),
    Image(vk::Image),
}

/// Whether a buffer's memory is shared with another API or device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExternalUse {
    /// An ordinary buffer.
    #[default]
    None,
    /// Its memory will be exported (to CUDA): created with `VkExternalMemoryBufferCreateInfo`
    /// for this platform's handle type, after checking the device can export such a buffer.
    Export,
    /// Its memory will be imported (from CUDA or another device), after checking the device
    /// can import such a buffer.
    Import,
}

/// How to create a [`Buffer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferDesc {
    /// Size in bytes (at least 1).
    pub size: u64,
    /// Usage flags.
    pub usage: vk::BufferUsageFlags,
    /// Whether its memory is shared.
    pub external: ExternalUse,
}

/// What a buffer needs from the memory it is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferRequirements {
    /// `VkMemoryRequirements::size`.
    pub size: u64,
    /// `VkMemoryRequirements::alignment`: every bind offset must be a multiple.
    pub alignment: u64,
    /// `VkMemoryRequirements::memoryTypeBits`.
    pub memory_type_bits: u32,
    /// `VkMemoryDedicatedRequirements::prefersDedicatedAllocation`.
    pub prefers_dedicated: bool,
    /// `VkMemoryDedicatedRequirements::requiresDedicatedAllocation`, or the external memory
    /// properties report `DEDICATED_ONLY` for this buffer.
    pub requires_dedicated: bool,
}

/// A `vk::Buffer` with its size, usage and external handle types, destroyed on drop.
pub struct Buffer {
    ctx: Arc<VulkanContext>,
    buffer: vk::Buffer,
    size: u64,
    usage: vk::BufferUsageFlags,
    external: vk::ExternalMemoryHandleTypeFlags,
    requirements: BufferRequirements,
}

impl Buffer {
    /// Creates a buffer as `desc` says.
    pub fn new(ctx: &Arc<VulkanContext>, desc: BufferDesc) -> Result<Self> {
        let (external, needed) = match desc.external {
            ExternalUse::None => (
                vk::ExternalMemoryHandleTypeFlags::empty(),
                vk::ExternalMemoryFeatureFlags::empty(),
            ),
            ExternalUse::Export => (
                MEMORY_HANDLE_TYPE,
                vk::ExternalMemoryFeatureFlags::EXPORTABLE,
            ),
            ExternalUse::Import => (
                MEMORY_HANDLE_TYPE,
                vk::ExternalMemoryFeatureFlags::IMPORTABLE,
            ),
        };
        Self::with_handle_types(ctx, desc.size, desc.usage, external, needed)
    }

    pub(crate) fn with_handle_types(
        ctx: &Arc<VulkanContext>,
        size: u64,
        usage: vk::BufferUsageFlags,
        external: vk::ExternalMemoryHandleTypeFlags,
        needed: vk::ExternalMemoryFeatureFlags,
    ) -> Result<Self> {
        if size == 0 {
            return Err(layout::LayoutError::ZeroSize { offset: 0 }.into());
        }
        check_usage_features(ctx, usage)?;
        let exportable = !external.is_empty();
        let mut dedicated_only = false;
        if exportable {
            let features =
                external_buffer_features(ctx, vk::BufferCreateFlags::empty(), usage, external)?;
            if !features.contains(needed) {
                return Err(Capability::ExternalBuffer {
                    usage,
                    handle_type: external,
                    offered: features,
                    needed,
                }
                .into());
            }
            dedicated_only = features.contains(vk::ExternalMemoryFeatureFlags::DEDICATED_ONLY);
        }
        Self::create(ctx, size, usage, external, dedicated_only)
    }

    /// An exportable buffer of a usage whose export support was already checked (a pool's
    /// probe buffer of the same usage): the answer of
    /// `vkGetPhysicalDeviceExternalBufferProperties` depends only on the usage, flags and
    /// handle type, so it is not asked again per buffer. `dedicated_only` is what that query
    /// said about `DEDICATED_ONLY`.
    pub(crate) fn new_export_unchecked(
        ctx: &Arc<VulkanContext>,
        size: u64,
        usage: vk::BufferUsageFlags,
        dedicated_only: bool,
    ) -> Result<Self> {
        if size == 0 {
            return Err(layout::LayoutError::ZeroSize { offset: 0 }.into());
        }
        Self::create(ctx, size, usage, MEMORY_HANDLE_TYPE, dedicated_only)
    }

    /// `vkCreateBuffer` (size checked non-zero by the callers) and its requirements.
    fn create(
        ctx: &Arc<VulkanContext>,
        size: u64,
        usage: vk::BufferUsageFlags,
        external: vk::ExternalMemoryHandleTypeFlags,
        dedicated_only: bool,
    ) -> Result<Self> {
        check_fits_a_heap(ctx, size)?;
        let exportable = !external.is_empty();
        let mut ext_info = vk::ExternalMemoryBufferCreateInfo::default().handle_types(external);
        let mut info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        if exportable {
            info = info.push_next(&mut ext_info);
        }
        let device = ctx.device();
        // SAFETY: valid device; create info lives across the call.
        let buffer = unsafe { device.create_buffer(&info, None) }.vk("vkCreateBuffer")?;
        let mut dedicated = vk::MemoryDedicatedRequirements::default();
        let mut reqs = vk::MemoryRequirements2::default().push_next(&mut dedicated);
        // SAFETY: the buffer was just created on this device.
        unsafe {
            device.get_buffer_memory_requirements2(
                &vk::BufferMemoryRequirementsInfo2::default().buffer(buffer),
                &mut reqs,
            )
        };
        let r = reqs.memory_requirements;
        Ok(Self {
            ctx: ctx.clone(),
            buffer,
            size,
            usage,
            external,
            requirements: BufferRequirements {
                size: r.size,
                alignment: r.alignment,
                memory_type_bits: r.memory_type_bits,
                prefers_dedicated: dedicated.prefers_dedicated_allocation == vk::TRUE,
                requires_dedicated: dedicated.requires_dedicated_allocation == vk::TRUE
                    || dedicated_only,
            },
        })
    }

    /// The raw handle.
    pub fn handle(&self) -> vk::Buffer {
        self.buffer
    }
    /// Size in bytes it was created with.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// Usage flags it was created with.
    pub fn usage(&self) -> vk::BufferUsageFlags {
        self.usage
    }
    /// External handle types it was created with (empty when not exportable).
    pub fn external_handle_types(&self) -> vk::ExternalMemoryHandleTypeFlags {
        self.external
    }
    /// Its memory requirements.
    pub fn requirements(&self) -> BufferRequirements {
        self.requirements
    }
    /// The context it was created on.
    pub fn context(&self) -> &Arc<VulkanContext> {
        &self.ctx
    }

    /// Checks every rule of `vkBindBufferMemory` that the bridge can see, then binds.
    pub fn bind(self, memory: Arc<DeviceMemory>, offset: u64) -> Result<BoundBuffer> {
        self.validate_bind(&memory, offset)?;
        // SAFETY: validated just above.
        unsafe { self.bind_unchecked(memory, offset) }
    }

    /// Binds without checking.
    ///
    /// # Safety
    /// [`Self::validate_bind`] must have accepted `memory` and `offset`.
    pub(crate) unsafe fn bind_unchecked(
        self,
        memory: Arc<DeviceMemory>,
        offset: u64,
    ) -> Result<BoundBuffer> {
        // SAFETY: validated by the caller: same device, offset aligned and in range, allowed
        // memory type, compatible handle types, dedicated rules respected; the buffer is unbound.
        unsafe {
            self.ctx
                .device()
                .bind_buffer_memory(self.buffer, memory.memory, offset)
        }
        .vk("vkBindBufferMemory")?;
        let device_address = self
            .usage
            .contains(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS)
            .then(|| {
                let info = vk::BufferDeviceAddressInfo::default().buffer(self.buffer);
                // SAFETY: a buffer created with SHADER_DEVICE_ADDRESS (so the feature is on),
                // bound just above to memory allocated with DEVICE_ADDRESS.
                unsafe { self.ctx.device().get_buffer_device_address(&info) }
            });
        Ok(BoundBuffer {
            buffer: self,
            memory,
            offset,
            device_address,
            kept: Mutex::new(Vec::new()),
        })
    }

    /// Binds at a [`Placement`](crate::rules::layout::Placement) (range and alignment proven
    /// for this buffer's requirements), after the rules that concern the memory itself.
    pub(crate) fn bind_placed(
        self,
        memory: Arc<DeviceMemory>,
        placement: &crate::rules::layout::Placement,
    ) -> Result<BoundBuffer> {
        let r = self.requirements;
        if !placement.suits(r.alignment, r.size)
            || placement.import().allocation_size != memory.size
        {
            // A placement made for another buffer or allocation: check from scratch.
            self.validate_bind(&memory, placement.offset())?;
        } else {
            self.validate_bind_memory(&memory)?;
        }
        // SAFETY: the memory rules checked above; range and alignment proven by the placement.
        unsafe { self.bind_unchecked(memory, placement.offset()) }
    }

    /// Every rule of `vkBindBufferMemory` the bridge can see: same device, dedicated rules,
    /// memory type, offset alignment and range, handle types.
    pub(crate) fn validate_bind(&self, memory: &DeviceMemory, offset: u64) -> Result<()> {
        self.validate_bind_memory(memory)?;
        let r = self.requirements;
        layout::check_aligned("offset", offset, r.alignment, AlignmentRule::VulkanBuffer)?;
        layout::check_range(offset, r.size, "memory", memory.size)?;
        Ok(())
    }

    /// The bind rules that concern the memory, not the offset: same device, dedicated rules,
    /// memory type, device address, handle types.
    fn validate_bind_memory(&self, memory: &DeviceMemory) -> Result<()> {
        if !self.ctx.same_device(&memory.ctx) {
            return Err(Error::WrongDevice {
                object: crate::DeviceObject::Memory,
                owner: crate::DeviceOwner::VulkanDevice,
            });
        }
        let r = self.requirements;
        if let Some(dedicated) = memory.dedicated_to {
            if dedicated != Dedication::Buffer(self.buffer) {
                return Err(MemoryError::DedicatedHoldsOneBuffer.into());
            }
        } else if r.requires_dedicated {
            return Err(MemoryError::DedicatedRequired {
                object: DeviceObject::Buffer,
            }
            .into());
        }
        if r.memory_type_bits & (1 << memory.memory_type_index) == 0 {
            return Err(MemoryError::MemoryTypeNotAllowed {
                object: DeviceObject::Buffer,
                memory_type: memory.memory_type_index,
                type_bits: r.memory_type_bits,
            }
            .into());
        }
        if self
            .usage
            .contains(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS)
            && !memory.device_address
        {
            return Err(MemoryError::DeviceAddressNotAllocated.into());
        }
        if !memory.handle_types.is_empty() && !self.external.intersects(memory.handle_types) {
            return Err(MemoryError::NotExportable {
                what: crate::Exportable::Buffer,
            }
            .into());
        }
        Ok(())
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: we created the buffer; GPU work using it was waited for by its users.
        unsafe { self.ctx.device().destroy_buffer(self.buffer, None) };
    }
}

/// Usage bits that need a device feature: `SHADER_DEVICE_ADDRESS` needs `bufferDeviceAddress`.
/// Refuses a buffer larger than every memory heap of the device before `vkCreateBuffer` sees
/// it: drivers answer absurd sizes (`u64::MAX`, a petabyte) with a bare allocation failure, or
/// worse.
pub(crate) fn check_fits_a_heap(ctx: &VulkanContext, size: u64) -> Result<()> {
    let props = ctx.memory_properties();
    let count = (props.memory_heap_count as usize).min(props.memory_heaps.len());
    let largest_heap = props.memory_heaps[..count]
        .iter()
        .map(|h| h.size)
        .max()
        .unwrap_or(0);
    if size > largest_heap {
        return Err(MemoryError::BufferExceedsHeaps { size, largest_heap }.into());
    }
    Ok(())
}

/// The usage of every shared buffer cuvk creates: the caller's `usage`, plus `TRANSFER_SRC` and
/// `TRANSFER_DST` (every shared buffer can be copied and filled) and, where the device has
/// `bufferDeviceAddress` enabled, `SHADER_DEVICE_ADDRESS` (so one buffer serves CUDA kernels
/// in the CUDA context and in Vulkan queues alike). `Bridge::create_buffer`, shared
/// allocations, pools and the wgpu integration all create their buffers with it.
pub fn shared_buffer_usage(
    ctx: &VulkanContext,
    usage: vk::BufferUsageFlags,
) -> vk::BufferUsageFlags {
    let address = if ctx.info().capabilities.buffer_device_address {
        vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS
    } else {
        vk::BufferUsageFlags::empty()
    };
    usage | vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST | address
}

pub(crate) fn check_usage_features(ctx: &VulkanContext, usage: vk::BufferUsageFlags) -> Result<()> {
    if usage.contains(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS)
        && !ctx.info().capabilities.buffer_device_address
    {
        return Err(Error::FeatureNotEnabled {
            feature: "bufferDeviceAddress",
            needed_for: "a buffer with SHADER_DEVICE_ADDRESS usage",
        });
    }
    Ok(())
}

/// Asks the device what it can do with an external buffer of this usage.
pub(crate) fn external_buffer_features(
    ctx: &VulkanContext,
    flags: vk::BufferCreateFlags,
    usage: vk::BufferUsageFlags,
    handle_type: vk::ExternalMemoryHandleTypeFlags,
) -> Result<vk::ExternalMemoryFeatureFlags> {
    let info = vk::PhysicalDeviceExternalBufferInfo::default()
        .flags(flags)
        .usage(usage)
        .handle_type(handle_type);
    let mut props = vk::ExternalBufferProperties::default();
    // SAFETY: valid physical device; structs live across the call.
    unsafe {
        ctx.instance()
            .get_physical_device_external_buffer_properties(
                ctx.physical_device(),
                &info,
                &mut props,
            )
    };
    Ok(props.external_memory_properties.external_memory_features)
}

/// A `vk::DeviceMemory` allocation, freed on drop.
pub struct DeviceMemory {
    ctx: Arc<VulkanContext>,
    memory: vk::DeviceMemory,
    size: u64,
    memory_type_index: u32,
    dedicated_to: Option<Dedication>,
    handle_types: vk::ExternalMemoryHandleTypeFlags,
    mapped: Option<std::ptr::NonNull<u8>>,
    /// Allocated with `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT`: buffers with device addresses
    /// may be bound to it.
    device_address: bool,
}

// SAFETY: the mapped pointer is only dereferenced through &mut self or by copying
// out under &self after GPU work was waited for; the handles are plain Vulkan handles.
unsafe impl Send for DeviceMemory {}
// SAFETY: see Send; shared access never writes through the mapping.
unsafe impl Sync for DeviceMemory {}

/// How to allocate a [`DeviceMemory`].
#[derive(Debug, Clone, Copy)]
pub struct AllocateInfo {
    /// Allocation size in bytes.
    pub size: u64,
    /// Allowed memory types.
    pub memory_type_bits: u32,
    /// Required properties.
    pub properties: vk::MemoryPropertyFlags,
    /// Allocate with `VkExportMemoryAllocateInfo` for this platform's handle type.
    pub exportable: bool,
}

impl DeviceMemory {
    /// Allocates memory; with `dedicated`, as a dedicated allocation for that buffer.
    /// Host-visible memory is mapped for its whole life.
    pub fn allocate(
        ctx: &Arc<VulkanContext>,
        info: AllocateInfo,
        dedicated: Option<&Buffer>,
    ) -> Result<Self> {
        if let Some(b) = dedicated {
            if !ctx.same_device(&b.ctx) {
                return Err(Error::WrongDevice {
                    object: crate::DeviceObject::Buffer,
                    owner: crate::DeviceOwner::VulkanDevice,
                });
            }
            if info.exportable && b.external.is_empty() {
                return Err(MemoryError::NotExportable {
                    what: crate::Exportable::Buffer,
                }
                .into());
            }
            // VUID-VkMemoryDedicatedAllocateInfo-buffer-02965: exactly the buffer's size.
            if info.size != b.requirements.size {
                return Err(MemoryError::DedicatedSize {
                    required: b.requirements.size,
                    given: info.size,
                }
                .into());
            }
        }
        Self::allocate_dedicated(ctx, info, dedicated.map(|b| Dedication::Buffer(b.buffer)))
    }

    /// Allocates memory, dedicated to one buffer or image when `dedicated` says so (the
    /// caller checked that resource's handle types suit `info.exportable`).
    pub(crate) fn allocate_dedicated(
        ctx: &Arc<VulkanContext>,
        info: AllocateInfo,
        dedicated: Option<Dedication>,
    ) -> Result<Self> {
        if info.size == 0 {
            return Err(layout::LayoutError::ZeroSize { offset: 0 }.into());
        }
        let type_index = memory_type_for(ctx, &info)?;
        let handle_types = if info.exportable {
            MEMORY_HANDLE_TYPE
        } else {
            vk::ExternalMemoryHandleTypeFlags::empty()
        };
        let mut export = vk::ExportMemoryAllocateInfo::default().handle_types(handle_types);
        let mut dedicated_info = dedicated_allocate_info(dedicated);
        let mut alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(info.size)
            .memory_type_index(type_index);
        if info.exportable {
            alloc = alloc.push_next(&mut export);
        }
        if dedicated.is_some() {
            alloc = alloc.push_next(&mut dedicated_info);
        }
        // Where the device has bufferDeviceAddress, every allocation can back buffers with
        // device addresses (what CUDA kernels in Vulkan queues take as pointers).
        let mut flags =
            vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        if ctx.info().capabilities.buffer_device_address {
            alloc = alloc.push_next(&mut flags);
        }
        // SAFETY: valid device; the chain lives across the call.
        let memory =
            unsafe { ctx.device().allocate_memory(&alloc, None) }.vk("vkAllocateMemory")?;
        let mut me = Self::finish(ctx, memory, info.size, type_index, dedicated, handle_types)?;
        me.device_address = ctx.info().capabilities.buffer_device_address;
        Ok(me)
    }

    /// Imports memory another allocation exported (the reverse of [`Self::export`]) as a new
    /// Vulkan allocation, optionally dedicated to `dedicated`.
    ///
    /// The handle passes to the Vulkan driver on success (as for CUDA on Unix).
    ///
    /// # Safety
    /// `handle` must refer to a memory object of at least `size` bytes exported with this
    /// platform's opaque handle type from a device with the same `deviceUUID` and `driverUUID`,
    /// and `memory_type_bits` must only allow types that such memory can be imported as.
    pub unsafe fn import(
        ctx: &Arc<VulkanContext>,
        handle: OwnedExternalHandle,
        size: u64,
        memory_type_bits: u32,
        dedicated: Option<&Buffer>,
    ) -> Result<Self> {
        // SAFETY: forwarded from the caller.
        unsafe {
            Self::import_dedicated(
                ctx,
                handle,
                size,
                memory_type_bits,
                dedicated.map(|b| Dedication::Buffer(b.buffer)),
            )
        }
    }

    /// As [`Self::import`], dedicated to a buffer or an image.
    ///
    /// # Safety
    /// As [`Self::import`].
    pub(crate) unsafe fn import_dedicated(
        ctx: &Arc<VulkanContext>,
        handle: OwnedExternalHandle,
        size: u64,
        memory_type_bits: u32,
        dedicated: Option<Dedication>,
    ) -> Result<Self> {
        if size == 0 {
            return Err(layout::LayoutError::ZeroSize { offset: 0 }.into());
        }
        let type_index = ctx
            .find_memory_type(memory_type_bits, vk::MemoryPropertyFlags::empty())
            .ok_or(MemoryError::NoMemoryType {
                type_bits: memory_type_bits,
                required: vk::MemoryPropertyFlags::empty(),
                exportable: false,
            })?;
        let mut dedicated_info = dedicated_allocate_info(dedicated);
        let memory = import_platform(
            ctx,
            handle,
            size,
            type_index,
            dedicated.is_some().then_some(&mut dedicated_info),
        )?;
        let mut me = Self::finish(ctx, memory, size, type_index, dedicated, MEMORY_HANDLE_TYPE)?;
        me.device_address = ctx.info().capabilities.buffer_device_address;
        Ok(me)
    }

    /// The resource a dedicated allocation was made for.
    pub(crate) fn dedicated_to(&self) -> Option<Dedication> {
        self.dedicated_to
    }

    /// The external handle types it was allocated or imported with (empty when neither).
    pub fn handle_types(&self) -> vk::ExternalMemoryHandleTypeFlags {
        self.handle_types
    }

    pub(crate) fn finish(
        ctx: &Arc<VulkanContext>,
        memory: vk::DeviceMemory,
        size: u64,
        memory_type_index: u32,
        dedicated: Option<Dedication>,
        handle_types: vk::ExternalMemoryHandleTypeFlags,
    ) -> Result<Self> {
        let mut me = Self {
            ctx: ctx.clone(),
            memory,
            size,
            memory_type_index,
            dedicated_to: dedicated,
            handle_types,
            mapped: None,
            device_address: false,
        };
        let flags = ctx.memory_properties().memory_types[memory_type_index as usize].property_flags;
        if flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE) {
            // SAFETY: host-visible memory of this device, not mapped yet; whole range.
            let ptr = unsafe {
                ctx.device()
                    .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
            }
            .vk("vkMapMemory")?; // `me` frees the memory on this error path
            me.mapped = std::ptr::NonNull::new(ptr.cast());
        }
        Ok(me)
    }

    /// Exports a new OS handle to this memory (each call makes a new one, owned by the caller).
    pub fn export(&self) -> Result<OwnedExternalHandle> {
        if !self.handle_types.contains(MEMORY_HANDLE_TYPE) {
            return Err(MemoryError::NotExportable {
                what: crate::Exportable::Memory,
            }
            .into());
        }
        let loader = self
            .ctx
            .ext
            .memory
            .as_ref()
            .ok_or_else(|| Error::MissingExtension {
                extension: MEMORY_EXTENSION.to_string_lossy().into_owned(),
                state: self.ctx.extension_state(MEMORY_EXTENSION),
                needed_for: "exporting memory",
            })?;
        // SAFETY: our live allocation, allocated exportable as this platform's type (checked).
        unsafe { platform::vk_export_memory(loader, self.memory) }
    }
    /// What a CUDA import of this memory must be told ([`crate::cuda::ImportedMemory::import`]):
    /// its allocation size, and whether it is a dedicated allocation.
    pub fn import_layout(&self) -> crate::rules::layout::ImportLayout {
        crate::rules::layout::ImportLayout {
            allocation_size: self.size(),
            dedicated: self.is_dedicated(),
        }
    }

    /// The raw handle.
    pub fn handle(&self) -> vk::DeviceMemory {
        self.memory
    }
    /// Allocation size in bytes (what CUDA must import with).
    pub fn size(&self) -> u64 {
        self.size
    }
    /// Whether this is a dedicated allocation.
    pub fn is_dedicated(&self) -> bool {
        self.dedicated_to.is_some()
    }
    /// The memory type index.
    pub fn memory_type_index(&self) -> u32 {
        self.memory_type_index
    }
    /// The context it belongs to.
    pub fn context(&self) -> &Arc<VulkanContext> {
        &self.ctx
    }
    /// Whether it is host-visible (and so mapped).
    pub fn is_mapped(&self) -> bool {
        self.mapped.is_some()
    }

    /// Copies `dst.len()` bytes at `offset` out of host-visible memory.
    ///
    /// Crate-internal: only owners that exclude GPU writes while they read (a [`HostBuffer`],
    /// whose copy helpers take `&mut`) call it.
    pub(crate) fn read_bytes(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let range = layout::check_range(offset, dst.len() as u64, "memory", self.size)?;
        let ptr = self.mapped.ok_or(MemoryError::NotHostVisible)?;
        // SAFETY: the range is inside the mapping (checked); memory is host-coherent or the
        // caller waited for the GPU; dst does not alias device memory.
        unsafe {
            std::ptr::copy_nonoverlapping(
                ptr.as_ptr().add(range.start as usize),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
        Ok(())
    }

    /// Copies `src` into host-visible memory at `offset`.
    pub(crate) fn write_bytes(&mut self, offset: u64, src: &[u8]) -> Result<()> {
        let range = layout::check_range(offset, src.len() as u64, "memory", self.size)?;
        let ptr = self.mapped.ok_or(MemoryError::NotHostVisible)?;
        // SAFETY: the range is inside the mapping (checked); &mut self excludes other host access.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                ptr.as_ptr().add(range.start as usize),
                src.len(),
            )
        };
        Ok(())
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: we allocated or imported this memory; every CUDA mapping and bound buffer of
        // it holds an Arc to it, so none is alive. Freeing unmaps it implicitly.
        unsafe { self.ctx.device().free_memory(self.memory, None) };
    }
}

/// The first memory type allowed by `info` whose heap can hold `info.size` bytes: a request
/// larger than every candidate heap is refused here, never by `vkAllocateMemory`.
pub(crate) fn memory_type_for(ctx: &VulkanContext, info: &AllocateInfo) -> Result<u32> {
    let props = ctx.memory_properties();
    let candidates: Vec<u32> = (0..props.memory_type_count)
        .filter(|&i| {
            info.memory_type_bits & (1 << i) != 0
                && props.memory_types[i as usize]
                    .property_flags
                    .contains(info.properties)
        })
        .collect();
    let heap_of = |i: u32| props.memory_types[i as usize].heap_index;
    let heap_size = |i: u32| props.memory_heaps[heap_of(i) as usize].size;
    match candidates.iter().find(|&&i| info.size <= heap_size(i)) {
        Some(&i) => Ok(i),
        None => match candidates.first() {
            Some(&i) => Err(MemoryError::ExceedsHeap {
                size: info.size,
                memory_type: i,
                heap_index: heap_of(i),
                heap_size: heap_size(i),
            }
            .into()),
            None => Err(MemoryError::NoMemoryType {
                type_bits: info.memory_type_bits,
                required: info.properties,
                exportable: info.exportable,
            }
            .into()),
        },
    }
}

/// The `VkMemoryDedicatedAllocateInfo` naming `dedicated` (null handles when none).
fn dedicated_allocate_info(
    dedicated: Option<Dedication>,
) -> vk::MemoryDedicatedAllocateInfo<'static> {
    let info = vk::MemoryDedicatedAllocateInfo::default();
    match dedicated {
        Some(Dedication::Buffer(b)) => info.buffer(b),
        Some(Dedication::Image(i)) => info.image(i),
        None => info,
    }
}

/// `vkAllocateMemory` importing `handle`; the handle's ownership follows the platform rule.
fn import_platform(
    ctx: &VulkanContext,
    handle: OwnedExternalHandle,
    size: u64,
    type_index: u32,
    dedicated: Option<&mut vk::MemoryDedicatedAllocateInfo<'_>>,
) -> Result<vk::DeviceMemory> {
    platform::import_with(handle, Importer::Vulkan, |raw| {
        let mut import = platform::vk_import_memory_info(raw);
        let mut alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(size)
            .memory_type_index(type_index)
            .push_next(&mut import);
        if let Some(d) = dedicated {
            alloc = alloc.push_next(d);
        }
        // As for allocations: imported memory can back buffers with device addresses too (a
        // buffer whose usage has SHADER_DEVICE_ADDRESS needs memory allocated with the flag).
        let mut flags =
            vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        if ctx.info().capabilities.buffer_device_address {
            alloc = alloc.push_next(&mut flags);
        }
        // SAFETY: the caller of DeviceMemory::import promised the handle refers to compatible
        // memory of at least `size` bytes.
        unsafe { ctx.device().allocate_memory(&alloc, None) }.vk("vkAllocateMemory(import)")
    })
}

/// A buffer bound to memory it keeps alive.
pub struct BoundBuffer {
    buffer: Buffer,
    memory: Arc<DeviceMemory>,
    offset: u64,
    device_address: Option<u64>,
    /// What must outlive the buffer's last holder: dropped after the `VkBuffer` is destroyed
    /// (field order), e.g. the pool range or the CUDA mapping of a shared buffer whose
    /// `Arc<BoundBuffer>` a wgpu buffer or a frame pacer still holds.
    kept: Mutex<Vec<Box<dyn std::any::Any + Send + Sync>>>,
}

impl BoundBuffer {
    /// Keeps `what` until this buffer is dropped (by its last holder), after its `VkBuffer`.
    pub(crate) fn keep_until_dropped(&self, what: Box<dyn std::any::Any + Send + Sync>) {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(what);
    }

    /// An exportable buffer of `size` bytes in its own exportable allocation with
    /// `properties`, dedicated exactly when the driver prefers or requires it.
    pub fn new_exportable(
        ctx: &Arc<VulkanContext>,
        size: u64,
        usage: vk::BufferUsageFlags,
        properties: vk::MemoryPropertyFlags,
    ) -> Result<Self> {
        let buffer = Buffer::new(
            ctx,
            BufferDesc {
                size,
                usage,
                external: ExternalUse::Export,
            },
        )?;
        let r = buffer.requirements();
        let dedicated = r.requires_dedicated || r.prefers_dedicated;
        let memory = DeviceMemory::allocate(
            ctx,
            AllocateInfo {
                size: r.size,
                memory_type_bits: r.memory_type_bits,
                properties,
                exportable: true,
            },
            dedicated.then_some(&buffer),
        )?;
        buffer.bind(Arc::new(memory), 0)
    }

    /// Imports `source`'s memory into `ctx` (the same or another `VkDevice` on the same
    /// physical device and driver) and binds a new buffer of the same size and usage to it.
    pub fn import_from(ctx: &Arc<VulkanContext>, source: &BoundBuffer) -> Result<Self> {
        let (from, to) = (source.buffer.ctx.info(), ctx.info());
        if from.device_uuid != to.device_uuid || from.driver_uuid != to.driver_uuid {
            return Err(Error::WrongDevice {
                object: crate::DeviceObject::Memory,
                owner: crate::DeviceOwner::PhysicalDevice,
            });
        }
        let handle = source.memory.export()?;
        let buffer = Buffer::new(
            ctx,
            BufferDesc {
                size: source.buffer.size,
                usage: source.buffer.usage,
                external: ExternalUse::Import,
            },
        )?;
        let type_bits =
            buffer.requirements().memory_type_bits & (1 << source.memory.memory_type_index);
        let dedicated = source.memory.is_dedicated().then_some(&buffer);
        // SAFETY: the handle was just exported from `source`'s memory, of exactly that size,
        // on a device with the same UUIDs (checked), as the same memory type.
        let memory =
            unsafe { DeviceMemory::import(ctx, handle, source.memory.size, type_bits, dedicated) }?;
        buffer.bind(Arc::new(memory), 0)
    }

    /// The buffer.
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }
    /// The memory it is bound to.
    pub fn memory(&self) -> &Arc<DeviceMemory> {
        &self.memory
    }
    /// Bind offset in the memory.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// The buffer's device address (`vkGetBufferDeviceAddress`), where it was created with
    /// `SHADER_DEVICE_ADDRESS` usage.
    pub fn device_address(&self) -> Option<u64> {
        self.device_address
    }
}

/// Anything that is a live `vk::Buffer` of a known size on a known device: what the safe
/// command helpers accept, so they never see a destroyed handle.
///
/// # Safety
/// The safe helpers record GPU reads and writes from these answers alone, so an implementation
/// must guarantee, for as long as `&self` is borrowed: `vk_buffer` is a live buffer created
/// on `vk_context`'s device, bound to memory, of at least `vk_size` bytes; and a GPU write to
/// it cannot change memory a live Rust reference points at unless `&mut self` is borrowed.
pub unsafe trait AsVkBuffer {
    /// The buffer handle (valid while `self` lives).
    fn vk_buffer(&self) -> vk::Buffer;
    /// Its size in bytes.
    fn vk_size(&self) -> u64;
    /// The context that owns it.
    fn vk_context(&self) -> &Arc<VulkanContext>;
    /// Its usage, where known: the copy helpers check `TRANSFER_SRC` / `TRANSFER_DST` with it.
    fn vk_usage(&self) -> Option<vk::BufferUsageFlags> {
        None
    }
    /// What keeps the buffer and its memory alive after `self` is gone, where there is such
    /// a thing: the one-shot helpers ([`VulkanContext::copy_buffer`]) park it when they stop
    /// waiting for their submission, so that the GPU never uses a freed buffer. `None` (the
    /// default): the helpers wait for their submission without bound.
    fn vk_keep_alive(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        None
    }
}

/// Implements [`AsVkBuffer`] for a type that wraps another buffer, every answer its field's
/// (`keep_alive` overrides what keeps it alive, where the wrapper holds more than the field).
/// The one delegation for the wrappers (pooled, host, host-imported, shared, staging buffers).
macro_rules! delegate_as_vk_buffer {
    ([$($gen:tt)*] $ty:ty => $field:ident $(, keep_alive: |$me:ident| $keep:expr)?) => {
        // SAFETY: every answer is the wrapped buffer's, which is an `AsVkBuffer` (its
        // guarantees hold while the wrapper, which owns it, is borrowed); host views of its
        // memory are only lent through `&self` methods that the `&mut` GPU-write helpers
        // exclude.
        unsafe impl $($gen)* $crate::vulkan::AsVkBuffer for $ty {
            fn vk_buffer(&self) -> ash::vk::Buffer {
                self.$field.vk_buffer()
            }
            fn vk_size(&self) -> u64 {
                self.$field.vk_size()
            }
            fn vk_context(&self) -> &std::sync::Arc<$crate::vulkan::VulkanContext> {
                self.$field.vk_context()
            }
            fn vk_usage(&self) -> Option<ash::vk::BufferUsageFlags> {
                self.$field.vk_usage()
            }
            $crate::vulkan::delegate_as_vk_buffer!(@keep self.$field $(, |$me| $keep)?);
        }
    };
    (@keep self.$field:ident) => {
        fn vk_keep_alive(&self) -> Option<std::sync::Arc<dyn std::any::Any + Send + Sync>> {
            self.$field.vk_keep_alive()
        }
    };
    (@keep self.$field:ident, |$me:ident| $keep:expr) => {
        fn vk_keep_alive(&self) -> Option<std::sync::Arc<dyn std::any::Any + Send + Sync>> {
            let $me = self;
            $keep
        }
    };
}
pub(crate) use delegate_as_vk_buffer;

/// Refuses a buffer whose known usage lacks `needed` for `command` (with the rule's VUID).
pub(crate) fn check_buffer_usage(
    buffer: &dyn AsVkBuffer,
    command: &'static str,
    object: &'static str,
    needed: vk::BufferUsageFlags,
    vuid: &'static str,
) -> Result<()> {
    match buffer.vk_usage() {
        Some(have) if !have.contains(needed) => Err(MemoryError::MissingBufferUsage {
            command,
            object,
            needed,
            have,
            vuid,
        }
        .into()),
        _ => Ok(()),
    }
}

// SAFETY: the handle is owned by this value (destroyed only on its drop), created on the
// context it names with the size or description it reports; host views of its memory are
// only lent through `&self` methods that the `&mut` GPU-write helpers exclude.
unsafe impl AsVkBuffer for BoundBuffer {
    fn vk_buffer(&self) -> vk::Buffer {
        self.buffer.buffer
    }
    fn vk_size(&self) -> u64 {
        self.buffer.size
    }
    fn vk_context(&self) -> &Arc<VulkanContext> {
        &self.buffer.ctx
    }
    fn vk_usage(&self) -> Option<vk::BufferUsageFlags> {
        Some(self.buffer.usage)
    }
}

/// What the host does with a [`HostBuffer`]'s memory: it picks the memory type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HostAccess {
    /// The host writes, the GPU reads: any host-visible coherent memory (write-combined
    /// memory, which streams writes well, included).
    Upload,
    /// The host reads what the GPU wrote (and may write too): host-cached memory where the
    /// device has it — reads of uncached, write-combined memory are many times slower — else
    /// any host-visible coherent memory.
    Readback,
}

/// A host-visible, host-coherent buffer for reading results back and uploading inputs.
pub struct HostBuffer {
    /// Shared only with a one-shot copy that stopped waiting (parked until it has run):
    /// [`Self::write`] is refused meanwhile.
    bound: Arc<BoundBuffer>,
    cached: bool,
}

impl HostBuffer {
    /// Creates a host-visible coherent buffer of `size` bytes usable as a transfer source and
    /// destination (and with `extra_usage`), for uploads ([`HostAccess::Upload`]).
    pub fn new(
        ctx: &Arc<VulkanContext>,
        size: u64,
        extra_usage: vk::BufferUsageFlags,
    ) -> Result<Self> {
        Self::with_access(ctx, size, extra_usage, HostAccess::Upload)
    }

    /// As [`Self::new`], with memory chosen for `access` (host-cached for
    /// [`HostAccess::Readback`] where the device has it).
    pub fn with_access(
        ctx: &Arc<VulkanContext>,
        size: u64,
        extra_usage: vk::BufferUsageFlags,
        access: HostAccess,
    ) -> Result<Self> {
        let usage =
            vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST | extra_usage;
        let buffer = Buffer::new(
            ctx,
            BufferDesc {
                size,
                usage,
                external: ExternalUse::None,
            },
        )?;
        let r = buffer.requirements();
        let coherent =
            vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let cached = coherent | vk::MemoryPropertyFlags::HOST_CACHED;
        let cached = access == HostAccess::Readback
            && ctx.find_memory_type(r.memory_type_bits, cached).is_some();
        let properties = if cached {
            coherent | vk::MemoryPropertyFlags::HOST_CACHED
        } else {
            coherent
        };
        let memory = DeviceMemory::allocate(
            ctx,
            AllocateInfo {
                size: r.size,
                memory_type_bits: r.memory_type_bits,
                properties,
                exportable: false,
            },
            r.requires_dedicated.then_some(&buffer),
        )?;
        Ok(Self {
            bound: Arc::new(buffer.bind(Arc::new(memory), 0)?),
            cached,
        })
    }

    /// Whether the memory is host-cached.
    pub fn is_cached(&self) -> bool {
        self.cached
    }

    /// Reads the whole buffer as elements of `T` (its size must be whole elements).
    pub fn read<T: bytemuck::Pod>(&self) -> Result<Vec<T>> {
        let n = layout::elements_in::<T>(self.bound.buffer.size)? as usize;
        let mut out = vec![T::zeroed(); n];
        self.bound
            .memory
            .read_bytes(self.bound.offset, bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }

    /// Writes `data` at the start of the buffer.
    pub fn write<T: bytemuck::Pod>(&mut self, data: &[T]) -> Result<()> {
        let bound = Arc::get_mut(&mut self.bound).ok_or(MemoryError::MemoryShared)?;
        let offset = bound.offset;
        let memory = Arc::get_mut(&mut bound.memory).ok_or(MemoryError::MemoryShared)?;
        memory.write_bytes(offset, bytemuck::cast_slice(data))
    }
}

delegate_as_vk_buffer!([] HostBuffer => bound, keep_alive: |b| Some(b.bound.clone()));
