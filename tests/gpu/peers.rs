//! Several GPUs in one process (issue 28): a peer GPU's kernels store straight into memory the
//! render GPU's Vulkan draws, ordered on the GPU by `StreamOrder` across devices; the NCCL
//! communicator's refusals and its bounded wait for a lost rank. Skips with a printed reason on
//! a machine with one GPU; REQUIRE_GPUS=2 makes that a failure.

use cuvk_dev::assert_err;
use cuvk_dev::checker::{self, Checker};
use cuvk_dev::kernels::Kernels;
use cuvk_dev::testing as common;

use std::time::Duration;

use cuvk::ash::vk;
use cuvk::{BufferUsage, Error, FrameSubmit, PeerError, SharedBuffer, StreamOrder};

const ELEMENTS: usize = 4 << 20; // 16 MiB
const WAIT: Duration = Duration::from_secs(30);

/// (mismatching elements, checks run) over `writes` writes by a kernel on the peer GPU into a
/// peer buffer of the render GPU, each checked by the render GPU's Vulkan; `ordered` false
/// skips the peer's acquire and Vulkan's wait (the negative control).
fn run(
    bridge: &cuvk::Bridge,
    peer: &std::sync::Arc<cuvk::cudarc::driver::CudaContext>,
    writes: u32,
    ordered: bool,
) -> (u32, u32) {
    let k = Kernels::load(peer).unwrap();
    let stream = peer.new_stream().unwrap();
    let order = StreamOrder::new(bridge).unwrap();
    let buffer: SharedBuffer<u32> = bridge
        .create_peer_buffer(ELEMENTS, BufferUsage::STORAGE_BUFFER, &[peer])
        .unwrap();
    assert!(buffer.accessible_from(peer) && buffer.accessible_from(bridge.cuda()));
    let marks = order.marks();
    let ctx = bridge.vulkan();
    let result = checker::result_buffer(ctx).unwrap();
    let checker = Checker::new(bridge, std::slice::from_ref(&buffer), &result, 2).unwrap();
    let mut slot_values = [0u64; 2];
    for n in 1..=writes {
        if ordered {
            order.cuda_acquire(&marks, &stream).unwrap();
        }
        // The peer GPU's kernel stores over NVLink into the render GPU's memory.
        k.fill(&stream, buffer.kernel_arg(), ELEMENTS as u64, n)
            .unwrap();
        order.cuda_release(&[&marks], &stream).unwrap();
        let cs = n as usize % 2;
        order.wait_vulkan(slot_values[cs], WAIT).unwrap();
        // SAFETY: the command slot's last submission completed (waited for above).
        let cmd = unsafe { checker.record(cs, 0, n, Some(&buffer)) }.unwrap();
        let uses: &[&cuvk::UseMarks] = if ordered { &[&marks] } else { &[] };
        let cmds = [cmd];
        let submit = FrameSubmit::new(&cmds, vk::PipelineStageFlags::COMPUTE_SHADER);
        // SAFETY: the command buffer and what it uses live until the wait below.
        slot_values[cs] = unsafe { order.vulkan_submit(uses, &submit) }.unwrap();
    }
    order.wait_vulkan(order.last_vulkan(), WAIT).unwrap();
    stream.synchronize().unwrap();
    drop(checker);
    let (mismatches, checks, _) = checker::read_result(&result).unwrap();
    common::assert_clean(ctx);
    (mismatches, checks)
}

#[test]
fn a_peer_gpus_kernel_writes_what_vulkan_reads_ordered_across_gpus() {
    let _g = common::shared();
    let Some(bridge) = common::bridge("peer_writes") else {
        return;
    };
    let Some(peer) = common::peer_gpu("peer_writes", &bridge) else {
        return;
    };
    if !cuvk::can_access_peer(&peer, bridge.cuda()).unwrap() {
        // The refusal a user gets on such a machine, and nothing made.
        let e = bridge
            .create_peer_buffer::<u32>(16, BufferUsage::STORAGE_BUFFER, &[&peer])
            .err()
            .unwrap();
        assert!(
            matches!(e, Error::Peer(PeerError::NoPeerAccess { .. })),
            "{e}"
        );
        eprintln!(
            "SKIP peer_writes: GPUs {} and {} have no peer path",
            peer.ordinal(),
            bridge.cuda().ordinal()
        );
        return;
    }
    let (bad, checks) = run(&bridge, &peer, 2000, true);
    assert_eq!(
        checks, 2000,
        "every write checked (all 4M elements of each)"
    );
    assert_eq!(
        bad, 0,
        "peer kernel stores ordered by StreamOrder across GPUs"
    );
    // Negative control: the same loop with no ordering sees torn or stale data.
    let (bad, _) = run(&bridge, &peer, 200, false);
    assert!(
        bad > 0,
        "without ordering Vulkan should have seen torn data"
    );
    eprintln!("peer_writes: unordered control saw {bad} wrong elements");
}

#[test]
fn buffers_not_made_for_peers_say_so_and_plain_imports_stay_local() {
    let _g = common::shared();
    let Some(bridge) = common::bridge("peer_local") else {
        return;
    };
    let Some(peer) = common::peer_gpu("peer_local", &bridge) else {
        return;
    };
    let plain: SharedBuffer<u32> = bridge
        .create_buffer(1024, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    assert!(plain.accessible_from(bridge.cuda()));
    assert!(
        !plain.accessible_from(&peer),
        "imported Vulkan memory is not mapped into peers"
    );
    let from_cuda: SharedBuffer<u32> = bridge
        .create_buffer_from_cuda(1024, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    assert!(!from_cuda.accessible_from(&peer));
    // Asking for the render GPU itself as a peer is no error.
    let own: SharedBuffer<u32> = bridge
        .create_peer_buffer(1024, BufferUsage::STORAGE_BUFFER, &[bridge.cuda()])
        .unwrap();
    assert!(own.accessible_from(bridge.cuda()));
    common::assert_clean(bridge.vulkan());
}

#[cfg(feature = "nccl")]
mod nccl {
    use super::*;
    use cuvk::nccl::{Communicator, NcclId, ReduceOp};

    fn nccl_or_skip(test: &str) -> Option<NcclId> {
        match NcclId::new() {
            Ok(id) => Some(id),
            Err(e) if e.is_unavailable() && std::env::var("REQUIRE_GPUS").is_err() => {
                eprintln!("SKIP {test}: {e}");
                None
            }
            Err(e) => panic!("{test}: {e}"),
        }
    }

    /// Two ranks in two threads, one per GPU; `f(rank, comm)` on each; the results.
    fn two_ranks<R: Send>(
        contexts: [std::sync::Arc<cuvk::cudarc::driver::CudaContext>; 2],
        id: NcclId,
        f: impl Fn(usize, Communicator) -> R + Sync,
    ) -> Vec<R> {
        std::thread::scope(|s| {
            let handles: Vec<_> = contexts
                .iter()
                .enumerate()
                .map(|(rank, ctx)| {
                    let f = &f;
                    s.spawn(move || f(rank, Communicator::init(ctx, &id, rank, 2).unwrap()))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn a_communicator_refuses_another_gpus_buffer_and_ranks_of_different_sizes() {
        let _g = common::serial();
        let Some(bridge) = common::bridge("nccl_refusals") else {
            return;
        };
        let Some(peer) = common::peer_gpu("nccl_refusals", &bridge) else {
            return;
        };
        let Some(id) = nccl_or_skip("nccl_refusals") else {
            return;
        };
        // Rank checks before NCCL is called.
        let e = Communicator::init(&peer, &id, 2, 2).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Peer(PeerError::RankOutOfRange { rank: 2, world: 2 })
            ),
            "{e}"
        );
        let own = bridge.cuda().clone();
        let results = two_ranks([own, peer.clone()], id, |rank, comm| {
            // Sizes that differ: every rank hears of it, and the next agreement works.
            let mismatch = comm.agree_on_len(1000 + rank, WAIT);
            let agreed = comm.agree_on_len(4096, WAIT);
            (rank, comm.cuda_ordinal(), mismatch, agreed, comm)
        });
        for (rank, _, mismatch, agreed, _) in &results {
            let e = mismatch.as_ref().unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::Peer(PeerError::SizeMismatch {
                        min: 1000,
                        max: 1001,
                        ..
                    })
                ),
                "rank {rank}: {e}"
            );
            assert_eq!(e.rule(), Some(cuvk::Rule::PeerSizeMismatch));
            agreed.as_ref().unwrap();
        }
        // The render GPU's buffer handed to the peer GPU's communicator.
        let order = StreamOrder::new(&bridge).unwrap();
        let marks = order.marks();
        let mut buffer: SharedBuffer<u32> = bridge
            .create_buffer(4096, BufferUsage::STORAGE_BUFFER)
            .unwrap();
        let peer_comm = results
            .iter()
            .find(|r| r.1 != bridge.cuda().ordinal())
            .map(|r| &r.4)
            .unwrap();
        assert_err!(
            peer_comm.reduce_into(&mut buffer, ReduceOp::Sum, 0, &order, &marks),
            Error::Peer(PeerError::DeviceMismatch {
                user: "NCCL communicator",
                ..
            })
        );
        assert_eq!(order.last_cuda(), 0, "a refused call enqueues nothing");
        assert_eq!(marks.cuda_release(), 0);
        drop(results);
        common::assert_clean(bridge.vulkan());
    }

    #[test]
    fn a_rank_that_stops_answering_aborts_the_others_within_the_bound() {
        let _g = common::serial();
        let Some(bridge) = common::bridge("nccl_lost_rank") else {
            return;
        };
        let Some(peer) = common::peer_gpu("nccl_lost_rank", &bridge) else {
            return;
        };
        let Some(id) = nccl_or_skip("nccl_lost_rank") else {
            return;
        };
        let free_before = cuvk::cudarc::driver::result::mem_get_info().unwrap().0;
        let own = bridge.cuda().clone();
        let bridge = &bridge;
        let (quiet_tx, quiet_rx) = std::sync::mpsc::channel::<()>();
        let quiet_rx = std::sync::Mutex::new(quiet_rx);
        let peer_bridge = cuvk::Bridge::new(cuvk::BridgeConfig {
            cuda_device: cuvk::cuda::CudaDeviceChoice::Ordinal(peer.ordinal()),
            ..Default::default()
        })
        .unwrap();
        let bridges = [bridge, &peer_bridge];
        let outcomes = two_ranks([own, peer], id, |rank, comm| {
            let b = bridges[rank];
            let order = StreamOrder::new(b).unwrap();
            let marks = order.marks();
            let mut buffer: SharedBuffer<u32> = b
                .create_buffer(1 << 20, BufferUsage::STORAGE_BUFFER)
                .unwrap();
            // One frame together: NCCL connects its ranks on a communicator's first
            // collective (a rank gone before that blocks the enqueue itself, in NCCL).
            let value = comm
                .reduce_into(&mut buffer, ReduceOp::Sum, 0, &order, &marks)
                .unwrap();
            comm.wait_cuda(&order, value, WAIT).unwrap();
            if rank == 1 {
                // Then this rank stops answering; it lets go once rank 0 has given up.
                let _ = quiet_rx
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(60));
                drop(comm);
                return None;
            }
            let value = comm
                .reduce_into(&mut buffer, ReduceOp::Sum, 0, &order, &marks)
                .unwrap();
            let start = std::time::Instant::now();
            let e = comm
                .wait_cuda(&order, value, Duration::from_secs(3))
                .unwrap_err();
            let waited = start.elapsed();
            // Aborted: later calls are refused, not hung.
            let again = comm
                .reduce_into(&mut buffer, ReduceOp::Sum, 0, &order, &marks)
                .unwrap_err();
            // The aborted kernel let go of the stream: the release after it completes.
            order.wait_cuda(value, Duration::from_secs(10)).unwrap();
            drop(buffer);
            drop(order);
            quiet_tx.send(()).unwrap();
            Some((e, waited, again))
        });
        let (e, waited, again) = outcomes.into_iter().flatten().next().unwrap();
        assert!(
            matches!(e, Error::Peer(PeerError::RankLost { rank: 0, .. })),
            "{e}"
        );
        assert_eq!(e.rule(), Some(cuvk::Rule::PeerRankLost));
        assert!(waited < Duration::from_secs(10), "bounded: {waited:?}");
        assert!(
            matches!(again, Error::Peer(PeerError::Aborted { .. })),
            "{again}"
        );
        eprintln!("nccl_lost_rank: {e} (after {waited:?})");
        // Memory comes back (within what NCCL and the driver keep for the process).
        let free_after = cuvk::cudarc::driver::result::mem_get_info().unwrap().0;
        assert!(
            free_after + (64 << 20) >= free_before,
            "{free_before} -> {free_after}"
        );
    }

    /// Rank `rank`'s samples: a deterministic mix of drawn and empty pixels.
    fn samples(rank: usize, n: usize) -> Vec<u64> {
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (rank as u64 + 1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x.is_multiple_of(5) {
                    cuvk::nccl::EMPTY_SAMPLE
                } else {
                    x >> 8
                }
            })
            .collect()
    }

    /// The compositor (issue 38): with either schedule, to one rank or to all, the destination
    /// holds the per-pixel minimum of both ranks' samples, bit for bit — on a picture whose
    /// pixel count is odd (a band per rank and a tail); its refusals change nothing and the
    /// next composite works; ranks of different shapes (same pixel count) are refused on both.
    #[test]
    fn the_depth_compositor_keeps_the_nearest_sample_with_either_schedule() {
        use cuvk::nccl::{CompositeSchedule, CompositeTo, DepthCompositor};
        let _g = common::serial();
        let Some(bridge) = common::bridge("depth_compositor") else {
            return;
        };
        let Some(peer) = common::peer_gpu("depth_compositor", &bridge) else {
            return;
        };
        let Some(id) = nccl_or_skip("depth_compositor") else {
            return;
        };
        let peer_bridge = cuvk::Bridge::new(cuvk::BridgeConfig {
            cuda_device: cuvk::cuda::CudaDeviceChoice::Ordinal(peer.ordinal()),
            ..Default::default()
        })
        .unwrap();
        let bridges = [&bridge, &peer_bridge];
        let (w, h) = (641u32, 359u32); // 230,119 pixels: odd
        let n = (w * h) as usize;
        let (a, b) = (samples(0, n), samples(1, n));
        let nearest: Vec<u64> = a.iter().zip(&b).map(|(x, y)| *x.min(y)).collect();
        let own = bridge.cuda().clone();
        let results = two_ranks([own, peer], id, |rank, comm| {
            let br = bridges[rank];
            let mine = if rank == 0 { &a } else { &b };
            // Shapes of one pixel count, refused on both ranks; then the real one.
            let shape = if rank == 0 { (w, h) } else { (h, w) };
            let mismatch = DepthCompositor::new(&comm, shape.0, shape.1, WAIT).map(|_| ());
            let compositor = DepthCompositor::new(&comm, w, h, WAIT).unwrap();
            let order = StreamOrder::new(br).unwrap();
            let marks = order.marks();
            let mut buffer: SharedBuffer<u64> =
                br.create_buffer(n, BufferUsage::STORAGE_BUFFER).unwrap();
            // Refused before NCCL: another length, a rank outside; nothing enqueued.
            let mut short: SharedBuffer<u64> = br
                .create_buffer(n - 1, BufferUsage::STORAGE_BUFFER)
                .unwrap();
            let refusals = [
                compositor
                    .composite(&comm, &mut short, CompositeTo::All, &order, &marks)
                    .unwrap_err(),
                compositor
                    .composite(&comm, &mut buffer, CompositeTo::Rank(2), &order, &marks)
                    .unwrap_err(),
            ];
            let enqueued_by_refusals = order.last_cuda();
            let mut got = Vec::new();
            for schedule in [CompositeSchedule::Reduce, CompositeSchedule::ReduceScatter] {
                let c = compositor.with_schedule(schedule);
                for to in [CompositeTo::Rank(1), CompositeTo::All] {
                    comm.stream().memcpy_htod(mine, &mut buffer).unwrap();
                    let value = c.composite(&comm, &mut buffer, to, &order, &marks).unwrap();
                    comm.wait_cuda(&order, value, WAIT).unwrap();
                    let out = comm.stream().clone_dtoh(&buffer).unwrap();
                    got.push((schedule, to, out));
                }
            }
            (rank, mismatch, refusals, enqueued_by_refusals, got)
        });
        for (rank, mismatch, refusals, enqueued, got) in results {
            let e = mismatch.unwrap_err();
            assert_eq!(
                e.rule(),
                Some(cuvk::Rule::PeerSizeMismatch),
                "rank {rank}: {e}"
            );
            assert_eq!(
                refusals[0].rule(),
                Some(cuvk::Rule::PeerSizeMismatch),
                "{}",
                refusals[0]
            );
            assert!(
                matches!(
                    refusals[1],
                    Error::Peer(PeerError::RankOutOfRange { rank: 2, world: 2 })
                ),
                "{}",
                refusals[1]
            );
            assert_eq!(
                enqueued, 0,
                "rank {rank}: a refused composite enqueues nothing"
            );
            let mine = if rank == 0 { &a } else { &b };
            for (schedule, to, out) in got {
                let here = to == CompositeTo::All || to == CompositeTo::Rank(rank);
                if here {
                    let wrong = out.iter().zip(&nearest).filter(|(x, y)| x != y).count();
                    assert_eq!(
                        wrong, 0,
                        "rank {rank}, {schedule:?} to {to:?}: {wrong} of {n} samples wrong"
                    );
                } else if schedule == CompositeSchedule::Reduce {
                    assert!(
                        out == *mine,
                        "rank {rank}: a reduce to another rank only reads"
                    );
                }
            }
            eprintln!("depth_compositor: rank {rank}: 4 composites of {n} samples exact");
        }
        common::assert_clean(bridge.vulkan());
    }
}
