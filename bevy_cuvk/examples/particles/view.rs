//! `--view NAME`: Bevy as a viewer of a simulation in another process (`particles --publish
//! NAME`, or a PyTorch job's `cuvk.Publisher`), through `bevy_cuvk::CuvkSubscriber`: the
//! publisher's slots are Bevy storage buffers over its memory (no copy); each frame the newest
//! frame is held, splatted into the image the sprite shows (`view.wgsl`) and released after
//! Bevy's submission. The image keeps the last picture while no newer frame comes.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bevy::core_pipeline::schedule::camera_driver;
use bevy::prelude::*;
use bevy::render::extract_resource::{ExtractResource, ExtractResourcePlugin};
use bevy::render::render_asset::RenderAssets;
use bevy::render::render_resource::binding_types::{
    storage_buffer_read_only_sized, storage_buffer_sized, texture_storage_2d, uniform_buffer_sized,
};
use bevy::render::render_resource::{
    BindGroup, BindGroupEntries, BindGroupLayoutDescriptor, BindGroupLayoutEntries, Buffer,
    BufferDescriptor, BufferUsages, CachedComputePipelineId, ComputePassDescriptor,
    ComputePipelineDescriptor, PipelineCache, ShaderStages, StorageTextureAccess,
};
use bevy::render::renderer::{RenderContext, RenderDevice, RenderGraph, RenderQueue};
use bevy::render::texture::GpuImage;
use bevy::render::{Render, RenderApp, RenderStartup, RenderSystems};
use bevy::shader::Shader;
use bevy_cuvk::cuvk::ipc::IpcError;
use bevy_cuvk::cuvk::ElementFormat;
use bevy_cuvk::{CuvkDevice, CuvkError, CuvkStatus, CuvkSubscriber, HeldFrame};

use bevy::render::render_resource::TextureFormat;

use crate::sim::ParticleSim;

/// The viewer's image: linear half floats (the dark sky's gradient would band in 8 bits).
pub const FORMAT: TextureFormat = TextureFormat::Rgba16Float;

/// How long a frame waits for a newer frame of the publisher (then draws nothing new).
const HOLD_TIMEOUT: Duration = Duration::from_millis(250);
/// How long attaching waits for the publisher (one still starting included).
const ATTACH_TIMEOUT: Duration = Duration::from_secs(30);

/// What the viewer attaches to and what it saw: a main-world resource, extracted.
#[derive(Resource, Clone, ExtractResource)]
pub struct ViewSettings {
    /// The publisher's name (or socket path).
    pub name: String,
    /// The camera's starting yaw (radians; viewers started apart look from apart).
    pub yaw: f32,
    /// Set once the publisher is gone, or attaching failed (the app then ends).
    pub ended: Arc<AtomicBool>,
    /// The publisher's frame drawn last (0: none yet).
    pub publisher_frame: Arc<AtomicU64>,
    /// The particles in a slot (0 until attached).
    pub particles: Arc<AtomicU64>,
}

/// The render-world part: attach, hold, splat, resolve.
pub struct ViewPlugin;

#[derive(Resource, Clone)]
struct ViewShader(Handle<Shader>);

impl Plugin for ViewPlugin {
    fn build(&self, app: &mut App) {
        let shader = app
            .world_mut()
            .resource_mut::<Assets<Shader>>()
            .add(Shader::from_wgsl(
                include_str!("view.wgsl"),
                "bevy_cuvk/examples/particles/view.wgsl",
            ));
        app.add_plugins((
            ExtractResourcePlugin::<ParticleSim>::default(),
            ExtractResourcePlugin::<ViewSettings>::default(),
        ));
        let Some(render_app) = app.get_sub_app_mut(RenderApp) else {
            return;
        };
        render_app
            .insert_resource(ViewShader(shader))
            .init_resource::<ThisFrame>()
            .add_systems(RenderStartup, init_pipelines)
            .add_systems(
                Render,
                (
                    attach_and_hold.in_set(RenderSystems::PrepareResources),
                    prepare_bind_groups.in_set(RenderSystems::PrepareBindGroups),
                ),
            )
            .add_systems(RenderGraph, draw.before(camera_driver));
    }
}

#[derive(Resource)]
struct ViewPipelines {
    layout: BindGroupLayoutDescriptor,
    splat: CachedComputePipelineId,
    resolve: CachedComputePipelineId,
}

fn init_pipelines(mut commands: Commands, shader: Res<ViewShader>, cache: Res<PipelineCache>) {
    let layout = BindGroupLayoutDescriptor::new(
        "publisher view",
        &BindGroupLayoutEntries::sequential(
            ShaderStages::COMPUTE,
            (
                uniform_buffer_sized(false, None),
                storage_buffer_read_only_sized(false, None),
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
    commands.insert_resource(ViewPipelines {
        splat: pipeline("splat"),
        resolve: pipeline("resolve"),
        layout,
    });
}

/// The frame held for this Bevy frame (`None`: nothing new to draw).
#[derive(Resource, Default)]
struct ThisFrame(Option<HeldFrame>);

/// The view's uniform block (`Params` in view.wgsl).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    view_proj: [f32; 16],
    count: u32,
    width: u32,
    height: u32,
    exposure: f32,
    depth_half: f32,
    pad: [u32; 3],
}

/// The publisher's rows: x, y, z, key as four f32.
const ROW: ElementFormat = ElementFormat {
    code: ElementFormat::FLOAT,
    bits: 32,
    lanes: 1,
    columns: 4,
};

fn ended(settings: &ViewSettings, why: &str) {
    println!("{why}");
    settings.ended.store(true, Ordering::Release);
}

/// Attaches once Bevy's device is paired with CUDA's (the subscriber imports through it), then
/// holds the newest frame each frame.
#[allow(clippy::too_many_arguments)] // a Bevy system's parameters
fn attach_and_hold(
    mut commands: Commands,
    sim: Option<Res<ParticleSim>>,
    settings: Option<Res<ViewSettings>>,
    status: Option<Res<CuvkStatus>>,
    device: Option<Res<CuvkDevice>>,
    subscriber: Option<ResMut<CuvkSubscriber>>,
    mut this_frame: ResMut<ThisFrame>,
) {
    this_frame.0 = None;
    let Some(settings) = settings else { return };
    if settings.ended.load(Ordering::Acquire) {
        return;
    }
    let Some(mut subscriber) = subscriber else {
        match (device, status.as_deref()) {
            (Some(device), _) => attach(&mut commands, &settings, &device, sim.as_deref()),
            (None, Some(CuvkStatus::Unavailable { reason, .. })) => ended(
                &settings,
                &format!("cannot view: CUDA unavailable: {reason}"),
            ),
            _ => {}
        }
        return;
    };
    match subscriber.hold(HOLD_TIMEOUT) {
        Ok(Some(held)) => {
            settings
                .publisher_frame
                .store(held.frame, Ordering::Release);
            this_frame.0 = Some(held);
        }
        Ok(None) => {}
        Err(CuvkError::Shared {
            source: bevy_cuvk::cuvk::Error::Ipc(IpcError::PeerClosed { .. }),
        }) => ended(&settings, "the publisher ended"),
        Err(e) => ended(&settings, &format!("viewing failed: {e}")),
    }
}

fn attach(
    commands: &mut Commands,
    settings: &ViewSettings,
    device: &CuvkDevice,
    sim: Option<&ParticleSim>,
) {
    match CuvkSubscriber::attach(
        device,
        &settings.name,
        BufferUsages::STORAGE,
        ATTACH_TIMEOUT,
    ) {
        Ok(subscriber) => {
            let elements = subscriber.slot_elements();
            let bytes = subscriber.slots().first().map_or(0, |b| b.size());
            if elements.iter().any(|e| *e != ROW) || bytes == 0 {
                ended(
                    settings,
                    &format!(
                        "'{}' publishes {elements:?}, not rows of x, y, z, key (4 x f32)",
                        settings.name
                    ),
                );
                return;
            }
            let particles = bytes / ROW.row_bytes();
            settings.particles.store(particles, Ordering::Release);
            if let Some(sim) = sim {
                sim.set_path(format!(
                    "viewer of '{}': {} slots in Bevy buffers, no copy",
                    settings.name,
                    subscriber.slots().len()
                ));
            }
            println!(
                "attached to '{}': {} slots of {particles} particles (x, y, z, key)",
                settings.name,
                subscriber.slots().len()
            );
            commands.insert_resource(subscriber);
        }
        Err(e) => ended(
            settings,
            &format!("could not attach to '{}': {e}", settings.name),
        ),
    }
}

/// One bind group per slot, and the counts and parameters they share.
#[derive(Resource)]
struct ViewBindings {
    groups: Vec<BindGroup>,
    params: Buffer,
    count: u32,
}

#[allow(clippy::too_many_arguments)] // a Bevy system's parameters
fn prepare_bind_groups(
    mut commands: Commands,
    sim: Option<Res<ParticleSim>>,
    subscriber: Option<Res<CuvkSubscriber>>,
    existing: Option<Res<ViewBindings>>,
    pipelines: Res<ViewPipelines>,
    images: Res<RenderAssets<GpuImage>>,
    device: Res<RenderDevice>,
    cache: Res<PipelineCache>,
) {
    let (Some(sim), Some(subscriber)) = (sim, subscriber) else {
        return;
    };
    if existing.is_some() {
        return;
    }
    let Some(image) = images.get(&sim.image) else {
        return;
    };
    let counts = device.create_buffer(&BufferDescriptor {
        label: Some("view counts"),
        size: 8 * u64::from(sim.width) * u64::from(sim.height),
        usage: BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let params = device.create_buffer(&BufferDescriptor {
        label: Some("view params"),
        size: std::mem::size_of::<Params>() as u64,
        usage: BufferUsages::UNIFORM | BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let layout = cache.get_bind_group_layout(&pipelines.layout);
    let groups = subscriber
        .slots()
        .iter()
        .map(|slot| {
            device.create_bind_group(
                "publisher view",
                &layout,
                &BindGroupEntries::sequential((
                    params.as_entire_binding(),
                    slot.as_entire_binding(),
                    counts.as_entire_binding(),
                    &image.texture_view,
                )),
            )
        })
        .collect();
    let count = subscriber.slots().first().map_or(0, |b| {
        (b.size() / ROW.row_bytes()).min(u64::from(u32::MAX)) as u32
    });
    commands.insert_resource(ViewBindings {
        groups,
        params,
        count,
    });
}

/// The orbit camera of `particles --view` (z up; 50 degrees vertical field of view).
fn view_proj(yaw: f32, pitch: f32, distance: f32, aspect: f32) -> Mat4 {
    let eye = distance
        * Vec3::new(
            pitch.cos() * yaw.sin(),
            -pitch.cos() * yaw.cos(),
            pitch.sin(),
        );
    let view = Mat4::look_at_rh(eye, Vec3::ZERO, Vec3::Z);
    Mat4::perspective_rh(50f32.to_radians(), aspect, 0.05, 100.0) * view
}

#[allow(clippy::too_many_arguments)] // a Bevy system's parameters
fn draw(
    mut ctx: RenderContext,
    sim: Option<Res<ParticleSim>>,
    settings: Option<Res<ViewSettings>>,
    bindings: Option<Res<ViewBindings>>,
    this_frame: Res<ThisFrame>,
    pipelines: Res<ViewPipelines>,
    cache: Res<PipelineCache>,
    queue: Res<RenderQueue>,
) {
    let (Some(sim), Some(settings), Some(bindings), Some(held)) =
        (sim, settings, bindings, this_frame.0)
    else {
        return;
    };
    let (Some(splat), Some(resolve), Some(group)) = (
        cache.get_compute_pipeline(pipelines.splat),
        cache.get_compute_pipeline(pipelines.resolve),
        bindings.groups.get(held.slot),
    ) else {
        return;
    };
    let drawn = sim.steps();
    let (width, height) = (sim.width, sim.height);
    let aspect = width as f32 / height as f32;
    // A slow orbit from this viewer's own starting point.
    let yaw = settings.yaw + 0.0025 * drawn as f32;
    let pixels = f64::from(width) * f64::from(height);
    let params = Params {
        view_proj: view_proj(yaw, 0.55, 10.0, aspect).to_cols_array(),
        count: bindings.count,
        width,
        height,
        exposure: (0.034 * pixels / f64::from(bindings.count.max(1))).min(0.1) as f32,
        depth_half: 1.0,
        pad: [0; 3],
    };
    queue.write_buffer(&bindings.params, 0, bytemuck::bytes_of(&params));
    let mut pass = ctx
        .command_encoder()
        .begin_compute_pass(&ComputePassDescriptor {
            label: Some("publisher view"),
            timestamp_writes: None,
        });
    pass.set_bind_group(0, group, &[]);
    pass.set_pipeline(splat);
    pass.dispatch_workgroups(bindings.count.div_ceil(256).clamp(1, 65_535), 1, 1);
    pass.set_pipeline(resolve);
    pass.dispatch_workgroups(width.div_ceil(8), height.div_ceil(8), 1);
    drop(pass);
    sim.steps.fetch_add(1, Ordering::AcqRel);
}
