//! Semaphores: timeline semaphores that Vulkan, CUDA streams and the host signal and wait on.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

use cuvk::ash::vk::Handle;
use cuvk::cuda::ExternalSemaphore;
use cuvk::cudarc::driver::sys;
use cuvk::vulkan::{Semaphore, SemaphoreDesc, SemaphoreKind};

use crate::bridge::{bridge_of, CuvkBridge};
use crate::error::{guard, out, CResult, CuvkResult, Failure};
use crate::handle::{insert, remove, with, HandleObject, Kind};

/// A timeline semaphore shared with CUDA.
pub type CuvkSemaphore = u64;

/// A semaphore: the Vulkan timeline semaphore and, unless the bridge is Vulkan-only, its
/// CUDA import.
pub(crate) struct CSemaphore {
    // The CUDA import is dropped first (field order), then the Vulkan semaphore.
    cuda: Option<ExternalSemaphore>,
    vk: Arc<Semaphore>,
}

/// Creates a timeline semaphore starting at `initial_value`. With CUDA it is exported and
/// imported into CUDA (the device needs external semaphore support); on a Vulkan-only bridge
/// it is a plain timeline semaphore (host signal/wait and Vulkan submissions only).
///
/// # Safety
/// `out_semaphore` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_semaphore_create(
    bridge: CuvkBridge,
    initial_value: u64,
    out_semaphore: *mut CuvkSemaphore,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let out_semaphore = unsafe { out(out_semaphore, "out_semaphore") }?;
        let b = bridge_of(bridge)?;
        let kind = SemaphoreKind::Timeline {
            initial: initial_value,
        };
        let (vk, cuda) = match &b.cuda {
            Some(bridge) => {
                let shared = bridge.create_semaphore(kind)?;
                (shared.vulkan, Some(shared.cuda))
            }
            None => {
                let desc = SemaphoreDesc {
                    kind,
                    exportable: false,
                };
                (Semaphore::new(&b.vk, desc)?, None)
            }
        };
        *out_semaphore = insert(CSemaphore { cuda, vk });
        Ok(())
    })
}

fn with_semaphore<T>(
    handle: CuvkSemaphore,
    f: impl FnOnce(&CSemaphore) -> CResult<T>,
) -> CResult<T> {
    with(handle, |s: &mut CSemaphore| f(s))
}

impl HandleObject for CSemaphore {
    const KIND: Kind = Kind::Semaphore;
}

/// The `VkSemaphore` handle, for the engine's own submissions.
///
/// # Safety
/// `out_vk_semaphore` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_semaphore_vk(
    semaphore: CuvkSemaphore,
    out_vk_semaphore: *mut u64,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let o = unsafe { out(out_vk_semaphore, "out_vk_semaphore") }?;
        with_semaphore(semaphore, |s| {
            *o = s.vk.handle().as_raw();
            Ok(())
        })
    })
}

/// Signals the semaphore to `value` from the host (values must increase).
#[no_mangle]
pub extern "C" fn cuvk_semaphore_signal_host(semaphore: CuvkSemaphore, value: u64) -> CuvkResult {
    guard(|| with_semaphore(semaphore, |s| Ok(s.vk.signal_host(value)?)))
}

/// Waits on the host until the semaphore reaches `value`, at most `timeout_ns`.
#[no_mangle]
pub extern "C" fn cuvk_semaphore_wait_host(
    semaphore: CuvkSemaphore,
    value: u64,
    timeout_ns: u64,
) -> CuvkResult {
    // The wait happens outside the table lock so other threads can signal meanwhile.
    guard(|| {
        let vk = with_semaphore(semaphore, |s| Ok(s.vk.clone()))?;
        Ok(vk.wait_host(value, Duration::from_nanos(timeout_ns))?)
    })
}

fn cuda_stream_op(
    semaphore: CuvkSemaphore,
    stream: *mut c_void,
    value: u64,
    signal: bool,
) -> CResult<()> {
    with_semaphore(semaphore, |s| {
        let c = s.cuda.as_ref().ok_or(Failure::new(
            CuvkResult::CuvkErrorUnsupported,
            "the bridge is Vulkan-only: no CUDA side",
        ))?;
        // SAFETY: the C caller passes a live CUstream or null (documented in the header).
        unsafe { c.enqueue_raw(stream as sys::CUstream, value, signal) }.map_err(Failure::from)
    })
}

/// Enqueues on the caller's CUDA stream (`CUstream`, null: the legacy default stream) a signal
/// of the semaphore to `value`.
///
/// # Safety
/// `cu_stream` must be null or a live `CUstream`.
#[no_mangle]
pub unsafe extern "C" fn cuvk_semaphore_cuda_signal(
    semaphore: CuvkSemaphore,
    cu_stream: *mut c_void,
    value: u64,
) -> CuvkResult {
    guard(|| cuda_stream_op(semaphore, cu_stream, value, true))
}

/// Enqueues on the caller's CUDA stream a wait until the semaphore reaches `value`.
///
/// # Safety
/// `cu_stream` must be null or a live `CUstream`.
#[no_mangle]
pub unsafe extern "C" fn cuvk_semaphore_cuda_wait(
    semaphore: CuvkSemaphore,
    cu_stream: *mut c_void,
    value: u64,
) -> CuvkResult {
    guard(|| cuda_stream_op(semaphore, cu_stream, value, false))
}

/// Destroys a semaphore (waits for CUDA work that still uses it; see `ExternalSemaphore`).
#[no_mangle]
pub extern "C" fn cuvk_semaphore_destroy(semaphore: CuvkSemaphore) -> CuvkResult {
    guard(|| remove::<CSemaphore>(semaphore))
}
