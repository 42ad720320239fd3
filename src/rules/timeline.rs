//! Bookkeeping for timeline semaphores signalled by several APIs: the highest value any of
//! them scheduled, shared by the Vulkan semaphore and its CUDA imports, so that a value that
//! does not strictly increase is refused before any driver sees it.
//!
//! A value is recorded only when the signal it guards was accepted: a refused call (a bad
//! value, or a driver error) changes no ledger. A submission that signals several
//! semaphores checks all of them before recording any ([`SignalLedger::signal_all`]).

use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Result, SyncError};

/// The highest signal value scheduled on one semaphore, by any API.
#[derive(Debug)]
pub struct SignalLedger {
    highest: Mutex<u64>,
    timeline: bool,
}

impl SignalLedger {
    /// A ledger for a timeline semaphore created with `initial`, or (with `timeline` false)
    /// for a binary semaphore, whose signals carry no value to check.
    pub fn new(initial: u64, timeline: bool) -> Arc<Self> {
        Arc::new(Self {
            highest: Mutex::new(initial),
            timeline,
        })
    }

    /// Whether it tracks a timeline.
    pub fn is_timeline(&self) -> bool {
        self.timeline
    }

    /// The highest value scheduled so far (the initial value before any signal).
    pub fn highest(&self) -> u64 {
        *self.lock()
    }

    fn lock(&self) -> MutexGuard<'_, u64> {
        // A poisoned lock only means a thread panicked mid-signal; the number is still right.
        self.highest.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `signal` (the driver call that schedules `value`) if `value` exceeds every value
    /// already scheduled, and records it only if `signal` succeeds. The ledger stays locked
    /// during the call, so concurrent signals are checked and scheduled in one order.
    pub fn signal<R>(&self, value: u64, signal: impl FnOnce() -> Result<R>) -> Result<R> {
        Self::signal_all(&[(self, value)], signal)
    }

    /// Checks that every value would be accepted now, recording nothing.
    pub fn check_all(entries: &[(&SignalLedger, u64)]) -> Result<()> {
        Self::lock_checked(entries).map(drop)
    }

    /// As [`Self::signal`] for one call that signals several semaphores: every value is checked
    /// before the call, and every value is recorded after it succeeds; otherwise none is.
    /// A semaphore may appear once.
    pub fn signal_all<R>(
        entries: &[(&SignalLedger, u64)],
        signal: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let mut guards = Self::lock_checked(entries)?;
        let out = signal()?;
        for (last, value, timeline) in &mut guards {
            if *timeline {
                **last = *value;
            }
        }
        Ok(out)
    }

    /// Locks every ledger (in address order, so two calls over the same semaphores cannot
    /// deadlock) and checks every value against it.
    fn lock_checked<'a>(
        entries: &[(&'a SignalLedger, u64)],
    ) -> Result<Vec<(MutexGuard<'a, u64>, u64, bool)>> {
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_by_key(|&i| entries[i].0 as *const SignalLedger as usize);
        if order
            .windows(2)
            .any(|w| std::ptr::eq(entries[w[0]].0, entries[w[1]].0))
        {
            return Err(SyncError::SignalledTwice.into());
        }
        let guards: Vec<(MutexGuard<'a, u64>, u64, bool)> = order
            .iter()
            .map(|&i| (entries[i].0.lock(), entries[i].1, entries[i].0.timeline))
            .collect();
        for (last, value, timeline) in &guards {
            if *timeline && *value <= **last {
                return Err(SyncError::TimelineNotIncreasing {
                    value: *value,
                    last: **last,
                }
                .into());
            }
        }
        Ok(guards)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn values_must_increase_and_refusals_change_nothing() {
        let a = SignalLedger::new(0, true);
        let b = SignalLedger::new(5, true);
        a.signal(1, || Ok(())).unwrap();
        assert!(matches!(
            a.signal(1, || Ok(())),
            Err(Error::Sync(SyncError::TimelineNotIncreasing {
                value: 1,
                last: 1
            }))
        ));
        // One bad value in a batch: neither ledger moves.
        let r = SignalLedger::signal_all(&[(&a, 2), (&b, 5)], || Ok(()));
        assert!(matches!(
            r,
            Err(Error::Sync(SyncError::TimelineNotIncreasing {
                value: 5,
                last: 5
            }))
        ));
        assert_eq!((a.highest(), b.highest()), (1, 5));
        // A driver error: nothing recorded either.
        let r: Result<()> =
            SignalLedger::signal_all(&[(&a, 2), (&b, 6)], || Err(Error::CudaUnavailable));
        assert!(r.is_err());
        assert_eq!((a.highest(), b.highest()), (1, 5));
        SignalLedger::signal_all(&[(&a, 2), (&b, 6)], || Ok(())).unwrap();
        assert_eq!((a.highest(), b.highest()), (2, 6));
    }

    #[test]
    fn duplicates_are_refused_and_binary_is_unchecked() {
        let a = SignalLedger::new(0, true);
        assert!(SignalLedger::signal_all(&[(&a, 1), (&a, 2)], || Ok(())).is_err());
        assert_eq!(a.highest(), 0);
        let bin = SignalLedger::new(0, false);
        bin.signal(0, || Ok(())).unwrap();
        bin.signal(0, || Ok(())).unwrap();
    }
}
