//! The particle field inside Bevy's renderer: the particles in a GPU buffer, one simulation
//! step per frame, drawn into a storage image that an ordinary `Sprite` shows. The step runs
//! as a CUDA kernel on a shared buffer where `bevy_cuvk` has a `CuvkDevice` (the stream path,
//! `cuda.rs`), else as WGSL compute (`particles.wgsl`); the drawing is WGSL either way.

#![allow(dead_code)] // shared by the example and the tests, each using a part

use std::borrow::Cow;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use bevy::asset::RenderAssetUsages;
use bevy::core_pipeline::schedule::camera_driver;
use bevy::prelude::*;
use bevy::render::extract_resource::{ExtractResource, ExtractResourcePlugin};
use bevy::render::render_asset::RenderAssets;
use bevy::render::render_resource::binding_types::{
    storage_buffer_sized, texture_storage_2d, uniform_buffer_sized,
};
use bevy::render::render_resource::{
    BindGroup, BindGroupEntries, BindGroupLayoutDescriptor, BindGroupLayoutEntries, Buffer,
    BufferDescriptor, BufferInitDescriptor, BufferUsages, CachedComputePipelineId,
    ComputePassDescriptor, ComputePipelineDescriptor, Extent3d, PipelineCache, ShaderStages,
    StorageTextureAccess, TextureDimension, TextureFormat, TextureUsages,
};
use bevy::render::renderer::{RenderContext, RenderDevice, RenderGraph, RenderQueue};
use bevy::render::texture::GpuImage;
use bevy::render::{Render, RenderApp, RenderStartup, RenderSystems};
use bevy::shader::Shader;
use bevy_cuvk::CuvkDevice;

use crate::cuda::{CudaSim, InlineSim};
use crate::reference::{self, Particle};

/// The storage image's format (the sprite samples it).
pub const FORMAT: TextureFormat = TextureFormat::Rgba8Unorm;

/// What the simulation is and how far it has gone: a main-world resource, extracted.
#[derive(Resource, Clone, ExtractResource)]
pub struct ParticleSim {
    /// The image the drawing writes and the sprite shows.
    pub image: Handle<Image>,
    /// Number of particles.
    pub count: u32,
    /// Picture size.
    pub width: u32,
    /// Picture size.
    pub height: u32,
    /// Seed of the initial particles.
    pub seed: u32,
    /// Stop stepping after this many steps (still drawing); `None`: run on.
    pub max_steps: Option<u32>,
    /// Steps done so far (written by the render world).
    pub steps: Arc<AtomicU32>,
    /// Which path steps the particles, in words (written by the render world).
    pub path: Arc<Mutex<String>>,
    /// Whether the CUDA path may be used (where `CuvkDevice` exists).
    pub allow_cuda: bool,
    /// How CUDA kernels run where they do.
    pub launch: Launch,
}

/// How the CUDA step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Launch {
    /// Inline where the device can (`CuvkStatus::Ready { inline_kernels: true }`), else stream.
    #[default]
    Auto,
    /// Recorded into Bevy's command buffers (NVX); WGSL where the device cannot.
    Inline,
    /// On a CUDA stream ordered with Bevy's frames.
    Stream,
}

impl ParticleSim {
    /// A simulation with a new storage image of `width` x `height`.
    pub fn new(
        images: &mut Assets<Image>,
        count: u32,
        width: u32,
        height: u32,
        max_steps: Option<u32>,
    ) -> Self {
        Self {
            image: storage_image(images, width, height, FORMAT),
            count,
            width,
            height,
            seed: 1,
            max_steps,
            steps: Arc::new(AtomicU32::new(0)),
            path: Arc::new(Mutex::new("starting".into())),
            allow_cuda: true,
            launch: Launch::Auto,
        }
    }

    /// The same, drawing into a new image of `format` (the viewer's `Rgba16Float`).
    pub fn with_image_format(mut self, images: &mut Assets<Image>, format: TextureFormat) -> Self {
        self.image = storage_image(images, self.width, self.height, format);
        self
    }

    /// Which path steps the particles, in words.
    pub fn path(&self) -> String {
        self.path
            .lock()
            .map(|p| p.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// Says which path runs (the HUD's line).
    pub fn set_path(&self, path: String) {
        match self.path.lock() {
            Ok(mut p) => *p = path,
            Err(e) => *e.into_inner() = path,
        }
    }

    /// Steps done so far.
    pub fn steps(&self) -> u32 {
        self.steps.load(Ordering::Acquire)
    }
}

/// A `width` x `height` image that compute writes and a sprite samples.
fn storage_image(
    images: &mut Assets<Image>,
    width: u32,
    height: u32,
    format: TextureFormat,
) -> Handle<Image> {
    let mut image = Image::new_uninit(
        Extent3d {
            width,
            height,
            depth_or_array_layers: 1,
        },
        TextureDimension::D2,
        format,
        RenderAssetUsages::RENDER_WORLD,
    );
    image.texture_descriptor.usage = TextureUsages::STORAGE_BINDING
        | TextureUsages::TEXTURE_BINDING
        | TextureUsages::COPY_SRC
        | TextureUsages::COPY_DST;
    images.add(image)
}

/// Adds the render-world part: pipelines, buffers, the per-frame dispatches.
pub struct ParticleSimPlugin;

/// The shader, embedded (the example runs from any directory).
#[derive(Resource, Clone)]
struct SimShader(Handle<Shader>);

impl Plugin for ParticleSimPlugin {
    fn build(&self, app: &mut App) {
        let shader = app
            .world_mut()
            .resource_mut::<Assets<Shader>>()
            .add(Shader::from_wgsl(
                include_str!("particles.wgsl"),
                "bevy_cuvk/examples/particles/particles.wgsl",
            ));
        app.add_plugins(ExtractResourcePlugin::<ParticleSim>::default());
        let Some(render_app) = app.get_sub_app_mut(RenderApp) else {
            return;
        };
        render_app
            .insert_resource(SimShader(shader))
            .add_systems(RenderStartup, init_pipelines)
            .add_systems(
                Render,
                (
                    (prepare_buffers, cuda_step)
                        .chain()
                        .in_set(RenderSystems::PrepareResources),
                    prepare_bind_group.in_set(RenderSystems::PrepareBindGroups),
                ),
            )
            .add_systems(RenderGraph, dispatch.before(camera_driver));
    }
}

#[derive(Resource)]
struct SimPipelines {
    layout: BindGroupLayoutDescriptor,
    simulate: CachedComputePipelineId,
    clear: CachedComputePipelineId,
    splat: CachedComputePipelineId,
    resolve: CachedComputePipelineId,
}

fn init_pipelines(mut commands: Commands, shader: Res<SimShader>, cache: Res<PipelineCache>) {
    let layout = BindGroupLayoutDescriptor::new(
        "particles",
        &BindGroupLayoutEntries::sequential(
            ShaderStages::COMPUTE,
            (
                uniform_buffer_sized(false, None),
                storage_buffer_sized(false, None),
                storage_buffer_sized(false, None),
                texture_storage_2d(FORMAT, StorageTextureAccess::WriteOnly),
            ),
        ),
    );
    let pipeline = |entry: &'static str| {
        cache.queue_compute_pipeline(ComputePipelineDescriptor {
            label: Some(Cow::Borrowed(entry)),
            layout: vec![layout.clone()],
            shader: shader.0.clone(),
            entry_point: Some(Cow::Borrowed(entry)),
            ..default()
        })
    };
    let pipelines = SimPipelines {
        simulate: pipeline("simulate"),
        clear: pipeline("clear"),
        splat: pipeline("splat"),
        resolve: pipeline("resolve"),
        layout: layout.clone(),
    };
    commands.insert_resource(pipelines);
}

/// The GPU buffers of one simulation.
#[derive(Resource)]
struct SimBuffers {
    particles: Buffer,
    accum: Buffer,
    params: Buffer,
    /// (count, width, height, seed) they were made for.
    shape: (u32, u32, u32, u32),
    /// Whether this frame steps the simulation (not past `max_steps`).
    simulate: bool,
}

#[allow(clippy::too_many_arguments)] // a Bevy system's parameters
fn prepare_buffers(
    mut commands: Commands,
    sim: Option<Res<ParticleSim>>,
    buffers: Option<Res<SimBuffers>>,
    device: Res<RenderDevice>,
    queue: Res<RenderQueue>,
    cuvk: Option<Res<CuvkDevice>>,
    status: Option<Res<bevy_cuvk::CuvkStatus>>,
) {
    let Some(sim) = sim else { return };
    let shape = (sim.count, sim.width, sim.height, sim.seed);
    let aspect = sim.width as f32 / sim.height as f32;
    let simulate = sim.max_steps.is_none_or(|m| sim.steps() < m);
    let params = reference::params(sim.steps(), sim.count, sim.width, sim.height, simulate);
    match buffers {
        Some(b) if b.shape == shape => {
            queue.write_buffer(&b.params, 0, bytemuck::bytes_of(&params));
            if b.simulate != simulate {
                commands.insert_resource(SimBuffers {
                    particles: b.particles.clone(),
                    accum: b.accum.clone(),
                    params: b.params.clone(),
                    shape,
                    simulate,
                });
            }
        }
        _ => {
            let initial = reference::initial_particles(sim.count, aspect, sim.seed);
            // The CUDA path where bevy_cuvk paired Bevy's device with CUDA, else WGSL: inline
            // where the device runs CUDA kernels in its queue, else on a stream.
            let inline_wanted = match sim.launch {
                Launch::Auto | Launch::Inline => cuvk.as_ref().is_some_and(|c| c.inline_kernels()),
                Launch::Stream => false,
            };
            let mut inline = None;
            if let (Some(cuvk), true, true) = (cuvk.as_deref(), sim.allow_cuda, inline_wanted) {
                match InlineSim::new(cuvk, &initial) {
                    Ok(sim) => inline = Some(sim),
                    Err(e) => warn!("inline CUDA path unavailable: {e}"),
                }
            }
            let stream_allowed = sim.launch != Launch::Inline && inline.is_none();
            let cuda = match (cuvk.as_deref(), sim.allow_cuda && stream_allowed) {
                (Some(cuvk), true) => match CudaSim::new(cuvk, &initial) {
                    Ok(cuda) => Some(cuda),
                    Err(e) => {
                        warn!("CUDA path unavailable, simulating in WGSL: {e}");
                        sim.set_path(format!("WGSL compute (CUDA path failed: {e})"));
                        None
                    }
                },
                _ if inline.is_some() => None,
                _ => {
                    let why = match status.as_deref() {
                        Some(bevy_cuvk::CuvkStatus::Unavailable { reason, .. }) => reason.clone(),
                        _ if !sim.allow_cuda => "CUDA not allowed".into(),
                        _ => "no CuvkDevice".into(),
                    };
                    sim.set_path(format!("WGSL compute (no CUDA: {why})"));
                    None
                }
            };
            let particles = match (&cuda, &inline) {
                (Some(cuda), _) => {
                    sim.set_path("CUDA kernel on a CUDA stream (stream path)".into());
                    cuda.buffer.buffer().clone()
                }
                (None, Some(inline)) => {
                    sim.set_path("CUDA kernel in Bevy's queue (inline path, NVX)".into());
                    inline.buffer.buffer().clone()
                }
                (None, None) => device.create_buffer_with_data(&BufferInitDescriptor {
                    label: Some("particles"),
                    contents: bytemuck::cast_slice::<Particle, u8>(&initial),
                    usage: BufferUsages::STORAGE | BufferUsages::COPY_SRC | BufferUsages::COPY_DST,
                }),
            };
            match cuda {
                Some(cuda) => commands.insert_resource(cuda),
                None => commands.remove_resource::<CudaSim>(),
            }
            match inline {
                Some(inline) => commands.insert_resource(inline),
                None => commands.remove_resource::<InlineSim>(),
            }
            let accum = device.create_buffer(&BufferDescriptor {
                label: Some("particle accumulation"),
                size: 8 * u64::from(sim.width) * u64::from(sim.height),
                usage: BufferUsages::STORAGE,
                mapped_at_creation: false,
            });
            let params_buffer = device.create_buffer_with_data(&BufferInitDescriptor {
                label: Some("particle params"),
                contents: bytemuck::bytes_of(&params),
                usage: BufferUsages::UNIFORM | BufferUsages::COPY_DST,
            });
            commands.remove_resource::<SimBindGroup>();
            commands.insert_resource(SimBuffers {
                particles,
                accum,
                params: params_buffer,
                shape,
                simulate,
            });
        }
    }
}

/// The CUDA path's step: after Bevy's reads of the previous frame (a GPU wait on the stream),
/// the kernel, an event Bevy's submission will wait for on the host.
fn cuda_step(
    sim: Option<Res<ParticleSim>>,
    buffers: Option<Res<SimBuffers>>,
    cuda: Option<ResMut<CudaSim>>,
) {
    let (Some(sim), Some(buffers), Some(mut cuda)) = (sim, buffers, cuda) else {
        return;
    };
    if !buffers.simulate {
        return;
    }
    let params = reference::params(sim.steps(), sim.count, sim.width, sim.height, true);
    if let Err(e) = cuda.step(&params) {
        error!("CUDA step failed: {e}");
    }
}

#[derive(Resource)]
struct SimBindGroup(BindGroup);

#[allow(clippy::too_many_arguments)] // a Bevy system's parameters
fn prepare_bind_group(
    mut commands: Commands,
    sim: Option<Res<ParticleSim>>,
    buffers: Option<Res<SimBuffers>>,
    existing: Option<Res<SimBindGroup>>,
    pipelines: Res<SimPipelines>,
    images: Res<RenderAssets<GpuImage>>,
    device: Res<RenderDevice>,
    cache: Res<PipelineCache>,
) {
    let (Some(sim), Some(buffers)) = (sim, buffers) else {
        return;
    };
    if existing.is_some() && !buffers.is_added() {
        return;
    }
    let Some(image) = images.get(&sim.image) else {
        return;
    };
    let group = device.create_bind_group(
        "particles",
        &cache.get_bind_group_layout(&pipelines.layout),
        &BindGroupEntries::sequential((
            buffers.params.as_entire_binding(),
            buffers.particles.as_entire_binding(),
            buffers.accum.as_entire_binding(),
            &image.texture_view,
        )),
    );
    commands.insert_resource(SimBindGroup(group));
}

#[allow(clippy::too_many_arguments)] // a Bevy system's parameters
fn dispatch(
    mut ctx: RenderContext,
    sim: Option<Res<ParticleSim>>,
    buffers: Option<Res<SimBuffers>>,
    group: Option<Res<SimBindGroup>>,
    pipelines: Res<SimPipelines>,
    cache: Res<PipelineCache>,
    mut cuda: Option<ResMut<CudaSim>>,
    inline: Option<Res<InlineSim>>,
    cuvk: Option<Res<CuvkDevice>>,
) {
    let (Some(sim), Some(buffers), Some(group)) = (sim, buffers, group) else {
        return;
    };
    let (Some(simulate), Some(clear), Some(splat), Some(resolve)) = (
        cache.get_compute_pipeline(pipelines.simulate),
        cache.get_compute_pipeline(pipelines.clear),
        cache.get_compute_pipeline(pipelines.splat),
        cache.get_compute_pipeline(pipelines.resolve),
    ) else {
        return;
    };
    if let Some(cuda) = cuda.as_mut() {
        // CUDA → Bevy: the kernel's writes are complete before Bevy submits its reads.
        if let Err(e) = cuda.sync.host_wait_for_cuda() {
            error!("waiting for the CUDA step failed: {e}");
        }
    }
    let gpu_step = cuda.is_none() && inline.is_none();
    if let (Some(inline), Some(cuvk), true) = (inline.as_deref(), cuvk.as_deref(), buffers.simulate)
    {
        // The kernel in Bevy's queue, before the drawing's commands (barriers inside).
        let params = reference::params(sim.steps(), sim.count, sim.width, sim.height, true);
        match inline.record(cuvk, &params) {
            Ok(commands) => ctx.add_command_buffer(commands),
            Err(e) => error!("recording the inline CUDA step failed: {e}"),
        }
    }
    let particle_groups = sim.count.div_ceil(256);
    let (gx, gy) = (sim.width.div_ceil(8), sim.height.div_ceil(8));
    let mut pass = ctx
        .command_encoder()
        .begin_compute_pass(&ComputePassDescriptor {
            label: Some("particles"),
            timestamp_writes: None,
        });
    pass.set_bind_group(0, &group.0, &[]);
    if buffers.simulate && gpu_step {
        pass.set_pipeline(simulate);
        pass.dispatch_workgroups(particle_groups, 1, 1);
    }
    pass.set_pipeline(clear);
    pass.dispatch_workgroups(gx, gy, 1);
    pass.set_pipeline(splat);
    pass.dispatch_workgroups(particle_groups, 1, 1);
    pass.set_pipeline(resolve);
    pass.dispatch_workgroups(gx, gy, 1);
    drop(pass);
    if let Some(cuda) = cuda.as_mut() {
        // Bevy → CUDA: after Bevy's submission of this frame the plugin signals the frame
        // number CUDA's next step waits for.
        cuda.sync.signal_after_frame();
    }
    if buffers.simulate {
        sim.steps.fetch_add(1, Ordering::AcqRel);
    }
}
