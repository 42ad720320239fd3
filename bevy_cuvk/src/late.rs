//! Work the plugin does after Bevy's submission of each frame (`RenderGraphSystems::Finish`):
//! freeing what was dropped once the GPU has run everything submitted so far, and signalling
//! the semaphores CUDA streams wait for ([`crate::StreamSync`]) on a submission of its own,
//! after Bevy's.
//!
//! What is freed late is anything `Send` ([`LateWork::bury`], [`LateDrop`]): a buffer's memory,
//! a kernel's module, an inline image handle's view — whatever a command buffer of this frame
//! may still name when its owner drops it.

use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bevy::log::error;
use bevy::prelude::Res;
use cuvk::vulkan::SemaphoreOp;
use cuvk::StreamOrder;
use wgpu::hal;

use crate::CuvkDevice;

/// A `vulkan_done` value of a stream order to signal after Bevy's frame.
pub(crate) struct PendingSignal {
    order: Arc<StreamOrder>,
    value: u64,
}

/// What waits for the end of the frame: one per [`CuvkDevice`] (its clones share it).
pub(crate) struct LateWork {
    /// Objects dropped while Bevy's GPU work may still use them (a buffer's memory, a kernel's
    /// module, an image handle's view): freed once the work submitted before the next flush
    /// completed.
    buried: Mutex<Vec<Box<dyn Send>>>,
    /// Stream orders' values to signal after Bevy's next submission.
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

    /// Keeps `item` until the GPU has run everything submitted by the end of this frame: the
    /// next [`Self::flush`] hands it to the queue, which drops it once that flush's submission
    /// (after every earlier one) completed; never flushed (the app ending), it drops with the
    /// last owner of `self`, after a bounded wait for the device.
    pub(crate) fn bury<T: Send + 'static>(&self, item: T) {
        lock(&self.buried).push(Box::new(item));
    }

    /// Signals `value` on `semaphore` after Bevy's next submission; `submitted` learns it
    /// once it is.
    pub(crate) fn signal_after_frame(&self, order: Arc<StreamOrder>, value: u64) {
        lock(&self.signals).push(PendingSignal { order, value });
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

/// A value whose drop the plugin defers until the GPU has run everything submitted by the end
/// of the frame in which it was dropped ([`LateWork::bury`]): what a command buffer recorded
/// this frame may still name (a kernel's module, an inline image handle's view) outlives that
/// command buffer's execution, wherever and whenever its owner drops it — in a system, with
/// a resource, or with the app. Reads as the value it holds.
pub(crate) struct LateDrop<T: Send + 'static> {
    value: ManuallyDrop<T>,
    late: Arc<LateWork>,
}

impl<T: Send + 'static> LateDrop<T> {
    /// `value`, dropped late through `late`.
    pub(crate) fn new(value: T, late: Arc<LateWork>) -> Self {
        Self {
            value: ManuallyDrop::new(value),
            late,
        }
    }
}

impl<T: Send + 'static> Deref for LateDrop<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Send + 'static> Drop for LateDrop<T> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `value` is not used after.
        let value = unsafe { ManuallyDrop::take(&mut self.value) };
        self.late.bury(value);
    }
}

/// `RenderGraphSystems::Finish` (after Bevy submitted the frame): [`LateWork::flush`] on
/// Bevy's queue, the signals asked for this frame on its submission.
pub(crate) fn flush_late_work(device: Option<Res<CuvkDevice>>) {
    let Some(device) = device else { return };
    device.late().flush(device.wgpu_queue(), |signals| {
        submit_signals(&device, signals)
    });
}

impl LateWork {
    /// The end of a frame: one empty submission on `queue` (made by `submit_signals` where
    /// signals were asked for, which must submit once on `queue`), after every command
    /// submitted so far in queue order and carrying wgpu's pending `write_buffer`s (which every
    /// submission flushes); what was buried so far is dropped once the GPU has run it (wgpu's
    /// `on_submitted_work_done`, called from a later poll or submission, or when the queue
    /// drops after its own wait). Nothing buried and no signal: nothing is submitted.
    pub(crate) fn flush(
        &self,
        queue: &wgpu::Queue,
        submit_signals: impl FnOnce(&mut Vec<PendingSignal>),
    ) {
        // Taken first: everything buried so far is covered by the submission below.
        let buried = std::mem::take(&mut *lock(&self.buried));
        let mut signals = std::mem::take(&mut *lock(&self.signals));
        if buried.is_empty() && signals.is_empty() {
            return;
        }
        if signals.is_empty() {
            queue.submit([]);
        } else {
            submit_signals(&mut signals);
        }
        if !buried.is_empty() {
            // After the submission just made, which follows Bevy's frame and any write still
            // pending on a buffer dropped before it.
            queue.on_submitted_work_done(move || drop(buried));
        }
    }
}

/// The empty submission carrying `signals` (one value per order, the highest, on its
/// `vulkan_done` and host timelines); on success the orders' ledgers have the values, which is
/// what CUDA may then wait for.
fn submit_signals(device: &CuvkDevice, signals: &mut Vec<PendingSignal>) {
    let queue = device.wgpu_queue();
    signals.sort_by_key(|p| (p.order.id(), std::cmp::Reverse(p.value)));
    signals.dedup_by_key(|p| p.order.id());
    let ops: Vec<SemaphoreOp<'_>> = signals
        .iter()
        .flat_map(|p| {
            [
                SemaphoreOp::signal(p.order.vulkan_done(), p.value),
                SemaphoreOp::signal(p.order.vulkan_done_host(), p.value),
            ]
        })
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
    if let Err(e) = submitted {
        error!("cuvk: signalling CUDA after Bevy's frame failed: {e}");
        queue.submit([]);
    }
}

#[cfg(test)]
#[allow(clippy::panic, clippy::expect_used)]
mod tests {
    //! The deferral on a plain wgpu device (lavapipe in CI: no CUDA, no NVX, so no real inline
    //! image handle). A [`Probe`] stands for what an [`crate::InlineImage`] holds — an object
    //! whose drop destroys something this frame's command buffers name (its image view) — behind
    //! the same [`LateDrop`], and records whether the frame's GPU work had run when it dropped.

    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// Image-handle-shaped: dropping it is only safe once the frame's work has run.
    struct Probe {
        frame_done: Arc<AtomicBool>,
        /// `None` while alive; then whether the frame's work had run when it dropped.
        dropped: Arc<Mutex<Option<bool>>>,
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            *lock(&self.dropped) = Some(self.frame_done.load(Ordering::Acquire));
        }
    }

    /// A probe of `frame`'s work behind `late`, and what its drop records.
    fn probe(frame: &Frame, late: &Arc<LateWork>) -> (LateDrop<Probe>, Arc<Mutex<Option<bool>>>) {
        let dropped = Arc::new(Mutex::new(None));
        let probe = Probe {
            frame_done: frame.done.clone(),
            dropped: dropped.clone(),
        };
        (LateDrop::new(probe, late.clone()), dropped)
    }

    /// A Vulkan device (lavapipe in CI); `None`, and the test skips, where there is none
    /// (a failure with `REQUIRE_VULKAN=1`).
    fn device() -> Option<(wgpu::Device, wgpu::Queue)> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::VULKAN;
        let instance = wgpu::Instance::new(desc);
        let options = wgpu::RequestAdapterOptions::default();
        let found = bevy::tasks::block_on(instance.request_adapter(&options))
            .ok()
            .and_then(|adapter| {
                let desc = wgpu::DeviceDescriptor::default();
                bevy::tasks::block_on(adapter.request_device(&desc)).ok()
            });
        if found.is_none() {
            assert_ne!(
                std::env::var("REQUIRE_VULKAN").as_deref(),
                Ok("1"),
                "no Vulkan device (lavapipe: Debian mesa-vulkan-drivers)"
            );
            eprintln!("SKIP: no Vulkan device");
        }
        found
    }

    /// One frame's GPU work, submitted: a 32 MiB copy into a buffer then mapped for reading;
    /// `done` is set by the map's callback, which wgpu calls once the copy has run (and before
    /// any `on_submitted_work_done` callback registered after it, as WebGPU requires).
    struct Frame {
        done: Arc<AtomicBool>,
        _buffers: [wgpu::Buffer; 2],
    }

    fn frame(device: &wgpu::Device, queue: &wgpu::Queue) -> Frame {
        const BYTES: u64 = 32 << 20;
        let buffer = |usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("frame"),
                size: BYTES,
                usage,
                mapped_at_creation: false,
            })
        };
        let src = buffer(wgpu::BufferUsages::COPY_SRC);
        let dst = buffer(wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ);
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        encoder.copy_buffer_to_buffer(&src, 0, &dst, 0, BYTES);
        queue.submit([encoder.finish()]);
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        dst.slice(..).map_async(wgpu::MapMode::Read, move |mapped| {
            flag.store(mapped.is_ok(), Ordering::Release);
        });
        Frame {
            done,
            _buffers: [src, dst],
        }
    }

    fn no_signals(_: &mut Vec<PendingSignal>) {
        panic!("no signal was asked for");
    }

    fn wait(device: &wgpu::Device) {
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("waiting for the device");
    }

    #[test]
    fn a_handle_dropped_in_a_frame_lives_until_that_frames_gpu_work_ran() {
        let Some((device, queue)) = device() else {
            return;
        };
        let late = Arc::new(LateWork::new(device.clone(), Duration::from_secs(10)));

        // Frame 1: Bevy's submission (the kernel's command buffer naming the handle among
        // it), then the owner drops the handle.
        let first = frame(&device, &queue);
        let (handle, dropped) = probe(&first, &late);
        drop(handle);
        assert_eq!(*lock(&dropped), None, "dropped at once");
        // RenderGraphSystems::Finish: the plugin's submission after Bevy's.
        late.flush(&queue, no_signals);
        assert_eq!(*lock(&dropped), None, "dropped at the flush");

        // Frame 2 is submitted and a second handle dropped before frame 1's work is known to
        // have run; then the GPU runs everything.
        let second = frame(&device, &queue);
        let (handle, dropped_later) = probe(&second, &late);
        drop(handle);
        wait(&device);
        assert_eq!(
            *lock(&dropped),
            Some(true),
            "not dropped after frame 1, or dropped before its work ran"
        );
        assert_eq!(
            *lock(&dropped_later),
            None,
            "dropped before the end of its frame (no flush since)"
        );
        late.flush(&queue, no_signals);
        wait(&device);
        assert_eq!(*lock(&dropped_later), Some(true));
    }

    #[test]
    fn a_handle_dropped_after_the_last_frame_is_freed_when_the_plugin_goes_after_the_gpu() {
        let Some((device, queue)) = device() else {
            return;
        };
        let late = Arc::new(LateWork::new(device.clone(), Duration::from_secs(10)));
        let last = frame(&device, &queue);
        late.flush(&queue, no_signals);
        // The app ends: the render world drops the handle after the last flush, frames in
        // flight; the last owner of the plugin's state goes after it.
        let (handle, dropped) = probe(&last, &late);
        drop(handle);
        assert_eq!(*lock(&dropped), None);
        drop(late);
        assert_eq!(
            *lock(&dropped),
            Some(true),
            "not freed, or freed before the GPU ran the last frame"
        );
    }

    #[test]
    fn a_handle_handed_to_the_queue_is_freed_when_the_queue_goes_after_the_gpu() {
        let Some((device, queue)) = device() else {
            return;
        };
        let late = Arc::new(LateWork::new(device.clone(), Duration::from_secs(10)));
        let last = frame(&device, &queue);
        let (handle, dropped) = probe(&last, &late);
        drop(handle);
        late.flush(&queue, no_signals);
        // The app ends right after the last frame's flush, nothing polls any more: the
        // plugin's state goes (nothing left to free), then Bevy's queue, which waits for its
        // last submission and runs what was registered on it.
        drop(late);
        assert_eq!(*lock(&dropped), None);
        drop(queue);
        assert_eq!(
            *lock(&dropped),
            Some(true),
            "not freed, or freed before the GPU ran the last frame"
        );
    }

    #[test]
    fn handles_and_kernels_can_live_in_resources() {
        fn resource<T: Send + Sync + 'static>() {}
        resource::<crate::InlineImage>();
        resource::<crate::InlineKernel>();
    }
}
