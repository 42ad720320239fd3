//! The windowed demo: winit window, Vulkan swapchain, the camera orbiting by itself until a
//! drag turns it (O resumes the orbit), wheel zooms, H shows or hides the HUD, Space pauses,
//! R resets, Esc or closing the window exits. Particle count and fps in the title too.
//! The window and swapchain are the shared driver's (`examples/common/window.rs`).

use std::ffi::CStr;

use cuvk::ash::vk;
use cuvk::vulkan::Semaphore;
use winit::dpi::PhysicalPosition;
use winit::event::MouseScrollDelta;
use winit::keyboard::{Key, NamedKey};

use crate::demo::{Devices, Target};
use crate::driver::{self, Demo, Scene};
use crate::engine::{Engine, Shaders};
use crate::Args;

struct Particles {
    args: Args,
    shaders: Option<Shaders>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let opts = driver::Options {
        title: "cuvk particles",
        width: args.opts.width,
        height: args.opts.height,
        frames_in_flight: args.opts.frames_in_flight,
        exit_after: args.exit_after,
        resize_at: args.resize_at,
    };
    driver::run(
        Particles {
            args,
            shaders: None,
        },
        opts,
    )
}

impl Demo for Particles {
    type Engine = Engine;

    fn open(
        &mut self,
        instance_ext: Vec<&'static CStr>,
        device_ext: Vec<&'static CStr>,
    ) -> anyhow::Result<Devices> {
        self.shaders = Some(Shaders::load(&self.args.opts.shader_dir)?);
        crate::open_devices(&mut self.args, instance_ext, device_ext)
    }

    fn engine(&mut self, devices: &Devices, width: u32, height: u32) -> anyhow::Result<Engine> {
        let mut opts = self.args.opts.clone();
        (opts.width, opts.height) = (width, height);
        crate::check_memory(devices, &opts)?;
        let shaders = self.shaders.as_ref().expect("open loads the shaders");
        let mut engine = Engine::new(devices, shaders, opts)?;
        engine.hud = self.args.hud;
        Ok(engine)
    }
}

impl Scene for Engine {
    fn size(&self) -> (u32, u32) {
        (self.options().width, self.options().height)
    }

    fn resize(&mut self, width: u32, height: u32) -> anyhow::Result<()> {
        Engine::resize(self, width, height)
    }

    fn set_bgra(&mut self, bgra: bool) {
        self.bgra = bgra;
    }

    fn last_frame(&self) -> u64 {
        Engine::last_frame(self)
    }

    fn wait_for(&self, frame: u64) -> anyhow::Result<()> {
        Engine::wait_for(self, frame)
    }

    fn wait_idle(&mut self) -> anyhow::Result<()> {
        Engine::wait_idle(self)
    }

    fn render(
        &mut self,
        image: vk::Image,
        acquired: &Semaphore,
        rendered: &Semaphore,
    ) -> anyhow::Result<()> {
        self.frame(Target::Swapchain {
            image,
            acquired,
            rendered,
        })
    }

    fn title(&self, fps: f64) -> String {
        let o = self.options();
        format!(
            "cuvk particles — {} particles — {:.1} fps — sim {:?}, {:?}{}",
            o.particles,
            fps,
            o.sim,
            o.transfer,
            if self.paused { " — paused" } else { "" }
        )
    }

    fn drag(&mut self, from: Option<PhysicalPosition<f64>>, to: PhysicalPosition<f64>) {
        if let Some(last) = from {
            self.orbit = false;
            let cam = &mut self.camera;
            cam.yaw += ((to.x - last.x) * 0.005) as f32;
            cam.pitch = (cam.pitch + ((to.y - last.y) * 0.005) as f32).clamp(-1.5, 1.5);
        }
    }

    fn wheel(&mut self, delta: MouseScrollDelta) {
        let steps = match delta {
            MouseScrollDelta::LineDelta(_, y) => y,
            MouseScrollDelta::PixelDelta(p) => (p.y / 40.0) as f32,
        };
        let cam = &mut self.camera;
        cam.distance = (cam.distance * 0.9f32.powf(steps)).clamp(0.5, 50.0);
    }

    fn key(&mut self, key: &Key) -> anyhow::Result<()> {
        match key {
            Key::Named(NamedKey::Space) => self.paused = !self.paused,
            Key::Character(c) if c.eq_ignore_ascii_case("r") => self.reset()?,
            Key::Character(c) if c.eq_ignore_ascii_case("h") => self.hud = !self.hud,
            Key::Character(c) if c.eq_ignore_ascii_case("o") => self.orbit = !self.orbit,
            _ => {}
        }
        Ok(())
    }
}
