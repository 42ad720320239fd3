//! Every wait a caller gives a timeout honours it when what it waits for sits behind CUDA work
//! that is *running* (a kernel spinning on the GPU's timer, released to Vulkan), not only
//! behind a gate nobody signals: the host wait for the release, Vulkan work queued behind it,
//! the frame pacer's host waits, the one-shot helpers. Each step prints how long it took; the
//! assertions are on what it returned (a timeout, not data), never on times.

use cuvk_dev::kernels::Kernels;
use cuvk_dev::testing as common;

use std::time::{Duration, Instant};

use cuvk::ash::vk;
use cuvk::{AcquireWait, BufferUsage, Error, FramePacer, FrameSubmit, SharedBuffer, StreamOrder};

/// How long the kernel spins: far longer than any timeout below (`CUVK_SPIN_SECONDS` for a
/// longer one, to look at a call that blocks with a debugger).
fn spin_time() -> Duration {
    let seconds = std::env::var("CUVK_SPIN_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    Duration::from_secs(seconds)
}
/// The timeout every call under test is given.
const SHORT: Duration = Duration::from_millis(250);

/// Runs `step`, prints how long it took, returns what it returned.
fn timed<R>(what: &str, step: impl FnOnce() -> R) -> R {
    let t = Instant::now();
    let r = step();
    eprintln!("  {what}: {:.1?}", t.elapsed());
    r
}

fn assert_timeout<T: std::fmt::Debug>(what: &str, r: cuvk::Result<T>) {
    assert!(
        matches!(r, Err(Error::Timeout { .. })),
        "{what} behind a running CUDA stream returned {r:?}, not a timeout"
    );
}

/// How the stream keeps running: one thread, or every SM busy.
#[derive(Clone, Copy, Debug)]
enum Spin {
    OneThread,
    EverySm,
}

impl Spin {
    fn launch(self, k: &Kernels, stream: &std::sync::Arc<cuvk::cudarc::driver::CudaStream>) {
        match self {
            Spin::OneThread => k.spin(stream, spin_time()),
            Spin::EverySm => k.spin_all(stream, spin_time()),
        }
        .unwrap();
    }
}

#[test]
fn waits_behind_a_running_released_stream_honour_their_timeouts() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("waits_behind_a_running_released_stream") else {
        return;
    };
    let k = Kernels::load(bridge.cuda()).unwrap();
    for spin in [Spin::OneThread, Spin::EverySm] {
        waits_behind(&bridge, &k, spin);
    }
}

fn waits_behind(bridge: &cuvk::Bridge, k: &Kernels, spin: Spin) {
    let ctx = bridge.vulkan();
    let stream = bridge.cuda().new_stream().unwrap();
    let order = StreamOrder::new(bridge).unwrap();
    let marks = order.marks();
    let mut buf: SharedBuffer<u32> = bridge
        .create_buffer(1 << 20, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    let other: SharedBuffer<u32> = bridge
        .create_buffer(1 << 20, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    eprintln!(
        "the stream spins {:?} ({spin:?}); every call below is given {SHORT:?}:",
        spin_time()
    );
    timed("spin kernel launched", || spin.launch(k, &stream));
    let released = timed("cuda_release", || order.cuda_release(&[&marks], &stream)).unwrap();
    assert_timeout(
        "StreamOrder::wait_cuda",
        timed("StreamOrder::wait_cuda", || {
            order.wait_cuda(released, SHORT)
        }),
    );
    // Vulkan work queued behind the release: its completion waits for the kernel too.
    // SAFETY: no command buffers.
    let value = timed("vulkan_submit waiting for the release", || unsafe {
        order.vulkan_submit(
            &[&marks],
            &FrameSubmit::new(&[], vk::PipelineStageFlags::ALL_COMMANDS),
        )
    })
    .unwrap();
    assert_timeout(
        "StreamOrder::wait_vulkan",
        timed("StreamOrder::wait_vulkan", || {
            order.wait_vulkan(value, SHORT)
        }),
    );
    // A one-shot copy queued behind that submission: bounded by the drop timeout.
    ctx.set_drop_timeout(SHORT);
    assert_timeout(
        "VulkanContext::copy_buffer",
        timed("copy_buffer (one-shot, drop timeout)", || {
            ctx.copy_buffer(&other, 0, &mut buf, 0, 4096)
        }),
    );
    timed("the spin ends (stream synchronised)", || {
        stream.synchronize()
    })
    .unwrap();
    order.wait_vulkan(value, Duration::from_secs(30)).unwrap();
    // The parked copy finishes: nothing is left wedged.
    let t = Instant::now();
    while ctx.is_wedged() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!ctx.is_wedged(), "the parked copy never completed");
    ctx.set_drop_timeout(cuvk::DEFAULT_DROP_TIMEOUT);
    common::assert_clean(ctx);
}

/// The frame pacer's host waits behind a frame whose CUDA work is still running: waiting for
/// the frame, and (host acquire) for its slot.
#[test]
fn pacer_waits_behind_a_running_frame_honour_their_timeouts() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("pacer_waits_behind_a_running_frame") else {
        return;
    };
    let k = Kernels::load(bridge.cuda()).unwrap();
    for spin in [Spin::OneThread, Spin::EverySm] {
        eprintln!("the frame's stream spins {:?} ({spin:?}):", spin_time());
        pacer_waits_behind(&bridge, &k, spin);
    }
}

fn pacer_waits_behind(bridge: &cuvk::Bridge, k: &Kernels, spin: Spin) {
    let stream = bridge.cuda().new_stream().unwrap();
    let mut pacer = FramePacer::new(bridge, 1).unwrap();
    pacer.set_acquire_wait(AcquireWait::Host);
    pacer.set_slot_timeout(SHORT);
    let stage = vk::PipelineStageFlags::ALL_COMMANDS;
    let first = pacer.begin_frame().unwrap();
    pacer.cuda_acquire(&first, &stream).unwrap();
    spin.launch(k, &stream);
    timed("pacer cuda_release", || pacer.cuda_release(&first, &stream)).unwrap();
    // SAFETY: no command buffers.
    timed("pacer vulkan_submit", || unsafe {
        pacer.vulkan_submit(&first, &FrameSubmit::new(&[], stage))
    })
    .unwrap();
    assert_timeout(
        "FramePacer::wait_frame",
        timed("FramePacer::wait_frame", || pacer.wait_frame(&first, SHORT)),
    );
    let second = pacer.begin_frame().unwrap();
    assert_timeout(
        "FramePacer::cuda_acquire (host wait)",
        timed("FramePacer::cuda_acquire (host)", || {
            pacer.cuda_acquire(&second, &stream)
        }),
    );
    assert_timeout(
        "FramePacer::wait_idle",
        timed("FramePacer::wait_idle", || pacer.wait_idle(SHORT)),
    );
    // The frame that timed out can still be acquired once the spin is over.
    stream.synchronize().unwrap();
    pacer.set_slot_timeout(Duration::from_secs(30));
    pacer.cuda_acquire(&second, &stream).unwrap();
    pacer.cuda_release(&second, &stream).unwrap();
    // SAFETY: no command buffers.
    unsafe { pacer.vulkan_submit(&second, &FrameSubmit::new(&[], stage)) }.unwrap();
    pacer.wait_idle(Duration::from_secs(30)).unwrap();
    common::assert_clean(bridge.vulkan());
}
