//! The window driver of the particle and fluid demos (`#[path]`-included: it needs winit, which
//! `cuvk-dev` does not depend on): a winit window, its Vulkan surface and swapchain (recreated
//! on resize), acquire and present, the fps title, Esc or closing the window to exit, and the
//! `--exit-after` / `--resize-at` checks. The demo says how to open its devices and engine ([`Demo`]) and what its engine
//! draws and does with the input ([`Scene`]).

use std::ffi::CStr;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use cuvk::ash::{khr, vk};
use cuvk::vulkan::{Semaphore, SemaphoreDesc, SemaphoreKind};
use raw_window_handle::{HasDisplayHandle, HasWindowHandle};
use winit::application::ApplicationHandler;
use winit::dpi::{LogicalSize, PhysicalPosition};
use winit::event::{ElementState, MouseButton, MouseScrollDelta, WindowEvent};
use winit::event_loop::{ActiveEventLoop, ControlFlow, EventLoop};
use winit::keyboard::{Key, NamedKey};
use winit::window::{Window, WindowId};

use crate::demo::{check_validation, Devices};

/// How a demo starts in a window.
pub trait Demo {
    type Engine: Scene;
    /// Loads what the engine needs and opens the devices with the window's extensions.
    fn open(
        &mut self,
        instance_ext: Vec<&'static CStr>,
        device_ext: Vec<&'static CStr>,
    ) -> anyhow::Result<Devices>;
    /// Makes the engine for a `width`×`height` window (after [`Demo::open`]).
    fn engine(
        &mut self,
        devices: &Devices,
        width: u32,
        height: u32,
    ) -> anyhow::Result<Self::Engine>;
}

/// What the window needs of a demo's engine.
pub trait Scene {
    /// The output size in pixels.
    fn size(&self) -> (u32, u32);
    fn resize(&mut self, width: u32, height: u32) -> anyhow::Result<()>;
    /// Whether the swapchain images are BGRA (else RGBA).
    fn set_bgra(&mut self, bgra: bool);
    fn last_frame(&self) -> u64;
    fn wait_for(&self, frame: u64) -> anyhow::Result<()>;
    fn wait_idle(&mut self) -> anyhow::Result<()>;
    /// Renders the next frame into an acquired swapchain image: waits for `acquired`, signals
    /// `rendered`.
    fn render(
        &mut self,
        image: vk::Image,
        acquired: &Semaphore,
        rendered: &Semaphore,
    ) -> anyhow::Result<()>;
    /// The window title, given the frame rate.
    fn title(&self, fps: f64) -> String;
    /// The mouse moved with the left button down, from `from` (`None` on the first move).
    fn drag(&mut self, _from: Option<PhysicalPosition<f64>>, _to: PhysicalPosition<f64>) {}
    fn wheel(&mut self, _delta: MouseScrollDelta) {}
    /// A key was pressed (Esc, which exits, aside).
    fn key(&mut self, _key: &Key) -> anyhow::Result<()> {
        Ok(())
    }
}

/// What the window takes from the command line.
pub struct Options {
    /// The title until the first fps update.
    pub title: &'static str,
    pub width: u32,
    pub height: u32,
    pub frames_in_flight: u32,
    /// Close after this many frames.
    pub exit_after: Option<u64>,
    /// After this many frames, ask the window for another size (exercises resizing).
    pub resize_at: Option<(u64, u32, u32)>,
}

/// The swapchain's acquire and present semaphores: binary, for this device only.
const BINARY: SemaphoreDesc = SemaphoreDesc {
    kind: SemaphoreKind::Binary,
    exportable: false,
};

struct Swapchain {
    loader: khr::swapchain::Device,
    handle: vk::SwapchainKHR,
    images: Vec<vk::Image>,
    rendered: Vec<Arc<Semaphore>>, // one per image: the frame's copy is done, present may go
}

struct Running<E: Scene> {
    // Field order is drop order: engine (waits for the GPU), then swapchain, then surface.
    engine: E,
    swapchain: Option<Swapchain>,
    acquired: Vec<Arc<Semaphore>>, // one per command slot
    surface: vk::SurfaceKHR,
    surface_loader: khr::surface::Instance,
    devices: Devices,
    window: Arc<Window>,
    frames: u64,
    fps_frames: u64,
    fps_since: Instant,
    drag: Option<PhysicalPosition<f64>>,
    resize: bool,
}

struct App<D: Demo> {
    demo: D,
    opts: Options,
    run: Option<Running<D::Engine>>,
    error: Option<anyhow::Error>,
}

pub fn run<D: Demo>(demo: D, opts: Options) -> anyhow::Result<()> {
    let event_loop = EventLoop::new().context("opening the display")?;
    event_loop.set_control_flow(ControlFlow::Poll);
    let mut app = App {
        demo,
        opts,
        run: None,
        error: None,
    };
    event_loop.run_app(&mut app)?;
    if let Some(e) = app.error.take() {
        return Err(e);
    }
    Ok(())
}

impl<D: Demo> App<D> {
    fn start(&mut self, el: &ActiveEventLoop) -> anyhow::Result<Running<D::Engine>> {
        let (w, h) = (self.opts.width, self.opts.height);
        let window = Arc::new(
            el.create_window(
                Window::default_attributes()
                    .with_title(self.opts.title)
                    .with_inner_size(LogicalSize::new(w, h)),
            )?,
        );
        let display = window.display_handle()?.as_raw();
        let required = ash_window::enumerate_required_extensions(display)?;
        // SAFETY: ash-window returns pointers to static extension-name strings.
        let instance_ext: Vec<&'static CStr> = required
            .iter()
            .map(|&p| unsafe { CStr::from_ptr(p) })
            .collect();
        let devices = self.demo.open(instance_ext, vec![khr::swapchain::NAME])?;
        let vk = devices.vk.clone();
        // SAFETY: the handles come from a live window that outlives the surface (Running's
        // field order drops the surface first... the window last).
        let surface = unsafe {
            ash_window::create_surface(
                vk.entry(),
                vk.instance(),
                display,
                window.window_handle()?.as_raw(),
                None,
            )
        }?;
        let surface_loader = khr::surface::Instance::new(vk.entry(), vk.instance());
        // SAFETY: valid physical device, queue family and surface.
        let can_present = unsafe {
            surface_loader.get_physical_device_surface_support(
                vk.physical_device(),
                vk.queue_family_index(),
                surface,
            )
        }?;
        if !can_present {
            // SAFETY: nothing uses the surface yet.
            unsafe { surface_loader.destroy_surface(surface, None) };
            bail!("the Vulkan queue cannot present to this window");
        }
        let size = window.inner_size();
        let k = self.opts.frames_in_flight as usize;
        let engine = self
            .demo
            .engine(&devices, size.width.max(1), size.height.max(1))?;
        let acquired = (0..2 * k)
            .map(|_| Semaphore::new(&vk, BINARY))
            .collect::<cuvk::Result<Vec<_>>>()?;
        let mut run = Running {
            engine,
            swapchain: None,
            acquired,
            surface,
            surface_loader,
            devices,
            window,
            frames: 0,
            fps_frames: 0,
            fps_since: Instant::now(),
            drag: None,
            resize: false,
        };
        run.recreate_swapchain()?;
        let (width, height) = run.engine.size();
        println!("window: {width}x{height}, device {}", vk.info().describe());
        Ok(run)
    }
}

impl<E: Scene> Running<E> {
    fn recreate_swapchain(&mut self) -> anyhow::Result<()> {
        let vk = self.devices.vk.clone();
        self.engine.wait_idle()?;
        let (pd, surface, sl) = (vk.physical_device(), self.surface, &self.surface_loader);
        // SAFETY: valid physical device and surface.
        let caps = unsafe { sl.get_physical_device_surface_capabilities(pd, surface) }?;
        // SAFETY: as above.
        let formats = unsafe { sl.get_physical_device_surface_formats(pd, surface) }?;
        let pick = |f: vk::Format| formats.iter().find(|s| s.format == f).copied();
        let (format, bgra) = match (
            pick(vk::Format::R8G8B8A8_UNORM),
            pick(vk::Format::B8G8R8A8_UNORM),
        ) {
            (Some(f), _) => (f, false),
            (None, Some(f)) => (f, true),
            _ => bail!("the surface offers neither R8G8B8A8_UNORM nor B8G8R8A8_UNORM"),
        };
        if !caps
            .supported_usage_flags
            .contains(vk::ImageUsageFlags::TRANSFER_DST)
        {
            bail!("the surface's images cannot be copy destinations");
        }
        let size = self.window.inner_size();
        let extent = if caps.current_extent.width != u32::MAX {
            caps.current_extent
        } else {
            vk::Extent2D {
                width: size
                    .width
                    .clamp(caps.min_image_extent.width, caps.max_image_extent.width),
                height: size
                    .height
                    .clamp(caps.min_image_extent.height, caps.max_image_extent.height),
            }
        };
        if extent.width == 0 || extent.height == 0 {
            return Ok(()); // minimised: keep the old swapchain, draw nothing
        }
        let mut images = caps.min_image_count + 1;
        if caps.max_image_count > 0 {
            images = images.min(caps.max_image_count);
        }
        let loader = khr::swapchain::Device::new(vk.instance(), vk.device());
        let old = self
            .swapchain
            .as_ref()
            .map_or(vk::SwapchainKHR::null(), |s| s.handle);
        let info = vk::SwapchainCreateInfoKHR::default()
            .surface(surface)
            .min_image_count(images)
            .image_format(format.format)
            .image_color_space(format.color_space)
            .image_extent(extent)
            .image_array_layers(1)
            .image_usage(vk::ImageUsageFlags::TRANSFER_DST)
            .image_sharing_mode(vk::SharingMode::EXCLUSIVE)
            .pre_transform(caps.current_transform)
            .composite_alpha(vk::CompositeAlphaFlagsKHR::OPAQUE)
            .present_mode(vk::PresentModeKHR::FIFO)
            .clipped(true)
            .old_swapchain(old);
        // SAFETY: valid device and surface; the old swapchain is retired by this call.
        let handle = unsafe { loader.create_swapchain(&info, None) }?;
        if let Some(old) = self.swapchain.take() {
            // SAFETY: the device is idle (waited above), so no present uses it.
            unsafe { old.loader.destroy_swapchain(old.handle, None) };
        }
        // SAFETY: the swapchain was just created.
        let images = unsafe { loader.get_swapchain_images(handle) }?;
        let rendered = images
            .iter()
            .map(|_| Semaphore::new(&vk, BINARY))
            .collect::<cuvk::Result<Vec<_>>>()?;
        self.swapchain = Some(Swapchain {
            loader,
            handle,
            images,
            rendered,
        });
        self.engine.set_bgra(bgra);
        if (extent.width, extent.height) != self.engine.size() {
            self.engine.resize(extent.width, extent.height)?;
        }
        println!("swapchain recreated at {}x{}", extent.width, extent.height);
        Ok(())
    }

    /// One frame: acquire an image, render into it, present.
    fn draw(&mut self) -> anyhow::Result<()> {
        if self.resize {
            self.resize = false;
            self.recreate_swapchain()?;
        }
        let Some(sc) = &self.swapchain else {
            return Ok(());
        };
        let n = self.engine.last_frame() + 1;
        let k2 = self.acquired.len() as u64;
        // The acquire semaphore of this command slot was last waited on by frame n - 2K.
        if n > k2 {
            self.engine.wait_for(n - k2)?;
        }
        let acquired = &self.acquired[(n % k2) as usize];
        // SAFETY: valid swapchain; the semaphore has no pending operation (waited above).
        let index = match unsafe {
            sc.loader
                .acquire_next_image(sc.handle, u64::MAX, acquired.handle(), vk::Fence::null())
        } {
            Ok((i, _)) => i,
            Err(vk::Result::ERROR_OUT_OF_DATE_KHR) => {
                self.resize = true;
                return Ok(());
            }
            Err(e) => return Err(e).context("vkAcquireNextImageKHR"),
        };
        let (image, rendered) = (
            sc.images[index as usize],
            sc.rendered[index as usize].clone(),
        );
        self.engine.render(image, acquired, &rendered)?;
        let waits = [rendered.handle()];
        let swapchains = [sc.handle];
        let indices = [index];
        let present = vk::PresentInfoKHR::default()
            .wait_semaphores(&waits)
            .swapchains(&swapchains)
            .image_indices(&indices);
        let queue = *self.devices.vk.lock_queue();
        // SAFETY: the image was acquired and its copy submitted to signal `rendered`.
        match unsafe { sc.loader.queue_present(queue, &present) } {
            Ok(false) => {}
            Ok(true) | Err(vk::Result::ERROR_OUT_OF_DATE_KHR) => self.resize = true,
            Err(e) => return Err(e).context("vkQueuePresentKHR"),
        }
        self.frames += 1;
        self.fps_frames += 1;
        if [1, 10, 30, 100].contains(&self.frames) || self.frames.is_multiple_of(1000) {
            println!("presented {} frames", self.frames);
            let _ = std::io::stdout().flush();
        }
        let elapsed = self.fps_since.elapsed().as_secs_f64();
        if elapsed >= 0.5 {
            let title = self.engine.title(self.fps_frames as f64 / elapsed);
            self.window.set_title(&title);
            self.fps_frames = 0;
            self.fps_since = Instant::now();
        }
        Ok(())
    }
}

impl<E: Scene> Drop for Running<E> {
    fn drop(&mut self) {
        let _ = self.engine.wait_idle();
        // SAFETY: the GPU is idle; the swapchain is destroyed before its surface.
        unsafe {
            let _ = self.devices.vk.device().device_wait_idle();
            if let Some(sc) = self.swapchain.take() {
                sc.loader.destroy_swapchain(sc.handle, None);
            }
            self.surface_loader.destroy_surface(self.surface, None);
        }
    }
}

impl<D: Demo> ApplicationHandler for App<D> {
    fn resumed(&mut self, el: &ActiveEventLoop) {
        if self.run.is_none() && self.error.is_none() {
            match self.start(el) {
                Ok(r) => self.run = Some(r),
                Err(e) => {
                    self.error = Some(e);
                    el.exit();
                }
            }
        }
    }

    fn window_event(&mut self, el: &ActiveEventLoop, _id: WindowId, event: WindowEvent) {
        let Some(run) = self.run.as_mut() else { return };
        match event {
            WindowEvent::CloseRequested => el.exit(),
            WindowEvent::Resized(size) => {
                println!("window resized to {}x{}", size.width, size.height);
                run.resize = true;
            }
            WindowEvent::RedrawRequested => {
                let result = run.draw();
                if let Err(e) = result {
                    self.error = Some(e);
                    el.exit();
                } else if self.opts.exit_after.is_some_and(|n| run.frames >= n) {
                    el.exit();
                } else if let Some((at, w, h)) = self.opts.resize_at.filter(|r| r.0 == run.frames) {
                    println!("requesting a {w}x{h} window after {at} frames");
                    let _ = run
                        .window
                        .request_inner_size(winit::dpi::PhysicalSize::new(w, h));
                }
            }
            WindowEvent::MouseInput {
                state,
                button: MouseButton::Left,
                ..
            } => {
                run.drag = (state == ElementState::Pressed)
                    .then_some(PhysicalPosition::new(f64::NAN, f64::NAN));
            }
            WindowEvent::CursorMoved { position, .. } => {
                if let Some(last) = run.drag {
                    run.engine
                        .drag((!last.x.is_nan()).then_some(last), position);
                    run.drag = Some(position);
                }
            }
            WindowEvent::MouseWheel { delta, .. } => run.engine.wheel(delta),
            WindowEvent::KeyboardInput { event, .. } if event.state == ElementState::Pressed => {
                if event.logical_key == Key::Named(NamedKey::Escape) {
                    el.exit();
                } else if let Err(e) = run.engine.key(&event.logical_key) {
                    self.error = Some(e);
                    el.exit();
                }
            }
            _ => {}
        }
    }

    fn about_to_wait(&mut self, _el: &ActiveEventLoop) {
        if let Some(run) = &self.run {
            run.window.request_redraw();
        }
    }

    fn exiting(&mut self, _el: &ActiveEventLoop) {
        if let Some(run) = self.run.take() {
            let frames = run.frames;
            let result = check_validation(&run.devices);
            drop(run);
            println!("closed after {frames} frames");
            if let Err(e) = result {
                self.error.get_or_insert(e);
            }
        }
    }
}
