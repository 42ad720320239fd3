//! The wire format: a 16-byte header, then a fixed-size body per kind, all little-endian.
//!
//! ```text
//! header: magic b"CUVK" | version u16 | kind u16 | body length u32 | fd count u32
//! ```
//!
//! Decoding is canonical: a byte string that decodes is exactly the encoding of the message it
//! decodes to (booleans are 0 or 1, no trailing bytes), and everything a peer could get wrong
//! is refused with the rule it broke ([`IpcError`]).

// The wire format is cross-platform (type-checked everywhere); only Linux has a transport
// that uses all of it.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use ash::vk;

use super::error::IpcError;
use crate::rules::layout::ElementFormat;

/// The first four bytes of every message.
pub const MAGIC: [u8; 4] = *b"CUVK";
/// The wire version this build reads and writes (2: the attacher answers the [`Hello`] with
/// [`MessageKind::Ready`] before any descriptor is sent).
pub const VERSION: u16 = 3;
/// The size of a message header in bytes.
pub const HEADER_LEN: usize = 16;
/// The most descriptors one message carries (a receiver's control buffer holds no more).
pub const MAX_FDS: usize = 16;

/// What a message describes; its number is the header's `kind` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u16)]
pub enum MessageKind {
    /// The server's hello: who publishes (GPU, driver, process), and how many objects follow.
    Hello = 1,
    /// [`BufferInfo`], with the memory's descriptor.
    Buffer = 2,
    /// An image description, with the memory's descriptor.
    Image = 3,
    /// A timeline description, with the semaphore's descriptor.
    Timeline = 4,
    /// A frame notice: "up to value N is scheduled".
    Frame = 5,
    /// The sender is leaving; no body.
    Goodbye = 6,
    /// The attacher checked the hello (its GPU, its driver) and takes the objects; no
    /// body. An attacher that refuses says [`MessageKind::Goodbye`] instead, and is sent no
    /// descriptor.
    Ready = 7,
    /// A fan-out hold: a consumer's request or release, a publisher's answer.
    Hold = 8,
}

impl MessageKind {
    /// The kind with this number, if this version has one.
    pub(crate) fn from_u16(kind: u16) -> Option<Self> {
        Some(match kind {
            1 => MessageKind::Hello,
            2 => MessageKind::Buffer,
            3 => MessageKind::Image,
            4 => MessageKind::Timeline,
            5 => MessageKind::Frame,
            6 => MessageKind::Goodbye,
            7 => MessageKind::Ready,
            8 => MessageKind::Hold,
            _ => return None,
        })
    }

    /// The size in bytes of a body of this kind.
    pub(crate) fn body_len(self) -> u32 {
        match self {
            MessageKind::Hello => 48,
            MessageKind::Buffer => 45,
            MessageKind::Image => 62,
            MessageKind::Timeline => 17,
            MessageKind::Frame => 8,
            MessageKind::Hold => 21,
            MessageKind::Goodbye | MessageKind::Ready => 0,
        }
    }

    /// The descriptors a message of this kind carries.
    pub(crate) fn fd_count(self) -> u32 {
        match self {
            MessageKind::Buffer | MessageKind::Image | MessageKind::Timeline => 1,
            MessageKind::Hello
            | MessageKind::Frame
            | MessageKind::Hold
            | MessageKind::Goodbye
            | MessageKind::Ready => 0,
        }
    }
}

impl std::fmt::Display for MessageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// A decoded, checked message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The message's kind.
    pub kind: MessageKind,
    /// The body's length in bytes (always `kind.body_len()`).
    pub body_len: u32,
    /// The descriptors that travel with the message (always `kind.fd_count()`).
    pub fd_count: u32,
}

impl Header {
    /// Reads and checks the header at the start of `bytes` (magic, version, kind, body length
    /// and descriptor count against the kind); bytes after the header are not looked at.
    pub fn decode(bytes: &[u8]) -> Result<Header, IpcError> {
        let mut r = Reader {
            bytes,
            pos: 0,
            kind: None,
        };
        let found: [u8; 4] = r.take()?;
        if found != MAGIC {
            return Err(IpcError::BadMagic { found });
        }
        let version = r.u16()?;
        if version != VERSION {
            return Err(IpcError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        let raw_kind = r.u16()?;
        let kind =
            MessageKind::from_u16(raw_kind).ok_or(IpcError::UnknownKind { kind: raw_kind })?;
        let (body_len, fd_count) = (r.u32()?, r.u32()?);
        if body_len != kind.body_len() {
            return Err(IpcError::BodyLengthMismatch {
                kind,
                expected: kind.body_len(),
                got: body_len,
            });
        }
        if fd_count != kind.fd_count() {
            return Err(IpcError::FdCountMismatch {
                kind,
                expected: kind.fd_count(),
                got: fd_count,
            });
        }
        Ok(Header {
            kind,
            body_len,
            fd_count,
        })
    }

    /// Header plus body, in bytes.
    pub fn message_len(&self) -> usize {
        HEADER_LEN + self.body_len as usize
    }
}

/// The first message of a publisher: which GPU and driver its handles belong to (opaque
/// handles import only where both UUIDs match), which process, and how many objects follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The publisher's Vulkan `deviceUUID`.
    pub device_uuid: [u8; 16],
    /// The publisher's Vulkan `driverUUID`.
    pub driver_uuid: [u8; 16],
    /// The publisher's process id.
    pub pid: u32,
    /// Bumped each time the publisher republishes its objects.
    pub generation: u64,
    /// The number of buffer, image and timeline messages that follow.
    pub object_count: u32,
}

/// A buffer bound to exportable memory; the message carries the memory's descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferInfo {
    /// The publisher's id for the object.
    pub id: u32,
    /// The buffer's size in bytes (a whole number of elements).
    pub size: u64,
    /// The buffer's offset in its memory allocation.
    pub offset: u64,
    /// The memory allocation's size in bytes (what an importer passes as its size).
    pub memory_size: u64,
    /// What the buffer holds (DLPack's data type, values per row).
    pub element: ElementFormat,
    /// Whether the memory is a dedicated allocation for this buffer.
    pub dedicated: bool,
    /// The buffer's Vulkan usage flags.
    pub usage: vk::BufferUsageFlags,
    /// The handle type of the descriptor (`OPAQUE_FD`).
    pub handle_type: vk::ExternalMemoryHandleTypeFlags,
}

/// An image bound to exportable memory; the message carries the memory's descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    /// The publisher's id for the object.
    pub id: u32,
    /// The image's shape.
    pub shape: ImageShape,
    /// The image's format.
    pub format: vk::Format,
    /// Width in texels.
    pub width: u32,
    /// Height in texels.
    pub height: u32,
    /// Depth in texels (1 for a 2D image).
    pub depth: u32,
    /// Mip levels (at most the full chain).
    pub mip_levels: u32,
    /// Array layers.
    pub array_layers: u32,
    /// The image's Vulkan usage flags.
    pub usage: vk::ImageUsageFlags,
    /// The image's tiling.
    pub tiling: vk::ImageTiling,
    /// The image's create flags (`CUBE_COMPATIBLE` for a cube map; no others are shared).
    pub flags: vk::ImageCreateFlags,
    /// The image's offset in its memory allocation.
    pub offset: u64,
    /// The memory allocation's size in bytes.
    pub memory_size: u64,
    /// Whether the memory is a dedicated allocation for this image.
    pub dedicated: bool,
    /// The handle type of the descriptor (`OPAQUE_FD`).
    pub handle_type: vk::ExternalMemoryHandleTypeFlags,
}

/// The shape of a shared image: what its Vulkan image type, create flags and layer count
/// cannot say alone (a 3D image of depth 1 is not a 2D image; an array of one layer is a
/// layered CUDA array).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ImageShape {
    /// A 2D image of one layer.
    D2 = 0,
    /// A 2D array image (`array_layers` layers).
    D2Array = 1,
    /// A 3D image (`depth` texels deep).
    D3 = 2,
    /// A cube map: six square layers, `CUBE_COMPATIBLE`.
    Cube = 3,
}

/// Which side signals a timeline semaphore (the other side waits on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TimelineRole {
    /// The publisher signals, the attacher waits.
    Publisher = 0,
    /// The attacher signals, the publisher waits.
    Attacher = 1,
}

/// A timeline semaphore; the message carries its descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineInfo {
    /// The publisher's id for the object.
    pub id: u32,
    /// Which side signals it.
    pub role: TimelineRole,
    /// Its value when published.
    pub initial_value: u64,
    /// The handle type of the descriptor (`OPAQUE_FD`).
    pub handle_type: vk::ExternalSemaphoreHandleTypeFlags,
}

/// An optional per-frame notice: the publisher reached `value` (a timeline value or frame
/// number, as the two sides agree).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameNotice {
    /// The value reached.
    pub value: u64,
}

/// What a [`HoldMessage`] says (the fan-out protocol, `rules::fanout`'s book across a socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HoldOp {
    /// Consumer: hold a frame for me (the newest, or the next for a lossless consumer).
    Request = 1,
    /// Publisher: held — `frame` in `slot`; signal your read timeline to `value` when read.
    Granted = 2,
    /// Publisher: nothing new to hold yet.
    Nothing = 3,
    /// Consumer: my read of `frame` is scheduled (my read timeline reaches `value` after it).
    Released = 4,
    /// Publisher: you held me back past your timeout; you get the newest frames from now on.
    Demoted = 5,
    /// Consumer, first: how it takes frames (`value` 1: every frame; 0: the newest).
    Subscribe = 6,
}

/// A fan-out hold message: an op and the frame, slot and read value it concerns (zero where
/// the op has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldMessage {
    /// What it says.
    pub op: HoldOp,
    /// The frame.
    pub frame: u64,
    /// The slot the frame is in.
    pub slot: u32,
    /// The consumer's read-timeline value for the hold.
    pub value: u64,
}

/// One message of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Message {
    /// See [`Hello`].
    Hello(Hello),
    /// See [`BufferInfo`].
    Buffer(BufferInfo),
    /// See [`ImageInfo`].
    Image(ImageInfo),
    /// See [`TimelineInfo`].
    Timeline(TimelineInfo),
    /// See [`FrameNotice`].
    Frame(FrameNotice),
    /// The sender is leaving.
    Goodbye,
    /// The attacher takes the objects (see [`MessageKind::Ready`]).
    Ready,
    /// A fan-out hold (see [`MessageKind::Hold`]).
    Hold(HoldMessage),
}

impl Message {
    /// The message's kind.
    pub fn kind(&self) -> MessageKind {
        match self {
            Message::Hello(_) => MessageKind::Hello,
            Message::Buffer(_) => MessageKind::Buffer,
            Message::Image(_) => MessageKind::Image,
            Message::Timeline(_) => MessageKind::Timeline,
            Message::Frame(_) => MessageKind::Frame,
            Message::Goodbye => MessageKind::Goodbye,
            Message::Ready => MessageKind::Ready,
            Message::Hold(_) => MessageKind::Hold,
        }
    }
}

/// Encodes `msg` (header and body); no checks: [`decode`] checks the wire's rules, and the
/// sharing layer a description's placement (`describe`).
pub fn encode(msg: &Message) -> Vec<u8> {
    let kind = msg.kind();
    let mut w = Vec::with_capacity(HEADER_LEN + kind.body_len() as usize);
    w.extend_from_slice(&MAGIC);
    w.extend_from_slice(&VERSION.to_le_bytes());
    w.extend_from_slice(&(kind as u16).to_le_bytes());
    w.extend_from_slice(&kind.body_len().to_le_bytes());
    w.extend_from_slice(&kind.fd_count().to_le_bytes());
    let mut put = |bytes: &[u8]| w.extend_from_slice(bytes);
    match msg {
        Message::Hello(h) => {
            put(&h.device_uuid);
            put(&h.driver_uuid);
            put(&h.pid.to_le_bytes());
            put(&h.generation.to_le_bytes());
            put(&h.object_count.to_le_bytes());
        }
        Message::Buffer(b) => {
            put(&b.id.to_le_bytes());
            put(&b.size.to_le_bytes());
            put(&b.offset.to_le_bytes());
            put(&b.memory_size.to_le_bytes());
            put(&[b.element.code, b.element.bits]);
            put(&b.element.lanes.to_le_bytes());
            put(&b.element.columns.to_le_bytes());
            put(&[u8::from(b.dedicated)]);
            put(&b.usage.as_raw().to_le_bytes());
            put(&b.handle_type.as_raw().to_le_bytes());
        }
        Message::Image(i) => {
            put(&i.id.to_le_bytes());
            put(&[i.shape as u8]);
            put(&i.format.as_raw().to_le_bytes());
            for v in [i.width, i.height, i.depth, i.mip_levels, i.array_layers] {
                put(&v.to_le_bytes());
            }
            put(&i.usage.as_raw().to_le_bytes());
            put(&i.tiling.as_raw().to_le_bytes());
            put(&i.flags.as_raw().to_le_bytes());
            put(&i.offset.to_le_bytes());
            put(&i.memory_size.to_le_bytes());
            put(&[u8::from(i.dedicated)]);
            put(&i.handle_type.as_raw().to_le_bytes());
        }
        Message::Timeline(t) => {
            put(&t.id.to_le_bytes());
            put(&[t.role as u8]);
            put(&t.initial_value.to_le_bytes());
            put(&t.handle_type.as_raw().to_le_bytes());
        }
        Message::Frame(f) => put(&f.value.to_le_bytes()),
        Message::Hold(h) => {
            put(&[h.op as u8]);
            put(&h.frame.to_le_bytes());
            put(&h.slot.to_le_bytes());
            put(&h.value.to_le_bytes());
        }
        Message::Goodbye | Message::Ready => {}
    }
    w
}

/// Decodes and checks one whole message (`bytes` holds exactly one), which arrived with
/// `fds_received` descriptors.
pub fn decode(bytes: &[u8], fds_received: usize) -> Result<Message, IpcError> {
    if bytes.len() < HEADER_LEN {
        return Err(IpcError::TruncatedHeader {
            expected: HEADER_LEN,
            got: bytes.len(),
        });
    }
    let header = Header::decode(bytes)?;
    let body = &bytes[HEADER_LEN..];
    let expected = header.body_len as usize;
    if body.len() < expected {
        return Err(IpcError::TruncatedBody {
            kind: header.kind,
            expected,
            got: body.len(),
        });
    }
    if body.len() > expected {
        return Err(IpcError::TrailingBytes {
            expected: header.message_len(),
            got: bytes.len(),
        });
    }
    if fds_received != header.fd_count as usize {
        return Err(IpcError::FdsNotAsAnnounced {
            announced: header.fd_count,
            received: fds_received,
        });
    }
    decode_body(header.kind, body)
}

fn decode_body(kind: MessageKind, body: &[u8]) -> Result<Message, IpcError> {
    let mut r = Reader {
        bytes: body,
        pos: 0,
        kind: Some(kind),
    };
    Ok(match kind {
        MessageKind::Hello => Message::Hello(Hello {
            device_uuid: r.take()?,
            driver_uuid: r.take()?,
            pid: r.u32()?,
            generation: r.u64()?,
            object_count: r.u32()?,
        }),
        MessageKind::Buffer => Message::Buffer(BufferInfo {
            id: r.u32()?,
            size: r.u64()?,
            offset: r.u64()?,
            memory_size: r.u64()?,
            element: {
                let [code, bits] = r.take::<2>()?;
                ElementFormat {
                    code,
                    bits,
                    lanes: u16::from_le_bytes(r.take::<2>()?),
                    columns: r.u32()?,
                }
            },
            dedicated: r.bool("dedicated")?,
            usage: vk::BufferUsageFlags::from_raw(r.u32()?),
            handle_type: vk::ExternalMemoryHandleTypeFlags::from_raw(r.u32()?),
        }),
        MessageKind::Image => Message::Image(ImageInfo {
            id: r.u32()?,
            shape: match r.take::<1>()?[0] {
                0 => ImageShape::D2,
                1 => ImageShape::D2Array,
                2 => ImageShape::D3,
                3 => ImageShape::Cube,
                value => return Err(IpcError::UnknownImageShape { value }),
            },
            format: vk::Format::from_raw(r.i32()?),
            width: r.u32()?,
            height: r.u32()?,
            depth: r.u32()?,
            mip_levels: r.u32()?,
            array_layers: r.u32()?,
            usage: vk::ImageUsageFlags::from_raw(r.u32()?),
            tiling: vk::ImageTiling::from_raw(r.i32()?),
            flags: vk::ImageCreateFlags::from_raw(r.u32()?),
            offset: r.u64()?,
            memory_size: r.u64()?,
            dedicated: r.bool("dedicated")?,
            handle_type: vk::ExternalMemoryHandleTypeFlags::from_raw(r.u32()?),
        }),
        MessageKind::Timeline => Message::Timeline(TimelineInfo {
            id: r.u32()?,
            role: match r.take::<1>()?[0] {
                0 => TimelineRole::Publisher,
                1 => TimelineRole::Attacher,
                value => return Err(IpcError::UnknownRole { value }),
            },
            initial_value: r.u64()?,
            handle_type: vk::ExternalSemaphoreHandleTypeFlags::from_raw(r.u32()?),
        }),
        MessageKind::Frame => Message::Frame(FrameNotice { value: r.u64()? }),
        MessageKind::Hold => Message::Hold(HoldMessage {
            op: match r.take::<1>()?[0] {
                1 => HoldOp::Request,
                2 => HoldOp::Granted,
                3 => HoldOp::Nothing,
                4 => HoldOp::Released,
                5 => HoldOp::Demoted,
                6 => HoldOp::Subscribe,
                value => return Err(IpcError::UnknownHoldOp { value }),
            },
            frame: r.u64()?,
            slot: r.u32()?,
            value: r.u64()?,
        }),
        MessageKind::Goodbye => Message::Goodbye,
        MessageKind::Ready => Message::Ready,
    })
}

/// Reads little-endian fields in order; running out is a truncated header (`kind` is `None`)
/// or body.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    kind: Option<MessageKind>,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], IpcError> {
        let field = self
            .bytes
            .get(self.pos..self.pos + N)
            .and_then(|s| <[u8; N]>::try_from(s).ok());
        let Some(field) = field else {
            let got = self.bytes.len();
            return Err(match self.kind {
                None => IpcError::TruncatedHeader {
                    expected: HEADER_LEN,
                    got,
                },
                Some(kind) => IpcError::TruncatedBody {
                    kind,
                    expected: kind.body_len() as usize,
                    got,
                },
            });
        };
        self.pos += N;
        Ok(field)
    }
    fn u16(&mut self) -> Result<u16, IpcError> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Result<u32, IpcError> {
        self.take().map(u32::from_le_bytes)
    }
    fn i32(&mut self) -> Result<i32, IpcError> {
        self.take().map(i32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, IpcError> {
        self.take().map(u64::from_le_bytes)
    }
    fn bool(&mut self, field: &'static str) -> Result<bool, IpcError> {
        match self.take::<1>()?[0] {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(IpcError::BadBool { field, value }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One valid message of each kind.
    pub(crate) fn samples() -> Vec<Message> {
        vec![
            Message::Hello(Hello {
                device_uuid: [7; 16],
                driver_uuid: [9; 16],
                pid: 4242,
                generation: 3,
                object_count: 3,
            }),
            Message::Buffer(BufferInfo {
                id: 1,
                size: 4096,
                offset: 65536,
                memory_size: 1 << 20,
                element: ElementFormat::F32X4,
                dedicated: false,
                usage: vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_SRC,
                handle_type: vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD,
            }),
            Message::Image(ImageInfo {
                id: 2,
                shape: ImageShape::D2,
                format: vk::Format::R8G8B8A8_UNORM,
                width: 1920,
                height: 1080,
                depth: 1,
                mip_levels: 11,
                array_layers: 1,
                usage: vk::ImageUsageFlags::STORAGE | vk::ImageUsageFlags::SAMPLED,
                tiling: vk::ImageTiling::OPTIMAL,
                flags: vk::ImageCreateFlags::empty(),
                offset: 0,
                memory_size: 8 << 20,
                dedicated: true,
                handle_type: vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD,
            }),
            Message::Timeline(TimelineInfo {
                id: 3,
                role: TimelineRole::Attacher,
                initial_value: 17,
                handle_type: vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD,
            }),
            Message::Frame(FrameNotice { value: 99 }),
            Message::Goodbye,
            Message::Ready,
            Message::Hold(HoldMessage {
                op: HoldOp::Granted,
                frame: 12,
                slot: 3,
                value: 5,
            }),
        ]
    }

    fn fds(m: &Message) -> usize {
        m.kind().fd_count() as usize
    }

    #[test]
    fn every_kind_round_trips_at_its_size() {
        for m in samples() {
            let bytes = encode(&m);
            assert_eq!(
                bytes.len(),
                HEADER_LEN + m.kind().body_len() as usize,
                "{m:?}"
            );
            assert_eq!(decode(&bytes, fds(&m)), Ok(m));
        }
    }

    #[test]
    fn header_refusals_name_the_rule_and_numbers() {
        let bytes = encode(&samples()[1]);
        let mut b = bytes.clone();
        b[0] = b'X';
        assert_eq!(decode(&b, 1), Err(IpcError::BadMagic { found: *b"XUVK" }));
        let mut b = bytes.clone();
        b[4] = 1;
        let e = decode(&b, 1).unwrap_err();
        assert_eq!(
            e,
            IpcError::UnsupportedVersion {
                found: 1,
                supported: VERSION
            }
        );
        assert!(
            e.to_string().contains("version 1")
                && e.to_string().contains(&format!("version {VERSION}"))
        );
        let mut b = bytes.clone();
        b[6] = 77;
        assert_eq!(decode(&b, 1), Err(IpcError::UnknownKind { kind: 77 }));
        assert_eq!(
            decode(&bytes[..5], 1),
            Err(IpcError::TruncatedHeader {
                expected: 16,
                got: 5
            })
        );
        assert_eq!(
            decode(&bytes[..20], 1),
            Err(IpcError::TruncatedBody {
                kind: MessageKind::Buffer,
                expected: 45,
                got: 4
            })
        );
        let mut b = bytes.clone();
        b.push(0);
        assert_eq!(
            decode(&b, 1),
            Err(IpcError::TrailingBytes {
                expected: 61,
                got: 62
            })
        );
        let mut b = bytes.clone();
        b[8] = 44;
        assert_eq!(
            decode(&b, 1),
            Err(IpcError::BodyLengthMismatch {
                kind: MessageKind::Buffer,
                expected: 45,
                got: 44
            })
        );
        let mut b = bytes.clone();
        b[12] = 2;
        assert_eq!(
            decode(&b, 2),
            Err(IpcError::FdCountMismatch {
                kind: MessageKind::Buffer,
                expected: 1,
                got: 2
            })
        );
        assert_eq!(
            decode(&bytes, 0),
            Err(IpcError::FdsNotAsAnnounced {
                announced: 1,
                received: 0
            })
        );
    }

    /// What is the wire's own in a body: booleans and role bytes (placement, extents and mip
    /// levels are the import rules', in `describe`).
    #[test]
    fn body_refusals_name_the_rule_and_numbers() {
        let mut b = encode(&samples()[1]);
        b[HEADER_LEN + 36] = 2; // `dedicated`
        assert_eq!(
            decode(&b, 1),
            Err(IpcError::BadBool {
                field: "dedicated",
                value: 2
            })
        );
        let mut b = encode(&samples()[3]);
        b[HEADER_LEN + 4] = 5; // `role`
        assert_eq!(decode(&b, 1), Err(IpcError::UnknownRole { value: 5 }));
    }

    fn any_message() -> impl Strategy<Value = Message> {
        let uuid = any::<[u8; 16]>();
        prop_oneof![
            (uuid, uuid, any::<u32>(), any::<u64>(), any::<u32>()).prop_map(
                |(device_uuid, driver_uuid, pid, generation, object_count)| {
                    Message::Hello(Hello {
                        device_uuid,
                        driver_uuid,
                        pid,
                        generation,
                        object_count,
                    })
                }
            ),
            (
                (any::<u32>(), 1u64..1 << 30, 1u32..256, 0u64..1 << 40),
                (0u64..1 << 20, any::<u32>(), any::<bool>(), any::<u32>())
            )
                .prop_map(
                    |((id, elems, esize, offset), (slack, tag, dedicated, usage))| {
                        let size = elems * u64::from(esize);
                        Message::Buffer(BufferInfo {
                            id,
                            size,
                            offset,
                            memory_size: offset + size + slack,
                            element: ElementFormat {
                                code: tag as u8,
                                bits: (tag >> 8) as u8,
                                lanes: (tag >> 16) as u16,
                                columns: esize,
                            },
                            dedicated,
                            usage: vk::BufferUsageFlags::from_raw(usage),
                            handle_type: vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD,
                        })
                    }
                ),
            (
                (
                    any::<u32>(),
                    any::<i32>(),
                    1u32..1 << 14,
                    1u32..1 << 14,
                    1u32..64
                ),
                (1u32..64, 1u64..1 << 40, any::<bool>(), 0u32..32)
            )
                .prop_map(
                    |((id, format, width, height, depth), (layers, mem, dedicated, m))| {
                        let max = 32 - width.max(height).max(depth).leading_zeros();
                        Message::Image(ImageInfo {
                            id,
                            shape: if depth > 1 {
                                ImageShape::D3
                            } else {
                                ImageShape::D2Array
                            },
                            format: vk::Format::from_raw(format),
                            width,
                            height,
                            depth,
                            mip_levels: 1 + m % max,
                            array_layers: layers,
                            usage: vk::ImageUsageFlags::STORAGE,
                            tiling: vk::ImageTiling::OPTIMAL,
                            flags: vk::ImageCreateFlags::empty(),
                            offset: mem / 2,
                            memory_size: mem,
                            dedicated,
                            handle_type: vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD,
                        })
                    }
                ),
            (any::<u32>(), any::<bool>(), any::<u64>()).prop_map(
                |(id, attacher, initial_value)| {
                    Message::Timeline(TimelineInfo {
                        id,
                        role: if attacher {
                            TimelineRole::Attacher
                        } else {
                            TimelineRole::Publisher
                        },
                        initial_value,
                        handle_type: vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD,
                    })
                }
            ),
            any::<u64>().prop_map(|value| Message::Frame(FrameNotice { value })),
            Just(Message::Goodbye),
            Just(Message::Ready),
            (1u8..=6, any::<u64>(), any::<u32>(), any::<u64>()).prop_map(
                |(op, frame, slot, value)| {
                    let op = [
                        HoldOp::Request,
                        HoldOp::Granted,
                        HoldOp::Nothing,
                        HoldOp::Released,
                        HoldOp::Demoted,
                        HoldOp::Subscribe,
                    ][usize::from(op - 1)];
                    Message::Hold(HoldMessage {
                        op,
                        frame,
                        slot,
                        value,
                    })
                }
            ),
        ]
    }

    proptest! {
        /// A truncated message is always refused; a message with a byte changed either is
        /// refused or decodes to a message whose encoding is exactly those bytes (decoding is
        /// canonical, so equal bytes mean an equal message); neither ever panics.
        #[test]
        fn damaged_messages_are_refused_or_canonical(
            m in any_message(),
            cut in any::<prop::sample::Index>(),
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
            extra_fds in 0usize..3,
        ) {
            let bytes = encode(&m);
            prop_assert_eq!(decode(&bytes, fds(&m)), Ok(m));
            let short = &bytes[..cut.index(bytes.len())];
            prop_assert!(decode(short, fds(&m)).is_err());
            let mut damaged = bytes.clone();
            damaged[at.index(bytes.len())] ^= flip;
            for n in [0, 1, extra_fds] {
                if let Ok(d) = decode(&damaged, n) {
                    prop_assert_eq!(&encode(&d), &damaged);
                    prop_assert_eq!(n, fds(&d));
                }
            }
        }
    }
}
