//! Vulkan-side memory export/import, runnable on any Vulkan device (lavapipe in CI), under
//! the validation layer: any validation message fails the test.

use cuvk_dev::assert_err;
use cuvk_dev::testing as common;

use std::sync::Arc;

use cuvk::ash::vk;
use cuvk::vulkan::{
    AllocateInfo, BoundBuffer, Buffer, BufferDesc, DeviceMemory, ExistingVulkan, ExternalUse,
    HostBuffer, VulkanContext,
};
use cuvk::{Error, ErrorKind, ExtensionState, Importer, LayoutError, MEMORY_EXTENSION};

fn buffer(ctx: &Arc<VulkanContext>, size: u64, external: ExternalUse) -> cuvk::Result<Buffer> {
    Buffer::new(
        ctx,
        BufferDesc {
            size,
            usage: USAGE,
            external,
        },
    )
}

/// `ctx`'s own objects, described as an engine would hand them over.
fn existing<'a>(ctx: &VulkanContext, extensions: &'a [&'a std::ffi::CStr]) -> ExistingVulkan<'a> {
    ExistingVulkan {
        entry: ctx.entry().clone(),
        instance: ctx.instance().clone(),
        api_version: vk::API_VERSION_1_2,
        physical_device: ctx.physical_device(),
        device: ctx.device().clone(),
        queue_family_index: ctx.queue_family_index(),
        queue: *ctx.lock_queue(),
        enabled_extensions: extensions,
        timeline_semaphore_enabled: true,
        buffer_device_address_enabled: ctx.info().capabilities.buffer_device_address,
    }
}

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
    a: &mut BoundBuffer,
    ctx_b: &Arc<VulkanContext>,
    b: &BoundBuffer,
    seed: u32,
) {
    let n = (a.buffer().size() / 4) as usize;
    let data = pattern(n, seed);
    let mut up = HostBuffer::new(ctx_a, a.buffer().size(), vk::BufferUsageFlags::empty()).unwrap();
    up.write(&data).unwrap();
    let size = a.buffer().size();
    ctx_a.copy_buffer(&up, 0, a, 0, size).unwrap();
    let mut down =
        HostBuffer::new(ctx_b, b.buffer().size(), vk::BufferUsageFlags::empty()).unwrap();
    ctx_b
        .copy_buffer(b, 0, &mut down, 0, b.buffer().size())
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
        let mut a = exportable(&ctx, 1 << 20).unwrap();
        let mut b = import_into(&ctx, &a).unwrap();
        write_a_read_b(&ctx, &mut a, &ctx, &b, 1);
        // And the other way, after a's memory sees b's write.
        ctx.fill_buffer(&mut b, 0, 1 << 20, 0xdead_beef).unwrap();
        let mut down = HostBuffer::new(&ctx, 1 << 20, vk::BufferUsageFlags::empty()).unwrap();
        ctx.copy_buffer(&a, 0, &mut down, 0, 1 << 20).unwrap();
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
        let mut a = exportable(&ctx_a, 256 << 10).unwrap();
        let b = import_into(&ctx_b, &a).unwrap();
        write_a_read_b(&ctx_a, &mut a, &ctx_b, &b, 7);
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
    assert!(common::is_fd_open(r1) && common::is_fd_open(r2));
    if !ctx.info().name.contains("NVIDIA") {
        assert_eq!(common::non_driver_fds(), fds + 2);
    }
    drop((f1, f2));
    assert!(
        !common::is_fd_open(r1) && !common::is_fd_open(r2),
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
    let plain = buffer(&ctx, 4096, ExternalUse::None).unwrap();
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
        Error::Memory(cuvk::MemoryError::NotExportable {
            what: cuvk::Exportable::Buffer
        })
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
        Error::Memory(cuvk::MemoryError::NotExportable {
            what: cuvk::Exportable::Memory
        })
    );

    // Zero sizes.
    assert_err!(
        buffer(&ctx, 0, ExternalUse::Export),
        Error::Layout(LayoutError::ZeroSize { .. })
    );

    use std::os::fd::FromRawFd;
    // Bind offset misaligned and past the end.
    let b = buffer(&ctx, 1024, ExternalUse::Export).unwrap();
    let align = b.requirements().alignment;
    if align > 1 {
        let e = assert_err!(
            buffer(&ctx, 1024, ExternalUse::Export)
                .unwrap()
                .bind(memory.clone(), align / 2),
            Error::Layout(LayoutError::Misaligned { .. })
        );
        assert!(e.to_string().contains(&align.to_string()), "{e}");
    }
    assert_err!(
        buffer(&ctx, 1024, ExternalUse::Export)
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
        Err(e @ Error::HandleNotOpen { .. }) => {
            eprintln!("expected error: {e}");
            let Error::HandleNotOpen {
                handle, importer, ..
            } = e
            else {
                unreachable!()
            };
            assert_eq!((handle, importer), (NOT_OPEN as i64, Importer::Vulkan));
        }
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("imported a closed descriptor"),
    }

    // The next valid call still works.
    let mut ok = b.bind(memory.clone(), 0).unwrap();
    ctx.fill_buffer(&mut ok, 0, 1024, 5).unwrap();
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
    // Wrap the same objects but claim no extension: refused with the extension's name, and
    // "not enabled" (the device supports it).
    // SAFETY: the objects are valid and outlive the attempt (it fails before storing them
    // anywhere that would outlive `ctx`).
    let res = unsafe { VulkanContext::from_existing(existing(&ctx, &[])) };
    let e = assert_err!(
        res,
        Error::MissingExtension {
            state: ExtensionState::NotEnabled,
            ..
        }
    );
    assert_eq!(e.kind(), ErrorKind::NotEnabled);
    assert!(e.to_string().contains(MEMORY_EXTENSION.to_str().unwrap()));

    // Without the timelineSemaphore feature: refused, naming the feature.
    let exts = [MEMORY_EXTENSION];
    let mut no_timeline = existing(&ctx, &exts);
    no_timeline.timeline_semaphore_enabled = false;
    // SAFETY: as above.
    let res = unsafe { VulkanContext::from_existing(no_timeline) };
    assert_err!(
        res,
        Error::FeatureNotEnabled {
            feature: "timelineSemaphore",
            ..
        }
    );

    // With the extension named, it wraps, and the wrapped context exports and copies.
    // SAFETY: as above; the wrapper destroys nothing of the engine's and is dropped first.
    let wrapped = unsafe { VulkanContext::from_existing(existing(&ctx, &exts)) }.unwrap();
    let mut a = exportable(&wrapped, 4096).unwrap();
    let b = import_into(&wrapped, &a).unwrap();
    write_a_read_b(&wrapped, &mut a, &wrapped, &b, 3);
    drop((a, b, wrapped));
    common::assert_clean(&ctx);
}

/// A Vulkan 1.0 instance and device with external memory enabled (through the 1.0 KHR
/// extensions), as an old engine would have: what `from_existing` must refuse, before ash is
/// asked for a 1.1 function it cannot resolve (which aborts the process).
struct OldEngine {
    instance: cuvk::ash::Instance,
    device: cuvk::ash::Device,
    physical_device: vk::PhysicalDevice,
    queue: vk::Queue,
}

impl OldEngine {
    fn new(entry: &cuvk::ash::Entry) -> Option<Self> {
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_0);
        let inst_exts = [
            c"VK_KHR_get_physical_device_properties2".as_ptr(),
            c"VK_KHR_external_memory_capabilities".as_ptr(),
        ];
        let info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_extension_names(&inst_exts);
        // SAFETY: valid create info.
        let instance = unsafe { entry.create_instance(&info, None) }.ok()?;
        // SAFETY: valid instance.
        let pd = *unsafe { instance.enumerate_physical_devices() }
            .ok()?
            .first()?;
        let dev_exts = [
            c"VK_KHR_external_memory".as_ptr(),
            MEMORY_EXTENSION.as_ptr(),
        ];
        let prio = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(0)
            .queue_priorities(&prio)];
        let dinfo = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&dev_exts);
        // SAFETY: valid physical device and create info.
        let device = unsafe { instance.create_device(pd, &dinfo, None) }.ok()?;
        // SAFETY: queue family 0, index 0 was requested.
        let queue = unsafe { device.get_device_queue(0, 0) };
        Some(Self {
            instance,
            device,
            physical_device: pd,
            queue,
        })
    }

    fn describe<'a>(
        &self,
        entry: &cuvk::ash::Entry,
        api_version: u32,
        exts: &'a [&'a std::ffi::CStr],
    ) -> ExistingVulkan<'a> {
        ExistingVulkan {
            entry: entry.clone(),
            instance: self.instance.clone(),
            api_version,
            physical_device: self.physical_device,
            device: self.device.clone(),
            queue_family_index: 0,
            queue: self.queue,
            enabled_extensions: exts,
            timeline_semaphore_enabled: true,
            buffer_device_address_enabled: false,
        }
    }
}

impl Drop for OldEngine {
    fn drop(&mut self) {
        // SAFETY: created here; nothing made from them is alive (every wrap was refused).
        unsafe {
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

#[test]
fn vulkan_1_0_engine_is_refused_before_any_call() {
    let _serial = common::serial();
    let Some(ctx) = common::vulkan("vulkan_1_0_engine_is_refused_before_any_call") else {
        return;
    };
    let Some(old) = OldEngine::new(ctx.entry()) else {
        panic!("could not create a Vulkan 1.0 instance and device with external memory");
    };
    let exts = [MEMORY_EXTENSION];
    // The engine says what it created: refused by version, naming both numbers.
    // SAFETY: valid objects that outlive the attempt, described truthfully.
    let res = unsafe {
        VulkanContext::from_existing(old.describe(ctx.entry(), vk::API_VERSION_1_0, &exts))
    };
    let e = assert_err!(
        res,
        Error::ApiVersion {
            what: "instance",
            ..
        }
    );
    assert!(
        e.to_string().contains("1.0.0") && e.to_string().contains("1.2.0"),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorKind::Unsupported);

    // An engine that misstates its version breaks from_existing's contract; where the driver
    // gates entry points by version (Mesa does, NVIDIA 580 does not: there this is undefined
    // behaviour and is not run), the function check still refuses it before ash aborts.
    let gates_by_version = ctx.info().vendor_id == 0x10005; // Mesa (lavapipe)
    if gates_by_version {
        // SAFETY: valid objects; the version is wrong on purpose, and this driver resolves no
        // 1.1 function on a 1.0 device, so the wrap is refused before any call.
        let res = unsafe {
            VulkanContext::from_existing(old.describe(ctx.entry(), vk::API_VERSION_1_2, &exts))
        };
        let e = assert_err!(
            res,
            Error::MissingFunction {
                level: "device",
                ..
            }
        );
        assert_eq!(e.kind(), ErrorKind::NotEnabled);
    }

    // The C ABI's refusal of the same device is checked by capi/examples/example.c.
    drop(old);
    common::assert_clean(&ctx);
}

#[test]
fn allocation_larger_than_its_heap_is_refused() {
    let _serial = common::serial();
    let Some(ctx) = common::vulkan("allocation_larger_than_its_heap_is_refused") else {
        return;
    };
    let fds = common::non_driver_fds();
    let b = buffer(&ctx, 4096, ExternalUse::Export).unwrap();
    let r = b.requirements();
    let props = ctx.memory_properties();
    let largest_heap = (0..props.memory_heap_count as usize)
        .map(|h| props.memory_heaps[h].size)
        .max()
        .unwrap();
    let too_big = AllocateInfo {
        size: largest_heap + 1,
        memory_type_bits: r.memory_type_bits,
        properties: vk::MemoryPropertyFlags::empty(),
        exportable: true,
    };
    let e = assert_err!(
        DeviceMemory::allocate(&ctx, too_big, None),
        Error::Memory(cuvk::MemoryError::ExceedsHeap { .. })
    );
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
    assert!(
        e.to_string().contains(&(largest_heap + 1).to_string()),
        "{e}"
    );
    // Nothing reached vkAllocateMemory (the layer would have reported VUID-...-01713), and
    // the next valid allocation works.
    let ok = DeviceMemory::allocate(
        &ctx,
        AllocateInfo {
            size: r.size,
            ..too_big
        },
        None,
    )
    .unwrap();
    let mut bound = b.bind(Arc::new(ok), 0).unwrap();
    ctx.fill_buffer(&mut bound, 0, 4096, 7).unwrap();
    drop(bound);
    common::assert_non_driver_fds(fds, "file descriptors leaked");
    common::assert_clean(&ctx);
}

#[test]
fn validation_layer_catches_misuse() {
    let _shared = common::shared();
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
