//! Frames across processes (`cuvk::ipc`): a producer process writes each frame with CUDA into
//! the viewer's memory, the viewer process checks it with Vulkan, ordered on the GPU by the
//! viewer's two timelines — side by side with the in-process frame pacer doing the same work
//! (`bench_frames`' rows: 4 KiB written by a CUDA kernel, checked by a Vulkan compute shader).
//!
//!     cargo run --release --example bench_ipc [-- --frames 5000]
//!     cargo run --release --example bench_ipc -- --faults     # a producer killed, a viewer killed
//!
//! Every frame the viewer draws (the newest written each time) is checked (mismatching elements
//! are counted); a negative control runs the viewer without its GPU wait for the producer.
//! Setup: publish + attach (CUDA import) of a 256 MiB buffer, in milliseconds.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::ipc::{FrameClient, FrameServer};
use cuvk::vulkan::HostBuffer;
use cuvk::{AcquireWait, Bridge, BufferUsage, ElementFormat, FrameSubmit, SharedBuffer};
use cuvk_dev::checker::{self, Checker};
use cuvk_dev::{kernels::Kernels, logger};

const ELEMENTS: usize = 1024;
const T: Duration = Duration::from_secs(30);

fn name(tag: &str) -> String {
    format!("bench-ipc-{tag}-{}", std::process::id())
}

/// The producer process: attaches to `name`, writes `frames` frames (frame n: the value n in
/// every element of slot n % K), then waits for the viewer to have drawn the last.
fn producer(name: &str, frames: u64, stop_at: Option<u64>) -> anyhow::Result<()> {
    let cuda = cuvk::cuda::context(0)?;
    let t = Instant::now();
    let mut client = FrameClient::attach(name, &cuda, T)?;
    let slots: Vec<_> = (0..client.frames_in_flight() as usize)
        .map(|s| client.slot::<u32>(s))
        .collect::<cuvk::Result<_>>()?;
    if slots.len() == 1 && slots[0].size() > 64 << 20 {
        println!(
            "producer: attach (connect, the viewer's export and send, CUDA import, map) of a {} MiB buffer: {:.2} ms",
            slots[0].size() >> 20,
            t.elapsed().as_secs_f64() * 1e3
        );
        return Ok(());
    }
    let kernels = Kernels::load(&cuda)?;
    let stream = cuda.new_stream()?;
    for _ in 0..frames {
        let frame = client.begin_frame()?;
        let n = frame.number();
        if stop_at == Some(n) {
            // The fault test: hang here until killed, mid-stream.
            std::thread::sleep(Duration::from_secs(600));
        }
        match client.acquire(&frame, &stream, T) {
            Ok(()) => {}
            Err(e @ cuvk::Error::Ipc(cuvk::ipc::IpcError::PeerClosed { .. })) => {
                // The viewer is gone: release what our stream waits for, then stop.
                client.release_waits()?;
                stream.synchronize()?;
                println!(
                    "producer: the viewer went away at frame {n} ({e}); stream released, stopping"
                );
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
        let slot = &slots[frame.slot()];
        kernels.fill(&stream, slot.device_ptr_ref(), ELEMENTS as u64, n as u32)?;
        client.release(&frame, &stream)?;
    }
    let deadline = Instant::now() + T;
    while client.drawn()? < frames {
        if Instant::now() > deadline {
            bail!("producer: the viewer's notice of frame {frames} drawn never came");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    stream.synchronize()?;
    Ok(())
}

fn spawn_producer(name: &str, k: u32, frames: u64, stop_at: Option<u64>) -> anyhow::Result<Child> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(["--producer", name, &k.to_string(), &frames.to_string()]);
    if let Some(s) = stop_at {
        cmd.args(["--stop-at", &s.to_string()]);
    }
    Ok(cmd.spawn()?)
}

/// Waits at most `T` for the producer; kills it past that. Whether it succeeded.
fn wait_child(child: &mut Child) -> anyhow::Result<bool> {
    let deadline = Instant::now() + T;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status.success());
        }
        if Instant::now() > deadline {
            child.kill()?;
            child.wait()?;
            bail!("the producer did not finish within {T:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

struct Viewer {
    bridge: Bridge,
    slots: Vec<SharedBuffer<u32>>,
    result: HostBuffer,
}

impl Viewer {
    /// A checker over the slots, its counts reset.
    fn checker(&mut self, command_slots: usize) -> anyhow::Result<Checker> {
        self.result.write(&[0u32; 3])?;
        Checker::new(&self.bridge, &self.slots, &self.result, command_slots)
    }
}

/// A frame server named `name` publishing the viewer's first `k` slots (K = `k`).
fn serve(v: &Viewer, name: &str, k: u32) -> anyhow::Result<FrameServer> {
    let mut server = FrameServer::bind(name, v.bridge.vulkan(), k)?;
    for s in &v.slots[..k as usize] {
        server.publish_buffer(s.vulkan_buffer(), ElementFormat::float32(1))?;
    }
    Ok(server)
}

/// Checks the frames `server` hands out (each the newest written: the viewer skips the older)
/// until frame `last` is drawn or `next_frame` finds none within `timeout`: (frames drawn, the
/// last one's number). `gpu_wait` false: the negative control (Vulkan checks without waiting).
///
/// # Safety
/// `checker` and the viewer's slots outlive every submission.
unsafe fn draw(
    v: &Viewer,
    server: &mut FrameServer,
    checker: &Checker,
    timeout: Duration,
    last: u64,
    gpu_wait: bool,
) -> anyhow::Result<(u64, u64)> {
    let (mut drawn, mut newest) = (0, 0);
    while newest < last {
        let Some(frame) = server.next_frame(timeout)? else {
            break;
        };
        let slot = frame.slot();
        // SAFETY: `next_frame` handed the frame out, so every frame of its command slot has
        // completed; the rest is forwarded from the caller.
        unsafe {
            let cmd = checker.record(
                frame.command_slot(),
                slot,
                frame.number() as u32,
                Some(&v.slots[slot]),
            )?;
            let cmds = [cmd];
            let submit = FrameSubmit::new(&cmds, vk::PipelineStageFlags::COMPUTE_SHADER);
            if gpu_wait {
                server.submit_drawn(&frame, &submit)?;
            } else {
                server.submit_drawn_without_waiting(&frame, &submit)?;
            }
        }
        (drawn, newest) = (drawn + 1, frame.number());
    }
    Ok((drawn, newest))
}

/// The viewer side of `frames` cross-process frames at K in flight: (µs per frame written,
/// wrong elements, frames drawn). `gpu_wait` false: the negative control.
fn cross_process(
    v: &mut Viewer,
    k: u32,
    frames: u64,
    gpu_wait: bool,
) -> anyhow::Result<(f64, u32, u64)> {
    let name = name(&format!("k{k}-{gpu_wait}"));
    let mut server = serve(v, &name, k)?;
    let mut child = spawn_producer(&name, k, frames, None)?;
    server.accept(T)?;
    let checker = v.checker(2 * k as usize)?;
    let t = Instant::now();
    // SAFETY: the slots and the checker live until every frame is drawn (`wait_idle` below).
    let (drawn, last) = unsafe { draw(v, &mut server, &checker, T, frames, gpu_wait) }?;
    if last < frames {
        bail!("the producer went silent after frame {last}");
    }
    // Every frame drawn, and the last "drawn" notice sent: it may have found the socket full
    // (the control outruns the producer), and the producer waits for it.
    server.wait_idle(T)?;
    let us = t.elapsed().as_secs_f64() * 1e6 / frames as f64;
    if !wait_child(&mut child)? {
        bail!("producer failed");
    }
    drop(checker);
    Ok((us, checker::read_result(&v.result)?.0, drawn))
}

/// The in-process pacer with the same work.
fn in_process(v: &mut Viewer, k: u32, frames: u64) -> anyhow::Result<(f64, u32)> {
    let kernels = Kernels::load(v.bridge.cuda())?;
    checker::paced_frames(
        &v.bridge,
        &kernels,
        &v.slots,
        &mut v.result,
        k,
        frames,
        AcquireWait::Gpu,
    )
}

/// A producer killed with SIGKILL mid-stream: the viewer notices, releases its waits, its
/// submitted frames complete, and a new producer attaches to the same viewer and goes on.
fn faults(v: &mut Viewer) -> anyhow::Result<()> {
    let k = 3;
    let name = name("faults");
    let mut server = serve(v, &name, k)?;
    let checker = v.checker(2 * k as usize)?;
    // The producer stops after frame 99 and is killed there.
    let stop = 100;
    let mut child = spawn_producer(&name, k, 1000, Some(stop))?;
    server.accept(T)?;
    // SAFETY: the slots and the checker live until every frame is drawn (`wait_idle` below).
    let (drawn, last) = unsafe { draw(v, &mut server, &checker, T, stop - 1, true) }?;
    if last < stop - 1 {
        bail!("the producer went silent after frame {last}");
    }
    // Stopped: kill it now, mid-stream.
    child.kill()?;
    child.wait()?;
    let t = Instant::now();
    // `next_frame` notices, releases the waits on the dead producer's timeline and waits for
    // every frame submitted; then it waits for a next producer (none yet).
    if let Some(f) = server.next_frame(Duration::from_millis(500))? {
        bail!("frame {} after the kill", f.number());
    }
    if server.is_attached() {
        bail!("the kill was not noticed");
    }
    server.wait_idle(Duration::from_secs(5))?;
    println!("viewer: producer killed after frame {last}; noticed, waits released, every submitted frame ({drawn}) completed in {:?} (500 ms waiting for a next producer included); the last good frame stays in its slot", t.elapsed());
    let (wrong, checks, _) = checker::read_result(&v.result)?;
    println!("viewer: {checks} checks before the kill, {wrong} wrong elements");
    // A new producer attaches to the same viewer and goes on from a fresh start.
    let frames = 200;
    let mut child = spawn_producer(&name, k, frames, None)?;
    // SAFETY: as above.
    let (drawn, last) = unsafe { draw(v, &mut server, &checker, T, frames, true) }?;
    if last < frames {
        bail!("the next producer went silent after frame {last}");
    }
    server.wait_idle(T)?;
    if !wait_child(&mut child)? {
        bail!("the next producer failed");
    }
    drop(checker);
    let (wrong_after, checks_after, _) = checker::read_result(&v.result)?;
    println!(
        "viewer: producer {} served on fresh timelines: {drawn} of its {frames} frames drawn, {} checks, {} wrong elements",
        server.producers(),
        checks_after - checks,
        wrong_after - wrong
    );

    // The other way round: the viewer goes away while the producer waits on the GPU.
    let name2 = self::name("faults-viewer");
    let mut server = serve(v, &name2, 1)?;
    let mut child = spawn_producer(&name2, 1, 1000, None)?;
    // Let the producer write frame 1 and wait for it to be drawn; then vanish without drawing.
    server.next_frame(T)?.context("frame 1 never came")?;
    let t = Instant::now();
    drop(server);
    let ok = wait_child(&mut child)?;
    println!(
        "producer: exited (success: {ok}) {:?} after the viewer went away",
        t.elapsed()
    );
    if !ok {
        bail!("the producer did not stop cleanly");
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    logger::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--producer") {
        let name = args.get(1).context("--producer NAME K FRAMES")?;
        let k: u32 = args.get(2).context("K")?.parse()?;
        let frames: u64 = args.get(3).context("FRAMES")?.parse()?;
        let stop_at = match args.get(4).map(String::as_str) {
            Some("--stop-at") => Some(args.get(5).context("--stop-at N")?.parse()?),
            _ => None,
        };
        let _ = k; // the viewer's: read at attach
        return producer(name, frames, stop_at);
    }
    let mut frames: u64 = 5000;
    let mut fault_test = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--frames" => frames = it.next().context("--frames N")?.parse()?,
            "--faults" => fault_test = true,
            other => bail!("unknown argument {other}"),
        }
    }
    let bridge = cuvk_dev::demo::bench_bridge()?;
    let slots = (0..8)
        .map(|_| bridge.create_buffer::<u32>(ELEMENTS, BufferUsage::STORAGE_BUFFER))
        .collect::<cuvk::Result<Vec<_>>>()?;
    let result = HostBuffer::new(bridge.vulkan(), 12, vk::BufferUsageFlags::STORAGE_BUFFER)?;
    let mut v = Viewer {
        bridge,
        slots,
        result,
    };
    if fault_test {
        return faults(&mut v);
    }
    // Setup: publish + attach of a 256 MiB buffer (the producer prints its side).
    {
        let big: SharedBuffer<u32> = v
            .bridge
            .create_buffer(64 << 20, BufferUsage::STORAGE_BUFFER)?;
        let name = name("setup");
        let t = Instant::now();
        let mut server = FrameServer::bind(&name, v.bridge.vulkan(), 1)?;
        server.publish_buffer(big.vulkan_buffer(), ElementFormat::float32(1))?;
        println!(
            "viewer: bind + publish of a 256 MiB buffer (and two timelines): {:.3} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
        let t = Instant::now();
        let mut child = spawn_producer(&name, 1, 0, None)?;
        server.accept(T)?;
        println!(
            "viewer: spawn to accepted {:.2} ms (mostly the producer process starting and creating its CUDA context; the attach itself is the producer's line)",
            t.elapsed().as_secs_f64() * 1e3
        );
        wait_child(&mut child)?;
    }
    // Warm-up.
    eprintln!("warm-up: in-process");
    in_process(&mut v, 3, 200)?;
    eprintln!("warm-up: cross-process");
    cross_process(&mut v, 3, 200, true)?;
    eprintln!("warm-up done");
    let mut rows = Vec::new();
    for k in [3, 8, 1] {
        let (a, bad_a) = in_process(&mut v, k, frames)?;
        eprintln!("K={k}: in-process {a:.1} us/frame, {bad_a} wrong");
        let (b, bad_b, drawn) = cross_process(&mut v, k, frames, true)?;
        eprintln!(
            "K={k}: cross-process {b:.1} us/frame written, {bad_b} wrong, {drawn} of {frames} drawn (the newest each time)"
        );
        rows.push((k, a, bad_a, b, bad_b));
    }
    let (ctl, bad_ctl, _) = cross_process(&mut v, 3, frames.min(2000), false)?;
    println!();
    println!(
        "{:<6} {:>22} {:>8} {:>22} {:>8} {:>7}",
        "K", "in-process pacer us/f", "wrong", "cross-process us/f", "wrong", "ratio"
    );
    for (k, a, bad_a, b, bad_b) in rows {
        println!(
            "{k:<6} {a:>22.1} {bad_a:>8} {b:>22.1} {bad_b:>8} {:>6.2}x",
            b / a
        );
    }
    println!("negative control, K=3, viewer without its GPU wait: {ctl:.1} us/frame, {bad_ctl} wrong elements");
    Ok(())
}
