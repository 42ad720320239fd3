//! Helpers shared by the wgpu tests: a validated wgpu device that skips with a printed reason
//! where there is none, a WGSL pattern writer and checker, and exact readback through a
//! mappable wgpu buffer.

use std::future::Future;
use std::sync::{Arc, Mutex};

use cuvk::vulkan::{DeviceChoice, Validation, VulkanContext};
use cuvk::wgpu::{wgpu, WgpuConfig, WgpuDevice};

fn required(var: &str) -> bool {
    std::env::var(var).as_deref() == Ok("1")
}

/// Runs a wgpu future that is ready at once (wgpu-core's are, on native backends).
#[clippy::msrv = "1.87"] // wgpu 30's own minimum
pub fn ready<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("a wgpu future did not complete at once"),
    }
}

/// A wgpu device under the validation layer on the same physical device as `ctx` (or the
/// first that can share memory), every wgpu error collected instead of panicking; `None`
/// (printed) where there is no usable Vulkan device, a failure with REQUIRE_VULKAN=1.
pub fn device(test: &str, ctx: Option<&VulkanContext>) -> Option<(WgpuDevice, Errors)> {
    let config = WgpuConfig {
        validation: Validation::Required,
        device: ctx.map_or(DeviceChoice::First, |c| {
            DeviceChoice::Uuid(c.info().device_uuid)
        }),
        ..Default::default()
    };
    match WgpuDevice::new(config) {
        Ok(w) => {
            let errors = Errors::install(w.device());
            Some((w, errors))
        }
        Err(e) if e.is_unavailable() && !required("REQUIRE_VULKAN") && !required("REQUIRE_GPU") => {
            eprintln!("SKIP {test}: no usable wgpu Vulkan device: {e}");
            None
        }
        Err(e) => panic!("{test}: wgpu Vulkan device required but not usable: {e}"),
    }
}

/// wgpu errors reported to the device's uncaptured-error handler.
#[derive(Clone, Default)]
pub struct Errors(Arc<Mutex<Vec<String>>>);

impl Errors {
    pub fn install(device: &wgpu::Device) -> Self {
        let errors = Self::default();
        let sink = errors.0.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            sink.lock().unwrap().push(e.to_string());
        }));
        errors
    }
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
    /// Fails if wgpu reported anything.
    pub fn assert_none(&self) {
        let e = self.take();
        assert!(e.is_empty(), "wgpu errors:\n{}", e.join("\n"));
    }
}

/// A CUDA + wgpu bridge under the validation layer, wgpu errors collected; `None` (printed)
/// where there is no CUDA GPU, a failure with REQUIRE_GPU=1.
pub fn bridge(test: &str) -> Option<(cuvk::wgpu::WgpuBridge, Errors)> {
    use cuvk::wgpu::{WgpuBridge, WgpuBridgeConfig};
    match WgpuBridge::new(WgpuBridgeConfig {
        validation: Validation::Required,
        ..Default::default()
    }) {
        Ok(b) => {
            let errors = Errors::install(b.device());
            Some((b, errors))
        }
        Err(e) if e.is_unavailable() && !required("REQUIRE_GPU") => {
            eprintln!("SKIP {test}: no CUDA + wgpu GPU: {e}");
            None
        }
        Err(e) => panic!("{test}: GPU required but not usable: {e}"),
    }
}

/// Fails if the validation layer said anything on the wgpu device (or was not active).
pub fn assert_clean(w: &WgpuDevice) {
    let ctx = w.vulkan();
    assert!(
        ctx.validation_enabled(),
        "validation layer not active on the wgpu device"
    );
    let msgs = w.validation_messages();
    assert!(msgs.is_empty(), "validation messages:\n{}", msgs.join("\n"));
}

/// Element `i` of the test pattern (as dev/src/kernels.rs and roundtrip.cu).
pub fn pattern(i: usize, seed: u32) -> u32 {
    (i as u32).wrapping_mul(2_654_435_761) ^ seed
}

const WRITER: &str = r#"
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@group(0) @binding(1) var<uniform> seed: vec4<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x + id.y * 65535u * 64u;
    if (i < arrayLength(&data)) {
        data[i] = (i * 2654435761u) ^ seed.x;
    }
}
"#;

const CHECKER: &str = r#"
@group(0) @binding(0) var<storage, read> data: array<u32>;
// x: the value; y: 0 every element is x, 1 element i is pattern(i, x), 2 element i is x + i.
@group(0) @binding(1) var<uniform> expected: vec4<u32>;
// 0: mismatching elements, 1: workgroups run, 2: last bad value, 3: 1 once any mismatched.
@group(0) @binding(2) var<storage, read_write> result: array<atomic<u32>, 4>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    if (li == 0u) {
        atomicAdd(&result[1], 1u);
    }
    let i = id.x + id.y * 65535u * 256u;
    if (i < arrayLength(&data)) {
        var want = expected.x;
        if (expected.y == 1u) {
            want = (i * 2654435761u) ^ expected.x;
        } else if (expected.y == 2u) {
            want = expected.x + i;
        }
        let v = data[i];
        if (v != want) {
            atomicAdd(&result[0], 1u);
            atomicStore(&result[2], v);
            atomicOr(&result[3], 1u);
        }
    }
}
"#;

/// What a [`Checker`] expects element `i` to be.
#[derive(Clone, Copy, Debug)]
pub enum Expect {
    /// Every element is this value.
    All(u32),
    /// `pattern(i, seed)`.
    Pattern(u32),
    /// `value + i` (the inline `stamp` kernel).
    Stamp(u32),
}

impl Expect {
    fn words(self) -> [u32; 4] {
        match self {
            Expect::All(v) => [v, 0, 0, 0],
            Expect::Pattern(s) => [s, 1, 0, 0],
            Expect::Stamp(v) => [v, 2, 0, 0],
        }
    }
}

/// The workgroups a checker dispatches for `n` elements.
pub fn checker_workgroups(n: u32) -> u32 {
    let (x, y) = workgroups(n, 256);
    x * y
}

fn workgroups(n: u32, size: u32) -> (u32, u32) {
    let groups = n.div_ceil(size);
    (groups.min(65535), groups.div_ceil(65535))
}

/// A compute pipeline that writes `pattern(i, seed)` into every element of a storage buffer.
pub struct Writer {
    pipeline: wgpu::ComputePipeline,
}

impl Writer {
    pub fn new(device: &wgpu::Device) -> Self {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("writer"),
            source: wgpu::ShaderSource::Wgsl(WRITER.into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("writer"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        Self { pipeline }
    }

    /// A command buffer writing the pattern into the `n` words of `buf`.
    pub fn encode(
        &self,
        device: &wgpu::Device,
        buf: &wgpu::Buffer,
        n: u32,
        seed: u32,
    ) -> wgpu::CommandBuffer {
        let uniform = uniform(device, [seed, 0, 0, 0]);
        let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &self.pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: buf.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: uniform.as_entire_binding(),
                },
            ],
        });
        let mut enc = device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &bind, &[]);
            let (x, y) = workgroups(n, 64);
            pass.dispatch_workgroups(x, y, 1);
        }
        enc.finish()
    }
}

/// A compute pipeline counting the elements of a buffer that differ from what is expected into
/// a result buffer (mismatches, workgroups run, last bad value, any-mismatch flag),
/// accumulated across frames.
pub struct Checker {
    pipeline: wgpu::ComputePipeline,
    pub result: wgpu::Buffer,
}

impl Checker {
    pub fn new(device: &wgpu::Device) -> Self {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("checker"),
            source: wgpu::ShaderSource::Wgsl(CHECKER.into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("checker"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let result = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("checker result"),
            size: 16,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        Self { pipeline, result }
    }

    /// A command buffer checking the `n` words of `buf` against `expected`.
    pub fn encode(
        &self,
        device: &wgpu::Device,
        buf: &wgpu::Buffer,
        n: u32,
        expected: Expect,
    ) -> wgpu::CommandBuffer {
        let uniform = uniform(device, expected.words());
        let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &self.pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: buf.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: uniform.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: self.result.as_entire_binding(),
                },
            ],
        });
        let mut enc = device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &bind, &[]);
            let (x, y) = workgroups(n, 256);
            pass.dispatch_workgroups(x, y, 1);
        }
        enc.finish()
    }

    /// (mismatches, workgroups run, last bad value, any mismatch).
    pub fn read(&self, device: &wgpu::Device, queue: &wgpu::Queue) -> [u32; 4] {
        let r = read_words(device, queue, &self.result, 16);
        [r[0], r[1], r[2], r[3]]
    }
}

fn uniform(device: &wgpu::Device, words: [u32; 4]) -> wgpu::Buffer {
    let buf = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("value"),
        size: 16,
        usage: wgpu::BufferUsages::UNIFORM,
        mapped_at_creation: true,
    });
    buf.slice(..)
        .get_mapped_range_mut()
        .expect("mapped at creation")
        .copy_from_slice(bytemuck::cast_slice(&words));
    buf.unmap();
    buf
}

/// Copies `size` bytes of `buf` into a mappable buffer, waits, and returns the words.
pub fn read_words(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    buf: &wgpu::Buffer,
    size: u64,
) -> Vec<u32> {
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(buf, 0, &staging, 0, size);
    queue.submit([enc.finish()]);
    let slice = staging.slice(..);
    slice.map_async(wgpu::MapMode::Read, |r| r.expect("map"));
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("poll");
    let words =
        bytemuck::cast_slice::<u8, u32>(&slice.get_mapped_range().expect("mapped")).to_vec();
    staging.unmap();
    words
}

/// Waits until wgpu has finished everything submitted.
pub fn wait(device: &wgpu::Device) {
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("poll");
}
