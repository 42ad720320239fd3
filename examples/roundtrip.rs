//! Round trip through shared memory, both ways, with every element checked:
//! CUDA writes a pattern → Vulkan copies it to host memory → checked; Vulkan fills → CUDA
//! counts mismatches → checked. Then the same for several buffers at non-zero offsets
//! inside one non-dedicated allocation, with their neighbours checked untouched.
//!
//!     cargo run --release --example roundtrip [-- --elements N]

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::vulkan::{BoundBuffer, HostBuffer, Validation, VulkanConfig, VulkanContext};
use cuvk::{Bridge, BridgeConfig, BufferUsage, SharedBuffer};
use cuvk_dev::{kernels, logger};
use kernels::{pattern, Kernels};

fn main() -> anyhow::Result<()> {
    logger::init();
    let mut elements: usize = 1 << 22;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--elements" => elements = args.next().context("--elements N")?.parse()?,
            other => bail!("unknown argument {other} (expected --elements N)"),
        }
    }
    let validation = Validation::IfAvailable.or_from_env();
    let bridge = match Bridge::new(BridgeConfig {
        validation,
        ..Default::default()
    }) {
        Ok(b) => b,
        Err(e) if e.is_unavailable() => {
            println!("no CUDA GPU here ({e}): running the Vulkan-only round trip instead");
            return vulkan_only(validation, elements);
        }
        Err(e) => {
            return Err(e).context("opening CUDA device 0 and the Vulkan device with its UUID")
        }
    };
    println!(
        "device: {} (uuid {}), validation {}",
        bridge.vulkan().info().name,
        bridge.uuid(),
        if bridge.vulkan().validation_enabled() {
            "on"
        } else {
            "off"
        }
    );
    let k = Kernels::load(bridge.cuda())?;

    // 1. One buffer in its own allocation (dedicated when the driver asks for it).
    let mut buf: SharedBuffer<u32> = bridge.create_buffer(elements, BufferUsage::STORAGE_BUFFER)?;
    println!(
        "buffer: {} elements, allocation {} bytes, dedicated {}",
        buf.len(),
        buf.allocation().map_or(0, |a| a.size()),
        buf.allocation().is_some_and(|a| a.is_dedicated())
    );
    cuda_writes_vulkan_reads(&bridge, &k, &buf, 0x1234_5678)?;
    vulkan_fills_cuda_reads(&bridge, &k, &mut buf, 0xcafe_f00d)?;
    println!("round trip (own allocation): CUDA->Vulkan and Vulkan->CUDA correct, {elements} elements each");

    // 2. Several buffers inside one non-dedicated allocation, at non-zero offsets.
    let alloc = bridge.create_allocation(8 << 20, BufferUsage::STORAGE_BUFFER)?;
    let offsets = [0u64, 256 << 10, (1 << 20) + 4096, 5 << 20];
    let lens = [1000usize, 65_536, 300_001, 700_000];
    let mut bufs = offsets
        .iter()
        .zip(lens)
        .map(|(&o, n)| alloc.buffer::<u32>(o, n))
        .collect::<cuvk::Result<Vec<_>>>()?;
    for (i, b) in bufs.iter().enumerate() {
        k.write_pattern(
            bridge.stream(),
            b.kernel_arg(),
            b.len() as u64,
            100 + i as u32,
        )?;
    }
    bridge.stream().synchronize()?;
    for (i, b) in bufs.iter().enumerate() {
        check_vulkan_sees_pattern(&bridge, b, 100 + i as u32)?;
    }
    for (i, b) in bufs.iter_mut().enumerate() {
        let size = b.byte_size() & !3;
        bridge.vulkan().fill_buffer(b, 0, size, 0xa0 + i as u32)?;
    }
    for (i, b) in bufs.iter().enumerate() {
        let bad = k.count_not_equal(
            bridge.stream(),
            b.kernel_arg(),
            b.len() as u64,
            0xa0 + i as u32,
        )?;
        if bad != 0 {
            bail!(
                "buffer at offset {}: CUDA sees {bad} elements differ from the Vulkan fill",
                b.offset()
            );
        }
    }
    println!(
        "sub-allocated: {} buffers at offsets {:?} in one {} MiB allocation, both directions correct",
        bufs.len(),
        offsets,
        alloc.size() >> 20
    );
    let msgs = bridge.vulkan().validation_messages();
    if !msgs.is_empty() {
        bail!("validation messages:\n{}", msgs.join("\n"));
    }
    println!("roundtrip: OK");
    Ok(())
}

fn cuda_writes_vulkan_reads(
    bridge: &Bridge,
    k: &Kernels,
    buf: &SharedBuffer<u32>,
    seed: u32,
) -> anyhow::Result<()> {
    k.write_pattern(bridge.stream(), buf.kernel_arg(), buf.len() as u64, seed)?;
    bridge.stream().synchronize()?;
    check_vulkan_sees_pattern(bridge, buf, seed)
}

fn check_vulkan_sees_pattern(
    bridge: &Bridge,
    buf: &SharedBuffer<u32>,
    seed: u32,
) -> anyhow::Result<()> {
    let mut host = HostBuffer::new(
        bridge.vulkan(),
        buf.byte_size(),
        vk::BufferUsageFlags::empty(),
    )?;
    bridge
        .vulkan()
        .copy_buffer(buf, 0, &mut host, 0, buf.byte_size())?;
    let got: Vec<u32> = host.read()?;
    if let Some(i) = (0..buf.len()).find(|&i| got[i] != pattern(i, seed)) {
        bail!(
            "buffer at offset {}: element {i} is {:#x}, CUDA wrote {:#x}",
            buf.offset(),
            got[i],
            pattern(i, seed)
        );
    }
    Ok(())
}

fn vulkan_fills_cuda_reads(
    bridge: &Bridge,
    k: &Kernels,
    buf: &mut SharedBuffer<u32>,
    value: u32,
) -> anyhow::Result<()> {
    let size = buf.byte_size();
    bridge.vulkan().fill_buffer(buf, 0, size, value)?;
    let bad = k.count_not_equal(bridge.stream(), buf.kernel_arg(), buf.len() as u64, value)?;
    if bad != 0 {
        bail!(
            "CUDA sees {bad} of {} elements differ from the Vulkan fill",
            buf.len()
        );
    }
    let host = buf.cuda_read()?;
    if host.iter().any(|&w| w != value) {
        bail!("cuda_read differs from the Vulkan fill");
    }
    Ok(())
}

/// Without CUDA: memory exported from one Vulkan device is imported into a second `VkDevice`
/// (the same path the CUDA import takes, checked end to end on any Vulkan driver).
fn vulkan_only(validation: Validation, elements: usize) -> anyhow::Result<()> {
    let config = VulkanConfig {
        validation,
        ..Default::default()
    };
    let (a_ctx, b_ctx) = (
        VulkanContext::new(config.clone())?,
        VulkanContext::new(config)?,
    );
    println!("device: {}", a_ctx.info().describe());
    let bytes = elements as u64 * 4;
    let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
    let mut a =
        BoundBuffer::new_exportable(&a_ctx, bytes, usage, vk::MemoryPropertyFlags::empty())?;
    let b = BoundBuffer::import_from(&b_ctx, &a)?;
    let data: Vec<u32> = (0..elements).map(|i| pattern(i, 7)).collect();
    let mut up = HostBuffer::new(&a_ctx, bytes, vk::BufferUsageFlags::empty())?;
    up.write(&data)?;
    a_ctx.copy_buffer(&up, 0, &mut a, 0, bytes)?;
    let mut down = HostBuffer::new(&b_ctx, bytes, vk::BufferUsageFlags::empty())?;
    b_ctx.copy_buffer(&b, 0, &mut down, 0, bytes)?;
    if down.read::<u32>()? != data {
        bail!("the second device read different data through the imported memory");
    }
    for ctx in [&a_ctx, &b_ctx] {
        let msgs = ctx.validation_messages();
        if !msgs.is_empty() {
            bail!("validation messages:\n{}", msgs.join("\n"));
        }
    }
    println!(
        "Vulkan-only round trip: {elements} elements written on device A, read on device B: OK"
    );
    Ok(())
}
