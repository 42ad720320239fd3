//! The one process-wide lock around the Vulkan calls that enter the CUDA driver.
//!
//! Measured on NVIDIA's driver 580 (H100 and H200): `vkCreateDevice` of a device with the
//! `VK_NVX_binary_import` extensions enters `libcuda` and waits for a CUDA mutex, while a
//! thread inside `vkCreateCuModuleNVX` holds that mutex and waits for the Vulkan driver's own
//! lock. The two threads hang forever, and every thread behind the Vulkan loader's mutex with
//! them. No call of the pair may therefore run while another runs: cuvk takes this lock around
//! every such call it makes (device creation and destruction, CUDA module and function
//! creation and destruction in Vulkan queues), and code that makes those calls itself takes
//! it too ([`driver_lock`]). No per-frame call takes it (launches, submissions, semaphores).

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The lock itself: it guards no data, only the order of driver calls.
static DRIVER_LOCK: Mutex<()> = Mutex::new(());

thread_local! {
    /// How many [`DriverLockGuard`]s this thread holds (the lock is reentrant per thread, so a
    /// guarded call that ends up in another, e.g. a device dropped inside a guarded drop, does
    /// not deadlock on itself).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Holds the process-wide driver lock (see [`driver_lock`]) until dropped. Not `Send`: it is
/// released on the thread that took it.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct DriverLockGuard {
    /// The outermost guard of a thread holds the mutex; nested ones hold nothing.
    _held: Option<MutexGuard<'static, ()>>,
    /// `!Send` and `!Sync` even for nested guards (the depth is per thread).
    _thread: PhantomData<*const ()>,
}

impl std::fmt::Debug for DriverLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverLockGuard")
            .field("outermost", &self._held.is_some())
            .finish()
    }
}

/// Takes the process-wide lock that cuvk holds around every Vulkan call that may enter the
/// CUDA driver: `vkCreateDevice` / `vkDestroyDevice` of the devices it opens, adopts or
/// destroys, and `vkCreateCuModuleNVX`, `vkCreateCuFunctionNVX` and their destroy calls.
///
/// NVIDIA's driver 580 deadlocks when `vkCreateDevice` (of a device with the NVX extensions)
/// runs on one thread while `vkCreateCuModuleNVX` runs on another (a lock-order inversion
/// between its Vulkan and CUDA parts). An engine that creates or destroys Vulkan devices
/// itself while other threads may load CUDA modules through cuvk must hold this guard around
/// those calls (a wgpu `Adapter::request_device`, a Bevy render device created by
/// `RenderPlugin`, the last drop of such a device). Reentrant on one thread; blocks other
/// threads until the guard drops. Cheap: no per-frame cuvk call takes it.
///
/// ```no_run
/// # fn create_my_device() {}
/// let _driver = cuvk::vulkan::driver_lock(); // no cuvk module load runs meanwhile
/// create_my_device();
/// ```
pub fn driver_lock() -> DriverLockGuard {
    let depth = DEPTH.with(Cell::get);
    let held = if depth == 0 {
        // A poisoned lock only means a thread panicked while holding it; it guards no data.
        Some(DRIVER_LOCK.lock().unwrap_or_else(PoisonError::into_inner))
    } else {
        None
    };
    DEPTH.with(|d| d.set(depth.saturating_add(1)));
    DriverLockGuard {
        _held: held,
        _thread: PhantomData,
    }
}

impl Drop for DriverLockGuard {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn reentrant_on_one_thread_exclusive_across_threads() {
        let outer = driver_lock();
        let inner = driver_lock(); // would deadlock if not reentrant
        let entered = Arc::new(AtomicBool::new(false));
        let other = {
            let entered = entered.clone();
            std::thread::spawn(move || {
                let _g = driver_lock();
                entered.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        drop(inner);
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !entered.load(Ordering::SeqCst),
            "entered under the outer guard"
        );
        drop(outer);
        other.join().unwrap();
        assert!(entered.load(Ordering::SeqCst));
        // Released completely: a new outermost guard takes the mutex again.
        let again = driver_lock();
        assert!(again._held.is_some());
    }
}
