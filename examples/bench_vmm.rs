//! CUDA virtual memory, side by side with what a user would otherwise do:
//!
//! 1. Growing a shared buffer by one chunk (`GrowableBuffer::add_chunk`: `cuMemCreate` +
//!    `cuMemMap` + `cuMemSetAccess` + the Vulkan import) vs reallocating and copying
//!    (`cuMemAlloc` of the new size + device-to-device copy + `cuMemFree`), at sizes from
//!    16 MiB to 4 GiB.
//! 2. A copy kernel's bandwidth through a VMM mapping vs on `cuMemAlloc` memory.
//!
//!     cargo run --release --example bench_vmm [-- --json out.json]

use std::time::Instant;

use anyhow::{bail, Context};
use cuvk::cudarc::driver::{result, sys};
use cuvk::{Bridge, BufferUsage, GrowableBuffer, VulkanView};
use cuvk_dev::{kernels, logger, stats};
use kernels::Kernels;
use stats::median;

const CHUNK: u64 = 2 << 20;

/// Median ms of reallocating `size` bytes to `size + CHUNK` and copying the old contents.
fn realloc_copy_ms(bridge: &Bridge, size: u64, reps: usize) -> anyhow::Result<f64> {
    bridge.cuda().bind_to_thread()?;
    let mut v = Vec::new();
    for _ in 0..reps {
        // SAFETY: plain allocations; the copy stays inside both; freed below.
        unsafe {
            let old = result::malloc_sync(size as usize)?;
            sys::cuMemsetD8_v2(old, 1, size as usize).result()?;
            sys::cuCtxSynchronize().result()?;
            let t = Instant::now();
            let new = result::malloc_sync((size + CHUNK) as usize)?;
            sys::cuMemcpyDtoD_v2(new, old, size as usize).result()?;
            result::free_sync(old)?;
            sys::cuCtxSynchronize().result()?;
            v.push(t.elapsed().as_secs_f64() * 1e3);
            result::free_sync(new)?;
        }
    }
    Ok(median(v))
}

fn main() -> anyhow::Result<()> {
    logger::init();
    let mut json_path = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json_path = Some(args.next().context("--json PATH")?),
            other => bail!("unknown argument {other}"),
        }
    }
    let bridge = cuvk_dev::demo::bench_bridge()?;
    let k = Kernels::load(bridge.cuda())?;

    // 1. Growth, with each Vulkan view.
    let max: u64 = 4 << 30;
    let new = |view| {
        GrowableBuffer::<u32>::with_view(
            &bridge,
            max + 16 * CHUNK,
            CHUNK,
            BufferUsage::STORAGE_BUFFER,
            view,
        )
    };
    let mut per_chunk = new(VulkanView::PerChunk)?;
    let mut sparse = new(VulkanView::Sparse).ok();
    if sparse.is_none() {
        println!("no sparse binding on this device: the sparse column is empty");
    }
    println!("\n| size    | grow 2 MiB, per-chunk view ms | grow 2 MiB, sparse view ms | realloc + copy ms | realloc / grow |");
    println!("|---------|-------------------------------|----------------------------|-------------------|----------------|");
    let mut rows = Vec::new();
    for (label, size) in [
        ("16 MiB", 16u64 << 20),
        ("64 MiB", 64 << 20),
        ("256 MiB", 256 << 20),
        ("1 GiB", 1 << 30),
        ("4 GiB", 4 << 30),
    ] {
        let grow_ms = |buf: &mut GrowableBuffer<u32>| -> anyhow::Result<f64> {
            let ptr = buf.cuda_ptr();
            while buf.capacity_bytes() < size {
                buf.add_chunk()?;
            }
            let mut grow = Vec::new();
            for _ in 0..5 {
                let t = Instant::now();
                buf.add_chunk()?;
                grow.push(t.elapsed().as_secs_f64() * 1e3);
            }
            if buf.cuda_ptr() != ptr {
                bail!("the growable buffer's pointer moved");
            }
            Ok(median(grow))
        };
        let g = grow_ms(&mut per_chunk)?;
        let gs = match sparse.as_mut() {
            Some(b) => grow_ms(b)?,
            None => f64::NAN,
        };
        let r = realloc_copy_ms(&bridge, size, 5)?;
        println!(
            "| {label:<7} | {g:>29.3} | {gs:>26.3} | {r:>17.3} | {:>14.1} |",
            r / g
        );
        rows.push(format!(
            "{{\"size\":\"{label}\",\"grow_chunk_ms\":{g:.4},\"grow_chunk_sparse_ms\":{gs:.4},\"realloc_copy_ms\":{r:.4}}}"
        ));
    }
    drop((per_chunk, sparse));

    // 2. Bandwidth.
    let n = (1usize << 30) / 4;
    let a = bridge.create_buffer_from_cuda::<u32>(n, BufferUsage::STORAGE_BUFFER)?;
    let b = bridge.create_buffer_from_cuda::<u32>(n, BufferUsage::STORAGE_BUFFER)?;
    k.write_pattern(bridge.stream(), a.kernel_arg(), n as u64, 1)?;
    bridge.cuda().bind_to_thread()?;
    // SAFETY: plain allocations, freed below after synchronised use.
    let (x, y) = unsafe { (result::malloc_sync(1 << 30)?, result::malloc_sync(1 << 30)?) };
    let vmm = median(k.copy_gbps(bridge.stream(), a.cuda_ptr(), b.cuda_ptr(), 1 << 30, 20)?);
    let plain = median(k.copy_gbps(bridge.stream(), x, y, 1 << 30, 20)?);
    // SAFETY: allocated above; the timed copies were synchronised.
    unsafe {
        result::free_sync(x)?;
        result::free_sync(y)?;
    }
    println!("\ncopy kernel, 1 GiB (GB/s read+write): VMM mapping {vmm:.0}, cuMemAlloc {plain:.0}, ratio {:.3}", vmm / plain);
    if let Some(p) = json_path {
        std::fs::write(
            &p,
            format!(
                "{{\"device\":\"{}\",\"growth\":[{}],\"copy_gbps\":{{\"vmm\":{vmm:.1},\"cumemalloc\":{plain:.1}}}}}\n",
                bridge.vulkan().info().name,
                rows.join(",")
            ),
        )?;
        println!("wrote {p}");
    }
    Ok(())
}
