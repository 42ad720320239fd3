//! The one frame protocol's numbers, shared by the in-process [`crate::FramePacer`] (CUDA
//! writes, Vulkan reads, one process) and `ipc`'s `FrameServer`/`FrameClient` (a producer and
//! a viewer in two processes): frame N (from 1) is the value both timelines reach for it, it
//! uses data slot `N % K` and command slot `N % 2K`, and K is 1..=[`MAX_FRAMES_IN_FLIGHT`].

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{FrameStep, Result, SyncError};

/// The most frames in flight (K) a pacer, a frame server or a frame client takes.
pub const MAX_FRAMES_IN_FLIGHT: u32 = 16;

/// The next issuer's identity (a pacer, a frame server or a frame client); 0 is never used.
static NEXT_ISSUER_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh identity for something that issues frames.
pub(crate) fn next_issuer_id() -> u64 {
    NEXT_ISSUER_ID.fetch_add(1, Ordering::Relaxed)
}

/// Checks K against the one bound; K as a `u64` for the frame arithmetic.
pub(crate) fn check_frames_in_flight(frames_in_flight: u32) -> Result<u64> {
    if !(1..=MAX_FRAMES_IN_FLIGHT).contains(&frames_in_flight) {
        return Err(SyncError::FramesInFlight {
            requested: frames_in_flight,
            max: MAX_FRAMES_IN_FLIGHT,
        }
        .into());
    }
    Ok(u64::from(frames_in_flight))
}

/// One frame handed out by a [`crate::FramePacer`] (`begin_frame`), an `ipc::FrameServer`
/// (`next_frame`) or an `ipc::FrameClient` (`begin_frame`): its number, its slots, and the
/// identity of what issued it.
///
/// Only the issuer of a frame accepts it ([`SyncError::ForeignFrame`]), and only while it is
/// the issuer's current frame ([`SyncError::WrongFrame`]); a frame cannot be made or changed
/// outside cuvk. Code that builds on a pacer through its public API (as `cuvk`'s wgpu pacer
/// does) checks a frame with [`Frame::is_from`] or [`crate::FramePacer::validate_submit`]
/// before it relies on the frame's slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Frame {
    issuer: u64,
    number: u64,
    slot: usize,
    command_slot: usize,
    frames_in_flight: u64,
}

impl Frame {
    /// Frame `number` of an issuer with `frames_in_flight` (checked by the issuer) slots.
    pub(crate) fn issue(issuer: u64, number: u64, frames_in_flight: u64) -> Self {
        let k = frames_in_flight.max(1);
        Self {
            issuer,
            number,
            slot: (number % k) as usize,
            command_slot: (number % (2 * k)) as usize,
            frames_in_flight: k,
        }
    }
    /// Frame `number` in `slot`, chosen by its issuer (a fan-out publisher writes the slot its
    /// book frees, not `number % K`); its command slot as for every frame.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the publisher is Linux-only
    pub(crate) fn issue_at(issuer: u64, number: u64, slot: usize, frames_in_flight: u64) -> Self {
        Self {
            slot,
            ..Self::issue(issuer, number, frames_in_flight)
        }
    }
    /// Frame number, from 1, strictly increasing: the timeline value of this frame.
    pub fn number(&self) -> u64 {
        self.number
    }
    /// The data slot (index of the buffer or image) this frame writes and reads:
    /// `number % frames_in_flight` (a fan-out publisher's: the slot its book freed). Across
    /// processes, the index of the viewer's published buffer, in the order published.
    pub fn slot(&self) -> usize {
        self.slot
    }
    /// Which of the `2 * frames_in_flight` command slots this frame records into
    /// (`number % 2K`): every frame that used it before has completed when the frame is
    /// handed out, so its command buffer, and anything else kept per command slot (a
    /// readback buffer), is free.
    pub fn command_slot(&self) -> usize {
        self.command_slot
    }
    /// Frames in flight (K) of the issuer.
    pub fn frames_in_flight(&self) -> u32 {
        self.frames_in_flight as u32
    }
    /// The last frame that used this data slot (`number - K`), if any: what the writer waits
    /// for before it writes.
    pub fn previous_use(&self) -> Option<u64> {
        self.number
            .checked_sub(self.frames_in_flight)
            .filter(|&n| n > 0)
    }
    /// The last frame that can have used this command slot (`number - 2K`), if any. It has
    /// completed once the frame was handed out: what it wrote to memory kept per command slot
    /// (a readback) can be read now, and the memory reused. (A viewer skips frames: then the
    /// slot's last user may be older.)
    pub fn previous_command_use(&self) -> Option<u64> {
        self.number
            .checked_sub(2 * self.frames_in_flight)
            .filter(|&n| n > 0)
    }
    /// The identity of what issued it ([`crate::FramePacer::id`] for a pacer's; frame servers
    /// and clients accept only their own frames).
    pub fn issuer_id(&self) -> u64 {
        self.issuer
    }
}

/// `frame` checked to be from `issuer` ([`SyncError::ForeignFrame`]) and to be `current`, the
/// issuer's frame now, for `step` ([`SyncError::WrongFrame`], naming `shown` as the current
/// one where there is none): its number. The one check of the frame servers and clients.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // they are Linux-only (`ipc`)
pub(crate) fn check_current(
    frame: &Frame,
    issuer: u64,
    current: Option<u64>,
    shown: u64,
    step: FrameStep,
) -> Result<u64> {
    if frame.issuer != issuer {
        return Err(SyncError::ForeignFrame {
            frame: frame.number,
        }
        .into());
    }
    match current {
        Some(n) if n == frame.number => Ok(n),
        current => Err(SyncError::WrongFrame {
            frame: frame.number,
            current: current.unwrap_or(shown),
            reason: step,
        }
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_number() {
        let f = Frame::issue(7, 8, 3);
        assert_eq!((f.number(), f.slot(), f.command_slot()), (8, 2, 2));
        assert_eq!(
            (f.previous_use(), f.previous_command_use()),
            (Some(5), Some(2))
        );
        let first = Frame::issue(7, 1, 3);
        assert_eq!(
            (first.previous_use(), first.previous_command_use()),
            (None, None)
        );
        assert_eq!(Frame::issue(7, 3, 3).previous_use(), None);
    }

    #[test]
    fn one_bound_for_every_issuer() {
        assert_eq!(check_frames_in_flight(1).ok(), Some(1));
        assert_eq!(check_frames_in_flight(MAX_FRAMES_IN_FLIGHT).ok(), Some(16));
        for bad in [0, MAX_FRAMES_IN_FLIGHT + 1] {
            let e = check_frames_in_flight(bad).err().and_then(|e| e.rule());
            assert_eq!(e, Some(crate::Rule::SyncFramesInFlight));
        }
    }
}
