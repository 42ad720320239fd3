//! Host memory imported into Vulkan with `VK_EXT_external_memory_host`: one region that is a
//! Vulkan buffer (copy source/target) and, when it is CUDA-pinned memory, a CUDA copy target
//! at once — staging between the APIs with no extra copy.

use std::marker::PhantomData;
use std::sync::Arc;

use ash::vk;

use crate::error::MemoryError;
use crate::error::{Error, Result, VkResultExt};
use crate::rules::layout::{self, AlignmentRule};
use crate::vulkan::{BoundBuffer, Buffer, DeviceMemory, VulkanContext};

const HOST: vk::ExternalMemoryHandleTypeFlags =
    vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT;

/// A Vulkan buffer over host memory the caller owns, borrowed for as long as the import lives.
pub struct HostImportedBuffer<'a> {
    bound: BoundBuffer,
    ptr: *const u8,
    len: usize,
    _borrow: PhantomData<&'a mut [u8]>,
}

// SAFETY: holds a unique borrow of the host memory, like &'a mut [u8], plus Vulkan handles.
unsafe impl Send for HostImportedBuffer<'_> {}
// SAFETY: shared access only reads.
unsafe impl Sync for HostImportedBuffer<'_> {}

impl<'a> HostImportedBuffer<'a> {
    /// Imports `memory` as a buffer of `usage` (plus transfer source/destination). Checked
    /// first: the extension is enabled, the memory is non-empty, and its address and size are
    /// multiples of `minImportedHostPointerAlignment`.
    pub fn new(
        ctx: &Arc<VulkanContext>,
        memory: &'a mut [u8],
        usage: vk::BufferUsageFlags,
    ) -> Result<Self> {
        let loader = ctx
            .ext
            .memory_host
            .as_ref()
            .ok_or_else(|| Error::MissingExtension {
                extension: "VK_EXT_external_memory_host".into(),
                state: ctx.extension_state(ash::ext::external_memory_host::NAME),
                needed_for: "importing host memory",
            })?;
        let align = ctx
            .info()
            .min_imported_host_pointer_alignment
            .unwrap_or(4096);
        let (ptr, len) = (memory.as_mut_ptr(), memory.len());
        if len == 0 {
            return Err(layout::LayoutError::ZeroSize { offset: 0 }.into());
        }
        layout::check_aligned(
            "pointer",
            ptr as u64,
            align,
            AlignmentRule::VulkanHostPointer,
        )?;
        layout::check_aligned("size", len as u64, align, AlignmentRule::VulkanHostPointer)?;
        let mut props = vk::MemoryHostPointerPropertiesEXT::default();
        // SAFETY: ptr is a live host allocation of len bytes (borrowed), aligned as required.
        unsafe {
            (loader.fp().get_memory_host_pointer_properties_ext)(
                loader.device(),
                HOST,
                ptr.cast(),
                &mut props,
            )
        }
        .result()
        .vk("vkGetMemoryHostPointerPropertiesEXT")?;
        let usage = usage | vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
        let buffer = Buffer::with_handle_types(
            ctx,
            len as u64,
            usage,
            HOST,
            vk::ExternalMemoryFeatureFlags::IMPORTABLE,
        )?;
        let r = buffer.requirements();
        if r.size > len as u64 {
            return Err(Error::Layout(layout::LayoutError::OutOfBounds {
                offset: 0,
                size: r.size,
                end: r.size,
                container: "imported host memory",
                container_size: len as u64,
            }));
        }
        let type_bits = r.memory_type_bits & props.memory_type_bits;
        let type_index = ctx
            .find_memory_type(type_bits, vk::MemoryPropertyFlags::HOST_VISIBLE)
            .ok_or(MemoryError::NoMemoryType {
                type_bits,
                required: vk::MemoryPropertyFlags::HOST_VISIBLE,
                exportable: false,
            })?;
        let mut import = vk::ImportMemoryHostPointerInfoEXT::default()
            .handle_type(HOST)
            .host_pointer(ptr.cast());
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(len as u64)
            .memory_type_index(type_index)
            .push_next(&mut import);
        // SAFETY: pointer and size checked against the device's alignment; the memory type
        // comes from vkGetMemoryHostPointerPropertiesEXT; the borrow outlives the allocation.
        let raw = unsafe { ctx.device().allocate_memory(&alloc, None) }
            .vk("vkAllocateMemory(host pointer)")?;
        let memory = DeviceMemory::finish(ctx, raw, len as u64, type_index, None, HOST)?;
        Ok(Self {
            bound: buffer.bind(Arc::new(memory), 0)?,
            ptr,
            len,
            _borrow: PhantomData,
        })
    }

    /// The host bytes. Read them only after the GPU work that wrote them completed.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: the borrowed region, alive for 'a; writes by the GPU are complete (caller).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

super::memory::delegate_as_vk_buffer!([] HostImportedBuffer<'_> => bound);
