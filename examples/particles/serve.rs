//! The particle demo as a viewer of a simulation in another process: `--serve NAME` publishes
//! K position buffers and the two timelines that order them (`cuvk::ipc::FrameServer`), and
//! draws whatever the attached producer (`examples/ipc_producer.rs`, or Python) writes, frame
//! by frame, ordered on the GPU. Headless it writes PNGs. A producer that dies is noticed at
//! once: the viewer releases its waits, keeps the last frame, and waits for the next producer
//! under the same name (with fresh timelines: the old ones are released past any frame).
//!
//!     particles --serve galaxies --headless --frames 600 [--particles N] [--save-every K]
//!     ipc_producer galaxies

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::ipc::{FrameServer, IpcError};
use cuvk::vulkan::{
    cmd_acquire_buffers, cmd_release_buffers, AsVkBuffer, BoundBuffer, Validation, VulkanContext,
};
use cuvk::{Bridge, BridgeConfig, FrameSubmit};
use cuvk_dev::canvas::{self, Canvas};
use cuvk_dev::demo::{usage, write_png};
use cuvk_dev::sim::particles::OrbitCamera;
use cuvk_dev::{CommandSlots, DevAllocator};

use crate::engine::Shaders;

/// Frames in flight between the producer and this viewer.
const K: u32 = 3;
/// How long the viewer waits for a producer to attach.
const ATTACH: Duration = Duration::from_secs(120);

struct Config {
    name: String,
    particles: usize,
    frames: u64,
    width: u32,
    height: u32,
    out: PathBuf,
    save_every: u64,
    hud: bool,
    shader_dir: PathBuf,
}

fn parse(args: Vec<String>, shader_dir: PathBuf) -> anyhow::Result<Config> {
    let mut c = Config {
        name: String::new(),
        particles: 1_000_000,
        frames: 600,
        width: 1280,
        height: 720,
        out: PathBuf::from("out"),
        save_every: 0,
        hud: true,
        shader_dir,
    };
    let mut it = args.into_iter();
    let num = |v: Option<String>, name: &str| -> anyhow::Result<u64> {
        let v = v.ok_or_else(|| usage(format!("{name} needs a value")))?;
        v.replace('_', "")
            .parse()
            .map_err(|_| usage(format!("{name}: '{v}' is not a whole number")))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--serve" => c.name = it.next().ok_or_else(|| usage("--serve needs a name"))?,
            "--particles" => c.particles = num(it.next(), &a)? as usize,
            "--frames" => c.frames = num(it.next(), &a)?,
            "--save-every" => c.save_every = num(it.next(), &a)?,
            "--out" => c.out = PathBuf::from(it.next().ok_or_else(|| usage("--out needs a value"))?),
            "--shaders" => c.shader_dir = PathBuf::from(it.next().ok_or_else(|| usage("--shaders needs a value"))?),
            "--headless" => {}
            "--hud" => c.hud = it.next().as_deref() != Some("off"),
            "--size" => {
                let v = it.next().unwrap_or_default();
                let (w, h) = v
                    .split_once('x')
                    .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
                    .ok_or_else(|| usage(format!("--size must look like 1280x720, not '{v}'")))?;
                (c.width, c.height) = (w, h);
            }
            other => bail!(usage(format!(
                "--serve takes --particles --frames --size --out --save-every --hud --shaders, not '{other}'"
            ))),
        }
    }
    if c.name.is_empty() || c.particles == 0 || c.frames == 0 {
        bail!(usage(
            "--serve needs a name, and at least 1 particle and 1 frame"
        ));
    }
    Ok(c)
}

/// Entry point of `--serve NAME` (headless: PNGs).
pub fn main(args: Vec<String>, shader_dir: PathBuf) -> ExitCode {
    cuvk_dev::demo::exit_code(parse(args, shader_dir).and_then(|c| run(&c)))
}

/// Waits until frame `n` is drawn, in short slices, reading the producer's notices between
/// them: `false` if the producer went away first (then frame `n` may never complete until its
/// waits are released).
fn wait_watching(server: &mut FrameServer, n: u64) -> anyhow::Result<bool> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match server.wait_drawn(n, Duration::from_millis(20)) {
            Ok(()) => return Ok(true),
            Err(cuvk::Error::Timeout { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        // Reads notices without taking any (a later call still returns the newest).
        match server.written(u64::MAX - 1, Duration::ZERO) {
            Ok(_) => {}
            Err(cuvk::Error::Ipc(IpcError::PeerClosed { .. })) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        if std::time::Instant::now() > deadline {
            bail!("frame {n} was not drawn within 10 s, and the producer is still there");
        }
    }
}

/// A server publishing `slots` under `name`, with fresh timelines.
fn serve(
    name: &str,
    vk: &Arc<VulkanContext>,
    slots: &[Arc<BoundBuffer>],
) -> anyhow::Result<FrameServer> {
    let mut server = FrameServer::bind(name, vk, K)?;
    for s in slots {
        // Element type 0, 16 bytes: float4 positions.
        server.publish_buffer(s, 0, 16)?;
    }
    Ok(server)
}

fn run(c: &Config) -> anyhow::Result<()> {
    let bridge = Bridge::new(BridgeConfig {
        validation: Validation::IfAvailable.or_from_env(),
        ..Default::default()
    })
    .context("--serve draws on the GPU of CUDA device 0, where the producer runs")?;
    let vk = bridge.vulkan().clone();
    let bytes = c.particles as u64 * 16;
    let usage = vk::BufferUsageFlags::STORAGE_BUFFER
        | vk::BufferUsageFlags::TRANSFER_SRC
        | vk::BufferUsageFlags::TRANSFER_DST;
    let slots: Vec<Arc<BoundBuffer>> = (0..K)
        .map(|_| {
            let mut b = BoundBuffer::new_exportable(
                &vk,
                bytes,
                usage,
                vk::MemoryPropertyFlags::DEVICE_LOCAL,
            )?;
            // Nothing drawn before the first frame: zeros (a point at the origin, out of view).
            vk.fill_buffer(&mut b, 0, bytes, 0)?;
            Ok(Arc::new(b))
        })
        .collect::<cuvk::Result<_>>()?;
    let shaders = Shaders::load(&c.shader_dir)?;
    let alloc = DevAllocator::new(&vk)?;
    let draw: Vec<&dyn AsVkBuffer> = slots.iter().map(|b| &**b as &dyn AsVkBuffer).collect();
    let canvas = Canvas::new(&alloc, &shaders.canvas(), &draw, c.width, c.height)?;
    let mut cmds = CommandSlots::new(&vk, 2 * K as usize)?;
    let (d, qf) = (vk.device(), vk.queue_family_index());
    let barrier = |cmd: vk::CommandBuffer, src: vk::AccessFlags| {
        // SAFETY: only called with the command buffer being recorded (ours, and the canvas's
        // calls between its passes on the buffer it records into).
        unsafe { cuvk_dev::demo::full_barrier(d, cmd, src) }
    };
    std::fs::create_dir_all(&c.out)?;
    let mut server = serve(&c.name, &vk, &slots)?;
    println!(
        "serving '{}' ({} particles, {K} slots): start a producer, e.g. ipc_producer {}",
        c.name, c.particles, c.name
    );
    server.accept(ATTACH).context("no producer attached")?;
    let mut in_slot: Vec<u64> = vec![0; 2 * K as usize]; // per command slot: its last frame
    let (mut drawn, mut newest, mut producers) = (0u64, 0u64, 1u32);
    while drawn < c.frames {
        let lost = match server.written(newest, Duration::from_millis(200)) {
            Ok(Some(n)) => {
                newest = n;
                let cs = ((drawn + 1) % (2 * u64::from(K))) as usize;
                // The command slot's last frame must be drawn; watch the producer meanwhile
                // (a frame waiting on its timeline never completes once it is gone).
                !wait_watching(&mut server, in_slot[cs])?
            }
            Ok(None) => continue,
            Err(cuvk::Error::Ipc(IpcError::PeerClosed { .. })) => true,
            Err(e) => return Err(e.into()),
        };
        if lost {
            // The producer is gone: our waits released, every frame submitted completes, the
            // last good frame stays; the next producer gets fresh timelines.
            server.release_waits()?;
            server.wait_drawn(*in_slot.iter().max().unwrap_or(&0), Duration::from_secs(5))?;
            println!(
                "producer {producers} gone after frame {newest}: the last frame stays; waiting for the next producer"
            );
            drop(server);
            server = serve(&c.name, &vk, &slots)?;
            server.accept(ATTACH).context("no producer came back")?;
            producers += 1;
            in_slot.fill(0);
            newest = 0;
            continue;
        }
        let n = newest;
        drawn += 1;
        let cs = (drawn % (2 * u64::from(K))) as usize;
        let slot = ((n - 1) % u64::from(K)) as usize;
        let save = drawn == c.frames || (c.save_every > 0 && drawn % c.save_every == 0);
        let camera = OrbitCamera::orbited(drawn);
        let lines: Option<[String; canvas::hud::LINES]> = c.hud.then(|| {
            [
                format!(
                    "{} particles, simulated in another process",
                    canvas::hud::thousands(c.particles as u64)
                ),
                // The HUD font has no quotes.
                format!("serving {}, producer {producers}", c.name),
                format!("producer frame {n}, drawn {drawn}"),
            ]
        });
        let shared: [&dyn AsVkBuffer; 1] = [&*slots[slot]];
        let compute = vk::PipelineStageFlags::COMPUTE_SHADER;
        // SAFETY: the command slot's last frame is drawn (waited above); the slots, canvas
        // and command buffers live until the end, which waits for every frame.
        let cmd = unsafe {
            let cmd = cmds.begin(cs)?;
            barrier(cmd, vk::AccessFlags::MEMORY_WRITE);
            cmd_acquire_buffers(d, cmd, qf, &shared, compute, vk::AccessFlags::SHADER_READ);
            let frame = canvas::Frame {
                slot,
                first: 0,
                particles: c.particles as u32,
                camera: &camera,
                bgra: false,
                hud: lines.as_ref(),
                exposure: None,
            };
            canvas.record(d, cmd, &frame, &barrier);
            cmd_release_buffers(d, cmd, qf, &shared, compute, vk::AccessFlags::SHADER_READ);
            barrier(cmd, vk::AccessFlags::SHADER_WRITE);
            if save {
                canvas.record_readback(d, cmd);
            }
            d.end_command_buffer(cmd)?;
            cmd
        };
        // The slot's fence too: the validation layer cannot see that frame n drawn (an
        // exported timeline) means this submission completed.
        let cmd = [cmd];
        let submit = FrameSubmit {
            fence: cmds.fence(cs),
            ..FrameSubmit::new(&cmd, compute)
        };
        // SAFETY: as above.
        unsafe { server.submit_drawn(n, &submit) }?;
        in_slot[cs] = n;
        if save {
            server.wait_drawn(n, Duration::from_secs(10))?;
            let path = c.out.join(format!("served_{drawn:05}.png"));
            write_png(&path, c.width, c.height, &canvas.readback.read::<u8>()?)?;
            println!("wrote {} (producer frame {n})", path.display());
        }
    }
    server.wait_drawn(newest, Duration::from_secs(10))?;
    // Drawn means done; the fences tell the validation layer so before anything is destroyed.
    cmds.wait_fenced()?;
    // SAFETY: every submission of these command buffers is drawn (waited above).
    unsafe { cmds.assume_idle() };
    Ok(())
}
