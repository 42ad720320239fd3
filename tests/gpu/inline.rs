//! CUDA kernels launched inside Vulkan command buffers (`VK_NVX_binary_import`) on a real
//! GPU: data both ways, shared memory and atomics, wrong launches refused before the driver,
//! thousands of frames checked element by element with a negative control (the barrier
//! removed), and the CUDA-context path and the inline path on one buffer in one frame.
//! Skips with a printed reason where there is no GPU or no `VK_NVX_binary_import`.

use cuvk_dev::assert_err;
use cuvk_dev::checker;
use cuvk_dev::kernels;
use cuvk_dev::testing as common;

use std::sync::Arc;
use std::time::Duration;

use checker::Checker;
use cuvk::ash::vk;
use cuvk::vulkan::{
    record_kernel_barrier, CuFunction, CuModule, KernelArg, LaunchDims, Semaphore, SemaphoreDesc,
    SemaphoreOp,
};
use cuvk::{Bridge, BufferUsage, Error, FramePacer, LaunchError, SharedBuffer};

const SOURCE: &str = include_str!("../../shaders/inline.cu");

/// The bridge and the PTX of `shaders/inline.cu`, or `None` (printed) where the GPU lacks
/// `VK_NVX_binary_import`.
pub(crate) fn inline_ptx(test: &str) -> Option<(Bridge, String)> {
    let bridge = common::bridge(test)?;
    if let Err(e) = cuvk::vulkan::cuda_kernels_supported(bridge.vulkan()) {
        assert!(e.is_unavailable(), "{test}: {e}");
        eprintln!("SKIP {test}: {e}");
        return None;
    }
    let ptx = cuvk::cuda::compile_ptx(bridge.cuda(), "inline.cu", SOURCE).unwrap();
    Some((bridge, ptx))
}

/// The bridge and the inline module, or `None` (printed) where the GPU lacks the extension.
fn setup(test: &str) -> Option<(Bridge, Arc<CuModule>)> {
    let (bridge, ptx) = inline_ptx(test)?;
    let module = CuModule::from_ptx(bridge.vulkan(), &ptx).unwrap();
    Some((bridge, module))
}

fn addr<T: bytemuck::Pod>(b: &SharedBuffer<T>) -> KernelArg {
    KernelArg::address(
        b.device_address()
            .expect("shared buffers have device addresses"),
    )
}

/// Records `f` into a one-shot command buffer, then a kernel barrier, submits and waits.
fn run_inline(bridge: &Bridge, f: &CuFunction, dims: LaunchDims, args: &[KernelArg]) {
    let ctx = bridge.vulkan();
    // SAFETY: the buffers behind `args` outlive this synchronous submission.
    unsafe {
        ctx.submit_and_wait(|_, cmd| {
            f.record_launch(cmd, &dims, args).unwrap();
            record_kernel_barrier(ctx, cmd);
        })
    }
    .unwrap();
}

#[test]
fn kernel_writes_vulkan_reads_and_vulkan_writes_kernel_reads() {
    let _serial = common::serial();
    let Some((bridge, module)) = setup("kernel_writes_vulkan_reads") else {
        return;
    };
    let n = 16usize << 20; // 16M words
    let mut buf: SharedBuffer<u32> = bridge
        .create_buffer(n, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    let stamp = module.function("stamp").unwrap();
    let args = [
        addr(&buf),
        KernelArg::value(&(n as u64)),
        KernelArg::value(&1000u32),
    ];
    run_inline(&bridge, &stamp, LaunchDims::linear(1024, 256), &args);
    let got = common::read_via_vulkan(bridge.vulkan(), &buf);
    let bad = (0..n)
        .filter(|&i| got[i] != 1000u32.wrapping_add(i as u32))
        .count();
    assert_eq!(
        bad, 0,
        "{bad} of {n} words wrong after the inline kernel's write"
    );

    // Vulkan fills, the inline kernel adds, the CUDA context reads: one SharedBuffer serves
    // both CUDA paths.
    let bytes = buf.byte_size();
    bridge.vulkan().fill_buffer(&mut buf, 0, bytes, 7).unwrap();
    let add = module.function("add_in_place").unwrap();
    let args = [
        addr(&buf),
        KernelArg::value(&(n as u64)),
        KernelArg::value(&5u32),
    ];
    run_inline(&bridge, &add, LaunchDims::linear(1024, 256), &args);
    let got = buf.cuda_read().unwrap();
    assert!(
        got.iter().all(|&w| w == 12),
        "CUDA read of Vulkan fill + inline add"
    );
    common::assert_clean(bridge.vulkan());
}

#[test]
fn shared_memory_and_atomics_give_the_right_sum() {
    let _serial = common::serial();
    let Some((bridge, module)) = setup("shared_memory_and_atomics") else {
        return;
    };
    let n = 1usize << 22;
    let mut data: SharedBuffer<u32> = bridge
        .create_buffer(n, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    let values: Vec<u32> = (0..n as u32).map(|i| i % 1000).collect();
    data.cuda_write(&values).unwrap();
    let want: u64 = values.iter().map(|&v| u64::from(v)).sum();
    for (kernel, shared) in [("sum_shared_atomic", 0u32), ("sum_dynamic_shared", 256 * 8)] {
        let mut sum: SharedBuffer<u64> = bridge
            .create_buffer(1, BufferUsage::STORAGE_BUFFER)
            .unwrap();
        sum.cuda_write(&[0]).unwrap();
        let f = module.function(kernel).unwrap();
        let dims = LaunchDims {
            shared_mem_bytes: shared,
            ..LaunchDims::linear(264, 256)
        };
        run_inline(
            &bridge,
            &f,
            dims,
            &[addr(&data), KernelArg::value(&(n as u64)), addr(&sum)],
        );
        assert_eq!(sum.cuda_read().unwrap()[0], want, "{kernel}");
        eprintln!("{kernel}: sum {want} correct (shared memory {shared} dynamic bytes + atomics)");
    }
    // printf: launched and completed; whether its text reaches stdout is reported by the
    // test log (look for "cuvk inline kernel says 42").
    let hello = module.function("hello").unwrap();
    run_inline(
        &bridge,
        &hello,
        LaunchDims::linear(1, 32),
        &[KernelArg::value(&42u32)],
    );
    common::assert_clean(bridge.vulkan());
}

#[test]
fn wrong_launches_are_refused_before_the_driver() {
    let _serial = common::serial();
    let Some((bridge, module)) = setup("wrong_launches_are_refused") else {
        return;
    };
    let buf: SharedBuffer<u32> = bridge
        .create_buffer(1024, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    let stamp = module.function("stamp").unwrap();
    let n = KernelArg::value(&1024u64);
    let v = KernelArg::value(&1u32);
    let ok = LaunchDims::linear(4, 256);
    let check = |dims: LaunchDims, args: &[KernelArg]| stamp.validate_launch(&dims, args);
    let e = assert_err!(
        check(ok, &[addr(&buf), n.clone()]),
        Error::Launch(LaunchError::ArgumentCount {
            given: 2,
            expected: 3,
            ..
        })
    );
    assert!(
        e.to_string()
            .contains("2 arguments given, the kernel takes 3"),
        "{e}"
    );
    let e = assert_err!(
        check(ok, &[addr(&buf), KernelArg::value(&1024u32), v.clone()]),
        Error::Launch(LaunchError::ArgumentSize {
            index: 1,
            given: 4,
            ..
        })
    );
    assert!(e.to_string().contains("argument 1 is 4 bytes"), "{e}");
    assert_err!(
        check(ok, &[addr(&buf), n.clone(), KernelArg::address(1)]),
        Error::Launch(LaunchError::ArgumentSize {
            index: 2,
            given: 8,
            expected: 4,
            ..
        })
    );
    let args = [addr(&buf), n.clone(), v.clone()];
    assert_err!(
        check(LaunchDims::linear(4, 2048), &args),
        Error::Launch(LaunchError::ThreadsPerBlock { threads: 2048, .. })
    );
    assert_err!(
        check(LaunchDims::linear(0, 256), &args),
        Error::Launch(LaunchError::ZeroDimension { .. })
    );
    let too_much_shared = LaunchDims {
        shared_mem_bytes: 64 << 10,
        ..ok
    };
    assert_err!(
        check(too_much_shared, &args),
        Error::Launch(LaunchError::SharedMemory { bytes: 65536, .. })
    );
    assert_err!(module.function("no_such_kernel"), Error::Ptx(_));
    // The next valid launch works.
    run_inline(&bridge, &stamp, ok, &args);
    assert_eq!(buf.cuda_read().unwrap()[10], 11);
    common::assert_clean(bridge.vulkan());
}

/// Frames with no CUDA context involved: each frame's command buffer launches `fill_u32`
/// (the frame number into its slot), then the barrier (unless `barrier` is false), then the
/// Vulkan compute checker. Returns the checker's mismatch count.
fn inline_frames(
    bridge: &Bridge,
    module: &Arc<CuModule>,
    k: u32,
    frames: u64,
    barrier: bool,
) -> u32 {
    let ctx = bridge.vulkan();
    let n = 4usize << 20;
    let slots = checker::slots(bridge, k, n).unwrap();
    let result = checker::result_buffer(ctx).unwrap();
    let checker = Checker::new(bridge, &slots, &result, 2 * k as usize).unwrap();
    let fill = module.function("fill_u32").unwrap();
    let done = Semaphore::new(ctx, SemaphoreDesc::LOCAL_TIMELINE).unwrap();
    for number in 1..=frames {
        let f = cuvk_dev::unpaced_frame(number, k);
        if let Some(prev) = number.checked_sub(2 * u64::from(k)).filter(|&p| p > 0) {
            done.wait_host(prev, Duration::from_secs(10)).unwrap();
        }
        let slot = &slots[f.slot];
        let args = [
            addr(slot),
            KernelArg::value(&(n as u64)),
            KernelArg::value(&(number as u32)),
        ];
        // SAFETY: the command slot's previous frame completed (waited above); everything the
        // commands use lives until the final wait.
        let cmd = unsafe {
            checker.record_with(f.command_slot, f.slot, number as u32, None, |cmd| {
                fill.record_launch(cmd, &LaunchDims::linear(264, 256), &args)?;
                if barrier {
                    record_kernel_barrier(ctx, cmd);
                }
                Ok(())
            })
        }
        .unwrap();
        let signal = [SemaphoreOp {
            semaphore: &done,
            value: number,
            stage: vk::PipelineStageFlags::empty(),
        }];
        // SAFETY: executable command buffer of this device; waited for below.
        unsafe { ctx.submit_with_semaphores(&[cmd], &[], &signal, vk::Fence::null()) }.unwrap();
    }
    done.wait_host(frames, Duration::from_secs(60)).unwrap();
    drop(checker);
    let (mismatches, checks, _) = checker::read_result(&result).unwrap();
    assert_eq!(u64::from(checks), frames, "every frame's check ran");
    common::assert_clean(ctx);
    mismatches
}

#[test]
fn ten_thousand_inline_frames_k1_to_k3_exact_and_the_barrier_matters() {
    let _serial = common::serial();
    let Some((bridge, _)) = setup("ten_thousand_inline_frames") else {
        return;
    };
    let ptx = cuvk::cuda::compile_ptx(bridge.cuda(), "roundtrip.cu", kernels::SOURCE).unwrap();
    let module = CuModule::from_ptx(bridge.vulkan(), &ptx).unwrap();
    for k in 1..=3 {
        let bad = inline_frames(&bridge, &module, k, 10_000, true);
        eprintln!("K={k}: 10000 inline frames, {bad} wrong elements");
        assert_eq!(bad, 0);
    }
    // Negative control: without the barrier the checker races the kernel.
    let bad = inline_frames(&bridge, &module, 1, 2_000, false);
    eprintln!("barrier removed: {bad} wrong elements in 2000 frames");
    assert!(bad > 0, "removing the kernel barrier was not caught");
}

/// One frame uses both CUDA paths on one buffer, in order: the CUDA context writes the frame
/// number (ordered by the pacer's semaphores), then inside the Vulkan submission an inline
/// kernel adds 1, then the Vulkan checker expects number + 1.
#[test]
fn cuda_context_and_inline_kernels_on_one_buffer_in_one_frame() {
    let _serial = common::serial();
    let Some((bridge, module)) = setup("cuda_context_and_inline_kernels") else {
        return;
    };
    let ctx = bridge.vulkan();
    let k = kernels::Kernels::load(bridge.cuda()).unwrap();
    let stream = bridge.cuda().new_stream().unwrap();
    let mut pacer = FramePacer::new(&bridge, 2).unwrap();
    let n = 1usize << 20;
    let slots = checker::slots(&bridge, 2, n).unwrap();
    let result = checker::result_buffer(ctx).unwrap();
    let checker = Checker::new(&bridge, &slots, &result, pacer.command_slots()).unwrap();
    let add = module.function("add_in_place").unwrap();
    let frames = 2_000u64;
    for _ in 0..frames {
        let frame = pacer.begin_frame().unwrap();
        let slot = &slots[frame.slot()];
        pacer.cuda_acquire(&frame, &stream).unwrap();
        k.fill(&stream, slot.kernel_arg(), n as u64, frame.number() as u32)
            .unwrap();
        pacer.cuda_release(&frame, &stream).unwrap();
        let args = [
            addr(slot),
            KernelArg::value(&(n as u64)),
            KernelArg::value(&1u32),
        ];
        // SAFETY: begin_frame freed the command slot; everything lives until wait_idle.
        let cmd = unsafe {
            checker.record_with(
                frame.command_slot(),
                frame.slot(),
                frame.number() as u32 + 1,
                Some(slot),
                |cmd| {
                    record_kernel_barrier(ctx, cmd); // chains after the acquire
                    add.record_launch(cmd, &LaunchDims::linear(264, 256), &args)?;
                    record_kernel_barrier(ctx, cmd);
                    Ok(())
                },
            )
        }
        .unwrap();
        let stage = vk::PipelineStageFlags::ALL_COMMANDS;
        // SAFETY: as above.
        unsafe { pacer.vulkan_submit(&frame, &cuvk::FrameSubmit::new(&[cmd], stage)) }.unwrap();
    }
    pacer.wait_idle(Duration::from_secs(60)).unwrap();
    stream.synchronize().unwrap();
    drop(checker);
    let (bad, checks, last) = checker::read_result(&result).unwrap();
    eprintln!("{frames} mixed frames: {bad} wrong elements (last bad value {last})");
    assert_eq!((bad, u64::from(checks)), (0, frames));
    common::assert_clean(ctx);
}
