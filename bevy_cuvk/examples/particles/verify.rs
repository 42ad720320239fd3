//! `--verify`: CUDA writes a shared buffer (or, with `--image`, a shared image that Bevy
//! knows as an `Image`) every frame and Bevy's own compute pass checks every
//! element of it in the same frame, for `--frames` frames, on the inline or the stream path;
//! then the buffer is read back through wgpu and compared with the CPU's pattern. Ordered, no
//! frame may see a wrong element; `--unordered` (the negative control) drops the ordering
//! (the stream path's semaphore and host waits, the inline path's barriers) and shows that the
//! check sees the races it would let through.
//!
//! The kernel (`verify.cu`) and the check (`verify.wgsl`) hash each element `--rounds` times,
//! so that both run long enough for a missing order to show: the check reads an element
//! CUDA has not written yet (CUDA → Bevy) or has already overwritten with the next frame's
//! pattern (Bevy → CUDA).

#![allow(dead_code)] // shared by the example and the tests, each using a part

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use bevy::asset::AssetId;
use bevy::core_pipeline::schedule::camera_driver;
use bevy::prelude::*;
use bevy::render::extract_resource::{ExtractResource, ExtractResourcePlugin};
use bevy::render::render_asset::RenderAssets;
use bevy::render::render_resource::binding_types::{
    storage_buffer_read_only_sized, storage_buffer_sized, texture_2d, uniform_buffer_sized,
};
use bevy::render::render_resource::{
    BindGroup, BindGroupEntries, BindGroupLayoutDescriptor, BindGroupLayoutEntries, Buffer,
    BufferDescriptor, BufferUsages, CachedComputePipelineId, ComputePassDescriptor,
    ComputePipelineDescriptor, PipelineCache, ShaderStages, TextureSampleType,
};
use bevy::render::render_resource::{TextureFormat, TextureUsages};
use bevy::render::renderer::{
    RenderContext, RenderDevice, RenderGraph, RenderGraphSystems, RenderQueue,
};
use bevy::render::texture::GpuImage;
use bevy::render::{Render, RenderApp, RenderStartup, RenderSystems};
use bevy::shader::Shader;
use bevy_cuvk::cuvk::cuda::SurfaceObject;
use bevy_cuvk::cuvk::cudarc::driver::{CudaFunction, CudaModule, LaunchConfig, PushKernelArg};
use bevy_cuvk::cuvk::vulkan::{KernelArg, LaunchDims};
use bevy_cuvk::wgpu;
use bevy_cuvk::{
    CuvkBuffer, CuvkDevice, CuvkError, CuvkImage, CuvkImages, InlineImage, InlineKernel, StreamSync,
};

/// Threads per block / workgroup on both sides.
const GROUP: u32 = 256;

/// What `--verify` runs: a main-world resource, extracted.
#[derive(Resource, Clone, ExtractResource)]
pub struct VerifySettings {
    /// Inline (`true`) or stream path.
    pub inline: bool,
    /// A shared image (RGBA8, 2048 wide) instead of a buffer, which a Bevy `Sprite` also
    /// draws: the `Image` handle it is shared under, and the camera's target.
    pub image: Option<SpriteImages>,
    /// Keep the ordering (`false`: the negative control).
    pub ordered: bool,
    /// The inline path's second negative control: the kernel recorded after the check (with
    /// its barriers), so the check reads the previous frame's data.
    pub swapped: bool,
    /// Frames to check.
    pub frames: u32,
    /// Elements of the shared buffer (u32).
    pub elements: u32,
    /// Hash rounds per element.
    pub rounds: u32,
    /// The outcome, once the last frame was read back (written by the render world).
    pub outcome: Arc<Mutex<Option<Outcome>>>,
}

/// `--image`: the asset ids of the shared image (a sprite shows it) and of the image the
/// sprite's camera renders into (read back after the last frame).
#[derive(Clone, Copy, Debug)]
pub struct SpriteImages {
    /// The sprite's image: the plugin's `CuvkImages` makes its `GpuImage` the shared one.
    pub shared: AssetId<Image>,
    /// The camera's target.
    pub target: AssetId<Image>,
}

/// `--image`: the main world's part — a placeholder `Image` (main world only) the shared image
/// is registered under, a `Sprite` that shows it 1:1 and a camera rendering it into an image of the same
/// size (no tone mapping, no MSAA: the bytes pass through).
pub fn spawn_sprite(
    commands: &mut Commands,
    images: &mut Assets<Image>,
    width: u32,
    height: u32,
) -> SpriteImages {
    use bevy::asset::RenderAssetUsages;
    use bevy::camera::RenderTarget;
    use bevy::core_pipeline::tonemapping::Tonemapping;
    use bevy::render::render_resource::{Extent3d, TextureDimension};
    let placeholder = Image::new_uninit(
        Extent3d {
            width,
            height,
            depth_or_array_layers: 1,
        },
        TextureDimension::D2,
        TextureFormat::Rgba8Unorm,
        // Main world only: Bevy makes no GpuImage of its own for it (the shared image is the
        // only one, so the sprite's bind group is made with it).
        RenderAssetUsages::MAIN_WORLD,
    );
    let shared = images.add(placeholder);
    let mut target = Image::new_target_texture(width, height, TextureFormat::Rgba8Unorm, None);
    target.texture_descriptor.usage |= TextureUsages::COPY_SRC;
    let target = images.add(target);
    commands.spawn(Sprite {
        image: shared.clone(),
        custom_size: Some(Vec2::new(width as f32, height as f32)),
        ..default()
    });
    commands.spawn((
        Camera2d,
        // An HDR (16-bit float) main texture: the 8-bit values pass through it exactly (the
        // default sRGB one would round dark values).
        bevy::camera::Hdr,
        Tonemapping::None,
        Msaa::Off,
        RenderTarget::Image(target.clone().into()),
    ));
    SpriteImages {
        shared: shared.id(),
        target: target.id(),
    }
}

/// A wrong pixel: its index, the word expected, the word seen.
pub type WrongPixel = (usize, u32, u32);

/// What the run saw.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The path, in words.
    pub path: String,
    /// Frames checked.
    pub frames: u32,
    /// Frames in which Bevy's check saw at least one wrong element.
    pub bad_frames: u32,
    /// Wrong elements over all frames.
    pub bad_elements: u64,
    /// Elements of the final read-back (through wgpu) that differ from the CPU's pattern.
    pub readback_wrong: u64,
    /// `--image`: pixels of the sprite's last frame (Bevy's sprite pipeline drawing the shared
    /// image) that differ from the CPU's pattern.
    pub sprite_wrong: Option<u64>,
    /// `--image`: the largest difference of one channel in the sprite's frame, and the first
    /// wrong pixel (index, expected, seen).
    pub sprite_worst: Option<(u8, Option<WrongPixel>)>,
    /// Why the run could not happen (no CUDA, a refused call), if so.
    pub error: Option<String>,
    /// The run was `--swapped`.
    pub swapped: bool,
}

impl Outcome {
    /// Every frame and the read-back exact.
    pub fn exact(&self) -> bool {
        self.error.is_none()
            && self.bad_frames == 0
            && self.readback_wrong == 0
            && self.sprite_wrong.unwrap_or(0) == 0
    }

    /// The one line the example prints (and the tests parse).
    pub fn line(&self, ordered: bool) -> String {
        if let Some(e) = &self.error {
            return format!("verify ({}): ERROR {e}", self.path);
        }
        let verdict = match (ordered, self.exact()) {
            (true, true) => "PASS",
            (true, false) => "FAIL",
            (false, false) => "RACES SEEN (negative control)",
            (false, true) => "NO RACE SEEN (negative control)",
        };
        let sprite = match (self.sprite_wrong, self.sprite_worst) {
            (Some(0), _) => ", sprite's frame exact".to_owned(),
            (Some(n), Some((diff, first))) => {
                format!(", sprite's frame {n} pixels wrong (by up to {diff}; first: {first:x?})")
            }
            (Some(n), None) => format!(", sprite's frame {n} pixels wrong"),
            (None, _) => String::new(),
        };
        format!(
            "verify ({}, {}): {} frames, {} with wrong elements ({} elements), final read-back \
             {} wrong{sprite}: {verdict}",
            self.path,
            match (ordered, self.swapped) {
                (true, _) => "ordered",
                (false, true) => "kernel after the check",
                (false, false) => "unordered",
            },
            self.frames,
            self.bad_frames,
            self.bad_elements,
            self.readback_wrong
        )
    }
}

/// The word frame `frame` writes at element `i` of the image (opaque: alpha 255).
pub fn image_pattern(i: u32, frame: u32, rounds: u32) -> u32 {
    pattern(i, frame, rounds) | 0xff00_0000
}

/// The pattern frame `frame` writes at element `i` (as `verify.cu` and `verify.wgsl`).
pub fn pattern(i: u32, frame: u32, rounds: u32) -> u32 {
    let lowbias32 = |mut x: u32| {
        x ^= x >> 16;
        x = x.wrapping_mul(0x7feb_352d);
        x ^= x >> 15;
        x = x.wrapping_mul(0x846c_a68b);
        x ^= x >> 16;
        x
    };
    let mut v = i ^ frame.wrapping_mul(0x9e37_79b9);
    for r in 0..rounds {
        v = lowbias32(v.wrapping_add(r));
    }
    v
}

/// Adds the render-world part of `--verify`.
pub struct VerifyPlugin;

#[derive(Resource, Clone)]
struct VerifyShader {
    buffer: Handle<Shader>,
    image: Handle<Shader>,
}

/// Width of `--image`'s image (its height: elements / width).
pub const IMAGE_WIDTH: u32 = 2048;

impl Plugin for VerifyPlugin {
    fn build(&self, app: &mut App) {
        let mut shaders = app.world_mut().resource_mut::<Assets<Shader>>();
        let shader = VerifyShader {
            buffer: shaders.add(Shader::from_wgsl(
                concat!(
                    include_str!("verify.wgsl"),
                    include_str!("verify_buffer.wgsl")
                ),
                "bevy_cuvk/examples/particles/verify_buffer.wgsl",
            )),
            image: shaders.add(Shader::from_wgsl(
                concat!(
                    include_str!("verify.wgsl"),
                    include_str!("verify_image.wgsl")
                ),
                "bevy_cuvk/examples/particles/verify_image.wgsl",
            )),
        };
        app.add_plugins(ExtractResourcePlugin::<VerifySettings>::default());
        let Some(render_app) = app.get_sub_app_mut(RenderApp) else {
            return;
        };
        render_app
            .insert_resource(shader)
            .add_systems(RenderStartup, init_pipeline)
            .add_systems(
                Render,
                (
                    prepare.in_set(RenderSystems::PrepareResources),
                    read_back.in_set(RenderSystems::Cleanup),
                ),
            )
            // In Render (after the plugin acquired the shared images for Bevy's queue), before
            // the cameras draw the sprite; the sprite's frame copied after them.
            .add_systems(
                RenderGraph,
                (
                    dispatch
                        .in_set(RenderGraphSystems::Render)
                        .before(camera_driver),
                    copy_sprite_target
                        .after(RenderGraphSystems::Render)
                        .before(RenderGraphSystems::Submit),
                ),
            );
    }
}

/// The check's pipeline for each target (both are made at `RenderStartup`, before the main
/// world's settings reach the render world).
#[derive(Resource)]
struct VerifyPipelines {
    buffer: VerifyPipeline,
    image: VerifyPipeline,
}

struct VerifyPipeline {
    layout: BindGroupLayoutDescriptor,
    check: CachedComputePipelineId,
}

impl VerifyPipelines {
    fn get(&self, settings: &VerifySettings) -> &VerifyPipeline {
        if settings.image.is_some() {
            &self.image
        } else {
            &self.buffer
        }
    }
}

fn init_pipeline(mut commands: Commands, shader: Res<VerifyShader>, cache: Res<PipelineCache>) {
    let pipeline = |entries: BindGroupLayoutEntries<3>, shader: &Handle<Shader>, entry| {
        let layout = BindGroupLayoutDescriptor::new("verify", &entries);
        let check = cache.queue_compute_pipeline(ComputePipelineDescriptor {
            label: Some(Cow::Borrowed("verify check")),
            layout: vec![layout.clone()],
            shader: shader.clone(),
            entry_point: Some(Cow::Borrowed(entry)),
            ..default()
        });
        VerifyPipeline { layout, check }
    };
    let buffer = pipeline(
        BindGroupLayoutEntries::sequential(
            ShaderStages::COMPUTE,
            (
                uniform_buffer_sized(false, None),
                storage_buffer_read_only_sized(false, None),
                storage_buffer_sized(false, None),
            ),
        ),
        &shader.buffer,
        "check",
    );
    let image = pipeline(
        BindGroupLayoutEntries::sequential(
            ShaderStages::COMPUTE,
            (
                uniform_buffer_sized(false, None),
                texture_2d(TextureSampleType::Float { filterable: false }),
                storage_buffer_sized(false, None),
            ),
        ),
        &shader.image,
        "check_image",
    );
    commands.insert_resource(VerifyPipelines { buffer, image });
}

/// How CUDA writes.
enum Writer {
    Stream {
        sync: StreamSync,
        function: CudaFunction,
        _module: Arc<CudaModule>,
    },
    Inline {
        kernel: InlineKernel,
    },
}

/// What CUDA writes and Bevy checks, with the handle the kernel takes.
enum Target {
    Buffer(CuvkBuffer<u32>),
    Image {
        image: CuvkImage,
        /// The stream path's CUDA surface object.
        surface: Option<SurfaceObject>,
        /// The inline path's image handle (its drop deferred by the plugin, as the kernel's).
        handle: Option<InlineImage>,
    },
}

impl Target {
    /// The kernel's first argument on the inline path.
    fn inline_arg(&self) -> Option<KernelArg> {
        match self {
            Target::Buffer(b) => b.shared().device_address().map(KernelArg::address),
            Target::Image { handle, .. } => handle.as_ref().map(InlineImage::kernel_arg),
        }
    }
}

/// The render world's state of the run.
#[derive(Resource)]
struct VerifyState {
    // Dropped in any order, frames in flight or not (`--exit-at`): the plugin frees an inline
    // kernel's module, an inline image handle's view and a shared buffer's memory once Bevy's
    // GPU work that names them has run.
    writer: Writer,
    target: Target,
    params: Buffer,
    mismatches: Buffer,
    mismatches_read: Buffer,
    data_read: Buffer,
    /// `--image`: the sprite camera's last frame.
    target_read: Option<Buffer>,
    group: BindGroup,
    /// Frames checked so far.
    done: u32,
    /// The frame this update checks (set in prepare when the pipeline is ready).
    active: Option<u32>,
    finished: bool,
}

impl VerifyState {
    fn path(&self) -> &'static str {
        match (&self.writer, &self.target) {
            (Writer::Stream { .. }, Target::Buffer(_)) => "stream path, buffer",
            (Writer::Inline { .. }, Target::Buffer(_)) => "inline path, buffer",
            (Writer::Stream { .. }, Target::Image { .. }) => "stream path, image",
            (Writer::Inline { .. }, Target::Image { .. }) => "inline path, image",
        }
    }
}

fn new_state(
    settings: &VerifySettings,
    cuvk: &CuvkDevice,
    device: &RenderDevice,
    layout: &bevy::render::render_resource::BindGroupLayout,
    images: &mut CuvkImages,
) -> Result<VerifyState, String> {
    let err = |e: CuvkError| e.to_string();
    let n = settings.elements as usize;
    let target = if let Some(sprite) = settings.image {
        if !settings.elements.is_multiple_of(IMAGE_WIDTH) {
            return Err(format!(
                "--image needs --elements a multiple of {IMAGE_WIDTH}"
            ));
        }
        let height = settings.elements / IMAGE_WIDTH;
        let image = cuvk
            .create_image(
                IMAGE_WIDTH,
                height,
                TextureFormat::Rgba8Unorm,
                TextureUsages::TEXTURE_BINDING | TextureUsages::COPY_SRC,
            )
            .map_err(err)?;
        // Registered under the sprite's image: that handle's GpuImage is the shared image, and
        // the plugin acquires it for Bevy's queue and releases it to CUDA every frame.
        images.insert(sprite.shared, image.clone());
        let (surface, handle) = if settings.inline {
            let handle = image
                .inline_surface()
                .map_err(|e| format!("inline surface handle: {e}"))?;
            (None, Some(handle))
        } else {
            let surface = image
                .shared()
                .surface(0)
                .map_err(|e| format!("CUDA surface: {e}"))?;
            (Some(surface), None)
        };
        Target::Image {
            image,
            surface,
            handle,
        }
    } else {
        Target::Buffer(
            cuvk.create_buffer::<u32>(n, BufferUsages::STORAGE | BufferUsages::COPY_SRC, &[])
                .map_err(err)?,
        )
    };
    let source = include_str!("verify.cu");
    let entry = if settings.image.is_some() {
        "fill_image"
    } else {
        "fill"
    };
    let writer = if settings.inline {
        let ptx = bevy_cuvk::cuvk::cuda::compile_ptx(cuvk.cuda(), "verify.cu", source)
            .map_err(|e| format!("compiling verify.cu: {e}"))?;
        Writer::Inline {
            kernel: cuvk.load_inline_kernel(&ptx, entry).map_err(err)?,
        }
    } else {
        let module = bevy_cuvk::cuvk::cuda::compile_module(cuvk.cuda(), "verify.cu", source)
            .map_err(|e| format!("compiling verify.cu: {e}"))?;
        let function = module
            .load_function(entry)
            .map_err(|e| format!("loading {entry}: {e}"))?;
        Writer::Stream {
            sync: StreamSync::new(cuvk).map_err(err)?,
            function,
            _module: module,
        }
    };
    let counts = 4 * (u64::from(settings.frames) + 1);
    let buffer = |label, size, usage| {
        device.create_buffer(&BufferDescriptor {
            label: Some(label),
            size,
            usage,
            mapped_at_creation: false,
        })
    };
    let params = buffer(
        "verify params",
        16,
        BufferUsages::UNIFORM | BufferUsages::COPY_DST,
    );
    // wgpu zero-initialises buffers: every frame's count starts at 0.
    let mismatches = buffer(
        "verify mismatches",
        counts,
        BufferUsages::STORAGE | BufferUsages::COPY_SRC,
    );
    let mismatches_read = buffer(
        "verify mismatches read-back",
        counts,
        BufferUsages::MAP_READ | BufferUsages::COPY_DST,
    );
    let data_read = buffer(
        "verify data read-back",
        4 * n as u64,
        BufferUsages::MAP_READ | BufferUsages::COPY_DST,
    );
    let target_read = settings.image.map(|_| {
        buffer(
            "verify sprite target read-back",
            4 * n as u64,
            BufferUsages::MAP_READ | BufferUsages::COPY_DST,
        )
    });
    let group = match &target {
        Target::Buffer(data) => device.create_bind_group(
            "verify",
            layout,
            &BindGroupEntries::sequential((
                params.as_entire_binding(),
                data.buffer().as_entire_binding(),
                mismatches.as_entire_binding(),
            )),
        ),
        Target::Image { image, .. } => device.create_bind_group(
            "verify",
            layout,
            &BindGroupEntries::sequential((
                params.as_entire_binding(),
                image.view(),
                mismatches.as_entire_binding(),
            )),
        ),
    };
    Ok(VerifyState {
        writer,
        target,
        params,
        mismatches,
        mismatches_read,
        data_read,
        target_read,
        group,
        done: 0,
        active: None,
        finished: false,
    })
}

/// Creates the state once, then starts each frame: the params, and on the stream path the
/// kernel (after Bevy's previous check, when ordered).
#[allow(clippy::too_many_arguments)] // a Bevy system's parameters
fn prepare(
    mut commands: Commands,
    settings: Option<Res<VerifySettings>>,
    state: Option<ResMut<VerifyState>>,
    pipelines: Res<VerifyPipelines>,
    cache: Res<PipelineCache>,
    cuvk: Option<Res<CuvkDevice>>,
    status: Option<Res<bevy_cuvk::CuvkStatus>>,
    device: Res<RenderDevice>,
    queue: Res<RenderQueue>,
    mut images: ResMut<CuvkImages>,
) {
    let Some(settings) = settings else { return };
    let Some(mut state) = state else {
        let fail = |error: String| {
            let mut outcome = settings.outcome.lock().unwrap_or_else(|e| e.into_inner());
            if outcome.is_none() {
                *outcome = Some(Outcome {
                    path: if settings.inline {
                        "inline path"
                    } else {
                        "stream path"
                    }
                    .into(),
                    frames: 0,
                    bad_frames: 0,
                    bad_elements: 0,
                    readback_wrong: 0,
                    sprite_wrong: None,
                    sprite_worst: None,
                    error: Some(error),
                    swapped: settings.swapped,
                });
            }
        };
        match (cuvk, status.as_deref()) {
            (Some(cuvk), _) => {
                let layout = cache.get_bind_group_layout(&pipelines.get(&settings).layout);
                match new_state(&settings, &cuvk, &device, &layout, &mut images) {
                    Ok(state) => commands.insert_resource(state),
                    Err(e) => fail(e),
                }
            }
            (None, Some(bevy_cuvk::CuvkStatus::Unavailable { reason, .. })) => {
                fail(format!("CUDA unavailable: {reason}"))
            }
            _ => {}
        }
        return;
    };
    state.active = None;
    let check = pipelines.get(&settings).check;
    if state.done >= settings.frames || cache.get_compute_pipeline(check).is_none() {
        return;
    }
    let frame = state.done + 1;
    let params = [settings.elements, frame, settings.rounds, 0];
    queue.write_buffer(&state.params, 0, bytemuck::cast_slice(&params));
    let state = &mut *state;
    if let Writer::Stream { sync, function, .. } = &mut state.writer {
        let target = &state.target;
        let launched = (|| -> Result<(), String> {
            if settings.ordered {
                sync.cuda_wait_for_bevy().map_err(|e| e.to_string())?;
            }
            let mut launch = sync.stream().launch_builder(function);
            let (surface, width, height);
            let config = match target {
                Target::Buffer(data) => {
                    launch
                        .arg(data.shared().kernel_arg())
                        .arg(&settings.elements);
                    LaunchConfig::for_num_elems(settings.elements)
                }
                Target::Image { surface: s, .. } => {
                    surface = s.as_ref().map(|s| s.raw()).ok_or("no CUDA surface")?;
                    (width, height) = (IMAGE_WIDTH, settings.elements / IMAGE_WIDTH);
                    launch.arg(&surface).arg(&width).arg(&height);
                    LaunchConfig {
                        grid_dim: (width.div_ceil(GROUP), height, 1),
                        block_dim: (GROUP, 1, 1),
                        shared_mem_bytes: 0,
                    }
                }
            };
            launch.arg(&frame).arg(&settings.rounds);
            // SAFETY: `fill` writes elements [0, n) of the buffer, which holds n u32s, and
            // `fill_image` texels inside the image (bounds checked by the kernel and by the
            // surface's .trap); the arguments match their signatures.
            unsafe { launch.launch(config) }.map_err(|e| format!("launching the fill: {e}"))?;
            sync.cuda_done().map_err(|e| e.to_string())
        })();
        if let Err(e) = launched {
            error!("verify: {e}");
            return;
        }
    }
    state.active = Some(frame);
}

/// The frame's work in Bevy's queue: (inline) the kernel, then the check; on the last frame
/// the copies to the read-back buffers.
fn dispatch(
    mut ctx: RenderContext,
    settings: Option<Res<VerifySettings>>,
    state: Option<ResMut<VerifyState>>,
    pipelines: Res<VerifyPipelines>,
    cache: Res<PipelineCache>,
    cuvk: Option<Res<CuvkDevice>>,
) {
    let (Some(settings), Some(mut state), Some(cuvk)) = (settings, state, cuvk) else {
        return;
    };
    let check = pipelines.get(&settings).check;
    let (Some(frame), Some(check)) = (state.active, cache.get_compute_pipeline(check)) else {
        return;
    };
    let n = settings.elements;
    let state = &mut *state;
    let mut kernel_commands = None;
    match &mut state.writer {
        Writer::Stream { sync, .. } => {
            if settings.ordered {
                // CUDA → Bevy: the kernel's writes are complete before Bevy submits the check.
                if let Err(e) = sync.host_wait_for_cuda() {
                    error!("verify: waiting for CUDA: {e}");
                }
            }
        }
        Writer::Inline { kernel } => {
            let Some(first) = state.target.inline_arg() else {
                error!("verify: the target has no inline handle");
                return;
            };
            let (dims, args) = match &state.target {
                Target::Buffer(_) => (
                    LaunchDims::linear(n.div_ceil(GROUP), GROUP),
                    vec![
                        first,
                        KernelArg::value(&n),
                        KernelArg::value(&frame),
                        KernelArg::value(&settings.rounds),
                    ],
                ),
                Target::Image { .. } => {
                    let height = n / IMAGE_WIDTH;
                    let mut dims = LaunchDims::linear(IMAGE_WIDTH.div_ceil(GROUP), GROUP);
                    dims.grid[1] = height;
                    (
                        dims,
                        vec![
                            first,
                            KernelArg::value(&IMAGE_WIDTH),
                            KernelArg::value(&height),
                            KernelArg::value(&frame),
                            KernelArg::value(&settings.rounds),
                        ],
                    )
                }
            };
            let recorded = if settings.ordered || settings.swapped {
                // SAFETY: `fill` writes elements [0, n) of the shared buffer (its address),
                // which holds n u32s and outlives the submission (VerifyState keeps it; a
                // CuvkBuffer keeps its memory until Bevy's work completed).
                unsafe { kernel.record(&cuvk, &dims, &args) }
            } else {
                // The negative control: the same launch with no barrier around it.
                // SAFETY: as above; the missing barriers make a data race on the shared
                // buffer between GPU passes (what the check detects), not a memory error.
                unsafe {
                    cuvk.record_vulkan(|cmd| {
                        kernel
                            .function()
                            .record_launch(cmd, &dims, &args)
                            .map_err(|source| CuvkError::Shared { source })
                    })
                }
            };
            match recorded {
                Ok(commands) => kernel_commands = Some(commands),
                Err(e) => {
                    error!("verify: recording the kernel: {e}");
                    return;
                }
            }
        }
    }
    // `--swapped` (the inline path's other negative control): the kernel after the check.
    if !settings.swapped {
        if let Some(commands) = kernel_commands.take() {
            ctx.add_command_buffer(commands);
        }
    }
    let (gx, gy) = match state.target {
        Target::Buffer(_) => {
            let groups = n.div_ceil(GROUP);
            (groups.min(65535), groups.div_ceil(65535))
        }
        Target::Image { .. } => (IMAGE_WIDTH.div_ceil(GROUP), n / IMAGE_WIDTH),
    };
    {
        let mut pass = ctx
            .command_encoder()
            .begin_compute_pass(&ComputePassDescriptor {
                label: Some("verify check"),
                timestamp_writes: None,
            });
        pass.set_pipeline(check);
        pass.set_bind_group(0, &state.group, &[]);
        pass.dispatch_workgroups(gx, gy, 1);
    }
    if let Some(commands) = kernel_commands {
        ctx.add_command_buffer(commands);
    }
    if frame == settings.frames {
        let encoder = ctx.command_encoder();
        encoder.copy_buffer_to_buffer(
            &state.mismatches,
            0,
            &state.mismatches_read,
            0,
            state.mismatches.size(),
        );
        match &state.target {
            Target::Buffer(data) => encoder.copy_buffer_to_buffer(
                data.buffer(),
                0,
                &state.data_read,
                0,
                state.data_read.size(),
            ),
            Target::Image { image, .. } => {
                let (width, height) = image.size();
                encoder.copy_texture_to_buffer(
                    image.texture().as_image_copy(),
                    wgpu::TexelCopyBufferInfo {
                        buffer: &state.data_read,
                        layout: wgpu::TexelCopyBufferLayout {
                            offset: 0,
                            bytes_per_row: Some(4 * width),
                            rows_per_image: Some(height),
                        },
                    },
                    wgpu::Extent3d {
                        width,
                        height,
                        depth_or_array_layers: 1,
                    },
                );
            }
        }
    }
    if let (Writer::Stream { sync, .. }, true) = (&mut state.writer, settings.ordered) {
        // Bevy → CUDA: after Bevy's submission of this frame the plugin signals what the
        // next kernel waits for.
        sync.signal_after_frame();
    }
    state.done = frame;
}

/// `--image`, the last frame: copies what the sprite's camera rendered, for `read_back`.
fn copy_sprite_target(
    mut ctx: RenderContext,
    settings: Option<Res<VerifySettings>>,
    state: Option<Res<VerifyState>>,
    gpu_images: Res<RenderAssets<GpuImage>>,
) {
    let (Some(settings), Some(state)) = (settings, state) else {
        return;
    };
    let (Some(sprite), Some(read), true) = (
        settings.image,
        state.target_read.as_ref(),
        state.active == Some(settings.frames),
    ) else {
        return;
    };
    let Some(target) = gpu_images.get(sprite.target) else {
        error!("verify: the sprite's target image is not on the GPU");
        return;
    };
    let size = target.texture.size();
    ctx.command_encoder().copy_texture_to_buffer(
        target.texture.as_image_copy(),
        wgpu::TexelCopyBufferInfo {
            buffer: read,
            layout: wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(4 * size.width),
                rows_per_image: Some(size.height),
            },
        },
        size,
    );
}

/// After the last frame's submission: maps the read-back buffers and writes the outcome.
fn read_back(
    settings: Option<Res<VerifySettings>>,
    state: Option<ResMut<VerifyState>>,
    device: Res<RenderDevice>,
) {
    let (Some(settings), Some(mut state)) = (settings, state) else {
        return;
    };
    if state.finished || state.done < settings.frames {
        return;
    }
    state.finished = true;
    let read = |buffer: &Buffer| -> Result<Vec<u32>, String> {
        let slice = buffer.slice(..);
        slice.map_async(wgpu::MapMode::Read, |_| {});
        device
            .wgpu_device()
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| format!("waiting for the read-back: {e}"))?;
        let words = bytemuck::cast_slice::<u8, u32>(&slice.get_mapped_range()).to_vec();
        buffer.unmap();
        Ok(words)
    };
    let mut outcome = Outcome {
        path: state.path().into(),
        frames: state.done,
        bad_frames: 0,
        bad_elements: 0,
        readback_wrong: 0,
        sprite_wrong: None,
        sprite_worst: None,
        error: None,
        swapped: settings.swapped,
    };
    let expected = |i: usize| {
        if settings.image.is_some() {
            image_pattern(i as u32, settings.frames, settings.rounds)
        } else {
            pattern(i as u32, settings.frames, settings.rounds)
        }
    };
    if let Some(buffer) = &state.target_read {
        match read(buffer) {
            Ok(pixels) => {
                let wrong: Vec<WrongPixel> = pixels
                    .iter()
                    .enumerate()
                    .filter(|&(i, &v)| v != expected(i))
                    .map(|(i, &v)| (i, expected(i), v))
                    .collect();
                let diff = wrong
                    .iter()
                    .flat_map(|&(_, want, got)| {
                        let (w, g) = (want.to_le_bytes(), got.to_le_bytes());
                        (0..4).map(move |c| w[c].abs_diff(g[c]))
                    })
                    .max()
                    .unwrap_or(0);
                outcome.sprite_wrong = Some(wrong.len() as u64);
                outcome.sprite_worst = Some((diff, wrong.first().copied()));
            }
            Err(e) => outcome.error = Some(e),
        }
    }
    match (read(&state.mismatches_read), read(&state.data_read)) {
        (Ok(counts), Ok(data)) => {
            let per_frame = counts.get(1..).unwrap_or_default();
            outcome.bad_frames = per_frame.iter().filter(|&&c| c > 0).count() as u32;
            outcome.bad_elements = per_frame.iter().map(|&c| u64::from(c)).sum();
            outcome.readback_wrong = data
                .iter()
                .enumerate()
                .filter(|&(i, &v)| v != expected(i))
                .count() as u64;
        }
        (Err(e), _) | (_, Err(e)) => outcome.error = outcome.error.or(Some(e)),
    }
    *settings.outcome.lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);
}
