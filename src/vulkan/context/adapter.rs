//! Choosing the physical device and queue family, and the device extensions and features a
//! context enables on it.

use std::ffi::{CStr, CString};

use ash::{ext, vk};

use super::config::{Capabilities, DeviceChoice, DeviceInfo, MIN_API_VERSION};
use crate::error::{ApiVersion, Error, ExtensionState, Result, VkResultExt};
use crate::platform::{MEMORY_EXTENSION, SEMAPHORE_EXTENSION};
use crate::uuid::Uuid;

pub(super) fn check_device_version(instance: &ash::Instance, pd: vk::PhysicalDevice) -> Result<()> {
    // SAFETY: valid physical device of this instance (a Vulkan 1.0 query).
    let found = unsafe { instance.get_physical_device_properties(pd) }.api_version;
    if found < MIN_API_VERSION {
        return Err(Error::ApiVersion {
            what: "physical device",
            found: ApiVersion(found),
            required: ApiVersion(MIN_API_VERSION),
        });
    }
    Ok(())
}

/// Which extensions and features a device created by [`VulkanContext::new`] gets.
pub(super) struct DevicePlan {
    pub(super) extensions: Vec<&'static CStr>,
    pub(super) sparse_binding: bool,
    pub(super) buffer_device_address: bool,
    /// `shaderInt64` and `shaderBufferInt64Atomics`, enabled where supported.
    pub(super) int64_atomics: bool,
}

impl DevicePlan {
    pub(super) fn new(
        instance: &ash::Instance,
        pd: vk::PhysicalDevice,
        queue_family_index: u32,
        requested: &[&'static CStr],
    ) -> Result<Self> {
        let supported = supported_device_extensions(instance, pd)?;
        let is_supported = |name: &CStr| supported.iter().any(|e| e.as_c_str() == name);
        let missing = |name: &CStr, needed_for| Error::MissingExtension {
            extension: name.to_string_lossy().into_owned(),
            state: ExtensionState::NotSupported,
            needed_for,
        };
        if !is_supported(MEMORY_EXTENSION) {
            return Err(missing(MEMORY_EXTENSION, "sharing memory with CUDA"));
        }
        let mut extensions: Vec<&'static CStr> = vec![MEMORY_EXTENSION];
        for &wanted in requested {
            if !is_supported(wanted) {
                return Err(missing(wanted, "the caller's request"));
            }
            extensions.push(wanted);
        }
        let optional_extensions = [
            SEMAPHORE_EXTENSION,
            ext::external_memory_host::NAME,
            ash::nvx::binary_import::NAME,
            ash::nvx::image_view_handle::NAME,
        ];
        for optional in optional_extensions {
            if is_supported(optional) {
                extensions.push(optional);
            }
        }
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f12);
        // SAFETY: valid instance and physical device (1.2, checked); the chain is well formed.
        unsafe { instance.get_physical_device_features2(pd, &mut f2) };
        let sparse_feature = f2.features.sparse_binding == vk::TRUE;
        let shader_int64 = f2.features.shader_int64 == vk::TRUE;
        let buffer_device_address = f12.buffer_device_address == vk::TRUE;
        let int64_atomics = shader_int64 && f12.shader_buffer_int64_atomics == vk::TRUE;
        if f12.timeline_semaphore != vk::TRUE {
            return Err(crate::Capability::TimelineSemaphore.into());
        }
        // SAFETY: valid physical device.
        let families = unsafe { instance.get_physical_device_queue_family_properties(pd) };
        let sparse_binding = sparse_feature
            && families
                .get(queue_family_index as usize)
                .is_some_and(|f| f.queue_flags.contains(vk::QueueFlags::SPARSE_BINDING));
        Ok(Self {
            extensions,
            sparse_binding,
            buffer_device_address,
            int64_atomics,
        })
    }

    pub(super) fn create(
        &self,
        instance: &ash::Instance,
        pd: vk::PhysicalDevice,
        queue_family_index: u32,
    ) -> Result<ash::Device> {
        let names: Vec<*const i8> = self.extensions.iter().map(|e| e.as_ptr()).collect();
        let features = vk::PhysicalDeviceFeatures::default()
            .sparse_binding(self.sparse_binding)
            .shader_int64(self.int64_atomics);
        let mut enable12 = vk::PhysicalDeviceVulkan12Features::default()
            .timeline_semaphore(true)
            .buffer_device_address(self.buffer_device_address)
            .shader_buffer_int64_atomics(self.int64_atomics);
        let priorities = [1.0f32];
        let queue_info = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(queue_family_index)
            .queue_priorities(&priorities)];
        let device_info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_info)
            .enabled_extension_names(&names)
            .enabled_features(&features)
            .push_next(&mut enable12);
        // vkCreateDevice of a device with the NVX extensions enters the CUDA driver: never
        // beside an NVX module load (see `driver_lock`).
        let _driver = crate::vulkan::driver_lock();
        // SAFETY: the physical device came from this instance; all pointers live across the call.
        unsafe { instance.create_device(pd, &device_info, None) }.vk("vkCreateDevice")
    }
}

/// Reads `deviceUUID` and `driverUUID` of a physical device.
pub fn physical_device_uuids(
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
) -> (Uuid, Uuid, String) {
    let mut id = vk::PhysicalDeviceIDProperties::default();
    let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut id);
    // SAFETY: valid instance/physical device; the chain is well formed.
    unsafe { instance.get_physical_device_properties2(pd, &mut props) };
    let name = props
        .properties
        .device_name_as_c_str()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    (Uuid(id.device_uuid), Uuid(id.driver_uuid), name)
}

pub(super) fn choose_physical_device(
    instance: &ash::Instance,
    choice: DeviceChoice,
) -> Result<vk::PhysicalDevice> {
    // SAFETY: valid instance.
    let devices =
        unsafe { instance.enumerate_physical_devices() }.vk("vkEnumeratePhysicalDevices")?;
    let described: Vec<(vk::PhysicalDevice, Uuid, String)> = devices
        .iter()
        .map(|&pd| {
            let (uuid, _, name) = physical_device_uuids(instance, pd);
            (pd, uuid, name)
        })
        .collect();
    let available = described
        .iter()
        .map(|(_, u, n)| format!("{n} ({u})"))
        .collect::<Vec<_>>()
        .join(", ");
    let found = match choice {
        // Prefer real GPUs over CPU implementations (lavapipe) when both are installed, and
        // devices that can share memory at all.
        DeviceChoice::First => described.iter().min_by_key(|(pd, _, _)| {
            let can_share = supported_device_extensions(instance, *pd)
                .map(|exts| exts.iter().any(|e| e.as_c_str() == MEMORY_EXTENSION))
                .unwrap_or(false);
            // SAFETY: valid physical device of this instance.
            let kind = unsafe { instance.get_physical_device_properties(*pd) }.device_type;
            let rank = match kind {
                vk::PhysicalDeviceType::DISCRETE_GPU => 0,
                vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
                vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
                vk::PhysicalDeviceType::CPU => 4,
                _ => 3,
            };
            (!can_share, rank)
        }),
        DeviceChoice::Uuid(want) => described.iter().find(|(_, u, _)| *u == want),
    };
    match found {
        Some((pd, _, _)) => Ok(*pd),
        None => Err(Error::NoVulkanDevice {
            wanted: match choice {
                DeviceChoice::First => "at all".into(),
                DeviceChoice::Uuid(u) => format!("with UUID {u}"),
            },
            available,
        }),
    }
}

pub(super) fn choose_queue_family(instance: &ash::Instance, pd: vk::PhysicalDevice) -> Result<u32> {
    // SAFETY: valid physical device.
    let families = unsafe { instance.get_physical_device_queue_family_properties(pd) };
    let want = vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE;
    families
        .iter()
        .position(|f| f.queue_flags.contains(want))
        .or_else(|| {
            families
                .iter()
                .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
        })
        .map(|i| i as u32)
        .ok_or(Error::NoQueueFamily(vk::QueueFlags::COMPUTE))
}

pub(super) fn supported_device_extensions(
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
) -> Result<Vec<CString>> {
    // SAFETY: valid physical device.
    let props = unsafe { instance.enumerate_device_extension_properties(pd) }
        .vk("vkEnumerateDeviceExtensionProperties")?;
    Ok(props
        .iter()
        .filter_map(|p| p.extension_name_as_c_str().ok().map(CString::from))
        .collect())
}

pub(super) fn device_info(
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
    capabilities: Capabilities,
) -> DeviceInfo {
    let mut id = vk::PhysicalDeviceIDProperties::default();
    let mut host = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
    let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut id);
    if capabilities.external_memory_host {
        props = props.push_next(&mut host);
    }
    // SAFETY: valid instance/physical device; the chain is well formed.
    unsafe { instance.get_physical_device_properties2(pd, &mut props) };
    let p = props.properties;
    DeviceInfo {
        name: p
            .device_name_as_c_str()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        device_uuid: Uuid(id.device_uuid),
        driver_uuid: Uuid(id.driver_uuid),
        api_version: p.api_version,
        vendor_id: p.vendor_id,
        device_type: p.device_type,
        non_coherent_atom_size: p.limits.non_coherent_atom_size,
        max_storage_buffer_range: u64::from(p.limits.max_storage_buffer_range),
        min_imported_host_pointer_alignment: capabilities
            .external_memory_host
            .then_some(host.min_imported_host_pointer_alignment),
        capabilities,
    }
}
