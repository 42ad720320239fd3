//! Semaphores on the Vulkan side alone (any Vulkan device; lavapipe in CI), under the
//! validation layer: the clear `Unsupported`-style error where export is missing, timeline
//! values, host signal/wait, timeouts, and non-increasing values or too large jumps refused
//! before the driver.

use cuvk_dev::assert_err;
use cuvk_dev::testing as common;

use std::time::{Duration, Instant};

use cuvk::ash::vk;
use cuvk::vulkan::{Semaphore, SemaphoreDesc, SemaphoreKind, SemaphoreOp, VulkanContext};
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

    // A jump beyond what every device accepts (2^31 - 1 over the counter) is refused before
    // the driver (NVIDIA ignored such a host signal), both host signals alike; the counter
    // stays, and a jump of exactly the bound works.
    let far = 10 + (1u64 << 31);
    let e = assert_err!(
        s.signal_host(far),
        Error::Sync(cuvk::SyncError::TimelineJumpTooLarge {
            current: 10,
            max: 2_147_483_647,
            ..
        })
    );
    assert!(e.to_string().contains(&far.to_string()), "{e}");
    assert_eq!(
        e.rule().map(|r| r.name()),
        Some("Sync.TimelineJumpTooLarge")
    );
    assert_err!(
        s.release_after_peer_lost(1 << 62),
        Error::Sync(cuvk::SyncError::TimelineJumpTooLarge { current: 10, .. })
    );
    assert_eq!(s.value().unwrap(), 10, "nothing changed");
    s.signal_host(10 + 2_147_483_647).unwrap();
    assert_eq!(s.value().unwrap(), 10 + 2_147_483_647);
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

/// An empty submission that waits for value 1 of `gate` (nobody has signalled it yet), then
/// makes `signals`: it holds the queue until the gate opens.
fn submit_behind(ctx: &VulkanContext, gate: &Semaphore, signals: &[SemaphoreOp<'_>]) {
    let wait = [SemaphoreOp::wait(
        gate,
        1,
        vk::PipelineStageFlags::ALL_COMMANDS,
    )];
    // SAFETY: no command buffers; the semaphores outlive the submission (a semaphore's drop
    // waits for, or parks until, the submissions that used it).
    unsafe { ctx.submit_with_semaphores(&[], &wait, signals, vk::Fence::null()) }.unwrap();
}

/// A one-shot copy queued behind a submission that waits for a value nobody has signalled
/// yet: the copy returns its timeout on time, what it copies stays alive (parked) while the
/// GPU may use it, and once the gate opens the copy runs, everything parked is freed and the
/// next copy works.
#[test]
fn a_one_shot_copy_behind_a_stuck_queue_times_out_on_time_and_parks() {
    let _shared = common::shared();
    let test = "a_one_shot_copy_behind_a_stuck_queue_times_out_on_time_and_parks";
    let Some(ctx) = common::vulkan(test) else {
        return;
    };
    use cuvk::vulkan::HostBuffer;
    let timeout = Duration::from_millis(300);
    ctx.set_drop_timeout(timeout);
    let words: Vec<u32> = (0..1024u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let mut src = HostBuffer::new(&ctx, 4096, vk::BufferUsageFlags::empty()).unwrap();
    src.write(&words).unwrap();
    let mut dst = HostBuffer::new(&ctx, 4096, vk::BufferUsageFlags::empty()).unwrap();
    let gate = Semaphore::new(&ctx, local(TIMELINE)).unwrap();
    submit_behind(&ctx, &gate, &[]);
    let start = Instant::now();
    let e = assert_err!(
        ctx.copy_buffer(&src, 0, &mut dst, 0, 4096),
        Error::Timeout { .. }
    );
    let took = start.elapsed();
    assert!(
        took >= timeout && took < timeout + Duration::from_secs(2),
        "took {took:?} for a timeout of {timeout:?}: {e}"
    );
    // Parked: the source's memory is still the copy's, so no host write may change it.
    assert!(ctx.is_wedged());
    assert_err!(src.write(&words), Error::Memory(_));
    // Dropping the destination frees nothing the GPU may still write: the copy keeps it.
    drop(dst);
    gate.signal_host(1).unwrap();
    let start = Instant::now();
    while ctx.is_wedged() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the copy never ran"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Freed: the source is writable again, and the next copy runs and is exact.
    src.write(&words).unwrap();
    let mut dst = HostBuffer::new(&ctx, 4096, vk::BufferUsageFlags::empty()).unwrap();
    ctx.copy_buffer(&src, 0, &mut dst, 0, 4096).unwrap();
    assert_eq!(dst.read::<u32>().unwrap(), words);
    drop((src, dst, gate));
    common::assert_clean(&ctx);
}

/// The environment variable that makes [`child_parks_a_semaphore_and_drops_the_device`] run.
const PARK_CHILD: &str = "CUVK_TEST_PARK_CHILD";

/// A semaphore whose drop gives up (its scheduled signal sits behind a wait nobody has
/// signalled yet) is parked, then destroyed once its work ran, before the device: run as a
/// child process whose validation messages, device destruction included, go to stderr.
#[test]
#[ignore = "run as a child process by a_semaphore_whose_drop_gives_up_is_destroyed_once_its_work_ran"]
fn child_parks_a_semaphore_and_drops_the_device() {
    if std::env::var_os(PARK_CHILD).is_none() {
        return;
    }
    cuvk_dev::logger::init();
    let Some(ctx) = common::vulkan("park child") else {
        std::process::exit(3);
    };
    let timeout = Duration::from_millis(200);
    ctx.set_drop_timeout(timeout);
    let gate = Semaphore::new(&ctx, local(TIMELINE)).unwrap();
    let late = Semaphore::new(&ctx, local(TIMELINE)).unwrap();
    submit_behind(&ctx, &gate, &[SemaphoreOp::signal(&late, 1)]);
    let t = Instant::now();
    drop(late); // its signal is scheduled but cannot run: the drop waits the timeout, parks
    let took = t.elapsed();
    assert!(took >= timeout, "the drop returned after {took:?}");
    assert!(ctx.is_wedged(), "the semaphore was not parked");
    gate.signal_host(1).unwrap();
    let t = Instant::now();
    while ctx.is_wedged() {
        assert!(t.elapsed() < Duration::from_secs(30), "never unparked");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The next semaphore works, and the drop of one whose work ran does not wait.
    let next = Semaphore::new(&ctx, local(TIMELINE)).unwrap();
    next.signal_host(1).unwrap();
    next.wait_host(1, Duration::from_secs(5)).unwrap();
    drop((next, gate));
    assert!(!ctx.is_wedged());
    common::assert_clean(&ctx);
    drop(ctx); // the validation layer reports any object not destroyed
    println!("CHILD dropped the device");
}

#[test]
fn a_semaphore_whose_drop_gives_up_is_destroyed_once_its_work_ran() {
    let _shared = common::shared();
    let out = common::child_test(
        "semaphore::child_parks_a_semaphore_and_drops_the_device",
        PARK_CHILD,
        "1",
    )
    .arg("--ignored")
    .output()
    .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    if out.status.code() == Some(3) {
        eprintln!("SKIP a_semaphore_whose_drop_gives_up_is_destroyed_once_its_work_ran: no device");
        return;
    }
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("CHILD dropped the device"), "{stdout}");
    // 0.3 never destroyed such a semaphore: the layer reported it at vkDestroyDevice.
    assert!(
        !stderr.contains("vulkan validation"),
        "validation messages:\n{stderr}"
    );
}
