//! Shared images on a real CUDA + Vulkan GPU: every format in the table written by CUDA
//! (surfaces, copies) and read by Vulkan, and the reverse (copies, clears) read by CUDA
//! (surfaces, textures, copies); mip levels, array layers, 3D and cube images; an image
//! rendered as a colour attachment read exactly by CUDA; images handed over frame by frame by
//! the `FramePacer`; every bad input; 1,000 leak-free cycles.
//! Skips with a printed reason where there is no GPU; REQUIRE_GPU=1 makes that a failure.

use cuvk_dev::assert_err;
use cuvk_dev::image_kernels;
use cuvk_dev::testing as common;
use cuvk_dev::testing::render;

use std::time::Duration;

use cuvk::ash::vk;
use cuvk::cuda::{AddressMode, ArrayDesc, ArrayFlags, FilterMode, TextureDesc};
use cuvk::vulkan::{
    AllocateInfo, AsVkBuffer, AsVkImage, BoundImage, DeviceMemory, ExternalUse, HostBuffer, Image,
    ImageOptions, ImageRegion,
};
use cuvk::{
    Bridge, Dedicated, Error, ErrorKind, FormatInfo, FramePacer, ImageDesc, ImageError, ImageKind,
    NumericClass, SharedImage, TextureLevels, TextureOptions, TextureRead, TextureRule, FORMATS,
};
use image_kernels::{dims, pattern_bytes, Geometry, ImageKernels};

const TRANSFER: vk::ImageUsageFlags = vk::ImageUsageFlags::from_raw(
    vk::ImageUsageFlags::TRANSFER_SRC.as_raw() | vk::ImageUsageFlags::TRANSFER_DST.as_raw(),
);
const ALL_CUDA: vk::ImageUsageFlags = vk::ImageUsageFlags::from_raw(
    TRANSFER.as_raw()
        | vk::ImageUsageFlags::STORAGE.as_raw()
        | vk::ImageUsageFlags::SAMPLED.as_raw(),
);

fn desc(
    kind: ImageKind,
    format: vk::Format,
    w: u32,
    h: u32,
    levels: u32,
    usage: vk::ImageUsageFlags,
) -> ImageDesc {
    ImageDesc {
        kind,
        format,
        extent: vk::Extent2D {
            width: w,
            height: h,
        },
        mip_levels: levels,
        usage,
        dedicated: Dedicated::Auto,
    }
}

fn cuda_free() -> usize {
    cuvk::cudarc::driver::result::mem_get_info().unwrap().0
}

fn texel_bytes(image: &SharedImage) -> u32 {
    image.format_info().texel_bytes()
}

/// Level `level` of `image` (all layers), copied to the host by Vulkan.
fn vulkan_read(bridge: &Bridge, image: &SharedImage, level: u32) -> Vec<u8> {
    let d = image.desc();
    let bytes = d.level_bytes(level, texel_bytes(image));
    let mut down = HostBuffer::new(bridge.vulkan(), bytes, vk::BufferUsageFlags::empty()).unwrap();
    bridge
        .vulkan()
        .copy_image_to_buffer(image, ImageRegion::level(d, level), &mut down, 0)
        .unwrap();
    down.read().unwrap()
}

/// Copies `data` into level `level` of `image` (all layers) with Vulkan.
fn vulkan_write(bridge: &Bridge, image: &mut SharedImage, level: u32, data: &[u8]) {
    let mut up = HostBuffer::new(
        bridge.vulkan(),
        data.len() as u64,
        vk::BufferUsageFlags::empty(),
    )
    .unwrap();
    up.write(data).unwrap();
    let region = ImageRegion::level(image.desc(), level);
    bridge
        .vulkan()
        .copy_buffer_to_image(&up, 0, image, region)
        .unwrap();
}

fn assert_bytes(got: &[u8], want: &[u8], texel: u32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: sizes");
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        let t = i / texel as usize * texel as usize;
        let bad = got
            .chunks(texel as usize)
            .zip(want.chunks(texel as usize))
            .filter(|(g, w)| g != w)
            .count();
        panic!(
            "{what}: {bad} of {} texels differ; first, texel {}: got {:?}, want {:?}",
            got.len() / texel as usize,
            i / texel as usize,
            &got[t..t + texel as usize],
            &want[t..t + texel as usize]
        );
    }
}

/// Channel `ch` of a texel in memory holds component `component(f, ch)` (R = 0 ... A = 3):
/// the identity, except `B8G8R8A8` whose memory order is B, G, R, A.
fn component(f: &FormatInfo, ch: usize) -> usize {
    if f.format == vk::Format::B8G8R8A8_UNORM {
        [2, 1, 0, 3][ch]
    } else {
        ch
    }
}

/// What a clear stores and what a texture then reads.
struct ClearCase {
    value: vk::ClearColorValue,
    texel: Vec<u8>,
    /// Per channel in memory order: the float a texture returns, or the integer.
    floats: [f32; 4],
    ints: [i64; 4],
}

/// A clear value every format stores exactly: UNORM (c+1)/15, SNORM ±1 and 0, UINT
/// (c+1)·37, SINT −(c+1)·13, SFLOAT 1.5, −2.25, 0.125, 3 (exact in half and float).
fn clear_case(f: &FormatInfo) -> ClearCase {
    let bits = f.bits;
    let (snorm, float) = (image_kernels::CLEAR_SNORM, image_kernels::CLEAR_FLOAT);
    let comp_float = |c: usize| image_kernels::clear_float(f, c);
    let comp_int = |c: usize| image_kernels::clear_int(f, c);
    let value = image_kernels::clear_value(f);
    let stored = |c: usize| -> u64 {
        match f.class {
            NumericClass::Unorm => (c as u64 + 1) * ((1u64 << bits) - 1) / 15,
            NumericClass::Snorm => (snorm[c] as i64 * ((1i64 << (bits - 1)) - 1)) as u64,
            NumericClass::Uint | NumericClass::Sint => comp_int(c) as u64,
            NumericClass::Float if bits == 16 => [0x3E00u64, 0xC080, 0x3000, 0x4200][c],
            NumericClass::Float => u64::from(float[c].to_bits()),
        }
    };
    let mut texel = Vec::new();
    let (mut floats, mut ints) = ([0f32; 4], [0i64; 4]);
    for ch in 0..f.channels as usize {
        let c = component(f, ch);
        texel.extend_from_slice(&stored(c).to_le_bytes()[..(bits / 8) as usize]);
        floats[ch] = comp_float(c);
        ints[ch] = comp_int(c);
    }
    ClearCase {
        value,
        texel,
        floats,
        ints,
    }
}

/// A texture over level `level` of `image` reads, at every texel, what `case` says.
fn check_texture_reads(
    k: &ImageKernels,
    bridge: &Bridge,
    image: &SharedImage,
    level: u32,
    case: &ClearCase,
    what: &str,
) {
    let f = *image.format_info();
    let geometry = Geometry::of(image.desc().kind);
    let tex = image
        .texture(&TextureOptions {
            levels: TextureLevels::One(level),
            ..TextureOptions::default()
        })
        .unwrap();
    let lvl = image.level(level).unwrap();
    let n = f.channels as usize;
    if f.class.reads_as_integer() {
        let got = k
            .fetch_int(
                bridge.stream(),
                &tex,
                &lvl,
                geometry,
                f.class == NumericClass::Sint,
            )
            .unwrap();
        for (i, t) in got.iter().enumerate() {
            let t: Vec<i64> = t[..n]
                .iter()
                .map(|&v| {
                    if f.class == NumericClass::Sint {
                        i64::from(v as i32)
                    } else {
                        i64::from(v)
                    }
                })
                .collect();
            assert_eq!(t, case.ints[..n], "{what}: texture read of texel {i}");
        }
    } else {
        let got = k
            .fetch_float(bridge.stream(), &tex, &lvl, geometry)
            .unwrap();
        for (i, t) in got.iter().enumerate() {
            for ch in 0..n {
                assert!(
                    (t[ch] - case.floats[ch]).abs() <= 1e-6,
                    "{what}: texture read of texel {i}: {:?}, want {:?}",
                    &t[..n],
                    &case.floats[..n]
                );
            }
        }
    }
}

#[test]
fn every_format_round_trips_between_cuda_and_vulkan() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("every_format_round_trips_between_cuda_and_vulkan") else {
        return;
    };
    let k = ImageKernels::load(bridge.cuda()).unwrap();
    let stream = bridge.stream().clone();
    let (w, h) = (37u32, 19u32);
    let texels = u64::from(w * h);
    let mut without_storage = Vec::new();
    for f in FORMATS {
        let name = format!("{:?}", f.format);
        let mut image = match bridge.create_image(&desc(ImageKind::D2, f.format, w, h, 1, ALL_CUDA))
        {
            Ok(i) => i,
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                // No STORAGE for this format here: the copies and textures still must work.
                eprintln!("{name}: no STORAGE usage ({e})");
                without_storage.push(name.clone());
                let usage = TRANSFER | vk::ImageUsageFlags::SAMPLED;
                bridge
                    .create_image(&desc(ImageKind::D2, f.format, w, h, 1, usage))
                    .unwrap_or_else(|e| panic!("{name} cannot be shared even without STORAGE: {e}"))
            }
            Err(e) => panic!("{name}: {e}"),
        };
        let tb = f.texel_bytes();
        let storage = image.desc().usage.contains(vk::ImageUsageFlags::STORAGE);
        assert_eq!(
            image.cuda_desc().flags.contains(ArrayFlags::SURFACE_LDST),
            storage
        );
        // CUDA writes (surface kernel, then copy), Vulkan reads.
        if storage {
            let surf = image.surface(0).unwrap();
            k.write_pattern(&stream, &surf, Geometry::D2, 1).unwrap();
            stream.synchronize().unwrap();
            assert_bytes(
                &vulkan_read(&bridge, &image, 0),
                &pattern_bytes(texels, tb, 1),
                tb,
                &format!("{name}: surface write -> Vulkan"),
            );
        }
        image.cuda_upload(0, &pattern_bytes(texels, tb, 2)).unwrap();
        assert_bytes(
            &vulkan_read(&bridge, &image, 0),
            &pattern_bytes(texels, tb, 2),
            tb,
            &format!("{name}: CUDA copy -> Vulkan"),
        );
        // Vulkan writes (copy), CUDA reads (surface kernel, then copy).
        vulkan_write(&bridge, &mut image, 0, &pattern_bytes(texels, tb, 3));
        if storage {
            let surf = image.surface(0).unwrap();
            let got = k.read_surface(&stream, &surf, Geometry::D2).unwrap();
            assert_bytes(
                &got,
                &pattern_bytes(texels, tb, 3),
                tb,
                &format!("{name}: Vulkan copy -> surface read"),
            );
        }
        assert_bytes(
            &image.cuda_download(0).unwrap(),
            &pattern_bytes(texels, tb, 3),
            tb,
            &format!("{name}: Vulkan copy -> CUDA copy"),
        );
        // Vulkan clears, CUDA reads the stored bits and the values through a texture.
        let case = clear_case(f);
        bridge
            .vulkan()
            .clear_color_image(&mut image, case.value)
            .unwrap();
        let want: Vec<u8> = (0..texels).flat_map(|_| case.texel.clone()).collect();
        assert_bytes(
            &image.cuda_download(0).unwrap(),
            &want,
            tb,
            &format!("{name}: Vulkan clear -> CUDA copy"),
        );
        check_texture_reads(
            &k,
            &bridge,
            &image,
            0,
            &case,
            &format!("{name}: Vulkan clear -> texture"),
        );
        eprintln!(
            "{name}: exact both ways{}",
            if storage {
                " (surfaces, copies, clear, texture)"
            } else {
                " (copies, clear, texture; no STORAGE)"
            }
        );
    }
    eprintln!(
        "{} formats; without STORAGE: {without_storage:?}",
        FORMATS.len()
    );
    common::assert_clean(bridge.vulkan());
}

#[test]
fn levels_layers_3d_and_cube_images_round_trip() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("levels_layers_3d_and_cube_images_round_trip") else {
        return;
    };
    let k = ImageKernels::load(bridge.cuda()).unwrap();
    let stream = bridge.stream().clone();
    let cases = [
        desc(
            ImageKind::D2Array { layers: 4 },
            vk::Format::R8G8B8A8_UNORM,
            64,
            32,
            1,
            ALL_CUDA,
        ),
        desc(
            ImageKind::D3 { depth: 8 },
            vk::Format::R32_SFLOAT,
            16,
            16,
            3,
            ALL_CUDA,
        ),
        desc(
            ImageKind::Cube,
            vk::Format::R16G16B16A16_SFLOAT,
            32,
            32,
            1,
            ALL_CUDA,
        ),
        desc(ImageKind::D2, vk::Format::R16G16_UINT, 40, 24, 4, ALL_CUDA),
        ImageDesc {
            dedicated: Dedicated::Always,
            ..desc(
                ImageKind::D2Array { layers: 2 },
                vk::Format::R32G32_SFLOAT,
                20,
                20,
                1,
                ALL_CUDA,
            )
        },
    ];
    for d in cases {
        let what = format!(
            "{:?} {:?} {}x{}",
            d.kind, d.format, d.extent.width, d.extent.height
        );
        let mut image = bridge.create_image(&d).unwrap();
        let geometry = Geometry::of(d.kind);
        let tb = texel_bytes(&image);
        eprintln!("{what}: {:?}", image.cuda_desc());
        for level in 0..d.mip_levels {
            let surf = image.surface(level).unwrap();
            let (w, h, dd) = dims(surf.level());
            let texels = u64::from(w) * u64::from(h) * u64::from(dd);
            assert_eq!(
                texels * u64::from(tb),
                d.level_bytes(level, tb),
                "{what}: level {level} extent"
            );
            // CUDA surface writes every layer / slice of the level; Vulkan reads them all.
            k.write_pattern(&stream, &surf, geometry, 10 + level)
                .unwrap();
            stream.synchronize().unwrap();
            assert_bytes(
                &vulkan_read(&bridge, &image, level),
                &pattern_bytes(texels, tb, 10 + level),
                tb,
                &format!("{what}: level {level} CUDA -> Vulkan"),
            );
            // Vulkan writes them; CUDA reads through the surface and a copy.
            drop(surf);
            vulkan_write(
                &bridge,
                &mut image,
                level,
                &pattern_bytes(texels, tb, 50 + level),
            );
            let surf = image.surface(level).unwrap();
            assert_bytes(
                &k.read_surface(&stream, &surf, geometry).unwrap(),
                &pattern_bytes(texels, tb, 50 + level),
                tb,
                &format!("{what}: level {level} Vulkan -> surface"),
            );
            assert_bytes(
                &image.cuda_download(level).unwrap(),
                &pattern_bytes(texels, tb, 50 + level),
                tb,
                &format!("{what}: level {level} Vulkan -> CUDA copy"),
            );
            // Integer textures read the same bits (float patterns may hold NaNs: not compared).
            if d.kind != ImageKind::Cube && d.format == vk::Format::R8G8B8A8_UNORM {
                let tex = image
                    .texture(&TextureOptions {
                        levels: TextureLevels::One(level),
                        read: TextureRead::RawIntegers,
                        ..TextureOptions::default()
                    })
                    .unwrap();
                let got = k
                    .fetch_int(&stream, &tex, surf.level(), geometry, false)
                    .unwrap();
                let bytes: Vec<u8> = got.iter().flat_map(|t| t.map(|c| c as u8)).collect();
                assert_bytes(
                    &bytes,
                    &pattern_bytes(texels, tb, 50 + level),
                    tb,
                    &format!("{what}: level {level} Vulkan -> texture"),
                );
            }
        }
        eprintln!("{what}: every level and layer exact both ways");
    }
    common::assert_clean(bridge.vulkan());
}

#[test]
fn a_mip_chain_texture_samples_each_level() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("a_mip_chain_texture_samples_each_level") else {
        return;
    };
    let k = ImageKernels::load(bridge.cuda()).unwrap();
    let levels = 5;
    let d = desc(
        ImageKind::D2,
        vk::Format::R8G8B8A8_UNORM,
        64,
        32,
        levels,
        TRANSFER | vk::ImageUsageFlags::SAMPLED,
    );
    let mut image = bridge.create_image(&d).unwrap();
    let value = |level: u32| {
        [
            10 + 60 * level as u8,
            255 - 50 * level as u8,
            20 * level as u8,
            255,
        ]
    };
    for level in 0..levels {
        let (w, h, _) = d.level_extent(level);
        let data: Vec<u8> = (0..w * h).flat_map(|_| value(level)).collect();
        vulkan_write(&bridge, &mut image, level, &data);
    }
    let tex = image
        .texture(&TextureOptions {
            levels: TextureLevels::All {
                filter: FilterMode::Point,
            },
            normalized_coordinates: true,
            ..TextureOptions::default()
        })
        .unwrap();
    for level in 0..levels {
        let (w, h, _) = d.level_extent(level);
        let got = k
            .fetch_lod(bridge.stream(), &tex, (w, h), level as f32)
            .unwrap();
        let want = value(level).map(|b| f32::from(b) / 255.0);
        for (i, t) in got.iter().enumerate() {
            assert!(
                t.iter().zip(&want).all(|(g, w)| (g - w).abs() <= 1e-6),
                "level {level}, texel {i}: {t:?}, want {want:?}"
            );
        }
    }
    eprintln!("a texture over {levels} levels sampled each level exactly");
    common::assert_clean(bridge.vulkan());
}

#[test]
fn an_image_rendered_as_a_colour_attachment_is_read_exactly_by_cuda() {
    let _serial = common::serial();
    let Some(bridge) =
        common::bridge("an_image_rendered_as_a_colour_attachment_is_read_exactly_by_cuda")
    else {
        return;
    };
    let k = ImageKernels::load(bridge.cuda()).unwrap();
    let (w, h) = (256u32, 96u32);
    let want = render::gradient_bytes(w, h);
    let attachment = vk::ImageUsageFlags::COLOR_ATTACHMENT
        | vk::ImageUsageFlags::SAMPLED
        | vk::ImageUsageFlags::TRANSFER_SRC;
    // Without STORAGE (drivers may compress a colour attachment then) and with it.
    for usage in [attachment, attachment | vk::ImageUsageFlags::STORAGE] {
        let image = bridge
            .create_image(&ImageDesc::d2(vk::Format::R8G8B8A8_UNORM, w, h, usage))
            .unwrap();
        assert!(image
            .cuda_desc()
            .flags
            .contains(ArrayFlags::COLOR_ATTACHMENT));
        render::render_gradient(bridge.vulkan(), &image, render::Release::Protocol);
        assert_bytes(
            &image.cuda_download(0).unwrap(),
            &want,
            4,
            &format!("{usage:?}: render -> CUDA copy"),
        );
        let tex = image
            .texture(&TextureOptions {
                read: TextureRead::RawIntegers,
                ..TextureOptions::default()
            })
            .unwrap();
        let level = image.level(0).unwrap();
        let got = k
            .fetch_int(bridge.stream(), &tex, &level, Geometry::D2, false)
            .unwrap();
        let bytes: Vec<u8> = got.iter().flat_map(|t| t.map(|c| c as u8)).collect();
        assert_bytes(
            &bytes,
            &want,
            4,
            &format!("{usage:?}: render -> CUDA texture"),
        );
        if usage.contains(vk::ImageUsageFlags::STORAGE) {
            let surf = image.surface(0).unwrap();
            assert_bytes(
                &k.read_surface(bridge.stream(), &surf, Geometry::D2)
                    .unwrap(),
                &want,
                4,
                &format!("{usage:?}: render -> CUDA surface"),
            );
        }
        // Vulkan's own copy agrees (the protocol state is intact after CUDA's reads).
        assert_bytes(
            &vulkan_read(&bridge, &image, 0),
            &want,
            4,
            &format!("{usage:?}: render -> Vulkan copy"),
        );
        eprintln!("{usage:?}: {w}x{h} render read exactly by CUDA (copy, texture)");
    }
    // MEASURE, not asserted: the classic mistake, releasing without the transition to GENERAL.
    let image = bridge
        .create_image(&ImageDesc::d2(vk::Format::R8G8B8A8_UNORM, w, h, attachment))
        .unwrap();
    render::render_gradient(bridge.vulkan(), &image, render::Release::WithoutTransition);
    let got = image.cuda_download(0).unwrap();
    let bad = got
        .chunks(4)
        .zip(want.chunks(4))
        .filter(|(g, w)| g != w)
        .count();
    eprintln!(
        "MEASURE released in COLOR_ATTACHMENT_OPTIMAL (no transition): {bad} of {} texels differ from the render",
        w * h
    );
    drop(image);
    common::assert_clean(bridge.vulkan());
}

#[test]
fn the_frame_pacer_hands_images_between_cuda_and_vulkan() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("the_frame_pacer_hands_images_between_cuda_and_vulkan")
    else {
        return;
    };
    let k = ImageKernels::load(bridge.cuda()).unwrap();
    let ctx = bridge.vulkan();
    let dev = ctx.device();
    let stream = bridge.cuda().new_stream().unwrap();
    let frames_in_flight = 2u32;
    let mut pacer = FramePacer::new(&bridge, frames_in_flight).unwrap();
    let (w, h) = (64u32, 48u32);
    let bytes = u64::from(w * h * 4);
    let usage = vk::ImageUsageFlags::STORAGE | vk::ImageUsageFlags::TRANSFER_SRC;
    let images: Vec<SharedImage> = (0..frames_in_flight)
        .map(|_| {
            bridge
                .create_image(&ImageDesc::d2(vk::Format::R8G8B8A8_UINT, w, h, usage))
                .unwrap()
        })
        .collect();
    let surfaces: Vec<_> = images.iter().map(|i| i.surface(0).unwrap()).collect();
    let hosts: Vec<HostBuffer> = (0..frames_in_flight)
        .map(|_| HostBuffer::new(ctx, bytes, vk::BufferUsageFlags::empty()).unwrap())
        .collect();
    let slots = cuvk_dev::CommandSlots::new(ctx, pacer.command_slots()).unwrap();
    let layout = vk::ImageLayout::TRANSFER_SRC_OPTIMAL;
    for _ in 0..12 {
        let frame = pacer.begin_frame().unwrap();
        let (image, host) = (&images[frame.slot()], &hosts[frame.slot()]);
        // CUDA waits (on the GPU) for Vulkan to release the slot, writes, signals.
        pacer.cuda_acquire(&frame, &stream).unwrap();
        k.write_pattern(
            &stream,
            &surfaces[frame.slot()],
            Geometry::D2,
            frame.number() as u32,
        )
        .unwrap();
        pacer.cuda_release(&frame, &stream).unwrap();
        // Vulkan acquires the image, copies it out, releases it; no host wait in between.
        // SAFETY: begin_frame freed the command slot; everything recorded lives until the
        // host wait below.
        unsafe {
            let cmd = slots.begin(frame.command_slot()).unwrap();
            let pair: [(&dyn AsVkImage, vk::ImageLayout); 1] = [(image, layout)];
            pacer.record_image_acquire_from_cuda(
                cmd,
                &pair,
                vk::PipelineStageFlags::TRANSFER,
                vk::AccessFlags::TRANSFER_READ,
            );
            let copy = vk::BufferImageCopy {
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
            dev.cmd_copy_image_to_buffer(cmd, image.vk_image(), layout, host.vk_buffer(), &[copy]);
            pacer.record_image_release_to_cuda(
                cmd,
                &pair,
                vk::PipelineStageFlags::TRANSFER,
                vk::AccessFlags::empty(),
            );
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
            dev.end_command_buffer(cmd).unwrap();
            pacer
                .vulkan_submit(
                    &frame,
                    &cuvk::FrameSubmit::new(&[cmd], vk::PipelineStageFlags::TRANSFER),
                )
                .unwrap();
        }
        pacer
            .frames_complete()
            .wait_host(frame.number(), Duration::from_secs(10))
            .unwrap();
        let got: Vec<u8> = host.read().unwrap();
        assert_bytes(
            &got,
            &pattern_bytes(u64::from(w * h), 4, frame.number() as u32),
            4,
            &format!("frame {} (slot {})", frame.number(), frame.slot()),
        );
    }
    pacer.wait_idle(Duration::from_secs(10)).unwrap();
    stream.synchronize().unwrap();
    eprintln!("12 frames, {frames_in_flight} images: Vulkan read exactly what CUDA wrote, ordered by the pacer");
    drop(surfaces);
    common::assert_clean(ctx);
}

#[test]
fn bad_inputs_each_refused_then_next_call_works() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("bad_inputs_each_refused_then_next_call_works") else {
        return;
    };
    let good = desc(
        ImageKind::D2,
        vk::Format::R8G8B8A8_UNORM,
        64,
        32,
        2,
        TRANSFER | vk::ImageUsageFlags::SAMPLED,
    );
    let keep = bridge.create_image(&good).unwrap();
    // An image of another device (before the descriptor count: a new VkDevice opens driver
    // files that may stay open).
    let other = common::vulkan("another device").unwrap();
    assert_err!(
        bridge.share_image(BoundImage::new(&other, &good, ImageOptions::EXPORT).unwrap()),
        Error::WrongDevice {
            object: cuvk::DeviceObject::Image,
            owner: cuvk::DeviceOwner::VulkanDevice
        }
    );
    drop(other);
    let _warm = common::warm_up(bridge.vulkan());
    let fds = common::fds();
    let free = cuda_free();

    // Creation: format, extent, levels, shape; nothing is created.
    for format in [
        vk::Format::R8G8B8A8_SRGB,
        vk::Format::D32_SFLOAT,
        vk::Format::BC1_RGB_UNORM_BLOCK,
        vk::Format::R32G32B32_SFLOAT,
    ] {
        let e = assert_err!(
            bridge.create_image(&ImageDesc { format, ..good }),
            Error::Image(ImageError::UnsupportedFormat { .. })
        );
        assert_eq!(e.kind(), ErrorKind::Unsupported);
    }
    assert_err!(
        bridge.create_image(&desc(ImageKind::D2, good.format, 64, 0, 1, good.usage)),
        Error::Image(ImageError::ZeroExtent { .. })
    );
    assert_err!(
        bridge.create_image(&desc(ImageKind::D2, good.format, 1 << 20, 1, 1, good.usage)),
        Error::Image(ImageError::OverLimit { .. })
    );
    assert_err!(
        bridge.create_image(&desc(ImageKind::D2, good.format, 64, 32, 9, good.usage)),
        Error::Image(ImageError::MipLevels { .. })
    );
    assert_err!(
        bridge.create_image(&desc(ImageKind::Cube, good.format, 64, 32, 1, good.usage)),
        Error::Image(ImageError::CubeNotSquare { .. })
    );
    assert_err!(
        bridge.create_image(&desc(
            ImageKind::D3 { depth: 0 },
            good.format,
            4,
            4,
            1,
            good.usage
        )),
        Error::Image(ImageError::ZeroExtent { .. })
    );

    // Sharing an image the caller made: LINEAR, not exportable, memory not exportable, a
    // descriptor that does not match.
    let ctx = bridge.vulkan();
    let linear = ImageOptions {
        tiling: vk::ImageTiling::LINEAR,
        external: ExternalUse::None,
    };
    let one_level = ImageDesc {
        mip_levels: 1,
        ..good
    };
    assert_err!(
        bridge.share_image(BoundImage::new(ctx, &one_level, linear).unwrap()),
        Error::Image(ImageError::LinearTiling)
    );
    assert_err!(
        bridge.share_image(BoundImage::new(ctx, &good, ImageOptions::LOCAL).unwrap()),
        Error::Memory(cuvk::MemoryError::NotExportable {
            what: cuvk::Exportable::Image
        })
    );
    let image = Image::new(ctx, &good, ImageOptions::EXPORT).unwrap();
    let r = image.requirements();
    if !r.requires_dedicated {
        let plain = DeviceMemory::allocate(
            ctx,
            AllocateInfo {
                size: r.size,
                memory_type_bits: r.memory_type_bits,
                properties: vk::MemoryPropertyFlags::DEVICE_LOCAL,
                exportable: false,
            },
            None,
        )
        .unwrap();
        assert_err!(
            bridge.share_image(image.bind(std::sync::Arc::new(plain), 0).unwrap()),
            Error::Memory(cuvk::MemoryError::NotExportable {
                what: cuvk::Exportable::Memory
            })
        );
    }
    let implied = good.cuda_array_desc().unwrap();
    let wrong = ArrayDesc {
        flags: ArrayFlags::SURFACE_LDST,
        ..implied
    };
    assert_err!(
        bridge.share_image_with_descriptor(
            BoundImage::new(ctx, &good, ImageOptions::EXPORT).unwrap(),
            &wrong
        ),
        Error::Image(ImageError::DescriptorMismatch { field: "Flags", .. })
    );

    // CUDA objects: a surface without STORAGE, levels out of range, texture rules, host sizes.
    let e = assert_err!(
        keep.surface(0),
        Error::Image(ImageError::MissingUsage { .. })
    );
    assert!(e.to_string().contains("STORAGE"), "{e}");
    assert_err!(
        keep.mipmapped_array().level(0).unwrap().surface(),
        Error::Image(ImageError::NoSurfaceFlag)
    );
    assert_err!(
        keep.level(2),
        Error::Image(ImageError::LevelOutOfRange {
            level: 2,
            levels: 2
        })
    );
    assert_err!(
        keep.texture(&TextureOptions {
            levels: TextureLevels::One(7),
            ..Default::default()
        }),
        Error::Image(ImageError::LevelOutOfRange { level: 7, .. })
    );
    assert_err!(
        keep.texture(&TextureOptions {
            levels: TextureLevels::All {
                filter: FilterMode::Linear
            },
            ..Default::default()
        }),
        Error::Image(ImageError::Texture(
            TextureRule::MipChainNeedsNormalizedCoordinates
        ))
    );
    assert_err!(
        keep.texture(&TextureOptions {
            address_mode: AddressMode::Wrap,
            ..Default::default()
        }),
        Error::Image(ImageError::Texture(
            TextureRule::WrapNeedsNormalizedCoordinates
        ))
    );
    assert_err!(
        keep.texture(&TextureOptions {
            read: TextureRead::RawIntegers,
            filter: FilterMode::Linear,
            ..Default::default()
        }),
        Error::Image(ImageError::Texture(
            TextureRule::LinearFilterNeedsFloatReads
        ))
    );
    let uint = bridge
        .create_image(&desc(
            ImageKind::D2,
            vk::Format::R32_UINT,
            8,
            8,
            1,
            good.usage,
        ))
        .unwrap();
    assert_err!(
        uint.texture(&TextureOptions {
            filter: FilterMode::Linear,
            ..Default::default()
        }),
        Error::Image(ImageError::Texture(
            TextureRule::LinearFilterNeedsFloatReads
        ))
    );
    assert_err!(
        uint.texture(&TextureOptions {
            read: TextureRead::RawIntegers,
            ..Default::default()
        }),
        Error::Image(ImageError::Texture(
            TextureRule::RawReadsNeedNormalizedFormat
        ))
    );
    assert_err!(
        uint.level(0).unwrap().texture(&TextureDesc {
            read_as_integer: false,
            ..Default::default()
        }),
        Error::Image(ImageError::Texture(
            TextureRule::NormalizedReadsNeedNarrowIntegers
        ))
    );
    drop(uint);
    assert_err!(
        keep.cuda_download(2),
        Error::Image(ImageError::LevelOutOfRange { .. })
    );
    let mut keep = keep;
    assert_err!(
        keep.cuda_upload(0, &[0u8; 16]),
        Error::Image(ImageError::HostSize {
            expected: 8192,
            given: 16
        })
    );

    // Nothing leaked, and the next valid calls work.
    let data = pattern_bytes(64 * 32, 4, 77);
    keep.cuda_upload(0, &data).unwrap();
    assert_bytes(
        &vulkan_read(&bridge, &keep, 0),
        &data,
        4,
        "after the refusals",
    );
    let checked = bridge
        .share_image_with_descriptor(
            BoundImage::new(ctx, &good, ImageOptions::EXPORT).unwrap(),
            &implied,
        )
        .unwrap();
    drop(checked);
    common::assert_fds(fds, "descriptors leaked");
    assert!(
        cuda_free() >= free,
        "CUDA memory leaked: {free} -> {}",
        cuda_free()
    );
    common::assert_clean(bridge.vulkan());
}

/// 1,000 create/export/import/map/level/surface/texture/drop cycles: descriptors and CUDA free
/// memory return to where they started.
#[test]
fn a_thousand_image_cycles_leak_nothing() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("a_thousand_image_cycles_leak_nothing") else {
        return;
    };
    let d = desc(
        ImageKind::D2,
        vk::Format::R8G8B8A8_UNORM,
        256,
        256,
        3,
        ALL_CUDA,
    );
    let cycle = || {
        let image = bridge.create_image(&d).unwrap();
        let surface = image.surface(0).unwrap();
        let texture = image
            .texture(&TextureOptions {
                levels: TextureLevels::All {
                    filter: FilterMode::Linear,
                },
                normalized_coordinates: true,
                filter: FilterMode::Linear,
                ..TextureOptions::default()
            })
            .unwrap();
        let level = image.level(2).unwrap();
        (image, surface, texture, level)
    };
    for _ in 0..20 {
        drop(cycle());
    }
    let _warm = common::warm_up(bridge.vulkan());
    let fds = common::fds();
    let free = cuda_free();
    let t = std::time::Instant::now();
    for i in 0..1000 {
        let (image, surface, texture, level) = cycle();
        if i % 100 == 0 {
            assert_eq!(
                common::fds(),
                fds,
                "descriptor held by a live image at cycle {i}"
            );
        }
        // Any drop order is safe: the CUDA objects keep the array and the memory alive.
        match i % 3 {
            0 => drop((image, surface, texture, level)),
            1 => drop((level, texture, surface, image)),
            _ => {
                drop(image);
                drop((surface, level));
                drop(texture);
            }
        }
    }
    let (fds_after, free_after) = (common::fds(), cuda_free());
    eprintln!(
        "1000 image cycles in {:.2?}: fds {fds} -> {fds_after}, CUDA free {} -> {} MiB",
        t.elapsed(),
        free >> 20,
        free_after >> 20
    );
    assert_eq!(fds_after, fds, "descriptors leaked");
    assert!(
        free_after >= free,
        "CUDA free memory fell from {free} to {free_after}"
    );
    common::assert_clean(bridge.vulkan());
}

/// Layered images (arrays, cubes) shared with CUDA: with one mip level every layer Vulkan
/// reads back is where CUDA wrote it; with more, the API refuses (`LayeredMipChain`). The
/// measurement behind that rule (driver 580, before the rule existed): with 2 or 3 levels only
/// layer 0 of each level matched, for 4-layer arrays and cubes alike.
#[test]
fn layered_images_share_one_mip_level_and_refuse_chains() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("layered_images_share_one_mip_level") else {
        return;
    };
    let k = ImageKernels::load(bridge.cuda()).unwrap();
    let stream = bridge.stream().clone();
    for kind in [ImageKind::D2Array { layers: 4 }, ImageKind::Cube] {
        let (w, h) = if kind == ImageKind::Cube {
            (32, 32)
        } else {
            (64, 32)
        };
        let d = desc(kind, vk::Format::R8G8B8A8_UNORM, w, h, 1, ALL_CUDA);
        let image = bridge.create_image(&d).unwrap();
        let surf = image.surface(0).unwrap();
        let (lw, lh, layers) = dims(surf.level());
        k.write_pattern(&stream, &surf, Geometry::of(kind), 10)
            .unwrap();
        stream.synchronize().unwrap();
        let got = vulkan_read(&bridge, &image, 0);
        let want = pattern_bytes(u64::from(lw * lh * layers), 4, 10);
        assert_bytes(&got, &want, 4, &format!("{kind:?}: every layer"));
        for mips in [2, 3] {
            let chain = desc(kind, vk::Format::R8G8B8A8_UNORM, w, h, mips, ALL_CUDA);
            let e = assert_err!(
                bridge.create_image(&chain),
                Error::Image(ImageError::LayeredMipChain { .. })
            );
            assert!(e.to_string().contains("layer 0"), "{e}");
        }
    }
    common::assert_clean(bridge.vulkan());
}
