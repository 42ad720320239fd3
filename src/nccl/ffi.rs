//! The few NCCL functions cuvk calls, loaded at run time from the system's `libnccl.so.2`
//! (or `CUVK_NCCL_LIBRARY`): a machine without NCCL builds and runs everything else.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

/// `ncclComm_t`.
pub(crate) type Comm = *mut c_void;
/// `ncclResult_t`.
pub(crate) type NcclResult = c_int;
/// `ncclSuccess`.
pub(crate) const SUCCESS: NcclResult = 0;
/// `ncclInProgress` (a non-blocking call still running).
pub(crate) const IN_PROGRESS: NcclResult = 7;

/// `ncclUniqueId`: 128 opaque bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct UniqueId {
    pub(crate) internal: [c_char; 128],
}

type GetVersion = unsafe extern "C" fn(*mut c_int) -> NcclResult;
type GetUniqueId = unsafe extern "C" fn(*mut UniqueId) -> NcclResult;
type CommInitRank = unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> NcclResult;
type CommAbort = unsafe extern "C" fn(Comm) -> NcclResult;
type CommGetAsyncError = unsafe extern "C" fn(Comm, *mut NcclResult) -> NcclResult;
type GetErrorString = unsafe extern "C" fn(NcclResult) -> *const c_char;
type GetLastError = unsafe extern "C" fn(Comm) -> *const c_char;
type Reduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    c_int,
    Comm,
    *mut c_void,
) -> NcclResult;
type AllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    Comm,
    *mut c_void,
) -> NcclResult;
type AllGather =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, *mut c_void) -> NcclResult;
type Send =
    unsafe extern "C" fn(*const c_void, usize, c_int, c_int, Comm, *mut c_void) -> NcclResult;
type Recv = unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, Comm, *mut c_void) -> NcclResult;
type Group = unsafe extern "C" fn() -> NcclResult;

/// The loaded library and its functions.
pub(crate) struct Nccl {
    _lib: libloading::Library,
    pub(crate) get_version: GetVersion,
    pub(crate) get_unique_id: GetUniqueId,
    pub(crate) comm_init_rank: CommInitRank,
    pub(crate) comm_abort: CommAbort,
    pub(crate) comm_get_async_error: CommGetAsyncError,
    pub(crate) get_error_string: GetErrorString,
    pub(crate) get_last_error: GetLastError,
    pub(crate) reduce: Reduce,
    pub(crate) all_reduce: AllReduce,
    /// `ncclReduceScatter` (the signature of `ncclAllReduce`, the count per rank).
    pub(crate) reduce_scatter: AllReduce,
    pub(crate) all_gather: AllGather,
    pub(crate) send: Send,
    pub(crate) recv: Recv,
    pub(crate) group_start: Group,
    pub(crate) group_end: Group,
}

/// Names tried in order: the override, the runtime soname, the development link.
fn candidates() -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(path) = std::env::var("CUVK_NCCL_LIBRARY") {
        names.push(path);
    }
    names.extend(["libnccl.so.2".to_string(), "libnccl.so".to_string()]);
    names
}

/// NCCL, loaded once; `Err` says what was tried.
pub(crate) fn nccl() -> Result<&'static Nccl, String> {
    static NCCL: OnceLock<Result<Nccl, String>> = OnceLock::new();
    NCCL.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Nccl, String> {
    let names = candidates();
    let lib = names
        .iter()
        // SAFETY: loading NCCL runs its initialisers, which only set up its own state.
        .find_map(|n| unsafe { libloading::Library::new(n) }.ok())
        .ok_or_else(|| format!("NCCL not found (tried {})", names.join(", ")))?;
    /// # Safety
    /// `T` must be the function's C signature.
    unsafe fn get<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
        // SAFETY: forwarded: `T` is the symbol's type.
        unsafe { lib.get::<T>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|e| format!("NCCL has no {name}: {e}"))
    }
    // SAFETY: each type above is the C signature of the function of that name in nccl.h
    // (2.18 and later); the library outlives the pointers (it is kept beside them).
    unsafe {
        Ok(Nccl {
            get_version: get(&lib, "ncclGetVersion")?,
            get_unique_id: get(&lib, "ncclGetUniqueId")?,
            comm_init_rank: get(&lib, "ncclCommInitRank")?,
            comm_abort: get(&lib, "ncclCommAbort")?,
            comm_get_async_error: get(&lib, "ncclCommGetAsyncError")?,
            get_error_string: get(&lib, "ncclGetErrorString")?,
            get_last_error: get(&lib, "ncclGetLastError")?,
            reduce: get(&lib, "ncclReduce")?,
            all_reduce: get(&lib, "ncclAllReduce")?,
            reduce_scatter: get(&lib, "ncclReduceScatter")?,
            all_gather: get(&lib, "ncclAllGather")?,
            send: get(&lib, "ncclSend")?,
            recv: get(&lib, "ncclRecv")?,
            group_start: get(&lib, "ncclGroupStart")?,
            group_end: get(&lib, "ncclGroupEnd")?,
            _lib: lib,
        })
    }
}

impl Nccl {
    /// `ncclGetErrorString` of `code`, and `ncclGetLastError` of `comm` where there is one.
    pub(crate) fn describe(&self, code: NcclResult, comm: Comm) -> String {
        let text = |p: *const c_char| {
            if p.is_null() {
                String::new()
            } else {
                // SAFETY: NCCL returns NUL-terminated static or per-communicator strings.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        };
        // SAFETY: any result code is accepted.
        let mut out = text(unsafe { (self.get_error_string)(code) });
        if !comm.is_null() {
            // SAFETY: a live communicator.
            let last = text(unsafe { (self.get_last_error)(comm) });
            if !last.is_empty() {
                out = format!("{out}: {last}");
            }
        }
        out
    }
}
