//! Fan-out (issue 37, `cuvk::ipc::Publisher` / `Subscriber`, a preview behind `ipc-objects`):
//! one publisher writes frames with CUDA into K slots it owns; consumers attach, hold the
//! newest frame, check every element of it with Vulkan and release it, ordered on the GPU by
//! the publisher's timelines — and the publisher never waits for them on the host. A consumer
//! that leaves mid-stream frees its slot; one that holds without releasing cannot stop the
//! publisher (K = consumers + 2).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cuvk::ash::vk;
use cuvk::ipc::{CudaSubscriber, Publisher, PublisherDesc, Subscriber};
use cuvk::vulkan::AsVkBuffer;
use cuvk::{ElementFormat, FrameSubmit};
use cuvk_dev::checker::{self, Checker};
use cuvk_dev::kernels::Kernels;
use cuvk_dev::testing as common;

const ELEMENTS: usize = 1 << 20;
const T: Duration = Duration::from_secs(30);
const U32: ElementFormat = ElementFormat {
    code: ElementFormat::UINT,
    bits: 32,
    lanes: 1,
    columns: 1,
};

/// A consumer: attaches to `name`, holds frames until `stop` (or the publisher goes), checks
/// each with Vulkan; (wrong elements, checks, frames held). `foreign`: as an engine whose
/// queue cannot wait on a semaphore (Bevy on wgpu 29) — a host wait for the write
/// (`wait_written`), its own submission with no semaphores, then the release on an empty
/// batch it submits itself (`release_foreign`).
fn consume_frames(
    name: &str,
    vk: &Arc<cuvk::vulkan::VulkanContext>,
    stop: &AtomicBool,
    foreign: bool,
) -> (u32, u32, u64) {
    let mut sub = Subscriber::attach(name, vk, false, T).unwrap();
    let result = checker::result_buffer(vk).unwrap();
    let slots: Vec<&dyn AsVkBuffer> = sub
        .slots()
        .iter()
        .map(|b| &**b as &dyn AsVkBuffer)
        .collect();
    let checker = Checker::for_buffers(vk, &slots, &result, 2).unwrap();
    drop(slots);
    let mut last: [Option<cuvk::ipc::Held>; 2] = [None, None];
    let mut held_count = 0u64;
    // At least one frame, even if the publisher is done by now (it holds the newest).
    while held_count == 0 || !stop.load(Ordering::Acquire) {
        let held = match sub.hold(Duration::from_millis(200)) {
            Ok(Some(held)) => held,
            Ok(None) => continue,
            Err(cuvk::Error::Ipc(cuvk::ipc::IpcError::PeerClosed { .. })) => break,
            Err(e) => panic!("consumer: {e}"),
        };
        let cs = (held_count % 2) as usize;
        if let Some(prev) = last[cs] {
            sub.wait_read(&prev, T).unwrap();
        }
        let slot = sub.slots()[held.slot()].clone();
        // SAFETY: the command slot's last read is done (waited above); the slots and the
        // checker outlive every submission (waited for below).
        unsafe {
            let cmd = checker
                .record(
                    cs,
                    held.slot(),
                    held.frame() as u32,
                    Some(&*slot as &dyn AsVkBuffer),
                )
                .unwrap();
            let cmds = [cmd];
            if foreign {
                sub.wait_written(&held, T).unwrap();
                vk.submit_with_semaphores(&cmds, &[], &[], checker.fence(cs))
                    .unwrap();
                release_on_empty_batch(&mut sub, vk, &held);
            } else {
                let submit = FrameSubmit {
                    fence: checker.fence(cs),
                    ..FrameSubmit::new(&cmds, vk::PipelineStageFlags::COMPUTE_SHADER)
                };
                sub.submit_read(&held, &submit).unwrap();
            }
        }
        last[cs] = Some(held);
        held_count += 1;
    }
    for prev in last.iter().flatten() {
        sub.wait_read(prev, T).unwrap();
    }
    checker.wait_fenced().unwrap();
    drop(checker);
    let (bad, checks, _) = checker::read_result(&result).unwrap();
    (bad, checks, held_count)
}

/// What an engine's own submission does in `release_foreign`: an empty batch on the queue
/// (locked by cuvk around the call) signalling both semaphores, after the reads submitted.
///
/// # Safety
/// The reads of `held`'s slot are submitted on `vk`'s queue.
unsafe fn release_on_empty_batch(
    sub: &mut Subscriber,
    vk: &cuvk::vulkan::VulkanContext,
    held: &cuvk::ipc::Held,
) {
    let queue = *vk.lock_queue();
    // SAFETY: cuvk holds the queue's lock during the call; the semaphores are alive.
    unsafe {
        sub.release_foreign(held, |progress, (read, value)| {
            let semaphores = [progress.semaphore, read];
            let values = [progress.value, value];
            let mut timeline =
                vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&values);
            let batch = [vk::SubmitInfo::default()
                .signal_semaphores(&semaphores)
                .push_next(&mut timeline)];
            vk.device()
                .queue_submit(queue, &batch, vk::Fence::null())
                .unwrap();
            Ok(())
        })
    }
    .unwrap();
}

fn consume(
    name: String,
    vk: Arc<cuvk::vulkan::VulkanContext>,
    stop: Arc<AtomicBool>,
    foreign: bool,
) -> std::thread::JoinHandle<(u32, u32, u64)> {
    std::thread::spawn(move || consume_frames(&name, &vk, &stop, foreign))
}

/// A consumer in a child process, until it is killed (does nothing as an ordinary test).
#[test]
fn fanout_consumer_child() {
    let Ok(name) = std::env::var("CUVK_FANOUT_CONSUMER") else {
        return;
    };
    let bridge = common::bridge("fanout child").unwrap();
    let (bad, checks, held) =
        consume_frames(&name, bridge.vulkan(), &AtomicBool::new(false), false);
    eprintln!("fanout child: {held} held, {checks} checks, {bad} wrong");
}

/// Publishes `frames` frames into `publisher`'s slots (each element the frame number).
fn publish(
    publisher: &mut Publisher,
    kernels: &Kernels,
    stream: &Arc<cuvk::cudarc::driver::CudaStream>,
    frames: u64,
) {
    for _ in 0..frames {
        let frame = publisher.begin_frame(T).unwrap();
        publisher.acquire(&frame, stream).unwrap();
        let slot = publisher.slot(frame.slot()).unwrap();
        kernels
            .fill(
                stream,
                slot.kernel_arg(),
                ELEMENTS as u64,
                frame.number() as u32,
            )
            .unwrap();
        publisher.release(&frame, stream).unwrap();
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + T;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A consumer killed with SIGKILL while it holds and reads frames: the publisher notices,
/// frees its slot and carries on without waiting; the other consumer never reads a torn
/// frame.
#[test]
fn a_consumer_killed_mid_read_leaves_the_publisher_and_the_others_running() {
    let _g = common::serial();
    let Some(bridge) = common::bridge("fanout_kill") else {
        return;
    };
    let name = format!("gpu-fanout-kill-{}", std::process::id());
    let desc = PublisherDesc {
        slots: 4,
        bytes: (ELEMENTS * 4) as u64,
        element: U32,
    };
    let mut publisher = Publisher::new(&name, &bridge, desc).unwrap();
    let kernels = Kernels::load(bridge.cuda()).unwrap();
    let stream = bridge.cuda().new_stream().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let local = consume(name.clone(), bridge.vulkan().clone(), stop.clone(), false);
    let mut child = common::child_test(
        "fanout::fanout_consumer_child",
        "CUVK_FANOUT_CONSUMER",
        &name,
    )
    .spawn()
    .unwrap();
    wait_for("the consumers never attached", || {
        publisher.consumers() == 2
    });
    publish(&mut publisher, &kernels, &stream, 300);
    child.kill().unwrap(); // SIGKILL, mid-stream
    child.wait().unwrap();
    publish(&mut publisher, &kernels, &stream, 300);
    wait_for("the killed consumer was never noticed", || {
        publisher.consumers() == 1
    });
    publish(&mut publisher, &kernels, &stream, 100);
    stream.synchronize().unwrap();
    stop.store(true, Ordering::Release);
    let (bad, checks, held) = local.join().unwrap();
    eprintln!(
        "fanout_kill: the consumer left held {held} of 700 frames, {checks} checks, {bad} wrong"
    );
    assert_eq!(bad, 0, "a frame being written was read");
    assert!(held > 0 && u64::from(checks) == held);
    drop(publisher);
    common::assert_clean(bridge.vulkan());
}

/// A CUDA consumer on its own thread: holds frames until `stop`, counts each one's wrong
/// elements with a kernel on its stream; (wrong elements, frames held).
fn consume_cuda(
    name: String,
    cuda: Arc<cuvk::cudarc::driver::CudaContext>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(u64, u64)> {
    std::thread::spawn(move || {
        // Compiled before attaching: the publisher starts once every consumer is there.
        let kernels = Kernels::load(&cuda).unwrap();
        let mut sub = CudaSubscriber::attach(&name, &cuda, false, T).unwrap();
        let stream = cuda.new_stream().unwrap();
        let (mut bad, mut held_count) = (0u64, 0u64);
        // At least one frame, even if the publisher is done by now (it holds the newest).
        while held_count == 0 || !stop.load(Ordering::Acquire) {
            let Some(held) = sub.hold(Duration::from_millis(200)).unwrap() else {
                continue;
            };
            sub.acquire(&held, &stream).unwrap();
            let slot = &sub.slots()[held.slot()];
            bad += kernels
                .count_not_equal(
                    &stream,
                    slot.device_ptr_ref(),
                    ELEMENTS as u64,
                    held.frame() as u32,
                )
                .unwrap();
            sub.release(&held, &stream).unwrap();
            held_count += 1;
        }
        stream.synchronize().unwrap();
        (bad, held_count)
    })
}

#[test]
fn a_publisher_serves_consumers_that_hold_the_newest_frame() {
    let _g = common::serial();
    let Some(bridge) = common::bridge("fanout") else {
        return;
    };
    let name = format!("gpu-fanout-{}", std::process::id());
    let desc = PublisherDesc {
        slots: 5, // three consumers + 2
        bytes: (ELEMENTS * 4) as u64,
        element: U32,
    };
    let mut publisher = Publisher::new(&name, &bridge, desc).unwrap();
    let kernels = Kernels::load(bridge.cuda()).unwrap();
    let stream = bridge.cuda().new_stream().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = (0..2)
        // Consumer 1 as an engine whose queue cannot wait (a host wait, its own release).
        .map(|i| consume(name.clone(), bridge.vulkan().clone(), stop.clone(), i == 1))
        .collect();
    let recorder = consume_cuda(name.clone(), bridge.cuda().clone(), stop.clone());
    wait_for("the consumers never attached", || {
        publisher.consumers() == 3
    });
    publish(&mut publisher, &kernels, &stream, 500);
    stream.synchronize().unwrap();
    stop.store(true, Ordering::Release);
    let (bad, held) = recorder.join().unwrap();
    eprintln!("fanout: the CUDA consumer held {held} of 500 frames, {bad} wrong");
    assert_eq!(bad, 0, "the CUDA consumer read a frame being written");
    assert!(held > 0);
    for (i, c) in consumers.into_iter().enumerate() {
        let (bad, checks, held) = c.join().unwrap();
        eprintln!("fanout: consumer {i} held {held} of 500 frames, {checks} checks, {bad} wrong");
        assert_eq!(bad, 0, "consumer {i} read a frame being written");
        assert!(
            held > 0 && u64::from(checks) == held,
            "consumer {i}: {held} held, {checks} checked"
        );
    }
    drop(publisher);
    common::assert_clean(bridge.vulkan());
}

/// Wrong elements seen by one consumer read held back on the GPU (a gate the test opens)
/// while the publisher writes 20 more frames: with the publisher's GPU wait (`acquire`), the
/// slot being read is never written before the read is done; without it (the negative
/// control), the read sees other frames' data.
fn gated_read(bridge: &cuvk::Bridge, gpu_wait: bool) -> u32 {
    use cuvk::vulkan::{Semaphore, SemaphoreDesc, SemaphoreOp};
    let name = format!("gpu-fanout-gate-{gpu_wait}-{}", std::process::id());
    let desc = PublisherDesc {
        slots: 3,
        bytes: (ELEMENTS * 4) as u64,
        element: U32,
    };
    let mut publisher = Publisher::new(&name, bridge, desc).unwrap();
    let kernels = Kernels::load(bridge.cuda()).unwrap();
    let stream = bridge.cuda().new_stream().unwrap();
    let vk = bridge.vulkan();
    let mut sub = Subscriber::attach(&name, vk, false, T).unwrap();
    wait_for("the consumer never attached", || publisher.consumers() == 1);
    publish(&mut publisher, &kernels, &stream, 1);
    let held = sub.hold(T).unwrap().expect("frame 1 to hold");
    let result = checker::result_buffer(vk).unwrap();
    let slots: Vec<&dyn AsVkBuffer> = sub
        .slots()
        .iter()
        .map(|b| &**b as &dyn AsVkBuffer)
        .collect();
    let checker = Checker::for_buffers(vk, &slots, &result, 1).unwrap();
    drop(slots);
    let gate = Semaphore::new(vk, SemaphoreDesc::LOCAL_TIMELINE).unwrap();
    let slot = sub.slots()[held.slot()].clone();
    // SAFETY: the slot, checker and gate live until the read is waited for below; the gate is
    // signalled from the host below.
    unsafe {
        let cmd = checker
            .record(
                0,
                held.slot(),
                held.frame() as u32,
                Some(&*slot as &dyn AsVkBuffer),
            )
            .unwrap();
        let cmds = [cmd];
        let waits = [SemaphoreOp::wait(
            &gate,
            1,
            vk::PipelineStageFlags::COMPUTE_SHADER,
        )];
        let submit = FrameSubmit {
            fence: checker.fence(0),
            waits: &waits,
            ..FrameSubmit::new(&cmds, vk::PipelineStageFlags::COMPUTE_SHADER)
        };
        sub.submit_read(&held, &submit).unwrap();
    }
    // The release reaches the publisher's book before it writes on.
    std::thread::sleep(Duration::from_millis(50));
    for _ in 0..20 {
        let frame = publisher.begin_frame(T).unwrap();
        if gpu_wait {
            publisher.acquire(&frame, &stream).unwrap();
        }
        let s = publisher.slot(frame.slot()).unwrap();
        kernels
            .fill(
                &stream,
                s.kernel_arg(),
                ELEMENTS as u64,
                frame.number() as u32,
            )
            .unwrap();
        publisher.release(&frame, &stream).unwrap();
    }
    if gpu_wait {
        // The stream waits on the GPU for the gated read: open the gate first.
        gate.signal_host(1).unwrap();
        stream.synchronize().unwrap();
    } else {
        stream.synchronize().unwrap();
        gate.signal_host(1).unwrap();
    }
    sub.wait_read(&held, T).unwrap();
    checker.wait_fenced().unwrap();
    drop(checker);
    let (bad, checks, _) = checker::read_result(&result).unwrap();
    assert_eq!(checks, 1);
    drop(sub);
    drop(publisher);
    bad
}

#[test]
fn a_slow_read_is_never_overwritten_and_the_control_shows_it_would_be() {
    let _g = common::serial();
    let Some(bridge) = common::bridge("fanout_gate") else {
        return;
    };
    let ordered = gated_read(&bridge, true);
    let control = gated_read(&bridge, false);
    eprintln!("fanout_gate: {ordered} wrong with the publisher's GPU wait, {control} without");
    assert_eq!(ordered, 0, "the publisher wrote a slot being read");
    assert!(
        control > 0,
        "the negative control saw no overwrite: the test cannot fail"
    );
    common::assert_clean(bridge.vulkan());
}
