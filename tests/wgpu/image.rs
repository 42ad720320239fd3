//! cuvk images as `wgpu::Texture`s on any Vulkan device (lavapipe in CI), no CUDA: wgpu writes
//! a texture and a second `VkDevice` importing the same memory reads it exactly, and the
//! reverse; refusals name what is wrong and keep nothing; every drop order with the
//! validation layer silent on both devices.

use crate::support;
use cuvk_dev::assert_err;
use cuvk_dev::testing as common;

use std::sync::Arc;

use cuvk::ash::vk;
use cuvk::vulkan::{AsVkImage, BoundImage, HostBuffer, ImageOptions, ImageRegion, VulkanContext};
use cuvk::wgpu::{texture_format, wgpu, WgpuDevice};
use cuvk::{Error, ErrorKind, ImageDesc, ImageKind};

const W: u32 = 64;
const H: u32 = 16;

fn usage() -> vk::ImageUsageFlags {
    vk::ImageUsageFlags::TRANSFER_SRC
        | vk::ImageUsageFlags::TRANSFER_DST
        | vk::ImageUsageFlags::SAMPLED
}

fn rgba8(kind: ImageKind) -> ImageDesc {
    ImageDesc {
        kind,
        ..ImageDesc::d2(vk::Format::R8G8B8A8_UNORM, W, H, usage())
    }
}

fn bytes(seed: u32, layers: u32) -> Vec<u8> {
    (0..(W * H * 4 * layers))
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed) as u8)
        .collect()
}

/// Writes `data` into the whole texture through a wgpu copy, with the handoff around it.
fn wgpu_write(w: &WgpuDevice, tex: &wgpu::Texture, image: &dyn AsVkImage, data: &[u8]) {
    submit_write(w, tex, image, data);
    support::wait(w.device());
}

/// As `wgpu_write`, without waiting.
fn submit_write(w: &WgpuDevice, tex: &wgpu::Texture, image: &dyn AsVkImage, data: &[u8]) {
    let device = w.device();
    let layers = tex.depth_or_array_layers();
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("upload"),
        size: data.len() as u64,
        usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    w.queue().write_buffer(&staging, 0, data);
    let mut enc = device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_texture(
        wgpu::TexelCopyBufferInfo {
            buffer: &staging,
            layout: wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(W * 4),
                rows_per_image: Some(H),
            },
        },
        tex.as_image_copy(),
        wgpu::Extent3d {
            width: W,
            height: H,
            depth_or_array_layers: layers,
        },
    );
    let pairs = [(tex, image)];
    // SAFETY: the textures and images outlive the submission (used by it; the caller waits).
    let acquire =
        unsafe { w.acquire_images(&pairs, vk::PipelineStageFlags::ALL_COMMANDS) }.unwrap();
    // SAFETY: as above.
    let [to_general, release] = unsafe { w.release_images(&pairs) }.unwrap();
    w.queue()
        .submit([acquire, enc.finish(), to_general, release]);
}

/// Reads the whole texture through a wgpu copy, with the handoff around it.
fn wgpu_read(w: &WgpuDevice, tex: &wgpu::Texture, image: &dyn AsVkImage) -> Vec<u8> {
    let device = w.device();
    let layers = tex.depth_or_array_layers();
    let size = u64::from(W * H * 4 * layers);
    let down = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("download"),
        size,
        usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
        mapped_at_creation: false,
    });
    let mut enc = device.create_command_encoder(&Default::default());
    enc.copy_texture_to_buffer(
        tex.as_image_copy(),
        wgpu::TexelCopyBufferInfo {
            buffer: &down,
            layout: wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(W * 4),
                rows_per_image: Some(H),
            },
        },
        wgpu::Extent3d {
            width: W,
            height: H,
            depth_or_array_layers: layers,
        },
    );
    let pairs = [(tex, image)];
    // SAFETY: the textures and images outlive the submission (used by it; the caller waits).
    let acquire =
        unsafe { w.acquire_images(&pairs, vk::PipelineStageFlags::ALL_COMMANDS) }.unwrap();
    // SAFETY: as above.
    let [to_general, release] = unsafe { w.release_images(&pairs) }.unwrap();
    w.queue()
        .submit([acquire, enc.finish(), to_general, release]);
    down.slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.unwrap());
    support::wait(device);
    let out = down.slice(..).get_mapped_range().unwrap().to_vec();
    down.unmap();
    out
}

fn vk_upload(ctx: &Arc<VulkanContext>, image: &mut BoundImage, data: &[u8]) {
    let mut up = HostBuffer::new(ctx, data.len() as u64, vk::BufferUsageFlags::empty()).unwrap();
    up.write(data).unwrap();
    let region = ImageRegion::level(image.desc(), 0);
    ctx.copy_buffer_to_image(&up, 0, image, region).unwrap();
}

fn vk_download(ctx: &Arc<VulkanContext>, image: &BoundImage, len: usize) -> Vec<u8> {
    let mut down = HostBuffer::new(ctx, len as u64, vk::BufferUsageFlags::empty()).unwrap();
    let region = ImageRegion::level(image.desc(), 0);
    ctx.copy_image_to_buffer(image, region, &mut down, 0)
        .unwrap();
    down.read().unwrap()
}

fn first_difference(got: &[u8], want: &[u8]) -> Option<usize> {
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).position(|(g, w)| g != w)
}

#[test]
fn wgpu_writes_other_device_reads_and_the_reverse_exactly() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("wgpu_image_both_ways") else {
        return;
    };
    let Some((w, errors)) = support::device("wgpu_image_both_ways", Some(&ctx)) else {
        return;
    };
    for kind in [ImageKind::D2, ImageKind::D2Array { layers: 3 }] {
        let layers = kind.layers();
        let desc = rgba8(kind);

        // 1. wgpu's own image, imported by the other device.
        let own = w.create_exportable_image(&desc).unwrap();
        let mut seen = BoundImage::import_from(&ctx, &own).unwrap();
        let tex = w.wrap_image(own.clone(), Some("own")).unwrap();
        assert_eq!(tex.format(), wgpu::TextureFormat::Rgba8Unorm);
        assert_eq!(tex.depth_or_array_layers(), layers);
        let data = bytes(7, layers);
        wgpu_write(&w, &tex, &*own, &data);
        let got = vk_download(&ctx, &seen, data.len());
        assert_eq!(
            first_difference(&got, &data),
            None,
            "{kind:?}: wgpu -> other"
        );
        let data = bytes(9, layers);
        vk_upload(&ctx, &mut seen, &data);
        let got = wgpu_read(&w, &tex, &*own);
        assert_eq!(
            first_difference(&got, &data),
            None,
            "{kind:?}: other -> wgpu"
        );
        drop((tex, own, seen));

        // 2. The other device's image, imported into wgpu's.
        let mut source = BoundImage::new(&ctx, &desc, ImageOptions::EXPORT).unwrap();
        let data = bytes(11, layers);
        vk_upload(&ctx, &mut source, &data);
        let imported = Arc::new(BoundImage::import_from(w.vulkan(), &source).unwrap());
        let tex = w.wrap_image(imported.clone(), Some("imported")).unwrap();
        let got = wgpu_read(&w, &tex, &*imported);
        assert_eq!(
            first_difference(&got, &data),
            None,
            "{kind:?}: other -> wgpu"
        );
        let data = bytes(13, layers);
        wgpu_write(&w, &tex, &*imported, &data);
        let got = vk_download(&ctx, &source, data.len());
        assert_eq!(
            first_difference(&got, &data),
            None,
            "{kind:?}: wgpu -> other"
        );
        drop((tex, imported, source));
    }
    support::wait(w.device());
    errors.assert_none();
    support::assert_clean(&w);
    common::assert_clean(&ctx);
}

#[test]
fn refusals_name_the_problem_and_keep_nothing() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("wgpu_image_refusals") else {
        return;
    };
    let Some((w, errors)) = support::device("wgpu_image_refusals", Some(&ctx)) else {
        return;
    };
    let e = assert_err!(
        texture_format(vk::Format::R8G8B8A8_SRGB),
        Error::Wgpu(cuvk::WgpuError::NotTexture { .. })
    );
    assert!(e.to_string().contains("R8G8B8A8_SRGB"), "{e}");
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    let srgb = ImageDesc::d2(vk::Format::R8G8B8A8_SRGB, W, H, usage());
    assert_err!(
        w.create_exportable_image(&srgb),
        Error::Wgpu(cuvk::WgpuError::NotTexture { .. })
    );
    // A square array of 6 layers could be viewed as a cube by wgpu.
    let mut square = rgba8(ImageKind::D2Array { layers: 6 });
    square.extent.height = W;
    let e = assert_err!(
        w.create_exportable_image(&square),
        Error::Wgpu(cuvk::WgpuError::NotTexture { .. })
    );
    assert!(e.to_string().contains("Cube"), "{e}");
    // 16-bit UNORM needs a wgpu feature this device did not enable.
    if !w
        .device()
        .features()
        .contains(wgpu::Features::TEXTURE_FORMAT_16BIT_NORM)
    {
        let r16 = ImageDesc::d2(vk::Format::R16_UNORM, W, H, usage());
        let e = assert_err!(
            w.create_exportable_image(&r16),
            Error::Wgpu(cuvk::WgpuError::NotTexture { .. })
        );
        assert!(e.to_string().contains("TEXTURE_FORMAT_16BIT_NORM"), "{e}");
    }
    // An image of the other device is not wgpu's; a refusal keeps no share.
    let other =
        Arc::new(BoundImage::new(&ctx, &rgba8(ImageKind::D2), ImageOptions::EXPORT).unwrap());
    assert_err!(w.wrap_image(other.clone(), None), Error::WrongDevice { .. });
    assert_eq!(Arc::strong_count(&other), 1);
    // A texture paired with another image is refused.
    let own = w.create_exportable_image(&rgba8(ImageKind::D2)).unwrap();
    let own2 = w.create_exportable_image(&rgba8(ImageKind::D2)).unwrap();
    let tex = w.wrap_image(own.clone(), None).unwrap();
    assert_err!(
        // SAFETY: refused before anything is recorded.
        unsafe { w.acquire_images(&[(&tex, &*own2)], vk::PipelineStageFlags::ALL_COMMANDS) },
        Error::Wgpu(cuvk::WgpuError::TextureNotPaired)
    );
    drop((tex, own, own2, other));
    support::wait(w.device());
    errors.assert_none();
    support::assert_clean(&w);
    common::assert_clean(&ctx);
}

#[test]
fn every_drop_order_keeps_the_image_until_wgpu_is_done() {
    let _shared = common::shared();
    let Some((w, errors)) = support::device("wgpu_image_drops", None) else {
        return;
    };
    let desc = rgba8(ImageKind::D2);
    // Texture first, then the image.
    let own = w.create_exportable_image(&desc).unwrap();
    let tex = w.wrap_image(own.clone(), None).unwrap();
    assert_eq!(Arc::strong_count(&own), 2);
    drop(tex);
    support::wait(w.device());
    assert_eq!(Arc::strong_count(&own), 1, "wgpu released its share");
    drop(own);
    // The image first: wgpu's share keeps it; a write still works.
    let own = w.create_exportable_image(&desc).unwrap();
    let tex = w.wrap_image(own.clone(), None).unwrap();
    let image: Arc<BoundImage> = own.clone();
    drop(own);
    wgpu_write(&w, &tex, &*image, &bytes(1, 1));
    let weak = Arc::downgrade(&image);
    drop(image);
    assert!(weak.upgrade().is_some(), "the texture holds the image");
    drop(tex);
    support::wait(w.device());
    assert!(
        weak.upgrade().is_none(),
        "released once wgpu destroyed the texture"
    );
    // Everything dropped while the GPU may still be using it.
    let own = w.create_exportable_image(&desc).unwrap();
    let tex = w.wrap_image(own.clone(), None).unwrap();
    let view = tex.create_view(&Default::default());
    submit_write(&w, &tex, &*own, &bytes(2, 1));
    drop((own, tex, view));
    support::wait(w.device());
    errors.assert_none();
    support::assert_clean(&w);
}

/// On a CUDA GPU: an image shared with CUDA and seen by wgpu as a texture. CUDA writes (a
/// copy into its mapped array), wgpu reads exactly; wgpu writes, CUDA reads exactly; the
/// `SharedImage` dropped before the texture, which keeps the memory until wgpu is done.
/// Skips without a CUDA GPU (REQUIRE_GPU=1 fails instead).
#[test]
fn cuda_writes_wgpu_reads_a_shared_image_and_the_reverse() {
    let _shared = common::shared();
    let Some((bridge, errors)) = support::bridge("cuda_writes_wgpu_reads_a_shared_image") else {
        return;
    };
    let desc = ImageDesc {
        usage: usage() | vk::ImageUsageFlags::STORAGE,
        ..rgba8(ImageKind::D2)
    };
    let cuvk::wgpu::WgpuSharedImage {
        wgpu: tex,
        mut shared,
    } = bridge.create_image(&desc).unwrap();
    let w = bridge.wgpu();
    let cuda_wrote = bytes(11, 1);
    shared.cuda_upload(0, &cuda_wrote).unwrap();
    let got = wgpu_read(w, &tex, &shared);
    assert_eq!(
        first_difference(&got, &cuda_wrote),
        None,
        "wgpu read of CUDA's write"
    );
    let wgpu_wrote = bytes(12, 1);
    wgpu_write(w, &tex, &shared, &wgpu_wrote);
    let got = shared.cuda_download(0).unwrap();
    assert_eq!(
        first_difference(&got, &wgpu_wrote),
        None,
        "CUDA read of wgpu's write"
    );
    // The CUDA side first: the texture's drop callback keeps the image and memory alive.
    drop(shared);
    drop(tex);
    support::wait(w.device());
    errors.assert_none();
    support::assert_clean(w);
}

/// On a CUDA GPU with `VK_NVX_image_view_handle`: a CUDA kernel inside wgpu's own command
/// buffers (`WgpuDevice::kernel_commands`) writes a wgpu texture through an inline surface
/// handle of its `SharedImage`, and a wgpu copy in the same submission reads every byte the
/// kernel wrote — no CUDA context, no semaphore. Skips elsewhere (REQUIRE_GPU=1 fails on an
/// NVIDIA device without image handles).
#[test]
fn cuda_kernels_in_wgpu_queues_write_wgpu_textures_through_image_handles() {
    use cuvk::vulkan::{image_handles_supported, CuModule, KernelArg, LaunchDims, ViewLayers};
    use cuvk::wgpu::KernelLaunch;
    use cuvk_dev::image_kernels::{self, Geometry};

    let _shared = common::shared();
    let test = "cuda_kernels_in_wgpu_queues_write_wgpu_textures";
    let Some((bridge, errors)) = support::bridge(test) else {
        return;
    };
    let w = bridge.wgpu();
    if let Err(e) = image_handles_supported(w.vulkan()) {
        let nvidia = w.vulkan().info().vendor_id == 0x10de;
        assert!(
            !(nvidia && std::env::var("REQUIRE_GPU").as_deref() == Ok("1")),
            "{test}: REQUIRE_GPU=1 on an NVIDIA device without image handles: {e}"
        );
        eprintln!("SKIP {test}: {e}");
        return;
    }
    let ptx = cuvk::cuda::compile_ptx(bridge.bridge().cuda(), "images.cu", image_kernels::SOURCE)
        .unwrap();
    let module = CuModule::from_ptx(w.vulkan(), &ptx).unwrap();
    let write = module.function("surface_write_pattern").unwrap();
    let desc = ImageDesc {
        usage: usage() | vk::ImageUsageFlags::STORAGE,
        ..rgba8(ImageKind::D2)
    };
    let image = bridge.create_image(&desc).unwrap();
    let surface = image.shared.inline_surface(0, ViewLayers::All).unwrap();
    for seed in [3u32, 4] {
        let args = [
            surface.kernel_arg(),
            KernelArg::value(&(Geometry::D2 as i32)),
            KernelArg::value(&W),
            KernelArg::value(&H),
            KernelArg::value(&1u32),
            KernelArg::value(&4u32),
            KernelArg::value(&seed),
        ];
        let launch = KernelLaunch {
            function: &write,
            dims: LaunchDims::linear((W * H).div_ceil(256), 256),
            args: &args,
        };
        let pairs = [image.texture_image()];
        let device = w.device();
        let down = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("download"),
            size: u64::from(W * H * 4),
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
            mapped_at_creation: false,
        });
        let mut enc = device.create_command_encoder(&Default::default());
        enc.copy_texture_to_buffer(
            image.wgpu.as_image_copy(),
            wgpu::TexelCopyBufferInfo {
                buffer: &down,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(W * 4),
                    rows_per_image: Some(H),
                },
            },
            image.wgpu.size(),
        );
        // SAFETY: the image (texture, SharedImage, surface handle) and the module outlive the
        // submission (waited for below); the kernel writes only the W×H texels of level 0,
        // in GENERAL, owned by wgpu's queue family between the acquire and the release.
        let (acquire, kernel, [to_general, release]) = unsafe {
            (
                w.acquire_images(&pairs, vk::PipelineStageFlags::ALL_COMMANDS)
                    .unwrap(),
                w.kernel_commands(&[launch]).unwrap(),
                w.release_images(&pairs).unwrap(),
            )
        };
        w.queue()
            .submit([acquire, kernel, enc.finish(), to_general, release]);
        down.slice(..)
            .map_async(wgpu::MapMode::Read, |r| r.unwrap());
        support::wait(device);
        let got = down.slice(..).get_mapped_range().unwrap().to_vec();
        down.unmap();
        let want = image_kernels::pattern_bytes(u64::from(W * H), 4, seed);
        assert_eq!(
            first_difference(&got, &want),
            None,
            "seed {seed}: wgpu's copy of the kernel's surface writes"
        );
    }
    drop((surface, image));
    support::wait(w.device());
    errors.assert_none();
    support::assert_clean(w);
}
