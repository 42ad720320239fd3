//! Fan-out (issue 37): what consumers cost a publisher. One `cuvk::ipc::Publisher` writes
//! frames with CUDA (a memset of the slot: the cheapest writer, so that what is left is the
//! protocol's cost) while 0, 1, 2, 4 and 8 consumer processes attach, hold the newest frame,
//! copy it out with CUDA and release it; then one consumer stopped (SIGSTOP) among 8, and
//! consumers killed (SIGKILL) and replaced while the publisher runs. Side by side in one run:
//! a 4 KiB frame and a 1,000,000-particle frame (16 MB), K = consumers + 2.
//!
//!     cargo run --release --example bench_fanout [-- --frames 3000] [--fps F]
//!
//! `--fps F`: the publisher paced at F frames per second (a simulation's or a training job's
//! pace, not as fast as the host can go): only the rows of 0 to 8 consumers. Unpaced, the
//! publisher and 8 consumer processes share the GPU by time slices, and the publisher's
//! launches block once its stream's queue is full; paced, what is left is the protocol.
//!
//! Columns: the publisher's host time per frame (begin_frame → acquire → write → release:
//! no host wait is in it, so p99 shows any), its frame period (wall time / frames, the
//! stream synchronised at the end), vs no consumer; the frames the consumers held; attach
//! (connect, receive descriptors, import into CUDA, map) per consumer, all attaching at
//! once.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cuvk::cudarc::driver::{result, CudaContext};
use cuvk::ipc::{CudaSubscriber, IpcError, Publisher, PublisherDesc};
use cuvk::{Bridge, BridgeConfig, ElementFormat};
use cuvk_dev::stats::median;

const U32: ElementFormat = ElementFormat {
    code: ElementFormat::UINT,
    bits: 32,
    lanes: 1,
    columns: 1,
};
const WAIT: Duration = Duration::from_secs(30);
/// `--fps`: the publisher's frame period (unset: as fast as it can).
static PACE: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
/// How long the publisher runs while consumers are killed around it.
const KILL_RUN: Duration = Duration::from_secs(8);

/// Kills consumers of `name` one after the other until `stop`: each is started, killed at a
/// random moment, and waited for. Returns the kills.
fn killer(name: &str, seed: u64, stop: &std::sync::atomic::AtomicBool) -> anyhow::Result<u64> {
    use std::sync::atomic::Ordering;
    let mut x = seed | 1;
    let mut kills = 0;
    while !stop.load(Ordering::Acquire) {
        let mut group = Consumers::spawn(name, 1, false)?;
        let mut child = group.children.remove(0);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Half of them once attached (it said so), half at any moment before.
        if x.is_multiple_of(2) {
            if let Some(out) = child.stdout.take() {
                let mut line = String::new();
                let _ = BufReader::new(out).read_line(&mut line);
            }
        }
        std::thread::sleep(Duration::from_micros(x % 5000));
        let killed = child.kill();
        child.wait()?;
        killed?;
        kills += 1;
    }
    Ok(kills)
}

/// A consumer process: attaches, prints its attach time, holds and copies frames until the
/// publisher goes, prints the frames it held.
fn consumer(name: &str) -> anyhow::Result<()> {
    let cuda = CudaContext::new(0)?;
    let start = Instant::now();
    let mut sub = CudaSubscriber::attach(name, &cuda, false, WAIT)?;
    println!("ATTACH {}", start.elapsed().as_secs_f64() * 1e3);
    let stream = cuda.new_stream()?;
    let bytes = sub.slots()[0].size() as usize;
    let scratch = stream.alloc_zeros::<u8>(bytes)?;
    let (scratch_ptr, _sync) = cuvk::cudarc::driver::DevicePtr::device_ptr(&scratch, &stream);
    let mut held = 0u64;
    loop {
        match sub.hold(Duration::from_millis(100)) {
            Ok(Some(h)) => {
                sub.acquire(&h, &stream)?;
                let src = sub.slots()[h.slot()].device_ptr();
                // SAFETY: both ranges are `bytes` long on this GPU; the copy runs on `stream`
                // after the frame is written (acquire) and before the read is released.
                unsafe { result::memcpy_dtod_async(scratch_ptr, src, bytes, stream.cu_stream()) }?;
                sub.release(&h, &stream)?;
                held += 1;
            }
            Ok(None) => {}
            Err(cuvk::Error::Ipc(IpcError::PeerClosed { .. })) => break,
            Err(e) => return Err(e.into()),
        }
    }
    stream.synchronize()?;
    println!("HELD {held}");
    Ok(())
}

struct Consumers {
    children: Vec<Child>,
}

impl Consumers {
    /// `n` consumer processes of `name`; in namespaces of their own (PID, IPC, mount, as
    /// containers have them) where `contained`.
    fn spawn(name: &str, n: usize, contained: bool) -> anyhow::Result<Self> {
        let exe = std::env::current_exe()?;
        let children = (0..n)
            .map(|_| {
                let mut cmd = if contained {
                    let mut c = Command::new("unshare");
                    c.args(["--pid", "--ipc", "--mount", "--fork", "--mount-proc"])
                        .arg(&exe);
                    c
                } else {
                    Command::new(&exe)
                };
                cmd.args(["--consumer", name])
                    .stdout(Stdio::piped())
                    .spawn()
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Self { children })
    }

    /// (attach ms of each, frames held in all) once they have exited.
    fn finish(self) -> anyhow::Result<(Vec<f64>, u64)> {
        let (mut attach, mut held) = (Vec::new(), 0);
        for mut c in self.children {
            let out = c.stdout.take().context("no stdout")?;
            for line in BufReader::new(out).lines() {
                let line = line?;
                if let Some(v) = line.strip_prefix("ATTACH ") {
                    attach.push(v.parse()?);
                } else if let Some(v) = line.strip_prefix("HELD ") {
                    held += v.parse::<u64>()?;
                }
            }
            let _ = c.wait()?;
        }
        Ok((attach, held))
    }
}

/// What happens to consumers during a run.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// One of them is stopped (SIGSTOP) for the whole run.
    Stopped,
    /// None, but each consumer in PID, IPC and mount namespaces of its own (`unshare`), the
    /// socket a path in a directory they share.
    Contained,
    /// `lanes` more consumers each killed (SIGKILL) at a random moment within 5 ms of its
    /// attach (half of them before it finished attaching), and replaced, again and again for
    /// [`KILL_RUN`].
    Killed {
        lanes: usize,
    },
    /// None, but twice the slots (K = 2 × consumers + 2, at most 16): each slot rests longer
    /// between writes, so its reads are more often done before the publisher's stream gets
    /// there.
    Slack,
}

struct Row {
    frame: &'static str,
    consumers: usize,
    fault: Fault,
    slots: u32,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    period_us: f64,
    held: u64,
    attach_ms: Vec<f64>,
    kills: u64,
    bytes: u64,
    frames: u64,
    /// p99 µs of begin_frame, acquire, the write's enqueue, release.
    phase_p99: [f64; 4],
    /// How long the stream took to finish after the last frame's release (ms).
    drain_ms: f64,
}

/// Publishes frames while `more(frames so far, start)`: each a memset of its slot. Each
/// frame's host time goes into `times`; returns the frame period (µs, the stream
/// synchronised at the end) and the frames published.
fn publish(
    publisher: &mut Publisher,
    stream: &std::sync::Arc<cuvk::cudarc::driver::CudaStream>,
    bytes: u64,
    times: &mut Vec<[f64; 5]>,
    more: impl Fn(u64, Instant) -> bool,
) -> anyhow::Result<(f64, u64, f64)> {
    let start = Instant::now();
    let mut n = 0u64;
    let us = |t: Instant| t.elapsed().as_secs_f64() * 1e6;
    while more(n, start) {
        if let Some(period) = PACE.get() {
            let due = start + period.mul_f64(n as f64);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        let t = Instant::now();
        let f = publisher.begin_frame(WAIT)?;
        let begun = us(t);
        let t1 = Instant::now();
        publisher.acquire(&f, stream)?;
        let acquired = us(t1);
        let t2 = Instant::now();
        let slot = publisher.slot(f.slot()).context("slot")?;
        // SAFETY: the slot is `bytes` long on this GPU, written on `stream` after every read
        // of it released (acquire) and before the frame is published (release).
        unsafe {
            cuvk::cudarc::driver::sys::cuMemsetD32Async(
                slot.cuda_ptr(),
                n as u32,
                (bytes / 4) as usize,
                stream.cu_stream(),
            )
            .result()
        }?;
        let written = us(t2);
        let t3 = Instant::now();
        publisher.release(&f, stream)?;
        times.push([us(t), begun, acquired, written, us(t3)]);
        n += 1;
    }
    // What the GPU still had to do when the host was done: how far the stream ran behind.
    let drain = Instant::now();
    stream.synchronize()?;
    let drain_ms = drain.elapsed().as_secs_f64() * 1e3;
    Ok((
        start.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64,
        n,
        drain_ms,
    ))
}

impl Row {
    /// The consumers column: how many, and what happened to them.
    fn who(&self) -> String {
        match self.fault {
            Fault::None => self.consumers.to_string(),
            Fault::Stopped => format!("{} (1 stopped)", self.consumers),
            Fault::Contained => format!("{} (own PID, IPC, mount namespaces)", self.consumers),
            Fault::Slack => format!("{} (more slots)", self.consumers),
            Fault::Killed { lanes } => format!(
                "{} (+{lanes} killed and replaced: {} kills in {} frames)",
                self.consumers, self.kills, self.frames
            ),
        }
    }
}

fn run(
    bridge: &Bridge,
    frame: &'static str,
    bytes: u64,
    consumers: usize,
    fault: Fault,
    frames: u64,
) -> anyhow::Result<Row> {
    let name = if fault == Fault::Contained {
        // What containers share: a directory (a volume), not the abstract socket namespace.
        let dir = std::env::temp_dir().join(format!("cuvk-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        dir.join(format!("fanout-{consumers}"))
            .display()
            .to_string()
    } else {
        format!("bench-fanout-{}-{consumers}", std::process::id())
    };
    // K = consumers + 2, counting those being killed around the run.
    let passing = match fault {
        Fault::Killed { lanes } => lanes,
        _ => 0,
    };
    let slots = if fault == Fault::Slack {
        (2 * consumers as u32 + 2).min(cuvk::MAX_FRAMES_IN_FLIGHT)
    } else {
        ((consumers + passing) as u32 + 2).max(3)
    };
    let mut publisher = Publisher::new(
        &name,
        bridge,
        PublisherDesc {
            slots,
            bytes,
            element: U32,
        },
    )?;
    let stream = bridge.cuda().new_stream()?;
    let group = Consumers::spawn(&name, consumers, fault == Fault::Contained)?;
    let deadline = Instant::now() + WAIT;
    while publisher.consumers() < consumers {
        if Instant::now() > deadline {
            bail!("{consumers} consumers did not attach within {WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if fault == Fault::Stopped {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(group.children[0].id() as i32, libc::SIGSTOP) };
    }
    let mut times = Vec::with_capacity(frames as usize);
    let stop_killing = std::sync::atomic::AtomicBool::new(false);
    let killing = matches!(fault, Fault::Killed { .. });
    let (kills, period_us, frames_run, drain_ms) =
        std::thread::scope(|scope| -> anyhow::Result<_> {
            let killers: Vec<_> = match fault {
                Fault::Killed { lanes } => (0..lanes)
                    .map(|lane| {
                        let (name, stop) = (&name, &stop_killing);
                        scope.spawn(move || killer(name, 0x9E37_79B9 + lane as u64, stop))
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let publishing = publish(&mut publisher, &stream, bytes, &mut times, |n, start| {
                if killing {
                    start.elapsed() < KILL_RUN
                } else {
                    n < frames
                }
            });
            stop_killing.store(true, std::sync::atomic::Ordering::Release);
            let mut kills = 0;
            for k in killers {
                kills += k
                    .join()
                    .map_err(|_| anyhow::anyhow!("a killer panicked"))??;
            }
            let (period_us, n, drain_ms) = publishing?;
            Ok((kills, period_us, n, drain_ms))
        })?;
    if fault == Fault::Stopped {
        // SAFETY: as above.
        unsafe { libc::kill(group.children[0].id() as i32, libc::SIGCONT) };
    }
    drop(publisher);
    let (attach_ms, held) = group.finish()?;
    let warm = times.len() / 10;
    let column = |i: usize| {
        let mut v: Vec<f64> = times[warm..].iter().map(|t| t[i]).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let steady = column(0);
    let pick = |q: f64| steady[((steady.len() - 1) as f64 * q) as usize];
    let p99 = |i: usize| {
        let v = column(i);
        v[((v.len() - 1) as f64 * 0.99) as usize]
    };
    let phase_p99 = [p99(1), p99(2), p99(3), p99(4)];
    Ok(Row {
        frame,
        consumers,
        fault,
        slots,
        p50_us: pick(0.5),
        p99_us: pick(0.99),
        max_us: steady.last().copied().unwrap_or(0.0),
        period_us,
        held,
        attach_ms,
        kills,
        bytes,
        frames: frames_run,
        phase_p99,
        drain_ms,
    })
}

fn main() -> anyhow::Result<()> {
    cuvk_dev::logger::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--consumer") {
        return consumer(args.get(i + 1).context("--consumer NAME")?);
    }
    let frames: u64 = args
        .iter()
        .position(|a| a == "--frames")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse())
        .transpose()
        .context("--frames takes a number")?
        .unwrap_or(3000);
    let fps: Option<f64> = args
        .iter()
        .position(|a| a == "--fps")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse())
        .transpose()
        .context("--fps takes a number")?;
    if let Some(fps) = fps.filter(|f| *f > 0.0) {
        let _ = PACE.set(Duration::from_secs_f64(1.0 / fps));
    }
    let bridge = Bridge::new(BridgeConfig::default())?;
    println!("device: {}", bridge.vulkan().info().name);
    let mut rows = Vec::new();
    if let Some(fps) = fps {
        println!("the publisher paced at {fps} frames/s");
        for (frame, bytes) in [("4 KiB", 4096u64), ("1M particles (16 MB)", 16_000_000)] {
            for consumers in [0, 1, 2, 4, 8] {
                rows.push(run(&bridge, frame, bytes, consumers, Fault::None, frames)?);
            }
        }
        print_tables(&rows);
        return Ok(());
    }
    for (frame, bytes) in [("4 KiB", 4096u64), ("1M particles (16 MB)", 16_000_000)] {
        for consumers in [0, 1, 2, 4, 8] {
            rows.push(run(&bridge, frame, bytes, consumers, Fault::None, frames)?);
        }
        rows.push(run(&bridge, frame, bytes, 8, Fault::Stopped, frames)?);
        rows.push(run(&bridge, frame, bytes, 8, Fault::Slack, frames)?);
        // As root (unshare needs it): the same consumers as containers would run them.
        for consumers in [1, 8] {
            match run(&bridge, frame, bytes, consumers, Fault::Contained, frames) {
                Ok(r) => rows.push(r),
                Err(e) => println!("namespaces ({consumers} consumers): {e:#}"),
            }
        }
        rows.push(run(
            &bridge,
            frame,
            bytes,
            4,
            Fault::Killed { lanes: 4 },
            frames,
        )?);
    }
    // Attach of a 256 MiB slot set (4 slots of 64 MiB), 8 consumers at once.
    let big = run(&bridge, "256 MiB slot set", 64 << 20, 2, Fault::None, 200)?;
    let big8 = run(&bridge, "256 MiB slot set", 26_843_544, 8, Fault::None, 200)?;
    print_tables(&rows);
    for r in [big, big8] {
        let mut a = r.attach_ms.clone();
        let max = a.iter().copied().fold(0.0, f64::max);
        println!(
            "attach of {} slots x {:.1} MiB ({:.0} MiB) by {} consumers at once: median {:.2} ms, max {max:.2} ms",
            r.slots,
            r.bytes as f64 / (1 << 20) as f64,
            (r.bytes * u64::from(r.slots)) as f64 / (1 << 20) as f64,
            r.consumers,
            median(std::mem::take(&mut a))
        );
    }
    Ok(())
}

/// The two tables: time per frame by consumers, and where the host time goes.
fn print_tables(rows: &[Row]) {
    println!("\n| frame | consumers | K | publisher host µs/frame p50 | p99 | max | frame period µs | vs 0 consumers | vs 1 consumer | frames held (all consumers) | attach ms median / max |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let base = |frame: &str, c: usize| {
        rows.iter()
            .find(|r| r.frame == frame && r.consumers == c && r.fault == Fault::None)
            .map(|r| r.period_us)
    };
    for r in rows {
        let who = r.who();
        let vs = |b: Option<f64>| b.map_or("-".into(), |b| format!("{:.2}x", r.period_us / b));
        let mut a = r.attach_ms.clone();
        let attach = if a.is_empty() {
            "-".to_string()
        } else {
            let max = a.iter().copied().fold(0.0, f64::max);
            format!("{:.2} / {max:.2}", median(std::mem::take(&mut a)))
        };
        println!(
            "| {} | {who} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {attach} |",
            r.frame,
            r.slots,
            r.p50_us,
            r.p99_us,
            r.max_us,
            r.period_us,
            vs(base(r.frame, 0)),
            vs(base(r.frame, 1)),
            r.held
        );
    }
    println!("\nWhere the publisher's host time goes (p99 µs per call) and how far its stream ran behind (ms to drain at the end):\n");
    println!("| frame | consumers | begin_frame | acquire | write (enqueue) | release | stream drain ms |");
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        let [b, a, w, rel] = r.phase_p99;
        println!(
            "| {} | {} | {b:.1} | {a:.1} | {w:.1} | {rel:.1} | {:.2} |",
            r.frame,
            r.who(),
            r.drain_ms
        );
    }
}
