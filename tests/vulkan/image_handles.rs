//! Image handles for CUDA kernels inside Vulkan queues where the device cannot take them
//! (lavapipe in CI, other vendors, older drivers): the capability check says `Unsupported` and
//! why, every constructor refuses the same way before creating anything and keeps nothing, and
//! bad requests (usage, level, layer, format, sampling rules) are refused first, with the rule.
//! Where the device has `VK_NVX_image_view_handle` the capability tests skip (printed): the
//! GPU suite covers it (tests/gpu/image_handles.rs).

use cuvk_dev::assert_err;
use cuvk_dev::testing as common;

use std::sync::Arc;

use cuvk::ash::vk;
use cuvk::vulkan::{
    image_handles_supported, BoundImage, ExistingVulkan, ImageOptions, InlineImageHandle,
    InlineLevels, InlineTextureDesc, RawViewDescriptor, SamplerAddressMode, SamplerFilter,
    ViewLayers, VulkanContext,
};
use cuvk::{
    Capability, Dedicated, Error, ErrorKind, ImageDesc, ImageError, ImageKind,
    InlineKernelsMissing, TextureRule, MEMORY_EXTENSION,
};

const NAME: &str = "VK_NVX_image_view_handle";

fn desc(kind: ImageKind, format: vk::Format, levels: u32, usage: vk::ImageUsageFlags) -> ImageDesc {
    ImageDesc {
        kind,
        format,
        extent: vk::Extent2D {
            width: 16,
            height: 16,
        },
        mip_levels: levels,
        usage,
        dedicated: Dedicated::Auto,
    }
}

fn image(ctx: &Arc<VulkanContext>, d: &ImageDesc) -> Arc<BoundImage> {
    Arc::new(BoundImage::new(ctx, d, ImageOptions::LOCAL).unwrap())
}

const BOTH: vk::ImageUsageFlags = vk::ImageUsageFlags::from_raw(
    vk::ImageUsageFlags::STORAGE.as_raw() | vk::ImageUsageFlags::SAMPLED.as_raw(),
);

/// The context, or `None` (printed) where it has the extension (the GPU suite's case).
fn without_handles(test: &str) -> Option<Arc<VulkanContext>> {
    let ctx = common::vulkan(test)?;
    if ctx.info().capabilities.image_handles {
        eprintln!(
            "SKIP {test}: {} has image handles for kernels in Vulkan queues \
             (tests/gpu/image_handles.rs)",
            ctx.info().name
        );
        return None;
    }
    Some(ctx)
}

fn is_capability(e: &Error) -> bool {
    matches!(
        e,
        Error::Unsupported(Capability::InlineKernels {
            reason: InlineKernelsMissing::ImageViewHandleNotSupported
                | InlineKernelsMissing::BinaryImportNotSupported
                | InlineKernelsMissing::BufferDeviceAddress,
        })
    )
}

#[test]
fn without_the_extension_the_reason_is_given() {
    let _shared = common::shared();
    let Some(ctx) = without_handles("without_the_extension_the_reason_is_given") else {
        return;
    };
    assert!(!ctx.info().capabilities.image_handles);
    let e = image_handles_supported(&ctx).unwrap_err();
    eprintln!("image_handles_supported: {e}");
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.is_unavailable());
    // The device lacks the extension (lavapipe): that is the reason given, by name.
    let device_has_it = {
        // SAFETY: a valid physical device of this instance.
        let props = unsafe {
            ctx.instance()
                .enumerate_device_extension_properties(ctx.physical_device())
        }
        .unwrap();
        props
            .iter()
            .any(|p| p.extension_name_as_c_str().unwrap().to_str() == Ok(NAME))
    };
    if !device_has_it {
        assert!(
            matches!(
                e,
                Error::Unsupported(Capability::InlineKernels {
                    reason: InlineKernelsMissing::ImageViewHandleNotSupported
                })
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains(NAME), "{e}");
    } else {
        assert!(is_capability(&e), "{e:?}");
    }
    common::assert_clean(&ctx);
}

#[test]
fn an_engines_device_is_detected_from_its_enabled_list() {
    let _shared = common::shared();
    let Some(ctx) = without_handles("an_engines_device_is_detected_from_its_enabled_list") else {
        return;
    };
    let exts = [MEMORY_EXTENSION];
    let existing = ExistingVulkan {
        entry: ctx.entry().clone(),
        instance: ctx.instance().clone(),
        api_version: vk::API_VERSION_1_2,
        physical_device: ctx.physical_device(),
        device: ctx.device().clone(),
        queue_family_index: ctx.queue_family_index(),
        queue: *ctx.lock_queue(),
        enabled_extensions: &exts,
        timeline_semaphore_enabled: true,
        buffer_device_address_enabled: ctx.info().capabilities.buffer_device_address,
    };
    // SAFETY: the objects are valid and outlive the wrapper (dropped first), which destroys
    // nothing of `ctx`'s; the extension list is a subset of what the device was created with.
    let wrapped = unsafe { VulkanContext::from_existing(existing) }.unwrap();
    assert!(!wrapped.info().capabilities.image_handles);
    let e = image_handles_supported(&wrapped).unwrap_err();
    eprintln!("wrapped device: {e}");
    assert!(is_capability(&e), "{e:?}");
    drop(wrapped);
    common::assert_clean(&ctx);
}

#[test]
fn constructors_refuse_with_the_capability_and_keep_nothing() {
    let _shared = common::shared();
    let Some(ctx) = without_handles("constructors_refuse_with_the_capability_and_keep_nothing")
    else {
        return;
    };
    let usage = BOTH | vk::ImageUsageFlags::TRANSFER_DST;
    let img = image(
        &ctx,
        &desc(
            ImageKind::D2Array { layers: 3 },
            vk::Format::R8G8B8A8_UNORM,
            1,
            usage,
        ),
    );
    let e = assert_err!(
        InlineImageHandle::surface(&img, 0, ViewLayers::All),
        Error::Unsupported(Capability::InlineKernels { .. })
    );
    assert!(is_capability(&e), "{e:?}");
    assert_err!(
        InlineImageHandle::surface(&img, 0, ViewLayers::One(2)),
        Error::Unsupported(Capability::InlineKernels { .. })
    );
    let normalized = InlineTextureDesc {
        normalized_coordinates: true,
        address_mode: SamplerAddressMode::Wrap,
        filter: SamplerFilter::Linear,
        ..InlineTextureDesc::default()
    };
    for d in [InlineTextureDesc::default(), normalized] {
        assert_err!(
            InlineImageHandle::texture(&img, &d),
            Error::Unsupported(Capability::InlineKernels { .. })
        );
    }
    // Nothing holds the image.
    assert_eq!(Arc::strong_count(&img), 1);

    // An engine's view: refused the same way, and what it was to keep alive is dropped.
    let info = vk::ImageViewCreateInfo::default()
        .image(img.handle())
        .view_type(vk::ImageViewType::TYPE_2D)
        .format(vk::Format::R8G8B8A8_UNORM)
        .subresource_range(vk::ImageSubresourceRange {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            base_mip_level: 0,
            level_count: 1,
            base_array_layer: 0,
            layer_count: 1,
        });
    // SAFETY: a live image of this device; the view is destroyed below.
    let view = unsafe { ctx.device().create_image_view(&info, None) }.unwrap();
    let kept = Arc::new(());
    for descriptor in [
        RawViewDescriptor::StorageImage,
        RawViewDescriptor::SampledImage,
    ] {
        // SAFETY: a live view of this device, of an image with STORAGE and SAMPLED usage,
        // alive until after the attempt.
        let res = unsafe {
            InlineImageHandle::from_raw_view(&ctx, view, descriptor, Box::new(kept.clone()))
        };
        assert_err!(res, Error::Unsupported(Capability::InlineKernels { .. }));
    }
    assert_eq!(Arc::strong_count(&kept), 1, "keep_alive dropped on refusal");
    // SAFETY: ours, unused.
    unsafe { ctx.device().destroy_image_view(view, None) };
    drop(img);
    common::assert_clean(&ctx);
}

#[test]
fn bad_requests_are_refused_first_with_the_rule() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("bad_requests_are_refused_first_with_the_rule") else {
        return;
    };
    let transfer = vk::ImageUsageFlags::TRANSFER_DST;
    let sampled_only = image(
        &ctx,
        &desc(
            ImageKind::D2,
            vk::Format::R8G8B8A8_UNORM,
            1,
            vk::ImageUsageFlags::SAMPLED | transfer,
        ),
    );
    let storage_only = image(
        &ctx,
        &desc(
            ImageKind::D2,
            vk::Format::R32_UINT,
            1,
            vk::ImageUsageFlags::STORAGE | transfer,
        ),
    );
    // A surface needs STORAGE usage, a texture SAMPLED: named with the VUID.
    let e = assert_err!(
        InlineImageHandle::surface(&sampled_only, 0, ViewLayers::All),
        Error::Image(ImageError::MissingUsage {
            needed: vk::ImageUsageFlags::STORAGE,
            ..
        })
    );
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(
        e.vuid(),
        Some("VUID-VkImageViewHandleInfoNVX-imageView-02657")
    );
    let e = assert_err!(
        InlineImageHandle::texture(&storage_only, &InlineTextureDesc::default()),
        Error::Image(ImageError::MissingUsage {
            needed: vk::ImageUsageFlags::SAMPLED,
            ..
        })
    );
    assert_eq!(
        e.vuid(),
        Some("VUID-VkImageViewHandleInfoNVX-imageView-02656")
    );

    // Levels and layers that do not exist.
    let chain = image(
        &ctx,
        &desc(ImageKind::D2, vk::Format::R32_SFLOAT, 3, BOTH | transfer),
    );
    assert_err!(
        InlineImageHandle::surface(&chain, 3, ViewLayers::All),
        Error::Image(ImageError::LevelOutOfRange {
            level: 3,
            levels: 3
        })
    );
    assert_err!(
        InlineImageHandle::surface(&chain, 0, ViewLayers::One(1)),
        Error::Image(ImageError::LayerOutOfRange {
            first_layer: 1,
            layers: 1,
            ..
        })
    );
    let texture_level = |level| InlineTextureDesc {
        levels: InlineLevels::One(level),
        ..InlineTextureDesc::default()
    };
    assert_err!(
        InlineImageHandle::texture(&chain, &texture_level(5)),
        Error::Image(ImageError::LevelOutOfRange { level: 5, .. })
    );
    let array = image(
        &ctx,
        &desc(
            ImageKind::D2Array { layers: 4 },
            vk::Format::R8G8B8A8_UNORM,
            1,
            BOTH | transfer,
        ),
    );
    assert_err!(
        InlineImageHandle::surface(&array, 0, ViewLayers::One(4)),
        Error::Image(ImageError::LayerOutOfRange {
            first_layer: 4,
            layers: 4,
            ..
        })
    );
    assert_err!(
        InlineImageHandle::texture(
            &array,
            &InlineTextureDesc {
                layers: ViewLayers::One(7),
                ..InlineTextureDesc::default()
            }
        ),
        Error::Image(ImageError::LayerOutOfRange { first_layer: 7, .. })
    );

    // CUDA's texture rules, which the Vulkan sampler rules agree with.
    let rule = |d: &InlineTextureDesc, img: &Arc<BoundImage>, want: TextureRule| {
        let e = assert_err!(
            InlineImageHandle::texture(img, d),
            Error::Image(ImageError::Texture(_))
        );
        assert_eq!(
            match e {
                Error::Image(ImageError::Texture(r)) => r,
                _ => unreachable!(),
            },
            want
        );
    };
    let uint = image(
        &ctx,
        &desc(ImageKind::D2, vk::Format::R32_UINT, 1, BOTH | transfer),
    );
    rule(
        &InlineTextureDesc {
            filter: SamplerFilter::Linear,
            ..InlineTextureDesc::default()
        },
        &uint,
        TextureRule::LinearFilterNeedsFloatReads,
    );
    rule(
        &InlineTextureDesc {
            address_mode: SamplerAddressMode::Wrap,
            ..InlineTextureDesc::default()
        },
        &sampled_only,
        TextureRule::WrapNeedsNormalizedCoordinates,
    );
    rule(
        &InlineTextureDesc {
            address_mode: SamplerAddressMode::Mirror,
            ..InlineTextureDesc::default()
        },
        &sampled_only,
        TextureRule::WrapNeedsNormalizedCoordinates,
    );
    rule(
        &InlineTextureDesc {
            levels: InlineLevels::All {
                filter: SamplerFilter::Point,
            },
            ..InlineTextureDesc::default()
        },
        &chain,
        TextureRule::MipChainNeedsNormalizedCoordinates,
    );
    rule(
        &InlineTextureDesc {
            normalized_coordinates: true,
            levels: InlineLevels::All {
                filter: SamplerFilter::Linear,
            },
            ..InlineTextureDesc::default()
        },
        &uint,
        TextureRule::LinearFilterNeedsFloatReads,
    );

    // A format outside the table (what the handle's reads would mean is not known).
    let srgb = image(
        &ctx,
        &desc(
            ImageKind::D2,
            vk::Format::R8G8B8A8_SRGB,
            1,
            vk::ImageUsageFlags::SAMPLED | transfer,
        ),
    );
    let e = assert_err!(
        InlineImageHandle::texture(&srgb, &InlineTextureDesc::default()),
        Error::Image(ImageError::UnsupportedFormat { .. })
    );
    assert_eq!(e.kind(), ErrorKind::Unsupported);

    // A valid request then reaches the capability check (or, with the extension, a handle).
    let ok = InlineImageHandle::texture(
        &chain,
        &InlineTextureDesc {
            normalized_coordinates: true,
            address_mode: SamplerAddressMode::Wrap,
            levels: InlineLevels::All {
                filter: SamplerFilter::Point,
            },
            ..InlineTextureDesc::default()
        },
    );
    match ok {
        Ok(h) => assert!(ctx.info().capabilities.image_handles, "{h:?}"),
        Err(e) => assert!(is_capability(&e), "{e:?}"),
    }
    for img in [&sampled_only, &storage_only, &chain, &array, &uint, &srgb] {
        assert_eq!(Arc::strong_count(img), 1, "a refusal kept the image");
    }
    common::assert_clean(&ctx);
}
