//! Staging through host-visible memory, as the Python module's `vulkan_read` / `vulkan_write`
//! do: `cuvk::vulkan::HostBuffer` for uploads (any coherent memory, write-combined included)
//! and for readback (host-cached where the device has it), beside what the module used
//! before (`gpu-allocator`'s `GpuToCpu`). Per size: the GPU's copy into the staging buffer
//! (device memory → staging, waited for) and the host's read and write of the whole buffer.
//!
//! `cargo run --release --example bench_staging`

use std::time::Instant;

use anyhow::bail;
use cuvk::ash::vk;
use cuvk::vulkan::{
    AsVkBuffer, BoundBuffer, HostAccess, HostBuffer, Validation, VulkanConfig, VulkanContext,
};
use cuvk_dev::{logger, MemoryLocation, PrivateAllocator, PrivateBuffer};

const REPEATS: usize = 5;

/// The best of `REPEATS` runs of `f`, in seconds.
fn best(mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    let mut best = f64::INFINITY;
    for _ in 0..REPEATS {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

fn gbps(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / seconds / 1e9
}

fn main() -> anyhow::Result<()> {
    logger::init();
    if let Some(a) = std::env::args().nth(1) {
        bail!("unknown argument {a}");
    }
    let vk = VulkanContext::new(VulkanConfig {
        validation: Validation::IfAvailable.or_from_env(),
        ..Default::default()
    })?;
    println!("device: {}", vk.info().describe());
    println!("\n| staging memory                   | size    | GPU copy in GB/s | host read GB/s | host write GB/s |");
    println!("|----------------------------------|---------|------------------|----------------|-----------------|");
    let alloc = PrivateAllocator::new(&vk)?;
    for mib in [16u64, 256] {
        let bytes = mib << 20;
        let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
        let mut device =
            BoundBuffer::new_exportable(&vk, bytes, usage, vk::MemoryPropertyFlags::DEVICE_LOCAL)?;
        vk.fill_buffer(&mut device, 0, bytes, 0x3f80_0000)?;
        let upload = HostBuffer::with_access(&vk, bytes, usage, HostAccess::Upload)?;
        let readback = HostBuffer::with_access(&vk, bytes, usage, HostAccess::Readback)?;
        let cached = if readback.is_cached() {
            "cached"
        } else {
            "uncached"
        };
        let dev = PrivateBuffer::new(&alloc, "staging", bytes, usage, MemoryLocation::GpuToCpu)?;
        let mut rows = [
            ("HostBuffer, Upload".to_owned(), Staging::Host(upload)),
            (
                format!("HostBuffer, Readback ({cached})"),
                Staging::Host(readback),
            ),
            ("gpu-allocator GpuToCpu (0.3)".to_owned(), Staging::Dev(dev)),
        ];
        let data = vec![0x5au8; bytes as usize];
        for (name, staging) in rows.iter_mut() {
            let copy = best(|| Ok(vk.copy_buffer(&device, 0, staging.buffer(), 0, bytes)?))?;
            let read = best(|| {
                let v = staging.read()?;
                anyhow::ensure!(v[..4] == [0, 0, 0x80, 0x3f], "the copy's data");
                Ok(())
            })?;
            let write = best(|| staging.write(&data))?;
            println!(
                "| {name:<32} | {mib:>3} MiB | {:>16.1} | {:>14.1} | {:>15.1} |",
                gbps(bytes, copy),
                gbps(bytes, read),
                gbps(bytes, write),
            );
        }
    }
    Ok(())
}

/// A staging buffer of either kind.
enum Staging {
    Host(HostBuffer),
    Dev(PrivateBuffer),
}

impl Staging {
    fn buffer(&mut self) -> &mut dyn AsVkBuffer {
        match self {
            Staging::Host(b) => b,
            Staging::Dev(b) => b,
        }
    }
    fn read(&self) -> anyhow::Result<Vec<u8>> {
        Ok(match self {
            Staging::Host(b) => b.read::<u8>()?,
            Staging::Dev(b) => b.read::<u8>()?,
        })
    }
    fn write(&mut self, data: &[u8]) -> anyhow::Result<()> {
        match self {
            Staging::Host(b) => b.write(data)?,
            Staging::Dev(b) => b.write(data)?,
        }
        Ok(())
    }
}
