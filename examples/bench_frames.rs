//! Per-frame CUDA→Vulkan handoff cost, side by side in one run:
//!
//! - `raw one-way`: raw calls, CUDA signals and Vulkan waits, CUDA never waits back;
//! - `pacer K=1..8`: the frame pacer, pipelined (CUDA writes, semaphores, Vulkan reads);
//! - `pacer, host-wait acquire`: the same with `AcquireWait::Host` (CUDA's wait for Vulkan's
//!   release made on the host: no CUDA semaphore wait outstanding);
//! - `no sync`: the same launches and submits with no ordering at all (the floor the pacer's
//!   overhead is measured against; its results are wrong by design);
//! - `cpu waits`: CUDA kernel + stream synchronize, then Vulkan submit + fence wait;
//! - `ping-pong`: strict CUDA→Vulkan→CUDA, each side waiting for the other on the GPU,
//!   with default and with highest CUDA stream priority;
//! - `cuda ping-pong`: the same alternation between two CUDA streams (events), no Vulkan;
//! - `vulkan ping-pong`: alternating dependent submissions on one Vulkan queue, no CUDA;
//! - `inline K=..`: the CUDA kernel launched inside the Vulkan command buffer
//!   (`VK_NVX_binary_import`), then a barrier, then the check — no CUDA context, no semaphore
//!   handoff; beside the all-Vulkan control (`vkCmdFillBuffer` instead of the kernel).
//!
//! Each frame's work is tiny (4 KiB written by CUDA, checked by a Vulkan compute shader), so
//! the numbers are the synchronisation cost.
//!
//!     cargo run --release --example bench_frames [-- --frames 5000 --json out.json]

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use checker::Checker;
use cuvk::ash::vk;
use cuvk::cudarc::driver::sys;
use cuvk::import_semaphore;
use std::sync::Arc;

use cuvk::vulkan::{
    record_kernel_barrier, AsVkBuffer, BoundBuffer, CuFunction, CuModule, DeviceChoice, HostBuffer,
    KernelArg, LaunchDims, Semaphore, SemaphoreDesc, SemaphoreKind, SemaphoreOp, VulkanConfig,
    VulkanContext,
};
use cuvk::{AcquireWait, Bridge, BufferUsage, SharedBuffer};
use cuvk_dev::{checker, kernels, logger, CommandSlots};
use kernels::Kernels;

const ELEMENTS: usize = 1024;
const WAIT: Duration = Duration::from_secs(30);

struct Setup {
    bridge: Bridge,
    k: Kernels,
    slots: Vec<SharedBuffer<u32>>,
    result: HostBuffer,
}

impl Setup {
    fn checker(&self, command_slots: usize) -> anyhow::Result<Checker> {
        Checker::new(&self.bridge, &self.slots, &self.result, command_slots)
    }
    fn reset_result(&mut self) -> anyhow::Result<()> {
        self.result.write(&[0u32; 3])?;
        Ok(())
    }
}

fn per_frame_us(t: Instant, frames: u64) -> f64 {
    t.elapsed().as_secs_f64() * 1e6 / frames as f64
}

/// The pacer, K frames in flight (K <= slots).
fn pacer(
    s: &mut Setup,
    k_in_flight: u32,
    frames: u64,
    acquire: AcquireWait,
) -> anyhow::Result<(f64, u32)> {
    checker::paced_frames(
        &s.bridge,
        &s.k,
        &s.slots,
        &mut s.result,
        k_in_flight,
        frames,
        acquire,
    )
}

/// What writes the frame number into the slot inside the Vulkan command buffer.
enum InlineWriter<'a> {
    /// A CUDA kernel launched in the Vulkan queue.
    Kernel(&'a CuFunction),
    /// `vkCmdFillBuffer`: the all-Vulkan control.
    VulkanFill,
}

/// Frames whose one command buffer writes the slot (kernel or fill), barriers, and checks it;
/// K frames in flight (command slots reused after frame N - 2K, data slots N % K). With
/// `strict`, the CPU waits for each frame before recording the next.
fn inline_frames(
    s: &mut Setup,
    writer: InlineWriter<'_>,
    k_in_flight: u32,
    frames: u64,
    strict: bool,
) -> anyhow::Result<(f64, u32)> {
    s.reset_result()?;
    let ctx = s.bridge.vulkan().clone();
    let done = Semaphore::new(&ctx, SemaphoreDesc::LOCAL_TIMELINE)?;
    let checker = s.checker(2 * k_in_flight as usize)?;
    let t = Instant::now();
    for n in 1..=frames {
        let f = cuvk_dev::unpaced_frame(n, k_in_flight);
        let wait_for = if strict {
            n.checked_sub(1)
        } else {
            n.checked_sub(2 * u64::from(k_in_flight))
        };
        if let Some(prev) = wait_for.filter(|&p| p > 0) {
            done.wait_host(prev, WAIT)?;
        }
        let slot = &s.slots[f.slot];
        let args = [
            KernelArg::address(slot.device_address().context("no device address")?),
            KernelArg::value(&(ELEMENTS as u64)),
            KernelArg::value(&(n as u32)),
        ];
        let (buf, bytes) = (slot.vk_buffer(), slot.byte_size());
        // SAFETY: the command slot's previous frame completed (waited above); everything the
        // commands use lives until the final wait.
        let cmd = unsafe {
            checker.record_with(f.command_slot, f.slot, n as u32, None, |cmd| {
                match &writer {
                    InlineWriter::Kernel(fill) => {
                        fill.record_launch(cmd, &LaunchDims::linear(4, 256), &args)?
                    }
                    InlineWriter::VulkanFill => {
                        ctx.device().cmd_fill_buffer(cmd, buf, 0, bytes, n as u32)
                    }
                }
                record_kernel_barrier(&ctx, cmd);
                Ok(())
            })?
        };
        let signal = [SemaphoreOp {
            semaphore: &done,
            value: n,
            stage: vk::PipelineStageFlags::empty(),
        }];
        // SAFETY: executable command buffer of this device; waited for below.
        unsafe { ctx.submit_with_semaphores(&[cmd], &[], &signal, vk::Fence::null())? };
    }
    done.wait_host(frames, WAIT)?;
    let us = per_frame_us(t, frames);
    drop(checker);
    Ok((us, checker::read_result(&s.result)?.0))
}

/// Same launches and submits, no ordering; a fence every 2 frames bounds the CPU's lead so
/// command slots can be reused (the pacer bounds it the same way).
fn no_sync(s: &mut Setup, frames: u64) -> anyhow::Result<f64> {
    s.reset_result()?;
    let stream = s.bridge.cuda().new_stream()?;
    let ctx = s.bridge.vulkan().clone();
    let timeline = Semaphore::new(&ctx, SemaphoreDesc::LOCAL_TIMELINE)?;
    let checker = s.checker(4)?;
    let t = Instant::now();
    for n in 1..=frames {
        if n > 4 {
            timeline.wait_host(n - 4, WAIT)?;
        }
        s.k.fill(&stream, s.slots[0].kernel_arg(), ELEMENTS as u64, n as u32)?;
        let signal = [SemaphoreOp {
            semaphore: &timeline,
            value: n,
            stage: vk::PipelineStageFlags::empty(),
        }];
        // SAFETY: command slot n % 4 finished (waited above); resources live until the end.
        unsafe {
            let cmd = checker.record((n % 4) as usize, 0, n as u32, None)?;
            ctx.submit_with_semaphores(&[cmd], &[], &signal, vk::Fence::null())?;
        }
    }
    timeline.wait_host(frames, WAIT)?;
    stream.synchronize()?;
    Ok(per_frame_us(t, frames))
}

/// Raw calls, one way: CUDA kernel + signal, Vulkan submit waits for it; CUDA never waits for
/// Vulkan (so results race by design). Without `vulkan_work` the submission carries only the
/// semaphore operations, as DESIGN.md's 11 us measurement did.
fn one_way(s: &mut Setup, frames: u64, vulkan_work: bool) -> anyhow::Result<f64> {
    s.reset_result()?;
    let cuda = s.bridge.cuda().clone();
    let stream = cuda.new_stream()?;
    let ctx = s.bridge.vulkan().clone();
    let to_vk = Semaphore::new(&ctx, SemaphoreDesc::SHARED_TIMELINE)?;
    let to_vk_cu = import_semaphore(&cuda, &to_vk)?;
    let done = Semaphore::new(&ctx, SemaphoreDesc::LOCAL_TIMELINE)?;
    let checker = s.checker(8)?;
    let t = Instant::now();
    for n in 1..=frames {
        if n > 8 {
            done.wait_host(n - 8, WAIT)?;
        }
        s.k.fill(&stream, s.slots[0].kernel_arg(), ELEMENTS as u64, n as u32)?;
        to_vk_cu.signal(&stream, n)?;
        let wait = [SemaphoreOp {
            semaphore: &to_vk,
            value: n,
            stage: vk::PipelineStageFlags::COMPUTE_SHADER,
        }];
        let signal = [SemaphoreOp {
            semaphore: &done,
            value: n,
            stage: vk::PipelineStageFlags::empty(),
        }];
        // SAFETY: command slot n % 8 finished; resources live until the final wait.
        unsafe {
            let cmds = if vulkan_work {
                vec![checker.record((n % 8) as usize, 0, n as u32, None)?]
            } else {
                vec![]
            };
            ctx.submit_with_semaphores(&cmds, &wait, &signal, vk::Fence::null())?;
        }
    }
    done.wait_host(frames, WAIT)?;
    Ok(per_frame_us(t, frames))
}

/// CUDA kernel + stream synchronize, Vulkan submit + fence wait, every frame.
fn cpu_waits(s: &mut Setup, frames: u64) -> anyhow::Result<(f64, u32)> {
    s.reset_result()?;
    let stream = s.bridge.cuda().new_stream()?;
    let ctx = s.bridge.vulkan().clone();
    let checker = s.checker(1)?;
    // SAFETY: valid device; destroyed below.
    let fence = unsafe {
        ctx.device()
            .create_fence(&vk::FenceCreateInfo::default(), None)
    }?;
    let t = Instant::now();
    for n in 1..=frames {
        s.k.fill(&stream, s.slots[0].kernel_arg(), ELEMENTS as u64, n as u32)?;
        stream.synchronize()?;
        // SAFETY: the previous submission completed (fence waited); resources are alive.
        unsafe {
            let cmd = checker.record(0, 0, n as u32, None)?;
            ctx.submit_with_semaphores(&[cmd], &[], &[], fence)?;
            ctx.device().wait_for_fences(&[fence], true, u64::MAX)?;
            ctx.device().reset_fences(&[fence])?;
        }
    }
    let us = per_frame_us(t, frames);
    // SAFETY: nothing pending on it.
    unsafe { ctx.device().destroy_fence(fence, None) };
    drop(checker);
    Ok((us, checker::read_result(&s.result)?.0))
}

/// Strict alternation: CUDA writes N, Vulkan checks N, CUDA waits for that before N+1.
fn ping_pong(s: &mut Setup, frames: u64, priority: Option<i32>) -> anyhow::Result<(f64, u32)> {
    s.reset_result()?;
    let cuda = s.bridge.cuda().clone();
    let stream = match priority {
        Some(p) => cuda.new_stream_with_priority(p)?,
        None => cuda.new_stream()?,
    };
    let ctx = s.bridge.vulkan().clone();
    let (to_vk, to_cuda) = (
        Semaphore::new(&ctx, SemaphoreDesc::SHARED_TIMELINE)?,
        Semaphore::new(&ctx, SemaphoreDesc::SHARED_TIMELINE)?,
    );
    let (to_vk_cu, to_cuda_cu) = (
        import_semaphore(&cuda, &to_vk)?,
        import_semaphore(&cuda, &to_cuda)?,
    );
    let checker = s.checker(4)?;
    let t = Instant::now();
    for n in 1..=frames {
        if n > 4 {
            to_cuda.wait_host(n - 4, WAIT)?; // command-slot reuse only; rarely blocks
        }
        if n > 1 {
            to_cuda_cu.wait(&stream, n - 1)?;
        }
        s.k.fill(&stream, s.slots[0].kernel_arg(), ELEMENTS as u64, n as u32)?;
        to_vk_cu.signal(&stream, n)?;
        let wait = [SemaphoreOp {
            semaphore: &to_vk,
            value: n,
            stage: vk::PipelineStageFlags::COMPUTE_SHADER,
        }];
        let signal = [SemaphoreOp {
            semaphore: &to_cuda,
            value: n,
            stage: vk::PipelineStageFlags::empty(),
        }];
        // SAFETY: command slot n % 4 finished; resources live until the final wait.
        unsafe {
            let cmd = checker.record((n % 4) as usize, 0, n as u32, None)?;
            ctx.submit_with_semaphores(&[cmd], &wait, &signal, vk::Fence::null())?;
        }
    }
    to_cuda.wait_host(frames, WAIT)?;
    let us = per_frame_us(t, frames);
    drop(checker);
    Ok((us, checker::read_result(&s.result)?.0))
}

/// Strict alternation between two CUDA streams through events: no Vulkan, no API switch.
fn cuda_ping_pong(s: &Setup, frames: u64) -> anyhow::Result<f64> {
    let cuda = s.bridge.cuda();
    let (a, b) = (cuda.new_stream()?, cuda.new_stream()?);
    let t = Instant::now();
    for n in 1..=frames {
        s.k.fill(&a, s.slots[0].kernel_arg(), ELEMENTS as u64, n as u32)?;
        let e = a.record_event(None)?;
        b.wait(&e)?;
        s.k.fill(&b, s.slots[0].kernel_arg(), ELEMENTS as u64, n as u32)?;
        let e = b.record_event(None)?;
        a.wait(&e)?;
    }
    a.synchronize()?;
    Ok(per_frame_us(t, frames))
}

/// Strict alternation of dependent submissions on one Vulkan queue (timeline-chained): no CUDA.
fn vulkan_ping_pong(s: &mut Setup, frames: u64) -> anyhow::Result<f64> {
    s.reset_result()?;
    let ctx = s.bridge.vulkan().clone();
    let sem = Semaphore::new(&ctx, SemaphoreDesc::LOCAL_TIMELINE)?;
    let checker = s.checker(8)?;
    let t = Instant::now();
    for n in 1..=frames {
        for half in 0..2u64 {
            let v = 2 * n - 1 + half;
            if v > 8 {
                sem.wait_host(v - 8, WAIT)?;
            }
            let wait = [SemaphoreOp {
                semaphore: &sem,
                value: v - 1,
                stage: vk::PipelineStageFlags::COMPUTE_SHADER,
            }];
            let signal = [SemaphoreOp {
                semaphore: &sem,
                value: v,
                stage: vk::PipelineStageFlags::empty(),
            }];
            // SAFETY: command slot v % 8 finished; resources live until the final wait.
            unsafe {
                let cmd = checker.record((v % 8) as usize, 0, 0, None)?;
                ctx.submit_with_semaphores(
                    &[cmd],
                    if v > 1 { &wait } else { &[] },
                    &signal,
                    vk::Fence::null(),
                )?;
            }
        }
    }
    sem.wait_host(2 * frames, WAIT)?;
    Ok(per_frame_us(t, frames))
}

/// Strict alternation of tiny fills between two queues' submissions, each waiting for the
/// other's timeline value: on one `VkDevice` (same context), or on two `VkDevice`s of the same
/// GPU sharing the timeline through an exported semaphore (two contexts, like CUDA + Vulkan).
fn vulkan_fill_ping_pong(s: &Setup, frames: u64, two_devices: bool) -> anyhow::Result<f64> {
    let a = s.bridge.vulkan().clone();
    let b = if two_devices {
        VulkanContext::new(VulkanConfig {
            device: DeviceChoice::Uuid(a.info().device_uuid),
            ..Default::default()
        })?
    } else {
        a.clone()
    };
    let timeline = SemaphoreKind::Timeline { initial: 0 };
    let sem_a = Semaphore::new(
        &a,
        SemaphoreDesc {
            kind: timeline,
            exportable: two_devices,
        },
    )?;
    let sem_b = if two_devices {
        // SAFETY: a fresh export of a timeline semaphore of the same GPU and driver.
        unsafe { Semaphore::import(&b, sem_a.export()?, timeline) }?
    } else {
        sem_a.clone()
    };
    let usage = vk::BufferUsageFlags::TRANSFER_DST | vk::BufferUsageFlags::TRANSFER_SRC;
    let local = vk::MemoryPropertyFlags::DEVICE_LOCAL;
    let (buf_a, buf_b) = (
        BoundBuffer::new_exportable(&a, 4096, usage, local)?,
        BoundBuffer::new_exportable(&b, 4096, usage, local)?,
    );
    let (slots_a, slots_b) = (CommandSlots::new(&a, 8)?, CommandSlots::new(&b, 8)?);
    let submit = |ctx: &Arc<VulkanContext>,
                  slots: &CommandSlots,
                  buf: &BoundBuffer,
                  sem: &Semaphore,
                  n: u64,
                  wait: u64,
                  signal: u64|
     -> anyhow::Result<()> {
        // SAFETY: slot n % 8 was last used 8 submissions ago on this queue, which the host
        // throttle below has seen complete; the buffer and semaphore outlive the final wait.
        unsafe {
            let cmd = slots.begin(n as usize)?;
            ctx.device()
                .cmd_fill_buffer(cmd, buf.vk_buffer(), 0, 4096, n as u32);
            ctx.device().end_command_buffer(cmd)?;
            let w = [SemaphoreOp {
                semaphore: sem,
                value: wait,
                stage: vk::PipelineStageFlags::TRANSFER,
            }];
            let sig = [SemaphoreOp {
                semaphore: sem,
                value: signal,
                stage: vk::PipelineStageFlags::empty(),
            }];
            ctx.submit_with_semaphores(
                &[cmd],
                if wait > 0 { &w } else { &[] },
                &sig,
                vk::Fence::null(),
            )?;
        }
        Ok(())
    };
    let t = Instant::now();
    for n in 1..=frames {
        if n > 4 {
            sem_a.wait_host(2 * (n - 4), WAIT)?;
        }
        submit(&a, &slots_a, &buf_a, &sem_a, n, 2 * n - 2, 2 * n - 1)?;
        submit(&b, &slots_b, &buf_b, &sem_b, n, 2 * n - 1, 2 * n)?;
    }
    sem_a.wait_host(2 * frames, WAIT)?;
    Ok(per_frame_us(t, frames))
}

fn main() -> anyhow::Result<()> {
    logger::init();
    let mut frames: u64 = 5000;
    let mut json_path: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--frames" => frames = args.next().context("--frames N")?.parse()?,
            "--json" => json_path = Some(args.next().context("--json PATH")?),
            other => bail!("unknown argument {other}"),
        }
    }
    let bridge = cuvk_dev::demo::bench_bridge()?;
    let k = Kernels::load(bridge.cuda())?;
    let slots = (0..8)
        .map(|_| bridge.create_buffer::<u32>(ELEMENTS, BufferUsage::STORAGE_BUFFER))
        .collect::<cuvk::Result<Vec<_>>>()?;
    let result = HostBuffer::new(bridge.vulkan(), 12, vk::BufferUsageFlags::STORAGE_BUFFER)?;
    let mut s = Setup {
        bridge,
        k,
        slots,
        result,
    };
    // The highest CUDA stream priority (numerically lowest) of this context.
    let (mut _least, mut lo) = (0i32, 0i32);
    s.bridge.cuda().bind_to_thread()?;
    // SAFETY: plain out-parameters; the context is bound.
    unsafe { sys::cuCtxGetStreamPriorityRange(&mut _least, &mut lo) }.result()?;

    // Warm-up of every path (module load, pipeline creation, driver caches).
    pacer(&mut s, 2, 200, AcquireWait::Gpu)?;
    pacer(&mut s, 2, 200, AcquireWait::Host)?;
    cpu_waits(&mut s, 50)?;
    ping_pong(&mut s, 50, None)?;

    let mut rows: Vec<(String, f64, Option<u32>)> = Vec::new();
    let floor = no_sync(&mut s, frames)?;
    rows.push(("no sync (floor, results unordered)".into(), floor, None));
    let raw = one_way(&mut s, frames, true)?;
    rows.push((
        "raw one-way CUDA->Vulkan, no reverse wait".into(),
        raw,
        None,
    ));
    let raw_empty = one_way(&mut s, frames, false)?;
    rows.push(("raw one-way, empty Vulkan submit".into(), raw_empty, None));
    for kk in [1, 2, 3, 4, 8] {
        let (us, bad) = pacer(&mut s, kk, frames, AcquireWait::Gpu)?;
        rows.push((format!("pacer, pipelined, K={kk}"), us, Some(bad)));
    }
    // The same with CUDA's acquire waited for on the host: no CUDA semaphore wait is ever
    // outstanding while Vulkan work is submitted (NVIDIA's Linux "scheduling bubble").
    for kk in [1, 3, 8] {
        let (us, bad) = pacer(&mut s, kk, frames, AcquireWait::Host)?;
        rows.push((format!("pacer, host-wait acquire, K={kk}"), us, Some(bad)));
    }
    let (cpu_us, bad) = cpu_waits(&mut s, frames.min(2000))?;
    rows.push(("CPU waits (stream sync + fence)".into(), cpu_us, Some(bad)));
    let (pp, bad) = ping_pong(&mut s, frames.min(2000), None)?;
    rows.push(("ping-pong CUDA->Vulkan->CUDA".into(), pp, Some(bad)));
    let (pp_hi, bad) = ping_pong(&mut s, frames.min(2000), Some(lo))?;
    rows.push((
        format!("ping-pong, CUDA stream priority {lo}"),
        pp_hi,
        Some(bad),
    ));
    rows.push((
        "CUDA-only ping-pong, 2 streams".into(),
        cuda_ping_pong(&s, frames.min(2000))?,
        None,
    ));
    rows.push((
        "Vulkan fill ping-pong, 1 VkDevice".into(),
        vulkan_fill_ping_pong(&s, frames.min(2000), false)?,
        None,
    ));
    rows.push((
        "Vulkan fill ping-pong, 2 VkDevices".into(),
        vulkan_fill_ping_pong(&s, frames.min(2000), true)?,
        None,
    ));
    rows.push((
        "Vulkan-only ping-pong, 1 queue".into(),
        vulkan_ping_pong(&mut s, frames.min(2000))?,
        None,
    ));

    match cuvk::vulkan::cuda_kernels_supported(s.bridge.vulkan()) {
        Ok(()) => {
            let ptx = cuvk::cuda::compile_ptx(s.bridge.cuda(), "roundtrip.cu", kernels::SOURCE)?;
            let module = CuModule::from_ptx(s.bridge.vulkan(), &ptx)?;
            let fill = module.function("fill_u32")?;
            inline_frames(&mut s, InlineWriter::Kernel(&fill), 2, 200, false)?; // warm-up
            for kk in [1, 3, 8] {
                let (us, bad) =
                    inline_frames(&mut s, InlineWriter::Kernel(&fill), kk, frames, false)?;
                rows.push((
                    format!("inline kernel in Vulkan queue, K={kk}"),
                    us,
                    Some(bad),
                ));
                let (us, bad) = inline_frames(&mut s, InlineWriter::VulkanFill, kk, frames, false)?;
                rows.push((format!("all-Vulkan control (fill), K={kk}"), us, Some(bad)));
            }
            let n = frames.min(2000);
            let (us, bad) = inline_frames(&mut s, InlineWriter::Kernel(&fill), 1, n, true)?;
            rows.push((
                "inline, strict (CPU waits each frame)".into(),
                us,
                Some(bad),
            ));
            let (us, bad) = inline_frames(&mut s, InlineWriter::VulkanFill, 1, n, true)?;
            rows.push(("all-Vulkan control, strict".into(), us, Some(bad)));
        }
        Err(e) => println!("inline rows skipped: {e}"),
    }

    println!("\nper-frame cost, {ELEMENTS} u32 per frame (us per frame; mismatches = elements Vulkan read wrong)");
    println!("| path                                        | us/frame | mismatches |");
    println!("|---------------------------------------------|----------|------------|");
    for (name, us, bad) in &rows {
        let bad = bad.map_or("-".to_string(), |b| b.to_string());
        println!("| {name:<43} | {us:>8.1} | {bad:>10} |");
    }
    let pacer_rows: Vec<f64> = rows
        .iter()
        .filter(|r| r.0.starts_with("pacer, pipelined"))
        .map(|r| r.1)
        .collect();
    let best_pacer = pacer_rows.iter().copied().fold(f64::MAX, f64::min);
    println!(
        "\npacer (best K) minus raw one-way with the same work: {:.1} us/frame",
        best_pacer - raw
    );
    println!(
        "CPU waits / pacer: {:.1}x at best K, {:.1}x at K=3",
        cpu_us / best_pacer,
        cpu_us / pacer_rows[2]
    );
    if let Some(p) = json_path {
        let items: Vec<String> = rows
            .iter()
            .map(|(n, us, bad)| {
                format!(
                    "{{\"path\":\"{n}\",\"us_per_frame\":{us:.2},\"mismatches\":{}}}",
                    bad.map_or("null".into(), |b| b.to_string())
                )
            })
            .collect();
        let json = format!(
            "{{\"device\":\"{}\",\"frames\":{frames},\"elements\":{ELEMENTS},\"rows\":[{}],\"raw_one_way_us\":{raw:.2},\"pacer_minus_raw_us\":{:.2},\"cpu_over_best_pacer\":{:.2}}}\n",
            s.bridge.vulkan().info().name,
            items.join(","),
            best_pacer - raw,
            cpu_us / best_pacer
        );
        std::fs::write(&p, json).with_context(|| format!("writing {p}"))?;
        println!("wrote {p}");
    }
    Ok(())
}
