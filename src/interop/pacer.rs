//! Frame pacing for render loops where CUDA writes and Vulkan reads shared memory, with
//! K frames in flight, ordered on the GPU by a [`StreamOrder`]'s two timeline semaphores, with
//! frame numbers as their values:
//!
//! - `cuda_done` reaches N when CUDA has finished writing frame N;
//! - `vulkan_done` reaches N when Vulkan has finished reading frame N.
//!
//! Frame N uses slot `N % K`. Before writing it, the CUDA stream waits (on the GPU) for
//! `vulkan_done >= N - K`, the last frame that read the slot; Vulkan's submission waits for
//! `cuda_done >= N`. The CUDA↔Vulkan handoff never waits on the CPU. The only host wait is
//! [`FramePacer::begin_frame`]'s bound on how far the CPU records ahead of the GPU: frame N
//! starts once Vulkan finished frame `N - 2K`, so the frame's command buffer (one of `2K`,
//! [`Frame::command_slot`]) is free to reuse; the data slots are guarded on the GPU alone.
//! That host wait is on the order's third, non-exported timeline (`frames_complete`) that each
//! Vulkan submission also signals: the validation layer cannot follow the payload of exported
//! semaphores, so only a wait on a non-exported one tells it the command buffer is free.
//!
//! Each frame goes through its steps in order — begin, CUDA acquire, CUDA release, Vulkan
//! submission — and only the frame begun last can take a step. Each step checks, before
//! anything is enqueued, that every wait it adds is for a value a submission already
//! scheduled (the semaphores' signal ledgers know), so no safe call can make the GPU or the
//! host wait for a value nobody will signal.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ash::vk;
use cudarc::driver::CudaStream;

use super::frame::{check_frames_in_flight, next_issuer_id, Frame};
use crate::error::{FrameStep, Result, SyncError, VkResultExt};
use crate::interop::{Bridge, StreamOrder};
use crate::rules::timeline::{FrameBook, PacerMarks, SignalLedger};
use crate::vulkan::{
    cmd_acquire_buffers, cmd_acquire_images, cmd_release_buffers, cmd_release_images, AsVkBuffer,
    AsVkImage, Semaphore, SemaphoreOp, VulkanContext,
};

/// How long [`FramePacer::begin_frame`] waits for a command slot before reporting
/// [`crate::Error::Timeout`]. (A pacer's drop is bounded by its context's drop budget,
/// [`crate::vulkan::VulkanContext::set_drop_timeout`].)
pub const DEFAULT_SLOT_TIMEOUT: Duration = Duration::from_secs(10);

impl Frame {
    /// Whether `pacer` issued it. (Whether it is still the pacer's current frame is for the
    /// pacer's steps to say: [`FramePacer::validate_submit`].)
    pub fn is_from(&self, pacer: &FramePacer) -> bool {
        self.issuer_id() == pacer.id
    }
}

/// Hands out frames and orders CUDA writes and Vulkan reads of K slots on the GPU.
///
/// # A paced frame
///
/// Per frame: [`Self::begin_frame`]; on a CUDA stream [`Self::cuda_acquire`], the kernels
/// that write the frame's slot, [`Self::cuda_release`]; then the Vulkan work that reads it,
/// recorded into the frame's command buffer ([`Self::record_commands`]) between the
/// acquire and release barriers of the shared memory, and submitted with
/// [`Self::vulkan_submit`]. Keep one buffer or image per **data slot** (`K`,
/// [`Frame::slot`]): CUDA writes slot `N % K` while Vulkan may still read the others. Keep
/// what the host reads back per **command slot** (`2K`, [`Frame::command_slot`]): frame N's
/// readback stays untouched until frame `N + 2K`, whose `begin_frame` waits for frame N to
/// complete — so right after `begin_frame` it holds that earlier frame's result, ready to
/// read, and may then be reused. A readback needs a barrier to the host
/// ([`Self::record_host_read_barrier`]) after the copy that writes it, and the frame must be
/// complete before the host reads it ([`Self::wait_frame`], or `begin_frame` 2K frames
/// later).
///
/// ```no_run
/// use std::time::Duration;
/// use cuvk::ash::vk;
/// use cuvk::cudarc::driver::CudaStream;
/// use cuvk::vulkan::{AsVkBuffer, AsVkImage, HostBuffer};
/// use cuvk::{Bridge, BridgeConfig, FramePacer, FrameSubmit, ImageDesc, SharedImage};
///
/// /// CUDA writes the frame into the image (a kernel on `image.surface(0)?`, say).
/// fn write_image(stream: &CudaStream, image: &SharedImage, frame: u64) -> cuvk::Result<()> {
///     # let _ = (stream, image, frame);
///     Ok(())
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bridge = Bridge::new(BridgeConfig::default())?;
/// let stream = bridge.cuda().new_stream()?;
/// let mut pacer = FramePacer::new(&bridge, 2)?; // K = 2 frames in flight
/// let (w, h) = (256u32, 256u32);
/// let usage = vk::ImageUsageFlags::STORAGE | vk::ImageUsageFlags::TRANSFER_SRC;
/// // One image per data slot (K).
/// let images = (0..pacer.frames_in_flight())
///     .map(|_| bridge.create_image(&ImageDesc::d2(vk::Format::R8G8B8A8_UNORM, w, h, usage)))
///     .collect::<cuvk::Result<Vec<SharedImage>>>()?;
/// // One readback per command slot (2K).
/// let readbacks = (0..pacer.command_slots())
///     .map(|_| {
///         HostBuffer::new(bridge.vulkan(), u64::from(w * h * 4), vk::BufferUsageFlags::empty())
///     })
///     .collect::<cuvk::Result<Vec<HostBuffer>>>()?;
/// let region = vk::BufferImageCopy::default()
///     .image_subresource(vk::ImageSubresourceLayers::default()
///         .aspect_mask(vk::ImageAspectFlags::COLOR)
///         .layer_count(1))
///     .image_extent(vk::Extent3D { width: w, height: h, depth: 1 });
///
/// for _ in 0..100 {
///     let frame = pacer.begin_frame()?;
///     let (image, readback) = (&images[frame.slot()], &readbacks[frame.command_slot()]);
///     if let Some(earlier) = frame.previous_command_use() {
///         // Frame `earlier` (N - 2K) wrote this readback and has completed: read it now,
///         // before this frame's copy reuses it.
///         let pixels: Vec<u32> = readback.read()?;
///         # let _ = (earlier, pixels);
///     }
///     // CUDA: wait (on the GPU) until Vulkan released the slot, write it, release it.
///     pacer.cuda_acquire(&frame, &stream)?;
///     write_image(&stream, image, frame.number())?;
///     pacer.cuda_release(&frame, &stream)?;
///     // Vulkan: acquire the image from CUDA, copy it out, give it back, make the copy
///     // visible to the host.
///     let cmd = pacer.record_commands(&frame, |pacer, cmd| {
///         let layout = vk::ImageLayout::TRANSFER_SRC_OPTIMAL;
///         let images: [(&dyn AsVkImage, vk::ImageLayout); 1] = [(image, layout)];
///         let (stage, device) = (vk::PipelineStageFlags::TRANSFER, pacer.context().device());
///         // SAFETY: `cmd` records on the pacer's device; the image and the readback outlive
///         // the frame (the loop ends with wait_idle).
///         unsafe {
///             let read = vk::AccessFlags::TRANSFER_READ;
///             pacer.record_image_acquire_from_cuda(cmd, &images, stage, read);
///             let (src, dst) = (image.vk_image(), readback.vk_buffer());
///             device.cmd_copy_image_to_buffer(cmd, src, layout, dst, &[region]);
///             pacer.record_image_release_to_cuda(cmd, &images, stage, vk::AccessFlags::empty());
///             pacer.record_host_read_barrier(cmd, stage, vk::AccessFlags::TRANSFER_WRITE);
///         }
///         Ok(())
///     })?;
///     // SAFETY: the frame's own command buffer, just recorded; what it uses outlives it.
///     unsafe {
///         let stage = vk::PipelineStageFlags::TRANSFER;
///         pacer.vulkan_submit(&frame, &FrameSubmit::new(&[cmd], stage))?
///     };
/// }
/// pacer.wait_idle(Duration::from_secs(10))?; // now every readback holds its last frame
/// # Ok(()) }
/// ```
///
/// To skip a frame (nothing to draw this time), still acquire, release and submit it, with
/// no work: the next frame begins only once the current one is submitted
/// ([`SyncError::FrameOutOfOrder`]), since a frame left unsubmitted would leave a value every
/// later frame's wait needs unsignalled.
///
/// # Command buffers
///
/// [`Self::record_commands`] hands out the frame's own primary command buffer (one per
/// command slot, made on first use, reset when its slot comes round: no pool to manage).
/// Commands are recorded with `ash` through [`Self::context`]`().device()` (`cuvk::ash`),
/// the shared-memory barriers with the `record_*` methods here. An engine with its own
/// command buffers uses those instead, indexed by [`Frame::command_slot`]: the pacer
/// guarantees that the frame which last used a command slot has completed.
///
/// # Engines that submit themselves
///
/// An engine that submits on its own queue takes the frame's waits and signals from
/// [`Self::frame_semaphores`] (`vkQueueSubmit2` infos), submits, and then reports the
/// submission with the `unsafe` [`Self::mark_submitted`] — the pacer cannot see a submission
/// made outside `cuvk`, so the engine promises it. Code built on the pacer that submits
/// through another `cuvk` path that records signals in the semaphores' ledgers (wgpu) checks
/// the frame with [`Self::validate_submit`] first and need not mark anything.
///
/// # Drop
///
/// Dropping the pacer waits for the frames scheduled on its timelines within the context's drop
/// budget ([`crate::vulkan::VulkanContext::set_drop_timeout`], [`crate::DEFAULT_DROP_TIMEOUT`]
/// by default); past it, it logs, and parks its semaphores, their CUDA imports and its command
/// buffers until those frames have run, rather than destroy them in use.
pub struct FramePacer {
    id: u64,
    frames_in_flight: u64,
    order: StreamOrder,
    book: Mutex<FrameBook>,
    /// One pool and primary command buffer per command slot, made on first use.
    commands: Vec<Option<(vk::CommandPool, vk::CommandBuffer)>>,
    queue_family: u32,
    slot_timeout: Duration,
    acquire_wait: AcquireWait,
}

/// Where [`FramePacer::cuda_acquire`] waits for Vulkan to release a frame's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AcquireWait {
    /// On the GPU: the CUDA stream waits for the `vulkan_done` timeline
    /// (`cuWaitExternalSemaphoresAsync`); the host never blocks. The default.
    #[default]
    Gpu,
    /// On the host: `cuda_acquire` blocks (at most the slot timeout,
    /// [`FramePacer::set_slot_timeout`]) until Vulkan has released the slot, and enqueues no
    /// CUDA wait, so no CUDA stream ever has a semaphore wait outstanding while Vulkan work is
    /// submitted. NVIDIA documents that such outstanding waits can leave scheduling bubbles
    /// in Vulkan work on Linux (BENCHMARKS.md has what was measured here).
    Host,
}

impl std::fmt::Debug for FramePacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FramePacer")
            .field("id", &self.id)
            .field("frames_in_flight", &self.frames_in_flight)
            .field("current_frame", &self.book().current())
            .finish_non_exhaustive()
    }
}

impl FramePacer {
    /// Creates the two exportable timeline semaphores, imports them into CUDA, for
    /// `frames_in_flight` (1 to [`super::MAX_FRAMES_IN_FLIGHT`]) slots.
    pub fn new(bridge: &Bridge, frames_in_flight: u32) -> Result<Self> {
        let k = check_frames_in_flight(frames_in_flight)?;
        let vk = bridge.vulkan();
        let order = StreamOrder::new(bridge)?;
        let id = next_issuer_id();
        Ok(Self {
            id,
            frames_in_flight: k,
            order,
            book: Mutex::new(FrameBook::new(id, k)),
            commands: vec![None; 2 * frames_in_flight as usize],
            queue_family: vk.queue_family_index(),
            slot_timeout: DEFAULT_SLOT_TIMEOUT,
            acquire_wait: AcquireWait::Gpu,
        })
    }

    /// This pacer's identity, unique in the process: every [`Frame`] it issues carries it
    /// ([`Frame::issuer_id`]).
    pub fn id(&self) -> u64 {
        self.id
    }
    /// Frames in flight (K).
    pub fn frames_in_flight(&self) -> u32 {
        self.frames_in_flight as u32
    }
    /// The Vulkan context the pacer's semaphores and command buffers belong to.
    pub fn context(&self) -> &Arc<VulkanContext> {
        self.order.context()
    }
    /// The timeline CUDA signals with the frame number when it has written a frame.
    pub fn cuda_done(&self) -> &Arc<Semaphore> {
        self.order.cuda_done()
    }
    /// The timeline Vulkan signals with the frame number when it has read a frame.
    pub fn vulkan_done(&self) -> &Arc<Semaphore> {
        self.order.vulkan_done()
    }
    /// The host-side completion timeline (not exported): Vulkan signals it with the frame
    /// number alongside `vulkan_done`. A submission that bypasses [`Self::vulkan_submit`] must
    /// signal both.
    pub fn frames_complete(&self) -> &Arc<Semaphore> {
        self.order.vulkan_done_host()
    }
    /// Sets how long [`Self::begin_frame`] waits for a command slot (and
    /// [`Self::cuda_acquire`] for Vulkan's release with [`AcquireWait::Host`]).
    pub fn set_slot_timeout(&mut self, timeout: Duration) {
        self.slot_timeout = timeout;
    }

    /// Sets where [`Self::cuda_acquire`] waits for Vulkan's release of a frame's slot: on the
    /// GPU (the default) or on the host.
    pub fn set_acquire_wait(&mut self, wait: AcquireWait) {
        self.acquire_wait = wait;
    }

    /// Where [`Self::cuda_acquire`] waits (see [`AcquireWait`]).
    pub fn acquire_wait(&self) -> AcquireWait {
        self.acquire_wait
    }

    /// Number of command slots a loop cycles through ([`Frame::command_slot`]): `2K`.
    pub fn command_slots(&self) -> usize {
        2 * self.frames_in_flight as usize
    }

    fn book(&self) -> MutexGuard<'_, FrameBook> {
        // A poisoned lock only means a thread panicked between steps; the book is consistent
        // (it changes only after the step's driver call succeeded).
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the ledgers say the GPU will reach on each timeline.
    fn marks(&self) -> PacerMarks {
        PacerMarks {
            cuda_done: self.order.last_cuda(),
            vulkan_done: self.order.last_vulkan(),
            frames_complete: self.order.vulkan_done_host().highest_signal(),
        }
    }

    fn check(&self, book: &FrameBook, frame: &Frame, step: FrameStep) -> Result<()> {
        book.check(frame.issuer_id(), frame.number(), step, self.marks())
    }

    /// The next frame. Refused ([`SyncError::FrameOutOfOrder`]) until the current frame is
    /// submitted. Waits on the host only until Vulkan has finished frame `N - 2K`, the
    /// previous user of the frame's command slot (immediate unless the CPU is 2K frames
    /// ahead); on [`crate::Error::Timeout`] nothing changed and the call can be repeated.
    pub fn begin_frame(&mut self) -> Result<Frame> {
        let (number, reuse) = self.book().plan_begin(self.marks())?;
        if let Some(prev) = reuse {
            self.order.wait_vulkan(prev, self.slot_timeout)?;
        }
        self.book
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .begun(number);
        Ok(Frame::issue(self.id, number, self.frames_in_flight))
    }

    /// On `stream`: wait until Vulkan has released the frame's slot
    /// (`vulkan_done >= number - K`): on the GPU, or with [`AcquireWait::Host`] on the host
    /// ([`Error::Timeout`](crate::Error::Timeout) past the slot timeout, the frame still
    /// unacquired). Call it on every stream that writes the frame, before its kernels, and
    /// before [`Self::cuda_release`]; refused for another pacer's frame, a frame that is not
    /// the current one, or one CUDA already released.
    pub fn cuda_acquire(&self, frame: &Frame, stream: &CudaStream) -> Result<()> {
        let prev = frame.previous_use();
        if let (AcquireWait::Host, Some(prev)) = (self.acquire_wait, prev) {
            // Checked first, then waited for without the book's lock (the wait may be long);
            // the frame that last used the slot was submitted, so the value is scheduled.
            self.check(&self.book(), frame, FrameStep::CudaAcquire)?;
            self.order.wait_vulkan(prev, self.slot_timeout)?;
        }
        let mut book = self.book();
        self.check(&book, frame, FrameStep::CudaAcquire)?;
        if let (AcquireWait::Gpu, Some(prev)) = (self.acquire_wait, prev) {
            self.order.cuda_wait_vulkan_value(prev, stream)?;
        }
        book.acquired();
        Ok(())
    }

    /// On `stream`, after the frame's kernels: signal `cuda_done = frame.number()`. Refused
    /// before [`Self::cuda_acquire`] (CUDA would overwrite a slot Vulkan may still read), for
    /// another pacer's frame, a frame that is not the current one, or a second release.
    ///
    /// Frames may be released on different streams: the stream first waits (on the GPU) for
    /// the previous frame's release, so the releases run in frame order (a timeline signal
    /// must exceed the value before it when it runs).
    pub fn cuda_release(&self, frame: &Frame, stream: &CudaStream) -> Result<()> {
        let book = self.book();
        self.check(&book, frame, FrameStep::CudaRelease)?;
        // Chained after the previous frame's release (submitted, so released: the book says).
        self.order.cuda_release_value(frame.number(), stream)
    }

    /// Resets and begins the frame's own command buffer (one per command slot, made on first
    /// use), lets `record` record into it, ends it and returns it, ready for
    /// [`Self::vulkan_submit`]. `record` gets the pacer (for its `record_*` barriers and
    /// [`Self::context`]) and the command buffer.
    ///
    /// Refused for another pacer's frame, a frame that is not the current one, or one already
    /// submitted (its command buffer may be executing). Recording it again before the
    /// submission starts over. If `record` fails, its error is returned and the buffer is
    /// reset on the next call.
    pub fn record_commands(
        &mut self,
        frame: &Frame,
        record: impl FnOnce(&Self, vk::CommandBuffer) -> Result<()>,
    ) -> Result<vk::CommandBuffer> {
        self.check(&self.book(), frame, FrameStep::RecordCommands)?;
        let (pool, cmd) = self.command_slot(frame.command_slot())?;
        let device = self.context().device();
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: the pool and its buffer are ours, used by this command slot only; the frame
        // that last submitted it (number - 2K) has completed (begin_frame waited for it on the
        // non-exported timeline) and this frame is not submitted yet (checked), so no
        // submission uses it; `&mut self` excludes any other use of the pool.
        unsafe {
            device
                .reset_command_pool(pool, vk::CommandPoolResetFlags::empty())
                .vk("vkResetCommandPool")?;
            device
                .begin_command_buffer(cmd, &begin)
                .vk("vkBeginCommandBuffer")?;
        }
        record(self, cmd)?;
        // SAFETY: the buffer is in the recording state (begun above).
        unsafe { device.end_command_buffer(cmd) }.vk("vkEndCommandBuffer")?;
        Ok(cmd)
    }

    /// The pool and command buffer of command slot `slot`, made on first use.
    fn command_slot(&mut self, slot: usize) -> Result<(vk::CommandPool, vk::CommandBuffer)> {
        if let Some(Some(made)) = self.commands.get(slot) {
            return Ok(*made);
        }
        let ctx = self.order.context().clone();
        let device = ctx.device();
        let info = vk::CommandPoolCreateInfo::default()
            .flags(vk::CommandPoolCreateFlags::TRANSIENT)
            .queue_family_index(self.queue_family);
        // SAFETY: a valid device; the pool is destroyed on failure below or by the pacer's drop.
        let pool = unsafe { device.create_command_pool(&info, None) }.vk("vkCreateCommandPool")?;
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: our fresh pool; one primary buffer.
        let cmd = match unsafe { device.allocate_command_buffers(&alloc) } {
            Ok(cmds) if !cmds.is_empty() => cmds[0],
            other => {
                // SAFETY: our fresh pool, with no buffer in use.
                unsafe { device.destroy_command_pool(pool, None) };
                return Err(crate::error::Error::Vulkan {
                    call: "vkAllocateCommandBuffers",
                    result: other.err().unwrap_or(vk::Result::ERROR_UNKNOWN),
                });
            }
        };
        if let Some(entry) = self.commands.get_mut(slot) {
            *entry = Some((pool, cmd));
        }
        Ok((pool, cmd))
    }

    /// Submits the frame's Vulkan work (`submit.command_buffers`): it waits for
    /// `cuda_done >= frame.number()` at `submit.wait_stage` and signals `vulkan_done` and
    /// `frames_complete` with the frame number, plus the extra semaphores `submit` names (e.g.
    /// binary swapchain semaphores; a timeline wait among them should be for a value already
    /// scheduled, see [`Semaphore::check_scheduled`]) and its fence.
    ///
    /// Refused before the driver, changing nothing (the same frame can then be submitted):
    /// another pacer's frame, a frame that is not the current one, a frame CUDA has not
    /// released ([`SyncError::WaitNeverSignalled`]: the GPU would wait forever), a frame
    /// already submitted, an empty `wait_stage`, or an extra signal the ledgers refuse.
    ///
    /// # Safety
    /// As [`crate::vulkan::VulkanContext::submit_with_semaphores`]: the command buffers must
    /// be executable and of the pacer's device, and everything they use must stay alive until
    /// the frame completes. A command buffer from [`Self::record_commands`] may be submitted
    /// only here, with its own frame.
    pub unsafe fn vulkan_submit(&self, frame: &Frame, submit: &FrameSubmit<'_>) -> Result<()> {
        let book = self.book();
        self.check(&book, frame, FrameStep::Submit)?;
        // SAFETY: forwarded from the caller; the frame's wait is for a value scheduled
        // (checked above, under the book's lock).
        unsafe {
            self.order
                .vulkan_submit_values(frame.number(), frame.number(), submit)
        }
    }

    /// Checks that `frame` may be submitted now, as [`Self::vulkan_submit`] would: this
    /// pacer's, the current frame, released by CUDA and not yet submitted. For code that
    /// submits the frame another way through `cuvk` (a wgpu submission that signals the
    /// pacer's timelines, say): call it before building the submission.
    pub fn validate_submit(&self, frame: &Frame) -> Result<()> {
        self.check(&self.book(), frame, FrameStep::Submit)
    }

    /// The semaphores frame `frame`'s Vulkan work must wait on and signal, for an engine that
    /// submits its own work (`vkQueueSubmit2`): wait `cuda_done >= frame.number()` at
    /// `wait_stage`, signal `vulkan_done` and `frames_complete` with the frame number. The
    /// frame is checked now ([`Self::validate_submit`], plus the signal values); once the
    /// engine's submission succeeded, report it with [`Self::mark_submitted`] (until then,
    /// the frame may be submitted again).
    pub fn frame_semaphores(
        &self,
        frame: &Frame,
        wait_stage: vk::PipelineStageFlags2,
    ) -> Result<FrameSemaphores> {
        if wait_stage.is_empty() {
            return Err(SyncError::EmptyWaitStage.into());
        }
        let book = self.book();
        self.check(&book, frame, FrameStep::Submit)?;
        // Checked now (nothing recorded), so a bad frame is refused before the engine builds
        // its submission.
        SignalLedger::check_all(&self.signal_ledgers(frame.number()))?;
        let o = &self.order;
        Ok(FrameSemaphores {
            pacer: self.id,
            frame: frame.number(),
            waits: vec![SemaphoreSubmit {
                semaphore: o.cuda_done().handle(),
                value: frame.number(),
                stage: wait_stage,
            }],
            signals: [o.vulkan_done(), o.vulkan_done_host()]
                .iter()
                .map(|s| SemaphoreSubmit {
                    semaphore: s.handle(),
                    value: frame.number(),
                    stage: vk::PipelineStageFlags2::ALL_COMMANDS,
                })
                .collect(),
        })
    }

    /// Records that the engine's submission of `semaphores` (from [`Self::frame_semaphores`])
    /// was accepted by the driver: the frame counts as submitted, later frames may begin, and
    /// the pacer's drop waits for it.
    ///
    /// Refused, changing nothing, for another pacer's semaphores, a frame that is not the
    /// current one, a frame CUDA has not released ([`SyncError::WaitNeverSignalled`]) or one
    /// already submitted.
    ///
    /// # Safety
    /// A submission that waits and signals exactly `semaphores` (every wait and every signal,
    /// at those values) was accepted by a queue of the pacer's device (`vkQueueSubmit2`
    /// returned success), and its signals run after those of the frame before (the same
    /// queue as the previous frame's submission, or ordered after it): a timeline signal must
    /// exceed the value before it when it runs. The pacer cannot see a submission made outside
    /// `cuvk`: if none was made, nothing will signal the frame, later frames wait for it on
    /// the GPU, and the pacer's drop gives up after its timeout and parks what those frames
    /// use (until they run, if ever).
    pub unsafe fn mark_submitted(&self, semaphores: &FrameSemaphores) -> Result<()> {
        let book = self.book();
        book.check(
            semaphores.pacer,
            semaphores.frame,
            FrameStep::MarkSubmitted,
            self.marks(),
        )?;
        SignalLedger::signal_all(&self.signal_ledgers(semaphores.frame), || Ok(()))
    }

    fn signal_ledgers(&self, value: u64) -> [(&SignalLedger, u64); 2] {
        [
            (self.order.vulkan_done().ledger().as_ref(), value),
            (self.order.vulkan_done_host().ledger().as_ref(), value),
        ]
    }

    /// Records the acquire half of the queue-family ownership transfer of `buffers` from
    /// CUDA (`VK_QUEUE_FAMILY_EXTERNAL`) to this queue family, before Vulkan reads them.
    ///
    /// # Safety
    /// `cmd` must be recording on the pacer's device; the buffers must stay alive until the
    /// commands complete.
    pub unsafe fn record_acquire_from_cuda(
        &self,
        cmd: vk::CommandBuffer,
        buffers: &[&dyn AsVkBuffer],
        dst_stage: vk::PipelineStageFlags,
        dst_access: vk::AccessFlags,
    ) {
        let device = self.context().device();
        // SAFETY: forwarded from the caller.
        unsafe {
            cmd_acquire_buffers(
                device,
                cmd,
                self.queue_family,
                buffers,
                dst_stage,
                dst_access,
            )
        }
    }

    /// Records the release half of the ownership transfer of `buffers` back to CUDA, after
    /// Vulkan's last access to them in this frame.
    ///
    /// # Safety
    /// As [`Self::record_acquire_from_cuda`].
    pub unsafe fn record_release_to_cuda(
        &self,
        cmd: vk::CommandBuffer,
        buffers: &[&dyn AsVkBuffer],
        src_stage: vk::PipelineStageFlags,
        src_access: vk::AccessFlags,
    ) {
        let device = self.context().device();
        // SAFETY: forwarded from the caller.
        unsafe {
            cmd_release_buffers(
                device,
                cmd,
                self.queue_family,
                buffers,
                src_stage,
                src_access,
            )
        }
    }

    /// Records the acquire of shared images from CUDA before Vulkan uses them in this frame:
    /// ownership from `VK_QUEUE_FAMILY_EXTERNAL` to this queue family and `GENERAL` → the
    /// layout given with each image (e.g. `COLOR_ATTACHMENT_OPTIMAL`,
    /// `SHADER_READ_ONLY_OPTIMAL`). The barrier's source stage is `ALL_COMMANDS`, so the
    /// transition follows the frame's wait on `cuda_done` whatever its stage.
    ///
    /// # Safety
    /// `cmd` must be recording on the pacer's device; each image must be in the state between
    /// uses (`GENERAL`, released: see [`crate::vulkan::SHARED_LAYOUT`]) when the commands run,
    /// and stay alive until they complete.
    pub unsafe fn record_image_acquire_from_cuda(
        &self,
        cmd: vk::CommandBuffer,
        images: &[(&dyn AsVkImage, vk::ImageLayout)],
        dst_stage: vk::PipelineStageFlags,
        dst_access: vk::AccessFlags,
    ) {
        let device = self.context().device();
        // SAFETY: forwarded from the caller.
        unsafe {
            cmd_acquire_images(
                device,
                cmd,
                self.queue_family,
                images,
                dst_stage,
                dst_access,
            )
        }
    }

    /// Records the release of shared images back to CUDA after Vulkan's last use in this
    /// frame: the layout given with each image (the one Vulkan last used) → `GENERAL`, and
    /// ownership to `VK_QUEUE_FAMILY_EXTERNAL`. The transition to `GENERAL` is what lets CUDA
    /// read an image Vulkan rendered in a compressed layout.
    ///
    /// # Safety
    /// As [`Self::record_image_acquire_from_cuda`], each image acquired earlier in the frame.
    pub unsafe fn record_image_release_to_cuda(
        &self,
        cmd: vk::CommandBuffer,
        images: &[(&dyn AsVkImage, vk::ImageLayout)],
        src_stage: vk::PipelineStageFlags,
        src_access: vk::AccessFlags,
    ) {
        let device = self.context().device();
        // SAFETY: forwarded from the caller.
        unsafe {
            cmd_release_images(
                device,
                cmd,
                self.queue_family,
                images,
                src_stage,
                src_access,
            )
        }
    }

    /// Records the barrier that makes the frame's writes (`src_stage`, `src_access`: e.g.
    /// `TRANSFER`, `TRANSFER_WRITE` after a copy into a
    /// [`HostBuffer`](crate::vulkan::HostBuffer)) visible to the host. Record it after the
    /// last write the host will read; the host reads once the frame completed
    /// ([`Self::wait_frame`], or the `begin_frame` that hands out the same command slot).
    ///
    /// # Safety
    /// `cmd` must be recording on the pacer's device.
    pub unsafe fn record_host_read_barrier(
        &self,
        cmd: vk::CommandBuffer,
        src_stage: vk::PipelineStageFlags,
        src_access: vk::AccessFlags,
    ) {
        let to_host = [vk::MemoryBarrier::default()
            .src_access_mask(src_access)
            .dst_access_mask(vk::AccessFlags::HOST_READ)];
        // SAFETY: forwarded from the caller (a recording command buffer of this device); the
        // barrier is well formed.
        unsafe {
            self.context().device().cmd_pipeline_barrier(
                cmd,
                src_stage,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &to_host,
                &[],
                &[],
            )
        }
    }

    /// Waits on the host until Vulkan has finished `frame` (any frame of this pacer, current
    /// or earlier). Refused at once for another pacer's frame, or a frame not submitted
    /// ([`SyncError::WaitNeverSignalled`]) instead of waiting for the timeout.
    pub fn wait_frame(&self, frame: &Frame, timeout: Duration) -> Result<()> {
        if frame.issuer_id() != self.id {
            return Err(SyncError::ForeignFrame {
                frame: frame.number(),
            }
            .into());
        }
        self.order.wait_vulkan(frame.number(), timeout)
    }

    /// Waits on the host until Vulkan has finished every frame submitted so far.
    pub fn wait_idle(&self, timeout: Duration) -> Result<()> {
        let done = self.order.vulkan_done_host();
        done.wait_host(done.highest_signal(), timeout)
    }
}

impl Drop for FramePacer {
    fn drop(&mut self) {
        // Submissions an engine made itself (`mark_submitted`) are not on the context's
        // progress timeline: wait for the last value scheduled on each timeline, within the
        // context's one drop budget, so that no command pool is destroyed under pending work;
        // past it, park the pools until it has run. The order (a field, dropped next) does
        // the same for the timelines.
        let ctx = self.order.context().clone();
        let mut done = self.order.completion_probe();
        let budget = ctx.drop_budget().clone();
        let finished = budget.poll(&mut done);
        let pools = CommandPools {
            device: ctx.device().clone(),
            pools: self
                .commands
                .iter()
                .flatten()
                .map(|&(pool, _)| pool)
                .collect(),
        };
        budget.release("FramePacer", finished, pools, || Box::new(done));
    }
}

/// The pacer's command pools, destroyed when dropped: at once, or once the drop budget says
/// the frames that used them have completed.
struct CommandPools {
    device: ash::Device,
    pools: Vec<vk::CommandPool>,
}

impl Drop for CommandPools {
    fn drop(&mut self) {
        for &pool in &self.pools {
            // SAFETY: the pacer's pools; every frame that used their buffers has completed
            // (the drop budget frees this only then), and the device outlives the budget.
            unsafe { self.device.destroy_command_pool(pool, None) };
        }
    }
}

/// A frame's Vulkan submission for [`FramePacer::vulkan_submit`]: its command buffers, the
/// stages that wait for CUDA's release, and what else it waits on, signals and fences.
#[derive(Debug, Clone, Copy)]
pub struct FrameSubmit<'a> {
    /// The command buffers (the frame's own from [`FramePacer::record_commands`], or the
    /// engine's).
    pub command_buffers: &'a [vk::CommandBuffer],
    /// The stages that wait for CUDA's release of the frame (not empty).
    pub wait_stage: vk::PipelineStageFlags,
    /// Further waits (a swapchain's acquire semaphore, say).
    pub waits: &'a [SemaphoreOp<'a>],
    /// Further signals (a swapchain's present semaphore, say).
    pub signals: &'a [SemaphoreOp<'a>],
    /// A fence to signal, or `vk::Fence::null()`.
    pub fence: vk::Fence,
}

impl<'a> FrameSubmit<'a> {
    /// `command_buffers`, waiting for CUDA's release at `wait_stage`; no further semaphores,
    /// no fence.
    pub fn new(
        command_buffers: &'a [vk::CommandBuffer],
        wait_stage: vk::PipelineStageFlags,
    ) -> Self {
        Self {
            command_buffers,
            wait_stage,
            waits: &[],
            signals: &[],
            fence: vk::Fence::null(),
        }
    }
    /// With further waits.
    pub fn waits(self, waits: &'a [SemaphoreOp<'a>]) -> Self {
        Self { waits, ..self }
    }
    /// With further signals.
    pub fn signals(self, signals: &'a [SemaphoreOp<'a>]) -> Self {
        Self { signals, ..self }
    }
    /// With a fence.
    pub fn fence(self, fence: vk::Fence) -> Self {
        Self { fence, ..self }
    }
}

/// One semaphore operation of a `vkQueueSubmit2` an engine makes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SemaphoreSubmit {
    /// The semaphore (valid while the pacer lives).
    pub semaphore: vk::Semaphore,
    /// Its timeline value.
    pub value: u64,
    /// The stages that wait, or that the signal follows.
    pub stage: vk::PipelineStageFlags2,
}

impl SemaphoreSubmit {
    /// As a `VkSemaphoreSubmitInfo` for `vkQueueSubmit2`.
    pub fn info(&self) -> vk::SemaphoreSubmitInfo<'static> {
        vk::SemaphoreSubmitInfo::default()
            .semaphore(self.semaphore)
            .value(self.value)
            .stage_mask(self.stage)
    }
}

/// What one frame's Vulkan submission waits on and signals ([`FramePacer::frame_semaphores`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameSemaphores {
    pacer: u64,
    frame: u64,
    /// Wait before the frame's commands.
    pub waits: Vec<SemaphoreSubmit>,
    /// Signal after them.
    pub signals: Vec<SemaphoreSubmit>,
}

impl FrameSemaphores {
    /// The frame these are for.
    pub fn frame(&self) -> u64 {
        self.frame
    }
    /// The pacer that made them ([`FramePacer::id`]).
    pub fn pacer_id(&self) -> u64 {
        self.pacer
    }
    /// The waits as `VkSemaphoreSubmitInfo`s.
    pub fn wait_infos(&self) -> Vec<vk::SemaphoreSubmitInfo<'static>> {
        self.waits.iter().map(SemaphoreSubmit::info).collect()
    }
    /// The signals as `VkSemaphoreSubmitInfo`s.
    pub fn signal_infos(&self) -> Vec<vk::SemaphoreSubmitInfo<'static>> {
        self.signals.iter().map(SemaphoreSubmit::info).collect()
    }
}

// A pacer moves to, and is shared with, other threads (an engine's render thread); frames are
// plain values.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<FramePacer>();
    send_sync::<Frame>();
    send_sync::<FrameSemaphores>();
};
