//! Bookkeeping for timeline semaphores signalled by several APIs: the highest value any of
//! them scheduled, shared by the Vulkan semaphore and its CUDA imports, so that a value that
//! does not strictly increase is refused before any driver sees it.
//!
//! A value is recorded only when the signal it guards was accepted: a refused call (a bad
//! value, or a driver error) changes no ledger. A submission that signals several
//! semaphores checks all of them before recording any ([`SignalLedger::signal_all`]). A wait
//! can be checked against the ledger too ([`SignalLedger::check_scheduled`]): a wait for a
//! value no signal was scheduled for may wait forever.
//!
//! [`FrameBook`] is the frame pacer's state machine on top of its three ledgers: which frame
//! is current, and which step it may take.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{FrameStep, Result, SyncError};

/// The highest signal value scheduled on one semaphore, by any API.
#[derive(Debug)]
pub struct SignalLedger {
    marks: Mutex<Scheduled>,
    /// The highest value known to have executed (host signals, completed host waits, queue
    /// submissions known complete): no query of the semaphore is needed to know that a signal
    /// up to it is not pending.
    reached: AtomicU64,
    /// The highest value a GPU wait was enqueued for (a queue submission or a CUDA stream):
    /// what a semaphore that goes away must reach for nothing to wait on it forever.
    waited: AtomicU64,
    timeline: bool,
}

/// What a ledger's lock guards: the highest value scheduled by anyone, and by this process.
#[derive(Debug, Clone, Copy)]
struct Scheduled {
    /// The highest value scheduled, here or (noted) by another process.
    highest: u64,
    /// The highest value this process scheduled (its queues, its CUDA streams, its host).
    local: u64,
}

impl SignalLedger {
    /// A ledger for a timeline semaphore created with `initial`, or (with `timeline` false)
    /// for a binary semaphore, whose signals carry no value to check.
    pub(crate) fn new(initial: u64, timeline: bool) -> Arc<Self> {
        Arc::new(Self {
            marks: Mutex::new(Scheduled {
                highest: initial,
                local: initial,
            }),
            reached: AtomicU64::new(initial),
            waited: AtomicU64::new(initial),
            timeline,
        })
    }

    /// Whether it tracks a timeline.
    pub fn is_timeline(&self) -> bool {
        self.timeline
    }

    /// The highest value scheduled so far (the initial value before any signal).
    pub fn highest(&self) -> u64 {
        self.lock().highest
    }

    /// The highest value known to have executed: the counter is at least this.
    pub fn reached(&self) -> u64 {
        self.reached.load(Ordering::Acquire)
    }

    /// Notes that the semaphore was seen at `value` or above (a completed host wait, a queue
    /// submission that waited for or signalled `value` known complete).
    pub(crate) fn note_reached(&self, value: u64) {
        self.reached.fetch_max(value, Ordering::AcqRel);
    }

    /// Notes that a GPU wait for `value` was enqueued (by any API).
    pub(crate) fn note_wait(&self, value: u64) {
        self.waited.fetch_max(value, Ordering::AcqRel);
    }

    /// Notes that another process scheduled `value` (its notice said so): waits for it may be
    /// enqueued from now on.
    pub(crate) fn note_remote(&self, value: u64) {
        let mut m = self.lock();
        m.highest = m.highest.max(value);
    }

    /// Runs `signal` (a host signal) for `value` above every value scheduled, for a semaphore
    /// whose other signaller is gone: the values it announced ([`Self::note_remote`]) will
    /// never be signalled, so they are not waited for; but every signal *this* process
    /// scheduled must have executed (`reached` asks, as in [`Self::signal_now`]), else
    /// [`SyncError::SignalPending`].
    pub(crate) fn signal_over<R>(
        &self,
        value: u64,
        reached: impl FnOnce(u64) -> Result<bool>,
        signal: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let mut m = self.lock();
        if value <= m.highest {
            return Err(SyncError::TimelineNotIncreasing {
                value,
                last: m.highest,
            }
            .into());
        }
        self.check_executed(value, m.local, reached)?;
        let r = signal()?;
        *m = Scheduled {
            highest: value,
            local: value,
        };
        self.note_reached(value);
        Ok(r)
    }

    /// [`SyncError::SignalPending`] unless the signal of `pending` has executed: known
    /// ([`Self::reached`]) or, failing that, `reached(pending)` says so.
    fn check_executed(
        &self,
        value: u64,
        pending: u64,
        reached: impl FnOnce(u64) -> Result<bool>,
    ) -> Result<()> {
        if self.reached() >= pending || reached(pending)? {
            self.note_reached(pending);
            return Ok(());
        }
        Err(SyncError::SignalPending {
            value,
            pending,
            current: self.reached(),
        }
        .into())
    }

    /// The highest value a GPU wait was enqueued for (the initial value before any).
    pub fn highest_wait(&self) -> u64 {
        self.waited.load(Ordering::Acquire)
    }

    fn lock(&self) -> MutexGuard<'_, Scheduled> {
        // A poisoned lock only means a thread panicked mid-signal; the numbers are still right.
        self.marks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `signal` (the driver call that schedules `value`) if `value` exceeds every value
    /// already scheduled, and records it only if `signal` succeeds. The ledger stays locked
    /// during the call, so concurrent signals are checked and scheduled in one order.
    pub(crate) fn signal<R>(&self, value: u64, signal: impl FnOnce() -> Result<R>) -> Result<R> {
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

    /// As [`Self::signal`] for a signal that takes effect at once (a host signal): refused
    /// also while a signal already scheduled has not executed ([`SyncError::SignalPending`],
    /// its `current` the highest value known reached), since that signal would then run after
    /// the higher value. Known executed: up to [`Self::reached`]; above it, `reached(value)`
    /// is asked (under the ledger's lock) whether the semaphore has got there.
    pub(crate) fn signal_now<R>(
        &self,
        value: u64,
        reached: impl FnOnce(u64) -> Result<bool>,
        signal: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let mut m = self.lock();
        if self.timeline {
            if value <= m.highest {
                return Err(SyncError::TimelineNotIncreasing {
                    value,
                    last: m.highest,
                }
                .into());
            }
            self.check_executed(value, m.highest, reached)?;
        }
        let out = signal()?;
        if self.timeline {
            *m = Scheduled {
                highest: value,
                local: value,
            };
            self.note_reached(value);
        }
        Ok(out)
    }

    /// Checks that every value would be accepted now, recording nothing.
    pub(crate) fn check_all(entries: &[(&SignalLedger, u64)]) -> Result<()> {
        Self::lock_checked(entries).map(drop)
    }

    /// As [`Self::signal`] for one call that signals several semaphores: every value is checked
    /// before the call, and every value is recorded after it succeeds; otherwise none is.
    /// A semaphore may appear once.
    pub(crate) fn signal_all<R>(
        entries: &[(&SignalLedger, u64)],
        signal: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let mut guards = Self::lock_checked(entries)?;
        let out = signal()?;
        for (last, value, timeline) in &mut guards {
            if *timeline {
                **last = Scheduled {
                    highest: *value,
                    local: *value,
                };
            }
        }
        Ok(out)
    }

    /// Locks every ledger (in address order, so two calls over the same semaphores cannot
    /// deadlock) and checks every value against it.
    fn lock_checked<'a>(
        entries: &[(&'a SignalLedger, u64)],
    ) -> Result<Vec<(MutexGuard<'a, Scheduled>, u64, bool)>> {
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_by_key(|&i| entries[i].0 as *const SignalLedger as usize);
        if order
            .windows(2)
            .any(|w| std::ptr::eq(entries[w[0]].0, entries[w[1]].0))
        {
            return Err(SyncError::SignalledTwice.into());
        }
        let guards: Vec<(MutexGuard<'a, Scheduled>, u64, bool)> = order
            .iter()
            .map(|&i| (entries[i].0.lock(), entries[i].1, entries[i].0.timeline))
            .collect();
        for (last, value, timeline) in &guards {
            if *timeline && *value <= last.highest {
                return Err(SyncError::TimelineNotIncreasing {
                    value: *value,
                    last: last.highest,
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
#[allow(clippy::unwrap_used, clippy::panic)]
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
    fn waits_only_for_scheduled_values() {
        let a = SignalLedger::new(2, true);
        a.check_scheduled(0).unwrap();
        a.check_scheduled(2).unwrap();
        assert!(matches!(
            a.check_scheduled(3),
            Err(Error::Sync(SyncError::WaitNeverSignalled {
                value: 3,
                scheduled: 2
            }))
        ));
        a.signal(3, || Ok(())).unwrap();
        a.check_scheduled(3).unwrap();
        SignalLedger::new(0, false).check_scheduled(9).unwrap();
    }

    #[test]
    fn a_signal_at_once_waits_for_no_pending_signal() {
        let a = SignalLedger::new(0, true);
        a.note_reached(1);
        a.signal(3, || Ok(())).unwrap(); // scheduled on a queue, not executed
        assert!(matches!(
            a.signal_now(4, |v| Ok(1 >= v), || Ok(())),
            Err(Error::Sync(SyncError::SignalPending {
                value: 4,
                pending: 3,
                current: 1
            }))
        ));
        assert!(matches!(
            a.signal_now(3, |v| Ok(3 >= v), || Ok(())),
            Err(Error::Sync(SyncError::TimelineNotIncreasing {
                value: 3,
                last: 3
            }))
        ));
        assert_eq!(a.highest(), 3);
        // Asked once; from then on known (no query of the semaphore).
        a.signal_now(4, |v| Ok(3 >= v), || Ok(())).unwrap();
        assert_eq!((a.highest(), a.reached()), (4, 4));
        a.signal_now(5, |_| panic!("4 is known reached"), || Ok(()))
            .unwrap();
    }

    #[test]
    fn a_release_after_a_lost_peer_waits_only_for_this_process() {
        let a = SignalLedger::new(0, true);
        a.signal(2, || Ok(())).unwrap(); // ours, on a queue
        a.note_remote(7); // the peer announced 7 and died: never signalled
        assert!(matches!(
            a.signal_over(9, |_| Ok(false), || Ok(())),
            Err(Error::Sync(SyncError::SignalPending {
                value: 9,
                pending: 2,
                current: 0
            }))
        ));
        assert!(matches!(
            a.signal_over(7, |_| Ok(true), || Ok(())),
            Err(Error::Sync(SyncError::TimelineNotIncreasing {
                value: 7,
                last: 7
            }))
        ));
        // Our 2 has run: released above the peer's 7 without waiting for it.
        a.signal_over(8, |v| Ok(v == 2), || Ok(())).unwrap();
        assert_eq!((a.highest(), a.reached()), (8, 8));
    }

    /// A pacer's timelines, driven the way the pacer drives them.
    struct Sim {
        book: FrameBook,
        marks: PacerMarks,
    }

    impl Sim {
        fn new(k: u64) -> Self {
            Self {
                book: FrameBook::new(7, k),
                marks: PacerMarks::default(),
            }
        }
        fn begin(&mut self) -> Result<u64> {
            let (n, reuse) = self.book.plan_begin(self.marks)?;
            if let Some(prev) = reuse {
                assert!(self.marks.frames_complete >= prev);
            }
            self.book.begun(n);
            Ok(n)
        }
        fn step(&mut self, frame: u64, step: FrameStep) -> Result<()> {
            self.book.check(7, frame, step, self.marks)?;
            match step {
                FrameStep::CudaAcquire => self.book.acquired(),
                FrameStep::CudaRelease => self.marks.cuda_done = frame,
                FrameStep::Submit | FrameStep::MarkSubmitted => {
                    self.marks.vulkan_done = frame;
                    self.marks.frames_complete = frame;
                }
                _ => {}
            }
            Ok(())
        }
        fn frame(&mut self) -> u64 {
            let n = self.begin().unwrap();
            for step in [
                FrameStep::RecordCommands,
                FrameStep::CudaAcquire,
                FrameStep::CudaAcquire, // a second stream
                FrameStep::CudaRelease,
                FrameStep::RecordCommands,
                FrameStep::Submit,
            ] {
                self.step(n, step).unwrap();
            }
            n
        }
    }

    fn sync_err(r: Result<impl std::fmt::Debug>) -> SyncError {
        match r {
            Err(Error::Sync(e)) => e,
            other => panic!("expected a sync refusal, got {other:?}"),
        }
    }

    #[test]
    fn frames_go_through_their_steps_in_order() {
        for k in 1..=3 {
            let mut sim = Sim::new(k);
            for expected in 1..=3 * k {
                assert_eq!(sim.frame(), expected);
            }
        }
    }

    #[test]
    fn another_pacers_frame_is_refused_at_every_step() {
        let mut sim = Sim::new(2);
        let n = sim.begin().unwrap();
        for step in [
            FrameStep::CudaAcquire,
            FrameStep::CudaRelease,
            FrameStep::Submit,
            FrameStep::MarkSubmitted,
            FrameStep::RecordCommands,
        ] {
            assert_eq!(
                sync_err(sim.book.check(8, n, step, sim.marks)),
                SyncError::ForeignFrame { frame: n }
            );
        }
        // Nothing changed: the frame proceeds.
        sim.step(n, FrameStep::CudaAcquire).unwrap();
        sim.step(n, FrameStep::CudaRelease).unwrap();
        sim.step(n, FrameStep::Submit).unwrap();
        assert_eq!(sim.frame(), 2);
    }

    #[test]
    fn a_stale_frame_is_refused_at_every_step() {
        let mut sim = Sim::new(1);
        let old = sim.frame();
        let n = sim.begin().unwrap();
        for step in [
            FrameStep::CudaAcquire,
            FrameStep::CudaRelease,
            FrameStep::Submit,
            FrameStep::MarkSubmitted,
            FrameStep::RecordCommands,
        ] {
            assert_eq!(
                sync_err(sim.step(old, step)),
                SyncError::WrongFrame {
                    frame: old,
                    current: n,
                    reason: step
                }
            );
        }
        for step in [
            FrameStep::CudaAcquire,
            FrameStep::CudaRelease,
            FrameStep::Submit,
        ] {
            sim.step(n, step).unwrap();
        }
        assert_eq!(sim.frame(), 3);
    }

    #[test]
    fn steps_out_of_order_are_refused_and_change_nothing() {
        let mut sim = Sim::new(2);
        let n = sim.begin().unwrap();
        // Release before acquire: CUDA would write a slot Vulkan may still read.
        assert_eq!(
            sync_err(sim.step(n, FrameStep::CudaRelease)),
            SyncError::FrameOutOfOrder {
                frame: n,
                last_step: FrameStep::Begin,
                reason: FrameStep::CudaRelease
            }
        );
        // Submission before release: the GPU would wait for a value nobody schedules.
        for step in [FrameStep::Submit, FrameStep::MarkSubmitted] {
            assert_eq!(
                sync_err(sim.step(n, step)),
                SyncError::WaitNeverSignalled {
                    value: n,
                    scheduled: 0
                }
            );
        }
        // The next frame before this one is submitted.
        assert_eq!(
            sync_err(sim.begin()),
            SyncError::FrameOutOfOrder {
                frame: n,
                last_step: FrameStep::Begin,
                reason: FrameStep::Begin
            }
        );
        sim.step(n, FrameStep::CudaAcquire).unwrap();
        assert_eq!(
            sync_err(sim.step(n, FrameStep::Submit)),
            SyncError::WaitNeverSignalled {
                value: n,
                scheduled: 0
            }
        );
        sim.step(n, FrameStep::CudaRelease).unwrap();
        // Acquire or release again after the release.
        for step in [FrameStep::CudaAcquire, FrameStep::CudaRelease] {
            assert_eq!(
                sync_err(sim.step(n, step)),
                SyncError::FrameOutOfOrder {
                    frame: n,
                    last_step: FrameStep::CudaRelease,
                    reason: step
                }
            );
        }
        assert_eq!(
            sync_err(sim.begin()),
            SyncError::FrameOutOfOrder {
                frame: n,
                last_step: FrameStep::CudaRelease,
                reason: FrameStep::Begin
            }
        );
        sim.step(n, FrameStep::Submit).unwrap();
        // Submitted: a second submission, a mark, or re-recording its commands.
        for step in [
            FrameStep::Submit,
            FrameStep::MarkSubmitted,
            FrameStep::RecordCommands,
            FrameStep::CudaAcquire,
        ] {
            assert_eq!(
                sync_err(sim.step(n, step)),
                SyncError::FrameOutOfOrder {
                    frame: n,
                    last_step: FrameStep::Submit,
                    reason: step
                }
            );
        }
        // Nothing was recorded by the refusals: three more frames run.
        assert_eq!(sim.frame(), 2);
        assert_eq!(sim.frame(), 3);
        assert_eq!(sim.frame(), 4);
    }

    #[test]
    fn releases_and_submissions_made_another_way_count() {
        // A wgpu submission (or a raw one) that signals the pacer's timelines records them in
        // the ledgers: the book reads the state from there.
        let mut sim = Sim::new(1);
        let n = sim.begin().unwrap();
        sim.step(n, FrameStep::CudaAcquire).unwrap();
        sim.marks.cuda_done = n;
        sim.marks.vulkan_done = n;
        sim.marks.frames_complete = n;
        assert_eq!(sim.begin().unwrap(), 2);
    }

    #[test]
    fn an_acquire_whose_slot_was_never_submitted_is_refused() {
        // Not reachable through the pacer (a frame begins only after the previous one is
        // submitted), but the check stands on its own: frame 3 at K = 1 waits for frame 2.
        let mut book = FrameBook::new(1, 1);
        book.begun(3);
        let marks = PacerMarks {
            cuda_done: 1,
            vulkan_done: 1,
            frames_complete: 1,
        };
        assert_eq!(
            sync_err(book.check(1, 3, FrameStep::CudaAcquire, marks)),
            SyncError::WaitNeverSignalled {
                value: 2,
                scheduled: 1
            }
        );
        assert_eq!(book.previous_use(3), Some(2));
        assert_eq!(book.previous_use(1), None);
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
