//! The fan-out book: one publisher writes frames into K slots it owns, any number of consumers
//! read them, and nobody waits for anybody on the host. Pure (no GPU, no socket), so every rule
//! is property-tested; the publisher's protocol (`ipc`) keeps one book and does what it says.
//!
//! - **Holds.** A consumer reads a frame by holding it: [`SlotBook::hold`] gives it the newest
//!   frame (or, for a lossless consumer, the next one it has not read) and pins that slot. It
//!   holds one frame at a time. [`SlotBook::release`] ends the hold with the value the
//!   consumer's read timeline reaches when its GPU read of the slot is done (scheduled, not
//!   necessarily done): the publisher's next write of that slot waits for it **on the GPU**.
//! - **Writes.** [`SlotBook::begin_write`] picks a slot that no consumer holds and that is not
//!   the newest frame (new holds take that one), the least recently written first, and lists
//!   the GPU waits the write needs (reads released but perhaps still running). With C
//!   latest-frame consumers, K ≥ C + 2 always leaves one: [`slots_for`].
//! - **Lossless consumers** ([`Delivery::EveryFrame`]) also own every frame newer than the
//!   last they read: a slot holding one is not free. A write that finds no free slot because
//!   of them names them ([`Blocked::Lossless`]); the publisher waits for them at most their
//!   timeout, then [`SlotBook::demote`]s them to latest-frame (and tells them).
//! - **Departures.** [`SlotBook::remove`] forgets a consumer (closed, killed): its hold ends,
//!   and the highest read value it was ever given to reach is returned — the publisher signals
//!   the consumer's read timeline past it (it owns it), so no GPU wait on a dead consumer
//!   stays pending.

// The publisher that keeps this book (issue 37) lands next; until then only the tests use it.
#![cfg_attr(not(test), allow(dead_code))]

use std::collections::BTreeMap;

/// How a consumer takes frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Delivery {
    /// The newest frame at each hold; frames in between are skipped. Never slows the
    /// publisher.
    Latest,
    /// Every frame, in order; the publisher waits for the consumer (bounded) when it falls
    /// behind by more than the free slots.
    EveryFrame,
}

/// A consumer's id in the book (the publisher's connection number).
pub(crate) type ConsumerId = u64;

/// A frame a consumer holds: read it after its GPU wait for `written >= frame`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    /// The frame's number (the value of the publisher's `written` timeline for it).
    pub frame: u64,
    /// The slot it is in.
    pub slot: usize,
    /// The value the consumer's read timeline must reach when its read is done: one more
    /// than its last, so every hold's end is a distinct value.
    pub read_value: u64,
}

/// A write the publisher may start: into `slot`, as frame `frame`, once every consumer read
/// timeline in `gpu_waits` reached its value (enqueued as GPU waits, never host waits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WritePlan {
    /// The slot to write.
    pub slot: usize,
    /// The frame number it becomes.
    pub frame: u64,
    /// `(consumer, value)`: reads of this slot released but maybe still running.
    pub gpu_waits: Vec<(ConsumerId, u64)>,
}

/// Why no slot is free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// Lossless consumers that have not read frames still in the slots.
    Lossless(Vec<ConsumerId>),
    /// Every slot is held or newest: K is too small for the consumers holding.
    Exhausted {
        /// Slots (K).
        slots: usize,
        /// Consumers holding a frame now.
        holding: usize,
    },
}

/// Why a hold or release was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HoldRefused {
    /// Nothing written yet (or, lossless, nothing new since its last read).
    NothingNew,
    /// The consumer already holds a frame: one at a time.
    AlreadyHolding {
        /// The frame it holds.
        frame: u64,
    },
    /// No such consumer, or a release without a hold, or of another frame.
    NotHeld,
}

#[derive(Debug, Clone, Default)]
struct Slot {
    /// The frame in it (0: never written).
    frame: u64,
    /// Consumers holding it.
    holders: u32,
    /// Reads released since its last write: `(consumer, read value)`.
    released: Vec<(ConsumerId, u64)>,
}

#[derive(Debug, Clone)]
struct Consumer {
    delivery: Delivery,
    hold: Option<Hold>,
    /// The last read value given out (its read timeline's next value is this + 1).
    read_value: u64,
    /// The newest frame it held (lossless: it owns every frame after this).
    last_frame: u64,
}

/// The publisher's book of slots and consumers.
#[derive(Debug, Clone)]
pub(crate) struct SlotBook {
    slots: Vec<Slot>,
    /// The newest frame published and its slot.
    newest: Option<(u64, usize)>,
    /// A write begun and not yet published.
    writing: Option<(u64, usize)>,
    /// Frames begun so far.
    frames: u64,
    consumers: BTreeMap<ConsumerId, Consumer>,
}

/// The slots K that `consumers` latest-frame consumers need so a write never finds every slot
/// taken: one held by each, the newest, and the one being written.
pub(crate) fn slots_for(consumers: usize) -> usize {
    consumers + 2
}

impl SlotBook {
    /// A book of `slots` (K ≥ 1) empty slots.
    pub(crate) fn new(slots: usize) -> Self {
        Self {
            slots: vec![Slot::default(); slots.max(1)],
            newest: None,
            writing: None,
            frames: 0,
            consumers: BTreeMap::new(),
        }
    }

    /// Adds a consumer (a new connection id).
    pub(crate) fn add(&mut self, id: ConsumerId, delivery: Delivery) {
        // Both start at the newest frame published (a viewer that attaches to a paused
        // publisher sees its picture; a frame published between the attach and the
        // subscription is not lost): a lossless consumer owns it and what follows, not older
        // frames still in slots.
        let last_frame = match delivery {
            Delivery::Latest => 0,
            Delivery::EveryFrame => self.newest.map_or(0, |(f, _)| f.saturating_sub(1)),
        };
        self.consumers.insert(
            id,
            Consumer {
                delivery,
                hold: None,
                read_value: 0,
                last_frame,
            },
        );
    }

    /// Turns a lossless consumer into a latest-frame one (it held the publisher back past its
    /// timeout). `false` if it is not there or already latest-frame.
    pub(crate) fn demote(&mut self, id: ConsumerId) -> bool {
        match self.consumers.get_mut(&id) {
            Some(c) if c.delivery == Delivery::EveryFrame => {
                c.delivery = Delivery::Latest;
                true
            }
            _ => false,
        }
    }

    /// Forgets consumer `id`: its hold ends. Returns the highest read value it was given
    /// (0: none), which its read timeline must be signalled past so no GPU wait on it stays
    /// pending; `None` if it was not there.
    pub(crate) fn remove(&mut self, id: ConsumerId) -> Option<u64> {
        let c = self.consumers.remove(&id)?;
        if let Some(h) = c.hold {
            let slot = &mut self.slots[h.slot];
            slot.holders = slot.holders.saturating_sub(1);
        }
        // Its released reads need no wait any more once the publisher signals past them.
        for slot in &mut self.slots {
            slot.released.retain(|&(who, _)| who != id);
        }
        Some(c.read_value)
    }

    /// The frame consumer `id` reads next: the newest (latest-frame), or the oldest it has
    /// not read that is still in a slot (lossless), held until [`Self::release`].
    pub(crate) fn hold(&mut self, id: ConsumerId) -> Result<Hold, HoldRefused> {
        let (newest, slots) = (self.newest, &self.slots);
        let c = self.consumers.get_mut(&id).ok_or(HoldRefused::NotHeld)?;
        if let Some(h) = c.hold {
            return Err(HoldRefused::AlreadyHolding { frame: h.frame });
        }
        let (frame, slot) = match c.delivery {
            Delivery::Latest => newest.filter(|&(f, _)| f > c.last_frame),
            Delivery::EveryFrame => slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.frame > c.last_frame)
                .min_by_key(|(_, s)| s.frame)
                .map(|(i, s)| (s.frame, i))
                .filter(|_| newest.is_some()),
        }
        .ok_or(HoldRefused::NothingNew)?;
        c.read_value += 1;
        c.last_frame = frame;
        let hold = Hold {
            frame,
            slot,
            read_value: c.read_value,
        };
        c.hold = Some(hold);
        self.slots[slot].holders += 1;
        Ok(hold)
    }

    /// Ends consumer `id`'s hold of `frame` whose read value is `read_value` (the consumer
    /// says both; anything but its hold is refused, changing nothing): its read timeline
    /// reaches that value when its GPU read is done (it has scheduled that signal).
    pub(crate) fn release(
        &mut self,
        id: ConsumerId,
        frame: u64,
        read_value: u64,
    ) -> Result<(), HoldRefused> {
        let c = self.consumers.get_mut(&id).ok_or(HoldRefused::NotHeld)?;
        let h = c
            .hold
            .filter(|h| h.frame == frame && h.read_value == read_value)
            .ok_or(HoldRefused::NotHeld)?;
        c.hold = None;
        let slot = &mut self.slots[h.slot];
        slot.holders = slot.holders.saturating_sub(1);
        slot.released.push((id, h.read_value));
        Ok(())
    }

    /// The next write: a slot nobody holds, not the newest, not owed to a lossless consumer;
    /// the least recently written first. Changes nothing when refused.
    pub(crate) fn begin_write(&mut self) -> Result<WritePlan, Blocked> {
        let newest = self.newest.map(|(_, s)| s);
        let owed = |s: &Slot| -> Vec<ConsumerId> {
            self.consumers
                .iter()
                .filter(|(_, c)| c.delivery == Delivery::EveryFrame && s.frame > c.last_frame)
                .map(|(&id, _)| id)
                .collect()
        };
        let mut lossless = Vec::new();
        let mut best: Option<usize> = None;
        for (i, s) in self.slots.iter().enumerate() {
            if s.holders > 0 || Some(i) == newest {
                continue;
            }
            let waiting = owed(s);
            if !waiting.is_empty() {
                lossless.extend(waiting);
                continue;
            }
            if best.is_none_or(|b| s.frame < self.slots[b].frame) {
                best = Some(i);
            }
        }
        let Some(slot) = best else {
            if lossless.is_empty() {
                let holding = self.consumers.values().filter(|c| c.hold.is_some()).count();
                return Err(Blocked::Exhausted {
                    slots: self.slots.len(),
                    holding,
                });
            }
            lossless.sort_unstable();
            lossless.dedup();
            return Err(Blocked::Lossless(lossless));
        };
        self.frames += 1;
        let frame = self.frames;
        self.writing = Some((frame, slot));
        // One wait per consumer: its highest released read of this slot.
        let mut waits: BTreeMap<ConsumerId, u64> = BTreeMap::new();
        for &(who, v) in &self.slots[slot].released {
            let w = waits.entry(who).or_insert(v);
            *w = (*w).max(v);
        }
        Ok(WritePlan {
            slot,
            frame,
            gpu_waits: waits.into_iter().collect(),
        })
    }

    /// The write begun last is published (the publisher signalled `written = frame`): it is
    /// the newest frame now. `false` if no write was begun.
    pub(crate) fn published(&mut self) -> bool {
        let Some((frame, slot)) = self.writing.take() else {
            return false;
        };
        let s = &mut self.slots[slot];
        s.frame = frame;
        s.released.clear();
        self.newest = Some((frame, slot));
        true
    }

    /// Consumers now.
    pub(crate) fn consumers(&self) -> usize {
        self.consumers.len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn write(b: &mut SlotBook) -> WritePlan {
        let p = b.begin_write().unwrap();
        assert!(b.published());
        p
    }

    /// Found on the GPU: a consumer whose subscription arrived after the publisher's frames
    /// held nothing until the next one (a paused publisher showed no picture).
    #[test]
    fn a_consumer_that_comes_late_holds_the_newest_frame_published() {
        for delivery in [Delivery::Latest, Delivery::EveryFrame] {
            let mut b = SlotBook::new(4);
            for _ in 0..3 {
                write(&mut b);
            }
            b.add(7, delivery);
            let h = b.hold(7).unwrap();
            assert_eq!(h.frame, 3, "{delivery:?}");
            b.release(7, 3, h.read_value).unwrap();
            assert_eq!(b.hold(7), Err(HoldRefused::NothingNew), "{delivery:?}");
        }
    }

    #[test]
    fn a_held_slot_and_the_newest_are_never_written() {
        let mut b = SlotBook::new(3);
        b.add(1, Delivery::Latest);
        assert_eq!(b.hold(1), Err(HoldRefused::NothingNew));
        let first = write(&mut b);
        let h = b.hold(1).unwrap();
        assert_eq!((h.frame, h.slot, h.read_value), (1, first.slot, 1));
        assert_eq!(b.hold(1), Err(HoldRefused::AlreadyHolding { frame: 1 }));
        for _ in 0..10 {
            let p = write(&mut b);
            assert_ne!(p.slot, h.slot, "frame {} went into the held slot", p.frame);
        }
        assert_eq!(
            b.release(1, 1, 2),
            Err(HoldRefused::NotHeld),
            "a wrong read value"
        );
        b.release(1, 1, 1).unwrap();
        // The next write of that slot waits on the GPU for the read released.
        let next = (0..3)
            .map(|_| write(&mut b))
            .find(|p| p.slot == h.slot)
            .unwrap();
        assert_eq!(next.gpu_waits, vec![(1, 1)]);
    }

    #[test]
    fn k_too_small_for_the_holders_is_named() {
        let mut b = SlotBook::new(2);
        b.add(1, Delivery::Latest);
        b.add(2, Delivery::Latest);
        write(&mut b);
        b.hold(1).unwrap();
        write(&mut b);
        b.hold(2).unwrap();
        assert_eq!(
            b.begin_write(),
            Err(Blocked::Exhausted {
                slots: 2,
                holding: 2
            })
        );
        assert!(!b.published(), "a refused write begins nothing");
        assert_eq!(slots_for(2), 4);
    }

    #[test]
    fn a_lossless_consumer_gets_every_frame_until_demoted() {
        let mut b = SlotBook::new(3);
        b.add(7, Delivery::EveryFrame);
        write(&mut b);
        write(&mut b);
        // Slot 3 free; then frames 1 and 2 are owed to 7 and the third is newest.
        write(&mut b);
        assert_eq!(b.begin_write(), Err(Blocked::Lossless(vec![7])));
        assert_eq!(b.hold(7).unwrap().frame, 1);
        b.release(7, 1, 1).unwrap();
        assert_eq!(b.hold(7).unwrap().frame, 2);
        b.release(7, 2, 2).unwrap();
        let p = write(&mut b);
        assert_eq!(p.frame, 4);
        assert!(b.demote(7) && !b.demote(7));
        assert_eq!(b.hold(7).unwrap().frame, 4, "latest-frame now");
    }

    #[test]
    fn a_removed_consumer_frees_its_slot_and_says_what_to_signal() {
        let mut b = SlotBook::new(3);
        b.add(1, Delivery::Latest);
        write(&mut b);
        let h = b.hold(1).unwrap();
        assert_eq!(b.remove(1), Some(h.read_value));
        assert_eq!(b.remove(1), None);
        assert_eq!(b.consumers(), 0);
        for _ in 0..6 {
            write(&mut b);
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u8, bool),
        Remove(u8),
        Hold(u8),
        Release(u8),
        Write,
        Demote(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..6, any::<bool>()).prop_map(|(c, l)| Op::Add(c, l)),
            (0u8..6).prop_map(Op::Remove),
            (0u8..6).prop_map(Op::Hold),
            (0u8..6).prop_map(Op::Release),
            Just(Op::Write),
            Just(Op::Write),
            (0u8..6).prop_map(Op::Demote),
        ]
    }

    proptest! {
        /// Whatever the consumers do: no write goes into a held slot or the newest; every
        /// hold is of a frame still in its slot; read values grow per consumer; with
        /// K = latest-frame consumers + 2, a write is refused only because of lossless ones.
        #[test]
        fn the_book_keeps_its_promises(ops in proptest::collection::vec(op(), 1..200), extra in 0usize..3) {
            let k = slots_for(6) + extra - 2; // 4..=6 slots: sometimes too few on purpose
            let mut b = SlotBook::new(k);
            let mut held: BTreeMap<ConsumerId, Hold> = BTreeMap::new();
            let mut last_read: BTreeMap<ConsumerId, u64> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Add(c, lossless) => {
                        let c = u64::from(c);
                        if !held.contains_key(&c) && !b.consumers.contains_key(&c) {
                            b.add(c, if lossless { Delivery::EveryFrame } else { Delivery::Latest });
                        }
                    }
                    Op::Remove(c) => {
                        // A connection id is never reused (its read timeline is its own).
                        held.remove(&u64::from(c));
                        last_read.remove(&u64::from(c));
                        b.remove(u64::from(c));
                    }
                    Op::Hold(c) => {
                        let c = u64::from(c);
                        if let Ok(h) = b.hold(c) {
                            prop_assert!(!held.contains_key(&c));
                            prop_assert_eq!(b.slots[h.slot].frame, h.frame);
                            let prev = last_read.insert(c, h.read_value).unwrap_or(0);
                            prop_assert!(h.read_value > prev);
                            held.insert(c, h);
                        }
                    }
                    Op::Release(c) => {
                        let c = u64::from(c);
                        if let Some(h) = held.remove(&c) {
                            b.release(c, h.frame, h.read_value).unwrap();
                        }
                    }
                    Op::Demote(c) => {
                        b.demote(u64::from(c));
                    }
                    Op::Write => match b.begin_write() {
                        Ok(p) => {
                            for h in held.values() {
                                prop_assert_ne!(p.slot, h.slot);
                            }
                            prop_assert_ne!(Some(p.slot), b.newest.map(|(_, s)| s));
                            prop_assert!(b.published());
                        }
                        Err(Blocked::Exhausted { holding, .. }) => {
                            let latest = b.consumers.values().filter(|c| c.delivery == Delivery::Latest).count();
                            prop_assert!(latest + 2 > k || holding + 2 > k,
                                "{latest} latest-frame consumers, {holding} holding, {k} slots");
                        }
                        Err(Blocked::Lossless(ids)) => {
                            prop_assert!(!ids.is_empty());
                        }
                    },
                }
            }
        }
    }
}
