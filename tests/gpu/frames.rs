//! CUDA writes and Vulkan reads ordered by the frame pacer, frame after frame, on a real GPU:
//! CUDA writes the frame number into every element of a large shared buffer, a Vulkan compute
//! shader counts the elements that differ from the frame it expects. Negative controls remove
//! one wait and must see wrong data. Skips with a printed reason where there is no GPU.

use cuvk_dev::assert_err;
use cuvk_dev::checker;
use cuvk_dev::kernels;
use cuvk_dev::testing as common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use checker::Checker;
use cuvk::ash::vk;
use cuvk::cuda::{CudaSemaphoreType, ExternalSemaphore};
use cuvk::vulkan::{Semaphore, SemaphoreDesc, SemaphoreKind, SemaphoreOp};
use cuvk::{import_semaphore, AcquireWait, Bridge, Error, FramePacer};

/// Imports `s` into CUDA as `ty`, which may not match its kind (the check under test).
fn import_as(
    bridge: &Bridge,
    s: &Arc<Semaphore>,
    ty: CudaSemaphoreType,
) -> cuvk::Result<ExternalSemaphore> {
    // SAFETY: a fresh export of `s`; the ledger is its own; the Arc keeps it alive. A type
    // that does not match its kind is refused before the driver sees the handle.
    unsafe {
        ExternalSemaphore::import(
            bridge.cuda(),
            s.export()?,
            ty,
            s.ledger().clone(),
            Some(s.clone()),
        )
    }
}
use kernels::Kernels;

const ELEMENTS: usize = 4 << 20; // 16 MiB per slot

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    None,
    /// CUDA does not wait for Vulkan to release the slot before overwriting it.
    SkipCudaAcquire,
    /// Vulkan does not wait for CUDA to finish writing before reading.
    SkipVulkanWait,
}

struct Outcome {
    mismatches: u32,
    checks: u32,
    last_bad: u32,
    per_frame_us: f64,
}

fn run_frames(
    bridge: &Bridge,
    k: &Kernels,
    frames_in_flight: u32,
    frames: u64,
    fault: Fault,
    acquire: AcquireWait,
) -> Outcome {
    let ctx = bridge.vulkan();
    let stream = bridge.cuda().new_stream().unwrap();
    // The fault's acquire goes to a stream the kernel does not run on: the pacer's state
    // machine is satisfied, the kernel's stream does not wait for Vulkan.
    let elsewhere = bridge.cuda().new_stream().unwrap();
    let mut pacer = FramePacer::new(bridge, frames_in_flight).unwrap();
    pacer.set_acquire_wait(acquire);
    let slots = checker::slots(bridge, frames_in_flight, ELEMENTS).unwrap();
    let result = checker::result_buffer(ctx).unwrap();
    let checker = Checker::new(bridge, &slots, &result, pacer.command_slots()).unwrap();

    let t = Instant::now();
    for _ in 0..frames {
        let frame = pacer.begin_frame().unwrap();
        let slot = &slots[frame.slot()];
        let acquire_on = if fault == Fault::SkipCudaAcquire {
            &elsewhere
        } else {
            &stream
        };
        pacer.cuda_acquire(&frame, acquire_on).unwrap();
        k.fill(
            &stream,
            slot.kernel_arg(),
            ELEMENTS as u64,
            frame.number() as u32,
        )
        .unwrap();
        pacer.cuda_release(&frame, &stream).unwrap();
        // SAFETY: begin_frame freed the command slot; the set was made for this slot.
        let cmd = unsafe {
            checker.record(
                frame.command_slot(),
                frame.slot(),
                frame.number() as u32,
                Some(slot),
            )
        }
        .unwrap();
        let stage = vk::PipelineStageFlags::COMPUTE_SHADER;
        // SAFETY: the command buffer and everything it uses live until wait_idle below.
        unsafe {
            if fault == Fault::SkipVulkanWait {
                let signal = [pacer.vulkan_done(), pacer.frames_complete()].map(|s| SemaphoreOp {
                    semaphore: s,
                    value: frame.number(),
                    stage: vk::PipelineStageFlags::empty(),
                });
                ctx.submit_with_semaphores(&[cmd], &[], &signal, vk::Fence::null())
                    .unwrap();
            } else {
                pacer
                    .vulkan_submit(&frame, &cuvk::FrameSubmit::new(&[cmd], stage))
                    .unwrap();
            }
        }
    }
    pacer.wait_idle(Duration::from_secs(60)).unwrap();
    stream.synchronize().unwrap();
    let per_frame_us = t.elapsed().as_secs_f64() * 1e6 / frames as f64;
    drop(checker);
    let (mismatches, checks, last_bad) = checker::read_result(&result).unwrap();
    common::assert_clean(ctx);
    Outcome {
        mismatches,
        checks,
        last_bad,
        per_frame_us,
    }
}

/// `frames` frames at K = 1, 2, 3 with CUDA's acquire waited for as `acquire` says: every
/// element Vulkan checks is the frame's own.
fn k1_to_k3_read_exactly(test: &str, frames: u64, acquire: AcquireWait) {
    let _serial = common::serial();
    let Some(bridge) = common::bridge(test) else {
        return;
    };
    let k = Kernels::load(bridge.cuda()).unwrap();
    for frames_in_flight in 1..=3 {
        let o = run_frames(&bridge, &k, frames_in_flight, frames, Fault::None, acquire);
        eprintln!(
            "{acquire:?} acquire, K={frames_in_flight}: {frames} frames of {} MiB, {} checks, {} \
             mismatching elements, {:.1} us/frame",
            (ELEMENTS * 4) >> 20,
            o.checks,
            o.mismatches,
            o.per_frame_us
        );
        assert_eq!(u64::from(o.checks), frames, "Vulkan ran a check per frame");
        assert_eq!(
            o.mismatches, 0,
            "K={frames_in_flight}: Vulkan read data of another frame (last bad value {})",
            o.last_bad
        );
    }
}

#[test]
fn ten_thousand_frames_k1_to_k3_read_exactly_what_cuda_wrote() {
    k1_to_k3_read_exactly("ten_thousand_frames", 10_000, AcquireWait::Gpu);
}

/// The pacer with CUDA's acquire waited for on the host (`AcquireWait::Host`, no CUDA
/// semaphore wait outstanding): the same frames, read exactly.
#[test]
fn host_wait_acquire_reads_exactly_what_cuda_wrote() {
    k1_to_k3_read_exactly("host_wait_acquire", 3_000, AcquireWait::Host);
}

/// The negative controls: each wait removed once must make the check see wrong data,
/// showing the test above can fail.
#[test]
fn removing_either_wait_is_caught() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("removing_either_wait_is_caught") else {
        return;
    };
    let k = Kernels::load(bridge.cuda()).unwrap();
    for (fault, kk) in [
        (Fault::SkipVulkanWait, 1),
        (Fault::SkipCudaAcquire, 1),
        (Fault::SkipCudaAcquire, 2),
    ] {
        let o = run_frames(&bridge, &k, kk, 2_000, fault, AcquireWait::Gpu);
        eprintln!(
            "{fault:?} K={kk}: {} checks, {} mismatching elements (last bad value {})",
            o.checks, o.mismatches, o.last_bad
        );
        assert!(o.mismatches > 0, "{fault:?} with K={kk} went unnoticed");
    }
}

#[test]
fn semaphore_bad_inputs() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("semaphore_bad_inputs") else {
        return;
    };
    let ctx = bridge.vulkan();
    let stream = bridge.cuda().new_stream().unwrap();
    // A binary semaphore imported as a timeline is refused before the driver.
    let binary = Semaphore::new(
        ctx,
        SemaphoreDesc {
            kind: SemaphoreKind::Binary,
            exportable: true,
        },
    )
    .unwrap();
    assert_err!(
        import_as(&bridge, &binary, CudaSemaphoreType::Timeline),
        Error::Sync(cuvk::SyncError::ImportKind { timeline: false })
    );
    let timeline = Semaphore::new(ctx, SemaphoreDesc::SHARED_TIMELINE).unwrap();
    assert_err!(
        import_as(&bridge, &timeline, CudaSemaphoreType::Binary),
        Error::Sync(cuvk::SyncError::ImportKind { timeline: true })
    );
    // Timeline values must increase across APIs: CUDA's signal is refused once Vulkan
    // scheduled the same value.
    let imported = import_semaphore(bridge.cuda(), &timeline).unwrap();
    timeline.signal_host(4).unwrap();
    assert_err!(
        imported.signal(&stream, 4),
        Error::Sync(cuvk::SyncError::TimelineNotIncreasing { value: 4, last: 4 })
    );
    imported.signal(&stream, 5).unwrap();
    timeline.wait_host(5, Duration::from_secs(5)).unwrap();
    // Vulkan -> CUDA: a CUDA wait released by a host signal.
    imported.wait(&stream, 6).unwrap();
    timeline.signal_host(6).unwrap();
    stream.synchronize().unwrap();
    // A host wait on a value never signalled times out instead of hanging.
    assert_err!(
        timeline.wait_host(100, Duration::from_millis(50)),
        Error::Timeout { .. }
    );
    drop(imported);
    common::assert_clean(ctx);
}

/// Dropping the CUDA import while a CUDA wait on it is pending: drop waits for the wait to be
/// satisfied (here by a host signal from another thread) and only then destroys it; if it
/// never is, drop leaks instead of destroying a semaphore in use.
#[test]
fn dropping_a_semaphore_with_a_pending_cuda_wait_is_safe() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("dropping_a_semaphore_with_a_pending_cuda_wait_is_safe")
    else {
        return;
    };
    let ctx = bridge.vulkan();
    let stream = bridge.cuda().new_stream().unwrap();
    let timeline = Semaphore::new(ctx, SemaphoreDesc::SHARED_TIMELINE).unwrap();
    let imported = import_semaphore(bridge.cuda(), &timeline).unwrap();
    imported.wait(&stream, 1).unwrap();
    let signaller = {
        let t = Arc::clone(&timeline);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            t.signal_host(1).unwrap();
        })
    };
    let t = Instant::now();
    drop(imported);
    let waited = t.elapsed();
    signaller.join().unwrap();
    stream.synchronize().unwrap();
    eprintln!("drop waited {waited:?} for the pending CUDA wait");
    assert!(
        waited >= Duration::from_millis(150),
        "drop did not wait for the pending CUDA wait"
    );

    // Never signalled within the drop timeout: leaked, not destroyed; the stream then
    // completes once the value arrives, with the semaphore still alive.
    let mut imported = import_semaphore(bridge.cuda(), &timeline).unwrap();
    imported.set_drop_timeout(Duration::from_millis(100));
    imported.wait(&stream, 2).unwrap();
    drop(imported);
    timeline.signal_host(2).unwrap();
    stream.synchronize().unwrap();
    common::assert_clean(ctx);
}

#[test]
fn a_semaphore_imported_into_a_second_vkdevice_shares_its_payload() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("semaphore_import") else {
        return;
    };
    let a = bridge.vulkan();
    let b = cuvk::vulkan::VulkanContext::new(cuvk::vulkan::VulkanConfig {
        validation: cuvk::vulkan::Validation::Required,
        device: cuvk::vulkan::DeviceChoice::Uuid(a.info().device_uuid),
        ..Default::default()
    })
    .unwrap();
    let kind = SemaphoreKind::Timeline { initial: 0 };
    let sem_a = Semaphore::new(a, SemaphoreDesc::SHARED_TIMELINE).unwrap();
    // SAFETY: a fresh export of a timeline semaphore on the same GPU and driver.
    let sem_b = unsafe { Semaphore::import(&b, sem_a.export().unwrap(), kind) }.unwrap();
    sem_a.signal_host(5).unwrap();
    assert_eq!(sem_b.value().unwrap(), 5, "device B sees device A's signal");
    let signal = [SemaphoreOp {
        semaphore: &sem_b,
        value: 7,
        stage: vk::PipelineStageFlags::empty(),
    }];
    // SAFETY: an empty submission; the semaphore outlives the wait below.
    unsafe { b.submit_with_semaphores(&[], &[], &signal, vk::Fence::null()) }.unwrap();
    sem_a.wait_host(7, Duration::from_secs(5)).unwrap();
    common::assert_clean(&b);
    common::assert_clean(a);
}

/// A refused frame submission leaves every timeline as it was, and the same frame then
/// submits; CUDA waiting on the next frames is released (in 0.1 the refused call kept
/// `vulkan_done = N` reserved, so frame N could never be submitted and CUDA waited forever).
#[test]
fn refused_frame_submission_changes_nothing_and_the_frame_then_submits() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("refused_frame_submission_changes_nothing") else {
        return;
    };
    let ctx = bridge.vulkan();
    let stream = bridge.cuda().new_stream().unwrap();
    let mut pacer = FramePacer::new(&bridge, 1).unwrap();
    let extra = Semaphore::new(ctx, SemaphoreDesc::LOCAL_TIMELINE).unwrap();
    extra.signal_host(3).unwrap();
    for expected in 1..=3u64 {
        let frame = pacer.begin_frame().unwrap();
        assert_eq!(frame.number(), expected);
        pacer.cuda_acquire(&frame, &stream).unwrap();
        pacer.cuda_release(&frame, &stream).unwrap();
        let stale = [SemaphoreOp {
            semaphore: &extra,
            value: 3, // already scheduled: refused
            stage: vk::PipelineStageFlags::empty(),
        }];
        let stage = vk::PipelineStageFlags::ALL_COMMANDS;
        // SAFETY: no command buffers; refused before the driver.
        let res = unsafe {
            pacer.vulkan_submit(&frame, &cuvk::FrameSubmit::new(&[], stage).signals(&stale))
        };
        assert_err!(
            res,
            Error::Sync(cuvk::SyncError::TimelineNotIncreasing { value: 3, last: 3 })
        );
        assert_eq!(pacer.vulkan_done().highest_signal(), expected - 1);
        assert_eq!(pacer.frames_complete().highest_signal(), expected - 1);
        // The engine's own submission path is checked the same way, before it submits.
        let infos = pacer
            .frame_semaphores(&frame, vk::PipelineStageFlags2::ALL_COMMANDS)
            .unwrap();
        assert_eq!(infos.waits[0].value, expected);
        assert!(infos.signals.iter().all(|s| s.value == expected));
        // SAFETY: no command buffers; the pacer outlives the submission (waited below).
        unsafe { pacer.vulkan_submit(&frame, &cuvk::FrameSubmit::new(&[], stage)) }.unwrap();
    }
    pacer.wait_idle(Duration::from_secs(5)).unwrap();
    stream.synchronize().unwrap();
    common::assert_clean(ctx);
}
