//! Wrapping an engine's own instance and device: everything cuvk needs of them checked first.

use std::ffi::CStr;
use std::sync::Arc;

use ash::{ext, vk};

use super::adapter::{check_device_version, supported_device_extensions};
use super::config::MIN_API_VERSION;
use super::instance::create_messenger;
use super::{Parts, VulkanContext};
use crate::error::{ApiVersion, Error, ExtensionState, Result};
use crate::platform::{self, MEMORY_EXTENSION, SEMAPHORE_EXTENSION};

/// An engine's Vulkan objects, for [`VulkanContext::from_existing`].
pub struct ExistingVulkan<'a> {
    /// The loaded entry points the engine uses.
    pub entry: ash::Entry,
    /// The engine's instance.
    pub instance: ash::Instance,
    /// The `apiVersion` the engine created the instance with (`VkApplicationInfo`): it bounds
    /// which core functions exist, whatever the physical device supports.
    pub api_version: u32,
    /// The physical device of `device`.
    pub physical_device: vk::PhysicalDevice,
    /// The engine's logical device.
    pub device: ash::Device,
    /// The queue family of `queue`.
    pub queue_family_index: u32,
    /// A queue the bridge may submit to (never concurrently with the engine), or
    /// `vk::Queue::null()` for none: the context then never submits (copies, one-shot commands
    /// and [`VulkanContext::submit_with_semaphores`] return [`Error::NoQueue`]), which is how
    /// cuvk wraps a device whose only queue another library submits to (wgpu's).
    pub queue: vk::Queue,
    /// The device extensions the engine enabled.
    pub enabled_extensions: &'a [&'a CStr],
    /// Whether the engine enabled the `timelineSemaphore` feature (required).
    pub timeline_semaphore_enabled: bool,
    /// Whether the engine enabled the `bufferDeviceAddress` feature (optional: shared buffers
    /// then get device addresses, which CUDA kernels in Vulkan queues need).
    pub buffer_device_address_enabled: bool,
}

impl<'a> ExistingVulkan<'a> {
    /// A device whose only queue another library submits to (wgpu's, in `cuvk::wgpu` and
    /// `bevy_cuvk`): no queue (the context never submits), `timelineSemaphore` enabled where
    /// the physical device has it (wgpu-hal 29 and 30 enable it wherever it exists:
    /// `PhysicalDeviceFeatures::from_extensions_and_requested_features`), no
    /// `bufferDeviceAddress` (set the field where the engine enabled it).
    ///
    /// # Safety
    /// `physical_device` is a valid handle of `instance`, and `device` was created from it with
    /// `enabled_extensions`.
    pub unsafe fn without_queue(
        entry: ash::Entry,
        instance: ash::Instance,
        api_version: u32,
        physical_device: vk::PhysicalDevice,
        device: ash::Device,
        queue_family_index: u32,
        enabled_extensions: &'a [&'a CStr],
    ) -> Self {
        // SAFETY: the caller's promise: a valid physical device of `instance`.
        let timeline = unsafe { timeline_semaphore_supported(&instance, physical_device) };
        Self {
            entry,
            instance,
            api_version,
            physical_device,
            device,
            queue_family_index,
            queue: vk::Queue::null(),
            enabled_extensions,
            timeline_semaphore_enabled: timeline,
            buffer_device_address_enabled: false,
        }
    }
}

/// Device-level functions above Vulkan 1.0 the crate calls: each must resolve on a wrapped
/// device before the crate accepts it (ash turns an unresolved one into an abort).
pub(super) const DEVICE_FUNCTIONS: [&CStr; 5] = [
    c"vkGetBufferMemoryRequirements2",
    c"vkGetImageMemoryRequirements2",
    c"vkGetSemaphoreCounterValue",
    c"vkWaitSemaphores",
    c"vkSignalSemaphore",
];

/// Device-level functions of optional extensions, checked where the extension is enabled.
pub(super) const HOST_MEMORY_FUNCTIONS: [&CStr; 1] = [c"vkGetMemoryHostPointerPropertiesEXT"];

pub(super) const BINARY_IMPORT_FUNCTIONS: [&CStr; 5] = [
    c"vkCreateCuModuleNVX",
    c"vkCreateCuFunctionNVX",
    c"vkDestroyCuModuleNVX",
    c"vkDestroyCuFunctionNVX",
    c"vkCmdCuLaunchKernelNVX",
];

pub(super) const IMAGE_VIEW_HANDLE_FUNCTIONS: [&CStr; 1] = [c"vkGetImageViewHandleNVX"];

/// Instance-level functions above Vulkan 1.0 the crate calls.
pub(super) const INSTANCE_FUNCTIONS: [&CStr; 5] = [
    c"vkGetPhysicalDeviceProperties2",
    c"vkGetPhysicalDeviceImageFormatProperties2",
    c"vkGetPhysicalDeviceFeatures2",
    c"vkGetPhysicalDeviceExternalBufferProperties",
    c"vkGetPhysicalDeviceExternalSemaphoreProperties",
];

impl VulkanContext {
    /// Wraps an instance, physical device and device that the caller (an engine) owns,
    /// after checking everything the crate will need of them: Vulkan 1.2 for the instance
    /// and the physical device, the platform's external memory extension enabled, the
    /// `timelineSemaphore` feature enabled, and every function the crate calls resolving.
    /// Nothing of the engine's is destroyed when the context drops.
    ///
    /// # Safety
    /// The handles must be valid, belong together, and outlive the returned context and
    /// everything made from it; `queue` must belong to `queue_family_index`; `api_version`,
    /// `enabled_extensions` and `timeline_semaphore_enabled` must be what the instance and
    /// device were really created with. The caller must not use `queue` concurrently with
    /// the bridge's submissions (the bridge locks its own access only).
    pub unsafe fn from_existing(existing: ExistingVulkan<'_>) -> Result<Arc<Self>> {
        // SAFETY: forwarded from the caller.
        unsafe { Self::wrap_existing(existing, None, false) }
    }

    /// Validates `existing` and assembles the context, with what keeps the device alive and
    /// an optional messenger of its own.
    ///
    /// # Safety
    /// As [`Self::from_existing`]; `keep_alive` must keep the instance and device alive.
    pub(super) unsafe fn wrap_existing(
        existing: ExistingVulkan<'_>,
        keep_alive: Option<Box<dyn std::any::Any + Send + Sync>>,
        validation_log: bool,
    ) -> Result<Arc<Self>> {
        // SAFETY: forwarded from the caller.
        unsafe { validate_existing(&existing) }?;
        let debug = if validation_log {
            Some(create_messenger(&existing.entry, &existing.instance)?)
        } else {
            None
        };
        Self::assemble(Parts {
            entry: existing.entry,
            instance: existing.instance,
            debug,
            physical_device: existing.physical_device,
            device: existing.device,
            queue_family_index: existing.queue_family_index,
            queue: existing.queue,
            enabled: existing
                .enabled_extensions
                .iter()
                .map(|&e| e.to_owned())
                .collect(),
            // Not known for an engine's device: sparse views are not offered there.
            sparse_binding: false,
            buffer_device_address: existing.buffer_device_address_enabled,
            int64_atomics: false,
            owned: false,
            keep_alive,
        })
    }

    /// As [`Self::from_existing`], keeping `keep_alive` (what owns the device) until the
    /// context and everything made from it are gone, and, with `validation_log`, recording
    /// the validation layer's messages through a messenger of the context's own (the
    /// instance must have `VK_EXT_debug_utils` enabled).
    ///
    /// # Safety
    /// As [`Self::from_existing`]; `keep_alive` must keep the instance and device alive.
    pub unsafe fn from_existing_kept(
        existing: ExistingVulkan<'_>,
        keep_alive: Box<dyn std::any::Any + Send + Sync>,
        validation_log: bool,
    ) -> Result<Arc<Self>> {
        // SAFETY: forwarded from the caller. On error the messenger (if made) is destroyed,
        // then `keep_alive` drops.
        unsafe { Self::wrap_existing(existing, Some(keep_alive), validation_log) }
    }
}

/// Every check of [`VulkanContext::from_existing`], in an order that calls no function
/// before it is known to exist.
///
/// # Safety
/// As [`VulkanContext::from_existing`].
pub(super) unsafe fn validate_existing(e: &ExistingVulkan<'_>) -> Result<()> {
    if e.api_version < MIN_API_VERSION {
        return Err(Error::ApiVersion {
            what: "instance",
            found: ApiVersion(e.api_version),
            required: ApiVersion(MIN_API_VERSION),
        });
    }
    check_device_version(&e.instance, e.physical_device)?;
    let extension = MEMORY_EXTENSION
        .to_str()
        .unwrap_or("the external memory extension");
    if !e.enabled_extensions.contains(&MEMORY_EXTENSION) {
        let supported = supported_device_extensions(&e.instance, e.physical_device)?;
        return Err(Error::MissingExtension {
            extension: extension.to_owned(),
            state: if supported.iter().any(|s| s.as_c_str() == MEMORY_EXTENSION) {
                ExtensionState::NotEnabled
            } else {
                ExtensionState::NotSupported
            },
            needed_for: "sharing memory with CUDA",
        });
    }
    if !e.timeline_semaphore_enabled {
        return Err(Error::FeatureNotEnabled {
            feature: "timelineSemaphore",
            needed_for: "ordering submissions and tracking when objects are free",
        });
    }
    let missing = |function: &CStr, level, provided_by: String| Error::MissingFunction {
        function: function.to_string_lossy().into_owned(),
        level,
        provided_by,
    };
    let core = format!("Vulkan {}", ApiVersion(MIN_API_VERSION));
    for name in INSTANCE_FUNCTIONS {
        // SAFETY: a valid instance (caller's promise) and a NUL-terminated name.
        let f = unsafe {
            (e.entry.static_fn().get_instance_proc_addr)(e.instance.handle(), name.as_ptr())
        };
        if f.is_none() {
            return Err(missing(name, "instance", core.clone()));
        }
    }
    // Each group of device functions with what provides it, where it is enabled.
    let enabled = |ext: &CStr| e.enabled_extensions.contains(&ext);
    let groups: [(&[&CStr], Option<&CStr>); 6] = [
        (&DEVICE_FUNCTIONS, None),
        (&platform::MEMORY_FUNCTIONS, Some(MEMORY_EXTENSION)),
        (&platform::SEMAPHORE_FUNCTIONS, Some(SEMAPHORE_EXTENSION)),
        (
            &HOST_MEMORY_FUNCTIONS,
            Some(ext::external_memory_host::NAME),
        ),
        (
            &BINARY_IMPORT_FUNCTIONS,
            Some(ash::nvx::binary_import::NAME),
        ),
        (
            &IMAGE_VIEW_HANDLE_FUNCTIONS,
            Some(ash::nvx::image_view_handle::NAME),
        ),
    ];
    for (names, provider) in groups {
        if provider.is_some_and(|p| !enabled(p)) {
            continue;
        }
        let provided_by = provider.map_or(core.clone(), |p| p.to_string_lossy().into_owned());
        for &name in names {
            // SAFETY: a valid device of this instance (caller's promise), a NUL-terminated
            // name.
            let f = unsafe {
                e.instance
                    .get_device_proc_addr(e.device.handle(), name.as_ptr())
            };
            if f.is_none() {
                return Err(missing(name, "device", provided_by));
            }
        }
    }
    Ok(())
}

/// Whether a physical device has the `timelineSemaphore` feature (false below Vulkan 1.2,
/// which [`VulkanContext::from_existing`] refuses by version first): what an engine's device
/// has enabled where the engine turns the feature on wherever it exists (wgpu-hal 29 and 30).
///
/// # Safety
/// `physical_device` is a valid handle of `instance`.
pub unsafe fn timeline_semaphore_supported(
    instance: &ash::Instance,
    physical_device: vk::PhysicalDevice,
) -> bool {
    // SAFETY: a valid physical device (the caller's promise; a Vulkan 1.0 query).
    let version = unsafe { instance.get_physical_device_properties(physical_device) }.api_version;
    if version < MIN_API_VERSION {
        return false;
    }
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f12);
    // SAFETY: a valid Vulkan 1.2 physical device; the chain is well formed.
    unsafe { instance.get_physical_device_features2(physical_device, &mut f2) };
    f12.timeline_semaphore == vk::TRUE
}
