//! The canvas's opaque mode (issue 38): particles as lit spheres, the nearest surface per
//! pixel, for pictures composited across GPUs by depth. The sphere pass packs each sample as
//! depth (an order-preserving key) over RGBA8 into a `u64` and keeps the per-pixel minimum
//! (`atomicMin`, shaders/particles_spheres.comp), so several GPUs' samples composite with one
//! `ncclMin` on `ncclUint64` into exactly the one-GPU picture. The samples live in the
//! canvas's HDR buffer (the same 8 bytes per pixel the glow mode counts in), which this mode
//! keeps empty (all ones) between frames; the resolve writes the pixels and empties it.

use super::{groups, hud, Canvas, Frame};
use crate::ComputePipeline;
use cuvk::ash::vk;
use cuvk::vulkan::AsVkBuffer;

/// The opaque mode's SPIR-V: shaders/particles_spheres.spv and particles_spheres_resolve.spv.
#[derive(Clone, Copy)]
pub struct SphereShaders<'a> {
    /// particles_spheres.spv: spheres into packed samples.
    pub spheres: &'a [u8],
    /// particles_spheres_resolve.spv: samples into pixels.
    pub resolve: &'a [u8],
}

/// Sphere radius in world units (the galaxies span about 20).
const RADIUS: f32 = 0.035;

/// particles_spheres.comp's push constants (its `Push` block, field for field).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SpherePush {
    /// World to clip space.
    pub view_proj: [[f32; 4]; 4],
    /// Particles `[first, count)` are drawn.
    pub count: u32,
    /// Picture width in pixels.
    pub width: u32,
    /// Picture height in pixels.
    pub height: u32,
    /// Sphere radius in world units.
    pub radius: f32,
    /// The first particle drawn (a rank's share).
    pub first: u32,
    /// Pixels per world unit at depth 1.
    pub focal: f32,
    /// far / (far - near): clip z per unit towards the eye, per unit of clip w.
    pub depth_scale: f32,
}

/// particles_spheres_resolve.comp's push constants.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SphereResolvePush {
    /// Picture width in pixels.
    pub width: u32,
    /// Picture height in pixels.
    pub height: u32,
    /// 1: write BGRA (a swapchain image), 0: RGBA.
    pub bgra: u32,
    /// 1: reset each sample to empty after reading it.
    pub clear: u32,
}

/// The opaque mode's pipelines and descriptor sets.
pub(super) struct Spheres {
    draw: ComputePipeline,
    draw_sets: Vec<vk::DescriptorSet>,
    resolve: ComputePipeline,
    resolve_set: vk::DescriptorSet,
}

impl Spheres {
    /// Points the sphere pass's slot `slot` at `particles`.
    ///
    /// # Safety
    /// No pending command buffer may use the slot's descriptor set.
    pub(super) unsafe fn set_particles(
        &self,
        slot: usize,
        particles: &dyn AsVkBuffer,
        samples: &dyn AsVkBuffer,
    ) -> cuvk::Result<()> {
        match self.draw_sets.get(slot) {
            // SAFETY: forwarded from the caller.
            Some(&set) => unsafe { self.draw.update_descriptor_set(set, &[particles, samples]) },
            None => Ok(()),
        }
    }
}

impl Canvas {
    /// Turns on the opaque mode: the sphere pass over `particles` (the same slots as the
    /// canvas's), and its resolve. Refused (`Capability`) where the device has no 64-bit
    /// buffer atomics. The canvas's own HDR buffer is emptied here; one the caller keeps
    /// ([`Canvas::with_hdr`]) must be all ones (empty) before the first frame.
    pub fn enable_spheres(
        &mut self,
        shaders: &SphereShaders<'_>,
        particles: &[&dyn AsVkBuffer],
    ) -> cuvk::Result<()> {
        let vk = self.hdr.vk_context().clone();
        if !vk.info().capabilities.int64_atomics {
            return Err(cuvk::Capability::Atomic64.into());
        }
        let push = |bytes: usize| bytes as u32;
        let slots = particles.len() as u32;
        let draw = ComputePipeline::new(
            &vk,
            shaders.spheres,
            2,
            push(size_of::<SpherePush>()),
            slots,
        )?;
        let draw_sets = particles
            .iter()
            .map(|&p| draw.descriptor_set(&[p, &self.hdr]))
            .collect::<cuvk::Result<Vec<_>>>()?;
        let resolve = ComputePipeline::new(
            &vk,
            shaders.resolve,
            2,
            push(size_of::<SphereResolvePush>()),
            1,
        )?;
        let resolve_set = resolve.descriptor_set(&[&self.hdr, &self.pixels])?;
        if let super::Hdr::Own(own) = &mut self.hdr {
            let bytes = own.vk_size();
            vk.fill_buffer(own, 0, bytes, u32::MAX)?;
        }
        self.spheres = Some(Spheres {
            draw,
            draw_sets,
            resolve,
            resolve_set,
        });
        Ok(())
    }

    /// Records one rank's sphere pass over `frame`'s particles into the samples (adding to
    /// what is there: the minimum stays). Nothing where the opaque mode is off.
    ///
    /// # Safety
    /// As [`Canvas::record`].
    pub unsafe fn record_spheres(&self, cmd: vk::CommandBuffer, frame: &Frame<'_>) {
        let Some(s) = &self.spheres else { return };
        let (w, h) = (self.width, self.height);
        let push = SpherePush {
            view_proj: frame.camera.view_proj(w as f32 / h as f32),
            count: frame.particles,
            width: w,
            height: h,
            radius: RADIUS,
            first: frame.first,
            focal: h as f32 / (2.0 * frame.camera.tan_half_fov()),
            depth_scale: crate::camera::depth_scale(),
        };
        // SAFETY: forwarded from the caller; the set belongs to the pipeline and its buffers
        // outlive the commands.
        unsafe {
            s.draw.record_dispatch(
                cmd,
                s.draw_sets[frame.slot],
                bytemuck::bytes_of(&push),
                groups(frame.particles.saturating_sub(frame.first)),
            );
        }
    }

    /// Records the samples (one rank's, or the composite of all) into [`Canvas::pixels`] with
    /// the HUD, emptying the samples. Must follow the sphere passes after a barrier.
    ///
    /// # Safety
    /// As [`Canvas::record`].
    pub unsafe fn record_sphere_resolve(
        &self,
        d: &cuvk::ash::Device,
        cmd: vk::CommandBuffer,
        frame: &Frame<'_>,
        barrier: &dyn Fn(vk::CommandBuffer, vk::AccessFlags),
    ) {
        let Some(s) = &self.spheres else { return };
        let hud = frame.hud.map(|lines| (lines, hud::columns(lines) as u32));
        let push = SphereResolvePush {
            width: self.width,
            height: self.height,
            bgra: u32::from(frame.bgra),
            clear: 1,
        };
        // SAFETY: forwarded from the caller; every set belongs to its pipeline and its buffers
        // live in `self`.
        unsafe {
            if let Some((lines, _)) = hud {
                d.cmd_update_buffer(cmd, self.text.vk_buffer(), 0, &hud::encode(lines));
                barrier(cmd, vk::AccessFlags::TRANSFER_WRITE);
            }
            s.resolve.record_dispatch(
                cmd,
                s.resolve_set,
                bytemuck::bytes_of(&push),
                groups(self.width * self.height),
            );
            if let Some((_, columns)) = hud {
                barrier(cmd, vk::AccessFlags::SHADER_WRITE);
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

    /// Records a whole opaque frame on one GPU: the sphere pass, then its resolve.
    ///
    /// # Safety
    /// As [`Canvas::record`].
    pub unsafe fn record_opaque(
        &self,
        d: &cuvk::ash::Device,
        cmd: vk::CommandBuffer,
        frame: &Frame<'_>,
        barrier: &dyn Fn(vk::CommandBuffer, vk::AccessFlags),
    ) {
        // SAFETY: forwarded from the caller.
        unsafe {
            self.record_spheres(cmd, frame);
            barrier(cmd, vk::AccessFlags::SHADER_WRITE);
            self.record_sphere_resolve(d, cmd, frame, barrier);
        }
    }

    /// Whether the opaque mode is on ([`Self::enable_spheres`]).
    pub fn is_opaque(&self) -> bool {
        self.spheres.is_some()
    }
}
