//! `cuvk.ParticleRenderer`: the particle demo's draw (`cuvk_canvas::canvas`: an HDR compute
//! splat of every particle, glow, ACES tone map and star field) on the bridge's Vulkan
//! device, reading positions straight from the memory a PyTorch / CuPy / JAX tensor writes,
//! ordered after that work on the GPU. Headless: frames come back as RGBA bytes or PNGs.

use std::collections::VecDeque;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use cuvk::ash::vk;
use cuvk::vulkan::{cmd_acquire_buffers, cmd_release_buffers, AsVkBuffer};
use cuvk::FrameSubmit;
use cuvk_canvas::camera::OrbitCamera;
use cuvk_canvas::canvas::{Canvas, CanvasShaders, Frame};
use cuvk_canvas::{CommandSlots, PrivateAllocator, PrivateBuffer};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::array::{self, Array};
use crate::bridge::{timeout_seconds, PyBridge, Shared};
use crate::buffer::BufferCore;
use crate::dtype::DType;
use crate::errors::{refusal, IntoPyResult};
use crate::stream::{self, Convention};

/// The particle demo's draw (HDR splat, glow, tone map, star field), built into the module.
const SHADERS: CanvasShaders<'static> = CanvasShaders {
    splat: include_bytes!("../../shaders/particles_splat.spv"),
    resolve: include_bytes!("../../shaders/particles_resolve.spv"),
    hud: include_bytes!("../../shaders/particles_hud.spv"),
};
/// Frames recorded ahead of the GPU (command slots).
const SLOTS: usize = 3;
/// How long a submission waits for its command slot's previous submission.
const SLOT_TIMEOUT: Duration = Duration::from_secs(10);

/// The Vulkan objects of a renderer: destroyed only once the GPU is done with them.
struct Gpu {
    canvas: Canvas,
    slots: CommandSlots,
    // What the canvas's slots point at until a frame draws real positions.
    _placeholder: PrivateBuffer,
}

/// A renderer: its Vulkan objects, and the frames in flight.
struct Renderer {
    shared: Arc<Shared>,
    gpu: ManuallyDrop<Gpu>,
    // The next command slot, and the `vulkan_done` value of each slot's last submission.
    next_slot: usize,
    slot_values: [u64; SLOTS],
    // Per submitted frame: its `vulkan_done` value and the buffer it reads.
    in_flight: VecDeque<(u64, Arc<BufferCore>)>,
    frames: u64,
    last_copy: u64,
    width: u32,
    height: u32,
}

/// How the next frame looks: set from Python at any time, read by `draw` when it starts.
#[derive(Clone, Copy)]
struct View {
    camera: OrbitCamera,
    exposure: Option<f32>,
}

impl Renderer {
    fn new(shared: &Arc<Shared>, width: u32, height: u32) -> cuvk::Result<Self> {
        let vk = shared.bridge.vulkan();
        let alloc = PrivateAllocator::new(vk)?;
        let placeholder = PrivateBuffer::gpu_only(
            &alloc,
            "no particles yet",
            16,
            vk::BufferUsageFlags::STORAGE_BUFFER,
        )?;
        let slots_of: [&dyn AsVkBuffer; SLOTS] = [&placeholder; SLOTS];
        let canvas = Canvas::new(&alloc, &SHADERS, &slots_of, width, height)?;
        let gpu = Gpu {
            canvas,
            slots: CommandSlots::new(vk, SLOTS)?,
            _placeholder: placeholder,
        };
        Ok(Self {
            shared: shared.clone(),
            gpu: ManuallyDrop::new(gpu),
            next_slot: 0,
            slot_values: [0; SLOTS],
            in_flight: VecDeque::new(),
            frames: 0,
            last_copy: 0,
            width,
            height,
        })
    }

    /// Submits commands recorded by `record` in the next command slot (not a frame).
    fn one_shot(
        &mut self,
        record: impl FnOnce(&cuvk::ash::Device, vk::CommandBuffer),
    ) -> cuvk::Result<u64> {
        let (slot, cmd) = self.begin_slot()?;
        let d = self.shared.bridge.vulkan().device();
        record(d, cmd);
        // SAFETY: recording since begin_slot.
        unsafe { d.end_command_buffer(cmd) }.map_err(|result| cuvk::Error::Vulkan {
            call: "vkEndCommandBuffer",
            result,
        })?;
        // SAFETY: an executable command buffer of the bridge's device using only our buffers.
        let value = unsafe {
            self.shared.order.vulkan_submit(
                &[],
                &FrameSubmit::new(&[cmd], vk::PipelineStageFlags::ALL_COMMANDS),
            )
        }?;
        self.slot_values[slot] = value;
        Ok(value)
    }

    /// Takes the next command slot in turn: waits until its previous submission is done
    /// (other objects of the bridge submit on the same timeline, so the slot remembers its
    /// own value), then begins its command buffer.
    fn begin_slot(&mut self) -> cuvk::Result<(usize, vk::CommandBuffer)> {
        let slot = self.next_slot;
        self.shared
            .order
            .wait_vulkan(self.slot_values[slot], SLOT_TIMEOUT)?;
        // SAFETY: the slot's previous submission has completed.
        let cmd = unsafe { self.gpu.slots.begin(slot) }?;
        self.next_slot = (slot + 1) % SLOTS;
        Ok((slot, cmd))
    }

    /// Records and submits one frame drawing `positions`; returns the frame number.
    fn draw(&mut self, positions: &Array, view: View) -> cuvk::Result<u64> {
        let count = (positions.len() / 4) as u32;
        let core = positions.core.clone();
        let (slot, cmd) = self.begin_slot()?;
        // The slot's set now points at this frame's positions (its last use is done).
        // SAFETY: begin_slot waited for the slot's previous submission.
        unsafe { self.gpu.canvas.set_particles(slot, &core.buffer) }?;
        let d = self.shared.bridge.vulkan().device();
        let family = self.shared.bridge.vulkan().queue_family_index();
        let all = vk::PipelineStageFlags::ALL_COMMANDS;
        let barrier = |cmd: vk::CommandBuffer, src: vk::AccessFlags| {
            let b = [vk::MemoryBarrier::default()
                .src_access_mask(src)
                .dst_access_mask(vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE)];
            // SAFETY: recording; a well-formed global barrier.
            unsafe {
                d.cmd_pipeline_barrier(cmd, all, all, vk::DependencyFlags::empty(), &b, &[], &[])
            };
        };
        let frame = Frame {
            slot,
            first: 0,
            particles: count,
            camera: &view.camera,
            bgra: false,
            hud: None,
            exposure: view.exposure,
        };
        let shared_buffer: [&dyn AsVkBuffer; 1] = [&core.buffer];
        // SAFETY: recording on the bridge's device; every buffer outlives the submission
        // (the positions' buffer is held in `in_flight` until its value is reached).
        unsafe {
            // Earlier frames' writes (the canvas, the pixels) are visible to this one.
            barrier(cmd, vk::AccessFlags::MEMORY_WRITE);
            cmd_acquire_buffers(
                d,
                cmd,
                family,
                &shared_buffer,
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::SHADER_READ,
            );
            self.gpu.canvas.record(d, cmd, &frame, &barrier);
            cmd_release_buffers(
                d,
                cmd,
                family,
                &shared_buffer,
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::SHADER_READ,
            );
            d.end_command_buffer(cmd)
                .map_err(|result| cuvk::Error::Vulkan {
                    call: "vkEndCommandBuffer",
                    result,
                })?;
        }
        // SAFETY: as above.
        let value = unsafe {
            self.shared.order.vulkan_submit(
                &[&core.marks],
                &FrameSubmit::new(&[cmd], vk::PipelineStageFlags::COMPUTE_SHADER),
            )
        }?;
        self.slot_values[slot] = value;
        self.frames += 1;
        self.in_flight.push_back((value, core));
        self.retire();
        Ok(self.frames)
    }

    /// Lets go of the buffers of frames the GPU has finished.
    fn retire(&mut self) {
        while let Some((value, _)) = self.in_flight.front() {
            if self
                .shared
                .order
                .wait_vulkan(*value, Duration::ZERO)
                .is_err()
            {
                break;
            }
            self.in_flight.pop_front();
        }
    }

    /// The last frame's pixels, RGBA8, row by row.
    fn read_rgba(&mut self, timeout: Duration) -> cuvk::Result<Vec<u8>> {
        if self.last_copy != self.frames {
            let bytes = u64::from(self.width) * u64::from(self.height) * 4;
            let canvas = &self.gpu.canvas;
            let (pixels, readback) = (canvas.pixels.vk_buffer(), canvas.readback.vk_buffer());
            let value = self.one_shot(|d, cmd| {
                let b = [vk::MemoryBarrier::default()
                    .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                    .dst_access_mask(vk::AccessFlags::TRANSFER_READ)];
                let region = [vk::BufferCopy {
                    src_offset: 0,
                    dst_offset: 0,
                    size: bytes,
                }];
                // SAFETY: recording; our buffers; the resolve pass's writes are made visible.
                unsafe {
                    d.cmd_pipeline_barrier(
                        cmd,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::PipelineStageFlags::TRANSFER,
                        vk::DependencyFlags::empty(),
                        &b,
                        &[],
                        &[],
                    );
                    d.cmd_copy_buffer(cmd, pixels, readback, &region);
                }
            })?;
            self.shared.order.wait_vulkan(value, timeout)?;
            self.last_copy = self.frames;
        }
        self.gpu.canvas.readback.read::<u8>()
    }

    fn wait_idle(&mut self, timeout: Duration) -> cuvk::Result<()> {
        self.shared.wait_vulkan_idle(timeout)?;
        self.in_flight.clear();
        Ok(())
    }
}

impl Drop for Renderer {
    fn drop(&mut self) {
        // Pipelines, sets and buffers must outlive the GPU's use of them. The wait is bounded
        // by the context's drop timeout: a wedged GPU leaks them (logged) rather than hang
        // the interpreter or free memory under the GPU.
        let timeout = self.shared.bridge.vulkan().drop_timeout();
        match self.shared.wait_vulkan_idle(timeout) {
            // SAFETY: every submission through the bridge is done (the wait above), so the
            // command buffers are idle; the objects are dropped once, here, never used again.
            Ok(()) => unsafe {
                self.gpu.slots.assume_idle();
                ManuallyDrop::drop(&mut self.gpu)
            },
            Err(e) => {
                log::error!(
                    "cuvk.ParticleRenderer: the GPU is not done after {timeout:?} ({e}); \
                     leaking its Vulkan objects and the buffers it reads"
                );
                std::mem::forget(std::mem::take(&mut self.in_flight));
            }
        }
    }
}

/// Draws particles — an `(N, 4)` float32 array (x, y, z, and w >= 0 the colour key) in a cuvk
/// buffer,
/// e.g. a PyTorch tensor made with `torch.from_dlpack(bridge.buffer((N, 4)))` — with the
/// particle demo's renderer on the bridge's Vulkan device, headless: `read_rgba()` and
/// `save_png()` return the last frame.
#[pyclass(name = "ParticleRenderer", module = "cuvk", frozen)]
pub struct PyRenderer {
    // Held by draws and reads for as long as they wait for the GPU (with the GIL released):
    // nothing that runs with the GIL held takes it, except through `detach`.
    inner: Mutex<Renderer>,
    shared: Arc<Shared>,
    view: Mutex<View>,
    frames: AtomicU64,
    width: u32,
    height: u32,
}

impl PyRenderer {
    fn lock(&self) -> MutexGuard<'_, Renderer> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn view(&self) -> MutexGuard<'_, View> {
        self.view.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Nothing to read before the first frame.
    fn require_frame(&self) -> PyResult<()> {
        if self.frames.load(Ordering::Acquire) == 0 {
            return Err(refusal(
                "InvalidInput",
                "Renderer.NoFrame",
                "no frame drawn yet: call draw() first",
                &[],
            ));
        }
        Ok(())
    }
}

/// Checks `a` is what the splat reads: float32 × 4 per particle, from the buffer's start.
fn check_positions(a: &Array) -> PyResult<()> {
    let rows_of_4 = a.shape.len() == 2 && a.shape[1] == 4;
    if a.dtype != DType::Float(4) || !rows_of_4 || a.len() == 0 {
        return Err(refusal(
            "InvalidInput",
            "Positions.Layout",
            format!(
                "positions must be a non-empty (N, 4) float32 array (x, y, z, colour key), not \
                 {:?} {}",
                a.shape,
                a.dtype.name()
            ),
            &[("ndim", a.shape.len() as i128)],
        ));
    }
    if a.ptr != a.core.ptr() {
        return Err(refusal(
            "InvalidInput",
            "Positions.Offset",
            "positions must start at the start of their cuvk buffer",
            &[("offset", i128::from(a.ptr - a.core.ptr()))],
        ));
    }
    if a.len() / 4 > u32::MAX as usize {
        return Err(refusal(
            "InvalidInput",
            "Positions.Count",
            "at most 2^32 - 1 particles",
            &[("count", (a.len() / 4) as i128)],
        ));
    }
    Ok(())
}

#[pymethods]
impl PyRenderer {
    /// A renderer of `width` × `height` pixels on `bridge`'s Vulkan device.
    #[new]
    #[pyo3(signature = (bridge, width = 1280, height = 720))]
    fn new(py: Python<'_>, bridge: &PyBridge, width: u32, height: u32) -> PyResult<Self> {
        if !(1..=8192).contains(&width) || !(1..=8192).contains(&height) {
            return Err(refusal(
                "InvalidInput",
                "Renderer.Size",
                format!("width and height must be 1..=8192, not {width}x{height}"),
                &[("width", i128::from(width)), ("height", i128::from(height))],
            ));
        }
        let shared = bridge.shared.clone();
        let r = py.detach(|| Renderer::new(&shared, width, height)).py()?;
        Ok(Self {
            inner: Mutex::new(r),
            shared,
            view: Mutex::new(View {
                camera: OrbitCamera::default(),
                exposure: None,
            }),
            frames: AtomicU64::new(0),
            width,
            height,
        })
    }

    /// Image width in pixels.
    #[getter]
    fn width(&self) -> u32 {
        self.width
    }

    /// Image height in pixels.
    #[getter]
    fn height(&self) -> u32 {
        self.height
    }

    /// Frames drawn so far.
    #[getter]
    fn frames(&self) -> u64 {
        self.frames.load(Ordering::Acquire)
    }

    /// Points the orbit camera: `yaw` about the vertical (z) axis and `pitch` above the x-y
    /// plane, in radians, at `distance` from the origin (the particle demo's camera).
    #[pyo3(signature = (yaw = 0.3, pitch = 0.55, distance = 10.0))]
    fn set_camera(&self, yaw: f32, pitch: f32, distance: f32) -> PyResult<()> {
        if !(distance.is_finite() && distance > 0.0 && yaw.is_finite() && pitch.is_finite()) {
            return Err(refusal(
                "InvalidInput",
                "Renderer.Camera",
                format!(
                    "camera needs finite angles and a distance > 0 (got {yaw}, {pitch}, \
                     {distance})"
                ),
                &[],
            ));
        }
        // Straight down (or up) the vertical axis the view has no "right": refused.
        if pitch.cos().abs() < 1e-3 {
            return Err(refusal(
                "InvalidInput",
                "Renderer.Camera",
                format!("pitch {pitch} looks straight along the vertical axis (z)"),
                &[],
            ));
        }
        self.view().camera = OrbitCamera {
            yaw,
            pitch,
            distance,
        };
        Ok(())
    }

    /// Brightness per particle (None: chosen from the particle count and image size).
    #[pyo3(signature = (exposure = None))]
    fn set_exposure(&self, exposure: Option<f32>) -> PyResult<()> {
        if exposure.is_some_and(|e| !(e.is_finite() && e > 0.0)) {
            return Err(refusal(
                "InvalidInput",
                "Renderer.Exposure",
                "exposure must be a finite number > 0, or None",
                &[],
            ));
        }
        self.view().exposure = exposure;
        Ok(())
    }

    /// Draws `positions`, ordered with `stream` (None: the legacy default stream, PyTorch's
    /// default): the draw waits on the GPU for the work enqueued there so far
    /// (`cuda_release`), and later work there waits for the draw (`cuda_acquire`), so the loop
    /// "step on the stream, draw" needs no other call. `stream=-1`: no ordering (the caller
    /// orders with `cuda_release` / `cuda_acquire`). Returns the frame number (1 for the
    /// first) once the frame is submitted: up to 3 frames of a renderer are queued on the
    /// GPU, and a draw beyond that waits on the host (GIL released) for the oldest.
    #[pyo3(signature = (positions, stream = None))]
    fn draw(
        &self,
        py: Python<'_>,
        positions: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let a = array::resolve(&self.shared, positions)?;
        check_positions(&a)?;
        let stream = stream::parse(stream, Convention::Cuvk)?;
        a.core.cuda_release(stream)?;
        let view = *self.view();
        let frame = py.detach(|| self.lock().draw(&a, view)).py()?;
        self.frames.fetch_max(frame, Ordering::AcqRel);
        a.core.cuda_acquire(stream)?;
        Ok(frame)
    }

    /// The last frame as RGBA8 bytes (waits for it): `height` rows of `width` pixels, the top
    /// row first; gamma-encoded colour (1/2.2), alpha 255.
    #[pyo3(signature = (timeout = 10.0))]
    fn read_rgba<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Bound<'py, PyBytes>> {
        let timeout = timeout_seconds(timeout)?;
        self.require_frame()?;
        let rgba = py.detach(|| self.lock().read_rgba(timeout)).py()?;
        Ok(PyBytes::new(py, &rgba))
    }

    /// Writes the last frame as a PNG file.
    #[pyo3(signature = (path, timeout = 10.0))]
    fn save_png(&self, py: Python<'_>, path: std::path::PathBuf, timeout: f64) -> PyResult<()> {
        let timeout = timeout_seconds(timeout)?;
        self.require_frame()?;
        let (w, h) = (self.width, self.height);
        py.detach(|| -> cuvk::Result<()> {
            let rgba = self.lock().read_rgba(timeout)?;
            write_png(&path, w, h, &rgba).map_err(|source| cuvk::Error::Io {
                call: "writing a PNG",
                source,
            })
        })
        .py()
    }

    /// Waits until every frame drawn is done.
    #[pyo3(signature = (timeout = 10.0))]
    fn wait_idle(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let timeout = timeout_seconds(timeout)?;
        py.detach(|| self.lock().wait_idle(timeout)).py()
    }

    fn __repr__(&self) -> String {
        format!(
            "cuvk.ParticleRenderer({}x{}, frames={})",
            self.width,
            self.height,
            self.frames()
        )
    }
}

fn write_png(path: &std::path::Path, w: u32, h: u32, rgba: &[u8]) -> std::io::Result<()> {
    let file = std::fs::File::create(path)?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    enc.set_color(png::ColorType::Rgba);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().map_err(std::io::Error::other)?;
    writer
        .write_image_data(rgba)
        .map_err(std::io::Error::other)?;
    writer.finish().map_err(std::io::Error::other)
}
