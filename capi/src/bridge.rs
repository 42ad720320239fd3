//! Bridges: the engine's Vulkan device wrapped (and the CUDA device with the same UUID).

use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;

use cuvk::ash::vk::{self, Handle};
use cuvk::vulkan::{ExistingVulkan, VulkanContext};
use cuvk::Bridge;

use crate::error::{desc_in, fail, guard, out, CResult, CuvkResult, Failure};
use crate::handle::{insert, remove, with, HandleObject, Kind};

/// Bridge creation flag: Vulkan only, no CUDA (buffers have no CUDA pointer).
pub const CUVK_BRIDGE_VULKAN_ONLY: u32 = 1;

/// A bridge: the engine's Vulkan device (and the CUDA device with the same UUID).
pub type CuvkBridge = u64;

/// The engine's Vulkan objects. Dispatchable handles are pointers; all must stay valid until
/// the bridge is destroyed.
#[repr(C)]
pub struct CuvkVulkanDevice {
    /// `sizeof(CuvkVulkanDevice)`.
    pub struct_size: u32,
    /// `VkInstance`.
    pub instance: *mut c_void,
    /// `VkPhysicalDevice`.
    pub physical_device: *mut c_void,
    /// `VkDevice`.
    pub device: *mut c_void,
    /// The queue family of `queue`.
    pub queue_family_index: u32,
    /// A `VkQueue` of that family; the bridge submits to it (not concurrently with the engine).
    pub queue: *mut c_void,
    /// `vkGetInstanceProcAddr` the engine loaded Vulkan with (null: the system loader's).
    pub get_instance_proc_addr: *const c_void,
    /// Names of the device extensions the engine enabled.
    pub enabled_extensions: *const *const c_char,
    /// Number of names in `enabled_extensions`.
    pub enabled_extension_count: u32,
    /// Non-zero if the engine enabled the `timelineSemaphore` feature (required).
    pub timeline_semaphore_enabled: u32,
    /// The `apiVersion` the engine created its instance with (`VK_API_VERSION_1_2` or later
    /// is required).
    pub api_version: u32,
    /// Non-zero if the engine enabled the `bufferDeviceAddress` feature (optional).
    pub buffer_device_address_enabled: u32,
}

/// A bridge: its Vulkan device and, unless it is Vulkan-only, the CUDA side.
pub(crate) struct CBridge {
    pub(crate) vk: Arc<VulkanContext>,
    pub(crate) cuda: Option<Bridge>,
}

/// The bridge behind `handle`.
pub(crate) fn bridge_of(handle: CuvkBridge) -> CResult<Arc<CBridge>> {
    with::<Arc<CBridge>, _>(handle, |b| Ok(b.clone()))
}

impl HandleObject for Arc<CBridge> {
    const KIND: Kind = Kind::Bridge;
}

/// Creates a bridge over the engine's Vulkan device. With `CUVK_BRIDGE_VULKAN_ONLY` in
/// `flags`, no CUDA is used; otherwise the CUDA device whose UUID equals the Vulkan device's
/// is opened (`cuda_uuid`, 16 bytes, may name it explicitly; null: the Vulkan device's UUID).
///
/// # Safety
/// `vk` must point to a filled `CuvkVulkanDevice` whose objects outlive the bridge; `cuda_uuid`
/// must be null or point to 16 bytes; `out` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_bridge_create(
    vk: *const CuvkVulkanDevice,
    cuda_uuid: *const u8,
    flags: u32,
    out_bridge: *mut CuvkBridge,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let out_bridge = unsafe { out(out_bridge, "out_bridge") }?;
        // SAFETY: the caller passes a readable descriptor or null (checked).
        let vkd = unsafe { desc_in(vk, "vk") }?;
        if vkd.instance.is_null()
            || vkd.physical_device.is_null()
            || vkd.device.is_null()
            || vkd.queue.is_null()
        {
            return fail(
                CuvkResult::CuvkErrorNullPointer,
                "a Vulkan handle in CuvkVulkanDevice is null",
            );
        }
        // SAFETY: forwarded from the caller's promise about the struct's contents.
        let ctx = unsafe { wrap_vulkan(vkd) }?;
        let cuda = if flags & CUVK_BRIDGE_VULKAN_ONLY != 0 {
            None
        } else {
            let uuid = if cuda_uuid.is_null() {
                ctx.info().device_uuid
            } else {
                let mut u = [0u8; 16];
                // SAFETY: the caller passes 16 readable bytes (non-null checked above).
                let given = unsafe { std::slice::from_raw_parts(cuda_uuid, 16) };
                u.copy_from_slice(given);
                cuvk::Uuid(u)
            };
            let ordinal = cuvk::cuda::ordinal_for_uuid(uuid)?;
            Some(Bridge::from_parts(
                ctx.clone(),
                cuvk::cuda::context(ordinal)?,
            )?)
        };
        *out_bridge = insert(Arc::new(CBridge { vk: ctx, cuda }));
        Ok(())
    })
}

/// Wraps the engine's Vulkan objects described by `d`.
///
/// # Safety
/// Every handle in `d` must be valid and outlive the returned context; `get_instance_proc_addr`
/// must be null or the engine's `vkGetInstanceProcAddr`; the extension names must be valid C strings.
unsafe fn wrap_vulkan(d: &CuvkVulkanDevice) -> CResult<Arc<VulkanContext>> {
    let entry = if d.get_instance_proc_addr.is_null() {
        // SAFETY: loads the system Vulkan loader.
        unsafe { cuvk::ash::Entry::load() }.map_err(|e| {
            Failure::new(
                CuvkResult::CuvkErrorUnavailable,
                format!("Vulkan loader: {e}"),
            )
        })?
    } else {
        // SAFETY: the engine's vkGetInstanceProcAddr has exactly this signature.
        let gipa: vk::PFN_vkGetInstanceProcAddr =
            unsafe { std::mem::transmute(d.get_instance_proc_addr) };
        // SAFETY: a valid vkGetInstanceProcAddr resolves the global entry points.
        unsafe {
            cuvk::ash::Entry::from_static_fn(cuvk::ash::StaticFn {
                get_instance_proc_addr: gipa,
            })
        }
    };
    let instance_handle = vk::Instance::from_raw(d.instance as u64);
    // SAFETY: the engine's live instance.
    let instance = unsafe { cuvk::ash::Instance::load(entry.static_fn(), instance_handle) };
    let device_handle = vk::Device::from_raw(d.device as u64);
    // SAFETY: the engine's live device of that instance.
    let device = unsafe { cuvk::ash::Device::load(instance.fp_v1_0(), device_handle) };
    // The names are only read during this call (checked against what interop needs).
    let names: Vec<&CStr> = if d.enabled_extensions.is_null() {
        Vec::new()
    } else {
        // SAFETY: the caller passes `enabled_extension_count` valid C strings.
        unsafe {
            std::slice::from_raw_parts(d.enabled_extensions, d.enabled_extension_count as usize)
        }
        .iter()
        .filter(|p| !p.is_null())
        // SAFETY: non-null C strings from the caller, alive during this call.
        .map(|&p| unsafe { CStr::from_ptr(p) })
        .collect()
    };
    // SAFETY: the caller vouches for the handles, the queue family and the extension list.
    let ctx = unsafe {
        VulkanContext::from_existing(ExistingVulkan {
            entry,
            instance,
            api_version: d.api_version,
            physical_device: vk::PhysicalDevice::from_raw(d.physical_device as u64),
            device,
            queue_family_index: d.queue_family_index,
            queue: vk::Queue::from_raw(d.queue as u64),
            enabled_extensions: &names,
            timeline_semaphore_enabled: d.timeline_semaphore_enabled != 0,
            buffer_device_address_enabled: d.buffer_device_address_enabled != 0,
        })
    }?;
    Ok(ctx)
}

/// Destroys a bridge. Buffers, semaphores and staging buffers made from it stay valid until
/// they are destroyed (they keep what they need alive).
#[no_mangle]
pub extern "C" fn cuvk_bridge_destroy(bridge: CuvkBridge) -> CuvkResult {
    guard(|| remove::<Arc<CBridge>>(bridge))
}

crate::error::c_structs!(CuvkVulkanDevice);
