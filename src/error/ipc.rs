//! [`IpcError`]: why a message was refused (the wire rules of [`crate::ipc`]) or why the
//! transport failed. Each refusal is a [`Rule`](crate::Rule) of the `0x0C00` group, written in
//! its row below (`Error::rule`, `Rule::code`, `Rule::name`: `"Ipc.BadMagic"`); a code is never
//! reused, a new refusal takes the next number. A failed transport (the peer gone, a timeout,
//! an OS call, a busy server) is no rule.

// The kind of message a refusal names: the one type of the wire format its fields carry.
use crate::ipc::MessageKind;

// The table: the enum, and beside each variant its rule (see `error::table`).
crate::error::table::refusals! {
    rows ipc_rules, path "Ipc.";
    /// A refused message, or a failed transport call.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum IpcError {
        /// The message does not start with `b"CUVK"`.
        #[error("bad magic {found:?}: a cuvk message starts with b\"CUVK\"")]
        BadMagic {
            /// The first four bytes that arrived.
            found: [u8; 4],
        } => {
            /// The message does not start with `b"CUVK"`.
            IpcBadMagic = 0x0C01
        },
        /// The message is of a wire version this build does not read.
        #[error("wire version {found} is not supported: this build reads version {supported}")]
        UnsupportedVersion {
            /// The version in the header.
            found: u16,
            /// The one version this build reads and writes.
            supported: u16,
        } => {
            /// The message is of a wire version this build does not read.
            IpcUnsupportedVersion = 0x0C02
        },
        /// The header names a message kind this version does not have.
        #[error("unknown message kind {kind}")]
        UnknownKind {
            /// The kind number in the header.
            kind: u16,
        } => {
            /// The header names a message kind this version does not have.
            IpcUnknownKind = 0x0C03
        },
        /// Fewer bytes than a header.
        #[error("truncated header: expected {expected} bytes, got {got}")]
        TruncatedHeader {
            /// The header's size.
            expected: usize,
            /// The bytes that arrived.
            got: usize,
        } => {
            /// Fewer bytes than a header.
            IpcTruncatedHeader = 0x0C04
        },
        /// Fewer body bytes than the header announced.
        #[error("truncated {kind} body: expected {expected} bytes, got {got}")]
        TruncatedBody {
            /// The message's kind.
            kind: MessageKind,
            /// The body length in the header.
            expected: usize,
            /// The body bytes that arrived.
            got: usize,
        } => {
            /// Fewer body bytes than the header announced.
            IpcTruncatedBody = 0x0C05
        },
        /// The header's body length is not the size of its kind's body.
        #[error("body length mismatch: a {kind} body is {expected} bytes, the header says {got}")]
        BodyLengthMismatch {
            /// The message's kind.
            kind: MessageKind,
            /// The size of a body of this kind.
            expected: u32,
            /// The body length in the header.
            got: u32,
        } => {
            /// The header's body length is not the size of its kind's body.
            IpcBodyLengthMismatch = 0x0C06
        },
        /// Bytes after the end of the message the header describes.
        #[error("trailing bytes: the message is {expected} bytes, got {got}")]
        TrailingBytes {
            /// Header plus announced body.
            expected: usize,
            /// The bytes given.
            got: usize,
        } => {
            /// Bytes after the end of the message the header describes.
            IpcTrailingBytes = 0x0C07
        },
        /// A header (or a send) with a descriptor count other than its kind carries.
        #[error("fd count mismatch: a {kind} message carries {expected} descriptors, got {got}")]
        FdCountMismatch {
            /// The message's kind.
            kind: MessageKind,
            /// The descriptors a message of this kind carries.
            expected: u32,
            /// The descriptors announced (or given to a send).
            got: u32,
        } => {
            /// A header (or a send) with a descriptor count other than its kind carries.
            IpcFdCountMismatch = 0x0C08
        },
        /// Descriptors received differ from the count the header announced (they were closed).
        #[error(
            "fds not as announced: the header announced {announced} descriptors, {received} arrived"
        )]
        FdsNotAsAnnounced {
            /// The count in the header.
            announced: u32,
            /// The descriptors that arrived with the message.
            received: usize,
        } => {
            /// Descriptors received differ from the count the header announced (they were closed).
            IpcFdsNotAsAnnounced = 0x0C09
        },
        /// A boolean byte other than 0 or 1.
        #[error("bad bool: {field} is {value}, a bool is 0 or 1")]
        BadBool {
            /// The field.
            field: &'static str,
            /// The byte.
            value: u8,
        } => {
            /// A boolean byte other than 0 or 1.
            IpcBadBool = 0x0C10
        },
        /// A timeline role other than 0 (publisher signals) or 1 (attacher signals).
        #[error("unknown timeline role {value}: 0 is the publisher, 1 the attacher")]
        UnknownRole {
            /// The byte.
            value: u8,
        } => {
            /// A timeline role other than 0 (publisher signals) or 1 (attacher signals).
            IpcUnknownRole = 0x0C11
        },
        /// An image shape other than 0 (2D), 1 (2D array), 2 (3D) or 3 (cube).
        #[error("unknown image shape {value}: 0 is 2D, 1 a 2D array, 2 3D, 3 a cube")]
        UnknownImageShape {
            /// The byte.
            value: u8,
        } => {
            /// An image shape other than 0 (2D), 1 (2D array), 2 (3D) or 3 (cube).
            IpcUnknownImageShape = 0x0C22
        },
        /// The peer closed the connection (`partial` bytes into a message; 0 between messages).
        #[error("peer closed the connection ({partial} bytes into a message)")]
        PeerClosed {
            /// Bytes of an unfinished message that had arrived (0: closed between messages).
            partial: usize,
        } => _,
        /// Nothing (or not the whole message) arrived in time.
        #[error("timeout: no complete message within {ms} ms")]
        Timeout {
            /// The time waited, in milliseconds.
            ms: u64,
        } => _,
        /// The descriptors did not fit the control buffer (`MSG_CTRUNC`); those that arrived were
        /// closed.
        #[error("truncated control data (MSG_CTRUNC): descriptors were dropped; {received} that arrived were closed")]
        TruncatedControl {
            /// The descriptors that did arrive (and were closed).
            received: usize,
        } => {
            /// The descriptors did not fit the control buffer (`MSG_CTRUNC`); those that arrived
            /// were closed.
            IpcTruncatedControl = 0x0C14
        },
        /// More descriptors than one message carries.
        #[error("too many fds: {got}, a message carries at most {max}")]
        TooManyFds {
            /// The descriptors given or received.
            got: usize,
            /// The most one message carries (16).
            max: usize,
        } => {
            /// More descriptors than one message carries.
            IpcTooManyFds = 0x0C15
        },
        /// An OS call failed.
        #[error("{op} failed: {}", std::io::Error::from_raw_os_error(*errno))]
        Io {
            /// The OS call.
            op: &'static str,
            /// Its `errno`.
            errno: i32,
        } => _,
        /// The transport does not exist on this platform.
        #[error("unsupported: {what} is not available on this platform")]
        Unsupported {
            /// What was asked for.
            what: &'static str,
        } => {
            /// The transport does not exist on this platform.
            IpcUnsupported = 0x0C17
        },
        /// The server's objects live on another GPU than the client's.
        #[error("the server publishes memory of GPU {published}; this process's GPU is {local}")]
        WrongDevice {
            /// The server's deviceUUID.
            published: String,
            /// The client's.
            local: String,
        } => {
            /// The server's objects live on another GPU than the client's.
            IpcWrongDevice = 0x0C18
        },
        /// The server's driver is another than the client's (opaque handles need the same one).
        #[error("the server's driver is {published}, this process's {local}: opaque handles need the same driver")]
        DriverMismatch {
            /// The server's driverUUID.
            published: String,
            /// The client's.
            local: String,
        } => {
            /// The server's driver is another than the client's (opaque handles need the same one).
            IpcDriverMismatch = 0x0C19
        },
        /// A descriptor that cannot be GPU memory or a semaphore.
        #[error("object {id}: its descriptor is {kind}, not GPU memory or a semaphore")]
        WrongFdKind {
            /// The object.
            id: u32,
            /// What the descriptor is.
            kind: &'static str,
        } => {
            /// A descriptor that cannot be GPU memory or a semaphore.
            IpcWrongFdKind = 0x0C1A
        },
        /// A description that claims more memory than its descriptor holds.
        #[error(
            "object {id}: described as {described} bytes of memory, its descriptor holds {actual}"
        )]
        SizeLie {
            /// The object.
            id: u32,
            /// The size described.
            described: u64,
            /// The size the descriptor has.
            actual: u64,
        } => {
            /// A description that claims more memory than its descriptor holds.
            IpcSizeLie = 0x0C1B
        },
        /// A message of another kind than the protocol expects next.
        #[error("expected a {expected} message, got {got}")]
        UnexpectedMessage {
            /// What was expected.
            expected: &'static str,
            /// What came.
            got: MessageKind,
        } => {
            /// A message of another kind than the protocol expects next.
            IpcUnexpectedMessage = 0x0C1C
        },
        /// An object id the server did not publish (of that kind).
        #[error("no {kind} with id {id} was published")]
        NoSuchObject {
            /// The id asked for.
            id: u32,
            /// The kind asked for.
            kind: MessageKind,
        } => {
            /// An object id the server did not publish (of that kind).
            IpcNoSuchObject = 0x0C1D
        },
        /// A release meant for a lost peer asked for while the peer is still connected (it would
        /// signal values under the peer's feet).
        #[error("the other side is still connected: {what} is only for after it is gone")]
        StillConnected {
            /// What was asked for.
            what: &'static str,
        } => {
            /// A release meant for a lost peer asked for while the peer is still connected.
            IpcStillConnected = 0x0C1F
        },
        /// The server serves another client now (a frame server serves one producer at a time)
        /// and turned this one away: try again when it is free.
        #[error("busy: the server is serving another client; try again when it is free")]
        Busy => _,
        /// An image description whose shape contradicts its own extent, layers or flags (a
        /// "2D" image of 4 layers): the wire carries both, and they must agree. (Codes
        /// 0x0C0A-0x0C0F and 0x0C1E are retired, and 0x0C20 (one producer per frame server: it serves
        /// the next itself, on fresh timelines): sizes, ranges, elements, extents, mip levels
        /// and placements are checked by the rules every import follows, `Layout.*`,
        /// `Image.*`, `Memory.*`.)
        #[error("image {id} is described as {shape:?} but its extent, layers and flags make it {kind:?}")]
        ShapeContradicted {
            /// The object.
            id: u32,
            /// The shape it was described with.
            shape: crate::ipc::ImageShape,
            /// The kind its extent, layers and flags make.
            kind: crate::ImageKind,
        } => {
            /// An image's described shape contradicts its extent, layers or flags.
            IpcShapeContradicted = 0x0C23
        },
        /// A fan-out hold message with an op this version does not know.
        #[error("unknown hold op {value}: 1 request, 2 granted, 3 nothing, 4 released, 5 demoted, 6 subscribe")]
        UnknownHoldOp {
            /// The byte.
            value: u8,
        } => {
            /// A fan-out hold op other than 1 to 6.
            IpcUnknownHoldOp = 0x0C24
        },
    }
}

impl IpcError {
    /// The [`ErrorKind`](crate::ErrorKind) callers act on.
    pub(crate) fn kind(&self) -> crate::ErrorKind {
        use crate::ErrorKind as K;
        match self {
            IpcError::PeerClosed { .. } | IpcError::Io { .. } | IpcError::Busy => K::Io,
            IpcError::Timeout { .. } => K::Timeout,
            IpcError::Unsupported { .. } => K::Unsupported,
            IpcError::WrongDevice { .. } | IpcError::DriverMismatch { .. } => K::WrongDevice,
            _ => K::InvalidInput,
        }
    }

    /// Whether this is a refusal (a rule broken) rather than the connection failing or
    /// timing out.
    pub fn is_refusal(&self) -> bool {
        !matches!(
            self,
            IpcError::PeerClosed { .. }
                | IpcError::Io { .. }
                | IpcError::Timeout { .. }
                | IpcError::Busy
        )
    }

    /// Whether a client caused this during the handshake (it left, timed out, refused, sent
    /// something else or garbage), as opposed to this process's own OS calls failing: the
    /// server then serves the next client.
    #[cfg(target_os = "linux")]
    pub(crate) fn is_client_gone(&self) -> bool {
        !matches!(self, IpcError::Io { .. } | IpcError::Unsupported { .. })
    }

    /// An [`IpcError::Io`] from a `std::io::Error` (`EINVAL` where it carries no OS code).
    #[cfg(target_os = "linux")]
    pub(crate) fn io(op: &'static str, e: &std::io::Error) -> Self {
        IpcError::Io {
            op,
            errno: e
                .raw_os_error()
                .unwrap_or(rustix::io::Errno::INVAL.raw_os_error()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Error, Rule};
    use std::collections::HashSet;

    fn one_of_each() -> Vec<IpcError> {
        let k = MessageKind::Buffer;
        vec![
            IpcError::BadMagic { found: *b"XXXX" },
            IpcError::UnsupportedVersion {
                found: 2,
                supported: 1,
            },
            IpcError::UnknownKind { kind: 99 },
            IpcError::TruncatedHeader {
                expected: 16,
                got: 3,
            },
            IpcError::TruncatedBody {
                kind: k,
                expected: 45,
                got: 3,
            },
            IpcError::BodyLengthMismatch {
                kind: k,
                expected: 45,
                got: 3,
            },
            IpcError::TrailingBytes {
                expected: 61,
                got: 62,
            },
            IpcError::FdCountMismatch {
                kind: k,
                expected: 1,
                got: 0,
            },
            IpcError::FdsNotAsAnnounced {
                announced: 1,
                received: 0,
            },
            IpcError::BadBool {
                field: "dedicated",
                value: 2,
            },
            IpcError::UnknownRole { value: 7 },
            IpcError::UnknownHoldOp { value: 9 },
            IpcError::PeerClosed { partial: 0 },
            IpcError::Timeout { ms: 10 },
            IpcError::TruncatedControl { received: 1 },
            IpcError::TooManyFds { got: 17, max: 16 },
            IpcError::Io {
                op: "sendmsg",
                errno: 9,
            },
            IpcError::Unsupported { what: "ipc" },
            IpcError::WrongDevice {
                published: "a".into(),
                local: "b".into(),
            },
            IpcError::DriverMismatch {
                published: "a".into(),
                local: "b".into(),
            },
            IpcError::WrongFdKind {
                id: 0,
                kind: "a pipe",
            },
            IpcError::SizeLie {
                id: 0,
                described: 2,
                actual: 1,
            },
            IpcError::UnexpectedMessage {
                expected: "Hello",
                got: k,
            },
            IpcError::NoSuchObject { id: 3, kind: k },
            IpcError::ShapeContradicted {
                id: 0,
                shape: crate::ipc::ImageShape::D2,
                kind: crate::ImageKind::D2Array { layers: 4 },
            },
            IpcError::StillConnected { what: "release" },
            IpcError::Busy,
            IpcError::UnknownImageShape { value: 9 },
        ]
    }

    #[test]
    fn refusals_are_distinct_rules_of_their_group() {
        let all = one_of_each();
        let rules: Vec<Rule> = all
            .iter()
            .filter_map(|e| Error::from(e.clone()).rule())
            .collect();
        let codes: HashSet<u32> = rules.iter().map(|r| r.code()).collect();
        let names: HashSet<&str> = rules.iter().map(|r| r.name()).collect();
        assert_eq!(codes.len(), rules.len());
        assert_eq!(names.len(), rules.len());
        for e in &all {
            let rule = Error::from(e.clone()).rule();
            assert_eq!(rule.is_some(), e.is_refusal(), "{e:?}");
            if let Some(rule) = rule {
                assert_eq!(rule.code() >> 8, 0x0C, "{e:?}");
                assert!(rule.name().starts_with("Ipc."), "{rule}");
            }
            assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn messages_name_the_rule_and_numbers() {
        let e = IpcError::UnsupportedVersion {
            found: 7,
            supported: 1,
        };
        assert!(e.to_string().contains('7') && e.to_string().contains("version 1"));
        let e = IpcError::SizeLie {
            id: 3,
            described: 4096,
            actual: 64,
        };
        let s = e.to_string();
        assert!(s.contains("4096") && s.contains("64"), "{s}");
    }
}
