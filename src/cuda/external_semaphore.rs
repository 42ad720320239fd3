//! Vulkan semaphores imported into CUDA (`cuImportExternalSemaphore`), signalled and waited on
//! CUDA streams (`cuSignalExternalSemaphoresAsync` / `cuWaitExternalSemaphoresAsync`).

use std::any::Any;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream};

use crate::cuda::events_complete;
use crate::cuda::external_memory::destroy_result;
use crate::error::SyncError;
use crate::error::{CudaResultExt, Error, Importer, Result};
use crate::platform::{self, OwnedExternalHandle};
use crate::rules::timeline::SignalLedger;
use crate::teardown::{DropBudget, DEFAULT_DROP_TIMEOUT};

/// What the import's drop runs if it gives up (see `crate::teardown`'s abandon step).
type AbandonStep = Box<dyn Fn() + Send + Sync>;

/// The CUDA handle type asked for at import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaSemaphoreType {
    /// `CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD` / `_OPAQUE_WIN32`: a binary semaphore.
    Binary,
    /// `CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD` / `_WIN32`.
    Timeline,
}

/// A semaphore exported by another API and imported into CUDA. It keeps the exporter's
/// semaphore alive, shares its signal ledger (so values increase across APIs), and its drop
/// waits for the last CUDA operation that used it, so a pending CUDA wait never sees it
/// destroyed — but never longer than its drop timeout: then it logs an error and leaks the
/// import and the exporter's semaphore until that operation finishes, if ever (see
/// [`Self::set_drop_timeout`]). Imported through the bridge, it waits within its Vulkan
/// context's one drop budget
/// ([`VulkanContext::set_drop_timeout`](crate::vulkan::VulkanContext::set_drop_timeout)).
pub struct ExternalSemaphore {
    ctx: Arc<CudaContext>,
    handle: sys::CUexternalSemaphore,
    ty: CudaSemaphoreType,
    ledger: Arc<SignalLedger>,
    // One event per stream that used the semaphore, re-recorded after each operation there.
    last_use: Mutex<Vec<(sys::CUstream, CudaEvent)>>,
    budget: Arc<DropBudget>,
    // Set where the bridge pairs it with its Vulkan semaphore: releases the queue's waits.
    abandon: Option<AbandonStep>,
    // Released after the import is destroyed, in Drop (see SemaphoreImport).
    keep_alive: Option<Arc<dyn Any + Send + Sync>>,
}

// SAFETY: the CUDA handle is usable from any thread once the context is bound (every method
// binds it); mutable state is behind a Mutex.
unsafe impl Send for ExternalSemaphore {}
// SAFETY: as for Send.
unsafe impl Sync for ExternalSemaphore {}

impl ExternalSemaphore {
    /// Imports `handle` with `cuImportExternalSemaphore` as `ty`. On Unix the descriptor
    /// passes to CUDA only on success (closed once on failure). `ledger` is the exporter's
    /// record of scheduled values; `keep_alive` is held until the import is destroyed.
    ///
    /// # Safety
    /// `handle` must be an opaque handle exported from a live semaphore of type `ty` on the
    /// GPU of `ctx`; `ledger` must be the ledger every other signaller of that semaphore uses;
    /// `keep_alive` must keep the semaphore alive (or the caller must, for as long as the
    /// returned value lives).
    pub unsafe fn import(
        ctx: &Arc<CudaContext>,
        handle: OwnedExternalHandle,
        ty: CudaSemaphoreType,
        ledger: Arc<SignalLedger>,
        keep_alive: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Result<Self> {
        if ledger.is_timeline() != (ty == CudaSemaphoreType::Timeline) {
            return Err(SyncError::ImportKind {
                timeline: ledger.is_timeline(),
            }
            .into());
        }
        ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        // SAFETY: the caller vouches for the handle and its type.
        let ext = unsafe { import_raw(handle, ty) }?;
        Ok(Self {
            ctx: ctx.clone(),
            handle: ext,
            ty,
            ledger,
            last_use: Mutex::new(Vec::new()),
            budget: Arc::new(DropBudget::new(DEFAULT_DROP_TIMEOUT)),
            abandon: None,
            keep_alive,
        })
    }

    /// Binary or timeline.
    pub fn semaphore_type(&self) -> CudaSemaphoreType {
        self.ty
    }

    /// The record of scheduled values it shares with the exporting API.
    pub fn ledger(&self) -> &Arc<SignalLedger> {
        &self.ledger
    }

    /// Sets how long drop waits for pending CUDA work on this semaphore before it leaks it
    /// (default [`crate::DEFAULT_DROP_TIMEOUT`], or its context's drop timeout when imported
    /// through the bridge), for this semaphore alone: it no longer shares a context's budget.
    pub fn set_drop_timeout(&mut self, timeout: Duration) {
        self.budget = Arc::new(DropBudget::new(timeout));
    }

    /// Makes drop wait within `budget` (a Vulkan context's), shared with every other drop of
    /// that context, and run `abandon` if it gives up.
    // To be called where the bridge pairs a Vulkan semaphore with its import
    // (`interop::semaphore::import_semaphore`).
    pub(crate) fn share_drop_budget(&mut self, budget: Arc<DropBudget>, abandon: AbandonStep) {
        self.budget = budget;
        self.abandon = Some(abandon);
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
                return Err(Error::WrongDevice {
                    object: crate::DeviceObject::Stream,
                    owner: crate::DeviceOwner::CudaContext,
                });
            }
        }
        self.enqueue(stream, value, signal)
    }

    /// Enqueues on `stream` a wait for every `(semaphore, value)` in one
    /// `cuWaitExternalSemaphoresAsync` (a publisher's write waits for each consumer's read of
    /// its slot: one driver call, not one per consumer). The stream must belong to the
    /// semaphores' context (checked, as [`Self::enqueue_raw`]); all of one context (checked).
    ///
    /// # Safety
    /// `stream` must be null or a live `CUstream`.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ipc publisher's
    pub(crate) unsafe fn wait_all_raw(
        waits: &[(&ExternalSemaphore, u64)],
        stream: sys::CUstream,
    ) -> Result<()> {
        let Some((first, _)) = waits.first() else {
            return Ok(());
        };
        if let [(only, value)] = waits {
            // SAFETY: forwarded from the caller.
            return unsafe { only.enqueue_raw(stream, *value, false) };
        }
        if waits.iter().any(|(s, _)| !Arc::ptr_eq(&s.ctx, &first.ctx)) {
            return Err(Error::WrongDevice {
                object: crate::DeviceObject::Semaphore,
                owner: crate::DeviceOwner::CudaContext,
            });
        }
        first.ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        if !stream.is_null() {
            let mut owner: sys::CUcontext = std::ptr::null_mut();
            // SAFETY: reads the context of a stream the caller says is live.
            unsafe { sys::cuStreamGetCtx(stream, &mut owner) }
                .result()
                .cuda("cuStreamGetCtx")?;
            if owner != first.ctx.cu_ctx() {
                return Err(Error::WrongDevice {
                    object: crate::DeviceObject::Stream,
                    owner: crate::DeviceOwner::CudaContext,
                });
            }
        }
        // Every stream's event exists before anything is enqueued (as in `enqueue`).
        for (s, _) in waits {
            s.ensure_event(stream)?;
        }
        let handles: Vec<sys::CUexternalSemaphore> = waits.iter().map(|(s, _)| s.handle).collect();
        let params: Vec<sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS> = waits
            .iter()
            .map(|&(_, value)| {
                // SAFETY: all-zero is a valid value of this plain C struct (unions of
                // integers/pointers).
                let mut p: sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS = unsafe { std::mem::zeroed() };
                p.params.fence.value = value;
                p
            })
            .collect();
        // SAFETY: `handles.len()` live semaphores of this context and as many params; a stream
        // of this context (checked).
        unsafe {
            sys::cuWaitExternalSemaphoresAsync(
                handles.as_ptr(),
                params.as_ptr(),
                handles.len() as u32,
                stream,
            )
        }
        .result()
        .cuda("cuWaitExternalSemaphoresAsync")?;
        for &(s, value) in waits {
            if s.ty == CudaSemaphoreType::Timeline {
                s.ledger.note_wait(value);
            }
            s.record_use(stream)?;
        }
        Ok(())
    }

    fn enqueue(&self, stream: sys::CUstream, value: u64, signal: bool) -> Result<()> {
        self.ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        // The stream's event exists before the operation is enqueued, so nothing enqueued can
        // be left untracked by a failed event creation.
        self.ensure_event(stream)?;
        if signal {
            // SAFETY: all-zero is a valid value of this plain C struct (unions of integers/pointers).
            let mut params: sys::CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS =
                unsafe { std::mem::zeroed() };
            params.params.fence.value = value;
            self.ledger.signal(value, || {
                // SAFETY: one live semaphore, one params struct, a stream of this context.
                unsafe { sys::cuSignalExternalSemaphoresAsync(&self.handle, &params, 1, stream) }
                    .result()
                    .cuda("cuSignalExternalSemaphoresAsync")
            })?;
        } else {
            // SAFETY: all-zero is a valid value of this plain C struct (unions of integers/pointers).
            let mut params: sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS =
                unsafe { std::mem::zeroed() };
            params.params.fence.value = value;
            // SAFETY: one live semaphore, one params struct, a stream of this context.
            unsafe { sys::cuWaitExternalSemaphoresAsync(&self.handle, &params, 1, stream) }
                .result()
                .cuda("cuWaitExternalSemaphoresAsync")?;
            if self.ty == CudaSemaphoreType::Timeline {
                self.ledger.note_wait(value);
            }
        }
        self.record_use(stream)
    }

    pub(crate) fn check_stream(&self, stream: &CudaStream) -> Result<()> {
        if Arc::ptr_eq(stream.context(), &self.ctx) {
            Ok(())
        } else {
            Err(Error::WrongDevice {
                object: crate::DeviceObject::Stream,
                owner: crate::DeviceOwner::CudaContext,
            })
        }
    }

    /// Creates `stream`'s event if it has none yet.
    fn ensure_event(&self, stream: sys::CUstream) -> Result<()> {
        let mut uses = self.last_use.lock().unwrap_or_else(|p| p.into_inner());
        if !uses.iter().any(|(s, _)| *s == stream) {
            uses.push((stream, self.ctx.new_event(None).cuda("cuEventCreate")?));
        }
        Ok(())
    }

    /// Records (re-records) this stream's event after the operation just enqueued, so drop
    /// can wait for it. Operations on one stream complete in order, so the stream's newest
    /// record covers every earlier use there. The operation is already enqueued (a signal is
    /// already in the ledger): if the record fails, the stream is waited for instead, so drop
    /// never destroys the semaphore under it, and the operation (which did happen) reports
    /// success unless that wait fails too.
    fn record_use(&self, stream: sys::CUstream) -> Result<()> {
        let uses = self.last_use.lock().unwrap_or_else(|p| p.into_inner());
        let Some((_, event)) = uses.iter().find(|(s, _)| *s == stream) else {
            return Ok(()); // not reached: ensure_event ran first
        };
        // SAFETY: a live event and a stream of this context.
        let recorded = unsafe { cudarc::driver::result::event::record(event.cu_event(), stream) };
        if recorded.is_ok() {
            return Ok(());
        }
        // SAFETY: a stream of this context (checked by the callers).
        unsafe { sys::cuStreamSynchronize(stream) }
            .result()
            .cuda("cuStreamSynchronize (after cuEventRecord failed)")
    }
}

/// An import and what keeps the exporter's semaphore alive: destroyed (the import first) when
/// dropped, which a drop may park until CUDA work that still uses it has finished.
struct SemaphoreImport {
    ctx: Arc<CudaContext>,
    handle: sys::CUexternalSemaphore,
    _keep_alive: Option<Arc<dyn Any + Send + Sync>>,
}

// SAFETY: the CUDA handle is usable from any thread once its context is bound (Drop binds it).
unsafe impl Send for SemaphoreImport {}

impl Drop for SemaphoreImport {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: imported once, destroyed once, here, after the last CUDA operation using it
        // (the drop that made this waited for it, or parked this until it finished).
        let destroyed = unsafe { sys::cuDestroyExternalSemaphore(self.handle) }.result();
        destroy_result(&self.ctx, "cuDestroyExternalSemaphore", destroyed);
    }
}

impl Drop for ExternalSemaphore {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        let events: Vec<CudaEvent> =
            std::mem::take(self.last_use.get_mut().unwrap_or_else(|p| p.into_inner()))
                .into_iter()
                .map(|(_, event)| event)
                .collect();
        let import = SemaphoreImport {
            ctx: self.ctx.clone(),
            handle: self.handle,
            _keep_alive: self.keep_alive.take(),
        };
        // A CUDA wait still pending (its value never signalled) must not see the semaphore
        // destroyed: wait within the budget, else park the import until it finishes.
        let finished = self.budget.poll(|| events_complete(&events));
        let abandon = self.abandon.take();
        self.budget.release_or_abandon(
            "ExternalSemaphore",
            finished,
            import,
            || Box::new(move || events_complete(&events)),
            || abandon.map(|step| step as crate::teardown::Abandon),
        );
    }
}

/// The raw `cuImportExternalSemaphore` call.
///
/// # Safety
/// `handle` must be an opaque handle exported from a semaphore of type `ty`.
unsafe fn import_raw(
    handle: OwnedExternalHandle,
    ty: CudaSemaphoreType,
) -> Result<sys::CUexternalSemaphore> {
    platform::import_with(handle, Importer::Cuda, |raw| {
        let (type_, handle) =
            platform::cuda_semaphore_handle(raw, ty == CudaSemaphoreType::Timeline);
        let desc = sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC {
            type_,
            handle,
            flags: 0,
            reserved: [0; 16],
        };
        let mut ext = std::mem::MaybeUninit::uninit();
        // SAFETY: desc is fully initialised; the caller vouches for the handle and its type.
        unsafe { sys::cuImportExternalSemaphore(ext.as_mut_ptr(), &desc) }
            .result()
            .cuda("cuImportExternalSemaphore")?;
        // SAFETY: initialised by the successful call.
        Ok(unsafe { ext.assume_init() })
    })
}
