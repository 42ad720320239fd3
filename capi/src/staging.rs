//! Staging buffers: pinned host memory that CUDA copies at full speed and Vulkan sees as a
//! buffer.

use std::ffi::c_void;

use cuvk::ash::vk::{self, Handle};
use cuvk::cuda::host::HostAllocFlags;
use cuvk::vulkan::AsVkBuffer;
use cuvk::StagingBuffer;

use crate::bridge::{bridge_of, CuvkBridge};
use crate::error::{desc_out, guard, out, CuvkResult, Failure};
use crate::handle::{insert, remove, with, HandleObject, Kind};

/// Pinned host memory that is also a Vulkan buffer.
pub type CuvkStaging = u64;

/// What a staging buffer is to each API.
#[repr(C)]
pub struct CuvkStagingInfo {
    /// `sizeof(CuvkStagingInfo)`, set by the caller.
    pub struct_size: u32,
    /// The host pointer (pinned).
    pub host_ptr: *mut c_void,
    /// The `VkBuffer` over the same bytes.
    pub vk_buffer: u64,
    /// Size in bytes.
    pub size: u64,
}

/// Creates `size` bytes (rounded up to Vulkan's host-pointer alignment) of pinned host memory
/// that CUDA copies at full speed and Vulkan sees as a buffer. Needs CUDA.
///
/// # Safety
/// `out_staging` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_staging_create(
    bridge: CuvkBridge,
    size: u64,
    out_staging: *mut CuvkStaging,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let out_staging = unsafe { out(out_staging, "out_staging") }?;
        let b = bridge_of(bridge)?;
        let bridge = b.cuda.as_ref().ok_or(Failure::new(
            CuvkResult::CuvkErrorUnsupported,
            "pinned staging memory needs CUDA; the bridge is Vulkan-only",
        ))?;
        let s = StagingBuffer::new(
            bridge,
            size as usize,
            HostAllocFlags::default(),
            vk::BufferUsageFlags::empty(),
        )?;
        *out_staging = insert(s);
        Ok(())
    })
}

/// Fills `info` with the staging buffer's host pointer, `VkBuffer` and size.
///
/// # Safety
/// `info` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_staging_info(
    staging: CuvkStaging,
    info: *mut CuvkStagingInfo,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let info = unsafe { desc_out(info, "info") }?;
        with(staging, |s: &mut StagingBuffer| {
            info.host_ptr = s.host_ptr().cast();
            info.vk_buffer = s.vk_buffer().as_raw();
            info.size = s.byte_size() as u64;
            Ok(())
        })
    })
}

/// Destroys a staging buffer.
#[no_mangle]
pub extern "C" fn cuvk_staging_destroy(staging: CuvkStaging) -> CuvkResult {
    guard(|| remove::<StagingBuffer>(staging))
}

impl HandleObject for StagingBuffer {
    const KIND: Kind = Kind::Staging;
}

crate::error::c_structs!(CuvkStagingInfo);
