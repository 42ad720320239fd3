//! Frames across processes (`cuvk::ipc`): a producer process writes each frame with CUDA into
//! the viewer's memory, the viewer process checks it with Vulkan, ordered on the GPU by the
//! viewer's two timelines — side by side with the in-process frame pacer doing the same work
//! (`bench_frames`' rows: 4 KiB written by a CUDA kernel, checked by a Vulkan compute shader).
//!
//!     cargo run --release --example bench_ipc [-- --frames 5000]
//!     cargo run --release --example bench_ipc -- --faults     # a producer killed, a viewer killed
//!
//! Every frame's data is checked (mismatching elements are counted); a negative control runs
//! the viewer without its GPU wait for the producer. Setup: publish + attach (CUDA import) of a
//! 256 MiB buffer, in milliseconds.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::ipc::{FrameClient, FrameServer};
use cuvk::vulkan::HostBuffer;
use cuvk::{AcquireWait, Bridge, BufferUsage, FrameSubmit, SharedBuffer};
use cuvk_dev::checker::{self, Checker};
use cuvk_dev::{kernels::Kernels, logger};

const ELEMENTS: usize = 1024;
const T: Duration = Duration::from_secs(30);

fn name(tag: &str) -> String {
    format!("bench-ipc-{tag}-{}", std::process::id())
}

/// The producer process: attaches to `name`, writes `frames` frames (frame n: the value n in
/// every element of slot (n - 1) % K), then waits for the viewer to have drawn the last.
fn producer(name: &str, frames: u64, stop_at: Option<u64>) -> anyhow::Result<()> {
    let cuda = cuvk::cuda::context(0)?;
    let t = Instant::now();
    let mut client = FrameClient::attach(name, &cuda, T)?;
    let k = client.frames_in_flight();
    let slots: Vec<_> = client
        .buffer_ids()
        .iter()
        .map(|&id| client.buffer::<u32>(id))
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
    for n in 1..=frames {
        if stop_at == Some(n) {
            // The fault test: hang here until killed, mid-stream.
            std::thread::sleep(Duration::from_secs(600));
        }
        match client.acquire(n, &stream, T) {
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
        let slot = &slots[((n - 1) % u64::from(k)) as usize];
        kernels.fill(&stream, slot.device_ptr_ref(), ELEMENTS as u64, n as u32)?;
        client.release(n, &stream)?;
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

/// The viewer side of `frames` cross-process frames at K in flight: (µs per frame, wrong
/// elements). `gpu_wait` false: the negative control (Vulkan checks without waiting).
fn cross_process(
    v: &mut Viewer,
    k: u32,
    frames: u64,
    gpu_wait: bool,
) -> anyhow::Result<(f64, u32)> {
    let name = name(&format!("k{k}-{gpu_wait}"));
    let mut server = FrameServer::bind(&name, v.bridge.vulkan(), k)?;
    for s in &v.slots[..k as usize] {
        server.publish_buffer(s.vulkan_buffer(), 0, 4)?;
    }
    let mut child = spawn_producer(&name, k, frames, None)?;
    server.accept(T)?;
    let checker = v.checker(2 * k as usize)?;
    let mut announced = 0;
    let t = Instant::now();
    for n in 1..=frames {
        let cs = (n % (2 * u64::from(k))) as usize;
        server.wait_drawn(n.saturating_sub(2 * u64::from(k)), T)?;
        if gpu_wait {
            while announced < n {
                announced = server.written(announced, T)?.context("producer silent")?;
            }
        } else if let Some(v) = server.written(announced, Duration::ZERO)? {
            // The control does not wait, but still reads the producer's notices.
            announced = v;
        }
        let slot = ((n - 1) % u64::from(k)) as usize;
        // SAFETY: the command slot's frame 2K back is drawn (waited above); the slots and the
        // checker live until the end.
        unsafe {
            let cmd = checker.record(cs, slot, n as u32, Some(&v.slots[slot]))?;
            let cmds = [cmd];
            let submit = FrameSubmit::new(&cmds, vk::PipelineStageFlags::COMPUTE_SHADER);
            if gpu_wait {
                server.submit_drawn(n, &submit)?;
            } else {
                server.submit_drawn_without_waiting(n, &submit)?;
            }
        }
    }
    server.wait_drawn(frames, T)?;
    let us = t.elapsed().as_secs_f64() * 1e6 / frames as f64;
    // The last "drawn" notice may have found the socket full (the control outruns the
    // producer): the producer waits for it.
    server.flush(T)?;
    if !wait_child(&mut child)? {
        bail!("producer failed");
    }
    drop(checker);
    Ok((us, checker::read_result(&v.result)?.0))
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
/// submitted frames complete, and a new producer attaches and goes on.
fn faults(v: &mut Viewer) -> anyhow::Result<()> {
    let k = 3;
    let name = name("faults");
    let mut server = FrameServer::bind(&name, v.bridge.vulkan(), k)?;
    for s in &v.slots[..k as usize] {
        server.publish_buffer(s.vulkan_buffer(), 0, 4)?;
    }
    let checker = v.checker(2 * k as usize)?;
    // The producer stops after frame 99 and is killed there.
    let mut child = spawn_producer(&name, k, 1000, Some(100))?;
    server.accept(T)?;
    let mut n: u64 = 0;
    let mut announced = 0;
    let mut submitted = 0;
    loop {
        // Submit one frame ahead of what was announced: its GPU wait is for a value the
        // producer has not signalled yet when it is killed.
        let next = n + 1;
        server.wait_drawn(next.saturating_sub(2 * u64::from(k)), T)?;
        if announced < next {
            match server.written(announced, Duration::from_millis(500)) {
                Ok(Some(v)) => announced = v,
                Ok(None) => {
                    // Silent (stopped): kill it now, mid-stream.
                    child.kill()?;
                    child.wait()?;
                    let t = Instant::now();
                    let e = server.written(announced, T).unwrap_err();
                    println!(
                        "viewer: producer killed after frame {announced}; noticed in {:?}: {e}",
                        t.elapsed()
                    );
                    break;
                }
                Err(e) => bail!("unexpected {e}"),
            }
        }
        n = next;
        let slot = ((n - 1) % u64::from(k)) as usize;
        let cs = (n % (2 * u64::from(k))) as usize;
        // SAFETY: as in `cross_process`.
        unsafe {
            let cmd = checker.record(cs, slot, n as u32, Some(&v.slots[slot]))?;
            server.submit_drawn(
                n,
                &FrameSubmit::new(&[cmd], vk::PipelineStageFlags::COMPUTE_SHADER),
            )?;
        }
        submitted = n;
    }
    server.release_waits()?;
    let t = Instant::now();
    server.wait_drawn(submitted, Duration::from_secs(5))?;
    println!("viewer: waits released, every submitted frame ({submitted}) completed in {:?}; the last good frame stays in its slot", t.elapsed());
    // A new producer attaches to the same viewer and goes on from a fresh start.
    drop(checker);
    let (wrong, checks, _) = checker::read_result(&v.result)?;
    println!("viewer: {checks} checks before the kill, {wrong} wrong elements");

    // The other way round: the viewer goes away while the producer waits on the GPU.
    let name2 = self::name("faults-viewer");
    let mut server = FrameServer::bind(&name2, v.bridge.vulkan(), 1)?;
    server.publish_buffer(v.slots[0].vulkan_buffer(), 0, 4)?;
    let mut child = spawn_producer(&name2, 1, 1000, None)?;
    server.accept(T)?;
    // Let the producer write frame 1 and wait for it to be drawn; then vanish without drawing.
    let _ = server.written(0, T)?;
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
        server.publish_buffer(big.vulkan_buffer(), 0, 4)?;
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
        let (b, bad_b) = cross_process(&mut v, k, frames, true)?;
        eprintln!("K={k}: cross-process {b:.1} us/frame, {bad_b} wrong");
        rows.push((k, a, bad_a, b, bad_b));
    }
    let (ctl, bad_ctl) = cross_process(&mut v, 3, frames.min(2000), false)?;
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
