//! `StreamOrder` on its own (the pacer's tests cover it under frames): CUDA writes one shared
//! buffer from two streams in turn, Vulkan checks every element after each write, ordered
//! by the buffer's `UseMarks` alone. Negative controls skip one direction and must see
//! wrong data; refusals (another order's marks, waits for values never scheduled, values
//! that do not increase) change nothing. Skips with a printed reason where there is no GPU.

use cuvk_dev::assert_err;
use cuvk_dev::checker::{self, Checker};
use cuvk_dev::kernels::Kernels;
use cuvk_dev::testing as common;

use std::time::Duration;

use cuvk::ash::vk;
use cuvk::{BufferUsage, Error, FrameSubmit, SharedBuffer, StreamOrder, SyncError};

const ELEMENTS: usize = 4 << 20; // 16 MiB
const WAIT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    None,
    /// CUDA overwrites without waiting for Vulkan's last check.
    SkipCudaAcquire,
    /// Vulkan checks without waiting for CUDA's release.
    SkipVulkanWait,
}

/// (mismatching elements, checks run) over `writes` writes alternating between two streams.
fn run(bridge: &cuvk::Bridge, k: &Kernels, writes: u32, fault: Fault) -> (u32, u32) {
    let streams = [
        bridge.cuda().new_stream().unwrap(),
        bridge.cuda().new_stream().unwrap(),
    ];
    let order = StreamOrder::new(bridge).unwrap();
    let buffer: SharedBuffer<u32> = bridge
        .create_buffer(ELEMENTS, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    let marks = order.marks();
    let ctx = bridge.vulkan();
    let result = checker::result_buffer(ctx).unwrap();
    let checker = Checker::new(bridge, std::slice::from_ref(&buffer), &result, 2).unwrap();
    let mut slot_values = [0u64; 2];
    for n in 1..=writes {
        let stream = &streams[n as usize % 2];
        if fault != Fault::SkipCudaAcquire {
            order.cuda_acquire(&marks, stream).unwrap();
        }
        k.fill(stream, buffer.kernel_arg(), ELEMENTS as u64, n)
            .unwrap();
        let released = order.cuda_release(&[&marks], stream).unwrap();
        assert_eq!(released, u64::from(n), "one release per write, in order");
        let cs = n as usize % 2;
        order.wait_vulkan(slot_values[cs], WAIT).unwrap();
        // SAFETY: the command slot's last submission completed (waited for above).
        let cmd = unsafe { checker.record(cs, 0, n, Some(&buffer)) }.unwrap();
        let uses: &[&cuvk::UseMarks] = if fault == Fault::SkipVulkanWait {
            &[]
        } else {
            &[&marks]
        };
        let cmds = [cmd];
        let submit = FrameSubmit::new(&cmds, vk::PipelineStageFlags::COMPUTE_SHADER);
        // SAFETY: the command buffer and what it uses live until the wait below.
        slot_values[cs] = unsafe { order.vulkan_submit(uses, &submit) }.unwrap();
    }
    order.wait_vulkan(order.last_vulkan(), WAIT).unwrap();
    for s in &streams {
        s.synchronize().unwrap();
    }
    drop(checker);
    let (mismatches, checks, _) = checker::read_result(&result).unwrap();
    common::assert_clean(ctx);
    (mismatches, checks)
}

#[test]
fn two_streams_and_vulkan_ordered_by_use_marks_read_exactly() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("two_streams_and_vulkan_ordered_by_use_marks") else {
        return;
    };
    let k = Kernels::load(bridge.cuda()).unwrap();
    let (mismatches, checks) = run(&bridge, &k, 3_000, Fault::None);
    eprintln!("ordered: {checks} checks, {mismatches} mismatching elements");
    assert_eq!(checks, 3_000);
    assert_eq!(mismatches, 0, "Vulkan read another write's data");
    for fault in [Fault::SkipVulkanWait, Fault::SkipCudaAcquire] {
        let (mismatches, checks) = run(&bridge, &k, 2_000, fault);
        eprintln!("{fault:?}: {checks} checks, {mismatches} mismatching elements");
        assert!(mismatches > 0, "{fault:?} went unnoticed");
    }
}

#[test]
fn stream_order_refusals_change_nothing() {
    let _shared = common::shared();
    let Some(bridge) = common::bridge("stream_order_refusals_change_nothing") else {
        return;
    };
    let stream = bridge.cuda().new_stream().unwrap();
    let a = StreamOrder::new(&bridge).unwrap();
    let b = StreamOrder::new(&bridge).unwrap();
    let marks_a = a.marks();
    let foreign = |r: cuvk::Result<_>| {
        let e = assert_err!(r, Error::Sync(SyncError::ForeignMarks { .. }));
        assert_eq!(e.rule(), Some(cuvk::Rule::SyncForeignMarks));
        assert!(
            matches!(e, Error::Sync(SyncError::ForeignMarks { marks, order })
                if marks == a.id() && order == b.id()),
            "{e:?}"
        );
    };
    foreign(b.cuda_acquire(&marks_a, &stream));
    foreign(b.cuda_release(&[&marks_a], &stream).map(drop));
    let submit = FrameSubmit::new(&[], vk::PipelineStageFlags::ALL_COMMANDS);
    // SAFETY: no command buffers (refused before anything is submitted anyway).
    foreign(unsafe { b.vulkan_submit(&[&marks_a], &submit) }.map(drop));
    assert_eq!(
        (b.last_cuda(), b.last_vulkan()),
        (0, 0),
        "nothing scheduled"
    );
    assert_eq!((marks_a.cuda_release(), marks_a.vulkan_use()), (0, 0));

    assert_err!(
        b.cuda_wait_vulkan_value(5, &stream),
        Error::Sync(SyncError::WaitNeverSignalled {
            value: 5,
            scheduled: 0
        })
    );
    assert_err!(
        b.wait_cuda(2, WAIT),
        Error::Sync(SyncError::WaitNeverSignalled { value: 2, .. })
    );
    assert_err!(
        b.cuda_release_value(0, &stream),
        Error::Sync(SyncError::TimelineNotIncreasing { value: 0, last: 0 })
    );

    // The next valid calls work, on both orders.
    assert_eq!(a.cuda_release(&[&marks_a], &stream).unwrap(), 1);
    // SAFETY: no command buffers.
    let v = unsafe { a.vulkan_submit(&[&marks_a], &submit) }.unwrap();
    assert_eq!((v, marks_a.vulkan_use(), marks_a.cuda_release()), (1, 1, 1));
    a.cuda_acquire(&marks_a, &stream).unwrap();
    b.cuda_release_value(7, &stream).unwrap();
    assert_err!(
        b.cuda_release_value(7, &stream),
        Error::Sync(SyncError::TimelineNotIncreasing { value: 7, last: 7 })
    );
    a.wait_vulkan(v, WAIT).unwrap();
    b.wait_cuda(7, WAIT).unwrap();
    common::assert_clean(bridge.vulkan());
}
