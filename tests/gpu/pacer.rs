//! The frame pacer refuses what it did not issue and what would make the GPU wait for a value
//! nobody schedules: another pacer's frame, a stale frame, a step out of order (a release
//! before the acquire, a submission before the release, the next frame before this one is
//! submitted), a second submission. Each refusal names the rule and its numbers, changes no
//! state (no timeline value is scheduled, the pacer's current frame stays), the same frame
//! then proceeds and three frames complete, and the pacer's drop returns at once. Skips with
//! a printed reason where there is no GPU.

use cuvk_dev::assert_err;
use cuvk_dev::testing as common;

use std::time::{Duration, Instant};

use cuvk::ash::vk;
use cuvk::cudarc::driver::CudaStream;
use cuvk::vulkan::{AsVkBuffer, HostBuffer};
use cuvk::{Bridge, Error, Frame, FramePacer, FrameStep, SyncError};

const WAIT: Duration = Duration::from_secs(10);
const STAGE: vk::PipelineStageFlags = vk::PipelineStageFlags::ALL_COMMANDS;

/// Runs `frame` through its steps with no work: CUDA acquire and release, an empty
/// submission.
fn finish(pacer: &FramePacer, frame: &Frame, stream: &CudaStream) {
    pacer.cuda_acquire(frame, stream).unwrap();
    pacer.cuda_release(frame, stream).unwrap();
    submit(pacer, frame).unwrap();
}

/// Submits `frame` with no command buffers.
fn submit(pacer: &FramePacer, frame: &Frame) -> cuvk::Result<()> {
    // SAFETY: no command buffers; the pacer waits for the frame before its semaphores go.
    unsafe { pacer.vulkan_submit(frame, &cuvk::FrameSubmit::new(&[], STAGE)) }
}

/// Begins and finishes `n` frames, expecting the numbers `first..first + n`.
fn run(pacer: &mut FramePacer, stream: &CudaStream, first: u64, n: u64) {
    for expected in first..first + n {
        let frame = pacer.begin_frame().unwrap();
        assert_eq!(frame.number(), expected);
        finish(pacer, &frame, stream);
    }
    pacer.wait_idle(WAIT).unwrap();
}

/// The highest values scheduled on the pacer's three timelines.
fn marks(pacer: &FramePacer) -> [u64; 3] {
    [
        pacer.cuda_done().highest_signal(),
        pacer.vulkan_done().highest_signal(),
        pacer.frames_complete().highest_signal(),
    ]
}

/// Drops the pacer and checks it returned at once (nothing it scheduled is left waiting).
fn drop_promptly(pacer: FramePacer) {
    let t = Instant::now();
    drop(pacer);
    let took = t.elapsed();
    eprintln!("pacer drop took {took:?}");
    assert!(took < Duration::from_secs(2), "pacer drop took {took:?}");
}

/// Asserts `r` is refused as another pacer's frame 1.
fn foreign<T>(r: cuvk::Result<T>) {
    assert_err!(r, Error::Sync(SyncError::ForeignFrame { frame: 1 }));
}

/// Asserts `r` is refused as a wait for frame 1's `cuda_done`, which nothing scheduled.
fn never<T>(r: cuvk::Result<T>) {
    assert_err!(
        r,
        Error::Sync(SyncError::WaitNeverSignalled {
            value: 1,
            scheduled: 0
        })
    );
}

/// Asserts `r` is refused as stale frame 1 (the current one is 2) at `step`.
fn stale<T>(r: cuvk::Result<T>, step: FrameStep) {
    let e = assert_err!(
        r,
        Error::Sync(SyncError::WrongFrame {
            frame: 1,
            current: 2,
            ..
        })
    );
    assert!(
        matches!(e, Error::Sync(SyncError::WrongFrame { reason, .. }) if reason == step),
        "{e:?}"
    );
}

fn setup(test: &str) -> Option<(Bridge, std::sync::Arc<CudaStream>)> {
    let bridge = common::bridge(test)?;
    let stream = bridge.cuda().new_stream().unwrap();
    Some((bridge, stream))
}

#[test]
fn another_pacers_frame_is_refused_and_changes_nothing() {
    let _shared = common::shared();
    let Some((bridge, stream)) = setup("another_pacers_frame_is_refused") else {
        return;
    };
    let mut a = FramePacer::new(&bridge, 2).unwrap();
    let mut b = FramePacer::new(&bridge, 2).unwrap();
    assert_ne!(a.id(), b.id());
    let fa = a.begin_frame().unwrap();
    let fb = b.begin_frame().unwrap();
    assert_eq!((fa.number(), fb.number()), (1, 1));
    assert!(fa.is_from(&a) && !fa.is_from(&b) && fb.issuer_id() == b.id());
    // Every step of `a` refuses `b`'s frame, before anything is enqueued.
    foreign(a.cuda_acquire(&fb, &stream));
    a.cuda_acquire(&fa, &stream).unwrap();
    foreign(a.cuda_release(&fb, &stream));
    foreign(a.record_commands(&fb, |_, _| Ok(())));
    b.cuda_acquire(&fb, &stream).unwrap();
    b.cuda_release(&fb, &stream).unwrap();
    foreign(a.validate_submit(&fb));
    foreign(submit(&a, &fb));
    foreign(a.frame_semaphores(&fb, vk::PipelineStageFlags2::ALL_COMMANDS));
    // `b`'s semaphores for its frame 1, marked on `a`.
    let sems_b = b
        .frame_semaphores(&fb, vk::PipelineStageFlags2::ALL_COMMANDS)
        .unwrap();
    assert_eq!((sems_b.frame(), sems_b.pacer_id()), (1, b.id()));
    // SAFETY: refused before anything is recorded (another pacer's semaphores).
    foreign(unsafe { a.mark_submitted(&sems_b) });
    foreign(a.wait_frame(&fb, WAIT));
    // Nothing was scheduled on `a` by the refusals: only its own acquire ran.
    assert_eq!(marks(&a), [0, 0, 0]);
    // The same frames proceed, and three frames complete on each pacer.
    a.cuda_release(&fa, &stream).unwrap();
    submit(&a, &fa).unwrap();
    submit(&b, &fb).unwrap();
    a.wait_frame(&fa, WAIT).unwrap();
    run(&mut a, &stream, 2, 2);
    run(&mut b, &stream, 2, 2);
    assert_eq!(marks(&a), [3, 3, 3]);
    stream.synchronize().unwrap();
    drop_promptly(a);
    drop_promptly(b);
    common::assert_clean(bridge.vulkan());
}

#[test]
fn a_stale_frame_is_refused_and_changes_nothing() {
    let _shared = common::shared();
    let Some((bridge, stream)) = setup("a_stale_frame_is_refused") else {
        return;
    };
    let mut pacer = FramePacer::new(&bridge, 1).unwrap();
    let old = pacer.begin_frame().unwrap();
    pacer.cuda_acquire(&old, &stream).unwrap();
    pacer.cuda_release(&old, &stream).unwrap();
    let old_sems = pacer
        .frame_semaphores(&old, vk::PipelineStageFlags2::ALL_COMMANDS)
        .unwrap();
    submit(&pacer, &old).unwrap();
    let frame = pacer.begin_frame().unwrap();
    assert_eq!(frame.number(), 2);
    let before = marks(&pacer);
    assert_eq!(before, [1, 1, 1]);
    stale(pacer.cuda_acquire(&old, &stream), FrameStep::CudaAcquire);
    stale(pacer.cuda_release(&old, &stream), FrameStep::CudaRelease);
    stale(
        pacer.record_commands(&old, |_, _| Ok(())),
        FrameStep::RecordCommands,
    );
    stale(submit(&pacer, &old), FrameStep::Submit);
    stale(pacer.validate_submit(&old), FrameStep::Submit);
    stale(
        pacer.frame_semaphores(&old, vk::PipelineStageFlags2::ALL_COMMANDS),
        FrameStep::Submit,
    );
    // SAFETY: these semaphores' submission (frame 1's, through vulkan_submit) was made; the
    // call is refused anyway (stale frame).
    stale(
        unsafe { pacer.mark_submitted(&old_sems) },
        FrameStep::MarkSubmitted,
    );
    assert_eq!(marks(&pacer), before, "a refusal scheduled something");
    // Waiting for a stale frame is fine: it completed.
    pacer.wait_frame(&old, WAIT).unwrap();
    // The current frame proceeds; three frames complete.
    finish(&pacer, &frame, &stream);
    run(&mut pacer, &stream, 3, 2);
    assert_eq!(marks(&pacer), [4, 4, 4]);
    stream.synchronize().unwrap();
    drop_promptly(pacer);
    common::assert_clean(bridge.vulkan());
}

#[test]
fn steps_out_of_order_and_waits_never_signalled_are_refused() {
    let _shared = common::shared();
    let Some((bridge, stream)) = setup("steps_out_of_order_are_refused") else {
        return;
    };
    let mut pacer = FramePacer::new(&bridge, 2).unwrap();
    let frame = pacer.begin_frame().unwrap();
    let n = frame.number();
    // Vulkan would wait for cuda_done = 1, which nothing scheduled: refused before the driver.
    never(submit(&pacer, &frame));
    never(pacer.validate_submit(&frame));
    never(pacer.frame_semaphores(&frame, vk::PipelineStageFlags2::ALL_COMMANDS));
    // The host would wait for a frame never submitted: refused at once, not after a timeout.
    let t = Instant::now();
    never(pacer.wait_frame(&frame, WAIT));
    assert!(t.elapsed() < Duration::from_secs(1));
    // CUDA's release before its acquire: CUDA would overwrite a slot Vulkan may still read.
    assert_err!(
        pacer.cuda_release(&frame, &stream),
        Error::Sync(SyncError::FrameOutOfOrder {
            frame: 1,
            last_step: FrameStep::Begin,
            reason: FrameStep::CudaRelease
        })
    );
    // The next frame before this one is submitted.
    assert_err!(
        pacer.begin_frame(),
        Error::Sync(SyncError::FrameOutOfOrder {
            frame: 1,
            last_step: FrameStep::Begin,
            reason: FrameStep::Begin
        })
    );
    assert_eq!(marks(&pacer), [0, 0, 0]);
    pacer.cuda_acquire(&frame, &stream).unwrap();
    pacer.cuda_acquire(&frame, &stream).unwrap(); // a second stream may acquire too
    never(submit(&pacer, &frame));
    assert_err!(
        pacer.begin_frame(),
        Error::Sync(SyncError::FrameOutOfOrder {
            last_step: FrameStep::CudaAcquire,
            reason: FrameStep::Begin,
            ..
        })
    );
    pacer.cuda_release(&frame, &stream).unwrap();
    for step in [FrameStep::CudaAcquire, FrameStep::CudaRelease] {
        let r = match step {
            FrameStep::CudaAcquire => pacer.cuda_acquire(&frame, &stream),
            _ => pacer.cuda_release(&frame, &stream),
        };
        let e = assert_err!(
            r,
            Error::Sync(SyncError::FrameOutOfOrder {
                frame: 1,
                last_step: FrameStep::CudaRelease,
                ..
            })
        );
        assert!(
            matches!(e, Error::Sync(SyncError::FrameOutOfOrder { reason, .. }) if reason == step)
        );
    }
    assert_err!(
        pacer.begin_frame(),
        Error::Sync(SyncError::FrameOutOfOrder {
            last_step: FrameStep::CudaRelease,
            reason: FrameStep::Begin,
            ..
        })
    );
    // An empty wait stage is refused too, changing nothing.
    // SAFETY: no command buffers; refused before the driver.
    let r = unsafe {
        pacer.vulkan_submit(
            &frame,
            &cuvk::FrameSubmit::new(&[], vk::PipelineStageFlags::empty()),
        )
    };
    assert_err!(r, Error::Sync(SyncError::EmptyWaitStage));
    assert_eq!(marks(&pacer), [n, 0, 0]);
    // Released: the submission goes; a second one is refused, and so is re-recording the
    // frame's commands (its command buffer may be executing).
    submit(&pacer, &frame).unwrap();
    assert_err!(
        submit(&pacer, &frame),
        Error::Sync(SyncError::FrameOutOfOrder {
            frame: 1,
            last_step: FrameStep::Submit,
            reason: FrameStep::Submit
        })
    );
    assert_err!(
        pacer.record_commands(&frame, |_, _| Ok(())),
        Error::Sync(SyncError::FrameOutOfOrder {
            frame: 1,
            last_step: FrameStep::Submit,
            reason: FrameStep::RecordCommands
        })
    );
    assert_eq!(marks(&pacer), [1, 1, 1]);
    pacer.wait_frame(&frame, WAIT).unwrap();
    run(&mut pacer, &stream, 2, 3);
    stream.synchronize().unwrap();
    drop_promptly(pacer);
    common::assert_clean(bridge.vulkan());
}

/// The engine path: the frame's semaphores for a submission made outside cuvk, then
/// `mark_submitted`. Marked once; the same frame cannot be marked or submitted again.
#[test]
fn an_engine_submission_is_marked_once_and_counts() {
    let _shared = common::shared();
    let Some((bridge, stream)) = setup("an_engine_submission_is_marked_once") else {
        return;
    };
    let ctx = bridge.vulkan();
    let mut pacer = FramePacer::new(&bridge, 2).unwrap();
    for expected in 1..=3u64 {
        let frame = pacer.begin_frame().unwrap();
        assert_eq!(frame.number(), expected);
        pacer.cuda_acquire(&frame, &stream).unwrap();
        pacer.cuda_release(&frame, &stream).unwrap();
        assert_err!(
            pacer.frame_semaphores(&frame, vk::PipelineStageFlags2::empty()),
            Error::Sync(SyncError::EmptyWaitStage)
        );
        let sems = pacer
            .frame_semaphores(&frame, vk::PipelineStageFlags2::ALL_COMMANDS)
            .unwrap();
        assert_eq!(sems.waits.len(), 1);
        assert_eq!(sems.waits[0].value, expected);
        assert!(sems.signals.iter().all(|s| s.value == expected));
        // The engine's own submission (vkQueueSubmit: this context does not enable
        // synchronization2, so the infos are spelled out for the first version).
        let wait_sems: Vec<vk::Semaphore> = sems.waits.iter().map(|s| s.semaphore).collect();
        let wait_vals: Vec<u64> = sems.waits.iter().map(|s| s.value).collect();
        let stages = vec![STAGE; wait_sems.len()];
        let sig_sems: Vec<vk::Semaphore> = sems.signals.iter().map(|s| s.semaphore).collect();
        let sig_vals: Vec<u64> = sems.signals.iter().map(|s| s.value).collect();
        let mut timeline = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_vals)
            .signal_semaphore_values(&sig_vals);
        let submit_info = [vk::SubmitInfo::default()
            .wait_semaphores(&wait_sems)
            .wait_dst_stage_mask(&stages)
            .signal_semaphores(&sig_sems)
            .push_next(&mut timeline)];
        {
            let queue = ctx.lock_queue();
            // SAFETY: the queue is locked; no command buffers; the semaphores are the pacer's
            // (alive until its drop, which waits for this frame).
            unsafe {
                ctx.device()
                    .queue_submit(*queue, &submit_info, vk::Fence::null())
            }
            .unwrap();
        }
        // SAFETY: the submission above waits and signals exactly `sems` and was accepted.
        unsafe { pacer.mark_submitted(&sems) }.unwrap();
        // SAFETY: the same submission; refused (already marked).
        let again = unsafe { pacer.mark_submitted(&sems) };
        assert_err!(
            again,
            Error::Sync(SyncError::FrameOutOfOrder {
                last_step: FrameStep::Submit,
                reason: FrameStep::MarkSubmitted,
                ..
            })
        );
        assert_err!(
            submit(&pacer, &frame),
            Error::Sync(SyncError::FrameOutOfOrder {
                last_step: FrameStep::Submit,
                reason: FrameStep::Submit,
                ..
            })
        );
        assert_eq!(marks(&pacer), [expected; 3]);
    }
    pacer.wait_idle(WAIT).unwrap();
    stream.synchronize().unwrap();
    drop_promptly(pacer);
    common::assert_clean(ctx);
}

/// `record_commands` hands each frame its own command buffer; a readback kept per command slot
/// holds frame N's result once frame N + 2K begins (the pacer waited for frame N), as the
/// `FramePacer` docs say. A failed recording changes nothing; recording again starts over.
#[test]
fn record_commands_and_a_readback_per_command_slot() {
    let _shared = common::shared();
    let Some((bridge, stream)) = setup("record_commands_and_a_readback_per_command_slot") else {
        return;
    };
    let ctx = bridge.vulkan();
    let k = 2u32;
    let mut pacer = FramePacer::new(&bridge, k).unwrap();
    let readbacks: Vec<HostBuffer> = (0..pacer.command_slots())
        .map(|_| HostBuffer::new(ctx, 16, vk::BufferUsageFlags::empty()).unwrap())
        .collect();
    let mut checked = 0;
    let frames = 6 * u64::from(k);
    for _ in 0..frames {
        let frame = pacer.begin_frame().unwrap();
        let readback = &readbacks[frame.command_slot()];
        if let Some(earlier) = frame.previous_command_use() {
            assert_eq!(frame.number() - earlier, 2 * u64::from(k));
            let got: Vec<u32> = readback.read().unwrap();
            assert_eq!(got, vec![earlier as u32; 4], "frame {earlier}'s readback");
            checked += 1;
        }
        pacer.cuda_acquire(&frame, &stream).unwrap();
        pacer.cuda_release(&frame, &stream).unwrap();
        // A recording that fails: its error comes back, and the next one starts over.
        let failed =
            pacer.record_commands(&frame, |_, _| Err(Error::Sync(SyncError::SignalledTwice)));
        assert_err!(failed, Error::Sync(SyncError::SignalledTwice));
        let value = frame.number() as u32;
        let record = |pacer: &FramePacer, cmd: vk::CommandBuffer| -> cuvk::Result<()> {
            // SAFETY: `cmd` records on the pacer's device; the readback outlives the frame
            // (waited for below); the fill is in range.
            unsafe {
                pacer
                    .context()
                    .device()
                    .cmd_fill_buffer(cmd, readback.vk_buffer(), 0, 16, value);
                pacer.record_host_read_barrier(
                    cmd,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::AccessFlags::TRANSFER_WRITE,
                );
            }
            Ok(())
        };
        let first = pacer.record_commands(&frame, record).unwrap();
        let cmd = pacer.record_commands(&frame, record).unwrap();
        assert_eq!(first, cmd, "one command buffer per command slot");
        // SAFETY: the frame's own command buffer; the readback outlives it.
        unsafe {
            pacer.vulkan_submit(
                &frame,
                &cuvk::FrameSubmit::new(&[cmd], vk::PipelineStageFlags::TRANSFER),
            )
        }
        .unwrap();
    }
    assert_eq!(checked, frames - 2 * u64::from(k));
    pacer.wait_idle(WAIT).unwrap();
    // Every readback now holds the last frame of its command slot.
    for (slot, readback) in readbacks.iter().enumerate() {
        let got: Vec<u32> = readback.read().unwrap();
        let last = (1..=frames)
            .filter(|n| (n % (2 * u64::from(k))) as usize == slot)
            .max()
            .unwrap();
        assert_eq!(got, vec![last as u32; 4]);
    }
    stream.synchronize().unwrap();
    drop_promptly(pacer);
    common::assert_clean(ctx);
}

/// A pacer dropped mid-frame (CUDA released, never submitted, or only begun) returns at
/// once: nothing it scheduled waits for a value nobody will signal.
#[test]
fn a_pacer_dropped_mid_frame_returns_promptly() {
    let _shared = common::shared();
    let Some((bridge, stream)) = setup("a_pacer_dropped_mid_frame_returns_promptly") else {
        return;
    };
    for released in [false, true] {
        let mut pacer = FramePacer::new(&bridge, 1).unwrap();
        run(&mut pacer, &stream, 1, 3);
        let frame = pacer.begin_frame().unwrap();
        pacer.cuda_acquire(&frame, &stream).unwrap();
        if released {
            pacer.cuda_release(&frame, &stream).unwrap();
        }
        // wait_idle waits for what was submitted (frame 3), not the frame in progress.
        let t = Instant::now();
        pacer.wait_idle(WAIT).unwrap();
        assert!(t.elapsed() < Duration::from_secs(1));
        drop_promptly(pacer);
        stream.synchronize().unwrap();
    }
    common::assert_clean(bridge.vulkan());
}
