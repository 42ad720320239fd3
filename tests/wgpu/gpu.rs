//! CUDA and wgpu on one GPU through cuvk's wgpu integration: CUDA writes and wgpu reads
//! (compute and render), wgpu writes and CUDA reads, exactly; 10,000 frames at K = 1..3 with
//! every element checked by wgpu, and a negative control that removes wgpu's wait; CUDA kernels
//! launched inside wgpu's queue; a device wgpu opened alone refused for CUDA; drops in every
//! order. Skips with a printed reason where there is no GPU (REQUIRE_GPU=1 makes it fail).

use crate::support;
use cuvk_dev::assert_err;
use cuvk_dev::kernels;
use cuvk_dev::testing as common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cuvk::ash::vk;
use cuvk::vulkan::{CuModule, KernelArg, LaunchDims, SemaphoreOp};
use cuvk::wgpu::{
    wgpu, KernelLaunch, PacedBuffer, WgpuBridge, WgpuDevice, WgpuFramePacer, WgpuSharedBuffer,
};
use cuvk::{Error, ExtensionState};
use kernels::Kernels;
use support::{checker_workgroups, pattern, Checker, Expect, Writer};

fn usage() -> wgpu::BufferUsages {
    wgpu::BufferUsages::STORAGE
        | wgpu::BufferUsages::VERTEX
        | wgpu::BufferUsages::COPY_SRC
        | wgpu::BufferUsages::COPY_DST
}

const RENDER: &str = r#"
struct Out {
    @builtin(position) position: vec4<f32>,
    @location(0) @interpolate(flat) value: u32,
};
@vertex
fn vs(@builtin(vertex_index) i: u32, @location(0) value: u32) -> Out {
    let w = 1024u;
    let x = (f32(i % w) + 0.5) / f32(w) * 2.0 - 1.0;
    let y = 1.0 - (f32(i / w) + 0.5) / f32(w) * 2.0;
    var out: Out;
    out.position = vec4<f32>(x, y, 0.0, 1.0);
    out.value = value;
    return out;
}
@fragment
fn fs(in: Out) -> @location(0) vec4<u32> {
    return vec4<u32>(in.value, 0u, 0u, 1u);
}
"#;

/// Draws element `i` of `buf` (1024 × 1024 u32 elements, as a vertex buffer) as a point into
/// pixel `i` of an R32Uint target and returns the pixels.
fn render_points(device: &wgpu::Device, queue: &wgpu::Queue, buf: &wgpu::Buffer) -> Vec<u32> {
    let side = 1024u32;
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("points"),
        source: wgpu::ShaderSource::Wgsl(RENDER.into()),
    });
    let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: Some("points"),
        layout: None,
        vertex: wgpu::VertexState {
            module: &module,
            entry_point: Some("vs"),
            compilation_options: Default::default(),
            buffers: &[Some(wgpu::VertexBufferLayout {
                array_stride: 4,
                step_mode: wgpu::VertexStepMode::Vertex,
                attributes: &wgpu::vertex_attr_array![0 => Uint32],
            })],
        },
        primitive: wgpu::PrimitiveState {
            topology: wgpu::PrimitiveTopology::PointList,
            ..Default::default()
        },
        depth_stencil: None,
        multisample: Default::default(),
        fragment: Some(wgpu::FragmentState {
            module: &module,
            entry_point: Some("fs"),
            compilation_options: Default::default(),
            targets: &[Some(wgpu::TextureFormat::R32Uint.into())],
        }),
        multiview_mask: None,
        cache: None,
    });
    let target = device.create_texture(&wgpu::TextureDescriptor {
        label: Some("points"),
        size: wgpu::Extent3d {
            width: side,
            height: side,
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::R32Uint,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        view_formats: &[],
    });
    let view = target.create_view(&Default::default());
    let out = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("pixels"),
        size: u64::from(side * side) * 4,
        usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: None,
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: &view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations {
                    load: wgpu::LoadOp::Clear(wgpu::Color::TRANSPARENT),
                    store: wgpu::StoreOp::Store,
                },
            })],
            ..Default::default()
        });
        pass.set_pipeline(&pipeline);
        pass.set_vertex_buffer(0, buf.slice(..));
        pass.draw(0..side * side, 0..1);
    }
    enc.copy_texture_to_buffer(
        target.as_image_copy(),
        wgpu::TexelCopyBufferInfo {
            buffer: &out,
            layout: wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(side * 4),
                rows_per_image: None,
            },
        },
        target.size(),
    );
    queue.submit([enc.finish()]);
    support::read_words(device, queue, &out, u64::from(side * side) * 4)
}

#[test]
fn cuda_writes_wgpu_reads_and_wgpu_writes_cuda_reads_exactly() {
    let _serial = common::serial();
    let Some((bridge, errors)) = support::bridge("cuda_writes_wgpu_reads") else {
        return;
    };
    let (device, queue) = (bridge.device(), bridge.queue());
    let k = Kernels::load(bridge.bridge().cuda()).unwrap();
    let stream = bridge.bridge().stream().clone();
    let n = 1usize << 20; // 1024 × 1024: one pixel per element in the render check
    let mut buf: WgpuSharedBuffer<u32> = bridge.create_buffer(n, usage()).unwrap();

    // CUDA writes; wgpu reads in a compute shader, in a render pass (as a vertex buffer),
    // and by a copy.
    k.write_pattern(&stream, buf.shared.kernel_arg(), n as u64, 11)
        .unwrap();
    stream.synchronize().unwrap();
    let checker = Checker::new(device);
    queue.submit([checker.encode(device, &buf.wgpu, n as u32, Expect::Pattern(11))]);
    let [bad, groups, last, _] = checker.read(device, queue);
    assert_eq!(
        (bad, groups),
        (0, checker_workgroups(n as u32)),
        "compute: last bad {last:#x}"
    );
    let pixels = render_points(device, queue, &buf.wgpu);
    let bad = (0..n).filter(|&i| pixels[i] != pattern(i, 11)).count();
    assert_eq!(
        bad, 0,
        "render: {bad} of {n} pixels differ from what CUDA wrote"
    );
    let copied = support::read_words(device, queue, &buf.wgpu, n as u64 * 4);
    assert!((0..n).all(|i| copied[i] == pattern(i, 11)), "copy");

    // wgpu writes; CUDA reads.
    let writer = Writer::new(device);
    queue.submit([writer.encode(device, &buf.wgpu, n as u32, 12)]);
    support::wait(device);
    let got = buf.shared.cuda_read().unwrap();
    let bad = (0..n).filter(|&i| got[i] != pattern(i, 12)).count();
    assert_eq!(
        bad, 0,
        "{bad} of {n} elements CUDA read differ from what wgpu wrote"
    );
    buf.shared.cuda_write(&vec![5u32; n]).unwrap();
    assert!(support::read_words(device, queue, &buf.wgpu, n as u64 * 4)
        .iter()
        .all(|&v| v == 5));
    drop(buf);
    support::wait(device);
    errors.assert_none();
    support::assert_clean(bridge.wgpu());
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    None,
    /// wgpu's submission does not wait for CUDA's release of the frame.
    SkipWgpuWait,
}

struct Outcome {
    result: [u32; 4],
    expected_groups: u64,
    per_frame_us: f64,
}

fn run_frames(
    bridge: &WgpuBridge,
    k: &Kernels,
    elements: usize,
    frames_in_flight: u32,
    frames: u64,
    fault: Fault,
) -> Outcome {
    let (device, queue) = (bridge.device(), bridge.queue());
    let stream = bridge.bridge().cuda().new_stream().unwrap();
    let mut pacer = WgpuFramePacer::new(bridge, frames_in_flight).unwrap();
    let slots: Vec<WgpuSharedBuffer<u32>> = (0..frames_in_flight)
        .map(|_| bridge.create_buffer(elements, usage()).unwrap())
        .collect();
    let checker = Checker::new(device);
    let t = Instant::now();
    for _ in 0..frames {
        let frame = pacer.begin_frame().unwrap();
        let slot = &slots[frame.slot()];
        pacer.cuda_acquire(&frame, &stream).unwrap();
        k.fill(
            &stream,
            slot.shared.kernel_arg(),
            elements as u64,
            frame.number() as u32,
        )
        .unwrap();
        pacer.cuda_release(&frame, &stream).unwrap();
        let check = checker.encode(
            device,
            &slot.wgpu,
            elements as u32,
            Expect::All(frame.number() as u32),
        );
        let stage = vk::PipelineStageFlags::COMPUTE_SHADER;
        match fault {
            Fault::None => {
                // SAFETY: nothing else submits on this queue during the call.
                unsafe { pacer.submit(&frame, &[slot as &dyn PacedBuffer], [check], stage) }
                    .unwrap();
            }
            Fault::SkipWgpuWait => {
                let p = pacer.pacer();
                let signals = [p.vulkan_done(), p.frames_complete()].map(|s| SemaphoreOp {
                    semaphore: s,
                    value: frame.number(),
                    stage: vk::PipelineStageFlags::empty(),
                });
                // SAFETY: nothing else submits on this queue during the call.
                unsafe { bridge.wgpu().submit([check], &[], &signals) }.unwrap();
            }
        }
    }
    pacer.wait_idle(Duration::from_secs(60)).unwrap();
    stream.synchronize().unwrap();
    let per_frame_us = t.elapsed().as_secs_f64() * 1e6 / frames as f64;
    let result = checker.read(device, queue);
    Outcome {
        result,
        expected_groups: frames * u64::from(checker_workgroups(elements as u32)),
        per_frame_us,
    }
}

#[test]
fn ten_thousand_frames_k1_to_k3_wgpu_reads_exactly_what_cuda_wrote() {
    let _serial = common::serial();
    let Some((bridge, errors)) = support::bridge("ten_thousand_wgpu_frames") else {
        return;
    };
    let k = Kernels::load(bridge.bridge().cuda()).unwrap();
    for frames_in_flight in 1..=3 {
        let o = run_frames(&bridge, &k, 1 << 20, frames_in_flight, 10_000, Fault::None);
        let [bad, groups, last, _] = o.result;
        println!(
            "K={frames_in_flight}: 10,000 frames of 4 MiB, {:.1} us per frame, {bad} wrong elements",
            o.per_frame_us
        );
        assert_eq!(bad, 0, "K={frames_in_flight}: last bad value {last}");
        assert_eq!(
            u64::from(groups),
            o.expected_groups,
            "every element checked"
        );
    }
    support::wait(bridge.device());
    errors.assert_none();
    support::assert_clean(bridge.wgpu());
}

#[test]
fn without_the_wgpu_wait_wgpu_sees_unfinished_cuda_writes() {
    let _serial = common::serial();
    let Some((bridge, errors)) = support::bridge("without_the_wgpu_wait") else {
        return;
    };
    let k = Kernels::load(bridge.bridge().cuda()).unwrap();
    let o = run_frames(&bridge, &k, 16 << 20, 2, 300, Fault::SkipWgpuWait);
    let [bad, _, last, any] = o.result;
    println!("negative control: {bad} wrong elements (last {last}) in 300 frames of 64 MiB");
    assert_eq!(
        any, 1,
        "removing the wait must be caught (no wrong element seen)"
    );
    support::wait(bridge.device());
    errors.assert_none();
}

#[test]
fn cuda_kernels_in_wgpu_command_buffers_are_read_by_wgpu() {
    let _serial = common::serial();
    let Some((bridge, errors)) = support::bridge("cuda_kernels_in_wgpu") else {
        return;
    };
    let vk = bridge.wgpu().vulkan();
    if let Err(e) = cuvk::vulkan::cuda_kernels_supported(vk) {
        eprintln!("SKIP cuda_kernels_in_wgpu: {e}");
        return;
    }
    let (device, queue) = (bridge.device(), bridge.queue());
    let ptx = cuvk::cuda::compile_ptx(
        bridge.bridge().cuda(),
        "inline.cu",
        include_str!("../../shaders/inline.cu"),
    )
    .unwrap();
    let module = CuModule::from_ptx(vk, &ptx).unwrap();
    let stamp = module.function("stamp").unwrap();
    let n = 4usize << 20;
    let buf: WgpuSharedBuffer<u32> = bridge.create_buffer(n, usage()).unwrap();
    let address = KernelArg::address(buf.shared.device_address().expect("device address"));
    let checker = Checker::new(device);
    let frames = 300u32;
    for f in 0..frames {
        let args = [
            address.clone(),
            KernelArg::value(&(n as u64)),
            KernelArg::value(&f),
        ];
        let launch = KernelLaunch {
            function: &stamp,
            dims: LaunchDims::linear(1024, 256),
            args: &args,
        };
        // SAFETY: the buffer behind the address lives until the wait below; the kernel writes
        // only its n words; the module and function outlive the submissions.
        let kernel = unsafe { bridge.wgpu().kernel_commands(&[launch]) }.unwrap();
        let check = checker.encode(device, &buf.wgpu, n as u32, Expect::Stamp(f));
        queue.submit([kernel, check]);
    }
    let [bad, groups, last, _] = checker.read(device, queue);
    assert_eq!(bad, 0, "last bad value {last}");
    assert_eq!(groups, frames * checker_workgroups(n as u32));
    // A launch that does not match the kernel is refused before anything is recorded.
    let short = [address.clone()];
    let wrong = KernelLaunch {
        function: &stamp,
        dims: LaunchDims::linear(1, 32),
        args: &short,
    };
    assert_err!(
        // SAFETY: refused before recording.
        unsafe { bridge.wgpu().kernel_commands(&[wrong]) },
        Error::Launch(cuvk::LaunchError::ArgumentCount { given: 1, .. })
    );
    drop((buf, stamp, module));
    support::wait(device);
    errors.assert_none();
    support::assert_clean(bridge.wgpu());
}

#[test]
fn a_device_wgpu_opened_alone_is_refused_for_cuda_by_extension_name() {
    let _serial = common::serial();
    let Some((bridge, _)) = support::bridge("a_device_wgpu_opened_alone") else {
        return;
    };
    let (instance, _) = cuvk::wgpu::create_instance(cuvk::vulkan::Validation::Required).unwrap();
    let adapter = support::ready(instance.enumerate_adapters(wgpu::Backends::VULKAN))
        .into_iter()
        .find(|a| cuvk::wgpu::adapter_uuid(a).ok() == Some(bridge.uuid()))
        .expect("the CUDA GPU's adapter");
    let (device, queue) = support::ready(adapter.request_device(&Default::default())).unwrap();
    let plain = WgpuDevice::adopt(&device, &queue).unwrap();
    let e = assert_err!(
        WgpuBridge::from_parts(plain, bridge.bridge().cuda().clone()),
        Error::MissingExtension {
            state: ExtensionState::NotEnabled,
            ..
        }
    );
    assert!(e.to_string().contains("semaphore"), "{e}");
    // Opened by cuvk, the same adapter pairs.
    let opened = WgpuDevice::open(&adapter, &Default::default()).unwrap();
    WgpuBridge::from_parts(opened, bridge.bridge().cuda().clone()).unwrap();
}

#[test]
fn shared_buffers_drop_in_every_order_with_work_in_flight() {
    let _serial = common::serial();
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
        let Some((bridge, errors)) = support::bridge("shared_buffers_drop_in_every_order") else {
            return;
        };
        let k = Kernels::load(bridge.bridge().cuda()).unwrap();
        let n = 4usize << 20;
        let buf: WgpuSharedBuffer<u32> = bridge.create_buffer(n, usage()).unwrap();
        let vk = bridge.wgpu().vulkan().clone();
        let weak = Arc::downgrade(&vk);
        // CUDA and wgpu work in flight on the buffer when the drops begin.
        let stream = bridge.bridge().stream().clone();
        k.fill(&stream, buf.shared.kernel_arg(), n as u64, 1)
            .unwrap();
        stream.synchronize().unwrap();
        let writer = Writer::new(bridge.device());
        bridge
            .queue()
            .submit([writer.encode(bridge.device(), &buf.wgpu, n as u32, 2)]);
        drop(writer);
        let WgpuSharedBuffer { wgpu, shared } = buf;
        let mut parts: Vec<Option<Box<dyn std::any::Any>>> = vec![
            Some(Box::new(wgpu)),
            Some(Box::new(shared)),
            Some(Box::new(bridge)),
        ];
        for &i in &order {
            drop(parts[i].take());
        }
        let msgs = vk.validation_messages();
        assert!(msgs.is_empty(), "order {order:?}:\n{}", msgs.join("\n"));
        drop(vk);
        assert!(
            weak.upgrade().is_none(),
            "order {order:?}: the device was kept alive"
        );
        errors.assert_none();
    }
}
