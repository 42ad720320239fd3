//! The Vulkan instance and device the bridge works with: created here with what interop
//! needs, or wrapped from an engine that already owns them.

use std::ffi::{c_void, CStr, CString};
use std::sync::{Arc, Mutex, MutexGuard};

use ash::{ext, khr, vk};

use crate::error::{Error, Result, VkResultExt};
use crate::Uuid;

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";
/// The lowest Vulkan version the bridge uses (timeline semaphores, `*2` queries are core).
pub const MIN_API_VERSION: u32 = vk::API_VERSION_1_2;

/// Whether to run under the Khronos validation layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Validation {
    /// No layer.
    #[default]
    Off,
    /// Enable it if it is installed; every message is recorded (see
    /// [`VulkanContext::validation_messages`]).
    IfAvailable,
    /// Fail with [`Error::ValidationLayerMissing`] if it is not installed.
    Required,
}

impl Validation {
    /// `Required` when the environment variable `CUVK_VALIDATION` is `1`, else `self`.
    pub fn or_from_env(self) -> Self {
        match std::env::var("CUVK_VALIDATION").as_deref() {
            Ok("1") => Validation::Required,
            _ => self,
        }
    }
}

/// Which physical device to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// The best device that supports what interop needs: discrete, then integrated, then
    /// virtual GPUs, then CPU implementations; in enumeration order within a kind.
    #[default]
    First,
    /// The device whose `deviceUUID` is this (e.g. a CUDA device's UUID).
    Uuid(Uuid),
}

/// Options for [`VulkanContext::new`].
#[derive(Debug, Clone, Default)]
pub struct VulkanConfig {
    /// Validation layer use.
    pub validation: Validation,
    /// Device selection.
    pub device: DeviceChoice,
    /// Extra instance extensions (e.g. the surface extensions a window needs).
    pub instance_extensions: Vec<&'static CStr>,
    /// Extra device extensions (e.g. `VK_KHR_swapchain`); each must be supported.
    pub device_extensions: Vec<&'static CStr>,
}

/// What the chosen device can do for interop, gathered once (as wgpu-hal gathers limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Memory export/import through the platform handle (`VK_KHR_external_memory_fd`/`_win32`).
    pub external_memory: bool,
    /// Semaphore export/import through the platform handle (`VK_KHR_external_semaphore_fd`/`_win32`).
    pub external_semaphore: bool,
    /// `VK_EXT_external_memory_host`.
    pub external_memory_host: bool,
    /// The `timelineSemaphore` feature is enabled.
    pub timeline_semaphore: bool,
    /// The `sparseBinding` feature is enabled and the queue can bind sparse memory.
    pub sparse_binding: bool,
}

/// Facts about the chosen physical device.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// `deviceName`.
    pub name: String,
    /// `deviceUUID`: equals CUDA's UUID for the same GPU.
    pub device_uuid: Uuid,
    /// `driverUUID`.
    pub driver_uuid: Uuid,
    /// `apiVersion` of the device.
    pub api_version: u32,
    /// Vendor id (0x10de for NVIDIA).
    pub vendor_id: u32,
    /// `nonCoherentAtomSize`.
    pub non_coherent_atom_size: u64,
    /// `maxStorageBufferRange`: the largest range a storage-buffer descriptor may cover.
    pub max_storage_buffer_range: u64,
    /// `minImportedHostPointerAlignment`, when `VK_EXT_external_memory_host` is there.
    pub min_imported_host_pointer_alignment: Option<u64>,
    /// Interop capabilities.
    pub capabilities: Capabilities,
}

impl DeviceInfo {
    /// "name (uuid)", for messages.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.name, self.device_uuid)
    }
}

/// Extension loaders, present where the extension is enabled.
pub(crate) struct DeviceExtensions {
    #[cfg(unix)]
    pub memory_fd: Option<khr::external_memory_fd::Device>,
    #[cfg(unix)]
    pub semaphore_fd: Option<khr::external_semaphore_fd::Device>,
    #[cfg(windows)]
    pub memory_win32: Option<khr::external_memory_win32::Device>,
    #[cfg(windows)]
    pub semaphore_win32: Option<khr::external_semaphore_win32::Device>,
    pub memory_host: Option<ext::external_memory_host::Device>,
}

/// Device features the bridge uses, as enabled on the device.
#[derive(Debug, Clone, Copy)]
struct EnabledFeatures {
    timeline_semaphore: bool,
    sparse_binding: bool,
}

/// Messages the validation layer reported, shared with its callback.
type MessageLog = Mutex<Vec<String>>;

struct DebugMessenger {
    loader: ext::debug_utils::Instance,
    messenger: vk::DebugUtilsMessengerEXT,
    // Boxed so the pointer given to the callback stays put; freed after the messenger.
    log: Box<MessageLog>,
}

/// A Vulkan instance + physical device + logical device + one queue, ready for interop.
///
/// Created by [`VulkanContext::new`] (owns and destroys everything) or wrapped from an
/// engine's objects by [`VulkanContext::from_existing`] (destroys nothing). Shared as
/// `Arc<VulkanContext>`: every object made from it holds the Arc, so the device outlives them.
pub struct VulkanContext {
    entry: ash::Entry,
    instance: ash::Instance,
    debug: Option<DebugMessenger>,
    physical_device: vk::PhysicalDevice,
    device: ash::Device,
    queue_family_index: u32,
    queue: Mutex<vk::Queue>,
    memory_properties: vk::PhysicalDeviceMemoryProperties,
    info: DeviceInfo,
    pub(crate) ext: DeviceExtensions,
    owned: bool,
}

/// The device extension that exports memory on this platform.
pub const MEMORY_EXTENSION: &CStr = if cfg!(windows) {
    khr::external_memory_win32::NAME
} else {
    khr::external_memory_fd::NAME
};
/// The device extension that exports semaphores on this platform.
pub const SEMAPHORE_EXTENSION: &CStr = if cfg!(windows) {
    khr::external_semaphore_win32::NAME
} else {
    khr::external_semaphore_fd::NAME
};

impl VulkanContext {
    /// Creates an instance and a device with what interop needs: the platform's external
    /// memory extension (required), external semaphore and host-memory extensions (where
    /// supported) and timeline semaphores.
    pub fn new(config: VulkanConfig) -> Result<Arc<Self>> {
        // SAFETY: loading the system Vulkan loader runs its initialisers; nothing else is
        // loaded into the process by it that we rely on being absent.
        let entry =
            unsafe { ash::Entry::load() }.map_err(|e| Error::VulkanLoader(e.to_string()))?;
        // SAFETY: entry is a loaded Vulkan entry point.
        let version = unsafe { entry.try_enumerate_instance_version() }
            .vk("vkEnumerateInstanceVersion")?
            .unwrap_or(vk::API_VERSION_1_0);
        if version < MIN_API_VERSION {
            return Err(Error::ApiVersion {
                found: version_string(version),
                required: version_string(MIN_API_VERSION),
            });
        }

        let validation = config.validation;
        let layer_present = validation != Validation::Off && layer_available(&entry)?;
        if validation == Validation::Required && !layer_present {
            return Err(Error::ValidationLayerMissing);
        }
        let layers: Vec<*const i8> = if layer_present {
            vec![VALIDATION_LAYER.as_ptr()]
        } else {
            vec![]
        };
        let mut instance_exts: Vec<*const i8> = config
            .instance_extensions
            .iter()
            .map(|e| e.as_ptr())
            .collect();
        if layer_present {
            instance_exts.push(ext::debug_utils::NAME.as_ptr());
        }
        let app = vk::ApplicationInfo::default()
            .application_name(c"cuvk")
            .api_version(MIN_API_VERSION);
        let create = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers)
            .enabled_extension_names(&instance_exts);
        // SAFETY: create info and the strings it points to live across the call.
        let instance = unsafe { entry.create_instance(&create, None) }.vk("vkCreateInstance")?;
        let mut guard = InstanceGuard {
            instance: Some(instance),
            debug: None,
        };
        if layer_present {
            guard.debug = Some(create_messenger(&entry, guard.instance_ref()?)?);
        }

        let physical_device = choose_physical_device(guard.instance_ref()?, config.device)?;
        let instance_ref = guard.instance_ref()?;
        let queue_family_index = choose_queue_family(instance_ref, physical_device)?;
        let supported = supported_device_extensions(instance_ref, physical_device)?;
        if !supported.iter().any(|e| e.as_c_str() == MEMORY_EXTENSION) {
            return Err(Error::MissingExtension {
                extension: MEMORY_EXTENSION.to_string_lossy().into_owned(),
                state: "not supported by the device",
                needed_for: "sharing memory with CUDA",
            });
        }
        let mut enable: Vec<&CStr> = vec![MEMORY_EXTENSION];
        for &wanted in &config.device_extensions {
            if !supported.iter().any(|e| e.as_c_str() == wanted) {
                return Err(Error::MissingExtension {
                    extension: wanted.to_string_lossy().into_owned(),
                    state: "not supported by the device",
                    needed_for: "the caller's request",
                });
            }
            enable.push(wanted);
        }
        for optional in [SEMAPHORE_EXTENSION, ext::external_memory_host::NAME] {
            if supported.iter().any(|e| e.as_c_str() == optional) {
                enable.push(optional);
            }
        }
        let enable_ptrs: Vec<*const i8> = enable.iter().map(|e| e.as_ptr()).collect();

        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f12);
        // SAFETY: valid instance and physical device; the chain is well formed.
        unsafe { instance_ref.get_physical_device_features2(physical_device, &mut f2) };
        let sparse_feature = f2.features.sparse_binding == vk::TRUE;
        let timeline = f12.timeline_semaphore == vk::TRUE;
        // SAFETY: valid physical device.
        let families =
            unsafe { instance_ref.get_physical_device_queue_family_properties(physical_device) };
        let sparse = sparse_feature
            && families[queue_family_index as usize]
                .queue_flags
                .contains(vk::QueueFlags::SPARSE_BINDING);
        let features = vk::PhysicalDeviceFeatures::default().sparse_binding(sparse);
        let mut enable12 = vk::PhysicalDeviceVulkan12Features::default()
            .timeline_semaphore(timeline)
            .buffer_device_address(false);
        let priorities = [1.0f32];
        let queue_info = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(queue_family_index)
            .queue_priorities(&priorities)];
        let device_info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_info)
            .enabled_extension_names(&enable_ptrs)
            .enabled_features(&features)
            .push_next(&mut enable12);
        // SAFETY: the physical device came from this instance; all pointers live across the call.
        let device = unsafe { instance_ref.create_device(physical_device, &device_info, None) }
            .vk("vkCreateDevice")?;
        // SAFETY: the queue family was requested with one queue at index 0.
        let queue = unsafe { device.get_device_queue(queue_family_index, 0) };

        let (instance, debug) = guard.release()?;
        Ok(Arc::new(Self::assemble(
            entry,
            instance,
            debug,
            physical_device,
            device,
            queue_family_index,
            queue,
            &enable,
            EnabledFeatures {
                timeline_semaphore: timeline,
                sparse_binding: sparse,
            },
            true,
        )))
    }

    /// Wraps an instance, physical device and device that the caller (an engine) owns.
    ///
    /// `enabled_extensions` lists the device extensions the caller enabled; the bridge checks
    /// that the platform's external memory extension is among them and that its entry points
    /// resolve, and records the optional ones. Nothing is destroyed when the context drops.
    ///
    /// # Safety
    /// `instance`, `physical_device`, `device` and `queue` must be valid, belong together,
    /// and outlive the returned context and everything made from it; `queue` must belong to
    /// `queue_family_index`; `enabled_extensions` and `timeline_semaphore_enabled` must be what
    /// the device was really created with. The caller must not use `queue` concurrently with
    /// the bridge's submissions (the bridge locks its own access only).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn from_existing(
        entry: ash::Entry,
        instance: ash::Instance,
        physical_device: vk::PhysicalDevice,
        device: ash::Device,
        queue_family_index: u32,
        queue: vk::Queue,
        enabled_extensions: &[&CStr],
        timeline_semaphore_enabled: bool,
    ) -> Result<Arc<Self>> {
        if !enabled_extensions.contains(&MEMORY_EXTENSION) {
            return Err(Error::MissingExtension {
                extension: MEMORY_EXTENSION.to_string_lossy().into_owned(),
                state: "not enabled on the device",
                needed_for: "sharing memory with CUDA",
            });
        }
        let ctx = Self::assemble(
            entry,
            instance,
            None,
            physical_device,
            device,
            queue_family_index,
            queue,
            enabled_extensions,
            EnabledFeatures {
                timeline_semaphore: timeline_semaphore_enabled,
                // Not known for an engine's device: sparse views are not offered there.
                sparse_binding: false,
            },
            false,
        );
        // A device whose extension is not really enabled resolves no entry point for it.
        let probe = if cfg!(windows) {
            c"vkGetMemoryWin32HandleKHR"
        } else {
            c"vkGetMemoryFdKHR"
        };
        // SAFETY: the caller promised `device` is valid for this instance.
        let fp = unsafe {
            ctx.instance
                .get_device_proc_addr(ctx.device.handle(), probe.as_ptr())
        };
        if fp.is_none() {
            return Err(Error::MissingExtension {
                extension: MEMORY_EXTENSION.to_string_lossy().into_owned(),
                state: "not enabled on the device",
                needed_for: "sharing memory with CUDA",
            });
        }
        Ok(Arc::new(ctx))
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        entry: ash::Entry,
        instance: ash::Instance,
        debug: Option<DebugMessenger>,
        physical_device: vk::PhysicalDevice,
        device: ash::Device,
        queue_family_index: u32,
        queue: vk::Queue,
        enabled: &[&CStr],
        features: EnabledFeatures,
        owned: bool,
    ) -> Self {
        let has = |name: &CStr| enabled.contains(&name);
        let ext = DeviceExtensions {
            #[cfg(unix)]
            memory_fd: has(khr::external_memory_fd::NAME)
                .then(|| khr::external_memory_fd::Device::new(&instance, &device)),
            #[cfg(unix)]
            semaphore_fd: has(khr::external_semaphore_fd::NAME)
                .then(|| khr::external_semaphore_fd::Device::new(&instance, &device)),
            #[cfg(windows)]
            memory_win32: has(khr::external_memory_win32::NAME)
                .then(|| khr::external_memory_win32::Device::new(&instance, &device)),
            #[cfg(windows)]
            semaphore_win32: has(khr::external_semaphore_win32::NAME)
                .then(|| khr::external_semaphore_win32::Device::new(&instance, &device)),
            memory_host: has(ext::external_memory_host::NAME)
                .then(|| ext::external_memory_host::Device::new(&instance, &device)),
        };
        let capabilities = Capabilities {
            external_memory: has(MEMORY_EXTENSION),
            external_semaphore: has(SEMAPHORE_EXTENSION),
            external_memory_host: has(ext::external_memory_host::NAME),
            timeline_semaphore: features.timeline_semaphore,
            sparse_binding: features.sparse_binding,
        };
        let info = device_info(&instance, physical_device, capabilities);
        // SAFETY: valid physical device of this instance.
        let memory_properties =
            unsafe { instance.get_physical_device_memory_properties(physical_device) };
        Self {
            entry,
            instance,
            debug,
            physical_device,
            device,
            queue_family_index,
            queue: Mutex::new(queue),
            memory_properties,
            info,
            ext,
            owned,
        }
    }

    /// The loaded Vulkan entry points.
    pub fn entry(&self) -> &ash::Entry {
        &self.entry
    }
    /// The instance.
    pub fn instance(&self) -> &ash::Instance {
        &self.instance
    }
    /// The physical device.
    pub fn physical_device(&self) -> vk::PhysicalDevice {
        self.physical_device
    }
    /// The logical device.
    pub fn device(&self) -> &ash::Device {
        &self.device
    }
    /// The queue family of [`Self::lock_queue`].
    pub fn queue_family_index(&self) -> u32 {
        self.queue_family_index
    }
    /// Locks the queue for a submission (`vkQueueSubmit` needs external synchronisation).
    pub fn lock_queue(&self) -> MutexGuard<'_, vk::Queue> {
        // A poisoned lock only means another thread panicked mid-submit; the handle is fine.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Facts about the device.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }
    /// The device's memory types and heaps.
    pub fn memory_properties(&self) -> &vk::PhysicalDeviceMemoryProperties {
        &self.memory_properties
    }
    /// Whether this context's device is the same one another context uses.
    pub fn same_device(&self, other: &VulkanContext) -> bool {
        self.device.handle() == other.device.handle()
    }

    /// Every message the validation layer reported so far (warnings and errors).
    pub fn validation_messages(&self) -> Vec<String> {
        match &self.debug {
            Some(d) => d.log.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            None => Vec::new(),
        }
    }

    /// Whether the validation layer is active on this context.
    pub fn validation_enabled(&self) -> bool {
        self.debug.is_some()
    }

    /// Finds a memory type allowed by `type_bits` with all of `required`.
    pub fn find_memory_type(
        &self,
        type_bits: u32,
        required: vk::MemoryPropertyFlags,
    ) -> Option<u32> {
        let props = &self.memory_properties;
        (0..props.memory_type_count).find(|&i| {
            type_bits & (1 << i) != 0
                && props.memory_types[i as usize]
                    .property_flags
                    .contains(required)
        })
    }
}

impl Drop for VulkanContext {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: we created the device and instance; every object made from them holds an
        // Arc to this context, so none is alive now. Waiting idle first makes destruction legal.
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_device(None);
            if let Some(d) = self.debug.take() {
                d.loader.destroy_debug_utils_messenger(d.messenger, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

/// Destroys a half-built instance if device creation fails.
struct InstanceGuard {
    instance: Option<ash::Instance>,
    debug: Option<DebugMessenger>,
}

impl InstanceGuard {
    fn instance_ref(&self) -> Result<&ash::Instance> {
        self.instance
            .as_ref()
            .ok_or(Error::InvalidArgument("instance already released".into()))
    }
    fn release(mut self) -> Result<(ash::Instance, Option<DebugMessenger>)> {
        let instance = self
            .instance
            .take()
            .ok_or(Error::InvalidArgument("instance already released".into()))?;
        Ok((instance, self.debug.take()))
    }
}

impl Drop for InstanceGuard {
    fn drop(&mut self) {
        if let Some(instance) = self.instance.take() {
            // SAFETY: nothing made from this instance survives a failed creation.
            unsafe {
                if let Some(d) = self.debug.take() {
                    d.loader.destroy_debug_utils_messenger(d.messenger, None);
                }
                instance.destroy_instance(None);
            }
        }
    }
}

fn version_string(v: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}

fn layer_available(entry: &ash::Entry) -> Result<bool> {
    // SAFETY: entry is loaded.
    let layers = unsafe { entry.enumerate_instance_layer_properties() }
        .vk("vkEnumerateInstanceLayerProperties")?;
    Ok(layers
        .iter()
        .any(|l| l.layer_name_as_c_str().ok() == Some(VALIDATION_LAYER)))
}

unsafe extern "system" fn debug_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    kind: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the layer passes valid callback data for the duration of the call.
    let message = unsafe { data.as_ref() }
        .and_then(|d| unsafe { d.message_as_c_str() })
        .map(|m| m.to_string_lossy().into_owned())
        .unwrap_or_default();
    let line = format!("[{severity:?} {kind:?}] {message}");
    eprintln!("vulkan validation: {line}");
    // SAFETY: `user` is the Box<MessageLog> that lives until after the messenger is destroyed.
    if let Some(log) = unsafe { (user as *const MessageLog).as_ref() } {
        log.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }
    vk::FALSE
}

fn create_messenger(entry: &ash::Entry, instance: &ash::Instance) -> Result<DebugMessenger> {
    let loader = ext::debug_utils::Instance::new(entry, instance);
    let log: Box<MessageLog> = Box::default();
    let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
        .message_severity(
            vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
        )
        .message_type(
            vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
        )
        .pfn_user_callback(Some(debug_callback))
        .user_data(&*log as *const MessageLog as *mut c_void);
    // SAFETY: the log outlives the messenger (both live in DebugMessenger, messenger destroyed first).
    let messenger = unsafe { loader.create_debug_utils_messenger(&info, None) }
        .vk("vkCreateDebugUtilsMessengerEXT")?;
    Ok(DebugMessenger {
        loader,
        messenger,
        log,
    })
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

fn choose_physical_device(
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

fn choose_queue_family(instance: &ash::Instance, pd: vk::PhysicalDevice) -> Result<u32> {
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

fn supported_device_extensions(
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

fn device_info(
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
        non_coherent_atom_size: p.limits.non_coherent_atom_size,
        max_storage_buffer_range: u64::from(p.limits.max_storage_buffer_range),
        min_imported_host_pointer_alignment: capabilities
            .external_memory_host
            .then_some(host.min_imported_host_pointer_alignment),
        capabilities,
    }
}
