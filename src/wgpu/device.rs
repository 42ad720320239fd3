//! [`WgpuDevice`]: a wgpu device and queue with cuvk's view of the same `VkDevice`, opened with
//! what sharing needs or adopted from an application that opened it.

use std::ffi::CStr;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use ::wgpu::hal;
use ash::vk;

use crate::vulkan::{
    physical_device_uuids, timeline_semaphore_supported, DeviceChoice, Validation, VulkanContext,
    MIN_API_VERSION,
};
use crate::wgpu::hal_vk::{wrong_backend, Vk};
use crate::wgpu::queue_order::QueueOrder;
use crate::{
    ApiVersion, Capability, DeviceObject, DeviceOwner, Error, ExtensionState, Result, Uuid,
    WgpuError, WgpuObject, MEMORY_EXTENSION, SEMAPHORE_EXTENSION,
};

/// The highest instance `apiVersion` wgpu-hal 30 creates its instance with
/// (`wgpu_hal::vulkan::Instance::init`): what the instance's core functions are bounded by.
const WGPU_HAL_MAX_API_VERSION: u32 = vk::API_VERSION_1_3;

/// Options for [`WgpuDevice::new`]. The default: no validation layer, the best adapter that
/// can share memory, no wgpu features beyond what cuvk enables itself, the adapter's own
/// limits.
#[derive(Debug, Clone, Default)]
pub struct WgpuConfig {
    /// Validation layer use (default: off). `IfAvailable` and `Required` create the instance
    /// with `InstanceFlags::VALIDATION` ([`create_instance`]) and record every message for
    /// [`WgpuDevice::validation_messages`].
    pub validation: Validation,
    /// Which Vulkan adapter: the best that can share memory, or the one with a `deviceUUID`
    /// (a CUDA device's UUID).
    pub device: DeviceChoice,
    /// The wgpu features to enable (each must be offered by the adapter).
    pub features: ::wgpu::Features,
    /// The wgpu limits to require; `None` asks for the adapter's own limits (the largest
    /// buffers it can bind, which a million-particle buffer needs).
    pub limits: Option<::wgpu::Limits>,
}

/// A wgpu device and queue (Vulkan backend) together with cuvk's [`VulkanContext`] for the
/// same `VkDevice`, on which shared memory and semaphores are made.
///
/// The context never submits: it has no queue of its own (wgpu-hal's queue has no lock that
/// cuvk could take), so every submission goes through wgpu ([`Self::submit`]). It holds the
/// `wgpu::Device`, so the `VkDevice` outlives every cuvk object made on it, in whatever order
/// wgpu objects and cuvk objects are dropped.
///
/// wgpu frees a resource (and runs the drop callback that releases cuvk's share of a
/// wrapped buffer) when the device is polled or submitted to after the GPU is done with it:
/// poll the device as wgpu asks for, also before the last handle goes.
///
/// Clones share one device. When the last clone goes, it waits (within the context's drop
/// budget, [`VulkanContext::set_drop_timeout`]) for cuvk's submissions on wgpu's queue to
/// complete; if they do not (one waits for a semaphore value nobody signals), it logs that
/// and leaks its handles of the wgpu device and queue rather than drop them: wgpu waits for
/// its queue to be idle, without bound, when the last handle of the queue goes.
#[derive(Clone)]
pub struct WgpuDevice {
    shared: Arc<Shared>,
}

/// What the clones of a [`WgpuDevice`] share.
struct Shared {
    // Dropped by Drop::drop only once cuvk's submissions completed; leaked otherwise.
    device: ManuallyDrop<::wgpu::Device>,
    queue: ManuallyDrop<::wgpu::Queue>,
    vulkan: Arc<VulkanContext>,
    order: Arc<QueueOrder>,
    adapter: Option<::wgpu::Adapter>,
    instance: Option<::wgpu::Instance>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Within the context's drop budget (VulkanContext::drop_timeout).
        let last = self.vulkan.last_submission();
        if let Err(e) = self.vulkan.drop_wait_submissions(last) {
            log::error!(
                "WgpuDevice dropped while cuvk's submission {last} on wgpu's queue has not \
                 completed ({e}); leaking cuvk's handles of the wgpu device and queue, so \
                 that wgpu does not wait for its queue without bound"
            );
            return;
        }
        // The last handle of the device destroys it: never beside an NVX module load.
        let _driver = crate::vulkan::driver_lock();
        // SAFETY: each field is dropped once, here, and never used again.
        unsafe {
            ManuallyDrop::drop(&mut self.queue);
            ManuallyDrop::drop(&mut self.device);
        }
    }
}

impl std::fmt::Debug for WgpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuDevice")
            .field("device", &self.shared.vulkan.info().describe())
            .finish_non_exhaustive()
    }
}

/// The `deviceUUID` of a wgpu adapter (Vulkan backend): equals CUDA's UUID for the same GPU.
pub fn adapter_uuid(adapter: &::wgpu::Adapter) -> Result<Uuid> {
    // SAFETY: the hal adapter is only read (its instance and physical device handles).
    let hal = unsafe { adapter.as_hal::<Vk>() }.ok_or_else(|| wrong_backend_adapter(adapter))?;
    let (uuid, _, _) = physical_device_uuids(
        hal.shared_instance().raw_instance(),
        hal.raw_physical_device(),
    );
    Ok(uuid)
}

fn wrong_backend_adapter(adapter: &::wgpu::Adapter) -> Error {
    WgpuError::WrongBackend {
        object: WgpuObject::Adapter,
        backend: adapter.get_info().backend.to_str(),
    }
    .into()
}

/// [`WgpuError::Call`] for a failed wgpu call.
pub(crate) fn call_failed(call: &'static str, e: impl std::fmt::Display) -> Error {
    WgpuError::Call {
        call,
        message: e.to_string(),
    }
    .into()
}

/// Drives a wgpu future that completes at once on native backends (wgpu-core's are ready
/// when returned), without an executor.
pub(crate) fn ready<F: Future>(call: &'static str, future: F) -> Result<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Ok(v),
        std::task::Poll::Pending => Err(WgpuError::NotReady { call }.into()),
    }
}

/// A wgpu instance on the Vulkan backend with the validation wanted, and whether the
/// validation layer's messages can be recorded on it.
///
/// With validation, the instance has `InstanceFlags::VALIDATION` (the Khronos layer, with
/// wgpu's synchronisation validation) and `VK_EXT_debug_utils`, added by cuvk so that
/// [`WgpuDevice`] can record every message; not `InstanceFlags::DEBUG`, whose WGSL source
/// embedded in SPIR-V (`OpSource` language 10) older layers (1.3.239, Debian 12) reject as
/// invalid. `Required` fails with [`Error::ValidationLayerMissing`] where the layer is not
/// installed.
pub fn create_instance(validation: Validation) -> Result<(::wgpu::Instance, bool)> {
    let layer = match validation {
        Validation::Off => false,
        Validation::IfAvailable | Validation::Required => {
            // SAFETY: loading the system Vulkan loader runs its initialisers only.
            let entry =
                unsafe { ash::Entry::load() }.map_err(|e| Error::VulkanLoader(e.to_string()))?;
            crate::vulkan::validation_layer_available(&entry)?
        }
    };
    if validation == Validation::Required && !layer {
        return Err(Error::ValidationLayerMissing);
    }
    if !layer {
        let mut desc = ::wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = ::wgpu::Backends::VULKAN;
        desc.flags = ::wgpu::InstanceFlags::empty();
        return Ok((::wgpu::Instance::new(desc), false));
    }
    let desc = hal::InstanceDescriptor {
        name: "cuvk",
        flags: ::wgpu::InstanceFlags::VALIDATION,
        memory_budget_thresholds: Default::default(),
        backend_options: Default::default(),
        telemetry: None,
        display: None,
    };
    let callback: Box<hal::vulkan::CreateInstanceCallback<'_>> = Box::new(
        |args: hal::vulkan::CreateInstanceCallbackArgs<'_, '_, '_>| {
            let debug_utils = ash::ext::debug_utils::NAME;
            // SAFETY: a loaded entry; the query only reads.
            let offered = unsafe { args.entry.enumerate_instance_extension_properties(None) }
                .is_ok_and(|all| {
                    all.iter()
                        .any(|e| e.extension_name_as_c_str() == Ok(debug_utils))
                });
            if offered && !args.extensions.contains(&debug_utils) {
                args.extensions.push(debug_utils);
            }
        },
    );
    // SAFETY: the callback only adds an extension the loader offers (checked).
    let hal_instance = unsafe { hal::vulkan::Instance::init_with_callback(&desc, Some(callback)) }
        .map_err(|e| call_failed("wgpu_hal::vulkan::Instance::init_with_callback", e))?;
    let recorded = hal_instance
        .shared_instance()
        .extensions()
        .contains(&ash::ext::debug_utils::NAME);
    if validation == Validation::Required && !recorded {
        return Err(Error::ValidationLayerMissing);
    }
    // SAFETY: a live hal instance of the Vulkan backend, handed over to wgpu.
    let instance = unsafe { ::wgpu::Instance::from_hal::<Vk>(hal_instance) };
    Ok((instance, recorded))
}

/// What a physical device offers that [`WgpuDevice::open`] turns on.
struct Offer {
    /// Device extensions to add to wgpu's list.
    extensions: Vec<&'static CStr>,
    /// Whether to chain a `bufferDeviceAddress` feature struct (wgpu does not).
    chain_buffer_device_address: bool,
    /// Whether the device will have `bufferDeviceAddress` enabled.
    buffer_device_address: bool,
}

impl WgpuDevice {
    /// Creates a wgpu instance (Vulkan backend, validation as `config` says), picks the adapter
    /// `config.device` names and opens it with [`Self::open`].
    pub fn new(config: WgpuConfig) -> Result<Self> {
        let (instance, _) = create_instance(config.validation)?;
        let adapter = adapter_for(&instance, config.device)?;
        let desc = ::wgpu::DeviceDescriptor {
            label: Some("cuvk"),
            required_features: config.features,
            required_limits: config.limits.unwrap_or_else(|| adapter.limits()),
            ..Default::default()
        };
        let mut shared = Self::open_shared(&adapter, &desc)?;
        shared.instance = Some(instance);
        Ok(Self {
            shared: Arc::new(shared),
        })
    }

    /// Opens `adapter` (Vulkan backend) as a wgpu device with what cuvk needs besides what
    /// `desc` asks for: the platform's external memory extension (required), its external
    /// semaphore extension, `VK_NVX_binary_import` and `VK_NVX_image_view_handle` (where
    /// offered), `bufferDeviceAddress`
    /// (where offered; shared buffers then have device addresses), and timeline semaphores
    /// (required; wgpu-hal enables them wherever the device has them).
    ///
    /// Everything is checked before the device is created: the adapter's backend and Vulkan
    /// version, the extensions and features above, and `desc`'s features and limits against
    /// the adapter's (as wgpu's `request_device` checks them).
    ///
    /// Where the instance has `VK_EXT_debug_utils` ([`create_instance`] with validation),
    /// the validation layer's messages are recorded ([`Self::validation_messages`]).
    pub fn open(adapter: &::wgpu::Adapter, desc: &::wgpu::DeviceDescriptor<'_>) -> Result<Self> {
        Ok(Self {
            shared: Arc::new(Self::open_shared(adapter, desc)?),
        })
    }

    fn open_shared(
        adapter: &::wgpu::Adapter,
        desc: &::wgpu::DeviceDescriptor<'_>,
    ) -> Result<Shared> {
        validate_request(adapter, desc)?;
        let open = {
            // SAFETY: the hal adapter is used to open a device as wgpu itself would, with
            // extensions and features added that the physical device offers (checked).
            let hal =
                unsafe { adapter.as_hal::<Vk>() }.ok_or_else(|| wrong_backend_adapter(adapter))?;
            let offer = offer(&hal, desc.required_features)?;
            let mut address = vk::PhysicalDeviceBufferDeviceAddressFeatures::default()
                .buffer_device_address(true);
            let callback = device_callback(
                offer.extensions.clone(),
                offer.chain_buffer_device_address.then_some(&mut address),
            );
            // vkCreateDevice with the NVX extensions: never beside an NVX module load.
            let driver = crate::vulkan::driver_lock();
            // SAFETY: the callback only adds extensions the physical device supports and a
            // feature it offers (checked in `offer`), and removes nothing; features and
            // limits were checked against the adapter's.
            let open = unsafe {
                hal.open_with_callback(
                    desc.required_features,
                    &desc.required_limits,
                    &desc.memory_hints,
                    Some(callback),
                )
            }
            .map_err(|e| call_failed("wgpu_hal::vulkan::Adapter::open_with_callback", e))?;
            drop(driver);
            let record = hal
                .shared_instance()
                .extensions()
                .contains(&ash::ext::debug_utils::NAME);
            (open, offer.buffer_device_address, record)
        };
        let (open, buffer_device_address, validation_log) = open;
        // SAFETY: `open` was created from this adapter's hal adapter, with exactly
        // `desc.required_features` (which the adapter offers: checked).
        let (device, queue) = unsafe { adapter.create_device_from_hal::<Vk>(open, desc) }
            .map_err(|e| call_failed("wgpu::Adapter::create_device_from_hal", e))?;
        let mut shared = Self::wrap(device, queue, buffer_device_address, validation_log)?;
        shared.adapter = Some(adapter.clone());
        Ok(shared)
    }

    /// Adopts a device an application opened itself (Vulkan backend), after checking it has
    /// what cuvk needs: [`Error::MissingExtension`] names an extension the device was created
    /// without (`NotEnabled` where the adapter offers it: open the device with
    /// [`Self::open`] instead), and the same checks as [`VulkanContext::from_existing`] apply.
    /// `bufferDeviceAddress` counts as enabled only where wgpu enabled it (its ray-tracing
    /// features); nothing of the device changes, refused or not.
    pub fn adopt(device: &::wgpu::Device, queue: &::wgpu::Queue) -> Result<Self> {
        let address = {
            // SAFETY: the hal device is only read.
            let hal = unsafe { device.as_hal::<Vk>() }
                .ok_or_else(|| wrong_backend(device, WgpuObject::Device))?;
            // wgpu-hal enables the feature exactly when this name is in its list.
            hal.enabled_device_extensions()
                .contains(&ash::khr::buffer_device_address::NAME)
        };
        let shared = Self::wrap(device.clone(), queue.clone(), address, false)?;
        Ok(Self {
            shared: Arc::new(shared),
        })
    }

    fn wrap(
        device: ::wgpu::Device,
        queue: ::wgpu::Queue,
        buffer_device_address: bool,
        validation_log: bool,
    ) -> Result<Shared> {
        let vulkan = {
            // SAFETY: the hal objects are only read: their handles go to a context that never
            // submits, and that keeps the wgpu::Device (and so the VkDevice and VkInstance)
            // alive until it is dropped.
            let hal = unsafe { device.as_hal::<Vk>() }
                .ok_or_else(|| wrong_backend(&device, WgpuObject::Device))?;
            // SAFETY: as above.
            let hal_queue = unsafe { queue.as_hal::<Vk>() }
                .ok_or_else(|| wrong_backend(&device, WgpuObject::Queue))?;
            if hal_queue.raw_device().handle() != hal.raw_device().handle() {
                return Err(Error::WrongDevice {
                    object: DeviceObject::Queue,
                    owner: DeviceOwner::WgpuDevice,
                });
            }
            // SAFETY: wgpu's live physical device and device of this instance.
            let existing = unsafe {
                crate::existing_vulkan_from_wgpu_hal!(
                    &hal,
                    WGPU_HAL_MAX_API_VERSION,
                    buffer_device_address
                )
            };
            // SAFETY: the handles are wgpu's live instance, physical device and device; the
            // version, extensions and features are what wgpu-hal created them with; the
            // context gets no queue, so it never submits behind wgpu's back; `keep_alive`
            // (the wgpu::Device) keeps the device and instance alive.
            unsafe {
                VulkanContext::from_existing_kept(
                    existing,
                    Box::new(device.clone()),
                    validation_log,
                )
            }?
        };
        let order = QueueOrder::of(&queue, &device)?;
        Ok(Shared {
            device: ManuallyDrop::new(device),
            queue: ManuallyDrop::new(queue),
            vulkan,
            order,
            adapter: None,
            instance: None,
        })
    }

    /// The wgpu device.
    pub fn device(&self) -> &::wgpu::Device {
        &self.shared.device
    }
    /// The adapter the device was opened on ([`Self::new`], [`Self::open`]; `None` when
    /// adopted): for surface capabilities.
    pub fn adapter(&self) -> Option<&::wgpu::Adapter> {
        self.shared.adapter.as_ref()
    }
    /// The instance [`Self::new`] created (`None` otherwise): for window surfaces.
    pub fn instance(&self) -> Option<&::wgpu::Instance> {
        self.shared.instance.as_ref()
    }
    /// The wgpu queue: every submission goes through it.
    pub fn queue(&self) -> &::wgpu::Queue {
        &self.shared.queue
    }
    /// cuvk's view of the same `VkDevice` (no queue of its own): shared memory, semaphores and
    /// CUDA modules are made on it.
    pub fn vulkan(&self) -> &Arc<VulkanContext> {
        &self.shared.vulkan
    }
    /// What orders cuvk's submissions on the queue.
    pub(crate) fn queue_order(&self) -> &QueueOrder {
        &self.shared.order
    }
    /// The `deviceUUID` (equals the CUDA device's UUID for the same GPU).
    pub fn uuid(&self) -> Uuid {
        self.shared.vulkan.info().device_uuid
    }
    /// Every message the validation layer reported so far, where [`WgpuDevice::new`] was asked
    /// for validation (wgpu also logs them through `log`).
    pub fn validation_messages(&self) -> Vec<String> {
        self.shared.vulkan.validation_messages()
    }
}

/// The callback wgpu-hal runs before `vkCreateDevice`: adds `extensions` (those not already in
/// wgpu's list) and chains `address` (a `bufferDeviceAddress` feature struct), removing nothing.
fn device_callback<'this>(
    extensions: Vec<&'static CStr>,
    address: Option<&'this mut vk::PhysicalDeviceBufferDeviceAddressFeatures<'static>>,
) -> Box<hal::vulkan::CreateDeviceCallback<'this>> {
    Box::new(
        move |args: hal::vulkan::CreateDeviceCallbackArgs<'_, '_, 'this>| {
            for e in extensions {
                if !args.extensions.contains(&e) {
                    args.extensions.push(e);
                }
            }
            if let Some(address) = address {
                *args.create_info = std::mem::take(args.create_info).push_next(address);
            }
        },
    )
}

/// `desc`'s features and limits against the adapter's, as wgpu's `request_device` checks them.
fn validate_request(adapter: &::wgpu::Adapter, desc: &::wgpu::DeviceDescriptor<'_>) -> Result<()> {
    let missing = desc.required_features - adapter.features();
    if !missing.is_empty() {
        return Err(WgpuError::MissingFeatures { missing }.into());
    }
    let features = desc
        .required_features
        .intersection(::wgpu::Features::all_experimental_mask());
    if !features.is_empty() && !desc.experimental_features.is_enabled() {
        return Err(WgpuError::ExperimentalFeatures { features }.into());
    }
    let mut failed = None;
    desc.required_limits.check_limits_with_fail_fn(
        &adapter.limits(),
        true,
        |limit, requested, adapter| {
            failed = Some(WgpuError::LimitBeyondAdapter {
                limit,
                requested,
                adapter,
            });
        },
    );
    match failed {
        Some(f) => Err(f.into()),
        None => Ok(()),
    }
}

/// What the physical device offers for sharing, refusing what is required and missing.
fn offer(hal: &hal::vulkan::Adapter, features: ::wgpu::Features) -> Result<Offer> {
    let caps = hal.physical_device_capabilities();
    let version = caps.properties().api_version;
    if version < MIN_API_VERSION {
        return Err(Error::ApiVersion {
            what: "physical device",
            found: ApiVersion(version),
            required: ApiVersion(MIN_API_VERSION),
        });
    }
    if !caps.supports_extension(MEMORY_EXTENSION) {
        return Err(Error::MissingExtension {
            extension: MEMORY_EXTENSION.to_string_lossy().into_owned(),
            state: ExtensionState::NotSupported,
            needed_for: "sharing memory with CUDA",
        });
    }
    let instance = hal.shared_instance().raw_instance();
    let pd = hal.raw_physical_device();
    // SAFETY: the adapter's live physical device of this instance.
    if !unsafe { timeline_semaphore_supported(instance, pd) } {
        return Err(Capability::TimelineSemaphore.into());
    }
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f12);
    // SAFETY: a valid Vulkan 1.2 physical device (checked); the chain is well formed.
    unsafe { instance.get_physical_device_features2(pd, &mut f2) };
    let address_offered = f12.buffer_device_address == vk::TRUE;
    // wgpu-hal chains its own bufferDeviceAddress struct exactly when its extension list has
    // the extension (its ray-tracing features): a second struct would be invalid.
    let wgpu_enables_address = hal
        .required_device_extensions(features)
        .contains(&ash::khr::buffer_device_address::NAME);
    let buffer_device_address = address_offered || wgpu_enables_address;
    let mut extensions = vec![MEMORY_EXTENSION];
    if caps.supports_extension(SEMAPHORE_EXTENSION) {
        extensions.push(SEMAPHORE_EXTENSION);
    }
    if buffer_device_address && caps.supports_extension(ash::nvx::binary_import::NAME) {
        extensions.push(ash::nvx::binary_import::NAME);
        // Image handles for those kernels (`InlineImageHandle`), as cuvk's own devices have.
        if caps.supports_extension(ash::nvx::image_view_handle::NAME) {
            extensions.push(ash::nvx::image_view_handle::NAME);
        }
    }
    Ok(Offer {
        extensions,
        chain_buffer_device_address: address_offered && !wgpu_enables_address,
        buffer_device_address,
    })
}

/// The Vulkan adapter of `instance` that `choice` names: the one with a `deviceUUID` (a CUDA
/// device's), or the best that can share memory (discrete, integrated, virtual GPUs, then CPU
/// implementations).
pub fn adapter_for(instance: &::wgpu::Instance, choice: DeviceChoice) -> Result<::wgpu::Adapter> {
    let adapters = ready(
        "wgpu::Instance::enumerate_adapters",
        instance.enumerate_adapters(::wgpu::Backends::VULKAN),
    )?;
    let mut described = Vec::new();
    for adapter in adapters {
        let uuid = adapter_uuid(&adapter)?;
        // SAFETY: the hal adapter is only read.
        let can_share = unsafe { adapter.as_hal::<Vk>() }.is_some_and(|h| {
            h.physical_device_capabilities()
                .supports_extension(MEMORY_EXTENSION)
        });
        described.push((adapter, uuid, can_share));
    }
    let available = described
        .iter()
        .map(|(a, u, _)| format!("{} ({u})", a.get_info().name))
        .collect::<Vec<_>>()
        .join(", ");
    let rank = |a: &::wgpu::Adapter| match a.get_info().device_type {
        ::wgpu::DeviceType::DiscreteGpu => 0,
        ::wgpu::DeviceType::IntegratedGpu => 1,
        ::wgpu::DeviceType::VirtualGpu => 2,
        ::wgpu::DeviceType::Cpu => 4,
        ::wgpu::DeviceType::Other => 3,
    };
    let position = match choice {
        DeviceChoice::First => described
            .iter()
            .enumerate()
            .min_by_key(|(_, (a, _, share))| (!share, rank(a)))
            .map(|(i, _)| i),
        DeviceChoice::Uuid(want) => described.iter().position(|(_, u, _)| *u == want),
    };
    match position {
        Some(i) => Ok(described.swap_remove(i).0),
        None => Err(Error::NoVulkanDevice {
            wanted: match choice {
                DeviceChoice::First => "for wgpu at all".into(),
                DeviceChoice::Uuid(u) => format!("for wgpu with UUID {u}"),
            },
            available,
        }),
    }
}
