//! The particle demo fanned out (issue 37): `--publish NAME`
//! simulates the galaxies with CUDA into slots it owns and serves them to any number of
//! viewers; `--view NAME` is one such viewer (PNGs headless), each with its own camera. A
//! viewer never slows the simulation; one that is killed frees its slot.
//!
//!     particles --publish galaxies --particles 4000000 [--wait-viewers 2 --fps 60] &
//!     particles --view galaxies --headless --frames 600 --save-every 100 --out out/a &
//!     particles --view galaxies --headless --frames 600 --save-every 100 --out out/b

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::cudarc::driver::{LaunchConfig, PushKernelArg};
use cuvk::ipc::{Publisher, PublisherDesc, Subscriber};
use cuvk::vulkan::{AsVkBuffer, Validation};
use cuvk::{Bridge, BridgeConfig, ElementFormat, FrameSubmit};
use cuvk_dev::canvas::{self, Canvas};
use cuvk_dev::demo::{self, usage, write_png, Flags, ViewerArgs};
use cuvk_dev::sim::particles::{self as sim, OrbitCamera};
use cuvk_dev::{CommandSlots, PrivateAllocator};

use crate::engine::Shaders;

/// How long a viewer waits for the publisher, and for a frame.
const WAIT: Duration = Duration::from_secs(120);

/// Entry point of `--publish NAME [--particles N] [--slots K] [--frames N]`.
pub fn publish_main(args: Vec<String>) -> ExitCode {
    demo::exit_code(publish(args))
}

/// Entry point of `--view NAME` (headless: PNGs).
pub fn view_main(args: Vec<String>, shader_dir: PathBuf) -> ExitCode {
    let c = ViewerArgs::parse("--view", args, shader_dir, 600);
    demo::exit_code(c.and_then(|c| view(&c)))
}

fn publish(args: Vec<String>) -> anyhow::Result<()> {
    let (mut name, mut particles, mut slots, mut frames) =
        (String::new(), 1_000_000u64, 8u64, u64::MAX);
    // Start once this many viewers are attached; at most this many frames a second (0: as
    // fast as the GPU goes) — a collision people can watch, from its first frame.
    let (mut wait_viewers, mut fps) = (0u64, 0u64);
    let mut f = Flags::new(args);
    while let Some(a) = f.next_flag() {
        match a.as_str() {
            "--publish" => name = f.value(&a)?,
            "--particles" => particles = f.num(&a)?,
            "--slots" => slots = f.num(&a)?,
            "--frames" => frames = f.num(&a)?,
            "--wait-viewers" => wait_viewers = f.num(&a)?,
            "--fps" => fps = f.num(&a)?,
            "--headless" => {}
            other => bail!(usage(format!(
                "--publish takes --particles --slots --frames --wait-viewers --fps, not '{other}'"
            ))),
        }
    }
    if name.is_empty() || particles == 0 {
        bail!(usage("--publish needs a name and at least 1 particle"));
    }
    let bridge = Bridge::new(BridgeConfig {
        validation: Validation::IfAvailable.or_from_env(),
        ..Default::default()
    })?;
    let desc = PublisherDesc {
        slots: slots as u32,
        bytes: particles * 16,
        element: ElementFormat::F32X4,
    };
    let mut publisher = Publisher::new(&name, &bridge, desc)?;
    let cuda = bridge.cuda();
    let source = std::fs::read_to_string("shaders/particles.cu")
        .or_else(|_| {
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/particles.cu"))
        })
        .context("reading shaders/particles.cu")?;
    let module = cuvk::cuda::compile_module(cuda, "particles.cu", &source)?;
    let (step, init) = (
        module.load_function("step_chunk")?,
        module.load_function("init_particles")?,
    );
    let stream = cuda.new_stream()?;
    let n = particles as usize;
    // Velocities are the simulation's own: two CUDA buffers, ping-pong.
    let vel = [
        stream.alloc_zeros::<[f32; 4]>(n)?,
        stream.alloc_zeros::<[f32; 4]>(n)?,
    ];
    let cfg = LaunchConfig {
        grid_dim: ((n as u32).div_ceil(256), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (params, scene, count, seed, first) = (
        sim::Params::new(n as u32),
        sim::scene(),
        n as u32,
        1u64,
        0u64,
    );
    println!(
        "publishing '{name}': {n} particles in {slots} slots (serves {} viewers at full rate)",
        slots.saturating_sub(2)
    );
    let waiting = Instant::now();
    while (publisher.consumers() as u64) < wait_viewers {
        if waiting.elapsed() > WAIT {
            bail!(
                "{wait_viewers} viewers did not attach within {} s",
                WAIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let period = (fps > 0).then(|| Duration::from_secs_f64(1.0 / fps as f64));
    let started = Instant::now();
    let mut previous: Option<usize> = None;
    let mut crowded = false;
    let mut published = 0u64;
    while published < frames {
        if let Some(p) = period {
            // Paced from the start, so a late frame does not shift the ones after it.
            let due = started + p.mul_f64(published as f64);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        // More viewers holding frames than K - 2: the simulation waits for a slot (each
        // viewer holds one frame at a time and lets it go within a frame of its own).
        let frame = match publisher.begin_frame(WAIT) {
            Err(e) if e.rule() == Some(cuvk::Rule::SyncSlotsHeld) => {
                if !crowded {
                    eprintln!(
                        "{e}: waiting for a slot (--slots {} serves more)",
                        slots + 2
                    );
                    crowded = true;
                }
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            other => other?,
        };
        publisher.acquire(&frame, &stream)?;
        let f = frame.number();
        let out = publisher.slot(frame.slot()).context("slot")?.kernel_arg();
        let vo = &vel[(f % 2) as usize];
        match previous {
            None => {
                let mut b = stream.launch_builder(&init);
                b.arg(out)
                    .arg(vo)
                    .arg(&first)
                    .arg(&count)
                    .arg(&seed)
                    .arg(&scene);
                // SAFETY: both hold n float4; the slot is ours (acquired above).
                unsafe { b.launch(cfg) }?;
            }
            Some(p) => {
                // From the previous frame's slot (the newest: nobody writes it), read only.
                let input = publisher.slot(p).context("slot")?.kernel_arg();
                let vi = &vel[((f + 1) % 2) as usize];
                let mut b = stream.launch_builder(&step);
                b.arg(input)
                    .arg(input)
                    .arg(vi)
                    .arg(out)
                    .arg(vo)
                    .arg(&first)
                    .arg(&count)
                    .arg(&params);
                // SAFETY: every pointer holds n float4; `out` is ours (acquired above), the
                // others are only read.
                unsafe { b.launch(cfg) }?;
            }
        }
        publisher.release(&frame, &stream)?;
        published += 1;
        previous = Some(frame.slot());
        if f % 600 == 0 {
            println!(
                "{f} frames, {:.0} fps, {} viewers",
                f as f64 / started.elapsed().as_secs_f64(),
                publisher.consumers()
            );
        }
    }
    stream.synchronize()?;
    Ok(())
}

fn view(c: &ViewerArgs) -> anyhow::Result<()> {
    let bridge = Bridge::new(BridgeConfig {
        validation: Validation::IfAvailable.or_from_env(),
        ..Default::default()
    })?;
    let vk = bridge.vulkan().clone();
    let mut sub = Subscriber::attach(&c.name, &vk, false, WAIT)
        .with_context(|| format!("attaching to 'particles --publish {}'", c.name))?;
    let slots = sub.slots().to_vec();
    let particles = slots.first().map_or(0, |s| s.vk_size() / 16) as u32;
    let draw: Vec<&dyn AsVkBuffer> = slots.iter().map(|b| &**b as &dyn AsVkBuffer).collect();
    let shaders = Shaders::load(&c.shader_dir)?;
    let canvas = Canvas::new(
        &PrivateAllocator::new(&vk)?,
        &shaders.canvas(),
        &draw,
        c.size.0,
        c.size.1,
    )?;
    let mut cmds = CommandSlots::new(&vk, 2)?;
    let mut in_slot = [None, None];
    std::fs::create_dir_all(&c.out)?;
    // Each viewer its own camera: a start along the orbit from its process id.
    let start = u64::from(std::process::id() % 360);
    for drawn in 1..=c.frames {
        let held = match sub.hold(WAIT) {
            Ok(Some(held)) => held,
            Ok(None) => bail!("no frame from the publisher in {} s", WAIT.as_secs()),
            // The simulation ended (or was killed): this viewer's run ends with it.
            Err(cuvk::Error::Ipc(cuvk::ipc::IpcError::PeerClosed { .. })) => {
                println!("the publisher ended; {} frames drawn", drawn - 1);
                break;
            }
            Err(e) => return Err(e.into()),
        };
        let cs = (drawn % 2) as usize;
        if let Some(prev) = in_slot[cs].take() {
            sub.wait_read(&prev, WAIT)?;
        }
        let save = drawn == c.frames || (c.save_every > 0 && drawn % c.save_every == 0);
        let lines: Option<[String; canvas::hud::LINES]> = c.hud.then(|| {
            [
                format!(
                    "{} particles, simulated in another process",
                    canvas::hud::thousands(u64::from(particles))
                ),
                format!("viewing {}, one of many viewers", c.name),
                format!("publisher frame {}, drawn {drawn}", held.frame()),
            ]
        });
        let camera = OrbitCamera::orbited(start + drawn);
        let picture = canvas::Frame {
            slot: held.slot(),
            first: 0,
            particles,
            camera: &camera,
            bgra: false,
            hud: lines.as_ref(),
            exposure: None,
        };
        // SAFETY: the command slot's last read is done (waited above); the slots, canvas and
        // command buffers live until the end, which waits for every read.
        let cmd = unsafe {
            let cmd = cmds.begin(cs)?;
            let qf = vk.queue_family_index();
            demo::record_shared_draw(
                vk.device(),
                cmd,
                qf,
                &canvas,
                draw[held.slot()],
                &picture,
                save,
            );
            vk.device().end_command_buffer(cmd)?;
            [cmd]
        };
        let stage = vk::PipelineStageFlags::COMPUTE_SHADER;
        let submit = FrameSubmit {
            fence: cmds.fence(cs),
            ..FrameSubmit::new(&cmd, stage)
        };
        // SAFETY: as above.
        unsafe { sub.submit_read(&held, &submit) }?;
        if save {
            sub.wait_read(&held, WAIT)?;
            let path = c.out.join(format!("view_{drawn:05}.png"));
            write_png(&path, c.size.0, c.size.1, &canvas.readback.read::<u8>()?)?;
            println!(
                "wrote {} (publisher frame {})",
                path.display(),
                held.frame()
            );
        }
        in_slot[cs] = Some(held);
    }
    for prev in in_slot.iter().flatten() {
        sub.wait_read(prev, WAIT)?;
    }
    cmds.wait_fenced()?;
    // SAFETY: every submission of these command buffers is done (waited above).
    unsafe { cmds.assume_idle() };
    Ok(())
}
