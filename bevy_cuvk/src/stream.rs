//! [`StreamSync`]: CUDA work on a CUDA stream, ordered with Bevy's frames (the stream path).

use std::sync::Arc;
use std::time::Duration;

use cuvk::cudarc::driver::CudaStream;
use cuvk::StreamOrder;

use crate::late::LateWork;
use crate::{CuvkDevice, CuvkError};

/// Orders CUDA work on a stream with Bevy's frames, both ways, for memory both use
/// ([`crate::CuvkBuffer`]).
///
/// Built on a [`cuvk::StreamOrder`] (the core's one home for CUDA ↔ Vulkan ordering). Bevy
/// 0.19 is on wgpu 29, whose Vulkan queue can add a signal to its next submission but cannot
/// wait for a semaphore, so:
///
/// - **Bevy → CUDA, on the GPU**: [`Self::signal_after_frame`] asks the plugin to signal the
///   order's `vulkan_done` timeline with the next frame number after Bevy's submission of this
///   frame (on an empty submission of its own, in `RenderGraphSystems::Finish`: after every
///   command Bevy submitted); [`Self::cuda_wait_for_bevy`] enqueues on the CUDA stream a wait
///   for the last number asked for, before CUDA overwrites what Bevy read.
/// - **CUDA → Bevy, on the host**: [`Self::cuda_done`] enqueues the order's release (a
///   `cuda_done` signal) after the CUDA work; [`Self::host_wait_for_cuda`] waits for it on the
///   CPU before Bevy submits the commands that read what CUDA wrote (wgpu 30's
///   `add_wait_semaphore` would make this a GPU wait too).
///
/// Buffers cross between CUDA and Bevy's queue with no queue-family ownership transfer (wgpu
/// 29 has no hook for one, and an alias `VkBuffer` Bevy binds could not carry it): the Vulkan
/// spec leaves such contents undefined, NVIDIA's driver keeps them (`--verify`, 1,000 frames
/// exact on the H200). Shared images do get their transfers ([`crate::CuvkImages`]).
///
/// A frame: in `Render`'s prepare sets `cuda_wait_for_bevy`, launch on [`Self::stream`],
/// `cuda_done`; in the render graph (before `RenderGraphSystems::Submit`) `host_wait_for_cuda`,
/// record Bevy's commands, `signal_after_frame`.
///
/// # "After the frame"
///
/// The value [`Self::signal_after_frame`] asks for is signalled by a submission the plugin
/// makes on Bevy's queue in `RenderGraphSystems::Finish`, right after Bevy's own submission of
/// the `RenderGraph` schedule's command buffers (`RenderGraphSystems::Submit`). A Vulkan
/// signal covers every command submitted to the queue before it, so the GPU reaches the value
/// once it has finished executing all of these:
///
/// - every command buffer the `RenderGraph` systems of that frame added — the cameras' passes,
///   compute passes, copies, the plugin's release of the shared images to CUDA;
/// - everything submitted to Bevy's queue earlier: previous frames, `RenderQueue::write_buffer`
///   / `write_texture` data (flushed by Bevy's submission or by the plugin's, which also
///   carries writes made after Bevy's).
///
/// Not covered: what Bevy submits after the `RenderGraph` schedule in the same frame — its
/// screenshot and `Readback` copies (`render_system` submits them after `Finish`) — and the
/// swapchain's present. A CUDA write to memory those read waits for a later frame's value.
/// "After the frame" is GPU completion, not the CPU's return from the submission: the CUDA
/// stream's wait ([`Self::cuda_wait_for_bevy`]) blocks on the GPU only, never on the CPU.
pub struct StreamSync {
    order: Arc<StreamOrder>,
    late: Arc<LateWork>,
    stream: Arc<CudaStream>,
    /// The last value asked for (0: none yet).
    attached: u64,
    /// The `cuda_done` value of the last [`Self::cuda_done`] not yet waited for.
    pending: Option<u64>,
}

/// How long [`StreamSync::host_wait_for_cuda`] waits for CUDA's work.
const CUDA_WAIT_TIMEOUT: Duration = cuvk::DEFAULT_SLOT_TIMEOUT;

impl std::fmt::Debug for StreamSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSync")
            .field("attached", &self.attached)
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

impl StreamSync {
    /// A new CUDA stream on `device`'s context and a [`StreamOrder`] on its bridge (needs the
    /// external semaphore extension: `CuvkError::Shared` names it if missing).
    pub fn new(device: &CuvkDevice) -> Result<Self, CuvkError> {
        let order =
            StreamOrder::new(device.bridge()).map_err(|source| CuvkError::Shared { source })?;
        let stream = device
            .cuda()
            .new_stream()
            .map_err(|source| CuvkError::CudaCall {
                call: "cuStreamCreate",
                source,
            })?;
        Ok(Self {
            order: Arc::new(order),
            late: device.late().clone(),
            stream,
            attached: 0,
            pending: None,
        })
    }

    /// The stream order this sync is built on.
    pub fn order(&self) -> &Arc<StreamOrder> {
        &self.order
    }

    /// The CUDA stream the work goes on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The last frame number asked to be signalled (0: none yet).
    pub fn attached(&self) -> u64 {
        self.attached
    }

    /// Enqueues on the stream a wait until Bevy's frames up to the last one whose signal the
    /// plugin has submitted ([`Self::signal_after_frame`], flushed after Bevy's submission)
    /// completed. A signal asked for but not submitted yet is not waited for: the stream never
    /// waits for a value nothing will signal.
    pub fn cuda_wait_for_bevy(&self) -> Result<(), CuvkError> {
        // The ledger has only what the plugin's submissions scheduled.
        self.order
            .cuda_wait_vulkan_value(self.order.last_vulkan(), &self.stream)
            .map_err(|source| CuvkError::Shared { source })
    }

    /// Enqueues on the stream the order's release after the CUDA work enqueued so far.
    pub fn cuda_done(&mut self) -> Result<(), CuvkError> {
        let value = self
            .order
            .cuda_release(&[], &self.stream)
            .map_err(|source| CuvkError::Shared { source })?;
        self.pending = Some(value);
        Ok(())
    }

    /// Waits on the CPU for the work released by [`Self::cuda_done`] (nothing pending: returns
    /// at once), at most [`cuvk::DEFAULT_SLOT_TIMEOUT`] (`CuvkError::Shared` with
    /// `cuvk::Error::Timeout` past it).
    pub fn host_wait_for_cuda(&mut self) -> Result<(), CuvkError> {
        match self.pending.take() {
            Some(value) => self
                .order
                .wait_cuda(value, CUDA_WAIT_TIMEOUT)
                .map_err(|source| CuvkError::Shared { source }),
            None => Ok(()),
        }
    }

    /// Asks the plugin to signal the next value (this `StreamSync`'s own count of calls: 1, 2,
    /// ...; not Bevy's `FrameCount`) after Bevy's submission of this frame (in
    /// `RenderGraphSystems::Finish`, on an empty submission of its own that follows every
    /// command submitted so far: see "After the frame" above): [`Self::cuda_wait_for_bevy`]
    /// then makes CUDA wait for it. Call it once Bevy's commands that read what CUDA writes are
    /// recorded (in the render graph, before `Finish`); called later, the signal comes after
    /// the next frame instead — later, never early, and [`Self::cuda_wait_for_bevy`] waits
    /// only for what was submitted.
    pub fn signal_after_frame(&mut self) {
        let value = self.attached + 1;
        self.late.signal_after_frame(self.order.clone(), value);
        self.attached = value;
    }
}
