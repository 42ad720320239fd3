//! The wgpu integration on any Vulkan device (lavapipe in CI), no CUDA: cuvk buffers wrapped as
//! `wgpu::Buffer`s and read back exactly through a second `VkDevice` both ways, wgpu
//! submissions ordered by cuvk timelines (a refused submission changes nothing), adoption of
//! a device without the interop extensions refused with the missing extension named, and every
//! drop order with the validation layer silent on both devices.

use crate::support;
use cuvk_dev::assert_err;
use cuvk_dev::testing as common;

use std::sync::Arc;
use std::time::Duration;

use cuvk::ash::vk;
use cuvk::vulkan::{BoundBuffer, HostBuffer, Semaphore, SemaphoreDesc, SemaphoreKind, SemaphoreOp};
use cuvk::wgpu::{create_instance, wgpu, WgpuDevice};
use cuvk::{Error, ExtensionState};
use support::{pattern, read_words, Writer};

const WORDS: usize = 16 << 10;
const BYTES: u64 = WORDS as u64 * 4;

fn shared_usage() -> vk::BufferUsageFlags {
    vk::BufferUsageFlags::STORAGE_BUFFER
        | vk::BufferUsageFlags::TRANSFER_SRC
        | vk::BufferUsageFlags::TRANSFER_DST
}

fn wgpu_usage() -> wgpu::BufferUsages {
    wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST
}

/// Writes `words` into `buf` (of `ctx`) through a host buffer and a Vulkan copy.
fn write_via_vulkan(ctx: &Arc<cuvk::vulkan::VulkanContext>, buf: &mut BoundBuffer, words: &[u32]) {
    let bytes = std::mem::size_of_val(words) as u64;
    let mut host = HostBuffer::new(ctx, bytes, vk::BufferUsageFlags::empty()).unwrap();
    host.write(words).unwrap();
    ctx.copy_buffer(&host, 0, buf, 0, bytes).unwrap();
}

#[test]
fn wgpu_writes_other_device_reads_and_the_reverse_exactly() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("wgpu_writes_other_device_reads") else {
        return;
    };
    let Some((w, errors)) = support::device("wgpu_writes_other_device_reads", Some(&ctx)) else {
        return;
    };
    let (device, queue) = (w.device(), w.queue());
    let writer = Writer::new(device);

    // 1. Memory of the other device, imported into wgpu's: wgpu writes, the other reads.
    let mut source = BoundBuffer::new_exportable(
        &ctx,
        BYTES,
        shared_usage(),
        vk::MemoryPropertyFlags::empty(),
    )
    .unwrap();
    let buf = w
        .import_buffer(&source, wgpu_usage(), Some("imported"))
        .unwrap();
    assert_eq!(buf.size(), BYTES);
    queue.submit([writer.encode(device, &buf, WORDS as u32, 7)]);
    support::wait(device);
    let got = common::read_via_vulkan(&ctx, &source);
    let bad = (0..WORDS).filter(|&i| got[i] != pattern(i, 7)).count();
    assert_eq!(
        bad, 0,
        "{bad} of {WORDS} words differ after wgpu wrote them"
    );

    // The reverse: the other device writes, wgpu reads.
    let expected: Vec<u32> = (0..WORDS).map(|i| pattern(i, 99)).collect();
    write_via_vulkan(&ctx, &mut source, &expected);
    assert_eq!(read_words(device, queue, &buf, BYTES), expected);

    // 2. Memory of wgpu's device, wrapped as it is: wgpu writes, the other device (importing
    // it) reads; then the other device writes and wgpu reads.
    let own = Arc::new(
        BoundBuffer::new_exportable(
            w.vulkan(),
            BYTES,
            shared_usage(),
            vk::MemoryPropertyFlags::empty(),
        )
        .unwrap(),
    );
    let mut seen = BoundBuffer::import_from(&ctx, &own).unwrap();
    let wrapped = w
        .wrap_buffer(own.clone(), wgpu_usage(), Some("own"))
        .unwrap();
    queue.submit([writer.encode(device, &wrapped, WORDS as u32, 3)]);
    support::wait(device);
    let got = common::read_via_vulkan(&ctx, &seen);
    assert!(
        (0..WORDS).all(|i| got[i] == pattern(i, 3)),
        "wgpu -> other device"
    );
    let expected: Vec<u32> = (0..WORDS).map(|i| pattern(i, 5)).collect();
    write_via_vulkan(&ctx, &mut seen, &expected);
    assert_eq!(read_words(device, queue, &wrapped, BYTES), expected);

    drop((buf, wrapped, own, seen, source));
    support::wait(device);
    errors.assert_none();
    support::assert_clean(&w);
    common::assert_clean(&ctx);
}

#[test]
fn wrapping_is_checked_first_and_a_refusal_changes_nothing() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("wrapping_is_checked_first") else {
        return;
    };
    let Some((w, errors)) = support::device("wrapping_is_checked_first", Some(&ctx)) else {
        return;
    };
    let transfer_only = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
    let bound = Arc::new(
        BoundBuffer::new_exportable(
            w.vulkan(),
            4096,
            transfer_only,
            vk::MemoryPropertyFlags::empty(),
        )
        .unwrap(),
    );
    let e = assert_err!(
        w.wrap_buffer(bound.clone(), wgpu::BufferUsages::STORAGE, None),
        Error::Wgpu(cuvk::WgpuError::MissingVulkanUsage { .. })
    );
    assert!(e.to_string().contains("STORAGE_BUFFER"), "{e}");
    assert_err!(
        w.wrap_buffer(
            bound.clone(),
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            None
        ),
        Error::Wgpu(cuvk::WgpuError::MappableUsage { .. })
    );
    // A buffer of the other device is not wgpu's.
    let other = Arc::new(
        BoundBuffer::new_exportable(&ctx, 4096, transfer_only, vk::MemoryPropertyFlags::empty())
            .unwrap(),
    );
    assert_err!(
        w.wrap_buffer(other.clone(), wgpu::BufferUsages::COPY_SRC, None),
        Error::WrongDevice { .. }
    );
    assert_err!(
        w.import_buffer(&other, wgpu::BufferUsages::STORAGE, None),
        Error::Wgpu(cuvk::WgpuError::MissingVulkanUsage { .. })
    );
    // Refused calls kept nothing: the caller's Arc is the only one left.
    assert_eq!(Arc::strong_count(&bound), 1);
    assert_eq!(Arc::strong_count(&other), 1);
    let ok = w
        .wrap_buffer(bound.clone(), wgpu::BufferUsages::COPY_SRC, None)
        .unwrap();
    assert_eq!(Arc::strong_count(&bound), 2);
    drop(ok);
    support::wait(w.device());
    assert_eq!(Arc::strong_count(&bound), 1, "wgpu released its share");
    errors.assert_none();
    support::assert_clean(&w);
}

#[test]
fn submissions_wait_and_signal_cuvk_timelines() {
    let _shared = common::shared();
    let Some((w, errors)) = support::device("submissions_wait_and_signal", None) else {
        return;
    };
    let (device, queue) = (w.device(), w.queue());
    let gate = Semaphore::new(w.vulkan(), SemaphoreDesc::LOCAL_TIMELINE).unwrap();
    let done = Semaphore::new(w.vulkan(), SemaphoreDesc::LOCAL_TIMELINE).unwrap();
    let buf = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("plain"),
        size: BYTES,
        usage: wgpu_usage(),
        mapped_at_creation: false,
    });
    let writer = Writer::new(device);
    let wait = |value| SemaphoreOp {
        semaphore: &gate,
        value,
        stage: vk::PipelineStageFlags::COMPUTE_SHADER,
    };
    let signal = |value| SemaphoreOp {
        semaphore: &done,
        value,
        stage: vk::PipelineStageFlags::empty(),
    };
    // SAFETY: nothing else submits on this queue during the call.
    unsafe {
        w.submit(
            [writer.encode(device, &buf, WORDS as u32, 1)],
            &[wait(1)],
            &[signal(1)],
        )
    }
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        done.value().unwrap(),
        0,
        "the submission ran before its wait was signalled"
    );
    gate.signal_host(1).unwrap();
    done.wait_host(1, Duration::from_secs(10)).unwrap();
    let got = read_words(device, queue, &buf, BYTES);
    assert!((0..WORDS).all(|i| got[i] == pattern(i, 1)));

    // Refused before wgpu sees anything: a value that does not increase, a binary semaphore,
    // a semaphore of another device. Nothing is left attached to wgpu's next submission.
    assert_err!(
        // SAFETY: nothing else submits on this queue during the call.
        unsafe { w.submit([], &[], &[signal(1)]) },
        Error::Sync(cuvk::SyncError::TimelineNotIncreasing { value: 1, last: 1 })
    );
    let binary = Semaphore::new(
        w.vulkan(),
        SemaphoreDesc {
            kind: SemaphoreKind::Binary,
            exportable: false,
        },
    )
    .unwrap();
    let bin_op = SemaphoreOp {
        semaphore: &binary,
        value: 0,
        stage: vk::PipelineStageFlags::ALL_COMMANDS,
    };
    assert_err!(
        // SAFETY: nothing else submits on this queue during the call.
        unsafe { w.submit([], &[bin_op], &[]) },
        Error::Sync(cuvk::SyncError::BinaryNotAccepted { .. })
    );
    let no_stage = SemaphoreOp {
        stage: vk::PipelineStageFlags::empty(),
        ..wait(2)
    };
    assert_err!(
        // SAFETY: nothing else submits on this queue during the call.
        unsafe { w.submit([], &[no_stage], &[]) },
        Error::Sync(cuvk::SyncError::EmptyWaitStage)
    );
    assert_eq!(done.highest_signal(), 1);
    queue.submit([]);
    support::wait(device);

    // wgpu rejects a command buffer that uses a destroyed buffer: the semaphore operations
    // are withdrawn, the ledger keeps its value, and the same frame submits afterwards.
    let doomed = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("doomed"),
        size: BYTES,
        usage: wgpu_usage(),
        mapped_at_creation: false,
    });
    let cb = writer.encode(device, &doomed, WORDS as u32, 2);
    doomed.destroy();
    let e = assert_err!(
        // SAFETY: nothing else submits on this queue during the call.
        unsafe { w.submit([cb], &[wait(2)], &[signal(2)]) },
        Error::Wgpu(cuvk::WgpuError::NotSubmitted { .. })
    );
    assert!(
        matches!(
            e,
            Error::Wgpu(cuvk::WgpuError::NotSubmitted { withdrawn: 3 })
        ),
        "{e:?}"
    );
    assert!(
        !errors.take().is_empty(),
        "wgpu reported the invalid submission"
    );
    assert_eq!(done.highest_signal(), 1);
    gate.signal_host(2).unwrap();
    // SAFETY: nothing else submits on this queue during the call.
    unsafe {
        w.submit(
            [writer.encode(device, &buf, WORDS as u32, 2)],
            &[wait(2)],
            &[signal(2)],
        )
    }
    .unwrap();
    done.wait_host(2, Duration::from_secs(10)).unwrap();
    assert!(read_words(device, queue, &buf, BYTES)
        .iter()
        .enumerate()
        .all(|(i, &v)| v == pattern(i, 2)));
    support::wait(device);
    drop((gate, done, binary));
    errors.assert_none();
    support::assert_clean(&w);
}

#[test]
fn adopting_a_device_without_the_interop_extensions_is_refused_by_name() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("adopting_without_extensions") else {
        return;
    };
    let (instance, _) = create_instance(cuvk::vulkan::Validation::Required).unwrap();
    let adapters = support::ready(instance.enumerate_adapters(wgpu::Backends::VULKAN));
    let adapter = adapters
        .into_iter()
        .find(|a| cuvk::wgpu::adapter_uuid(a).ok() == Some(ctx.info().device_uuid))
        .expect("the adapter of the Vulkan test device");
    // Features or limits the adapter lacks: refused before any device is made.
    let missing =
        wgpu::Features::all() - adapter.features() - wgpu::Features::all_experimental_mask();
    if let Some(feature) = missing.iter().next() {
        let desc = wgpu::DeviceDescriptor {
            required_features: feature,
            ..Default::default()
        };
        let e = assert_err!(
            WgpuDevice::open(&adapter, &desc),
            Error::Wgpu(cuvk::WgpuError::MissingFeatures { .. })
        );
        assert!(e.is_unavailable());
    }
    let mut limits = adapter.limits();
    limits.max_bind_groups += 1;
    let desc = wgpu::DeviceDescriptor {
        required_limits: limits,
        ..Default::default()
    };
    let e = assert_err!(
        WgpuDevice::open(&adapter, &desc),
        Error::Wgpu(cuvk::WgpuError::LimitBeyondAdapter {
            limit: "max_bind_groups",
            ..
        })
    );
    assert!(e.to_string().contains("max_bind_groups"), "{e}");

    // A device opened without the external memory extension (wgpu-hal 30 enables it where
    // offered, so it is taken out here, as an application or an older wgpu would open it).
    let (device, queue) = open_without_memory_extension(&adapter);
    let errors = support::Errors::install(&device);
    let e = assert_err!(
        WgpuDevice::adopt(&device, &queue),
        Error::MissingExtension {
            state: ExtensionState::NotEnabled,
            ..
        }
    );
    assert!(
        e.to_string()
            .contains(&*cuvk::MEMORY_EXTENSION.to_string_lossy()),
        "{e}"
    );
    // The device is as it was.
    let writer = Writer::new(&device);
    let buf = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: BYTES,
        usage: wgpu_usage(),
        mapped_at_creation: false,
    });
    queue.submit([writer.encode(&device, &buf, WORDS as u32, 4)]);
    let got = read_words(&device, &queue, &buf, BYTES);
    assert!((0..WORDS).all(|i| got[i] == pattern(i, 4)));
    errors.assert_none();

    // A device wgpu opened on its own adopts (it has external memory) but cannot share
    // semaphores: the extension is named, NotEnabled where the device offers it.
    let (device, queue) = support::ready(adapter.request_device(&Default::default())).unwrap();
    let plain = WgpuDevice::adopt(&device, &queue).unwrap();
    let e = assert_err!(
        Semaphore::new(plain.vulkan(), SemaphoreDesc::SHARED_TIMELINE),
        Error::MissingExtension { .. }
    );
    let offered = ctx.info().capabilities.external_semaphore;
    assert_eq!(
        matches!(
            e,
            Error::MissingExtension {
                state: ExtensionState::NotEnabled,
                ..
            }
        ),
        offered
    );
    drop(plain);

    // A device cuvk opened adopts: the same VkDevice, a second view of it.
    let opened = WgpuDevice::open(&adapter, &Default::default()).unwrap();
    let again = WgpuDevice::adopt(opened.device(), opened.queue()).unwrap();
    assert!(again.vulkan().same_device(opened.vulkan()));
    assert!(!again.vulkan().has_queue());
    assert_err!(
        again.vulkan().fill_buffer(
            &mut HostBuffer::new(again.vulkan(), 16, vk::BufferUsageFlags::empty()).unwrap(),
            0,
            16,
            0
        ),
        Error::NoQueue { .. }
    );
}

/// A wgpu device on `adapter` whose extension list lacks the platform's external memory
/// extension.
fn open_without_memory_extension(adapter: &wgpu::Adapter) -> (wgpu::Device, wgpu::Queue) {
    let desc = wgpu::DeviceDescriptor::default();
    let callback: Box<wgpu::hal::vulkan::CreateDeviceCallback<'_>> = Box::new(
        |args: wgpu::hal::vulkan::CreateDeviceCallbackArgs<'_, '_, '_>| {
            args.extensions.retain(|e| *e != cuvk::MEMORY_EXTENSION);
        },
    );
    // SAFETY: the hal adapter opens a device as wgpu would; the extension taken out is one
    // wgpu-hal only uses when it is in the final list (dma-buf imports), as device_from_raw
    // reads that list.
    let open = unsafe {
        let hal = adapter
            .as_hal::<wgpu::hal::api::Vulkan>()
            .expect("a Vulkan adapter");
        hal.open_with_callback(
            desc.required_features,
            &desc.required_limits,
            &desc.memory_hints,
            Some(callback),
        )
        .expect("open")
    };
    // SAFETY: `open` comes from this adapter with exactly `desc`'s features.
    unsafe { adapter.create_device_from_hal::<wgpu::hal::api::Vulkan>(open, &desc) }
        .expect("device")
}

/// The objects of one drop-order case (held only to be dropped).
#[allow(dead_code)]
enum Part {
    /// The wgpu buffer wrapping cuvk's buffer, with a copy from it still in flight.
    WgpuBuffer(wgpu::Buffer),
    /// The caller's share of the cuvk buffer (on wgpu's device).
    Owner(Arc<BoundBuffer>),
    /// The same memory imported into the other device.
    Import(BoundBuffer),
    /// The caller's WgpuDevice (with its wgpu device and queue handles).
    Device(WgpuDevice),
}

#[test]
fn every_drop_order_is_safe_and_silent() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("every_drop_order") else {
        return;
    };
    let orders: Vec<[usize; 4]> = permutations();
    for order in orders {
        let Some((w, errors)) = support::device("every_drop_order", Some(&ctx)) else {
            return;
        };
        let messages = w.vulkan().clone();
        let own = Arc::new(
            BoundBuffer::new_exportable(
                w.vulkan(),
                BYTES,
                shared_usage(),
                vk::MemoryPropertyFlags::empty(),
            )
            .unwrap(),
        );
        let import = BoundBuffer::import_from(&ctx, &own).unwrap();
        let buf = w.wrap_buffer(own.clone(), wgpu_usage(), None).unwrap();
        let own_weak = Arc::downgrade(&own);
        // Work in flight that uses the buffer when the drops begin.
        let writer = Writer::new(w.device());
        let sink = w.device().create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: BYTES,
            usage: wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = w.device().create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&buf, 0, &sink, 0, BYTES);
        w.queue().submit([
            writer.encode(w.device(), &buf, WORDS as u32, 1),
            enc.finish(),
        ]);
        drop((writer, sink));
        let mut parts: Vec<Option<Part>> = vec![
            Some(Part::WgpuBuffer(buf)),
            Some(Part::Owner(own)),
            Some(Part::Import(import)),
            Some(Part::Device(w)),
        ];
        for &i in &order {
            drop(parts[i].take());
        }
        let msgs = messages.validation_messages();
        assert!(
            msgs.is_empty(),
            "drop order {order:?}: validation messages:\n{}",
            msgs.join("\n")
        );
        assert!(messages.validation_enabled());
        assert!(
            own_weak.upgrade().is_none(),
            "drop order {order:?}: wgpu still holds the buffer"
        );
        let context_weak = Arc::downgrade(&messages);
        drop(messages); // the last share of wgpu's device: it goes now
        assert!(
            context_weak.upgrade().is_none(),
            "drop order {order:?}: device kept alive"
        );
        errors.assert_none();
    }
    common::assert_clean(&ctx);
}

fn permutations() -> Vec<[usize; 4]> {
    let mut out = Vec::new();
    for a in 0..4 {
        for b in 0..4 {
            for c in 0..4 {
                for d in 0..4 {
                    let p = [a, b, c, d];
                    if (0..4).all(|x| p.contains(&x)) {
                        out.push(p);
                    }
                }
            }
        }
    }
    out
}
