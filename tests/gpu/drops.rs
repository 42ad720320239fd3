//! Nothing hangs, and memory comes back (issue 18, item 7).
//!
//! Drops are bounded by the context's one drop timeout (`VulkanContext::set_drop_timeout`): a
//! drop whose GPU work never finishes returns after it, logs an error and parks (leaks) what
//! the GPU may still touch; later drops on the same context do not wait (the context is
//! *wedged*) and park what they free; the next valid call works; and once the stuck work
//! finishes, what was parked is freed. The CUDA tests make a stream that waits, with
//! `cuStreamWaitValue32`, for a flag in mapped pinned memory that only the host writes — at
//! the end of the test, or from a watchdog thread if a step under test hangs, so the process
//! always exits and the step shows up as a failure with its time.
//!
//! The image test measures `cuMemGetInfo` around shared images whose surface and texture
//! objects outlive them, stage by stage, and asserts that nothing grows per cycle and that
//! the memory comes back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cuvk_dev::image_kernels::{Geometry, ImageKernels};
use cuvk_dev::kernels::{pattern, Kernels};
use cuvk_dev::testing as common;

use cuvk::ash::vk;
use cuvk::cuda::host::{HostAllocFlags, PinnedBuffer};
use cuvk::cuda::FilterMode;
use cuvk::cudarc::driver::{sys, CudaStream, DevicePtrMut};
use cuvk::vulkan::{SemaphoreKind, SemaphoreOp, VulkanContext};
use cuvk::{
    Bridge, BufferUsage, Dedicated, ImageDesc, ImageKind, SharedBuffer, StagingBuffer,
    TextureLevels, TextureOptions,
};

/// The drop timeout the tests set.
const TIMEOUT: Duration = Duration::from_secs(1);
/// What a bounded drop may take beyond the timeout (polling, logging, a loaded machine).
const MARGIN: Duration = Duration::from_secs(2);
/// A step that must not wait at all (a drop on a wedged context, a valid call).
const QUICK: Duration = Duration::from_millis(1500);
/// When the watchdog releases a stuck stream (a step under test hangs).
const WATCHDOG: Duration = Duration::from_secs(30);
/// u32 elements per buffer: 16 MiB, so a leak shows in `cuMemGetInfo`.
const N: usize = 4 << 20;
/// Slack in free-memory comparisons (2 MiB pages, driver bookkeeping).
const TOLERANCE: usize = 8 << 20;

/// Free device memory (`cuMemGetInfo`), in bytes.
fn cuda_free(bridge: &Bridge) -> usize {
    bridge.cuda().bind_to_thread().unwrap();
    cuvk::cudarc::driver::result::mem_get_info().unwrap().0
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// Runs `step`, failing with its name if it took longer than `limit`.
fn timed<R>(what: &str, limit: Duration, step: impl FnOnce() -> R) -> R {
    let t = Instant::now();
    let r = step();
    let took = t.elapsed();
    eprintln!("{what}: {took:.2?}");
    assert!(took < limit, "{what} took {took:.2?} (limit {limit:.2?})");
    r
}

/// A CUDA stream stuck on `cuStreamWaitValue32(flag >= 1)`, the flag in device-mapped pinned
/// memory that only the host writes ([`Self::release`]); a watchdog thread writes it after
/// [`WATCHDOG`] if the test has not, so that a step that hangs in the driver behind the stream
/// returns (and fails on its time) instead of hanging the run.
struct Stuck {
    stream: Arc<CudaStream>,
    flag: PinnedBuffer<u32>,
    stop: Arc<AtomicBool>,
    fired: Arc<AtomicBool>,
    watchdog: Option<JoinHandle<()>>,
}

/// The flag's host address, for the watchdog thread.
struct FlagPtr(*mut u32);
// SAFETY: the pinned memory outlives the watchdog (joined before the buffer drops); the flag
// is only written with volatile stores.
unsafe impl Send for FlagPtr {}

impl FlagPtr {
    fn raise(&self) {
        // SAFETY: a live, device-mapped pinned u32 (see above); the GPU only reads it.
        unsafe { std::ptr::write_volatile(self.0, 1) };
        std::sync::atomic::fence(Ordering::SeqCst);
    }
}

impl Stuck {
    fn new(bridge: &Bridge) -> Self {
        let ctx = bridge.cuda();
        let flags = HostAllocFlags {
            device_map: true,
            ..HostAllocFlags::default()
        };
        let flag = PinnedBuffer::<u32>::new(ctx, 1, flags).unwrap();
        let device_flag = flag.device_ptr().expect("a device-mapped flag");
        // Made before anything waits: cudarc synchronises the context when its first stream
        // is created.
        let stream = ctx.new_stream().unwrap();
        // SAFETY: a live stream of this context; the flag is device-mapped pinned memory that
        // lives until the stream has passed the wait (Drop).
        unsafe {
            sys::cuStreamWaitValue32_v2(
                stream.cu_stream(),
                device_flag,
                1,
                sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
            )
        }
        .result()
        .expect("cuStreamWaitValue32 on mapped pinned memory");
        let stop = Arc::new(AtomicBool::new(false));
        let fired = Arc::new(AtomicBool::new(false));
        let host = FlagPtr(flag.host_ptr());
        let (s, f) = (stop.clone(), fired.clone());
        let watchdog = std::thread::spawn(move || {
            let start = Instant::now();
            while !s.load(Ordering::SeqCst) {
                if start.elapsed() >= WATCHDOG {
                    eprintln!("WATCHDOG: a step hung behind the stuck stream; releasing it");
                    f.store(true, Ordering::SeqCst);
                    host.raise();
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Self {
            stream,
            flag,
            stop,
            fired,
            watchdog: Some(watchdog),
        }
    }

    /// Enqueues behind the wait a write of all of `buf` (through cudarc's stream contract, so
    /// its write event is recorded behind the wait too).
    fn write_behind(&self, buf: &mut SharedBuffer<u32>) {
        let n = buf.len();
        let (ptr, _record) = buf.device_ptr_mut(&self.stream);
        // SAFETY: `ptr` is the buffer's live mapping of n u32s, ordered on this stream.
        unsafe { sys::cuMemsetD32Async(ptr, 7, n, self.stream.cu_stream()) }
            .result()
            .unwrap();
    }

    /// Whether the stream has passed the wait and everything behind it.
    fn done(&self) -> bool {
        // SAFETY: a live stream.
        unsafe { sys::cuStreamQuery(self.stream.cu_stream()) }.result()
            != Err(cuvk::cudarc::driver::DriverError(
                sys::cudaError_enum::CUDA_ERROR_NOT_READY,
            ))
    }

    /// Writes the flag and waits (at most 10 s) until the stream has run everything.
    fn release(&mut self) {
        FlagPtr(self.flag.host_ptr()).raise();
        self.stop.store(true, Ordering::SeqCst);
        if let Some(w) = self.watchdog.take() {
            let _ = w.join();
        }
        let t = Instant::now();
        while !self.done() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether the watchdog had to release the stream (some step hung).
    fn watchdog_fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Drop for Stuck {
    fn drop(&mut self) {
        self.release();
    }
}

/// A bridge with the drop timeout set to [`TIMEOUT`] and the library's log on stderr.
fn bridge(test: &str) -> Option<Bridge> {
    cuvk_dev::logger::init();
    let bridge = common::bridge(test)?;
    bridge.vulkan().set_drop_timeout(TIMEOUT);
    Some(bridge)
}

#[test]
fn shared_buffers_behind_a_stuck_stream_drop_within_one_timeout_and_the_bridge_still_works() {
    let _serial = common::serial();
    let Some(bridge) = bridge("shared_buffers_behind_a_stuck_stream") else {
        return;
    };
    let vk = bridge.vulkan().clone();
    let k = Kernels::load(bridge.cuda()).unwrap();
    bridge.cuda().synchronize().unwrap();
    let baseline = cuda_free(&bridge);
    let mut stuck = Stuck::new(&bridge);
    let mut bufs: Vec<SharedBuffer<u32>> = (0..4)
        .map(|_| {
            bridge
                .create_buffer(N, BufferUsage::STORAGE_BUFFER)
                .unwrap()
        })
        .collect();
    for b in &mut bufs {
        stuck.write_behind(b);
    }

    // The first drop waits the timeout, gives up, logs and parks its memory.
    let first = bufs.remove(0);
    let t = Instant::now();
    drop(first);
    let took = t.elapsed();
    eprintln!("first drop behind the stuck stream: {took:.2?}");
    assert!(
        took >= TIMEOUT.mul_f32(0.9) && took < TIMEOUT + MARGIN,
        "first drop took {took:.2?} (timeout {TIMEOUT:?})"
    );
    assert!(vk.is_wedged(), "the context is not wedged after a give-up");
    // Later drops on the wedged context do not wait: three drops cost no timeout at all.
    timed("three more drops on the wedged context", QUICK, || {
        drop(bufs)
    });

    // The next valid calls work while the stream is still stuck.
    let mut fresh: SharedBuffer<u32> = timed("a new buffer", QUICK, || {
        bridge
            .create_buffer(N, BufferUsage::STORAGE_BUFFER)
            .unwrap()
    });
    timed("a kernel on the bridge's stream, read back", QUICK, || {
        k.write_pattern(bridge.stream(), fresh.kernel_arg(), N as u64, 11)
            .unwrap();
        let back = fresh.cuda_read().unwrap();
        assert!(back.iter().enumerate().all(|(i, &v)| v == pattern(i, 11)));
    });
    timed("a CUDA write and read", QUICK, || {
        fresh.cuda_write(&vec![5; N]).unwrap();
        assert!(fresh.cuda_read().unwrap().iter().all(|&v| v == 5));
    });
    // Finished, but dropped while the context is wedged: parked, not freed (no wait).
    timed(
        "dropping a finished buffer on the wedged context",
        QUICK,
        || drop(fresh),
    );
    assert!(
        !stuck.watchdog_fired(),
        "a step hung behind the stuck stream"
    );

    // The stream finishes: the context is no longer wedged and everything parked is freed.
    stuck.release();
    assert!(
        stuck.done(),
        "the stream did not finish after the flag was written"
    );
    assert!(
        !vk.is_wedged(),
        "still wedged after the stuck work finished"
    );
    drop(stuck);
    bridge.cuda().synchronize().unwrap();
    let after = cuda_free(&bridge);
    eprintln!(
        "CUDA free: {:.1} MiB before, {:.1} MiB after (5 buffers of {:.1} MiB were parked)",
        mib(baseline),
        mib(after),
        mib(N * 4)
    );
    assert!(
        after + TOLERANCE >= baseline,
        "parked buffers not freed: {:.1} MiB missing",
        mib(baseline - after)
    );
    common::assert_clean(&vk);
}

#[test]
fn staging_buffer_behind_a_stuck_copy_drops_within_the_timeout() {
    let _serial = common::serial();
    let Some(bridge) = bridge("staging_buffer_behind_a_stuck_copy") else {
        return;
    };
    if !bridge.vulkan().info().capabilities.external_memory_host {
        eprintln!("SKIP staging_buffer_behind_a_stuck_copy: no VK_EXT_external_memory_host");
        return;
    }
    let vk = bridge.vulkan().clone();
    let src: SharedBuffer<u32> = bridge
        .create_buffer(N, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    let bytes = N * 4;
    let mut staging = StagingBuffer::new(
        &bridge,
        bytes,
        HostAllocFlags::default(),
        vk::BufferUsageFlags::TRANSFER_SRC,
    )
    .unwrap();
    let mut stuck = Stuck::new(&bridge);
    // SAFETY: `src` is N u32s of device memory of this context that lives (and is not
    // written) until the stream has finished (it is dropped after `stuck.release()`).
    unsafe { staging.cuda_download_raw(&stuck.stream, src.cuda_ptr(), bytes) }.unwrap();
    let t = Instant::now();
    drop(staging);
    let took = t.elapsed();
    eprintln!("staging drop behind the stuck copy: {took:.2?}");
    assert!(
        took >= TIMEOUT.mul_f32(0.9) && took < TIMEOUT + MARGIN,
        "staging drop took {took:.2?} (timeout {TIMEOUT:?})"
    );
    assert!(vk.is_wedged());
    assert!(
        !stuck.watchdog_fired(),
        "a step hung behind the stuck stream"
    );
    // Measured on the H100 (driver 580): a new pinned allocation (cuMemHostAlloc) waits in
    // the driver until the stuck stream finishes, whoever owns it; so the stream is released
    // first, and then the next valid call must work at once.
    stuck.release();
    assert!(!vk.is_wedged(), "still wedged after the copy finished");
    // A new staging buffer still works (pinned allocation, Vulkan import, a copy).
    timed("a new staging buffer and a copy", QUICK, || {
        let mut again = StagingBuffer::new(
            &bridge,
            bytes,
            HostAllocFlags::default(),
            vk::BufferUsageFlags::TRANSFER_SRC,
        )
        .unwrap();
        again.cuda_download(bridge.stream(), &src).unwrap();
        assert_eq!(again.bytes().unwrap().len(), bytes);
    });
    drop(src);
}

/// The held-out case: a frame submitted to Vulkan waits for a timeline value CUDA scheduled
/// on a stream that never gets there; then everything is dropped. It returns within one
/// timeout (the CUDA import gives up and parks itself, the semaphore and so the context; the
/// buffer's drop then does not wait), and everything is freed once CUDA finishes.
///
/// Needs the semaphore's CUDA import on the context's budget
/// (`interop::semaphore::import_semaphore` → `ExternalSemaphore::share_drop_budget`).
#[test]
fn a_frame_waiting_for_a_stuck_cuda_signal_then_everything_dropped_returns() {
    let _serial = common::serial();
    let Some(bridge) = bridge("a_frame_waiting_for_a_stuck_cuda_signal") else {
        return;
    };
    let vk: Arc<VulkanContext> = bridge.vulkan().clone();
    let mut stuck = Stuck::new(&bridge);
    let sem = bridge
        .create_semaphore(SemaphoreKind::Timeline { initial: 0 })
        .unwrap();
    // CUDA schedules value 1 behind the wait; Vulkan waits for it.
    sem.cuda.signal(&stuck.stream, 1).unwrap();
    let buf: SharedBuffer<u32> = bridge
        .create_buffer(N, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    // SAFETY: no command buffers; the semaphore lives until the submission completes (its
    // import parks it until then).
    unsafe {
        vk.submit_with_semaphores(
            &[],
            &[SemaphoreOp::wait(
                &sem.vulkan,
                1,
                vk::PipelineStageFlags::ALL_COMMANDS,
            )],
            &[],
            vk::Fence::null(),
        )
    }
    .unwrap();

    let t = Instant::now();
    drop(sem);
    drop(buf);
    drop(bridge);
    let took = t.elapsed();
    eprintln!("everything dropped with the frame stuck: {took:.2?}");
    assert!(
        took < TIMEOUT + MARGIN,
        "teardown took {took:.2?}: more than one drop timeout ({TIMEOUT:?}) in all"
    );
    assert!(vk.is_wedged());
    assert!(
        !stuck.watchdog_fired(),
        "a step hung behind the stuck stream"
    );

    // CUDA gets there, then Vulkan: the parked import, semaphore and buffer are freed, and
    // the context drops (it waits for its queue) without a timeout.
    stuck.release();
    let t = Instant::now();
    while vk.is_wedged() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        !vk.is_wedged(),
        "still wedged after CUDA and Vulkan finished"
    );
    drop(stuck);
    timed("the context's drop once everything finished", QUICK, || {
        drop(vk)
    });
}

/// Whether a drop that cuvk has no reason to think is stuck (its own work finished) can be
/// held by the driver behind an unrelated stuck stream: `cuMemFree` synchronises with the
/// whole device in many drivers. The context is not wedged (no drop gave up), so the buffer is
/// freed at once; this measures whether the free returns.
/// A measurement of the driver, not of cuvk: on the H100 (driver 580) the free waited until the
/// stuck stream was released (30 s, by the watchdog). cuvk bounds its own waits; a CUDA free
/// that the driver makes wait for another stream of the context is beyond it (documented on
/// `VulkanContext::set_drop_timeout`). What is checked: the drop returns once the stream
/// finishes, and nothing is left wedged.
#[test]
fn an_unrelated_buffer_drop_while_another_stream_is_stuck() {
    let _serial = common::serial();
    let Some(bridge) = bridge("an_unrelated_buffer_drop_while_another_stream_is_stuck") else {
        return;
    };
    let buf: SharedBuffer<u32> = bridge
        .create_buffer(N, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    let mut stuck = Stuck::new(&bridge);
    let t = Instant::now();
    drop(buf);
    let took = t.elapsed();
    let fired = stuck.watchdog_fired();
    stuck.release();
    eprintln!(
        "an unrelated buffer's drop with another stream stuck: {took:.2?} ({})",
        if fired {
            "the driver's free waited for the stuck stream until the watchdog released it"
        } else {
            "the free did not wait for the stuck stream"
        }
    );
    assert!(!bridge.vulkan().is_wedged());
}

/// Vulkan alone (runs on lavapipe): the queue waits for a timeline value nobody signals (a
/// raw submission, outside cuvk's books); the context's drop returns within the timeout and
/// leaks the device instead of waiting idle forever. The test then signals the value, so the
/// leaked device's queue drains.
#[test]
fn context_drop_with_a_stuck_queue_returns_within_the_timeout() {
    let _shared = common::shared();
    cuvk_dev::logger::init();
    let Some(ctx) = common::vulkan("context_drop_with_a_stuck_queue") else {
        return;
    };
    ctx.set_drop_timeout(TIMEOUT);
    let (device, semaphore) = stuck_queue(&ctx);
    let t = Instant::now();
    drop(ctx);
    let took = t.elapsed();
    eprintln!("context drop with its queue stuck: {took:.2?}");
    // Release the leaked device's queue whatever happened.
    let signal = vk::SemaphoreSignalInfo::default()
        .semaphore(semaphore)
        .value(1);
    // SAFETY: the device was leaked, not destroyed, so it and the semaphore are alive.
    unsafe { device.signal_semaphore(&signal) }.unwrap();
    assert!(
        took >= TIMEOUT.mul_f32(0.9) && took < TIMEOUT + MARGIN,
        "context drop took {took:.2?} (timeout {TIMEOUT:?})"
    );
}

/// A raw submission (outside cuvk's books) on the context's queue that waits for value 1 of a
/// raw timeline semaphore: the queue is stuck until the host signals it. Returns the device's
/// function table and the semaphore (both leaked with the device or destroyed with it).
fn stuck_queue(ctx: &Arc<VulkanContext>) -> (cuvk::ash::Device, vk::Semaphore) {
    let device = ctx.device().clone();
    let mut type_info = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(vk::SemaphoreType::TIMELINE)
        .initial_value(0);
    let info = vk::SemaphoreCreateInfo::default().push_next(&mut type_info);
    // SAFETY: a live device with timeline semaphores.
    let semaphore = unsafe { device.create_semaphore(&info, None) }.unwrap();
    let waits = [semaphore];
    let values = [1u64];
    let stages = [vk::PipelineStageFlags::ALL_COMMANDS];
    let mut timeline = vk::TimelineSemaphoreSubmitInfo::default().wait_semaphore_values(&values);
    let submit = [vk::SubmitInfo::default()
        .wait_semaphores(&waits)
        .wait_dst_stage_mask(&stages)
        .push_next(&mut timeline)];
    let queue = ctx.lock_queue();
    // SAFETY: the queue is locked; the semaphore lives as long as the device.
    unsafe { device.queue_submit(*queue, &submit, vk::Fence::null()) }.unwrap();
    drop(queue);
    (device, semaphore)
}

/// The order in which a shared image and its CUDA objects are dropped.
#[derive(Debug, Clone, Copy)]
enum Order {
    /// The image first, then its surface and textures (they outlive it).
    ImageFirst,
    /// The surface and textures first, then the image.
    ObjectsFirst,
}

/// Creates a `size`² RGBA8 image with a full mip chain, a surface on level 0, a level-0
/// texture and a mip-chain texture, optionally writes level 0 through the surface with a
/// kernel, and drops everything in `order`.
fn image_cycle(bridge: &Bridge, size: u32, order: Order, kernel: Option<&ImageKernels>) {
    let usage = vk::ImageUsageFlags::STORAGE
        | vk::ImageUsageFlags::SAMPLED
        | vk::ImageUsageFlags::TRANSFER_SRC
        | vk::ImageUsageFlags::TRANSFER_DST;
    let desc = ImageDesc {
        kind: ImageKind::D2,
        format: vk::Format::R8G8B8A8_UNORM,
        extent: vk::Extent2D {
            width: size,
            height: size,
        },
        mip_levels: 32 - size.leading_zeros(),
        usage,
        dedicated: Dedicated::Auto,
    };
    let image = bridge.create_image(&desc).unwrap();
    let surface = image.surface(0).unwrap();
    let level_texture = image.texture(&TextureOptions::default()).unwrap();
    let chain_texture = image
        .texture(&TextureOptions {
            levels: TextureLevels::All {
                filter: FilterMode::Linear,
            },
            normalized_coordinates: true,
            filter: FilterMode::Linear,
            ..TextureOptions::default()
        })
        .unwrap();
    if let Some(k) = kernel {
        k.write_pattern(bridge.stream(), &surface, Geometry::of(ImageKind::D2), 3)
            .unwrap();
        bridge.stream().synchronize().unwrap();
    }
    match order {
        Order::ImageFirst => {
            drop(image);
            drop(surface);
            drop(level_texture);
            drop(chain_texture);
        }
        Order::ObjectsFirst => {
            drop((surface, level_texture, chain_texture));
            drop(image);
        }
    }
}

/// Memory comes back when surface and texture objects outlive their `SharedImage`. Prints
/// free memory stage by stage (what is paid once, by whom), then asserts that N cycles in
/// either order do not grow, and that the memory of big images comes back.
#[test]
fn image_memory_comes_back_when_surfaces_and_textures_outlive_the_image() {
    let _serial = common::serial();
    let Some(bridge) = bridge("image_memory_comes_back") else {
        return;
    };
    let settled = |what: &str, since: usize| {
        bridge.cuda().synchronize().unwrap();
        let now = cuda_free(&bridge);
        eprintln!(
            "{what}: free {:.1} MiB ({:+.1} MiB)",
            mib(now),
            (now as f64 - since as f64) / f64::from(1 << 20)
        );
        now
    };
    const BIG: u32 = 4096; // 64 MiB at level 0, ~85 MiB with the chain
    const SMALL: u32 = 256;
    const CYCLES: usize = 16;
    let f0 = settled("before any image of this test", cuda_free(&bridge));
    image_cycle(&bridge, SMALL, Order::ImageFirst, None);
    let f1 = settled("after one small image, image first (no kernel)", f0);
    image_cycle(&bridge, BIG, Order::ImageFirst, None);
    let f2 = settled("after one big image, image first (no kernel)", f1);
    image_cycle(&bridge, SMALL, Order::ObjectsFirst, None);
    let f3 = settled("after one more small image, objects first", f2);
    let k = ImageKernels::load(bridge.cuda()).unwrap();
    let f4 = settled("after loading the image kernels", f3);
    image_cycle(&bridge, SMALL, Order::ImageFirst, Some(&k));
    let f5 = settled("after the first surface kernel launch", f4);
    eprintln!(
        "one-time costs: first images {:.1} MiB, kernel module {:.1} MiB, first launch {:.1} MiB",
        mib(f0.saturating_sub(f3)),
        mib(f3.saturating_sub(f4)),
        mib(f4.saturating_sub(f5))
    );
    for order in [Order::ImageFirst, Order::ObjectsFirst] {
        let before = settled(&format!("before {CYCLES} big cycles, {order:?}"), f5);
        for i in 0..CYCLES {
            image_cycle(&bridge, BIG, order, (i % 2 == 0).then_some(&k));
        }
        let after = settled(&format!("after {CYCLES} big cycles, {order:?}"), before);
        assert!(
            after + TOLERANCE >= before,
            "{order:?}: {:.1} MiB lost over {CYCLES} cycles ({:.1} MiB per cycle)",
            mib(before - after),
            mib(before - after) / CYCLES as f64
        );
    }
    // Whatever one big image held is back (one-time driver state aside: the small images
    // and the kernel paid it above).
    image_cycle(&bridge, SMALL, Order::ImageFirst, None);
    let end = settled("after a last small image", f5);
    assert!(
        end + TOLERANCE >= f5,
        "{:.1} MiB not returned after everything was dropped",
        mib(f5 - end)
    );
    common::assert_clean(bridge.vulkan());
}
