//! Benchmark of `SharedPool`, side by side with what a user would otherwise do (one exportable
//! allocation, export and CUDA import per buffer, `Bridge::create_buffer`):
//!
//! 1. Create + drop of one shared buffer of 64 KiB, 1 MiB and 16 MiB, median µs: from a pool
//!    (one buffer live at a time; and with 64 live buffers, each new one replacing a random
//!    old one), one allocation per buffer, and a plain `cuMemAlloc` + `cuMemFree` for scale.
//! 2. Memory overhead (reserved / requested) over a random workload of 10,000 buffers of
//!    mixed sizes (log-uniform, 256 B to 4 MiB, fixed seed): all live, then after freeing a
//!    random half and allocating 5,000 more. Beside it, what one allocation per buffer
//!    reserves for the same 10,000 buffers.
//!
//!     cargo run --release --example bench_pool [-- --json out.json --reps 5000]

use std::time::Instant;

use anyhow::{bail, Context};
use cuvk::cudarc::driver::result;
use cuvk::{Bridge, BridgeConfig, BufferUsage, PoolDesc, PoolStats, SharedBuffer, SharedPool};
use cuvk_dev::{logger, stats};
use stats::median;

const STORAGE: BufferUsage = BufferUsage::STORAGE_BUFFER;

/// A small deterministic generator (xorshift64*): the same workload every run.
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
    /// Log-uniform in 256 B ..= 4 MiB, a multiple of 4.
    fn mixed_size(&mut self) -> usize {
        let exp = 8.0 + 14.0 * (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((2f64.powf(exp) as usize) / 4 * 4).max(4)
    }
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// Median µs of `reps` create + drop of one pool buffer of `bytes`.
fn pool_one_live(pool: &SharedPool, bytes: usize, reps: usize) -> anyhow::Result<f64> {
    drop(pool.create_buffer::<u8>(bytes, STORAGE)?); // the block exists from here on
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        let b: SharedBuffer<u8> = pool.create_buffer(bytes, STORAGE)?;
        drop(b);
        v.push(us(t));
    }
    Ok(median(v))
}

/// Median µs of `reps` (create one, drop a random live one) with 64 buffers live.
fn pool_ring(pool: &SharedPool, bytes: usize, reps: usize) -> anyhow::Result<f64> {
    let mut rng = Rng(1);
    let mut ring: Vec<SharedBuffer<u8>> = Vec::new();
    for _ in 0..64 {
        ring.push(pool.create_buffer(bytes, STORAGE)?);
    }
    for _ in 0..256 {
        // warm-up churn
        let k = rng.below(64) as usize;
        ring[k] = pool.create_buffer(bytes, STORAGE)?;
    }
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let k = rng.below(64) as usize;
        let t = Instant::now();
        let b: SharedBuffer<u8> = pool.create_buffer(bytes, STORAGE)?;
        drop(std::mem::replace(&mut ring[k], b));
        v.push(us(t));
    }
    Ok(median(v))
}

/// Median µs of `reps` create + drop through `Bridge::create_buffer`.
fn per_buffer(bridge: &Bridge, bytes: usize, reps: usize) -> anyhow::Result<f64> {
    drop(bridge.create_buffer::<u8>(bytes, STORAGE)?);
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        let b: SharedBuffer<u8> = bridge.create_buffer(bytes, STORAGE)?;
        drop(b);
        v.push(us(t));
    }
    Ok(median(v))
}

/// Median µs of `reps` `cuMemAlloc` + `cuMemFree`.
fn cu_mem_alloc(bridge: &Bridge, bytes: usize, reps: usize) -> anyhow::Result<f64> {
    bridge.cuda().bind_to_thread()?;
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        // SAFETY: a plain allocation, freed right after.
        let p = unsafe { result::malloc_sync(bytes) }?;
        // SAFETY: allocated just above, unused.
        unsafe { result::free_sync(p) }?;
        v.push(us(t));
    }
    Ok(median(v))
}

fn stats_json(s: &PoolStats) -> String {
    format!(
        "{{\"blocks\":{},\"own_allocations\":{},\"buffers\":{},\"requested_bytes\":{},\"used_bytes\":{},\"reserved_bytes\":{},\"largest_free_range\":{},\"fragmentation\":{:.4},\"overhead\":{:.4}}}",
        s.blocks,
        s.own_allocations,
        s.buffers,
        s.requested_bytes,
        s.used_bytes,
        s.reserved_bytes,
        s.largest_free_range,
        s.fragmentation,
        s.overhead()
    )
}

fn main() -> anyhow::Result<()> {
    logger::init();
    let mut json_path: Option<String> = None;
    let mut reps: usize = 5000;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json_path = Some(args.next().context("--json PATH")?),
            "--reps" => reps = args.next().context("--reps N")?.parse()?,
            other => bail!("unknown argument {other}"),
        }
    }
    let bridge = Bridge::new(BridgeConfig::default())?;
    let name = bridge.vulkan().info().name.clone();
    println!("device: {name} (uuid {})", bridge.uuid());
    let desc = PoolDesc::new(STORAGE);
    println!(
        "pool: blocks of {} MiB, own allocation above {} MiB, {} empty block kept",
        desc.block_size >> 20,
        desc.dedicated_threshold >> 20,
        desc.keep_empty_blocks
    );

    // 1. Create + drop.
    println!();
    println!("create + drop of one shared buffer, median us ({reps} reps for pools and cuMemAlloc, 200 per buffer)");
    println!("| size   | pool, 1 live | pool, 64 live | one allocation per buffer | cuMemAlloc+Free | speed-up (1 live) |");
    println!("|--------|--------------|---------------|---------------------------|-----------------|-------------------|");
    let mut rows = Vec::new();
    for (label, bytes) in [
        ("64 KiB", 64usize << 10),
        ("1 MiB", 1 << 20),
        ("16 MiB", 16 << 20),
    ] {
        let pool = bridge.create_pool(desc)?;
        let one = pool_one_live(&pool, bytes, reps)?;
        drop(pool);
        let pool = bridge.create_pool(desc)?;
        let ring = pool_ring(&pool, bytes, reps)?;
        drop(pool);
        let alone = per_buffer(&bridge, bytes, 200)?;
        let cu = cu_mem_alloc(&bridge, bytes, reps)?;
        let speedup = alone / one;
        println!(
            "| {label:<6} | {one:>12.2} | {ring:>13.2} | {alone:>25.1} | {cu:>15.2} | {speedup:>16.0}x |"
        );
        rows.push(format!(
            "{{\"size\":\"{label}\",\"bytes\":{bytes},\"pool_us\":{one:.3},\"pool_64_live_us\":{ring:.3},\"per_buffer_us\":{alone:.3},\"cumemalloc_us\":{cu:.3},\"speedup\":{speedup:.1}}}"
        ));
    }

    // 2. Memory overhead over a random workload.
    let mut rng = Rng(0x5eed);
    let sizes: Vec<usize> = (0..10_000).map(|_| rng.mixed_size()).collect();
    let requested: u64 = sizes.iter().map(|&s| s as u64).sum();
    println!();
    println!(
        "memory overhead, 10,000 buffers log-uniform 256 B - 4 MiB ({:.1} MiB requested)",
        requested as f64 / (1 << 20) as f64
    );
    let pool = bridge.create_pool(desc)?;
    let t = Instant::now();
    let mut live: Vec<SharedBuffer<u8>> = Vec::with_capacity(sizes.len());
    for &s in &sizes {
        live.push(pool.create_buffer(s, STORAGE)?);
    }
    let fill_ms = t.elapsed().as_secs_f64() * 1e3;
    let all_live = pool.stats();
    let summary = pool.report().to_string();
    println!("{}", summary.lines().next().unwrap_or_default());
    // Churn: free a random half, then allocate 5,000 more of the same distribution.
    for _ in 0..5_000 {
        let k = rng.below(live.len() as u64) as usize;
        drop(live.swap_remove(k));
    }
    for _ in 0..5_000 {
        live.push(pool.create_buffer(rng.mixed_size(), STORAGE)?);
    }
    let churned = pool.stats();
    drop(live);
    drop(pool);

    let t = Instant::now();
    let mut alone: Vec<SharedBuffer<u8>> = Vec::with_capacity(sizes.len());
    for &s in &sizes {
        alone.push(bridge.create_buffer(s, STORAGE)?);
    }
    let alone_ms = t.elapsed().as_secs_f64() * 1e3;
    let alone_reserved: u64 = alone
        .iter()
        .map(|b| b.allocation().map_or(0, |a| a.size()))
        .sum();
    drop(alone);
    let alone_overhead = alone_reserved as f64 / requested as f64;

    println!("| workload                        | blocks | own | reserved MiB | reserved / requested | fragmentation | create all, ms |");
    println!("|---------------------------------|--------|-----|--------------|----------------------|---------------|----------------|");
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "| pool, 10,000 live               | {:>6} | {:>3} | {:>12.1} | {:>20.3} | {:>13.3} | {fill_ms:>14.1} |",
        all_live.blocks,
        all_live.own_allocations,
        mib(all_live.reserved_bytes),
        all_live.overhead(),
        all_live.fragmentation
    );
    println!(
        "| pool, after half freed + 5,000  | {:>6} | {:>3} | {:>12.1} | {:>20.3} | {:>13.3} |              - |",
        churned.blocks,
        churned.own_allocations,
        mib(churned.reserved_bytes),
        churned.overhead(),
        churned.fragmentation
    );
    println!(
        "| one allocation per buffer       |      - | {:>3} | {:>12.1} | {:>20.3} |             - | {alone_ms:>14.1} |",
        sizes.len(),
        mib(alone_reserved),
        alone_overhead
    );

    let json = format!(
        "{{\"device\":\"{name}\",\"block_size\":{},\"reps\":{reps},\"create_drop\":[{}],\"overhead\":{{\"requested_bytes\":{requested},\"pool_all_live\":{},\"pool_after_churn\":{},\"pool_create_all_ms\":{fill_ms:.1},\"per_buffer_reserved_bytes\":{alone_reserved},\"per_buffer_overhead\":{alone_overhead:.4},\"per_buffer_create_all_ms\":{alone_ms:.1}}}}}",
        desc.block_size,
        rows.join(","),
        stats_json(&all_live),
        stats_json(&churned)
    );
    if let Some(p) = json_path {
        std::fs::write(&p, json + "\n").with_context(|| format!("writing {p}"))?;
        println!("\nwrote {p}");
    }
    Ok(())
}
