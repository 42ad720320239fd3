//! Shared images on the Vulkan side, runnable on any Vulkan device (lavapipe in CI) under the
//! validation layer (any message fails the test): exportable images of every kind and every
//! format in the table, exported and imported into a second `VkDevice`, pixel-exact both ways;
//! an image rendered as a colour attachment read through the import; every bad input refused
//! before the driver, with nothing leaked.

use cuvk_dev::assert_err;
use cuvk_dev::image_kernels;
use cuvk_dev::testing as common;
use cuvk_dev::testing::render;

use std::sync::Arc;

use cuvk::ash::vk;
use cuvk::cuda::ArrayDesc;
use cuvk::vulkan::{
    AllocateInfo, BoundImage, Buffer, BufferDesc, DeviceMemory, ExternalUse, HostBuffer, Image,
    ImageOptions, ImageRegion, VulkanContext,
};
use cuvk::{
    format_info, Dedicated, Error, ErrorKind, FormatRefusal, ImageDesc, ImageError, ImageKind,
    LayoutError, SharedImage, FORMATS,
};
use image_kernels::pattern_bytes;

const TRANSFER: vk::ImageUsageFlags = vk::ImageUsageFlags::from_raw(
    vk::ImageUsageFlags::TRANSFER_SRC.as_raw() | vk::ImageUsageFlags::TRANSFER_DST.as_raw(),
);

fn desc(kind: ImageKind, format: vk::Format, w: u32, h: u32, levels: u32) -> ImageDesc {
    ImageDesc {
        kind,
        format,
        extent: vk::Extent2D {
            width: w,
            height: h,
        },
        mip_levels: levels,
        usage: TRANSFER | vk::ImageUsageFlags::SAMPLED,
        dedicated: Dedicated::Auto,
    }
}

/// Uploads `data` into `region` of `image` through `ctx`.
fn upload(ctx: &Arc<VulkanContext>, image: &mut BoundImage, region: ImageRegion, data: &[u8]) {
    let mut up = HostBuffer::new(ctx, data.len() as u64, vk::BufferUsageFlags::empty()).unwrap();
    up.write(data).unwrap();
    ctx.copy_buffer_to_image(&up, 0, image, region).unwrap();
}

/// Downloads `region` of `image` (`bytes` long) through `ctx`.
fn download(
    ctx: &Arc<VulkanContext>,
    image: &BoundImage,
    region: ImageRegion,
    bytes: u64,
) -> Vec<u8> {
    let mut down = HostBuffer::new(ctx, bytes, vk::BufferUsageFlags::empty()).unwrap();
    ctx.copy_image_to_buffer(image, region, &mut down, 0)
        .unwrap();
    down.read().unwrap()
}

fn first_difference(got: &[u8], want: &[u8]) -> Option<usize> {
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).position(|(g, w)| g != w)
}

/// Writes a pattern into `region` through `w`'s device and checks `r`'s device reads it.
fn one_way(
    (ctx_w, w): (&Arc<VulkanContext>, &mut BoundImage),
    (ctx_r, r): (&Arc<VulkanContext>, &BoundImage),
    level: u32,
    seed: u32,
    what: &str,
) {
    let d = *w.desc();
    let texel = format_info(d.format).unwrap().texel_bytes();
    let region = ImageRegion::level(&d, level);
    let bytes = d.level_bytes(level, texel);
    let data = pattern_bytes(bytes / u64::from(texel), texel, seed);
    upload(ctx_w, w, region, &data);
    let got = download(ctx_r, r, region, bytes);
    if let Some(i) = first_difference(&got, &data) {
        panic!("{what}, level {level}, seed {seed}: byte {i} of {bytes} differs");
    }
}

/// Every level of `a` written through `a`'s device is read exactly through `b`'s, and the
/// reverse with another pattern.
fn check_both_ways(
    (ctx_a, a): (&Arc<VulkanContext>, &mut BoundImage),
    (ctx_b, b): (&Arc<VulkanContext>, &mut BoundImage),
    what: &str,
) {
    for level in 0..a.desc().mip_levels {
        one_way((ctx_a, &mut *a), (ctx_b, &*b), level, 1000 + level, what);
        one_way((ctx_b, &mut *b), (ctx_a, &*a), level, 2000 + level, what);
    }
}

fn two_devices(test: &str) -> Option<(Arc<VulkanContext>, Arc<VulkanContext>)> {
    let a = common::vulkan(test)?;
    let b = common::vulkan("second device").expect("a second device on the same GPU");
    Some((a, b))
}

#[test]
fn every_kind_round_trips_through_a_second_device() {
    let _serial = common::serial();
    let Some((ctx_a, ctx_b)) = two_devices("every_kind_round_trips_through_a_second_device") else {
        return;
    };
    eprintln!("device: {}", ctx_a.info().describe());
    let (_wa, _wb) = (common::warm_up(&ctx_a), common::warm_up(&ctx_b));
    let fds = common::non_driver_fds();
    let cases = [
        desc(ImageKind::D2, vk::Format::R8G8B8A8_UNORM, 37, 19, 1),
        desc(ImageKind::D2, vk::Format::R32G32B32A32_SFLOAT, 64, 64, 7),
        desc(
            ImageKind::D2Array { layers: 3 },
            vk::Format::R16G16_SFLOAT,
            48,
            20,
            3,
        ),
        desc(ImageKind::D3 { depth: 9 }, vk::Format::R32_UINT, 16, 8, 4),
        desc(ImageKind::Cube, vk::Format::R8G8B8A8_UNORM, 32, 32, 2),
        ImageDesc {
            dedicated: Dedicated::Always,
            ..desc(ImageKind::D2, vk::Format::R16_UNORM, 100, 3, 2)
        },
    ];
    for d in cases {
        let what = format!(
            "{:?} {:?} {}x{} ×{} levels",
            d.kind, d.format, d.extent.width, d.extent.height, d.mip_levels
        );
        let mut a = match BoundImage::new(&ctx_a, &d, ImageOptions::EXPORT) {
            Ok(a) => a,
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                eprintln!("{what}: unsupported here ({e})");
                continue;
            }
            Err(e) => panic!("{what}: {e}"),
        };
        if d.dedicated == Dedicated::Always {
            assert!(a.memory().is_dedicated());
        }
        let mut b = BoundImage::import_from(&ctx_b, &a).unwrap();
        assert_eq!(b.memory().is_dedicated(), a.memory().is_dedicated());
        check_both_ways((&ctx_a, &mut a), (&ctx_b, &mut b), &what);
        eprintln!(
            "{what}: exact both ways (dedicated: {})",
            a.memory().is_dedicated()
        );
    }
    common::assert_non_driver_fds(fds, "file descriptors leaked");
    common::assert_clean(&ctx_a);
    common::assert_clean(&ctx_b);
}

#[test]
fn every_format_in_the_table_round_trips_through_a_second_device() {
    let _serial = common::serial();
    let Some((ctx_a, ctx_b)) =
        two_devices("every_format_in_the_table_round_trips_through_a_second_device")
    else {
        return;
    };
    let mut unsupported = Vec::new();
    for f in FORMATS {
        let d = desc(ImageKind::D2, f.format, 19, 7, 2);
        let mut a = match BoundImage::new(&ctx_a, &d, ImageOptions::EXPORT) {
            Ok(a) => a,
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                unsupported.push(format!("{:?}", f.format));
                continue;
            }
            Err(e) => panic!("{:?}: {e}", f.format),
        };
        let mut b = BoundImage::import_from(&ctx_b, &a).unwrap();
        check_both_ways(
            (&ctx_a, &mut a),
            (&ctx_b, &mut b),
            &format!("{:?}", f.format),
        );
    }
    eprintln!(
        "{} of {} formats exact both ways; not exportable here: {unsupported:?}",
        FORMATS.len() - unsupported.len(),
        FORMATS.len()
    );
    assert!(!unsupported.iter().any(|f| f == "R8G8B8A8_UNORM"));
    common::assert_clean(&ctx_a);
    common::assert_clean(&ctx_b);
}

#[test]
fn a_rendered_colour_attachment_reaches_the_second_device_exactly() {
    let _serial = common::serial();
    let Some((ctx_a, ctx_b)) =
        two_devices("a_rendered_colour_attachment_reaches_the_second_device_exactly")
    else {
        return;
    };
    let (w, h) = (256, 96);
    let d = ImageDesc::d2(
        vk::Format::R8G8B8A8_UNORM,
        w,
        h,
        vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::SAMPLED | TRANSFER,
    );
    let a = BoundImage::new(&ctx_a, &d, ImageOptions::EXPORT).unwrap();
    let b = BoundImage::import_from(&ctx_b, &a).unwrap();
    render::render_gradient(&ctx_a, &a, render::Release::Protocol);
    let want = render::gradient_bytes(w, h);
    let got = download(&ctx_b, &b, ImageRegion::level(&d, 0), u64::from(w * h * 4));
    if let Some(i) = first_difference(&got, &want) {
        let t = i / 4;
        panic!(
            "texel ({}, {}) is {:?}, rendered {:?}",
            t as u32 % w,
            t as u32 / w,
            &got[t * 4..t * 4 + 4],
            &want[t * 4..t * 4 + 4]
        );
    }
    eprintln!("{w}x{h} render (clear + triangle) read exactly through the import");
    common::assert_clean(&ctx_a);
    common::assert_clean(&ctx_b);
}

#[test]
fn every_bad_input_is_refused_and_changes_nothing() {
    let _serial = common::serial();
    let Some(ctx) = common::vulkan("every_bad_input_is_refused_and_changes_nothing") else {
        return;
    };
    let _warm = common::warm_up(&ctx);
    let fds = common::non_driver_fds();
    let good = desc(ImageKind::D2, vk::Format::R8G8B8A8_UNORM, 64, 32, 1);
    let check = |d: &ImageDesc| SharedImage::validate_desc(&ctx, d);
    assert!(check(&good).is_ok());

    // Formats outside the table, each with its reason and the supported list.
    for (format, reason) in [
        (vk::Format::R8G8B8A8_SRGB, FormatRefusal::Srgb),
        (vk::Format::D32_SFLOAT, FormatRefusal::DepthStencil),
        (vk::Format::BC7_UNORM_BLOCK, FormatRefusal::BlockCompressed),
        (vk::Format::R8G8B8_UNORM, FormatRefusal::ThreeChannels),
        (
            vk::Format::A2B10G10R10_UNORM_PACK32,
            FormatRefusal::NotInTable,
        ),
    ] {
        let e = assert_err!(
            check(&ImageDesc { format, ..good }),
            Error::Image(ImageError::UnsupportedFormat { .. })
        );
        assert!(
            matches!(e, Error::Image(ImageError::UnsupportedFormat { reason: r, .. }) if r == reason)
        );
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(
            e.to_string().contains("R16G16B16A16_SFLOAT"),
            "lists the table: {e}"
        );
    }
    // Zero and over-limit extents, mip levels, no usage.
    assert_err!(
        check(&desc(ImageKind::D2, vk::Format::R8G8B8A8_UNORM, 0, 32, 1)),
        Error::Image(ImageError::ZeroExtent { width: 0, .. })
    );
    assert_err!(
        check(&desc(
            ImageKind::D2Array { layers: 0 },
            vk::Format::R8G8B8A8_UNORM,
            4,
            4,
            1
        )),
        Error::Image(ImageError::ZeroExtent { layers: 0, .. })
    );
    assert_err!(
        check(&desc(
            ImageKind::D3 { depth: 0 },
            vk::Format::R8G8B8A8_UNORM,
            4,
            4,
            1
        )),
        Error::Image(ImageError::ZeroExtent { depth: 0, .. })
    );
    let e = assert_err!(
        check(&desc(
            ImageKind::D2,
            vk::Format::R8G8B8A8_UNORM,
            1 << 20,
            4,
            1
        )),
        Error::Image(ImageError::OverLimit { what: "width", .. })
    );
    assert!(e.to_string().contains(&(1u32 << 20).to_string()));
    assert_err!(
        check(&desc(
            ImageKind::D2Array { layers: 1 << 20 },
            vk::Format::R8G8B8A8_UNORM,
            4,
            4,
            1
        )),
        Error::Image(ImageError::OverLimit {
            what: "array layers",
            ..
        })
    );
    assert_err!(
        check(&desc(ImageKind::D2, vk::Format::R8G8B8A8_UNORM, 64, 32, 8)),
        Error::Image(ImageError::MipLevels {
            requested: 8,
            max: 7,
            ..
        })
    );
    assert_err!(
        check(&desc(ImageKind::D2, vk::Format::R8G8B8A8_UNORM, 64, 32, 0)),
        Error::Image(ImageError::MipLevels { requested: 0, .. })
    );
    assert_err!(
        check(&ImageDesc {
            usage: vk::ImageUsageFlags::empty(),
            ..good
        }),
        Error::Image(ImageError::NoUsage)
    );
    // 3D with layers, cubes that are not square or not 6 layers: what a VkImageCreateInfo
    // (or the C ABI) can say and ImageKind cannot.
    assert_err!(
        ImageKind::from_vulkan(vk::ImageType::TYPE_3D, 8, 4, false),
        ImageError::LayersOn3D { layers: 4 }
    );
    assert_err!(
        ImageKind::from_vulkan(vk::ImageType::TYPE_2D, 1, 4, true),
        ImageError::CubeLayers { layers: 4 }
    );
    assert_err!(
        check(&desc(
            ImageKind::Cube,
            vk::Format::R8G8B8A8_UNORM,
            32,
            16,
            1
        )),
        Error::Image(ImageError::CubeNotSquare {
            width: 32,
            height: 16
        })
    );
    // The same refusals from the plain Vulkan constructor (before vkCreateImage).
    assert_err!(
        BoundImage::new(
            &ctx,
            &desc(ImageKind::Cube, vk::Format::R8G8B8A8_UNORM, 32, 16, 1),
            ImageOptions::EXPORT
        ),
        Error::Image(ImageError::CubeNotSquare { .. })
    );

    // An importing image is made by import_from, not by allocating.
    assert_err!(
        BoundImage::new(&ctx, &good, ImageOptions::IMPORT),
        Error::Memory(cuvk::MemoryError::ImportNeedsSource)
    );

    // LINEAR tiling where an array mapping is asked.
    let linear = ImageOptions {
        tiling: vk::ImageTiling::LINEAR,
        external: ExternalUse::Export,
    };
    let linear_image = BoundImage::new(&ctx, &good, linear)
        .or_else(|_| {
            BoundImage::new(
                &ctx,
                &good,
                ImageOptions {
                    external: ExternalUse::None,
                    ..linear
                },
            )
        })
        .unwrap();
    assert_err!(
        SharedImage::validate_shareable(&ctx, &linear_image, None),
        Error::Image(ImageError::LinearTiling)
    );
    drop(linear_image);
    // An image not created exportable; an exportable image in memory not allocated exportable.
    let local = BoundImage::new(&ctx, &good, ImageOptions::LOCAL).unwrap();
    assert_err!(
        SharedImage::validate_shareable(&ctx, &local, None),
        Error::Memory(cuvk::MemoryError::NotExportable {
            what: cuvk::Exportable::Image
        })
    );
    drop(local);
    let image = Image::new(&ctx, &good, ImageOptions::EXPORT).unwrap();
    let r = image.requirements();
    if !r.requires_dedicated {
        let plain = DeviceMemory::allocate(
            &ctx,
            AllocateInfo {
                size: r.size,
                memory_type_bits: r.memory_type_bits,
                properties: vk::MemoryPropertyFlags::empty(),
                exportable: false,
            },
            None,
        )
        .unwrap();
        let bound = image.bind(Arc::new(plain), 0).unwrap();
        assert_err!(
            SharedImage::validate_shareable(&ctx, &bound, None),
            Error::Memory(cuvk::MemoryError::NotExportable {
                what: cuvk::Exportable::Memory
            })
        );
    }
    // A CUDA descriptor that does not match the image.
    let exportable = BoundImage::new(&ctx, &good, ImageOptions::EXPORT).unwrap();
    let implied = good.cuda_array_desc().unwrap();
    assert!(SharedImage::validate_shareable(&ctx, &exportable, Some(&implied)).is_ok());
    let e = assert_err!(
        SharedImage::validate_shareable(
            &ctx,
            &exportable,
            Some(&ArrayDesc {
                height: 33,
                ..implied
            })
        ),
        Error::Image(ImageError::DescriptorMismatch {
            field: "Height",
            ..
        })
    );
    assert!(
        e.to_string().contains("33") && e.to_string().contains("32"),
        "{e}"
    );
    // Levels and layers out of range in the copy helpers, refused before any command.
    let mut host = HostBuffer::new(&ctx, 64 * 32 * 4, vk::BufferUsageFlags::empty()).unwrap();
    assert_err!(
        ctx.copy_image_to_buffer(
            &exportable,
            ImageRegion {
                level: 1,
                first_layer: 0,
                layers: 1
            },
            &mut host,
            0
        ),
        Error::Image(ImageError::LevelOutOfRange {
            level: 1,
            levels: 1
        })
    );
    assert_err!(
        ctx.copy_image_to_buffer(
            &exportable,
            ImageRegion {
                level: 0,
                first_layer: 1,
                layers: 1
            },
            &mut host,
            0
        ),
        Error::Image(ImageError::LayerOutOfRange { first_layer: 1, .. })
    );
    assert_err!(
        ctx.copy_image_to_buffer(&exportable, ImageRegion::level(&good, 0), &mut host, 4),
        Error::Layout(LayoutError::OutOfBounds { .. })
    );
    assert_err!(
        ctx.copy_image_to_buffer(&exportable, ImageRegion::level(&good, 0), &mut host, 2),
        Error::Layout(LayoutError::Misaligned { alignment: 4, .. })
    );
    // A dedicated allocation holds exactly its image, at offset 0.
    let other = Image::new(&ctx, &good, ImageOptions::EXPORT).unwrap();
    let dedicated_elsewhere = BoundImage::new(
        &ctx,
        &ImageDesc {
            dedicated: Dedicated::Always,
            ..good
        },
        ImageOptions::EXPORT,
    )
    .unwrap();
    assert_err!(
        other.bind(dedicated_elsewhere.memory().clone(), 0),
        Error::Memory(cuvk::MemoryError::DedicatedToAnother)
    );

    // Nothing leaked, and the next valid call works.
    drop((exportable, dedicated_elsewhere));
    let mut fine = BoundImage::new(&ctx, &good, ImageOptions::EXPORT).unwrap();
    let data = pattern_bytes(64 * 32, 4, 9);
    upload(&ctx, &mut fine, ImageRegion::level(&good, 0), &data);
    assert_eq!(
        download(&ctx, &fine, ImageRegion::level(&good, 0), data.len() as u64),
        data
    );
    drop(fine);
    common::assert_non_driver_fds(fds, "descriptors leaked");
    common::assert_clean(&ctx);
}

/// An image with both transfer usages, filled from `up`: what a valid round trip reads.
fn no_dst_readable(ctx: &Arc<VulkanContext>, up: &HostBuffer, region: ImageRegion) -> BoundImage {
    let mut image = BoundImage::new(
        ctx,
        &desc(ImageKind::D2, vk::Format::R8G8B8A8_UNORM, 16, 16, 1),
        ImageOptions::LOCAL,
    )
    .unwrap();
    ctx.copy_buffer_to_image(up, 0, &mut image, region).unwrap();
    image
}

/// The copy helpers check the usage their command needs, of the image and of the buffer, with
/// the rule's VUID, before anything is recorded; the next valid copy then works.
#[test]
fn copy_helpers_refuse_images_and_buffers_without_the_transfer_usage() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("copy_helpers_refuse_missing_transfer_usage") else {
        return;
    };
    let format = vk::Format::R8G8B8A8_UNORM;
    let mut no_src = BoundImage::new(
        &ctx,
        &ImageDesc {
            usage: vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::SAMPLED,
            ..desc(ImageKind::D2, format, 16, 16, 1)
        },
        ImageOptions::LOCAL,
    )
    .unwrap();
    let no_dst = BoundImage::new(
        &ctx,
        &ImageDesc {
            usage: vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::SAMPLED,
            ..desc(ImageKind::D2, format, 16, 16, 1)
        },
        ImageOptions::LOCAL,
    )
    .unwrap();
    let region = ImageRegion::level(no_src.desc(), 0);
    let mut host = HostBuffer::new(&ctx, 16 * 16 * 4, vk::BufferUsageFlags::empty()).unwrap();
    let e = assert_err!(
        ctx.copy_image_to_buffer(&no_src, region, &mut host, 0),
        Error::Image(ImageError::MissingUsage {
            vuid: Some("VUID-vkCmdCopyImageToBuffer-srcImage-00186"),
            ..
        })
    );
    assert_eq!(e.vuid(), Some("VUID-vkCmdCopyImageToBuffer-srcImage-00186"));
    let mut no_dst = no_dst;
    assert_err!(
        ctx.copy_buffer_to_image(&host, 0, &mut no_dst, region),
        Error::Image(ImageError::MissingUsage {
            vuid: Some("VUID-vkCmdCopyBufferToImage-dstImage-00177"),
            ..
        })
    );
    // A buffer made with STORAGE usage only: no copy into it, no fill.
    let storage_only = Buffer::new(
        &ctx,
        BufferDesc {
            size: 16 * 16 * 4,
            usage: vk::BufferUsageFlags::STORAGE_BUFFER,
            external: ExternalUse::None,
        },
    )
    .unwrap();
    let r = storage_only.requirements();
    let memory = Arc::new(
        DeviceMemory::allocate(
            &ctx,
            AllocateInfo {
                size: r.size,
                memory_type_bits: r.memory_type_bits,
                properties: vk::MemoryPropertyFlags::empty(),
                exportable: false,
            },
            None,
        )
        .unwrap(),
    );
    let mut storage_only = storage_only.bind(memory, 0).unwrap();
    let e = assert_err!(
        ctx.fill_buffer(&mut storage_only, 0, 64, 7),
        Error::Memory(cuvk::MemoryError::MissingBufferUsage { .. })
    );
    assert_eq!(e.vuid(), Some("VUID-vkCmdFillBuffer-dstBuffer-00029"));
    assert_err!(
        ctx.copy_image_to_buffer(&no_dst, region, &mut storage_only, 0),
        Error::Memory(cuvk::MemoryError::MissingBufferUsage { .. })
    );
    // Nothing was recorded; the next valid copy works and reads what was uploaded.
    let data = pattern_bytes(16 * 16, 4, 5);
    let mut up = HostBuffer::new(&ctx, data.len() as u64, vk::BufferUsageFlags::empty()).unwrap();
    up.write(&data).unwrap();
    ctx.copy_buffer_to_image(&up, 0, &mut no_src, region)
        .unwrap();
    let got = download(
        &ctx,
        &no_dst_readable(&ctx, &up, region),
        region,
        data.len() as u64,
    );
    assert_eq!(first_difference(&got, &data), None);
    drop((storage_only, no_dst, no_src));
    common::assert_clean(&ctx);
}
