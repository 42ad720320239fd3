//! Page-locked host memory for staging: allocated by CUDA (`cuMemHostAlloc`) or registered
//! from memory the caller owns (`cuMemHostRegister`), with typed flags and the reference
//! pages' rules checked before each call. Live pinned bytes are counted process-wide
//! ([`pinned_bytes`]): pinned memory is a limited system resource.

use std::alloc::Layout;
use std::marker::PhantomData;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{sys, CudaContext};

use crate::cuda::external_memory::destroy_result;
use crate::error::MemoryError;
use crate::error::{CudaResultExt, Error, Result};
use crate::rules::layout::{self, AlignmentRule};

pub use crate::platform::host_page_size;

static PINNED_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Registered ranges, process-wide: the same range must not be registered twice.
static REGISTERED: Mutex<Vec<Range<usize>>> = Mutex::new(Vec::new());

/// Bytes of host memory currently page-locked through this crate (allocated or registered).
pub fn pinned_bytes() -> usize {
    PINNED_BYTES.load(Ordering::Acquire)
}

/// Flags of `cuMemHostAlloc`: `CU_MEMHOSTALLOC_PORTABLE` (1), `_DEVICEMAP` (2),
/// `_WRITECOMBINED` (4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct HostAllocFlags {
    /// Pinned for every CUDA context, not just the allocating one.
    pub portable: bool,
    /// Mapped into the CUDA address space ([`PinnedBuffer::device_ptr`]).
    pub device_map: bool,
    /// Write-combined: fast for the CPU to write and the GPU to read, slow for the CPU to read.
    pub write_combined: bool,
}

impl HostAllocFlags {
    /// The raw flag bits.
    pub fn bits(self) -> u32 {
        [
            (self.portable, sys::CU_MEMHOSTALLOC_PORTABLE),
            (self.device_map, sys::CU_MEMHOSTALLOC_DEVICEMAP),
            (self.write_combined, sys::CU_MEMHOSTALLOC_WRITECOMBINED),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0, |bits, (_, bit)| bits | bit)
    }
    /// All eight combinations.
    pub fn all() -> [Self; 8] {
        std::array::from_fn(|i| Self {
            portable: i & 1 != 0,
            device_map: i & 2 != 0,
            write_combined: i & 4 != 0,
        })
    }
}

/// Flags of `cuMemHostRegister`: `CU_MEMHOSTREGISTER_PORTABLE` (1), `_DEVICEMAP` (2),
/// `_IOMEMORY` (4), `_READ_ONLY` (8). Write-combining does not exist for registration, so
/// this type has no way to ask for it (the bit 4 means IOMEMORY here).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct HostRegisterFlags {
    /// Pinned for every CUDA context.
    pub portable: bool,
    /// Mapped into the CUDA address space.
    pub device_map: bool,
    /// The range is I/O memory (e.g. a PCIe BAR), not ordinary RAM (measured: refused with
    /// CUDA_ERROR_INVALID_VALUE for ordinary RAM).
    pub io_memory: bool,
    /// The device will only read the range: CUDA copies into it are refused (measured on the
    /// H200: a device-to-host copy into it returns CUDA_ERROR_INVALID_VALUE).
    pub read_only: bool,
}

impl HostRegisterFlags {
    /// The raw flag bits.
    pub fn bits(self) -> u32 {
        [
            (self.portable, sys::CU_MEMHOSTREGISTER_PORTABLE),
            (self.device_map, sys::CU_MEMHOSTREGISTER_DEVICEMAP),
            (self.io_memory, sys::CU_MEMHOSTREGISTER_IOMEMORY),
            (self.read_only, sys::CU_MEMHOSTREGISTER_READ_ONLY),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0, |bits, (_, bit)| bits | bit)
    }
}

/// What a CUDA device says about host memory, for the device summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostMemorySupport {
    /// `CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES`: where true,
    /// `cuMemHostAlloc` may not page-lock memory at all (the device reads pageable memory).
    pub pageable_uses_host_page_tables: bool,
    /// `CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED`.
    pub host_register_supported: bool,
    /// `CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING`: mapped host pointers equal device pointers
    /// (except write-combined allocations).
    pub unified_addressing: bool,
    /// `CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY`.
    pub can_map_host_memory: bool,
}

impl HostMemorySupport {
    /// Reads the attributes of `ctx`'s device.
    pub fn query(ctx: &Arc<CudaContext>) -> Result<Self> {
        use sys::CUdevice_attribute as A;
        let get = |a| {
            ctx.attribute(a)
                .map(|v| v != 0)
                .cuda("cuDeviceGetAttribute")
        };
        Ok(Self {
            pageable_uses_host_page_tables: get(
                A::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES,
            )?,
            host_register_supported: get(A::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED)?,
            unified_addressing: get(A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)?,
            can_map_host_memory: get(A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)?,
        })
    }

    /// Whether `cuMemHostAlloc` memory is really page-locked here.
    pub fn pins_memory(&self) -> bool {
        !self.pageable_uses_host_page_tables
    }

    /// One line for a device summary, saying plainly when memory is not really pinned.
    pub fn summary(&self) -> String {
        format!(
            "host memory: {}; cuMemHostRegister {}; unified addressing {}; map host memory {}",
            if self.pins_memory() {
                "cuMemHostAlloc page-locks"
            } else {
                "pageable memory is accessed through host page tables, so cuMemHostAlloc may NOT page-lock"
            },
            if self.host_register_supported {
                "supported"
            } else {
                "NOT supported"
            },
            self.unified_addressing,
            self.can_map_host_memory
        )
    }
}

/// Checks the page rule of `cuMemHostRegister` for `ptr..ptr+bytes`.
pub fn check_page_aligned(ptr: usize, bytes: usize) -> Result<()> {
    let page = host_page_size() as u64;
    if bytes == 0 {
        return Err(layout::LayoutError::ZeroSize { offset: 0 }.into());
    }
    layout::check_aligned("pointer", ptr as u64, page, AlignmentRule::HostPage)?;
    layout::check_aligned("size", bytes as u64, page, AlignmentRule::HostPage)?;
    Ok(())
}

/// `len` elements of `T` in page-locked host memory from `cuMemHostAlloc`, zeroed, freed with
/// `cuMemFreeHost` on drop.
pub struct PinnedBuffer<T> {
    ctx: Arc<CudaContext>,
    ptr: NonNull<T>,
    len: usize,
    bytes: usize,
    flags: HostAllocFlags,
    device_ptr: Option<sys::CUdeviceptr>,
}

// SAFETY: owns its memory like a Vec<T>; the CUDA context is thread-safe.
unsafe impl<T: Send> Send for PinnedBuffer<T> {}
// SAFETY: as for Send; shared access is read-only.
unsafe impl<T: Sync> Sync for PinnedBuffer<T> {}

impl<T: bytemuck::Pod> PinnedBuffer<T> {
    /// Allocates `len` elements with `flags`; with `device_map`, also fetches the device pointer.
    pub fn new(ctx: &Arc<CudaContext>, len: usize, flags: HostAllocFlags) -> Result<Self> {
        let bytes = usize::try_from(layout::bytes_for::<T>(len)?).map_err(|_| {
            MemoryError::HostSizeOverflow {
                bytes: layout::bytes_for::<T>(len).unwrap_or(u64::MAX),
            }
        })?;
        if bytes == 0 {
            return Err(layout::LayoutError::ZeroSize { offset: 0 }.into());
        }
        ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        // SAFETY: a plain allocation request; the result is checked.
        let raw = unsafe { cudarc::driver::result::malloc_host(bytes, flags.bits()) }
            .cuda("cuMemHostAlloc")?;
        let ptr = NonNull::new(raw.cast::<T>()).ok_or(Error::HostOutOfMemory {
            what: "cuMemHostAlloc",
            bytes: bytes as u64,
        })?;
        PINNED_BYTES.fetch_add(bytes, Ordering::AcqRel);
        let mut me = Self {
            ctx: ctx.clone(),
            ptr,
            len,
            bytes,
            flags,
            device_ptr: None,
        };
        // SAFETY: `bytes` bytes were just allocated at ptr; zero is a valid T (Pod).
        unsafe { std::ptr::write_bytes(ptr.as_ptr().cast::<u8>(), 0, bytes) };
        if flags.device_map {
            me.device_ptr = Some(device_pointer(raw)?); // `me` frees on error
        }
        Ok(me)
    }

    /// The elements.
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: len initialised elements owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
    /// The elements, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: len initialised elements owned by self, borrowed exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
    /// The flags it was allocated with.
    pub fn flags(&self) -> HostAllocFlags {
        self.flags
    }
    /// Size in bytes.
    pub fn byte_size(&self) -> usize {
        self.bytes
    }
    /// The host pointer.
    pub fn host_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }
    /// The device pointer (`cuMemHostGetDevicePointer`), where `device_map` was asked for.
    /// With unified addressing and without write-combining it equals the host pointer (the
    /// reference page's rule); with write-combining it may not, so always use this.
    pub fn device_ptr(&self) -> Option<sys::CUdeviceptr> {
        self.device_ptr
    }
    /// The context that allocated it.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
}

impl<T> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: allocated by cuMemHostAlloc, freed once, here.
        let freed = unsafe { cudarc::driver::result::free_host(self.ptr.as_ptr().cast()) };
        destroy_result(&self.ctx, "cuMemFreeHost", freed);
        PINNED_BYTES.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

fn device_pointer(host: *mut std::ffi::c_void) -> Result<sys::CUdeviceptr> {
    let mut dptr: sys::CUdeviceptr = 0;
    // SAFETY: host is a live page-locked allocation or registration mapped for the device.
    unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dptr, host, 0) }
        .result()
        .cuda("cuMemHostGetDevicePointer")?;
    Ok(dptr)
}

/// Memory the caller owns, page-locked by `cuMemHostRegister` for as long as this lives;
/// the borrow of the memory is held until then, and `cuMemHostUnregister` runs on drop.
pub struct HostRegistration<'a, T> {
    ctx: Arc<CudaContext>,
    ptr: NonNull<T>,
    len: usize,
    range: Range<usize>,
    flags: HostRegisterFlags,
    device_ptr: Option<sys::CUdeviceptr>,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: holds a unique borrow of the memory, like &'a mut [T].
unsafe impl<T: Send> Send for HostRegistration<'_, T> {}
// SAFETY: as for Send.
unsafe impl<T: Sync> Sync for HostRegistration<'_, T> {}

impl<'a, T: bytemuck::Pod> HostRegistration<'a, T> {
    /// Registers `memory` with `flags` after checking the reference page's rules: pointer and
    /// size multiples of the host page size, non-empty, and no part of the range registered
    /// already.
    pub fn new(
        ctx: &Arc<CudaContext>,
        memory: &'a mut [T],
        flags: HostRegisterFlags,
    ) -> Result<Self> {
        let bytes = std::mem::size_of_val(memory);
        let start = memory.as_mut_ptr() as usize;
        check_page_aligned(start, bytes)?;
        let range = start..start + bytes;
        let mut registered = REGISTERED.lock().unwrap_or_else(|p| p.into_inner());
        let as_u64 = |r: &Range<usize>| r.start as u64..r.end as u64;
        let live: Vec<Range<u64>> = registered.iter().map(as_u64).collect();
        layout::check_no_overlap("registration", &as_u64(&range), &live)?;
        ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        // SAFETY: the range is page-aligned, non-empty, not registered, and borrowed
        // exclusively for the registration's lifetime.
        unsafe { sys::cuMemHostRegister_v2(start as *mut _, bytes, flags.bits()) }
            .result()
            .cuda("cuMemHostRegister")?;
        registered.push(range.clone());
        drop(registered);
        PINNED_BYTES.fetch_add(bytes, Ordering::AcqRel);
        let mut me = Self {
            ctx: ctx.clone(),
            ptr: NonNull::from(&mut *memory).cast(),
            len: memory.len(),
            range,
            flags,
            device_ptr: None,
            _borrow: PhantomData,
        };
        if flags.device_map {
            me.device_ptr = Some(device_pointer(start as *mut _)?); // `me` unregisters on error
        }
        Ok(me)
    }

    /// The registered elements.
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: the borrowed slice, alive for 'a.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
    /// The registered elements, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: the exclusively borrowed slice, alive for 'a.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
    /// The host pointer.
    pub fn host_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }
    /// Size in bytes.
    pub fn byte_size(&self) -> usize {
        self.range.len()
    }
    /// The flags it was registered with.
    pub fn flags(&self) -> HostRegisterFlags {
        self.flags
    }
    /// The device pointer, where `device_map` was asked for.
    pub fn device_ptr(&self) -> Option<sys::CUdeviceptr> {
        self.device_ptr
    }
}

impl<T> Drop for HostRegistration<'_, T> {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: registered by us, unregistered once, here, while the borrow is still held.
        let unregistered = unsafe { sys::cuMemHostUnregister(self.range.start as *mut _) }.result();
        destroy_result(&self.ctx, "cuMemHostUnregister", unregistered);
        REGISTERED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|r| *r != self.range);
        PINNED_BYTES.fetch_sub(self.range.len(), Ordering::AcqRel);
    }
}

/// Page-aligned, zeroed host memory owned by the caller: what [`HostRegistration`] and
/// Vulkan's host-pointer import need (a `Vec` is not page-aligned).
pub struct PageAlignedBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl std::fmt::Debug for PageAlignedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageAlignedBuffer")
            .field("bytes", &self.layout.size())
            .field("align", &self.layout.align())
            .finish()
    }
}

// SAFETY: owns its memory like a Vec<u8>.
unsafe impl Send for PageAlignedBuffer {}
// SAFETY: as for Send.
unsafe impl Sync for PageAlignedBuffer {}

impl PageAlignedBuffer {
    /// `bytes` (rounded up to whole pages) of zeroed memory aligned to `max(page, align)`.
    /// `align` must be a power of two ([`LayoutError::BadAlignment`](crate::LayoutError)
    /// otherwise); a size that overflows once rounded is [`MemoryError::HostSizeOverflow`].
    pub fn new(bytes: usize, align: usize) -> Result<Self> {
        layout::check_power_of_two(align as u64)?;
        let align = align.max(host_page_size());
        let size = layout::align_up(bytes as u64, align as u64)
            .filter(|&s| s > 0)
            .ok_or(MemoryError::HostSizeOverflow {
                bytes: bytes as u64,
            })?;
        let layout = Layout::from_size_align(size as usize, align)
            .map_err(|_| MemoryError::HostSizeOverflow { bytes: size })?;
        // SAFETY: non-zero size (checked).
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).ok_or(
            Error::HostOutOfMemory {
                what: "a page-aligned host allocation",
                bytes: size,
            },
        )?;
        Ok(Self { ptr, layout })
    }
    /// The bytes.
    pub fn as_mut_bytes(&mut self) -> &mut [u8] {
        // SAFETY: layout.size() zeroed bytes owned by self, borrowed exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
    /// The bytes, read-only.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: layout.size() initialised bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for PageAlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn page_aligned_buffer_names_the_rule_that_failed() {
        // Alignment not a power of two: the alignment rule, with the number given.
        let e = PageAlignedBuffer::new(4096, 12288).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Layout(layout::LayoutError::BadAlignment { alignment: 12288 })
            ),
            "{e:?}"
        );
        assert!(PageAlignedBuffer::new(4096, 0).is_err());
        // Too large once rounded up to the alignment: the size rule, with the size.
        let e = PageAlignedBuffer::new(usize::MAX - 10, 4096).unwrap_err();
        assert!(
            matches!(e, Error::Memory(MemoryError::HostSizeOverflow { .. })),
            "{e:?}"
        );
        // The next valid call works.
        let mut b = PageAlignedBuffer::new(4096, 8192).unwrap();
        assert_eq!(b.as_mut_bytes().as_ptr() as usize % 8192, 0);
        assert!(b.as_bytes().iter().all(|&x| x == 0));
    }

    #[test]
    fn flag_bits_match_the_driver_values() {
        // DESIGN.md: PORTABLE=1, DEVICEMAP=2, IOMEMORY=4, READ_ONLY=8 for registration;
        // WRITECOMBINED=4 exists only for allocation.
        let r = HostRegisterFlags {
            portable: true,
            device_map: true,
            io_memory: true,
            read_only: true,
        };
        assert_eq!(r.bits(), 1 | 2 | 4 | 8);
        let a = HostAllocFlags {
            portable: true,
            device_map: true,
            write_combined: true,
        };
        assert_eq!(a.bits(), 1 | 2 | 4);
        assert_eq!(
            HostAllocFlags::all()
                .iter()
                .map(|f| f.bits())
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            8
        );
    }

    #[test]
    fn page_rule() {
        let p = host_page_size();
        assert!(check_page_aligned(p, p).is_ok());
        assert!(matches!(
            check_page_aligned(p + 8, p),
            Err(Error::Layout(layout::LayoutError::Misaligned {
                what: "pointer",
                ..
            }))
        ));
        assert!(matches!(
            check_page_aligned(p, p + 1),
            Err(Error::Layout(layout::LayoutError::Misaligned {
                what: "size",
                ..
            }))
        ));
        assert!(matches!(
            check_page_aligned(p, 0),
            Err(Error::Layout(layout::LayoutError::ZeroSize { .. }))
        ));
    }

    #[test]
    fn page_aligned_buffer_is_aligned_and_zeroed() {
        let mut b = PageAlignedBuffer::new(10_000, 65536).unwrap();
        assert_eq!(b.as_bytes().as_ptr() as usize % 65536, 0);
        assert_eq!(b.as_bytes().len(), 65536);
        assert!(b.as_bytes().iter().all(|&x| x == 0));
        b.as_mut_bytes()[0] = 1;
    }
}
