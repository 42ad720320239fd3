//! `SharedPool` on a real CUDA + Vulkan GPU: CUDA and Vulkan see the right data in every
//! sub-buffer of a pool (one CUDA import and one mapping per block), every bad input of the
//! issue refused with nothing changed or leaked, the heap exhausted and a smaller request
//! still served, 100,000 allocate/free cycles with descriptors and CUDA free memory back to
//! where they started, and four threads allocating at once.
//! Skips with a printed reason where there is no GPU; REQUIRE_GPU=1 makes that a failure.

use cuvk_dev::assert_err;
use cuvk_dev::kernels;
use cuvk_dev::testing as common;

use std::sync::Arc;

use cuvk::cudarc::driver::sys::CUdeviceptr;
use cuvk::vulkan::VulkanContext;
use cuvk::{BufferUsage, Error, ErrorKind, LayoutError, PoolDesc, SharedAllocation, SharedBuffer};
use kernels::{pattern, Kernels};

const MIB: usize = 1 << 20;
const STORAGE: BufferUsage = BufferUsage::STORAGE_BUFFER;

/// An element type aligned to 32 bytes.
#[repr(C, align(32))]
#[derive(Clone, Copy, bytemuck::Zeroable, bytemuck::Pod)]
struct Wide([u32; 8]);

fn cuda_free() -> usize {
    cuvk::cudarc::driver::result::mem_get_info().unwrap().0
}

fn largest_heap(ctx: &VulkanContext) -> u64 {
    let props = ctx.memory_properties();
    (0..props.memory_heap_count as usize)
        .map(|h| props.memory_heaps[h].size)
        .max()
        .unwrap()
}

fn assert_pattern(got: &[u32], seed: u32, what: &str) {
    let bad: Vec<usize> = (0..got.len())
        .filter(|&i| got[i] != pattern(i, seed))
        .take(5)
        .collect();
    assert!(bad.is_empty(), "{what}: elements {bad:?} differ");
}

/// Where a buffer lives, to check that live buffers of one block never overlap.
struct Placement {
    allocation: Arc<SharedAllocation>,
    range: std::ops::Range<u64>,
    ptr: CUdeviceptr,
}

fn placement<T: bytemuck::Pod>(b: &SharedBuffer<T>) -> Placement {
    Placement {
        allocation: b.allocation().expect("Vulkan-allocated").clone(),
        range: b.offset()..b.offset() + b.byte_size(),
        ptr: b.cuda_ptr(),
    }
}

/// No two live buffers of one block share a byte, and each CUDA pointer is the block's
/// base plus the buffer's offset (one mapping per block).
fn assert_disjoint(all: &[Placement]) {
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            if Arc::ptr_eq(&a.allocation, &b.allocation) {
                assert!(
                    !common::overlaps(&a.range, &b.range),
                    "{:?} overlaps {:?}",
                    a.range,
                    b.range
                );
                assert_eq!(
                    a.ptr - a.range.start,
                    b.ptr - b.range.start,
                    "one block, one base pointer"
                );
            }
        }
    }
}

#[test]
fn cuda_and_vulkan_see_every_sub_buffer() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("cuda_and_vulkan_see_every_sub_buffer") else {
        return;
    };
    let k = Kernels::load(bridge.cuda()).unwrap();
    // Blocks of 8 MiB, own allocations above 4 MiB.
    let pool = bridge
        .create_pool(PoolDesc::new(STORAGE).with_block_size(8 << 20))
        .unwrap();
    let lens = [1000usize, 4096, 1 << 18, 777_777, 5 * MIB / 4, 3];
    let mut bufs: Vec<SharedBuffer<u32>> = lens
        .iter()
        .map(|&n| pool.create_buffer(n, STORAGE).unwrap())
        .collect();
    let wide: SharedBuffer<Wide> = pool.create_buffer(100, STORAGE).unwrap();
    eprintln!("{}", pool.report());
    for b in &bufs {
        eprintln!(
            "{} bytes at offset {} ptr {:#x}",
            b.byte_size(),
            b.offset(),
            b.cuda_ptr()
        );
        assert!(b.is_pooled());
        assert_eq!(b.cuda_ptr() % 16, 0, "CUDA's 16-byte rule");
    }
    assert_eq!(wide.cuda_ptr() % 32, 0, "the element's alignment");
    let mut places: Vec<Placement> = bufs.iter().map(placement).collect();
    places.push(placement(&wide));
    assert_disjoint(&places);
    // The small ones share one block, imported and mapped once however many buffers it holds.
    let block = bufs[0].allocation().unwrap().clone();
    for i in [1, 2, 3, 5] {
        assert!(
            Arc::ptr_eq(bufs[i].allocation().unwrap(), &block),
            "buffer {i}"
        );
    }
    assert!(!block.is_dedicated());
    assert_eq!(block.size(), 8 << 20);
    assert_eq!(
        block.cuda_memory().live_mappings(),
        1,
        "one mapping per block"
    );
    // The pool's mapping covers the block, so a hand-placed buffer cannot alias pool buffers.
    assert_err!(
        block.buffer::<u32>(0, 16),
        Error::Layout(LayoutError::Overlap { .. })
    );
    // 5 MiB is above the threshold: its own allocation, at offset 0.
    let own = bufs[4].allocation().unwrap();
    assert!(!Arc::ptr_eq(own, &block));
    assert_eq!(bufs[4].offset(), 0);
    assert!(own.size() >= bufs[4].byte_size());
    assert_eq!(pool.stats().own_allocations, 1);

    // CUDA writes each, Vulkan reads each at its offset.
    for (i, b) in bufs.iter().enumerate() {
        k.write_pattern(
            bridge.stream(),
            b.kernel_arg(),
            b.len() as u64,
            31 * i as u32,
        )
        .unwrap();
    }
    k.write_pattern(bridge.stream(), wide.kernel_arg(), 800, 999)
        .unwrap();
    bridge.stream().synchronize().unwrap();
    for (i, b) in bufs.iter().enumerate() {
        assert_pattern(
            &common::read_via_vulkan(bridge.vulkan(), b),
            31 * i as u32,
            &format!("Vulkan read of buffer {i} at offset {}", b.offset()),
        );
    }
    assert_pattern(
        &common::read_via_vulkan(bridge.vulkan(), &wide),
        999,
        "Vulkan read of the 32-byte-aligned buffer",
    );
    // Vulkan fills each, CUDA checks each (and that neighbours kept their values).
    for (i, b) in bufs.iter_mut().enumerate() {
        let bytes = b.byte_size();
        bridge
            .vulkan()
            .fill_buffer(b, 0, bytes, 7000 + i as u32)
            .unwrap();
    }
    for (i, b) in bufs.iter().enumerate() {
        let bad = k
            .count_not_equal(
                bridge.stream(),
                b.kernel_arg(),
                b.len() as u64,
                7000 + i as u32,
            )
            .unwrap();
        assert_eq!(bad, 0, "CUDA read of buffer {i} at offset {}", b.offset());
        assert!(b.cuda_read().unwrap().iter().all(|&w| w == 7000 + i as u32));
    }
    assert_pattern(
        bytemuck::cast_slice::<Wide, u32>(&wide.cuda_read().unwrap()),
        999,
        "the 32-byte-aligned buffer after its neighbours were filled",
    );
    drop((bufs, wide, block));
    let s = pool.stats();
    assert_eq!((s.buffers, s.own_allocations), (0, 0));
    common::assert_clean(bridge.vulkan());
}

#[test]
fn bad_inputs_refused_nothing_changed_or_leaked() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("bad_inputs_refused_nothing_changed_or_leaked") else {
        return;
    };
    let pool = bridge.create_pool(PoolDesc::new(STORAGE)).unwrap();
    let _live: SharedBuffer<u32> = pool.create_buffer(1024, STORAGE).unwrap();
    let _warm = common::warm_up(bridge.vulkan());
    let fds = common::fds();
    let free = cuda_free();
    let before = pool.stats();
    let unchanged = |what: &str| {
        assert_eq!(pool.stats(), before, "{what} changed the pool");
        common::assert_fds(fds, what);
    };

    assert_err!(
        pool.create_buffer::<u32>(0, STORAGE),
        Error::Layout(LayoutError::ZeroSize { .. })
    );
    unchanged("zero length");
    let e = assert_err!(
        pool.create_buffer::<u64>(usize::MAX, STORAGE),
        Error::Layout(LayoutError::ElementCountOverflow {
            element_size: 8,
            ..
        })
    );
    assert!(e.to_string().contains("elements"), "{e}");
    unchanged("an overflowing length");
    let heap = largest_heap(bridge.vulkan());
    let e = assert_err!(
        pool.create_buffer::<u8>(heap as usize + 1, STORAGE),
        Error::Memory(cuvk::MemoryError::ExceedsHeap { .. })
    );
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
    unchanged("a request larger than any block and the heap");
    let e = assert_err!(
        pool.create_buffer::<u32>(1024, BufferUsage::VERTEX_BUFFER),
        Error::Memory(cuvk::MemoryError::UsageNotInPool { .. })
    );
    assert!(e.to_string().contains("VERTEX_BUFFER"), "{e}");
    unchanged("a usage the blocks were not created with");
    // Descriptions that cannot work.
    let mut desc = PoolDesc::new(STORAGE);
    desc.dedicated_threshold = desc.block_size + 1;
    assert_err!(
        bridge.create_pool(desc),
        Error::Memory(cuvk::MemoryError::PoolThreshold { .. })
    );
    assert_err!(
        bridge.create_pool(PoolDesc::new(STORAGE).with_block_size(heap + (64 << 20))),
        Error::Memory(cuvk::MemoryError::ExceedsHeap { .. })
    );
    unchanged("refused pools");

    // The next valid call works.
    let mut b: SharedBuffer<u32> = pool.create_buffer(4096, STORAGE).unwrap();
    bridge.vulkan().fill_buffer(&mut b, 0, 16384, 9).unwrap();
    assert!(b.cuda_read().unwrap().iter().all(|&w| w == 9));
    drop(b);
    common::assert_fds(fds, "descriptors leaked");
    assert!(
        cuda_free() >= free,
        "CUDA memory leaked: {free} -> {}",
        cuda_free()
    );
    common::assert_clean(bridge.vulkan());
}

/// Fills the whole GPU with 4 GiB blocks until the driver refuses. Run by name
/// (`--ignored exhausting_the_heap`): in the full suite on the shared H200, the next test
/// binary after it once hung for minutes in its first CUDA/Vulkan calls while the driver
/// reclaimed ~140 GB (passed alone twice: error, then the smaller request works).
#[test]
#[ignore]
fn exhausting_the_heap_then_a_smaller_request_works() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("exhausting_the_heap_then_a_smaller_request_works") else {
        return;
    };
    let _warm = common::warm_up(bridge.vulkan());
    let fds = common::fds();
    let free = cuda_free();
    let pool = bridge.create_pool(PoolDesc::new(STORAGE)).unwrap();
    // A block with room, made while memory is plentiful.
    let small: SharedBuffer<u32> = pool.create_buffer(1 << 16, STORAGE).unwrap();
    let heap = largest_heap(bridge.vulkan());
    let chunk = 4usize << 30; // above the threshold: each its own allocation
    let limit = heap as usize / chunk + 8;
    let mut big: Vec<SharedBuffer<u8>> = Vec::new();
    let t = std::time::Instant::now();
    let err = loop {
        let before = pool.stats();
        match pool.create_buffer::<u8>(chunk, STORAGE) {
            Ok(b) => {
                big.push(b);
                assert!(
                    big.len() <= limit,
                    "{} × 4 GiB allocated on a heap of {heap} bytes without running out",
                    big.len()
                );
            }
            Err(e) => {
                assert_eq!(pool.stats(), before, "a failed request changed the pool");
                break e;
            }
        }
    };
    eprintln!(
        "out of memory after {} × 4 GiB ({:.2?}; CUDA free {} MiB): {err}",
        big.len(),
        t.elapsed(),
        cuda_free() >> 20
    );
    assert_eq!(err.kind(), ErrorKind::OutOfMemory, "{err:?}");
    // The next smaller request is served from the block made earlier.
    let mut next: SharedBuffer<u32> = pool.create_buffer(1 << 18, STORAGE).unwrap();
    assert!(Arc::ptr_eq(
        next.allocation().unwrap(),
        small.allocation().unwrap()
    ));
    drop(big);
    next.cuda_write(&vec![0x0dd; 1 << 18]).unwrap();
    assert!(common::read_via_vulkan(bridge.vulkan(), &next)
        .iter()
        .all(|&w| w == 0x0dd));
    drop((next, small, pool));
    common::assert_fds(fds, "descriptors leaked");
    assert!(
        cuda_free() >= free,
        "CUDA memory leaked: {free} -> {}",
        cuda_free()
    );
    common::assert_clean(bridge.vulkan());
}

/// A small deterministic generator (xorshift64*), so failures replay.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn hundred_thousand_cycles_leak_nothing() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("hundred_thousand_cycles_leak_nothing") else {
        return;
    };
    // Warm up driver caches (a pool with its blocks, made and dropped).
    {
        let warm = bridge.create_pool(PoolDesc::new(STORAGE)).unwrap();
        for _ in 0..20 {
            drop(warm.create_buffer::<u32>(1 << 18, STORAGE).unwrap());
            drop(warm.create_buffer::<u32>(10 << 20, STORAGE).unwrap()); // 40 MiB: own
        }
    }
    let _warm = common::warm_up(bridge.vulkan());
    let fds = common::fds();
    let free = cuda_free();
    let pool = bridge.create_pool(PoolDesc::new(STORAGE)).unwrap();
    let mut rng = Rng(7);
    let mut ring: Vec<SharedBuffer<u32>> = Vec::new();
    let cycles = 100_000u64;
    let t = std::time::Instant::now();
    for i in 0..cycles {
        // 4 KiB to 3 MiB in blocks; every 1,000th 40 MiB in its own allocation; eight stay
        // alive so ranges are freed out of order.
        let bytes = if i % 1000 == 999 {
            40 << 20
        } else {
            [4 << 10, 64 << 10, 1 << 20, 3 << 20][(i % 4) as usize]
        };
        ring.push(pool.create_buffer(bytes / 4, STORAGE).unwrap());
        if ring.len() > 8 {
            let k = rng.below(ring.len() as u64) as usize;
            drop(ring.swap_remove(k));
        }
        if i % 10_000 == 0 {
            assert_eq!(common::fds(), fds, "descriptors held at cycle {i}");
        }
    }
    let elapsed = t.elapsed();
    drop(ring);
    let s = pool.stats();
    eprintln!(
        "{cycles} pool cycles in {elapsed:.2?} ({:.2} us each); after: {} blocks, {} buffers",
        elapsed.as_secs_f64() * 1e6 / cycles as f64,
        s.blocks,
        s.buffers
    );
    assert_eq!((s.buffers, s.used_bytes, s.own_allocations), (0, 0, 0));
    assert!(s.blocks <= 1, "at most the one kept empty block");
    drop(pool);
    let (fds_after, free_after) = (common::fds(), cuda_free());
    eprintln!(
        "fds {fds} -> {fds_after}, CUDA free {} -> {} MiB",
        free >> 20,
        free_after >> 20
    );
    assert_eq!(fds_after, fds, "descriptors leaked");
    assert!(
        free_after >= free,
        "CUDA free memory fell from {free} to {free_after}"
    );
    common::assert_clean(bridge.vulkan());
}

#[test]
fn four_threads_allocate_at_once() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("four_threads_allocate_at_once") else {
        return;
    };
    let pool = bridge
        .create_pool(PoolDesc::new(STORAGE).with_block_size(16 << 20))
        .unwrap();
    let kept: Vec<Vec<(SharedBuffer<u32>, u32)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u32)
            .map(|t| {
                let pool = &pool;
                s.spawn(move || {
                    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ u64::from(t + 1));
                    let mut live = Vec::new();
                    for i in 0..250u32 {
                        let len = 1 + rng.below(64 << 10) as usize;
                        let seed = t << 16 | i;
                        let mut b: SharedBuffer<u32> = pool.create_buffer(len, STORAGE).unwrap();
                        let data: Vec<u32> = (0..len).map(|k| pattern(k, seed)).collect();
                        b.cuda_write(&data).unwrap();
                        live.push((b, seed));
                        if rng.below(3) == 0 {
                            let k = rng.below(live.len() as u64) as usize;
                            drop(live.swap_remove(k));
                        }
                    }
                    live
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all: Vec<(SharedBuffer<u32>, u32)> = kept.into_iter().flatten().collect();
    let places: Vec<Placement> = all.iter().map(|(b, _)| placement(b)).collect();
    assert_disjoint(&places);
    let s = pool.stats();
    eprintln!("4 threads: {} live buffers\n{}", all.len(), pool.report());
    assert_eq!(s.buffers, all.len());
    for (b, seed) in &all {
        assert_pattern(&b.cuda_read().unwrap(), *seed, "CUDA read");
        assert_pattern(
            &common::read_via_vulkan(bridge.vulkan(), b),
            *seed,
            "Vulkan read",
        );
    }
    drop(all);
    assert_eq!(pool.stats().buffers, 0);
    common::assert_clean(bridge.vulkan());
}

/// The element's alignment rule in a pool: a 32-byte-aligned element type is placed at
/// multiples of 32 even where Vulkan and CUDA would accept 16.
#[test]
fn element_alignment_holds_in_pools() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("element_alignment_holds_in_pools") else {
        return;
    };
    let pool = bridge.create_pool(PoolDesc::new(STORAGE)).unwrap();
    let mut keep = Vec::new();
    for n in 1..40usize {
        let odd: SharedBuffer<u8> = pool.create_buffer(n * 3, STORAGE).unwrap();
        let wide: SharedBuffer<Wide> = pool.create_buffer(n, STORAGE).unwrap();
        assert_eq!(wide.offset() % 32, 0);
        assert_eq!(wide.cuda_ptr() % 32, 0);
        assert_eq!(odd.offset() % 16, 0);
        keep.push((odd, wide));
    }
    drop(keep);
    common::assert_clean(bridge.vulkan());
}
