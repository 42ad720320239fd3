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
use std::time::Duration;

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::ipc::FrameServer;
use cuvk::vulkan::{AsVkBuffer, Validation};
use cuvk::{Bridge, BridgeConfig, ElementFormat, FrameSubmit};
use cuvk_dev::canvas::{self, Canvas};
use cuvk_dev::demo::{self, write_png, ViewerArgs};
use cuvk_dev::sim::particles::OrbitCamera;
use cuvk_dev::{CommandSlots, PrivateAllocator};

use crate::engine::Shaders;

/// Frames in flight between the producer and this viewer.
const K: u32 = 3;
/// How long the viewer waits for a producer to attach.
const ATTACH: Duration = Duration::from_secs(120);

/// Entry point of `--serve NAME` (headless: PNGs).
pub fn main(args: Vec<String>, shader_dir: PathBuf) -> ExitCode {
    let c = ViewerArgs::parse("--serve", args, shader_dir, 600);
    demo::exit_code(c.and_then(|c| run(&c)))
}

fn run(c: &ViewerArgs) -> anyhow::Result<()> {
    let bridge = Bridge::new(BridgeConfig {
        validation: Validation::IfAvailable.or_from_env(),
        ..Default::default()
    })
    .context("--serve draws on the GPU of CUDA device 0, where the producer runs")?;
    let vk = bridge.vulkan().clone();
    // Nothing drawn before the first frame: zeros (a point at the origin, out of view).
    let slots = demo::zeroed_exportable_buffers(&vk, K as usize, c.particles as u64 * 16)?;
    let draw: Vec<&dyn AsVkBuffer> = slots.iter().map(|b| &**b as &dyn AsVkBuffer).collect();
    let shaders = Shaders::load(&c.shader_dir)?;
    let canvas = Canvas::new(
        &PrivateAllocator::new(&vk)?,
        &shaders.canvas(),
        &draw,
        c.size.0,
        c.size.1,
    )?;
    let mut cmds = CommandSlots::new(&vk, 2 * K as usize)?;
    std::fs::create_dir_all(&c.out)?;
    let mut server = FrameServer::bind(&c.name, &vk, K)?;
    for s in &slots {
        server.publish_buffer(s, ElementFormat::F32X4)?;
    }
    println!(
        "serving '{0}' ({1} particles, {K} slots): start a producer, e.g. ipc_producer {0}",
        c.name, c.particles
    );
    for drawn in 1..=c.frames {
        // The newest frame written, its command slot free. A producer that went away is
        // released and the next one served in here (the last frame stays in the buffers).
        let Some(frame) = server.next_frame(ATTACH)? else {
            bail!("no frame from a producer in {} s", ATTACH.as_secs());
        };
        let (n, cs, producers) = (frame.number(), frame.command_slot(), server.producers());
        let save = drawn == c.frames || (c.save_every > 0 && drawn % c.save_every == 0);
        let lines: Option<[String; canvas::hud::LINES]> = c.hud.then(|| {
            let particles = canvas::hud::thousands(c.particles as u64);
            [
                format!("{particles} particles, simulated in another process"),
                // The HUD font has no quotes.
                format!("serving {}, producer {producers}", c.name),
                format!("producer frame {n}, drawn {drawn}"),
            ]
        });
        let camera = OrbitCamera::orbited(drawn);
        let picture = canvas::Frame {
            slot: frame.slot(),
            first: 0,
            particles: c.particles as u32,
            camera: &camera,
            bgra: false,
            hud: lines.as_ref(),
            exposure: None,
        };
        // SAFETY: every frame recorded from this command slot has completed (`next_frame`);
        // the slots, canvas and command buffers live until the end, which waits for them all.
        let (cmd, fence) = unsafe {
            demo::record_view_frame(&vk, &cmds, cs, &canvas, draw[frame.slot()], &picture, save)
        }?;
        let cmd = [cmd];
        let submit = FrameSubmit {
            fence,
            ..FrameSubmit::new(&cmd, vk::PipelineStageFlags::COMPUTE_SHADER)
        };
        // SAFETY: as above.
        unsafe { server.submit_drawn(&frame, &submit) }?;
        if save {
            server.wait_drawn(n, Duration::from_secs(10))?;
            let path = c.out.join(format!("served_{drawn:05}.png"));
            write_png(&path, c.size.0, c.size.1, &canvas.readback.read::<u8>()?)?;
            println!("wrote {} (producer {producers}, frame {n})", path.display());
        }
    }
    server.wait_idle(Duration::from_secs(10))?;
    // Drawn means done; the fences tell the validation layer so before anything is destroyed.
    cmds.wait_fenced()?;
    // SAFETY: every submission of these command buffers is drawn (waited above).
    unsafe { cmds.assume_idle() };
    Ok(())
}
