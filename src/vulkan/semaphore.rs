//! Vulkan semaphores, binary and timeline, exportable to CUDA; host signal/wait with timeouts;
//! queue submission that waits on and signals them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ash::vk;

use crate::error::{Error, Result, VkResultExt};
use crate::handle::{OwnedExternalHandle, SEMAPHORE_HANDLE_TYPE};
use crate::vulkan::VulkanContext;

/// Binary or timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SemaphoreKind {
    /// A binary semaphore (swapchain acquire/present need these).
    Binary,
    /// A timeline semaphore with this initial value.
    Timeline {
        /// The initial counter value.
        initial: u64,
    },
}

/// A `vk::Semaphore`, destroyed on drop, that remembers the highest value a signal was
/// scheduled for, so that a timeline value that does not increase is refused before the driver.
pub struct Semaphore {
    ctx: Arc<VulkanContext>,
    semaphore: vk::Semaphore,
    kind: SemaphoreKind,
    exportable: bool,
    highest_signal: AtomicU64,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("kind", &self.kind)
            .field("exportable", &self.exportable)
            .finish_non_exhaustive()
    }
}

impl Semaphore {
    /// Creates a semaphore; with `exportable`, one that can be exported to CUDA, after checking
    /// the device can ([`Error::MissingExtension`] / [`Error::Unsupported`] otherwise, e.g. on
    /// lavapipe, which has no `VK_KHR_external_semaphore_fd`).
    pub fn new(
        ctx: &Arc<VulkanContext>,
        kind: SemaphoreKind,
        exportable: bool,
    ) -> Result<Arc<Self>> {
        let caps = ctx.info().capabilities;
        if let SemaphoreKind::Timeline { .. } = kind {
            if !caps.timeline_semaphore {
                return Err(Error::Unsupported(
                    "the device has no timelineSemaphore feature enabled".into(),
                ));
            }
        }
        if exportable {
            if !caps.external_semaphore {
                return Err(Error::MissingExtension {
                    extension: crate::vulkan::SEMAPHORE_EXTENSION
                        .to_string_lossy()
                        .into_owned(),
                    state: "not supported by the device",
                    needed_for: "sharing semaphores with CUDA",
                });
            }
            check_exportable(ctx, kind)?;
        }
        let (vk_type, initial) = match kind {
            SemaphoreKind::Binary => (vk::SemaphoreType::BINARY, 0),
            SemaphoreKind::Timeline { initial } => (vk::SemaphoreType::TIMELINE, initial),
        };
        let mut type_info = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk_type)
            .initial_value(initial);
        let mut export =
            vk::ExportSemaphoreCreateInfo::default().handle_types(SEMAPHORE_HANDLE_TYPE);
        let mut info = vk::SemaphoreCreateInfo::default().push_next(&mut type_info);
        if exportable {
            info = info.push_next(&mut export);
        }
        // SAFETY: valid device; the chain lives across the call.
        let semaphore =
            unsafe { ctx.device().create_semaphore(&info, None) }.vk("vkCreateSemaphore")?;
        Ok(Arc::new(Self {
            ctx: ctx.clone(),
            semaphore,
            kind,
            exportable,
            highest_signal: AtomicU64::new(initial),
        }))
    }

    /// Imports a semaphore another device (or process) exported, as a new semaphore of
    /// `ctx` sharing its payload. The handle passes to the driver on success (Unix).
    ///
    /// Each [`Semaphore`] tracks the timeline values *it* scheduled; values signalled through
    /// the other device are not seen by this one's increasing-value check.
    ///
    /// # Safety
    /// `handle` must be an opaque handle exported from a semaphore of `kind` on a device with
    /// the same `deviceUUID` and `driverUUID`.
    #[cfg(unix)]
    pub unsafe fn import(
        ctx: &Arc<VulkanContext>,
        handle: OwnedExternalHandle,
        kind: SemaphoreKind,
    ) -> Result<Arc<Self>> {
        use std::os::fd::{AsRawFd, IntoRawFd};
        let loader = ctx
            .ext
            .semaphore_fd
            .as_ref()
            .ok_or(Error::MissingExtension {
                extension: "VK_KHR_external_semaphore_fd".into(),
                state: "not supported by the device",
                needed_for: "importing semaphores",
            })?;
        let handle = crate::handle::check_open(handle)?;
        let me = Self::new(ctx, kind, false)?;
        let info = vk::ImportSemaphoreFdInfoKHR::default()
            .semaphore(me.semaphore)
            .handle_type(SEMAPHORE_HANDLE_TYPE)
            .fd(handle.as_raw_fd());
        // SAFETY: a fresh semaphore of this device; the caller vouches for the handle.
        unsafe { loader.import_semaphore_fd(&info) }.vk("vkImportSemaphoreFdKHR")?;
        // Success: the driver owns the descriptor now.
        let _ = handle.into_raw_fd();
        Ok(me)
    }

    /// The raw handle (valid while `self` lives).
    pub fn handle(&self) -> vk::Semaphore {
        self.semaphore
    }
    /// Binary or timeline.
    pub fn kind(&self) -> SemaphoreKind {
        self.kind
    }
    /// Whether it was created exportable.
    pub fn is_exportable(&self) -> bool {
        self.exportable
    }
    /// The context it belongs to.
    pub fn context(&self) -> &Arc<VulkanContext> {
        &self.ctx
    }
    /// The highest value a signal has been scheduled for (timeline), by any API.
    pub fn highest_signal(&self) -> u64 {
        self.highest_signal.load(Ordering::Acquire)
    }

    /// Reserves `value` as the next signal of this timeline: it must be greater than every
    /// value already scheduled ([`Error::TimelineNotIncreasing`] otherwise). Every signal path
    /// (host, Vulkan submit, CUDA) goes through this before the driver sees the value.
    pub fn reserve_signal(&self, value: u64) -> Result<()> {
        if self.kind == SemaphoreKind::Binary {
            return Ok(());
        }
        let mut last = self.highest_signal.load(Ordering::Acquire);
        loop {
            if value <= last {
                return Err(Error::TimelineNotIncreasing { value, last });
            }
            match self.highest_signal.compare_exchange(
                last,
                value,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(now) => last = now,
            }
        }
    }

    fn require_timeline(&self, what: &'static str) -> Result<()> {
        match self.kind {
            SemaphoreKind::Timeline { .. } => Ok(()),
            SemaphoreKind::Binary => Err(Error::InvalidArgument(format!(
                "{what} needs a timeline semaphore"
            ))),
        }
    }

    /// The current counter value (timeline only).
    pub fn value(&self) -> Result<u64> {
        self.require_timeline("reading the counter")?;
        // SAFETY: valid timeline semaphore of this device.
        unsafe {
            self.ctx
                .device()
                .get_semaphore_counter_value(self.semaphore)
        }
        .vk("vkGetSemaphoreCounterValue")
    }

    /// Signals `value` from the host (timeline only; it must increase).
    pub fn signal_host(&self, value: u64) -> Result<()> {
        self.require_timeline("a host signal")?;
        self.reserve_signal(value)?;
        let info = vk::SemaphoreSignalInfo::default()
            .semaphore(self.semaphore)
            .value(value);
        // SAFETY: valid timeline semaphore; value greater than every scheduled signal.
        unsafe { self.ctx.device().signal_semaphore(&info) }.vk("vkSignalSemaphore")
    }

    /// Waits on the host until the counter reaches `value`, or returns [`Error::Timeout`].
    pub fn wait_host(&self, value: u64, timeout: Duration) -> Result<()> {
        self.require_timeline("a host wait")?;
        let timeout_ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        let sems = [self.semaphore];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&sems)
            .values(&values);
        // SAFETY: valid timeline semaphore of this device.
        match unsafe { self.ctx.device().wait_semaphores(&info, timeout_ns) } {
            Ok(()) => Ok(()),
            Err(vk::Result::TIMEOUT) => Err(Error::Timeout {
                what: "a timeline semaphore value",
                timeout_ns,
            }),
            Err(result) => Err(Error::Vulkan {
                call: "vkWaitSemaphores",
                result,
            }),
        }
    }

    /// Exports a new OS handle (owned by the caller) to this semaphore.
    pub fn export(&self) -> Result<OwnedExternalHandle> {
        if !self.exportable {
            return Err(Error::InvalidArgument(
                "the semaphore was not created exportable".into(),
            ));
        }
        export_platform(&self.ctx, self.semaphore)
    }
}

impl Drop for Semaphore {
    fn drop(&mut self) {
        // SAFETY: every CUDA import and pending submission path holds an Arc to this
        // semaphore; with the last Arc gone, no queue or CUDA operation can still use it once
        // the queue is idle, which we make sure of first.
        unsafe {
            let _ = self.ctx.device().device_wait_idle();
            self.ctx.device().destroy_semaphore(self.semaphore, None);
        }
    }
}

fn check_exportable(ctx: &VulkanContext, kind: SemaphoreKind) -> Result<()> {
    let vk_type = match kind {
        SemaphoreKind::Binary => vk::SemaphoreType::BINARY,
        SemaphoreKind::Timeline { .. } => vk::SemaphoreType::TIMELINE,
    };
    let mut type_info = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk_type);
    let info = vk::PhysicalDeviceExternalSemaphoreInfo::default()
        .handle_type(SEMAPHORE_HANDLE_TYPE)
        .push_next(&mut type_info);
    let mut props = vk::ExternalSemaphoreProperties::default();
    // SAFETY: valid physical device; structs live across the call.
    unsafe {
        ctx.instance()
            .get_physical_device_external_semaphore_properties(
                ctx.physical_device(),
                &info,
                &mut props,
            )
    };
    if props
        .external_semaphore_features
        .contains(vk::ExternalSemaphoreFeatureFlags::EXPORTABLE)
    {
        Ok(())
    } else {
        Err(Error::Unsupported(format!(
            "the device cannot export {kind:?} semaphores as {SEMAPHORE_HANDLE_TYPE:?}"
        )))
    }
}

#[cfg(unix)]
fn export_platform(ctx: &VulkanContext, semaphore: vk::Semaphore) -> Result<OwnedExternalHandle> {
    use std::os::fd::FromRawFd;
    let loader = ctx
        .ext
        .semaphore_fd
        .as_ref()
        .ok_or(Error::MissingExtension {
            extension: "VK_KHR_external_semaphore_fd".into(),
            state: "not enabled on the device",
            needed_for: "exporting semaphores",
        })?;
    let info = vk::SemaphoreGetFdInfoKHR::default()
        .semaphore(semaphore)
        .handle_type(SEMAPHORE_HANDLE_TYPE);
    // SAFETY: the semaphore was created exportable as OPAQUE_FD.
    let fd = unsafe { loader.get_semaphore_fd(&info) }.vk("vkGetSemaphoreFdKHR")?;
    // SAFETY: vkGetSemaphoreFdKHR returns a new descriptor that the caller owns.
    Ok(unsafe { OwnedExternalHandle::from_raw_fd(fd) })
}

#[cfg(windows)]
fn export_platform(ctx: &VulkanContext, semaphore: vk::Semaphore) -> Result<OwnedExternalHandle> {
    use std::os::windows::io::FromRawHandle;
    let loader = ctx
        .ext
        .semaphore_win32
        .as_ref()
        .ok_or(Error::MissingExtension {
            extension: "VK_KHR_external_semaphore_win32".into(),
            state: "not enabled on the device",
            needed_for: "exporting semaphores",
        })?;
    let info = vk::SemaphoreGetWin32HandleInfoKHR::default()
        .semaphore(semaphore)
        .handle_type(SEMAPHORE_HANDLE_TYPE);
    // SAFETY: the semaphore was created exportable as OPAQUE_WIN32.
    let h =
        unsafe { loader.get_semaphore_win32_handle(&info) }.vk("vkGetSemaphoreWin32HandleKHR")?;
    // SAFETY: an OPAQUE_WIN32 export is a new NT handle the caller owns and must close.
    Ok(unsafe { OwnedExternalHandle::from_raw_handle(h as _) })
}

/// One semaphore operation of a submission: the semaphore and, for timelines, the value.
#[derive(Clone)]
pub struct SemaphoreOp<'a> {
    /// The semaphore.
    pub semaphore: &'a Semaphore,
    /// The value (ignored for binary semaphores).
    pub value: u64,
    /// For waits: the stages that wait.
    pub stage: vk::PipelineStageFlags,
}

impl VulkanContext {
    /// Submits `command_buffers` to the queue, waiting for `waits` and signalling `signals`
    /// (timeline signal values must increase: checked before the driver), and `fence`.
    ///
    /// # Safety
    /// The command buffers must be executable, belong to this device, and every resource they
    /// use must stay alive until the submission completes (wait on a signal or the fence).
    pub unsafe fn submit_with_semaphores(
        &self,
        command_buffers: &[vk::CommandBuffer],
        waits: &[SemaphoreOp<'_>],
        signals: &[SemaphoreOp<'_>],
        fence: vk::Fence,
    ) -> Result<()> {
        for op in waits.iter().chain(signals) {
            if !self.same_device(op.semaphore.context()) {
                return Err(Error::WrongDevice(
                    "a semaphore belongs to another Vulkan device",
                ));
            }
        }
        for op in signals {
            op.semaphore.reserve_signal(op.value)?;
        }
        let wait_sems: Vec<vk::Semaphore> = waits.iter().map(|o| o.semaphore.handle()).collect();
        let wait_vals: Vec<u64> = waits.iter().map(|o| o.value).collect();
        let wait_stages: Vec<vk::PipelineStageFlags> = waits.iter().map(|o| o.stage).collect();
        let sig_sems: Vec<vk::Semaphore> = signals.iter().map(|o| o.semaphore.handle()).collect();
        let sig_vals: Vec<u64> = signals.iter().map(|o| o.value).collect();
        let mut timeline = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_vals)
            .signal_semaphore_values(&sig_vals);
        let submit = [vk::SubmitInfo::default()
            .command_buffers(command_buffers)
            .wait_semaphores(&wait_sems)
            .wait_dst_stage_mask(&wait_stages)
            .signal_semaphores(&sig_sems)
            .push_next(&mut timeline)];
        let queue = self.lock_queue();
        // SAFETY: the queue is locked; the caller vouches for the command buffers; semaphores
        // are alive (borrowed) and on this device; timeline values were checked.
        unsafe { self.device().queue_submit(*queue, &submit, fence) }.vk("vkQueueSubmit")
    }
}
