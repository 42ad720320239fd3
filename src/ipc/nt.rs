//! Windows: the step that replaces `SCM_RIGHTS` there. An NT handle (what Vulkan's
//! `OPAQUE_WIN32` export and CUDA's `OPAQUE_WIN32` import use) is duplicated by the publisher
//! straight into the attacher's process (`DuplicateHandle` with the attacher's pid, which it
//! sends first), and the handle's value travels in the message; the attacher adopts it as its
//! own. Type-checked on Windows; the transport (a named pipe carrying the same [`Message`]s)
//! is Linux-only in this release: on Windows, `Server` and the rest do not exist. The future
//! transport must learn the attacher's pid from the pipe (`GetNamedPipeClientProcessId`), not
//! from the attacher's word: the publisher duplicates handles into the process it names.
//!
//! [`Message`]: super::Message

use std::ffi::c_void;
use std::os::windows::io::{AsRawHandle, BorrowedHandle, FromRawHandle, OwnedHandle, RawHandle};

use super::error::IpcError;

const PROCESS_DUP_HANDLE: u32 = 0x0040;
const DUPLICATE_SAME_ACCESS: u32 = 0x0000_0002;

#[link(name = "kernel32")]
extern "system" {
    fn OpenProcess(desired_access: u32, inherit_handle: i32, process_id: u32) -> *mut c_void;
    fn GetCurrentProcess() -> *mut c_void;
    fn DuplicateHandle(
        source_process: *mut c_void,
        source_handle: *mut c_void,
        target_process: *mut c_void,
        target_handle: *mut *mut c_void,
        desired_access: u32,
        inherit_handle: i32,
        options: u32,
    ) -> i32;
    fn GetLastError() -> u32;
}

fn last_error(op: &'static str) -> IpcError {
    // SAFETY: reads the calling thread's last-error value; no preconditions.
    let errno = unsafe { GetLastError() } as i32;
    IpcError::Io { op, errno }
}

/// Duplicates `handle` into process `pid` (same access, not inheritable) and returns the
/// value the handle has there, for the message that tells that process. The duplicate belongs
/// to process `pid` from here on (it closes it, or it closes when that process ends); ours
/// stays ours.
pub fn duplicate_into_process(handle: BorrowedHandle<'_>, pid: u32) -> Result<u64, IpcError> {
    // SAFETY: plain call; the result is checked and owned once below.
    let process = unsafe { OpenProcess(PROCESS_DUP_HANDLE, 0, pid) };
    if process.is_null() {
        return Err(last_error("OpenProcess"));
    }
    // SAFETY: a process handle just opened, owned here (closed when this drops).
    let process = unsafe { OwnedHandle::from_raw_handle(process as RawHandle) };
    let mut target: *mut c_void = std::ptr::null_mut();
    // SAFETY: `handle` is a live handle of this process (borrowed for the call), `process` a
    // live process handle with PROCESS_DUP_HANDLE, `target` a writable out-parameter.
    let ok = unsafe {
        DuplicateHandle(
            GetCurrentProcess(),
            handle.as_raw_handle() as *mut c_void,
            process.as_raw_handle() as *mut c_void,
            &mut target,
            0,
            0,
            DUPLICATE_SAME_ACCESS,
        )
    };
    if ok == 0 {
        return Err(last_error("DuplicateHandle"));
    }
    Ok(target as usize as u64)
}

/// Adopts a handle another process duplicated into this one ([`duplicate_into_process`]).
///
/// # Safety
/// `value` must be a handle that process duplicated into this one for us, not yet adopted:
/// it is closed exactly once, when the returned handle drops.
pub unsafe fn adopt_handle(value: u64) -> OwnedHandle {
    // SAFETY: the caller's contract: a live handle of this process that nothing else owns.
    unsafe { OwnedHandle::from_raw_handle(value as usize as RawHandle) }
}
