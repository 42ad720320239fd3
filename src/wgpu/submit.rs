//! Ordering wgpu's work against CUDA (and the host) on the GPU: wgpu submissions that wait on
//! and signal cuvk's timeline semaphores, raw command buffers made through
//! `CommandEncoder::as_hal_mut` (queue-family transfers, CUDA kernels launched in the queue),
//! and [`WgpuFramePacer`]. How a submission carries its semaphores when other threads submit
//! too: the `crate::wgpu` documentation, "Other threads submitting on the same queue".

use std::cell::Cell;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use ash::vk;
use cudarc::driver::CudaStream;

use crate::vulkan::{
    cmd_acquire_buffers, cmd_release_buffers, record_barrier_before_kernel, record_kernel_barrier,
    AsVkBuffer, BoundBuffer, CuFunction, KernelArg, LaunchDims, ProgressSignal, SemaphoreKind,
    SemaphoreOp, VulkanContext,
};
use crate::wgpu::device::{wrong_backend, Vk};
use crate::wgpu::{WgpuBridge, WgpuDevice, WgpuSharedBuffer};
use crate::{
    DeviceObject, DeviceOwner, Error, Frame, FramePacer, Result, SharedBuffer, SyncError,
    WgpuError, WgpuObject,
};

/// What orders cuvk's submissions on one wgpu queue (every [`WgpuDevice`] of that queue shares
/// it): a lock held from attaching a submission's waits to withdrawing those no submission
/// took (wgpu-hal withdraws by semaphore, every wait on it), and the thread that attaches each
/// submission's signals after it and makes the empty submission that carries them.
///
/// The signals go through a thread of their own because a driver may block a `vkQueueSubmit`
/// until the waits of the submission before it can be met (Mesa's drivers, lavapipe, when a
/// wait is for a value not yet signalled: its relay semaphore then waits for that submission
/// to reach the driver): there the thread blocks, not the caller. One thread per queue, in
/// order, so one submission's signals are flushed before the next one's are attached (a
/// timeline signalled twice in one batch could be signalled out of order).
pub(crate) struct QueueOrder {
    lock: Mutex<()>,
    signals: Mutex<Sender<SignalJob>>,
}

/// The signals of one submission, for [`QueueOrder`]'s thread.
struct SignalJob {
    queue: ::wgpu::Queue,
    signals: Vec<(vk::Semaphore, u64)>,
}

/// The [`QueueOrder`] of each wgpu queue with a [`WgpuDevice`], by raw `VkQueue`.
static QUEUE_ORDERS: Mutex<Vec<(vk::Queue, Weak<QueueOrder>)>> = Mutex::new(Vec::new());

impl QueueOrder {
    /// The order of `queue`'s cuvk submissions: shared with the other [`WgpuDevice`]s of the
    /// same queue, started (its thread) for the first.
    pub(crate) fn of(queue: &::wgpu::Queue, device: &::wgpu::Device) -> Result<Arc<Self>> {
        // SAFETY: the hal queue is only read (its raw handle, an identity).
        let raw = unsafe { queue.as_hal::<Vk>() }
            .map(|q| q.as_raw())
            .ok_or_else(|| wrong_backend(device, WgpuObject::Queue))?;
        let mut all = QUEUE_ORDERS.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|(_, o)| o.strong_count() > 0);
        if let Some(order) = all
            .iter()
            .find(|(q, _)| *q == raw)
            .and_then(|(_, o)| o.upgrade())
        {
            return Ok(order);
        }
        let (tx, rx) = mpsc::channel::<SignalJob>();
        std::thread::Builder::new()
            .name("cuvk wgpu signals".into())
            .spawn(move || {
                // Ends when every WgpuDevice of the queue is gone and the jobs are done.
                for job in rx {
                    job.flush();
                }
            })
            .map_err(|source| Error::Io {
                call: "std::thread::Builder::spawn",
                source,
            })?;
        let order = Arc::new(QueueOrder {
            lock: Mutex::new(()),
            signals: Mutex::new(tx),
        });
        all.push((raw, Arc::downgrade(&order)));
        Ok(order)
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands a submission's signals to the thread (after its work was submitted).
    fn send(&self, job: SignalJob) {
        let sent = self
            .signals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(job);
        if let Err(mpsc::SendError(job)) = sent {
            // The thread is gone (it panicked): flush here instead.
            job.flush();
        }
    }
}

impl SignalJob {
    /// Attaches the signals and makes an empty submission, which takes them unless another
    /// submission after the work's took them first: either way they follow the work.
    fn flush(self) {
        // SAFETY: the hal queue is used only to attach signals to the next submission and
        // to withdraw those no submission took; it is never submitted to directly.
        let Some(hal) = (unsafe { self.queue.as_hal::<Vk>() }) else {
            return;
        };
        for &(semaphore, value) in &self.signals {
            hal.add_signal_semaphore(semaphore, Some(value));
        }
        self.queue.submit(std::iter::empty());
        // Only this thread attaches cuvk's signals on this queue: what is left was not taken
        // because wgpu made no submission (the device is lost). Withdrawn, so that the next
        // submission's signals are not put in one batch with them.
        let left = self
            .signals
            .iter()
            .filter(|(s, _)| hal.remove_signal_semaphore(*s))
            .count();
        if left > 0 {
            log::error!(
                "wgpu did not submit the {left} semaphore signals that follow a cuvk \
                 submission (the device is probably lost): they will not happen"
            );
        }
    }
}

thread_local! {
    /// Whether this thread is inside a cuvk submission on a wgpu queue (wgpu runs callbacks,
    /// e.g. buffer-mapping ones, inside `queue.submit`).
    static IN_SUBMISSION: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as inside a cuvk submission until dropped (also on unwind).
struct InSubmission;

impl InSubmission {
    fn enter() -> Result<Self> {
        if in_submission() {
            return Err(WgpuError::ReentrantSubmit.into());
        }
        IN_SUBMISSION.with(|c| c.set(true));
        Ok(InSubmission)
    }
}

impl Drop for InSubmission {
    fn drop(&mut self) {
        IN_SUBMISSION.with(|c| c.set(false));
    }
}

fn in_submission() -> bool {
    IN_SUBMISSION.with(|c| c.get())
}

/// Semaphore waits attached to wgpu-hal's list for the next submission, withdrawn on drop
/// where no submission took them, so none is left for a later submission to pick up.
struct AttachedWaits<'a> {
    queue: &'a ::wgpu::hal::vulkan::Queue,
    semaphores: Vec<vk::Semaphore>,
}

impl<'a> AttachedWaits<'a> {
    fn new(queue: &'a ::wgpu::hal::vulkan::Queue) -> Self {
        Self {
            queue,
            semaphores: Vec::new(),
        }
    }

    fn wait(&mut self, semaphore: vk::Semaphore, value: u64, stage: vk::PipelineStageFlags) {
        self.queue.add_wait_semaphore(semaphore, Some(value), stage);
        if !self.semaphores.contains(&semaphore) {
            self.semaphores.push(semaphore);
        }
    }

    /// Withdraws the waits no submission took: the semaphores they were on.
    fn withdraw(&mut self) -> Vec<vk::Semaphore> {
        std::mem::take(&mut self.semaphores)
            .into_iter()
            .filter(|&s| self.queue.remove_wait_semaphore(s))
            .collect()
    }
}

impl Drop for AttachedWaits<'_> {
    fn drop(&mut self) {
        self.withdraw();
    }
}

/// A buffer CUDA writes and wgpu reads in a frame: [`WgpuFramePacer::submit`] transfers its
/// queue-family ownership and holds its Vulkan buffer until the frame's work completes.
pub trait PacedBuffer {
    /// The Vulkan buffer (and the memory it is bound to), shared.
    fn paced_vk_buffer(&self) -> Arc<BoundBuffer>;
}

impl<T: bytemuck::Pod> PacedBuffer for SharedBuffer<T> {
    fn paced_vk_buffer(&self) -> Arc<BoundBuffer> {
        self.vulkan_buffer().clone()
    }
}

impl<T: bytemuck::Pod> PacedBuffer for WgpuSharedBuffer<T> {
    fn paced_vk_buffer(&self) -> Arc<BoundBuffer> {
        self.shared.vulkan_buffer().clone()
    }
}

impl PacedBuffer for Arc<BoundBuffer> {
    fn paced_vk_buffer(&self) -> Arc<BoundBuffer> {
        self.clone()
    }
}

/// One CUDA kernel launch for [`WgpuDevice::kernel_commands`].
#[derive(Debug, Clone, Copy)]
pub struct KernelLaunch<'a> {
    /// The kernel (of a [`crate::vulkan::CuModule`] loaded on the wgpu device's context).
    pub function: &'a CuFunction,
    /// Grid, block and dynamic shared memory.
    pub dims: LaunchDims,
    /// The arguments, checked against the kernel's PTX signature.
    pub args: &'a [KernelArg],
}

impl WgpuDevice {
    /// Submits `command_buffers` to wgpu's queue, ordered on the GPU after every timeline in
    /// `waits` has reached its value (at the wait's stages) and before every timeline in
    /// `signals` is signalled with its value, e.g. after a CUDA stream's signal and before a
    /// CUDA wait.
    ///
    /// Checked before anything reaches wgpu: every semaphore belongs to this device and is a
    /// timeline (a binary wait with no pending signal would be invalid), every wait names the
    /// stages that wait, every signal value exceeds every value scheduled on its semaphore by
    /// any API, and no semaphore is signalled twice. The signal values are recorded once wgpu
    /// has taken the submission. If wgpu refuses the command buffers (a validation error,
    /// reported to wgpu's error handler) and no other thread's submission took the waits, the
    /// waits are withdrawn, nothing is recorded and [`WgpuError::NotSubmitted`] is returned:
    /// the same values can be submitted again.
    ///
    /// Other threads may submit on the same wgpu queue meanwhile (`queue.submit`, wgpu's own
    /// submissions): the waits may then travel in a submission just before this one, and the
    /// signals in one just after it, which orders the work the same way (a wait holds back every
    /// later command on the queue, a signal follows every earlier one: see
    /// [the `wgpu` module](crate::wgpu#other-threads-submitting-on-the-same-queue)). Code that
    /// attaches semaphores to wgpu's queue itself (wgpu-hal's `add_wait_semaphore` /
    /// `add_signal_semaphore`, reached through `unsafe` `as_hal`) must not do so while this
    /// runs: its operations could travel in cuvk's submissions.
    ///
    /// The signals follow in an empty submission that a thread of cuvk's makes right after
    /// (one per wgpu queue; where a driver blocks that submission until the waits before it
    /// can be met, the thread blocks, not this call). Calling this from inside a wgpu callback
    /// that wgpu runs during a cuvk submission on this thread is refused
    /// ([`WgpuError::ReentrantSubmit`]).
    pub fn submit<I: IntoIterator<Item = ::wgpu::CommandBuffer>>(
        &self,
        command_buffers: I,
        waits: &[SemaphoreOp<'_>],
        signals: &[SemaphoreOp<'_>],
    ) -> Result<::wgpu::SubmissionIndex> {
        let _inside = InSubmission::enter()?;
        for op in waits.iter().chain(signals) {
            if !self.vulkan().same_device(op.semaphore.context()) {
                return Err(Error::WrongDevice {
                    object: DeviceObject::Semaphore,
                    owner: DeviceOwner::WgpuDevice,
                });
            }
            if op.semaphore.kind() == SemaphoreKind::Binary {
                return Err(SyncError::BinaryNotAccepted {
                    what: "a wgpu submission",
                }
                .into());
            }
        }
        if waits.iter().any(|op| op.stage.is_empty()) {
            return Err(SyncError::EmptyWaitStage.into());
        }
        // SAFETY: the hal queue is used only to attach waits to wgpu's next submission and to
        // withdraw those no submission took; it is never submitted to directly.
        let hal = unsafe { self.queue().as_hal::<Vk>() }
            .ok_or_else(|| wrong_backend(self.device(), WgpuObject::Queue))?;
        let order = self.queue_order();
        let _attaching = order.lock();
        // SAFETY: `submit_ordered` returns Ok only once the work was submitted or may have been
        // (another thread's submission took its waits): the waits were attached before the
        // work's `queue.submit`, so a submission at or before it took them, which holds back the
        // work and every later command; the signals, the progress signal among them, are
        // attached only after it returned and are then flushed by an empty submission, so a
        // submission after it takes them, which follows every earlier command. It returns Err
        // only where the work certainly did not reach the driver, nothing left attached.
        unsafe {
            self.vulkan().submit_foreign(waits, signals, |progress| {
                self.submit_ordered(&hal, order, command_buffers, waits, signals, progress)
            })
        }
    }

    /// The waits, the work, then the signals to [`QueueOrder`]'s thread (the `crate::wgpu`
    /// documentation says why in this order). `Err`: the work certainly did not reach the
    /// driver, and nothing is left attached.
    fn submit_ordered<I: IntoIterator<Item = ::wgpu::CommandBuffer>>(
        &self,
        hal: &::wgpu::hal::vulkan::Queue,
        order: &QueueOrder,
        command_buffers: I,
        waits: &[SemaphoreOp<'_>],
        signals: &[SemaphoreOp<'_>],
        progress: ProgressSignal,
    ) -> Result<::wgpu::SubmissionIndex> {
        let mut attached = AttachedWaits::new(hal);
        for op in waits {
            attached.wait(op.semaphore.handle(), op.value, op.stage);
        }
        // The marker, attached last: a wait for the previous submission on the progress
        // timeline (already scheduled; wgpu orders its submissions anyway), so the list is
        // never empty. A wait still attached after the work's submit means no submission was
        // made since: wgpu refused the work.
        let marker = progress.semaphore;
        attached.wait(
            marker,
            progress.value.saturating_sub(1),
            vk::PipelineStageFlags::TOP_OF_PIPE,
        );
        let index = self.queue().submit(command_buffers);
        let left = attached.withdraw();
        if !left.is_empty() {
            return Err(WgpuError::NotSubmitted {
                withdrawn: left.iter().filter(|&&s| s != marker).count(),
            }
            .into());
        }
        order.send(SignalJob {
            queue: self.queue().clone(),
            signals: signals
                .iter()
                .map(|op| (op.semaphore.handle(), op.value))
                .chain([(progress.semaphore, progress.value)])
                .collect(),
        });
        Ok(index)
    }

    /// A wgpu command buffer with commands recorded directly into its `VkCommandBuffer`
    /// (`CommandEncoder::as_hal_mut`), in an encoder of its own: wgpu forbids mixing its
    /// commands with raw ones in one encoder.
    ///
    /// # Safety
    /// `record` must record valid commands into the command buffer it is given (in the
    /// recording state; it must not end it) and only use objects of this device that stay
    /// alive until the command buffer completes. wgpu does not track what it records.
    pub(crate) unsafe fn raw_commands(
        &self,
        label: &str,
        record: impl FnOnce(&VulkanContext, vk::CommandBuffer) -> Result<()>,
    ) -> Result<::wgpu::CommandBuffer> {
        let mut encoder = self
            .device()
            .create_command_encoder(&::wgpu::CommandEncoderDescriptor { label: Some(label) });
        let vulkan = self.vulkan();
        let body = |hal: Option<&mut ::wgpu::hal::vulkan::CommandEncoder>| {
            hal.map(|e| {
                // SAFETY: the handle is only recorded into, never ended or destroyed.
                let cmd = unsafe { e.raw_handle() };
                record(vulkan, cmd)
            })
        };
        // SAFETY: the encoder is ours and fresh (no wgpu commands in it); the raw command
        // buffer is recording, not ended here, not destroyed; the caller vouches for `record`.
        let recorded = unsafe { encoder.as_hal_mut::<Vk, _, _>(body) };
        match recorded {
            Some(Ok(())) => Ok(encoder.finish()),
            Some(Err(e)) => Err(e),
            None => Err(WgpuError::NoRawEncoder.into()),
        }
    }

    /// A command buffer that launches CUDA kernels inside wgpu's queue
    /// (`VK_NVX_binary_import`, [`crate::vulkan::CuModule`] loaded on [`Self::vulkan`]), with
    /// the barriers wgpu's tracking cannot know about: before the first kernel, every earlier
    /// write on the queue is made visible to it; between kernels, each one's writes to the
    /// next; after the last, its writes to every later command. Submit it before the wgpu
    /// command buffers that read what the kernels write (in the same or a later submission).
    ///
    /// Every launch is checked first (device, signature, limits); nothing is recorded if one
    /// is refused.
    ///
    /// # Safety
    /// As [`CuFunction::record_launch`]: every device address among the arguments must stay
    /// valid (its buffer alive) until the command buffer completes, the kernels must access
    /// only memory those addresses cover, and the functions and their module must outlive
    /// the command buffer's execution.
    pub unsafe fn kernel_commands(
        &self,
        launches: &[KernelLaunch<'_>],
    ) -> Result<::wgpu::CommandBuffer> {
        crate::vulkan::cuda_kernels_supported(self.vulkan())?;
        for l in launches {
            if !self.vulkan().same_device(l.function.context()) {
                return Err(Error::WrongDevice {
                    object: DeviceObject::KernelModule,
                    owner: DeviceOwner::WgpuDevice,
                });
            }
            l.function.validate_launch(&l.dims, l.args)?;
        }
        // SAFETY: barriers and validated launches of live functions of this device; the
        // caller vouches for the addresses and lifetimes.
        unsafe {
            self.raw_commands("cuvk kernels", |ctx, cmd| {
                record_barrier_before_kernel(
                    ctx,
                    cmd,
                    vk::PipelineStageFlags::ALL_COMMANDS,
                    vk::AccessFlags::MEMORY_WRITE,
                );
                for (i, l) in launches.iter().enumerate() {
                    if i > 0 {
                        record_kernel_barrier(ctx, cmd);
                    }
                    l.function.record_launch(cmd, &l.dims, l.args)?;
                }
                record_kernel_barrier(ctx, cmd);
                Ok(())
            })
        }
    }
}

/// [`FramePacer`] in wgpu's terms: K frames in flight, CUDA writes and wgpu reads of K slots
/// ordered on the GPU by the pacer's timelines, carried by wgpu's own submissions.
///
/// Per frame: [`Self::begin_frame`] (a host wait only when the CPU is 2K frames ahead),
/// [`Self::cuda_acquire`] and the CUDA work and [`Self::cuda_release`] on a stream, then
/// [`Self::submit`] with the wgpu command buffers that read the frame's slot. The same
/// guarantees as [`FramePacer`]: CUDA never overwrites a slot wgpu has not finished reading,
/// wgpu never reads a slot before CUDA has finished writing it, and neither waits on the CPU.
///
/// A frame is accepted only by the pacer that issued it ([`SyncError::ForeignFrame`]), once,
/// while it is the pacer's current frame and CUDA has released it
/// ([`FramePacer::validate_submit`]): so the buffers a submitted frame lists are held until
/// that frame's work has completed.
pub struct WgpuFramePacer {
    // Per command slot, the buffers its last submitted frame uses, held until that frame has
    // completed (begin_frame waits for it before the slot comes round). Dropped after
    // Drop::drop has waited for every frame, or leaked if that timed out.
    held: Mutex<Vec<Vec<Arc<BoundBuffer>>>>,
    pacer: FramePacer,
    wgpu: WgpuDevice,
}

impl WgpuFramePacer {
    /// Creates the pacer's timelines on the wgpu device and imports them into CUDA, for
    /// `frames_in_flight` (1 to 8) slots.
    pub fn new(bridge: &WgpuBridge, frames_in_flight: u32) -> Result<Self> {
        let pacer = FramePacer::new(bridge.bridge(), frames_in_flight)?;
        Ok(Self {
            held: Mutex::new(vec![Vec::new(); pacer.command_slots()]),
            pacer,
            wgpu: bridge.wgpu().clone(),
        })
    }

    /// The pacer underneath (its timelines, for submissions made another way).
    pub fn pacer(&self) -> &FramePacer {
        &self.pacer
    }
    /// Sets how long [`Self::begin_frame`] waits for a slot ([`FramePacer::set_slot_timeout`]).
    pub fn set_slot_timeout(&mut self, timeout: Duration) {
        self.pacer.set_slot_timeout(timeout);
    }
    /// Frames in flight (K).
    pub fn frames_in_flight(&self) -> u32 {
        self.pacer.frames_in_flight()
    }

    /// The next frame ([`FramePacer::begin_frame`]: refused until the current frame is
    /// submitted): waits on the host only while the CPU is 2K frames ahead; then the buffers
    /// held for the frame 2K earlier are released.
    pub fn begin_frame(&mut self) -> Result<Frame> {
        let frame = self.pacer.begin_frame()?;
        let held = self.held.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = held.get_mut(frame.command_slot()) {
            // Frame number - 2K, the last user of this command slot, has completed (the
            // pacer waited for it) or never existed.
            slot.clear();
        }
        Ok(frame)
    }
    /// On `stream`: wait (on the GPU) until wgpu has released the frame's slot
    /// ([`FramePacer::cuda_acquire`]).
    pub fn cuda_acquire(&self, frame: &Frame, stream: &CudaStream) -> Result<()> {
        self.pacer.cuda_acquire(frame, stream)
    }
    /// On `stream`, after the frame's CUDA work: signal that the slot is written
    /// ([`FramePacer::cuda_release`]).
    pub fn cuda_release(&self, frame: &Frame, stream: &CudaStream) -> Result<()> {
        self.pacer.cuda_release(frame, stream)
    }

    /// Submits the frame's wgpu work: it waits (on the GPU) for CUDA's release of the frame at
    /// `wait_stage` and signals the frame done. `shared` are the buffers CUDA wrote this
    /// frame and wgpu reads: their queue-family ownership is acquired from CUDA
    /// (`VK_QUEUE_FAMILY_EXTERNAL`) before `command_buffers` and released back after them, in
    /// two raw command buffers of the same submission, and the pacer holds their Vulkan
    /// buffers until the frame completes.
    ///
    /// Checked before anything is made: the stage, that every buffer is on this device, that
    /// this pacer issued `frame` ([`SyncError::ForeignFrame`]), the pacer's rules for a
    /// submission ([`FramePacer::validate_submit`]: the current frame, released by CUDA, not
    /// submitted yet), then [`WgpuDevice::submit`]'s. Refused, nothing changes: the frame can
    /// be submitted again.
    pub fn submit<I: IntoIterator<Item = ::wgpu::CommandBuffer>>(
        &self,
        frame: &Frame,
        shared: &[&dyn PacedBuffer],
        command_buffers: I,
        wait_stage: vk::PipelineStageFlags,
    ) -> Result<::wgpu::SubmissionIndex> {
        if in_submission() {
            return Err(WgpuError::ReentrantSubmit.into());
        }
        if wait_stage.is_empty() {
            return Err(SyncError::EmptyWaitStage.into());
        }
        let buffers: Vec<Arc<BoundBuffer>> = shared.iter().map(|b| b.paced_vk_buffer()).collect();
        let ctx = self.wgpu.vulkan();
        if buffers.iter().any(|b| !ctx.same_device(b.vk_context())) {
            return Err(Error::WrongDevice {
                object: DeviceObject::Buffer,
                owner: DeviceOwner::WgpuDevice,
            });
        }
        if !frame.is_from(&self.pacer) {
            return Err(SyncError::ForeignFrame {
                frame: frame.number(),
            }
            .into());
        }
        // Held from the check to the books, so that two threads cannot both submit the frame
        // (the ledgers would refuse the second anyway).
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        self.pacer.validate_submit(frame)?;
        let views: Vec<&dyn AsVkBuffer> = buffers.iter().map(|b| &**b as &dyn AsVkBuffer).collect();
        let all = self.frame_commands(&views, command_buffers)?;
        let p = &self.pacer;
        let waits = [SemaphoreOp::wait(p.cuda_done(), frame.number(), wait_stage)];
        let signals = [
            SemaphoreOp::signal(p.vulkan_done(), frame.number()),
            SemaphoreOp::signal(p.frames_complete(), frame.number()),
        ];
        let index = self.wgpu.submit(all, &waits, &signals)?;
        if let Some(slot) = held.get_mut(frame.command_slot()) {
            slot.extend(buffers);
        }
        Ok(index)
    }

    /// `command_buffers` between the acquire of `shared` from CUDA and their release back.
    fn frame_commands<I: IntoIterator<Item = ::wgpu::CommandBuffer>>(
        &self,
        shared: &[&dyn AsVkBuffer],
        command_buffers: I,
    ) -> Result<Vec<::wgpu::CommandBuffer>> {
        let all_access = vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE;
        let mut all = Vec::new();
        if !shared.is_empty() {
            // SAFETY: ownership barriers of live buffers of this device (checked), which the
            // pacer holds until the frame's work completes.
            all.push(unsafe {
                self.wgpu
                    .raw_commands("cuvk acquire from CUDA", |ctx, cmd| {
                        cmd_acquire_buffers(
                            ctx.device(),
                            cmd,
                            ctx.queue_family_index(),
                            shared,
                            vk::PipelineStageFlags::ALL_COMMANDS,
                            all_access,
                        );
                        Ok(())
                    })
            }?);
        }
        all.extend(command_buffers);
        if !shared.is_empty() {
            // SAFETY: as above.
            all.push(unsafe {
                self.wgpu.raw_commands("cuvk release to CUDA", |ctx, cmd| {
                    cmd_release_buffers(
                        ctx.device(),
                        cmd,
                        ctx.queue_family_index(),
                        shared,
                        vk::PipelineStageFlags::ALL_COMMANDS,
                        all_access,
                    );
                    Ok(())
                })
            }?);
        }
        Ok(all)
    }

    /// Waits on the host until wgpu has finished every frame submitted so far.
    pub fn wait_idle(&self, timeout: Duration) -> Result<()> {
        self.pacer.wait_idle(timeout)
    }
}

impl Drop for WgpuFramePacer {
    fn drop(&mut self) {
        // The held buffers go only once every frame that used them has completed: waited for
        // within the context's drop budget.
        let pacer = &self.pacer;
        let waited = self
            .wgpu
            .vulkan()
            .drop_wait("the frames of a WgpuFramePacer", |allowance| {
                pacer.wait_idle(allowance)
            });
        if let Err(e) = waited {
            log::error!(
                "WgpuFramePacer dropped with frames still running ({e}); leaking their buffers"
            );
            let held = self.held.get_mut().unwrap_or_else(|p| p.into_inner());
            std::mem::forget(std::mem::take(held));
        }
    }
}
