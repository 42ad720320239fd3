//! Frames across processes: a viewer (Vulkan, the [`FrameServer`]) draws what a producer
//! (CUDA, the [`FrameClient`]) writes into the viewer's buffers, ordered on the GPU by two
//! timelines the viewer owns — `written` (the producer signals frame N written) and `drawn`
//! (the viewer signals frame N drawn) — as the in-process frame pacer does, with K frames in
//! flight.
//!
//! Each side announces the values it schedules with a one-way notice ([`Link::notify`]); the
//! other enqueues a GPU wait only for a value announced (none for a value nobody will
//! signal), and the notices of frame N - K are long there when frame N needs them: no host
//! round trip per frame. Every host wait is bounded. When the other side dies (its socket
//! closes), each side releases what it enqueued waits for — the viewer signals `written` from
//! the host ([`FrameServer::release_waits`]: it owns the timeline), the producer signals
//! `drawn` from a fresh stream ([`FrameClient::release_waits`]) — and carries on or stops with
//! [`IpcError::PeerClosed`].

use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaContext, CudaStream};

use super::error::IpcError;
use super::share::{Attached, Link, Server};
use super::wire::TimelineRole;
use crate::cuda::{ExternalSemaphore, MappedRange};
use crate::error::{CudaResultExt, Result};
use crate::interop::FrameSubmit;
use crate::vulkan::{BoundBuffer, Semaphore, SemaphoreDesc, SemaphoreOp, VulkanContext};

/// The viewer's side: owns the buffers (the caller's) and both timelines.
pub struct FrameServer {
    server: Server,
    written: Arc<Semaphore>,
    drawn: Arc<Semaphore>,
    vk: Arc<VulkanContext>,
    link: Option<Link>,
    frames_in_flight: u32,
    buffers: u32,
    served: bool,
}

impl std::fmt::Debug for FrameServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameServer")
            .field("server", &self.server)
            .field("attached", &self.is_attached())
            .field("frames_in_flight", &self.frames_in_flight)
            .finish_non_exhaustive()
    }
}

impl FrameServer {
    /// Listens under `name` for a producer writing `frames_in_flight` slots ahead; makes and
    /// publishes the two timelines. Refused where the device cannot export timelines.
    pub fn bind(name: &str, vk: &Arc<VulkanContext>, frames_in_flight: u32) -> Result<Self> {
        if !(1..=16).contains(&frames_in_flight) {
            return Err(crate::SyncError::FramesInFlight {
                requested: frames_in_flight,
                max: 16,
            }
            .into());
        }
        let written = Semaphore::new(vk, SemaphoreDesc::SHARED_TIMELINE)?;
        let drawn = Semaphore::new(vk, SemaphoreDesc::SHARED_TIMELINE)?;
        let mut server = Server::bind(name, vk)?;
        server.publish_timeline(&written, TimelineRole::Attacher)?;
        server.publish_timeline(&drawn, TimelineRole::Publisher)?;
        Ok(Self {
            server,
            written,
            drawn,
            vk: vk.clone(),
            link: None,
            frames_in_flight,
            buffers: 0,
            served: false,
        })
    }

    /// Publishes a buffer the producer writes (see [`Server::publish_buffer`]): one per frame
    /// in flight, frame n in the `(n - 1) % K`-th published.
    pub fn publish_buffer(
        &mut self,
        buffer: &Arc<BoundBuffer>,
        element_type: u32,
        element_size: u32,
    ) -> Result<u32> {
        let id = self
            .server
            .publish_buffer(buffer, element_type, element_size)?;
        self.buffers += 1;
        Ok(id)
    }

    /// Waits at most `timeout` for the producer. One producer per server: the timelines carry
    /// its frame numbers; for the next one (after [`Self::release_waits`]) bind a new server,
    /// with fresh timelines ([`IpcError::OneProducer`] otherwise). Refused unless exactly K
    /// buffers were published (the producer reads K from their count).
    pub fn accept(&mut self, timeout: Duration) -> Result<()> {
        if self.served {
            return Err(IpcError::OneProducer.into());
        }
        if self.buffers != self.frames_in_flight {
            return Err(crate::SyncError::SlotCount {
                published: self.buffers,
                frames_in_flight: self.frames_in_flight,
            }
            .into());
        }
        self.link = Some(self.server.accept(timeout)?);
        self.served = true;
        Ok(())
    }

    /// Whether a producer is attached and has not gone.
    pub fn is_attached(&self) -> bool {
        self.link.as_ref().is_some_and(|l| !l.is_closed())
    }

    fn link(&mut self) -> Result<&mut Link> {
        self.link
            .as_mut()
            .ok_or_else(|| IpcError::PeerClosed { partial: 0 }.into())
    }

    /// The newest frame the producer announced written, waiting at most `timeout` for one
    /// after `after`; `Ok(None)` if none came in time. While a producer is attached, turns
    /// away others trying to attach ([`IpcError::Busy`] on their side, at this call). The value may now be waited for
    /// ([`Self::submit_drawn`]). [`IpcError::PeerClosed`] once the producer is gone.
    pub fn written(&mut self, after: u64, timeout: Duration) -> Result<Option<u64>> {
        // While a producer is attached, another trying to attach hears "busy" (at this call),
        // not after its timeout. Before `accept`, or once the producer is gone, nobody is
        // turned away: the one waiting is the next to be served (by this or a new server).
        if self.is_attached() {
            self.server.turn_away();
        }
        let newest = self.link()?.latest(after, timeout)?;
        if let Some(n) = newest {
            self.written.note_remote_signal(n)?;
        }
        Ok(newest)
    }

    /// Submits `submit` waiting (on the GPU) for frame `n` written and signalling frame `n`
    /// drawn, then announces it. `n` must have been announced ([`Self::written`]): a wait
    /// for anything else is refused ([`crate::SyncError::WaitNeverSignalled`]).
    ///
    /// # Safety
    /// As [`VulkanContext::submit_with_semaphores`]: executable command buffers of this
    /// device whose resources live until frame `n` is drawn.
    pub unsafe fn submit_drawn(&mut self, n: u64, submit: &FrameSubmit<'_>) -> Result<()> {
        self.written.check_scheduled(n)?;
        let mut waits = vec![SemaphoreOp::wait(&self.written, n, submit.wait_stage)];
        waits.extend_from_slice(submit.waits);
        let mut signals = vec![SemaphoreOp::signal(&self.drawn, n)];
        signals.extend_from_slice(submit.signals);
        // SAFETY: forwarded; the wait is for an announced value (the ledger refuses others).
        unsafe {
            self.vk
                .submit_with_semaphores(submit.command_buffers, &waits, &signals, submit.fence)
        }?;
        match self.link()?.notify(n) {
            // The producer is gone: our frame is still drawn; the next call says so.
            Err(crate::Error::Ipc(IpcError::PeerClosed { .. })) => Ok(()),
            other => other,
        }
    }

    /// As [`Self::submit_drawn`] without the GPU wait for frame `n` written: for negative
    /// controls (the draw then races the producer's writes).
    ///
    /// # Safety
    /// As [`Self::submit_drawn`].
    #[doc(hidden)]
    pub unsafe fn submit_drawn_without_waiting(
        &mut self,
        n: u64,
        submit: &FrameSubmit<'_>,
    ) -> Result<()> {
        let mut signals = vec![SemaphoreOp::signal(&self.drawn, n)];
        signals.extend_from_slice(submit.signals);
        // SAFETY: forwarded.
        unsafe {
            self.vk.submit_with_semaphores(
                submit.command_buffers,
                submit.waits,
                &signals,
                submit.fence,
            )
        }?;
        match self.link()?.notify(n) {
            Err(crate::Error::Ipc(IpcError::PeerClosed { .. })) => Ok(()),
            other => other,
        }
    }

    /// Waits on the host, at most `timeout`, until frame `n` is drawn (its command buffers
    /// may be reused). Sends a notice that found the socket full, where there is room now.
    pub fn wait_drawn(&self, n: u64, timeout: Duration) -> Result<()> {
        if let Some(link) = &self.link {
            match link.flush() {
                Ok(()) | Err(crate::Error::Ipc(IpcError::PeerClosed { .. })) => {}
                Err(e) => return Err(e),
            }
        }
        if n == 0 {
            return Ok(());
        }
        self.drawn.check_scheduled(n)?;
        self.drawn.wait_host(n, timeout)
    }

    /// Sends the newest "drawn" notice if the socket was full when it was made, waiting at
    /// most `timeout` for room. Notices never block a frame; one that did not fit goes with
    /// the next call on this server — call this before the viewer stops calling (at the end
    /// of a run) while the producer still waits for it.
    pub fn flush(&self, timeout: Duration) -> Result<()> {
        match &self.link {
            Some(link) => link.flush_within(timeout),
            None => Ok(()),
        }
    }

    /// After the producer is gone: releases every wait this viewer enqueued on `written` (a
    /// host signal just above any frame the producer can have reached), so its queue runs on
    /// and its frames complete. The buffers keep the last frame written.
    ///
    /// Refused ([`IpcError::StillConnected`]) while the producer is connected: its signals
    /// would then land below the released value.
    pub fn release_waits(&mut self) -> Result<()> {
        if self.is_attached() {
            return Err(IpcError::StillConnected {
                what: "releasing the waits on the producer's timeline",
            }
            .into());
        }
        if !self.served {
            // No producer yet: nothing was announced, so nothing waits; and a release now
            // would run the timeline ahead of the producer still to come.
            return Ok(());
        }
        // Just above anything the producer can have signalled or this viewer waits for: every
        // wait was for an announced value (in the ledger), and the producer writes frame n
        // only once frame n - K is drawn. Not a huge value: a timeline may jump by at most
        // maxTimelineSemaphoreValueDifference (at least 2^31 - 1). Measured on an H100: after
        // a host signal of `1 << 62` the counter still read the dead producer's last value,
        // and the semaphore's drop waited 5 s in vain for the value its books expected.
        // Not the counter: every value it can hold is in the ledger (the producer announced
        // it, or signals it within K frames of the last drawn), and a read of an exported
        // timeline confuses the validation layer (see `Semaphore::wait_host`).
        let k = u64::from(self.frames_in_flight);
        let above = self
            .written
            .highest_signal()
            .max(self.drawn.highest_signal().saturating_add(k));
        self.written.release_after_peer_lost(above + 1)?;
        self.link = None;
        Ok(())
    }

    /// Frames in flight.
    pub fn frames_in_flight(&self) -> u32 {
        self.frames_in_flight
    }
}

/// The producer's side: the viewer's buffers and timelines imported into CUDA.
pub struct FrameClient {
    // Dropped first (field order): their drops wait for this process's pending signals, so
    // the viewer cannot see the link close (and release past them) while one is pending.
    written: ExternalSemaphore,
    drawn: ExternalSemaphore,
    cuda: Arc<CudaContext>,
    frames_in_flight: u32,
    released: u64,
    attached: Attached,
}

impl std::fmt::Debug for FrameClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameClient")
            .field("frames_in_flight", &self.frames_in_flight)
            .finish_non_exhaustive()
    }
}

impl FrameClient {
    /// Attaches to the viewer `name` from `cuda`'s GPU (checked against the viewer's); waits at
    /// most `timeout`. The frames in flight, K, are the viewer's: one published buffer each.
    pub fn attach(name: &str, cuda: &Arc<CudaContext>, timeout: Duration) -> Result<Self> {
        let uuid = crate::cuda::uuid_of(cuda)?;
        let attached = Attached::connect(name, uuid, None, timeout)?;
        let missing = |role| IpcError::NoSuchObject {
            id: u32::from(role == TimelineRole::Publisher),
            kind: super::wire::MessageKind::Timeline,
        };
        let written_id = attached
            .timeline_id(TimelineRole::Attacher)
            .ok_or(missing(TimelineRole::Attacher))?;
        let drawn_id = attached
            .timeline_id(TimelineRole::Publisher)
            .ok_or(missing(TimelineRole::Publisher))?;
        let frames_in_flight = attached.buffers().count() as u32;
        if !(1..=16).contains(&frames_in_flight) {
            return Err(crate::SyncError::FramesInFlight {
                requested: frames_in_flight,
                max: 16,
            }
            .into());
        }
        Ok(Self {
            written: attached.import_cuda_timeline(written_id, cuda)?,
            drawn: attached.import_cuda_timeline(drawn_id, cuda)?,
            attached,
            cuda: cuda.clone(),
            frames_in_flight,
            released: 0,
        })
    }

    /// The published buffers' ids, in order.
    pub fn buffer_ids(&self) -> Vec<u32> {
        self.attached.buffers().map(|b| b.id).collect()
    }

    /// The description of buffer `id`.
    pub fn buffer_info(&self, id: u32) -> Result<super::wire::BufferInfo> {
        self.attached.buffer_info(id)
    }

    /// Buffer `id` mapped into CUDA as bytes (the element type is in [`Self::buffer_info`]).
    pub fn buffer_bytes(&self, id: u32) -> Result<MappedRange> {
        self.attached.import_cuda_bytes(id, &self.cuda)
    }

    /// Buffer `id` mapped into CUDA (elements of `T`, checked against the description).
    pub fn buffer<T>(&self, id: u32) -> Result<MappedRange> {
        self.attached.import_cuda_buffer::<T>(id, &self.cuda)
    }

    /// Before writing frame `n` (1, 2, ...): `stream` waits on the GPU until the viewer has
    /// drawn frame `n - K` (whose slot frame `n` reuses). Waits on the host, at most
    /// `timeout`, only while the viewer has not yet announced that frame.
    pub fn acquire(&mut self, n: u64, stream: &CudaStream, timeout: Duration) -> Result<()> {
        let k = u64::from(self.frames_in_flight);
        if n <= k {
            return Ok(());
        }
        let need = n - k;
        self.await_drawn_notice(need, timeout)?;
        self.drawn.wait(stream, need)
    }

    /// As [`Self::acquire`] on a raw stream handed in by other code (a PyTorch stream): it
    /// must belong to this client's CUDA context (checked).
    ///
    /// # Safety
    /// `stream` must be null (the legacy default stream) or a live `CUstream`.
    pub unsafe fn acquire_raw(
        &mut self,
        n: u64,
        stream: cudarc::driver::sys::CUstream,
        timeout: Duration,
    ) -> Result<()> {
        let k = u64::from(self.frames_in_flight);
        if n <= k {
            return Ok(());
        }
        let need = n - k;
        self.await_drawn_notice(need, timeout)?;
        // SAFETY: forwarded; the value was announced by the viewer.
        unsafe { self.drawn.enqueue_raw(stream, need, false) }
    }

    /// As [`Self::release`] on a raw stream (checked to be this client's context's).
    ///
    /// # Safety
    /// `stream` must be null (the legacy default stream) or a live `CUstream`.
    pub unsafe fn release_raw(
        &mut self,
        n: u64,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<()> {
        self.check_acquired(n)?;
        // SAFETY: forwarded.
        unsafe { self.written.enqueue_raw(stream, n, true) }?;
        let link = self.attached.link();
        link.notify(n)?;
        link.latest(u64::MAX - 1, Duration::ZERO).map(drop)
    }

    /// Frame `n` may be released only once its slot is free: the viewer announced frame
    /// `n - K` drawn (what [`Self::acquire`] waits for). Keeps every signal of this producer
    /// within K frames of the viewer's draws, which the releases after a lost peer rely on.
    fn check_acquired(&mut self, n: u64) -> Result<()> {
        let k = u64::from(self.frames_in_flight);
        let drawn = self.attached.link().last_seen();
        if n > drawn.saturating_add(k) {
            return Err(crate::SyncError::FrameOutOfOrder {
                frame: n,
                last_step: crate::FrameStep::Begin,
                reason: crate::FrameStep::CudaRelease,
            }
            .into());
        }
        Ok(())
    }

    /// Waits on the host, at most `timeout`, until the viewer has announced frame `need`
    /// drawn (at once where it already has).
    fn await_drawn_notice(&mut self, need: u64, timeout: Duration) -> Result<()> {
        let link = self.attached.link();
        if link.last_seen() >= need {
            return Ok(());
        }
        match link.latest(need - 1, timeout)? {
            Some(v) if v >= need => Ok(()),
            _ => Err(crate::Error::Timeout {
                what: "the viewer's notice of a drawn frame",
                timeout_ns: timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
            }),
        }
    }

    /// After writing frame `n`: `stream` signals it written (the viewer's draw of it waits on
    /// the GPU) and the viewer is told.
    pub fn release(&mut self, n: u64, stream: &CudaStream) -> Result<()> {
        self.check_acquired(n)?;
        self.written.signal(stream, n)?;
        let link = self.attached.link();
        link.notify(n)?;
        // Read what the viewer said meanwhile, so its notices never pile up unread.
        link.latest(u64::MAX - 1, Duration::ZERO).map(drop)
    }

    /// Sends the newest "written" notice if the socket was full when it was made, waiting at
    /// most `timeout` for room (see [`FrameServer::flush`]).
    pub fn flush(&mut self, timeout: Duration) -> Result<()> {
        self.attached.link().flush_within(timeout)
    }

    /// Reads the viewer's notices without waiting: the newest frame it announced drawn.
    /// [`IpcError::PeerClosed`] once it is gone.
    pub fn drawn(&mut self) -> Result<u64> {
        let link = self.attached.link();
        link.latest(u64::MAX - 1, Duration::ZERO)?;
        Ok(link.last_seen())
    }

    /// After the viewer is gone: releases this process's stream waits on `drawn` (a signal,
    /// from a fresh stream, just above any frame the viewer can have drawn), so its streams
    /// run on.
    ///
    /// Refused ([`IpcError::StillConnected`]) while the viewer is connected.
    pub fn release_waits(&mut self) -> Result<()> {
        if !self.attached.link().is_closed() {
            return Err(IpcError::StillConnected {
                what: "releasing the waits on the viewer's timeline",
            }
            .into());
        }
        let stream = self.cuda.new_stream().cuda("cuStreamCreate")?;
        // Just above anything the viewer can have signalled: it draws only frames this
        // producer announced written (and it is gone: nothing more comes). Small jumps only
        // (see `FrameServer::release_waits`).
        // The viewer's last announced value too: its negative-control submissions
        // (`submit_drawn_without_waiting`) signal frames this producer never wrote.
        let above = self
            .written
            .ledger()
            .highest()
            .max(self.drawn.ledger().highest_wait())
            .max(self.attached.link().last_seen())
            .max(self.released);
        self.drawn.signal(&stream, above + 1)?;
        self.released = above + 1;
        stream.synchronize().cuda("cuStreamSynchronize")
    }

    /// Frames in flight.
    pub fn frames_in_flight(&self) -> u32 {
        self.frames_in_flight
    }
}
