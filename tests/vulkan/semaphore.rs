//! Semaphores on the Vulkan side alone (any Vulkan device; lavapipe in CI), under the
//! validation layer: the clear `Unsupported`-style error where export is missing, timeline
//! values, host signal/wait, timeouts, and non-increasing values refused before the driver.

use cuvk_dev::assert_err;
use cuvk_dev::testing as common;

use std::time::{Duration, Instant};

use cuvk::ash::vk;
use cuvk::vulkan::{Semaphore, SemaphoreDesc, SemaphoreKind, SemaphoreOp};
use cuvk::{Error, ErrorKind};

const TIMELINE: SemaphoreKind = SemaphoreKind::Timeline { initial: 0 };

fn local(kind: SemaphoreKind) -> SemaphoreDesc {
    SemaphoreDesc {
        kind,
        exportable: false,
    }
}

#[test]
fn export_without_the_extension_says_so() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("export_without_the_extension_says_so") else {
        return;
    };
    if ctx.info().capabilities.external_semaphore {
        eprintln!(
            "SKIP: {} can export semaphores (the GPU tests cover it)",
            ctx.info().name
        );
        return;
    }
    let e = assert_err!(
        Semaphore::new(&ctx, SemaphoreDesc::SHARED_TIMELINE),
        Error::MissingExtension { .. }
    );
    assert!(e.is_unavailable());
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(
        e.to_string()
            .contains(cuvk::SEMAPHORE_EXTENSION.to_str().unwrap()),
        "{e}"
    );
    // The next valid call works: a non-exportable timeline.
    let s = Semaphore::new(&ctx, local(TIMELINE)).unwrap();
    s.signal_host(1).unwrap();
    assert_eq!(s.value().unwrap(), 1);
    common::assert_clean(&ctx);
}

#[test]
fn timeline_values_signal_wait_and_timeout() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("timeline_values_signal_wait_and_timeout") else {
        return;
    };
    let s = Semaphore::new(&ctx, local(SemaphoreKind::Timeline { initial: 5 })).unwrap();
    assert_eq!(s.value().unwrap(), 5);
    s.wait_host(5, Duration::ZERO).unwrap();
    s.signal_host(9).unwrap();
    assert_eq!(s.value().unwrap(), 9);
    s.wait_host(7, Duration::from_millis(1)).unwrap();

    // Waiting on a value never signalled returns a timeout error, not a hang.
    let t = Instant::now();
    let e = assert_err!(
        s.wait_host(10, Duration::from_millis(50)),
        Error::Timeout { .. }
    );
    assert!(
        t.elapsed() >= Duration::from_millis(45),
        "returned after {:?}: {e}",
        t.elapsed()
    );
    assert!(t.elapsed() < Duration::from_secs(5));

    // Values must strictly increase: refused before the driver, with both numbers.
    let e = assert_err!(
        s.signal_host(9),
        Error::Sync(cuvk::SyncError::TimelineNotIncreasing { value: 9, last: 9 })
    );
    assert!(e.to_string().contains("9"));
    assert_err!(
        s.signal_host(3),
        Error::Sync(cuvk::SyncError::TimelineNotIncreasing { value: 3, last: 9 })
    );
    // The next valid call works.
    s.signal_host(10).unwrap();
    s.wait_host(10, Duration::from_secs(1)).unwrap();
    common::assert_clean(&ctx);
}

#[test]
fn queue_submission_signals_and_waits_timelines() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("queue_submission_signals_and_waits_timelines") else {
        return;
    };
    let a = Semaphore::new(&ctx, local(TIMELINE)).unwrap();
    let b = Semaphore::new(&ctx, local(TIMELINE)).unwrap();
    // Submission waits for a=1 (signalled from the host later) and signals b=1.
    let wait = [SemaphoreOp {
        semaphore: &a,
        value: 1,
        stage: vk::PipelineStageFlags::ALL_COMMANDS,
    }];
    let signal = [SemaphoreOp {
        semaphore: &b,
        value: 1,
        stage: vk::PipelineStageFlags::empty(),
    }];
    // SAFETY: no command buffers; the semaphores outlive the submission (waited below).
    unsafe { ctx.submit_with_semaphores(&[], &wait, &signal, vk::Fence::null()) }.unwrap();
    assert_err!(
        b.wait_host(1, Duration::from_millis(20)),
        Error::Timeout { .. }
    );
    a.signal_host(1).unwrap();
    b.wait_host(1, Duration::from_secs(5)).unwrap();
    // A submission that would signal a value already scheduled is refused before the driver.
    // SAFETY: as above (refused before submission).
    let res = unsafe { ctx.submit_with_semaphores(&[], &[], &signal, vk::Fence::null()) };
    assert_err!(
        res,
        Error::Sync(cuvk::SyncError::TimelineNotIncreasing { value: 1, last: 1 })
    );
    common::assert_clean(&ctx);
}

#[test]
fn binary_semaphores_refuse_timeline_operations() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("binary_semaphores_refuse_timeline_operations") else {
        return;
    };
    let s = Semaphore::new(&ctx, local(SemaphoreKind::Binary)).unwrap();
    use cuvk::SyncError::NeedsTimeline;
    assert_err!(s.value(), Error::Sync(NeedsTimeline { .. }));
    assert_err!(s.signal_host(1), Error::Sync(NeedsTimeline { .. }));
    assert_err!(
        s.wait_host(1, Duration::ZERO),
        Error::Sync(NeedsTimeline { .. })
    );
    assert_err!(
        s.export(),
        Error::Memory(cuvk::MemoryError::NotExportable {
            what: cuvk::Exportable::Semaphore
        })
    );
    common::assert_clean(&ctx);
}

#[test]
fn refused_submission_leaves_every_timeline_as_it_was() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("refused_submission_leaves_every_timeline_as_it_was") else {
        return;
    };
    let a = Semaphore::new(&ctx, local(TIMELINE)).unwrap();
    let b = Semaphore::new(&ctx, local(SemaphoreKind::Timeline { initial: 4 })).unwrap();
    let op = |semaphore, value| SemaphoreOp {
        semaphore,
        value,
        stage: vk::PipelineStageFlags::empty(),
    };
    // One good value (a = 1) beside one that does not increase (b = 4): the whole submission
    // is refused, and a's value 1 is not left reserved.
    // SAFETY: no command buffers; refused before the driver.
    let res =
        unsafe { ctx.submit_with_semaphores(&[], &[], &[op(&a, 1), op(&b, 4)], vk::Fence::null()) };
    assert_err!(
        res,
        Error::Sync(cuvk::SyncError::TimelineNotIncreasing { value: 4, last: 4 })
    );
    assert_eq!((a.highest_signal(), b.highest_signal()), (0, 4));
    // The same signal of one semaphore twice in one submission is refused too.
    // SAFETY: as above.
    let res =
        unsafe { ctx.submit_with_semaphores(&[], &[], &[op(&a, 1), op(&a, 2)], vk::Fence::null()) };
    assert_err!(res, Error::Sync(cuvk::SyncError::SignalledTwice));
    assert_eq!(a.highest_signal(), 0);
    // The same frame, corrected, then submits, and the GPU signals both.
    // SAFETY: no command buffers; the semaphores outlive the submission (waited below).
    unsafe { ctx.submit_with_semaphores(&[], &[], &[op(&a, 1), op(&b, 5)], vk::Fence::null()) }
        .unwrap();
    a.wait_host(1, Duration::from_secs(5)).unwrap();
    b.wait_host(5, Duration::from_secs(5)).unwrap();
    assert_eq!((a.highest_signal(), b.highest_signal()), (1, 5));
    common::assert_clean(&ctx);
}

#[test]
fn dropping_a_semaphore_waits_for_its_own_submissions_only() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("dropping_a_semaphore_waits_for_its_own_submissions_only")
    else {
        return;
    };
    // `gate` is never signalled while `a` is dropped: a submission waiting on it stays
    // pending. Dropping the unrelated `b` (used by an earlier, finished submission) must not
    // wait for the device to go idle, which it never would.
    let gate = Semaphore::new(&ctx, local(TIMELINE)).unwrap();
    let b = Semaphore::new(&ctx, local(TIMELINE)).unwrap();
    let sig = |semaphore, value| SemaphoreOp {
        semaphore,
        value,
        stage: vk::PipelineStageFlags::empty(),
    };
    // SAFETY: no command buffers; b outlives its submission (waited below).
    unsafe { ctx.submit_with_semaphores(&[], &[], &[sig(&b, 1)], vk::Fence::null()) }.unwrap();
    b.wait_host(1, Duration::from_secs(5)).unwrap();
    let c = Semaphore::new(&ctx, local(TIMELINE)).unwrap();
    let wait = [SemaphoreOp {
        semaphore: &gate,
        value: 1,
        stage: vk::PipelineStageFlags::ALL_COMMANDS,
    }];
    // SAFETY: no command buffers; gate and c outlive the submission (signalled below).
    unsafe { ctx.submit_with_semaphores(&[], &wait, &[sig(&c, 1)], vk::Fence::null()) }.unwrap();
    let t = Instant::now();
    drop(b);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "dropping an idle semaphore waited {:?} (for the whole device?)",
        t.elapsed()
    );
    gate.signal_host(1).unwrap();
    c.wait_host(1, Duration::from_secs(5)).unwrap();
    drop((gate, c));
    common::assert_clean(&ctx);
}
