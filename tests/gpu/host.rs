//! Pinned host memory on a real GPU: CUDA copies into pinned and registered memory and Vulkan
//! reads the same bytes (and back), for every flag combination; device-mapped pointers used by
//! a kernel directly; bad inputs refused before the driver with nothing leaked.

use cuvk_dev::assert_err;
use cuvk_dev::kernels;
use cuvk_dev::testing as common;

use cuvk::ash::vk;
use cuvk::cuda::host::{
    pinned_bytes, HostAllocFlags, HostMemorySupport, HostRegisterFlags, HostRegistration,
    PageAlignedBuffer, PinnedBuffer,
};
use cuvk::StagingBuffer;
use cuvk::{BufferUsage, Error, LayoutError, SharedBuffer};
use kernels::{pattern, Kernels};

const N: usize = 1 << 20; // u32 elements: 4 MiB

#[test]
fn every_alloc_flag_combination_round_trips_between_cuda_and_vulkan() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("every_alloc_flag_combination") else {
        return;
    };
    let support = HostMemorySupport::query(bridge.cuda()).unwrap();
    eprintln!("{}", support.summary());
    let k = Kernels::load(bridge.cuda()).unwrap();
    let stream = bridge.stream();
    let mut a: SharedBuffer<u32> = bridge
        .create_buffer(N, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    let mut b: SharedBuffer<u32> = bridge
        .create_buffer(N, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    let before = pinned_bytes();
    for (i, flags) in HostAllocFlags::all().into_iter().enumerate() {
        let seed = 0x1000 + i as u32;
        let mut staging =
            StagingBuffer::new(&bridge, N * 4, flags, vk::BufferUsageFlags::empty()).unwrap();
        // CUDA -> pinned (DMA) -> Vulkan copy -> b, checked through CUDA.
        k.write_pattern(stream, a.kernel_arg(), N as u64, seed)
            .unwrap();
        staging.cuda_download(stream, &a).unwrap();
        stream.synchronize().unwrap();
        bridge
            .vulkan()
            .copy_buffer(&staging, 0, &mut b, 0, (N * 4) as u64)
            .unwrap();
        let got = b.cuda_read().unwrap();
        assert!(
            (0..N).all(|j| got[j] == pattern(j, seed)),
            "{flags:?}: CUDA->pinned->Vulkan"
        );
        // Vulkan fill -> copy into pinned -> CUDA upload -> a, checked; host sees it too.
        bridge
            .vulkan()
            .fill_buffer(&mut b, 0, (N * 4) as u64, seed)
            .unwrap();
        bridge
            .vulkan()
            .copy_buffer(&b, 0, &mut staging, 0, (N * 4) as u64)
            .unwrap();
        let words: &[u32] = bytemuck::cast_slice(&staging.bytes().unwrap()[..N * 4]);
        assert!(
            words.iter().all(|&w| w == seed),
            "{flags:?}: host view of Vulkan's write"
        );
        staging.cuda_upload(stream, &mut a).unwrap();
        stream.synchronize().unwrap();
        assert_eq!(
            k.count_not_equal(stream, a.kernel_arg(), N as u64, seed)
                .unwrap(),
            0,
            "{flags:?}: Vulkan->pinned->CUDA"
        );
    }
    assert_eq!(pinned_bytes(), before, "pinned memory leaked");
    eprintln!("8 cuMemHostAlloc flag combinations: CUDA->pinned->Vulkan and back correct");
    common::assert_clean(bridge.vulkan());
}

#[test]
fn device_mapped_pointers_work_in_kernels() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("device_mapped_pointers_work_in_kernels") else {
        return;
    };
    let k = Kernels::load(bridge.cuda()).unwrap();
    let support = HostMemorySupport::query(bridge.cuda()).unwrap();
    for flags in HostAllocFlags::all().into_iter().filter(|f| f.device_map) {
        let p = PinnedBuffer::<u32>::new(bridge.cuda(), N, flags).unwrap();
        let dptr = p.device_ptr().expect("device_map gives a device pointer");
        if support.unified_addressing && !flags.write_combined {
            assert_eq!(
                dptr,
                p.host_ptr() as u64,
                "{flags:?}: page rule: device pointer equals host pointer"
            );
        }
        k.write_pattern(bridge.stream(), &dptr, N as u64, 77)
            .unwrap();
        bridge.stream().synchronize().unwrap();
        assert!(
            (0..N).all(|j| p.as_slice()[j] == pattern(j, 77)),
            "{flags:?}: kernel write through the mapped pointer"
        );
        eprintln!(
            "{flags:?}: kernel wrote through device pointer {dptr:#x} (host {:p})",
            p.host_ptr()
        );
    }
    // Registered memory, device-mapped: the kernel writes the caller's own pages.
    let mut mem = PageAlignedBuffer::new(N * 4, 4096).unwrap();
    {
        let words: &mut [u32] = bytemuck::cast_slice_mut(mem.as_mut_bytes());
        let flags = HostRegisterFlags {
            device_map: true,
            ..Default::default()
        };
        let reg = HostRegistration::new(bridge.cuda(), words, flags).unwrap();
        let dptr = reg.device_ptr().unwrap();
        k.write_pattern(bridge.stream(), &dptr, N as u64, 78)
            .unwrap();
        bridge.stream().synchronize().unwrap();
    }
    let words: &[u32] = bytemuck::cast_slice(mem.as_bytes());
    assert!((0..N).all(|j| words[j] == pattern(j, 78)));
}

#[test]
fn every_register_flag_combination_takes_cuda_copies() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("every_register_flag_combination") else {
        return;
    };
    let k = Kernels::load(bridge.cuda()).unwrap();
    let a: SharedBuffer<u32> = bridge
        .create_buffer(N, BufferUsage::STORAGE_BUFFER)
        .unwrap();
    let before = pinned_bytes();
    for bits in 0..16u32 {
        let flags = HostRegisterFlags {
            portable: bits & 1 != 0,
            device_map: bits & 2 != 0,
            io_memory: bits & 4 != 0,
            read_only: bits & 8 != 0,
        };
        let mut mem = PageAlignedBuffer::new(N * 4, 4096).unwrap();
        let words: &mut [u32] = bytemuck::cast_slice_mut(mem.as_mut_bytes());
        let registration = HostRegistration::new(bridge.cuda(), words, flags);
        match registration {
            Ok(mut reg) => {
                k.write_pattern(bridge.stream(), a.kernel_arg(), N as u64, bits)
                    .unwrap();
                bridge.stream().synchronize().unwrap();
                // SAFETY: the destination is the registered slice, exactly N u32.
                let d2h = unsafe {
                    cuvk::cudarc::driver::result::memcpy_dtoh_sync(reg.as_mut_slice(), a.cuda_ptr())
                };
                if flags.read_only {
                    // READ_ONLY: the device may only read the range; a copy into it is refused.
                    let e = d2h.expect_err("a D2H copy into READ_ONLY registered memory succeeded");
                    eprintln!("register {flags:?}: D2H refused as the flag says: {e:?}");
                } else {
                    d2h.unwrap();
                    assert!(
                        (0..N).all(|j| reg.as_slice()[j] == pattern(j, bits)),
                        "{flags:?}: D2H into registered memory"
                    );
                }
                // and H2D from registered memory
                reg.as_mut_slice().fill(bits + 1);
                // SAFETY: source is the registered slice; destination a's N u32.
                unsafe {
                    cuvk::cudarc::driver::result::memcpy_htod_sync(a.cuda_ptr(), reg.as_slice())
                }
                .unwrap();
                assert_eq!(
                    k.count_not_equal(bridge.stream(), a.kernel_arg(), N as u64, bits + 1)
                        .unwrap(),
                    0
                );
                eprintln!("register {flags:?}: copies correct");
            }
            Err(e) => {
                // Only IOMEMORY may fail on ordinary RAM; anything else is a bug.
                assert!(flags.io_memory, "{flags:?} failed: {e}");
                eprintln!("register {flags:?}: refused by the driver as expected for RAM: {e}");
            }
        };
    }
    assert_eq!(pinned_bytes(), before, "registrations leaked");
}

#[test]
fn bad_registrations_are_refused_first_and_leak_nothing() {
    let _serial = common::serial();
    let Some(bridge) = common::bridge("bad_registrations_are_refused_first") else {
        return;
    };
    let before = pinned_bytes();
    let page = cuvk::cuda::host::host_page_size();
    let mut mem = PageAlignedBuffer::new(8 * page, page).unwrap();
    let bytes = mem.as_mut_bytes();
    let flags = HostRegisterFlags::default();
    let e = assert_err!(
        HostRegistration::new(bridge.cuda(), &mut bytes[8..8 + page], flags),
        Error::Layout(LayoutError::Misaligned {
            what: "pointer",
            ..
        })
    );
    assert!(e.to_string().contains("0x"), "{e}");
    assert_err!(
        HostRegistration::new(bridge.cuda(), &mut bytes[..page + 1], flags),
        Error::Layout(LayoutError::Misaligned { what: "size", .. })
    );
    assert_err!(
        HostRegistration::new(bridge.cuda(), &mut bytes[..0], flags),
        Error::Layout(LayoutError::ZeroSize { .. })
    );
    assert_err!(
        PinnedBuffer::<u32>::new(bridge.cuda(), 0, HostAllocFlags::default()),
        Error::Layout(LayoutError::ZeroSize { .. })
    );
    let base = bytes.as_mut_ptr();
    let first = HostRegistration::new(bridge.cuda(), &mut bytes[..4 * page], flags).unwrap();
    // An overlapping range registered twice: impossible with two safe borrows, so build the
    // second slice by hand to show the registry refuses it before the driver does.
    // SAFETY: the slice is only handed to `HostRegistration::new`, which refuses it without
    // touching the memory.
    let overlapping = unsafe { std::slice::from_raw_parts_mut(base.add(2 * page), 4 * page) };
    let e = assert_err!(
        HostRegistration::new(bridge.cuda(), overlapping, flags),
        Error::Layout(LayoutError::Overlap { .. })
    );
    eprintln!("{e}");
    assert_eq!(pinned_bytes(), before + 4 * page);
    drop(first);
    assert_eq!(pinned_bytes(), before, "pinned memory leaked");
    // The next valid call works.
    let again = HostRegistration::new(
        bridge.cuda(),
        &mut mem.as_mut_bytes()[2 * page..6 * page],
        flags,
    )
    .unwrap();
    assert_eq!(again.byte_size(), 4 * page);
    drop(again);
    assert_eq!(pinned_bytes(), before);
}
