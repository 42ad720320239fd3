//! Frame servers: an engine (the viewer) publishes shared buffers and draws what a simulation
//! in another process (the producer: `cuvk::ipc::FrameClient`, Python's `cuvk.Producer`) writes
//! into them, each frame ordered on the GPU by two timelines the engine owns.

use std::ffi::{c_char, CStr};
use std::time::Duration;

use cuvk::ash::vk::{self, Handle};
use cuvk::ipc::FrameServer;
use cuvk::{Error, FrameSubmit};

use crate::bridge::{bridge_of, CuvkBridge};
use crate::buffer::{CBuffer, CBufferKind};
use crate::error::{fail, guard, out, CResult, CuvkResult};
use crate::handle::{insert, remove, with, HandleObject, Kind};

/// A frame server.
pub type CuvkFrameServer = u64;

fn with_server<T>(
    handle: CuvkFrameServer,
    f: impl FnOnce(&mut FrameServer) -> CResult<T>,
) -> CResult<T> {
    with(handle, f)
}

impl HandleObject for FrameServer {
    const KIND: Kind = Kind::FrameServer;
}

fn nanos(timeout_ns: u64) -> Duration {
    Duration::from_nanos(timeout_ns)
}

/// Listens under `name` (a NUL-terminated socket name; abstract unless it has a `/`) for a
/// producer writing `frames_in_flight` frames ahead (1..=16); makes and publishes the two
/// timelines. Needs a bridge with CUDA's GPU (the producer's) and exportable timelines.
///
/// # Safety
/// `name` must be a NUL-terminated string; `out_server` writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_frame_server_create(
    bridge: CuvkBridge,
    name: *const c_char,
    frames_in_flight: u32,
    out_server: *mut CuvkFrameServer,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let out_server = unsafe { out(out_server, "out_server") }?;
        if name.is_null() {
            return fail(CuvkResult::CuvkErrorNullPointer, "name is null");
        }
        // SAFETY: non-null (checked), NUL-terminated (the caller's contract).
        let name = unsafe { CStr::from_ptr(name) };
        let name = name.to_str().map_err(|e| Error::NotUtf8 {
            what: "frame server name",
            position: e.valid_up_to(),
            byte: name.to_bytes().get(e.valid_up_to()).copied().unwrap_or(0),
        })?;
        let b = bridge_of(bridge)?;
        let server = FrameServer::bind(name, &b.vk, frames_in_flight)?;
        *out_server = insert(server);
        Ok(())
    })
}

/// Publishes a shared buffer (made by `cuvk_buffer_create` on a bridge with CUDA) for the
/// producer, with its element type tag and size; its id in `out_id`. Frame n is written into
/// the buffer published `(n - 1) % frames_in_flight`-th.
///
/// # Safety
/// `out_id` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_frame_server_publish_buffer(
    server: CuvkFrameServer,
    buffer: u64,
    element_type: u32,
    element_size: u32,
    out_id: *mut u32,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let out_id = unsafe { out(out_id, "out_id") }?;
        let bound = with(buffer, |b: &mut CBuffer| match &b.buffer {
            CBufferKind::Shared(s) => Ok(s.vulkan_buffer().clone()),
            _ => Err(Error::BufferNotShared {
                buffer,
                needed_for: "cuvk_frame_server_publish_buffer",
            }
            .into()),
        })?;
        *out_id = with_server(server, |s| {
            Ok(s.publish_buffer(&bound, element_type, element_size)?)
        })?;
        Ok(())
    })
}

/// Waits at most `timeout_ns` for a producer to attach (and sends it every object).
#[no_mangle]
pub extern "C" fn cuvk_frame_server_accept(server: CuvkFrameServer, timeout_ns: u64) -> CuvkResult {
    guard(|| with_server(server, |s| Ok(s.accept(nanos(timeout_ns))?)))
}

/// The newest frame the producer announced written after `after`, waiting at most
/// `timeout_ns`; `CUVK_ERROR_TIMEOUT` if none came, `CUVK_ERROR_IO` once the producer is gone
/// (then call `cuvk_frame_server_release_waits`).
///
/// # Safety
/// `out_frame` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_frame_server_written(
    server: CuvkFrameServer,
    after: u64,
    timeout_ns: u64,
    out_frame: *mut u64,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let out_frame = unsafe { out(out_frame, "out_frame") }?;
        match with_server(server, |s| Ok(s.written(after, nanos(timeout_ns))?))? {
            Some(n) => {
                *out_frame = n;
                Ok(())
            }
            None => fail(
                CuvkResult::CuvkErrorTimeout,
                "no new frame from the producer in time",
            ),
        }
    })
}

/// Submits the engine's command buffers for frame `n` (announced by
/// `cuvk_frame_server_written`): they wait on the GPU (at `wait_stage`, Vulkan pipeline stage
/// bits) for the frame written, and signal it drawn; the producer is told.
///
/// # Safety
/// `command_buffers` must hold `count` executable `VkCommandBuffer`s of the bridge's device
/// whose resources live until frame `n` is drawn (`cuvk_frame_server_wait_drawn`).
#[no_mangle]
pub unsafe extern "C" fn cuvk_frame_server_submit_drawn(
    server: CuvkFrameServer,
    n: u64,
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
        // SAFETY: forwarded from the caller.
        with_server(server, |s| Ok(unsafe { s.submit_drawn(n, &submit) }?))
    })
}

/// Waits on the host, at most `timeout_ns`, until frame `n` is drawn.
#[no_mangle]
pub extern "C" fn cuvk_frame_server_wait_drawn(
    server: CuvkFrameServer,
    n: u64,
    timeout_ns: u64,
) -> CuvkResult {
    guard(|| with_server(server, |s| Ok(s.wait_drawn(n, nanos(timeout_ns))?)))
}

/// Sends the newest "drawn" notice if the socket was full when it was made, waiting at most
/// `timeout_ns` for room: before the engine stops calling the server (the end of a run) while
/// the producer still waits for it. Every other call sends it too, where there is room.
#[no_mangle]
pub extern "C" fn cuvk_frame_server_flush(server: CuvkFrameServer, timeout_ns: u64) -> CuvkResult {
    guard(|| with_server(server, |s| Ok(s.flush(nanos(timeout_ns))?)))
}

/// After the producer is gone: releases every wait this server enqueued on its timeline (its
/// frames complete; the buffers keep the last frame). Refused while it is connected.
#[no_mangle]
pub extern "C" fn cuvk_frame_server_release_waits(server: CuvkFrameServer) -> CuvkResult {
    guard(|| with_server(server, |s| Ok(s.release_waits()?)))
}

/// Destroys the server (the published buffers stay the engine's).
#[no_mangle]
pub extern "C" fn cuvk_frame_server_destroy(server: CuvkFrameServer) -> CuvkResult {
    guard(|| remove::<FrameServer>(server))
}
