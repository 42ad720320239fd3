//! Fan-out (issue 37; first cut, not yet run on a GPU): a [`Publisher`] owns K slots and
//! every timeline, any number of [`Subscriber`]s attach, hold the newest frame (or every
//! frame), read it on the GPU and release it; nobody waits for anybody on the host. The book
//! is `rules::fanout`'s; the design is `docs/FANOUT.md`.
//!
//! - `written` (the publisher's CUDA stream signals frame N written) and one `read` timeline
//!   per consumer (made when it attaches, sent to it alone; it signals it when its read of a
//!   held frame is done). The publisher's next write of a slot waits on the GPU for the reads
//!   of it released since.
//! - A service thread accepts consumers and answers their holds at once from the book; a
//!   consumer gone (its socket closed, killed or not) is removed and its read timeline
//!   released from the host past every value it was given.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;

use super::error::IpcError;
use super::share::{Link, Server};
use super::wire::{HoldMessage, HoldOp, TimelineRole};
use crate::error::{FrameStep, Result, SyncError};
use crate::interop::frame::{check_current, next_issuer_id};
use crate::interop::{Bridge, BufferUsage, SharedBuffer, SharedSemaphore};
use crate::rules::fanout::{Blocked, ConsumerId, Delivery, HoldRefused, SlotBook, WritePlan};
use crate::vulkan::{Semaphore, SemaphoreDesc, SemaphoreKind, VulkanContext};
use crate::{ElementFormat, Frame};

/// How often the service thread looks for new consumers and reads their messages.
const SERVICE_TICK: Duration = Duration::from_millis(2);

/// A consumer as the publisher sees it.
struct Consumer {
    link: Link,
    read: SharedSemaphore,
    /// Whether it said how it takes frames (once, first).
    subscribed: bool,
}

/// What the publisher's thread and its service thread share.
struct Shared {
    book: SlotBook,
    consumers: BTreeMap<ConsumerId, Consumer>,
    next_consumer: ConsumerId,
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
    written: SharedSemaphore,
    slots: Vec<SharedBuffer<u8>>,
    /// The frame begun and its plan.
    begun: Option<(u64, WritePlan)>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("slots", &self.slots.len())
            .field("consumers", &lock(&self.shared).consumers.len())
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
            .map(|_| bridge.create_buffer::<u8>(desc.bytes as usize, usage))
            .collect::<Result<Vec<_>>>()?;
        let written = bridge.create_semaphore(SemaphoreKind::Timeline { initial: 0 })?;
        let mut server = Server::bind(name, bridge.vulkan())?;
        server.publish_timeline(&written.vulkan, TimelineRole::Publisher)?;
        for s in &slots {
            server.publish_buffer(s.vulkan_buffer(), desc.element)?;
        }
        let shared = Arc::new(Mutex::new(Shared {
            book: SlotBook::new(k as usize),
            consumers: BTreeMap::new(),
            next_consumer: 1,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let service = {
            let (shared, stop) = (shared.clone(), stop.clone());
            let (vk, cuda) = (bridge.vulkan().clone(), bridge.cuda().clone());
            std::thread::Builder::new()
                .name(format!("cuvk-publish-{name}"))
                .spawn(move || serve(&server, &vk, &cuda, &shared, &stop))
                .map_err(|e| IpcError::io("spawning the service thread", &e))?
        };
        Ok(Self {
            id: next_issuer_id(),
            shared,
            stop,
            service: Some(service),
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
        lock(&self.shared).consumers.len()
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
                                if let Some(c) = shared.consumers.get(&id) {
                                    let _ = c.link.send_hold(hold(HoldOp::Demoted, 0, 0, 0));
                                }
                            }
                        }
                        continue;
                    }
                }
            }
            drop(shared);
            std::thread::sleep(SERVICE_TICK);
        }
    }

    /// Before writing `frame`: `stream` waits on the GPU for every consumer's read of the
    /// frame's slot released since it was last written.
    pub fn acquire(&self, frame: &Frame, stream: &CudaStream) -> Result<()> {
        let (_, plan) = self.check(frame, FrameStep::CudaAcquire)?;
        let shared = lock(&self.shared);
        for &(id, value) in &plan.gpu_waits {
            // A consumer gone meanwhile had its read timeline released past `value`.
            if let Some(c) = shared.consumers.get(&id) {
                c.read.cuda.wait(stream, value)?;
            }
        }
        Ok(())
    }

    /// After writing `frame`: `stream` signals it written; every consumer is told (their
    /// holds take it from now on).
    pub fn release(&mut self, frame: &Frame, stream: &CudaStream) -> Result<()> {
        let (n, _) = self.check(frame, FrameStep::CudaRelease)?;
        self.written.cuda.signal(stream, n)?;
        self.begun = None;
        let mut shared = lock(&self.shared);
        shared.book.published();
        for c in shared.consumers.values() {
            // A consumer gone is removed by the service thread.
            let _ = c.link.notify(n);
        }
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

impl Drop for Publisher {
    fn drop(&mut self) {
        // Every frame announced is written before the consumers hear the publisher go (they
        // then release their waits on `written` from the host: past a frame still being
        // written, that would let their reads run over it).
        let written = &self.written.vulkan;
        let budget = written.context().drop_budget().timeout();
        if let Err(e) = written.wait_host(written.highest_signal(), budget) {
            log::error!("publisher: its last frames were not written within {budget:?}: {e}");
        }
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.service.take() {
            let _ = t.join();
        }
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

/// The service thread: takes new consumers, answers holds, removes the consumers gone.
fn serve(
    server: &Server,
    vk: &Arc<VulkanContext>,
    cuda: &Arc<cudarc::driver::CudaContext>,
    shared: &Mutex<Shared>,
    stop: &AtomicBool,
) {
    // The next consumer's read timeline, made before it comes (so accepting never allocates
    // under the lock).
    let mut spare: Option<SharedSemaphore> = None;
    while !stop.load(Ordering::Acquire) {
        if spare.is_none() {
            let made = Semaphore::new(vk, SemaphoreDesc::SHARED_TIMELINE).and_then(|vulkan| {
                let cuda = crate::interop::import_semaphore(cuda, &vulkan)?;
                Ok(SharedSemaphore { vulkan, cuda })
            });
            match made {
                Ok(s) => spare = Some(s),
                Err(e) => {
                    log::error!("publisher: cannot make a read timeline: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            }
        }
        if let Some(read) = spare.take() {
            match server.accept_with(Duration::ZERO, Some(&read.vulkan)) {
                Ok(link) => {
                    let mut s = lock(shared);
                    let id = s.next_consumer;
                    s.next_consumer += 1;
                    // Latest-frame until the consumer's first message says otherwise.
                    s.book.add(id, Delivery::Latest);
                    s.consumers.insert(
                        id,
                        Consumer {
                            link,
                            read,
                            subscribed: false,
                        },
                    );
                    log::info!("publisher: consumer {id} attached");
                }
                Err(e) if e.kind() == crate::ErrorKind::Timeout => spare = Some(read),
                Err(e) => {
                    log::warn!("publisher: a consumer failed to attach: {e}");
                    spare = Some(read);
                }
            }
        }
        answer(shared);
        std::thread::sleep(SERVICE_TICK);
    }
}

/// Answers every consumer's waiting messages; removes those gone.
fn answer(shared: &Mutex<Shared>) {
    let mut s = lock(shared);
    let Shared {
        book, consumers, ..
    } = &mut *s;
    let mut gone = Vec::new();
    for (&id, c) in consumers.iter_mut() {
        loop {
            match c.link.recv_hold(Duration::ZERO) {
                Ok(None) => break,
                Ok(Some(m)) => {
                    if let Err(e) = on_message(book, id, c, m) {
                        log::warn!("publisher: consumer {id}: {e}; dropping it");
                        gone.push(id);
                        break;
                    }
                }
                Err(_) => {
                    gone.push(id);
                    break;
                }
            }
        }
    }
    // Every gone consumer's timeline is released first, then they are dropped with the lock
    // let go: a read timeline's drop waits (bounded) for our stream's last use of it, which
    // may be a wait on another gone consumer's timeline that is released here.
    let mut dropped = Vec::with_capacity(gone.len());
    for id in gone {
        let Some(c) = consumers.remove(&id) else {
            continue;
        };
        // Past every value it was given to signal: no GPU wait of ours can hang on it.
        if let Some(given) = book.remove(id) {
            if let Err(e) = c.read.vulkan.release_after_peer_lost(given + 1) {
                log::error!("publisher: releasing consumer {id}'s read timeline: {e}");
            }
        }
        log::info!("publisher: consumer {id} gone");
        dropped.push(c);
    }
    drop(s);
    drop(dropped);
}

/// One message from consumer `id`.
fn on_message(book: &mut SlotBook, id: ConsumerId, c: &mut Consumer, m: HoldMessage) -> Result<()> {
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
            book.remove(id);
            book.add(id, delivery);
            Ok(())
        }
        HoldOp::Request => {
            let answer = match book.hold(id) {
                Ok(h) => hold(HoldOp::Granted, h.frame, h.slot as u32, h.read_value),
                Err(HoldRefused::NothingNew) => hold(HoldOp::Nothing, 0, 0, 0),
                Err(refused) => {
                    return Err(IpcError::UnexpectedMessage {
                        expected: match refused {
                            HoldRefused::AlreadyHolding { .. } => "a release of the frame held",
                            _ => "a hold request from a consumer",
                        },
                        got: super::wire::MessageKind::Hold,
                    }
                    .into())
                }
            };
            c.link.send_hold(answer)
        }
        HoldOp::Released => {
            // Only the hold's own frame and read value: a value past it would push the
            // release after its death below what it scheduled.
            book.release(id, m.frame, m.value)
                .map_err(|_| out_of_turn("a release of the frame held, with its read value"))?;
            // The consumer scheduled its read-timeline signal: our waits may name it.
            c.read.vulkan.note_remote_signal(m.value)
        }
        HoldOp::Granted | HoldOp::Nothing | HoldOp::Demoted => Err(IpcError::UnexpectedMessage {
            expected: "a consumer's request",
            got: super::wire::MessageKind::Hold,
        }
        .into()),
    }
}
