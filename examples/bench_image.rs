//! Benchmark of shared images, side by side with what a user would otherwise do:
//!
//! 1. A surface-write kernel (RGBA16F gradient, one thread per texel) on a shared image vs on
//!    a CUDA array of the same format made with `cuArray3DCreate`: GB/s of texels written and
//!    the ratio (does importing the Vulkan image cost kernel speed?).
//! 2. The per-frame handoff of a 3840×2160 RGBA16F image from CUDA to Vulkan, K = 2 frames in
//!    flight ordered by the `FramePacer`: zero-copy (CUDA writes the shared image through its
//!    surface; Vulkan acquires it) vs the baseline (CUDA writes a shared linear buffer;
//!    Vulkan copies it into its own image with `vkCmdCopyBufferToImage`). In both, Vulkan then
//!    reads one texel of the image (a stand-in for sampling it), so each frame's data reaches
//!    the image Vulkan uses.
//!
//!     cargo run --release --example bench_image [-- --json out.json --frames 300]

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::cudarc::driver::sys::{self, CUevent_flags};
use cuvk::cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use cuvk::vulkan::{
    cmd_acquire_images, cmd_release_images, AsVkBuffer, AsVkImage, BoundImage, HostBuffer,
    ImageOptions,
};
use cuvk::{Bridge, BridgeConfig, BufferUsage, FramePacer, ImageDesc, SharedBuffer, SharedImage};
use cuvk_dev::{image_kernels, logger, stats, CommandSlots};
use image_kernels::ImageKernels;
use stats::median;

const FORMAT: vk::Format = vk::Format::R16G16B16A16_SFLOAT;
const TEXEL: u64 = 8;

fn launch_2d(w: u32, h: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (w.div_ceil(32), h.div_ceil(8), 1),
        block_dim: (32, 8, 1),
        shared_mem_bytes: 0,
    }
}

/// Launches the surface kernel on `surface` (a CUsurfObject of a w×h RGBA16F level).
fn surface_kernel(
    k: &ImageKernels,
    stream: &Arc<CudaStream>,
    surface: u64,
    (w, h): (u32, u32),
    frame: u32,
) -> anyhow::Result<()> {
    let mut b = stream.launch_builder(&k.bench_surface);
    b.arg(&surface).arg(&w).arg(&h).arg(&frame);
    // SAFETY: the surface covers w×h texels of 8 bytes (its level's extent).
    unsafe { b.launch(launch_2d(w, h)) }?;
    Ok(())
}

/// Median GB/s (bytes written) of `iters` timed launches of the surface kernel.
fn surface_gbps(
    k: &ImageKernels,
    stream: &Arc<CudaStream>,
    surface: u64,
    size: (u32, u32),
    iters: usize,
) -> anyhow::Result<f64> {
    let ctx = stream.context();
    for f in 0..3 {
        surface_kernel(k, stream, surface, size, f)?;
    }
    let mut gbps = Vec::with_capacity(iters);
    for f in 0..iters {
        let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        let end = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        start.record(stream)?;
        surface_kernel(k, stream, surface, size, f as u32)?;
        end.record(stream)?;
        end.synchronize()?;
        let ms = f64::from(start.elapsed_ms(&end)?);
        gbps.push(f64::from(size.0) * f64::from(size.1) * TEXEL as f64 / (ms * 1e-3) / 1e9);
    }
    Ok(median(gbps))
}

/// A CUDA array of the same format made by CUDA itself, with a surface: the kernel's
/// reference. Destroyed on drop.
struct PlainArray {
    array: sys::CUarray,
    surface: sys::CUsurfObject,
}

impl PlainArray {
    fn new(bridge: &Bridge, (w, h): (u32, u32)) -> anyhow::Result<Self> {
        bridge.cuda().bind_to_thread()?;
        let desc = sys::CUDA_ARRAY3D_DESCRIPTOR {
            Width: w as usize,
            Height: h as usize,
            Depth: 0,
            Format: sys::CUarray_format::CU_AD_FORMAT_HALF,
            NumChannels: 4,
            Flags: sys::CUDA_ARRAY3D_SURFACE_LDST,
        };
        let mut array = std::ptr::null_mut();
        // SAFETY: a valid descriptor; the array is destroyed in Drop.
        unsafe { sys::cuArray3DCreate_v2(&mut array, &desc) }.result()?;
        // SAFETY: all-zero is a valid CUDA_RESOURCE_DESC (type ARRAY, null handle).
        let mut res: sys::CUDA_RESOURCE_DESC = unsafe { std::mem::zeroed() };
        res.resType = sys::CUresourcetype::CU_RESOURCE_TYPE_ARRAY;
        res.res.array.hArray = array;
        let mut surface = 0;
        // SAFETY: a live array with SURFACE_LDST.
        if let Err(e) = unsafe { sys::cuSurfObjectCreate(&mut surface, &res) }.result() {
            // SAFETY: created above, unused.
            unsafe { sys::cuArrayDestroy(array) };
            return Err(e.into());
        }
        Ok(Self { array, surface })
    }
}

impl Drop for PlainArray {
    fn drop(&mut self) {
        // SAFETY: created in `new`; the benchmark synchronised its work before dropping.
        unsafe {
            sys::cuSurfObjectDestroy(self.surface);
            sys::cuArrayDestroy(self.array);
        }
    }
}

/// Which handoff a frame loop measures.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Handoff {
    ZeroCopy,
    Staging,
}

/// Runs `frames` frames of one handoff with K = 2 and returns the mean µs per frame.
fn run_frames(
    bridge: &Bridge,
    k: &ImageKernels,
    handoff: Handoff,
    (w, h): (u32, u32),
    frames: u64,
) -> anyhow::Result<f64> {
    let ctx = bridge.vulkan();
    let dev = ctx.device();
    let stream = bridge.cuda().new_stream()?;
    let k_frames = 2u32;
    let mut pacer = FramePacer::new(bridge, k_frames)?;
    let slots = CommandSlots::new(ctx, pacer.command_slots())?;
    let probe = HostBuffer::new(
        ctx,
        TEXEL * u64::from(k_frames),
        vk::BufferUsageFlags::empty(),
    )?;
    let usage_shared = vk::ImageUsageFlags::STORAGE
        | vk::ImageUsageFlags::SAMPLED
        | vk::ImageUsageFlags::TRANSFER_SRC;
    let usage_local = vk::ImageUsageFlags::TRANSFER_DST
        | vk::ImageUsageFlags::SAMPLED
        | vk::ImageUsageFlags::TRANSFER_SRC;
    // Zero-copy: one shared image per slot, written through its surface.
    let mut shared: Vec<SharedImage> = Vec::new();
    let mut surfaces = Vec::new();
    // Staging: one shared linear buffer per slot, copied into a Vulkan image per slot.
    let mut buffers: Vec<SharedBuffer<[u32; 2]>> = Vec::new();
    let mut local: Vec<BoundImage> = Vec::new();
    for _ in 0..k_frames {
        match handoff {
            Handoff::ZeroCopy => {
                let image = bridge.create_image(&ImageDesc::d2(FORMAT, w, h, usage_shared))?;
                surfaces.push(image.surface(0)?);
                shared.push(image);
            }
            Handoff::Staging => {
                buffers.push(bridge.create_buffer((w * h) as usize, BufferUsage::TRANSFER_SRC)?);
                local.push(BoundImage::new(
                    ctx,
                    &ImageDesc::d2(FORMAT, w, h, usage_local),
                    ImageOptions::LOCAL,
                )?);
            }
        }
    }
    let probe_buffer = probe.vk_buffer();
    let family = ctx.queue_family_index();
    let texel_copy = |slot: usize| vk::BufferImageCopy {
        buffer_offset: TEXEL * slot as u64,
        image_subresource: vk::ImageSubresourceLayers {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            mip_level: 0,
            base_array_layer: 0,
            layer_count: 1,
        },
        image_offset: vk::Offset3D {
            x: (w / 2) as i32,
            y: (h / 2) as i32,
            z: 0,
        },
        image_extent: vk::Extent3D {
            width: 1,
            height: 1,
            depth: 1,
        },
        ..Default::default()
    };
    let t = Instant::now();
    for _ in 0..frames {
        let frame = pacer.begin_frame()?;
        let s = frame.slot();
        pacer.cuda_acquire(&frame, &stream)?;
        match handoff {
            Handoff::ZeroCopy => {
                surface_kernel(k, &stream, surfaces[s].raw(), (w, h), frame.number() as u32)?
            }
            Handoff::Staging => {
                let mut b = stream.launch_builder(&k.bench_linear);
                let frame_no = frame.number() as u32;
                b.arg(buffers[s].kernel_arg())
                    .arg(&w)
                    .arg(&h)
                    .arg(&frame_no);
                // SAFETY: the buffer holds w×h texels of 8 bytes.
                unsafe { b.launch(launch_2d(w, h)) }?;
            }
        }
        pacer.cuda_release(&frame, &stream)?;
        // SAFETY: begin_frame freed the command slot; everything recorded lives until the
        // pacer's wait_idle below.
        unsafe {
            let cmd = slots.begin(frame.command_slot())?;
            let src = vk::ImageLayout::TRANSFER_SRC_OPTIMAL;
            match handoff {
                Handoff::ZeroCopy => {
                    let image: [(&dyn AsVkImage, vk::ImageLayout); 1] = [(&shared[s], src)];
                    pacer.record_image_acquire_from_cuda(
                        cmd,
                        &image,
                        vk::PipelineStageFlags::TRANSFER,
                        vk::AccessFlags::TRANSFER_READ,
                    );
                    dev.cmd_copy_image_to_buffer(
                        cmd,
                        shared[s].vk_image(),
                        src,
                        probe_buffer,
                        &[texel_copy(s)],
                    );
                    pacer.record_image_release_to_cuda(
                        cmd,
                        &image,
                        vk::PipelineStageFlags::TRANSFER,
                        vk::AccessFlags::empty(),
                    );
                }
                Handoff::Staging => {
                    let dst = vk::ImageLayout::TRANSFER_DST_OPTIMAL;
                    pacer.record_acquire_from_cuda(
                        cmd,
                        &[&buffers[s]],
                        vk::PipelineStageFlags::TRANSFER,
                        vk::AccessFlags::TRANSFER_READ,
                    );
                    let image: &dyn AsVkImage = &local[s];
                    cmd_acquire_images(
                        dev,
                        cmd,
                        family,
                        &[(image, dst)],
                        vk::PipelineStageFlags::TRANSFER,
                        vk::AccessFlags::TRANSFER_WRITE,
                    );
                    let full = vk::BufferImageCopy {
                        image_subresource: vk::ImageSubresourceLayers {
                            aspect_mask: vk::ImageAspectFlags::COLOR,
                            mip_level: 0,
                            base_array_layer: 0,
                            layer_count: 1,
                        },
                        image_extent: vk::Extent3D {
                            width: w,
                            height: h,
                            depth: 1,
                        },
                        ..Default::default()
                    };
                    dev.cmd_copy_buffer_to_image(
                        cmd,
                        buffers[s].vk_buffer(),
                        local[s].handle(),
                        dst,
                        &[full],
                    );
                    let to_src = [vk::ImageMemoryBarrier::default()
                        .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                        .dst_access_mask(vk::AccessFlags::TRANSFER_READ)
                        .old_layout(dst)
                        .new_layout(src)
                        .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                        .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                        .image(local[s].handle())
                        .subresource_range(local[s].desc().full_range())];
                    dev.cmd_pipeline_barrier(
                        cmd,
                        vk::PipelineStageFlags::TRANSFER,
                        vk::PipelineStageFlags::TRANSFER,
                        vk::DependencyFlags::empty(),
                        &[],
                        &[],
                        &to_src,
                    );
                    dev.cmd_copy_image_to_buffer(
                        cmd,
                        local[s].handle(),
                        src,
                        probe_buffer,
                        &[texel_copy(s)],
                    );
                    cmd_release_images(
                        dev,
                        cmd,
                        family,
                        &[(image, src)],
                        vk::PipelineStageFlags::TRANSFER,
                        vk::AccessFlags::empty(),
                    );
                    pacer.record_release_to_cuda(
                        cmd,
                        &[&buffers[s]],
                        vk::PipelineStageFlags::TRANSFER,
                        vk::AccessFlags::empty(),
                    );
                }
            }
            let to_host = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                .dst_access_mask(vk::AccessFlags::HOST_READ)];
            dev.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &to_host,
                &[],
                &[],
            );
            dev.end_command_buffer(cmd)?;
            pacer.vulkan_submit(
                &frame,
                &cuvk::FrameSubmit::new(&[cmd], vk::PipelineStageFlags::TRANSFER),
            )?;
        }
    }
    pacer.wait_idle(Duration::from_secs(60))?;
    stream.synchronize()?;
    let us = t.elapsed().as_secs_f64() * 1e6 / frames as f64;
    // The last frame's probe texel: the gradient the kernel wrote (red = ((w/2 + frame) & 1023) / 1023).
    let texels: Vec<[u16; 4]> = probe.read()?;
    let last = ((frames) % u64::from(k_frames)) as usize;
    let got_r = half_bits_to_f32(texels[last][0]);
    let want = (((w / 2) as u64 + frames) & 1023) as f32 / 1023.0;
    if (got_r - want).abs() > 1e-3 {
        bail!("{handoff:?}: the last frame's texel has red {got_r}, the kernel wrote {want}");
    }
    drop(surfaces);
    if !ctx.validation_messages().is_empty() {
        bail!("validation messages: {:?}", ctx.validation_messages());
    }
    Ok(us)
}

/// An IEEE half's value (for checking the probe texel).
fn half_bits_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let frac = f32::from(h & 0x3ff);
    sign * match exp {
        0 => frac * 2f32.powi(-24),
        31 => f32::INFINITY,
        e => (1.0 + frac / 1024.0) * 2f32.powi(e - 15),
    }
}

fn main() -> anyhow::Result<()> {
    logger::init();
    let mut json_path: Option<String> = None;
    let mut frames: u64 = 300;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json_path = Some(args.next().context("--json PATH")?),
            "--frames" => frames = args.next().context("--frames N")?.parse()?,
            other => bail!("unknown argument {other}"),
        }
    }
    let bridge = Bridge::new(BridgeConfig::default())?;
    let name = bridge.vulkan().info().name.clone();
    println!("device: {name} (uuid {})", bridge.uuid());
    let k = ImageKernels::load(bridge.cuda())?;
    let size = (3840u32, 2160u32);
    let iters = 50;

    // 1. Surface writes: shared image vs cuArray3DCreate.
    let usage = vk::ImageUsageFlags::STORAGE | vk::ImageUsageFlags::SAMPLED;
    let image = bridge.create_image(&ImageDesc::d2(FORMAT, size.0, size.1, usage))?;
    let surface = image.surface(0)?;
    let plain = PlainArray::new(&bridge, size)?;
    let stream = bridge.stream().clone();
    let mut shared_gbps = Vec::new();
    let mut plain_gbps = Vec::new();
    for _ in 0..2 {
        shared_gbps.push(surface_gbps(&k, &stream, surface.raw(), size, iters)?);
        plain_gbps.push(surface_gbps(&k, &stream, plain.surface, size, iters)?);
    }
    stream.synchronize()?;
    drop((surface, image, plain));
    let ratio = shared_gbps.iter().copied().fold(0.0, f64::max)
        / plain_gbps.iter().copied().fold(0.0, f64::max);
    println!();
    println!(
        "surface-write kernel, {}x{} RGBA16F, median of {iters} (GB/s written), two passes each",
        size.0, size.1
    );
    println!("| array                          | pass 1 GB/s | pass 2 GB/s |");
    println!("|--------------------------------|-------------|-------------|");
    println!(
        "| shared image (Vulkan, imported)| {:>11.0} | {:>11.0} |",
        shared_gbps[0], shared_gbps[1]
    );
    println!(
        "| cuArray3DCreate                | {:>11.0} | {:>11.0} |",
        plain_gbps[0], plain_gbps[1]
    );
    println!("ratio shared / cuArray3DCreate (best pass each): {ratio:.3}");

    // 2. Per-frame handoff CUDA -> Vulkan.
    println!();
    println!("per-frame handoff CUDA -> Vulkan, {}x{} RGBA16F ({:.1} MiB), K = 2, {frames} frames, median of 3 runs", size.0, size.1, (u64::from(size.0 * size.1) * TEXEL) as f64 / (1 << 20) as f64);
    println!("| path                                            | µs / frame |");
    println!("|-------------------------------------------------|------------|");
    let mut rows = Vec::new();
    for (handoff, label) in [
        (
            Handoff::ZeroCopy,
            "zero-copy: surface write into the shared image",
        ),
        (
            Handoff::Staging,
            "staging: linear buffer + vkCmdCopyBufferToImage",
        ),
    ] {
        run_frames(&bridge, &k, handoff, size, 20)?; // warm-up
        let runs: Vec<f64> = (0..3)
            .map(|_| run_frames(&bridge, &k, handoff, size, frames))
            .collect::<anyhow::Result<_>>()?;
        let us = median(runs);
        println!("| {label:<47} | {us:>10.1} |");
        rows.push(format!(
            "{{\"path\":\"{handoff:?}\",\"us_per_frame\":{us:.2}}}"
        ));
    }
    let json = format!(
        "{{\"device\":\"{name}\",\"surface_gbps\":{{\"shared\":[{:.1},{:.1}],\"cuarray\":[{:.1},{:.1}],\"ratio\":{ratio:.4}}},\"frames\":{frames},\"handoff\":[{}]}}",
        shared_gbps[0],
        shared_gbps[1],
        plain_gbps[0],
        plain_gbps[1],
        rows.join(",")
    );
    if let Some(p) = json_path {
        std::fs::write(&p, json + "\n").with_context(|| format!("writing {p}"))?;
        println!("wrote {p}");
    }
    Ok(())
}
