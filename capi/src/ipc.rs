//! Frame servers: an engine (the viewer) publishes shared buffers and draws what a simulation
//! in another process (the producer: `cuvk::ipc::FrameClient`, Python's `cuvk.Producer`) writes
//! into them, each frame ordered on the GPU by two timelines the engine owns.

use std::ffi::{c_char, CStr};
use std::time::Duration;

use cuvk::ash::vk::{self, Handle};
use cuvk::ipc::FrameServer;
use cuvk::{ElementFormat, Error, Frame, FrameStep, FrameSubmit, SyncError};

use crate::bridge::{bridge_of, CuvkBridge};
use crate::buffer::{CBuffer, CBufferKind};
use crate::error::{fail, guard, out, CResult, CuvkResult};
use crate::handle::{insert, remove, with, HandleObject, Kind};

/// A frame server.
pub type CuvkFrameServer = u64;

/// What a published buffer holds, as DLPack describes an array: rows of `columns` values of
/// one data type (`code`: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool; `bits` per lane; `lanes`
/// per value, 1 for scalars). `{2, 32, 1, 4}`: rows of four floats (`float4` positions).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CuvkElementFormat {
    /// DLPack's type code.
    pub code: u8,
    /// Bits per lane: 8, 16, 32 or 64.
    pub bits: u8,
    /// Lanes per value.
    pub lanes: u16,
    /// Values per row.
    pub columns: u32,
}

/// A frame handed out by `cuvk_frame_server_next_frame`: the number the engine submits, the
/// published buffer it reads (`slot`, in publishing order: `number % frames_in_flight`) and
/// the command slot it may record into (`number % (2 * frames_in_flight)`: every earlier use
/// of it has completed).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CuvkFrame {
    /// The frame's number (its timeline value).
    pub number: u64,
    /// The published buffer it reads.
    pub slot: u32,
    /// The command slot it records into.
    pub command_slot: u32,
}

/// The server and the frame it handed out last (the C side names frames by number).
struct CFrameServer {
    server: FrameServer,
    current: Option<Frame>,
}

fn with_server<T>(
    handle: CuvkFrameServer,
    f: impl FnOnce(&mut CFrameServer) -> CResult<T>,
) -> CResult<T> {
    with(handle, f)
}

impl HandleObject for CFrameServer {
    const KIND: Kind = Kind::FrameServer;
}

fn nanos(timeout_ns: u64) -> Duration {
    Duration::from_nanos(timeout_ns)
}

/// Listens under `name` (a NUL-terminated socket name; abstract unless it has a `/`) for a
/// producer writing `frames_in_flight` frames ahead (1..=16, as every frame pacer); makes and
/// publishes the two
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
        *out_server = insert(CFrameServer {
            server,
            current: None,
        });
        Ok(())
    })
}

/// Publishes a shared buffer (made by `cuvk_buffer_create` on a bridge with CUDA) for the
/// producer, holding whole rows of `element`; its id in `out_id`. Frame n is written into
/// the buffer published `n % frames_in_flight`-th (`CuvkFrame.slot`).
///
/// # Safety
/// `out_id` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_frame_server_publish_buffer(
    server: CuvkFrameServer,
    buffer: u64,
    element: CuvkElementFormat,
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
        let element = ElementFormat {
            code: element.code,
            bits: element.bits,
            lanes: element.lanes,
            columns: element.columns,
        };
        *out_id = with_server(server, |s| Ok(s.server.publish_buffer(&bound, element)?))?;
        Ok(())
    })
}

/// Waits at most `timeout_ns` for a producer to attach (and sends it every object).
#[no_mangle]
pub extern "C" fn cuvk_frame_server_accept(server: CuvkFrameServer, timeout_ns: u64) -> CuvkResult {
    guard(|| with_server(server, |s| Ok(s.server.accept(nanos(timeout_ns))?)))
}

/// The next frame to draw, waiting at most `timeout_ns`: the newest the producer wrote, its
/// command slot free. `CUVK_ERROR_TIMEOUT` if none came in time. A producer that went away is
/// handled here (its waits released, the buffers keep its last frame, the next producer
/// served on fresh timelines). Refused while the frame handed out last is not submitted.
///
/// # Safety
/// `out_frame` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_frame_server_next_frame(
    server: CuvkFrameServer,
    timeout_ns: u64,
    out_frame: *mut CuvkFrame,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let out_frame = unsafe { out(out_frame, "out_frame") }?;
        let next = with_server(server, |s| {
            let next = s.server.next_frame(nanos(timeout_ns))?;
            if next.is_some() {
                s.current = next;
            }
            Ok(next)
        })?;
        match next {
            Some(f) => {
                *out_frame = CuvkFrame {
                    number: f.number(),
                    slot: f.slot() as u32,
                    command_slot: f.command_slot() as u32,
                };
                Ok(())
            }
            None => fail(
                CuvkResult::CuvkErrorTimeout,
                "no new frame from the producer in time",
            ),
        }
    })
}

/// Submits the engine's command buffers for frame `n` (the number of the frame
/// `cuvk_frame_server_next_frame` handed out last): they wait on the GPU (at `wait_stage`,
/// Vulkan pipeline stage bits) for the frame written, and signal it drawn; the producer is
/// told.
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
        with_server(server, |s| {
            let frame = match s.current {
                Some(f) if f.number() == n => f,
                current => {
                    return Err(Error::from(SyncError::WrongFrame {
                        frame: n,
                        current: current.map_or(0, |f| f.number()),
                        reason: FrameStep::Submit,
                    })
                    .into())
                }
            };
            // SAFETY: forwarded from the caller.
            unsafe { s.server.submit_drawn(&frame, &submit) }?;
            s.current = None;
            Ok(())
        })
    })
}

/// Waits on the host, at most `timeout_ns`, until frame `n` is drawn.
#[no_mangle]
pub extern "C" fn cuvk_frame_server_wait_drawn(
    server: CuvkFrameServer,
    n: u64,
    timeout_ns: u64,
) -> CuvkResult {
    guard(|| with_server(server, |s| Ok(s.server.wait_drawn(n, nanos(timeout_ns))?)))
}

/// Before the engine stops drawing (or destroys what its frames use): sends the newest
/// "drawn" notice and waits, at most `timeout_ns` in all, until every frame submitted is
/// drawn, releasing the producer's timeline where the producer is gone.
#[no_mangle]
pub extern "C" fn cuvk_frame_server_wait_idle(
    server: CuvkFrameServer,
    timeout_ns: u64,
) -> CuvkResult {
    guard(|| with_server(server, |s| Ok(s.server.wait_idle(nanos(timeout_ns))?)))
}

/// Destroys the server (the published buffers stay the engine's).
#[no_mangle]
pub extern "C" fn cuvk_frame_server_destroy(server: CuvkFrameServer) -> CuvkResult {
    guard(|| remove::<CFrameServer>(server))
}
