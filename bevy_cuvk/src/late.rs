//! Work the plugin does after Bevy's submission of each frame (`RenderGraphSystems::Finish`):
//! freeing what was dropped once the GPU has run everything submitted so far, and signalling
//! the semaphores CUDA streams wait for ([`crate::StreamSync`]) on a submission of its own,
//! after Bevy's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bevy::log::error;
use bevy::prelude::Res;
use cuvk::vulkan::SemaphoreOp;
use cuvk::SharedSemaphore;
use wgpu::hal;

use crate::CuvkDevice;

/// A timeline value to signal after Bevy's frame.
pub(crate) struct PendingSignal {
    semaphore: Arc<SharedSemaphore>,
    value: u64,
    /// The highest value of this semaphore submitted so far (its owner's to read).
    submitted: Arc<AtomicU64>,
}

/// What waits for the end of the frame: one per [`CuvkDevice`] (its clones share it).
pub(crate) struct LateWork {
    /// Objects dropped while Bevy's GPU work may still use them (a buffer's memory, a kernel's
    /// module): freed once the work submitted before the next flush completed.
    buried: Mutex<Vec<Box<dyn Send>>>,
    /// Timeline values to signal after Bevy's next submission.
    signals: Mutex<Vec<PendingSignal>>,
    device: wgpu::Device,
    timeout: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl LateWork {
    pub(crate) fn new(device: wgpu::Device, timeout: Duration) -> Self {
        Self {
            buried: Mutex::new(Vec::new()),
            signals: Mutex::new(Vec::new()),
            device,
            timeout,
        }
    }

    /// Keeps `item` until the GPU has run everything submitted by the end of this frame.
    pub(crate) fn bury(&self, item: Box<dyn Send>) {
        lock(&self.buried).push(item);
    }

    /// Signals `value` on `semaphore` after Bevy's next submission; `submitted` learns it
    /// once it is.
    pub(crate) fn signal_after_frame(
        &self,
        semaphore: Arc<SharedSemaphore>,
        value: u64,
        submitted: Arc<AtomicU64>,
    ) {
        lock(&self.signals).push(PendingSignal {
            semaphore,
            value,
            submitted,
        });
    }
}

impl Drop for LateWork {
    fn drop(&mut self) {
        // The last owner is gone (device, buffers, kernels): nothing will flush any more.
        let buried = std::mem::take(&mut *lock(&self.buried));
        if buried.is_empty() {
            return;
        }
        let poll = self.device.poll(wgpu::PollType::Wait {
            submission_index: None,
            timeout: Some(self.timeout),
        });
        match poll {
            Ok(_) => drop(buried),
            Err(e) => {
                error!(
                    "cuvk: Bevy's GPU work did not complete within {:?} ({e}); leaking {} \
                     dropped objects rather than freeing what the GPU may still use",
                    self.timeout,
                    buried.len()
                );
                std::mem::forget(buried);
            }
        }
    }
}

/// `RenderGraphSystems::Finish` (after Bevy submitted the frame): one empty submission of the
/// plugin's own, after every command submitted so far in queue order (and carrying wgpu's
/// pending `write_buffer`s, which every submission flushes), that signals the semaphores asked
/// for this frame; what was dropped is freed once the GPU has run it.
pub(crate) fn flush_late_work(device: Option<Res<CuvkDevice>>) {
    let Some(device) = device else { return };
    let late = device.late();
    // Taken first: everything buried so far is covered by the submission below.
    let buried = std::mem::take(&mut *lock(&late.buried));
    let mut signals = std::mem::take(&mut *lock(&late.signals));
    if buried.is_empty() && signals.is_empty() {
        return;
    }
    let queue = device.wgpu_queue();
    if signals.is_empty() {
        queue.submit([]);
    } else {
        submit_signals(&device, &mut signals);
    }
    if !buried.is_empty() {
        // After the submission just made, which follows Bevy's frame and any write still
        // pending on a buffer dropped before it.
        queue.on_submitted_work_done(move || drop(buried));
    }
}

/// The empty submission carrying `signals` (one value per semaphore, the highest); on success
/// each [`PendingSignal::submitted`] learns its value, which is what CUDA may then wait for.
fn submit_signals(device: &CuvkDevice, signals: &mut Vec<PendingSignal>) {
    let queue = device.wgpu_queue();
    signals.sort_by_key(|p| (p.semaphore.vulkan.handle(), std::cmp::Reverse(p.value)));
    signals.dedup_by_key(|p| p.semaphore.vulkan.handle());
    let ops: Vec<SemaphoreOp<'_>> = signals
        .iter()
        .map(|p| SemaphoreOp::signal(&p.semaphore.vulkan, p.value))
        .collect();
    // SAFETY: the hal queue is only used to add signals to its next submission.
    let Some(hal_queue) = (unsafe { queue.as_hal::<hal::api::Vulkan>() }) else {
        error!("cuvk: Bevy's queue is not a Vulkan queue; CUDA's waits are not signalled");
        queue.submit([]);
        return;
    };
    // SAFETY: the closure attaches the progress signal and every element of `ops` to the
    // empty submission it makes at once, which reaches Bevy's queue (wgpu-core submits even an
    // empty list): all of them are signalled after every command submitted before it, Bevy's
    // frame included (another thread's submission taking them first is later than Bevy's
    // frame too). It never returns Err.
    let submitted = unsafe {
        device.vulkan().submit_foreign(&[], &ops, |progress| {
            hal_queue.add_signal_semaphore(progress.semaphore, Some(progress.value));
            for op in &ops {
                hal_queue.add_signal_semaphore(op.semaphore.handle(), Some(op.value));
            }
            drop(hal_queue);
            queue.submit([]);
            Ok(())
        })
    };
    match submitted {
        Ok(()) => {
            for p in signals.iter() {
                p.submitted.fetch_max(p.value, Ordering::AcqRel);
            }
        }
        Err(e) => {
            error!("cuvk: signalling CUDA after Bevy's frame failed: {e}");
            queue.submit([]);
        }
    }
}
