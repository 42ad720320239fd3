//! Vulkan semaphores, binary and timeline, exportable to CUDA; host signal/wait with timeouts;
//! queue submission that waits on and signals them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ash::vk;

use crate::error::{Capability, Exportable, MemoryError, SyncError};
use crate::error::{Error, Importer, Result, VkResultExt};
use crate::platform::{self, OwnedExternalHandle, SEMAPHORE_EXTENSION, SEMAPHORE_HANDLE_TYPE};
use crate::rules::timeline::SignalLedger;
use crate::teardown::duration_ns;
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

/// How to create a [`Semaphore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SemaphoreDesc {
    /// Binary or timeline.
    pub kind: SemaphoreKind,
    /// Created exportable (`VkExportSemaphoreCreateInfo`) so CUDA can import it.
    pub exportable: bool,
}

impl SemaphoreDesc {
    /// A timeline starting at 0, exportable to CUDA.
    pub const SHARED_TIMELINE: Self = Self {
        kind: SemaphoreKind::Timeline { initial: 0 },
        exportable: true,
    };
    /// A timeline starting at 0, for this device only.
    pub const LOCAL_TIMELINE: Self = Self {
        kind: SemaphoreKind::Timeline { initial: 0 },
        exportable: false,
    };
}

/// A `vk::Semaphore`, destroyed on drop, with the signal ledger every API that signals it
/// shares, so that a timeline value that does not increase is refused before the driver.
///
/// Drop waits only for this semaphore's own work: the submissions made through
/// [`VulkanContext::submit_with_semaphores`] that used it, and (timelines) its highest
/// scheduled signal; never for the whole device, and never longer than what is left of the
/// context's drop budget ([`VulkanContext::set_drop_timeout`]): then it logs and parks the
/// semaphore until that work has run. A timeline's GPU waits that no scheduled signal can
/// satisfy any more are released by a host signal (at once where [`Self::export`] handed no
/// handle out, else once the budget ran out), so that the queue drains.
pub struct Semaphore {
    ctx: Arc<VulkanContext>,
    semaphore: vk::Semaphore,
    kind: SemaphoreKind,
    exportable: bool,
    ledger: Arc<SignalLedger>,
    last_submission: AtomicU64,
    /// The highest value a booked queue submission waited for or signalled, and the first
    /// submission that did: once the context's progress timeline passes it, the counter has
    /// reached the value (see [`Self::refresh_reached`]).
    queue_mark: Mutex<QueueMark>,
    /// The highest value a booked queue submission waited for (timelines).
    queue_waited: AtomicU64,
    /// Whether [`Self::export`] handed a handle out: another API may then signal it in ways
    /// the ledger never sees, so drop does not release waits at once (see Drop).
    exported: AtomicBool,
}

/// A timeline value a queue submission used, and that submission's number on the context's
/// progress timeline.
#[derive(Debug, Clone, Copy, Default)]
struct QueueMark {
    value: u64,
    submission: u64,
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
    /// Creates a semaphore as `desc` says, after checking the device can
    /// ([`Error::MissingExtension`] / [`Error::Unsupported`] otherwise, e.g. exporting on
    /// lavapipe, which has no `VK_KHR_external_semaphore_fd`).
    pub fn new(ctx: &Arc<VulkanContext>, desc: SemaphoreDesc) -> Result<Arc<Self>> {
        Self::validate_new(ctx, desc)?;
        let (vk_type, initial) = match desc.kind {
            SemaphoreKind::Binary => (vk::SemaphoreType::BINARY, 0),
            SemaphoreKind::Timeline { initial } => (vk::SemaphoreType::TIMELINE, initial),
        };
        let mut type_info = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk_type)
            .initial_value(initial);
        let mut export =
            vk::ExportSemaphoreCreateInfo::default().handle_types(SEMAPHORE_HANDLE_TYPE);
        let mut info = vk::SemaphoreCreateInfo::default().push_next(&mut type_info);
        if desc.exportable {
            info = info.push_next(&mut export);
        }
        // SAFETY: valid device; the chain lives across the call.
        let semaphore =
            unsafe { ctx.device().create_semaphore(&info, None) }.vk("vkCreateSemaphore")?;
        Ok(Arc::new(Self {
            ctx: ctx.clone(),
            semaphore,
            kind: desc.kind,
            exportable: desc.exportable,
            ledger: SignalLedger::new(initial, vk_type == vk::SemaphoreType::TIMELINE),
            last_submission: AtomicU64::new(0),
            queue_mark: Mutex::new(QueueMark::default()),
            queue_waited: AtomicU64::new(0),
            exported: AtomicBool::new(false),
        }))
    }

    fn validate_new(ctx: &VulkanContext, desc: SemaphoreDesc) -> Result<()> {
        if desc.exportable {
            if ctx.ext.semaphore.is_none() {
                return Err(Error::MissingExtension {
                    extension: SEMAPHORE_EXTENSION.to_string_lossy().into_owned(),
                    state: ctx.extension_state(SEMAPHORE_EXTENSION),
                    needed_for: "sharing semaphores with CUDA",
                });
            }
            check_exportable(ctx, desc.kind)?;
        }
        Ok(())
    }

    /// Imports a semaphore another device (or process) exported, as a new semaphore of
    /// `ctx` sharing its payload. The handle passes to the driver on success (Unix).
    ///
    /// Each [`Semaphore`] keeps its own ledger: values signalled through the other device are
    /// not seen by this one's increasing-value check.
    ///
    /// # Safety
    /// `handle` must be an opaque handle exported from a semaphore of `kind` on a device with
    /// the same `deviceUUID` and `driverUUID`.
    pub unsafe fn import(
        ctx: &Arc<VulkanContext>,
        handle: OwnedExternalHandle,
        kind: SemaphoreKind,
    ) -> Result<Arc<Self>> {
        let loader = ctx
            .ext
            .semaphore
            .as_ref()
            .ok_or_else(|| Error::MissingExtension {
                extension: SEMAPHORE_EXTENSION.to_string_lossy().into_owned(),
                state: ctx.extension_state(SEMAPHORE_EXTENSION),
                needed_for: "importing semaphores",
            })?;
        let me = Self::new(
            ctx,
            SemaphoreDesc {
                kind,
                exportable: false,
            },
        )?;
        platform::import_with(handle, Importer::Vulkan, |raw| {
            // SAFETY: a fresh semaphore of this device that no queue uses; the caller vouches
            // for the handle.
            unsafe { platform::vk_import_semaphore(loader, me.semaphore, raw) }
        })?;
        // The exporter signals the payload outside this semaphore's ledger.
        me.exported.store(true, Ordering::Release);
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
        self.ledger.highest()
    }
    /// The record of scheduled signal values every API signalling it shares.
    pub fn ledger(&self) -> &Arc<SignalLedger> {
        &self.ledger
    }
    /// Checks that a wait for `value` will be satisfied by a signal already scheduled (by any
    /// API): [`SyncError::WaitNeverSignalled`] otherwise, with the highest scheduled value.
    /// Code that enqueues a wait on the GPU calls it first, so that the GPU never waits for a
    /// value nobody will signal (binary semaphores: always `Ok`).
    pub fn check_scheduled(&self, value: u64) -> Result<()> {
        self.ledger.check_scheduled(value)
    }

    /// Notes that submission `number` of the context's progress timeline used it, waiting
    /// for or signalling `value` (timelines).
    pub(crate) fn note_submission(&self, number: u64, value: u64) {
        self.last_submission.fetch_max(number, Ordering::AcqRel);
        if self.ledger.is_timeline() {
            let mut mark = self.queue_mark.lock().unwrap_or_else(|p| p.into_inner());
            if value > mark.value {
                *mark = QueueMark {
                    value,
                    submission: number,
                };
            }
        }
    }

    /// Learns what the counter has reached from the queue, without asking the semaphore: once
    /// the submission that first waited for or signalled the highest value a submission used
    /// is complete (the context's own, never-exported progress timeline says so), the counter
    /// is at least that value.
    ///
    /// Why not ask the semaphore: the Khronos validation layer before 1.3.293 (Debian
    /// bookworm's 1.3.239 among them) mis-tracks exported and imported timelines. A counter
    /// read or a completed host wait at a value the layer already saw complete (through a
    /// retired queue wait or signal, or an earlier read) leaves a phantom pending signal at
    /// that value, and the next host signal above it is reported as
    /// VUID-VkSemaphoreSignalInfo-value-03259 (upstream issue #8212, fixed by commit
    /// 765433c). So cuvk never reads the counter of a timeline it may host-signal, and waits
    /// on it only for values not known reached.
    fn refresh_reached(&self) {
        let mark = *self.queue_mark.lock().unwrap_or_else(|p| p.into_inner());
        if mark.value <= self.ledger.reached() {
            return;
        }
        // SAFETY: the context's own live progress timeline.
        let done = unsafe {
            self.ctx.wait_semaphore_value(
                self.ctx.progress.semaphore,
                mark.submission,
                Duration::ZERO,
            )
        };
        if matches!(done, Ok(true)) {
            self.ledger.note_reached(mark.value);
        }
    }

    /// Whether the counter has reached `value`: known ([`SignalLedger::reached`], refreshed
    /// from the queue), else a zero-timeout host wait.
    pub(crate) fn has_reached(&self, value: u64) -> Result<bool> {
        match self.wait_host(value, Duration::ZERO) {
            Ok(()) => Ok(true),
            Err(Error::Timeout { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn require_timeline(&self, what: &'static str) -> Result<()> {
        match self.kind {
            SemaphoreKind::Timeline { .. } => Ok(()),
            SemaphoreKind::Binary => Err(SyncError::NeedsTimeline { operation: what }.into()),
        }
    }

    /// A value the counter is known to have reached (a lower bound of [`Self::value`]): what
    /// cuvk's books say — host signals, completed waits, queue submissions known complete —
    /// without reading the counter, which on an exported timeline would leave the validation
    /// layer's phantom signal (see [`Self::wait_host`]). What an importer starts its books at.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ipc transport's
    pub(crate) fn known_value(&self) -> u64 {
        self.refresh_reached();
        self.ledger.reached()
    }

    /// The current counter value (timeline only).
    ///
    /// On a timeline that is exported or imported, a read under the Khronos validation layer
    /// before 1.3.293 can make the layer report the next host signal above the value read as
    /// VUID-VkSemaphoreSignalInfo-value-03259 (a layer bug: see [`Self::wait_host`]); cuvk's
    /// own calls never read it.
    pub fn value(&self) -> Result<u64> {
        self.require_timeline("reading the counter")?;
        // SAFETY: valid timeline semaphore of this device.
        let value = unsafe {
            self.ctx
                .device()
                .get_semaphore_counter_value(self.semaphore)
        }
        .vk("vkGetSemaphoreCounterValue")?;
        self.ledger.note_reached(value);
        Ok(value)
    }

    /// Signals `value` from the host (timeline only). It must exceed every value scheduled by
    /// any API ([`SyncError::TimelineNotIncreasing`]) and lie within 2^31 - 1 of the counter
    /// ([`SyncError::TimelineJumpTooLarge`]), and every scheduled signal must have
    /// executed ([`SyncError::SignalPending`]: a queue or CUDA signal still pending would run
    /// after the higher host value, VUID-VkSemaphoreSignalInfo-value-03259). Whether they
    /// have is known without asking the semaphore where cuvk saw them complete (host waits,
    /// queue submissions known complete); else a zero-timeout host wait asks.
    pub fn signal_host(&self, value: u64) -> Result<()> {
        self.require_timeline("a host signal")?;
        self.check_jump(value)?;
        let info = vk::SemaphoreSignalInfo::default()
            .semaphore(self.semaphore)
            .value(value);
        self.ledger.signal_now(
            value,
            |scheduled| self.has_reached(scheduled),
            || {
                // SAFETY: valid timeline semaphore; value greater than every scheduled signal,
                // all of which have executed (checked under the ledger's lock).
                unsafe { self.ctx.device().signal_semaphore(&info) }.vk("vkSignalSemaphore")
            },
        )
    }

    /// Refuses a host signal more than [`MAX_TIMELINE_JUMP`] above the counter
    /// ([`SyncError::TimelineJumpTooLarge`]): VUID-VkSemaphoreSignalInfo-value-03260 bounds the
    /// jump by the device's `maxTimelineSemaphoreValueDifference`, at least that much. The
    /// counter is at least the highest value known reached, so a jump within the bound from
    /// there needs no read of the counter (which the layer mis-tracks, see
    /// [`Self::refresh_reached`]); only a larger one reads it.
    fn check_jump(&self, value: u64) -> Result<()> {
        self.refresh_reached();
        if value.saturating_sub(self.ledger.reached()) <= MAX_TIMELINE_JUMP {
            return Ok(());
        }
        let current = self.value()?;
        if value.saturating_sub(current) > MAX_TIMELINE_JUMP {
            return Err(SyncError::TimelineJumpTooLarge {
                value,
                current,
                max: MAX_TIMELINE_JUMP,
            }
            .into());
        }
        Ok(())
    }

    /// Notes that another process scheduled `value` on this exported timeline (a notice on the
    /// connection that carries its frames said so), so that waits for it may be enqueued.
    /// If that process dies before the signal runs, [`Self::release_after_peer_lost`] frees
    /// what waits.
    pub fn note_remote_signal(&self, value: u64) -> Result<()> {
        self.require_timeline("a remote signal")?;
        self.ledger.note_remote(value);
        Ok(())
    }

    /// Signals `value` from the host after the process that was to signal this timeline is
    /// gone: every wait enqueued here for its values is released (they will never be
    /// signalled otherwise; a process that is gone signals nothing more, and one that closes
    /// its connection cleanly first lets its signals run, as [`crate::ipc::FrameClient`]'s
    /// drop does). `value` must exceed every value scheduled or noted, and lie within
    /// 2^31 - 1 of the counter ([`SyncError::TimelineJumpTooLarge`]); every signal *this*
    /// process scheduled must have executed ([`SyncError::SignalPending`]), as for
    /// [`Self::signal_host`].
    pub fn release_after_peer_lost(&self, value: u64) -> Result<()> {
        self.require_timeline("a host signal")?;
        self.check_jump(value)?;
        let info = vk::SemaphoreSignalInfo::default()
            .semaphore(self.semaphore)
            .value(value);
        self.ledger.signal_over(
            value,
            |scheduled| self.has_reached(scheduled),
            || {
                // SAFETY: a live timeline semaphore; the value exceeds every value scheduled
                // (this process's have executed), and the process that scheduled the others
                // is gone.
                unsafe { self.ctx.device().signal_semaphore(&info) }.vk("vkSignalSemaphore")
            },
        )
    }

    /// Waits on the host until the counter reaches `value`, or returns [`Error::Timeout`].
    /// A value that no signal was scheduled for (yet) is waited for too: another thread may
    /// schedule it; check with [`Self::check_scheduled`] first where none will.
    ///
    /// A value known reached (an earlier wait, a host signal, a queue submission that waited
    /// for or signalled it and is known complete) returns at once without asking the
    /// semaphore: besides saving a call, this keeps the Khronos validation layer before
    /// 1.3.293 from recording a phantom signal on exported and imported timelines (its issue
    /// #8212), which it would later report against a correct host signal.
    pub fn wait_host(&self, value: u64, timeout: Duration) -> Result<()> {
        self.require_timeline("a host wait")?;
        if value <= self.ledger.reached() {
            return Ok(());
        }
        self.refresh_reached();
        if value <= self.ledger.reached() {
            return Ok(());
        }
        // SAFETY: our live timeline semaphore, of the context's device.
        if unsafe {
            self.ctx
                .wait_semaphore_value(self.semaphore, value, timeout)
        }? {
            self.ledger.note_reached(value);
            Ok(())
        } else {
            Err(Error::Timeout {
                what: "a timeline semaphore value",
                timeout_ns: duration_ns(timeout),
            })
        }
    }

    /// Exports a new OS handle (owned by the caller) to this semaphore. Whoever imports it
    /// may signal it outside cuvk's books: a drop then waits (within the drop budget) before
    /// it releases waits nobody else scheduled a signal for (see [`Semaphore`]).
    pub fn export(&self) -> Result<OwnedExternalHandle> {
        let handle = self.export_for_import()?;
        self.exported.store(true, Ordering::Release);
        Ok(handle)
    }

    /// [`Self::export`] for cuvk's own CUDA import, which shares the ledger and holds the
    /// semaphore alive (so it is gone, with its signals booked, before the semaphore drops).
    pub(crate) fn export_for_import(&self) -> Result<OwnedExternalHandle> {
        if !self.exportable {
            return Err(MemoryError::NotExportable {
                what: Exportable::Semaphore,
            }
            .into());
        }
        let loader = self
            .ctx
            .ext
            .semaphore
            .as_ref()
            .ok_or_else(|| Error::MissingExtension {
                extension: SEMAPHORE_EXTENSION.to_string_lossy().into_owned(),
                state: self.ctx.extension_state(SEMAPHORE_EXTENSION),
                needed_for: "exporting semaphores",
            })?;
        // SAFETY: a live semaphore of this device, created exportable as this platform's type.
        unsafe { platform::vk_export_semaphore(loader, self.semaphore) }
    }
}

/// The largest jump of a timeline every device accepts (`maxTimelineSemaphoreValueDifference`
/// is at least this): a host signal of `1 << 62` over a counter at 2,944 left it at 2,944 on
/// an H100 (driver 580), and the drop then waited in vain for the value its books expected.
const MAX_TIMELINE_JUMP: u64 = (1 << 31) - 1;

impl Drop for Semaphore {
    fn drop(&mut self) {
        // Every CUDA import holds an Arc to this semaphore, so none is alive now: no signal
        // beyond those already scheduled can come through cuvk. A GPU wait for a higher value
        // (a wgpu submission waiting for a value nobody signals) would otherwise never end,
        // and the queue, the device and the process with it would never drain. Where no
        // handle went out ([`Self::export`]), release such waits at once; else only once
        // the drop budget runs out.
        if !self.exported.load(Ordering::Acquire) {
            self.release_unsignalled_waits();
        }
        // Wait for the submissions that used it (and, for a timeline, its last scheduled
        // signal) — never for the whole device, which may be an engine's — within the
        // context's one drop budget; then park it until they finish.
        let budget = self.ctx.drop_budget().clone();
        let mut done = self.finished_probe();
        let mut finished = budget.poll(&mut done);
        if !finished && self.release_unsignalled_waits() {
            finished = budget.poll(&mut done);
        }
        if !finished {
            // The evidence for the log that follows: which of the two conditions is unmet.
            let progress = self.ctx.progress.semaphore;
            // SAFETY: the context's live progress timeline.
            let progress_now = unsafe { self.ctx.device().get_semaphore_counter_value(progress) };
            log::warn!(
                "Semaphore drop: its last submission #{}, the queue's progress {:?}; its value {:?}, \
                 highest scheduled signal {}, highest wait {}",
                self.last_submission.load(Ordering::Acquire),
                progress_now,
                self.value(),
                self.ledger.highest(),
                self.ledger.highest_wait()
            );
        }
        let parts = DestroySemaphore {
            device: self.ctx.device().clone(),
            semaphore: self.semaphore,
        };
        budget.release("Semaphore", finished, parts, || Box::new(done));
    }
}

impl Semaphore {
    /// The abandon step of a drop that gave up on work this timeline orders (see
    /// `crate::teardown`): where only this process signals it (no handle went out through
    /// [`Self::export`]) and a queue submission waits for a value the counter has not
    /// reached, signals exactly that value from the host, so the abandoned queue drains and
    /// the process can exit. The CUDA signal still pending for that value then lands on it
    /// without changing it. Logged; does nothing otherwise.
    pub(crate) fn abandon_queue_waits(&self) {
        self.abandon_waits(self.queue_waited.load(Ordering::Acquire), "the queue's");
    }

    /// As [`Self::abandon_queue_waits`] for the waits of CUDA streams (and queues) on this
    /// timeline: a stream that waits for a value its queue will never signal (the queue's
    /// work was abandoned, or an engine's submission was booked with `mark_submitted` and
    /// never made) would otherwise hold the module and the context it runs in (their
    /// unloads wait for it) for good.
    /// Only once every booked queue submission that used it has completed: a queue signal
    /// still pending would otherwise land after the host's (the queue, its own waits
    /// released, signals what it will).
    pub(crate) fn abandon_cuda_waits(&self) {
        let last = self.last_submission.load(Ordering::Acquire);
        // SAFETY: the context's own live progress timeline.
        let queue_done = unsafe {
            self.ctx
                .wait_semaphore_value(self.ctx.progress.semaphore, last, Duration::ZERO)
        };
        if matches!(queue_done, Ok(true)) {
            self.abandon_waits(self.ledger.highest_wait(), "every stream's");
        }
    }

    fn abandon_waits(&self, waited: u64, whose: &str) {
        if self.exported.load(Ordering::Acquire)
            || waited == 0
            || self.has_reached(waited).unwrap_or(true)
        {
            return;
        }
        let info = vk::SemaphoreSignalInfo::default()
            .semaphore(self.semaphore)
            .value(waited);
        // SAFETY: a live timeline semaphore of this device; the counter is below `waited`
        // (just asked). Deliberately ahead of this process's own pending signal of at most
        // `waited`: the work behind it was abandoned by a drop that gave up on it.
        match unsafe { self.ctx.device().signal_semaphore(&info) } {
            Ok(()) => {
                self.ledger.note_reached(waited);
                log::warn!(
                    "abandoned: released {whose} wait for value {waited} from the host, so \
                     that the work behind it drains without the work it waited for"
                );
            }
            Err(e) => log::error!("abandoning {whose} wait for value {waited}: {e}"),
        }
    }

    /// Signals, from the host, the highest value a GPU wait was enqueued for, where no
    /// scheduled signal reaches it and every scheduled signal has executed (a host signal
    /// may not overtake one). For drop only: nothing can signal the semaphore after it.
    /// Whether it signalled.
    fn release_unsignalled_waits(&self) -> bool {
        if !matches!(self.kind, SemaphoreKind::Timeline { .. }) {
            return false;
        }
        let waited = self.ledger.highest_wait();
        if waited <= self.ledger.highest() || self.has_reached(waited).unwrap_or(true) {
            return false;
        }
        match self.signal_host(waited) {
            Ok(()) => {
                log::warn!(
                    "Semaphore dropped while a GPU wait for value {waited} was pending that \
                     no signal was scheduled for: signalled it from the host so that the \
                     waiting queue drains"
                );
                true
            }
            Err(e) => {
                log::debug!("could not release the waits on a dropped semaphore yet: {e}");
                false
            }
        }
    }

    /// Says whether the submissions that used the semaphore and (timeline) its highest
    /// scheduled signal have completed; a lost device counts as done. It holds the device's
    /// function table and the context's progress timeline, which live until the context
    /// settles its drop budget.
    fn finished_probe(&self) -> impl FnMut() -> bool + Send + 'static {
        let device = self.ctx.device().clone();
        let progress = self.ctx.progress.semaphore;
        let submission = self.last_submission.load(Ordering::Acquire);
        let own = match self.kind {
            SemaphoreKind::Timeline { .. } => Some((self.semaphore, self.ledger.highest())),
            SemaphoreKind::Binary => None,
        };
        let ledger = self.ledger.clone();
        move || {
            // A zero-timeout wait rather than a counter read: it also tells the validation
            // layer that the batches up to `value` have completed (it does not learn that from
            // vkGetSemaphoreCounterValue, and would report the semaphore in use).
            let reached = |semaphore, value| {
                let (semaphores, values) = ([semaphore], [value]);
                let info = vk::SemaphoreWaitInfo::default()
                    .semaphores(&semaphores)
                    .values(&values);
                // SAFETY: a live timeline semaphore of this device (ours, destroyed only
                // after this probe says done; or the context's progress timeline).
                !matches!(
                    unsafe { device.wait_semaphores(&info, 0) },
                    Err(vk::Result::TIMEOUT)
                )
            };
            // Its own value only once the queue is done, and only if not known reached (a
            // wait at a value the layer saw complete confuses it: see `refresh_reached`).
            reached(progress, submission)
                && own.is_none_or(|(s, v)| v <= ledger.reached() || reached(s, v))
        }
    }
}

/// Destroys a semaphore when dropped: freed now, or parked in the drop budget until the GPU
/// work that uses it has finished.
struct DestroySemaphore {
    device: ash::Device,
    semaphore: vk::Semaphore,
}

impl Drop for DestroySemaphore {
    fn drop(&mut self) {
        // SAFETY: created by the semaphore this came from; no submission or scheduled signal
        // uses it any more (the drop budget frees this only then), and the device outlives
        // the budget (the context settles it before destroying the device).
        unsafe { self.device.destroy_semaphore(self.semaphore, None) };
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
        Err(Capability::SemaphoreExport {
            timeline: matches!(kind, SemaphoreKind::Timeline { .. }),
            handle_type: SEMAPHORE_HANDLE_TYPE,
        }
        .into())
    }
}

/// One semaphore operation of a submission: the semaphore and, for timelines, the value.
///
/// `stage` means something only for a wait: the pipeline stages that wait (it must not be
/// empty: [`SyncError::EmptyWaitStage`]). A signal made by
/// [`VulkanContext::submit_with_semaphores`] (`vkQueueSubmit`) always follows every command of
/// the submission, whatever `stage` says: pass `vk::PipelineStageFlags::empty()`, or build it
/// with [`SemaphoreOp::signal`]. (A `vkQueueSubmit2` signal has a stage mask of its own; see
/// `FrameSemaphores` for submissions an engine makes itself.)
///
/// ```no_run
/// # use std::sync::Arc;
/// use cuvk::ash::vk;
/// use cuvk::vulkan::{Semaphore, SemaphoreDesc, SemaphoreOp, VulkanContext};
/// # fn f(ctx: &Arc<VulkanContext>, cmd: vk::CommandBuffer) -> cuvk::Result<()> {
/// let upload = Semaphore::new(ctx, SemaphoreDesc::LOCAL_TIMELINE)?;
/// let done = Semaphore::new(ctx, SemaphoreDesc::LOCAL_TIMELINE)?;
/// upload.signal_host(1)?;
/// let waits = [SemaphoreOp::wait(&upload, 1, vk::PipelineStageFlags::COMPUTE_SHADER)];
/// let signals = [SemaphoreOp::signal(&done, 1)];
/// // SAFETY: `cmd` is executable, of this device, and everything it uses outlives the wait.
/// unsafe { ctx.submit_with_semaphores(&[cmd], &waits, &signals, vk::Fence::null())? };
/// done.wait_host(1, std::time::Duration::from_secs(5))?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SemaphoreOp<'a> {
    /// The semaphore.
    pub semaphore: &'a Semaphore,
    /// The value (ignored for binary semaphores).
    pub value: u64,
    /// For waits: the stages that wait (not empty). For signals: ignored (a `vkQueueSubmit`
    /// signal follows every command of the submission); pass `empty()`.
    pub stage: vk::PipelineStageFlags,
}

impl<'a> SemaphoreOp<'a> {
    /// A wait for `value` (timeline; ignored for binary) before the `stage` stages of the
    /// submission's commands run.
    pub fn wait(semaphore: &'a Semaphore, value: u64, stage: vk::PipelineStageFlags) -> Self {
        Self {
            semaphore,
            value,
            stage,
        }
    }
    /// A signal of `value` (timeline; ignored for binary) once every command of the
    /// submission has completed.
    pub fn signal(semaphore: &'a Semaphore, value: u64) -> Self {
        Self {
            semaphore,
            value,
            stage: vk::PipelineStageFlags::empty(),
        }
    }
}

impl VulkanContext {
    /// Submits `command_buffers` to the queue, waiting for `waits` and signalling `signals`
    /// (timeline signal values must increase: checked before the driver), and `fence`.
    ///
    /// Refused before the driver, changing nothing: a semaphore of another device
    /// ([`Error::WrongDevice`]), a wait with an empty stage mask
    /// ([`SyncError::EmptyWaitStage`]), a signal value that does not increase
    /// ([`SyncError::TimelineNotIncreasing`]) or a semaphore signalled twice. A timeline wait
    /// for a value not scheduled yet is accepted (Vulkan allows waiting before the signal is
    /// submitted): the caller promises a signal will come, or check with
    /// [`Semaphore::check_scheduled`].
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
        self.require_queue("submit_with_semaphores")?;
        self.check_semaphore_ops(waits, signals)?;
        let wait_sems: Vec<vk::Semaphore> = waits.iter().map(|o| o.semaphore.handle()).collect();
        let wait_vals: Vec<u64> = waits.iter().map(|o| o.value).collect();
        let wait_stages: Vec<vk::PipelineStageFlags> = waits.iter().map(|o| o.stage).collect();
        let mut sig_sems: Vec<vk::Semaphore> =
            signals.iter().map(|o| o.semaphore.handle()).collect();
        let mut sig_vals: Vec<u64> = signals.iter().map(|o| o.value).collect();
        let ledgers: Vec<(&SignalLedger, u64)> = signals
            .iter()
            .map(|o| (o.semaphore.ledger.as_ref(), o.value))
            .collect();
        let queue = self.lock_queue();
        // The context's own progress timeline counts submissions, so a semaphore's drop can
        // wait for exactly the submissions that used it. Numbered under the queue lock.
        let number = self.progress.last_submitted() + 1;
        sig_sems.push(self.progress.semaphore);
        sig_vals.push(number);
        let mut timeline = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_vals)
            .signal_semaphore_values(&sig_vals);
        let submit = [vk::SubmitInfo::default()
            .command_buffers(command_buffers)
            .wait_semaphores(&wait_sems)
            .wait_dst_stage_mask(&wait_stages)
            .signal_semaphores(&sig_sems)
            .push_next(&mut timeline)];
        // Every signal value is checked before the call and recorded only if it succeeds: a
        // refused submission leaves every ledger as it was.
        SignalLedger::signal_all(&ledgers, || {
            // SAFETY: the queue is locked; the caller vouches for the command buffers;
            // semaphores are alive (borrowed) and on this device; timeline values checked.
            unsafe { self.device().queue_submit(*queue, &submit, fence) }.vk("vkQueueSubmit")
        })?;
        self.progress.submitted(number);
        drop(queue);
        note_uses(number, waits, signals);
        Ok(())
    }

    /// The checks and books of [`Self::submit_with_semaphores`] around a submission that
    /// another library makes on a queue of this device (wgpu's, through its own queue):
    /// checks `waits` and `signals` as `submit_with_semaphores` does (every semaphore of this
    /// device, wait stages not empty, each signal value above every value scheduled on its
    /// semaphore, no semaphore signalled twice), then, holding the queue lock and the signal
    /// ledgers, calls `submit` with the next number of the context's progress timeline. If
    /// `submit` returns `Ok`, the signal values and the number are recorded and each
    /// semaphore's drop waits for the progress timeline to reach the number; if it returns
    /// `Err`, nothing is recorded.
    ///
    /// # Safety
    /// `submit` returns `Err` only if nothing of the submission reached a queue. If it returns
    /// `Ok`, it submitted on a queue of this device work that waits for every element of
    /// `waits` at its stages, and after which every element of `signals` and the
    /// [`ProgressSignal`] it was given are signalled.
    pub unsafe fn submit_foreign<R>(
        &self,
        waits: &[SemaphoreOp<'_>],
        signals: &[SemaphoreOp<'_>],
        submit: impl FnOnce(ProgressSignal) -> Result<R>,
    ) -> Result<R> {
        self.check_semaphore_ops(waits, signals)?;
        let ledgers: Vec<(&SignalLedger, u64)> = signals
            .iter()
            .map(|o| (o.semaphore.ledger.as_ref(), o.value))
            .collect();
        let queue = self.lock_queue();
        let number = self.progress.last_submitted() + 1;
        let progress = ProgressSignal {
            semaphore: self.progress.semaphore,
            value: number,
        };
        let out = SignalLedger::signal_all(&ledgers, || submit(progress))?;
        self.progress.submitted(number);
        drop(queue);
        note_uses(number, waits, signals);
        Ok(out)
    }

    /// The number of the last submission booked on the context's progress timeline
    /// ([`Self::submit_with_semaphores`], [`Self::submit_foreign`]); 0: none.
    pub fn last_submission(&self) -> u64 {
        self.progress.last_submitted()
    }

    /// Every semaphore of this device; a wait names the stages that wait.
    fn check_semaphore_ops(
        &self,
        waits: &[SemaphoreOp<'_>],
        signals: &[SemaphoreOp<'_>],
    ) -> Result<()> {
        for op in waits.iter().chain(signals) {
            if !self.same_device(op.semaphore.context()) {
                return Err(Error::WrongDevice {
                    object: crate::DeviceObject::Semaphore,
                    owner: crate::DeviceOwner::VulkanDevice,
                });
            }
        }
        // VUID-VkSubmitInfo-pWaitDstStageMask-03937 (synchronization2 is not enabled): a wait
        // must name the stages that wait.
        if waits.iter().any(|op| op.stage.is_empty()) {
            return Err(SyncError::EmptyWaitStage.into());
        }
        Ok(())
    }
}

/// Notes on each semaphore of a booked submission that submission `number` used it, and on
/// each timeline waited for the value the GPU waits for.
fn note_uses(number: u64, waits: &[SemaphoreOp<'_>], signals: &[SemaphoreOp<'_>]) {
    for op in waits {
        if op.semaphore.ledger.is_timeline() {
            op.semaphore.ledger.note_wait(op.value);
            op.semaphore
                .queue_waited
                .fetch_max(op.value, Ordering::AcqRel);
        }
    }
    for op in waits.iter().chain(signals) {
        op.semaphore.note_submission(number, op.value);
    }
}

/// The signal of a context's progress timeline that a submission booked with
/// [`VulkanContext::submit_foreign`] must make, after all of its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgressSignal {
    /// The context's progress timeline (a timeline semaphore of this device).
    pub semaphore: vk::Semaphore,
    /// The value to signal it with: the submission's number.
    pub value: u64,
}
