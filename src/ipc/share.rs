//! Publishing Vulkan memory and timelines to another process, and attaching to them.
//!
//! A [`Server`] (the process that owns the memory and the timelines: a viewer that draws, in
//! the particle demo's `--serve`) publishes buffers bound to exportable memory and exportable
//! timeline semaphores under a name; each [`Server::accept`] sends a new client the
//! description of every object with a fresh descriptor of it. A client ([`Attached::connect`])
//! checks the description against its own device and each descriptor's kind, then imports what
//! it needs — into Vulkan ([`Attached::import_vulkan_buffer`]) or CUDA
//! ([`Attached::import_cuda_buffer`]) — each import from a duplicate, so the descriptors it
//! received are closed exactly once, when the [`Attached`] drops.
//!
//! Frames then cross with one-way notices ([`Link::notify`], [`Link::latest`]): "value N is
//! scheduled on the timeline I signal", so the other side may enqueue a GPU wait for it (no
//! wait is ever enqueued for a value nobody scheduled) — no host round trip per frame.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::vk;
use cudarc::driver::CudaContext;

use super::channel::{Channel, Listener};
use super::describe;
use super::error::IpcError;
use super::wire::{
    BufferInfo, FrameNotice, Hello, HoldMessage, ImageInfo, ImageShape, Message, MessageKind,
    TimelineInfo, TimelineRole,
};
use crate::cuda::{ExternalSemaphore, ImportedMemory, MapOptions, MappedRange, MipmappedArray};
use crate::error::{Error, Result};
use crate::rules::layout::{ImportLayout, LayoutError};
use crate::rules::timeline::SignalLedger;
use crate::uuid::Uuid;
use crate::vulkan::memory::Dedication;
use crate::vulkan::{
    BoundBuffer, BoundImage, Buffer, BufferDesc, DeviceMemory, ExternalUse, Image, ImageOptions,
    Semaphore, SemaphoreKind, VulkanContext,
};
use crate::ImageKind;

const OPAQUE_FD: vk::ExternalMemoryHandleTypeFlags = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
const OPAQUE_SEMAPHORE_FD: vk::ExternalSemaphoreHandleTypeFlags =
    vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD;

/// The publishing side: owns what it publishes; any number of clients attach, one at a time
/// through [`Self::accept`].
pub struct Server {
    listener: Listener,
    vk: Arc<VulkanContext>,
    buffers: Vec<(BufferInfo, Arc<BoundBuffer>)>,
    images: Vec<(ImageInfo, Arc<BoundImage>)>,
    timelines: Vec<(TimelineInfo, Arc<Semaphore>)>,
    generation: u64,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("buffers", &self.buffers.len())
            .field("images", &self.images.len())
            .field("timelines", &self.timelines.len())
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// The listening socket, for a service thread's `poll` (readable: a client connects).
    pub(crate) fn listener_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.listener.as_fd()
    }

    /// Listens under `name` (an abstract socket name, or a path where it has a `/`) for
    /// clients of `vk`'s device.
    pub fn bind(name: &str, vk: &Arc<VulkanContext>) -> Result<Self> {
        Ok(Self {
            listener: Listener::bind(name)?,
            vk: vk.clone(),
            buffers: Vec::new(),
            images: Vec::new(),
            timelines: Vec::new(),
            generation: 1,
        })
    }

    /// Memory of this server's device, exportable as an opaque FD: what a published buffer or
    /// image must be bound to.
    fn check_publishable(
        &self,
        memory: &DeviceMemory,
        object: crate::DeviceObject,
        what: crate::Exportable,
    ) -> Result<()> {
        if !Arc::ptr_eq(memory.context(), &self.vk) {
            return Err(Error::WrongDevice {
                object,
                owner: crate::DeviceOwner::VulkanDevice,
            });
        }
        if !memory.handle_types().contains(OPAQUE_FD) {
            return Err(crate::MemoryError::NotExportable { what }.into());
        }
        Ok(())
    }

    /// The id the next published object gets (ids count every object, in publishing order).
    fn next_id(&self) -> u32 {
        (self.buffers.len() + self.images.len() + self.timelines.len()) as u32
    }

    /// Publishes `buffer` (bound to exportable memory of the server's device), holding whole
    /// rows of `element` (what importers read it as: a CUDA array's shape and type). Returns
    /// its id. Refused where the memory cannot be exported or the description breaks a rule
    /// (`Layout.ElementFormat`, `Layout.PartialElement`, ...).
    pub fn publish_buffer(
        &mut self,
        buffer: &Arc<BoundBuffer>,
        element: crate::ElementFormat,
    ) -> Result<u32> {
        let memory = buffer.memory();
        self.check_publishable(
            memory,
            crate::DeviceObject::Buffer,
            crate::Exportable::Memory,
        )?;
        let info = BufferInfo {
            id: self.next_id(),
            size: buffer.buffer().size(),
            offset: buffer.offset(),
            memory_size: memory.size(),
            element,
            dedicated: memory.is_dedicated(),
            usage: buffer.buffer().usage(),
            handle_type: OPAQUE_FD,
        };
        // What the attacher checks, checked here first: a peer never receives a refusal.
        describe::check_buffer(&info)?;
        self.buffers.push((info, buffer.clone()));
        self.generation += 1;
        Ok(info.id)
    }

    /// Publishes `image` (bound to exportable memory of the server's device, `OPTIMAL` tiling,
    /// in the shared layout between uses as every shared image is). Returns its id. The
    /// attacher gets a Vulkan image of the same description on the same memory
    /// ([`Attached::import_vulkan_image`]) or a CUDA mipmapped array
    /// ([`Attached::import_cuda_image`]); the two sides hand it over as any shared image
    /// (acquire from and release to `VK_QUEUE_FAMILY_EXTERNAL`), ordered by a timeline.
    pub fn publish_image(&mut self, image: &Arc<BoundImage>) -> Result<u32> {
        let memory = image.memory();
        self.check_publishable(memory, crate::DeviceObject::Image, crate::Exportable::Image)?;
        let desc = image.desc();
        let none = vk::ImageCreateFlags::empty();
        let (shape, depth, array_layers, flags) = match desc.kind {
            ImageKind::D2 => (ImageShape::D2, 1, 1, none),
            ImageKind::D2Array { layers } => (ImageShape::D2Array, 1, layers, none),
            ImageKind::D3 { depth } => (ImageShape::D3, depth, 1, none),
            ImageKind::Cube => (
                ImageShape::Cube,
                1,
                6,
                vk::ImageCreateFlags::CUBE_COMPATIBLE,
            ),
        };
        let info = ImageInfo {
            id: self.next_id(),
            shape,
            format: desc.format,
            width: desc.extent.width,
            height: desc.extent.height,
            depth,
            mip_levels: desc.mip_levels,
            array_layers,
            usage: desc.usage,
            tiling: image.image().options().tiling,
            flags,
            offset: image.offset(),
            memory_size: memory.size(),
            dedicated: memory.is_dedicated(),
            handle_type: OPAQUE_FD,
        };
        // What the attacher will rebuild: refused here already where it could not.
        describe::image_desc(&info)?;
        self.images.push((info, image.clone()));
        self.generation += 1;
        Ok(info.id)
    }

    /// Publishes an exportable timeline semaphore of the server's device; `role` says which
    /// side signals it (each timeline has one signalling side). Returns its id.
    pub fn publish_timeline(
        &mut self,
        semaphore: &Arc<Semaphore>,
        role: TimelineRole,
    ) -> Result<u32> {
        let info = self.timeline_info(semaphore, role, self.next_id())?;
        self.timelines.push((info, semaphore.clone()));
        self.generation += 1;
        Ok(info.id)
    }

    /// The description of `semaphore` as object `id`: an exportable timeline of this device.
    fn timeline_info(
        &self,
        semaphore: &Arc<Semaphore>,
        role: TimelineRole,
        id: u32,
    ) -> Result<TimelineInfo> {
        if !Arc::ptr_eq(semaphore.context(), &self.vk) {
            return Err(Error::WrongDevice {
                object: crate::DeviceObject::Semaphore,
                owner: crate::DeviceOwner::VulkanDevice,
            });
        }
        if !semaphore.is_exportable() {
            return Err(crate::MemoryError::NotExportable {
                what: crate::Exportable::Semaphore,
            }
            .into());
        }
        if !matches!(semaphore.kind(), SemaphoreKind::Timeline { .. }) {
            return Err(crate::SyncError::NeedsTimeline {
                operation: "publishing a semaphore",
            }
            .into());
        }
        Ok(TimelineInfo {
            id,
            role,
            // The books, not the counter: a read here would leave the 1.3.239 layer a
            // phantom signal that it reports against the next host signal (a lost peer's
            // release) on a timeline no queue of ours touches again.
            initial_value: semaphore.known_value(),
            handle_type: OPAQUE_SEMAPHORE_FD,
        })
    }

    /// Waits at most `timeout` for a client that takes the objects, then sends it the
    /// description of every object with a fresh descriptor of each (closed here once sent:
    /// the client has its own).
    ///
    /// The client first gets the server's hello (this GPU and driver) and answers: ready, or it
    /// leaves (another GPU, another driver, a version it does not read). One that leaves, or
    /// does not answer within 2 s (`HANDSHAKE`), was sent no descriptor; the server then waits
    /// for the next client, within the same `timeout`, so a refused client never costs the
    /// one after it its attach. A client that connected within `timeout` gets its 2 s to
    /// answer even past `timeout` (a viewer polling with a zero timeout still takes a
    /// producer: cuvk's answers at once).
    pub fn accept(&self, timeout: Duration) -> Result<Link> {
        self.accept_with(timeout, None)
    }

    /// As [`Self::accept`], sending the client one more timeline after the published objects:
    /// `own`, for this client alone (it signals it: [`TimelineRole::Attacher`]), its id the
    /// next after theirs. A fan-out publisher gives each consumer its read timeline this way.
    pub(crate) fn accept_with(
        &self,
        timeout: Duration,
        own: Option<&Arc<Semaphore>>,
    ) -> Result<Link> {
        let own = match own {
            Some(s) => Some((
                self.timeline_info(s, TimelineRole::Attacher, self.next_id())?,
                s,
            )),
            None => None,
        };
        let deadline = Instant::now().checked_add(timeout);
        let left = || match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()),
            None => timeout,
        };
        loop {
            let channel = self.listener.accept(left())?;
            match self.handshake(&channel, u32::from(own.is_some()), HANDSHAKE) {
                Ok(()) => {}
                Err(Error::Ipc(e)) if e.is_client_gone() => {
                    log::info!(
                        "ipc: a client left before taking the objects ({e}); waiting for the next"
                    );
                    continue;
                }
                Err(e) => return Err(e),
            }
            for (info, buffer) in &self.buffers {
                let fd: OwnedFd = buffer.memory().export()?;
                channel.send(&Message::Buffer(*info), &[fd.as_fd()])?;
            }
            for (info, image) in &self.images {
                let fd: OwnedFd = image.memory().export()?;
                channel.send(&Message::Image(*info), &[fd.as_fd()])?;
            }
            let timelines = self.timelines.iter().map(|(i, s)| (i, s));
            for (info, semaphore) in timelines.chain(own.iter().map(|(i, s)| (i, *s))) {
                let fd: OwnedFd = semaphore.export()?;
                channel.send(&Message::Timeline(*info), &[fd.as_fd()])?;
            }
            return Ok(Link::new(channel));
        }
    }

    /// Sends the [`Hello`] and waits at most `timeout` for the client's answer: `Ok` once it
    /// is ready; an error for which [`IpcError::is_client_gone`] holds when it left, refused
    /// or said something else.
    /// `extra`: objects sent to this client alone after the published ones.
    fn handshake(&self, channel: &Channel, extra: u32, timeout: Duration) -> Result<()> {
        let info = self.vk.info();
        let hello = Hello {
            device_uuid: info.device_uuid.0,
            driver_uuid: info.driver_uuid.0,
            pid: std::process::id(),
            generation: self.generation,
            object_count: self.next_id() + extra,
        };
        channel.send(&Message::Hello(hello), &[])?;
        match channel.recv(timeout)? {
            (Message::Ready, _) => Ok(()),
            (Message::Goodbye, _) => Err(IpcError::PeerClosed { partial: 0 }.into()),
            (other, _) => Err(IpcError::UnexpectedMessage {
                expected: "Ready",
                got: other.kind(),
            }
            .into()),
        }
    }
}

/// How long a server waits for a connected client to answer its [`Hello`] before it serves
/// the next one instead.
pub const HANDSHAKE: Duration = Duration::from_secs(2);

impl Server {
    /// Turns away the clients waiting to connect (at most 16 per call; each gets
    /// [`IpcError::Busy`] instead of waiting out its timeout): for a server that serves one
    /// client at a time, called while it serves one. Never waits; returns how many.
    pub fn turn_away(&self) -> usize {
        // At most a few per call: a process that keeps connecting cannot hold the caller here.
        const MAX_PER_CALL: usize = 16;
        let mut turned = 0;
        while turned < MAX_PER_CALL {
            let Ok(channel) = self.listener.accept(Duration::ZERO) else {
                break;
            };
            // Best effort: a client that left already needs no answer.
            let _ = channel.try_send(&Message::Goodbye, Duration::from_millis(10));
            turned += 1;
        }
        turned
    }
}

/// The connection after setup: one-way frame notices both ways.
///
/// Sending a notice never blocks: where the peer is not reading, the newest value waits here
/// and goes with the next call (notices carry "up to N", so only the newest matters).
#[derive(Debug)]
pub struct Link {
    channel: Channel,
    latest: u64,
    closed: std::sync::atomic::AtomicBool,
    // The newest value not yet sent (the socket was full), sent by the next call.
    pending: std::sync::Mutex<Option<u64>>,
    // How many bytes into a message the other side closed (0: between messages).
    closed_partial: usize,
    // Fan-out hold messages received while reading notices, in order (never dropped).
    holds: std::collections::VecDeque<HoldMessage>,
}

/// How long a notice the socket took part of may take to finish.
const NOTICE_GRACE: Duration = Duration::from_secs(1);

impl Link {
    fn new(channel: Channel) -> Self {
        Self {
            channel,
            latest: 0,
            closed: std::sync::atomic::AtomicBool::new(false),
            pending: std::sync::Mutex::new(None),
            closed_partial: 0,
            holds: std::collections::VecDeque::new(),
        }
    }

    /// Tells the other side that `value` is scheduled on the timeline this side signals.
    /// Never waits for the other side: if it is not reading, the value is kept and sent with
    /// the next notice. [`IpcError::PeerClosed`] once the other side is gone.
    pub fn notify(&self, value: u64) -> Result<()> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let value = pending.take().map_or(value, |p| p.max(value));
        let notice = Message::Frame(FrameNotice { value });
        match self.channel.try_send(&notice, NOTICE_GRACE) {
            Ok(true) => Ok(()),
            Ok(false) => {
                *pending = Some(value);
                Ok(())
            }
            Err(e) => {
                if matches!(e, IpcError::PeerClosed { .. }) {
                    self.mark_closed();
                }
                Err(e.into())
            }
        }
    }

    fn mark_closed(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Sends a notice that waited for room, if there is one and room now.
    pub(crate) fn flush(&self) -> Result<()> {
        let waiting = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match waiting {
            Some(v) => self.notify(v),
            None => Ok(()),
        }
    }

    /// Sends the notice that found the socket full (if any), waiting at most `timeout` for
    /// room: for a side about to stop calling while the other still waits for its newest
    /// value (any call on the link sends it otherwise). [`crate::Error::Timeout`] if the
    /// other side read nothing meanwhile.
    pub fn flush_within(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            self.flush()?;
            if self
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_none()
            {
                return Ok(());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::Timeout {
                    what: "room in the socket for a frame notice",
                    timeout_ns: timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
                });
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// The newest value the other side announced, reading every notice that arrived; waits
    /// at most `timeout` for one newer than `after`. `Ok(None)`: none newer in time.
    /// [`IpcError::PeerClosed`] once the other side is gone and nothing newer than `after`
    /// had arrived before (its notices still count: [`Self::last_seen`]).
    pub fn latest(&mut self, after: u64, timeout: Duration) -> Result<Option<u64>> {
        if self.is_closed() {
            return if self.latest > after {
                Ok(Some(self.latest))
            } else {
                Err(self.closed_error().into())
            };
        }
        // A closed peer seen by the flush still leaves its notices to read below.
        match self.flush() {
            Err(Error::Ipc(IpcError::PeerClosed { .. })) | Ok(()) => {}
            Err(e) => return Err(e),
        }
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let left = match deadline {
                _ if self.latest > after => Duration::ZERO,
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => timeout,
            };
            let received = self.channel.recv(left);
            match received {
                Ok((Message::Frame(n), _)) => self.latest = self.latest.max(n.value),
                // Kept for `recv_hold`, which is waiting for it: the wait ends here.
                Ok((Message::Hold(h), _)) => {
                    self.holds.push_back(h);
                    return Ok((self.latest > after).then_some(self.latest));
                }
                Ok((Message::Goodbye, _)) | Err(IpcError::PeerClosed { .. }) => {
                    if let Err(IpcError::PeerClosed { partial }) = &received {
                        self.closed_partial = *partial;
                    }
                    self.mark_closed();
                    return if self.latest > after {
                        Ok(Some(self.latest))
                    } else {
                        Err(self.closed_error().into())
                    };
                }
                Ok((other, _)) => {
                    return Err(IpcError::UnexpectedMessage {
                        expected: "Frame",
                        got: other.kind(),
                    }
                    .into())
                }
                Err(IpcError::Timeout { .. }) => {
                    return Ok((self.latest > after).then_some(self.latest))
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Sends a fan-out hold message. They are few (one each way per frame held) and the peer
    /// reads them at once; one the socket has no room for within [`NOTICE_GRACE`] is a
    /// [`crate::Error::Timeout`]. [`IpcError::PeerClosed`] once the other side is gone.
    #[cfg_attr(not(test), allow(dead_code))] // the fan-out publisher (issue 37) comes next
    pub(crate) fn send_hold(&self, msg: HoldMessage) -> Result<()> {
        // A socket full of notices the peer has not read yet: it reads them while it waits
        // for this answer, so room comes soon.
        let deadline = Instant::now() + NOTICE_GRACE;
        loop {
            match self.channel.try_send(&Message::Hold(msg), NOTICE_GRACE) {
                Ok(true) => return Ok(()),
                Ok(false) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(200));
                }
                Ok(false) => {
                    return Err(Error::Timeout {
                        what: "room in the socket for a hold message",
                        timeout_ns: NOTICE_GRACE.as_nanos() as u64,
                    })
                }
                Err(e) => {
                    if matches!(e, IpcError::PeerClosed { .. }) {
                        self.mark_closed();
                    }
                    return Err(e.into());
                }
            }
        }
    }

    /// The next fan-out hold message, waiting at most `timeout` (`Ok(None)`: none came);
    /// frame notices that arrive meanwhile count ([`Self::last_seen`]).
    /// [`IpcError::PeerClosed`] once the other side is gone and no hold message is left.
    #[cfg_attr(not(test), allow(dead_code))] // the fan-out publisher (issue 37) comes next
    pub(crate) fn recv_hold(&mut self, timeout: Duration) -> Result<Option<HoldMessage>> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if let Some(h) = self.holds.pop_front() {
                return Ok(Some(h));
            }
            let left = deadline.map_or(timeout, |d| d.saturating_duration_since(Instant::now()));
            // Reads what arrives (notices, holds) until a hold is queued or time is up.
            self.latest(u64::MAX - 1, left)?;
            if self.holds.is_empty() && left.is_zero() {
                return Ok(None);
            }
        }
    }

    /// What a call reports once the other side has gone: how far into a message it closed
    /// (0: between messages), as the receive that saw it said.
    fn closed_error(&self) -> IpcError {
        IpcError::PeerClosed {
            partial: self.closed_partial,
        }
    }

    /// The connection's socket, for a service thread's `poll` (readable: a message came or
    /// the other side hung up).
    pub(crate) fn poll_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.channel.as_fd()
    }

    /// The newest value the other side announced so far.
    pub fn last_seen(&self) -> u64 {
        self.latest
    }

    /// Whether the other side closed the connection (seen by a receive or a send).
    pub fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Says goodbye (the other side's [`Self::latest`] returns `PeerClosed` at once).
    pub fn goodbye(self) {
        let _ = self.channel.try_send(&Message::Goodbye, NOTICE_GRACE);
    }
}

/// What a client received: the server's checked descriptions, each with its descriptor (owned
/// here, closed once when this drops), and the link.
#[derive(Debug)]
pub struct Attached {
    buffers: Vec<(BufferInfo, OwnedFd)>,
    images: Vec<(ImageInfo, OwnedFd)>,
    timelines: Vec<(TimelineInfo, OwnedFd)>,
    link: Link,
}

/// What a descriptor is, from `fstat`: memory and semaphores of GPU drivers are character
/// devices, anonymous inodes or memfds; a pipe, socket or directory never is.
fn check_fd_kind(
    id: u32,
    fd: &OwnedFd,
    memory_size: Option<u64>,
) -> std::result::Result<(), IpcError> {
    use rustix::fs::FileType;
    let st = rustix::fs::fstat(fd).map_err(|errno| IpcError::Io {
        op: "fstat",
        errno: errno.raw_os_error(),
    })?;
    let file_type = FileType::from_raw_mode(st.st_mode);
    let kind = match file_type {
        FileType::Fifo => Some("a pipe"),
        FileType::Socket => Some("a socket"),
        FileType::Directory => Some("a directory"),
        FileType::Symlink => Some("a symbolic link"),
        _ => None,
    };
    if let Some(kind) = kind {
        return Err(IpcError::WrongFdKind { id, kind });
    }
    // A memfd-backed export (Mesa) has the allocation's size: a description that says more
    // is a lie the driver might not catch.
    if let Some(described) = memory_size {
        let actual = u64::try_from(st.st_size).unwrap_or(0);
        if file_type == FileType::RegularFile && actual > 0 && actual < described {
            return Err(IpcError::SizeLie {
                id,
                described,
                actual,
            });
        }
    }
    Ok(())
}

/// The received object `id` of one kind, with its descriptor ([`IpcError::NoSuchObject`] if
/// the server published none).
fn find_object<I>(
    objects: &[(I, OwnedFd)],
    id: u32,
    kind: MessageKind,
    id_of: impl Fn(&I) -> u32,
) -> Result<&(I, OwnedFd)> {
    objects
        .iter()
        .find(|(i, _)| id_of(i) == id)
        .ok_or_else(|| IpcError::NoSuchObject { id, kind }.into())
}

fn dup(fd: &OwnedFd) -> Result<OwnedFd> {
    fd.try_clone().map_err(|source| Error::Io {
        call: "dup",
        source,
    })
}

impl Attached {
    /// Connects to the server `name` (waiting at most `timeout` for it and for each message)
    /// and receives its objects. Refused, with nothing left open: another GPU than
    /// `device_uuid` ([`IpcError::WrongDevice`]), another driver than `driver_uuid` where given,
    /// any wire rule, a descriptor of the wrong kind or a size the descriptor contradicts.
    pub fn connect(
        name: &str,
        device_uuid: Uuid,
        driver_uuid: Option<Uuid>,
        timeout: Duration,
    ) -> Result<Self> {
        let channel = Channel::connect(name, timeout)?;
        let hello = match channel.recv(timeout)? {
            (Message::Hello(h), _) => h,
            (Message::Goodbye, _) => return Err(IpcError::Busy.into()),
            (other, _) => {
                return Err(IpcError::UnexpectedMessage {
                    expected: "Hello",
                    got: other.kind(),
                }
                .into())
            }
        };
        let refusal = if hello.device_uuid != device_uuid.0 {
            Some(IpcError::WrongDevice {
                published: Uuid(hello.device_uuid).to_string(),
                local: device_uuid.to_string(),
            })
        } else {
            driver_uuid
                .filter(|driver| hello.driver_uuid != driver.0)
                .map(|driver| IpcError::DriverMismatch {
                    published: Uuid(hello.driver_uuid).to_string(),
                    local: driver.to_string(),
                })
        };
        if let Some(refusal) = refusal {
            // Said before any descriptor comes: the server serves the next client at once.
            let _ = channel.try_send(&Message::Goodbye, Duration::from_millis(100));
            return Err(refusal.into());
        }
        channel.send(&Message::Ready, &[])?;
        let mut buffers = Vec::new();
        let mut images = Vec::new();
        let mut timelines = Vec::new();
        for _ in 0..hello.object_count {
            let (msg, mut fds) = channel.recv(timeout)?;
            if !matches!(
                msg,
                Message::Buffer(_) | Message::Image(_) | Message::Timeline(_)
            ) {
                return Err(IpcError::UnexpectedMessage {
                    expected: "Buffer, Image or Timeline",
                    got: msg.kind(),
                }
                .into());
            }
            // Exactly one descriptor per object message (the wire layer checked the count).
            let fd = fds.pop().ok_or(IpcError::FdsNotAsAnnounced {
                announced: 1,
                received: 0,
            })?;
            // The rules an in-process request follows (a lie is a Layout/Image/Memory error).
            describe::check_message(&msg)?;
            match msg {
                Message::Buffer(info) => {
                    check_fd_kind(info.id, &fd, Some(info.memory_size))?;
                    buffers.push((info, fd));
                }
                Message::Image(info) => {
                    check_fd_kind(info.id, &fd, Some(info.memory_size))?;
                    images.push((info, fd));
                }
                Message::Timeline(info) => {
                    check_fd_kind(info.id, &fd, None)?;
                    timelines.push((info, fd));
                }
                _ => {}
            }
        }
        Ok(Self {
            buffers,
            images,
            timelines,
            link: Link::new(channel),
        })
    }

    /// The descriptions of the buffers received.
    pub fn buffers(&self) -> impl Iterator<Item = &BufferInfo> {
        self.buffers.iter().map(|(i, _)| i)
    }

    /// The descriptions of the images received.
    pub fn images(&self) -> impl Iterator<Item = &ImageInfo> {
        self.images.iter().map(|(i, _)| i)
    }

    /// The descriptions of the timelines received.
    pub fn timelines(&self) -> impl Iterator<Item = &TimelineInfo> {
        self.timelines.iter().map(|(i, _)| i)
    }

    /// The first timeline whose signalling side is `role`.
    pub fn timeline_id(&self, role: TimelineRole) -> Option<u32> {
        self.timelines
            .iter()
            .find(|(i, _)| i.role == role)
            .map(|(i, _)| i.id)
    }

    fn buffer(&self, id: u32) -> Result<&(BufferInfo, OwnedFd)> {
        find_object(&self.buffers, id, MessageKind::Buffer, |i| i.id)
    }

    fn image(&self, id: u32) -> Result<&(ImageInfo, OwnedFd)> {
        find_object(&self.images, id, MessageKind::Image, |i| i.id)
    }

    fn timeline(&self, id: u32) -> Result<&(TimelineInfo, OwnedFd)> {
        find_object(&self.timelines, id, MessageKind::Timeline, |i| i.id)
    }

    /// Imports buffer `id` into `vk` (same device, checked at connect): a buffer of the
    /// described size and usage, bound at the described offset of the imported memory. The
    /// driver's requirements are checked against the description first.
    pub fn import_vulkan_buffer(&self, id: u32, vk: &Arc<VulkanContext>) -> Result<BoundBuffer> {
        let (info, fd) = self.buffer(id)?;
        // The exporter's device decided SHADER_DEVICE_ADDRESS by its features; this device
        // decides by its own (an engine's device may not enable bufferDeviceAddress) — except
        // for a dedicated allocation, whose buffer must be the exporter's exactly
        // (VUID-VkMemoryDedicatedAllocateInfo-buffer-01879): Buffer::new then refuses it with
        // the feature's name where this device lacks it.
        let usage = if info.dedicated {
            info.usage
        } else {
            crate::vulkan::shared_buffer_usage(
                vk,
                info.usage & !vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
            )
        };
        let buffer = Buffer::new(
            vk,
            BufferDesc {
                size: info.size,
                usage,
                external: ExternalUse::Import,
            },
        )?;
        let r = buffer.requirements();
        describe::check_import(
            crate::DeviceObject::Buffer,
            (info.offset, info.memory_size, info.dedicated),
            (r.size, r.alignment, r.requires_dedicated),
        )?;
        let dedicated = info.dedicated.then_some(&buffer);
        // SAFETY: the descriptor is an opaque FD of exportable memory of `memory_size` bytes
        // from a device with this deviceUUID (checked at connect); the types are the ones the
        // buffer accepts. A duplicate is consumed: ours stays for other imports.
        let memory = unsafe {
            DeviceMemory::import(
                vk,
                dup(fd)?,
                info.memory_size,
                r.memory_type_bits,
                dedicated,
            )
        }?;
        buffer.bind(Arc::new(memory), info.offset)
    }

    /// Imports buffer `id` into `cuda` (same GPU, checked at connect): the memory imported with
    /// `cuImportExternalMemory` and the buffer's range mapped, `T` checked against the
    /// described row (`T` is one row: `[f32; 4]` for [`crate::ElementFormat::F32X4`]).
    pub fn import_cuda_buffer<T>(&self, id: u32, cuda: &Arc<CudaContext>) -> Result<MappedRange> {
        let (info, _) = self.buffer(id)?;
        let requested = std::mem::size_of::<T>() as u64;
        if info.element.row_bytes() != requested {
            return Err(LayoutError::ElementSize {
                described: info.element.row_bytes(),
                requested,
            }
            .into());
        }
        self.import_cuda_bytes(id, cuda)
    }

    /// As [`Self::import_cuda_buffer`] as bytes (a front end that reads the element type
    /// from the description: [`Self::buffers`]).
    pub fn import_cuda_bytes(&self, id: u32, cuda: &Arc<CudaContext>) -> Result<MappedRange> {
        let (info, fd) = self.buffer(id)?;
        let layout = ImportLayout {
            allocation_size: info.memory_size,
            dedicated: info.dedicated,
        };
        // SAFETY: an opaque FD of memory of `memory_size` bytes, dedicated as described, from
        // this GPU (deviceUUID checked at connect). A duplicate is consumed.
        let imported = unsafe { ImportedMemory::import(cuda, dup(fd)?, layout, None) }?;
        imported.map(info.offset, info.size, MapOptions::default())
    }

    /// Imports image `id` into `vk` (same device, checked at connect): an image of the
    /// described shape, format, levels and usage, bound at the described offset of the
    /// imported memory, in whatever state the publisher left it (the shared layout, released
    /// to `VK_QUEUE_FAMILY_EXTERNAL`): no transition is made. The device's support for the
    /// description and its requirements (size and alignment at the offset, dedication) are
    /// checked first.
    pub fn import_vulkan_image(&self, id: u32, vk: &Arc<VulkanContext>) -> Result<BoundImage> {
        let (info, fd) = self.image(id)?;
        let desc = describe::image_desc(info)?;
        let image = Image::new(vk, &desc, ImageOptions::IMPORT)?;
        let r = image.requirements();
        describe::check_import(
            crate::DeviceObject::Image,
            (info.offset, info.memory_size, info.dedicated),
            (r.size, r.alignment, r.requires_dedicated),
        )?;
        let dedicated = info.dedicated.then_some(Dedication::Image(image.handle()));
        // SAFETY: the descriptor is an opaque FD of exportable memory of `memory_size` bytes
        // from a device with this deviceUUID (checked at connect), dedicated (or not) as
        // described; the types are the ones the image accepts. A duplicate is consumed.
        let memory = unsafe {
            DeviceMemory::import_dedicated(
                vk,
                dup(fd)?,
                info.memory_size,
                r.memory_type_bits,
                dedicated,
            )
        }?;
        image.bind(Arc::new(memory), info.offset)
    }

    /// Imports image `id` into `cuda` (same GPU, checked at connect) as a mipmapped array of
    /// every described level (`cuExternalMemoryGetMappedMipmappedArray`), its format checked
    /// against the table of formats CUDA shares.
    ///
    /// CUDA cannot check a layout it is told: the description must be the publisher's image
    /// (a [`Server`] sends exactly that; it checks the memory's size where the descriptor
    /// shows one, and CUDA refuses an array larger than the memory).
    pub fn import_cuda_image(
        &self,
        id: u32,
        cuda: &Arc<CudaContext>,
    ) -> Result<Arc<MipmappedArray>> {
        let (info, fd) = self.image(id)?;
        let desc = describe::image_desc(info)?;
        let array = desc.cuda_array_desc()?;
        let layout = ImportLayout {
            allocation_size: info.memory_size,
            dedicated: info.dedicated,
        };
        // SAFETY: an opaque FD of memory of `memory_size` bytes, dedicated as described, from
        // this GPU (deviceUUID checked at connect). A duplicate is consumed.
        let imported = unsafe { ImportedMemory::import(cuda, dup(fd)?, layout, None) }?;
        // SAFETY: the publisher's OPTIMAL-tiled image, bound at `offset`, of this format,
        // extent and levels (the flags derived from its kind and usage by the format table).
        unsafe { imported.map_mipmapped_array(info.offset, &array, info.mip_levels) }
    }

    /// Imports timeline `id` into `vk`.
    pub fn import_vulkan_timeline(
        &self,
        id: u32,
        vk: &Arc<VulkanContext>,
    ) -> Result<Arc<Semaphore>> {
        let (info, fd) = self.timeline(id)?;
        let kind = SemaphoreKind::Timeline {
            initial: info.initial_value,
        };
        // SAFETY: an opaque FD exported from a timeline semaphore of a device with this
        // deviceUUID (checked at connect). A duplicate is consumed.
        unsafe { Semaphore::import(vk, dup(fd)?, kind) }
    }

    /// Imports timeline `id` into `cuda`, with a ledger of its own (this process's signals;
    /// the other side's values arrive as notices on the link).
    pub fn import_cuda_timeline(
        &self,
        id: u32,
        cuda: &Arc<CudaContext>,
    ) -> Result<ExternalSemaphore> {
        let (info, fd) = self.timeline(id)?;
        let ledger = SignalLedger::new(info.initial_value, true);
        // SAFETY: an opaque FD of a timeline semaphore on this GPU; the ledger is this
        // process's only record of it; the server keeps the semaphore alive (and the payload
        // lives while any import does).
        unsafe {
            ExternalSemaphore::import(
                cuda,
                dup(fd)?,
                crate::cuda::CudaSemaphoreType::Timeline,
                ledger,
                None,
            )
        }
    }

    /// The link for frame notices.
    pub fn link(&mut self) -> &mut Link {
        &mut self.link
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    /// Hold messages interleaved with frame notices: none is lost, each arrives in order,
    /// notices still count, a wait for a hold ends when one comes, and a peer gone is said.
    #[test]
    fn hold_messages_and_notices_share_a_link() {
        use crate::ipc::wire::HoldOp;
        let (a, b) = Channel::pair().unwrap();
        let (publisher, mut consumer) = (Link::new(a), Link::new(b));
        let granted = |frame| HoldMessage {
            op: HoldOp::Granted,
            frame,
            slot: (frame % 5) as u32,
            value: frame + 100,
        };
        assert_eq!(consumer.recv_hold(Duration::from_millis(5)).unwrap(), None);
        publisher.notify(1).unwrap();
        publisher.send_hold(granted(1)).unwrap();
        publisher.notify(2).unwrap();
        publisher.send_hold(granted(2)).unwrap();
        publisher.notify(3).unwrap();
        let start = Instant::now();
        assert_eq!(
            consumer.recv_hold(Duration::from_secs(5)).unwrap(),
            Some(granted(1))
        );
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "the wait ended with the hold"
        );
        assert_eq!(consumer.last_seen(), 1, "the notice before it counted");
        assert_eq!(
            consumer.recv_hold(Duration::ZERO).unwrap(),
            Some(granted(2))
        );
        assert_eq!(
            consumer.latest(0, Duration::from_millis(5)).unwrap(),
            Some(3)
        );
        assert_eq!(consumer.recv_hold(Duration::ZERO).unwrap(), None);
        drop(publisher);
        let gone = consumer.recv_hold(Duration::from_secs(1)).unwrap_err();
        assert!(
            matches!(gone, Error::Ipc(IpcError::PeerClosed { .. })),
            "{gone}"
        );
    }

    /// A peer that never reads cannot block the sender of notices (the deadlock the bench's
    /// negative control once hit, two processes each blocked in `sendmsg`): 100,000 notices
    /// return at once, and when the peer reads, the newest value is there.
    #[test]
    fn notices_never_block_and_the_newest_value_arrives() {
        let (a, b) = Channel::pair().unwrap();
        let (sender, mut receiver) = (Link::new(a), Link::new(b));
        let start = Instant::now();
        for n in 1..=100_000u64 {
            sender.notify(n).unwrap();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        // The receiver drains what was sent; the newest value waits in the sender until there
        // is room, and goes with the next call.
        let mut seen = 0;
        while let Some(v) = receiver.latest(seen, Duration::from_millis(50)).unwrap() {
            seen = v;
        }
        assert!(seen < 100_000, "the newest notice waited for room");
        // The sender stops calling: a bounded flush sends it once there is room.
        sender.flush_within(Duration::from_secs(1)).unwrap();
        if let Some(v) = receiver.latest(seen, Duration::from_millis(50)).unwrap() {
            seen = v;
        }
        assert_eq!(seen, 100_000, "the newest notice arrives");
        assert!(sender.pending.lock().unwrap().is_none());
    }

    /// A peer gone is seen by a send too, and a release after it is not refused.
    #[test]
    fn a_closed_peer_is_seen_by_sends_and_earlier_notices_still_count() {
        let (a, b) = Channel::pair().unwrap();
        let (sender, mut receiver) = (Link::new(a), Link::new(b));
        sender.notify(7).unwrap();
        drop(sender);
        // The notice sent before the close is read, then the close.
        assert_eq!(receiver.latest(0, Duration::from_secs(1)).unwrap(), Some(7));
        let e = receiver.latest(7, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(e, Error::Ipc(IpcError::PeerClosed { .. })), "{e}");
        assert!(receiver.is_closed());
        // A link whose peer closed notices it on a send as well.
        let (c, d) = Channel::pair().unwrap();
        let link = Link::new(c);
        drop(d);
        let mut sent = Ok(());
        for n in 0..1000 {
            sent = link.notify(n);
            if sent.is_err() {
                break;
            }
        }
        assert!(
            matches!(sent, Err(Error::Ipc(IpcError::PeerClosed { .. }))),
            "{sent:?}"
        );
        assert!(link.is_closed(), "a send saw the close");
    }

    /// A peer that closes partway through a message is reported with how far it got, by the
    /// call that saw it and by every later one (0.4 said 0, "between messages").
    #[test]
    fn a_peer_closing_mid_message_is_reported_with_its_partial_count() {
        let notice = super::super::wire::encode(&Message::Frame(FrameNotice { value: 5 }));
        for cut in [7, 19] {
            let (a, b) = Channel::pair().unwrap();
            let mut link = Link::new(b);
            a.send_bytes(&notice[..cut], &[]).unwrap();
            drop(a);
            for _ in 0..2 {
                let e = link.latest(0, Duration::from_secs(1)).unwrap_err();
                assert!(
                    matches!(e, Error::Ipc(IpcError::PeerClosed { partial }) if partial == cut),
                    "cut at {cut}: {e}"
                );
            }
        }
    }
}
