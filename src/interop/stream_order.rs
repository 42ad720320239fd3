//! [`StreamOrder`]: CUDA streams' work before Vulkan's next use, Vulkan's last use before a
//! stream's next work — on the GPU, both ways, on two timeline semaphores both APIs share.
//!
//! One home for the mechanism the frame pacer, Python's buffers and `bevy_cuvk`'s stream
//! sync all need: value-ordered releases from any number of streams, waits only for values
//! already scheduled, a host-waitable copy of Vulkan's timeline, and a drop that never frees
//! a semaphore the GPU may still touch.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream};

use crate::cuda::ExternalSemaphore;
use crate::error::{CudaResultExt, Error, Result, SyncError};
use crate::interop::{import_semaphore, Bridge, FrameSubmit};
use crate::vulkan::{Semaphore, SemaphoreDesc, SemaphoreOp, VulkanContext};

static NEXT_ORDER_ID: AtomicU64 = AtomicU64::new(1);

/// Orders CUDA work on any of the bridge's streams and Vulkan work on its queue, on the GPU,
/// with no host wait: "this stream's work before Vulkan's next use; Vulkan's last use before
/// this stream's next work".
///
/// Two exportable timelines carry it: CUDA signals **`cuda_done`** after a release
/// ([`Self::cuda_release`]), Vulkan waits there before its next use; Vulkan signals
/// **`vulkan_done`** after a submission ([`Self::vulkan_submit`]), CUDA waits there before
/// overwriting ([`Self::cuda_acquire`]). A third, non-exported timeline gets the same values
/// as `vulkan_done` for host waits ([`Self::wait_vulkan`]): the validation layer follows its
/// payload, which it does not for a timeline another API signals.
///
/// # Values
///
/// Each timeline has **one signalling side** — CUDA signals `cuda_done`, Vulkan
/// `vulkan_done` — and its values only grow. Releases from several streams are chained on the
/// GPU (each first waits for the highest value already scheduled), so they also *run* in
/// value order: a fast stream's 6 never lands before a slow stream's 5. A wait is only ever
/// enqueued for a value already scheduled (the ledgers say so), so no wait is left for a value
/// nothing will signal. This is what lets the same object span processes (the two timelines
/// exported, each signalled by one process) and devices (a peer GPU's stream joins the chain
/// through an event on the bridge's device) without changing what a value means.
///
/// # Per resource: [`UseMarks`]
///
/// A resource (a buffer, an image) keeps a [`UseMarks`]: the `vulkan_done` value after
/// Vulkan's last use and the `cuda_done` value after the last CUDA release. The high-level
/// calls read and update them; the value-level calls (`*_value`, for the frame pacer and for
/// code that keeps its own books) take the values directly.
///
/// # Drop
///
/// Dropping waits, within the context's drop budget, for the last value scheduled on each
/// timeline; past it, the semaphores and their CUDA imports are parked until the GPU is
/// done, never destroyed under pending work.
pub struct StreamOrder {
    id: u64,
    timelines: ManuallyDrop<Timelines>,
    // Held while a `cuda_done` value is chosen and its wait and signal enqueued.
    release_lock: Mutex<()>,
    // Held while a `vulkan_done` value is chosen and submitted.
    submit_lock: Mutex<()>,
    // Streams of other GPUs join the chain through it.
    relay: Relay,
}

/// How a stream of another GPU (a peer) joins the order: CUDA events across devices, in one
/// process. The semaphores are imported into the bridge's context only, so the waits and
/// signals run on relay streams there: a peer's release records an event on the peer's
/// stream that the release relay waits for before signalling; a peer's acquire waits on the
/// acquire relay and records an event there that the peer's stream waits for. Two relays, so
/// that an acquire's wait for Vulkan never holds up a release Vulkan may be waiting for.
struct Relay {
    cuda: Arc<CudaContext>,
    acquire_stream: Arc<CudaStream>,
    release_stream: Arc<CudaStream>,
    // Recorded on the relay stream after an acquire's wait; held while recorded and waited.
    acquired: Mutex<CudaEvent>,
    // One event per peer context, recorded on the peer's stream before its release (under the
    // release lock).
    peers: Mutex<Vec<CudaEvent>>,
}

impl Relay {
    fn new(cuda: &Arc<CudaContext>) -> Result<Self> {
        let quiet = Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING);
        Ok(Self {
            cuda: cuda.clone(),
            acquire_stream: cuda.new_stream().cuda("cuStreamCreate")?,
            release_stream: cuda.new_stream().cuda("cuStreamCreate")?,
            acquired: Mutex::new(cuda.new_event(quiet).cuda("cuEventCreate")?),
            peers: Mutex::new(Vec::new()),
        })
    }

    /// Whether `stream` belongs to another context than the order's (a peer GPU's).
    fn is_peer(&self, stream: &CudaStream) -> bool {
        stream.context().cu_ctx() != self.cuda.cu_ctx()
    }

    /// Makes the relay stream wait for the work enqueued on the peer `stream` so far.
    fn follow(&self, stream: &CudaStream) -> Result<()> {
        let mut peers = lock(&self.peers);
        let ctx = stream.context();
        let at = match peers
            .iter()
            .position(|e| e.context().cu_ctx() == ctx.cu_ctx())
        {
            Some(at) => at,
            None => {
                let quiet = Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING);
                peers.push(ctx.new_event(quiet).cuda("cuEventCreate")?);
                peers.len() - 1
            }
        };
        let event = &peers[at];
        event.record(stream).cuda("cuEventRecord")?;
        self.release_stream.wait(event).cuda("cuStreamWaitEvent")
    }

    /// Makes the peer `stream` wait for the work enqueued on the relay stream so far.
    fn lead(&self, stream: &CudaStream, acquired: &CudaEvent) -> Result<()> {
        acquired
            .record(&self.acquire_stream)
            .cuda("cuEventRecord")?;
        stream.wait(acquired).cuda("cuStreamWaitEvent")
    }
}

struct Timelines {
    cuda_done: Arc<Semaphore>,
    vulkan_done: Arc<Semaphore>,
    vulkan_done_host: Arc<Semaphore>,
    cuda_done_import: ExternalSemaphore,
    vulkan_done_import: ExternalSemaphore,
}

/// Where one resource stands on a [`StreamOrder`]'s timelines; made by
/// [`StreamOrder::marks`] and accepted only by that order.
#[derive(Debug)]
pub struct UseMarks {
    order: u64,
    vulkan_use: AtomicU64,
    cuda_release: AtomicU64,
}

impl UseMarks {
    /// The `vulkan_done` value after Vulkan's last use (0: none yet).
    pub fn vulkan_use(&self) -> u64 {
        self.vulkan_use.load(Ordering::Acquire)
    }
    /// The `cuda_done` value after the last CUDA release (0: none yet).
    pub fn cuda_release(&self) -> u64 {
        self.cuda_release.load(Ordering::Acquire)
    }
    /// The [`StreamOrder::id`] these marks belong to.
    pub fn order_id(&self) -> u64 {
        self.order
    }
}

impl std::fmt::Debug for StreamOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamOrder")
            .field("id", &self.id)
            .field("cuda_done", &self.last_cuda())
            .field("vulkan_done", &self.last_vulkan())
            .finish_non_exhaustive()
    }
}

impl StreamOrder {
    /// Two exportable timelines on `bridge`'s Vulkan device, imported into its CUDA context,
    /// and a local one for host waits.
    pub fn new(bridge: &Bridge) -> Result<Self> {
        let vk = bridge.vulkan();
        let relay = Relay::new(bridge.cuda())?;
        let cuda_done = Semaphore::new(vk, SemaphoreDesc::SHARED_TIMELINE)?;
        let vulkan_done = Semaphore::new(vk, SemaphoreDesc::SHARED_TIMELINE)?;
        let vulkan_done_host = Semaphore::new(vk, SemaphoreDesc::LOCAL_TIMELINE)?;
        let timelines = Timelines {
            cuda_done_import: import_semaphore(bridge.cuda(), &cuda_done)?,
            vulkan_done_import: import_semaphore(bridge.cuda(), &vulkan_done)?,
            cuda_done,
            vulkan_done,
            vulkan_done_host,
        };
        Ok(Self {
            id: NEXT_ORDER_ID.fetch_add(1, Ordering::Relaxed),
            timelines: ManuallyDrop::new(timelines),
            release_lock: Mutex::new(()),
            submit_lock: Mutex::new(()),
            relay,
        })
    }

    /// This order's identity, unique in the process.
    pub fn id(&self) -> u64 {
        self.id
    }
    /// The Vulkan context the timelines live on.
    pub fn context(&self) -> &Arc<VulkanContext> {
        self.timelines.cuda_done.context()
    }
    /// The timeline CUDA signals after a release.
    pub fn cuda_done(&self) -> &Arc<Semaphore> {
        &self.timelines.cuda_done
    }
    /// The timeline Vulkan signals after a submission.
    pub fn vulkan_done(&self) -> &Arc<Semaphore> {
        &self.timelines.vulkan_done
    }
    /// The non-exported timeline Vulkan signals with the same values, for host waits.
    pub fn vulkan_done_host(&self) -> &Arc<Semaphore> {
        &self.timelines.vulkan_done_host
    }
    /// The highest `cuda_done` value scheduled (0: none).
    pub fn last_cuda(&self) -> u64 {
        self.timelines.cuda_done.highest_signal()
    }
    /// The highest `vulkan_done` value scheduled (0: none).
    pub fn last_vulkan(&self) -> u64 {
        self.timelines.vulkan_done.highest_signal()
    }

    /// Marks for one resource ordered by this order.
    pub fn marks(&self) -> UseMarks {
        UseMarks {
            order: self.id,
            vulkan_use: AtomicU64::new(0),
            cuda_release: AtomicU64::new(0),
        }
    }

    fn check_marks(&self, marks: &UseMarks) -> Result<()> {
        if marks.order == self.id {
            Ok(())
        } else {
            Err(SyncError::ForeignMarks {
                marks: marks.order,
                order: self.id,
            }
            .into())
        }
    }

    /// Enqueues on `stream` a wait until Vulkan's last use of `marks`' resource is done
    /// (nothing if Vulkan never used it). Refused for another order's marks.
    ///
    /// `stream` may belong to another GPU (a peer writing a
    /// [peer buffer](crate::Bridge::create_peer_buffer)): it then waits for an event recorded
    /// on the bridge's device after the wait — still on the GPU, no host wait.
    pub fn cuda_acquire(&self, marks: &UseMarks, stream: &CudaStream) -> Result<()> {
        self.check_marks(marks)?;
        self.cuda_wait_vulkan_value(marks.vulkan_use(), stream)
    }

    /// As [`Self::cuda_acquire`] on a raw stream handed in by other code (a PyTorch or CuPy
    /// stream): it must belong to the bridge's CUDA context (checked).
    ///
    /// # Safety
    /// `stream` must be null (the legacy default stream) or a live `CUstream`.
    pub unsafe fn cuda_acquire_raw(&self, marks: &UseMarks, stream: sys::CUstream) -> Result<()> {
        self.check_marks(marks)?;
        let value = marks.vulkan_use();
        if value == 0 {
            return Ok(());
        }
        self.timelines.vulkan_done.check_scheduled(value)?;
        // SAFETY: forwarded; the value is scheduled (checked).
        unsafe {
            self.timelines
                .vulkan_done_import
                .enqueue_raw(stream, value, false)
        }
    }

    /// Enqueues on `stream` a wait until `vulkan_done` reaches `value` (0: nothing). Refused
    /// ([`SyncError::WaitNeverSignalled`]) for a value no submission has scheduled.
    pub fn cuda_wait_vulkan_value(&self, value: u64, stream: &CudaStream) -> Result<()> {
        if value == 0 {
            return Ok(());
        }
        self.timelines.vulkan_done.check_scheduled(value)?;
        if self.relay.is_peer(stream) {
            let acquired = lock(&self.relay.acquired);
            self.timelines
                .vulkan_done_import
                .wait(&self.relay.acquire_stream, value)?;
            return self.relay.lead(stream, &acquired);
        }
        self.timelines.vulkan_done_import.wait(stream, value)
    }

    /// Enqueues on `stream`, after the work enqueued there so far, the next `cuda_done` value,
    /// chained after every release already scheduled; Vulkan's next use of each of `marks`'
    /// resources waits for it. Returns the value. Refused for another order's marks.
    ///
    /// `stream` may belong to another GPU (a peer): the release then runs on the bridge's
    /// device after an event recorded on `stream`.
    pub fn cuda_release(&self, marks: &[&UseMarks], stream: &CudaStream) -> Result<u64> {
        if self.relay.is_peer(stream) {
            for m in marks {
                self.check_marks(m)?;
            }
            let _chain = lock(&self.release_lock);
            let value = self.last_cuda() + 1;
            self.release_from_peer(stream, value)?;
            for m in marks {
                m.cuda_release.fetch_max(value, Ordering::AcqRel);
            }
            return Ok(value);
        }
        // SAFETY: a live stream of a context; `enqueue_raw` checks the context.
        unsafe { self.cuda_release_raw(marks, stream.cu_stream()) }
    }

    /// A release of `value` after the work on a peer GPU's `stream`; the release lock held.
    fn release_from_peer(&self, stream: &CudaStream, value: u64) -> Result<()> {
        let previous = self.last_cuda();
        if value <= previous {
            return Err(SyncError::TimelineNotIncreasing {
                value,
                last: previous,
            }
            .into());
        }
        self.relay.follow(stream)?;
        // SAFETY: the relay stream is a live stream of the order's context.
        unsafe { self.release_chained(self.relay.release_stream.cu_stream(), value) }
    }

    /// As [`Self::cuda_release`] on a raw stream (checked to be the bridge context's).
    ///
    /// # Safety
    /// `stream` must be null (the legacy default stream) or a live `CUstream`.
    pub unsafe fn cuda_release_raw(
        &self,
        marks: &[&UseMarks],
        stream: sys::CUstream,
    ) -> Result<u64> {
        for m in marks {
            self.check_marks(m)?;
        }
        let _chain = lock(&self.release_lock);
        // From the ledger, not a counter of ours: a signal enqueued whose bookkeeping then
        // failed still counts, so the next value always lies above it.
        let value = self.last_cuda() + 1;
        // SAFETY: forwarded.
        unsafe { self.release_chained(stream, value) }?;
        for m in marks {
            m.cuda_release.fetch_max(value, Ordering::AcqRel);
        }
        Ok(value)
    }

    /// Enqueues on `stream` the `cuda_done` signal of `value`, which must exceed every value
    /// scheduled ([`SyncError::TimelineNotIncreasing`]), chained after them on the GPU (the
    /// frame pacer's release of frame N). Changes no [`UseMarks`].
    pub fn cuda_release_value(&self, value: u64, stream: &CudaStream) -> Result<()> {
        let _chain = lock(&self.release_lock);
        if self.relay.is_peer(stream) {
            return self.release_from_peer(stream, value);
        }
        // SAFETY: a live stream; its context is checked.
        unsafe { self.release_chained(stream.cu_stream(), value) }
    }

    /// # Safety
    /// `stream` null or live; the release lock held.
    unsafe fn release_chained(&self, stream: sys::CUstream, value: u64) -> Result<()> {
        let t = &*self.timelines;
        let previous = t.cuda_done.highest_signal();
        if value <= previous {
            return Err(SyncError::TimelineNotIncreasing {
                value,
                last: previous,
            }
            .into());
        }
        if previous > 0 {
            // SAFETY: forwarded; `previous` is scheduled (the ledger has it).
            unsafe { t.cuda_done_import.enqueue_raw(stream, previous, false) }?;
        }
        // SAFETY: forwarded; the value exceeds every value scheduled and runs after them.
        unsafe { t.cuda_done_import.enqueue_raw(stream, value, true) }
    }

    /// Submits `submit` so that it waits (at `submit.wait_stage`) for the CUDA releases of
    /// `marks`' resources and signals the next `vulkan_done` value, which it returns and
    /// records as each resource's last Vulkan use. Refused for another order's marks.
    ///
    /// # Safety
    /// As [`VulkanContext::submit_with_semaphores`]: executable command buffers of the
    /// order's device whose resources stay alive until the returned value is reached.
    pub unsafe fn vulkan_submit(
        &self,
        marks: &[&UseMarks],
        submit: &FrameSubmit<'_>,
    ) -> Result<u64> {
        for m in marks {
            self.check_marks(m)?;
        }
        let release = marks.iter().map(|m| m.cuda_release()).max().unwrap_or(0);
        let next = lock(&self.submit_lock);
        let value = self.last_vulkan() + 1;
        // SAFETY: forwarded from the caller.
        unsafe { self.submit_locked(release, value, submit) }?;
        drop(next);
        for m in marks {
            m.vulkan_use.fetch_max(value, Ordering::AcqRel);
        }
        Ok(value)
    }

    /// Submits `submit` waiting for `cuda_done >= cuda_value` (0: no wait) and signalling
    /// `vulkan_done = vulkan_value` on both Vulkan timelines (the frame pacer's frame N).
    ///
    /// # Safety
    /// As [`Self::vulkan_submit`].
    pub unsafe fn vulkan_submit_values(
        &self,
        cuda_value: u64,
        vulkan_value: u64,
        submit: &FrameSubmit<'_>,
    ) -> Result<()> {
        let _next = lock(&self.submit_lock);
        // SAFETY: forwarded from the caller.
        unsafe { self.submit_locked(cuda_value, vulkan_value, submit) }
    }

    /// # Safety
    /// As [`Self::vulkan_submit`]; the submit lock held.
    unsafe fn submit_locked(
        &self,
        cuda_value: u64,
        vulkan_value: u64,
        submit: &FrameSubmit<'_>,
    ) -> Result<()> {
        let t = &*self.timelines;
        let mut waits = Vec::with_capacity(submit.waits.len() + 1);
        if cuda_value > 0 {
            waits.push(SemaphoreOp::wait(
                &t.cuda_done,
                cuda_value,
                submit.wait_stage,
            ));
        }
        waits.extend_from_slice(submit.waits);
        let mut signals = Vec::with_capacity(submit.signals.len() + 2);
        signals.push(SemaphoreOp::signal(&t.vulkan_done, vulkan_value));
        signals.push(SemaphoreOp::signal(&t.vulkan_done_host, vulkan_value));
        signals.extend_from_slice(submit.signals);
        // SAFETY: forwarded from the caller; `submit_with_semaphores` refuses signals that do
        // not increase, before the driver. (The `cuda_done` wait is for a marks' release,
        // scheduled when it was recorded, or for the caller's value in
        // `vulkan_submit_values`, which the frame pacer checks before it submits.)
        unsafe {
            self.context().submit_with_semaphores(
                submit.command_buffers,
                &waits,
                &signals,
                submit.fence,
            )
        }
    }

    /// Waits on the host until Vulkan's submission `value` is done (0: at once). Refused at
    /// once for a value never scheduled; [`Error::Timeout`] past `timeout`.
    pub fn wait_vulkan(&self, value: u64, timeout: Duration) -> Result<()> {
        wait_scheduled(&self.timelines.vulkan_done_host, value, timeout)
    }

    /// Waits on the host until the CUDA release `value` is done (0: at once). Refused at once
    /// for a value never scheduled; [`Error::Timeout`] past `timeout`.
    pub fn wait_cuda(&self, value: u64, timeout: Duration) -> Result<()> {
        wait_scheduled(&self.timelines.cuda_done, value, timeout)
    }

    /// Whether both timelines have reached every value scheduled on them (a zero-timeout
    /// host wait, which also tells the validation layer the work completed).
    fn reached_all(semaphores: &[(Arc<Semaphore>, u64)]) -> bool {
        semaphores
            .iter()
            .all(|(s, v)| !matches!(s.wait_host(*v, Duration::ZERO), Err(Error::Timeout { .. })))
    }

    /// The timelines with the last value scheduled on each, for a drop's probe.
    pub(crate) fn scheduled_marks(&self) -> Vec<(Arc<Semaphore>, u64)> {
        let t = &*self.timelines;
        [&t.vulkan_done_host, &t.vulkan_done, &t.cuda_done]
            .into_iter()
            .map(|s| (s.clone(), s.highest_signal()))
            .collect()
    }

    /// Logs where each timeline stands, for a drop that gave up: its last value scheduled and
    /// the highest known reached (and, failing that, its counter).
    fn log_unfinished(&self) {
        let t = &*self.timelines;
        for (name, s) in [
            ("cuda_done", &t.cuda_done),
            ("vulkan_done", &t.vulkan_done),
            ("vulkan_done_host", &t.vulkan_done_host),
        ] {
            let scheduled = s.highest_signal();
            let reached = s.has_reached(scheduled);
            log::warn!(
                "StreamOrder drop: {name} scheduled up to {scheduled}, reached: {reached:?} \
                 (known {})",
                s.ledger().reached()
            );
        }
    }

    /// A probe that says whether everything scheduled now on the timelines has run.
    pub(crate) fn completion_probe(&self) -> impl FnMut() -> bool + Send + 'static {
        let marks = self.scheduled_marks();
        move || Self::reached_all(&marks)
    }
}

fn wait_scheduled(semaphore: &Semaphore, value: u64, timeout: Duration) -> Result<()> {
    if value == 0 {
        return Ok(());
    }
    semaphore.check_scheduled(value)?;
    semaphore.wait_host(value, timeout)
}

impl Drop for StreamOrder {
    fn drop(&mut self) {
        let mut done = self.completion_probe();
        let budget = self.context().drop_budget().clone();
        let finished = budget.poll(&mut done);
        if !finished {
            self.log_unfinished();
        }
        // SAFETY: taken once, here; not used after.
        let timelines = unsafe { ManuallyDrop::take(&mut self.timelines) };
        // Given up: the queue's waits for CUDA's releases are released (abandoned), so that a
        // queue behind a long kernel does not hold the process at exit; then the streams'
        // waits for Vulkan values (see `teardown`).
        let (cuda_done, vulkan_done) = (timelines.cuda_done.clone(), timelines.vulkan_done.clone());
        budget.release_or_abandon(
            "StreamOrder",
            finished,
            timelines,
            || Box::new(done),
            || {
                Some(Box::new(move || {
                    cuda_done.abandon_queue_waits();
                    vulkan_done.abandon_cuda_waits();
                }))
            },
        );
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere; what it guards is still right.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<StreamOrder>();
    send_sync::<UseMarks>();
};
