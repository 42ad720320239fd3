//! Bookkeeping for timeline semaphores signalled by several APIs: the highest value any of
//! them scheduled, shared by the Vulkan semaphore and its CUDA imports, so that a value that
//! does not strictly increase is refused before any driver sees it.
//!
//! A value is recorded only when the signal it guards was accepted: a refused call (a bad
//! value, or a driver error) changes no ledger. A submission that signals several
//! semaphores checks all of them before recording any ([`SignalLedger::signal_all`]).

use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{FrameStep, Result, SyncError};

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

    /// Checks that a wait for `value` will be satisfied by a signal already scheduled (the
    /// highest scheduled value is at least `value`): a wait on anything higher could wait
    /// forever ([`SyncError::WaitNeverSignalled`]). Binary semaphores carry no value: always
    /// accepted.
    pub fn check_scheduled(&self, value: u64) -> Result<()> {
        let scheduled = self.highest();
        if self.timeline && value > scheduled {
            return Err(SyncError::WaitNeverSignalled { value, scheduled }.into());
        }
        Ok(())
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

/// The highest values scheduled on a frame pacer's three timelines (read from their ledgers):
/// what the GPU will reach, whoever scheduled it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PacerMarks {
    /// `cuda_done`: the last frame CUDA's release was enqueued for.
    pub cuda_done: u64,
    /// `vulkan_done`: the last frame a Vulkan submission signals.
    pub vulkan_done: u64,
    /// `frames_complete`: the host-side twin of `vulkan_done`.
    pub frames_complete: u64,
}

/// The state machine of a frame pacer's current frame: begin → CUDA acquire (on each stream
/// that writes the frame) → CUDA release → Vulkan submission → the next begin. Only the frame
/// begun last can take a step; a step is allowed only when every wait it enqueues is for a
/// value a submission already scheduled (read from the ledgers, [`PacerMarks`]), so no safe
/// call makes the GPU or the host wait for a value nobody will signal.
///
/// Released and submitted are read from the ledgers, not remembered here: a release or a
/// submission made another way (a wgpu submission, a raw `submit_with_semaphores`) counts as
/// long as it signalled the pacer's timelines.
#[derive(Debug, Clone)]
pub(crate) struct FrameBook {
    pacer: u64,
    frames_in_flight: u64,
    /// The frame begun last (0 before the first).
    current: u64,
    /// Whether CUDA acquired the current frame (on some stream).
    acquired: bool,
}

/// Where the current frame stands, as the last step it went through.
fn last_step(book: &FrameBook, marks: PacerMarks) -> FrameStep {
    let n = book.current;
    if marks.vulkan_done >= n && marks.frames_complete >= n {
        FrameStep::Submit
    } else if marks.cuda_done >= n {
        FrameStep::CudaRelease
    } else if book.acquired {
        FrameStep::CudaAcquire
    } else {
        FrameStep::Begin
    }
}

impl FrameBook {
    /// The book of pacer `pacer` (its unique id) with `frames_in_flight` (K, at least 1) slots.
    pub(crate) fn new(pacer: u64, frames_in_flight: u64) -> Self {
        Self {
            pacer,
            frames_in_flight: frames_in_flight.max(1),
            current: 0,
            acquired: false,
        }
    }

    /// The frame begun last (0 before the first).
    pub(crate) fn current(&self) -> u64 {
        self.current
    }

    /// The next frame's number, and the frame the host must see complete before it (`N - 2K`,
    /// the last user of its command slot), if any. Refused while the current frame is not
    /// submitted, or (never for the pacer's own submissions) if that frame's completion was
    /// never scheduled. Changes nothing: [`Self::begun`] commits.
    pub(crate) fn plan_begin(&self, marks: PacerMarks) -> Result<(u64, Option<u64>)> {
        if self.current > 0 {
            let last = last_step(self, marks);
            if last != FrameStep::Submit {
                return Err(SyncError::FrameOutOfOrder {
                    frame: self.current,
                    last_step: last,
                    reason: FrameStep::Begin,
                }
                .into());
            }
        }
        let next = self.current.saturating_add(1);
        let reuse = next
            .checked_sub(2 * self.frames_in_flight)
            .filter(|&n| n > 0);
        if let Some(prev) = reuse {
            if marks.frames_complete < prev {
                return Err(SyncError::WaitNeverSignalled {
                    value: prev,
                    scheduled: marks.frames_complete,
                }
                .into());
            }
        }
        Ok((next, reuse))
    }

    /// Frame `number` (from [`Self::plan_begin`]) was handed out.
    pub(crate) fn begun(&mut self, number: u64) {
        self.current = number;
        self.acquired = false;
    }

    /// CUDA acquired the current frame (its wait was enqueued).
    pub(crate) fn acquired(&mut self) {
        self.acquired = true;
    }

    /// Checks that frame `frame` of pacer `pacer` may take `step` now: it must be this
    /// pacer's ([`SyncError::ForeignFrame`]), the current frame ([`SyncError::WrongFrame`]),
    /// in a state that allows the step ([`SyncError::FrameOutOfOrder`]), and every wait the
    /// step enqueues must be for a value already scheduled ([`SyncError::WaitNeverSignalled`]).
    pub(crate) fn check(
        &self,
        pacer: u64,
        frame: u64,
        step: FrameStep,
        marks: PacerMarks,
    ) -> Result<()> {
        if pacer != self.pacer {
            return Err(SyncError::ForeignFrame { frame }.into());
        }
        if frame != self.current {
            return Err(SyncError::WrongFrame {
                frame,
                current: self.current,
                reason: step,
            }
            .into());
        }
        let last = last_step(self, marks);
        let out_of_order = || -> Result<()> {
            Err(SyncError::FrameOutOfOrder {
                frame,
                last_step: last,
                reason: step,
            }
            .into())
        };
        match (step, last) {
            (FrameStep::CudaAcquire, FrameStep::Begin | FrameStep::CudaAcquire) => {
                // CUDA waits for `vulkan_done >= N - K`, the slot's previous reader.
                match self.previous_use(frame) {
                    Some(prev) if marks.vulkan_done < prev => Err(SyncError::WaitNeverSignalled {
                        value: prev,
                        scheduled: marks.vulkan_done,
                    }
                    .into()),
                    _ => Ok(()),
                }
            }
            (FrameStep::CudaRelease, FrameStep::CudaAcquire) => Ok(()),
            (FrameStep::Submit | FrameStep::MarkSubmitted, FrameStep::CudaRelease) => Ok(()),
            // The submission would wait for `cuda_done >= N`, which nothing scheduled.
            (
                FrameStep::Submit | FrameStep::MarkSubmitted,
                FrameStep::Begin | FrameStep::CudaAcquire,
            ) => Err(SyncError::WaitNeverSignalled {
                value: frame,
                scheduled: marks.cuda_done,
            }
            .into()),
            (FrameStep::RecordCommands, l) if l != FrameStep::Submit => Ok(()),
            _ => out_of_order(),
        }
    }

    /// The frame that last used `frame`'s slot (`frame - K`), if any.
    pub(crate) fn previous_use(&self, frame: u64) -> Option<u64> {
        frame.checked_sub(self.frames_in_flight).filter(|&n| n > 0)
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
