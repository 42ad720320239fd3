//! Fan-out (issue 37): a [`Publisher`] owns K slots and every timeline, any number of
//! [`Subscriber`]s attach, hold the newest frame (or every frame), read it on the GPU and
//! release it; nobody waits for anybody on the host. The book is `rules::fanout`'s; the
//! design is `docs/FANOUT.md`.
//!
//! - `written` (the publisher's CUDA stream signals frame N written) and one `read` timeline
//!   per consumer (made when it attaches, sent to it alone; it signals it when its read of a
//!   held frame is done). The publisher's next write of a slot waits on the GPU for the reads
//!   of it released since.
//! - A service thread owns the consumers' connections: it sleeps in `poll` on them, the
//!   listener and a wake-up eventfd, accepts consumers, answers their holds from the book and
//!   tells those waiting for a frame that one was published. The publisher's thread only
//!   takes the book's lock briefly and writes the eventfd once per frame: its cost per frame
//!   does not grow with the consumers, and no socket I/O happens under the lock.
//! - A consumer gone (its socket closed, killed or not) is removed and its read timeline
//!   released from the host past every value it was given.
//!
//! [`Subscriber`]: super::Subscriber

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;
use rustix::event::{PollFd, PollFlags};

use super::error::IpcError;
use super::share::{Link, Server};
use super::wire::{HoldMessage, HoldOp, TimelineRole};
use crate::error::{FrameStep, Result, SyncError};
use crate::interop::frame::{check_current, next_issuer_id};
use crate::interop::{Bridge, BufferUsage, SharedBuffer, SharedSemaphore};
use crate::rules::fanout::{Blocked, ConsumerId, Delivery, HoldRefused, SlotBook, WritePlan};
use crate::vulkan::{Dedicated, Semaphore, SemaphoreDesc, SemaphoreKind, VulkanContext};
use crate::{ElementFormat, Frame};

/// How long `begin_frame` sleeps while lossless consumers hold every free slot.
const LOSSLESS_TICK: Duration = Duration::from_micros(200);
/// The longest the service thread sleeps in `poll` (it is woken for everything else).
const SERVICE_IDLE: Duration = Duration::from_millis(100);

/// A consumer's connection, owned by the service thread.
struct Connection {
    link: Link,
    /// Whether it said how it takes frames (once, first).
    subscribed: bool,
    /// It was answered `Nothing`: it waits for the next frame's notice.
    waiting: bool,
}

/// What the publisher's thread and its service thread share (under one lock, held briefly:
/// no socket I/O under it).
struct Shared {
    book: SlotBook,
    /// Every consumer's read timeline (the publisher's stream waits on them).
    reads: BTreeMap<ConsumerId, SharedSemaphore>,
    next_consumer: ConsumerId,
    /// The newest frame published.
    published: u64,
    /// Lossless consumers demoted by `begin_frame`, for the service thread to tell.
    demoted: Vec<ConsumerId>,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a publisher is made with.
#[derive(Debug, Clone, Copy)]
pub struct PublisherDesc {
    /// K: slots (1..=16). `consumers + 2` serves that many latest-frame consumers without ever
    /// finding every slot taken.
    pub slots: u32,
    /// Bytes per slot: whole rows of `element`.
    pub bytes: u64,
    /// What a slot holds.
    pub element: ElementFormat,
}

/// The simulation's side: K slots it writes with CUDA, served to any number of consumers.
pub struct Publisher {
    id: u64,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    service: Option<JoinHandle<()>>,
    /// Wakes the service thread (a frame published, a consumer demoted, the publisher gone).
    wake: Arc<OwnedFd>,
    written: SharedSemaphore,
    slots: Vec<SharedBuffer<u8>>,
    /// The frame begun and its plan.
    begun: Option<(u64, WritePlan)>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("slots", &self.slots.len())
            .field("consumers", &lock(&self.shared).reads.len())
            .finish_non_exhaustive()
    }
}

impl Publisher {
    /// Makes K slots of `desc.bytes` (Vulkan memory mapped into CUDA) and the `written`
    /// timeline, publishes them under `name`, and starts serving consumers.
    pub fn new(name: &str, bridge: &Bridge, desc: PublisherDesc) -> Result<Self> {
        let k = crate::interop::frame::check_frames_in_flight(desc.slots)?;
        if k < 2 {
            // One slot is the newest frame, kept for holds: no slot would be left to write.
            return Err(SyncError::SlotsHeld {
                slots: desc.slots,
                holding: 0,
            }
            .into());
        }
        desc.element.check()?;
        let row = desc.element.row_bytes();
        if desc.bytes == 0 || !desc.bytes.is_multiple_of(row) {
            return Err(crate::LayoutError::PartialElement {
                bytes: desc.bytes,
                element_size: row,
            }
            .into());
        }
        let usage = BufferUsage::STORAGE_BUFFER;
        let slots = (0..k)
            // Non-dedicated where the driver allows: a consumer may then bind buffers of its
            // own to the imported memory (an engine's alias of the slot: Bevy's).
            .map(|_| {
                bridge.create_buffer_with::<u8>(desc.bytes as usize, usage, Dedicated::WhenRequired)
            })
            .collect::<Result<Vec<_>>>()?;
        let written = bridge.create_semaphore(SemaphoreKind::Timeline { initial: 0 })?;
        let mut server = Server::bind(name, bridge.vulkan())?;
        server.publish_timeline(&written.vulkan, TimelineRole::Publisher)?;
        for s in &slots {
            server.publish_buffer(s.vulkan_buffer(), desc.element)?;
        }
        let shared = Arc::new(Mutex::new(Shared {
            book: SlotBook::new(k as usize),
            reads: BTreeMap::new(),
            next_consumer: 1,
            published: 0,
            demoted: Vec::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(
            rustix::event::eventfd(
                0,
                rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
            )
            .map_err(|e| IpcError::io("eventfd", &e.into()))?,
        );
        let service = {
            let service = Service {
                server: Arc::new(server),
                vk: bridge.vulkan().clone(),
                cuda: bridge.cuda().clone(),
                shared: shared.clone(),
                stop: stop.clone(),
                wake: wake.clone(),
                connections: BTreeMap::new(),
                notified: 0,
                handshake: None,
                listener_rests_until: None,
            };
            std::thread::Builder::new()
                .name(format!("cuvk-publish-{name}"))
                .spawn(move || service.run())
                .map_err(|e| IpcError::io("spawning the service thread", &e))?
        };
        Ok(Self {
            id: next_issuer_id(),
            shared,
            stop,
            service: Some(service),
            wake,
            written,
            slots,
            begun: None,
        })
    }

    /// Slot `slot` (0..K, [`Frame::slot`]), for the CUDA kernels that write it.
    pub fn slot(&self, slot: usize) -> Option<&SharedBuffer<u8>> {
        self.slots.get(slot)
    }

    /// Consumers attached now.
    pub fn consumers(&self) -> usize {
        lock(&self.shared).reads.len()
    }

    /// The next frame to write, in a slot no consumer holds. Never waits for a latest-frame
    /// consumer; lossless consumers that hold every free slot are waited for at most
    /// `timeout`, then demoted to latest-frame (and told). [`SyncError::SlotsHeld`] where K
    /// is too small for the consumers holding. The frame begun last and not released is
    /// handed out again.
    pub fn begin_frame(&mut self, timeout: Duration) -> Result<Frame> {
        let k = self.slots.len() as u64;
        if let Some((n, plan)) = &self.begun {
            return Ok(Frame::issue_at(self.id, *n, plan.slot, k));
        }
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let mut shared = lock(&self.shared);
            match shared.book.begin_write() {
                Ok(plan) => {
                    let (n, slot) = (plan.frame, plan.slot);
                    self.begun = Some((n, plan));
                    return Ok(Frame::issue_at(self.id, n, slot, k));
                }
                Err(Blocked::Exhausted { slots, holding }) => {
                    return Err(SyncError::SlotsHeld {
                        slots: slots as u32,
                        holding: holding as u32,
                    }
                    .into())
                }
                Err(Blocked::Lossless(ids)) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        for id in ids {
                            if shared.book.demote(id) {
                                log::info!("publisher: consumer {id} held every frame past {timeout:?}: latest-frame now");
                                shared.demoted.push(id);
                            }
                        }
                        drop(shared);
                        wake(&self.wake);
                        continue;
                    }
                }
            }
            drop(shared);
            std::thread::sleep(LOSSLESS_TICK);
        }
    }

    /// Before writing `frame`: `stream` waits on the GPU for every consumer's read of the
    /// frame's slot released since it was last written.
    pub fn acquire(&self, frame: &Frame, stream: &CudaStream) -> Result<()> {
        self.written.cuda.check_stream(stream)?;
        // SAFETY: a live stream (borrowed), of this publisher's context (checked).
        unsafe { self.acquire_raw(frame, stream.cu_stream()) }
    }

    /// As [`Self::acquire`] on a raw stream (another library's, e.g. PyTorch's), checked to
    /// be of this publisher's CUDA context.
    ///
    /// # Safety
    /// `stream` must be null (the context's legacy default stream) or a live `CUstream`.
    pub unsafe fn acquire_raw(
        &self,
        frame: &Frame,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<()> {
        let (_, plan) = self.check(frame, FrameStep::CudaAcquire)?;
        let shared = lock(&self.shared);
        // A consumer gone meanwhile had its read timeline released past `value`: skipped.
        let waits: Vec<_> = plan
            .gpu_waits
            .iter()
            .filter_map(|&(id, value)| shared.reads.get(&id).map(|r| (&r.cuda, value)))
            .collect();
        // SAFETY: forwarded from the caller.
        unsafe { crate::cuda::ExternalSemaphore::wait_all_raw(&waits, stream) }
    }

    /// After writing `frame`: `stream` signals it written; the consumers' holds take it from
    /// now on (those waiting for a frame are told by the service thread).
    pub fn release(&mut self, frame: &Frame, stream: &CudaStream) -> Result<()> {
        self.written.cuda.check_stream(stream)?;
        // SAFETY: a live stream (borrowed), of this publisher's context (checked).
        unsafe { self.release_raw(frame, stream.cu_stream()) }
    }

    /// As [`Self::release`] on a raw stream, checked to be of this publisher's CUDA context.
    ///
    /// # Safety
    /// `stream` must be null (the context's legacy default stream) or a live `CUstream`.
    pub unsafe fn release_raw(
        &mut self,
        frame: &Frame,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<()> {
        let (n, _) = self.check(frame, FrameStep::CudaRelease)?;
        // SAFETY: forwarded from the caller.
        unsafe { self.written.cuda.enqueue_raw(stream, n, true) }?;
        self.begun = None;
        {
            let mut shared = lock(&self.shared);
            shared.book.published();
            shared.published = n;
        }
        // The service thread tells the consumers waiting for a frame: one write, however
        // many consumers there are.
        wake(&self.wake);
        Ok(())
    }

    fn check(&self, frame: &Frame, step: FrameStep) -> Result<(u64, &WritePlan)> {
        let begun = self.begun.as_ref().map(|(n, _)| *n);
        check_current(frame, self.id, begun, 0, step)?;
        let (n, plan) = self.begun.as_ref().ok_or(SyncError::ForeignFrame {
            frame: frame.number(),
        })?;
        Ok((*n, plan))
    }
}

impl Publisher {
    /// Stops serving: once every frame announced is written (bounded by the drop budget), the
    /// consumers' connections and the listener close — each consumer sees the publisher end
    /// (`PeerClosed`), and the name is free. The slots stay until the publisher drops, so
    /// tensors made over them stay valid; frames published after this reach no one.
    /// Idempotent; dropping the publisher does it.
    pub fn close(&mut self) {
        let Some(service) = self.service.take() else {
            return;
        };
        // Every frame announced is written before the consumers hear the publisher go (they
        // then release their waits on `written` from the host: past a frame still being
        // written, that would let their reads run over it).
        let written = &self.written.vulkan;
        let budget = written.context().drop_budget().timeout();
        if let Err(e) = written.wait_host(written.highest_signal(), budget) {
            log::error!("publisher: its last frames were not written within {budget:?}: {e}");
        }
        self.stop.store(true, Ordering::Release);
        wake(&self.wake);
        let _ = service.join();
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.close();
    }
}

pub(super) fn hold(op: HoldOp, frame: u64, slot: u32, value: u64) -> HoldMessage {
    HoldMessage {
        op,
        frame,
        slot,
        value,
    }
}

/// Wakes the service thread (an eventfd write; a full counter is still a wake-up).
fn wake(fd: &OwnedFd) {
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// The service thread's state: the consumers' connections are its alone.
struct Service {
    server: Arc<Server>,
    vk: Arc<VulkanContext>,
    cuda: Arc<cudarc::driver::CudaContext>,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    wake: Arc<OwnedFd>,
    connections: BTreeMap<ConsumerId, Connection>,
    /// The newest frame the waiting consumers were told of.
    notified: u64,
    /// The handshake running on its own thread (one at a time): its result comes back here.
    handshake: Option<Handshake>,
    /// After a failed accept (a full descriptor table, say): the listener rests until then.
    listener_rests_until: Option<Instant>,
}

/// A consumer's handshake, off the service thread: a slow or stopped client delays only the
/// next attach, never the answers to the consumers already there.
struct Handshake {
    thread: JoinHandle<()>,
    result: std::sync::mpsc::Receiver<(Result<Link>, SharedSemaphore)>,
}

/// How long the listener rests after an accept failed for another reason than a client gone.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

impl Service {
    /// Until the publisher stops: sleeps in `poll` on the listener, every connection and the
    /// wake-up eventfd; takes new consumers, answers holds, tells the waiting of new frames,
    /// removes the consumers gone.
    fn run(mut self) {
        // The next consumer's read timeline, made before it comes (so accepting never
        // allocates while a consumer waits for its answer).
        let mut spare: Option<SharedSemaphore> = None;
        while !self.stop.load(Ordering::Acquire) {
            let rested = self
                .listener_rests_until
                .is_none_or(|t| Instant::now() >= t);
            if spare.is_none() && self.handshake.is_none() && rested {
                match self.read_timeline() {
                    Ok(s) => spare = Some(s),
                    Err(e) => {
                        log::error!("publisher: cannot make a read timeline: {e}");
                        self.listener_rests_until = Instant::now().checked_add(ACCEPT_BACKOFF);
                    }
                }
            }
            let listen = spare.is_some() && self.handshake.is_none() && rested;
            let (listener, readable) = self.poll(listen);
            if listener {
                if let Some(read) = spare.take() {
                    self.start_handshake(read);
                }
            }
            if let Some(read) = self.finish_handshake() {
                spare = Some(read);
            }
            self.answer(&readable);
        }
        if let Some(h) = self.handshake.take() {
            // Bounded by the handshake's own deadline (2 s): the name is free once it ends.
            let _ = h.thread.join();
        }
    }

    fn read_timeline(&self) -> Result<SharedSemaphore> {
        let vulkan = Semaphore::new(&self.vk, SemaphoreDesc::SHARED_TIMELINE)?;
        let cuda = crate::interop::import_semaphore(&self.cuda, &vulkan)?;
        Ok(SharedSemaphore { vulkan, cuda })
    }

    /// Sleeps until something happens (at most [`SERVICE_IDLE`]): whether the listener is
    /// readable (asked only when `listen`), and the consumers whose connections are (or hung
    /// up).
    fn poll(&self, listen: bool) -> (bool, Vec<ConsumerId>) {
        let ids: Vec<ConsumerId> = self.connections.keys().copied().collect();
        let events = PollFlags::IN;
        let mut fds = Vec::with_capacity(ids.len() + 2);
        fds.push(PollFd::new(&*self.wake, events));
        let listener = self.server.listener_fd();
        let listener_events = if listen { events } else { PollFlags::empty() };
        fds.push(PollFd::new(&listener, listener_events));
        let links: Vec<_> = self
            .connections
            .values()
            .map(|c| c.link.poll_fd())
            .collect();
        for fd in &links {
            fds.push(PollFd::new(fd, events));
        }
        let idle = rustix::event::Timespec {
            tv_sec: SERVICE_IDLE.as_secs() as _,
            tv_nsec: SERVICE_IDLE.subsec_nanos() as _,
        };
        if let Err(e) = rustix::event::poll(&mut fds, Some(&idle)) {
            if e != rustix::io::Errno::INTR {
                log::warn!("publisher: poll: {e}");
                // Not a spin: whatever failed, the next try is a while away.
                std::thread::sleep(Duration::from_millis(10));
            }
            return (false, Vec::new());
        }
        let ready = |f: &PollFd<'_>| !f.revents().is_empty();
        if ready(&fds[0]) {
            let mut count = [0u8; 8];
            let _ = rustix::io::read(&*self.wake, &mut count);
        }
        let listener = listen && ready(&fds[1]);
        let readable = ids
            .iter()
            .zip(&fds[2..])
            .filter(|(_, f)| ready(f))
            .map(|(&id, _)| id)
            .collect();
        (listener, readable)
    }

    /// Accepts the connecting consumer and runs its handshake on a thread of its own, which
    /// wakes the service thread when done.
    fn start_handshake(&mut self, read: SharedSemaphore) {
        let (tx, rx) = std::sync::mpsc::channel();
        let (server, wake_fd) = (self.server.clone(), self.wake.clone());
        let spawned = std::thread::Builder::new()
            .name("cuvk-publish-attach".into())
            .spawn(move || {
                let link = server.accept_with(Duration::ZERO, Some(&read.vulkan));
                let _ = tx.send((link, read));
                wake(&wake_fd);
            });
        match spawned {
            Ok(thread) => {
                self.handshake = Some(Handshake { thread, result: rx });
            }
            Err(e) => {
                // The read timeline went with the closure; a new one is made next time.
                log::warn!("publisher: cannot start a handshake thread: {e}");
                self.listener_rests_until = Instant::now().checked_add(ACCEPT_BACKOFF);
            }
        }
    }

    /// Takes the consumer whose handshake finished, if one did; returns the read timeline
    /// when it was not used.
    fn finish_handshake(&mut self) -> Option<SharedSemaphore> {
        let (link, read) = {
            let h = self.handshake.as_ref()?;
            match h.result.try_recv() {
                Ok(done) => done,
                Err(std::sync::mpsc::TryRecvError::Empty) => return None,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    // The thread ended without an answer (it panicked): try again later.
                    self.handshake = None;
                    self.listener_rests_until = Instant::now().checked_add(ACCEPT_BACKOFF);
                    return None;
                }
            }
        };
        if let Some(h) = self.handshake.take() {
            let _ = h.thread.join();
        }
        match link {
            Ok(link) => {
                let mut s = lock(&self.shared);
                let id = s.next_consumer;
                s.next_consumer += 1;
                // Latest-frame until the consumer's first message says otherwise.
                s.book.add(id, Delivery::Latest);
                s.reads.insert(id, read);
                drop(s);
                self.connections.insert(
                    id,
                    Connection {
                        link,
                        subscribed: false,
                        waiting: false,
                    },
                );
                log::info!("publisher: consumer {id} attached");
                None
            }
            Err(e) if e.kind() == crate::ErrorKind::Timeout => Some(read),
            Err(e) => {
                log::warn!("publisher: a consumer failed to attach: {e}");
                // A listener that stays readable (accept failing on a full descriptor
                // table) must not spin the service thread.
                self.listener_rests_until = Instant::now().checked_add(ACCEPT_BACKOFF);
                Some(read)
            }
        }
    }

    /// Reads what the `readable` consumers sent (no lock held), applies it to the book (under
    /// the lock, briefly), sends the answers and the notices of a new frame (no lock held),
    /// and removes the consumers gone.
    fn answer(&mut self, readable: &[ConsumerId]) {
        let mut gone = Vec::new();
        let mut received = Vec::new();
        for &id in readable {
            let Some(c) = self.connections.get_mut(&id) else {
                continue;
            };
            loop {
                match c.link.recv_hold(Duration::ZERO) {
                    Ok(None) => break,
                    Ok(Some(m)) => received.push((id, m)),
                    Err(_) => {
                        gone.push(id);
                        break;
                    }
                }
            }
        }
        let mut answers = Vec::new();
        let (published, demoted) = {
            let mut s = lock(&self.shared);
            for (id, m) in received {
                if gone.contains(&id) {
                    continue;
                }
                let Some(c) = self.connections.get_mut(&id) else {
                    continue;
                };
                match on_message(&mut s, id, c, m) {
                    Ok(Some(answer)) => answers.push((id, answer)),
                    Ok(None) => {}
                    Err(e) => {
                        log::warn!("publisher: consumer {id}: {e}; dropping it");
                        gone.push(id);
                    }
                }
            }
            (s.published, std::mem::take(&mut s.demoted))
        };
        for (id, answer) in answers {
            if let Some(c) = self.connections.get(&id) {
                if c.link.send_hold(answer).is_err() {
                    gone.push(id);
                }
            }
        }
        for id in demoted {
            if let Some(c) = self.connections.get(&id) {
                let _ = c.link.send_hold(hold(HoldOp::Demoted, 0, 0, 0));
            }
        }
        if published > self.notified {
            self.notified = published;
            for (&id, c) in self.connections.iter_mut().filter(|(_, c)| c.waiting) {
                c.waiting = false;
                if c.link.notify(published).is_err() {
                    gone.push(id);
                }
            }
        }
        if !gone.is_empty() {
            self.remove(gone);
        }
    }

    /// Removes the consumers gone: every one's read timeline is released first, then they
    /// are dropped with the lock let go (a read timeline's drop waits, bounded, for our
    /// stream's last use of it, which may be a wait on another gone consumer's timeline that
    /// is released here).
    fn remove(&mut self, mut gone: Vec<ConsumerId>) {
        gone.sort_unstable();
        gone.dedup();
        let mut dropped = Vec::with_capacity(gone.len());
        {
            let mut s = lock(&self.shared);
            for id in gone {
                let link = self.connections.remove(&id);
                let read = s.reads.remove(&id);
                // Past every value it was given to signal: no GPU wait of ours can hang on it.
                if let (Some(given), Some(read)) = (s.book.remove(id), &read) {
                    if let Err(e) = read.vulkan.release_after_peer_lost(given + 1) {
                        log::error!("publisher: releasing consumer {id}'s read timeline: {e}");
                    }
                }
                log::info!("publisher: consumer {id} gone");
                dropped.push((link, read));
            }
        }
        drop(dropped);
    }
}

/// One message from consumer `id`: the answer to send it, if any.
fn on_message(
    s: &mut Shared,
    id: ConsumerId,
    c: &mut Connection,
    m: HoldMessage,
) -> Result<Option<HoldMessage>> {
    let out_of_turn = |expected| IpcError::UnexpectedMessage {
        expected,
        got: super::wire::MessageKind::Hold,
    };
    match m.op {
        // Once, first: a second one would reset its read values under reads in flight.
        HoldOp::Subscribe if c.subscribed => Err(out_of_turn("no second subscription").into()),
        HoldOp::Subscribe => {
            c.subscribed = true;
            let delivery = if m.value == 1 {
                Delivery::EveryFrame
            } else {
                Delivery::Latest
            };
            s.book.remove(id);
            s.book.add(id, delivery);
            Ok(None)
        }
        HoldOp::Request => match s.book.hold(id) {
            Ok(h) => Ok(Some(hold(
                HoldOp::Granted,
                h.frame,
                h.slot as u32,
                h.read_value,
            ))),
            Err(HoldRefused::NothingNew) => {
                // It waits for the next frame's notice.
                c.waiting = true;
                Ok(Some(hold(HoldOp::Nothing, 0, 0, 0)))
            }
            Err(refused) => Err(IpcError::UnexpectedMessage {
                expected: match refused {
                    HoldRefused::AlreadyHolding { .. } => "a release of the frame held",
                    _ => "a hold request from a consumer",
                },
                got: super::wire::MessageKind::Hold,
            }
            .into()),
        },
        HoldOp::Released => {
            // Only the hold's own frame and read value: a value past it would push the
            // release after its death below what it scheduled.
            s.book
                .release(id, m.frame, m.value)
                .map_err(|_| out_of_turn("a release of the frame held, with its read value"))?;
            // The consumer scheduled its read-timeline signal: our waits may name it.
            match s.reads.get(&id) {
                Some(read) => read.vulkan.note_remote_signal(m.value).map(|()| None),
                None => Ok(None),
            }
        }
        HoldOp::Granted | HoldOp::Nothing | HoldOp::Demoted => Err(IpcError::UnexpectedMessage {
            expected: "a consumer's request",
            got: super::wire::MessageKind::Hold,
        }
        .into()),
    }
}
