//! Benchmark of the core bridge, side by side with what a user would otherwise do:
//!
//! 1. A 16-byte-vector copy kernel on imported (Vulkan-allocated) memory vs on `cuMemAlloc`
//!    memory: GB/s counting bytes read + written, and the ratio.
//! 2. Setup cost (allocate + export + import + map) for 1 MiB, 256 MiB and 4 GiB, split into
//!    the Vulkan part (buffer, allocation, FD export) and the CUDA part (import, map), beside
//!    a plain `cuMemAlloc` of the same size. Context creation is excluded.
//!
//!     cargo run --release --example bench_bridge [-- --json out.json --copy-mib 1024]

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::cuda::{ImportedMemory, MapOptions};
use cuvk::cudarc::driver::result;
use cuvk::vulkan::{AllocateInfo, Buffer, BufferDesc, DeviceMemory, ExternalUse};
use cuvk::{Bridge, BridgeConfig, BufferUsage};
use cuvk_dev::{kernels, logger, stats};
use kernels::Kernels;
use stats::median;

struct Setup {
    vulkan_ms: f64,
    cuda_ms: f64,
    cumemalloc_ms: f64,
}

/// One timed setup of `size` bytes through the bridge's layers, and one `cuMemAlloc`.
fn setup_once(bridge: &Bridge, size: u64) -> anyhow::Result<Setup> {
    let usage = BufferUsage::STORAGE_BUFFER | BufferUsage::TRANSFER_SRC | BufferUsage::TRANSFER_DST;
    let t0 = Instant::now();
    let buffer = Buffer::new(
        bridge.vulkan(),
        BufferDesc {
            size,
            usage,
            external: ExternalUse::Export,
        },
    )?;
    let r = buffer.requirements();
    let dedicated = r.requires_dedicated || r.prefers_dedicated;
    let memory = Arc::new(DeviceMemory::allocate(
        bridge.vulkan(),
        AllocateInfo {
            size: r.size,
            memory_type_bits: r.memory_type_bits,
            properties: vk::MemoryPropertyFlags::DEVICE_LOCAL,
            exportable: true,
        },
        dedicated.then_some(&buffer),
    )?);
    let bound = buffer.bind(memory.clone(), 0)?;
    let fd = memory.export()?;
    let t1 = Instant::now();
    // SAFETY: a fresh export of `memory` with its allocation size and dedicated-ness.
    let imported = unsafe {
        ImportedMemory::import(
            bridge.cuda(),
            fd,
            memory.import_layout(),
            Some(memory.clone()),
        )
    }?;
    let mapping = imported.map(
        0,
        size,
        MapOptions {
            vulkan_alignment: r.alignment,
            allow_overlap: false,
        },
    )?;
    let t2 = Instant::now();
    drop((mapping, imported, bound, memory));

    bridge.cuda().bind_to_thread()?;
    let t3 = Instant::now();
    // SAFETY: plain allocation of `size` bytes, freed right after.
    let p = unsafe { result::malloc_sync(size as usize) }?;
    let t4 = Instant::now();
    // SAFETY: allocated just above.
    unsafe { result::free_sync(p) }?;
    let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
    Ok(Setup {
        vulkan_ms: ms(t0, t1),
        cuda_ms: ms(t1, t2),
        cumemalloc_ms: ms(t3, t4),
    })
}

fn main() -> anyhow::Result<()> {
    logger::init();
    let mut json_path: Option<String> = None;
    let mut copy_mib: u64 = 1024;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json_path = Some(args.next().context("--json PATH")?),
            "--copy-mib" => copy_mib = args.next().context("--copy-mib N")?.parse()?,
            other => bail!("unknown argument {other}"),
        }
    }
    let bridge = Bridge::new(BridgeConfig::default())?;
    let name = bridge.vulkan().info().name.clone();
    println!("device: {name} (uuid {})", bridge.uuid());
    let k = Kernels::load(bridge.cuda())?;

    // 1. Copy bandwidth.
    let n = (copy_mib << 20) / 4;
    let src = bridge.create_buffer::<u32>(n as usize, BufferUsage::STORAGE_BUFFER)?;
    let dst = bridge.create_buffer::<u32>(n as usize, BufferUsage::STORAGE_BUFFER)?;
    k.write_pattern(bridge.stream(), src.kernel_arg(), n, 1)?;
    let bytes = n * 4;
    bridge.cuda().bind_to_thread()?;
    // SAFETY: plain allocations of `bytes`, freed below.
    let (a, b) = unsafe {
        (
            result::malloc_sync(bytes as usize)?,
            result::malloc_sync(bytes as usize)?,
        )
    };
    k.write_pattern(bridge.stream(), &a, n, 1)?;
    let iters = 20;
    let imported = median(k.copy_gbps(
        bridge.stream(),
        src.cuda_ptr(),
        dst.cuda_ptr(),
        bytes,
        iters,
    )?);
    let plain = median(k.copy_gbps(bridge.stream(), a, b, bytes, iters)?);
    // Second pass of each, to show the spread between identical runs.
    let imported2 = median(k.copy_gbps(
        bridge.stream(),
        src.cuda_ptr(),
        dst.cuda_ptr(),
        bytes,
        iters,
    )?);
    let plain2 = median(k.copy_gbps(bridge.stream(), a, b, bytes, iters)?);
    // SAFETY: allocated above, no work pending after the synchronised timing.
    unsafe {
        result::free_sync(a)?;
        result::free_sync(b)?;
    }
    drop((src, dst));
    let ratio = imported.max(imported2) / plain.max(plain2);
    println!();
    println!("copy kernel, {copy_mib} MiB, median of {iters} (GB/s, read+write), two passes each");
    println!("| memory                      | pass 1 GB/s | pass 2 GB/s |");
    println!("|-----------------------------|-------------|-------------|");
    println!("| imported (Vulkan, OPAQUE_FD)| {imported:>11.0} | {imported2:>11.0} |");
    println!("| cuMemAlloc                  | {plain:>11.0} | {plain2:>11.0} |");
    println!("ratio imported / cuMemAlloc (best pass each): {ratio:.3}");

    // 2. Setup cost.
    println!();
    println!("setup cost (median ms): Vulkan = buffer + allocate + bind + export FD; CUDA = import + map");
    println!("| size    | reps | Vulkan ms | CUDA ms | total ms | cuMemAlloc ms |");
    println!("|---------|------|-----------|---------|----------|---------------|");
    let mut rows = Vec::new();
    for (label, size, reps) in [
        ("1 MiB", 1u64 << 20, 50usize),
        ("256 MiB", 256 << 20, 10),
        ("4 GiB", 4 << 30, 5),
    ] {
        setup_once(&bridge, size)?; // warm-up
        let mut v = Vec::new();
        let mut c = Vec::new();
        let mut m = Vec::new();
        for _ in 0..reps {
            let s = setup_once(&bridge, size)?;
            v.push(s.vulkan_ms);
            c.push(s.cuda_ms);
            m.push(s.cumemalloc_ms);
        }
        let (vm, cm, mm) = (median(v), median(c), median(m));
        println!(
            "| {label:<7} | {reps:>4} | {vm:>9.3} | {cm:>7.3} | {:>8.3} | {mm:>13.3} |",
            vm + cm
        );
        rows.push(format!(
            "{{\"size\":\"{label}\",\"bytes\":{size},\"reps\":{reps},\"vulkan_ms\":{vm:.4},\"cuda_ms\":{cm:.4},\"total_ms\":{:.4},\"cumemalloc_ms\":{mm:.4}}}",
            vm + cm
        ));
    }
    let json = format!(
        "{{\"device\":\"{name}\",\"copy_mib\":{copy_mib},\"copy_gbps\":{{\"imported\":[{imported:.1},{imported2:.1}],\"cumemalloc\":[{plain:.1},{plain2:.1}],\"ratio\":{ratio:.4}}},\"setup\":[{}]}}",
        rows.join(",")
    );
    if let Some(p) = json_path {
        std::fs::write(&p, json + "\n").with_context(|| format!("writing {p}"))?;
        println!("\nwrote {p}");
    }
    Ok(())
}
