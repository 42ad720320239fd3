//! The particle demo's picture (also the Python module's renderer), drawn by compute shaders
//! from the particle positions (H100/H200-class
//! GPUs have few raster units: a compute splat is far faster there than rasterised points).
//! shaders/particles_splat.comp adds each particle to its pixel's HDR counts;
//! shaders/particles_resolve.comp blurs a small copy of them into a glow, then tone-maps
//! counts, glow and a star field into RGBA8 pixels; shaders/particles_hud.comp writes the HUD's
//! text over those. (shaders/splat.comp and resolve.comp, the plain counts-to-colour draw, stay
//! for `bench_draw` and the Python renderer.)

use std::sync::Arc;

use cuvk::ash::vk;
use cuvk::vulkan::AsVkBuffer;

use crate::camera::OrbitCamera;
use crate::{ComputePipeline, PrivateAllocator, PrivateBuffer};

pub mod hud;
mod spheres;

pub use spheres::{SpherePush, SphereResolvePush, SphereShaders};

const STORAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::STORAGE_BUFFER;

/// The canvas's SPIR-V: shaders/particles_splat.spv, particles_resolve.spv, particles_hud.spv.
#[derive(Clone, Copy)]
pub struct CanvasShaders<'a> {
    /// particles_splat.spv: particles into HDR counts.
    pub splat: &'a [u8],
    /// particles_resolve.spv: glow, tone map and star field into pixels.
    pub resolve: &'a [u8],
    /// particles_hud.spv: the HUD's text over the pixels.
    pub hud: &'a [u8],
}

/// A device-local buffer the canvas keeps to itself.
fn device_local(
    alloc: &Arc<PrivateAllocator>,
    name: &str,
    bytes: u64,
    usage: vk::BufferUsageFlags,
) -> cuvk::Result<PrivateBuffer> {
    PrivateBuffer::gpu_only(alloc, name, bytes, usage)
}

/// Copies `data` to the start of `dst` through a host-visible staging buffer (waits).
fn upload<T: bytemuck::Pod>(
    alloc: &Arc<PrivateAllocator>,
    dst: &mut dyn AsVkBuffer,
    data: &[T],
) -> cuvk::Result<()> {
    let bytes = std::mem::size_of_val(data) as u64;
    let mut host = PrivateBuffer::upload(alloc, "upload staging", bytes)?;
    host.write(data)?;
    alloc.context().copy_buffer(&host, 0, dst, 0, bytes)?;
    Ok(())
}

/// Exposure: particle counts are scaled by it times pixels per particle (so that any count
/// shows the same picture), then compressed (particles_resolve.comp).
const EXPOSURE: f32 = 0.034;
/// How much of the blurred glow is added to the picture.
const GLOW: f32 = 0.8;
/// The depth in the galaxies' potential (pos.w) that gets the middle of the palette.
const DEPTH_HALF: f32 = 1.0;
/// The glow is blurred on a grid this many texels high (particles_resolve.comp): its size in
/// the picture does not depend on the resolution.
const GLOW_ROWS: u32 = 90;

/// What one frame draws.
pub struct Frame<'a> {
    /// Which slot's particle buffer to draw.
    pub slot: usize,
    /// Draw particles `first..particles` of the slot's buffer.
    pub first: u32,
    /// How many particles the buffer holds (the end of the range drawn).
    pub particles: u32,
    /// The view.
    pub camera: &'a OrbitCamera,
    /// The target is B8G8R8A8 (else R8G8B8A8).
    pub bgra: bool,
    /// HUD text, or none.
    pub hud: Option<&'a [String; hud::LINES]>,
    /// Brightness per particle; `None`: chosen from the particle count and picture size.
    pub exposure: Option<f32>,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SplatPush {
    view_proj: [[f32; 4]; 4],
    count: u32,
    width: u32,
    height: u32,
    depth_half: f32,
    first: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ResolvePush {
    pass: u32,
    width: u32,
    height: u32,
    glow_scale: u32,
    glow_width: u32,
    glow_height: u32,
    exposure: f32,
    glow: f32,
    bgra: u32,
    pad: [u32; 3],
    right: [f32; 4],
    up: [f32; 4],
    forward: [f32; 4],
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct HudPush {
    width: u32,
    height: u32,
    left: u32,
    top: u32,
    panel_width: u32,
    panel_height: u32,
    scale: u32,
    columns: u32,
    stride: u32,
    lines: u32,
    bgra: u32,
}

/// particles_resolve.comp's last pass, the composite (0-2 make the glow).
const COMPOSITE: u32 = 3;

/// Workgroups of 256 for `n` invocations (the shaders loop past 65535 groups).
fn groups(n: u32) -> u32 {
    n.div_ceil(256).clamp(1, 65535)
}

/// The HDR counts: the canvas's own, or a buffer the caller keeps (a shared buffer NCCL sums
/// into, in the multi-GPU mode).
enum Hdr {
    Own(PrivateBuffer),
    External(vk::Buffer, u64, Arc<cuvk::vulkan::VulkanContext>),
}

// SAFETY: `Own` forwards to a live PrivateBuffer the canvas owns; `External` is a buffer the
// caller of `Canvas::with_hdr` promised outlives the canvas and its commands, of this size, on
// this context; no Rust reference points into either.
unsafe impl AsVkBuffer for Hdr {
    fn vk_buffer(&self) -> vk::Buffer {
        match self {
            Hdr::Own(b) => b.vk_buffer(),
            Hdr::External(b, _, _) => *b,
        }
    }
    fn vk_size(&self) -> u64 {
        match self {
            Hdr::Own(b) => b.vk_size(),
            Hdr::External(_, size, _) => *size,
        }
    }
    fn vk_context(&self) -> &Arc<cuvk::vulkan::VulkanContext> {
        match self {
            Hdr::Own(b) => b.vk_context(),
            Hdr::External(_, _, ctx) => ctx,
        }
    }
}

/// The bytes of HDR counts a `width`×`height` canvas needs: per pixel, a particle count and a
/// sum of colour keys (two u32).
pub fn hdr_bytes(width: u32, height: u32) -> u64 {
    u64::from(width) * u64::from(height) * 8
}

/// What depends on the picture's size: the HDR counts, the glow, the pixels and their readback,
/// the HUD's text, and the pipelines with descriptor sets that point at them.
pub struct Canvas {
    /// Picture width, pixels.
    pub width: u32,
    /// Picture height, pixels.
    pub height: u32,
    /// Pixels per glow texel each way, and glow texels across and down.
    glow_scale: u32,
    glow_size: (u32, u32),
    splat: ComputePipeline,
    splat_sets: Vec<vk::DescriptorSet>,
    resolve: ComputePipeline,
    resolve_set: vk::DescriptorSet,
    hud: ComputePipeline,
    hud_set: vk::DescriptorSet,
    // Bound in the descriptor sets above: the canvas's own HDR counts, or the caller's
    // (`with_hdr`).
    hdr: Hdr,
    /// The opaque mode, once enabled.
    spheres: Option<spheres::Spheres>,
    _glow: [PrivateBuffer; 2],
    _font: PrivateBuffer,
    text: PrivateBuffer,
    /// The picture, RGBA8 (or BGRA8) texels.
    pub pixels: PrivateBuffer,
    /// A host-readable copy of the picture.
    pub readback: PrivateBuffer,
}

impl Canvas {
    /// A `width`×`height` canvas drawing from `particles[slot]`.
    pub fn new(
        alloc: &Arc<PrivateAllocator>,
        shaders: &CanvasShaders<'_>,
        particles: &[&dyn AsVkBuffer],
        width: u32,
        height: u32,
    ) -> cuvk::Result<Self> {
        let pixels_n = u64::from(width) * u64::from(height);
        let mut hdr = device_local(alloc, "canvas HDR counts", pixels_n * 8, STORAGE)?;
        alloc.context().fill_buffer(&mut hdr, 0, pixels_n * 8, 0)?;
        Self::build(alloc, shaders, particles, width, height, Hdr::Own(hdr))
    }

    /// As [`Self::new`], splatting into and resolving from `hdr` (at least
    /// [`hdr_bytes`]`(width, height)` bytes, zero where the first frame begins), which the
    /// caller keeps: e.g. a shared buffer an NCCL reduce sums every GPU's counts into.
    ///
    /// # Safety
    /// `hdr` must outlive the canvas and every command it records.
    pub unsafe fn with_hdr(
        alloc: &Arc<PrivateAllocator>,
        shaders: &CanvasShaders<'_>,
        particles: &[&dyn AsVkBuffer],
        width: u32,
        height: u32,
        hdr: &dyn AsVkBuffer,
    ) -> cuvk::Result<Self> {
        let need = hdr_bytes(width, height);
        if hdr.vk_size() < need {
            return Err(cuvk::LayoutError::OutOfBounds {
                offset: 0,
                size: need,
                end: need,
                container: "HDR counts buffer",
                container_size: hdr.vk_size(),
            }
            .into());
        }
        let external = Hdr::External(hdr.vk_buffer(), hdr.vk_size(), hdr.vk_context().clone());
        Self::build(alloc, shaders, particles, width, height, external)
    }

    fn build(
        alloc: &Arc<PrivateAllocator>,
        shaders: &CanvasShaders<'_>,
        particles: &[&dyn AsVkBuffer],
        width: u32,
        height: u32,
        hdr: Hdr,
    ) -> cuvk::Result<Self> {
        let vk = alloc.context();
        let pixels_n = u64::from(width) * u64::from(height);
        let glow_scale = (height / GLOW_ROWS).max(1);
        let glow_size = (width.div_ceil(glow_scale), height.div_ceil(glow_scale));
        let glow_bytes = u64::from(glow_size.0) * u64::from(glow_size.1) * 16;
        let glow = [
            device_local(alloc, "canvas glow", glow_bytes, STORAGE)?,
            device_local(alloc, "canvas glow blur", glow_bytes, STORAGE)?,
        ];
        let pixels = device_local(alloc, "canvas pixels", pixels_n * 4, STORAGE)?;
        let readback = PrivateBuffer::readback(alloc, "canvas readback", pixels_n * 4)?;
        let font_words = hud::font_words();
        let mut font = device_local(alloc, "HUD font", font_words.len() as u64 * 4, STORAGE)?;
        upload(alloc, &mut font, &font_words)?;
        let text_bytes = (hud::LINES * hud::COLUMNS) as u64;
        let text = device_local(alloc, "HUD text", text_bytes, STORAGE)?;
        let push = |bytes: usize| bytes as u32;
        let slots = particles.len() as u32;
        let splat =
            ComputePipeline::new(vk, shaders.splat, 2, push(size_of::<SplatPush>()), slots)?;
        let splat_sets = particles
            .iter()
            .map(|&p| splat.descriptor_set(&[p, &hdr]))
            .collect::<cuvk::Result<Vec<_>>>()?;
        let resolve =
            ComputePipeline::new(vk, shaders.resolve, 4, push(size_of::<ResolvePush>()), 1)?;
        let resolve_set = resolve.descriptor_set(&[&hdr, &glow[0], &glow[1], &pixels])?;
        let hud = ComputePipeline::new(vk, shaders.hud, 3, push(size_of::<HudPush>()), 1)?;
        let hud_set = hud.descriptor_set(&[&font, &text, &pixels])?;
        Ok(Self {
            width,
            height,
            glow_scale,
            glow_size,
            splat,
            splat_sets,
            resolve,
            resolve_set,
            hud,
            hud_set,
            hdr,
            spheres: None,
            _glow: glow,
            _font: font,
            text,
            pixels,
            readback,
        })
    }

    /// Points slot `slot`'s particle buffer at `particles` instead (a loop that draws a
    /// different buffer each frame).
    ///
    /// # Safety
    /// No pending command buffer may use the slot's descriptor set.
    pub unsafe fn set_particles(
        &self,
        slot: usize,
        particles: &dyn AsVkBuffer,
    ) -> cuvk::Result<()> {
        let Some(&set) = self.splat_sets.get(slot) else {
            return Err(cuvk::LayoutError::OutOfBounds {
                offset: slot as u64,
                size: 1,
                end: slot as u64 + 1,
                container: "canvas slots",
                container_size: self.splat_sets.len() as u64,
            }
            .into());
        };
        // SAFETY: forwarded from the caller.
        unsafe {
            self.splat
                .update_descriptor_set(set, &[particles, &self.hdr])?;
            if let Some(s) = &self.spheres {
                s.set_particles(slot, particles, &self.hdr)?;
            }
        }
        Ok(())
    }

    /// Records drawing `frame` into [`Self::pixels`]. `barrier(cmd, src)` must record a full
    /// barrier making `src` writes visible to everything after it. Ends with the pixels
    /// written by a compute shader (the caller's barrier follows).
    ///
    /// # Safety
    /// `cmd` is recording on this canvas's device; the particle buffer of `frame.slot` holds
    /// the frame's positions and outlives the commands, as does the canvas.
    pub unsafe fn record(
        &self,
        d: &cuvk::ash::Device,
        cmd: vk::CommandBuffer,
        frame: &Frame<'_>,
        barrier: &dyn Fn(vk::CommandBuffer, vk::AccessFlags),
    ) {
        // SAFETY: forwarded from the caller.
        unsafe {
            self.record_splat(d, cmd, frame);
            barrier(
                cmd,
                vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE,
            );
            self.record_resolve(d, cmd, frame, barrier);
        }
    }

    /// Records only the splat of `frame`'s particles into the HDR counts (which it adds to:
    /// the resolve clears them). The multi-GPU mode records this on every GPU and sums the
    /// counts with NCCL before the render GPU's [`Self::record_resolve`].
    ///
    /// # Safety
    /// As [`Self::record`].
    pub unsafe fn record_splat(
        &self,
        _d: &cuvk::ash::Device,
        cmd: vk::CommandBuffer,
        frame: &Frame<'_>,
    ) {
        let (w, h) = (self.width, self.height);
        let splat = SplatPush {
            view_proj: frame.camera.view_proj(w as f32 / h as f32),
            count: frame.particles,
            width: w,
            height: h,
            depth_half: DEPTH_HALF,
            first: frame.first,
        };
        // SAFETY: forwarded from the caller; the set belongs to the pipeline and its buffers
        // outlive the commands (the caller's and the canvas's).
        unsafe {
            self.splat.record_dispatch(
                cmd,
                self.splat_sets[frame.slot],
                bytemuck::bytes_of(&splat),
                groups(frame.particles.saturating_sub(frame.first)),
            );
        }
    }

    /// Records a copy of [`Self::pixels`] into the host-readable [`Self::readback`] (the
    /// recorder puts the barrier after the resolve before it, and waits for the submission
    /// before reading).
    ///
    /// # Safety
    /// `cmd` is recording on the canvas's device; the canvas outlives the commands.
    pub unsafe fn record_readback(&self, d: &cuvk::ash::Device, cmd: vk::CommandBuffer) {
        let region = [vk::BufferCopy {
            src_offset: 0,
            dst_offset: 0,
            size: u64::from(self.width) * u64::from(self.height) * 4,
        }];
        // SAFETY: forwarded from the caller; both buffers are the canvas's.
        unsafe {
            d.cmd_copy_buffer(
                cmd,
                self.pixels.vk_buffer(),
                self.readback.vk_buffer(),
                &region,
            )
        };
    }

    /// Records the glow, tone map and HUD of the HDR counts into [`Self::pixels`], and clears
    /// the counts. Must follow the splat (or the sum of the splats) after a barrier.
    ///
    /// # Safety
    /// As [`Self::record`].
    pub unsafe fn record_resolve(
        &self,
        d: &cuvk::ash::Device,
        cmd: vk::CommandBuffer,
        frame: &Frame<'_>,
        barrier: &dyn Fn(vk::CommandBuffer, vk::AccessFlags),
    ) {
        let (w, h) = (self.width, self.height);
        let hud = frame.hud.map(|lines| (lines, hud::columns(lines) as u32));
        // SAFETY: forwarded from the caller; every set belongs to its pipeline and its buffers
        // live in `self`.
        unsafe {
            if let Some((lines, _)) = hud {
                // Written in the command buffer: no host write races a frame still reading.
                d.cmd_update_buffer(cmd, self.text.vk_buffer(), 0, &hud::encode(lines));
                barrier(cmd, vk::AccessFlags::TRANSFER_WRITE);
            }
            let (gw, gh) = self.glow_size;
            for pass in 0..=COMPOSITE {
                let push = self.resolve_push(pass, frame);
                let n = if pass == COMPOSITE { w * h } else { gw * gh };
                self.resolve.record_dispatch(
                    cmd,
                    self.resolve_set,
                    bytemuck::bytes_of(&push),
                    groups(n),
                );
                if pass < COMPOSITE || hud.is_some() {
                    barrier(cmd, vk::AccessFlags::SHADER_WRITE);
                }
            }
            if let Some((_, columns)) = hud {
                let push = self.hud_push(columns, frame.bgra);
                self.hud.record_dispatch(
                    cmd,
                    self.hud_set,
                    bytemuck::bytes_of(&push),
                    groups(push.panel_width * push.panel_height),
                );
            }
        }
    }

    /// The exposure [`Frame::exposure`] `None` picks for `particles` particles on this canvas.
    pub fn exposure_for(&self, particles: u64) -> f32 {
        (EXPOSURE * (self.width * self.height) as f32 / particles.max(1) as f32).min(0.1)
    }

    fn resolve_push(&self, pass: u32, frame: &Frame<'_>) -> ResolvePush {
        let (w, h) = (self.width, self.height);
        let tan = frame.camera.tan_half_fov();
        let [right, up, forward] = frame.camera.axes();
        let four = |v: [f32; 3], s: f32, w: f32| [v[0] * s, v[1] * s, v[2] * s, w];
        ResolvePush {
            pass,
            width: w,
            height: h,
            glow_scale: self.glow_scale,
            glow_width: self.glow_size.0,
            glow_height: self.glow_size.1,
            // Capped: where particles are few, each would be so bright that its colour washes
            // out to white.
            exposure: frame
                .exposure
                .unwrap_or_else(|| self.exposure_for(u64::from(frame.particles))),
            glow: GLOW,
            bgra: u32::from(frame.bgra),
            pad: [0; 3],
            right: four(right, tan * w as f32 / h as f32, 0.0),
            up: four(up, tan, 0.0),
            // One pixel's view angle, about: the stars' size.
            forward: four(forward, 1.0, 2.0 * tan / h as f32),
        }
    }

    /// The HUD panel in the top-left corner, its font scaled with the picture's height.
    fn hud_push(&self, columns: u32, bgra: bool) -> HudPush {
        // Font pixels: 6 x 10 per character, a margin of 4 around the text (particles_hud.comp).
        let scale = (self.height / 360).max(1);
        HudPush {
            width: self.width,
            height: self.height,
            left: 6 * scale,
            top: 6 * scale,
            panel_width: (columns * 6 + 7) * scale,
            panel_height: (hud::LINES as u32 * 10 + 5) * scale,
            scale,
            columns,
            stride: hud::COLUMNS as u32,
            lines: hud::LINES as u32,
            bgra: u32::from(bgra),
        }
    }
}
