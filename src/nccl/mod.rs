//! NCCL collectives on shared memory (feature `nccl`): several GPUs, in one node or across
//! nodes, one process per GPU, summing or gathering into a buffer one GPU's Vulkan draws —
//! ordered against Vulkan on the GPU by the buffer's [`StreamOrder`], with every wait bounded.
//!
//! NCCL is loaded at run time (`libnccl.so.2`, or the path in `CUVK_NCCL_LIBRARY`); where it
//! is missing, [`Communicator::init`] returns [`Capability::Nccl`].
//!
//! What users get wrong is refused before NCCL sees it: a buffer on another GPU than the
//! communicator's ([`PeerError::DeviceMismatch`]), ranks with buffers of different sizes
//! ([`Communicator::agree_on_len`], [`PeerError::SizeMismatch`]), a root outside the
//! communicator; and a rank that dies mid-frame makes the others' bounded waits
//! ([`Communicator::wait_cuda`]) abort the communicator and return [`PeerError::RankLost`]
//! instead of hanging.
//!
//! One thing no bound covers: NCCL (2.22 and later) connects the ranks on a communicator's
//! first collective of each kind, and that *enqueue* blocks until the peers take part. A rank
//! that dies before the first frame leaves the others blocked inside NCCL, not in cuvk's
//! waits. Set `NCCL_RUNTIME_CONNECT=0` (the particle demo's launcher does) to connect in
//! [`Communicator::init`], where every rank is known to be there, or run one collective
//! together first.

mod composite;
mod ffi;

pub use composite::{CompositeSchedule, CompositeTo, DepthCompositor, EMPTY_SAMPLE};

use std::ffi::c_void;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtrMut};

use crate::error::{Capability, CudaResultExt, Error, PeerError, Result};
use crate::{SharedBuffer, StreamOrder, UseMarks};

/// An element type NCCL reduces (its `ncclDataType_t`).
pub trait NcclElement: bytemuck::Pod {
    /// The `ncclDataType_t` value.
    const DATA_TYPE: i32;
}

macro_rules! nccl_elements {
    ($($t:ty => $v:expr),* $(,)?) => { $(impl NcclElement for $t { const DATA_TYPE: i32 = $v; })* };
}
nccl_elements!(i8 => 0, u8 => 1, i32 => 2, u32 => 3, i64 => 4, u64 => 5, f32 => 7, f64 => 8);

/// NCCL's reduction operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReduceOp {
    /// `ncclSum`.
    Sum = 0,
    /// `ncclProd`.
    Prod = 1,
    /// `ncclMax`.
    Max = 2,
    /// `ncclMin`.
    Min = 3,
}

/// An NCCL unique id: rank 0 makes it ([`NcclId::new`]) and hands it to every rank (a file, an
/// environment variable, a TCP rendezvous — [`NcclId::to_hex`] / [`NcclId::from_hex`]).
#[derive(Clone, Copy)]
pub struct NcclId(ffi::UniqueId);

impl std::fmt::Debug for NcclId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NcclId(..)")
    }
}

impl NcclId {
    /// A new id (`ncclGetUniqueId`; on rank 0, once per communicator).
    pub fn new() -> Result<Self> {
        let nccl = load()?;
        let mut id = ffi::UniqueId { internal: [0; 128] };
        // SAFETY: one out-parameter of the right type.
        let code = unsafe { (nccl.get_unique_id)(&mut id) };
        check(nccl, code, "ncclGetUniqueId", std::ptr::null_mut())?;
        Ok(Self(id))
    }

    /// The id's 128 bytes.
    pub fn to_bytes(&self) -> [u8; 128] {
        self.0.internal.map(|c| c as u8)
    }

    /// An id from its 128 bytes.
    pub fn from_bytes(bytes: [u8; 128]) -> Self {
        Self(ffi::UniqueId {
            internal: bytes.map(|b| b as std::ffi::c_char),
        })
    }

    /// The id as 256 hex digits (for an environment variable or a command line).
    pub fn to_hex(&self) -> String {
        self.to_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// An id from [`Self::to_hex`]'s digits; `None` if they are not 256 hex digits.
    pub fn from_hex(hex: &str) -> Option<Self> {
        if hex.len() != 256 || !hex.is_ascii() {
            return None;
        }
        let mut bytes = [0u8; 128];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Self::from_bytes(bytes))
    }
}

/// NCCL's version (`ncclGetVersion`: 22803 for 2.28.3), or why it cannot be loaded.
pub fn version() -> Result<i32> {
    let nccl = load()?;
    let mut v = 0;
    // SAFETY: one out-parameter.
    let code = unsafe { (nccl.get_version)(&mut v) };
    check(nccl, code, "ncclGetVersion", std::ptr::null_mut())?;
    Ok(v)
}

fn load() -> Result<&'static ffi::Nccl> {
    ffi::nccl().map_err(|reason| Error::Unsupported(Capability::Nccl { reason }))
}

fn check(
    nccl: &ffi::Nccl,
    code: ffi::NcclResult,
    call: &'static str,
    comm: ffi::Comm,
) -> Result<()> {
    if code == ffi::SUCCESS || code == ffi::IN_PROGRESS {
        Ok(())
    } else {
        Err(Error::Nccl {
            call,
            code,
            message: nccl.describe(code, comm),
        })
    }
}

/// One rank of an NCCL communicator on one GPU, with its own stream.
///
/// Collectives on shared buffers are ordered against Vulkan through the buffer's
/// [`StreamOrder`] marks: the communicator's stream acquires the buffer (waits for Vulkan's
/// last use) before NCCL writes it and releases it after, all on the GPU.
///
/// Drop aborts the communicator (`ncclCommAbort`: never waits for other ranks).
pub struct Communicator {
    nccl: &'static ffi::Nccl,
    rank: usize,
    world: usize,
    stream: Arc<CudaStream>,
    // The communicator and why it was aborted (then it is null and every call is refused).
    // Every NCCL call on it holds this lock: NCCL communicators are not thread-safe, and
    // collectives from two threads would also reach the ranks in different orders.
    state: Mutex<State>,
}

struct State {
    comm: ffi::Comm,
    aborted: Option<String>,
}

// SAFETY: the raw communicator is only touched under the `state` lock, one call at a time,
// and freed (aborted) under it once; NCCL allows a communicator to be used from any thread.
unsafe impl Send for Communicator {}
// SAFETY: as for Send: every use goes through the lock.
unsafe impl Sync for Communicator {}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("gpu", &self.stream.context().ordinal())
            .finish_non_exhaustive()
    }
}

impl Communicator {
    /// Joins rank `rank` of `world` ranks on `cuda`'s GPU (`ncclCommInitRank`: returns once
    /// every rank has joined).
    pub fn init(cuda: &Arc<CudaContext>, id: &NcclId, rank: usize, world: usize) -> Result<Self> {
        if rank >= world {
            return Err(PeerError::RankOutOfRange { rank, world }.into());
        }
        let nccl = load()?;
        let stream = cuda.new_stream().cuda("cuStreamCreate")?;
        cuda.bind_to_thread().cuda("cuCtxSetCurrent")?;
        let mut comm: ffi::Comm = std::ptr::null_mut();
        // SAFETY: an out-parameter, the id by value, rank < world (checked); the calling
        // thread's current context is `cuda`'s, whose device NCCL takes.
        let code = unsafe { (nccl.comm_init_rank)(&mut comm, world as i32, id.0, rank as i32) };
        check(nccl, code, "ncclCommInitRank", std::ptr::null_mut())?;
        Ok(Self {
            nccl,
            rank,
            world,
            stream,
            state: Mutex::new(State {
                comm,
                aborted: None,
            }),
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// The number of ranks.
    pub fn world(&self) -> usize {
        self.world
    }
    /// The stream collectives run on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    /// The CUDA ordinal of the communicator's GPU.
    pub fn cuda_ordinal(&self) -> usize {
        self.stream.context().ordinal()
    }

    /// The state, locked, refused once aborted.
    fn live(&self) -> Result<std::sync::MutexGuard<'_, State>> {
        let st = lock(&self.state);
        match &st.aborted {
            None => Ok(st),
            Some(reason) => Err(PeerError::Aborted {
                rank: self.rank,
                reason: reason.clone(),
            }
            .into()),
        }
    }

    /// Refused unless `buffer` lives on the communicator's GPU.
    pub fn check_buffer<T: bytemuck::Pod>(&self, buffer: &SharedBuffer<T>) -> Result<()> {
        if buffer.cuda_ordinal() == self.cuda_ordinal() {
            Ok(())
        } else {
            Err(PeerError::DeviceMismatch {
                buffer: buffer.cuda_ordinal(),
                user: "NCCL communicator",
                user_device: self.cuda_ordinal(),
            }
            .into())
        }
    }

    /// Checks, with every other rank (a collective: every rank calls it), that all pass the
    /// same `len`; [`PeerError::SizeMismatch`] on every rank otherwise. Waits at most
    /// `timeout` for the other ranks.
    pub fn agree_on_len(&self, len: usize, timeout: Duration) -> Result<()> {
        let st = self.live()?;
        let ctx = self.stream.context();
        // max(len) and max(!len) = !min(len): one all-reduce gives both.
        let mine = [len as u64, !(len as u64)];
        let mut both: CudaSlice<u64> = self.stream.clone_htod(&mine).cuda("cuMemcpyHtoD")?;
        {
            let (ptr, _sync) = both.device_ptr_mut(&self.stream);
            // SAFETY: 2 u64 on this communicator's GPU, in place, on its stream.
            let code = unsafe {
                (self.nccl.all_reduce)(
                    ptr as *const c_void,
                    ptr as *mut c_void,
                    2,
                    u64::DATA_TYPE,
                    ReduceOp::Max as i32,
                    st.comm,
                    self.stream.cu_stream() as *mut c_void,
                )
            };
            check(self.nccl, code, "ncclAllReduce", st.comm)?;
        }
        drop(st);
        let done = ctx.new_event(None).cuda("cuEventCreate")?;
        done.record(&self.stream).cuda("cuEventRecord")?;
        self.bounded("the size agreement", timeout, || Ok(done.is_complete()))?;
        let agreed = self.stream.clone_dtoh(&both).cuda("cuMemcpyDtoH")?;
        let (max, min) = (agreed[0], !agreed[1]);
        if min != max {
            return Err(PeerError::SizeMismatch {
                rank: self.rank,
                len: len as u64,
                min,
                max,
            }
            .into());
        }
        Ok(())
    }

    /// Sums every rank's `buffer` into root's `buffer` (`ncclReduce` in place), ordered on the
    /// GPU: the stream first waits for Vulkan's last use of the buffer (`marks` on `order`),
    /// and the returned `cuda_done` value is released after the reduce, for Vulkan's next use
    /// to wait on. Non-root ranks' buffers are only read.
    pub fn reduce_into<T: NcclElement>(
        &self,
        buffer: &mut SharedBuffer<T>,
        op: ReduceOp,
        root: usize,
        order: &StreamOrder,
        marks: &UseMarks,
    ) -> Result<u64> {
        self.check_root(root)?;
        self.enqueue(buffer, order, marks, |c| {
            // SAFETY: `c.ptr` is `c.len` elements of T on this communicator's GPU, read and
            // (root) written in place on `c.stream` (see `enqueue`).
            let code = unsafe {
                (c.nccl.reduce)(
                    c.ptr,
                    c.ptr,
                    c.len,
                    T::DATA_TYPE,
                    op as i32,
                    root as i32,
                    c.comm,
                    c.stream,
                )
            };
            check(c.nccl, code, "ncclReduce", c.comm)
        })
    }

    /// [`PeerError::RankOutOfRange`] unless `root` is one of the ranks.
    fn check_root(&self, root: usize) -> Result<()> {
        if root < self.world {
            Ok(())
        } else {
            Err(PeerError::RankOutOfRange {
                rank: root,
                world: self.world,
            }
            .into())
        }
    }

    /// Enqueues `calls` — NCCL calls on `buffer`, in place — on the communicator's stream,
    /// ordered on the GPU after Vulkan's last use of `buffer` (`marks` on `order`); returns
    /// the `cuda_done` value released after them, for Vulkan's next use to wait on. Holds
    /// the communicator's lock throughout: this rank's collectives reach NCCL in one order.
    /// A buffer on another GPU is refused before anything is enqueued.
    fn enqueue<T: NcclElement>(
        &self,
        buffer: &mut SharedBuffer<T>,
        order: &StreamOrder,
        marks: &UseMarks,
        calls: impl FnOnce(&Enqueue) -> Result<()>,
    ) -> Result<u64> {
        let st = self.live()?;
        self.check_buffer(buffer)?;
        order.cuda_acquire(marks, &self.stream)?;
        let c = Enqueue {
            nccl: self.nccl,
            comm: st.comm,
            stream: self.stream.cu_stream() as *mut c_void,
            ptr: buffer.cuda_ptr() as *mut c_void,
            len: buffer.len(),
        };
        // The buffer stays alive until the release below is reached (the caller's marks and
        // the buffer's drop wait for it); a failed enqueue still releases, so that nothing
        // waits on a value never signalled.
        let enqueued = calls(&c);
        let released = order.cuda_release(&[marks], &self.stream);
        enqueued?;
        released
    }

    /// Waits on the host, at most `timeout`, for the `cuda_done` value a collective released
    /// ([`Self::reduce_into`]). If NCCL reports an asynchronous error (a rank died: its
    /// sockets closed) or the time runs out (a rank hung), aborts the communicator — its
    /// kernels stop, so nothing stays blocked — and returns [`PeerError::RankLost`].
    pub fn wait_cuda(&self, order: &StreamOrder, value: u64, timeout: Duration) -> Result<()> {
        drop(self.live()?);
        let slice = Duration::from_millis(5);
        self.bounded("a collective", timeout, || {
            match order.wait_cuda(value, slice) {
                Ok(()) => Ok(true),
                Err(Error::Timeout { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    /// Polls `done` until it says yes, NCCL reports an error, or `timeout` passes; the last
    /// two abort the communicator.
    fn bounded(
        &self,
        what: &'static str,
        timeout: Duration,
        mut done: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        let start = Instant::now();
        loop {
            if done()? {
                return Ok(());
            }
            let mut st = self.live()?;
            let mut state = ffi::SUCCESS;
            // SAFETY: a live communicator (not aborted: checked under the lock we hold), one
            // out-parameter.
            let code = unsafe { (self.nccl.comm_get_async_error)(st.comm, &mut state) };
            check(self.nccl, code, "ncclCommGetAsyncError", st.comm)?;
            let failed = state != ffi::SUCCESS && state != ffi::IN_PROGRESS;
            if failed || start.elapsed() >= timeout {
                let detail = if failed {
                    self.nccl.describe(state, st.comm)
                } else {
                    "timed out".to_string()
                };
                self.abort_locked(&mut st, &detail);
                return Err(PeerError::RankLost {
                    rank: self.rank,
                    what,
                    waited_ms: start.elapsed().as_millis() as u64,
                    detail,
                }
                .into());
            }
            drop(st);
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Aborts the communicator (`ncclCommAbort`): pending collectives stop, every later call
    /// is refused with [`PeerError::Aborted`]. Idempotent.
    pub fn abort(&self, reason: &str) {
        let mut st = lock(&self.state);
        self.abort_locked(&mut st, reason);
    }

    fn abort_locked(&self, st: &mut State, reason: &str) {
        if st.aborted.is_some() {
            return;
        }
        // SAFETY: a live communicator (not aborted yet, under the lock), aborted once; it is
        // never used again (null, and every call is refused from now on).
        let code = unsafe { (self.nccl.comm_abort)(st.comm) };
        if code != ffi::SUCCESS {
            log::error!(
                "ncclCommAbort: {}",
                self.nccl.describe(code, std::ptr::null_mut())
            );
        }
        st.comm = std::ptr::null_mut();
        st.aborted = Some(reason.to_string());
    }

    /// Whether the communicator was aborted, and why.
    pub fn aborted(&self) -> Option<String> {
        lock(&self.state).aborted.clone()
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        self.abort("dropped");
    }
}

/// What [`Communicator::enqueue`]'s calls work on: a live communicator (locked), its stream,
/// and the buffer (`len` elements on the communicator's GPU, acquired from Vulkan).
struct Enqueue {
    nccl: &'static ffi::Nccl,
    comm: ffi::Comm,
    stream: *mut c_void,
    ptr: *mut c_void,
    len: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_hex_and_bad_hex_is_refused() {
        let mut bytes = [0u8; 128];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i * 37 % 256) as u8;
        }
        let id = NcclId::from_bytes(bytes);
        let hex = id.to_hex();
        assert_eq!(hex.len(), 256);
        assert_eq!(NcclId::from_hex(&hex).unwrap().to_bytes(), bytes);
        assert!(NcclId::from_hex(&hex[..254]).is_none());
        assert!(NcclId::from_hex(&format!("zz{}", &hex[2..])).is_none());
    }

    #[test]
    fn a_missing_library_is_unsupported_not_a_panic() {
        // Where NCCL is installed this loads it; where not, a typed refusal.
        match version() {
            Ok(v) => assert!(v >= 21800, "NCCL {v}"),
            Err(e) => assert!(e.is_unavailable(), "{e}"),
        }
    }
}
