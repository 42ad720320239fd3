//! [`StreamSync`]: CUDA work on a CUDA stream, ordered with Bevy's frames (the stream path).

use std::sync::Arc;

use cuvk::cudarc::driver::{CudaEvent, CudaStream};
use cuvk::vulkan::{SemaphoreKind, SemaphoreOp, VulkanContext};
use cuvk::SharedSemaphore;
use wgpu::hal;

use crate::{CuvkDevice, CuvkError};

/// Orders CUDA work on a stream with Bevy's frames, both ways, for memory both use
/// ([`crate::CuvkBuffer`]).
///
/// Bevy 0.19 is on wgpu 29, whose Vulkan queue can add a signal to its next submission but
/// cannot wait for a semaphore, so:
///
/// - **Bevy → CUDA, on the GPU**: [`Self::signal_after_next_submission`] attaches to Bevy's
///   next `vkQueueSubmit` a signal of an exported timeline semaphore with the next frame
///   number; [`Self::cuda_wait_for_bevy`] enqueues on the CUDA stream a wait for the last
///   number attached, before CUDA overwrites what Bevy read.
/// - **CUDA → Bevy, on the host**: [`Self::cuda_done`] records an event after the CUDA work;
///   [`Self::host_wait_for_cuda`] waits for it on the CPU before Bevy submits the commands that
///   read what CUDA wrote (wgpu 30's `add_wait_semaphore` would make this a GPU wait too).
///
/// A frame: in `Render`'s prepare sets `cuda_wait_for_bevy`, launch on [`Self::stream`],
/// `cuda_done`; in the render graph (before `RenderGraphSystems::Submit`) `host_wait_for_cuda`,
/// record Bevy's commands, `signal_after_next_submission`.
pub struct StreamSync {
    semaphore: SharedSemaphore,
    vulkan: Arc<VulkanContext>,
    stream: Arc<CudaStream>,
    /// The last value attached to a Bevy submission (0: none yet).
    attached: u64,
    pending: Option<CudaEvent>,
}

impl std::fmt::Debug for StreamSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSync")
            .field("attached", &self.attached)
            .field("pending", &self.pending.is_some())
            .finish_non_exhaustive()
    }
}

impl StreamSync {
    /// A new CUDA stream on `device`'s context and an exported timeline semaphore imported into
    /// CUDA (needs the external semaphore extension: `CuvkError::Shared` names it if missing).
    pub fn new(device: &CuvkDevice) -> Result<Self, CuvkError> {
        let semaphore = device
            .bridge()
            .create_semaphore(SemaphoreKind::Timeline { initial: 0 })
            .map_err(|source| CuvkError::Shared { source })?;
        let stream = device
            .cuda()
            .new_stream()
            .map_err(|source| CuvkError::CudaCall {
                call: "cuStreamCreate",
                source,
            })?;
        Ok(Self {
            semaphore,
            vulkan: device.vulkan().clone(),
            stream,
            attached: 0,
            pending: None,
        })
    }

    /// The CUDA stream the work goes on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The last frame number attached to a Bevy submission (0: none yet).
    pub fn attached(&self) -> u64 {
        self.attached
    }

    /// Enqueues on the stream a wait until Bevy's submissions up to the last one given a
    /// signal ([`Self::signal_after_next_submission`]) completed.
    pub fn cuda_wait_for_bevy(&self) -> Result<(), CuvkError> {
        if self.attached == 0 {
            return Ok(());
        }
        self.semaphore
            .cuda
            .wait(&self.stream, self.attached)
            .map_err(|source| CuvkError::Shared { source })
    }

    /// Records an event after the CUDA work enqueued so far.
    pub fn cuda_done(&mut self) -> Result<(), CuvkError> {
        let event = self
            .stream
            .record_event(None)
            .map_err(|source| CuvkError::CudaCall {
                call: "cuEventRecord",
                source,
            })?;
        self.pending = Some(event);
        Ok(())
    }

    /// Waits on the CPU for the work recorded by [`Self::cuda_done`] (nothing pending: returns
    /// at once).
    pub fn host_wait_for_cuda(&mut self) -> Result<(), CuvkError> {
        match self.pending.take() {
            Some(event) => event.synchronize().map_err(|source| CuvkError::CudaCall {
                call: "cuEventSynchronize",
                source,
            }),
            None => Ok(()),
        }
    }

    /// Attaches to Bevy's next submission on `queue` a signal of the next frame number (and of
    /// cuvk's progress timeline, which bounds the semaphore's drop).
    ///
    /// # Safety
    /// The next `vkQueueSubmit` on `queue` must be one that follows the Bevy commands CUDA is
    /// to wait for (call it in the render graph after they were recorded, before
    /// `RenderGraphSystems::Submit`), and such a submission must come (wgpu 29 cannot take the
    /// signal back): cuvk books the value as scheduled.
    pub unsafe fn signal_after_next_submission(
        &mut self,
        queue: &wgpu::Queue,
    ) -> Result<(), CuvkError> {
        let value = self.attached + 1;
        // SAFETY: the hal queue is used only to add signals to its next submission.
        let hal_queue =
            unsafe { queue.as_hal::<hal::api::Vulkan>() }.ok_or(CuvkError::QueueNotVulkan)?;
        let semaphore = &self.semaphore.vulkan;
        let signals = [SemaphoreOp::signal(semaphore, value)];
        // SAFETY: the closure never fails and attaches both signals to the next submission on
        // Bevy's queue, which (the caller promises) comes and follows the commands to wait for.
        unsafe {
            self.vulkan.submit_foreign(&[], &signals, |progress| {
                hal_queue.add_signal_semaphore(progress.semaphore, Some(progress.value));
                hal_queue.add_signal_semaphore(semaphore.handle(), Some(value));
                Ok(())
            })
        }
        .map_err(|source| CuvkError::Shared { source })?;
        self.attached = value;
        Ok(())
    }
}
