//! Image writes inside the Vulkan queue, side by side in one run: a CUDA kernel writing a
//! shared RGBA8 image through an inline surface handle (`VK_NVX_image_view_handle`,
//! `SharedImage::inline_surface`) vs a Vulkan compute shader writing the same image with
//! `imageStore` (`shaders/surface_store.comp`). The same work (`shaders/surface_store.cu` is
//! the shader line for line), the same texels, the same queue; each
//! write timed on the GPU with timestamps; both results read back and checked byte for byte.
//!
//!     cargo run --release --example bench_surface [-- --size 4096 --writes 20]

#[path = "fluid/pipeline.rs"]
#[allow(dead_code)] // the fluid's pipeline module: only the storage-image pieces are used here
mod pipeline;

use std::path::PathBuf;

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::vulkan::{
    cmd_acquire_images, cmd_release_images, image_handles_supported, record_kernel_barrier,
    AsVkImage, CuModule, HostBuffer, ImageRegion, KernelArg, LaunchDims, ViewLayers, SHARED_LAYOUT,
};
use cuvk::{Bridge, BridgeConfig, ImageDesc};
use cuvk_dev::image_kernels;
use cuvk_dev::{demo, logger, stats};
use pipeline::{Pass, Resource, SetLayout};

const FORMAT: vk::Format = vk::Format::R8G8B8A8_UNORM;
const SURFACE_STORE_CU: &str = include_str!("../shaders/surface_store.cu");

struct Args {
    size: u32,
    writes: u32,
    json: Option<PathBuf>,
}

fn parse() -> anyhow::Result<Args> {
    let mut a = Args {
        size: 4096,
        writes: 20,
        json: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--size" => a.size = value()?.parse().context("--size")?,
            "--writes" => a.writes = value()?.parse().context("--writes")?,
            "--json" => a.json = Some(PathBuf::from(value()?)),
            other => bail!("unknown argument '{other}' (--size N, --writes N, --json FILE)"),
        }
    }
    if !(16..=16384).contains(&a.size) || a.writes == 0 {
        bail!("--size must be 16..=16384 and --writes at least 1");
    }
    Ok(a)
}

/// Records `writes` writes of the image, each between two timestamps, in one submission
/// (acquired from CUDA's family first, released back after); returns GB/s of each write.
fn timed_writes(
    bridge: &Bridge,
    image: &dyn AsVkImage,
    writes: u32,
    bytes: u64,
    record_one: &dyn Fn(vk::CommandBuffer, u32),
) -> anyhow::Result<Vec<f64>> {
    let ctx = bridge.vulkan();
    let family = ctx.queue_family_index();
    let shared = [(image, SHARED_LAYOUT)];
    let stage = vk::PipelineStageFlags::COMPUTE_SHADER;
    let write = vk::AccessFlags::SHADER_WRITE;
    // SAFETY: the image and everything `record_one` uses outlive the synchronous submission;
    // the image is acquired before the writes and released after them.
    let seconds = unsafe {
        demo::gpu_span_seconds(
            ctx,
            writes,
            |dev, cmd| cmd_acquire_images(dev, cmd, family, &shared, stage, write),
            |_, cmd, i| {
                record_one(cmd, i);
                // Each write finishes before the next starts (as the kernels' barrier orders
                // them), so each timestamp pair brackets one write.
                record_kernel_barrier(ctx, cmd);
            },
            |dev, cmd| cmd_release_images(dev, cmd, family, &shared, stage, write),
        )
    }?;
    Ok(seconds.iter().map(|s| bytes as f64 / s / 1e9).collect())
}

/// The image's bytes, read back by Vulkan, compared with the pattern for `seed`.
fn check(
    bridge: &Bridge,
    image: &dyn AsVkImage,
    desc: &ImageDesc,
    seed: u32,
) -> anyhow::Result<()> {
    let texels = u64::from(desc.extent.width) * u64::from(desc.extent.height);
    let mut host = HostBuffer::new(bridge.vulkan(), texels * 4, vk::BufferUsageFlags::empty())?;
    bridge
        .vulkan()
        .copy_image_to_buffer(image, ImageRegion::level(desc, 0), &mut host, 0)?;
    let got = host.read::<u8>()?;
    let want = image_kernels::pattern_bytes(texels, 4, seed);
    if let Some(i) = got.iter().zip(&want).position(|(g, w)| g != w) {
        bail!("seed {seed}: byte {i} is {} (expected {})", got[i], want[i]);
    }
    Ok(())
}

fn run() -> anyhow::Result<()> {
    let args = parse()?;
    let bridge = Bridge::new(BridgeConfig::default())?;
    let ctx = bridge.vulkan();
    println!("device: {}", ctx.info().describe());
    image_handles_supported(ctx).context("the inline path needs VK_NVX_image_view_handle")?;
    let n = args.size;
    let desc = ImageDesc::d2(
        FORMAT,
        n,
        n,
        vk::ImageUsageFlags::STORAGE
            | vk::ImageUsageFlags::TRANSFER_SRC
            | vk::ImageUsageFlags::TRANSFER_DST,
    );
    let image = bridge.create_image(&desc)?;
    let bytes = u64::from(n) * u64::from(n) * 4;

    // The CUDA kernel (shaders/surface_store.cu: the shader's work, line for line), loaded
    // into the Vulkan device, writing through an inline surface.
    let ptx = cuvk::cuda::compile_ptx(bridge.cuda(), "surface_store.cu", SURFACE_STORE_CU)?;
    let module = CuModule::from_ptx(ctx, &ptx)?;
    let write = module.function("surface_store")?;
    let surface = image.inline_surface(0, ViewLayers::All)?;
    let kernel_args = |seed: u32| {
        [
            surface.kernel_arg(),
            KernelArg::value(&n),
            KernelArg::value(&n),
            KernelArg::value(&seed),
        ]
    };
    // One thread per texel in 16x16 blocks, as the shader's 16x16 workgroups.
    let dims = LaunchDims {
        grid: [n.div_ceil(16), n.div_ceil(16), 1],
        block: [16, 16, 1],
        shared_mem_bytes: 0,
    };
    write.validate_launch(&dims, &kernel_args(0))?;

    // The Vulkan compute shader writing the same image with imageStore.
    let spirv = std::fs::read("shaders/surface_store.spv")
        .or_else(|_| {
            std::fs::read(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/shaders/surface_store.spv"
            ))
        })
        .context("shaders/surface_store.spv")?;
    let layout = SetLayout::new(ctx, &[vk::DescriptorType::STORAGE_IMAGE], 1)?;
    let pass = Pass::new(ctx, &spirv, &[&layout], 12)?;
    let view = pipeline::image_view(ctx, image.vk_image(), FORMAT)?;
    let set = layout.allocate(&[Resource::StorageImage(view)])?;

    let inline = |cmd: vk::CommandBuffer, i: u32| {
        // SAFETY: validated above; the surface handle is used as a surface and the image is
        // in GENERAL, acquired by the queue's family; the surface, module and image outlive
        // the synchronous submission.
        let _ = unsafe { write.record_launch(cmd, &dims, &kernel_args(1000 + i)) };
    };
    let shader = |cmd: vk::CommandBuffer, i: u32| {
        let push: Vec<u8> = [n, n, 2000 + i]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        // SAFETY: recording on this device; the set points at the image's view, alive until
        // the synchronous submission completes.
        unsafe { pass.record(cmd, &[set], &push, (n, n)) };
    };

    let mut rows = Vec::new();
    for (name, record, last_seed) in [
        (
            "CUDA kernel, inline surface (NVX)",
            &inline as &dyn Fn(vk::CommandBuffer, u32),
            1000 + args.writes - 1,
        ),
        (
            "Vulkan compute shader, imageStore",
            &shader as &dyn Fn(vk::CommandBuffer, u32),
            2000 + args.writes - 1,
        ),
    ] {
        // A warm-up round, then the measured one; the last write's bytes are checked.
        timed_writes(&bridge, &image, args.writes, bytes, record)?;
        let gbps = timed_writes(&bridge, &image, args.writes, bytes, record)?;
        check(&bridge, &image, &desc, last_seed).with_context(|| format!("{name}: wrong bytes"))?;
        let median = stats::median(gbps.clone());
        let best = gbps.iter().cloned().fold(0.0, f64::max);
        rows.push((name, median, best));
    }
    // SAFETY: the view's last use completed (timed_writes waits); destroyed once.
    unsafe { ctx.device().destroy_image_view(view, None) };

    println!(
        "{n}x{n} RGBA8 ({:.0} MiB), {} writes per row, GB/s written (GPU timestamps)",
        bytes as f64 / (1 << 20) as f64,
        args.writes
    );
    println!("| writer                              | median GB/s | best GB/s |");
    println!("|-------------------------------------|-------------|-----------|");
    for (name, median, best) in &rows {
        println!("| {name:<35} | {median:>11.1} | {best:>9.1} |");
    }
    let ratio = rows[0].1 / rows[1].1;
    println!("inline surface / imageStore (median): {ratio:.3}; both wrote exactly the pattern");
    if let Some(path) = &args.json {
        let body: Vec<String> = rows
            .iter()
            .map(|(name, median, best)| {
                format!(
                    "{{\"writer\":\"{name}\",\"median_gbps\":{median:.1},\"best_gbps\":{best:.1}}}"
                )
            })
            .collect();
        std::fs::write(
            path,
            format!(
                "{{\"device\":\"{}\",\"size\":{n},\"ratio\":{ratio:.4},\"rows\":[{}]}}\n",
                ctx.info().name,
                body.join(",")
            ),
        )?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    logger::init();
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
