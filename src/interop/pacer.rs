//! Frame pacing for render loops where CUDA writes and Vulkan reads shared buffers, with
//! K frames in flight, ordered on the GPU by two timeline semaphores:
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
//! That host wait is on a third, non-exported timeline (`frames_complete`) that each Vulkan
//! submission also signals: the validation layer cannot follow the payload of exported
//! semaphores, so only a wait on a non-exported one tells it the command buffer is free.

use std::sync::Arc;
use std::time::Duration;

use ash::vk;
use cudarc::driver::CudaStream;

use crate::cuda::ExternalSemaphore;
use crate::error::Result;
use crate::error::SyncError;
use crate::interop::{import_semaphore, Bridge};
use crate::rules::timeline::SignalLedger;
use crate::vulkan::{
    cmd_acquire_images, cmd_release_images, AsVkBuffer, AsVkImage, Semaphore, SemaphoreDesc,
    SemaphoreOp,
};

/// How long [`FramePacer::begin_frame`] waits for a slot before reporting [`Error::Timeout`].
pub const DEFAULT_SLOT_TIMEOUT: Duration = Duration::from_secs(10);

/// One frame handed out by [`FramePacer::begin_frame`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Frame number, from 1, strictly increasing: the timeline value of this frame.
    pub number: u64,
    /// The slot (buffer index) this frame writes and reads: `number % frames_in_flight`.
    pub slot: usize,
    /// Which of the `2 * frames_in_flight` command buffers this frame may record into: the
    /// frame that last used it has completed.
    pub command_slot: usize,
    frames_in_flight: u64,
}

impl Frame {
    /// The last frame that used this slot (`number - K`), if any: what CUDA must wait for.
    pub fn previous_use(&self) -> Option<u64> {
        self.number
            .checked_sub(self.frames_in_flight)
            .filter(|&n| n > 0)
    }
}

/// Hands out frames and orders CUDA writes and Vulkan reads of K slots on the GPU.
pub struct FramePacer {
    frames_in_flight: u64,
    cuda_done: Arc<Semaphore>,
    vulkan_done: Arc<Semaphore>,
    frames_complete: Arc<Semaphore>,
    cuda_done_import: ExternalSemaphore,
    vulkan_done_import: ExternalSemaphore,
    queue_family: u32,
    next: u64,
    slot_timeout: Duration,
}

impl FramePacer {
    /// Creates the two exportable timeline semaphores, imports them into CUDA, for
    /// `frames_in_flight` (1 to 8) slots.
    pub fn new(bridge: &Bridge, frames_in_flight: u32) -> Result<Self> {
        if !(1..=8).contains(&frames_in_flight) {
            return Err(SyncError::FramesInFlight {
                requested: frames_in_flight,
                max: 8,
            }
            .into());
        }
        let vk = bridge.vulkan();
        let cuda_done = Semaphore::new(vk, SemaphoreDesc::SHARED_TIMELINE)?;
        let vulkan_done = Semaphore::new(vk, SemaphoreDesc::SHARED_TIMELINE)?;
        let frames_complete = Semaphore::new(vk, SemaphoreDesc::LOCAL_TIMELINE)?;
        Ok(Self {
            frames_in_flight: u64::from(frames_in_flight),
            cuda_done_import: import_semaphore(bridge.cuda(), &cuda_done)?,
            vulkan_done_import: import_semaphore(bridge.cuda(), &vulkan_done)?,
            cuda_done,
            vulkan_done,
            frames_complete,
            queue_family: vk.queue_family_index(),
            next: 1,
            slot_timeout: DEFAULT_SLOT_TIMEOUT,
        })
    }

    /// Frames in flight (K).
    pub fn frames_in_flight(&self) -> u32 {
        self.frames_in_flight as u32
    }
    /// The timeline CUDA signals with the frame number when it has written a frame.
    pub fn cuda_done(&self) -> &Arc<Semaphore> {
        &self.cuda_done
    }
    /// The timeline Vulkan signals with the frame number when it has read a frame.
    pub fn vulkan_done(&self) -> &Arc<Semaphore> {
        &self.vulkan_done
    }
    /// The host-side completion timeline (not exported): Vulkan signals it with the frame
    /// number alongside `vulkan_done`. A submission that bypasses [`Self::vulkan_submit`] must
    /// signal both.
    pub fn frames_complete(&self) -> &Arc<Semaphore> {
        &self.frames_complete
    }
    /// Sets how long [`Self::begin_frame`] waits for a slot.
    pub fn set_slot_timeout(&mut self, timeout: Duration) {
        self.slot_timeout = timeout;
    }

    /// Number of command buffers a loop cycles through ([`Frame::command_slot`]): `2K`.
    pub fn command_slots(&self) -> usize {
        2 * self.frames_in_flight as usize
    }

    /// The next frame. Waits on the host only until Vulkan has finished frame `N - 2K`, the
    /// previous user of the frame's command slot (immediate unless the CPU is 2K frames ahead).
    pub fn begin_frame(&mut self) -> Result<Frame> {
        let command_slots = 2 * self.frames_in_flight;
        let frame = Frame {
            number: self.next,
            slot: (self.next % self.frames_in_flight) as usize,
            command_slot: (self.next % command_slots) as usize,
            frames_in_flight: self.frames_in_flight,
        };
        if let Some(prev) = self.next.checked_sub(command_slots).filter(|&n| n > 0) {
            self.frames_complete.wait_host(prev, self.slot_timeout)?;
        }
        self.next += 1;
        Ok(frame)
    }

    /// On `stream`: wait (on the GPU) until Vulkan has released the frame's slot.
    pub fn cuda_acquire(&self, frame: &Frame, stream: &CudaStream) -> Result<()> {
        match frame.previous_use() {
            Some(prev) => self.vulkan_done_import.wait(stream, prev),
            None => Ok(()),
        }
    }

    /// On `stream`, after the frame's kernels: signal `cuda_done = frame.number`.
    pub fn cuda_release(&self, frame: &Frame, stream: &CudaStream) -> Result<()> {
        self.cuda_done_import.signal(stream, frame.number)
    }

    /// Submits the frame's Vulkan work: it waits for `cuda_done >= frame.number` at
    /// `wait_stage` and signals `vulkan_done = frame.number`, plus the extra semaphores given
    /// (e.g. binary swapchain semaphores).
    ///
    /// # Safety
    /// As [`crate::vulkan::VulkanContext::submit_with_semaphores`].
    pub unsafe fn vulkan_submit(
        &self,
        frame: &Frame,
        command_buffers: &[vk::CommandBuffer],
        wait_stage: vk::PipelineStageFlags,
        extra_waits: &[SemaphoreOp<'_>],
        extra_signals: &[SemaphoreOp<'_>],
        fence: vk::Fence,
    ) -> Result<()> {
        let mut waits = vec![SemaphoreOp {
            semaphore: &self.cuda_done,
            value: frame.number,
            stage: wait_stage,
        }];
        waits.extend_from_slice(extra_waits);
        let mut signals = vec![
            SemaphoreOp {
                semaphore: &self.vulkan_done,
                value: frame.number,
                stage: vk::PipelineStageFlags::empty(),
            },
            SemaphoreOp {
                semaphore: &self.frames_complete,
                value: frame.number,
                stage: vk::PipelineStageFlags::empty(),
            },
        ];
        signals.extend_from_slice(extra_signals);
        // SAFETY: forwarded from the caller.
        unsafe {
            self.cuda_done.context().submit_with_semaphores(
                command_buffers,
                &waits,
                &signals,
                fence,
            )
        }
    }

    /// The semaphores frame `frame`'s Vulkan work must wait on and signal, for an engine that
    /// submits its own work (`vkQueueSubmit2`): wait `cuda_done >= frame.number` at
    /// `wait_stage`, signal `vulkan_done` and `frames_complete` with `frame.number`. The values
    /// are checked now; once the engine's submission succeeded, report it with
    /// [`Self::mark_submitted`] (until then, the frame may be submitted again).
    pub fn frame_semaphores(
        &self,
        frame: &Frame,
        wait_stage: vk::PipelineStageFlags2,
    ) -> Result<FrameSemaphores> {
        let out = FrameSemaphores {
            frame: frame.number,
            waits: vec![SemaphoreSubmit {
                semaphore: self.cuda_done.handle(),
                value: frame.number,
                stage: wait_stage,
            }],
            signals: [&self.vulkan_done, &self.frames_complete]
                .iter()
                .map(|s| SemaphoreSubmit {
                    semaphore: s.handle(),
                    value: frame.number,
                    stage: vk::PipelineStageFlags2::ALL_COMMANDS,
                })
                .collect(),
        };
        // Checked now (nothing recorded), so a bad frame is refused before the engine builds
        // its submission.
        SignalLedger::check_all(&self.signal_ledgers(frame.number))?;
        Ok(out)
    }

    /// Records that the engine's submission of `semaphores` (from [`Self::frame_semaphores`])
    /// was accepted by the driver, so later frames are checked against it.
    pub fn mark_submitted(&self, semaphores: &FrameSemaphores) -> Result<()> {
        SignalLedger::signal_all(&self.signal_ledgers(semaphores.frame), || Ok(()))
    }

    fn signal_ledgers(&self, value: u64) -> [(&SignalLedger, u64); 2] {
        [
            (self.vulkan_done.ledger().as_ref(), value),
            (self.frames_complete.ledger().as_ref(), value),
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
        // SAFETY: forwarded from the caller.
        unsafe {
            self.record_transfer(
                cmd,
                buffers,
                (vk::QUEUE_FAMILY_EXTERNAL, self.queue_family),
                (vk::PipelineStageFlags::TOP_OF_PIPE, dst_stage),
                (vk::AccessFlags::empty(), dst_access),
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
        // SAFETY: forwarded from the caller.
        unsafe {
            self.record_transfer(
                cmd,
                buffers,
                (self.queue_family, vk::QUEUE_FAMILY_EXTERNAL),
                (src_stage, vk::PipelineStageFlags::BOTTOM_OF_PIPE),
                (src_access, vk::AccessFlags::empty()),
            )
        }
    }

    /// Records one queue-family ownership barrier for `buffers`.
    ///
    /// # Safety
    /// As [`Self::record_acquire_from_cuda`].
    unsafe fn record_transfer(
        &self,
        cmd: vk::CommandBuffer,
        buffers: &[&dyn AsVkBuffer],
        (src_family, dst_family): (u32, u32),
        (src_stage, dst_stage): (vk::PipelineStageFlags, vk::PipelineStageFlags),
        (src_access, dst_access): (vk::AccessFlags, vk::AccessFlags),
    ) {
        let barriers: Vec<vk::BufferMemoryBarrier> = buffers
            .iter()
            .map(|b| {
                vk::BufferMemoryBarrier::default()
                    .src_access_mask(src_access)
                    .dst_access_mask(dst_access)
                    .src_queue_family_index(src_family)
                    .dst_queue_family_index(dst_family)
                    .buffer(b.vk_buffer())
                    .offset(0)
                    .size(vk::WHOLE_SIZE)
            })
            .collect();
        // SAFETY: forwarded from the caller (recording command buffer on this device).
        unsafe {
            self.cuda_done.context().device().cmd_pipeline_barrier(
                cmd,
                src_stage,
                dst_stage,
                vk::DependencyFlags::empty(),
                &[],
                &barriers,
                &[],
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
        let device = self.cuda_done.context().device();
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
        let device = self.cuda_done.context().device();
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

    /// Waits on the host until Vulkan has finished every frame handed out so far.
    pub fn wait_idle(&self, timeout: Duration) -> Result<()> {
        self.frames_complete.wait_host(self.next - 1, timeout)
    }
}

impl Drop for FramePacer {
    fn drop(&mut self) {
        // Submissions an engine made itself (`mark_submitted`) are not on the context's
        // progress timeline: wait for the last frame the pacer knows of, so the semaphores
        // (dropped after this) are not destroyed under a pending batch. Bounded; on timeout
        // the semaphores' own drops wait or leak.
        let last = self.frames_complete.highest_signal();
        if let Err(e) = self.frames_complete.wait_host(last, DEFAULT_SLOT_TIMEOUT) {
            log::error!("FramePacer dropped with frame {last} still pending: {e}");
        }
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
    frame: u64,
    /// Wait before the frame's commands.
    pub waits: Vec<SemaphoreSubmit>,
    /// Signal after them.
    pub signals: Vec<SemaphoreSubmit>,
}

impl FrameSemaphores {
    /// The waits as `VkSemaphoreSubmitInfo`s.
    pub fn wait_infos(&self) -> Vec<vk::SemaphoreSubmitInfo<'static>> {
        self.waits.iter().map(SemaphoreSubmit::info).collect()
    }
    /// The signals as `VkSemaphoreSubmitInfo`s.
    pub fn signal_infos(&self) -> Vec<vk::SemaphoreSubmitInfo<'static>> {
        self.signals.iter().map(SemaphoreSubmit::info).collect()
    }
}
