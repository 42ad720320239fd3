//! The Vulkan half of frame pacing, on any Vulkan device (lavapipe in CI; the pacer itself
//! needs CUDA and is tested in the GPU binary): the semaphore operations the pacer builds its
//! submissions from (`SemaphoreOp::wait` / `signal`: a signal's stage means nothing, a wait's
//! must not be empty) and the check that a wait is for a value some signal was scheduled for
//! (`Semaphore::check_scheduled`), which is what lets the pacer refuse a step that would make
//! the GPU wait forever. Each refusal changes no ledger, and the same submission then goes.

use cuvk_dev::assert_err;
use cuvk_dev::testing as common;

use std::time::Duration;

use cuvk::ash::vk;
use cuvk::vulkan::{Semaphore, SemaphoreDesc, SemaphoreKind, SemaphoreOp};
use cuvk::{Error, SyncError};

const WAIT: Duration = Duration::from_secs(5);

#[test]
fn a_wait_needs_its_stages_and_a_signal_follows_the_whole_submission() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("a_wait_needs_its_stages") else {
        return;
    };
    let upload = Semaphore::new(&ctx, SemaphoreDesc::LOCAL_TIMELINE).unwrap();
    let done = Semaphore::new(&ctx, SemaphoreDesc::LOCAL_TIMELINE).unwrap();
    let wait = SemaphoreOp::wait(&upload, 1, vk::PipelineStageFlags::TRANSFER);
    let signal = SemaphoreOp::signal(&done, 1);
    assert_eq!(
        (wait.value, wait.stage),
        (1, vk::PipelineStageFlags::TRANSFER)
    );
    assert_eq!(
        (signal.value, signal.stage),
        (1, vk::PipelineStageFlags::empty())
    );
    // A wait with no stages would wait for nothing (and breaks
    // VUID-VkSubmitInfo-pWaitDstStageMask-03937): refused before the driver, recording nothing.
    let empty = [SemaphoreOp::wait(
        &upload,
        1,
        vk::PipelineStageFlags::empty(),
    )];
    // SAFETY: no command buffers; refused before the driver.
    let r = unsafe {
        ctx.submit_with_semaphores(
            &[],
            &empty,
            std::slice::from_ref(&signal),
            vk::Fence::null(),
        )
    };
    assert_err!(r, Error::Sync(SyncError::EmptyWaitStage));
    assert_eq!(done.highest_signal(), 0, "the refused signal was recorded");
    // The same submission with its stage goes, and completes once the wait is satisfied.
    upload.signal_host(1).unwrap();
    // SAFETY: no command buffers; the semaphores outlive the submission (waited below).
    unsafe { ctx.submit_with_semaphores(&[], &[wait], &[signal], vk::Fence::null()) }.unwrap();
    assert_eq!(done.highest_signal(), 1);
    done.wait_host(1, WAIT).unwrap();
    common::assert_clean(&ctx);
}

#[test]
fn a_wait_is_checked_against_the_signals_scheduled() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("a_wait_is_checked_against_the_signals_scheduled") else {
        return;
    };
    let timeline = Semaphore::new(&ctx, SemaphoreDesc::LOCAL_TIMELINE).unwrap();
    timeline.check_scheduled(0).unwrap();
    assert_err!(
        timeline.check_scheduled(1),
        Error::Sync(SyncError::WaitNeverSignalled {
            value: 1,
            scheduled: 0
        })
    );
    // Scheduled from the host, then by a queue submission (not yet executed: a scheduled
    // signal is enough, the GPU will reach it).
    timeline.signal_host(1).unwrap();
    timeline.check_scheduled(1).unwrap();
    let gate = Semaphore::new(&ctx, SemaphoreDesc::LOCAL_TIMELINE).unwrap();
    let waits = [SemaphoreOp::wait(
        &gate,
        1,
        vk::PipelineStageFlags::ALL_COMMANDS,
    )];
    let signals = [SemaphoreOp::signal(&timeline, 2)];
    // SAFETY: no command buffers; the semaphores outlive the submission (waited below).
    unsafe { ctx.submit_with_semaphores(&[], &waits, &signals, vk::Fence::null()) }.unwrap();
    timeline.check_scheduled(2).unwrap();
    assert_err!(
        timeline.check_scheduled(3),
        Error::Sync(SyncError::WaitNeverSignalled {
            value: 3,
            scheduled: 2
        })
    );
    assert_eq!(
        timeline.value().unwrap(),
        1,
        "the submission has not run yet"
    );
    gate.signal_host(1).unwrap();
    timeline.wait_host(2, WAIT).unwrap();
    // A binary semaphore carries no value: nothing to check.
    let binary = Semaphore::new(
        &ctx,
        SemaphoreDesc {
            kind: SemaphoreKind::Binary,
            exportable: false,
        },
    )
    .unwrap();
    binary.check_scheduled(5).unwrap();
    common::assert_clean(&ctx);
}

/// A host signal above a queue signal still pending would let the pending signal run after a
/// higher value (VUID-VkSemaphoreSignalInfo-value-03259): refused, changing nothing, until the
/// pending signal has run; then the same host signal goes.
#[test]
fn a_host_signal_waits_for_the_signals_scheduled_before_it() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("a_host_signal_waits_for_the_signals_scheduled_before_it")
    else {
        return;
    };
    let gate = Semaphore::new(&ctx, SemaphoreDesc::LOCAL_TIMELINE).unwrap();
    let timeline = Semaphore::new(&ctx, SemaphoreDesc::LOCAL_TIMELINE).unwrap();
    let waits = [SemaphoreOp::wait(
        &gate,
        1,
        vk::PipelineStageFlags::ALL_COMMANDS,
    )];
    let signals = [SemaphoreOp::signal(&timeline, 1)];
    // SAFETY: no command buffers; the semaphores outlive the submission (waited below).
    unsafe { ctx.submit_with_semaphores(&[], &waits, &signals, vk::Fence::null()) }.unwrap();
    assert_err!(
        timeline.signal_host(2),
        Error::Sync(SyncError::SignalPending {
            value: 2,
            pending: 1,
            current: 0
        })
    );
    assert_eq!(timeline.highest_signal(), 1);
    assert_eq!(timeline.value().unwrap(), 0);
    gate.signal_host(1).unwrap();
    timeline.wait_host(1, WAIT).unwrap();
    timeline.signal_host(2).unwrap();
    assert_eq!(timeline.value().unwrap(), 2);
    common::assert_clean(&ctx);
}
