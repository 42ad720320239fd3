//! OS handles that carry memory and semaphores between the APIs, and who owns them.
//!
//! On Unix the handle is an opaque file descriptor. Each `vkGetMemoryFdKHR` call makes a new
//! descriptor owned by the caller; a successful CUDA import takes ownership of it (the
//! descriptor must not be used or closed afterwards), a failed import leaves it with the
//! caller. [`OwnedExternalHandle`] is moved into an import, so the type system prevents
//! importing one descriptor twice; the import consumes it with `into_raw_fd` only on success.
//!
//! On Windows the handle is an NT handle (`OPAQUE_WIN32`). CUDA does **not** take ownership
//! of it: the application closes it after the import, which [`OwnedExternalHandle`]'s drop does.

use ash::vk;

use crate::error::{Error, Result};

/// An owned OS handle to external memory or a semaphore.
#[cfg(unix)]
pub type OwnedExternalHandle = std::os::fd::OwnedFd;
/// An owned OS handle to external memory or a semaphore.
#[cfg(windows)]
pub type OwnedExternalHandle = std::os::windows::io::OwnedHandle;

/// The Vulkan memory handle type this platform shares with CUDA.
pub const MEMORY_HANDLE_TYPE: vk::ExternalMemoryHandleTypeFlags = if cfg!(windows) {
    vk::ExternalMemoryHandleTypeFlags::OPAQUE_WIN32
} else {
    vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD
};

/// The Vulkan semaphore handle type this platform shares with CUDA.
pub const SEMAPHORE_HANDLE_TYPE: vk::ExternalSemaphoreHandleTypeFlags = if cfg!(windows) {
    vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_WIN32
} else {
    vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD
};

/// Checks that a descriptor is open before a driver is handed it, so that a descriptor
/// already consumed by an import gives [`Error::HandleNotOpen`] rather than undefined
/// behaviour. A descriptor that is not open is forgotten, never closed: its number may
/// already belong to someone else.
#[cfg(unix)]
pub fn check_open(handle: OwnedExternalHandle) -> Result<OwnedExternalHandle> {
    use std::os::fd::AsRawFd;
    let fd = handle.as_raw_fd();
    if let Err(reason) = descriptor_flags(fd) {
        std::mem::forget(handle);
        Err(Error::HandleNotOpen {
            handle: i64::from(fd),
            reason: reason.to_string(),
        })
    } else {
        Ok(handle)
    }
}

/// Whether `fd` is an open descriptor of this process.
#[cfg(unix)]
pub fn is_open(fd: std::os::fd::RawFd) -> bool {
    descriptor_flags(fd).is_ok()
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

/// Number of open file descriptors of this process (for leak checks in tests and benches).
#[cfg(target_os = "linux")]
pub fn open_fd_count() -> Result<usize> {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .map_err(|source| Error::Io {
            call: "read_dir(/proc/self/fd)",
            source,
        })
}
