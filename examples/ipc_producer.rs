//! A simulation in its own process, drawn live by another: attaches to a viewer started with
//! `particles --serve NAME` and steps the galaxies with CUDA straight into the viewer's
//! memory, frame after frame, ordered on the GPU by the viewer's timelines (no copy, no host
//! round trip per frame).
//!
//!     cargo run --release --example particles -- --serve galaxies --headless --frames 600 &
//!     cargo run --release --example ipc_producer -- galaxies
//!
//! Kill either side: the viewer keeps its last frame and waits for a new producer; the
//! producer stops with an error.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cuvk::cudarc::driver::{LaunchConfig, PushKernelArg};
use cuvk::ipc::{FrameClient, IpcError};
use cuvk_dev::logger;
use cuvk_dev::sim::particles as sim;

const T: Duration = Duration::from_secs(30);

fn main() -> anyhow::Result<()> {
    logger::init();
    let mut args = std::env::args().skip(1);
    let name = args
        .next()
        .context("usage: ipc_producer NAME [--frames N] [--seed N]")?;
    let (mut frames, mut seed) = (u64::MAX, 1u64);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--frames" => frames = args.next().context("--frames N")?.parse()?,
            "--seed" => seed = args.next().context("--seed N")?.parse()?,
            other => bail!("unknown argument {other}"),
        }
    }
    let cuda = cuvk::cuda::context(0)?;
    let mut client = match FrameClient::attach(&name, &cuda, T) {
        Ok(c) => c,
        Err(cuvk::Error::Ipc(IpcError::Busy)) => {
            bail!("the viewer '{name}' is drawing another producer's frames: stop that one first")
        }
        Err(e) => {
            return Err(e).with_context(|| {
                format!("attaching to the viewer '{name}' (particles --serve {name})")
            })
        }
    };
    let slots: Vec<_> = (0..client.frames_in_flight() as usize)
        .map(|s| client.slot::<[f32; 4]>(s))
        .collect::<cuvk::Result<_>>()?;
    // Frames in flight are the viewer's: one published buffer each.
    let k = client.frames_in_flight();
    let n = (slots[0].size() / 16) as usize;
    // The shaders where the demo looks for them: the working directory's, else the source tree's.
    let source = std::fs::read_to_string("shaders/particles.cu")
        .or_else(|_| {
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/particles.cu"))
        })
        .context("reading shaders/particles.cu")?;
    let module = cuvk::cuda::compile_module(&cuda, "particles.cu", &source)?;
    let (step, init) = (
        module.load_function("step_chunk")?,
        module.load_function("init_particles")?,
    );
    let stream = cuda.new_stream()?;
    // Velocities are the producer's own: two CUDA buffers, ping-pong.
    let vel = [
        stream.alloc_zeros::<[f32; 4]>(n)?,
        stream.alloc_zeros::<[f32; 4]>(n)?,
    ];
    let cfg = LaunchConfig {
        grid_dim: ((n as u32).div_ceil(256), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let params = sim::Params::new(n as u32);
    let scene = sim::scene();
    let count = n as u32;
    println!("attached to '{name}': {n} particles, {k} slots");
    let started = Instant::now();
    for _ in 0..frames {
        let frame = client.begin_frame()?;
        let f = frame.number();
        match client.acquire(&frame, &stream, T) {
            Ok(()) => {}
            Err(cuvk::Error::Ipc(IpcError::PeerClosed { .. })) => {
                client.release_waits()?;
                stream.synchronize()?;
                println!("the viewer went away after frame {}: stopping", f - 1);
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
        // Frame f writes its slot from the previous frame's (f - 1, one slot back).
        let out = &slots[frame.slot()];
        let (po, vo) = (out.device_ptr(), &vel[(f % 2) as usize]);
        if f == 1 {
            // The initial state, straight into the first slot (the viewer draws it).
            let first = 0u64;
            let mut b = stream.launch_builder(&init);
            b.arg(&po)
                .arg(vo)
                .arg(&first)
                .arg(&count)
                .arg(&seed)
                .arg(&scene);
            // SAFETY: both hold n float4.
            unsafe { b.launch(cfg) }?;
        } else {
            let input = &slots[(frame.slot() + slots.len() - 1) % slots.len()];
            let (pi, vi) = (input.device_ptr(), &vel[((f + 1) % 2) as usize]);
            let first = 0u64;
            let mut b = stream.launch_builder(&step);
            b.arg(&pi)
                .arg(&pi)
                .arg(vi)
                .arg(&po)
                .arg(vo)
                .arg(&first)
                .arg(&count)
                .arg(&params);
            // SAFETY: every pointer holds n float4; `po` was released by the viewer
            // (acquire above), `pi` and `vi` are only read.
            unsafe { b.launch(cfg) }?;
        }
        match client.release(&frame, &stream) {
            Ok(()) => {}
            Err(cuvk::Error::Ipc(IpcError::PeerClosed { .. })) => {
                client.release_waits()?;
                stream.synchronize()?;
                println!("the viewer went away at frame {f}: stopping");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
        if f % 300 == 0 {
            println!(
                "{f} frames, {:.0} fps",
                f as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    stream.synchronize()?;
    Ok(())
}
