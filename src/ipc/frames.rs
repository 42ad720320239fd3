//! Frames across processes: a viewer (Vulkan, the [`FrameServer`]) draws what a producer
//! (CUDA, the [`FrameClient`]) writes into the viewer's buffers, ordered on the GPU by two
//! timelines the viewer owns — `written` (the producer signals frame N written) and `drawn`
//! (the viewer signals frame N drawn) — with the in-process pacer's numbers: the one
//! [`Frame`] (frame N in slot `N % K`, command slot `N % 2K`), K in flight, 1..=
//! [`crate::MAX_FRAMES_IN_FLIGHT`].
//!
//! Each side announces the values it schedules with a one-way notice ([`Link::notify`]); the
//! other enqueues a GPU wait only for a value announced (the timelines' signal ledgers refuse
//! any other, as for every timeline in cuvk), and the notices of frame N - K are long there
//! when frame N needs them: no host round trip per frame. Every host wait is bounded. When the
//! other side dies (its socket closes), each side releases what it enqueued waits for — the
//! viewer signals `written` from the host (it owns the timeline) and serves the next producer
//! on fresh timelines ([`FrameServer::next_frame`] does all of it), the producer signals
//! `drawn` from a fresh stream ([`FrameClient::release_waits`]) and stops with
//! [`IpcError::PeerClosed`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaStream};

use super::error::IpcError;
use super::share::{Attached, Link, Server};
use super::wire::TimelineRole;
use crate::cuda::{ExternalSemaphore, MappedRange};
use crate::error::{CudaResultExt, FrameStep, Result, SyncError};
use crate::interop::frame::{check_current, check_frames_in_flight, next_issuer_id};
use crate::interop::FrameSubmit;
use crate::vulkan::{BoundBuffer, Semaphore, SemaphoreDesc, SemaphoreOp, VulkanContext};
use crate::{ElementFormat, Frame};

/// How often a viewer waiting for a drawn frame reads the producer's notices (to notice a
/// producer that died: the frame then completes only once its waits are released).
const WATCH_SLICE: Duration = Duration::from_millis(20);

/// `timeout` from now (a year where that overflows: "no bound" in practice).
fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// A wait that ran out (the crate's or the socket's own timeout).
fn is_timeout(e: &crate::Error) -> bool {
    e.kind() == crate::ErrorKind::Timeout
}

fn is_peer_closed(e: &crate::Error) -> bool {
    matches!(e, crate::Error::Ipc(IpcError::PeerClosed { .. }))
}

/// One producer's session: the socket under the server's name, two fresh timelines, and the
/// link once the producer attached.
struct Session {
    // Dropped first (field order): the link closes before the timelines go.
    link: Option<Link>,
    server: Server,
    written: Arc<Semaphore>,
    drawn: Arc<Semaphore>,
    /// Whether a producer was accepted (its frames are on the timelines).
    served: bool,
    /// Whether its waits were released after it went.
    released: bool,
    /// The newest frame handed out ([`FrameServer::next_frame`]).
    handed: u64,
}

impl Session {
    fn bind(
        name: &str,
        vk: &Arc<VulkanContext>,
        buffers: &[(Arc<BoundBuffer>, ElementFormat)],
    ) -> Result<Self> {
        let written = Semaphore::new(vk, SemaphoreDesc::SHARED_TIMELINE)?;
        let drawn = Semaphore::new(vk, SemaphoreDesc::SHARED_TIMELINE)?;
        let mut server = Server::bind(name, vk)?;
        server.publish_timeline(&written, TimelineRole::Attacher)?;
        server.publish_timeline(&drawn, TimelineRole::Publisher)?;
        for (buffer, element) in buffers {
            server.publish_buffer(buffer, *element)?;
        }
        Ok(Self {
            link: None,
            server,
            written,
            drawn,
            served: false,
            released: false,
            handed: 0,
        })
    }

    fn is_attached(&self) -> bool {
        self.link.as_ref().is_some_and(|l| !l.is_closed())
    }

    /// Reads the producer's notices without waiting: `false` once it is gone.
    fn producer_alive(&mut self) -> Result<bool> {
        match &mut self.link {
            None => Ok(false),
            Some(link) => match link.latest(u64::MAX - 1, Duration::ZERO) {
                Ok(_) => Ok(true),
                Err(e) if is_peer_closed(&e) => Ok(false),
                Err(e) => Err(e),
            },
        }
    }

    /// After the producer is gone: releases every wait this viewer enqueued on `written` (a
    /// host signal just above any frame the producer can have reached), so the queue runs on
    /// and every submitted frame completes.
    fn release_waits(&mut self, frames_in_flight: u64) -> Result<()> {
        if self.released || !self.served {
            // Never served: nothing was announced, so nothing waits; and a release now would
            // run the timeline ahead of the producer still to come.
            return Ok(());
        }
        // Just above anything the producer can have signalled or this viewer waits for: every
        // wait was for an announced value (in the ledger), and the producer writes frame n
        // only once frame n - K is drawn. Not a huge value: a timeline may jump by at most
        // maxTimelineSemaphoreValueDifference (at least 2^31 - 1); measured on an H100, after
        // a host signal of `1 << 62` the counter still read the dead producer's last value.
        // Not the counter: a read of an exported timeline confuses the validation layer (see
        // `Semaphore::wait_host`), and every value it can hold is in the ledgers.
        let above = self
            .written
            .highest_signal()
            .max(self.drawn.highest_signal().saturating_add(frames_in_flight));
        self.written.release_after_peer_lost(above + 1)?;
        self.link = None;
        self.released = true;
        Ok(())
    }
}

/// How a watched wait for a drawn frame ended.
enum Watched {
    Drawn,
    ProducerGone,
    TimedOut,
}

/// The viewer's side: owns the buffers (the caller's) and, per producer, two timelines. A
/// viewer is a loop of [`Self::next_frame`] → record the draw of [`Frame::slot`]'s buffer into
/// the frame's command slot → [`Self::submit_drawn`]; producers come and go under the name.
pub struct FrameServer {
    id: u64,
    name: String,
    vk: Arc<VulkanContext>,
    frames_in_flight: u64,
    buffers: Vec<(Arc<BoundBuffer>, ElementFormat)>,
    /// `None` only between a producer's session and the next (a failed bind is retried).
    session: Option<Session>,
    /// The frame handed out and not yet submitted.
    current: Option<u64>,
    /// Per command slot: the last frame submitted from it (0: none), on this session's
    /// timelines.
    in_command_slot: Vec<u64>,
    producers: u32,
}

impl std::fmt::Debug for FrameServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameServer")
            .field("name", &self.name)
            .field("attached", &self.is_attached())
            .field("frames_in_flight", &self.frames_in_flight)
            .field("producers", &self.producers)
            .finish_non_exhaustive()
    }
}

impl FrameServer {
    /// Listens under `name` for a producer writing `frames_in_flight` (K, 1..=
    /// [`crate::MAX_FRAMES_IN_FLIGHT`]) slots ahead; makes and publishes the two timelines.
    /// Refused where the device cannot export timelines.
    pub fn bind(name: &str, vk: &Arc<VulkanContext>, frames_in_flight: u32) -> Result<Self> {
        let k = check_frames_in_flight(frames_in_flight)?;
        Ok(Self {
            id: next_issuer_id(),
            name: name.to_owned(),
            vk: vk.clone(),
            frames_in_flight: k,
            buffers: Vec::new(),
            session: Some(Session::bind(name, vk, &[])?),
            current: None,
            in_command_slot: vec![0; 2 * k as usize],
            producers: 0,
        })
    }

    fn session(&mut self) -> Result<&mut Session> {
        if self.session.is_none() {
            self.session = Some(Session::bind(&self.name, &self.vk, &self.buffers)?);
        }
        self.session
            .as_mut()
            .ok_or_else(|| IpcError::PeerClosed { partial: 0 }.into())
    }

    /// Publishes a buffer the producer writes, holding rows of `element` (what the producer
    /// reads it as): one per frame in flight, frame N in the `N % K`-th published
    /// ([`Frame::slot`]). Every producer gets the same buffers. Refused past K
    /// ([`SyncError::SlotCount`]).
    pub fn publish_buffer(
        &mut self,
        buffer: &Arc<BoundBuffer>,
        element: ElementFormat,
    ) -> Result<u32> {
        // The arguments first, then the server's state: a bad element is named as such.
        element.check()?;
        let published = self.buffers.len() as u32;
        if u64::from(published) >= self.frames_in_flight {
            return Err(SyncError::SlotCount {
                published: published + 1,
                frames_in_flight: self.frames_in_flight as u32,
            }
            .into());
        }
        let id = self.session()?.server.publish_buffer(buffer, element)?;
        self.buffers.push((buffer.clone(), element));
        Ok(id)
    }

    /// Waits at most `timeout` until a producer is attached (at once where one is). Refused
    /// unless exactly K buffers were published (the producer reads K from their count).
    /// [`Self::next_frame`] calls it: call it first only to wait for the first producer apart.
    pub fn accept(&mut self, timeout: Duration) -> Result<()> {
        let deadline = deadline_after(timeout);
        match self.attach_producer(deadline)? {
            true => Ok(()),
            false => Err(IpcError::Timeout {
                ms: timeout.as_millis().min(u128::from(u64::MAX)) as u64,
            }
            .into()),
        }
    }

    /// A producer attached before `deadline` (`false`: none came in time): the current one,
    /// or — where it went — the next, on fresh timelines once every frame drawn from the old
    /// ones has completed.
    fn attach_producer(&mut self, deadline: Instant) -> Result<bool> {
        let published = self.buffers.len() as u32;
        if u64::from(published) != self.frames_in_flight {
            return Err(SyncError::SlotCount {
                published,
                frames_in_flight: self.frames_in_flight as u32,
            }
            .into());
        }
        let k = self.frames_in_flight;
        let session = self.session()?;
        if session.is_attached() {
            return Ok(true);
        }
        if session.served {
            // The producer is gone: release our waits on its timeline, let every frame
            // submitted complete, and start over on fresh timelines under the same name.
            session.release_waits(k)?;
            let last = self.in_command_slot.iter().copied().max().unwrap_or(0);
            if let Some(session) = &self.session {
                if last > 0 {
                    match session.drawn.wait_host(last, left(deadline)) {
                        Ok(()) => {}
                        Err(e) if is_timeout(&e) => return Ok(false),
                        Err(e) => return Err(e),
                    }
                }
                log::info!(
                    "frame server '{}': producer {} gone after frame {}; serving the next",
                    self.name,
                    self.producers,
                    session.handed
                );
            }
            // The old socket closes before the name is bound again.
            self.session = None;
            self.in_command_slot.fill(0);
            self.current = None;
        }
        let session = self.session()?;
        match session.server.accept(left(deadline)) {
            Ok(link) => {
                session.link = Some(link);
                session.served = true;
                self.producers += 1;
                Ok(true)
            }
            Err(e) if is_timeout(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether a producer is attached and has not gone.
    pub fn is_attached(&self) -> bool {
        self.session.as_ref().is_some_and(Session::is_attached)
    }

    /// How many producers attached so far (the current one included).
    pub fn producers(&self) -> u32 {
        self.producers
    }

    /// The next frame to draw, waiting at most `timeout`; `Ok(None)` if none came in time.
    /// It is the newest the producer wrote (older ones are skipped), announced on the wire,
    /// and its command slot is free (every frame drawn from it before has completed). A
    /// producer that went away is handled here: its waits are released, the last frame stays
    /// in the buffers, and the next producer is served on fresh timelines. While one is
    /// attached, others trying to attach are turned away ([`IpcError::Busy`] on their side);
    /// a producer that announces a frame it cannot have written (past the last drawn + K) is
    /// dropped. A producer that connected within `timeout` may take its handshake (at most
    /// 2 s, at once for cuvk's) past it. Refused ([`SyncError::FrameOutOfOrder`]) while the
    /// frame handed out last is not submitted.
    pub fn next_frame(&mut self, timeout: Duration) -> Result<Option<Frame>> {
        if let Some(n) = self.current {
            return Err(SyncError::FrameOutOfOrder {
                frame: n,
                last_step: FrameStep::Begin,
                reason: FrameStep::Begin,
            }
            .into());
        }
        let deadline = deadline_after(timeout);
        loop {
            if !self.attach_producer(deadline)? {
                return Ok(None);
            }
            let k = self.frames_in_flight;
            let name = self.name.clone();
            let session = self.session()?;
            // Notices first: a producer that just died is noticed here, so a restarted one is
            // served (after the release) rather than turned away.
            if !session.producer_alive()? {
                continue;
            }
            session.server.turn_away();
            let handed = session.handed;
            let newest = match session
                .link
                .as_mut()
                .map(|l| l.latest(handed, left(deadline)))
            {
                Some(Ok(Some(n))) => n,
                Some(Ok(None)) => return Ok(None),
                Some(Err(e)) if is_peer_closed(&e) => continue,
                Some(Err(e)) => return Err(e),
                None => continue,
            };
            // A producer writes frame n only once frame n - K is drawn: a notice past that is
            // a lie (or a bug) that would run our timelines' releases past what a timeline may
            // jump. That producer is dropped (as if gone) and the next one served.
            let bound = session.drawn.highest_signal().saturating_add(k);
            if newest > bound {
                log::warn!(
                    "frame server '{}': the producer announced frame {newest}, past frame {bound} \
                     it may have written; dropping it",
                    name
                );
                session.link = None;
                continue;
            }
            session.written.note_remote_signal(newest)?;
            session.handed = newest;
            let frame = Frame::issue(self.id, newest, self.frames_in_flight);
            match self.wait_drawn_watching(self.in_command_slot[frame.command_slot()], deadline)? {
                Watched::Drawn => {
                    self.current = Some(newest);
                    return Ok(Some(frame));
                }
                Watched::ProducerGone => continue,
                // The frame stays announced: the next call hands it out (or a newer one).
                Watched::TimedOut => {
                    if let Some(s) = &mut self.session {
                        s.handed = handed;
                    }
                    return Ok(None);
                }
            }
        }
    }

    /// Waits until frame `n` is drawn, before `deadline`, reading the producer's notices
    /// between slices (a frame waiting on a dead producer's timeline never completes until
    /// the waits are released).
    fn wait_drawn_watching(&mut self, n: u64, deadline: Instant) -> Result<Watched> {
        if n == 0 {
            return Ok(Watched::Drawn);
        }
        let session = self.session()?;
        session.drawn.check_scheduled(n)?;
        loop {
            match session.drawn.wait_host(n, WATCH_SLICE.min(left(deadline))) {
                Ok(()) => return Ok(Watched::Drawn),
                Err(e) if is_timeout(&e) => {}
                Err(e) => return Err(e),
            }
            if !session.producer_alive()? {
                return Ok(Watched::ProducerGone);
            }
            if left(deadline).is_zero() {
                return Ok(Watched::TimedOut);
            }
        }
    }

    /// Submits `submit` waiting (on the GPU, at `submit.wait_stage`) for `frame` written and
    /// signalling it drawn, then tells the producer. `frame` must be the one
    /// [`Self::next_frame`] handed out last ([`SyncError::WrongFrame`],
    /// [`SyncError::ForeignFrame`]).
    ///
    /// # Safety
    /// As [`VulkanContext::submit_with_semaphores`]: executable command buffers of this
    /// device whose resources live until the frame is drawn.
    pub unsafe fn submit_drawn(&mut self, frame: &Frame, submit: &FrameSubmit<'_>) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.submit(frame, submit, true) }
    }

    /// As [`Self::submit_drawn`] without the GPU wait for the frame written: for cuvk's
    /// negative controls (the draw then races the producer's writes).
    ///
    /// # Safety
    /// As [`Self::submit_drawn`].
    #[cfg(feature = "ipc-test-peer")]
    #[doc(hidden)]
    pub unsafe fn submit_drawn_without_waiting(
        &mut self,
        frame: &Frame,
        submit: &FrameSubmit<'_>,
    ) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.submit(frame, submit, false) }
    }

    /// # Safety
    /// As [`Self::submit_drawn`].
    unsafe fn submit(&mut self, frame: &Frame, submit: &FrameSubmit<'_>, wait: bool) -> Result<()> {
        let n = check_current(frame, self.id, self.current, 0, FrameStep::Submit)?;
        let vk = self.vk.clone();
        let session = self.session()?;
        session.written.check_scheduled(n)?;
        let mut waits = Vec::with_capacity(submit.waits.len() + 1);
        if wait {
            waits.push(SemaphoreOp::wait(&session.written, n, submit.wait_stage));
        }
        waits.extend_from_slice(submit.waits);
        let mut signals = vec![SemaphoreOp::signal(&session.drawn, n)];
        signals.extend_from_slice(submit.signals);
        // SAFETY: forwarded; the wait is for an announced value (the ledger refuses others).
        unsafe {
            vk.submit_with_semaphores(submit.command_buffers, &waits, &signals, submit.fence)
        }?;
        let notified = session.link.as_ref().map(|l| l.notify(n));
        self.in_command_slot[frame.command_slot()] = n;
        self.current = None;
        match notified {
            // The producer is gone: our frame is still drawn; the next call sees it.
            Some(Err(e)) if !is_peer_closed(&e) => Err(e),
            _ => Ok(()),
        }
    }

    /// Waits on the host, at most `timeout`, until frame `n` (a number [`Self::next_frame`]
    /// handed out) is drawn: its readback may be read. Sends a notice that found the socket
    /// full, where there is room now. A producer that goes away meanwhile (its frame then
    /// never written) is released here, so the frame completes.
    pub fn wait_drawn(&mut self, n: u64, timeout: Duration) -> Result<()> {
        let deadline = deadline_after(timeout);
        let k = self.frames_in_flight;
        let session = self.session()?;
        if let Some(link) = &session.link {
            match link.flush() {
                Ok(()) => {}
                Err(e) if is_peer_closed(&e) => {}
                Err(e) => return Err(e),
            }
        }
        match self.wait_drawn_watching(n, deadline)? {
            Watched::Drawn => Ok(()),
            Watched::TimedOut => Err(crate::Error::Timeout {
                what: "a frame to be drawn",
                timeout_ns: timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
            }),
            Watched::ProducerGone => {
                let session = self.session()?;
                session.release_waits(k)?;
                session.drawn.wait_host(n, left(deadline))
            }
        }
    }

    /// Before the viewer stops (or destroys what its frames use): sends the newest "drawn"
    /// notice (the producer may be waiting for it) and waits, at most `timeout` for both,
    /// until every frame submitted is drawn — releasing the producer's timeline where the
    /// producer is gone, so frames waiting on it complete.
    pub fn wait_idle(&mut self, timeout: Duration) -> Result<()> {
        let deadline = deadline_after(timeout);
        let last = self.in_command_slot.iter().copied().max().unwrap_or(0);
        let k = self.frames_in_flight;
        let session = self.session()?;
        if let Some(link) = &session.link {
            // A producer not reading its socket keeps its last notice; the frames are still
            // waited for.
            match link.flush_within(left(deadline)) {
                Ok(()) => {}
                Err(e) if is_peer_closed(&e) || is_timeout(&e) => {}
                Err(e) => return Err(e),
            }
        }
        match self.wait_drawn_watching(last, deadline)? {
            Watched::Drawn => Ok(()),
            Watched::TimedOut => Err(crate::Error::Timeout {
                what: "the viewer's frames to be drawn",
                timeout_ns: timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
            }),
            Watched::ProducerGone => {
                let session = self.session()?;
                session.release_waits(k)?;
                session.drawn.wait_host(last, left(deadline))
            }
        }
    }

    /// Frames in flight (K).
    pub fn frames_in_flight(&self) -> u32 {
        self.frames_in_flight as u32
    }
}

/// The producer's side: the viewer's buffers and timelines imported into CUDA. Per frame:
/// [`Self::begin_frame`], [`Self::acquire`] on the stream that writes it (the GPU waits until
/// the viewer drew the slot's last frame), the kernels writing [`Frame::slot`]'s buffer,
/// [`Self::release`] (the viewer's draw waits on the GPU for them).
pub struct FrameClient {
    // Dropped first (field order): their drops wait for this process's pending signals, so
    // the viewer cannot see the link close (and release past them) while one is pending.
    written: ExternalSemaphore,
    drawn: ExternalSemaphore,
    cuda: Arc<CudaContext>,
    id: u64,
    frames_in_flight: u64,
    /// The frame begun and not yet released.
    begun: Option<u64>,
    /// The last frame released.
    last: u64,
    /// The value `drawn` was released to after the viewer went.
    released: u64,
    attached: Attached,
}

impl std::fmt::Debug for FrameClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameClient")
            .field("frames_in_flight", &self.frames_in_flight)
            .field("last", &self.last)
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
        let k = check_frames_in_flight(attached.buffers().count() as u32)?;
        Ok(Self {
            written: attached.import_cuda_timeline(written_id, cuda)?,
            drawn: attached.import_cuda_timeline(drawn_id, cuda)?,
            attached,
            cuda: cuda.clone(),
            id: next_issuer_id(),
            frames_in_flight: k,
            begun: None,
            last: 0,
            released: 0,
        })
    }

    /// The description of slot `slot` (0..K: [`Frame::slot`]), the viewer's buffer
    /// published `slot`-th: its size and [`ElementFormat`]. [`IpcError::NoSuchObject`] past K.
    pub fn slot_info(&self, slot: usize) -> Result<super::wire::BufferInfo> {
        self.attached.buffers().nth(slot).copied().ok_or_else(|| {
            IpcError::NoSuchObject {
                id: slot as u32,
                kind: super::wire::MessageKind::Buffer,
            }
            .into()
        })
    }

    /// Slot `slot` mapped into CUDA as bytes (what it holds: [`Self::slot_info`]).
    pub fn slot_bytes(&self, slot: usize) -> Result<MappedRange> {
        let id = self.slot_info(slot)?.id;
        self.attached.import_cuda_bytes(id, &self.cuda)
    }

    /// Slot `slot` mapped into CUDA, `T` one row of its [`ElementFormat`] (checked:
    /// `Layout.ElementSize`).
    pub fn slot<T>(&self, slot: usize) -> Result<MappedRange> {
        let id = self.slot_info(slot)?.id;
        self.attached.import_cuda_buffer::<T>(id, &self.cuda)
    }

    /// The next frame (the last released + 1); while the frame begun last is not released,
    /// that frame again (an [`Self::acquire`] that timed out is simply repeated).
    pub fn begin_frame(&mut self) -> Result<Frame> {
        let n = self.begun.unwrap_or(self.last + 1);
        self.begun = Some(n);
        Ok(Frame::issue(self.id, n, self.frames_in_flight))
    }

    /// The frame begun last, checked to be `frame`, for `step`.
    fn check_begun(&self, frame: &Frame, step: FrameStep) -> Result<u64> {
        check_current(frame, self.id, self.begun, self.last, step)
    }

    /// Before writing `frame`: `stream` waits on the GPU until the viewer has drawn frame
    /// `N - K` (whose slot frame N reuses). Waits on the host, at most `timeout`, only while
    /// the viewer has not yet announced that frame. Call it on every stream that writes the
    /// frame.
    pub fn acquire(&mut self, frame: &Frame, stream: &CudaStream, timeout: Duration) -> Result<()> {
        self.check_begun(frame, FrameStep::CudaAcquire)?;
        let Some(need) = frame.previous_use() else {
            return Ok(());
        };
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
        frame: &Frame,
        stream: cudarc::driver::sys::CUstream,
        timeout: Duration,
    ) -> Result<()> {
        self.check_begun(frame, FrameStep::CudaAcquire)?;
        let Some(need) = frame.previous_use() else {
            return Ok(());
        };
        self.await_drawn_notice(need, timeout)?;
        // SAFETY: forwarded; the value was announced by the viewer.
        unsafe { self.drawn.enqueue_raw(stream, need, false) }
    }

    /// After writing `frame`: `stream` signals it written (the viewer's draw of it waits on
    /// the GPU) and the viewer is told. Refused unless the frame's slot is free (the viewer
    /// announced frame `N - K` drawn: what [`Self::acquire`] waits for), which keeps every
    /// signal of this producer within K frames of the viewer's draws.
    pub fn release(&mut self, frame: &Frame, stream: &CudaStream) -> Result<()> {
        let n = self.check_release(frame)?;
        self.written.signal(stream, n)?;
        self.released_frame(n)
    }

    /// As [`Self::release`] on a raw stream (checked to be this client's context's).
    ///
    /// # Safety
    /// `stream` must be null (the legacy default stream) or a live `CUstream`.
    pub unsafe fn release_raw(
        &mut self,
        frame: &Frame,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<()> {
        let n = self.check_release(frame)?;
        // SAFETY: forwarded.
        unsafe { self.written.enqueue_raw(stream, n, true) }?;
        self.released_frame(n)
    }

    fn check_release(&mut self, frame: &Frame) -> Result<u64> {
        let n = self.check_begun(frame, FrameStep::CudaRelease)?;
        let drawn = self.attached.link().last_seen();
        if n > drawn.saturating_add(self.frames_in_flight) {
            return Err(SyncError::FrameOutOfOrder {
                frame: n,
                last_step: FrameStep::Begin,
                reason: FrameStep::CudaRelease,
            }
            .into());
        }
        Ok(n)
    }

    /// Frame `n`'s signal is enqueued: the frame is done here; the viewer is told.
    fn released_frame(&mut self, n: u64) -> Result<()> {
        self.begun = None;
        self.last = n;
        let link = self.attached.link();
        link.notify(n)?;
        // Read what the viewer said meanwhile, so its notices never pile up unread.
        link.latest(u64::MAX - 1, Duration::ZERO).map(drop)
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

    /// Sends the newest "written" notice if the socket was full when it was made, waiting at
    /// most `timeout` for room (see [`FrameServer::wait_idle`]).
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
        // (see `Session::release_waits`). The viewer's last announced value too: its negative
        // controls (`submit_drawn_without_waiting`) signal frames this producer never wrote.
        let above = self
            .written
            .ledger()
            .highest()
            .max(self.drawn.ledger().highest_wait())
            .max(self.attached.link().last_seen())
            .max(self.released);
        self.drawn.signal(&stream, above + 1)?;
        self.released = above + 1;
        self.begun = None;
        stream.synchronize().cuda("cuStreamSynchronize")
    }

    /// Frames in flight (K).
    pub fn frames_in_flight(&self) -> u32 {
        self.frames_in_flight as u32
    }
}
