//! The bridge on a real CUDA + Vulkan GPU: data written by one API checked through the other,
//! sub-allocated buffers, every bad input the core issue names, and leak-free cycles.
//! Skips with a printed reason where there is no GPU; REQUIRE_GPU=1 makes that a failure.

use cuvk_dev::assert_err;
use cuvk_dev::kernels;
use cuvk_dev::testing as common;

use std::sync::Arc;

use cuvk::ash::vk;
use cuvk::cuda::{ImportedMemory, MapOptions};
use cuvk::cudarc::driver::DevicePtrMut;
use cuvk::vulkan::{AllocateInfo, Buffer, BufferDesc, DeviceMemory, ExternalUse};
use cuvk::{AlignmentRule, Bridge, BufferPlacement, BufferUsage, Error, LayoutError, SharedBuffer};
use kernels::{pattern, Kernels};

/// An element type aligned to 32 bytes (like a float4x2 or an aligned struct in a kernel).
#[repr(C, align(32))]
#[derive(Clone, Copy, bytemuck::Zeroable, bytemuck::Pod)]
struct Wide([u32; 8]);

fn read_via_vulkan(bridge: &Bridge, buf: &SharedBuffer<u32>) -> Vec<u32> {
    common::read_via_vulkan(bridge.vulkan(), buf)
}

fn assert_pattern(got: &[u32], seed: u32, what: &str) {
    let bad: Vec<usize> = (0..got.len())
        .filter(|&i| got[i] != pattern(i, seed))
        .take(5)
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: elements {bad:?} differ from what CUDA wrote"
    );
}

fn cuda_free() -> usize {
    cuvk::cudarc::driver::result::mem_get_info().unwrap().0
}

#[test]
fn round_trip_both_ways() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("round_trip_both_ways") else {
        return;
    };
    let k = Kernels::load(bridge.cuda()).unwrap();
    let n = 3_000_017usize; // not a power of two: the tail counts
    let mut buf: SharedBuffer<u32> = bridge
        .create_buffer(n, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    eprintln!(
        "allocation {} bytes for {} bytes of buffer, dedicated: {}",
        buf.allocation().expect("Vulkan-allocated").size(),
        buf.byte_size(),
        buf.allocation().expect("Vulkan-allocated").is_dedicated()
    );
    k.write_pattern(bridge.stream(), buf.kernel_arg(), n as u64, 42)
        .unwrap();
    bridge.stream().synchronize().unwrap();
    assert_pattern(
        &read_via_vulkan(&bridge, &buf),
        42,
        "Vulkan read of CUDA's write",
    );

    let bytes = buf.byte_size();
    bridge
        .vulkan()
        .fill_buffer(&mut buf, 0, bytes, 0x5eed)
        .unwrap();
    assert_eq!(
        k.count_not_equal(bridge.stream(), buf.kernel_arg(), n as u64, 0x5eed)
            .unwrap(),
        0
    );
    assert!(buf.cuda_read().unwrap().iter().all(|&w| w == 0x5eed));
    common::assert_clean(bridge.vulkan());
}

#[test]
fn sub_allocated_buffers_keep_their_own_data() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("sub_allocated_buffers_keep_their_own_data") else {
        return;
    };
    let k = Kernels::load(bridge.cuda()).unwrap();
    let alloc = bridge
        .create_allocation(16 << 20, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    assert!(!alloc.is_dedicated());
    let layout = [
        (0u64, 4096usize),
        (64 << 10, 1000),
        (2 << 20, 1 << 20),
        (12 << 20, 777_777),
    ];
    let mut bufs: Vec<SharedBuffer<u32>> = layout
        .iter()
        .map(|&(o, n)| alloc.buffer(o, n).unwrap())
        .collect();
    for (i, b) in bufs.iter().enumerate() {
        k.write_pattern(
            bridge.stream(),
            b.kernel_arg(),
            b.len() as u64,
            i as u32 * 7919,
        )
        .unwrap();
    }
    bridge.stream().synchronize().unwrap();
    for (i, b) in bufs.iter().enumerate() {
        assert_pattern(
            &read_via_vulkan(&bridge, b),
            i as u32 * 7919,
            &format!("buffer at {}", b.offset()),
        );
    }
    // Vulkan writes each, CUDA checks each and that its neighbours kept their values.
    for (i, b) in bufs.iter_mut().enumerate() {
        let bytes = b.byte_size();
        bridge
            .vulkan()
            .fill_buffer(b, 0, bytes, 1000 + i as u32)
            .unwrap();
    }
    for (i, b) in bufs.iter().enumerate() {
        let bad = k
            .count_not_equal(
                bridge.stream(),
                b.kernel_arg(),
                b.len() as u64,
                1000 + i as u32,
            )
            .unwrap();
        assert_eq!(bad, 0, "buffer at offset {}", b.offset());
    }
    common::assert_clean(bridge.vulkan());
}

/// The CUDA offset rule measured in DESIGN.md, now with data: map ranges of one
/// non-dedicated import at offsets from 16 B to 2 MiB, write through each CUDA mapping, and
/// read the whole allocation back through one Vulkan buffer at offset 0.
#[test]
fn mapped_offsets_carry_correct_data() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("mapped_offsets_carry_correct_data") else {
        return;
    };
    let k = Kernels::load(bridge.cuda()).unwrap();
    let size = 4u64 << 20;
    let alloc = bridge
        .create_allocation(size, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    let imported = alloc.cuda_memory();
    let offsets = [16u64, 32, 48, 256, 4096, 64 << 10, 2 << 20];
    // Each range runs up to the next offset (at most 64 words): disjoint, so the overlap
    // check stays on and guards the test itself.
    let words: Vec<u64> = offsets
        .iter()
        .enumerate()
        .map(|(i, &o)| {
            offsets
                .get(i + 1)
                .map_or(64, |&next| ((next - o) / 4).min(64))
        })
        .collect();
    let opts = MapOptions {
        vulkan_alignment: 1,
        allow_overlap: false,
    };
    let mut mappings = Vec::new();
    for (i, (&o, &w)) in offsets.iter().zip(&words).enumerate() {
        let m = imported.map(o, w * 4, opts).unwrap();
        k.write_pattern(bridge.stream(), m.device_ptr_ref(), w, 0x100 + i as u32)
            .unwrap();
        mappings.push(m);
    }
    bridge.stream().synchronize().unwrap();
    // The whole allocation as one Vulkan buffer (its CUDA view overlaps every range above,
    // so this one is allowed to), copied to the host by Vulkan.
    let overlapping = BufferPlacement {
        offset: 0,
        allow_overlap: true,
    };
    let whole: SharedBuffer<u32> = alloc.buffer_with((size / 4) as usize, overlapping).unwrap();
    let all = read_via_vulkan(&bridge, &whole);
    for (i, (&o, &w)) in offsets.iter().zip(&words).enumerate() {
        let at = (o / 4) as usize;
        assert_pattern(
            &all[at..at + w as usize],
            0x100 + i as u32,
            &format!("mapping at offset {o}"),
        );
    }
    eprintln!("mapped offsets {offsets:?}: data correct through Vulkan");
    // Offsets below the measured rule are refused before the driver.
    for o in [4u64, 8] {
        assert_err!(
            imported.map(o, 64, opts),
            Error::Layout(LayoutError::Misaligned { .. })
        );
    }
    common::assert_clean(bridge.vulkan());
}

#[test]
fn bad_inputs_each_refused_then_next_call_works() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("bad_inputs_each_refused_then_next_call_works") else {
        return;
    };
    let alloc = bridge
        .create_allocation(1 << 20, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    let _warm = common::warm_up(bridge.vulkan());
    let fds = common::fds();
    let free = cuda_free();
    let live = alloc.cuda_memory().live_mappings();

    assert_err!(
        alloc.buffer::<u32>(1 << 20, 4),
        Error::Layout(LayoutError::OutOfBounds { .. })
    );
    assert_err!(
        alloc.buffer::<u8>(u64::MAX - 8, 64),
        Error::Layout(LayoutError::Overflow { .. })
    );
    assert_err!(
        alloc.buffer::<u32>(8, 4),
        Error::Layout(LayoutError::Misaligned { .. })
    );
    assert_err!(
        alloc.buffer::<u32>(0, 0),
        Error::Layout(LayoutError::ZeroSize { .. })
    );
    let _a = alloc.buffer::<u32>(0, 1024).unwrap();
    let e = assert_err!(
        alloc.buffer::<u32>(2048, 1024),
        Error::Layout(LayoutError::Overlap { .. })
    );
    assert!(e.to_string().contains("0..4096"), "{e}");
    // Explicitly allowed overlap maps.
    let overlapping = BufferPlacement {
        offset: 2048,
        allow_overlap: true,
    };
    drop(alloc.buffer_with::<u32>(1024, overlapping).unwrap());

    // The element's alignment: a 32-byte-aligned type at a 16-byte offset (which Vulkan and
    // CUDA would accept) is refused, naming the rule; lengths whose byte size overflows say so.
    let e = assert_err!(
        alloc.buffer::<Wide>(16 << 10 | 16, 4),
        Error::Layout(LayoutError::Misaligned {
            rule: AlignmentRule::Element,
            alignment: 32,
            ..
        })
    );
    assert!(e.to_string().contains("element"), "{e}");
    let e = assert_err!(
        alloc.buffer::<u64>(0, usize::MAX),
        Error::Layout(LayoutError::ElementCountOverflow {
            element_size: 8,
            ..
        })
    );
    assert!(e.to_string().contains("elements"), "{e}");
    let wide = alloc.buffer::<Wide>(16 << 10, 4).unwrap();
    assert_eq!(wide.cuda_ptr() % 32, 0);
    drop(wide);

    // A dedicated import maps only at offset 0.
    let ded: SharedBuffer<u32> = bridge
        .create_buffer_with(4096, BufferUsage::STORAGE_BUFFER, cuvk::Dedicated::Always)
        .unwrap();
    let e = assert_err!(
        ded.allocation()
            .expect("Vulkan-allocated")
            .cuda_memory()
            .map(256, 256, MapOptions::default()),
        Error::Layout(LayoutError::DedicatedOffset { offset: 256 })
    );
    assert!(e.to_string().contains("offset 0"));
    assert_err!(
        ded.allocation()
            .expect("Vulkan-allocated")
            .buffer::<u32>(0, 16),
        Error::Memory(cuvk::MemoryError::DedicatedHoldsOneBuffer)
    );
    drop(ded);

    // A buffer not created exportable cannot share exportable memory.
    let plain = Buffer::new(
        bridge.vulkan(),
        BufferDesc {
            size: 4096,
            usage: BufferUsage::STORAGE_BUFFER,
            external: ExternalUse::None,
        },
    )
    .unwrap();
    assert_err!(
        plain.bind(alloc.vk_memory().clone(), 0),
        Error::Memory(cuvk::MemoryError::NotExportable { .. })
    );

    // A UUID no CUDA device has.
    let bogus = cuvk::Uuid([0xab; 16]);
    let e = assert_err!(
        Bridge::new(cuvk::BridgeConfig {
            cuda_device: cuvk::cuda::CudaDeviceChoice::Uuid(bogus),
            ..Default::default()
        }),
        Error::NoCudaDevice { .. }
    );
    assert!(
        e.to_string().contains(&bridge.uuid().to_string()),
        "lists the real UUIDs: {e}"
    );

    // Nothing leaked, and the next valid call works.
    assert_eq!(alloc.cuda_memory().live_mappings(), live + 1); // `_a`
    let mut b = alloc.buffer::<u32>(64 << 10, 1024).unwrap();
    bridge.vulkan().fill_buffer(&mut b, 0, 4096, 9).unwrap();
    assert!(b.cuda_read().unwrap().iter().all(|&w| w == 9));
    drop(b);
    common::assert_fds(fds, "descriptors leaked");
    assert!(
        cuda_free() >= free,
        "CUDA memory leaked: {} -> {}",
        free,
        cuda_free()
    );
    common::assert_clean(bridge.vulkan());
}

/// The same descriptor imported twice: the safe API moves the descriptor into the import, so
/// it cannot be named twice; a raw copy of its number is refused once CUDA has consumed it.
#[test]
fn same_descriptor_imported_twice_is_refused() {
    use std::os::fd::{AsRawFd, FromRawFd};
    let _serial = common::serial();
    let Some(bridge) = common::bridge("same_descriptor_imported_twice_is_refused") else {
        return;
    };
    let buffer = Buffer::new(
        bridge.vulkan(),
        BufferDesc {
            size: 1 << 20,
            usage: BufferUsage::STORAGE_BUFFER,
            external: ExternalUse::Export,
        },
    )
    .unwrap();
    let r = buffer.requirements();
    let memory = Arc::new(
        DeviceMemory::allocate(
            bridge.vulkan(),
            AllocateInfo {
                size: r.size,
                memory_type_bits: r.memory_type_bits,
                properties: vk::MemoryPropertyFlags::DEVICE_LOCAL,
                exportable: true,
            },
            None,
        )
        .unwrap(),
    );
    let _warm = common::warm_up(bridge.vulkan());
    let fds = common::fds();
    let fd = memory.export().unwrap();
    let raw = fd.as_raw_fd();
    // SAFETY: fresh export of `memory`, its allocation size, not dedicated; kept alive.
    let first = unsafe {
        ImportedMemory::import(
            bridge.cuda(),
            fd,
            memory.import_layout(),
            Some(memory.clone()),
        )
    }
    .unwrap();
    let still_open = common::is_fd_open(raw);
    eprintln!(
        "after a successful import, CUDA {} descriptor {raw}",
        if still_open { "kept open" } else { "closed" }
    );
    if !still_open {
        // SAFETY: deliberately wraps the consumed number: the import must refuse it unseen.
        let again = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        // SAFETY: the import must refuse the handle before the driver sees it.
        let res =
            unsafe { ImportedMemory::import(bridge.cuda(), again, memory.import_layout(), None) };
        assert_err!(res, Error::HandleNotOpen { .. });
    }
    drop(first);
    common::assert_fds(fds, "descriptor leaked or closed twice");
    // The next import of a fresh export works.
    let fd = memory.export().unwrap();
    // SAFETY: as above.
    let again = unsafe {
        ImportedMemory::import(
            bridge.cuda(),
            fd,
            memory.import_layout(),
            Some(memory.clone()),
        )
    }
    .unwrap();
    drop(again.map(0, 4096, MapOptions::default()).unwrap());
    drop(again);
    common::assert_fds(fds, "descriptors");
}

/// 10,000 create/export/import/map/drop cycles: descriptors and CUDA free memory return to
/// where they started.
#[test]
fn ten_thousand_cycles_leak_nothing() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("ten_thousand_cycles_leak_nothing") else {
        return;
    };
    // Warm up driver caches so their one-time growth does not count as a leak.
    for _ in 0..20 {
        drop(
            bridge
                .create_buffer::<u32>(1 << 18, BufferUsage::STORAGE_BUFFER)
                .unwrap(),
        );
    }
    let _warm = common::warm_up(bridge.vulkan());
    let fds = common::fds();
    let free = cuda_free();
    let t = std::time::Instant::now();
    let cycles = 10_000;
    for i in 0..cycles {
        let b: SharedBuffer<u32> = bridge
            .create_buffer(1 << 18, BufferUsage::STORAGE_BUFFER)
            .unwrap();
        if i % 1000 == 0 {
            assert_eq!(
                common::fds(),
                fds,
                "descriptor held by a live buffer at cycle {i}"
            );
        }
        drop(b);
    }
    let fds_after = common::fds();
    let free_after = cuda_free();
    eprintln!(
        "{cycles} cycles of 1 MiB in {:.2?}: fds {fds} -> {fds_after}, CUDA free {} -> {} MiB",
        t.elapsed(),
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

/// cudarc's stream contract: a write on one stream (through `device_ptr_mut`) orders a cudarc
/// copy on another stream after it. Without the events (0.1 ignored the stream), the copy on
/// the second stream races the kernel still writing on the first.
#[test]
fn cudarc_copies_on_another_stream_wait_for_the_last_write() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("cudarc_copies_on_another_stream_wait_for_the_last_write")
    else {
        return;
    };
    let k = Kernels::load(bridge.cuda()).unwrap();
    let n = 64usize << 20; // 256 MiB: the kernel runs long enough for a race to show
    let mut buf: SharedBuffer<u32> = bridge
        .create_buffer(n, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    let (writer, reader) = (bridge.stream(), bridge.cuda().new_stream().unwrap());
    for round in 0..5u32 {
        {
            let (ptr, _record_write) = buf.device_ptr_mut(writer);
            k.write_pattern(writer, &ptr, n as u64, round).unwrap();
        }
        // No host synchronisation: the reader stream must wait on the write event.
        let got = reader.clone_dtoh(&buf).unwrap();
        let bad = (0..n).filter(|&i| got[i] != pattern(i, round)).count();
        assert_eq!(
            bad, 0,
            "round {round}: {bad} of {n} words read before the write finished"
        );
    }
    common::assert_clean(bridge.vulkan());
}
