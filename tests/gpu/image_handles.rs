//! Images in CUDA kernels inside Vulkan queues (`VK_NVX_image_view_handle` +
//! `VK_NVX_binary_import`) on a real GPU, with no CUDA context in the loop: the kernels of
//! `shaders/images.cu` (PTX `sust` / `suld` / `tex`, which take the handle as a 64-bit
//! parameter), compiled with NVRTC and loaded into the Vulkan device, write every table format
//! through surface handles and a Vulkan copy reads them exactly; Vulkan fills images and texture
//! handles read them (unnormalized and normalized coordinates, integer and float reads);
//! levels, layers of one-level arrays and cubes, 3D images; the barrier between kernel and copy
//! removed (negative control); images dropped while a handle lives; launches checked; engines'
//! views; an engine's device detected from its enabled list.
//!
//! Skips with a printed reason where there is no GPU or no NVX extensions; REQUIRE_GPU=1 makes
//! "no GPU" a failure, and on an NVIDIA device also "no image handles".

use cuvk_dev::assert_err;
use cuvk_dev::image_kernels::{self, pattern_bytes, Geometry};
use cuvk_dev::testing as common;

use std::sync::Arc;

use cuvk::ash::vk;
use cuvk::vulkan::{
    cmd_acquire_images, cmd_release_images, image_handles_supported, record_kernel_barrier,
    AsVkBuffer, AsVkImage, BoundImage, CuFunction, CuModule, DeviceChoice, ExistingVulkan,
    HostBuffer, ImageOptions, ImageRegion, InlineImageHandle, InlineImageKind, InlineLevels,
    InlineTextureDesc, KernelArg, LaunchDims, RawViewDescriptor, Validation, ViewLayers,
    VulkanConfig, VulkanContext,
};
use cuvk::{
    Bridge, BufferUsage, Capability, Dedicated, Error, ErrorKind, FormatInfo, ImageDesc, ImageKind,
    InlineKernelsMissing, LaunchError, NumericClass, SharedBuffer, FORMATS, MEMORY_EXTENSION,
};

const TRANSFER: vk::ImageUsageFlags = vk::ImageUsageFlags::from_raw(
    vk::ImageUsageFlags::TRANSFER_SRC.as_raw() | vk::ImageUsageFlags::TRANSFER_DST.as_raw(),
);
const ALL: vk::ImageUsageFlags = vk::ImageUsageFlags::from_raw(
    TRANSFER.as_raw()
        | vk::ImageUsageFlags::STORAGE.as_raw()
        | vk::ImageUsageFlags::SAMPLED.as_raw(),
);

fn desc(
    kind: ImageKind,
    format: vk::Format,
    (w, h): (u32, u32),
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

/// The kernels of images.cu, loaded into the bridge's Vulkan device.
struct Kernels {
    write: CuFunction,
    read: CuFunction,
    fetch_float: CuFunction,
    fetch_int: CuFunction,
    fetch_lod: CuFunction,
    _module: Arc<CuModule>,
}

/// The bridge and the kernels, or `None` (printed) where the device cannot take image handles.
fn setup(test: &str) -> Option<(Bridge, Kernels)> {
    let bridge = common::bridge(test)?;
    if let Err(e) = image_handles_supported(bridge.vulkan()) {
        let nvidia = bridge.vulkan().info().vendor_id == 0x10de;
        if nvidia && std::env::var("REQUIRE_GPU").as_deref() == Ok("1") {
            panic!("{test}: REQUIRE_GPU=1 on an NVIDIA device without image handles: {e}");
        }
        assert!(e.is_unavailable(), "{test}: {e}");
        eprintln!("SKIP {test}: {e}");
        return None;
    }
    let ptx = cuvk::cuda::compile_ptx(bridge.cuda(), "images.cu", image_kernels::SOURCE).unwrap();
    let module = CuModule::from_ptx(bridge.vulkan(), &ptx).unwrap();
    let k = Kernels {
        write: module.function("surface_write_pattern").unwrap(),
        read: module.function("surface_read").unwrap(),
        fetch_float: module.function("texture_fetch_float").unwrap(),
        fetch_int: module.function("texture_fetch_int").unwrap(),
        fetch_lod: module.function("texture_fetch_lod").unwrap(),
        _module: module,
    };
    Some((bridge, k))
}

/// A grid-stride launch over `n` items (as image_kernels.rs launches them).
fn dims(n: u64) -> LaunchDims {
    LaunchDims::linear(n.div_ceil(256).clamp(1, 4096) as u32, 256)
}

/// How the kernels address a view of `kind` with `layers`, at mip level `level`: the
/// geometry and the width, height and layers-or-slices.
fn view_dims(d: &ImageDesc, level: u32, layers: ViewLayers) -> (Geometry, (u32, u32, u32)) {
    let (w, h, depth) = d.level_extent(level);
    match (d.kind, layers) {
        (ImageKind::D2, _) => (Geometry::D2, (w, h, 1)),
        (ImageKind::D3 { .. }, _) => (Geometry::D3, (w, h, depth)),
        (_, ViewLayers::All) => (Geometry::Layered, (w, h, d.kind.layers())),
        (_, ViewLayers::One(_)) => (Geometry::D2, (w, h, 1)),
    }
}

fn texel_count((w, h, d): (u32, u32, u32)) -> u64 {
    u64::from(w) * u64::from(h) * u64::from(d)
}

/// One launch: the function and its arguments, over `n` items.
struct Launch<'a> {
    f: &'a CuFunction,
    n: u64,
    args: Vec<KernelArg>,
}

/// One command buffer: `images` acquired (GENERAL, for kernels and transfers), the launches
/// each followed by the kernel barrier (unless `barrier` is false), `after` (e.g. a copy), the
/// images released; submitted and waited for.
fn run(
    bridge: &Bridge,
    images: &[&dyn AsVkImage],
    launches: &[Launch<'_>],
    barrier: bool,
    after: impl FnOnce(&cuvk::ash::Device, vk::CommandBuffer),
) {
    let ctx = bridge.vulkan();
    let family = ctx.queue_family_index();
    let general: Vec<(&dyn AsVkImage, vk::ImageLayout)> = images
        .iter()
        .map(|&i| (i, vk::ImageLayout::GENERAL))
        .collect();
    let stages = vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER;
    // SAFETY: every image, buffer and handle the launches use outlives this synchronous
    // submission; the images are in the protocol's state between uses (acquired and released
    // here); the kernels use each handle as what it is, within its view.
    unsafe {
        ctx.submit_and_wait(|dev, cmd| {
            cmd_acquire_images(
                dev,
                cmd,
                family,
                &general,
                stages,
                vk::AccessFlags::SHADER_READ
                    | vk::AccessFlags::SHADER_WRITE
                    | vk::AccessFlags::TRANSFER_READ,
            );
            for l in launches {
                l.f.record_launch(cmd, &dims(l.n), &l.args).unwrap();
                if barrier {
                    record_kernel_barrier(ctx, cmd);
                }
            }
            after(dev, cmd);
            cmd_release_images(
                dev,
                cmd,
                family,
                &general,
                stages,
                vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE,
            );
        })
    }
    .unwrap();
}

fn addr<T: bytemuck::Pod>(b: &SharedBuffer<T>) -> KernelArg {
    KernelArg::address(
        b.device_address()
            .expect("shared buffers have device addresses"),
    )
}

/// A buffer of at least `bytes` bytes the kernels write.
fn out_buffer(bridge: &Bridge, bytes: u64) -> SharedBuffer<u32> {
    bridge
        .create_buffer(
            bytes.div_ceil(4).max(1) as usize,
            BufferUsage::STORAGE_BUFFER,
        )
        .unwrap()
}

/// The buffer's words, read by a Vulkan copy.
fn read_words(bridge: &Bridge, b: &SharedBuffer<u32>) -> Vec<u32> {
    common::read_via_vulkan(bridge.vulkan(), b)
}

/// `surface_write_pattern` through `surface` (a view of `d` at `level` with `layers`).
fn write_launch<'a>(
    k: &'a Kernels,
    surface: &InlineImageHandle,
    d: &ImageDesc,
    level: u32,
    layers: ViewLayers,
    seed: u32,
) -> Launch<'a> {
    let (geometry, (w, h, depth)) = view_dims(d, level, layers);
    let tb = image_format(d).texel_bytes();
    Launch {
        f: &k.write,
        n: texel_count((w, h, depth)),
        args: vec![
            surface.kernel_arg(),
            KernelArg::value(&(geometry as i32)),
            KernelArg::value(&w),
            KernelArg::value(&h),
            KernelArg::value(&depth),
            KernelArg::value(&tb),
            KernelArg::value(&seed),
        ],
    }
}

/// `surface_read` through `surface` into `out`.
fn read_launch<'a>(
    k: &'a Kernels,
    surface: &InlineImageHandle,
    d: &ImageDesc,
    level: u32,
    layers: ViewLayers,
    out: &SharedBuffer<u32>,
) -> Launch<'a> {
    let (geometry, (w, h, depth)) = view_dims(d, level, layers);
    let tb = image_format(d).texel_bytes();
    Launch {
        f: &k.read,
        n: texel_count((w, h, depth)),
        args: vec![
            surface.kernel_arg(),
            KernelArg::value(&(geometry as i32)),
            KernelArg::value(&w),
            KernelArg::value(&h),
            KernelArg::value(&depth),
            KernelArg::value(&tb),
            addr(out),
        ],
    }
}

/// `texture_fetch_float` or `texture_fetch_int` (by the format's class) through `texture` into
/// `out` (one 16-byte texel per texel of the view).
fn fetch_launch<'a>(
    k: &'a Kernels,
    texture: &InlineImageHandle,
    d: &ImageDesc,
    level: u32,
    layers: ViewLayers,
    out: &SharedBuffer<u32>,
) -> Launch<'a> {
    let (geometry, (w, h, depth)) = view_dims(d, level, layers);
    let f = image_format(d);
    let mut args = vec![
        texture.kernel_arg(),
        KernelArg::value(&(geometry as i32)),
        KernelArg::value(&w),
        KernelArg::value(&h),
        KernelArg::value(&depth),
    ];
    let function = if f.class.reads_as_integer() {
        args.push(KernelArg::value(&i32::from(f.class == NumericClass::Sint)));
        &k.fetch_int
    } else {
        &k.fetch_float
    };
    args.push(addr(out));
    Launch {
        f: function,
        n: texel_count((w, h, depth)),
        args,
    }
}

fn image_format(d: &ImageDesc) -> FormatInfo {
    cuvk::format_info(d.format).unwrap()
}

/// `region` of `image`, copied to the host by Vulkan.
fn vulkan_read(bridge: &Bridge, image: &dyn AsVkImage, region: ImageRegion) -> Vec<u8> {
    let d = image.vk_image_desc();
    let (w, h, depth) = d.level_extent(region.level);
    let bytes = texel_count((w, h, depth))
        * u64::from(region.layers)
        * u64::from(image_format(d).texel_bytes());
    let mut down = HostBuffer::new(bridge.vulkan(), bytes, vk::BufferUsageFlags::empty()).unwrap();
    bridge
        .vulkan()
        .copy_image_to_buffer(image, region, &mut down, 0)
        .unwrap();
    down.read().unwrap()
}

/// Copies `data` into `region` of `image` with Vulkan.
fn vulkan_write(bridge: &Bridge, image: &mut dyn AsVkImage, region: ImageRegion, data: &[u8]) {
    let mut up = HostBuffer::new(
        bridge.vulkan(),
        data.len() as u64,
        vk::BufferUsageFlags::empty(),
    )
    .unwrap();
    up.write(data).unwrap();
    bridge
        .vulkan()
        .copy_buffer_to_image(&up, 0, image, region)
        .unwrap();
}

fn assert_bytes(got: &[u8], want: &[u8], texel: u32, what: &str) {
    assert!(
        got.len() >= want.len(),
        "{what}: {} < {} bytes",
        got.len(),
        want.len()
    );
    let got = &got[..want.len()];
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        let t = i / texel as usize * texel as usize;
        let bad = got
            .chunks(texel as usize)
            .zip(want.chunks(texel as usize))
            .filter(|(g, w)| g != w)
            .count();
        panic!(
            "{what}: {bad} of {} texels differ; first, texel {}: got {:?}, want {:?}",
            want.len() / texel as usize,
            i / texel as usize,
            &got[t..t + texel as usize],
            &want[t..t + texel as usize]
        );
    }
}

fn words_as_bytes(words: &[u32]) -> Vec<u8> {
    bytemuck::cast_slice(words).to_vec()
}

/// A clear value every format stores exactly, and what a texture handle then reads per
/// component (as tests/gpu/image.rs: UNORM (c+1)/15, SNORM ±1 and 0, UINT (c+1)·37, SINT
/// −(c+1)·13, SFLOAT 1.5, −2.25, 0.125, 3). A Vulkan sampler returns components in R, G, B, A
/// order whatever the memory order (`B8G8R8A8`: `.x` is red), unlike a CUDA-context texture of
/// the same image, which returns memory order.
struct ClearCase {
    value: vk::ClearColorValue,
    floats: [f32; 4],
    ints: [i64; 4],
}

fn clear_case(f: &FormatInfo) -> ClearCase {
    let comp_float = |c: usize| image_kernels::clear_float(f, c);
    let comp_int = |c: usize| image_kernels::clear_int(f, c);
    let value = image_kernels::clear_value(f);
    let (mut floats, mut ints) = ([0f32; 4], [0i64; 4]);
    for ch in 0..f.channels as usize {
        floats[ch] = comp_float(ch);
        ints[ch] = comp_int(ch);
    }
    ClearCase {
        value,
        floats,
        ints,
    }
}

/// The integers a texture of integer format `f` reads for texel bytes `texel`, per channel
/// (signed formats sign-extended).
fn texel_ints(f: &FormatInfo, texel: &[u8]) -> Vec<i64> {
    let bytes = (f.bits / 8) as usize;
    (0..f.channels as usize)
        .map(|ch| {
            let mut raw = 0u64;
            for b in 0..bytes {
                raw |= u64::from(texel[ch * bytes + b]) << (8 * b);
            }
            if f.class == NumericClass::Sint {
                let shift = 64 - f.bits;
                ((raw << shift) as i64) >> shift
            } else {
                raw as i64
            }
        })
        .collect()
}

/// Checks `got` (16-byte texels read through a texture) against `want_ints` / `want_floats`
/// per texel (first `channels` channels).
fn check_fetched(
    f: &FormatInfo,
    got: &[u32],
    texels: usize,
    want: impl Fn(usize) -> (Vec<i64>, Vec<f32>),
    what: &str,
) {
    let n = f.channels as usize;
    let mut bad = 0usize;
    let mut first = None;
    for i in 0..texels {
        let t = &got[i * 4..i * 4 + 4];
        let (wi, wf) = want(i);
        let ok = if f.class.reads_as_integer() {
            (0..n).all(|ch| {
                let v = if f.class == NumericClass::Sint {
                    i64::from(t[ch] as i32)
                } else {
                    i64::from(t[ch])
                };
                v == wi[ch]
            })
        } else {
            (0..n).all(|ch| (f32::from_bits(t[ch]) - wf[ch]).abs() <= 1e-6)
        };
        if !ok {
            bad += 1;
            first.get_or_insert((i, t.to_vec(), wi, wf));
        }
    }
    assert_eq!(
        bad, 0,
        "{what}: {bad} of {texels} texels wrong; first: {first:?}"
    );
}

#[test]
fn every_format_through_inline_surfaces_and_textures() {
    let _serial = common::serial();
    let Some((bridge, k)) = setup("every_format_through_inline_surfaces_and_textures") else {
        return;
    };
    let (w, h) = (37u32, 19u32);
    let texels = u64::from(w * h);
    let mut without_storage = Vec::new();

    for f in FORMATS {
        let name = format!("{:?}", f.format);
        let d = desc(ImageKind::D2, f.format, (w, h), 1, ALL);
        let mut image = match bridge.create_image(&d) {
            Ok(i) => i,
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                eprintln!("{name}: no STORAGE usage ({e})");
                without_storage.push(name.clone());
                let d = desc(
                    ImageKind::D2,
                    f.format,
                    (w, h),
                    1,
                    TRANSFER | vk::ImageUsageFlags::SAMPLED,
                );
                bridge
                    .create_image(&d)
                    .unwrap_or_else(|e| panic!("{name} cannot be shared even without STORAGE: {e}"))
            }
            Err(e) => panic!("{name}: {e}"),
        };
        let d = *image.desc();
        let tb = f.texel_bytes();
        let storage = d.usage.contains(vk::ImageUsageFlags::STORAGE);
        let region = ImageRegion::level(&d, 0);
        if storage {
            // The kernel writes through a surface handle, a Vulkan copy reads.
            let surface = image.inline_surface(0, ViewLayers::All).unwrap();
            assert_eq!(surface.kind(), InlineImageKind::Surface);
            assert!(surface.sampler().is_none());
            let launch = write_launch(&k, &surface, &d, 0, ViewLayers::All, 1);
            run(&bridge, &[&image], &[launch], true, |_, _| {});
            assert_bytes(
                &vulkan_read(&bridge, &image, region),
                &pattern_bytes(texels, tb, 1),
                tb,
                &format!("{name}: inline surface write -> Vulkan copy"),
            );
            // A Vulkan copy writes, the kernel reads through the surface handle.
            vulkan_write(&bridge, &mut image, region, &pattern_bytes(texels, tb, 3));
            let out = out_buffer(&bridge, texels * u64::from(tb));
            let launch = read_launch(&k, &surface, &d, 0, ViewLayers::All, &out);
            run(&bridge, &[&image], &[launch], true, |_, _| {});
            assert_bytes(
                &words_as_bytes(&read_words(&bridge, &out)),
                &pattern_bytes(texels, tb, 3),
                tb,
                &format!("{name}: Vulkan copy -> inline surface read"),
            );
        }
        // Vulkan clears, the kernel reads values through a texture handle (texel centres,
        // unnormalized coordinates, point sampling).
        let case = clear_case(f);
        bridge
            .vulkan()
            .clear_color_image(&mut image, case.value)
            .unwrap();
        let texture = image.inline_texture(&InlineTextureDesc::default()).unwrap();
        assert_eq!(texture.kind(), InlineImageKind::Texture);
        assert!(texture.sampler().is_some());
        let out = out_buffer(&bridge, texels * 16);
        let launch = fetch_launch(&k, &texture, &d, 0, ViewLayers::All, &out);
        run(&bridge, &[&image], &[launch], true, |_, _| {});
        check_fetched(
            f,
            &read_words(&bridge, &out),
            texels as usize,
            |_| (case.ints.to_vec(), case.floats.to_vec()),
            &format!("{name}: Vulkan clear -> inline texture"),
        );
        if f.class.reads_as_integer() {
            // Integers: the whole pattern, read exactly.
            let data = pattern_bytes(texels, tb, 5);
            vulkan_write(&bridge, &mut image, region, &data);
            let launch = fetch_launch(&k, &texture, &d, 0, ViewLayers::All, &out);
            run(&bridge, &[&image], &[launch], true, |_, _| {});
            check_fetched(
                f,
                &read_words(&bridge, &out),
                texels as usize,
                |i| (texel_ints(f, &data[i * tb as usize..]), vec![]),
                &format!("{name}: Vulkan copy -> inline integer texture"),
            );
        } else {
            // Floats: the same through a sampler with normalized coordinates (tex.level at
            // texel centres, level 0).
            let normalized = image
                .inline_texture(&InlineTextureDesc {
                    normalized_coordinates: true,
                    ..InlineTextureDesc::default()
                })
                .unwrap();
            let launch = Launch {
                f: &k.fetch_lod,
                n: texels,
                args: vec![
                    normalized.kernel_arg(),
                    KernelArg::value(&w),
                    KernelArg::value(&h),
                    KernelArg::value(&0.0f32),
                    addr(&out),
                ],
            };
            run(&bridge, &[&image], &[launch], true, |_, _| {});
            check_fetched(
                f,
                &read_words(&bridge, &out),
                texels as usize,
                |_| (vec![], case.floats.to_vec()),
                &format!("{name}: Vulkan clear -> inline normalized texture"),
            );
        }
        eprintln!(
            "{name}: exact through inline handles{}",
            if storage {
                " (surface write and read, texture)"
            } else {
                " (texture; no STORAGE)"
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
fn levels_layers_cubes_and_3d_images_through_inline_handles() {
    let _serial = common::serial();
    let Some((bridge, k)) = setup("levels_layers_cubes_and_3d_images_through_inline_handles")
    else {
        return;
    };
    // Each level of a mip chain through its own surface handle, then the whole chain through
    // one normalized texture handle (tex.level at each level).
    let d = desc(ImageKind::D2, vk::Format::R8G8B8A8_UNORM, (64, 32), 4, ALL);
    let mut image = bridge.create_image(&d).unwrap();
    for level in 0..4 {
        let surface = image.inline_surface(level, ViewLayers::All).unwrap();
        let seed = 10 + level;
        let launch = write_launch(&k, &surface, &d, level, ViewLayers::All, seed);
        run(&bridge, &[&image], &[launch], true, |_, _| {});
        let (w, h, _) = d.level_extent(level);
        assert_bytes(
            &vulkan_read(&bridge, &image, ImageRegion::level(&d, level)),
            &pattern_bytes(u64::from(w * h), 4, seed),
            4,
            &format!("mip level {level}: inline surface write -> Vulkan"),
        );
    }
    let chain = image
        .inline_texture(&InlineTextureDesc {
            normalized_coordinates: true,
            levels: InlineLevels::All {
                filter: cuvk::vulkan::SamplerFilter::Point,
            },
            ..InlineTextureDesc::default()
        })
        .unwrap();
    for level in 0..4 {
        let (w, h, _) = d.level_extent(level);
        let data = pattern_bytes(u64::from(w * h), 4, 20 + level);
        vulkan_write(&bridge, &mut image, ImageRegion::level(&d, level), &data);
        let out = out_buffer(&bridge, u64::from(w * h) * 16);
        let launch = Launch {
            f: &k.fetch_lod,
            n: u64::from(w * h),
            args: vec![
                chain.kernel_arg(),
                KernelArg::value(&w),
                KernelArg::value(&h),
                KernelArg::value(&(level as f32)),
                addr(&out),
            ],
        };
        run(&bridge, &[&image], &[launch], true, |_, _| {});
        check_fetched(
            image.format_info(),
            &read_words(&bridge, &out),
            (w * h) as usize,
            |i| {
                let t = &data[i * 4..i * 4 + 4];
                (vec![], t.iter().map(|&b| f32::from(b) / 255.0).collect())
            },
            &format!("mip chain texture at level {level}"),
        );
    }
    eprintln!("mip levels 0..4: surfaces and a mip-chain texture exact");

    // A one-level 2D array, a cube and a 3D image: all layers (or slices) through one handle,
    // then each layer through its own.
    let cases = [
        (ImageKind::D2Array { layers: 4 }, vk::Format::R32_UINT),
        (ImageKind::D2Array { layers: 3 }, vk::Format::R8G8B8A8_UNORM),
        (ImageKind::Cube, vk::Format::R16G16_SFLOAT),
        (ImageKind::D3 { depth: 5 }, vk::Format::R32_UINT),
    ];
    for (kind, format) in cases {
        let what = format!("{kind:?} {format:?}");
        let (w, h) = if kind == ImageKind::Cube {
            (16, 16)
        } else {
            (24, 10)
        };
        let d = desc(kind, format, (w, h), 1, ALL);
        let mut image = bridge.create_image(&d).unwrap();
        let f = *image.format_info();
        let tb = f.texel_bytes();
        let (_, extent) = view_dims(&d, 0, ViewLayers::All);
        let all = texel_count(extent);
        // Every layer through one surface handle (layered / 3D addressing).
        let surface = image.inline_surface(0, ViewLayers::All).unwrap();
        let launch = write_launch(&k, &surface, &d, 0, ViewLayers::All, 30);
        run(&bridge, &[&image], &[launch], true, |_, _| {});
        assert_bytes(
            &vulkan_read(&bridge, &image, ImageRegion::level(&d, 0)),
            &pattern_bytes(all, tb, 30),
            tb,
            &format!("{what}: inline surface of every layer -> Vulkan"),
        );
        // Every layer through one texture handle.
        let data = pattern_bytes(all, tb, 31);
        vulkan_write(&bridge, &mut image, ImageRegion::level(&d, 0), &data);
        if f.class.reads_as_integer() {
            let texture = image.inline_texture(&InlineTextureDesc::default()).unwrap();
            let out = out_buffer(&bridge, all * 16);
            let launch = fetch_launch(&k, &texture, &d, 0, ViewLayers::All, &out);
            run(&bridge, &[&image], &[launch], true, |_, _| {});
            check_fetched(
                &f,
                &read_words(&bridge, &out),
                all as usize,
                |i| (texel_ints(&f, &data[i * tb as usize..]), vec![]),
                &format!("{what}: Vulkan copy -> inline texture of every layer"),
            );
        }
        // Each layer through its own handles (2D views).
        let layers = kind.layers();
        for layer in 0..layers {
            let one = ViewLayers::One(layer);
            // A 3D image's one "layer" is all its slices.
            let per_layer = texel_count(view_dims(&d, 0, one).1);
            let region = ImageRegion {
                level: 0,
                first_layer: layer,
                layers: 1,
            };
            let surface = image.inline_surface(0, one).unwrap();
            let launch = write_launch(&k, &surface, &d, 0, one, 40 + layer);
            run(&bridge, &[&image], &[launch], true, |_, _| {});
            assert_bytes(
                &vulkan_read(&bridge, &image, region),
                &pattern_bytes(per_layer, tb, 40 + layer),
                tb,
                &format!("{what}: inline surface of layer {layer} -> Vulkan"),
            );
            if f.class.reads_as_integer() {
                let data = pattern_bytes(per_layer, tb, 50 + layer);
                vulkan_write(&bridge, &mut image, region, &data);
                let texture = image
                    .inline_texture(&InlineTextureDesc {
                        layers: one,
                        ..InlineTextureDesc::default()
                    })
                    .unwrap();
                let out = out_buffer(&bridge, per_layer * 16);
                let launch = fetch_launch(&k, &texture, &d, 0, one, &out);
                run(&bridge, &[&image], &[launch], true, |_, _| {});
                check_fetched(
                    &f,
                    &read_words(&bridge, &out),
                    per_layer as usize,
                    |i| (texel_ints(&f, &data[i * tb as usize..]), vec![]),
                    &format!("{what}: Vulkan copy -> inline texture of layer {layer}"),
                );
            }
        }
        eprintln!("{what}: every layer and each layer exact through inline handles");
    }
    common::assert_clean(bridge.vulkan());
}

/// Frames of "kernel writes the frame's pattern through a surface handle → (barrier) → Vulkan
/// copy of the image" in one command buffer; returns how many frames read wrong texels.
fn kernel_then_copy_frames(bridge: &Bridge, k: &Kernels, frames: u32, barrier: bool) -> u32 {
    let (w, h) = (2048u32, 2048u32);
    let d = desc(ImageKind::D2, vk::Format::R8G8B8A8_UNORM, (w, h), 1, ALL);
    let image = bridge.create_image(&d).unwrap();
    let surface = image.inline_surface(0, ViewLayers::All).unwrap();
    let texels = u64::from(w * h);
    let down = HostBuffer::new(bridge.vulkan(), texels * 4, vk::BufferUsageFlags::empty()).unwrap();
    let copy = vk::BufferImageCopy {
        buffer_offset: 0,
        buffer_row_length: 0,
        buffer_image_height: 0,
        image_subresource: vk::ImageSubresourceLayers {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            mip_level: 0,
            base_array_layer: 0,
            layer_count: 1,
        },
        image_offset: vk::Offset3D::default(),
        image_extent: vk::Extent3D {
            width: w,
            height: h,
            depth: 1,
        },
    };
    let mut wrong_frames = 0;
    for frame in 1..=frames {
        let launch = write_launch(k, &surface, &d, 0, ViewLayers::All, 1000 + frame);
        let (vk_image, buffer) = (image.vk_image(), down.vk_buffer());
        run(bridge, &[&image], &[launch], barrier, |dev, cmd| {
            // The copy reads in TRANSFER_SRC_OPTIMAL (the validation layer warns about GENERAL):
            // the transition's first scope is the kernel's stage with the barrier, nothing
            // without it (the negative control).
            let range = vk::ImageSubresourceRange {
                aspect_mask: vk::ImageAspectFlags::COLOR,
                base_mip_level: 0,
                level_count: 1,
                base_array_layer: 0,
                layer_count: 1,
            };
            let to_src = vk::ImageMemoryBarrier::default()
                .src_access_mask(if barrier {
                    vk::AccessFlags::SHADER_WRITE
                } else {
                    vk::AccessFlags::empty()
                })
                .dst_access_mask(vk::AccessFlags::TRANSFER_READ)
                .old_layout(vk::ImageLayout::GENERAL)
                .new_layout(vk::ImageLayout::TRANSFER_SRC_OPTIMAL)
                .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                .image(vk_image)
                .subresource_range(range);
            let back = to_src
                .src_access_mask(vk::AccessFlags::TRANSFER_READ)
                .dst_access_mask(vk::AccessFlags::empty())
                .old_layout(vk::ImageLayout::TRANSFER_SRC_OPTIMAL)
                .new_layout(vk::ImageLayout::GENERAL);
            let src_stage = if barrier {
                vk::PipelineStageFlags::COMPUTE_SHADER
            } else {
                vk::PipelineStageFlags::TOP_OF_PIPE
            };
            // SAFETY: live image (acquired, GENERAL) and buffer of this device; the region
            // fits both; the image returns to GENERAL for the release.
            unsafe {
                dev.cmd_pipeline_barrier(
                    cmd,
                    src_stage,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::DependencyFlags::empty(),
                    &[],
                    &[],
                    &[to_src],
                );
                dev.cmd_copy_image_to_buffer(
                    cmd,
                    vk_image,
                    vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                    buffer,
                    &[copy],
                );
                dev.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                    vk::DependencyFlags::empty(),
                    &[],
                    &[],
                    &[back],
                );
            };
        });
        let got: Vec<u8> = down.read().unwrap();
        let want = pattern_bytes(texels, 4, 1000 + frame);
        let bad = got
            .chunks(4)
            .zip(want.chunks(4))
            .filter(|(g, w)| g != w)
            .count();
        if bad > 0 {
            wrong_frames += 1;
            if wrong_frames <= 3 {
                eprintln!("frame {frame}: {bad} of {texels} texels wrong (barrier: {barrier})");
            }
        }
    }
    wrong_frames
}

#[test]
fn the_barrier_between_kernel_and_copy_matters() {
    let _serial = common::serial();
    let Some((bridge, k)) = setup("the_barrier_between_kernel_and_copy_matters") else {
        return;
    };
    let frames = 30;
    let bad = kernel_then_copy_frames(&bridge, &k, frames, true);
    eprintln!("with the kernel barrier: {bad} of {frames} frames wrong");
    assert_eq!(bad, 0);
    // Without the barrier the copy may race the kernel's surface writes. Measured on an H100
    // (driver 580): 0 of 30 frames wrong on a 2048² RGBA8 image, so the driver orders this
    // pair by itself there; the buffer path's control (inline.rs) does catch a removed
    // barrier. Reported, not asserted: the rule stays "record the barrier".
    let bad = kernel_then_copy_frames(&bridge, &k, frames, false);
    eprintln!("barrier removed: {bad} of {frames} frames read wrong texels");
    common::assert_clean(bridge.vulkan());
}

#[test]
fn handles_keep_their_image_alive() {
    let _serial = common::serial();
    let Some((bridge, k)) = setup("handles_keep_their_image_alive") else {
        return;
    };
    let ctx = bridge.vulkan();
    let (w, h) = (64u32, 48u32);
    let texels = u64::from(w * h);

    // A shared image dropped while its handles live: acquired for the queue first (the
    // protocol), then dropped; the handles still write and read it.
    let d = desc(ImageKind::D2, vk::Format::R32_UINT, (w, h), 1, ALL);
    let image = bridge.create_image(&d).unwrap();
    let surface = image.inline_surface(0, ViewLayers::All).unwrap();
    let texture = image.inline_texture(&InlineTextureDesc::default()).unwrap();
    let family = ctx.queue_family_index();
    // SAFETY: a live image of this device, in the protocol's state between uses.
    unsafe {
        ctx.submit_and_wait(|dev, cmd| {
            cmd_acquire_images(
                dev,
                cmd,
                family,
                &[(&image as &dyn AsVkImage, vk::ImageLayout::GENERAL)],
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
            )
        })
    }
    .unwrap();
    drop(image);
    let out = out_buffer(&bridge, texels * 4);
    let tex_out = out_buffer(&bridge, texels * 16);
    let launches = [
        write_launch(&k, &surface, &d, 0, ViewLayers::All, 60),
        read_launch(&k, &surface, &d, 0, ViewLayers::All, &out),
        fetch_launch(&k, &texture, &d, 0, ViewLayers::All, &tex_out),
    ];
    run(&bridge, &[], &launches, true, |_, _| {});
    let want = pattern_bytes(texels, 4, 60);
    assert_bytes(
        &words_as_bytes(&read_words(&bridge, &out)),
        &want,
        4,
        "shared image dropped: surface write then read",
    );
    let f = cuvk::format_info(d.format).unwrap();
    check_fetched(
        &f,
        &read_words(&bridge, &tex_out),
        texels as usize,
        |i| (texel_ints(&f, &want[i * 4..]), vec![]),
        "shared image dropped: texture read",
    );
    drop((surface, texture));

    // A Vulkan-only image (no CUDA import) in an Arc, dropped while its handle lives.
    let d = desc(
        ImageKind::D2Array { layers: 2 },
        vk::Format::R8G8B8A8_UINT,
        (w, h),
        1,
        ALL,
    );
    let image = Arc::new(BoundImage::new(ctx, &d, ImageOptions::LOCAL).unwrap());
    let surface = InlineImageHandle::surface(&image, 0, ViewLayers::All).unwrap();
    assert_eq!(Arc::strong_count(&image), 2, "the handle holds the image");
    drop(image);
    let out = out_buffer(&bridge, texels * 2 * 4);
    let launches = [
        write_launch(&k, &surface, &d, 0, ViewLayers::All, 61),
        read_launch(&k, &surface, &d, 0, ViewLayers::All, &out),
    ];
    run(&bridge, &[], &launches, true, |_, _| {});
    assert_bytes(
        &words_as_bytes(&read_words(&bridge, &out)),
        &pattern_bytes(texels * 2, 4, 61),
        4,
        "bound image dropped: layered surface write then read",
    );
    drop(surface);
    eprintln!("images dropped while their handles lived: handles still exact, teardown clean");
    common::assert_clean(ctx);
}

#[test]
fn launches_check_image_handles_and_engines_views_work() {
    let _serial = common::serial();
    let Some((bridge, k)) = setup("launches_check_image_handles_and_engines_views_work") else {
        return;
    };
    let ctx = bridge.vulkan();
    let (w, h) = (32u32, 16u32);
    let texels = u64::from(w * h);
    let d = desc(ImageKind::D2, vk::Format::R8G8B8A8_UNORM, (w, h), 1, ALL);
    let mut image = bridge.create_image(&d).unwrap();
    let surface = image.inline_surface(0, ViewLayers::All).unwrap();
    eprintln!("{surface:?}");

    // A handle for a parameter that is not a 64-bit integer: refused, naming it.
    let mut launch = write_launch(&k, &surface, &d, 0, ViewLayers::All, 1);
    launch.args[1] = surface.kernel_arg(); // `int geometry`: a .u32 / .s32 parameter
    let e = assert_err!(
        k.write.validate_launch(&dims(launch.n), &launch.args),
        Error::Launch(LaunchError::ImageHandleToNonInteger { index: 1, .. })
    );
    assert_eq!(e.kind(), ErrorKind::InvalidInput);

    // A handle of another device: refused.
    let other = VulkanContext::new(VulkanConfig {
        validation: Validation::Required,
        device: DeviceChoice::Uuid(ctx.info().device_uuid),
        ..Default::default()
    })
    .unwrap();
    let other_image = Arc::new(BoundImage::new(&other, &d, ImageOptions::LOCAL).unwrap());
    let foreign = InlineImageHandle::surface(&other_image, 0, ViewLayers::All).unwrap();
    let mut launch = write_launch(&k, &surface, &d, 0, ViewLayers::All, 1);
    launch.args[0] = foreign.kernel_arg();
    let e = assert_err!(
        k.write.validate_launch(&dims(launch.n), &launch.args),
        Error::WrongDevice { .. }
    );
    assert_eq!(e.kind(), ErrorKind::WrongDevice);
    drop((foreign, other_image));
    common::assert_clean(&other);
    drop(other);

    // An engine's own view and sampler: a combined image sampler and a sampled image.
    let data = pattern_bytes(texels, 4, 70);
    vulkan_write(&bridge, &mut image, ImageRegion::level(&d, 0), &data);
    let view_info = vk::ImageViewCreateInfo::default()
        .image(image.vk_image())
        .view_type(vk::ImageViewType::TYPE_2D)
        .format(d.format)
        .subresource_range(vk::ImageSubresourceRange {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            base_mip_level: 0,
            level_count: 1,
            base_array_layer: 0,
            layer_count: 1,
        });
    // SAFETY: a live image of this device; destroyed below, after the handles.
    let view = unsafe { ctx.device().create_image_view(&view_info, None) }.unwrap();
    let sampler_info = vk::SamplerCreateInfo::default()
        .mag_filter(vk::Filter::NEAREST)
        .min_filter(vk::Filter::NEAREST)
        .address_mode_u(vk::SamplerAddressMode::CLAMP_TO_EDGE)
        .address_mode_v(vk::SamplerAddressMode::CLAMP_TO_EDGE)
        .address_mode_w(vk::SamplerAddressMode::CLAMP_TO_EDGE);
    // SAFETY: a valid device; destroyed below, after the handle.
    let sampler = unsafe { ctx.device().create_sampler(&sampler_info, None) }.unwrap();
    let want = |i: usize| {
        (
            vec![],
            data[i * 4..i * 4 + 4]
                .iter()
                .map(|&b| f32::from(b) / 255.0)
                .collect::<Vec<_>>(),
        )
    };
    for (descriptor, kind) in [
        (
            RawViewDescriptor::CombinedImageSampler(sampler),
            InlineImageKind::Texture,
        ),
        (
            RawViewDescriptor::SampledImage,
            InlineImageKind::SampledImage,
        ),
    ] {
        // SAFETY: a live view of an image with SAMPLED usage and a live sampler, both of this
        // device, destroyed only after the handle and the submission that uses it.
        let handle =
            unsafe { InlineImageHandle::from_raw_view(ctx, view, descriptor, Box::new(())) }
                .unwrap();
        assert_eq!(handle.kind(), kind);
        let out = out_buffer(&bridge, texels * 16);
        let launch = Launch {
            f: &k.fetch_lod,
            n: texels,
            args: vec![
                handle.kernel_arg(),
                KernelArg::value(&w),
                KernelArg::value(&h),
                KernelArg::value(&0.0f32),
                addr(&out),
            ],
        };
        run(&bridge, &[&image], &[launch], true, |_, _| {});
        check_fetched(
            image.format_info(),
            &read_words(&bridge, &out),
            texels as usize,
            want,
            &format!("an engine's view as {kind:?}"),
        );
        eprintln!("an engine's view as {kind:?}: exact (normalized coordinates, texel centres)");
    }
    // SAFETY: ours; the handles are gone and their submissions completed.
    unsafe {
        ctx.device().destroy_sampler(sampler, None);
        ctx.device().destroy_image_view(view, None);
    }
    drop(surface);
    common::assert_clean(ctx);
}

#[test]
fn an_engines_device_is_detected_from_its_enabled_list() {
    let _serial = common::serial();
    let Some((bridge, _k)) = setup("an_engines_device_is_detected_from_its_enabled_list") else {
        return;
    };
    let ctx = bridge.vulkan();
    let existing = |exts| ExistingVulkan {
        entry: ctx.entry().clone(),
        instance: ctx.instance().clone(),
        api_version: vk::API_VERSION_1_2,
        physical_device: ctx.physical_device(),
        device: ctx.device().clone(),
        queue_family_index: ctx.queue_family_index(),
        queue: *ctx.lock_queue(),
        enabled_extensions: exts,
        timeline_semaphore_enabled: true,
        buffer_device_address_enabled: ctx.info().capabilities.buffer_device_address,
    };
    let binary = cuvk::ash::nvx::binary_import::NAME;
    let handles = cuvk::ash::nvx::image_view_handle::NAME;
    // Enabled on the device, but not in the engine's list: "not enabled".
    let exts = [MEMORY_EXTENSION, binary];
    // SAFETY: the objects are valid and outlive the wrapper (dropped first), which destroys
    // nothing of the bridge's; the list is a subset of what the device was created with.
    let wrapped = unsafe { VulkanContext::from_existing(existing(&exts)) }.unwrap();
    assert!(!wrapped.info().capabilities.image_handles);
    let e = assert_err!(
        image_handles_supported(&wrapped),
        Error::Unsupported(Capability::InlineKernels {
            reason: InlineKernelsMissing::ImageViewHandleNotEnabled
        })
    );
    assert!(e.to_string().contains("not enabled"), "{e}");
    drop(wrapped);
    let exts = [MEMORY_EXTENSION, binary, handles];
    // SAFETY: as above.
    let wrapped = unsafe { VulkanContext::from_existing(existing(&exts)) }.unwrap();
    assert!(wrapped.info().capabilities.image_handles);
    image_handles_supported(&wrapped).unwrap();
    drop(wrapped);
    common::assert_clean(ctx);
}
