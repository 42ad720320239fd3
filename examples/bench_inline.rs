//! CUDA kernels in Vulkan queues (`VK_NVX_binary_import`), measured side by side with the
//! CUDA context in one run:
//!
//! - copy-kernel bandwidth: the same `copy16` kernel on the same shared buffers, launched in a
//!   Vulkan command buffer vs on a CUDA stream (20 back-to-back 1 GiB copies, median of 5);
//! - which barrier after a kernel makes its writes visible to a following Vulkan copy: each
//!   variant runs frames "kernel stamps 1M words → barrier → vkCmdCopyBuffer → host check"
//!   and counts the frames with wrong words.
//!
//!     cargo run --release --example bench_inline [-- --frames 500]

use std::time::Instant;

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::vulkan::{
    record_kernel_barrier, CuFunction, CuModule, HostBuffer, KernelArg, LaunchDims,
};
use cuvk::{Bridge, BufferUsage, SharedBuffer};
use cuvk_dev::{demo, kernels, logger, stats};

const COPY_BYTES: u64 = 1 << 30;
const COPIES: usize = 20;

fn addr<T: bytemuck::Pod>(b: &SharedBuffer<T>) -> anyhow::Result<KernelArg> {
    Ok(KernelArg::address(
        b.device_address().context("no device address")?,
    ))
}

/// GB/s (read + written) of COPIES inline copies, each followed by a barrier (as a CUDA stream
/// orders them), timed on the host around one synchronous submission.
fn inline_copy_gbps(
    bridge: &Bridge,
    copy: &CuFunction,
    src: &SharedBuffer<u8>,
    dst: &SharedBuffer<u8>,
    blocks: u32,
) -> anyhow::Result<f64> {
    let ctx = bridge.vulkan();
    let args = [addr(src)?, addr(dst)?, KernelArg::value(&(COPY_BYTES / 16))];
    let dims = LaunchDims::linear(blocks, 256);
    copy.validate_launch(&dims, &args)?;
    let t = Instant::now();
    // SAFETY: the buffers outlive the synchronous submission; the launch was validated.
    unsafe {
        ctx.submit_and_wait(|_, cmd| {
            for _ in 0..COPIES {
                let _ = copy.record_launch(cmd, &dims, &args);
                record_kernel_barrier(ctx, cmd);
            }
        })?
    };
    Ok(2.0 * COPY_BYTES as f64 * COPIES as f64 / t.elapsed().as_secs_f64() / 1e9)
}

/// GB/s of each of `COPIES` inline copies, timed on the GPU with timestamps around each launch.
fn inline_copy_gbps_timestamps(
    bridge: &Bridge,
    copy: &CuFunction,
    src: &SharedBuffer<u8>,
    dst: &SharedBuffer<u8>,
    blocks: u32,
) -> anyhow::Result<Vec<f64>> {
    let ctx = bridge.vulkan();
    let args = [addr(src)?, addr(dst)?, KernelArg::value(&(COPY_BYTES / 16))];
    let dims = LaunchDims::linear(blocks, 256);
    copy.validate_launch(&dims, &args)?;
    // SAFETY: the buffers outlive the synchronous submission; the launch was validated.
    let seconds = unsafe {
        demo::gpu_span_seconds(
            ctx,
            COPIES as u32,
            |_, _| {},
            |_, cmd, _| {
                let _ = copy.record_launch(cmd, &dims, &args);
                record_kernel_barrier(ctx, cmd);
            },
            |_, _| {},
        )
    }?;
    Ok(seconds
        .iter()
        .map(|s| 2.0 * COPY_BYTES as f64 / s / 1e9)
        .collect())
}

fn cuda_copy_gbps(
    bridge: &Bridge,
    k: &kernels::Kernels,
    src: &SharedBuffer<u8>,
    dst: &SharedBuffer<u8>,
) -> anyhow::Result<f64> {
    let stream = bridge.stream();
    stream.synchronize()?;
    let t = Instant::now();
    for _ in 0..COPIES {
        k.copy(stream, src.kernel_arg(), dst.kernel_arg(), COPY_BYTES)?;
    }
    stream.synchronize()?;
    Ok(2.0 * COPY_BYTES as f64 * COPIES as f64 / t.elapsed().as_secs_f64() / 1e9)
}

/// A barrier variant between the kernel and the Vulkan copy that reads what it wrote.
struct BarrierVariant {
    name: &'static str,
    stages: Option<(vk::PipelineStageFlags, vk::AccessFlags)>,
}

/// Frames of "stamp → barrier → copy to host", checked on the host: frames with wrong words.
fn barrier_frames(
    bridge: &Bridge,
    stamp: &CuFunction,
    variant: &BarrierVariant,
    frames: u32,
) -> anyhow::Result<u32> {
    let ctx = bridge.vulkan();
    let n = 1usize << 20;
    let buf: SharedBuffer<u32> = bridge.create_buffer(n, BufferUsage::STORAGE_BUFFER)?;
    let mut host = HostBuffer::new(ctx, (n * 4) as u64, vk::BufferUsageFlags::empty())?;
    let (src, dst) = (buf.vk_buffer(), cuvk::vulkan::AsVkBuffer::vk_buffer(&host));
    let mut wrong_frames = 0;
    for f in 1..=frames {
        let args = [
            addr(&buf)?,
            KernelArg::value(&(n as u64)),
            KernelArg::value(&(f * 7)),
        ];
        let dims = LaunchDims::linear(264, 256);
        stamp.validate_launch(&dims, &args)?;
        // SAFETY: buffers outlive the synchronous submission; the launch was validated.
        unsafe {
            ctx.submit_and_wait(|dev, cmd| {
                let _ = stamp.record_launch(cmd, &dims, &args);
                if let Some((src_stage, src_access)) = variant.stages {
                    let b = [vk::MemoryBarrier::default()
                        .src_access_mask(src_access)
                        .dst_access_mask(vk::AccessFlags::TRANSFER_READ)];
                    dev.cmd_pipeline_barrier(
                        cmd,
                        src_stage,
                        vk::PipelineStageFlags::TRANSFER,
                        vk::DependencyFlags::empty(),
                        &b,
                        &[],
                        &[],
                    );
                }
                let region = [vk::BufferCopy {
                    src_offset: 0,
                    dst_offset: 0,
                    size: (n * 4) as u64,
                }];
                dev.cmd_copy_buffer(cmd, src, dst, &region);
            })?
        };
        // The host buffer is read only after the fence wait inside submit_and_wait.
        let got: Vec<u32> = host.read()?;
        let want = |i: usize| (f * 7).wrapping_add(i as u32);
        if (0..n).any(|i| got[i] != want(i)) {
            wrong_frames += 1;
        }
        host.write(&vec![0u32; n])?;
    }
    Ok(wrong_frames)
}

fn main() -> anyhow::Result<()> {
    logger::init();
    let mut frames = 500u32;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--frames" => frames = args.next().context("--frames N")?.parse()?,
            other => bail!("unknown argument {other}"),
        }
    }
    let bridge = cuvk_dev::demo::bench_bridge()?;
    cuvk::vulkan::cuda_kernels_supported(bridge.vulkan())?;
    let k = kernels::Kernels::load(bridge.cuda())?;
    let ptx = cuvk::cuda::compile_ptx(
        bridge.cuda(),
        "inline.cu",
        include_str!("../shaders/inline.cu"),
    )?;
    let module = CuModule::from_ptx(bridge.vulkan(), &ptx)?;
    let copy = module.function("copy16")?;
    let stamp = module.function("stamp")?;

    let src: SharedBuffer<u8> =
        bridge.create_buffer(COPY_BYTES as usize, BufferUsage::STORAGE_BUFFER)?;
    let dst: SharedBuffer<u8> =
        bridge.create_buffer(COPY_BYTES as usize, BufferUsage::STORAGE_BUFFER)?;
    let sms = bridge.cuda().attribute(
        cuvk::cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    )? as u32;
    let blocks = sms * 8; // the CUDA path's grid (dev/src/kernels.rs)
    inline_copy_gbps(&bridge, &copy, &src, &dst, blocks)?; // warm-up
    cuda_copy_gbps(&bridge, &k, &src, &dst)?;
    let mut inline = Vec::new();
    let mut cuda = Vec::new();
    for _ in 0..5 {
        inline.push(inline_copy_gbps(&bridge, &copy, &src, &dst, blocks)?);
        cuda.push(cuda_copy_gbps(&bridge, &k, &src, &dst)?);
    }
    let (gi, gc) = (stats::median(inline), stats::median(cuda));
    let ti = stats::median(inline_copy_gbps_timestamps(
        &bridge, &copy, &src, &dst, blocks,
    )?);
    let tc = stats::median(k.copy_gbps(
        bridge.stream(),
        src.cuda_ptr(),
        dst.cuda_ptr(),
        COPY_BYTES,
        COPIES,
    )?);
    println!("\ncopy kernel on the same shared buffers, 1 GiB per copy (GB/s read+written)");
    println!(
        "| path | GPU-timed, median of {COPIES} | {COPIES} back-to-back, host-timed, median of 5 |"
    );
    println!("|---|---|---|");
    println!("| inline (Vulkan queue, VK_NVX_binary_import) | {ti:.0} (timestamps) | {gi:.0} |");
    println!("| CUDA context stream | {tc:.0} (events) | {gc:.0} |");
    println!(
        "inline / CUDA context: {:.3} GPU-timed, {:.3} back-to-back",
        ti / tc,
        gi / gc
    );

    let variants = [
        BarrierVariant {
            name: "none",
            stages: None,
        },
        BarrierVariant {
            name: "COMPUTE_SHADER / SHADER_WRITE",
            stages: Some((
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::SHADER_WRITE,
            )),
        },
        BarrierVariant {
            name: "ALL_COMMANDS / SHADER_WRITE",
            stages: Some((
                vk::PipelineStageFlags::ALL_COMMANDS,
                vk::AccessFlags::SHADER_WRITE,
            )),
        },
        BarrierVariant {
            name: "ALL_COMMANDS / MEMORY_WRITE",
            stages: Some((
                vk::PipelineStageFlags::ALL_COMMANDS,
                vk::AccessFlags::MEMORY_WRITE,
            )),
        },
    ];
    println!("\nbarrier after the kernel, before a Vulkan copy of its output ({frames} frames of 1M words each)");
    println!("| src stage / access | frames with wrong words |\n|---|---|");
    for v in &variants {
        let bad = barrier_frames(&bridge, &stamp, v, frames)?;
        println!("| {} | {bad} |", v.name);
    }
    Ok(())
}
