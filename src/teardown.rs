//! How drops wait for the GPU: never without bound, and never N times the bound.
//!
//! Every drop that must wait for GPU work before it frees memory (a [`crate::SharedBuffer`]
//! behind a CUDA stream, a [`crate::StagingBuffer`] behind a copy, an imported semaphore
//! behind a pending wait, the [`crate::vulkan::VulkanContext`] behind its submissions) waits
//! through one [`DropBudget`]: the context's. The budget holds the one drop timeout
//! ([`DEFAULT_DROP_TIMEOUT`] unless [`crate::vulkan::VulkanContext::set_drop_timeout`] says
//! otherwise) and remembers what a drop gave up on:
//!
//! - a drop polls for its work with a short backoff, at most the timeout;
//! - when the work is not done by then, the drop logs an error and *parks* what the GPU may
//!   still touch (the memory, its mapping, the import) in the budget, with a *probe* that says
//!   when that work has finished: the budget is then **wedged**;
//! - while the budget is wedged, later drops do not wait at all: they check once, and what
//!   they would free is parked too (freeing CUDA memory synchronises with the whole device in
//!   the driver, so a free behind a stuck stream would hang);
//! - as soon as every probe says its work has finished (checked on each later drop, and by
//!   [`crate::vulkan::VulkanContext::is_wedged`]), everything parked is freed and the budget is
//!   no longer wedged; what is still parked when the budget itself goes is leaked for good.
//!
//! So a teardown in which the GPU never finishes costs one timeout in all, then leaks; a
//! teardown in which it finishes late gets everything back.
//!
//! **Abandon.** A Vulkan queue that still waits for a CUDA signal of this process keeps the
//! process from exiting: NVIDIA's driver tears the device down at exit and waits for its
//! queue (measured, H200, driver 580: a queue waiting for a value a 20 s kernel signals held
//! the exit for the whole kernel; with the wait released from the host the process exited
//! 1.1 s after teardown began, the kernel still running). So a drop that gives up runs its
//! *abandon* step ([`DropBudget::release_or_abandon`]): it releases, from the host, the queue
//! waits on timelines that only this process's CUDA imports signal, at exactly the value
//! waited for, so the abandoned queue drains (its work then runs unordered: it was abandoned)
//! and CUDA's late signal of that value changes nothing.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The drop timeout a context starts with: how long, in all, drops wait for GPU work before
/// they give up, log, and leak (see [`crate::vulkan::VulkanContext::set_drop_timeout`]).
pub const DEFAULT_DROP_TIMEOUT: Duration = Duration::from_secs(5);

/// Says whether the work a drop gave up on has finished (`true`), polled without blocking.
pub(crate) type Probe = Box<dyn FnMut() -> bool + Send>;

/// Whatever a drop could not free yet, freed by dropping it.
pub(crate) type Parked = Box<dyn Any + Send>;

/// What a drop that gives up runs (see the module docs): releases the queue's waits on what
/// this process's CUDA would signal.
pub(crate) type Abandon = Box<dyn FnOnce() + Send>;

/// The first pause between two polls; doubled up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_micros(20);
/// The longest pause between two polls.
const MAX_PAUSE: Duration = Duration::from_millis(2);

/// Something a drop parked: with a probe when its own work had not finished, without one when
/// it was only waiting for the budget to be unwedged.
struct Entry {
    probe: Option<Probe>,
    _parked: Option<Parked>,
}

/// The one drop timeout of a context and what its drops gave up on (see the module docs).
pub(crate) struct DropBudget {
    /// The timeout in nanoseconds (`u64::MAX`: none).
    timeout_ns: AtomicU64,
    entries: Mutex<Vec<Entry>>,
}

impl std::fmt::Debug for DropBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DropBudget")
            .field("timeout", &self.timeout())
            .field("parked", &self.lock().len())
            .finish()
    }
}

/// A duration in nanoseconds, `u64::MAX` for one too long to represent.
pub(crate) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl DropBudget {
    /// A budget with `timeout` and nothing parked.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout_ns: AtomicU64::new(duration_ns(timeout)),
            entries: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        // A poisoned lock only means a probe panicked; the list itself is intact.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The drop timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_nanos(self.timeout_ns.load(Ordering::Relaxed))
    }

    /// The drop timeout in nanoseconds, as [`crate::Error::Timeout`] reports it.
    pub fn timeout_ns(&self) -> u64 {
        self.timeout_ns.load(Ordering::Relaxed)
    }

    /// Sets the drop timeout (for drops that start after this).
    pub fn set_timeout(&self, timeout: Duration) {
        self.timeout_ns
            .store(duration_ns(timeout), Ordering::Relaxed);
    }

    /// Whether work some drop gave up on is still running. When it has all finished, frees
    /// everything parked (outside the lock: those drops may use the budget again) and says
    /// `false`.
    pub fn is_wedged(&self) -> bool {
        let released = {
            let mut entries = self.lock();
            if entries.is_empty() {
                return false;
            }
            let finished = entries
                .iter_mut()
                .all(|e| e.probe.as_mut().is_none_or(|probe| probe()));
            if !finished {
                return true;
            }
            std::mem::take(&mut *entries)
        };
        log::info!(
            "the GPU work that drops gave up on has finished: freeing the {} parked object(s)",
            released.len()
        );
        drop(released);
        false
    }

    /// How long a drop starting now may wait: the timeout, or nothing while wedged.
    pub fn allowance(&self) -> Duration {
        if self.is_wedged() {
            Duration::ZERO
        } else {
            self.timeout()
        }
    }

    /// Polls `done` with a growing pause (20 µs to 2 ms) until it says `true` or the
    /// [`Self::allowance`] has passed; `done` is always asked at least once. Says whether it
    /// finished.
    pub fn poll(&self, mut done: impl FnMut() -> bool) -> bool {
        let allowance = self.allowance();
        // A timeout too long to represent means no deadline.
        let deadline = Instant::now().checked_add(allowance);
        let mut pause = FIRST_PAUSE;
        loop {
            if done() {
                return true;
            }
            let now = Instant::now();
            let remaining = match deadline {
                Some(d) if now >= d => return false,
                Some(d) => d - now,
                None => MAX_PAUSE,
            };
            std::thread::sleep(pause.min(remaining));
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// Ends a drop that polled for its work: frees `parts` (by dropping them) when the work
    /// `finished` and nothing else is stuck; parks them until the stuck work has finished when
    /// something is; and when its own work did not finish, logs, and parks them with `probe`
    /// (made only then), wedging the budget.
    pub fn release<P: Send + 'static>(
        &self,
        what: &'static str,
        finished: bool,
        parts: P,
        probe: impl FnOnce() -> Probe,
    ) {
        self.release_or_abandon(what, finished, parts, probe, || None);
    }

    /// As [`Self::release`], and when its own work did not finish, runs `abandon`'s step (see
    /// the module docs) before parking.
    pub fn release_or_abandon<P: Send + 'static>(
        &self,
        what: &'static str,
        finished: bool,
        parts: P,
        probe: impl FnOnce() -> Probe,
        abandon: impl FnOnce() -> Option<Abandon>,
    ) {
        if finished {
            if !self.is_wedged() {
                drop(parts);
                return;
            }
            log::warn!(
                "{what} dropped while GPU work another drop gave up on is still running: \
                 parking its memory until that work finishes (freeing now could hang)"
            );
            self.park(None, Box::new(parts));
            return;
        }
        log::error!(
            "{what} dropped while GPU work still uses it after the drop timeout ({:?}): \
             leaking its memory until that work finishes (if ever) rather than free it in use \
             or hang; later drops on this context will not wait",
            self.timeout()
        );
        if let Some(step) = abandon() {
            step();
        }
        self.park(Some(probe()), Box::new(parts));
    }

    /// Parks `parts` until `probe` says the GPU work that uses them has finished, for a call
    /// that stopped waiting for its own work (a timeout the caller chose): logged as a
    /// warning, and the budget is wedged meanwhile as after a drop that gave up.
    pub fn park_until<P: Send + 'static>(&self, what: &'static str, parts: P, probe: Probe) {
        log::warn!(
            "{what} timed out with GPU work still using it: keeping what it uses alive until \
             that work finishes; drops on this context will not wait meanwhile"
        );
        self.park(Some(probe), Box::new(parts));
    }

    /// Records that a drop gave up on work `probe` watches, with nothing of its own to park
    /// (it leaked its handle itself): the budget is wedged until the probe says done.
    pub fn wedge(&self, probe: Probe) {
        self.lock().push(Entry {
            probe: Some(probe),
            _parked: None,
        });
    }

    fn park(&self, probe: Option<Probe>, parked: Parked) {
        self.lock().push(Entry {
            probe,
            _parked: Some(parked),
        });
    }

    /// Whether anything is parked (finished or not).
    #[cfg(test)]
    fn parked(&self) -> usize {
        self.lock().len()
    }
}

impl Drop for DropBudget {
    fn drop(&mut self) {
        let entries = std::mem::take(self.entries.get_mut().unwrap_or_else(|p| p.into_inner()));
        if entries.is_empty() {
            return;
        }
        let mut entries = entries;
        if entries
            .iter_mut()
            .all(|e| e.probe.as_mut().is_none_or(|probe| probe()))
        {
            drop(entries);
            return;
        }
        // Still running: what the GPU may touch must never be freed. Leak it for good.
        log::error!(
            "leaking {} object(s) whose GPU work never finished, for good",
            entries.len()
        );
        std::mem::forget(entries);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// Counts its drops.
    struct Counted(Arc<AtomicU64>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn flag_probe(flag: &Arc<AtomicBool>) -> Probe {
        let flag = flag.clone();
        Box::new(move || flag.load(Ordering::SeqCst))
    }

    #[test]
    fn finished_work_is_freed_at_once() {
        let budget = DropBudget::new(Duration::from_secs(1));
        let freed = Arc::new(AtomicU64::new(0));
        assert!(budget.poll(|| true));
        budget.release("x", true, Counted(freed.clone()), || unreachable!());
        assert_eq!(freed.load(Ordering::SeqCst), 1);
        assert!(!budget.is_wedged());
    }

    #[test]
    fn a_stuck_drop_waits_the_timeout_once_then_later_drops_do_not_wait() {
        let budget = DropBudget::new(Duration::from_millis(100));
        let stuck = Arc::new(AtomicBool::new(false));
        let freed = Arc::new(AtomicU64::new(0));
        let t = Instant::now();
        let finished = budget.poll(|| stuck.load(Ordering::SeqCst));
        assert!(!finished);
        assert!(t.elapsed() >= Duration::from_millis(100));
        budget.release("first", finished, Counted(freed.clone()), || {
            flag_probe(&stuck)
        });
        assert!(budget.is_wedged());
        // Ten more stuck drops: none waits.
        let t = Instant::now();
        for _ in 0..10 {
            let finished = budget.poll(|| stuck.load(Ordering::SeqCst));
            budget.release("next", finished, Counted(freed.clone()), || {
                flag_probe(&stuck)
            });
        }
        // A drop whose own work is done is parked, not freed, while wedged.
        budget.release("done", true, Counted(freed.clone()), || unreachable!());
        assert!(t.elapsed() < Duration::from_millis(50), "{:?}", t.elapsed());
        assert_eq!(freed.load(Ordering::SeqCst), 0);
        assert_eq!(budget.parked(), 12);
        // The work finishes: everything parked is freed, and drops wait again.
        stuck.store(true, Ordering::SeqCst);
        assert!(!budget.is_wedged());
        assert_eq!(freed.load(Ordering::SeqCst), 12);
        assert_eq!(budget.allowance(), Duration::from_millis(100));
    }

    #[test]
    fn what_never_finishes_is_leaked_when_the_budget_goes() {
        let freed = Arc::new(AtomicU64::new(0));
        {
            let budget = DropBudget::new(Duration::ZERO);
            let never = Arc::new(AtomicBool::new(false));
            budget.release("x", false, Counted(freed.clone()), || flag_probe(&never));
            budget.release("y", true, Counted(freed.clone()), || unreachable!());
        }
        assert_eq!(freed.load(Ordering::SeqCst), 0);
        {
            let budget = DropBudget::new(Duration::ZERO);
            let done = Arc::new(AtomicBool::new(false));
            budget.release("x", false, Counted(freed.clone()), || flag_probe(&done));
            done.store(true, Ordering::SeqCst);
        }
        assert_eq!(freed.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_wedge_without_parts_blocks_waits_until_its_probe_says_done() {
        let budget = DropBudget::new(Duration::from_secs(60));
        let done = Arc::new(AtomicBool::new(false));
        budget.wedge(flag_probe(&done));
        assert_eq!(budget.allowance(), Duration::ZERO);
        let t = Instant::now();
        assert!(!budget.poll(|| false));
        assert!(t.elapsed() < Duration::from_secs(1));
        done.store(true, Ordering::SeqCst);
        assert_eq!(budget.allowance(), Duration::from_secs(60));
    }

    #[test]
    fn abandon_runs_only_when_a_drop_gives_up() {
        let budget = DropBudget::new(Duration::ZERO);
        let ran = Arc::new(AtomicU64::new(0));
        let step = |ran: &Arc<AtomicU64>| {
            let ran = ran.clone();
            move || {
                Some(Box::new(move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                }) as Abandon)
            }
        };
        let stuck = Arc::new(AtomicBool::new(false));
        budget.release_or_abandon("done", true, (), || unreachable!(), step(&ran));
        assert_eq!(
            ran.load(Ordering::SeqCst),
            0,
            "finished work is not abandoned"
        );
        budget.release_or_abandon("stuck", false, (), || flag_probe(&stuck), step(&ran));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert!(budget.is_wedged());
        stuck.store(true, Ordering::SeqCst);
        assert!(!budget.is_wedged());
    }

    #[test]
    fn no_timeout_means_no_deadline() {
        let budget = DropBudget::new(Duration::MAX);
        assert_eq!(budget.timeout_ns(), u64::MAX);
        let mut n = 0;
        assert!(budget.poll(|| {
            n += 1;
            n == 3
        }));
    }
}
