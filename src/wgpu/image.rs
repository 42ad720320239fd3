//! Images in cuvk's memory as `wgpu::Texture`s: the same `VkImage`, wrapped with
//! `wgpu_hal::vulkan::Device::texture_from_raw` (memory `External`), whose drop callback holds
//! cuvk's share of the image and its memory (and, for a [`WgpuSharedImage`], the CUDA
//! mipmapped array) until wgpu has destroyed its view of it. The per-frame handoff: the
//! `crate::wgpu` documentation, "Images: layout and ownership".

use std::sync::Arc;

use ::wgpu::hal;
use ash::vk;

use crate::vulkan::{webgpu, AsVkImage, BoundImage, Image, ImageOptions, OwnershipTransfer};
use crate::wgpu::device::call_failed;
use crate::wgpu::hal_vk::{wrong_backend, Vk};
use crate::wgpu::{WgpuBridge, WgpuDevice};
use crate::{
    DeviceObject, DeviceOwner, Error, ImageDesc, ImageError, ImageKind, NotTextureReason, Result,
    SharedImage, WgpuError, WgpuObject,
};

/// The wgpu format of a format of cuvk's table ([`crate::FORMATS`]): every one has a wgpu
/// counterpart. Anything else is refused ([`WgpuError::NotTexture`] naming it).
/// The 16-bit UNORM / SNORM formats need `Features::TEXTURE_FORMAT_16BIT_NORM` on the device
/// (checked when wrapping).
pub fn texture_format(format: vk::Format) -> Result<::wgpu::TextureFormat> {
    use ::wgpu::TextureFormat as T;
    use vk::Format as F;
    Ok(match format {
        F::R8_UNORM => T::R8Unorm,
        F::R8G8_UNORM => T::Rg8Unorm,
        F::R8G8B8A8_UNORM => T::Rgba8Unorm,
        F::B8G8R8A8_UNORM => T::Bgra8Unorm,
        F::R8_SNORM => T::R8Snorm,
        F::R8G8_SNORM => T::Rg8Snorm,
        F::R8G8B8A8_SNORM => T::Rgba8Snorm,
        F::R8_UINT => T::R8Uint,
        F::R8G8_UINT => T::Rg8Uint,
        F::R8G8B8A8_UINT => T::Rgba8Uint,
        F::R8_SINT => T::R8Sint,
        F::R8G8_SINT => T::Rg8Sint,
        F::R8G8B8A8_SINT => T::Rgba8Sint,
        F::R16_UNORM => T::R16Unorm,
        F::R16G16_UNORM => T::Rg16Unorm,
        F::R16G16B16A16_UNORM => T::Rgba16Unorm,
        F::R16_SNORM => T::R16Snorm,
        F::R16G16_SNORM => T::Rg16Snorm,
        F::R16G16B16A16_SNORM => T::Rgba16Snorm,
        F::R16_UINT => T::R16Uint,
        F::R16G16_UINT => T::Rg16Uint,
        F::R16G16B16A16_UINT => T::Rgba16Uint,
        F::R16_SINT => T::R16Sint,
        F::R16G16_SINT => T::Rg16Sint,
        F::R16G16B16A16_SINT => T::Rgba16Sint,
        F::R16_SFLOAT => T::R16Float,
        F::R16G16_SFLOAT => T::Rg16Float,
        F::R16G16B16A16_SFLOAT => T::Rgba16Float,
        F::R32_UINT => T::R32Uint,
        F::R32G32_UINT => T::Rg32Uint,
        F::R32G32B32A32_UINT => T::Rgba32Uint,
        F::R32_SINT => T::R32Sint,
        F::R32G32_SINT => T::Rg32Sint,
        F::R32G32B32A32_SINT => T::Rgba32Sint,
        F::R32_SFLOAT => T::R32Float,
        F::R32G32_SFLOAT => T::Rg32Float,
        F::R32G32B32A32_SFLOAT => T::Rgba32Float,
        _ => {
            return Err(WgpuError::NotTexture {
                format,
                reason: NotTextureReason::NotInTable,
            }
            .into())
        }
    })
}

/// The wgpu usages of an image created with the Vulkan `usage`: copies, sampling, storage,
/// render attachment. Refused: an empty usage ([`ImageError::NoUsage`]), and Vulkan usages wgpu
/// has no counterpart for (input, depth-stencil, transient attachments...:
/// [`WgpuError::ImageUsageNotInWgpu`]).
pub fn texture_usages(usage: vk::ImageUsageFlags) -> Result<::wgpu::TextureUsages> {
    if usage.is_empty() {
        return Err(ImageError::NoUsage.into());
    }
    // The one WebGPU usage table (`vulkan::webgpu`), on wgpu's spec-valued bits.
    webgpu::texture_usage_bits(usage)
        .map(::wgpu::TextureUsages::from_bits_retain)
        .map_err(|usage| WgpuError::ImageUsageNotInWgpu { usage }.into())
}

/// The wgpu dimension and depth-or-layers of `desc`, or why wgpu cannot take it as it is.
fn texture_shape(desc: &ImageDesc) -> Result<(::wgpu::TextureDimension, u32)> {
    use ::wgpu::TextureDimension as D;
    let refuse = |reason| -> Error {
        WgpuError::NotTexture {
            format: desc.format,
            reason,
        }
        .into()
    };
    match desc.kind {
        ImageKind::D2 => Ok((D::D2, 1)),
        // Created CUBE_COMPATIBLE: wgpu's cube views of it are valid.
        ImageKind::Cube => Ok((D::D2, 6)),
        ImageKind::D2Array { layers } => {
            if layers % 6 == 0 && desc.extent.width == desc.extent.height {
                // wgpu allows cube views of such a texture (wgpu-hal creates it
                // CUBE_COMPATIBLE); the VkImage is not, so such a view would be invalid.
                Err(refuse(NotTextureReason::CubeViewableArray { layers }))
            } else {
                Ok((D::D2, layers))
            }
        }
        ImageKind::D3 { depth } => {
            if desc.usage.contains(vk::ImageUsageFlags::COLOR_ATTACHMENT) {
                // wgpu renders into 3D slices through 2D views: wgpu-hal creates such images
                // 2D_ARRAY_COMPATIBLE, which cuvk's are not.
                Err(refuse(NotTextureReason::RenderTarget3d))
            } else {
                Ok((D::D3, depth))
            }
        }
    }
}

/// The `wgpu::Texture` that a Vulkan image wraps and the `VkImage` it is, for
/// [`WgpuDevice::acquire_images`] and [`WgpuDevice::release_images`].
pub type TextureImage<'a> = (&'a ::wgpu::Texture, &'a dyn AsVkImage);

impl WgpuDevice {
    /// The `wgpu::TextureDescriptor` of an image of `desc`, checked: the format maps
    /// ([`texture_format`]) and its wgpu features are enabled, the usage maps
    /// ([`texture_usages`]) and the format allows it on this device, the shape
    /// ([`WgpuError::NotTexture`] for square 6k-layer arrays and 3D render attachments).
    pub fn texture_descriptor<'a>(
        &self,
        desc: &ImageDesc,
        label: Option<&'a str>,
    ) -> Result<::wgpu::TextureDescriptor<'a>> {
        let format = texture_format(desc.format)?;
        let usage = texture_usages(desc.usage)?;
        let (dimension, depth_or_array_layers) = texture_shape(desc)?;
        let features = self.device().features();
        let missing = format.required_features() - features;
        if !missing.is_empty() {
            return Err(WgpuError::NotTexture {
                format: desc.format,
                reason: NotTextureReason::FeaturesNotEnabled { format, missing },
            }
            .into());
        }
        let allowed = match self.adapter() {
            Some(a)
                if features
                    .contains(::wgpu::Features::TEXTURE_ADAPTER_SPECIFIC_FORMAT_FEATURES) =>
            {
                a.get_texture_format_features(format).allowed_usages
            }
            _ => format.guaranteed_format_features(features).allowed_usages,
        };
        if !allowed.contains(usage) {
            return Err(WgpuError::NotTexture {
                format: desc.format,
                reason: NotTextureReason::UsageNotAllowed {
                    format,
                    usage: usage - allowed,
                },
            }
            .into());
        }
        Ok(::wgpu::TextureDescriptor {
            label,
            size: ::wgpu::Extent3d {
                width: desc.extent.width,
                height: desc.extent.height,
                depth_or_array_layers,
            },
            mip_level_count: desc.mip_levels,
            sample_count: 1,
            dimension,
            format,
            usage,
            view_formats: &[],
        })
    }

    /// Creates an exportable image of `desc` on this device (OPTIMAL tiling, device-local,
    /// dedicated when Vulkan asks), for [`Self::wrap_image`] and for importing into another
    /// `VkDevice` ([`BoundImage::import_from`]). Its one-time transition to the shared layout
    /// (released to `VK_QUEUE_FAMILY_EXTERNAL`) is submitted on wgpu's queue (cuvk's context
    /// has none) and waited for. Checked first: [`Self::texture_descriptor`] and the device's
    /// support for the format, usage and export.
    pub fn create_exportable_image(&self, desc: &ImageDesc) -> Result<Arc<BoundImage>> {
        self.texture_descriptor(desc, None)?;
        let support = Image::validate(self.vulkan(), desc, ImageOptions::EXPORT)?;
        // SAFETY: `support` is Image::validate's answer for this device, description and
        // options; the transition is submitted before anything else can use the image (it is
        // not returned before).
        let bound = unsafe {
            BoundImage::new_untransitioned(self.vulkan(), desc, ImageOptions::EXPORT, support)
        }?;
        self.enter_shared_layout(&bound)?;
        Ok(Arc::new(bound))
    }

    /// Submits `bound`'s one-time transition on wgpu's queue and waits for it.
    fn enter_shared_layout(&self, bound: &BoundImage) -> Result<()> {
        let barrier = [bound.enter_shared_layout_barrier()];
        // SAFETY: one well-formed barrier of a live image of this device, kept alive (by the
        // caller's borrow) until the wait below.
        let cmd = unsafe {
            self.raw_commands("cuvk image to shared layout", |ctx, cmd| {
                // (A recording command buffer of this device.)
                ctx.device().cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TOP_OF_PIPE,
                    vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                    vk::DependencyFlags::empty(),
                    &[],
                    &[],
                    &barrier,
                );
                Ok(())
            })
        }?;
        // No semaphores: the transition is waited for on the host right after, so a plain
        // submission (under the queue's submit lock) suffices.
        let index = {
            let _ordered = self.submit_lock();
            self.queue().submit([cmd])
        };
        self.device()
            .poll(::wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .map_err(|e| call_failed("wgpu::Device::poll", e))?;
        Ok(())
    }

    /// Wraps a cuvk image of this device ([`Self::create_exportable_image`], or
    /// `BoundImage::import_from(wgpu.vulkan(), source)` for another device's image) as a
    /// `wgpu::Texture` of the image's usages ([`texture_usages`]): no CUDA needed. The texture
    /// holds a share of `bound` until wgpu has destroyed it, so the `VkImage` and its memory
    /// outlive wgpu's use, whoever drops first. Checked first: same device and
    /// [`Self::texture_descriptor`]. For the per-frame handoff with CUDA or another device
    /// (acquire, wgpu's work, release, in one submission), see
    /// [the `wgpu` module](crate::wgpu#images-layout-and-ownership).
    pub fn wrap_image(
        &self,
        bound: Arc<BoundImage>,
        label: Option<&str>,
    ) -> Result<::wgpu::Texture> {
        if !self.vulkan().same_device(bound.vk_image_context()) {
            return Err(wrong_device_image());
        }
        let desc = self.texture_descriptor(bound.desc(), label)?;
        let raw = bound.handle();
        // SAFETY: on this device (checked), created as `desc` says (derived from its
        // description, checked); the callback keeps it and its memory alive.
        unsafe { self.wrap_image_unchecked(raw, &desc, Box::new(move || drop(bound))) }
    }

    /// Wraps without checking.
    ///
    /// # Safety
    /// `raw` is a live image of this device created as `desc` says (no `MUTABLE_FORMAT`),
    /// bound to memory, in [`SHARED_LAYOUT`](crate::vulkan::SHARED_LAYOUT) once the work submitted so far on wgpu's queue has
    /// run, and kept alive with its memory until `keep` runs.
    unsafe fn wrap_image_unchecked(
        &self,
        raw: vk::Image,
        desc: &::wgpu::TextureDescriptor<'_>,
        keep: Box<dyn FnOnce() + Send + Sync + 'static>,
    ) -> Result<::wgpu::Texture> {
        let hal_desc = crate::wgpu_hal_texture_descriptor!(wgpu, desc);
        // SAFETY: the hal device is only used to wrap the image.
        let hal_device = unsafe { self.device().as_hal::<Vk>() };
        let hal_texture = hal_device.map(|d| {
            // SAFETY: the caller vouches for `raw`, its description and its lifetime; the
            // memory is not wgpu's (External); no view formats.
            unsafe {
                d.texture_from_raw(
                    raw,
                    &hal_desc,
                    Some(keep),
                    hal::vulkan::TextureMemory::External,
                )
            }
        });
        // A WgpuDevice is always Vulkan (checked when it was made): `keep` went with the
        // closure otherwise, and ran when it was dropped.
        let Some(hal_texture) = hal_texture else {
            return Err(wrong_backend(self.device(), WgpuObject::Device));
        };
        // SAFETY: created on this device from a live, bound image (initialised: wgpu never
        // clears it) as `desc` says; GENERAL is its actual layout in queue order, which
        // STORAGE_READ_WRITE denotes for colour formats (wgpu-hal derive_image_layout).
        Ok(unsafe {
            self.device().create_texture_from_hal::<Vk>(
                hal_texture,
                desc,
                ::wgpu::TextureUses::STORAGE_READ_WRITE,
            )
        })
    }

    /// Checks that each texture wraps its image on this device.
    fn check_pairs(&self, images: &[TextureImage<'_>]) -> Result<()> {
        for (texture, image) in images {
            if !self.vulkan().same_device(image.vk_image_context()) {
                return Err(wrong_device_image());
            }
            // SAFETY: the handle is only read and compared.
            let raw = unsafe { texture.as_hal::<Vk>() }.map(|t| unsafe { t.raw_handle() });
            if raw != Some(image.vk_image()) {
                return Err(WgpuError::TextureNotPaired.into());
            }
        }
        Ok(())
    }

    /// A command buffer that acquires `images` from `VK_QUEUE_FAMILY_EXTERNAL` (CUDA, another
    /// device) for wgpu's queue, in [`SHARED_LAYOUT`](crate::vulkan::SHARED_LAYOUT), after `wait_stage` (the stage of the
    /// semaphore wait that orders it after the other side). Submit it first, then wgpu's
    /// command buffers using the textures, then [`Self::release_images`], all in one
    /// submission. Images not shared (not external) need no acquire: refused.
    ///
    /// # Safety
    /// The command buffer holds raw barriers on the images' `VkImage`s, which wgpu does not
    /// track: the textures (and the [`crate::SharedImage`]s / [`BoundImage`]s behind them) must
    /// stay alive until the submission that carries it has completed — e.g. by using the
    /// textures in the same submission, as the other command buffers of it do.
    pub unsafe fn acquire_images(
        &self,
        images: &[TextureImage<'_>],
        wait_stage: vk::PipelineStageFlags,
    ) -> Result<::wgpu::CommandBuffer> {
        self.check_pairs(images)?;
        let family = self.vulkan().queue_family_index();
        let barriers = ownership_barriers(images, family, OwnershipTransfer::Acquire)?;
        let stages = (wait_stage, vk::PipelineStageFlags::ALL_COMMANDS);
        // SAFETY: ownership barriers of live images of this device (checked); the caller keeps
        // them alive until the submission completes (this function's contract).
        unsafe { self.raw_image_barriers("cuvk acquire images", stages, &barriers) }
    }

    /// The two command buffers that hand `images` back to `VK_QUEUE_FAMILY_EXTERNAL` after
    /// wgpu's use: a wgpu-tracked transition of each texture to [`SHARED_LAYOUT`](crate::vulkan::SHARED_LAYOUT), then the
    /// ownership release. Submit them after wgpu's command buffers, in the same submission as
    /// [`Self::acquire_images`].
    ///
    /// # Safety
    /// As [`Self::acquire_images`]: the images must outlive the submission that carries the
    /// release.
    pub unsafe fn release_images(
        &self,
        images: &[TextureImage<'_>],
    ) -> Result<[::wgpu::CommandBuffer; 2]> {
        self.check_pairs(images)?;
        let family = self.vulkan().queue_family_index();
        let barriers = ownership_barriers(images, family, OwnershipTransfer::Release)?;
        let mut encoder = self
            .device()
            .create_command_encoder(&::wgpu::CommandEncoderDescriptor {
                label: Some("cuvk images to shared layout"),
            });
        let transitions: Vec<::wgpu::TextureTransition<&::wgpu::Texture>> = images
            .iter()
            .map(|(t, _)| ::wgpu::TextureTransition {
                texture: *t,
                selector: None,
                state: ::wgpu::TextureUses::STORAGE_READ_WRITE,
            })
            .collect();
        encoder.transition_resources(std::iter::empty(), transitions.into_iter());
        let to_general = encoder.finish();
        let stages = (
            vk::PipelineStageFlags::ALL_COMMANDS,
            vk::PipelineStageFlags::BOTTOM_OF_PIPE,
        );
        // SAFETY: as in acquire_images; the transition just before puts every texture in
        // GENERAL, the layout these barriers keep.
        let release = unsafe { self.raw_image_barriers("cuvk release images", stages, &barriers) }?;
        Ok([to_general, release])
    }

    /// A raw command buffer of one pipeline barrier.
    ///
    /// # Safety
    /// The barriers must name live images of this device, alive until it completes.
    unsafe fn raw_image_barriers(
        &self,
        label: &str,
        (src, dst): (vk::PipelineStageFlags, vk::PipelineStageFlags),
        barriers: &[vk::ImageMemoryBarrier<'static>],
    ) -> Result<::wgpu::CommandBuffer> {
        // SAFETY: forwarded from the caller.
        unsafe {
            self.raw_commands(label, |ctx, cmd| {
                // (A recording command buffer of this device; the caller vouches for the
                // images.)
                ctx.device().cmd_pipeline_barrier(
                    cmd,
                    src,
                    dst,
                    vk::DependencyFlags::empty(),
                    &[],
                    &[],
                    barriers,
                );
                Ok(())
            })
        }
    }
}

/// [`Error::WrongDevice`] for an image of another device.
fn wrong_device_image() -> Error {
    Error::WrongDevice {
        object: DeviceObject::Image,
        owner: DeviceOwner::WgpuDevice,
    }
}

/// The ownership barriers of `images` (cuvk's protocol, `vulkan::ownership_barriers`), refused
/// for an image whose memory is not shared.
fn ownership_barriers(
    images: &[TextureImage<'_>],
    family: u32,
    transfer: OwnershipTransfer,
) -> Result<Vec<vk::ImageMemoryBarrier<'static>>> {
    if images
        .iter()
        .any(|(_, image)| !image.vk_image_is_external())
    {
        return Err(WgpuError::ImageNotShared.into());
    }
    Ok(crate::vulkan::ownership_barriers(
        images.iter().map(|&(_, image)| image),
        family,
        transfer,
    ))
}

/// An image shared by CUDA and wgpu: one `VkImage` seen as a `wgpu::Texture` and as a
/// [`SharedImage`] (CUDA mipmapped array, surfaces, textures).
///
/// Drop in any order: the wgpu texture keeps the `VkImage`, its memory and the CUDA array
/// alive until wgpu is done with it; the shared image keeps its own shares. The CUDA mapping
/// never outlives the memory (the array holds the import, which holds the memory). The two
/// APIs do not order their accesses by themselves: each frame that uses the texture in wgpu
/// submits [`WgpuDevice::acquire_images`], wgpu's command buffers and
/// [`WgpuDevice::release_images`] in one submission, ordered with CUDA by semaphores (see
/// [the `wgpu` module](crate::wgpu#images-layout-and-ownership)).
pub struct WgpuSharedImage {
    /// The wgpu view, for views, bind groups, render passes and copies.
    pub wgpu: ::wgpu::Texture,
    /// The CUDA view (and the Vulkan image).
    pub shared: SharedImage,
}

impl WgpuSharedImage {
    /// The pair [`WgpuDevice::acquire_images`] and [`WgpuDevice::release_images`] take.
    pub fn texture_image(&self) -> TextureImage<'_> {
        (&self.wgpu, &self.shared)
    }
}

impl WgpuBridge {
    /// Creates an image as `desc` says, shared by CUDA and wgpu: exportable, OPTIMAL tiling,
    /// transitioned to the shared layout on wgpu's queue, mapped into CUDA, wrapped as a
    /// `wgpu::Texture` of the usages `desc.usage` maps to ([`texture_usages`]). Checked before
    /// anything is created: [`WgpuDevice::texture_descriptor`] and every rule of
    /// [`crate::Bridge::create_image`].
    pub fn create_image(&self, desc: &ImageDesc) -> Result<WgpuSharedImage> {
        let wgpu = self.wgpu();
        wgpu.texture_descriptor(desc, None)?;
        let support = SharedImage::validate_desc(wgpu.vulkan(), desc)?;
        // SAFETY: `support` is the answer of the checks of Bridge::create_image for this
        // device and description, with ImageOptions::EXPORT; transitioned before it is used.
        let bound = unsafe {
            BoundImage::new_untransitioned(wgpu.vulkan(), desc, ImageOptions::EXPORT, support)
        }?;
        wgpu.enter_shared_layout(&bound)?;
        let shared = self.bridge().share_image(bound)?;
        let texture = self.wrap_shared_image(&shared, None)?;
        Ok(WgpuSharedImage {
            wgpu: texture,
            shared,
        })
    }

    /// A `wgpu::Texture` over the same `VkImage` as `shared` (made by this bridge): it keeps
    /// the image, its memory and the CUDA array alive as long as wgpu needs them, whenever
    /// `shared` is dropped.
    pub fn wrap_shared_image(
        &self,
        shared: &SharedImage,
        label: Option<&str>,
    ) -> Result<::wgpu::Texture> {
        let wgpu = self.wgpu();
        if !wgpu.vulkan().same_device(shared.vk_image_context()) {
            return Err(wrong_device_image());
        }
        let desc = wgpu.texture_descriptor(shared.desc(), label)?;
        let raw = shared.vk_image();
        let keep = (shared.mipmapped_array().clone(), shared.bound_arc().clone());
        // SAFETY: on this device (checked), created as `desc` says (derived from its
        // description, checked); the callback keeps the CUDA array, the image and its memory
        // alive (array first, then image: either order is safe).
        unsafe { wgpu.wrap_image_unchecked(raw, &desc, Box::new(move || drop(keep))) }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::FORMATS;

    #[test]
    fn every_table_format_maps_with_its_texel_size() {
        for info in FORMATS {
            let t = texture_format(info.format).unwrap();
            assert_eq!(
                t.block_copy_size(None),
                Some(info.texel_bytes()),
                "{:?}",
                info.format
            );
        }
        let e = texture_format(vk::Format::R8G8B8A8_SRGB).unwrap_err();
        assert!(e.to_string().contains("R8G8B8A8_SRGB"), "{e}");
        assert_eq!(e.kind(), crate::ErrorKind::Unsupported);
    }

    #[test]
    fn usages_map_and_unknown_ones_are_refused() {
        use vk::ImageUsageFlags as V;
        let u = texture_usages(V::SAMPLED | V::STORAGE | V::TRANSFER_DST).unwrap();
        assert_eq!(
            u,
            ::wgpu::TextureUsages::TEXTURE_BINDING
                | ::wgpu::TextureUsages::STORAGE_BINDING
                | ::wgpu::TextureUsages::COPY_DST
        );
        assert!(matches!(
            texture_usages(V::empty()),
            Err(Error::Image(ImageError::NoUsage))
        ));
        assert!(matches!(
            texture_usages(V::SAMPLED | V::INPUT_ATTACHMENT),
            Err(Error::Wgpu(WgpuError::ImageUsageNotInWgpu { usage })) if usage == V::INPUT_ATTACHMENT
        ));
    }

    /// The WebGPU table (`vulkan::webgpu`) works on raw bits: wgpu 30's must be the spec's.
    #[test]
    fn wgpu_usage_bits_are_the_tables() {
        use crate::vulkan::webgpu::{same_bits, BUFFER_BITS, TEXTURE_BITS};
        let b = ::wgpu::BufferUsages::all()
            .iter_names()
            .map(|(n, f)| (n, f.bits()));
        assert!(same_bits(&BUFFER_BITS, b));
        let t = ::wgpu::TextureUsages::all()
            .iter_names()
            .map(|(n, f)| (n, f.bits()));
        assert!(same_bits(&TEXTURE_BITS, t));
    }
}
