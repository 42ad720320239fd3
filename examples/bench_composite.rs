//! The depth compositor (issue 38): time per composite of N GPUs' pictures of `u64` samples
//! (depth over RGBA8, the nearest kept: `cuvk::nccl::DepthCompositor`), at 1080p and 4K, for
//! both schedules (one `ncclReduce`/`ncclAllReduce`, or `ncclReduceScatter` then a gather) to
//! one rank and to all, on NVLink and on NCCL's network transport (`NCCL_P2P_DISABLE=1
//! NCCL_SHM_DISABLE=1`: a stand-in for several nodes; as started, and with 4 threads × 4
//! sockets per peer), side by side in one run.
//!
//!     cargo run --release --example bench_composite [-- --gpus N]   (every GPU by default, at least 2)
//!
//! One process, one thread per rank; the network rows come from a child process (NCCL reads
//! its environment once). GPU-timed with CUDA events on rank 0's NCCL stream around
//! `--iters` back-to-back composites (200), after 20 warm-ups; each composite includes the
//! `StreamOrder` acquire and release a renderer pays.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use cuvk::cudarc::driver::sys;
use cuvk::nccl::{Communicator, CompositeSchedule, CompositeTo, DepthCompositor, NcclId};
use cuvk::{Bridge, BridgeConfig, BufferUsage, SharedBuffer, StreamOrder};

const WAIT: Duration = Duration::from_secs(60);
const WARMUP: usize = 20;
/// NVLink 4 on an H200 (NV18): 18 links × 25 GB/s per direction.
const NVLINK_GBPS: f64 = 450.0;
const SIZES: [(u32, u32, &str); 2] = [(1920, 1080, "1080p"), (3840, 2160, "4K")];

/// One measured row: (size, schedule, destination, ms per composite, bytes the busiest rank
/// sends per composite).
type Row = (&'static str, CompositeSchedule, CompositeTo, f64, f64);

/// Bytes the busiest rank sends per composite of a `picture`-byte picture over `n` ranks.
fn bytes_sent(schedule: CompositeSchedule, to: CompositeTo, picture: f64, n: f64) -> f64 {
    match (schedule, to) {
        // A ring or chain reduce: every rank but the root forwards a whole picture.
        (CompositeSchedule::Reduce, CompositeTo::Rank(_)) => picture,
        // Reduce-scatter then all-gather (what a ring all-reduce is): 2 (n-1)/n pictures.
        (_, CompositeTo::All) => 2.0 * (n - 1.0) / n * picture,
        // (n-1)/n of a picture in the reduce-scatter, then its band (1/n) to the root.
        _ => picture,
    }
}

fn measure(
    rank: usize,
    comm: &Communicator,
    bridge: &Bridge,
    iters: usize,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let order = StreamOrder::new(bridge)?;
    let marks = order.marks();
    let stream = comm.stream().clone();
    let ctx = stream.context().clone();
    for (w, h, label) in SIZES {
        let base = DepthCompositor::new(comm, w, h, WAIT)?;
        let n = base.pixels();
        let mut samples: SharedBuffer<u64> =
            bridge.create_buffer(n, BufferUsage::STORAGE_BUFFER)?;
        // Each rank nearer in alternate rows: half the pixels change hands.
        let host: Vec<u64> = (0..n)
            .map(|i| {
                // Rank r is nearest in every world-th row: the pixels change hands evenly.
                let near = (i / w as usize) % comm.world() == rank;
                (u64::from(near as u32 ^ 1) << 40) | i as u64
            })
            .collect();
        for schedule in [CompositeSchedule::Reduce, CompositeSchedule::ReduceScatter] {
            let c = base.with_schedule(schedule);
            for to in [CompositeTo::Rank(0), CompositeTo::All] {
                stream.memcpy_htod(&host, &mut samples)?;
                let mut last = 0;
                for _ in 0..WARMUP {
                    last = c.composite(comm, &mut samples, to, &order, &marks)?;
                }
                comm.wait_cuda(&order, last, WAIT)?;
                let start = ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
                let end = ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
                start.record(&stream)?;
                for _ in 0..iters {
                    last = c.composite(comm, &mut samples, to, &order, &marks)?;
                }
                end.record(&stream)?;
                comm.wait_cuda(&order, last, WAIT)?;
                end.synchronize()?;
                let ms = f64::from(start.elapsed_ms(&end)?) / iters as f64;
                let sent = bytes_sent(schedule, to, (n * 8) as f64, comm.world() as f64);
                rows.push((label, schedule, to, ms, sent));
            }
        }
    }
    Ok(rows)
}

/// The rows of this process's transport, measured on `gpus` GPUs (rank 0's timings).
fn rows(iters: usize, gpus: usize) -> anyhow::Result<Vec<Row>> {
    let devices = cuvk::cuda::devices()?.len();
    if gpus < 2 || devices < gpus {
        bail!("bench_composite needs 2 to {devices} GPUs here, not {gpus}");
    }
    let id = NcclId::new()?;
    let bridges = (0..gpus)
        .map(|g| {
            Bridge::new(BridgeConfig {
                cuda_device: cuvk::cuda::CudaDeviceChoice::Ordinal(g),
                ..Default::default()
            })
            .map(Arc::new)
        })
        .collect::<cuvk::Result<Vec<_>>>()?;
    let results: Vec<anyhow::Result<Vec<Row>>> = std::thread::scope(|s| {
        let handles: Vec<_> = bridges
            .iter()
            .enumerate()
            .map(|(rank, bridge)| {
                s.spawn(move || {
                    let comm = Communicator::init(bridge.cuda(), &id, rank, gpus)?;
                    measure(rank, &comm, bridge, iters)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a rank panicked")))
            })
            .collect()
    });
    let mut all = results.into_iter();
    let first = all.next().context("no rank")??;
    for r in all {
        r?;
    }
    Ok(first)
}

fn describe(to: CompositeTo) -> &'static str {
    match to {
        CompositeTo::Rank(_) => "rank 0",
        CompositeTo::All => "all",
    }
}

fn main() -> anyhow::Result<()> {
    cuvk_dev::logger::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let iters = args
        .iter()
        .position(|a| a == "--iters")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse())
        .transpose()
        .context("--iters takes a number")?
        .unwrap_or(200usize);
    // Ranks: every GPU by default (two on the 2-GPU machine, four on the 4-GPU one).
    let gpus = match args.iter().position(|a| a == "--gpus") {
        Some(i) => args
            .get(i + 1)
            .context("--gpus takes a number")?
            .parse()
            .context("--gpus takes a number")?,
        None => cuvk::cuda::devices()?.len(),
    };
    if args.iter().any(|a| a == "--rows") {
        // The child: its rows on stdout, one per line.
        for (size, schedule, to, ms, sent) in rows(iters, gpus)? {
            println!(
                "ROW {size} {schedule:?} {} {ms} {sent}",
                describe(to).replace(' ', "_")
            );
        }
        return Ok(());
    }
    let out = Command::new("nvidia-smi")
        .args(["--query-gpu=name,driver_version", "--format=csv,noheader"])
        .output();
    if let Ok(o) = out {
        print!("device: {}", String::from_utf8_lossy(&o.stdout));
    }
    println!("NCCL {}, {gpus} ranks", cuvk::nccl::version()?);
    let mut table = Vec::new();
    // The network transport as NCCL starts it, then with more sockets and threads per peer
    // (what a TCP-only cluster would tune first).
    for (transport, net, sockets) in [
        ("NVLink", false, None),
        ("network (P2P, SHM off)", true, None),
        ("network, 4 threads x 4 sockets", true, Some("4")),
    ] {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args([
            "--rows",
            "--iters",
            &iters.to_string(),
            "--gpus",
            &gpus.to_string(),
        ]);
        if net {
            cmd.env("NCCL_P2P_DISABLE", "1")
                .env("NCCL_SHM_DISABLE", "1");
        }
        if let Some(n) = sockets {
            cmd.env("NCCL_SOCKET_NTHREADS", n)
                .env("NCCL_NSOCKS_PERTHREAD", n);
        }
        let out = cmd.output()?;
        if !out.status.success() {
            bail!(
                "{transport}: {}",
                String::from_utf8_lossy(&out.stderr).trim_end()
            );
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if let ["ROW", size, schedule, to, ms, sent] = f[..] {
                table.push((
                    transport,
                    net,
                    size.to_string(),
                    schedule.to_string(),
                    to.replace('_', " "),
                    ms.parse::<f64>()?,
                    sent.parse::<f64>()?,
                ));
            }
        }
    }
    println!("\n| transport | picture | schedule | to | ms per composite | Gpixel/s | MB sent (busiest rank) | GB/s | of NVLink (450 GB/s) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (transport, net, size, schedule, to, ms, sent) in table {
        let pixels = if size == "4K" {
            3840.0 * 2160.0
        } else {
            1920.0 * 1080.0
        };
        let gbps = sent / (ms * 1e-3) / 1e9;
        let share = if net {
            "-".to_string()
        } else {
            format!("{:.0}%", 100.0 * gbps / NVLINK_GBPS)
        };
        println!(
            "| {transport} | {size} | {schedule} | {to} | {ms:.3} | {:.1} | {:.1} | {gbps:.0} | {share} |",
            pixels / (ms * 1e-3) / 1e9,
            sent / 1e6
        );
    }
    Ok(())
}
