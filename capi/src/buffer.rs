//! Buffers: device memory that is a `VkBuffer` and, unless the bridge is Vulkan-only, a
//! CUDA pointer.

use cuvk::ash::vk::{self, Handle};
use cuvk::vulkan::{AsVkBuffer, BoundBuffer, PooledBuffer};
use cuvk::{Error, MemoryError, SharedBuffer};

use crate::bridge::{bridge_of, CuvkBridge};
use crate::error::{desc_out, guard, out, CuvkResult};
use crate::handle::{insert, remove, with, HandleObject, Kind};

/// A shared buffer.
pub type CuvkBuffer = u64;

/// What a buffer is to each API.
#[repr(C)]
pub struct CuvkBufferInfo {
    /// `sizeof(CuvkBufferInfo)`, set by the caller.
    pub struct_size: u32,
    /// The `VkBuffer` handle.
    pub vk_buffer: u64,
    /// Size in bytes.
    pub size: u64,
    /// The CUDA device pointer (0 for a Vulkan-only bridge).
    pub cuda_ptr: u64,
}

/// A buffer of a bridge (shared or Vulkan-only) or of a Vulkan-only pool.
pub(crate) enum CBufferKind {
    Shared(SharedBuffer<u8>),
    VulkanOnly(BoundBuffer),
    Pooled(PooledBuffer),
}

/// A buffer behind a handle.
pub(crate) struct CBuffer {
    pub(crate) buffer: CBufferKind,
}

impl HandleObject for CBuffer {
    const KIND: Kind = Kind::Buffer;
}

/// Creates a buffer of `size` bytes with Vulkan usage `vk_usage` (transfer source/destination
/// added), shared with CUDA unless the bridge is Vulkan-only.
///
/// # Safety
/// `out_buffer` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_buffer_create(
    bridge: CuvkBridge,
    size: u64,
    vk_usage: u32,
    out_buffer: *mut CuvkBuffer,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let out_buffer = unsafe { out(out_buffer, "out_buffer") }?;
        let b = bridge_of(bridge)?;
        let usage = vk::BufferUsageFlags::from_raw(vk_usage)
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;
        let len = usize::try_from(size)
            .map_err(|_| Error::from(MemoryError::HostSizeOverflow { bytes: size }))?;
        let buffer = match &b.cuda {
            Some(bridge) => CBufferKind::Shared(bridge.create_buffer::<u8>(len, usage)?),
            None => CBufferKind::VulkanOnly(BoundBuffer::new_exportable(
                &b.vk,
                size,
                usage,
                vk::MemoryPropertyFlags::DEVICE_LOCAL,
            )?),
        };
        *out_buffer = insert(CBuffer { buffer });
        Ok(())
    })
}

/// Fills `info` (whose `struct_size` the caller sets) with the buffer's handles.
///
/// # Safety
/// `info` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_buffer_info(
    buffer: CuvkBuffer,
    info: *mut CuvkBufferInfo,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let info = unsafe { desc_out(info, "info") }?;
        with(buffer, |b: &mut CBuffer| {
            let (vkb, size, ptr) = match &b.buffer {
                CBufferKind::Shared(s) => (s.vk_buffer(), s.byte_size(), s.cuda_ptr()),
                CBufferKind::VulkanOnly(v) => (v.vk_buffer(), v.vk_size(), 0),
                CBufferKind::Pooled(v) => (v.vk_buffer(), v.vk_size(), 0),
            };
            info.vk_buffer = vkb.as_raw();
            info.size = size;
            info.cuda_ptr = ptr;
            Ok(())
        })
    })
}

/// Destroys a buffer (the GPU must be done with it).
#[no_mangle]
pub extern "C" fn cuvk_buffer_destroy(buffer: CuvkBuffer) -> CuvkResult {
    guard(|| remove::<CBuffer>(buffer))
}

crate::error::c_structs!(CuvkBufferInfo);
