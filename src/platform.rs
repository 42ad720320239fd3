//! The one place with `cfg(windows)`: the OS handles that carry memory and semaphores
//! between the APIs, who owns them, and the host page size.
//!
//! On Unix the handle is an opaque file descriptor. Each export makes a new descriptor owned
//! by the caller; a successful import (CUDA or Vulkan) takes ownership of it (the descriptor
//! must not be used or closed afterwards), a failed import leaves it with the caller.
//!
//! On Windows the handle is an NT handle (`OPAQUE_WIN32`). Neither CUDA nor Vulkan takes
//! ownership of it: the application closes it after the import.
//!
//! The crate's imports go through one function that encodes both rules: the handle is moved in, so the type system prevents
//! importing one handle twice, and it is closed or handed over exactly once.

use ash::vk;
use cudarc::driver::sys;

use crate::error::{Error, Importer, Result};

/// An owned OS handle to external memory or a semaphore.
#[cfg(unix)]
pub type OwnedExternalHandle = std::os::fd::OwnedFd;
/// An owned OS handle to external memory or a semaphore.
#[cfg(windows)]
pub type OwnedExternalHandle = std::os::windows::io::OwnedHandle;

/// The raw form of [`OwnedExternalHandle`] handed to a driver.
#[cfg(unix)]
pub type RawExternalHandle = std::os::fd::RawFd;
/// The raw form of [`OwnedExternalHandle`] handed to a driver.
#[cfg(windows)]
pub type RawExternalHandle = std::os::windows::io::RawHandle;

/// The Vulkan memory handle type this platform shares with CUDA.
#[cfg(unix)]
pub const MEMORY_HANDLE_TYPE: vk::ExternalMemoryHandleTypeFlags =
    vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
/// The Vulkan memory handle type this platform shares with CUDA.
#[cfg(windows)]
pub const MEMORY_HANDLE_TYPE: vk::ExternalMemoryHandleTypeFlags =
    vk::ExternalMemoryHandleTypeFlags::OPAQUE_WIN32;

/// The Vulkan semaphore handle type this platform shares with CUDA.
#[cfg(unix)]
pub const SEMAPHORE_HANDLE_TYPE: vk::ExternalSemaphoreHandleTypeFlags =
    vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD;
/// The Vulkan semaphore handle type this platform shares with CUDA.
#[cfg(windows)]
pub const SEMAPHORE_HANDLE_TYPE: vk::ExternalSemaphoreHandleTypeFlags =
    vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_WIN32;

/// The device extension that exports memory on this platform.
#[cfg(unix)]
pub const MEMORY_EXTENSION: &std::ffi::CStr = ash::khr::external_memory_fd::NAME;
/// The device extension that exports memory on this platform.
#[cfg(windows)]
pub const MEMORY_EXTENSION: &std::ffi::CStr = ash::khr::external_memory_win32::NAME;

/// The device extension that exports semaphores on this platform.
#[cfg(unix)]
pub const SEMAPHORE_EXTENSION: &std::ffi::CStr = ash::khr::external_semaphore_fd::NAME;
/// The device extension that exports semaphores on this platform.
#[cfg(windows)]
pub const SEMAPHORE_EXTENSION: &std::ffi::CStr = ash::khr::external_semaphore_win32::NAME;

/// The entry points of [`MEMORY_EXTENSION`] the crate calls.
#[cfg(unix)]
pub(crate) const MEMORY_FUNCTIONS: [&std::ffi::CStr; 1] = [c"vkGetMemoryFdKHR"];
/// The entry points of [`MEMORY_EXTENSION`] the crate calls.
#[cfg(windows)]
pub(crate) const MEMORY_FUNCTIONS: [&std::ffi::CStr; 1] = [c"vkGetMemoryWin32HandleKHR"];
/// The entry points of [`SEMAPHORE_EXTENSION`] the crate calls.
#[cfg(unix)]
pub(crate) const SEMAPHORE_FUNCTIONS: [&std::ffi::CStr; 2] =
    [c"vkGetSemaphoreFdKHR", c"vkImportSemaphoreFdKHR"];
/// The entry points of [`SEMAPHORE_EXTENSION`] the crate calls.
#[cfg(windows)]
pub(crate) const SEMAPHORE_FUNCTIONS: [&std::ffi::CStr; 2] = [
    c"vkGetSemaphoreWin32HandleKHR",
    c"vkImportSemaphoreWin32HandleKHR",
];

/// The VMM shareable handle type (`cuMemExportToShareableHandle`) of this platform.
#[cfg(unix)]
pub(crate) const VMM_HANDLE_TYPE: sys::CUmemAllocationHandleType =
    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
/// The VMM shareable handle type (`cuMemExportToShareableHandle`) of this platform.
#[cfg(windows)]
pub(crate) const VMM_HANDLE_TYPE: sys::CUmemAllocationHandleType =
    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_WIN32;

/// Extension loaders for exporting memory and semaphores on this platform.
#[cfg(unix)]
pub(crate) type MemoryLoader = ash::khr::external_memory_fd::Device;
/// Extension loaders for exporting memory and semaphores on this platform.
#[cfg(windows)]
pub(crate) type MemoryLoader = ash::khr::external_memory_win32::Device;
/// Extension loader for exporting and importing semaphores on this platform.
#[cfg(unix)]
pub(crate) type SemaphoreLoader = ash::khr::external_semaphore_fd::Device;
/// Extension loader for exporting and importing semaphores on this platform.
#[cfg(windows)]
pub(crate) type SemaphoreLoader = ash::khr::external_semaphore_win32::Device;

/// Hands `handle` to `import` as a raw handle, and settles its ownership by the platform's
/// rule: on Unix a successful import owns the descriptor (it is released, not closed), a
/// failed one leaves it here (closed once); on Windows the handle is closed either way.
/// On Unix a descriptor that is not open is refused first ([`Error::HandleNotOpen`]).
pub(crate) fn import_with<R>(
    handle: OwnedExternalHandle,
    importer: Importer,
    import: impl FnOnce(RawExternalHandle) -> Result<R>,
) -> Result<R> {
    #[cfg(unix)]
    {
        use std::os::fd::{AsRawFd, IntoRawFd};
        let handle = check_open(handle, importer)?;
        let out = import(handle.as_raw_fd())?; // on error `handle` drops here: closed once
        let _ = handle.into_raw_fd(); // success: the importer owns the descriptor now
        Ok(out)
    }
    #[cfg(windows)]
    {
        use std::os::windows::io::AsRawHandle;
        let _ = importer;
        let out = import(handle.as_raw_handle());
        drop(handle); // NT handles are never owned by the importer
        out
    }
}

/// The raw form of `handle` for an import that does not take ownership (the caller keeps and
/// closes it); on Unix a descriptor that is not open is refused first.
pub(crate) fn borrow_raw(
    handle: &OwnedExternalHandle,
    importer: Importer,
) -> Result<RawExternalHandle> {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        let fd = handle.as_raw_fd();
        descriptor_flags(fd).map_err(|reason| Error::HandleNotOpen {
            handle: i64::from(fd),
            reason: reason.to_string(),
            importer,
        })?;
        Ok(fd)
    }
    #[cfg(windows)]
    {
        use std::os::windows::io::AsRawHandle;
        let _ = importer;
        Ok(handle.as_raw_handle())
    }
}

/// Wraps a handle a driver just returned from an export.
///
/// # Safety
/// `raw` must be a new handle that nothing else owns.
pub(crate) unsafe fn own_exported(raw: RawExternalHandle) -> OwnedExternalHandle {
    #[cfg(unix)]
    {
        use std::os::fd::FromRawFd;
        // SAFETY: forwarded from the caller: a new descriptor nobody else owns.
        unsafe { OwnedExternalHandle::from_raw_fd(raw) }
    }
    #[cfg(windows)]
    {
        use std::os::windows::io::FromRawHandle;
        // SAFETY: forwarded from the caller: a new NT handle nobody else owns.
        unsafe { OwnedExternalHandle::from_raw_handle(raw) }
    }
}

/// The `VkImportMemory*InfoKHR` of this platform for `raw`.
#[cfg(unix)]
pub(crate) fn vk_import_memory_info(raw: RawExternalHandle) -> vk::ImportMemoryFdInfoKHR<'static> {
    vk::ImportMemoryFdInfoKHR::default()
        .handle_type(MEMORY_HANDLE_TYPE)
        .fd(raw)
}

/// The `VkImportMemory*InfoKHR` of this platform for `raw`.
#[cfg(windows)]
pub(crate) fn vk_import_memory_info(
    raw: RawExternalHandle,
) -> vk::ImportMemoryWin32HandleInfoKHR<'static> {
    vk::ImportMemoryWin32HandleInfoKHR::default()
        .handle_type(MEMORY_HANDLE_TYPE)
        .handle(raw as isize)
}

/// Exports `memory` (allocated exportable as [`MEMORY_HANDLE_TYPE`]) as a new owned handle.
///
/// # Safety
/// `memory` must be a live allocation of the loader's device, exportable as
/// [`MEMORY_HANDLE_TYPE`].
pub(crate) unsafe fn vk_export_memory(
    loader: &MemoryLoader,
    memory: vk::DeviceMemory,
) -> Result<OwnedExternalHandle> {
    #[cfg(unix)]
    {
        let info = vk::MemoryGetFdInfoKHR::default()
            .memory(memory)
            .handle_type(MEMORY_HANDLE_TYPE);
        // SAFETY: forwarded from the caller.
        let fd = unsafe { loader.get_memory_fd(&info) }
            .map_err(|result| Error::vulkan("vkGetMemoryFdKHR", result))?;
        // SAFETY: vkGetMemoryFdKHR returns a new descriptor that the caller owns.
        Ok(unsafe { own_exported(fd) })
    }
    #[cfg(windows)]
    {
        let info = vk::MemoryGetWin32HandleInfoKHR::default()
            .memory(memory)
            .handle_type(MEMORY_HANDLE_TYPE);
        // SAFETY: forwarded from the caller.
        let h = unsafe { loader.get_memory_win32_handle(&info) }
            .map_err(|result| Error::vulkan("vkGetMemoryWin32HandleKHR", result))?;
        // SAFETY: an OPAQUE_WIN32 export is a new NT handle the caller owns and must close.
        Ok(unsafe { own_exported(h as RawExternalHandle) })
    }
}

/// Exports `semaphore` (created exportable as [`SEMAPHORE_HANDLE_TYPE`]) as a new handle.
///
/// # Safety
/// `semaphore` must be a live semaphore of the loader's device, exportable as
/// [`SEMAPHORE_HANDLE_TYPE`].
pub(crate) unsafe fn vk_export_semaphore(
    loader: &SemaphoreLoader,
    semaphore: vk::Semaphore,
) -> Result<OwnedExternalHandle> {
    #[cfg(unix)]
    {
        let info = vk::SemaphoreGetFdInfoKHR::default()
            .semaphore(semaphore)
            .handle_type(SEMAPHORE_HANDLE_TYPE);
        // SAFETY: forwarded from the caller.
        let fd = unsafe { loader.get_semaphore_fd(&info) }
            .map_err(|result| Error::vulkan("vkGetSemaphoreFdKHR", result))?;
        // SAFETY: vkGetSemaphoreFdKHR returns a new descriptor that the caller owns.
        Ok(unsafe { own_exported(fd) })
    }
    #[cfg(windows)]
    {
        let info = vk::SemaphoreGetWin32HandleInfoKHR::default()
            .semaphore(semaphore)
            .handle_type(SEMAPHORE_HANDLE_TYPE);
        // SAFETY: forwarded from the caller.
        let h = unsafe { loader.get_semaphore_win32_handle(&info) }
            .map_err(|result| Error::vulkan("vkGetSemaphoreWin32HandleKHR", result))?;
        // SAFETY: an OPAQUE_WIN32 export is a new NT handle the caller owns and must close.
        Ok(unsafe { own_exported(h as RawExternalHandle) })
    }
}

/// Imports `raw` into `semaphore` (`vkImportSemaphore*KHR`).
///
/// # Safety
/// `semaphore` must be a live semaphore of the loader's device that no queue uses;
/// `raw` must be an opaque handle exported from a compatible semaphore.
pub(crate) unsafe fn vk_import_semaphore(
    loader: &SemaphoreLoader,
    semaphore: vk::Semaphore,
    raw: RawExternalHandle,
) -> Result<()> {
    #[cfg(unix)]
    {
        let info = vk::ImportSemaphoreFdInfoKHR::default()
            .semaphore(semaphore)
            .handle_type(SEMAPHORE_HANDLE_TYPE)
            .fd(raw);
        // SAFETY: forwarded from the caller.
        unsafe { loader.import_semaphore_fd(&info) }
            .map_err(|result| Error::vulkan("vkImportSemaphoreFdKHR", result))
    }
    #[cfg(windows)]
    {
        let info = vk::ImportSemaphoreWin32HandleInfoKHR::default()
            .semaphore(semaphore)
            .handle_type(SEMAPHORE_HANDLE_TYPE)
            .handle(raw as isize);
        // SAFETY: forwarded from the caller.
        unsafe { loader.import_semaphore_win32_handle(&info) }
            .map_err(|result| Error::vulkan("vkImportSemaphoreWin32HandleKHR", result))
    }
}

/// The handle part of `CUDA_EXTERNAL_MEMORY_HANDLE_DESC` for `raw`, and its type.
pub(crate) fn cuda_memory_handle(
    raw: RawExternalHandle,
) -> (
    sys::CUexternalMemoryHandleType,
    sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC_st__bindgen_ty_1,
) {
    #[cfg(unix)]
    {
        (
            sys::CUexternalMemoryHandleType::CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD,
            sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC_st__bindgen_ty_1 { fd: raw },
        )
    }
    #[cfg(windows)]
    {
        (
            sys::CUexternalMemoryHandleType::CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_WIN32,
            sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC_st__bindgen_ty_1 {
                win32: sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC_st__bindgen_ty_1__bindgen_ty_1 {
                    handle: raw,
                    name: std::ptr::null(),
                },
            },
        )
    }
}

/// The handle part of `CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC` for `raw`, and its type.
pub(crate) fn cuda_semaphore_handle(
    raw: RawExternalHandle,
    timeline: bool,
) -> (
    sys::CUexternalSemaphoreHandleType,
    sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC_st__bindgen_ty_1,
) {
    use sys::CUexternalSemaphoreHandleType as T;
    #[cfg(unix)]
    {
        let ty = if timeline {
            T::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD
        } else {
            T::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD
        };
        (
            ty,
            sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC_st__bindgen_ty_1 { fd: raw },
        )
    }
    #[cfg(windows)]
    {
        let ty = if timeline {
            T::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_WIN32
        } else {
            T::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_WIN32
        };
        (
            ty,
            sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC_st__bindgen_ty_1 {
                win32: sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC_st__bindgen_ty_1__bindgen_ty_1 {
                    handle: raw,
                    name: std::ptr::null(),
                },
            },
        )
    }
}

/// The "OS handle" argument of `cuMemImportFromShareableHandle` for `raw`: the descriptor's
/// value on Unix, the handle itself on Windows.
pub(crate) fn vmm_os_handle(raw: RawExternalHandle) -> *mut std::ffi::c_void {
    #[cfg(unix)]
    {
        raw as isize as *mut std::ffi::c_void
    }
    #[cfg(windows)]
    {
        raw
    }
}

/// Storage `cuMemExportToShareableHandle` writes a handle of [`VMM_HANDLE_TYPE`] into.
#[cfg(unix)]
pub(crate) type VmmExportSlot = std::ffi::c_int;
/// Storage `cuMemExportToShareableHandle` writes a handle of [`VMM_HANDLE_TYPE`] into.
#[cfg(windows)]
pub(crate) type VmmExportSlot = RawExternalHandle;

/// An empty [`VmmExportSlot`].
pub(crate) fn vmm_export_slot() -> VmmExportSlot {
    #[cfg(unix)]
    {
        -1
    }
    #[cfg(windows)]
    {
        std::ptr::null_mut()
    }
}

/// Whether a raw handle in a slot is real (an export wrote it).
pub(crate) fn vmm_slot_handle(slot: VmmExportSlot) -> Option<RawExternalHandle> {
    #[cfg(unix)]
    {
        (slot >= 0).then_some(slot)
    }
    #[cfg(windows)]
    {
        (!slot.is_null()).then_some(slot)
    }
}

/// Checks that a descriptor is open before a driver is handed it, so that a descriptor
/// already consumed by an import gives [`Error::HandleNotOpen`] rather than undefined
/// behaviour. A descriptor that is not open is forgotten, never closed: its number may
/// already belong to someone else.
#[cfg(unix)]
fn check_open(handle: OwnedExternalHandle, importer: Importer) -> Result<OwnedExternalHandle> {
    use std::os::fd::AsRawFd;
    let fd = handle.as_raw_fd();
    if let Err(reason) = descriptor_flags(fd) {
        std::mem::forget(handle);
        Err(Error::HandleNotOpen {
            handle: i64::from(fd),
            reason: reason.to_string(),
            importer,
        })
    } else {
        Ok(handle)
    }
}

#[cfg(unix)]
fn descriptor_flags(fd: std::os::fd::RawFd) -> std::io::Result<i32> {
    // SAFETY: F_GETFD only reads the descriptor flags; it is defined for any integer.
    let rc = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if rc == -1 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// The host page size: `cuMemHostRegister` requires pointers and sizes to be multiples of it.
pub fn host_page_size() -> usize {
    #[cfg(unix)]
    {
        // SAFETY: sysconf only reads a system constant.
        let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(v).ok().filter(|&v| v > 0).unwrap_or(4096)
    }
    #[cfg(windows)]
    {
        // x86-64 and ARM64 Windows use 4 KiB pages (large pages are opt-in and not used here).
        4096
    }
}
