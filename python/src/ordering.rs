//! GPU ordering between CUDA streams named from Python and cuvk's Vulkan work: two timeline
//! semaphores shared by both APIs. Vulkan submissions signal `vulkan_done`; a CUDA stream
//! that must not touch a buffer before Vulkan is done with it waits there (`cuda_acquire`).
//! A CUDA stream that wrote a buffer signals `cuda_done` (`cuda_release`); Vulkan's next use
//! of the buffer waits there. No host waits on either path.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use cuvk::ash::vk;
use cuvk::cudarc::driver::sys;
use cuvk::vulkan::{Semaphore, SemaphoreDesc, SemaphoreKind, SemaphoreOp};
use cuvk::{Bridge, Result, SharedSemaphore};

/// The two timelines and the values handed out on them.
pub struct Timelines {
    cuda_done: SharedSemaphore,
    vulkan_done: SharedSemaphore,
    // Signalled with the same values as `vulkan_done`, for host waits: a semaphore no other
    // API signals, whose payload the validation layer can follow (its tracking of an exported
    // timeline gave false "command buffer still pending" errors after host waits on it).
    vulkan_done_host: Arc<Semaphore>,
    // Held while a `cuda_done` value is chosen and its wait and signal enqueued.
    cuda_release_lock: Mutex<()>,
    // The last `vulkan_done` value handed out, held while the next one is submitted.
    vulkan_next: Mutex<u64>,
}

/// Where a buffer stands on the two timelines.
#[derive(Default, Debug)]
pub struct Marks {
    /// The `vulkan_done` value after Vulkan's last use (0: never used by Vulkan).
    pub vulkan_use: AtomicU64,
    /// The `cuda_done` value after the last CUDA release (0: none).
    pub cuda_release: AtomicU64,
}

impl Timelines {
    /// Two exportable timelines of `bridge`, imported into CUDA.
    pub fn new(bridge: &Bridge) -> Result<Self> {
        let kind = SemaphoreKind::Timeline { initial: 0 };
        Ok(Self {
            cuda_done: bridge.create_semaphore(kind)?,
            vulkan_done: bridge.create_semaphore(kind)?,
            vulkan_done_host: Semaphore::new(bridge.vulkan(), SemaphoreDesc::LOCAL_TIMELINE)?,
            cuda_release_lock: Mutex::new(()),
            vulkan_next: Mutex::new(0),
        })
    }

    /// Enqueues on `stream` a wait until Vulkan's last use of `marks`' buffer is done.
    ///
    /// # Safety
    /// `stream` must be null or a live CUDA stream.
    pub unsafe fn cuda_acquire(&self, marks: &Marks, stream: sys::CUstream) -> Result<()> {
        let value = marks.vulkan_use.load(Ordering::Acquire);
        if value == 0 {
            return Ok(());
        }
        // SAFETY: forwarded; the value was signalled by a submission already made.
        unsafe { self.vulkan_done.cuda.enqueue_raw(stream, value, false) }
    }

    /// Enqueues on `stream` a signal that Vulkan's next use of each buffer of `marks` waits
    /// for: the work enqueued there so far is done.
    ///
    /// Every stream signals the one `cuda_done` timeline, so the signals must also *run* in
    /// value order: a fast stream's 6 must not land before a slow stream's 5 (the value would
    /// go back, and a draw waiting for 5 would start while the slow stream still writes).
    /// So the stream first waits on the GPU for the previous value, then signals the next.
    /// The previous signal is already enqueued on its stream, ahead of anything that could
    /// wait on this one: no cycle.
    ///
    /// # Safety
    /// `stream` must be null or a live CUDA stream.
    pub unsafe fn cuda_release(&self, marks: &[&Marks], stream: sys::CUstream) -> Result<()> {
        let _values = lock(&self.cuda_release_lock);
        // From the ledger, not a counter of ours: a signal enqueued whose bookkeeping then
        // failed still counts, so the next value always lies above it.
        let previous = self.cuda_done.vulkan.highest_signal();
        let value = previous + 1;
        if previous > 0 {
            // SAFETY: forwarded; `previous` is scheduled (the ledger has it).
            unsafe { self.cuda_done.cuda.enqueue_raw(stream, previous, false) }?;
        }
        // SAFETY: forwarded; the value exceeds every value scheduled on the timeline, and
        // runs after them (the wait above).
        unsafe { self.cuda_done.cuda.enqueue_raw(stream, value, true) }?;
        for m in marks {
            m.cuda_release.fetch_max(value, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Submits `commands` so that they wait for the CUDA releases of `marks` and then mark
    /// each buffer as used by Vulkan; returns the `vulkan_done` value the submission signals.
    ///
    /// # Safety
    /// As `VulkanContext::submit_with_semaphores`: executable command buffers of the bridge's
    /// device whose resources stay alive until the returned value is reached.
    pub unsafe fn submit(
        &self,
        bridge: &Bridge,
        commands: &[vk::CommandBuffer],
        marks: &[&Marks],
        wait_stage: vk::PipelineStageFlags,
    ) -> Result<u64> {
        let release = marks
            .iter()
            .map(|m| m.cuda_release.load(Ordering::Acquire))
            .max()
            .unwrap_or(0);
        let waits: Vec<SemaphoreOp<'_>> = if release > 0 {
            vec![SemaphoreOp::wait(
                &self.cuda_done.vulkan,
                release,
                wait_stage,
            )]
        } else {
            Vec::new()
        };
        let mut next = lock(&self.vulkan_next);
        let value = *next + 1;
        let signals = [
            SemaphoreOp::signal(&self.vulkan_done.vulkan, value),
            SemaphoreOp::signal(&self.vulkan_done_host, value),
        ];
        // SAFETY: forwarded from the caller.
        unsafe {
            bridge
                .vulkan()
                .submit_with_semaphores(commands, &waits, &signals, vk::Fence::null())
        }?;
        *next = value;
        drop(next);
        for m in marks {
            m.vulkan_use.fetch_max(value, Ordering::AcqRel);
        }
        Ok(value)
    }

    /// The last `vulkan_done` value handed out.
    pub fn last_vulkan(&self) -> u64 {
        *lock(&self.vulkan_next)
    }

    /// Waits on the host until Vulkan's submission `value` is done.
    pub fn wait_vulkan(&self, value: u64, timeout: Duration) -> Result<()> {
        if value == 0 {
            return Ok(());
        }
        self.vulkan_done_host.wait_host(value, timeout)
    }

    /// Waits on the host until the CUDA release `value` is done.
    pub fn wait_cuda(&self, value: u64, timeout: Duration) -> Result<()> {
        if value == 0 {
            return Ok(());
        }
        self.cuda_done.vulkan.wait_host(value, timeout)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned counter only means a panic elsewhere; the value is still right.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
