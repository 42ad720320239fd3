//! A process whose Vulkan queue waits for a value CUDA signals only after a long-running kernel
//! exits promptly: teardown has one deadline (the context's drop timeout) for everything, then
//! abandons what the GPU still holds, and the process exit does not wait on abandoned work.
//! Each scenario runs in a child process (this binary again) that sets it up, prints
//! `ARMED`, and returns; the parent measures from `ARMED` to the child's exit.

use cuvk_dev::kernels::Kernels;
use cuvk_dev::testing as common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cuvk::ash::vk;
use cuvk::vulkan::{SemaphoreKind, SemaphoreOp};
use cuvk::{BufferUsage, FramePacer, FrameSubmit, SharedBuffer, StreamOrder};

const CHILD: &str = "CUVK_EXIT_SCENARIO";
/// The drop timeout the children set.
const DROP_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the kernel runs: far past the bound.
const SPIN: Duration = Duration::from_secs(20);
/// Past this the child is killed (and the test fails).
const LIMIT: Duration = Duration::from_secs(12);

/// Runs scenario `name` in a child and returns how long it took from `ARMED` to its exit.
fn exit_time(name: &str) -> Option<Duration> {
    let mut child = common::child_test("exits::exit_child", CHILD, name)
        .arg("--ignored")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            eprintln!("  [child] {line}");
            // libtest prints "test exits::exit_child ... " before the child's own output.
            if line.contains("ARMED") {
                let _ = tx.send(Instant::now());
            }
        }
    });
    let start = Instant::now();
    let armed = loop {
        if let Ok(at) = rx.try_recv() {
            break Some(at);
        }
        if child.try_wait().unwrap().is_some() || start.elapsed() > LIMIT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let Some(armed) = armed else {
        let _ = child.kill();
        let status = child.wait().unwrap();
        panic!("scenario {name}: the child never armed ({status})");
    };
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(
                status.success(),
                "scenario {name}: the child failed ({status})"
            );
            return Some(armed.elapsed());
        }
        if armed.elapsed() > LIMIT {
            child.kill().unwrap();
            child.wait().unwrap();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_process_whose_queue_waits_on_a_long_kernel_exits_within_two_drop_timeouts() {
    let _serial = common::serial();
    if common::bridge("a_process_whose_queue_waits_on_a_long_kernel_exits").is_none() {
        return;
    }
    let mut slow = Vec::new();
    // Not here: a frame whose kernel is still running when its pacer drops (the drop then
    // waits in `cuDestroyExternalSemaphore` until the kernel ends: the driver's, measured on
    // an H200; see CHANGELOG 0.5), and a module whose kernel runs (`cuModuleUnload` waits).
    for name in [
        "spin_alone",
        "stream_order",
        "imported_timeline",
        "pacer_refused_plain",
        "pacer_marked",
        "pacer_marked_plain",
    ] {
        let took = exit_time(name);
        eprintln!(
            "scenario {name}: exit {} after main returned (drop timeout {DROP_TIMEOUT:?})",
            took.map_or("did not happen".to_string(), |t| format!("{t:.2?}"))
        );
        if took.is_none_or(|t| t > 2 * DROP_TIMEOUT) {
            slow.push(name);
        }
    }
    assert!(
        slow.is_empty(),
        "{slow:?}: not exited within 2x the drop timeout"
    );
}

/// The child: sets up the scenario named in [`CHILD`], prints `ARMED`, drops everything.
#[test]
#[ignore = "run by a_process_whose_queue_waits_on_a_long_kernel_exits_within_two_drop_timeouts"]
fn exit_child() {
    let Ok(name) = std::env::var(CHILD) else {
        return;
    };
    cuvk_dev::logger::init();
    let bridge = common::bridge("exit_child").unwrap();
    bridge.vulkan().set_drop_timeout(DROP_TIMEOUT);
    let k = Kernels::load(bridge.cuda()).unwrap();
    let stream = bridge.cuda().new_stream().unwrap();
    // Memory only where the scenario writes it: freeing CUDA memory waits for running
    // kernels in the driver, whatever cuvk does.
    let buf: Option<SharedBuffer<u32>> = name.ends_with("_plain").then(|| {
        bridge
            .create_buffer(1 << 20, BufferUsage::STORAGE_BUFFER)
            .unwrap()
    });
    let stage = vk::PipelineStageFlags::ALL_COMMANDS;
    let mut module = Some(k);
    match name.as_str() {
        // A kernel running, nothing waiting for it.
        "spin_alone" => {
            module.as_ref().unwrap().spin(&stream, SPIN).unwrap();
            println!("ARMED");
        }
        "stream_order" => {
            module.as_ref().unwrap().spin(&stream, SPIN).unwrap();
            let order = StreamOrder::new(&bridge).unwrap();
            let marks = order.marks();
            order.cuda_release(&[&marks], &stream).unwrap();
            // SAFETY: no command buffers.
            unsafe {
                order.vulkan_submit(
                    &[&marks],
                    &FrameSubmit::new(&[], vk::PipelineStageFlags::ALL_COMMANDS),
                )
            }
            .unwrap();
            println!("ARMED");
            timed("StreamOrder", || drop(order));
        }
        "imported_timeline" => {
            module.as_ref().unwrap().spin(&stream, SPIN).unwrap();
            let sem = bridge
                .create_semaphore(SemaphoreKind::Timeline { initial: 0 })
                .unwrap();
            sem.cuda.signal(&stream, 1).unwrap();
            let wait = [SemaphoreOp::wait(
                &sem.vulkan,
                1,
                vk::PipelineStageFlags::ALL_COMMANDS,
            )];
            // SAFETY: no command buffers; the semaphore's drop waits for (or parks behind)
            // the submission.
            unsafe {
                bridge
                    .vulkan()
                    .submit_with_semaphores(&[], &wait, &[], vk::Fence::null())
            }
            .unwrap();
            println!("ARMED");
            timed("SharedSemaphore", || drop(sem));
        }
        // A frame abandoned mid-protocol: acquired, written by a kernel (finished: the
        // module is then unloaded as usual), never released; its submission is refused.
        "pacer_refused_plain" => {
            let mut pacer = FramePacer::new(&bridge, 2).unwrap();
            for _ in 0..5 {
                let f = pacer.begin_frame().unwrap();
                pacer.cuda_acquire(&f, &stream).unwrap();
                pacer.cuda_release(&f, &stream).unwrap();
                // SAFETY: no command buffers.
                unsafe { pacer.vulkan_submit(&f, &FrameSubmit::new(&[], stage)) }.unwrap();
            }
            let f = pacer.begin_frame().unwrap();
            pacer.cuda_acquire(&f, &stream).unwrap();
            let written = buf.as_ref().unwrap();
            module
                .as_ref()
                .unwrap()
                .fill(&stream, written.kernel_arg(), 1 << 20, 6)
                .unwrap();
            // SAFETY: refused before the driver (CUDA has not released the frame).
            let refused = unsafe { pacer.vulkan_submit(&f, &FrameSubmit::new(&[], stage)) };
            assert!(refused.is_err(), "{refused:?}");
            println!("ARMED");
            timed("FramePacer", || drop(pacer));
            timed("the kernels' module", || drop(module.take()));
        }
        // `mark_submitted` for a frame that was never submitted (its documented misuse): the
        // next frame's CUDA acquire waits on the GPU for a value nothing will signal, with a
        // 20 s kernel behind it ("pacer_marked"), or a short one whose module is then
        // unloaded ("pacer_marked_plain": `cuModuleUnload` waits for the stream, which the
        // pacer's abandoned drop releases; in 0.4 it waited for good).
        "pacer_marked" | "pacer_marked_plain" => {
            let mut pacer = FramePacer::new(&bridge, 1).unwrap();
            let f = pacer.begin_frame().unwrap();
            pacer.cuda_acquire(&f, &stream).unwrap();
            pacer.cuda_release(&f, &stream).unwrap();
            let sems = pacer
                .frame_semaphores(&f, vk::PipelineStageFlags2::ALL_COMMANDS)
                .unwrap();
            // SAFETY: deliberately false (nothing was submitted): the case under test.
            unsafe { pacer.mark_submitted(&sems) }.unwrap();
            let g = pacer.begin_frame().unwrap();
            pacer.cuda_acquire(&g, &stream).unwrap();
            let k = module.as_ref().unwrap();
            match buf.as_ref() {
                Some(written) => k.fill(&stream, written.kernel_arg(), 1 << 20, 2).unwrap(),
                None => k.spin(&stream, SPIN).unwrap(),
            }
            pacer.cuda_release(&g, &stream).unwrap();
            println!("ARMED");
            timed("FramePacer", || drop(pacer));
            if name == "pacer_marked_plain" {
                timed("the kernels' module", || drop(module.take()));
            }
        }
        other => panic!("no scenario {other}"),
    }
    timed("SharedBuffer", || drop(buf));
    timed("CudaStream", || drop(stream));
    // The module of a running kernel is not unloaded: `cuModuleUnload` waits until the kernel
    // ends (seen in cuda-gdb: the child blocked there for the whole spin), whatever cuvk does.
    // A process that abandons a kernel keeps its module (here: leaks it; exit reclaims it).
    std::mem::forget(module);
    timed("Bridge", || drop(bridge));
    println!("DROPPED");
}

/// Runs `step` and prints how long it took (the child's output shows where time goes).
fn timed(what: &str, step: impl FnOnce()) {
    let t = Instant::now();
    step();
    println!("dropped {what} in {:.2?}", t.elapsed());
}
