//! CUDA virtual memory on a real GPU: memory CUDA allocated (`cuMemCreate`) written by a kernel
//! and read by Vulkan through the imported memory, and back; a buffer grown from 2 MiB to
//! 1 GiB keeps its CUDA pointer and its data; the mapping rules refused before the driver;
//! multicast stops at `Unsupported` where the device reports no support.

use cuvk_dev::assert_err;
use cuvk_dev::kernels;
use cuvk_dev::testing as common;

use cuvk::cuda::multicast::{multicast_supported, MulticastGroup};
use cuvk::cuda::vmm::{allocation_granularity, AddressReservation, VmmAllocation, VmmExport};
use cuvk::{BufferUsage, Error, GrowableBuffer, LayoutError, SharedBuffer};
use kernels::{pattern, Kernels};

#[test]
fn cuda_allocated_memory_round_trips_through_vulkan() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("cuda_allocated_memory_round_trips_through_vulkan") else {
        return;
    };
    let k = Kernels::load(bridge.cuda()).unwrap();
    let n = 3_000_001usize;
    let mut buf: SharedBuffer<u32> = bridge
        .create_buffer_from_cuda(n, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    assert!(buf.allocation().is_none());
    k.write_pattern(bridge.stream(), buf.kernel_arg(), n as u64, 91)
        .unwrap();
    bridge.stream().synchronize().unwrap();
    let got = common::read_via_vulkan(bridge.vulkan(), &buf);
    assert!(
        (0..n).all(|i| got[i] == pattern(i, 91)),
        "Vulkan read of CUDA's write through cuMemCreate memory"
    );
    let bytes = buf.byte_size() & !3;
    bridge
        .vulkan()
        .fill_buffer(&mut buf, 0, bytes, 0x77)
        .unwrap();
    assert_eq!(
        k.count_not_equal(bridge.stream(), buf.kernel_arg(), n as u64, 0x77)
            .unwrap(),
        0
    );
    eprintln!(
        "cuMemCreate memory ({} bytes) imported by Vulkan: both directions correct",
        buf.byte_size()
    );
    common::assert_clean(bridge.vulkan());
}

#[test]
fn growing_to_one_gib_keeps_the_pointer_and_the_data() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("growing_to_one_gib") else {
        return;
    };
    let k = Kernels::load(bridge.cuda()).unwrap();
    let (g, _) = allocation_granularity(bridge.cuda(), VmmExport::OsHandle).unwrap();
    eprintln!("allocation granularity: {g} bytes");
    let mut buf =
        GrowableBuffer::<u32>::new(&bridge, 1 << 30, g, BufferUsage::STORAGE_BUFFER).unwrap();
    let ptr = buf.cuda_ptr();
    let per_chunk = (g / 4) as usize;
    let t = std::time::Instant::now();
    let mut chunks = 0;
    while buf.capacity_bytes() < 1 << 30 {
        buf.grow_to(buf.capacity() + 1).unwrap();
        assert_eq!(buf.cuda_ptr(), ptr, "the CUDA pointer moved");
        // Write the new chunk only; earlier chunks must keep what they had.
        let start = ptr + chunks as u64 * g;
        k.write_pattern(bridge.stream(), &start, per_chunk as u64, chunks as u32)
            .unwrap();
        chunks += 1;
    }
    bridge.stream().synchronize().unwrap();
    eprintln!("grew to {} chunks (1 GiB) in {:.2?}", chunks, t.elapsed());
    // Every chunk through CUDA (one read of the whole range at the unchanged pointer)...
    let mut all = vec![0u32; buf.capacity()];
    // SAFETY: the range [ptr, ptr + 1 GiB) is mapped and accessible; `all` is 1 GiB.
    unsafe { cuvk::cudarc::driver::result::memcpy_dtoh_sync(&mut all, ptr) }.unwrap();
    for c in 0..chunks {
        let s = &all[c * per_chunk..(c + 1) * per_chunk];
        assert!(
            (0..per_chunk).all(|i| s[i] == pattern(i, c as u32)),
            "chunk {c} lost its data"
        );
    }
    // ...and the first and last chunks through Vulkan's view.
    let views: Vec<_> = buf.vk_chunks().collect();
    assert_eq!(views.len(), chunks);
    for &c in &[0, chunks - 1] {
        let got = common::read_via_vulkan(bridge.vulkan(), views[c].1);
        assert!(
            (0..per_chunk).all(|i| got[i] == pattern(i, c as u32)),
            "Vulkan view of chunk {c}"
        );
    }
    // Past the reservation is refused.
    let e = assert_err!(
        buf.grow_to((1 << 28) + 1),
        Error::Layout(LayoutError::OutOfBounds { .. })
    );
    assert!(e.to_string().contains("address reservation"));
    common::assert_clean(bridge.vulkan());
}

#[test]
fn vmm_rules_are_checked_before_the_driver() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("vmm_rules_are_checked_before_the_driver") else {
        return;
    };
    let ctx = bridge.cuda();
    let (g, _) = allocation_granularity(ctx, VmmExport::OsHandle).unwrap();
    assert_err!(
        VmmAllocation::new(ctx, g / 2, VmmExport::OsHandle),
        Error::Layout(LayoutError::Misaligned { what: "size", .. })
    );
    assert_err!(
        AddressReservation::new(ctx, g + 4096),
        Error::Layout(LayoutError::Misaligned { what: "size", .. })
    );
    let mem = VmmAllocation::new(ctx, 2 * g, VmmExport::OsHandle).unwrap();
    let res = AddressReservation::new(ctx, 8 * g).unwrap();
    assert_err!(
        res.map(4096, &mem, g),
        Error::Layout(LayoutError::Misaligned {
            what: "address",
            ..
        })
    );
    assert_err!(
        res.map(0, &mem, g + 4096),
        Error::Layout(LayoutError::Misaligned { what: "size", .. })
    );
    assert_err!(
        res.map_at(0, &mem, g, g),
        Error::Layout(LayoutError::NonZeroAllocationOffset { .. })
    );
    assert_err!(
        res.map(7 * g, &mem, 2 * g),
        Error::Layout(LayoutError::OutOfBounds {
            container: "address reservation",
            ..
        })
    );
    assert_err!(
        res.map(0, &mem, 4 * g),
        Error::Layout(LayoutError::OutOfBounds {
            container: "physical allocation",
            ..
        })
    );
    let first = res
        .map(2 * g, &mem, 2 * g)
        .unwrap()
        .enable_access()
        .unwrap();
    let e = assert_err!(
        res.map(3 * g, &mem, g),
        Error::Layout(LayoutError::Overlap { .. })
    );
    eprintln!("{e}");
    // The next valid call works, and the mapping is usable.
    let second = res
        .map(4 * g, &mem, 2 * g)
        .unwrap()
        .enable_access()
        .unwrap();
    let k = Kernels::load(ctx).unwrap();
    k.fill(bridge.stream(), &second.device_ptr(), g / 4, 5)
        .unwrap();
    assert_eq!(
        k.count_not_equal(bridge.stream(), &first.device_ptr(), g / 4, 5)
            .unwrap(),
        0,
        "two mappings of one allocation alias"
    );
}

#[test]
fn multicast_stops_at_unsupported_where_the_device_has_none() {
    let _shared = common::shared();
    let Some(bridge) = common::bridge("multicast_stops_at_unsupported") else {
        return;
    };
    let supported = multicast_supported(bridge.cuda()).unwrap();
    eprintln!(
        "CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = {}",
        u8::from(supported)
    );
    if supported {
        // Never create a multicast object from the test suite: it could take shared GPUs
        // out of service. The rules are covered by the unit tests.
        eprintln!("SKIP: this device supports multicast; the suite does not create objects");
        return;
    }
    let e = assert_err!(
        MulticastGroup::new(std::slice::from_ref(bridge.cuda()), 2 << 20),
        Error::Unsupported(_)
    );
    assert!(e.to_string().contains("MULTICAST_SUPPORTED = 0"), "{e}");
}

#[test]
fn sparse_view_grows_as_one_vulkan_buffer() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("sparse_view_grows_as_one_vulkan_buffer") else {
        return;
    };
    let k = Kernels::load(bridge.cuda()).unwrap();
    let (g, _) = allocation_granularity(bridge.cuda(), VmmExport::OsHandle).unwrap();
    let total: u64 = 256 << 20;
    let mut buf = match GrowableBuffer::<u32>::with_view(
        &bridge,
        total,
        g,
        BufferUsage::STORAGE_BUFFER,
        cuvk::VulkanView::Sparse,
    ) {
        Ok(b) => b,
        Err(e) if e.is_unavailable() => {
            eprintln!("SKIP: no sparse binding: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert!(buf.vk_chunks().next().is_none());
    let per_chunk = (g / 4) as usize;
    let mut chunks = 0u32;
    while buf.capacity_bytes() < total {
        buf.add_chunk().unwrap();
        let start = buf.cuda_ptr() + u64::from(chunks) * g;
        k.write_pattern(bridge.stream(), &start, per_chunk as u64, chunks)
            .unwrap();
        chunks += 1;
    }
    bridge.stream().synchronize().unwrap();
    // One Vulkan copy out of the single sparse buffer sees every chunk CUDA wrote.
    let view = buf.vk_buffer().expect("sparse view");
    let mut host = cuvk::vulkan::HostBuffer::new(
        bridge.vulkan(),
        total,
        cuvk::ash::vk::BufferUsageFlags::empty(),
    )
    .unwrap();
    bridge
        .vulkan()
        .copy_buffer(view, 0, &mut host, 0, total)
        .unwrap();
    let all: Vec<u32> = host.read().unwrap();
    for c in 0..chunks as usize {
        let s = &all[c * per_chunk..(c + 1) * per_chunk];
        assert!(
            (0..per_chunk).all(|i| s[i] == pattern(i, c as u32)),
            "chunk {c} through the sparse buffer"
        );
    }
    eprintln!("{chunks} chunks bound into one sparse buffer; one Vulkan copy read all of them");
    common::assert_clean(bridge.vulkan());
}
