//! The transport: messages of [`super::wire`] over a Unix stream socket, descriptors beside
//! them as `SCM_RIGHTS` (Linux).
//!
//! Names without a `/` are abstract-namespace sockets (`\0cuvk-<name>`: no file, gone with the
//! listener); names with a `/` are filesystem paths (the listener removes its file on drop).
//!
//! Who may connect: an abstract socket has no permissions (any process in the same network
//! namespace reaches it), so its listener takes only peers of its own effective user, and
//! root ([`peer_allowed`], from `SO_PEERCRED`); a path's permissions decide for a path (its
//! directory's owner, group and mode: the way to let a group, or another container's user,
//! attach). A peer turned away is closed before it is sent anything.
//! A message's descriptors travel with its first byte. A receiver wraps each descriptor in an
//! [`OwnedFd`] the moment it arrives, so a refusal closes them exactly once.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use super::error::IpcError;
use super::wire::{decode, encode, Header, Message, HEADER_LEN, MAX_FDS};

/// Bytes of a control buffer that holds [`MAX_FDS`] descriptors, and no more: rustix's
/// `cmsg_space!` adds room to align an unaligned buffer, which [`Control`] does not need.
const CONTROL_LEN: usize =
    rustix::cmsg_space!(ScmRights(MAX_FDS)) - std::mem::align_of::<libc::cmsghdr>();

/// A control-message buffer aligned for `cmsghdr`, so all of it holds messages.
#[repr(C, align(8))]
struct Control([MaybeUninit<u8>; CONTROL_LEN]);

const _: () = assert!(std::mem::align_of::<libc::cmsghdr>() <= 8);

/// How long the rest of a message that has begun to arrive may take.
const MESSAGE_GRACE: Duration = Duration::from_secs(1);

/// One end of a connection: sends and receives whole messages with their descriptors.
///
/// Sends and receives may come from different threads (each direction is serialized). After a
/// refusal of a header (bad magic, version or kind) or a timeout in the middle of a message
/// the stream is out of step: drop the channel. Other refusals read the whole message first.
#[derive(Debug)]
pub struct Channel {
    stream: UnixStream,
    send_lock: Mutex<()>,
    recv_lock: Mutex<()>,
    // Set when a message was cut off mid-way (its rest never sent or never received): the
    // stream is out of step, and every later call says the connection is gone.
    broken: std::sync::atomic::AtomicBool,
}

impl From<UnixStream> for Channel {
    fn from(stream: UnixStream) -> Self {
        Channel {
            stream,
            send_lock: Mutex::new(()),
            recv_lock: Mutex::new(()),
            broken: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl AsFd for Channel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

impl Channel {
    fn check_broken(&self) -> Result<(), IpcError> {
        if self.broken.load(std::sync::atomic::Ordering::Acquire) {
            Err(IpcError::PeerClosed { partial: 0 })
        } else {
            Ok(())
        }
    }

    /// Marks the stream out of step when `result` failed part-way through a message.
    fn note_cut<T>(&self, result: Result<T, IpcError>, begun: bool) -> Result<T, IpcError> {
        if result.is_err() && begun {
            self.broken
                .store(true, std::sync::atomic::Ordering::Release);
        }
        result
    }

    /// Connects to the listener `name`, retrying while it does not exist yet (or refuses)
    /// until `timeout` has passed.
    pub fn connect(name: &str, timeout: Duration) -> Result<Channel, IpcError> {
        let addr = address(name)?;
        let deadline = Instant::now().checked_add(timeout);
        loop {
            match UnixStream::connect_addr(&addr) {
                Ok(stream) => return Ok(Channel::from(stream)),
                Err(e)
                    if matches!(
                        e.raw_os_error().map(Errno::from_raw_os_error),
                        Some(Errno::CONNREFUSED | Errno::NOENT | Errno::AGAIN)
                    ) =>
                {
                    let left = deadline.map_or(Duration::from_millis(10), |d| {
                        d.saturating_duration_since(Instant::now())
                    });
                    if left.is_zero() {
                        log::debug!("ipc: no listener {name:?} within {timeout:?}: {e}");
                        return Err(timed_out(timeout));
                    }
                    std::thread::sleep(left.min(Duration::from_millis(10)));
                }
                Err(e) => return Err(IpcError::io("connect", &e)),
            }
        }
    }

    /// Two connected channels (`socketpair`), for one process or a child it forks.
    #[cfg(any(test, feature = "ipc-test-peer"))]
    pub fn pair() -> Result<(Channel, Channel), IpcError> {
        let (a, b) = UnixStream::pair().map_err(|e| IpcError::io("socketpair", &e))?;
        Ok((Channel::from(a), Channel::from(b)))
    }

    /// Sends `msg` with `fds` (exactly as many as its kind carries). The descriptors stay the
    /// caller's: the receiver gets duplicates. Its descriptor count is checked against its
    /// kind; a description's placement is the sharing layer's to check (`Server` checks what
    /// it publishes with the rules the receiver applies).
    pub fn send(&self, msg: &Message, fds: &[BorrowedFd<'_>]) -> Result<(), IpcError> {
        if fds.len() > MAX_FDS {
            return Err(IpcError::TooManyFds {
                got: fds.len(),
                max: MAX_FDS,
            });
        }
        let kind = msg.kind();
        if fds.len() != kind.fd_count() as usize {
            return Err(IpcError::FdCountMismatch {
                kind,
                expected: kind.fd_count(),
                got: fds.len() as u32, // at most MAX_FDS
            });
        }
        self.send_bytes(&encode(msg), fds)
    }

    /// Writes `bytes` whole, `fds` with the first byte (no checks: `send` checks, tests lie).
    pub(crate) fn send_bytes(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), IpcError> {
        let _guard = lock(&self.send_lock);
        self.check_broken()?;
        let mut sent = 0;
        while sent < bytes.len() {
            let fds = if sent == 0 { fds } else { &[] };
            let r = sendmsg(self.stream.as_fd(), &bytes[sent..], fds, SendFlags::empty())
                .map_err(|errno| closed_or_io(errno, sent));
            sent += self.note_cut(r, sent > 0)?;
        }
        Ok(())
    }

    /// Sends `msg` (one without descriptors) only if the socket takes it at once: `Ok(false)`
    /// where it would block (the peer is not reading), so a sender of notices never waits on
    /// its peer. A message the socket took part of is finished within `timeout` (it is a few
    /// bytes: the rest follows as soon as the peer reads anything).
    pub fn try_send(&self, msg: &Message, timeout: Duration) -> Result<bool, IpcError> {
        if msg.kind().fd_count() != 0 {
            return Err(IpcError::FdCountMismatch {
                kind: msg.kind(),
                expected: msg.kind().fd_count(),
                got: 0,
            });
        }
        let bytes = encode(msg);
        let _guard = lock(&self.send_lock);
        self.check_broken()?;
        let fd = self.stream.as_fd();
        let mut sent = match sendmsg(fd, &bytes, &[], SendFlags::DONTWAIT) {
            Ok(n) => n,
            Err(Errno::AGAIN) => return Ok(false),
            Err(errno) => return Err(closed_or_io(errno, 0)),
        };
        let deadline = Instant::now().checked_add(timeout);
        while sent < bytes.len() {
            // Part of the message is out: any failure now leaves the stream out of step.
            self.note_cut(wait_writable(fd, deadline, timeout), true)?;
            match sendmsg(fd, &bytes[sent..], &[], SendFlags::DONTWAIT) {
                Ok(n) => sent += n,
                Err(Errno::AGAIN) => {}
                Err(errno) => return self.note_cut(Err(closed_or_io(errno, sent)), true),
            }
        }
        Ok(true)
    }

    /// Receives one whole message and its descriptors, waiting at most `timeout` for all of
    /// it. The descriptors are the caller's on success; on any refusal they are closed.
    pub fn recv(&self, timeout: Duration) -> Result<(Message, Vec<OwnedFd>), IpcError> {
        let _guard = lock(&self.recv_lock);
        self.check_broken()?;
        let deadline = Instant::now().checked_add(timeout);
        let mut fds = Vec::with_capacity(MAX_FDS);
        let mut header = [0u8; HEADER_LEN];
        self.fill(&mut header, 0, &mut fds, deadline, timeout)?;
        let len = Header::decode(&header)?.message_len();
        let mut bytes = vec![0u8; len];
        bytes[..HEADER_LEN].copy_from_slice(&header);
        let body = self.fill(
            &mut bytes[HEADER_LEN..],
            HEADER_LEN,
            &mut fds,
            deadline,
            timeout,
        );
        self.note_cut(body, true)?;
        let msg = decode(&bytes, fds.len())?; // a refusal drops (closes) `fds` once
        Ok((msg, fds))
    }

    /// Fills `buf` (which starts `before` bytes into the message), collecting descriptors.
    fn fill(
        &self,
        buf: &mut [u8],
        before: usize,
        fds: &mut Vec<OwnedFd>,
        deadline: Option<Instant>,
        timeout: Duration,
    ) -> Result<(), IpcError> {
        let fd = self.stream.as_fd();
        let mut filled = 0;
        // Once a message has begun, its rest gets a grace period past the caller's deadline:
        // a timeout mid-message would leave the stream out of step (a zero-timeout poll that
        // caught a header must not lose the body).
        let grace = Instant::now().checked_add(MESSAGE_GRACE);
        while filled < buf.len() {
            let begun = before + filled > 0;
            let until = match (begun, deadline, grace) {
                (true, Some(d), Some(g)) => Some(d.max(g)),
                _ => deadline,
            };
            wait(fd, until, timeout)?;
            match recvmsg(fd, &mut buf[filled..], fds) {
                Ok(Some(0)) => {
                    return Err(IpcError::PeerClosed {
                        partial: before + filled,
                    })
                }
                Ok(Some(n)) => filled += n,
                Ok(None) => {} // woken for nothing: wait again
                Err(IpcError::Io { errno, .. }) if errno == Errno::CONNRESET.raw_os_error() => {
                    return Err(IpcError::PeerClosed {
                        partial: before + filled,
                    })
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A listening socket that [`Channel::connect`] reaches by name.
#[derive(Debug)]
pub struct Listener {
    listener: UnixListener,
    /// The socket file, for a filesystem name (removed on drop).
    path: Option<PathBuf>,
}

impl AsFd for Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }
}

impl Listener {
    /// Listens on `name`: `\0cuvk-<name>` in the abstract namespace, or the path `name` where
    /// it has a `/` (an existing file there is refused, not replaced).
    pub fn bind(name: &str) -> Result<Listener, IpcError> {
        let listener =
            UnixListener::bind_addr(&address(name)?).map_err(|e| IpcError::io("bind", &e))?;
        let path = name.contains('/').then(|| PathBuf::from(name));
        let listener = Listener { listener, path };
        listener
            .listener
            .set_nonblocking(true)
            .map_err(|e| IpcError::io("fcntl(O_NONBLOCK)", &e))?;
        Ok(listener)
    }

    /// Accepts the next connection, waiting at most `timeout`.
    pub fn accept(&self, timeout: Duration) -> Result<Channel, IpcError> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if self.path.is_none() {
                        let peer = rustix::net::sockopt::socket_peercred(&stream)
                            .map_err(|e| IpcError::io("getsockopt(SO_PEERCRED)", &e.into()))?;
                        let own = rustix::process::geteuid().as_raw();
                        if !peer_allowed(peer.uid.as_raw(), own) {
                            log::warn!(
                                "ipc: turned away a peer of user {} (pid {}): an abstract socket \
                                 takes user {own} and root only; use a path name to let others in",
                                peer.uid.as_raw(),
                                peer.pid.as_raw_nonzero()
                            );
                            continue;
                        }
                    }
                    stream
                        .set_nonblocking(false)
                        .map_err(|e| IpcError::io("fcntl(O_NONBLOCK)", &e))?;
                    return Ok(Channel::from(stream));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    wait(self.listener.as_fd(), deadline, timeout)?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(IpcError::io("accept", &e)),
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(path) = &self.path {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The socket address of `name` (see [`Listener::bind`]).
fn address(name: &str) -> Result<SocketAddr, IpcError> {
    let addr = if name.contains('/') {
        SocketAddr::from_pathname(name)
    } else {
        SocketAddr::from_abstract_name(format!("cuvk-{name}"))
    };
    addr.map_err(|e| IpcError::io("socket address", &e))
}

/// Whether a peer of user `peer` may connect to an abstract socket of user `own`: the same
/// user, or root (who can reach any process's descriptors anyway).
pub(crate) fn peer_allowed(peer: u32, own: u32) -> bool {
    peer == own || peer == 0
}

fn lock(m: &Mutex<()>) -> MutexGuard<'_, ()> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn timed_out(timeout: Duration) -> IpcError {
    IpcError::Timeout {
        ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
    }
}

/// What a failed send means: the peer gone (`partial` bytes into a message), or the OS call
/// failing.
fn closed_or_io(errno: Errno, partial: usize) -> IpcError {
    match errno {
        Errno::PIPE | Errno::CONNRESET => IpcError::PeerClosed { partial },
        _ => IpcError::Io {
            op: "sendmsg",
            errno: errno.raw_os_error(),
        },
    }
}

/// Waits until `fd` is readable (or hung up) or the deadline passes (`None`: no deadline).
fn wait(fd: BorrowedFd<'_>, deadline: Option<Instant>, timeout: Duration) -> Result<(), IpcError> {
    wait_for(fd, PollFlags::IN, deadline, timeout)
}

/// Waits until `fd` takes more bytes (or hung up) or the deadline passes.
fn wait_writable(
    fd: BorrowedFd<'_>,
    deadline: Option<Instant>,
    timeout: Duration,
) -> Result<(), IpcError> {
    wait_for(fd, PollFlags::OUT, deadline, timeout)
}

fn wait_for(
    fd: BorrowedFd<'_>,
    events: PollFlags,
    deadline: Option<Instant>,
    timeout: Duration,
) -> Result<(), IpcError> {
    loop {
        let left = deadline.map(|d| {
            // Rounded up to the millisecond, so poll does not wake just before the deadline.
            let left = d.saturating_duration_since(Instant::now());
            let ms = left.as_micros().div_ceil(1000);
            rustix::event::Timespec {
                tv_sec: i64::try_from(ms / 1000).unwrap_or(i64::MAX),
                tv_nsec: ((ms % 1000) * 1_000_000) as _,
            }
        });
        let mut fds = [PollFd::new(&fd, events)];
        match rustix::event::poll(&mut fds, left.as_ref()) {
            Ok(0) if deadline.is_some_and(|d| Instant::now() >= d) => {
                return Err(timed_out(timeout))
            }
            Ok(0) | Err(Errno::INTR) => {}
            Ok(_) => return Ok(()),
            Err(errno) => {
                return Err(IpcError::Io {
                    op: "poll",
                    errno: errno.raw_os_error(),
                })
            }
        }
    }
}

/// One `sendmsg` of `data`, with `fds` as `SCM_RIGHTS` when there are any: the bytes sent,
/// or the errno. `MSG_NOSIGNAL`: a closed peer is `EPIPE`, not `SIGPIPE`.
fn sendmsg(
    sock: BorrowedFd<'_>,
    data: &[u8],
    fds: &[BorrowedFd<'_>],
    flags: SendFlags,
) -> Result<usize, Errno> {
    // Sized for exactly these descriptors: public callers send at most MAX_FDS; the tests
    // send more to see the receiver refuse them.
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(Errno::INVAL); // not reached: the buffer was sized for them
    }
    loop {
        match rustix::net::sendmsg(
            sock,
            &[IoSlice::new(data)],
            &mut control,
            flags | SendFlags::NOSIGNAL,
        ) {
            Ok(0) => return Err(Errno::IO), // a stream socket sends something or fails
            Ok(n) => return Ok(n),
            Err(Errno::INTR) => {}
            Err(errno) => return Err(errno),
        }
    }
}

/// One non-blocking `recvmsg` into `buf`: the bytes read (0 at end of stream), or `None`
/// where nothing was ready. Each descriptor that arrives is pushed to `fds` as an [`OwnedFd`]
/// before anything is judged (the control buffer closes any it still holds when dropped).
fn recvmsg(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> Result<Option<usize>, IpcError> {
    let mut space = Control([MaybeUninit::uninit(); CONTROL_LEN]);
    let mut control = RecvAncillaryBuffer::new(&mut space.0);
    let mut iov = [IoSliceMut::new(buf)];
    let flags = RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT;
    let msg = loop {
        match rustix::net::recvmsg(sock, &mut iov, &mut control, flags) {
            Ok(msg) => break msg,
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => return Ok(None),
            Err(errno) => {
                return Err(IpcError::Io {
                    op: "recvmsg",
                    errno: errno.raw_os_error(),
                })
            }
        }
    };
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if msg.flags.contains(ReturnFlags::CTRUNC) {
        return Err(IpcError::TruncatedControl {
            received: fds.len(),
        });
    }
    if fds.len() > MAX_FDS {
        return Err(IpcError::TooManyFds {
            got: fds.len(),
            max: MAX_FDS,
        });
    }
    Ok(Some(msg.bytes))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::ipc::wire::tests::samples;
    use crate::ipc::wire::{BufferInfo, FrameNotice};
    use std::io::Write;
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A new memfd named `cuvk-ipc-<tag>`, `len` bytes long.
    fn memfd(tag: &str, len: i64) -> OwnedFd {
        let name = std::ffi::CString::new(format!("cuvk-ipc-{tag}")).unwrap();
        // SAFETY: a NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: a new descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an open descriptor.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), len) }, 0);
        fd
    }

    /// Open descriptors of this process that are memfds of `tag` (entries of /proc/self/fd;
    /// filtered, so tests running beside this one do not disturb the count).
    fn open_fds(tag: &str) -> usize {
        let needle = format!("memfd:cuvk-ipc-{tag} ");
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|t| t.to_string_lossy().contains(&needle))
            .count()
    }

    /// Every descriptor of this process (entries of /proc/self/fd).
    fn all_open_fds() -> usize {
        std::fs::read_dir("/proc/self/fd").unwrap().count()
    }

    fn file_id(fd: BorrowedFd<'_>) -> (u64, u64) {
        // SAFETY: all-zero is a valid stat; fstat fills it for an open descriptor.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: an open descriptor and a writable stat.
        assert_eq!(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) }, 0);
        (st.st_dev, st.st_ino)
    }

    /// An abstract socket takes its own user and root only: a child running as `nobody` is
    /// closed before it is sent anything, and the listener goes on waiting.
    #[test]
    fn an_abstract_socket_turns_other_users_away() {
        assert!(peer_allowed(1000, 1000) && peer_allowed(0, 1000));
        assert!(!peer_allowed(1001, 1000) && !peer_allowed(65534, 0));
        const CHILD: &str = "CUVK_PEER_CHILD";
        if let Ok(name) = std::env::var(CHILD) {
            // The child, as another user: connected by the kernel, then closed unheard.
            let channel = Channel::connect(&name, Duration::from_secs(5)).unwrap();
            let heard = channel.recv(Duration::from_secs(5));
            assert!(
                matches!(heard, Err(IpcError::PeerClosed { .. })),
                "{heard:?}"
            );
            return;
        }
        if rustix::process::geteuid().as_raw() != 0 {
            eprintln!("skipped: only root can start a child as another user");
            return;
        }
        let name = unique("peer");
        let listener = Listener::bind(&name).unwrap();
        use std::os::unix::process::CommandExt;
        let spawned = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "ipc::channel::tests::an_abstract_socket_turns_other_users_away",
            ])
            .env(CHILD, &name)
            .uid(65534)
            .gid(65534)
            .stdout(std::process::Stdio::null())
            .spawn();
        let Ok(mut child) = spawned else {
            eprintln!("skipped: cannot start this test binary as nobody: {spawned:?}");
            return;
        };
        let accepted = listener.accept(Duration::from_secs(2));
        let status = child.wait().unwrap();
        if status.code() == Some(126) || status.code() == Some(127) {
            eprintln!("skipped: nobody may not run this test binary ({status})");
            return;
        }
        assert!(
            matches!(accepted, Err(IpcError::Timeout { .. })),
            "nobody was let in: {accepted:?}"
        );
        assert!(
            status.success(),
            "the child saw its connection closed unheard: {status}"
        );
        // The next peer of this user is served.
        let me = Channel::connect(&name, Duration::from_secs(1)).unwrap();
        listener.accept(Duration::from_secs(1)).unwrap();
        drop(me);
    }

    fn unique(tag: &str) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        format!(
            "{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn every_kind_round_trips_with_the_same_files() {
        let (a, b) = Channel::pair().unwrap();
        for m in samples() {
            let file = memfd("round-trip", 4096);
            let fds: Vec<_> = (0..m.kind().fd_count()).map(|_| file.as_fd()).collect();
            a.send(&m, &fds).unwrap();
            let (got, received) = b.recv(T).unwrap();
            assert_eq!(got, m);
            assert_eq!(received.len(), fds.len());
            for r in &received {
                assert_ne!(r.as_raw_fd(), file.as_raw_fd());
                assert_eq!(file_id(r.as_fd()), file_id(file.as_fd()));
            }
        }
    }

    #[test]
    fn ten_thousand_cycles_leak_no_descriptor() {
        let (a, b) = Channel::pair().unwrap();
        let file = memfd("cycles", 64);
        let before = open_fds("cycles");
        let frame = Message::Frame(FrameNotice { value: 1 });
        for i in 0..10_000 {
            let m = samples()[1 + i % 3];
            a.send(&m, &[file.as_fd()]).unwrap();
            let (got, fds) = b.recv(T).unwrap();
            assert_eq!((got, fds.len()), (m, 1));
            a.send(&frame, &[]).unwrap();
            assert_eq!(b.recv(T).unwrap().1.len(), 0);
        }
        assert_eq!(open_fds("cycles"), before);
    }

    #[test]
    fn refusals_close_what_arrived_and_keep_the_stream_in_step() {
        let tag = "refusals";
        let (a, b) = Channel::pair().unwrap();
        let file = memfd(tag, 64);
        let before = open_fds(tag);
        let buffer = encode(&samples()[1]);
        let frame = encode(&Message::Frame(FrameNotice { value: 5 }));
        let mut bad_bool = encode(&Message::Buffer(buffer_info()));
        bad_bool[HEADER_LEN + 36] = 2; // `dedicated`
        let cases: [(&[u8], usize, IpcError); 4] = [
            (
                &buffer,
                2,
                IpcError::FdsNotAsAnnounced {
                    announced: 1,
                    received: 2,
                },
            ),
            (
                &buffer,
                0,
                IpcError::FdsNotAsAnnounced {
                    announced: 1,
                    received: 0,
                },
            ),
            (
                &frame,
                1,
                IpcError::FdsNotAsAnnounced {
                    announced: 0,
                    received: 1,
                },
            ),
            (
                &bad_bool,
                1,
                IpcError::BadBool {
                    field: "dedicated",
                    value: 2,
                },
            ),
        ];
        for (bytes, n, want) in cases {
            let fds = vec![file.as_fd(); n];
            a.send_bytes(bytes, &fds).unwrap();
            assert_eq!(b.recv(T).unwrap_err(), want);
            assert_eq!(open_fds(tag), before, "{want}");
            // The whole message was read: the next one arrives intact.
            a.send(&samples()[1], &[file.as_fd()]).unwrap();
            assert_eq!(b.recv(T).unwrap().0, samples()[1]);
        }
        // More than a message carries: the kernel drops what does not fit, we close the rest.
        a.send_bytes(&buffer, &[file.as_fd(); MAX_FDS + 4]).unwrap();
        assert_eq!(
            b.recv(T).unwrap_err(),
            IpcError::TruncatedControl { received: MAX_FDS }
        );
        assert_eq!(open_fds(tag), before);
        // A bad header (the stream is out of step afterwards).
        let mut bad = buffer.clone();
        bad[0] = b'X';
        a.send_bytes(&bad, &[file.as_fd()]).unwrap();
        assert!(matches!(b.recv(T), Err(IpcError::BadMagic { .. })));
        assert_eq!(open_fds(tag), before);
        // Sends refuse what a receiver would.
        let m = samples()[1];
        let e = a.send(&m, &[]).unwrap_err();
        assert_eq!(
            crate::Error::from(e).rule(),
            Some(crate::Rule::IpcFdCountMismatch)
        );
        let e = a.send(&m, &[file.as_fd(); MAX_FDS + 1]).unwrap_err();
        assert_eq!(e, IpcError::TooManyFds { got: 17, max: 16 });
    }

    fn buffer_info() -> BufferInfo {
        match samples()[1] {
            Message::Buffer(b) => b,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_peer_closing_mid_message_is_refused_and_its_fds_closed() {
        let tag = "mid-message";
        let file = memfd(tag, 64);
        let before = open_fds(tag);
        let buffer = encode(&samples()[1]);
        for cut in [5, HEADER_LEN, 30] {
            let (a, b) = Channel::pair().unwrap();
            a.send_bytes(&buffer[..cut], &[file.as_fd()]).unwrap();
            drop(a);
            assert_eq!(
                b.recv(T).unwrap_err(),
                IpcError::PeerClosed { partial: cut }
            );
            assert_eq!(open_fds(tag), before, "cut at {cut}");
        }
        // Closing between messages, and sending to a closed peer.
        let (a, b) = Channel::pair().unwrap();
        drop(b);
        assert_eq!(
            a.send(&Message::Goodbye, &[]),
            Err(IpcError::PeerClosed { partial: 0 })
        );
        assert_eq!(a.recv(T).unwrap_err(), IpcError::PeerClosed { partial: 0 });
    }

    #[test]
    fn a_peer_closing_wakes_a_waiting_recv() {
        let (a, b) = Channel::pair().unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(a);
        });
        let start = Instant::now();
        assert_eq!(b.recv(T).unwrap_err(), IpcError::PeerClosed { partial: 0 });
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        t.join().unwrap();
    }

    #[test]
    fn a_silent_peer_times_out() {
        let (a, b) = Channel::pair().unwrap();
        let start = Instant::now();
        assert_eq!(
            b.recv(Duration::from_millis(100)).unwrap_err(),
            IpcError::Timeout { ms: 100 }
        );
        assert!(start.elapsed() >= Duration::from_millis(100));
        assert_eq!(
            b.recv(Duration::ZERO).unwrap_err(),
            IpcError::Timeout { ms: 0 }
        );
        // Half a message, then silence: a timeout too.
        (&a.stream)
            .write_all(&encode(&Message::Goodbye)[..7])
            .unwrap();
        assert_eq!(
            b.recv(Duration::from_millis(50)).unwrap_err(),
            IpcError::Timeout { ms: 50 }
        );
    }

    #[test]
    fn listeners_accept_abstract_and_path_names() {
        let dir = std::env::temp_dir().join(unique("cuvk-ipc"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sock");
        for name in [unique("test"), path.to_str().unwrap().to_owned()] {
            let listener = Listener::bind(&name).unwrap();
            assert!(matches!(
                listener.accept(Duration::from_millis(20)),
                Err(IpcError::Timeout { ms: 20 })
            ));
            let client = std::thread::spawn({
                let name = name.clone();
                move || {
                    let c = Channel::connect(&name, T).unwrap();
                    c.send(&Message::Goodbye, &[]).unwrap();
                    c.recv(T).unwrap().0
                }
            });
            let server = listener.accept(T).unwrap();
            assert_eq!(server.recv(T).unwrap().0, Message::Goodbye);
            server.send(&samples()[4], &[]).unwrap();
            assert_eq!(client.join().unwrap(), samples()[4]);
            assert!(matches!(
                Listener::bind(&name),
                Err(IpcError::Io {
                    op: "bind",
                    errno: libc::EADDRINUSE
                })
            ));
        }
        assert!(!path.exists(), "the listener removes its socket file");
        std::fs::remove_dir(&dir).unwrap();
        // Nobody listening: connect keeps trying until its timeout.
        let start = Instant::now();
        assert_eq!(
            Channel::connect(&unique("nobody"), Duration::from_millis(50)).unwrap_err(),
            IpcError::Timeout { ms: 50 }
        );
        assert!(start.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn channels_open_and_close_their_sockets_once() {
        let before = all_open_fds();
        for _ in 0..100 {
            let (a, b) = Channel::pair().unwrap();
            a.send(&Message::Goodbye, &[]).unwrap();
            b.recv(T).unwrap();
        }
        // Other tests open descriptors in parallel: allow for them, not for 200 sockets.
        assert!(all_open_fds() < before + 50);
    }
}
