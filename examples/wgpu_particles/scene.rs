//! The simulation (CUDA in shared buffers, CUDA through host memory and `Queue::write_buffer`,
//! or a WGSL compute fallback) and the wgpu renderer: by default a compute splat (each particle
//! adds to its pixel's counts) resolved by a render pipeline, or (`--draw points`) points
//! rasterised into an HDR target and tone-mapped. Measured on an H200 at 10M particles: the
//! splat costs about what the native Vulkan demo's does, rasterising the points ~27 ms (the
//! GPU has few raster units).

use std::collections::VecDeque;
use std::sync::Arc;

use anyhow::Context;
use cuvk::ash::vk;
use cuvk::cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cuvk::vulkan::{CuFunction, CuModule, KernelArg, LaunchDims};
use cuvk::wgpu::{
    wgpu, KernelLaunch, PacedBuffer, WgpuBridge, WgpuDevice, WgpuFramePacer, WgpuSharedBuffer,
};

use crate::sim::{initial_state, Camera, Params};

pub const PARTICLES_CU: &str = include_str!("../../shaders/particles.cu");

const POINTS: &str = r#"
struct U { view_proj: mat4x4<f32>, brightness: vec4<f32> };
@group(0) @binding(0) var<uniform> u: U;
struct V { @builtin(position) pos: vec4<f32>, @location(0) color: vec4<f32> };
@vertex
fn vs(@location(0) p: vec4<f32>) -> V {
    var clip = u.view_proj * vec4<f32>(p.xyz, 1.0);
    clip.y = -clip.y; // the camera is Vulkan's (y down); wgpu's clip space is y up
    let warm = vec3<f32>(1.0, 0.55, 0.25);
    let cold = vec3<f32>(0.35, 0.55, 1.0);
    let c = mix(warm, cold, clamp(length(p.xy) / 1.6, 0.0, 1.0)) * u.brightness.x;
    return V(clip, vec4<f32>(c, 1.0));
}
@fragment
fn fs(v: V) -> @location(0) vec4<f32> { return v.color; }
"#;

const TONEMAP: &str = r#"
@group(0) @binding(0) var accum: texture_2d<f32>;
@vertex
fn vs(@builtin(vertex_index) i: u32) -> @builtin(position) vec4<f32> {
    let x = f32((i << 1u) & 2u);
    let y = f32(i & 2u);
    return vec4<f32>(x * 2.0 - 1.0, y * 2.0 - 1.0, 0.0, 1.0);
}
@fragment
fn fs(@builtin(position) p: vec4<f32>) -> @location(0) vec4<f32> {
    let m = vec3<f32>(1.0) - exp(-textureLoad(accum, vec2<i32>(p.xy), 0).rgb);
    return vec4<f32>(m + vec3<f32>(0.02, 0.02, 0.035) * (1.0 - m), 1.0);
}
"#;

const SPLAT: &str = r#"
struct U { view_proj: mat4x4<f32>, brightness: vec4<f32> };
@group(0) @binding(0) var<uniform> u: U;
@group(0) @binding(1) var<storage, read> pos: array<vec4<f32>>;
// Per pixel: particles, and of those the ones far out (drawn cold).
@group(0) @binding(2) var<storage, read_write> counts: array<atomic<u32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x + id.y * 65535u * 256u;
    if (i >= arrayLength(&pos)) { return; }
    let p = pos[i];
    let clip = u.view_proj * vec4<f32>(p.xyz, 1.0);
    if (clip.w <= 0.0) { return; }
    let ndc = clip.xyz / clip.w;
    if (ndc.x < -1.0 || ndc.x >= 1.0 || ndc.y < -1.0 || ndc.y >= 1.0 || ndc.z < 0.0 || ndc.z > 1.0) {
        return;
    }
    let w = u32(u.brightness.y);
    let h = u32(u.brightness.z);
    // The camera is Vulkan's: y down, row 0 at the top, as the resolve pass reads it.
    let x = min(u32((ndc.x * 0.5 + 0.5) * f32(w)), w - 1u);
    let y = min(u32((ndc.y * 0.5 + 0.5) * f32(h)), h - 1u);
    let cold = u32(clamp(length(p.xy) / 1.6, 0.0, 1.0) * 16.0);
    atomicAdd(&counts[2u * (y * w + x)], 16u);
    atomicAdd(&counts[2u * (y * w + x) + 1u], cold);
}
"#;

const RESOLVE: &str = r#"
struct U { view_proj: mat4x4<f32>, brightness: vec4<f32> };
@group(0) @binding(0) var<uniform> u: U;
@group(0) @binding(1) var<storage, read> counts: array<u32>;
@vertex
fn vs(@builtin(vertex_index) i: u32) -> @builtin(position) vec4<f32> {
    let x = f32((i << 1u) & 2u);
    let y = f32(i & 2u);
    return vec4<f32>(x * 2.0 - 1.0, y * 2.0 - 1.0, 0.0, 1.0);
}
@fragment
fn fs(@builtin(position) p: vec4<f32>) -> @location(0) vec4<f32> {
    let w = u32(u.brightness.y);
    let at = 2u * (u32(p.y) * w + u32(p.x));
    let n = f32(counts[at]) / 16.0;
    let cold = f32(counts[at + 1u]) / 16.0;
    let c = (vec3<f32>(1.0, 0.55, 0.25) * (n - cold) + vec3<f32>(0.35, 0.55, 1.0) * cold)
        * u.brightness.x;
    let m = vec3<f32>(1.0) - exp(-c);
    return vec4<f32>(m + vec3<f32>(0.02, 0.02, 0.035) * (1.0 - m), 1.0);
}
"#;

const SIM: &str = r#"
// The step of shaders/particles.cu and sim.comp (see dev/src/sim/particles.rs): particles 0 and
// 1 are the galaxies' cores, every particle is pulled by them; pos.w = depth in their potential.
struct Params { count: u32, dt: f32, mass0: f32, mass1: f32, softening: f32, pad0: f32, pad1: f32, pad2: f32 };
@group(0) @binding(0) var<storage, read> pos_in: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> vel_in: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> pos_out: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> vel_out: array<vec4<f32>>;
@group(0) @binding(4) var<uniform> prm: Params;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x + id.y * 65535u * 256u;
    if (i >= prm.count) { return; }
    let p = pos_in[i];
    let v = vel_in[i];
    var a = vec3<f32>(0.0);
    var depth = 0.0;
    for (var j = 0u; j < min(prm.count, 2u); j++) {
        if (j == i) { continue; }
        let d = pos_in[j].xyz - p.xyz;
        let s = d.x * d.x + d.y * d.y + d.z * d.z + prm.softening;
        let inv = 1.0 / (s * sqrt(s));
        let mass = select(prm.mass1, prm.mass0, j == 0u);
        a += (mass * inv) * d;
        depth += mass * (s * inv);
    }
    let vel = v.xyz + a * prm.dt;
    pos_out[i] = vec4<f32>(p.xyz + vel * prm.dt, depth);
    vel_out[i] = vec4<f32>(vel, v.w);
}
"#;

/// Which path moves the particles to wgpu.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The CUDA kernel runs inside wgpu's own command buffers (`VK_NVX_binary_import`,
    /// `WgpuDevice::kernel_commands`) on shared buffers: one queue, no semaphore, no context
    /// switch.
    Inline,
    /// CUDA simulates on a stream in shared buffers that wgpu draws from, paced by
    /// `WgpuFramePacer`.
    ZeroCopy,
    /// CUDA simulates in its own memory; positions go to the host, then `Queue::write_buffer`.
    WriteBuffer,
    /// No CUDA: a WGSL compute shader simulates.
    Wgsl,
}

/// How the particles are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Draw {
    /// A compute splat into per-pixel counts, resolved by a full-screen render pass.
    Splat,
    /// Points rasterised (additive) into an `Rgba16Float` target, then tone-mapped.
    Points,
}

/// What depends on the image size.
enum Canvas {
    Splat {
        counts: wgpu::Buffer,
        resolve_bind: wgpu::BindGroup,
    },
    Points {
        accum: wgpu::TextureView,
        accum_bind: wgpu::BindGroup,
    },
}

/// The renderer: two pipelines (splat + resolve, or points + tone map) and the camera uniform.
pub struct Renderer {
    draw: Draw,
    first: Pipeline,
    second: wgpu::RenderPipeline,
    uniform: wgpu::Buffer,
    canvas: Canvas,
    pub width: u32,
    pub height: u32,
    brightness: f32,
}

enum Pipeline {
    Compute(wgpu::ComputePipeline),
    Render(wgpu::RenderPipeline, wgpu::BindGroup),
}

fn full_screen(
    device: &wgpu::Device,
    label: &str,
    module: &wgpu::ShaderModule,
    output: wgpu::TextureFormat,
) -> wgpu::RenderPipeline {
    device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: Some(label),
        layout: None,
        vertex: wgpu::VertexState {
            module,
            entry_point: Some("vs"),
            compilation_options: Default::default(),
            buffers: &[],
        },
        primitive: Default::default(),
        depth_stencil: None,
        multisample: Default::default(),
        fragment: Some(wgpu::FragmentState {
            module,
            entry_point: Some("fs"),
            compilation_options: Default::default(),
            targets: &[Some(output.into())],
        }),
        multiview_mask: None,
        cache: None,
    })
}

impl Renderer {
    pub fn new(
        device: &wgpu::Device,
        (width, height): (u32, u32),
        output: wgpu::TextureFormat,
        particles: usize,
        draw: Draw,
    ) -> Self {
        let shader = |label, src: &str| {
            device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(label),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            })
        };
        let uniform = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("camera"),
            size: 80,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let (first, second) = match draw {
            Draw::Splat => {
                let splat = shader("splat", SPLAT);
                let compute = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some("splat"),
                    layout: None,
                    module: &splat,
                    entry_point: Some("main"),
                    compilation_options: Default::default(),
                    cache: None,
                });
                let resolve = full_screen(device, "resolve", &shader("resolve", RESOLVE), output);
                (Pipeline::Compute(compute), resolve)
            }
            Draw::Points => {
                let points = points_pipeline(device, &shader("points", POINTS));
                let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("camera"),
                    layout: &points.get_bind_group_layout(0),
                    entries: &[wgpu::BindGroupEntry {
                        binding: 0,
                        resource: uniform.as_entire_binding(),
                    }],
                });
                let tonemap = full_screen(device, "tonemap", &shader("tonemap", TONEMAP), output);
                (Pipeline::Render(points, bind), tonemap)
            }
        };
        let canvas = canvas(device, draw, &second, &uniform, width, height);
        Self {
            draw,
            first,
            second,
            uniform,
            canvas,
            width,
            height,
            // Dim points when there are many, so the dense core does not wash out.
            brightness: (2.0e5 / particles as f32).clamp(0.01, 1.0) * 0.6,
        }
    }

    pub fn resize(&mut self, device: &wgpu::Device, width: u32, height: u32) {
        self.canvas = canvas(
            device,
            self.draw,
            &self.second,
            &self.uniform,
            width,
            height,
        );
        (self.width, self.height) = (width, height);
    }

    /// The frame's commands: `count` points of `positions` seen by `camera`, into `output`.
    pub fn encode(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        positions: &wgpu::Buffer,
        count: u32,
        camera: &Camera,
        output: &wgpu::TextureView,
    ) -> wgpu::CommandEncoder {
        let vp = camera.view_proj(self.width as f32 / self.height as f32);
        let mut words: Vec<f32> = vp.iter().flatten().copied().collect();
        words.extend([self.brightness, self.width as f32, self.height as f32, 0.0]);
        queue.write_buffer(&self.uniform, 0, bytemuck::cast_slice(&words));
        let mut enc = device.create_command_encoder(&Default::default());
        let attach = |view, clear| {
            Some(wgpu::RenderPassColorAttachment {
                view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations {
                    load: wgpu::LoadOp::Clear(clear),
                    store: wgpu::StoreOp::Store,
                },
            })
        };
        let second_bind = match (&self.first, &self.canvas) {
            (
                Pipeline::Compute(splat),
                Canvas::Splat {
                    counts,
                    resolve_bind,
                },
            ) => {
                let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("splat"),
                    layout: &splat.get_bind_group_layout(0),
                    entries: &[
                        wgpu::BindGroupEntry {
                            binding: 0,
                            resource: self.uniform.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 1,
                            resource: positions.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 2,
                            resource: counts.as_entire_binding(),
                        },
                    ],
                });
                enc.clear_buffer(counts, 0, None);
                let mut p = enc.begin_compute_pass(&Default::default());
                p.set_pipeline(splat);
                p.set_bind_group(0, &bind, &[]);
                let groups = count.div_ceil(256);
                p.dispatch_workgroups(groups.min(65535), groups.div_ceil(65535), 1);
                resolve_bind
            }
            (Pipeline::Render(points, bind), Canvas::Points { accum, accum_bind }) => {
                let mut p = enc.begin_render_pass(&wgpu::RenderPassDescriptor {
                    color_attachments: &[attach(accum, wgpu::Color::TRANSPARENT)],
                    ..Default::default()
                });
                p.set_pipeline(points);
                p.set_bind_group(0, bind, &[]);
                p.set_vertex_buffer(0, positions.slice(..));
                p.draw(0..count, 0..1);
                accum_bind
            }
            _ => unreachable!("the canvas is made for the renderer's draw"),
        };
        {
            let mut p = enc.begin_render_pass(&wgpu::RenderPassDescriptor {
                color_attachments: &[attach(output, wgpu::Color::BLACK)],
                ..Default::default()
            });
            p.set_pipeline(&self.second);
            p.set_bind_group(0, second_bind, &[]);
            p.draw(0..3, 0..1);
        }
        enc
    }
}

fn points_pipeline(device: &wgpu::Device, module: &wgpu::ShaderModule) -> wgpu::RenderPipeline {
    let add = wgpu::BlendComponent {
        src_factor: wgpu::BlendFactor::One,
        dst_factor: wgpu::BlendFactor::One,
        operation: wgpu::BlendOperation::Add,
    };
    device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: Some("points"),
        layout: None,
        vertex: wgpu::VertexState {
            module,
            entry_point: Some("vs"),
            compilation_options: Default::default(),
            buffers: &[Some(wgpu::VertexBufferLayout {
                array_stride: 16,
                step_mode: wgpu::VertexStepMode::Vertex,
                attributes: &wgpu::vertex_attr_array![0 => Float32x4],
            })],
        },
        primitive: wgpu::PrimitiveState {
            topology: wgpu::PrimitiveTopology::PointList,
            ..Default::default()
        },
        depth_stencil: None,
        multisample: Default::default(),
        fragment: Some(wgpu::FragmentState {
            module,
            entry_point: Some("fs"),
            compilation_options: Default::default(),
            targets: &[Some(wgpu::ColorTargetState {
                format: wgpu::TextureFormat::Rgba16Float,
                blend: Some(wgpu::BlendState {
                    color: add,
                    alpha: add,
                }),
                write_mask: wgpu::ColorWrites::ALL,
            })],
        }),
        multiview_mask: None,
        cache: None,
    })
}

fn canvas(
    device: &wgpu::Device,
    draw: Draw,
    second: &wgpu::RenderPipeline,
    uniform: &wgpu::Buffer,
    width: u32,
    height: u32,
) -> Canvas {
    let layout = second.get_bind_group_layout(0);
    match draw {
        Draw::Splat => {
            let counts = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("counts"),
                size: u64::from(width) * u64::from(height) * 8,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let resolve_bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("resolve"),
                layout: &layout,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: uniform.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: counts.as_entire_binding(),
                    },
                ],
            });
            Canvas::Splat {
                counts,
                resolve_bind,
            }
        }
        Draw::Points => {
            let texture = device.create_texture(&wgpu::TextureDescriptor {
                label: Some("accumulation"),
                size: wgpu::Extent3d {
                    width,
                    height,
                    depth_or_array_layers: 1,
                },
                mip_level_count: 1,
                sample_count: 1,
                dimension: wgpu::TextureDimension::D2,
                format: wgpu::TextureFormat::Rgba16Float,
                usage: wgpu::TextureUsages::RENDER_ATTACHMENT
                    | wgpu::TextureUsages::TEXTURE_BINDING,
                view_formats: &[],
            });
            let accum = texture.create_view(&Default::default());
            let accum_bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("accumulation"),
                layout: &layout,
                entries: &[wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::TextureView(&accum),
                }],
            });
            Canvas::Points { accum, accum_bind }
        }
    }
}

/// Particle storage and the step for one [`Mode`].
#[allow(clippy::large_enum_variant)] // one per scene
enum Store {
    Inline {
        wgpu: WgpuDevice,
        step: CuFunction,
        pos: Vec<WgpuSharedBuffer<[f32; 4]>>,
        vel: Vec<WgpuSharedBuffer<[f32; 4]>>,
    },
    ZeroCopy {
        pacer: WgpuFramePacer,
        pos: Vec<WgpuSharedBuffer<[f32; 4]>>,
        vel: Vec<WgpuSharedBuffer<[f32; 4]>>,
    },
    WriteBuffer {
        pos: [CudaSlice<f32>; 2],
        vel: [CudaSlice<f32>; 2],
        host: Vec<f32>,
        draw: wgpu::Buffer,
    },
    Wgsl {
        pipeline: wgpu::ComputePipeline,
        binds: [wgpu::BindGroup; 2],
        params: wgpu::Buffer,
        pos: [wgpu::Buffer; 2],
    },
}

/// The particles: where they live, how they step, and the frame loop that draws them.
pub struct Scene {
    store: Store,
    cuda: Option<(Arc<CudaStream>, CudaFunction)>,
    params: Params,
    count: usize,
    k: usize,
    next: u64,
    in_flight: VecDeque<wgpu::SubmissionIndex>,
    pub renderer: Renderer,
    pub camera: Camera,
    pub paused: bool,
}

impl Scene {
    /// `frames_in_flight` (2 or more) slots for the zero-copy path; the others ping-pong.
    pub fn new(
        bridge: Option<&WgpuBridge>,
        device: &wgpu::Device,
        mode: Mode,
        particles: usize,
        seed: u64,
        frames_in_flight: u32,
        renderer: Renderer,
    ) -> anyhow::Result<Self> {
        let (pos0, vel0) = initial_state(particles, seed);
        let params = Params::new(particles as u32);
        let k = frames_in_flight as usize;
        let cuda = match bridge {
            Some(b) if mode != Mode::Wgsl && mode != Mode::Inline => {
                let module =
                    cuvk::cuda::compile_module(b.bridge().cuda(), "particles.cu", PARTICLES_CU)?;
                Some((
                    b.bridge().cuda().new_stream()?,
                    module.load_function("step")?,
                ))
            }
            _ => None,
        };
        // K slots of shared position and velocity buffers, slot 0 holding the initial state.
        let slots = |b: &WgpuBridge| -> anyhow::Result<(Vec<_>, Vec<_>)> {
            let usage = wgpu::BufferUsages::VERTEX | wgpu::BufferUsages::STORAGE;
            let make = || b.create_buffer::<[f32; 4]>(particles, usage);
            let mut pos = (0..k).map(|_| make()).collect::<cuvk::Result<Vec<_>>>()?;
            let mut vel = (0..k).map(|_| make()).collect::<cuvk::Result<Vec<_>>>()?;
            pos[0].shared.cuda_write(&pos0)?;
            vel[0].shared.cuda_write(&vel0)?;
            Ok((pos, vel))
        };
        let store = match (mode, bridge) {
            (Mode::Inline, Some(b)) => {
                let vk = b.wgpu().vulkan();
                cuvk::vulkan::cuda_kernels_supported(vk)?;
                let ptx = cuvk::cuda::compile_ptx(b.bridge().cuda(), "particles.cu", PARTICLES_CU)?;
                let step = CuModule::from_ptx(vk, &ptx)?.function("step")?;
                let (pos, vel) = slots(b)?;
                Store::Inline {
                    wgpu: b.wgpu().clone(),
                    step,
                    pos,
                    vel,
                }
            }
            (Mode::ZeroCopy, Some(b)) => {
                let (pos, vel) = slots(b)?;
                let pacer = WgpuFramePacer::new(b, frames_in_flight)?;
                Store::ZeroCopy { pacer, pos, vel }
            }
            (Mode::WriteBuffer, Some(b)) => {
                let s = b.bridge().stream();
                let flat = |v: &[[f32; 4]]| v.iter().flatten().copied().collect::<Vec<f32>>();
                let (p, v) = (flat(&pos0), flat(&vel0));
                let draw = device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("positions"),
                    size: particles as u64 * 16,
                    usage: wgpu::BufferUsages::VERTEX
                        | wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                Store::WriteBuffer {
                    pos: [s.clone_htod(&p)?, s.alloc_zeros(p.len())?],
                    vel: [s.clone_htod(&v)?, s.alloc_zeros(v.len())?],
                    host: vec![0.0; p.len()],
                    draw,
                }
            }
            (Mode::Wgsl, _) => wgsl_store(device, &pos0, &vel0, params)?,
            (m, None) => anyhow::bail!("{m:?} needs CUDA"),
        };
        Ok(Self {
            store,
            cuda,
            params,
            count: particles,
            k,
            next: 1,
            in_flight: VecDeque::new(),
            renderer,
            camera: Camera::default(),
            paused: false,
        })
    }

    /// Simulates one step and draws it into `output`; returns the frame number.
    pub fn frame(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        output: &wgpu::TextureView,
        extra: Option<wgpu::CommandEncoder>,
    ) -> anyhow::Result<u64> {
        let params = self.params.for_frame(!self.paused);
        let count = self.count as u32;
        let cfg = LaunchConfig {
            grid_dim: (count.div_ceil(256).max(1), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let finish = |enc: wgpu::CommandEncoder, extra: Option<wgpu::CommandEncoder>| {
            let mut out = vec![enc.finish()];
            out.extend(extra.map(|e| e.finish()));
            out
        };
        let number = match &mut self.store {
            Store::Inline {
                wgpu,
                step,
                pos,
                vel,
            } => {
                let (cur, prev) = (
                    self.next as usize % self.k,
                    (self.next as usize - 1) % self.k,
                );
                let address = |b: &WgpuSharedBuffer<[f32; 4]>| {
                    b.shared
                        .device_address()
                        .map(KernelArg::address)
                        .context("shared buffers need device addresses for inline launches")
                };
                let args = [
                    address(&pos[prev])?,
                    address(&vel[prev])?,
                    address(&pos[cur])?,
                    address(&vel[cur])?,
                    KernelArg::value(&params),
                ];
                let launch = KernelLaunch {
                    function: step,
                    dims: LaunchDims::linear(count.div_ceil(256).max(1), 256),
                    args: &args,
                };
                // SAFETY: the four buffers behind the addresses live as long as the scene,
                // which waits for its submissions before it drops them (wait_idle, Drop);
                // the kernel touches `count` float4 of each; `cur` was last drawn K frames
                // ago, before the kernel in queue order (kernel_commands' barriers).
                let kernel = unsafe { wgpu.kernel_commands(&[launch]) }?;
                let draw = self.renderer.encode(
                    device,
                    queue,
                    &pos[cur].wgpu,
                    count,
                    &self.camera,
                    output,
                );
                let mut cbs = vec![kernel];
                cbs.extend(finish(draw, extra));
                self.in_flight.push_back(queue.submit(cbs));
                self.next
            }
            Store::ZeroCopy { pacer, pos, vel } => {
                let (stream, step) = self.cuda.as_ref().context("no CUDA")?;
                let frame = pacer.begin_frame()?;
                let (cur, prev) = (frame.slot(), (frame.slot() + self.k - 1) % self.k);
                pacer.cuda_acquire(&frame, stream)?;
                let ptrs =
                    [&pos[prev], &vel[prev], &pos[cur], &vel[cur]].map(|b| b.shared.cuda_ptr());
                let mut b = stream.launch_builder(step);
                b.arg(&ptrs[0])
                    .arg(&ptrs[1])
                    .arg(&ptrs[2])
                    .arg(&ptrs[3])
                    .arg(&params);
                // SAFETY: four live shared buffers of `count` float4; `cur` was released by wgpu
                // (cuda_acquire) and `prev` is only read.
                unsafe { b.launch(cfg) }?;
                pacer.cuda_release(&frame, stream)?;
                let enc = self.renderer.encode(
                    device,
                    queue,
                    &pos[cur].wgpu,
                    count,
                    &self.camera,
                    output,
                );
                let shared: [&dyn PacedBuffer; 1] = [&pos[cur]];
                // SAFETY: nothing else submits on this queue during the call.
                unsafe {
                    pacer.submit(
                        &frame,
                        &shared,
                        finish(enc, extra),
                        vk::PipelineStageFlags::VERTEX_INPUT,
                    )
                }?;
                frame.number()
            }
            Store::WriteBuffer {
                pos,
                vel,
                host,
                draw,
            } => {
                let (stream, step) = self.cuda.as_ref().context("no CUDA")?;
                let n = self.next as usize;
                let src = (n + 1) % 2;
                let (pos_a, pos_b) = pos.split_at_mut(1);
                let (vel_a, vel_b) = vel.split_at_mut(1);
                let (pi, po) = if src == 0 {
                    (&pos_a[0], &mut pos_b[0])
                } else {
                    (&pos_b[0], &mut pos_a[0])
                };
                let (vi, vo) = if src == 0 {
                    (&vel_a[0], &mut vel_b[0])
                } else {
                    (&vel_b[0], &mut vel_a[0])
                };
                let mut b = stream.launch_builder(step);
                b.arg(pi).arg(vi).arg(&mut *po).arg(vo).arg(&params);
                // SAFETY: four CUDA buffers of `count` float4.
                unsafe { b.launch(cfg) }?;
                // What a wgpu user does without interop: to the host, then into a wgpu buffer.
                stream.memcpy_dtoh(&*po, host.as_mut_slice())?;
                stream.synchronize()?;
                queue.write_buffer(draw, 0, bytemuck::cast_slice(host));
                let enc = self
                    .renderer
                    .encode(device, queue, draw, count, &self.camera, output);
                self.in_flight.push_back(queue.submit(finish(enc, extra)));
                self.next
            }
            Store::Wgsl {
                pipeline,
                binds,
                params: buf,
                pos,
            } => {
                let n = self.next as usize;
                queue.write_buffer(buf, 0, bytemuck::bytes_of(&params));
                let mut enc = device.create_command_encoder(&Default::default());
                {
                    let mut pass = enc.begin_compute_pass(&Default::default());
                    pass.set_pipeline(pipeline);
                    pass.set_bind_group(0, &binds[(n + 1) % 2], &[]);
                    let groups = count.div_ceil(256);
                    pass.dispatch_workgroups(groups.min(65535), groups.div_ceil(65535), 1);
                }
                let draw =
                    self.renderer
                        .encode(device, queue, &pos[n % 2], count, &self.camera, output);
                let mut cbs = vec![enc.finish()];
                cbs.extend(finish(draw, extra));
                self.in_flight.push_back(queue.submit(cbs));
                self.next
            }
        };
        self.next += 1;
        // Paths without a pacer keep at most K frames in flight.
        while self.in_flight.len() > self.k {
            if let Some(index) = self.in_flight.pop_front() {
                device.poll(wgpu::PollType::Wait {
                    submission_index: Some(index),
                    timeout: None,
                })?;
            }
        }
        Ok(number)
    }

    /// Waits until every frame is drawn.
    pub fn wait_idle(&mut self, device: &wgpu::Device) -> anyhow::Result<()> {
        if let Store::ZeroCopy { pacer, .. } = &self.store {
            pacer.wait_idle(std::time::Duration::from_secs(30))?;
        }
        if let Some((stream, _)) = &self.cuda {
            stream.synchronize()?;
        }
        device.poll(wgpu::PollType::wait_indefinitely())?;
        self.in_flight.clear();
        Ok(())
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        // Inline kernels write the shared buffers through device addresses, which wgpu does
        // not track: the memory must outlive them. Bounded: a wedged GPU is reported, not
        // waited for forever.
        if let Store::Inline { wgpu, .. } = &self.store {
            let wait = wgpu::PollType::Wait {
                submission_index: None,
                timeout: Some(std::time::Duration::from_secs(5)),
            };
            if let Err(e) = wgpu.device().poll(wait) {
                eprintln!("wgpu_particles: the GPU is not done after 5 s ({e})");
            }
        }
    }
}

fn wgsl_store(
    device: &wgpu::Device,
    pos0: &[[f32; 4]],
    vel0: &[[f32; 4]],
    params: Params,
) -> anyhow::Result<Store> {
    use wgpu::util::DeviceExt;
    let usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::VERTEX | wgpu::BufferUsages::COPY_DST;
    let init = |data: &[[f32; 4]]| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("particles"),
            contents: bytemuck::cast_slice(data),
            usage,
        })
    };
    let pos = [init(pos0), init(pos0)];
    let vel = [init(vel0), init(vel0)];
    let params_buf = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("params"),
        contents: bytemuck::bytes_of(&params),
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
    });
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("sim"),
        source: wgpu::ShaderSource::Wgsl(SIM.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("sim"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let bind = |src: usize| {
        let dst = 1 - src;
        let entries: Vec<wgpu::BindGroupEntry> =
            [&pos[src], &vel[src], &pos[dst], &vel[dst], &params_buf]
                .iter()
                .enumerate()
                .map(|(i, b)| wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource: b.as_entire_binding(),
                })
                .collect();
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("sim"),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    };
    let binds = [bind(0), bind(1)];
    let [p0, p1] = pos;
    Ok(Store::Wgsl {
        pipeline,
        binds,
        params: params_buf,
        pos: [p0, p1],
    })
}
