//! Does an outstanding CUDA semaphore wait disturb Vulkan work on the same GPU? NVIDIA's
//! Omniverse RTX SDK documents "scheduling bubbles" in Vulkan work submitted on Linux while a
//! CUDA stream waits on an external semaphore; the frame pacer keeps such a wait outstanding
//! every frame (`AcquireWait::Gpu`). This times the same Vulkan work (copies of a shared
//! buffer, GPU timestamps around each) side by side in one run:
//!
//! - `CUDA idle`: nothing on any CUDA stream;
//! - `CUDA wait outstanding`: a CUDA stream waits on a timeline value the host signals only
//!   after the Vulkan work;
//! - `CUDA wait + kernel queued behind it`: the same with a kernel queued after the wait on
//!   that stream (what the pacer's acquire + simulation step look like);
//! - `CUDA kernels running`: no wait, but CUDA copy kernels run while Vulkan works (the two
//!   contexts time-slicing, the other suspect);
//!
//! and prints each row's p50/p99 GPU time per copy and its ratio to `CUDA idle`.
//!
//!     cargo run --release --example bench_bubble [-- --mib 256 --reps 20 --json out.json]

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::vulkan::SemaphoreKind;
use cuvk::{Bridge, BridgeConfig, BufferUsage, SharedBuffer};
use cuvk_dev::demo::percentile;
use cuvk_dev::{demo, kernels, logger};

/// Copies per measurement (each timed on its own).
const COPIES: u32 = 8;

struct Setup {
    bridge: Bridge,
    k: kernels::Kernels,
    src: SharedBuffer<u8>,
    dst: SharedBuffer<u8>,
    /// CUDA-only buffers the concurrent kernels copy between.
    cuda_src: SharedBuffer<u8>,
    cuda_dst: SharedBuffer<u8>,
    bytes: u64,
}

/// What CUDA does while the Vulkan copies run.
#[derive(Clone, Copy, PartialEq)]
enum Cuda {
    Idle,
    WaitOutstanding,
    WaitThenKernel,
    KernelsRunning,
}

impl Cuda {
    fn name(self) -> &'static str {
        match self {
            Cuda::Idle => "CUDA idle",
            Cuda::WaitOutstanding => "CUDA wait outstanding",
            Cuda::WaitThenKernel => "CUDA wait + kernel queued behind it",
            Cuda::KernelsRunning => "CUDA kernels running (no wait)",
        }
    }
}

/// GPU seconds of each of `COPIES` Vulkan copies of `s.src` into `s.dst`, `reps` times, with
/// CUDA doing `cuda` meanwhile.
fn measure(s: &Setup, cuda: Cuda, reps: u32) -> anyhow::Result<Vec<f64>> {
    let stream = s.bridge.cuda().new_stream()?;
    let gate = s
        .bridge
        .create_semaphore(SemaphoreKind::Timeline { initial: 0 })?;
    let mut all = Vec::new();
    for rep in 1..=u64::from(reps) {
        match cuda {
            Cuda::Idle => {}
            Cuda::WaitOutstanding => gate.cuda.wait(&stream, rep)?,
            Cuda::WaitThenKernel => {
                gate.cuda.wait(&stream, rep)?;
                s.k.fill(&stream, s.cuda_dst.kernel_arg(), s.bytes / 4, rep as u32)?;
            }
            Cuda::KernelsRunning => {
                for _ in 0..4 * COPIES {
                    s.k.copy(
                        &stream,
                        s.cuda_src.kernel_arg(),
                        s.cuda_dst.kernel_arg(),
                        s.bytes,
                    )?;
                }
            }
        }
        let region = [vk::BufferCopy {
            src_offset: 0,
            dst_offset: 0,
            size: s.bytes,
        }];
        let (src, dst) = (s.src.vk_buffer(), s.dst.vk_buffer());
        // SAFETY: both shared buffers outlive the synchronous submission; the copies cover
        // their whole common size; a barrier orders each copy after the previous one.
        let seconds = unsafe {
            demo::gpu_span_seconds(
                s.bridge.vulkan(),
                COPIES,
                |_, _| {},
                |dev, cmd, _| {
                    dev.cmd_copy_buffer(cmd, src, dst, &region);
                    let barrier = [vk::MemoryBarrier::default()
                        .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                        .dst_access_mask(vk::AccessFlags::TRANSFER_WRITE)];
                    dev.cmd_pipeline_barrier(
                        cmd,
                        vk::PipelineStageFlags::TRANSFER,
                        vk::PipelineStageFlags::TRANSFER,
                        vk::DependencyFlags::empty(),
                        &barrier,
                        &[],
                        &[],
                    );
                },
                |_, _| {},
            )
        }?;
        all.extend(seconds);
        if matches!(cuda, Cuda::WaitOutstanding | Cuda::WaitThenKernel) {
            gate.vulkan.signal_host(rep)?;
        }
        stream.synchronize()?;
    }
    Ok(all)
}

fn main() -> anyhow::Result<()> {
    logger::init();
    let (mut mib, mut reps) = (256u64, 20u32);
    let mut json_path: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--mib" => mib = args.next().context("--mib N")?.parse()?,
            "--reps" => reps = args.next().context("--reps N")?.parse()?,
            "--json" => json_path = Some(args.next().context("--json PATH")?),
            other => bail!("unknown argument {other} (--mib N, --reps N, --json PATH)"),
        }
    }
    let bridge = Bridge::new(BridgeConfig::default())?;
    let bytes = mib << 20;
    let n = usize::try_from(bytes)?;
    let usage = BufferUsage::STORAGE_BUFFER;
    let s = Setup {
        k: kernels::Kernels::load(bridge.cuda())?,
        src: bridge.create_buffer(n, usage)?,
        dst: bridge.create_buffer(n, usage)?,
        cuda_src: bridge.create_buffer(n, usage)?,
        cuda_dst: bridge.create_buffer(n, usage)?,
        bytes,
        bridge,
    };
    println!(
        "device: {}; CUDA_DEVICE_MAX_CONNECTIONS={}",
        s.bridge.vulkan().info().describe(),
        std::env::var("CUDA_DEVICE_MAX_CONNECTIONS").unwrap_or_else(|_| "(unset)".into())
    );
    measure(&s, Cuda::Idle, 3)?; // warm-up
    let conditions = [
        Cuda::Idle,
        Cuda::WaitOutstanding,
        Cuda::WaitThenKernel,
        Cuda::KernelsRunning,
    ];
    println!("\nVulkan copy of {mib} MiB, GPU time per copy ({COPIES} copies x {reps} reps)");
    println!("| CUDA meanwhile                        | p50 ms | p99 ms |  GB/s | vs idle |");
    println!("|---------------------------------------|--------|--------|-------|---------|");
    let mut idle_p50 = None;
    let mut json = Vec::new();
    for c in conditions {
        let mut t = measure(&s, c, reps)?;
        let (p50, p99) = (percentile(&mut t, 0.5), percentile(&mut t, 0.99));
        let base = *idle_p50.get_or_insert(p50);
        let gbps = 2.0 * bytes as f64 / p50 / 1e9;
        println!(
            "| {:<37} | {:>6.3} | {:>6.3} | {gbps:>5.0} | {:>6.2}x |",
            c.name(),
            p50 * 1e3,
            p99 * 1e3,
            p50 / base
        );
        json.push(format!(
            "{{\"cuda\":\"{}\",\"p50_ms\":{:.4},\"p99_ms\":{:.4},\"gbps\":{gbps:.1}}}",
            c.name(),
            p50 * 1e3,
            p99 * 1e3
        ));
    }
    if let Some(p) = json_path {
        let body = format!(
            "{{\"device\":\"{}\",\"mib\":{mib},\"rows\":[{}]}}\n",
            s.bridge.vulkan().info().name,
            json.join(",")
        );
        std::fs::write(&p, body).with_context(|| format!("writing {p}"))?;
        println!("wrote {p}");
    }
    Ok(())
}
