//! Host memory imported into Vulkan (`VK_EXT_external_memory_host`), on any Vulkan device
//! (lavapipe in CI) under the validation layer: data written by the host and read back
//! through Vulkan copies, and the alignment rules checked before the driver.

use cuvk_dev::assert_err;
use cuvk_dev::testing as common;

use std::sync::Arc;

use cuvk::ash::vk;
use cuvk::cuda::host::PageAlignedBuffer;
use cuvk::vulkan::{BoundBuffer, HostImportedBuffer, VulkanContext};
use cuvk::{AlignmentRule, Error, LayoutError};

fn align(ctx: &Arc<VulkanContext>) -> usize {
    ctx.info()
        .min_imported_host_pointer_alignment
        .expect("VK_EXT_external_memory_host") as usize
}

#[test]
fn host_written_bytes_round_trip_through_vulkan_copies() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("host_written_bytes_round_trip_through_vulkan_copies") else {
        return;
    };
    let a = align(&ctx);
    eprintln!("minImportedHostPointerAlignment = {a}");
    let size = 1 << 20;
    let mut src = PageAlignedBuffer::new(size, a).unwrap();
    let mut dst = PageAlignedBuffer::new(size, a).unwrap();
    for (i, b) in src.as_mut_bytes().iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    let expected = src.as_bytes().to_vec();
    {
        let src_vk =
            HostImportedBuffer::new(&ctx, src.as_mut_bytes(), vk::BufferUsageFlags::empty())
                .unwrap();
        let mut dst_vk =
            HostImportedBuffer::new(&ctx, dst.as_mut_bytes(), vk::BufferUsageFlags::empty())
                .unwrap();
        // host -> device-local -> host, all by Vulkan copies.
        let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
        let mut device =
            BoundBuffer::new_exportable(&ctx, size as u64, usage, vk::MemoryPropertyFlags::empty())
                .unwrap();
        ctx.copy_buffer(&src_vk, 0, &mut device, 0, size as u64)
            .unwrap();
        ctx.copy_buffer(&device, 0, &mut dst_vk, 0, size as u64)
            .unwrap();
        assert!(
            dst_vk.as_bytes() == &expected[..],
            "bytes differ after the Vulkan round trip"
        );
        // And a Vulkan fill is seen by the host through the import.
        ctx.fill_buffer(&mut dst_vk, 4096, 4096, 0x0101_0101)
            .unwrap();
    }
    assert!(dst.as_bytes()[4096..8192].iter().all(|&b| b == 1));
    assert_eq!(&dst.as_bytes()[..4096], &expected[..4096]);
    common::assert_clean(&ctx);
}

#[test]
fn host_import_alignment_is_checked_first() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("host_import_alignment_is_checked_first") else {
        return;
    };
    let a = align(&ctx);
    let mut mem = PageAlignedBuffer::new(4 * a, a).unwrap();
    let bytes = mem.as_mut_bytes();
    let usage = vk::BufferUsageFlags::empty();
    let e = assert_err!(
        HostImportedBuffer::new(&ctx, &mut bytes[64..64 + a], usage),
        Error::Layout(LayoutError::Misaligned {
            what: "pointer",
            rule: AlignmentRule::VulkanHostPointer,
            ..
        })
    );
    assert!(e.to_string().contains(&a.to_string()), "{e}");
    assert_err!(
        HostImportedBuffer::new(&ctx, &mut bytes[..a + 100], usage),
        Error::Layout(LayoutError::Misaligned { what: "size", .. })
    );
    assert_err!(
        HostImportedBuffer::new(&ctx, &mut bytes[..0], usage),
        Error::Layout(LayoutError::ZeroSize { .. })
    );
    // The next valid call works.
    let mut ok = HostImportedBuffer::new(&ctx, &mut bytes[a..3 * a], usage).unwrap();
    ctx.fill_buffer(&mut ok, 0, 2 * a as u64, 0x0202_0202)
        .unwrap();
    drop(ok);
    assert!(mem.as_bytes()[a..3 * a].iter().all(|&b| b == 2));
    assert!(mem.as_bytes()[..a].iter().all(|&b| b == 0));
    common::assert_clean(&ctx);
}
