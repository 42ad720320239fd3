//! The Vulkan instance and device the bridge works with: created here with what interop
//! needs, or wrapped from an engine that already owns them. By concern: `config` (what a
//! context is asked for and what it found), `instance` (loader, instance, validation
//! messenger), `adapter` (the physical device, queue family and what is enabled on it),
//! `adopt` (an engine's own device, checked); here, the context itself and its teardown.

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ash::{ext, vk};

use crate::error::{Error, ExtensionState, Result, VkResultExt};
use crate::platform::{self, MEMORY_EXTENSION, SEMAPHORE_EXTENSION};
use crate::teardown::{duration_ns, DropBudget, Probe, DEFAULT_DROP_TIMEOUT};

mod adapter;
mod adopt;
mod config;
mod instance;

pub use adapter::physical_device_uuids;
use adapter::{
    check_device_version, choose_physical_device, choose_queue_family, device_info,
    supported_device_extensions, DevicePlan,
};
pub use adopt::{timeline_semaphore_supported, ExistingVulkan};
pub use config::{
    Capabilities, DeviceChoice, DeviceInfo, Validation, VulkanConfig, MIN_API_VERSION,
};
pub use instance::validation_layer_available;
use instance::{create_instance, load_entry, DebugMessenger};

/// Extension loaders, present where the extension is enabled.
pub(crate) struct DeviceExtensions {
    pub memory: Option<platform::MemoryLoader>,
    pub semaphore: Option<platform::SemaphoreLoader>,
    pub memory_host: Option<ext::external_memory_host::Device>,
    pub binary_import: Option<ash::nvx::binary_import::Device>,
    pub image_view_handle: Option<crate::vulkan::ImageViewHandleLoader>,
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
    int64_atomics: bool,
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
            int64_atomics: plan.int64_atomics,
            owned: true,
            keep_alive: None,
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
                .then(|| crate::vulkan::ImageViewHandleLoader::new(instance, device)),
        };
        let cuda_kernels = ext.binary_import.is_some() && parts.buffer_device_address;
        let capabilities = Capabilities {
            external_memory: ext.memory.is_some(),
            external_semaphore: ext.semaphore.is_some(),
            external_memory_host: ext.memory_host.is_some(),
            sparse_binding: parts.sparse_binding,
            buffer_device_address: parts.buffer_device_address,
            int64_atomics: parts.int64_atomics,
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
            let _driver = crate::vulkan::driver_lock();
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
            let _driver = crate::vulkan::driver_lock();
            drop(keep_alive);
        }
    }
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
