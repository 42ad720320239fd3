//! Ordering wgpu's work against CUDA (and the host) on the GPU: wgpu submissions that wait on
//! and signal cuvk's timeline semaphores, raw command buffers made through
//! `CommandEncoder::as_hal_mut` (queue-family transfers, CUDA kernels launched in the queue),
//! and [`WgpuFramePacer`]. How a submission carries its semaphores when other threads submit
//! too: the `crate::wgpu` documentation, "Other threads submitting on the same queue".

use std::cell::Cell;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ash::vk;
use cudarc::driver::CudaStream;

use crate::vulkan::{
    cmd_acquire_buffers, cmd_release_buffers, record_barrier_before_kernel, record_kernel_barrier,
    AsVkBuffer, BoundBuffer, CuFunction, KernelArg, LaunchDims, ProgressSignal, SemaphoreKind,
    SemaphoreOp, VulkanContext,
};
use crate::wgpu::hal_vk::{wrong_backend, Vk};
use crate::wgpu::{WgpuBridge, WgpuDevice, WgpuSharedBuffer};
use crate::{
    DeviceObject, DeviceOwner, Error, Frame, FramePacer, Result, SharedBuffer, SyncError,
    WgpuError, WgpuObject,
};

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

/// Semaphore operations attached to wgpu-hal's lists for the next submission, withdrawn on
/// drop where no submission took them, so none is left for a later submission to pick up.
struct Attached<'a> {
    queue: &'a ::wgpu::hal::vulkan::Queue,
    waits: Vec<vk::Semaphore>,
    signals: Vec<vk::Semaphore>,
}

impl<'a> Attached<'a> {
    fn new(queue: &'a ::wgpu::hal::vulkan::Queue) -> Self {
        Self {
            queue,
            waits: Vec::new(),
            signals: Vec::new(),
        }
    }

    fn wait(&mut self, semaphore: vk::Semaphore, value: u64, stage: vk::PipelineStageFlags) {
        self.queue.add_wait_semaphore(semaphore, Some(value), stage);
        if !self.waits.contains(&semaphore) {
            self.waits.push(semaphore);
        }
    }

    fn signal(&mut self, semaphore: vk::Semaphore, value: u64) {
        self.queue.add_signal_semaphore(semaphore, Some(value));
        if !self.signals.contains(&semaphore) {
            self.signals.push(semaphore);
        }
    }

    /// Withdraws what no submission took; how many operations that was.
    fn withdraw(&mut self) -> usize {
        let waits = std::mem::take(&mut self.waits)
            .into_iter()
            .filter(|&s| self.queue.remove_wait_semaphore(s))
            .count();
        let signals = std::mem::take(&mut self.signals)
            .into_iter()
            .filter(|&s| self.queue.remove_signal_semaphore(s))
            .count();
        waits + signals
    }
}

impl Drop for Attached<'_> {
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
    /// # Safety
    /// wgpu-hal attaches the semaphore operations to the queue's *next* submission: while this
    /// runs, no other submission may be made on this wgpu queue, or it could take them and
    /// cuvk's work would run unordered. Every other operation that may submit on that queue
    /// must hold [`Self::submit_lock`], which this call holds: `Queue::submit`,
    /// `SurfaceTexture::present`, `Buffer::map_async` / `Queue::on_submitted_work_done` (which
    /// flush wgpu's pending writes), on other threads; or the application makes them on this
    /// thread only. The lock is not reentrant: do not call cuvk while holding it, and do not
    /// take it in a wgpu callback. Code that attaches semaphores to wgpu's queue itself (wgpu-hal's
    /// `add_wait_semaphore` / `add_signal_semaphore`) must hold it too. Calling this from
    /// inside a wgpu callback that wgpu runs during a cuvk submission on this thread is
    /// refused ([`WgpuError::ReentrantSubmit`]).
    pub unsafe fn submit<I: IntoIterator<Item = ::wgpu::CommandBuffer>>(
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
        let _ordered = self.submit_lock();
        // SAFETY: `submit_ordered` returns Ok only once wgpu took the work with the waits
        // before it and the signals (the progress signal among them) after it, in one
        // submission that no other could interleave with (the caller's contract); it returns
        // Err only where nothing reached the driver, nothing left attached.
        unsafe {
            self.vulkan().submit_foreign(waits, signals, |progress| {
                self.submit_ordered(&hal, command_buffers, waits, signals, progress)
            })
        }
    }

    /// The lock every submission on this wgpu queue must hold for [`Self::submit`] to keep
    /// its order (see its safety contract): hold it around the application's own
    /// `queue.submit` calls on other threads. Shared by every [`WgpuDevice`] of the queue.
    pub fn submit_lock(&self) -> MutexGuard<'_, ()> {
        self.queue_order().lock()
    }

    /// Attaches the waits and signals, submits the work, and withdraws what wgpu did not take
    /// (it refused the work: `Err`, nothing left attached).
    fn submit_ordered<I: IntoIterator<Item = ::wgpu::CommandBuffer>>(
        &self,
        hal: &::wgpu::hal::vulkan::Queue,
        command_buffers: I,
        waits: &[SemaphoreOp<'_>],
        signals: &[SemaphoreOp<'_>],
        progress: ProgressSignal,
    ) -> Result<::wgpu::SubmissionIndex> {
        let mut attached = Attached::new(hal);
        for op in waits {
            attached.wait(op.semaphore.handle(), op.value, op.stage);
        }
        for op in signals {
            attached.signal(op.semaphore.handle(), op.value);
        }
        attached.signal(progress.semaphore, progress.value);
        let index = self.queue().submit(command_buffers);
        match attached.withdraw() {
            0 => Ok(index),
            withdrawn => Err(WgpuError::NotSubmitted { withdrawn }.into()),
        }
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
    /// the command buffer's execution; every image handle among the arguments
    /// ([`crate::vulkan::InlineImageHandle`]) must stay alive until the command buffer
    /// completes, be used by the kernel as its kind (surface or texture), and its image be in
    /// `GENERAL` layout and owned by the queue's family while the kernels run.
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
    /// `frames_in_flight` (1 to [`crate::MAX_FRAMES_IN_FLIGHT`]) slots.
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
    ///
    /// # Safety
    /// As [`WgpuDevice::submit`]: no other submission on the wgpu queue while this runs (hold
    /// [`WgpuDevice::submit_lock`] around the application's other `queue.submit` calls).
    pub unsafe fn submit<I: IntoIterator<Item = ::wgpu::CommandBuffer>>(
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
        // SAFETY: forwarded from the caller.
        let index = unsafe { self.wgpu.submit(all, &waits, &signals) }?;
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
                "WgpuFramePacer dropped with frames still running ({e}); parking their \
                 buffers until those frames have run"
            );
            let held = std::mem::take(self.held.get_mut().unwrap_or_else(|p| p.into_inner()));
            let complete = self.pacer.frames_complete().clone();
            let last = complete.highest_signal();
            // A zero-timeout host wait (the validation layer learns the frames completed); a
            // timeline that cannot be waited on (a lost device) runs nothing any more.
            let done = move || {
                !matches!(
                    complete.wait_host(last, Duration::ZERO),
                    Err(Error::Timeout { .. })
                )
            };
            let budget = self.wgpu.vulkan().drop_budget().clone();
            budget.release("WgpuFramePacer", false, held, || Box::new(done));
        }
    }
}
