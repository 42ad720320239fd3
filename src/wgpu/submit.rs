//! Ordering wgpu's work against CUDA (and the host) on the GPU: wgpu submissions that wait on
//! and signal cuvk's timeline semaphores (`wgpu_hal::vulkan::Queue::add_wait_semaphore` /
//! `add_signal_semaphore`), raw command buffers made through `CommandEncoder::as_hal_mut`
//! (queue-family transfers, CUDA kernels launched in the queue), and [`WgpuFramePacer`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ash::vk;
use cudarc::driver::CudaStream;

use crate::error::Result;
use crate::interop::{Frame, FramePacer, SharedBuffer, DEFAULT_SLOT_TIMEOUT};
use crate::rules::timeline::SignalLedger;
use crate::vulkan::{
    record_barrier_before_kernel, record_kernel_barrier, AsVkBuffer, BoundBuffer, CuFunction,
    KernelArg, LaunchDims, Semaphore, SemaphoreKind, SemaphoreOp,
};
use crate::wgpu::device::Vk;
use crate::wgpu::{WgpuBridge, WgpuDevice, WgpuSharedBuffer};
use crate::Error;

/// Semaphore operations attached to wgpu's next submission, withdrawn on drop where wgpu did
/// not consume them, so none is left for a later submission to pick up.
struct Attached<'a> {
    queue: &'a ::wgpu::hal::vulkan::Queue,
    waits: Vec<vk::Semaphore>,
    signals: Vec<vk::Semaphore>,
}

impl Attached<'_> {
    /// Withdraws what is still attached; returns how many were.
    fn withdraw(mut self) -> usize {
        self.withdraw_all()
    }

    fn withdraw_all(&mut self) -> usize {
        let waits = std::mem::take(&mut self.waits);
        let signals = std::mem::take(&mut self.signals);
        let w = waits
            .into_iter()
            .filter(|&s| self.queue.remove_wait_semaphore(s))
            .count();
        w + signals
            .into_iter()
            .filter(|&s| self.queue.remove_signal_semaphore(s))
            .count()
    }
}

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        self.withdraw_all();
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
    /// Submits `command_buffers` to wgpu's queue in one submission that first waits (on the
    /// GPU) for every timeline in `waits` to reach its value at its stage, and signals every
    /// timeline in `signals` with its value when the work completes, e.g. a CUDA stream's
    /// signal before and a CUDA wait after.
    ///
    /// Checked before anything reaches wgpu: every semaphore belongs to this device and is a
    /// timeline (a binary wait with no pending signal would be invalid), every wait names the
    /// stages that wait, and every signal value
    /// exceeds every value scheduled on that semaphore by any API. The values are recorded
    /// only once wgpu has handed the submission to the driver; if it did not (a validation
    /// error in a command buffer, reported to wgpu's error handler), the semaphore operations
    /// are withdrawn from wgpu's queue and [`Error::NotSubmitted`] is returned.
    ///
    /// wgpu-hal attaches the semaphores to the *next* submission on its queue: submissions
    /// from other threads must not run concurrently with this call.
    pub fn submit<I: IntoIterator<Item = ::wgpu::CommandBuffer>>(
        &self,
        command_buffers: I,
        waits: &[SemaphoreOp<'_>],
        signals: &[SemaphoreOp<'_>],
    ) -> Result<::wgpu::SubmissionIndex> {
        for op in waits.iter().chain(signals) {
            if !self.vulkan().same_device(op.semaphore.context()) {
                return Err(Error::WrongDevice(
                    "a semaphore belongs to another Vulkan device than the wgpu device",
                ));
            }
            if op.semaphore.kind() == SemaphoreKind::Binary {
                return Err(Error::InvalidArgument(
                    "wgpu submissions wait on and signal timeline semaphores only".into(),
                ));
            }
        }
        if waits.iter().any(|op| op.stage.is_empty()) {
            return Err(Error::InvalidArgument(
                "a semaphore wait needs the stages that wait (its stage is empty)".into(),
            ));
        }
        let ledgers: Vec<(&SignalLedger, u64)> = signals
            .iter()
            .map(|o| (o.semaphore.ledger().as_ref(), o.value))
            .collect();
        // SAFETY: the hal queue is used only to attach semaphores to wgpu's next submission
        // and to withdraw them; it is never submitted to directly.
        let hal = unsafe { self.queue().as_hal::<Vk>() }.ok_or(Error::WrongBackend {
            object: "queue",
            backend: "non-Vulkan",
        })?;
        // The context's queue lock (it has no queue) orders cuvk's submissions through wgpu,
        // so the progress timeline's values increase in submission order.
        let lock = self.vulkan().lock_queue();
        let progress = &self.vulkan().progress;
        let number = progress.last_submitted() + 1;
        let index = SignalLedger::signal_all(&ledgers, || {
            let attached = Attached {
                queue: &hal,
                waits: waits.iter().map(|o| o.semaphore.handle()).collect(),
                signals: signals
                    .iter()
                    .map(|o| o.semaphore.handle())
                    .chain([progress.semaphore])
                    .collect(),
            };
            for op in waits {
                hal.add_wait_semaphore(op.semaphore.handle(), Some(op.value), op.stage);
            }
            for op in signals {
                hal.add_signal_semaphore(op.semaphore.handle(), Some(op.value));
            }
            hal.add_signal_semaphore(progress.semaphore, Some(number));
            let index = self.queue().submit(command_buffers);
            // Whatever wgpu did not consume did not reach the driver: withdraw it (also if
            // wgpu's error handler panicked, through Attached's drop).
            match attached.withdraw() {
                0 => Ok(index),
                withdrawn => Err(Error::NotSubmitted { withdrawn }),
            }
        })?;
        progress.submitted(number);
        drop(lock);
        for op in waits.iter().chain(signals) {
            op.semaphore.note_submission(number);
        }
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
        record: impl FnOnce(&crate::vulkan::VulkanContext, vk::CommandBuffer) -> Result<()>,
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
            None => Err(Error::Wgpu {
                call: "wgpu::CommandEncoder::as_hal_mut",
                message: "the encoder is not a recording Vulkan encoder".into(),
            }),
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
                return Err(Error::WrongDevice(
                    "the kernel's module was loaded on another Vulkan device than the wgpu device",
                ));
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
/// ordered on the GPU by the pacer's timelines, attached to wgpu's own submissions.
///
/// Per frame: [`Self::begin_frame`] (a host wait only when the CPU is 2K frames ahead),
/// [`Self::cuda_acquire`] and the CUDA work and [`Self::cuda_release`] on a stream, then
/// [`Self::submit`] with the wgpu command buffers that read the frame's slot. The same
/// guarantees as [`FramePacer`]: CUDA never overwrites a slot wgpu has not finished reading,
/// wgpu never reads a slot before CUDA has finished writing it, and neither waits on the CPU.
pub struct WgpuFramePacer {
    // Dropped after Drop::drop has waited for every frame (or leaked if that timed out).
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

    /// The next frame ([`FramePacer::begin_frame`]): waits on the host only while the CPU is
    /// 2K frames ahead; then the buffers held for the frame 2K earlier are released.
    pub fn begin_frame(&mut self) -> Result<Frame> {
        let frame = self.pacer.begin_frame()?;
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = held.get_mut(frame.command_slot) {
            // Frame number - 2K, the last user of this command slot, has completed (the
            // pacer waited for it) or never existed.
            slot.clear();
        }
        Ok(frame)
    }
    /// On `stream`: wait (on the GPU) until wgpu has released the frame's slot.
    pub fn cuda_acquire(&self, frame: &Frame, stream: &CudaStream) -> Result<()> {
        self.pacer.cuda_acquire(frame, stream)
    }
    /// On `stream`, after the frame's CUDA work: signal that the slot is written.
    pub fn cuda_release(&self, frame: &Frame, stream: &CudaStream) -> Result<()> {
        self.pacer.cuda_release(frame, stream)
    }

    /// Submits the frame's wgpu work: it waits (on the GPU) for CUDA's release of the frame at
    /// `wait_stage` and signals the frame done. `shared` are the buffers CUDA wrote this
    /// frame and wgpu reads: their queue-family ownership is acquired from CUDA
    /// (`VK_QUEUE_FAMILY_EXTERNAL`) before `command_buffers` and released back after them, in
    /// two raw command buffers of the same submission, and the pacer holds their Vulkan
    /// buffers until the frame completes. Checked before anything is made: the frame's values,
    /// the stage, and that every buffer is on this device ([`WgpuDevice::submit`] for the rest).
    pub fn submit<I: IntoIterator<Item = ::wgpu::CommandBuffer>>(
        &self,
        frame: &Frame,
        shared: &[&dyn PacedBuffer],
        command_buffers: I,
        wait_stage: vk::PipelineStageFlags,
    ) -> Result<::wgpu::SubmissionIndex> {
        let shared: Vec<Arc<BoundBuffer>> = shared.iter().map(|b| b.paced_vk_buffer()).collect();
        let views: Vec<&dyn AsVkBuffer> = shared.iter().map(|b| &**b as &dyn AsVkBuffer).collect();
        let index = self.submit_views(frame, &views, command_buffers, wait_stage)?;
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = held.get_mut(frame.command_slot) {
            slot.extend(shared);
        }
        Ok(index)
    }

    fn submit_views<I: IntoIterator<Item = ::wgpu::CommandBuffer>>(
        &self,
        frame: &Frame,
        shared: &[&dyn AsVkBuffer],
        command_buffers: I,
        wait_stage: vk::PipelineStageFlags,
    ) -> Result<::wgpu::SubmissionIndex> {
        if wait_stage.is_empty() {
            return Err(Error::InvalidArgument(
                "the wait stage of a frame's submission is empty".into(),
            ));
        }
        let ctx = self.wgpu.vulkan();
        if shared.iter().any(|b| !ctx.same_device(b.vk_context())) {
            return Err(Error::WrongDevice(
                "a buffer belongs to another Vulkan device than the wgpu device",
            ));
        }
        let signalled = [self.pacer.vulkan_done(), self.pacer.frames_complete()];
        let ledgers = signalled.map(|s| (s.ledger().as_ref(), frame.number));
        SignalLedger::check_all(&ledgers)?;
        let waits = [SemaphoreOp {
            semaphore: self.pacer.cuda_done(),
            value: frame.number,
            stage: wait_stage,
        }];
        let signals = signalled.map(|semaphore| SemaphoreOp {
            semaphore,
            value: frame.number,
            stage: vk::PipelineStageFlags::empty(),
        });
        let family = ctx.queue_family_index();
        let mut all = Vec::new();
        if !shared.is_empty() {
            // SAFETY: ownership barriers of live buffers of this device (checked); the caller's
            // submission keeps using them only through wgpu objects it owns.
            all.push(unsafe {
                self.wgpu
                    .raw_commands("cuvk acquire from CUDA", |ctx, cmd| {
                        record_transfer(
                            ctx,
                            cmd,
                            shared,
                            (vk::QUEUE_FAMILY_EXTERNAL, family),
                            (wait_stage, vk::PipelineStageFlags::ALL_COMMANDS),
                            (
                                vk::AccessFlags::empty(),
                                vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE,
                            ),
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
                    record_transfer(
                        ctx,
                        cmd,
                        shared,
                        (family, vk::QUEUE_FAMILY_EXTERNAL),
                        (
                            vk::PipelineStageFlags::ALL_COMMANDS,
                            vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                        ),
                        (
                            vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE,
                            vk::AccessFlags::empty(),
                        ),
                    );
                    Ok(())
                })
            }?);
        }
        self.wgpu.submit(all, &waits, &signals)
    }

    /// Waits on the host until wgpu has finished every frame submitted so far.
    pub fn wait_idle(&self, timeout: Duration) -> Result<()> {
        let done: &Semaphore = self.pacer.frames_complete();
        done.wait_host(done.highest_signal(), timeout)
    }
}

impl Drop for WgpuFramePacer {
    fn drop(&mut self) {
        // The held buffers go only once every frame that used them has completed.
        if let Err(e) = self.wait_idle(DEFAULT_SLOT_TIMEOUT) {
            log::error!(
                "WgpuFramePacer dropped with frames still running ({e}); leaking their buffers"
            );
            let held = std::mem::take(self.held.get_mut().unwrap_or_else(|p| p.into_inner()));
            std::mem::forget(held);
        }
    }
}

/// One queue-family ownership barrier for `buffers`.
fn record_transfer(
    ctx: &crate::vulkan::VulkanContext,
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
    // SAFETY: a recording command buffer of `ctx`'s device (raw_commands' contract); live
    // buffers of that device.
    unsafe {
        ctx.device().cmd_pipeline_barrier(
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
