//! CUDA virtual memory management: physical allocations (`cuMemCreate`), exportable as POSIX
//! file descriptors for Vulkan; address reservations (`cuMemAddressReserve`); mappings
//! (`cuMemMap`) that become usable only through [`VmmMappingNoAccess::enable_access`]
//! (`cuMemSetAccess`), so the types make access before it impossible. Every `cuMemMap` rule
//! of its reference page is checked first (granularity, range and alignment: [`crate::LayoutError`]); drop order
//! is unmap → release → free by construction (a mapping holds its reservation and memory).

use std::ops::Range;
use std::sync::{Arc, Mutex};

use cudarc::driver::{sys, CudaContext};

use crate::error::{CudaResultExt, Error, Importer, Result};
use crate::error::{Exportable, MemoryError};
use crate::platform::{self, OwnedExternalHandle};
use crate::rules::layout::{self, VmmMapRequest};

/// Whether a virtual-memory allocation can be shared with another API or process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VmmExport {
    /// Used by this CUDA context only.
    #[default]
    Local,
    /// Exportable as the platform's OS handle (a POSIX file descriptor; a Win32 handle on
    /// Windows), e.g. for Vulkan to import.
    OsHandle,
}

fn prop(device: i32, export: VmmExport) -> sys::CUmemAllocationProp {
    // SAFETY: all-zero is a valid value of this plain C struct (then filled in below).
    let mut p: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    p.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    if export == VmmExport::OsHandle {
        p.requestedHandleTypes = platform::VMM_HANDLE_TYPE;
    }
    p
}

/// `cuMemGetAllocationGranularity` for `ctx`'s device: (minimum, recommended).
pub fn allocation_granularity(ctx: &Arc<CudaContext>, export: VmmExport) -> Result<(u64, u64)> {
    ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
    let p = prop(ctx.cu_device(), export);
    let get = |flag| {
        let mut g = 0usize;
        // SAFETY: valid prop and out-pointer.
        unsafe { sys::cuMemGetAllocationGranularity(&mut g, &p, flag) }
            .result()
            .cuda("cuMemGetAllocationGranularity")
            .map(|_| g as u64)
    };
    Ok((
        get(sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM)?,
        get(sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)?,
    ))
}

/// Physical device memory from `cuMemCreate` (or imported from a shareable handle), released
/// with `cuMemRelease` when the last mapping and handle are gone.
pub struct VmmAllocation {
    ctx: Arc<CudaContext>,
    handle: sys::CUmemGenericAllocationHandle,
    size: u64,
    exportable: bool,
}

// SAFETY: the allocation handle is a plain driver handle valid in every thread once the
// context is bound (each method binds it).
unsafe impl Send for VmmAllocation {}
// SAFETY: as for Send; no interior mutability.
unsafe impl Sync for VmmAllocation {}

impl VmmAllocation {
    /// Allocates `size` bytes (a multiple of the minimum granularity: checked) on `ctx`'s
    /// device; with [`VmmExport::OsHandle`], shareable as a POSIX file descriptor (Win32
    /// handle on Windows).
    pub fn new(ctx: &Arc<CudaContext>, size: u64, export: VmmExport) -> Result<Arc<Self>> {
        let (g, _) = allocation_granularity(ctx, export)?;
        if size == 0 {
            return Err(layout::LayoutError::ZeroSize { offset: 0 }.into());
        }
        layout::check_aligned("size", size, g, layout::AlignmentRule::Granularity)?;
        let p = prop(ctx.cu_device(), export);
        let mut handle = 0;
        // SAFETY: valid prop; the size is a granularity multiple (checked).
        unsafe { sys::cuMemCreate(&mut handle, size as usize, &p, 0) }
            .result()
            .cuda("cuMemCreate")?;
        Ok(Arc::new(Self {
            ctx: ctx.clone(),
            handle,
            size,
            exportable: export == VmmExport::OsHandle,
        }))
    }

    /// Exports a new shareable handle to this memory (a POSIX file descriptor on Unix, an NT
    /// handle on Windows), owned by the caller.
    pub fn export(&self) -> Result<OwnedExternalHandle> {
        if !self.exportable {
            return Err(MemoryError::NotExportable {
                what: Exportable::VmmAllocation,
            }
            .into());
        }
        self.ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        let mut slot = platform::vmm_export_slot();
        // SAFETY: an exportable allocation; the slot has the type the handle type writes.
        unsafe {
            sys::cuMemExportToShareableHandle(
                (&mut slot as *mut platform::VmmExportSlot).cast(),
                self.handle,
                platform::VMM_HANDLE_TYPE,
                0,
            )
        }
        .result()
        .cuda("cuMemExportToShareableHandle")?;
        let raw = platform::vmm_slot_handle(slot).ok_or(Error::NoHandleReturned {
            call: "cuMemExportToShareableHandle",
        })?;
        // SAFETY: the driver returned a new handle that the caller owns.
        Ok(unsafe { platform::own_exported(raw) })
    }

    /// Imports memory exported by [`Self::export`] (possibly by another process). Importing
    /// does not take the handle: it is closed here.
    ///
    /// # Safety
    /// `handle` must be a shareable handle from `cuMemExportToShareableHandle` (this
    /// platform's type) of an allocation of exactly `size` bytes.
    pub unsafe fn import(
        ctx: &Arc<CudaContext>,
        handle: OwnedExternalHandle,
        size: u64,
    ) -> Result<Arc<Self>> {
        ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        let raw = platform::borrow_raw(&handle, Importer::Cuda)?;
        let mut h = 0;
        // SAFETY: a live handle (checked); the caller vouches for what it refers to.
        unsafe {
            sys::cuMemImportFromShareableHandle(
                &mut h,
                platform::vmm_os_handle(raw),
                platform::VMM_HANDLE_TYPE,
            )
        }
        .result()
        .cuda("cuMemImportFromShareableHandle")?;
        drop(handle); // cuMemImportFromShareableHandle never owns the handle: closed here
        Ok(Arc::new(Self {
            ctx: ctx.clone(),
            handle: h,
            size,
            exportable: true,
        }))
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// The device ordinal it lives on.
    pub fn device(&self) -> i32 {
        self.ctx.cu_device()
    }
    /// Whether it can be exported.
    pub fn is_exportable(&self) -> bool {
        self.exportable
    }
    /// The raw handle (valid while `self` lives).
    pub fn handle(&self) -> sys::CUmemGenericAllocationHandle {
        self.handle
    }
}

impl Drop for VmmAllocation {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: created or imported once, released once; mappings hold an Arc to us.
        self.ctx
            .record_err(unsafe { sys::cuMemRelease(self.handle) }.result());
    }
}

/// A virtual address range from `cuMemAddressReserve`, freed when its last mapping is gone.
pub struct AddressReservation {
    ctx: Arc<CudaContext>,
    base: sys::CUdeviceptr,
    size: u64,
    granularity: u64,
    live: Mutex<Vec<Range<u64>>>,
}

// SAFETY: a plain address range; mutable state is behind a Mutex.
unsafe impl Send for AddressReservation {}
// SAFETY: as for Send.
unsafe impl Sync for AddressReservation {}

impl AddressReservation {
    /// Reserves `size` bytes (a multiple of the granularity) aligned to the granularity.
    pub fn new(ctx: &Arc<CudaContext>, size: u64) -> Result<Arc<Self>> {
        let (g, _) = allocation_granularity(ctx, VmmExport::OsHandle)?;
        if size == 0 {
            return Err(layout::LayoutError::ZeroSize { offset: 0 }.into());
        }
        layout::check_aligned("size", size, g, layout::AlignmentRule::Granularity)?;
        let mut base = 0;
        // SAFETY: size and alignment are granularity multiples; no fixed address asked.
        unsafe { sys::cuMemAddressReserve(&mut base, size as usize, g as usize, 0, 0) }
            .result()
            .cuda("cuMemAddressReserve")?;
        Ok(Arc::new(Self {
            ctx: ctx.clone(),
            base,
            size,
            granularity: g,
            live: Mutex::new(Vec::new()),
        }))
    }

    /// The first address.
    pub fn base(&self) -> sys::CUdeviceptr {
        self.base
    }
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// The minimum allocation granularity every mapping respects.
    pub fn granularity(&self) -> u64 {
        self.granularity
    }

    /// Maps `size` bytes of `memory` (from its start) at `offset` in this reservation, after
    /// checking every rule of `cuMemMap`'s page. The result is not accessible yet.
    pub fn map(
        self: &Arc<Self>,
        offset: u64,
        memory: &Arc<VmmAllocation>,
        size: u64,
    ) -> Result<VmmMappingNoAccess> {
        self.map_at(offset, memory, 0, size)
    }

    /// As [`Self::map`] with an offset into the allocation (the page says it must be 0 today:
    /// any other value is refused before the call, with that rule named).
    pub fn map_at(
        self: &Arc<Self>,
        offset: u64,
        memory: &Arc<VmmAllocation>,
        allocation_offset: u64,
        size: u64,
    ) -> Result<VmmMappingNoAccess> {
        if !Arc::ptr_eq(&memory.ctx, &self.ctx) {
            return Err(Error::WrongDevice {
                object: crate::DeviceObject::VmmAllocation,
                owner: crate::DeviceOwner::CudaContext,
            });
        }
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let range = layout::validate_vmm_map(
            VmmMapRequest {
                reservation_base: self.base,
                reservation_size: self.size,
                offset,
                size,
                allocation_size: memory.size,
                allocation_offset,
                granularity: self.granularity,
            },
            live.iter(),
        )?;
        self.ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        // SAFETY: every rule of the page was checked above; the range is not mapped.
        unsafe {
            sys::cuMemMap(
                self.base + offset,
                size as usize,
                allocation_offset as usize,
                memory.handle,
                0,
            )
        }
        .result()
        .cuda("cuMemMap")?;
        live.push(range.clone());
        Ok(VmmMappingNoAccess {
            reservation: self.clone(),
            memory: memory.clone(),
            range,
        })
    }
}

impl Drop for AddressReservation {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: reserved once, freed once, after every mapping (they hold an Arc to us).
        self.ctx
            .record_err(unsafe { sys::cuMemAddressFree(self.base, self.size as usize) }.result());
    }
}

/// A mapping that is not accessible yet: it has no device pointer to hand out. Call
/// [`Self::enable_access`] (`cuMemSetAccess`) to get a [`VmmMapping`].
///
/// Using the range before `cuMemSetAccess` does not compile:
///
/// ```compile_fail
/// # fn f(mapped: cuvk::cuda::vmm::VmmMappingNoAccess) {
/// let ptr = mapped.device_ptr(); // no such method: only VmmMapping has one
/// # }
/// ```
pub struct VmmMappingNoAccess {
    reservation: Arc<AddressReservation>,
    memory: Arc<VmmAllocation>,
    range: Range<u64>,
}

impl VmmMappingNoAccess {
    /// Makes the range readable and writable by the reservation's device.
    pub fn enable_access(self) -> Result<VmmMapping> {
        let own = self.reservation.ctx.cu_device();
        self.enable_access_for(&[own])
    }

    /// Makes the range readable and writable by each of `devices` (CUDA device handles; the
    /// reservation's own device among them, or it cannot use the range). Peers must be able
    /// to reach the memory's device (`cuDeviceCanAccessPeer`): check before, as
    /// [`Bridge::create_peer_buffer`](crate::Bridge::create_peer_buffer) does.
    pub fn enable_access_for(self, devices: &[sys::CUdevice]) -> Result<VmmMapping> {
        let ctx = &self.reservation.ctx;
        let descs: Vec<sys::CUmemAccessDesc> = devices
            .iter()
            .map(|&device| {
                // SAFETY: all-zero is a valid value of this plain C struct (then filled in).
                let mut desc: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
                desc.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
                desc.location.id = device;
                desc.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
                desc
            })
            .collect();
        ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        let size = self.range.end - self.range.start;
        // SAFETY: the range is mapped (by construction of VmmMappingNoAccess); one descriptor
        // per device, `descs.len()` of them.
        unsafe {
            sys::cuMemSetAccess(
                self.reservation.base + self.range.start,
                size as usize,
                descs.as_ptr(),
                descs.len(),
            )
        }
        .result()
        .cuda("cuMemSetAccess")?; // on error `self` drops and unmaps
        Ok(VmmMapping {
            inner: self,
            devices: devices.to_vec(),
        })
    }

    /// The range inside the reservation.
    pub fn range(&self) -> Range<u64> {
        self.range.clone()
    }
}

impl Drop for VmmMappingNoAccess {
    fn drop(&mut self) {
        let r = &self.reservation;
        r.ctx.record_err(r.ctx.bind_to_thread());
        let size = self.range.end - self.range.start;
        // SAFETY: mapped once, unmapped once, before the reservation and memory can go.
        r.ctx.record_err(
            unsafe { sys::cuMemUnmap(r.base + self.range.start, size as usize) }.result(),
        );
        r.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|x| *x != self.range);
    }
}

/// A mapped, accessible range of a reservation: its device pointer may be used by kernels.
pub struct VmmMapping {
    inner: VmmMappingNoAccess,
    devices: Vec<sys::CUdevice>,
}

impl VmmMapping {
    /// The device pointer of the mapping's first byte.
    pub fn device_ptr(&self) -> sys::CUdeviceptr {
        self.inner.reservation.base + self.inner.range.start
    }
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.inner.range.end - self.inner.range.start
    }
    /// The physical memory behind it.
    pub fn memory(&self) -> &Arc<VmmAllocation> {
        &self.inner.memory
    }
    /// The reservation it lives in.
    pub fn reservation(&self) -> &Arc<AddressReservation> {
        &self.inner.reservation
    }
    /// The CUDA devices that may read and write it.
    pub fn accessible_from(&self) -> &[sys::CUdevice] {
        &self.devices
    }
}
