//! Fan-out consumers (issue 37): an engine plugin is a viewer of a publisher in another
//! process (`particles --publish NAME`, a Python `cuvk.Publisher`, a Rust `ipc::Publisher`).
//! It imports the publisher's slots as `VkBuffer`s of its own device, holds one frame at a
//! time and submits its command buffers through cuvk, which adds the wait for the frame
//! written and the signal of its read; the publisher never rewrites a slot whose read is not
//! done.

use std::collections::VecDeque;
use std::ffi::{c_char, CStr};
use std::time::Duration;

use cuvk::ash::vk::{self, Handle};
use cuvk::ipc::{Held, Subscriber};
use cuvk::{Error, FrameStep, FrameSubmit, SyncError};

use crate::bridge::{bridge_of, CuvkBridge};
use crate::error::{fail, guard, out, CResult, CuvkResult};
use crate::handle::{insert, remove, with, HandleObject, Kind};
use crate::ipc::CuvkElementFormat;

/// A consumer of a publisher in another process.
pub type CuvkSubscriber = u64;

/// A frame `cuvk_subscriber_hold` handed out: the publisher's frame number and the slot
/// (`0..cuvk_subscriber_slot_count`) it is in.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CuvkHeldFrame {
    /// The publisher's frame number.
    pub number: u64,
    /// The slot it is in.
    pub slot: u32,
}

/// How many submitted reads are remembered for `cuvk_subscriber_wait_read`.
const READS_KEPT: usize = 64;

struct CSubscriber {
    sub: Subscriber,
    /// The frame held now.
    held: Option<Held>,
    /// The frames whose reads were submitted, newest last.
    submitted: VecDeque<Held>,
}

impl HandleObject for CSubscriber {
    const KIND: Kind = Kind::Subscriber;
}

fn with_sub<T>(
    handle: CuvkSubscriber,
    f: impl FnOnce(&mut CSubscriber) -> CResult<T>,
) -> CResult<T> {
    with(handle, f)
}

/// Attaches to the publisher `name` (a NUL-terminated socket name; abstract unless it has a
/// `/`) from the bridge's Vulkan device (checked against the publisher's GPU and driver),
/// waiting at most `timeout_ns` for it to exist; `every_frame` (0 or 1) asks for every frame
/// instead of the newest.
///
/// # Safety
/// `name` must be a NUL-terminated string; `out_subscriber` writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_subscriber_attach(
    bridge: CuvkBridge,
    name: *const c_char,
    every_frame: u32,
    timeout_ns: u64,
    out_subscriber: *mut CuvkSubscriber,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let out_subscriber = unsafe { out(out_subscriber, "out_subscriber") }?;
        if name.is_null() {
            return fail(CuvkResult::CuvkErrorNullPointer, "name is null");
        }
        // SAFETY: non-null (checked), NUL-terminated (the caller's contract).
        let name = unsafe { CStr::from_ptr(name) };
        let name = name.to_str().map_err(|e| Error::NotUtf8 {
            what: "publisher name",
            position: e.valid_up_to(),
            byte: name.to_bytes().get(e.valid_up_to()).copied().unwrap_or(0),
        })?;
        if every_frame > 1 {
            return Err(Error::NotBoolean {
                what: "every_frame",
                value: every_frame,
            }
            .into());
        }
        let b = bridge_of(bridge)?;
        let sub = Subscriber::attach(
            name,
            &b.vk,
            every_frame == 1,
            Duration::from_nanos(timeout_ns),
        )?;
        *out_subscriber = insert(CSubscriber {
            sub,
            held: None,
            submitted: VecDeque::new(),
        });
        Ok(())
    })
}

/// The number of the publisher's slots (K).
///
/// # Safety
/// `out_count` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_subscriber_slot_count(
    subscriber: CuvkSubscriber,
    out_count: *mut u32,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let out_count = unsafe { out(out_count, "out_count") }?;
        *out_count = with_sub(subscriber, |s| Ok(s.sub.slots().len() as u32))?;
        Ok(())
    })
}

/// Slot `slot` imported on the bridge's device: its `VkBuffer` (the engine's descriptors may
/// name it; it lives until the subscriber is destroyed), its size in bytes and what it holds.
///
/// # Safety
/// `out_buffer`, `out_bytes` and `out_element` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_subscriber_slot(
    subscriber: CuvkSubscriber,
    slot: u32,
    out_buffer: *mut u64,
    out_bytes: *mut u64,
    out_element: *mut CuvkElementFormat,
) -> CuvkResult {
    guard(|| {
        if out_buffer.is_null() || out_bytes.is_null() || out_element.is_null() {
            return fail(
                CuvkResult::CuvkErrorNullPointer,
                "out_buffer, out_bytes and out_element must not be null",
            );
        }
        let (buffer, bytes, element) = with_sub(subscriber, |s| {
            let slots = s.sub.slots();
            let elements = s.sub.slot_elements();
            match (slots.get(slot as usize), elements.get(slot as usize)) {
                (Some(b), Some(&element)) => {
                    Ok((b.buffer().handle().as_raw(), b.buffer().size(), element))
                }
                _ => Err(Error::from(cuvk::ipc::IpcError::NoSuchObject {
                    id: slot,
                    kind: cuvk::ipc::MessageKind::Buffer,
                })
                .into()),
            }
        })?;
        // SAFETY: non-null (checked) and writable (the caller's contract); written through
        // the raw pointers one after the other, so outputs that alias only overwrite each
        // other.
        unsafe {
            out_buffer.write(buffer);
            out_bytes.write(bytes);
            out_element.write(CuvkElementFormat {
                code: element.code,
                bits: element.bits,
                lanes: element.lanes,
                columns: element.columns,
            });
        }
        Ok(())
    })
}

/// Holds the next frame (the newest not read; with `every_frame` the oldest), waiting at most
/// `timeout_ns` for one: `CUVK_ERROR_TIMEOUT` if none came, `CUVK_ERROR_IO` once the
/// publisher is gone (this subscriber's queue waits on it are then released). One frame at a
/// time: refused while the frame held is not submitted.
///
/// # Safety
/// `out_frame` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_subscriber_hold(
    subscriber: CuvkSubscriber,
    timeout_ns: u64,
    out_frame: *mut CuvkHeldFrame,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let out_frame = unsafe { out(out_frame, "out_frame") }?;
        let held = with_sub(subscriber, |s| {
            let held = s.sub.hold(Duration::from_nanos(timeout_ns))?;
            if held.is_some() {
                s.held = held;
            }
            Ok(held)
        })?;
        match held {
            Some(h) => {
                *out_frame = CuvkHeldFrame {
                    number: h.frame(),
                    slot: h.slot() as u32,
                };
                Ok(())
            }
            None => fail(
                CuvkResult::CuvkErrorTimeout,
                "no new frame from the publisher in time",
            ),
        }
    })
}

/// Submits the engine's command buffers reading frame `number` (the frame held): they wait on
/// the GPU (at `wait_stage`, Vulkan pipeline stage bits) for the frame written, and signal
/// this subscriber's read after them; the publisher is told, and may rewrite the slot once
/// that signal ran. `count` may be 0 (a read done elsewhere, ordered before this submission).
///
/// # Safety
/// `command_buffers` must hold `count` executable `VkCommandBuffer`s of the bridge's device
/// whose resources live until the read is done (`cuvk_subscriber_wait_read`).
#[no_mangle]
pub unsafe extern "C" fn cuvk_subscriber_submit_read(
    subscriber: CuvkSubscriber,
    number: u64,
    command_buffers: *const u64,
    count: u32,
    wait_stage: u32,
) -> CuvkResult {
    guard(|| {
        if command_buffers.is_null() && count > 0 {
            return fail(CuvkResult::CuvkErrorNullPointer, "command_buffers is null");
        }
        let cmds: Vec<vk::CommandBuffer> = (0..count as usize)
            // SAFETY: `count` handles at a non-null pointer (checked), the caller's contract.
            .map(|i| vk::CommandBuffer::from_raw(unsafe { *command_buffers.add(i) }))
            .collect();
        let submit = FrameSubmit::new(&cmds, vk::PipelineStageFlags::from_raw(wait_stage));
        with_sub(subscriber, |s| {
            let held = match s.held {
                Some(h) if h.frame() == number => h,
                current => {
                    return Err(Error::from(SyncError::WrongFrame {
                        frame: number,
                        current: current.map_or(0, |h| h.frame()),
                        reason: FrameStep::Submit,
                    })
                    .into())
                }
            };
            // SAFETY: forwarded from the caller.
            unsafe { s.sub.submit_read(&held, &submit) }?;
            s.held = None;
            if s.submitted.len() == READS_KEPT {
                s.submitted.pop_front();
            }
            s.submitted.push_back(held);
            Ok(())
        })
    })
}

/// Waits on the host, at most `timeout_ns`, until this subscriber's read of frame `number`
/// (one of its last 64 submitted) is done.
#[no_mangle]
pub extern "C" fn cuvk_subscriber_wait_read(
    subscriber: CuvkSubscriber,
    number: u64,
    timeout_ns: u64,
) -> CuvkResult {
    guard(|| {
        with_sub(subscriber, |s| {
            let Some(held) = s.submitted.iter().rev().find(|h| h.frame() == number) else {
                return Err(Error::from(SyncError::WrongFrame {
                    frame: number,
                    current: s.submitted.back().map_or(0, |h| h.frame()),
                    reason: FrameStep::Submit,
                })
                .into());
            };
            Ok(s.sub.wait_read(held, Duration::from_nanos(timeout_ns))?)
        })
    })
}

/// Destroys the subscriber: its connection closes (the publisher frees its slot) and its
/// imports are released once its reads are done (bounded by the bridge's drop budget). Wait
/// for the reads first (`cuvk_subscriber_wait_read`) where the engine's command buffers use
/// the slots' buffers.
#[no_mangle]
pub extern "C" fn cuvk_subscriber_destroy(subscriber: CuvkSubscriber) -> CuvkResult {
    guard(|| remove::<CSubscriber>(subscriber))
}
