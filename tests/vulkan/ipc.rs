//! Vulkan memory across two processes (`cuvk::ipc`, issue 29), on any Vulkan device (lavapipe
//! in CI): a server publishes a buffer, a child process attaches, reads what the server wrote
//! and writes back, with frame notices both ways; refusals of descriptions that lie or do not
//! fit (nothing left open, the next attach works); a client killed with SIGKILL is noticed and
//! the server keeps its memory; a server gone makes the client's calls fail, typed; many
//! attach/detach cycles leak no descriptor; a second client while one is served is turned
//! away (`Busy`) at once; an image crosses with its texels both ways. (Timelines across
//! processes need `VK_KHR_external_semaphore_fd`, which lavapipe lacks: the GPU machine tests
//! them.)

use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cuvk::ash::vk;
use cuvk::ipc::test_peer::{Channel, Hello, Listener, Message};
use cuvk::ipc::{Attached, BufferInfo, ImageInfo, ImageShape, IpcError, Server};
use cuvk::vulkan::{BoundBuffer, BoundImage, HostBuffer, ImageOptions, ImageRegion, VulkanContext};
use cuvk::ImageDesc;
use cuvk::{ElementFormat, Error};
use cuvk_dev::testing as common;

const T: Duration = Duration::from_secs(20);
const WORDS: usize = 1 << 16;

fn unique(name: &str) -> String {
    format!("test-{name}-{}", std::process::id())
}

/// An exportable buffer, written with the words of `seed` (where given).
fn exportable(ctx: &Arc<VulkanContext>, seed: Option<u32>) -> Arc<BoundBuffer> {
    let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
    let mut b = BoundBuffer::new_exportable(
        ctx,
        (WORDS * 4) as u64,
        usage,
        vk::MemoryPropertyFlags::DEVICE_LOCAL,
    )
    .unwrap();
    if let Some(seed) = seed {
        write_words(ctx, &mut b, seed);
    }
    Arc::new(b)
}

fn write_words(ctx: &Arc<VulkanContext>, buffer: &mut BoundBuffer, seed: u32) {
    let data: Vec<u32> = (0..WORDS as u32)
        .map(|i| i.wrapping_mul(2654435761) ^ seed)
        .collect();
    let mut host = HostBuffer::new(ctx, (WORDS * 4) as u64, vk::BufferUsageFlags::empty()).unwrap();
    host.write(&data).unwrap();
    ctx.copy_buffer(&host, 0, buffer, 0, (WORDS * 4) as u64)
        .unwrap();
}

fn words_match(ctx: &Arc<VulkanContext>, buffer: &BoundBuffer, seed: u32) -> bool {
    let got = common::read_via_vulkan(ctx, buffer);
    got.iter()
        .enumerate()
        .all(|(i, &w)| w == (i as u32).wrapping_mul(2654435761) ^ seed)
}

const SIDE: u32 = 64;

/// An exportable 64x64 RGBA8 image, written with the texels of `seed`.
fn exportable_image(ctx: &Arc<VulkanContext>, seed: u32) -> Arc<BoundImage> {
    let usage = vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST;
    let desc = ImageDesc::d2(vk::Format::R8G8B8A8_UNORM, SIDE, SIDE, usage);
    let mut image = BoundImage::new(ctx, &desc, ImageOptions::EXPORT).unwrap();
    write_texels(ctx, &mut image, seed);
    Arc::new(image)
}

fn texels(seed: u32) -> Vec<u32> {
    (0..SIDE * SIDE)
        .map(|i| i.wrapping_mul(40503) ^ seed)
        .collect()
}

fn write_texels(ctx: &Arc<VulkanContext>, image: &mut BoundImage, seed: u32) {
    let bytes = u64::from(SIDE * SIDE * 4);
    let mut host = HostBuffer::new(ctx, bytes, vk::BufferUsageFlags::empty()).unwrap();
    host.write(&texels(seed)).unwrap();
    let region = ImageRegion::level(image.desc(), 0);
    ctx.copy_buffer_to_image(&host, 0, image, region).unwrap();
}

fn texels_match(ctx: &Arc<VulkanContext>, image: &BoundImage, seed: u32) -> bool {
    let bytes = u64::from(SIDE * SIDE * 4);
    let mut host = HostBuffer::new(ctx, bytes, vk::BufferUsageFlags::empty()).unwrap();
    let region = ImageRegion::level(image.desc(), 0);
    ctx.copy_image_to_buffer(image, region, &mut host, 0)
        .unwrap();
    host.read::<u32>().unwrap() == texels(seed)
}

fn spawn_child(role: &str, name: &str) -> Child {
    common::child_test("ipc::ipc_child", "CUVK_IPC_ROLE", role)
        .env("CUVK_IPC_NAME", name)
        .spawn()
        .unwrap()
}

/// The child's side of the tests (does nothing when run as an ordinary test).
#[test]
fn ipc_child() {
    let (Ok(role), Ok(name)) = (
        std::env::var("CUVK_IPC_ROLE"),
        std::env::var("CUVK_IPC_NAME"),
    ) else {
        return;
    };
    let ctx = common::vulkan("ipc_child").expect("the parent found a Vulkan device");
    let info = ctx.info();
    let mut attached =
        Attached::connect(&name, info.device_uuid, Some(info.driver_uuid), T).unwrap();
    if role == "image" {
        // The server's texels, exactly, through an image of our own on its memory; then ours.
        let id = attached.images().next().unwrap().id;
        let mut image = attached.import_vulkan_image(id, &ctx).unwrap();
        assert_eq!(
            image.desc(),
            &ImageDesc::d2(
                vk::Format::R8G8B8A8_UNORM,
                SIDE,
                SIDE,
                vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST
            )
        );
        assert!(
            texels_match(&ctx, &image, 7),
            "the child sees the server's texels"
        );
        write_texels(&ctx, &mut image, 9);
        attached.link().notify(1).unwrap();
        let _ = attached.link().latest(1, T);
        drop(image);
        common::assert_clean(&ctx);
        return;
    }
    let id = attached.buffers().next().unwrap().id;
    let mut buffer = attached.import_vulkan_buffer(id, &ctx).unwrap();
    match role.as_str() {
        "reader-writer" => {
            // What the server wrote, exactly; then our answer, announced as frame 1.
            assert!(
                words_match(&ctx, &buffer, 7),
                "the child sees the server's data"
            );
            write_words(&ctx, &mut buffer, 9);
            attached.link().notify(1).unwrap();
            // Wait for the server's goodbye (or its end) before letting go.
            let _ = attached.link().latest(1, T);
        }
        "spinner" => {
            // Announces frames until killed.
            for n in 1.. {
                attached.link().notify(n).unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        other => panic!("unknown role {other}"),
    }
    drop(buffer);
    common::assert_clean(&ctx);
}

#[test]
fn a_buffer_crosses_processes_with_its_data_both_ways() {
    let _g = common::shared();
    let Some(ctx) = common::vulkan("ipc_both_ways") else {
        return;
    };
    let name = unique("both-ways");
    let mut server = Server::bind(&name, &ctx).unwrap();
    let buffer = exportable(&ctx, Some(7));
    server
        .publish_buffer(&buffer, ElementFormat::float32(1))
        .unwrap();
    let mut child = spawn_child("reader-writer", &name);
    let mut link = server.accept(T).unwrap();
    assert_eq!(
        link.latest(0, T).unwrap(),
        Some(1),
        "the child announced its frame"
    );
    assert!(
        words_match(&ctx, &buffer, 9),
        "the server sees what the child wrote"
    );
    link.goodbye();
    assert!(child.wait().unwrap().success(), "the child's checks passed");
    common::assert_clean(&ctx);
}

#[test]
fn an_image_crosses_processes_with_its_texels_both_ways() {
    let _g = common::shared();
    let Some(ctx) = common::vulkan("ipc_image") else {
        return;
    };
    let name = unique("image");
    let mut server = Server::bind(&name, &ctx).unwrap();
    let image = exportable_image(&ctx, 7);
    server.publish_image(&image).unwrap();
    let mut child = spawn_child("image", &name);
    let mut link = server.accept(T).unwrap();
    assert_eq!(
        link.latest(0, T).unwrap(),
        Some(1),
        "the child announced its write"
    );
    assert!(
        texels_match(&ctx, &image, 9),
        "the server sees the texels the child wrote"
    );
    link.goodbye();
    assert!(child.wait().unwrap().success(), "the child's checks passed");
    common::assert_clean(&ctx);
}

/// A client on another GPU (or driver) refuses the hello before any descriptor is sent, and
/// the same `accept` then serves the next client (in 0.4 the server had sent the refused
/// client everything, and a viewer stopped there: the next producer timed out).
#[test]
fn a_refused_client_gets_no_descriptor_and_the_next_client_is_served() {
    let _g = common::serial();
    let Some(ctx) = common::vulkan("ipc_refused_then_served") else {
        return;
    };
    let info = ctx.info().clone();
    let name = unique("refused-then-served");
    let mut server = Server::bind(&name, &ctx).unwrap();
    let buffer = exportable(&ctx, Some(6));
    server
        .publish_buffer(&buffer, ElementFormat::float32(1))
        .unwrap();
    let (uuid, driver) = (info.device_uuid, info.driver_uuid);
    let clients = {
        let name = name.clone();
        std::thread::spawn(move || {
            // A raw client that refuses the hello: the server sends it nothing more and
            // closes its end.
            let raw = Channel::connect(&name, T).unwrap();
            assert!(matches!(raw.recv(T).unwrap().0, Message::Hello(_)));
            raw.send(&Message::Goodbye, &[]).unwrap();
            let after = raw.recv(T);
            let mut other = uuid;
            other.0[0] ^= 0xFF;
            let wrong_gpu = Attached::connect(&name, other, Some(driver), T);
            let mut other_driver = driver;
            other_driver.0[15] ^= 0xFF;
            let wrong_driver = Attached::connect(&name, uuid, Some(other_driver), T);
            let right = Attached::connect(&name, uuid, Some(driver), T);
            (after, wrong_gpu, wrong_driver, right)
        })
    };
    let mut link = server.accept(T).unwrap();
    let (after, wrong_gpu, wrong_driver, right) = clients.join().unwrap();
    assert!(
        matches!(after, Err(IpcError::PeerClosed { partial: 0 })),
        "a client that refused is sent no descriptor, only the close: {after:?}"
    );
    let e = wrong_gpu.unwrap_err();
    assert!(matches!(e, Error::Ipc(IpcError::WrongDevice { .. })), "{e}");
    let e = wrong_driver.unwrap_err();
    assert!(
        matches!(e, Error::Ipc(IpcError::DriverMismatch { .. })),
        "{e}"
    );
    let mut right = right.unwrap();
    right.link().notify(3).unwrap();
    assert_eq!(link.latest(0, T).unwrap(), Some(3));
    let id = right.buffers().next().unwrap().id;
    let imported = right.import_vulkan_buffer(id, &ctx).unwrap();
    assert!(words_match(&ctx, &imported, 6));
    drop((imported, right, link, server, buffer));
    common::assert_clean(&ctx);
}

#[test]
fn a_second_client_is_turned_away_busy_at_once_and_the_first_carries_on() {
    let _g = common::shared();
    let Some(ctx) = common::vulkan("ipc_busy") else {
        return;
    };
    let info = ctx.info().clone();
    let name = unique("busy");
    let mut server = Server::bind(&name, &ctx).unwrap();
    let buffer = exportable(&ctx, Some(4));
    server
        .publish_buffer(&buffer, ElementFormat::float32(1))
        .unwrap();
    let (uuid, driver) = (info.device_uuid, info.driver_uuid);
    let first = {
        let name = name.clone();
        std::thread::spawn(move || Attached::connect(&name, uuid, Some(driver), T).unwrap())
    };
    let mut link = server.accept(T).unwrap();
    let mut first = first.join().unwrap();
    assert_eq!(server.turn_away(), 0, "nobody waiting");
    // A second client connects while the first is served: turned away, at once.
    let second = {
        let name = name.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            (
                Attached::connect(&name, uuid, Some(driver), T),
                start.elapsed(),
            )
        })
    };
    let deadline = Instant::now() + T;
    let mut turned = 0;
    while turned == 0 && Instant::now() < deadline {
        turned = server.turn_away();
        std::thread::sleep(Duration::from_millis(1));
    }
    let (second, waited) = second.join().unwrap();
    let e = second.unwrap_err();
    assert!(matches!(e, Error::Ipc(IpcError::Busy)), "{e}");
    assert!(e.rule().is_none(), "busy is a state, not a broken rule");
    assert!(
        waited < Duration::from_secs(5),
        "not its whole timeout: {waited:?}"
    );
    // The first client is unaffected.
    first.link().notify(5).unwrap();
    assert_eq!(link.latest(0, T).unwrap(), Some(5));
    let id = first.buffers().next().unwrap().id;
    let imported = first.import_vulkan_buffer(id, &ctx).unwrap();
    assert!(words_match(&ctx, &imported, 4));
    drop((imported, first, link, server, buffer));
    common::assert_clean(&ctx);
}

#[test]
fn a_client_killed_mid_stream_is_noticed_and_the_server_keeps_its_memory() {
    let _g = common::shared();
    let Some(ctx) = common::vulkan("ipc_killed") else {
        return;
    };
    let name = unique("killed");
    let mut server = Server::bind(&name, &ctx).unwrap();
    let buffer = exportable(&ctx, Some(3));
    server
        .publish_buffer(&buffer, ElementFormat::float32(1))
        .unwrap();
    let mut child = spawn_child("spinner", &name);
    let mut link = server.accept(T).unwrap();
    let seen = link.latest(10, T).unwrap().unwrap();
    assert!(seen > 10);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let start = Instant::now();
    let e = loop {
        match link.latest(u64::MAX - 1, Duration::from_millis(200)) {
            Ok(_) => assert!(start.elapsed() < T, "never noticed the kill"),
            Err(e) => break e,
        }
    };
    assert!(matches!(e, Error::Ipc(IpcError::PeerClosed { .. })), "{e}");
    assert!(link.is_closed() && link.last_seen() >= seen);
    eprintln!(
        "ipc_killed: noticed after {:?}, last frame {}",
        start.elapsed(),
        link.last_seen()
    );
    // The server's memory is its own: still there, still right.
    assert!(words_match(&ctx, &buffer, 3));
    // Its calls fail, typed, never hang.
    assert!(matches!(
        link.notify(1),
        Err(Error::Ipc(
            IpcError::Io { .. } | IpcError::PeerClosed { .. }
        ))
    ));
    common::assert_clean(&ctx);
}

#[test]
fn a_server_gone_makes_the_clients_calls_fail_typed() {
    let _g = common::shared();
    let Some(ctx) = common::vulkan("ipc_server_gone") else {
        return;
    };
    let name = unique("server-gone");
    let info = ctx.info().clone();
    let mut server = Server::bind(&name, &ctx).unwrap();
    server
        .publish_buffer(&exportable(&ctx, None), ElementFormat::float32(1))
        .unwrap();
    let serve = std::thread::spawn(move || {
        let link = server.accept(T).unwrap();
        drop(link); // the server goes away (as a killed process's socket closes)
        drop(server);
    });
    let mut attached =
        Attached::connect(&name, info.device_uuid, Some(info.driver_uuid), T).unwrap();
    serve.join().unwrap();
    let e = attached.link().latest(0, T).unwrap_err();
    assert!(matches!(e, Error::Ipc(IpcError::PeerClosed { .. })), "{e}");
    // The memory it imported stays valid: the import holds it.
    let id = attached.buffers().next().unwrap().id;
    let imported = attached.import_vulkan_buffer(id, &ctx).unwrap();
    let _ = common::read_via_vulkan(&ctx, &imported);
    drop(imported);
    common::assert_clean(&ctx);
}

/// A server that sends `hello` and then `objects` with the given descriptors.
fn fake_server(
    name: &str,
    hello: Hello,
    objects: Vec<(Message, Vec<OwnedFd>)>,
) -> std::thread::JoinHandle<()> {
    let listener = Listener::bind(name).unwrap();
    std::thread::spawn(move || {
        let ch: Channel = listener.accept(T).unwrap();
        ch.send(&Message::Hello(hello), &[]).unwrap();
        // The client answers the hello; one that refuses it is sent nothing.
        if !matches!(ch.recv(T), Ok((Message::Ready, _))) {
            return;
        }
        for (m, fds) in &objects {
            let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            let _ = ch.send(m, &borrowed);
        }
        std::thread::sleep(Duration::from_millis(200));
    })
}

fn buffer_info(memory_size: u64) -> BufferInfo {
    BufferInfo {
        id: 0,
        size: 4096,
        offset: 0,
        memory_size,
        element: ElementFormat::float32(1),
        dedicated: false,
        usage: vk::BufferUsageFlags::TRANSFER_SRC,
        handle_type: vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD,
    }
}

fn image_info(width: u32, height: u32, flags: vk::ImageCreateFlags, memory_size: u64) -> ImageInfo {
    ImageInfo {
        id: 0,
        shape: if flags.is_empty() {
            ImageShape::D2
        } else {
            ImageShape::Cube
        },
        format: vk::Format::R8G8B8A8_UNORM,
        width,
        height,
        depth: 1,
        mip_levels: 1,
        array_layers: if flags.is_empty() { 1 } else { 6 },
        usage: vk::ImageUsageFlags::TRANSFER_SRC,
        tiling: vk::ImageTiling::OPTIMAL,
        flags,
        offset: 0,
        memory_size,
        dedicated: false,
        handle_type: vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD,
    }
}

/// What a fake server sends after its hello.
type Objects = Box<dyn Fn() -> Vec<(Message, Vec<OwnedFd>)>>;

/// One buffer description, with a memfd as large as the memory it describes.
fn one_buffer(info: BufferInfo) -> Objects {
    Box::new(move || vec![(Message::Buffer(info), vec![memfd(info.memory_size as i64)])])
}

/// One image description, with a memfd as large as the memory it describes.
fn one_image(info: ImageInfo) -> Objects {
    Box::new(move || vec![(Message::Image(info), vec![memfd(info.memory_size as i64)])])
}

/// A 64x64 2D image in 1 MiB of memory.
fn plain_image() -> ImageInfo {
    image_info(64, 64, vk::ImageCreateFlags::empty(), 1 << 20)
}

fn memfd(len: i64) -> OwnedFd {
    // SAFETY: a NUL-terminated name; the result is checked and owned once.
    let fd = unsafe { libc::memfd_create(c"cuvk-ipc-lie".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: a new descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    // SAFETY: an open descriptor.
    let rc = unsafe { libc::ftruncate(raw, len) };
    assert_eq!(rc, 0);
    fd
}

fn pipe() -> OwnedFd {
    let mut fds = [0; 2];
    // SAFETY: two out-parameters.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: new descriptors, each owned once (the write end closes at once).
    unsafe {
        drop(OwnedFd::from_raw_fd(fds[1]));
        OwnedFd::from_raw_fd(fds[0])
    }
}

#[test]
fn lies_and_mismatches_are_refused_leaving_nothing_open() {
    let _g = common::serial();
    let Some(ctx) = common::vulkan("ipc_refusals") else {
        return;
    };
    let info = ctx.info().clone();
    let (device_uuid, driver_uuid) = (info.device_uuid.0, info.driver_uuid.0);
    let hello = move |objects: u32| Hello {
        device_uuid,
        driver_uuid,
        pid: 1,
        generation: 1,
        object_count: objects,
    };
    let before = common::non_driver_fds();
    let none: Objects = Box::new(Vec::new);
    let cases: Vec<(Hello, Objects, &str)> = vec![
        (
            Hello {
                device_uuid: [9; 16],
                ..hello(0)
            },
            none,
            "Ipc.WrongDevice",
        ),
        (
            Hello {
                driver_uuid: [9; 16],
                ..hello(0)
            },
            Box::new(Vec::new),
            "Ipc.DriverMismatch",
        ),
        (
            hello(1),
            Box::new(|| vec![(Message::Buffer(buffer_info(4096)), vec![pipe()])]),
            "Ipc.WrongFdKind",
        ),
        (
            hello(1),
            Box::new(|| vec![(Message::Buffer(buffer_info(1 << 20)), vec![memfd(4096)])]),
            "Ipc.SizeLie",
        ),
        (
            hello(1),
            Box::new(move || vec![(Message::Hello(hello(0)), vec![])]),
            "Ipc.UnexpectedMessage",
        ),
        (
            hello(1),
            Box::new(|| {
                let cube = vk::ImageCreateFlags::CUBE_COMPATIBLE;
                vec![(
                    Message::Image(image_info(64, 32, cube, 1 << 20)),
                    vec![memfd(1 << 20)],
                )]
            }),
            "Image.CubeNotSquare",
        ),
        (
            hello(1),
            Box::new(|| {
                let info = image_info(64, 64, vk::ImageCreateFlags::empty(), 1 << 20);
                vec![(Message::Image(info), vec![memfd(4096)])]
            }),
            "Ipc.SizeLie",
        ),
        (
            hello(1),
            Box::new(|| {
                let info = ImageInfo {
                    shape: ImageShape::D3,
                    depth: 4,
                    array_layers: 2,
                    ..image_info(64, 64, vk::ImageCreateFlags::empty(), 1 << 20)
                };
                vec![(Message::Image(info), vec![memfd(1 << 20)])]
            }),
            "Image.LayersOn3D",
        ),
        // Lies about placement and shape: the rules every in-process request follows, with
        // the errors a user of that API knows (0.4 restated them as Ipc.* codes).
        (
            hello(1),
            one_buffer(BufferInfo {
                offset: 4096,
                ..buffer_info(4096)
            }),
            "Layout.OutOfBounds",
        ),
        (
            hello(1),
            one_buffer(BufferInfo {
                offset: u64::MAX,
                ..buffer_info(4096)
            }),
            "Layout.Overflow",
        ),
        (
            hello(1),
            // 4096 bytes are no whole number of 3-byte rows.
            one_buffer(BufferInfo {
                element: ElementFormat {
                    columns: 3,
                    ..ElementFormat::BYTES
                },
                ..buffer_info(4096)
            }),
            "Layout.PartialElement",
        ),
        (
            hello(1),
            one_image(ImageInfo {
                mip_levels: 9,
                ..plain_image()
            }),
            "Image.MipLevels",
        ),
        (
            hello(1),
            one_image(ImageInfo {
                height: 0,
                ..plain_image()
            }),
            "Image.ZeroExtent",
        ),
        (
            hello(1),
            one_image(ImageInfo {
                array_layers: 4,
                ..plain_image()
            }),
            "Ipc.ShapeContradicted",
        ),
        (
            hello(1),
            one_image(ImageInfo {
                flags: vk::ImageCreateFlags::MUTABLE_FORMAT,
                ..plain_image()
            }),
            "UnknownImageFlags",
        ),
    ];
    for (i, (h, objects, rule)) in cases.into_iter().enumerate() {
        let name = unique(&format!("lie{i}"));
        let server = fake_server(&name, h, objects());
        let e = Attached::connect(&name, info.device_uuid, Some(info.driver_uuid), T).unwrap_err();
        server.join().unwrap();
        assert_eq!(e.rule().map(cuvk::Rule::name), Some(rule), "{e}");
        assert!(e.rule().is_some(), "{e} has a rule");
        assert_eq!(
            common::non_driver_fds(),
            before,
            "nothing left open after {rule}"
        );
    }
    // The next valid attach works, and its objects are checked on import too.
    let name = unique("valid");
    let mut server = Server::bind(&name, &ctx).unwrap();
    let buffer = exportable(&ctx, Some(5));
    let id = server
        .publish_buffer(&buffer, ElementFormat::float32(1))
        .unwrap();
    let serve = std::thread::spawn(move || {
        let link = server.accept(T).unwrap();
        (server, link)
    });
    let attached = Attached::connect(&name, info.device_uuid, Some(info.driver_uuid), T).unwrap();
    let (server, link) = serve.join().unwrap();
    let e = attached.import_vulkan_buffer(id + 7, &ctx).err().unwrap();
    assert!(
        matches!(e, Error::Ipc(IpcError::NoSuchObject { .. })),
        "{e}"
    );
    let imported = attached.import_vulkan_buffer(id, &ctx).unwrap();
    assert!(words_match(&ctx, &imported, 5));
    drop((imported, attached, link, server, buffer));
    // An image whose memory is too small for what the driver needs: refused on import,
    // before the memory is imported.
    let name = unique("image-small");
    let info_small = image_info(1024, 1024, vk::ImageCreateFlags::empty(), 4096);
    let server = fake_server(
        &name,
        hello(1),
        vec![(Message::Image(info_small), vec![memfd(4096)])],
    );
    let attached = Attached::connect(&name, info.device_uuid, Some(info.driver_uuid), T).unwrap();
    server.join().unwrap();
    let e = attached.import_vulkan_image(0, &ctx).err().unwrap();
    assert!(
        matches!(
            e,
            Error::Layout(cuvk::LayoutError::OutOfBounds {
                container_size: 4096,
                ..
            })
        ),
        "{e}"
    );
    drop(attached);
    // A dedicated allocation must be exactly the image's size: refused before the import.
    let name = unique("image-dedicated");
    let info_dedicated = ImageInfo {
        dedicated: true,
        ..image_info(64, 64, vk::ImageCreateFlags::empty(), 1 << 20)
    };
    let server = fake_server(
        &name,
        hello(1),
        vec![(Message::Image(info_dedicated), vec![memfd(1 << 20)])],
    );
    let attached = Attached::connect(&name, info.device_uuid, Some(info.driver_uuid), T).unwrap();
    server.join().unwrap();
    let e = attached.import_vulkan_image(0, &ctx).err().unwrap();
    assert!(
        matches!(
            e,
            Error::Memory(cuvk::MemoryError::DedicatedSize { given: 1048576, .. })
        ),
        "{e}"
    );
    drop(attached);
    assert_eq!(
        common::non_driver_fds(),
        before,
        "every descriptor closed exactly once"
    );
    common::assert_clean(&ctx);
}

#[test]
fn many_attach_detach_cycles_leak_no_descriptor_and_no_memory() {
    let _g = common::serial();
    let Some(ctx) = common::vulkan("ipc_cycles") else {
        return;
    };
    let info = ctx.info().clone();
    let before = common::non_driver_fds();
    let name = unique("cycles");
    let mut server = Server::bind(&name, &ctx).unwrap();
    let buffer = exportable(&ctx, None);
    server
        .publish_buffer(&buffer, ElementFormat::float32(1))
        .unwrap();
    let cycles: u32 = std::env::var("CUVK_IPC_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let imports = 1_000;
    let start = Instant::now();
    let serve = std::thread::spawn(move || {
        for _ in 0..cycles {
            let link = server.accept(T).unwrap();
            drop(link);
        }
        server
    });
    // Memory, counted: mapped and resident bytes after a warm-up (the driver's and
    // allocator's caches filled) and at the end; every import maps 256 KiB, so one leaked per
    // cycle shows (500 x 256 KiB) even where nothing touched it.
    let warm_up = imports.min(cycles) / 2;
    let mut warm = (0, 0);
    for n in 0..cycles {
        if n == warm_up {
            warm = common::memory_bytes();
        }
        let attached =
            Attached::connect(&name, info.device_uuid, Some(info.driver_uuid), T).unwrap();
        if n < imports {
            // Some cycles also import the memory (a Vulkan allocation each).
            let id = attached.buffers().next().unwrap().id;
            drop(attached.import_vulkan_buffer(id, &ctx).unwrap());
        }
    }
    let server = serve.join().unwrap();
    let end = common::memory_bytes();
    eprintln!(
        "ipc_cycles: {cycles} attach/detach cycles ({imports} with a Vulkan import) in {:?}; mapped/resident {}/{} KiB after {warm_up} cycles, {}/{} KiB at the end",
        start.elapsed(),
        warm.0 >> 10,
        warm.1 >> 10,
        end.0 >> 10,
        end.1 >> 10
    );
    for (what, before, after) in [("mapped", warm.0, end.0), ("resident", warm.1, end.1)] {
        assert!(
            after.saturating_sub(before) < 32 << 20,
            "{what} memory grew by {} KiB over the cycles",
            after.saturating_sub(before) >> 10
        );
    }
    drop(server);
    drop(buffer);
    assert_eq!(
        common::non_driver_fds(),
        before,
        "no descriptor leaked over {cycles} cycles"
    );
    common::assert_clean(&ctx);
}
