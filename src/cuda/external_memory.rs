//! External memory imported into CUDA and the buffers mapped onto it.
//!
//! Layers as cudarc has them: the raw `cuImportExternalMemory` / `cuExternalMemoryGetMappedBuffer`
//! calls, wrapped by [`ImportedMemory::import`] and [`ImportedMemory::map`] that validate first
//! ([`crate::rules::layout::validate_mapping`]), and owner types that free in the right order:
//! a [`MappedRange`] holds its [`ImportedMemory`], which holds whatever owns the memory on
//! the exporting side (the Vulkan allocation).

use std::any::Any;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys, CudaContext, DriverError};

use crate::error::{CudaResultExt, Importer, Result};
use crate::platform::{self, OwnedExternalHandle};
use crate::rules::layout::{self, ImportLayout, MappingRequest};

/// Options for [`ImportedMemory::map`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapOptions {
    /// Alignment the Vulkan buffer viewing the range needs (1 if none).
    pub vulkan_alignment: u64,
    /// Allow the range to overlap live mappings. Overlapping mappings alias: CUDA then
    /// requires volatile accesses for writes through one to be seen through the other.
    pub allow_overlap: bool,
}

impl Default for MapOptions {
    fn default() -> Self {
        Self {
            vulkan_alignment: 1,
            allow_overlap: false,
        }
    }
}

/// Memory exported by another API and imported with `cuImportExternalMemory`; destroyed with
/// `cuDestroyExternalMemory` when the last [`MappedRange`] and handle to it are gone.
pub struct ImportedMemory {
    ctx: Arc<CudaContext>,
    handle: sys::CUexternalMemory,
    layout: ImportLayout,
    live: Mutex<Vec<(u64, Range<u64>)>>,
    next_id: AtomicU64,
    // Dropped after `handle` is destroyed (fields drop after Drop::drop runs).
    _exporter: Option<Arc<dyn Any + Send + Sync>>,
}

// SAFETY: CUexternalMemory is an opaque driver handle usable from any thread once the context
// is bound (every method binds it); the mutable state is behind a Mutex / atomics.
unsafe impl Send for ImportedMemory {}
// SAFETY: as for Send.
unsafe impl Sync for ImportedMemory {}

impl std::fmt::Debug for ImportedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedMemory")
            .field("size", &self.layout.allocation_size)
            .field("dedicated", &self.layout.dedicated)
            .finish_non_exhaustive()
    }
}

impl ImportedMemory {
    /// Imports `handle` with `cuImportExternalMemory` as `layout` says: its allocation size,
    /// and `CUDA_EXTERNAL_MEMORY_DEDICATED` where the memory is a dedicated allocation. On
    /// Unix the descriptor passes to CUDA only on success; on failure it is closed here, once.
    /// `exporter` is kept alive until the import is destroyed.
    ///
    /// # Safety
    /// `handle` must be an opaque handle to memory of exactly `layout.allocation_size` bytes
    /// (the allocation size, not a buffer size), `layout.dedicated` must say whether that
    /// memory is a dedicated allocation, and `exporter` must keep that memory alive (or the
    /// caller must, for as long as the returned value and its mappings live).
    pub unsafe fn import(
        ctx: &Arc<CudaContext>,
        handle: OwnedExternalHandle,
        layout: ImportLayout,
        exporter: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Result<Arc<Self>> {
        let ImportLayout {
            allocation_size: size,
            dedicated,
        } = layout;
        if size == 0 {
            return Err(layout::LayoutError::ZeroSize { offset: 0 }.into());
        }
        ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        // SAFETY: forwarded from the caller's promise about `handle`, `size` and `dedicated`.
        let ext = unsafe { import_raw(handle, size, dedicated) }?;
        Ok(Arc::new(Self {
            ctx: ctx.clone(),
            handle: ext,
            layout,
            live: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            _exporter: exporter,
        }))
    }

    /// Maps `offset..offset + size` as a CUDA buffer after checking every rule of
    /// the mapping rules (range, dedicated offset, Vulkan and CUDA alignment, overlap: [`crate::LayoutError`]) against this import and its live mappings.
    pub fn map(
        self: &Arc<Self>,
        offset: u64,
        size: u64,
        options: MapOptions,
    ) -> Result<MappedRange> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let range = layout::validate_mapping(
            self.layout,
            MappingRequest {
                offset,
                size,
                vulkan_alignment: options.vulkan_alignment,
                allow_overlap: options.allow_overlap,
            },
            live.iter().map(|(_, r)| r),
        )?;
        // SAFETY: validated just above, under the lock that guards the live mappings.
        unsafe { self.map_unchecked(&mut live, range) }
    }

    /// Maps a [`Placement`](crate::rules::layout::Placement) (range, dedicated offset and
    /// alignment proven against this import's layout), checking only the overlap rule (the one
    /// that depends on live mappings) under the lock that guards them.
    pub(crate) fn map_placed(
        self: &Arc<Self>,
        placement: &crate::rules::layout::Placement,
        allow_overlap: bool,
    ) -> Result<MappedRange> {
        let range = placement.range();
        if placement.import() != self.layout {
            // Placed in another allocation: validate from scratch.
            return self.map(
                range.start,
                range.end - range.start,
                MapOptions {
                    allow_overlap,
                    ..MapOptions::default()
                },
            );
        }
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        if !allow_overlap {
            layout::check_no_overlap("mapping", &range, live.iter().map(|(_, r)| r))?;
        }
        // SAFETY: the placement proved the range rules for this layout; overlap checked
        // above under the lock.
        unsafe { self.map_unchecked(&mut live, range) }
    }

    /// `cuExternalMemoryGetMappedBuffer` for a validated range, recorded as live.
    ///
    /// # Safety
    /// `range` must satisfy every rule of [`layout::validate_mapping`] for this import.
    unsafe fn map_unchecked(
        self: &Arc<Self>,
        live: &mut Vec<(u64, Range<u64>)>,
        range: Range<u64>,
    ) -> Result<MappedRange> {
        self.ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        let size = range.end - range.start;
        // SAFETY: the handle is a live import; the caller validated the range against its
        // size and the measured offset rules.
        let ptr =
            unsafe { result::external_memory::get_mapped_buffer(self.handle, range.start, size) }
                .cuda("cuExternalMemoryGetMappedBuffer")?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        live.push((id, range.clone()));
        Ok(MappedRange {
            memory: self.clone(),
            ptr,
            range,
            id,
        })
    }

    /// The size and dedicated flag it was imported with, as the layout rules take them.
    pub fn layout(&self) -> ImportLayout {
        self.layout
    }

    /// The raw handle (valid while `self` lives).
    pub(crate) fn raw(&self) -> sys::CUexternalMemory {
        self.handle
    }

    /// The size it was imported with.
    pub fn size(&self) -> u64 {
        self.layout.allocation_size
    }
    /// Whether it was imported with `CUDA_EXTERNAL_MEMORY_DEDICATED`.
    pub fn is_dedicated(&self) -> bool {
        self.layout.dedicated
    }
    /// The CUDA context it lives in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
    /// Number of live mappings.
    pub fn live_mappings(&self) -> usize {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for ImportedMemory {
    fn drop(&mut self) {
        // Every MappedRange and mipmapped array holds an Arc to us, so none is alive now.
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: the handle came from a successful import and is destroyed once, here.
        let destroyed = unsafe { result::external_memory::destroy_external_memory(self.handle) };
        destroy_result(&self.ctx, "cuDestroyExternalMemory", destroyed);
    }
}

/// What a drop does with the result of a CUDA destroy or free: a failure (the memory or object
/// then stays allocated in the driver) is logged with the call's name and recorded on the
/// context (cudarc's `record_err`), never dropped silently.
pub(crate) fn destroy_result(
    ctx: &CudaContext,
    call: &'static str,
    result: Result<(), DriverError>,
) {
    if let Err(e) = result {
        log::error!("{call} failed in a drop ({e}): what it frees stays allocated in the driver");
        ctx.record_err(Err::<(), _>(e));
    }
}

/// The raw `cuImportExternalMemory` call; the handle's ownership follows the platform rule.
///
/// # Safety
/// As [`ImportedMemory::import`]: `handle` refers to memory of exactly `size` bytes, dedicated
/// exactly when `dedicated`.
unsafe fn import_raw(
    handle: OwnedExternalHandle,
    size: u64,
    dedicated: bool,
) -> Result<sys::CUexternalMemory> {
    platform::import_with(handle, Importer::Cuda, |raw| {
        let (type_, handle) = platform::cuda_memory_handle(raw);
        let desc = sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC {
            type_,
            handle,
            size,
            flags: if dedicated {
                sys::CUDA_EXTERNAL_MEMORY_DEDICATED
            } else {
                0
            },
            reserved: [0; 16],
        };
        let mut ext = std::mem::MaybeUninit::uninit();
        // SAFETY: desc is fully initialised; the caller vouches for the handle and size.
        unsafe { sys::cuImportExternalMemory(ext.as_mut_ptr(), &desc) }
            .result()
            .cuda("cuImportExternalMemory")?;
        // SAFETY: initialised by the successful call.
        Ok(unsafe { ext.assume_init() })
    })
}

/// A buffer mapped onto imported memory (`cuExternalMemoryGetMappedBuffer`), freed with
/// `cuMemFree` on drop. It keeps its [`ImportedMemory`] alive.
pub struct MappedRange {
    memory: Arc<ImportedMemory>,
    ptr: sys::CUdeviceptr,
    range: Range<u64>,
    id: u64,
}

impl std::fmt::Debug for MappedRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedRange")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("range", &self.range)
            .finish()
    }
}

impl MappedRange {
    /// The CUDA device pointer to the start of the range.
    pub fn device_ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }
    /// A reference to the device pointer, to pass as a kernel argument.
    pub fn device_ptr_ref(&self) -> &sys::CUdeviceptr {
        &self.ptr
    }
    /// The byte range inside the imported memory.
    pub fn range(&self) -> Range<u64> {
        self.range.clone()
    }
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.range.end - self.range.start
    }
    /// The imported memory it maps.
    pub fn memory(&self) -> &Arc<ImportedMemory> {
        &self.memory
    }
}

impl Drop for MappedRange {
    fn drop(&mut self) {
        let ctx = &self.memory.ctx;
        ctx.record_err(ctx.bind_to_thread());
        // SAFETY: the pointer came from cuExternalMemoryGetMappedBuffer and is freed once, here,
        // before its imported memory can be destroyed (we hold the Arc).
        destroy_result(ctx, "cuMemFree", unsafe { result::memory_free(self.ptr) });
        let mut live = self.memory.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|(id, _)| *id != self.id);
    }
}
