//! The windowed example: a winit window with a wgpu surface on the same device CUDA shares.
//! Drag to orbit, wheel to zoom, Space pauses, Esc or closing the window exits; particle
//! count and fps in the title.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use cuvk::wgpu::wgpu;
use winit::application::ApplicationHandler;
use winit::dpi::{LogicalSize, PhysicalPosition};
use winit::event::{ElementState, MouseButton, MouseScrollDelta, WindowEvent};
use winit::event_loop::{ActiveEventLoop, ControlFlow, EventLoop};
use winit::keyboard::{Key, NamedKey};
use winit::window::{Window, WindowId};

use crate::scene::{Renderer, Scene};
use crate::{open, Args, Devices};

struct Running {
    // Field order is drop order: the scene (waits for the GPU), the surface, then the devices.
    scene: Scene,
    surface: wgpu::Surface<'static>,
    config: wgpu::SurfaceConfiguration,
    dev: Devices,
    window: Arc<Window>,
    frames: u64,
    fps: (u64, Instant),
    drag: Option<PhysicalPosition<f64>>,
    pressed: bool,
    particles: usize,
}

struct App {
    args: Args,
    run: Option<Running>,
    error: Option<anyhow::Error>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let event_loop = EventLoop::new().context("opening the display")?;
    event_loop.set_control_flow(ControlFlow::Poll);
    let mut app = App {
        args,
        run: None,
        error: None,
    };
    event_loop.run_app(&mut app)?;
    if let Some(mut r) = app.run.take() {
        r.scene.wait_idle(r.dev.wgpu.device())?;
        println!("closed after {} frames", r.frames);
        crate::check_validation(&r.dev.wgpu)?;
    }
    app.error.map_or(Ok(()), Err)
}

impl App {
    fn start(&mut self, el: &ActiveEventLoop) -> anyhow::Result<Running> {
        let (w, h) = self.args.size;
        let window = Arc::new(
            el.create_window(
                Window::default_attributes()
                    .with_title("cuvk wgpu particles")
                    .with_inner_size(LogicalSize::new(w, h)),
            )?,
        );
        let dev = open(&mut self.args)?;
        let (instance, adapter) = (dev.wgpu.instance(), dev.wgpu.adapter());
        let (Some(instance), Some(adapter)) = (instance, adapter) else {
            anyhow::bail!("the wgpu device has no instance to make a window surface with");
        };
        let surface = instance.create_surface(window.clone())?;
        let size = window.inner_size();
        let mut config = surface
            .get_default_config(adapter, size.width.max(1), size.height.max(1))
            .context("the window surface does not work with this adapter")?;
        // The tone-mapping pass writes display values: prefer a non-sRGB format.
        let caps = surface.get_capabilities(adapter);
        if let Some(f) = caps.formats.iter().find(|f| !f.is_srgb()) {
            config.format = *f;
        }
        let device = dev.wgpu.device();
        surface.configure(device, &config);
        let renderer = Renderer::new(
            device,
            (config.width, config.height),
            config.format,
            self.args.particles,
            self.args.draw,
        );
        let a = &self.args;
        let scene = Scene::new(
            dev.bridge.as_ref(),
            device,
            a.mode,
            a.particles,
            a.seed,
            a.k,
            renderer,
        )?;
        println!(
            "window: {} particles on {}, {:?}",
            a.particles,
            dev.wgpu.vulkan().info().describe(),
            a.mode
        );
        Ok(Running {
            scene,
            surface,
            config,
            dev,
            window,
            frames: 0,
            fps: (0, Instant::now()),
            drag: None,
            pressed: false,
            particles: a.particles,
        })
    }
}

impl Running {
    fn redraw(&mut self) -> anyhow::Result<()> {
        let device = self.dev.wgpu.device();
        let texture = match self.surface.get_current_texture() {
            wgpu::CurrentSurfaceTexture::Success(t)
            | wgpu::CurrentSurfaceTexture::Suboptimal(t) => t,
            wgpu::CurrentSurfaceTexture::Outdated | wgpu::CurrentSurfaceTexture::Lost => {
                self.surface.configure(device, &self.config);
                return Ok(());
            }
            _ => return Ok(()), // timeout or occluded: try the next frame
        };
        let view = texture.texture.create_view(&Default::default());
        self.scene
            .frame(device, self.dev.wgpu.queue(), &view, None)?;
        self.window.pre_present_notify();
        self.dev.wgpu.queue().present(texture);
        self.frames += 1;
        if self.frames == 30 {
            println!("presented 30 frames");
        }
        self.fps.0 += 1;
        let secs = self.fps.1.elapsed().as_secs_f64();
        if secs > 0.5 {
            self.window.set_title(&format!(
                "cuvk wgpu particles: {} particles, {:.0} fps",
                self.particles,
                self.fps.0 as f64 / secs
            ));
            self.fps = (0, Instant::now());
        }
        Ok(())
    }

    fn resize(&mut self, w: u32, h: u32) {
        if w == 0 || h == 0 {
            return;
        }
        (self.config.width, self.config.height) = (w, h);
        let device = self.dev.wgpu.device();
        self.surface.configure(device, &self.config);
        self.scene.renderer.resize(device, w, h);
    }
}

impl ApplicationHandler for App {
    fn resumed(&mut self, el: &ActiveEventLoop) {
        if self.run.is_none() {
            match self.start(el) {
                Ok(r) => self.run = Some(r),
                Err(e) => {
                    self.error = Some(e);
                    el.exit();
                }
            }
        }
    }

    fn window_event(&mut self, el: &ActiveEventLoop, _: WindowId, event: WindowEvent) {
        let Some(r) = self.run.as_mut() else {
            return;
        };
        match event {
            WindowEvent::CloseRequested => el.exit(),
            WindowEvent::Resized(s) => {
                r.resize(s.width, s.height);
                println!("surface configured at {}x{}", s.width, s.height);
            }
            WindowEvent::KeyboardInput { event, .. } if event.state == ElementState::Pressed => {
                match event.logical_key {
                    Key::Named(NamedKey::Escape) => el.exit(),
                    Key::Named(NamedKey::Space) => r.scene.paused = !r.scene.paused,
                    _ => {}
                }
            }
            WindowEvent::MouseInput {
                state,
                button: MouseButton::Left,
                ..
            } => {
                r.pressed = state == ElementState::Pressed;
                r.drag = None;
            }
            WindowEvent::CursorMoved { position, .. } if r.pressed => {
                if let Some(last) = r.drag {
                    let cam = &mut r.scene.camera;
                    cam.yaw += (position.x - last.x) as f32 * 0.01;
                    cam.pitch = (cam.pitch + (position.y - last.y) as f32 * 0.01).clamp(-1.5, 1.5);
                }
                r.drag = Some(position);
            }
            WindowEvent::MouseWheel { delta, .. } => {
                let lines = match delta {
                    MouseScrollDelta::LineDelta(_, y) => y,
                    MouseScrollDelta::PixelDelta(p) => p.y as f32 / 40.0,
                };
                let cam = &mut r.scene.camera;
                cam.distance = (cam.distance * 0.9f32.powf(lines)).clamp(0.5, 50.0);
            }
            WindowEvent::RedrawRequested => {
                if let Err(e) = r.redraw() {
                    self.error = Some(e);
                    el.exit();
                    return;
                }
                if self.args.exit_after.is_some_and(|n| r.frames >= n) {
                    el.exit();
                }
            }
            _ => {}
        }
    }

    fn about_to_wait(&mut self, _: &ActiveEventLoop) {
        if let Some(r) = &self.run {
            r.window.request_redraw();
        }
    }
}
