//! The pool's Vulkan side on any Vulkan device (lavapipe in CI), under the validation layer:
//! buffers of one pool written and read through Vulkan at their offsets (and through one
//! buffer over each whole block), every bad input refused with nothing changed or leaked,
//! the release policy, four threads allocating at once, and 10,000 leak-free cycles.
//! `SharedPool` (the same pool with CUDA) is tested on the GPU machine (tests/gpu/pool.rs).

use cuvk_dev::assert_err;
use cuvk_dev::testing as common;

use std::collections::BTreeMap;
use std::sync::Arc;

use cuvk::ash::vk;
use cuvk::vulkan::{
    AsVkBuffer, Buffer, BufferDesc, DeviceMemory, ExternalUse, PooledBuffer, VulkanContext,
    VulkanPool,
};
use cuvk::{Error, ErrorKind, LayoutError, PoolDesc, PoolStats};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const STORAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::STORAGE_BUFFER;

/// Blocks of 1 MiB, own allocations above 512 KiB, one empty block kept.
fn small_blocks() -> PoolDesc {
    PoolDesc::new(STORAGE).with_block_size(MIB)
}

/// A whole block's bytes as u32 words, through one buffer bound at offset 0 of its memory
/// (aliasing every pool buffer in it).
fn read_block(ctx: &Arc<VulkanContext>, memory: &Arc<DeviceMemory>) -> Vec<u32> {
    let whole = Buffer::new(
        ctx,
        BufferDesc {
            size: memory.size(),
            usage: STORAGE | vk::BufferUsageFlags::TRANSFER_SRC,
            external: ExternalUse::Export,
        },
    )
    .unwrap()
    .bind(memory.clone(), 0)
    .unwrap();
    common::read_via_vulkan(ctx, &whole)
}

/// Checks that no two live buffers of one block share a byte, and that every offset is a
/// multiple of the buffer's Vulkan alignment and of CUDA's 16 bytes.
fn assert_disjoint_and_aligned(buffers: &[&PooledBuffer]) {
    for (i, a) in buffers.iter().enumerate() {
        let align = a.buffer().requirements().alignment;
        assert_eq!(a.offset() % align, 0, "{a:?}: Vulkan alignment {align}");
        assert_eq!(a.offset() % 16, 0, "{a:?}: CUDA's 16-byte rule");
        assert!(
            a.offset() + a.size() <= a.memory().size(),
            "{a:?} past its block"
        );
        for b in &buffers[i + 1..] {
            if Arc::ptr_eq(a.memory(), b.memory()) {
                let (ra, rb) = (
                    a.offset()..a.offset() + a.size(),
                    b.offset()..b.offset() + b.size(),
                );
                assert!(!common::overlaps(&ra, &rb), "{a:?} overlaps {b:?}");
            }
        }
    }
}

#[test]
fn pool_buffers_hold_their_data_at_their_offsets() {
    let _serial = common::serial();
    let Some(ctx) = common::vulkan("pool_buffers_hold_their_data_at_their_offsets") else {
        return;
    };
    let pool = VulkanPool::new(&ctx, small_blocks()).unwrap();
    let sizes = [
        4 * KIB,
        400,
        64 * KIB,
        256 * KIB,
        300 * KIB,
        200 * KIB,
        600 * KIB,
        12,
    ];
    let mut buffers: Vec<PooledBuffer> = sizes
        .iter()
        .map(|&s| pool.create_buffer(s, STORAGE).unwrap())
        .collect();
    for b in &buffers {
        eprintln!("{b:?} in a block of {} bytes", b.memory().size());
    }
    let refs: Vec<&PooledBuffer> = buffers.iter().collect();
    assert_disjoint_and_aligned(&refs);
    // 600 KiB is above the threshold (half of 1 MiB): its own allocation, at offset 0.
    assert!(buffers[6].is_own_allocation() && buffers[6].offset() == 0);
    assert!(!buffers[0].is_own_allocation());
    assert!(
        Arc::ptr_eq(buffers[0].memory(), buffers[1].memory()),
        "small buffers share a block"
    );
    eprintln!("{}", pool.report());

    // Vulkan writes each buffer (through its own VkBuffer) and reads it back.
    for (i, b) in buffers.iter_mut().enumerate() {
        let size = b.size() / 4 * 4;
        ctx.fill_buffer(b, 0, size, 0x1000 + i as u32).unwrap();
    }
    for (i, b) in buffers.iter().enumerate() {
        let words = common::read_via_vulkan(&ctx, b);
        let bad = words.iter().filter(|&&w| w != 0x1000 + i as u32).count();
        assert_eq!(bad, 0, "buffer {i} ({b:?}): {bad} words wrong");
    }
    // And each block, read whole at offset 0, holds every buffer's words at its offset.
    for (i, b) in buffers.iter().enumerate() {
        let block = read_block(&ctx, b.memory());
        let at = (b.offset() / 4) as usize;
        let n = (b.size() / 4) as usize;
        let bad = block[at..at + n]
            .iter()
            .filter(|&&w| w != 0x1000 + i as u32)
            .count();
        assert_eq!(
            bad,
            0,
            "buffer {i} at offset {}: {bad} words wrong",
            b.offset()
        );
    }
    drop(buffers);
    let s = pool.stats();
    assert_eq!((s.buffers, s.used_bytes, s.own_allocations), (0, 0, 0));
    common::assert_clean(&ctx);
}

#[test]
fn bad_inputs_refused_with_nothing_changed() {
    let _serial = common::serial();
    let Some(ctx) = common::vulkan("bad_inputs_refused_with_nothing_changed") else {
        return;
    };
    let _warm = common::warm_up(&ctx);
    let fds = common::non_driver_fds();
    let props = ctx.memory_properties();
    let largest_heap = (0..props.memory_heap_count as usize)
        .map(|h| props.memory_heaps[h].size)
        .max()
        .unwrap();

    // Pool descriptions that cannot work.
    let mut desc = small_blocks();
    desc.dedicated_threshold = 2 * MIB;
    let e = assert_err!(
        VulkanPool::new(&ctx, desc),
        Error::Memory(cuvk::MemoryError::PoolThreshold {
            threshold: 2097152,
            ..
        })
    );
    assert!(e.to_string().contains("dedicated_threshold 2097152"), "{e}");
    desc.dedicated_threshold = 0;
    assert_err!(
        VulkanPool::new(&ctx, desc),
        Error::Memory(cuvk::MemoryError::PoolThreshold { threshold: 0, .. })
    );
    let e = assert_err!(
        VulkanPool::new(&ctx, PoolDesc::new(STORAGE).with_block_size(8)),
        Error::Memory(cuvk::MemoryError::PoolBlockTooSmall { block_size: 8, .. })
    );
    assert!(e.to_string().contains("block_size 8"), "{e}");
    let e = assert_err!(
        VulkanPool::new(
            &ctx,
            PoolDesc::new(STORAGE).with_block_size(largest_heap + 4096)
        ),
        Error::Memory(cuvk::MemoryError::ExceedsHeap { .. })
    );
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);

    let pool = VulkanPool::new(&ctx, small_blocks()).unwrap();
    let live = pool.create_buffer(4096, STORAGE).unwrap();
    let before = pool.stats();
    let unchanged = |what: &str| {
        assert_eq!(pool.stats(), before, "{what} changed the pool");
    };
    assert_err!(
        pool.create_buffer(0, STORAGE),
        Error::Layout(LayoutError::ZeroSize { .. })
    );
    unchanged("zero size");
    let e = assert_err!(
        pool.create_buffer(4096, vk::BufferUsageFlags::VERTEX_BUFFER),
        Error::Memory(cuvk::MemoryError::UsageNotInPool { .. })
    );
    assert!(e.to_string().contains("VERTEX_BUFFER"), "{e}");
    unchanged("a usage outside the pool's");
    // Larger than any block (so its own allocation) and than the heap: refused before any
    // object is made (the layer would report vkCreateBuffer / vkAllocateMemory misuse).
    let e = assert_err!(
        pool.create_buffer(largest_heap + 1, STORAGE),
        Error::Memory(cuvk::MemoryError::ExceedsHeap { .. })
    );
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
    unchanged("a request above the heap");

    // The next valid requests work: in the block, and in an own allocation.
    let mut next = pool.create_buffer(8192, STORAGE).unwrap();
    ctx.fill_buffer(&mut next, 0, 8192, 5).unwrap();
    assert!(common::read_via_vulkan(&ctx, &next).iter().all(|&w| w == 5));
    let own = pool.create_buffer(768 * KIB, STORAGE).unwrap();
    assert!(own.is_own_allocation());
    drop((live, next, own, pool));
    common::assert_non_driver_fds(fds, "file descriptors leaked");
    common::assert_clean(&ctx);
}

#[test]
fn release_policy_and_statistics() {
    let _serial = common::serial();
    let Some(ctx) = common::vulkan("release_policy_and_statistics") else {
        return;
    };
    let pool = VulkanPool::new(&ctx, small_blocks()).unwrap();
    assert_eq!(pool.stats(), PoolStats::default());
    let a = pool.create_buffer(400 * KIB, STORAGE).unwrap();
    let b = pool.create_buffer(400 * KIB, STORAGE).unwrap();
    let c = pool.create_buffer(400 * KIB, STORAGE).unwrap();
    assert!(Arc::ptr_eq(a.memory(), b.memory()));
    assert!(!Arc::ptr_eq(a.memory(), c.memory()));
    let s = pool.stats();
    eprintln!("{}", pool.report());
    assert_eq!((s.blocks, s.buffers, s.own_allocations), (2, 3, 0));
    assert_eq!(s.reserved_bytes, 2 * MIB);
    assert_eq!(s.requested_bytes, 3 * 400 * KIB);
    assert_eq!(s.used_bytes + s.free_bytes, s.reserved_bytes);
    assert!(s.largest_free_range >= MIB - 400 * KIB - 64 * KIB);
    assert!((0.0..=1.0).contains(&s.fragmentation));
    let report = pool.report();
    assert_eq!(report.blocks.len(), 2);
    assert!(report.to_string().contains("3 buffers"));

    // c's block empties first: kept (one empty block is kept by default).
    let c_memory = Arc::downgrade(c.memory());
    drop(c);
    assert_eq!(pool.stats().blocks, 2);
    assert!(
        c_memory.upgrade().is_some(),
        "the kept block's memory is alive"
    );
    // a's block empties while c's is kept: released, its memory freed.
    let a_memory = Arc::downgrade(a.memory());
    drop((a, b));
    assert_eq!(pool.stats().blocks, 1);
    assert!(
        a_memory.upgrade().is_none(),
        "a released block's memory is freed"
    );
    // The kept block is reused, then trim releases it.
    let d = pool.create_buffer(100 * KIB, STORAGE).unwrap();
    assert_eq!(pool.stats().blocks, 1);
    drop(d);
    pool.trim();
    assert_eq!(pool.stats(), PoolStats::default());
    assert!(c_memory.upgrade().is_none());

    // Dropping the pool while a buffer lives: the buffer keeps working; its block is freed
    // with it.
    let mut e = pool.create_buffer(64 * KIB, STORAGE).unwrap();
    let f = pool.create_buffer(64 * KIB, STORAGE).unwrap();
    let e_memory = Arc::downgrade(e.memory());
    drop((pool, f));
    ctx.fill_buffer(&mut e, 0, 64 * KIB, 77).unwrap();
    assert!(common::read_via_vulkan(&ctx, &e).iter().all(|&w| w == 77));
    assert!(e_memory.upgrade().is_some());
    drop(e);
    assert!(
        e_memory.upgrade().is_none(),
        "the last buffer freed its block"
    );

    // keep_empty_blocks = 0: a block is released as soon as it is empty.
    let mut desc = small_blocks();
    desc.keep_empty_blocks = 0;
    let pool = VulkanPool::new(&ctx, desc).unwrap();
    drop(pool.create_buffer(4096, STORAGE).unwrap());
    assert_eq!(pool.stats(), PoolStats::default());
    common::assert_clean(&ctx);
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
fn four_threads_allocate_at_once() {
    let _serial = common::serial();
    let Some(ctx) = common::vulkan("four_threads_allocate_at_once") else {
        return;
    };
    let pool = VulkanPool::new(&ctx, small_blocks()).unwrap();
    let kept: Vec<Vec<PooledBuffer>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let pool = &pool;
                s.spawn(move || {
                    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t + 1));
                    let mut live = Vec::new();
                    for _ in 0..300 {
                        let size = 4 * (1 + rng.below(48 * KIB));
                        live.push(pool.create_buffer(size, STORAGE).unwrap());
                        if rng.below(3) == 0 {
                            let i = rng.below(live.len() as u64) as usize;
                            drop(live.swap_remove(i));
                        }
                    }
                    live
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<PooledBuffer> = kept.into_iter().flatten().collect();
    let refs: Vec<&PooledBuffer> = all.iter().collect();
    assert_disjoint_and_aligned(&refs);
    let s = pool.stats();
    eprintln!("4 threads: {} live buffers\n{}", all.len(), pool.report());
    assert_eq!(s.buffers, all.len());
    // Every buffer holds what Vulkan wrote into it, block by block.
    for (i, b) in all.iter_mut().enumerate() {
        let size = b.size();
        ctx.fill_buffer(b, 0, size, i as u32).unwrap();
    }
    let mut by_block: BTreeMap<usize, Vec<(usize, &PooledBuffer)>> = BTreeMap::new();
    for (i, b) in all.iter().enumerate() {
        by_block
            .entry(Arc::as_ptr(b.memory()) as usize)
            .or_default()
            .push((i, b));
    }
    for list in by_block.values() {
        let block = read_block(&ctx, list[0].1.memory());
        for &(i, b) in list {
            let at = (b.offset() / 4) as usize;
            let n = (b.size() / 4) as usize;
            assert!(
                block[at..at + n].iter().all(|&w| w == i as u32),
                "buffer {i} at offset {} was overwritten",
                b.offset()
            );
        }
    }
    drop(all);
    assert_eq!(pool.stats().buffers, 0);
    assert!(pool.stats().blocks <= 1);
    common::assert_clean(&ctx);
}

#[test]
fn ten_thousand_cycles_leak_nothing() {
    let _serial = common::serial();
    let Some(ctx) = common::vulkan("ten_thousand_cycles_leak_nothing") else {
        return;
    };
    let _warm = common::warm_up(&ctx);
    let fds = common::non_driver_fds();
    let pool = VulkanPool::new(&ctx, small_blocks()).unwrap();
    let mut rng = Rng(42);
    let mut ring: Vec<PooledBuffer> = Vec::new();
    let t = std::time::Instant::now();
    for i in 0..10_000u64 {
        // Mostly small buffers in blocks, every 500th an own allocation; eight stay alive,
        // so ranges are freed out of order.
        let size = if i % 500 == 0 {
            700 * KIB
        } else {
            16 * (1 + rng.below(16 * KIB))
        };
        ring.push(pool.create_buffer(size, STORAGE).unwrap());
        if ring.len() > 8 {
            let k = rng.below(ring.len() as u64) as usize;
            drop(ring.swap_remove(k));
        }
    }
    drop(ring);
    let s = pool.stats();
    eprintln!(
        "10,000 cycles in {:.2?}; after: {} blocks, {} buffers",
        t.elapsed(),
        s.blocks,
        s.buffers
    );
    assert_eq!((s.buffers, s.used_bytes, s.own_allocations), (0, 0, 0));
    assert!(s.blocks <= 1, "at most the one kept empty block");
    drop(pool);
    common::assert_non_driver_fds(fds, "file descriptors leaked");
    common::assert_clean(&ctx);
}

#[test]
fn pool_buffers_are_ordinary_vulkan_buffers() {
    let _serial = common::serial();
    let Some(ctx) = common::vulkan("pool_buffers_are_ordinary_vulkan_buffers") else {
        return;
    };
    let pool = VulkanPool::new(&ctx, small_blocks()).unwrap();
    let mut a = pool.create_buffer(4096, STORAGE).unwrap();
    let mut b = pool.create_buffer(4096, STORAGE).unwrap();
    // The copy helpers see each buffer from its own offset 0, sized as asked.
    assert_eq!(a.vk_size(), 4096);
    ctx.fill_buffer(&mut a, 0, 4096, 0xAAAA).unwrap();
    ctx.fill_buffer(&mut b, 0, 4096, 0xBBBB).unwrap();
    ctx.copy_buffer(&a, 0, &mut b, 2048, 2048).unwrap();
    let words = common::read_via_vulkan(&ctx, &b);
    assert!(words[..512].iter().all(|&w| w == 0xBBBB));
    assert!(words[512..].iter().all(|&w| w == 0xAAAA));
    assert!(common::read_via_vulkan(&ctx, &a)
        .iter()
        .all(|&w| w == 0xAAAA));
    // A copy past the buffer's end is refused (the range is the buffer, not the block).
    assert_err!(
        ctx.copy_buffer(&a, 0, &mut b, 4096, 4),
        Error::Layout(LayoutError::OutOfBounds { .. })
    );
    common::assert_clean(&ctx);
}
