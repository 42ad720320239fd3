//! Vulkan semaphores imported into CUDA (`cuImportExternalSemaphore`), signalled and waited on
//! CUDA streams (`cuSignalExternalSemaphoresAsync` / `cuWaitExternalSemaphoresAsync`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream};

use crate::error::{CudaResultExt, Error, Result};
use crate::handle::OwnedExternalHandle;
use crate::vulkan::{Semaphore, SemaphoreKind};

/// How long [`ExternalSemaphore`]'s drop waits for CUDA work that still uses it before it
/// gives up and leaks the import (and the Vulkan semaphore) rather than destroy them in use.
pub const DEFAULT_DROP_TIMEOUT: Duration = Duration::from_secs(10);

/// The CUDA handle type asked for at import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaSemaphoreType {
    /// `CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD` / `_OPAQUE_WIN32`: a binary semaphore.
    Binary,
    /// `CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD` / `_WIN32`.
    Timeline,
}

/// A Vulkan semaphore imported into CUDA. It keeps the Vulkan semaphore alive, and its drop
/// waits for the last CUDA operation that used it, so a pending CUDA wait never sees it
/// destroyed (see [`Self::set_drop_timeout`]).
pub struct ExternalSemaphore {
    ctx: Arc<CudaContext>,
    handle: sys::CUexternalSemaphore,
    semaphore: Arc<Semaphore>,
    // One event per stream that used the semaphore, re-recorded after each operation there.
    last_use: Mutex<Vec<(sys::CUstream, CudaEvent)>>,
    drop_timeout: Duration,
}

// SAFETY: the CUDA handle is usable from any thread once the context is bound (every method
// binds it); mutable state is behind a Mutex.
unsafe impl Send for ExternalSemaphore {}
// SAFETY: as for Send.
unsafe impl Sync for ExternalSemaphore {}

impl ExternalSemaphore {
    /// Imports `semaphore` with the CUDA handle type matching its kind.
    pub fn import(ctx: &Arc<CudaContext>, semaphore: &Arc<Semaphore>) -> Result<Self> {
        let ty = match semaphore.kind() {
            SemaphoreKind::Binary => CudaSemaphoreType::Binary,
            SemaphoreKind::Timeline { .. } => CudaSemaphoreType::Timeline,
        };
        Self::import_as(ctx, semaphore, ty)
    }

    /// Imports `semaphore` as `ty`, which must match its kind: importing a binary semaphore
    /// as a timeline (or the reverse) is refused before the driver sees it.
    pub fn import_as(
        ctx: &Arc<CudaContext>,
        semaphore: &Arc<Semaphore>,
        ty: CudaSemaphoreType,
    ) -> Result<Self> {
        let matches = matches!(
            (semaphore.kind(), ty),
            (SemaphoreKind::Binary, CudaSemaphoreType::Binary)
                | (SemaphoreKind::Timeline { .. }, CudaSemaphoreType::Timeline)
        );
        if !matches {
            return Err(Error::InvalidArgument(format!(
                "a {:?} Vulkan semaphore cannot be imported into CUDA as {ty:?}",
                semaphore.kind()
            )));
        }
        let handle = semaphore.export()?;
        ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        // SAFETY: the handle was just exported from `semaphore`, whose type matches `ty`.
        let ext = unsafe { import_raw(handle, ty) }?;
        Ok(Self {
            ctx: ctx.clone(),
            handle: ext,
            semaphore: semaphore.clone(),
            last_use: Mutex::new(Vec::new()),
            drop_timeout: DEFAULT_DROP_TIMEOUT,
        })
    }

    /// The Vulkan semaphore it imports.
    pub fn semaphore(&self) -> &Arc<Semaphore> {
        &self.semaphore
    }

    /// Sets how long drop waits for pending CUDA work on this semaphore before leaking it.
    pub fn set_drop_timeout(&mut self, timeout: Duration) {
        self.drop_timeout = timeout;
    }

    /// Enqueues a signal on `stream`: for a timeline, of `value` (which must increase over
    /// every signal scheduled by any API: checked before the driver); binary ignores `value`.
    pub fn signal(&self, stream: &CudaStream, value: u64) -> Result<()> {
        self.check_stream(stream)?;
        self.enqueue(stream.cu_stream(), value, true)
    }

    /// Enqueues a wait on `stream` until the semaphore is signalled (timeline: reaches `value`).
    pub fn wait(&self, stream: &CudaStream, value: u64) -> Result<()> {
        self.check_stream(stream)?;
        self.enqueue(stream.cu_stream(), value, false)
    }

    /// As [`Self::signal`] / [`Self::wait`] on a raw `CUstream` handed in by other code (e.g.
    /// an engine through the C ABI): the stream must belong to this semaphore's context
    /// (checked with `cuStreamGetCtx`; null is the context's legacy default stream).
    ///
    /// # Safety
    /// `stream` must be null or a live `CUstream`.
    pub unsafe fn enqueue_raw(
        &self,
        stream: sys::CUstream,
        value: u64,
        signal: bool,
    ) -> Result<()> {
        self.ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        if !stream.is_null() {
            let mut owner: sys::CUcontext = std::ptr::null_mut();
            // SAFETY: reads the context of a stream the caller says is live.
            unsafe { sys::cuStreamGetCtx(stream, &mut owner) }
                .result()
                .cuda("cuStreamGetCtx")?;
            if owner != self.ctx.cu_ctx() {
                return Err(Error::WrongDevice(
                    "the stream belongs to another CUDA context",
                ));
            }
        }
        self.enqueue(stream, value, signal)
    }

    fn enqueue(&self, stream: sys::CUstream, value: u64, signal: bool) -> Result<()> {
        self.ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        if signal {
            self.semaphore.reserve_signal(value)?;
            // SAFETY: all-zero is a valid value of this plain C struct (unions of integers/pointers).
            let mut params: sys::CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS =
                unsafe { std::mem::zeroed() };
            params.params.fence.value = value;
            // SAFETY: one live semaphore, one params struct, a stream of this context.
            unsafe { sys::cuSignalExternalSemaphoresAsync(&self.handle, &params, 1, stream) }
                .result()
                .cuda("cuSignalExternalSemaphoresAsync")?;
        } else {
            // SAFETY: all-zero is a valid value of this plain C struct (unions of integers/pointers).
            let mut params: sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS =
                unsafe { std::mem::zeroed() };
            params.params.fence.value = value;
            // SAFETY: one live semaphore, one params struct, a stream of this context.
            unsafe { sys::cuWaitExternalSemaphoresAsync(&self.handle, &params, 1, stream) }
                .result()
                .cuda("cuWaitExternalSemaphoresAsync")?;
        }
        self.record_use(stream)
    }

    fn check_stream(&self, stream: &CudaStream) -> Result<()> {
        if Arc::ptr_eq(stream.context(), &self.ctx) {
            Ok(())
        } else {
            Err(Error::WrongDevice(
                "the stream belongs to another CUDA context",
            ))
        }
    }

    /// Records (re-records) this stream's event after the operation just enqueued, so drop
    /// can wait for it. Operations on one stream complete in order, so the stream's newest
    /// record covers every earlier use there.
    fn record_use(&self, stream: sys::CUstream) -> Result<()> {
        let mut uses = self.last_use.lock().unwrap_or_else(|p| p.into_inner());
        let event = match uses.iter().position(|(s, _)| *s == stream) {
            Some(i) => &uses[i].1,
            None => {
                uses.push((stream, self.ctx.new_event(None).cuda("cuEventCreate")?));
                &uses[uses.len() - 1].1
            }
        };
        // SAFETY: a live event and a stream of this context.
        unsafe { cudarc::driver::result::event::record(event.cu_event(), stream) }
            .cuda("cuEventRecord")
    }
}

impl Drop for ExternalSemaphore {
    fn drop(&mut self) {
        let ctx = self.ctx.clone();
        ctx.record_err(ctx.bind_to_thread());
        let uses = std::mem::take(self.last_use.get_mut().unwrap_or_else(|p| p.into_inner()));
        let deadline = Instant::now() + self.drop_timeout;
        let all_done = uses.iter().all(|(_, event)| {
            while !event.is_complete() {
                if Instant::now() >= deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            true
        });
        if !all_done {
            // A CUDA wait is still pending (its value was never signalled). Destroying the
            // semaphore now would be undefined: leak the import, its events and the Vulkan
            // semaphore instead, and say so.
            eprintln!(
                "cuvk: ExternalSemaphore dropped while CUDA work still waits on it after {:?}; \
                 leaking the import and the Vulkan semaphore to stay safe",
                self.drop_timeout
            );
            std::mem::forget(self.semaphore.clone());
            std::mem::forget(uses);
            return;
        }
        // SAFETY: imported once, destroyed once, after the last CUDA operation using it.
        ctx.record_err(unsafe { sys::cuDestroyExternalSemaphore(self.handle) }.result());
    }
}

/// The raw `cuImportExternalSemaphore` call for this platform's handle.
///
/// # Safety
/// `handle` must be an opaque handle exported from a semaphore of type `ty`.
#[cfg(unix)]
unsafe fn import_raw(
    handle: OwnedExternalHandle,
    ty: CudaSemaphoreType,
) -> Result<sys::CUexternalSemaphore> {
    use std::os::fd::{AsRawFd, IntoRawFd};
    let handle = crate::handle::check_open(handle)?;
    let type_ = match ty {
        CudaSemaphoreType::Binary => sys::CUexternalSemaphoreHandleType::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD,
        CudaSemaphoreType::Timeline => {
            sys::CUexternalSemaphoreHandleType::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD
        }
    };
    let desc = sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC {
        type_,
        handle: sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC_st__bindgen_ty_1 {
            fd: handle.as_raw_fd(),
        },
        flags: 0,
        reserved: [0; 16],
    };
    let mut ext = std::mem::MaybeUninit::uninit();
    // SAFETY: desc is fully initialised; the caller vouches for the handle and its type.
    unsafe { sys::cuImportExternalSemaphore(ext.as_mut_ptr(), &desc) }
        .result()
        .cuda("cuImportExternalSemaphore")?; // on error `handle` closes the fd, once
                                             // Success: CUDA owns the descriptor now.
    let _ = handle.into_raw_fd();
    // SAFETY: initialised by the successful call.
    Ok(unsafe { ext.assume_init() })
}

/// The raw `cuImportExternalSemaphore` call for this platform's handle.
///
/// # Safety
/// `handle` must be an opaque handle exported from a semaphore of type `ty`.
#[cfg(windows)]
unsafe fn import_raw(
    handle: OwnedExternalHandle,
    ty: CudaSemaphoreType,
) -> Result<sys::CUexternalSemaphore> {
    use std::os::windows::io::AsRawHandle;
    let type_ = match ty {
        CudaSemaphoreType::Binary => sys::CUexternalSemaphoreHandleType::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_WIN32,
        CudaSemaphoreType::Timeline => {
            sys::CUexternalSemaphoreHandleType::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_WIN32
        }
    };
    let desc = sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC {
        type_,
        handle: sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC_st__bindgen_ty_1 {
            win32: sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC_st__bindgen_ty_1__bindgen_ty_1 {
                handle: handle.as_raw_handle(),
                name: std::ptr::null(),
            },
        },
        flags: 0,
        reserved: [0; 16],
    };
    let mut ext = std::mem::MaybeUninit::uninit();
    // SAFETY: desc is fully initialised; the caller vouches for the handle and its type.
    unsafe { sys::cuImportExternalSemaphore(ext.as_mut_ptr(), &desc) }
        .result()
        .cuda("cuImportExternalSemaphore")?;
    // CUDA does not own NT handles: `handle` closes it here.
    drop(handle);
    // SAFETY: initialised by the successful call.
    Ok(unsafe { ext.assume_init() })
}
