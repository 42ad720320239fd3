//! Handles: the table of live objects behind the opaque 64-bit handles, whose bits encode
//! the object's kind, a generation and a slot.

use std::sync::{Arc, Mutex};

use cuvk::cuda::TextureObject;
use cuvk::StagingBuffer;

use crate::bridge::CBridge;
use crate::buffer::CBuffer;
use crate::error::{fail, CResult, CuvkResult, Failure};
use crate::image::CImage;
use crate::pool::CPool;
use crate::semaphore::CSemaphore;

/// The kind of object a handle names (the handle's top byte).
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
}

/// The object behind a handle.
pub(crate) enum Object {
    Bridge(Arc<CBridge>),
    Buffer(CBuffer),
    Semaphore(CSemaphore),
    Staging(StagingBuffer),
    Pool(Arc<CPool>),
    Image(CImage),
    Texture(TextureObject),
    FrameServer(cuvk::ipc::FrameServer),
}

impl Object {
    fn kind(&self) -> Kind {
        match self {
            Object::Bridge(_) => Kind::Bridge,
            Object::Buffer(_) => Kind::Buffer,
            Object::Semaphore(_) => Kind::Semaphore,
            Object::Staging(_) => Kind::Staging,
            Object::Pool(_) => Kind::Pool,
            Object::Image(_) => Kind::Image,
            Object::Texture(_) => Kind::Texture,
            Object::FrameServer(_) => Kind::FrameServer,
        }
    }
}

/// Slot `i` holds its generation and, while alive, the object.
struct Table {
    slots: Vec<(u32, Option<Arc<Mutex<Object>>>)>,
}

static TABLE: Mutex<Table> = Mutex::new(Table { slots: Vec::new() });

fn handle_of(kind: Kind, index: usize, generation: u32) -> u64 {
    (kind as u64) << 56 | u64::from(generation & 0x00ff_ffff) << 32 | index as u64
}

/// Stores `obj` in a free slot (or a new one) and returns its handle.
pub(crate) fn insert(obj: Object) -> u64 {
    let kind = obj.kind();
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
pub(crate) fn lookup(handle: u64, want: Kind) -> CResult<Arc<Mutex<Object>>> {
    let t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    check_handle(&t, handle, want)
}

/// The checks of [`lookup`] on a locked table. (Generations are 24 bits: a handle could alias
/// again only after 16 million reuses of its slot.)
fn check_handle(t: &Table, handle: u64, want: Kind) -> CResult<Arc<Mutex<Object>>> {
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

/// Removes a handle's object (dropping it outside the table lock).
/// Two threads destroying one handle: the check and the removal happen under one lock, so
/// exactly one succeeds and the other sees a stale handle.
pub(crate) fn remove(handle: u64, want: Kind) -> CResult<()> {
    let obj = {
        let mut t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
        check_handle(&t, handle, want)?;
        let index = (handle & 0xffff_ffff) as usize;
        t.slots.get_mut(index).and_then(|s| s.1.take())
    };
    drop(obj); // outside the lock: dropping may wait for the GPU
    Ok(())
}

/// Runs `f` with the object behind `handle`, locked.
pub(crate) fn with<T>(
    handle: u64,
    want: Kind,
    f: impl FnOnce(&mut Object) -> CResult<T>,
) -> CResult<T> {
    let obj = lookup(handle, want)?;
    let mut guard = obj.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut guard)
}
