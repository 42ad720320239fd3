//! Handles: the table of live objects behind the opaque 64-bit handles, whose bits encode
//! the object's kind, a generation and a slot.

use std::any::Any;
use std::sync::{Arc, Mutex};

use crate::error::{fail, CResult, CuvkResult, Failure};

/// The kind of object a handle names (the handle's top byte; part of the ABI).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Bridge = 1,
    Buffer = 2,
    Semaphore = 3,
    Staging = 4,
    Pool = 5,
    Image = 6,
    Texture = 7,
    FrameServer = 8,
    Subscriber = 9,
}

/// A type that lives behind a handle, of one [`Kind`]: each object's own module says so, so
/// the table knows no object type.
pub(crate) trait HandleObject: Any + Send {
    /// The kind its handles carry.
    const KIND: Kind;
}

/// The object behind a handle (its kind is in the handle's bits, checked before any use).
type Object = Box<dyn Any + Send>;

/// Slot `i` holds its generation and, while alive, the object.
struct Table {
    slots: Vec<(u32, Option<Arc<Mutex<Object>>>)>,
}

static TABLE: Mutex<Table> = Mutex::new(Table { slots: Vec::new() });

/// A handle's object, locked for one call ([`with`]).
type Cell = Arc<Mutex<Object>>;

fn handle_of(kind: Kind, index: usize, generation: u32) -> u64 {
    (kind as u64) << 56 | u64::from(generation & 0x00ff_ffff) << 32 | index as u64
}

/// Stores `obj` in a free slot (or a new one) and returns its handle.
pub(crate) fn insert<T: HandleObject>(obj: T) -> u64 {
    let kind = T::KIND;
    let obj: Object = Box::new(obj);
    let mut t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    let cell = Some(Arc::new(Mutex::new(obj)));
    if let Some(i) = t.slots.iter().position(|s| s.1.is_none()) {
        let generation = (t.slots[i].0 + 1) & 0x00ff_ffff;
        t.slots[i] = (generation, cell);
        handle_of(kind, i, generation)
    } else {
        t.slots.push((1, cell));
        handle_of(kind, t.slots.len() - 1, 1)
    }
}

/// Looks a handle up: null, never issued, destroyed and wrong-kind handles are errors.
fn lookup(handle: u64, want: Kind) -> CResult<Cell> {
    let t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    check_handle(&t, handle, want)
}

/// The checks of [`lookup`] on a locked table. (Generations are 24 bits: a handle could alias
/// again only after 16 million reuses of its slot.)
fn check_handle(t: &Table, handle: u64, want: Kind) -> CResult<Cell> {
    if handle == 0 {
        return fail(CuvkResult::CuvkErrorInvalidHandle, "null handle");
    }
    let kind = (handle >> 56) as u8;
    let generation = ((handle >> 32) & 0x00ff_ffff) as u32;
    let index = (handle & 0xffff_ffff) as usize;
    let Some((gen_now, obj)) = t.slots.get(index) else {
        return fail(
            CuvkResult::CuvkErrorInvalidHandle,
            format!("handle {handle:#x} was never issued"),
        );
    };
    if *gen_now != generation || obj.is_none() {
        return fail(
            CuvkResult::CuvkErrorStaleHandle,
            format!("handle {handle:#x} was destroyed"),
        );
    }
    if kind != want as u8 {
        return fail(
            CuvkResult::CuvkErrorWrongHandleKind,
            format!("handle {handle:#x} is not a {want:?} handle"),
        );
    }
    obj.clone()
        .ok_or(Failure::new(CuvkResult::CuvkErrorStaleHandle, "destroyed"))
}

/// Removes a handle's object of type `T` (dropping it outside the table lock).
/// Two threads destroying one handle: the check and the removal happen under one lock, so
/// exactly one succeeds and the other sees a stale handle.
pub(crate) fn remove<T: HandleObject>(handle: u64) -> CResult<()> {
    let obj = {
        let mut t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
        check_handle(&t, handle, T::KIND)?;
        let index = (handle & 0xffff_ffff) as usize;
        t.slots.get_mut(index).and_then(|s| s.1.take())
    };
    drop(obj); // outside the lock: dropping may wait for the GPU
    Ok(())
}

/// Runs `f` with the `T` behind `handle`, locked.
pub(crate) fn with<T: HandleObject, R>(
    handle: u64,
    f: impl FnOnce(&mut T) -> CResult<R>,
) -> CResult<R> {
    let obj = lookup(handle, T::KIND)?;
    let mut guard = obj.lock().unwrap_or_else(|p| p.into_inner());
    match guard.downcast_mut::<T>() {
        Some(value) => f(value),
        // Not reached: the kind was checked, and each kind is one type.
        None => fail(
            CuvkResult::CuvkErrorWrongHandleKind,
            format!("handle {handle:#x} is not a {:?} handle", T::KIND),
        ),
    }
}
