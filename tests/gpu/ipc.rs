//! Frames across processes on the GPU (`cuvk::ipc::FrameServer` / `FrameClient`, issue 29): a
//! producer process writes each frame with CUDA into the viewer's memory, the viewer (this
//! process) checks every element of each frame it draws (the newest written) with Vulkan,
//! ordered on the GPU by the viewer's two timelines. A negative control draws without the GPU
//! wait and must see wrong data; a producer killed with SIGKILL mid-stream is noticed, the
//! viewer's waits are released, its frames complete and the same viewer serves the next
//! producer; a viewer that goes away makes the producer stop cleanly, its stream released;
//! every byte of GPU memory comes back once the last process holding it lets go (even killed);
//! an image is a CUDA array in the other process. The producer is this test binary again
//! (`ipc::ipc_producer` and the other `*_child` entries).

use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cuvk::ash::vk;
use cuvk::ipc::{Attached, FrameClient, FrameServer, IpcError, Server};
use cuvk::vulkan::{BoundImage, HostBuffer, ImageOptions, ImageRegion};
use cuvk::{BufferUsage, ElementFormat, Error, Frame, FrameSubmit, ImageDesc, SharedBuffer};
use cuvk_dev::checker::{self, Checker};
use cuvk_dev::kernels::Kernels;
use cuvk_dev::testing as common;

const ELEMENTS: usize = 4 << 20; // 16 MiB per slot: races show
const T: Duration = Duration::from_secs(30);

fn spawn_producer(name: &str, k: u32, frames: u64, stop_at: u64) -> Child {
    let spec = format!("{name}:{k}:{frames}:{stop_at}");
    common::child_test("ipc::ipc_producer", "CUVK_IPC_PRODUCER", &spec)
        .spawn()
        .unwrap()
}

/// The producer's side (does nothing when run as an ordinary test).
#[test]
fn ipc_producer() {
    let Ok(spec) = std::env::var("CUVK_IPC_PRODUCER") else {
        return;
    };
    let parts: Vec<&str> = spec.split(':').collect();
    let (name, k, frames, stop_at) = (
        parts[0],
        parts[1].parse::<u32>().unwrap(),
        parts[2].parse::<u64>().unwrap(),
        parts[3].parse::<u64>().unwrap(),
    );
    let cuda = cuvk::cuda::context(0).unwrap();
    let mut client = FrameClient::attach(name, &cuda, T).unwrap();
    assert_eq!(
        client.frames_in_flight(),
        k,
        "K is the viewer's buffer count"
    );
    let slots: Vec<_> = (0..client.frames_in_flight() as usize)
        .map(|s| client.slot::<u32>(s).unwrap())
        .collect();
    let kernels = Kernels::load(&cuda).unwrap();
    let stream = cuda.new_stream().unwrap();
    for _ in 0..frames {
        let frame = client.begin_frame().unwrap();
        let n = frame.number();
        if n == stop_at {
            std::thread::sleep(Duration::from_secs(600)); // killed here
        }
        match client.acquire(&frame, &stream, T) {
            Ok(()) => {}
            Err(Error::Ipc(IpcError::PeerClosed { .. })) => {
                client.release_waits().unwrap();
                stream.synchronize().unwrap();
                eprintln!("producer: viewer gone before frame {n}: stream released");
                return;
            }
            Err(e) => panic!("producer: {e}"),
        }
        let slot = &slots[frame.slot()];
        kernels
            .fill(&stream, slot.device_ptr_ref(), ELEMENTS as u64, n as u32)
            .unwrap();
        client.release(&frame, &stream).unwrap();
    }
    let deadline = Instant::now() + T;
    while client.drawn().unwrap() < frames {
        assert!(
            Instant::now() < deadline,
            "the viewer never drew the last frame"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    stream.synchronize().unwrap();
}

const SIDE: u32 = 256;

fn texels(seed: u32) -> Vec<u8> {
    (0..SIDE * SIDE)
        .flat_map(|i| (i.wrapping_mul(40503) ^ seed).to_le_bytes())
        .collect()
}

/// In a child test: CUDA device 0 and the server named by `var`, attached; `None` when run
/// as an ordinary test (no `var`).
fn attach_as_child(var: &str) -> Option<(Arc<cuvk::cudarc::driver::CudaContext>, Attached)> {
    let name = std::env::var(var).ok()?;
    let cuda = cuvk::cuda::context(0).unwrap();
    let uuid = cuvk::cuda::uuid_of(&cuda).unwrap();
    let attached = Attached::connect(&name, uuid, None, T).unwrap();
    Some((cuda, attached))
}

/// The CUDA side of the image test (does nothing when run as an ordinary test): imports the
/// viewer's image as a CUDA array, checks the viewer's texels, writes its own.
#[test]
fn ipc_image_child() {
    let Some((cuda, mut attached)) = attach_as_child("CUVK_IPC_IMAGE") else {
        return;
    };
    let id = attached.images().next().unwrap().id;
    let array = attached.import_cuda_image(id, &cuda).unwrap();
    let level = array.level(0).unwrap();
    assert_eq!(level.extent(), (u64::from(SIDE), u64::from(SIDE), 0));
    let stream = cuda.new_stream().unwrap();
    let mut got = vec![0u8; (SIDE * SIDE * 4) as usize];
    level.copy_to_host(&stream, &mut got).unwrap();
    assert!(got == texels(7), "CUDA reads the viewer's texels");
    level.copy_from_host(&stream, &texels(9)).unwrap();
    stream.synchronize().unwrap();
    attached.link().notify(1).unwrap();
    let _ = attached.link().latest(1, T);
}

/// A Vulkan image of one process is a CUDA array in another: texels exact both ways.
#[test]
fn an_image_of_the_viewer_is_a_cuda_array_in_the_producer() {
    let _g = common::serial();
    let Some(bridge) = common::bridge("ipc_image") else {
        return;
    };
    let ctx = bridge.vulkan();
    let usage = vk::ImageUsageFlags::STORAGE
        | vk::ImageUsageFlags::TRANSFER_SRC
        | vk::ImageUsageFlags::TRANSFER_DST;
    let desc = ImageDesc::d2(vk::Format::R8G8B8A8_UNORM, SIDE, SIDE, usage);
    let mut image = BoundImage::new(ctx, &desc, ImageOptions::EXPORT).unwrap();
    let bytes = u64::from(SIDE * SIDE * 4);
    let mut host = HostBuffer::new(ctx, bytes, vk::BufferUsageFlags::empty()).unwrap();
    host.write(&texels(7)).unwrap();
    let region = ImageRegion::level(&desc, 0);
    ctx.copy_buffer_to_image(&host, 0, &mut image, region)
        .unwrap();
    let image = Arc::new(image);
    let name = format!("gpu-ipc-image-{}", std::process::id());
    let mut server = Server::bind(&name, ctx).unwrap();
    server.publish_image(&image).unwrap();
    let mut child = common::child_test("ipc::ipc_image_child", "CUVK_IPC_IMAGE", &name)
        .spawn()
        .unwrap();
    let mut link = server.accept(T).unwrap();
    assert_eq!(link.latest(0, T).unwrap(), Some(1), "the child wrote");
    ctx.copy_image_to_buffer(&*image, region, &mut host, 0)
        .unwrap();
    assert!(
        host.read::<u8>().unwrap() == texels(9),
        "Vulkan reads the texels CUDA wrote in the other process"
    );
    link.goodbye();
    assert!(wait_child(&mut child), "the child's checks passed");
    common::assert_clean(ctx);
}

/// A process that attaches, imports the first buffer into CUDA, says so, and holds it until
/// killed (does nothing when run as an ordinary test).
#[test]
fn ipc_holder_child() {
    let Some((cuda, mut attached)) = attach_as_child("CUVK_IPC_HOLD") else {
        return;
    };
    let id = attached.buffers().next().unwrap().id;
    let held = attached.import_cuda_bytes(id, &cuda).unwrap();
    attached.link().notify(1).unwrap();
    std::thread::sleep(Duration::from_secs(600)); // killed here
    drop(held);
}

/// Every byte of GPU memory comes back once the last process lets go: the viewer drops its
/// buffer first (the producer's import keeps it), then the producer is killed with SIGKILL.
#[test]
fn gpu_memory_comes_back_when_the_last_process_lets_go() {
    let _g = common::serial();
    let Some(bridge) = common::bridge("ipc_memory") else {
        return;
    };
    bridge.cuda().bind_to_thread().unwrap();
    let free = || cuvk::cudarc::driver::result::mem_get_info().unwrap().0 as i64;
    const BYTES: i64 = 1 << 30;
    const SLACK: i64 = 64 << 20; // allocator granularity and the driver's own bookkeeping
    let base = free();
    let buffer: SharedBuffer<u32> = bridge
        .create_buffer((BYTES / 4) as usize, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    let name = format!("gpu-ipc-memory-{}", std::process::id());
    let mut server = Server::bind(&name, bridge.vulkan()).unwrap();
    server
        .publish_buffer(buffer.vulkan_buffer(), ElementFormat::float32(1))
        .unwrap();
    let mut child = common::child_test("ipc::ipc_holder_child", "CUVK_IPC_HOLD", &name)
        .spawn()
        .unwrap();
    let mut link = server.accept(T).unwrap();
    assert_eq!(link.latest(0, T).unwrap(), Some(1), "the producer imported");
    let with_both = free();
    assert!(base - with_both >= BYTES - SLACK, "{base} -> {with_both}");
    drop((link, server, buffer));
    std::thread::sleep(Duration::from_millis(200));
    let held_by_producer = free();
    assert!(
        base - held_by_producer >= BYTES - SLACK,
        "the producer's import keeps the memory: {base} -> {held_by_producer}"
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut now = free();
    while base - now > SLACK && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        now = free();
    }
    eprintln!(
        "ipc_memory: free {} MiB, {} with the buffer in both processes, {} held by the producer alone, {} after its kill",
        base >> 20,
        with_both >> 20,
        held_by_producer >> 20,
        now >> 20
    );
    assert!(base - now <= SLACK, "every byte back: {base} -> {now}");
    common::assert_clean(bridge.vulkan());
}

fn wait_child(child: &mut Child) -> bool {
    let deadline = Instant::now() + T;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.success();
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the producer did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A frame server named `name` publishing `slots`, K = their count.
fn serve(
    name: &str,
    ctx: &Arc<cuvk::vulkan::VulkanContext>,
    slots: &[SharedBuffer<u32>],
) -> FrameServer {
    let mut server = FrameServer::bind(name, ctx, slots.len() as u32).unwrap();
    for s in slots {
        server
            .publish_buffer(s.vulkan_buffer(), ElementFormat::float32(1))
            .unwrap();
    }
    server
}

/// Draws the frames `server` hands out (each the newest written): records the check of the
/// frame's slot against its number into its command slot and submits it, waiting on the GPU
/// for the producer's write unless `gpu_wait` is false (the negative control). Stops when
/// `next_frame` finds none within `timeout`, or after a frame `done` accepts. Returns (frames
/// drawn, the last one's number).
///
/// # Safety
/// The slots and the checker outlive every submission.
unsafe fn draw_frames(
    server: &mut FrameServer,
    checker: &Checker,
    slots: &[SharedBuffer<u32>],
    timeout: Duration,
    gpu_wait: bool,
    mut done: impl FnMut(&Frame) -> bool,
) -> (u64, u64) {
    let (mut drawn, mut last) = (0, 0);
    while let Some(frame) = server.next_frame(timeout).unwrap() {
        let (slot, cs) = (frame.slot(), frame.command_slot());
        // SAFETY: `next_frame` handed the frame out, so every frame of its command slot has
        // completed; the rest is forwarded from the caller.
        unsafe {
            let cmd = checker
                .record(cs, slot, frame.number() as u32, Some(&slots[slot]))
                .unwrap();
            let cmds = [cmd];
            let submit = FrameSubmit {
                fence: checker.fence(cs),
                ..FrameSubmit::new(&cmds, vk::PipelineStageFlags::COMPUTE_SHADER)
            };
            if gpu_wait {
                server.submit_drawn(&frame, &submit).unwrap();
            } else {
                server
                    .submit_drawn_without_waiting(&frame, &submit)
                    .unwrap();
            }
        }
        (drawn, last) = (drawn + 1, frame.number());
        if done(&frame) {
            break;
        }
    }
    (drawn, last)
}

/// (wrong elements, checks, frames drawn) of a producer writing `frames` frames at K in flight
/// (the viewer draws the newest each time: it may skip some); `gpu_wait` false: the negative
/// control.
fn run(bridge: &cuvk::Bridge, k: u32, frames: u64, gpu_wait: bool) -> (u32, u32, u64) {
    let name = format!("gpu-ipc-{k}-{gpu_wait}-{}", std::process::id());
    let slots = checker::slots(bridge, k, ELEMENTS).unwrap();
    let ctx = bridge.vulkan();
    let result = checker::result_buffer(ctx).unwrap();
    let checker = Checker::new(bridge, &slots, &result, 2 * k as usize).unwrap();
    let mut server = serve(&name, ctx, &slots);
    let mut child = spawn_producer(&name, k, frames, 0);
    // SAFETY: the slots and the checker outlive every submission (waited for below).
    let (drawn, last) = unsafe {
        draw_frames(&mut server, &checker, &slots, T, gpu_wait, |f| {
            f.number() == frames
        })
    };
    assert_eq!(last, frames, "the producer went silent");
    // Every frame drawn, and the last notice sent (the producer waits for it).
    server.wait_idle(T).unwrap();
    assert!(wait_child(&mut child), "the producer's checks passed");
    checker.wait_fenced().unwrap();
    drop(checker);
    let (bad, checks, _) = checker::read_result(&result).unwrap();
    common::assert_clean(ctx);
    (bad, checks, drawn)
}

#[test]
fn a_producer_process_writes_what_the_viewer_reads_ordered_on_the_gpu() {
    let _g = common::serial();
    let Some(bridge) = common::bridge("ipc_frames") else {
        return;
    };
    for k in [1, 3] {
        let (bad, checks, drawn) = run(&bridge, k, 300, true);
        assert_eq!(
            u64::from(checks),
            drawn,
            "K={k}: every frame drawn checked (all 4M elements)"
        );
        assert_eq!(bad, 0, "K={k}: ordered across processes by the timelines");
        eprintln!("ipc_frames: K={k}: {drawn} of 300 frames drawn (the newest each time)");
    }
    let (bad, _, _) = run(&bridge, 3, 300, false);
    assert!(
        bad > 0,
        "without the GPU wait the viewer must see torn or stale frames"
    );
    eprintln!("ipc_frames: the unordered control saw {bad} wrong elements");
}

#[test]
fn a_killed_producer_is_noticed_and_a_gone_viewer_stops_the_producer() {
    let _g = common::serial();
    let Some(bridge) = common::bridge("ipc_faults") else {
        return;
    };
    let ctx = bridge.vulkan();
    let k = 3;
    let slots = checker::slots(&bridge, k, ELEMENTS).unwrap();
    let result = checker::result_buffer(ctx).unwrap();
    let checker = Checker::new(&bridge, &slots, &result, 2 * k as usize).unwrap();
    let name = format!("gpu-ipc-kill-{}", std::process::id());
    let mut server = serve(&name, ctx, &slots);
    // The producer stops before frame STOP (after writing STOP - 1) and is killed there.
    const STOP: u64 = 60;
    let mut child = spawn_producer(&name, k, 1000, STOP);
    server.accept(T).unwrap();
    // SAFETY: the slots and the checker outlive every submission (waited for below).
    let (drawn, last) = unsafe {
        draw_frames(&mut server, &checker, &slots, T, true, |f| {
            f.number() == STOP - 1
        })
    };
    assert_eq!(last, STOP - 1, "the producer went silent early");
    let next = server.next_frame(Duration::from_millis(500)).unwrap();
    assert!(next.is_none(), "stopped: no frame {STOP}: {next:?}");
    assert!(server.is_attached(), "silent, not gone");
    child.kill().unwrap(); // SIGKILL, mid-stream
    child.wait().unwrap();
    let start = Instant::now();
    // Noticed: its waits released, the frames drawn from it complete, nobody attached.
    let next = server.next_frame(Duration::from_millis(500)).unwrap();
    assert!(next.is_none(), "no frame after the kill: {next:?}");
    assert!(!server.is_attached(), "the kill is noticed");
    assert_eq!(server.producers(), 1);
    server.wait_idle(Duration::from_secs(5)).unwrap();
    eprintln!(
        "ipc_faults: kill noticed and {drawn} frames completed in {:?} (with 500 ms for no next producer)",
        start.elapsed()
    );
    checker.wait_fenced().unwrap();
    drop(checker);
    let (bad, checks, _) = checker::read_result(&result).unwrap();
    assert_eq!(
        (bad, u64::from(checks)),
        (0, drawn),
        "every frame before the kill exact"
    );

    // A viewer that goes away while the producer waits for it.
    let name = format!("gpu-ipc-gone-{}", std::process::id());
    let mut server = serve(&name, ctx, &slots[..1]);
    let mut child = spawn_producer(&name, 1, 1000, 0);
    let frame = server.next_frame(T).unwrap().expect("frame 1 written");
    assert_eq!(frame.number(), 1, "handed out; never drawn");
    let start = Instant::now();
    drop(server);
    assert!(wait_child(&mut child), "the producer stops cleanly");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "bounded: {:?}",
        start.elapsed()
    );
    common::assert_clean(ctx);
}

/// A producer that never stops (killed by the viewer): each frame fills its slot with the
/// frame number through `cuMemsetD32Async` (no module to compile: a quick start, so the test
/// can kill many of them).
#[test]
fn ipc_endless_producer() {
    let Ok(name) = std::env::var("CUVK_IPC_ENDLESS") else {
        return;
    };
    let cuda = cuvk::cuda::context(0).unwrap();
    let mut client = FrameClient::attach(&name, &cuda, T).unwrap();
    let slots: Vec<_> = (0..client.frames_in_flight() as usize)
        .map(|s| client.slot::<u32>(s).unwrap())
        .collect();
    let stream = cuda.new_stream().unwrap();
    loop {
        let frame = client.begin_frame().unwrap();
        match client.acquire(&frame, &stream, T) {
            Ok(()) => {}
            Err(Error::Ipc(IpcError::PeerClosed { .. })) => return,
            Err(e) => panic!("producer: {e}"),
        }
        // SAFETY: the slot's mapping holds ELEMENTS u32 words; the stream is this context's.
        unsafe {
            cuvk::cudarc::driver::sys::cuMemsetD32Async(
                slots[frame.slot()].device_ptr(),
                frame.number() as u32,
                ELEMENTS,
                stream.cu_stream(),
            )
        }
        .result()
        .unwrap();
        match client.release(&frame, &stream) {
            Ok(()) => {}
            Err(Error::Ipc(IpcError::PeerClosed { .. })) => return,
            Err(e) => panic!("producer: {e}"),
        }
    }
}

/// Producers killed with SIGKILL mid-stream (after a varying number of frames, while they
/// write), one after another against one viewer: each death is noticed, the viewer's waits
/// are released and its frames complete, the same viewer serves the next producer, and the
/// validation layer reports nothing. `CUVK_IPC_KILLS` sets how many (100 by default).
#[test]
fn a_producer_killed_mid_frame_again_and_again_leaves_the_viewer_clean() {
    let _g = common::serial();
    let Some(bridge) = common::bridge("ipc_kills") else {
        return;
    };
    let kills: u64 = std::env::var("CUVK_IPC_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let ctx = bridge.vulkan();
    let k = 3;
    let slots = checker::slots(&bridge, k, ELEMENTS).unwrap();
    let result = checker::result_buffer(ctx).unwrap();
    let checker = Checker::new(&bridge, &slots, &result, 2 * k as usize).unwrap();
    let name = format!("gpu-ipc-kills-{}", std::process::id());
    let mut server = serve(&name, ctx, &slots);
    let start = Instant::now();
    let (mut frames, mut rng) = (0u64, 0x9E37_79B9_7F4A_7C15u64);
    for cycle in 0..kills {
        let mut child = common::child_test("ipc::ipc_endless_producer", "CUVK_IPC_ENDLESS", &name)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Killed after 1 to 40 frames drawn: at a varying point of a frame.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let kill_at = 1 + rng % 40;
        let mut left = kill_at;
        // SAFETY: the slots and the checker outlive every submission (waited for below).
        let (before, _) = unsafe {
            draw_frames(&mut server, &checker, &slots, T, true, |_| {
                left -= 1;
                left == 0
            })
        };
        assert_eq!(before, kill_at, "cycle {cycle}: the producer went silent");
        assert_eq!(
            u64::from(server.producers()),
            cycle + 1,
            "cycle {cycle}: the next producer is served"
        );
        child.kill().unwrap(); // SIGKILL while it writes the next frames
        child.wait().unwrap();
        // What it announced before it died, then nothing: its waits released, every frame
        // drawn from it complete, nobody attached (until the next cycle's producer).
        // SAFETY: as above.
        let (after, _) = unsafe {
            draw_frames(
                &mut server,
                &checker,
                &slots,
                Duration::from_millis(250),
                true,
                |_| false,
            )
        };
        assert!(!server.is_attached(), "cycle {cycle}: the kill is noticed");
        server.wait_idle(T).unwrap();
        frames += before + after;
    }
    checker.wait_fenced().unwrap();
    drop(checker);
    let (bad, checks, _) = checker::read_result(&result).unwrap();
    eprintln!(
        "ipc_kills: {kills} producers killed mid-stream, {frames} frames drawn ({checks} \
         checked, {bad} elements of frames torn by a kill) in {:.1?}",
        start.elapsed()
    );
    assert_eq!(u64::from(checks), frames, "every frame submitted completed");
    common::assert_clean(ctx);
}

/// A producer on the other GPU (does nothing as an ordinary test): attaching is refused with
/// `WrongDevice`, before any descriptor is sent.
#[test]
fn ipc_wrong_gpu_child() {
    let Ok(spec) = std::env::var("CUVK_IPC_WRONG_GPU") else {
        return;
    };
    let (name, ordinal) = spec.split_once(':').unwrap();
    let cuda = cuvk::cuda::context(ordinal.parse().unwrap()).unwrap();
    let e = FrameClient::attach(name, &cuda, T).unwrap_err();
    assert!(matches!(e, Error::Ipc(IpcError::WrongDevice { .. })), "{e}");
    eprintln!("wrong-GPU producer refused: {e}");
}

/// A producer on the wrong GPU is refused (`WrongDevice`), and the viewer serves the next
/// producer, on the right GPU, in the same `accept` (in 0.4 the next producer timed out).
#[test]
fn a_producer_on_the_other_gpu_is_refused_and_the_next_is_served() {
    let _g = common::serial();
    let Some(bridge) = common::bridge("ipc_wrong_gpu") else {
        return;
    };
    let Some(peer) = common::peer_gpu("ipc_wrong_gpu", &bridge) else {
        return;
    };
    let ctx = bridge.vulkan();
    let k = 1;
    let frames = 20;
    let slots = checker::slots(&bridge, k, ELEMENTS).unwrap();
    let result = checker::result_buffer(ctx).unwrap();
    let checker = Checker::new(&bridge, &slots, &result, 2).unwrap();
    let name = format!("gpu-ipc-wrong-gpu-{}", std::process::id());
    let mut server = serve(&name, ctx, &slots);
    let spec = format!("{name}:{}", peer.ordinal());
    let producers = {
        let name = name.clone();
        std::thread::spawn(move || {
            let mut wrong =
                common::child_test("ipc::ipc_wrong_gpu_child", "CUVK_IPC_WRONG_GPU", &spec)
                    .spawn()
                    .unwrap();
            assert!(
                wait_child(&mut wrong),
                "the wrong-GPU producer saw WrongDevice"
            );
            spawn_producer(&name, k, frames, 0)
        })
    };
    server.accept(T).unwrap();
    let mut child = producers.join().unwrap();
    assert_eq!(server.producers(), 1, "the refused producer is not served");
    // SAFETY: the slots and the checker outlive every submission (waited for below).
    let (drawn, last) = unsafe {
        draw_frames(&mut server, &checker, &slots, T, true, |f| {
            f.number() == frames
        })
    };
    assert_eq!(last, frames, "the producer went silent");
    server.wait_idle(T).unwrap();
    assert!(
        wait_child(&mut child),
        "the right producer's frames were drawn"
    );
    checker.wait_fenced().unwrap();
    drop(checker);
    let (bad, checks, _) = checker::read_result(&result).unwrap();
    // K = 1: the producer writes a frame only once the last is drawn, so none is skipped.
    assert_eq!(
        (bad, u64::from(checks), drawn),
        (0, frames, frames),
        "every frame exact"
    );
    common::assert_clean(ctx);
}
