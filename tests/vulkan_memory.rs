//! Vulkan-side memory export/import, runnable on any Vulkan device (lavapipe in CI), under
//! the validation layer: any validation message fails the test.

#[macro_use]
mod common;

use std::sync::Arc;

use cuvk::ash::vk;
use cuvk::layout::LayoutError;
use cuvk::vulkan::{AllocateInfo, BoundBuffer, Buffer, DeviceMemory, HostBuffer, VulkanContext};
use cuvk::Error;

const USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::STORAGE_BUFFER.as_raw()
        | vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw(),
);

fn exportable(ctx: &Arc<VulkanContext>, size: u64) -> cuvk::Result<BoundBuffer> {
    BoundBuffer::new_exportable(ctx, size, USAGE, vk::MemoryPropertyFlags::empty())
}

fn import_into(target: &Arc<VulkanContext>, source: &BoundBuffer) -> cuvk::Result<BoundBuffer> {
    BoundBuffer::import_from(target, source)
}

fn pattern(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| i.wrapping_mul(2654435761) ^ seed)
        .collect()
}

/// Writes a pattern through `a` (host upload + copy), reads it back through `b`.
fn write_a_read_b(
    ctx_a: &Arc<VulkanContext>,
    a: &BoundBuffer,
    ctx_b: &Arc<VulkanContext>,
    b: &BoundBuffer,
    seed: u32,
) {
    let n = (a.buffer().size() / 4) as usize;
    let data = pattern(n, seed);
    let mut up = HostBuffer::new(ctx_a, a.buffer().size(), vk::BufferUsageFlags::empty()).unwrap();
    up.write(&data).unwrap();
    ctx_a.copy_buffer(&up, 0, a, 0, a.buffer().size()).unwrap();
    let down = HostBuffer::new(ctx_b, b.buffer().size(), vk::BufferUsageFlags::empty()).unwrap();
    ctx_b
        .copy_buffer(b, 0, &down, 0, b.buffer().size())
        .unwrap();
    let got: Vec<u32> = down.read().unwrap();
    let bad = got.iter().zip(&data).filter(|(g, d)| g != d).count();
    assert_eq!(
        bad,
        0,
        "{bad} of {n} elements differ; first: {:?} vs {:?}",
        &got[..4],
        &data[..4]
    );
}

#[test]
fn export_import_same_device_round_trip() {
    let _serial = common::serial();
    let Some(ctx) = common::vulkan("export_import_same_device_round_trip") else {
        return;
    };
    eprintln!("device: {}", ctx.info().describe());
    let _warm = common::warm_up(&ctx);
    let fds = common::non_driver_fds();
    {
        let a = exportable(&ctx, 1 << 20).unwrap();
        let b = import_into(&ctx, &a).unwrap();
        write_a_read_b(&ctx, &a, &ctx, &b, 1);
        // And the other way, after a's memory sees b's write.
        ctx.fill_buffer(&b, 0, 1 << 20, 0xdead_beef).unwrap();
        let down = HostBuffer::new(&ctx, 1 << 20, vk::BufferUsageFlags::empty()).unwrap();
        ctx.copy_buffer(&a, 0, &down, 0, 1 << 20).unwrap();
        assert!(down
            .read::<u32>()
            .unwrap()
            .iter()
            .all(|&w| w == 0xdead_beef));
    }
    common::assert_non_driver_fds(fds, "file descriptors leaked");
    common::assert_clean(&ctx);
}

#[test]
fn export_import_second_device_round_trip() {
    let _serial = common::serial();
    let Some(ctx_a) = common::vulkan("export_import_second_device_round_trip") else {
        return;
    };
    let ctx_b = common::vulkan("second device").unwrap();
    let _warm = common::warm_up(&ctx_b);
    assert_eq!(ctx_a.info().device_uuid, ctx_b.info().device_uuid);
    let _warm = common::warm_up(&ctx_a);
    let fds = common::non_driver_fds();
    {
        let a = exportable(&ctx_a, 256 << 10).unwrap();
        let b = import_into(&ctx_b, &a).unwrap();
        write_a_read_b(&ctx_a, &a, &ctx_b, &b, 7);
    }
    common::assert_non_driver_fds(fds, "file descriptors leaked");
    common::assert_clean(&ctx_a);
    common::assert_clean(&ctx_b);
}

#[test]
fn each_export_is_a_new_descriptor() {
    let _serial = common::serial();
    let Some(ctx) = common::vulkan("each_export_is_a_new_descriptor") else {
        return;
    };
    let a = exportable(&ctx, 4096).unwrap();
    let _warm = common::warm_up(&ctx);
    let fds = common::non_driver_fds();
    let f1 = a.memory().export().unwrap();
    let f2 = a.memory().export().unwrap();
    use std::os::fd::AsRawFd;
    assert_ne!(f1.as_raw_fd(), f2.as_raw_fd());
    for f in [&f1, &f2] {
        let link =
            std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap_or_default();
        eprintln!(
            "exported descriptor {} -> {}",
            f.as_raw_fd(),
            link.display()
        );
    }
    let (r1, r2) = (f1.as_raw_fd(), f2.as_raw_fd());
    assert!(cuvk::handle::is_open(r1) && cuvk::handle::is_open(r2));
    if !ctx.info().name.contains("NVIDIA") {
        assert_eq!(common::non_driver_fds(), fds + 2);
    }
    drop((f1, f2));
    assert!(
        !cuvk::handle::is_open(r1) && !cuvk::handle::is_open(r2),
        "exported descriptors not closed"
    );
    common::assert_non_driver_fds(fds, "descriptors");
    common::assert_clean(&ctx);
}

#[test]
fn bad_inputs_are_rejected_before_the_driver() {
    let _serial = common::serial();
    let Some(ctx) = common::vulkan("bad_inputs_are_rejected_before_the_driver") else {
        return;
    };
    let _warm = common::warm_up(&ctx);
    let fds = common::non_driver_fds();

    // A buffer not created exportable cannot be bound to exportable memory.
    let plain = Buffer::new(&ctx, 4096, USAGE, false).unwrap();
    let r = plain.requirements();
    let memory = Arc::new(
        DeviceMemory::allocate(
            &ctx,
            AllocateInfo {
                size: r.size,
                memory_type_bits: r.memory_type_bits,
                properties: vk::MemoryPropertyFlags::empty(),
                exportable: true,
            },
            None,
        )
        .unwrap(),
    );
    assert_err!(
        plain.bind(memory.clone(), 0),
        Error::NotExportable {
            what: "the buffer",
            ..
        }
    );

    // Memory not allocated exportable cannot be exported.
    let plain_memory = DeviceMemory::allocate(
        &ctx,
        AllocateInfo {
            size: 4096,
            memory_type_bits: r.memory_type_bits,
            properties: vk::MemoryPropertyFlags::empty(),
            exportable: false,
        },
        None,
    )
    .unwrap();
    assert_err!(
        plain_memory.export(),
        Error::NotExportable {
            what: "the memory",
            ..
        }
    );

    // Zero sizes.
    assert_err!(
        Buffer::new(&ctx, 0, USAGE, true),
        Error::Layout(LayoutError::ZeroSize { .. })
    );

    use std::os::fd::FromRawFd;
    // Bind offset misaligned and past the end.
    let b = Buffer::new(&ctx, 1024, USAGE, true).unwrap();
    let align = b.requirements().alignment;
    if align > 1 {
        let e = assert_err!(
            Buffer::new(&ctx, 1024, USAGE, true)
                .unwrap()
                .bind(memory.clone(), align / 2),
            Error::Layout(LayoutError::Misaligned { .. })
        );
        assert!(e.to_string().contains(&align.to_string()), "{e}");
    }
    assert_err!(
        Buffer::new(&ctx, 1024, USAGE, true)
            .unwrap()
            .bind(memory.clone(), memory.size()),
        Error::Layout(LayoutError::OutOfBounds { .. })
    );

    // A descriptor that is not open (e.g. one already consumed by an import) is refused
    // before any driver sees it, and is not closed (its number may belong to someone else).
    const NOT_OPEN: i32 = 999_999;
    // SAFETY: deliberately wraps a number no descriptor has; check_open forgets it.
    let stale = unsafe { std::os::fd::OwnedFd::from_raw_fd(NOT_OPEN) };
    // SAFETY: the import must refuse the handle before the driver sees it.
    let res = unsafe { DeviceMemory::import(&ctx, stale, memory.size(), r.memory_type_bits, None) };
    match res {
        Err(Error::HandleNotOpen { handle, reason }) => {
            eprintln!("expected error: handle {handle}: {reason}");
            assert_eq!(handle, NOT_OPEN as i64)
        }
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("imported a closed descriptor"),
    }

    // The next valid call still works.
    let ok = b.bind(memory.clone(), 0).unwrap();
    ctx.fill_buffer(&ok, 0, 1024, 5).unwrap();
    drop(ok);
    drop((memory, plain_memory));
    common::assert_non_driver_fds(fds, "file descriptors leaked");
    common::assert_clean(&ctx);
}

#[test]
fn existing_device_without_extension_is_refused() {
    let _serial = common::serial();
    let Some(ctx) = common::vulkan("existing_device_without_extension_is_refused") else {
        return;
    };
    // Wrap the same objects but claim no extension: refused with the extension's name.
    // SAFETY: the objects are valid and outlive the attempt (it fails before storing them
    // anywhere that would outlive `ctx`).
    let res = unsafe {
        VulkanContext::from_existing(
            ctx.entry().clone(),
            ctx.instance().clone(),
            ctx.physical_device(),
            ctx.device().clone(),
            ctx.queue_family_index(),
            *ctx.lock_queue(),
            &[],
            true,
        )
    };
    let e = assert_err!(
        res,
        Error::MissingExtension {
            state: "not enabled on the device",
            ..
        }
    );
    assert!(e
        .to_string()
        .contains(cuvk::vulkan::MEMORY_EXTENSION.to_str().unwrap()));

    // With the extension named, it wraps, and the wrapped context exports and copies.
    // SAFETY: as above; the wrapper destroys nothing and is dropped before `ctx`.
    let wrapped = unsafe {
        VulkanContext::from_existing(
            ctx.entry().clone(),
            ctx.instance().clone(),
            ctx.physical_device(),
            ctx.device().clone(),
            ctx.queue_family_index(),
            *ctx.lock_queue(),
            &[cuvk::vulkan::MEMORY_EXTENSION],
            true,
        )
    }
    .unwrap();
    let a = exportable(&wrapped, 4096).unwrap();
    let b = import_into(&wrapped, &a).unwrap();
    write_a_read_b(&wrapped, &a, &wrapped, &b, 3);
    drop((a, b, wrapped));
    common::assert_clean(&ctx);
}

#[test]
fn validation_layer_catches_misuse() {
    // Shows the harness can fail: a deliberate invalid command must be recorded.
    let Some(ctx) = common::vulkan("validation_layer_catches_misuse") else {
        return;
    };
    let a = exportable(&ctx, 4096).unwrap();
    let buf = cuvk::vulkan::AsVkBuffer::vk_buffer(&a);
    // SAFETY: deliberately invalid (offset not a multiple of 4) but harmless on lavapipe and
    // NVIDIA: the fill is clamped by the driver; we only want the layer's report.
    unsafe { ctx.submit_and_wait(|dev, cmd| dev.cmd_fill_buffer(cmd, buf, 2, 4, 0)) }.unwrap();
    let msgs = ctx.validation_messages();
    assert!(
        msgs.iter().any(|m| m.contains("vkCmdFillBuffer")),
        "no validation message for a misaligned vkCmdFillBuffer: {msgs:?}"
    );
}
