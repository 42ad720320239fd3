//! The Vulkan loader, the instance and the validation layer's messenger.

use std::ffi::{c_void, CStr};
use std::sync::Mutex;

use ash::{ext, vk};

use super::config::{Validation, VulkanConfig, MIN_API_VERSION};
use crate::error::{ApiVersion, Error, Result, VkResultExt};

pub(super) const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// Messages the validation layer reported, shared with its callback.
pub(super) type MessageLog = Mutex<Vec<String>>;

pub(super) struct DebugMessenger {
    pub(super) loader: ext::debug_utils::Instance,
    pub(super) messenger: vk::DebugUtilsMessengerEXT,
    // Boxed so the pointer given to the callback stays put; freed after the messenger.
    pub(super) log: Box<MessageLog>,
}

/// Destroys a half-built instance if device creation fails.
pub(super) struct InstanceGuard {
    pub(super) instance: ash::Instance,
    pub(super) debug: Option<DebugMessenger>,
}

impl InstanceGuard {
    pub(super) fn instance_ref(&self) -> &ash::Instance {
        &self.instance
    }
    /// Hands the instance (and messenger) on: the guard no longer destroys them.
    pub(super) fn release(self) -> (ash::Instance, Option<DebugMessenger>) {
        let mut me = std::mem::ManuallyDrop::new(self);
        (me.instance.clone(), me.debug.take())
    }
}

impl Drop for InstanceGuard {
    fn drop(&mut self) {
        // SAFETY: nothing made from this instance survives a failed creation.
        unsafe {
            if let Some(d) = self.debug.take() {
                d.loader.destroy_debug_utils_messenger(d.messenger, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

pub(super) fn load_entry() -> Result<ash::Entry> {
    // SAFETY: loading the system Vulkan loader runs its initialisers; nothing else is
    // loaded into the process by it that we rely on being absent.
    let entry = unsafe { ash::Entry::load() }.map_err(|e| Error::VulkanLoader(e.to_string()))?;
    // SAFETY: entry is a loaded Vulkan entry point.
    let version = unsafe { entry.try_enumerate_instance_version() }
        .vk("vkEnumerateInstanceVersion")?
        .unwrap_or(vk::API_VERSION_1_0);
    if version < MIN_API_VERSION {
        return Err(Error::ApiVersion {
            what: "loader",
            found: ApiVersion(version),
            required: ApiVersion(MIN_API_VERSION),
        });
    }
    Ok(entry)
}

pub(super) fn create_instance(entry: &ash::Entry, config: &VulkanConfig) -> Result<InstanceGuard> {
    let validation = config.validation;
    let layer_present = validation != Validation::Off && validation_layer_available(entry)?;
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
        instance,
        debug: None,
    };
    if layer_present {
        guard.debug = Some(create_messenger(entry, guard.instance_ref())?);
    }
    Ok(guard)
}

/// Whether the Khronos validation layer (`VK_LAYER_KHRONOS_validation`) is installed: what
/// [`Validation::IfAvailable`] looks for.
pub fn validation_layer_available(entry: &ash::Entry) -> Result<bool> {
    // SAFETY: entry is loaded.
    let layers = unsafe { entry.enumerate_instance_layer_properties() }
        .vk("vkEnumerateInstanceLayerProperties")?;
    Ok(layers
        .iter()
        .any(|l| l.layer_name_as_c_str().ok() == Some(VALIDATION_LAYER)))
}

pub(super) unsafe extern "system" fn debug_callback(
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
    log::warn!("vulkan validation: {line}");
    // SAFETY: `user` is the Box<MessageLog> that lives until after the messenger is destroyed.
    if let Some(log) = unsafe { (user as *const MessageLog).as_ref() } {
        log.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }
    vk::FALSE
}

pub(super) fn create_messenger(
    entry: &ash::Entry,
    instance: &ash::Instance,
) -> Result<DebugMessenger> {
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
