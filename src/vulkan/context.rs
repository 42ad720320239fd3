//! The Vulkan instance and device the bridge works with: created here with what interop
//! needs, or wrapped from an engine that already owns them.

use std::ffi::{c_void, CStr, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ash::{ext, vk};

use crate::error::{ApiVersion, Error, ExtensionState, Result, VkResultExt};
use crate::platform::{self, MEMORY_EXTENSION, SEMAPHORE_EXTENSION};
use crate::teardown::{duration_ns, DropBudget, Probe, DEFAULT_DROP_TIMEOUT};
use crate::uuid::Uuid;

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
    /// The `sparseBinding` feature is enabled and the queue can bind sparse memory.
    pub sparse_binding: bool,
    /// The `bufferDeviceAddress` feature is enabled: shared buffers get device addresses.
    pub buffer_device_address: bool,
    /// `VK_NVX_binary_import` is enabled and buffers have device addresses: CUDA kernels can
    /// be launched inside Vulkan command buffers ([`crate::vulkan::CuModule`]).
    pub cuda_kernels: bool,
    /// `VK_NVX_image_view_handle` is enabled and CUDA kernels can run in Vulkan queues
    /// (`cuda_kernels`): such kernels reach images through
    /// [`crate::vulkan::InlineImageHandle`]s ([`crate::vulkan::image_handles_supported`] says
    /// why not).
    pub image_handles: bool,
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
    /// Discrete, integrated, virtual GPU or CPU implementation (lavapipe is `CPU`).
    pub device_type: vk::PhysicalDeviceType,
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
    pub memory: Option<platform::MemoryLoader>,
    pub semaphore: Option<platform::SemaphoreLoader>,
    pub memory_host: Option<ext::external_memory_host::Device>,
    pub binary_import: Option<ash::nvx::binary_import::Device>,
    pub image_view_handle: Option<super::ImageViewHandleLoader>,
}

/// Messages the validation layer reported, shared with its callback.
type MessageLog = Mutex<Vec<String>>;

struct DebugMessenger {
    loader: ext::debug_utils::Instance,
    messenger: vk::DebugUtilsMessengerEXT,
    // Boxed so the pointer given to the callback stays put; freed after the messenger.
    log: Box<MessageLog>,
}

/// The context's own timeline, signalled by every submission made through
/// [`VulkanContext::submit_with_semaphores`] with its submission number, so that an object's
/// drop can wait for exactly the submissions that used it.
pub(crate) struct Progress {
    pub semaphore: vk::Semaphore,
    last: AtomicU64,
}

impl Progress {
    /// The number of the last accepted submission.
    pub fn last_submitted(&self) -> u64 {
        self.last.load(Ordering::Acquire)
    }
    /// Records that submission `number` was accepted (called under the queue lock).
    pub fn submitted(&self, number: u64) {
        self.last.store(number, Ordering::Release);
    }
}

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

/// The parts [`VulkanContext::assemble`] puts together.
struct Parts {
    entry: ash::Entry,
    instance: ash::Instance,
    debug: Option<DebugMessenger>,
    physical_device: vk::PhysicalDevice,
    device: ash::Device,
    queue_family_index: u32,
    queue: vk::Queue,
    enabled: Vec<CString>,
    sparse_binding: bool,
    buffer_device_address: bool,
    owned: bool,
    keep_alive: Option<Box<dyn std::any::Any + Send + Sync>>,
}

/// A Vulkan instance + physical device + logical device + one queue, ready for interop.
///
/// Created by [`VulkanContext::new`] (owns and destroys everything) or wrapped from an
/// engine's objects by [`VulkanContext::from_existing`] (destroys nothing of the engine's).
/// Shared as `Arc<VulkanContext>`: every object made from it holds the Arc, so the device
/// outlives them.
///
/// No drop of the context or of an object made from it waits without bound for the GPU: all
/// of them wait within one drop timeout ([`Self::set_drop_timeout`], default
/// [`crate::DEFAULT_DROP_TIMEOUT`]), then log an error and leak what the GPU may still touch.
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
    supported_extensions: Vec<CString>,
    pub(crate) ext: DeviceExtensions,
    pub(crate) progress: Progress,
    /// The one drop timeout every drop of an object made from this context uses, and what
    /// those drops gave up on (see [`Self::set_drop_timeout`]).
    budget: Arc<DropBudget>,
    owned: bool,
    /// What keeps a wrapped device alive (e.g. the `wgpu::Device` it belongs to): dropped
    /// after [`Drop::drop`] has destroyed everything the context made on the device.
    keep_alive: Option<Box<dyn std::any::Any + Send + Sync>>,
}

/// Device-level functions above Vulkan 1.0 the crate calls: each must resolve on a wrapped
/// device before the crate accepts it (ash turns an unresolved one into an abort).
const DEVICE_FUNCTIONS: [&CStr; 5] = [
    c"vkGetBufferMemoryRequirements2",
    c"vkGetImageMemoryRequirements2",
    c"vkGetSemaphoreCounterValue",
    c"vkWaitSemaphores",
    c"vkSignalSemaphore",
];
/// Device-level functions of optional extensions, checked where the extension is enabled.
const HOST_MEMORY_FUNCTIONS: [&CStr; 1] = [c"vkGetMemoryHostPointerPropertiesEXT"];
const BINARY_IMPORT_FUNCTIONS: [&CStr; 5] = [
    c"vkCreateCuModuleNVX",
    c"vkCreateCuFunctionNVX",
    c"vkDestroyCuModuleNVX",
    c"vkDestroyCuFunctionNVX",
    c"vkCmdCuLaunchKernelNVX",
];
const IMAGE_VIEW_HANDLE_FUNCTIONS: [&CStr; 1] = [c"vkGetImageViewHandleNVX"];
/// Instance-level functions above Vulkan 1.0 the crate calls.
const INSTANCE_FUNCTIONS: [&CStr; 5] = [
    c"vkGetPhysicalDeviceProperties2",
    c"vkGetPhysicalDeviceImageFormatProperties2",
    c"vkGetPhysicalDeviceFeatures2",
    c"vkGetPhysicalDeviceExternalBufferProperties",
    c"vkGetPhysicalDeviceExternalSemaphoreProperties",
];

impl VulkanContext {
    /// Creates an instance and a device with what interop needs: the platform's external
    /// memory extension (required), external semaphore and host-memory extensions (where
    /// supported), timeline semaphores (required) and sparse binding (where supported), and
    /// for CUDA kernels inside Vulkan queues `VK_NVX_binary_import`, `bufferDeviceAddress` and
    /// `VK_NVX_image_view_handle` (where supported).
    pub fn new(config: VulkanConfig) -> Result<Arc<Self>> {
        let entry = load_entry()?;
        let guard = create_instance(&entry, &config)?;
        let instance = guard.instance_ref();
        let physical_device = choose_physical_device(instance, config.device)?;
        check_device_version(instance, physical_device)?;
        let queue_family_index = choose_queue_family(instance, physical_device)?;
        let plan = DevicePlan::new(
            instance,
            physical_device,
            queue_family_index,
            &config.device_extensions,
        )?;
        let device = plan.create(instance, physical_device, queue_family_index)?;
        // SAFETY: the queue family was requested with one queue at index 0.
        let queue = unsafe { device.get_device_queue(queue_family_index, 0) };
        let (instance, debug) = guard.release();
        Self::assemble(Parts {
            entry,
            instance,
            debug,
            physical_device,
            device,
            queue_family_index,
            queue,
            enabled: plan.extensions.iter().map(|&e| e.to_owned()).collect(),
            sparse_binding: plan.sparse_binding,
            buffer_device_address: plan.buffer_device_address,
            owned: true,
            keep_alive: None,
        })
    }

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
    unsafe fn wrap_existing(
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
            owned: false,
            keep_alive,
        })
    }

    fn assemble(parts: Parts) -> Result<Arc<Self>> {
        let (instance, device) = (&parts.instance, &parts.device);
        let has = |name: &CStr| parts.enabled.iter().any(|e| e.as_c_str() == name);
        let ext = DeviceExtensions {
            memory: has(MEMORY_EXTENSION).then(|| platform::MemoryLoader::new(instance, device)),
            semaphore: has(SEMAPHORE_EXTENSION)
                .then(|| platform::SemaphoreLoader::new(instance, device)),
            memory_host: has(ext::external_memory_host::NAME)
                .then(|| ext::external_memory_host::Device::new(instance, device)),
            binary_import: has(ash::nvx::binary_import::NAME)
                .then(|| ash::nvx::binary_import::Device::new(instance, device)),
            image_view_handle: has(ash::nvx::image_view_handle::NAME)
                .then(|| super::ImageViewHandleLoader::new(instance, device)),
        };
        let cuda_kernels = ext.binary_import.is_some() && parts.buffer_device_address;
        let capabilities = Capabilities {
            external_memory: ext.memory.is_some(),
            external_semaphore: ext.semaphore.is_some(),
            external_memory_host: ext.memory_host.is_some(),
            sparse_binding: parts.sparse_binding,
            buffer_device_address: parts.buffer_device_address,
            cuda_kernels,
            image_handles: cuda_kernels && ext.image_view_handle.is_some(),
        };
        let info = device_info(instance, parts.physical_device, capabilities);
        // SAFETY: valid physical device of this instance.
        let memory_properties =
            unsafe { instance.get_physical_device_memory_properties(parts.physical_device) };
        let supported_extensions = supported_device_extensions(instance, parts.physical_device)?;
        let progress = create_progress(device)?;
        Ok(Arc::new(Self {
            entry: parts.entry,
            instance: parts.instance,
            debug: parts.debug,
            physical_device: parts.physical_device,
            device: parts.device,
            queue_family_index: parts.queue_family_index,
            queue: Mutex::new(parts.queue),
            memory_properties,
            info,
            supported_extensions,
            ext,
            progress,
            budget: Arc::new(DropBudget::new(DEFAULT_DROP_TIMEOUT)),
            owned: parts.owned,
            keep_alive: parts.keep_alive,
        }))
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
    /// The handle is `vk::Queue::null()` where the context has no queue ([`Self::has_queue`]).
    pub fn lock_queue(&self) -> MutexGuard<'_, vk::Queue> {
        // A poisoned lock only means another thread panicked mid-submit; the handle is fine.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Whether the context has a queue of its own to submit to (see [`ExistingVulkan::queue`]).
    pub fn has_queue(&self) -> bool {
        *self.lock_queue() != vk::Queue::null()
    }
    /// Refuses with [`Error::NoQueue`] where the context has no queue: checked before a
    /// submitting call creates anything.
    pub(crate) fn require_queue(&self, needed_for: &'static str) -> Result<()> {
        if self.has_queue() {
            Ok(())
        } else {
            Err(Error::NoQueue { needed_for })
        }
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

    /// Whether an extension the device lacks is missing from the device or only from the
    /// extensions enabled on it.
    pub fn extension_state(&self, name: &CStr) -> ExtensionState {
        if self
            .supported_extensions
            .iter()
            .any(|e| e.as_c_str() == name)
        {
            ExtensionState::NotEnabled
        } else {
            ExtensionState::NotSupported
        }
    }
}

impl VulkanContext {
    /// How long, in all, drops of objects made from this context wait for GPU work that still
    /// uses them before they give up: they then log an error and leak what the GPU may still
    /// touch (until that work finishes, if ever) rather than free it in use or hang. The
    /// context's own drop waits as long for its queue, then leaks the device rather than
    /// destroy it under the GPU. Starts at [`crate::DEFAULT_DROP_TIMEOUT`].
    pub fn drop_timeout(&self) -> Duration {
        self.budget.timeout()
    }

    /// Sets [`Self::drop_timeout`] for every drop that starts after this (`Duration::MAX`: wait
    /// without bound). It is one budget, not one per object: once a drop has given up, later
    /// drops on this context do not wait at all until the work it gave up on has finished
    /// (see [`Self::is_wedged`]), so a teardown with the GPU stuck costs one timeout, not one
    /// per object. Works for every context, however it was made (a bridge's:
    /// `bridge.vulkan().set_drop_timeout(..)`).
    ///
    /// What it cannot bound: a CUDA free that the driver itself makes wait. Measured on an
    /// H100 (driver 580): with any stream of the CUDA context stuck (e.g. waiting for a value
    /// nobody writes), `cuMemFree`-class calls and new pinned allocations waited until that
    /// stream finished, whoever owned it. Release such a stream before dropping.
    pub fn set_drop_timeout(&self, timeout: Duration) {
        self.budget.set_timeout(timeout);
    }

    /// Whether a drop on this context gave up waiting for GPU work that has still not
    /// finished. Meanwhile drops do not wait, and what they would free is parked (freeing
    /// CUDA memory behind a stuck stream can block in the driver); once that work finishes,
    /// this call (and every drop) frees what was parked and says `false` again.
    pub fn is_wedged(&self) -> bool {
        self.budget.is_wedged()
    }

    /// The budget every drop of an object made from this context waits within.
    pub(crate) fn drop_budget(&self) -> &Arc<DropBudget> {
        &self.budget
    }

    /// A probe that says whether the progress timeline has reached `value` (or the device is
    /// lost). It holds the device's function table and the progress timeline, which live as
    /// long as the device: the context settles its budget before it destroys them.
    fn progress_probe(&self, value: u64) -> Probe {
        let device = self.device.clone();
        let semaphore = self.progress.semaphore;
        Box::new(move || {
            // SAFETY: the progress timeline of a live device (see above).
            unsafe { device.get_semaphore_counter_value(semaphore) }.map_or(true, |v| v >= value)
        })
    }

    /// Waits within the drop budget (as `wait` does, given how long it may wait): on a timeout
    /// the budget is wedged until every submission made so far through the context has
    /// completed, and the error says how long the drop timeout is. For drops that wait on
    /// something else than the progress timeline (a pacer's frames).
    // For the pacers' drops (wgpu::submit's WgpuFramePacer; interop::pacer's FramePacer), which
    // wait on their own timelines.
    pub fn drop_wait(
        &self,
        what: &'static str,
        wait: impl FnOnce(Duration) -> Result<()>,
    ) -> Result<()> {
        match wait(self.budget.allowance()) {
            Err(Error::Timeout { .. }) => {
                self.budget
                    .wedge(self.progress_probe(self.progress.last_submitted()));
                Err(Error::Timeout {
                    what,
                    timeout_ns: self.budget.timeout_ns(),
                })
            }
            other => other,
        }
    }

    /// Waits within the drop budget until submission `number` of
    /// [`Self::submit_with_semaphores`] (and every earlier one) has completed; on a timeout the
    /// budget is wedged until it has.
    // For `Semaphore`'s drop (vulkan::semaphore), which waits for the submissions that used it.
    pub fn drop_wait_submissions(&self, number: u64) -> Result<()> {
        if number == 0 {
            return Ok(());
        }
        // SAFETY: the progress timeline is destroyed only with the device.
        unsafe {
            self.drop_wait_timeline(
                self.progress.semaphore,
                number,
                "the submissions that used an object",
            )
        }
    }

    /// Waits within the drop budget until timeline `semaphore` of this device reaches
    /// `value`; on a timeout the budget is wedged until it has.
    ///
    /// # Safety
    /// `semaphore` must be a timeline semaphore of this device that, if this returns an error,
    /// is never destroyed (the budget's probe reads its counter until the context goes).
    // For `Semaphore`'s drop (vulkan::semaphore), which waits for its last scheduled signal.
    pub unsafe fn drop_wait_timeline(
        &self,
        semaphore: vk::Semaphore,
        value: u64,
        what: &'static str,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        let waited = unsafe { self.wait_timeline(semaphore, value, self.budget.allowance(), what) };
        if let Err(Error::Timeout { .. }) = waited {
            let device = self.device.clone();
            self.budget.wedge(Box::new(move || {
                // SAFETY: the caller leaks the semaphore (never destroys it) after an error,
                // and the device lives until the context settles its budget.
                unsafe { device.get_semaphore_counter_value(semaphore) }
                    .map_or(true, |v| v >= value)
            }));
        }
        waited
    }

    /// Waits on the host until timeline `semaphore` reaches `value`, at most `timeout`; a
    /// timeout is reported with the context's drop timeout (what the caller's wait was bounded
    /// by).
    ///
    /// # Safety
    /// `semaphore` must be a live timeline semaphore of this device.
    unsafe fn wait_timeline(
        &self,
        semaphore: vk::Semaphore,
        value: u64,
        timeout: Duration,
        what: &'static str,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        if unsafe { self.wait_semaphore_value(semaphore, value, timeout) }? {
            Ok(())
        } else {
            Err(Error::Timeout {
                what,
                timeout_ns: self.budget.timeout_ns(),
            })
        }
    }

    /// `vkWaitSemaphores` for one timeline value, at most `timeout`: whether it was reached
    /// (`false`: timed out).
    ///
    /// # Safety
    /// `semaphore` must be a live timeline semaphore of this device.
    pub(crate) unsafe fn wait_semaphore_value(
        &self,
        semaphore: vk::Semaphore,
        value: u64,
        timeout: Duration,
    ) -> Result<bool> {
        let sems = [semaphore];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&sems)
            .values(&values);
        // SAFETY: a live timeline semaphore of this device (caller).
        match unsafe { self.device.wait_semaphores(&info, duration_ns(timeout)) } {
            Ok(()) => Ok(true),
            Err(vk::Result::TIMEOUT) => Ok(false),
            Err(result) => Err(Error::vulkan("vkWaitSemaphores", result)),
        }
    }

    /// An empty submission to the context's queue with a fence: the fence signals after
    /// everything submitted to the queue before it, so waiting for it with a timeout is a
    /// bounded `vkQueueWaitIdle`, which covers submissions made on the queue without
    /// [`Self::submit_with_semaphores`] too. (A fence, not a signal of the progress timeline:
    /// nothing is left pending on any semaphore.) `None` where the context has no queue.
    fn fence_queue(&self) -> Result<Option<vk::Fence>> {
        let queue = self.lock_queue();
        if *queue == vk::Queue::null() {
            return Ok(None);
        }
        // SAFETY: a plain fence of this device.
        let fence = unsafe {
            self.device
                .create_fence(&vk::FenceCreateInfo::default(), None)
        }
        .vk("vkCreateFence")?;
        // SAFETY: the queue is locked; an empty submission with our new, unsignalled fence.
        if let Err(e) = unsafe { self.device.queue_submit(*queue, &[], fence) } {
            // SAFETY: the fence was never submitted.
            unsafe { self.device.destroy_fence(fence, None) };
            return Err(Error::vulkan("vkQueueSubmit", e));
        }
        Ok(Some(fence))
    }

    /// Waits, within the drop budget, until the GPU no longer runs anything of the context's:
    /// for a device the context owns, everything submitted to its queue (through a
    /// [`Self::fence_queue`] submission); for an engine's device, the context's own
    /// submissions only (its queue is the engine's, to which the context must not submit
    /// behind the engine's back). `Ok` also where the device is lost (nothing runs any more).
    fn wait_idle_for_drop(&self) -> Result<()> {
        let lost = |r: &Result<()>| {
            matches!(
                r,
                Err(Error::Vulkan {
                    result: vk::Result::ERROR_DEVICE_LOST,
                    ..
                })
            )
        };
        if self.owned {
            let fence = match self.fence_queue() {
                Ok(fence) => fence,
                Err(Error::Vulkan {
                    result: vk::Result::ERROR_DEVICE_LOST,
                    ..
                }) => return Ok(()),
                Err(e) => return Err(e),
            };
            if let Some(fence) = fence {
                let timeout_ns = duration_ns(self.budget.allowance());
                // SAFETY: our fence, submitted above.
                let waited =
                    match unsafe { self.device.wait_for_fences(&[fence], true, timeout_ns) } {
                        Ok(()) => Ok(()),
                        Err(vk::Result::TIMEOUT) => Err(Error::Timeout {
                            what: "the work on the context's queue",
                            timeout_ns: self.budget.timeout_ns(),
                        }),
                        Err(result) => Err(Error::vulkan("vkWaitForFences", result)),
                    };
                if waited.is_ok() || lost(&waited) {
                    // SAFETY: signalled (or the device is lost): no queue uses it any more.
                    unsafe { self.device.destroy_fence(fence, None) };
                    return Ok(());
                }
                // Still pending: the fence goes with the device, which the caller leaks.
                return waited;
            }
        }
        // SAFETY: the progress timeline is alive until the device is destroyed, after this.
        let waited = unsafe {
            self.wait_timeline(
                self.progress.semaphore,
                self.progress.last_submitted(),
                self.budget.allowance(),
                "the context's own submissions",
            )
        };
        if lost(&waited) {
            return Ok(());
        }
        waited
    }
}

impl Drop for VulkanContext {
    fn drop(&mut self) {
        // Every object made from this context holds an Arc to it, so none is alive now; what
        // their drops parked holds no Arc to it either (it would be alive otherwise). Wait
        // (bounded) until the GPU runs nothing of ours, and until whatever a drop gave up on
        // has finished (freeing what was parked), or else leak.
        let idle = self.wait_idle_for_drop().and_then(|()| {
            if self.budget.is_wedged() {
                Err(Error::Timeout {
                    what: "GPU work an earlier drop gave up on",
                    timeout_ns: self.budget.timeout_ns(),
                })
            } else {
                Ok(())
            }
        });
        if let Err(e) = idle {
            log::error!(
                "VulkanContext dropped while its GPU work is still running ({e}); leaking {} \
                 rather than destroy it under the GPU or hang",
                if self.owned {
                    "the device, the instance and every object on them"
                } else {
                    "its timeline and what keeps the device alive"
                }
            );
            // The loader must stay loaded and the validation log alive as long as the driver
            // may still call into them; the engine's device stays alive too.
            std::mem::forget(self.entry.clone());
            std::mem::forget(self.debug.take());
            std::mem::forget(self.keep_alive.take());
            return;
        }
        if self.owned {
            // Never beside an NVX module load (see `driver_lock`).
            let _driver = super::driver_lock();
            // SAFETY: we created the device and instance; nothing runs on the device any more
            // (its queue's last submission completed) and every object made from it is gone.
            unsafe {
                self.device.destroy_semaphore(self.progress.semaphore, None);
                self.device.destroy_device(None);
                if let Some(d) = self.debug.take() {
                    d.loader.destroy_debug_utils_messenger(d.messenger, None);
                }
                self.instance.destroy_instance(None);
            }
            return;
        }
        // SAFETY: our own semaphore; every submission that signals it has completed. A
        // messenger of ours (never the engine's) goes before the instance it was made on,
        // which `keep_alive` (dropped after this) keeps alive.
        unsafe {
            self.device.destroy_semaphore(self.progress.semaphore, None);
            if let Some(d) = self.debug.take() {
                d.loader.destroy_debug_utils_messenger(d.messenger, None);
            }
        }
        // What keeps the engine's device alive may be its last owner (a wgpu device cuvk
        // opened): its destruction must not run beside an NVX module load either.
        if let Some(keep_alive) = self.keep_alive.take() {
            let _driver = super::driver_lock();
            drop(keep_alive);
        }
    }
}

/// Destroys a half-built instance if device creation fails.
struct InstanceGuard {
    instance: ash::Instance,
    debug: Option<DebugMessenger>,
}

impl InstanceGuard {
    fn instance_ref(&self) -> &ash::Instance {
        &self.instance
    }
    /// Hands the instance (and messenger) on: the guard no longer destroys them.
    fn release(self) -> (ash::Instance, Option<DebugMessenger>) {
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

fn load_entry() -> Result<ash::Entry> {
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

fn create_instance(entry: &ash::Entry, config: &VulkanConfig) -> Result<InstanceGuard> {
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

fn check_device_version(instance: &ash::Instance, pd: vk::PhysicalDevice) -> Result<()> {
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
struct DevicePlan {
    extensions: Vec<&'static CStr>,
    sparse_binding: bool,
    buffer_device_address: bool,
}

impl DevicePlan {
    fn new(
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
        let buffer_device_address = f12.buffer_device_address == vk::TRUE;
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
        })
    }

    fn create(
        &self,
        instance: &ash::Instance,
        pd: vk::PhysicalDevice,
        queue_family_index: u32,
    ) -> Result<ash::Device> {
        let names: Vec<*const i8> = self.extensions.iter().map(|e| e.as_ptr()).collect();
        let features = vk::PhysicalDeviceFeatures::default().sparse_binding(self.sparse_binding);
        let mut enable12 = vk::PhysicalDeviceVulkan12Features::default()
            .timeline_semaphore(true)
            .buffer_device_address(self.buffer_device_address);
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
        let _driver = super::driver_lock();
        // SAFETY: the physical device came from this instance; all pointers live across the call.
        unsafe { instance.create_device(pd, &device_info, None) }.vk("vkCreateDevice")
    }
}

/// Every check of [`VulkanContext::from_existing`], in an order that calls no function
/// before it is known to exist.
///
/// # Safety
/// As [`VulkanContext::from_existing`].
unsafe fn validate_existing(e: &ExistingVulkan<'_>) -> Result<()> {
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

fn create_progress(device: &ash::Device) -> Result<Progress> {
    let mut type_info = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(vk::SemaphoreType::TIMELINE)
        .initial_value(0);
    let info = vk::SemaphoreCreateInfo::default().push_next(&mut type_info);
    // SAFETY: a valid device with timelineSemaphore enabled (checked by both constructors).
    let semaphore = unsafe { device.create_semaphore(&info, None) }.vk("vkCreateSemaphore")?;
    Ok(Progress {
        semaphore,
        last: AtomicU64::new(0),
    })
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
    log::warn!("vulkan validation: {line}");
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
        device_type: p.device_type,
        non_coherent_atom_size: p.limits.non_coherent_atom_size,
        max_storage_buffer_range: u64::from(p.limits.max_storage_buffer_range),
        min_imported_host_pointer_alignment: capabilities
            .external_memory_host
            .then_some(host.min_imported_host_pointer_alignment),
        capabilities,
    }
}
