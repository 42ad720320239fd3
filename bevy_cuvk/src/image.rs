//! [`CuvkImage`]: one Vulkan image that is a Bevy `Image` (sprites, materials, UI sample it)
//! and a CUDA array (surfaces, textures, inline image handles: [`InlineImage`]), and
//! [`CuvkImages`], which puts it behind a `Handle<Image>` and hands it between CUDA and Bevy
//! each frame.

use std::collections::HashMap;
use std::sync::Arc;

use bevy::asset::AssetId;
use bevy::image::Image;
use bevy::log::error;
use bevy::prelude::{Res, ResMut, Resource};
use bevy::render::render_asset::RenderAssets;
use bevy::render::render_resource::{Texture, TextureView};
use bevy::render::renderer::RenderContext;
use bevy::render::texture::{DefaultImageSampler, GpuImage};
use cuvk::ash::vk;
use cuvk::vulkan::{
    ownership_barriers, webgpu, AsVkImage, BoundImage, ImageOptions, InlineImageHandle,
    InlineTextureDesc, KernelArg, OwnershipTransfer, ViewLayers,
};
use cuvk::{ImageDesc, SharedImage};
use wgpu::hal;

use crate::late::{LateDrop, LateWork};
use crate::{CuvkDevice, CuvkError};

/// A texture descriptor as Bevy's `GpuImage` keeps it.
type StaticTextureDescriptor =
    wgpu::wgt::TextureDescriptor<Option<&'static str>, &'static [wgpu::TextureFormat]>;

/// The Vulkan format of a wgpu format CUDA can share (cuvk's format table, the formats a
/// simulation writes). `None`: not shareable (sRGB, depth, compressed, packed formats).
pub fn vk_format(format: wgpu::TextureFormat) -> Option<vk::Format> {
    use vk::Format as F;
    use wgpu::TextureFormat as T;
    Some(match format {
        T::R8Unorm => F::R8_UNORM,
        T::Rg8Unorm => F::R8G8_UNORM,
        T::Rgba8Unorm => F::R8G8B8A8_UNORM,
        T::Bgra8Unorm => F::B8G8R8A8_UNORM,
        T::R8Uint => F::R8_UINT,
        T::Rgba8Uint => F::R8G8B8A8_UINT,
        T::R16Float => F::R16_SFLOAT,
        T::Rg16Float => F::R16G16_SFLOAT,
        T::Rgba16Float => F::R16G16B16A16_SFLOAT,
        T::R32Uint => F::R32_UINT,
        T::Rg32Uint => F::R32G32_UINT,
        T::Rgba32Uint => F::R32G32B32A32_UINT,
        T::R32Sint => F::R32_SINT,
        T::R32Float => F::R32_SFLOAT,
        T::Rg32Float => F::R32G32_SFLOAT,
        T::Rgba32Float => F::R32G32B32A32_SFLOAT,
        _ => return None,
    })
}

/// The Vulkan usage of a shared image Bevy uses with `usage`: always storage (CUDA surfaces
/// and inline surface handles need it) and copies, plus what `usage` asks for.
fn vk_usage(usage: wgpu::TextureUsages) -> vk::ImageUsageFlags {
    vk::ImageUsageFlags::STORAGE
        | vk::ImageUsageFlags::TRANSFER_SRC
        | vk::ImageUsageFlags::TRANSFER_DST
        | webgpu::vk_image_usage(usage.bits())
}

/// A 2D image in memory CUDA and Bevy share: a Bevy [`Texture`] (what a `GpuImage` holds) and
/// a cuvk [`SharedImage`] (the CUDA mipmapped array: `shared().surface(0)` for kernels on a CUDA
/// stream, [`Self::inline_surface`] for kernels inside Bevy's queue). Clones share it. Made by
/// [`CuvkDevice::create_image`].
///
/// Ownership by construction: wgpu's texture is cuvk's own `VkImage`, wrapped with a drop
/// callback that holds the image, its memory and the CUDA array until wgpu has destroyed its
/// view of it (after the GPU work that used it), so Bevy may drop its `GpuImage`, the handle
/// or this value in any order.
///
/// Between frames the image is in `GENERAL`, owned by `VK_QUEUE_FAMILY_EXTERNAL` (where CUDA
/// may use it); registered in [`CuvkImages`], it is acquired by Bevy's queue before the
/// cameras render and released after, every frame, in Bevy's one submission.
#[derive(Clone)]
pub struct CuvkImage {
    inner: Arc<ImageInner>,
}

struct ImageInner {
    texture: Texture,
    view: TextureView,
    shared: SharedImage,
    descriptor: StaticTextureDescriptor,
    /// Where its inline handles go when dropped.
    late: Arc<LateWork>,
}

impl std::fmt::Debug for CuvkImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuvkImage")
            .field("size", &self.inner.descriptor.size)
            .field("format", &self.inner.descriptor.format)
            .finish_non_exhaustive()
    }
}

impl CuvkImage {
    /// The Bevy (wgpu) texture.
    pub fn texture(&self) -> &Texture {
        &self.inner.texture
    }
    /// A view of the whole texture.
    pub fn view(&self) -> &TextureView {
        &self.inner.view
    }
    /// The CUDA side (and the `VkImage`): `surface(0)` / `texture(..)` for kernels on a CUDA
    /// stream. For kernels inside Bevy's queue take [`Self::inline_surface`] /
    /// [`Self::inline_texture`] rather than `shared().inline_surface(..)`: the latter's handle
    /// destroys its view as soon as it drops, frames in flight or not (hand it to
    /// [`CuvkDevice::drop_after_frame`] instead of dropping it).
    pub fn shared(&self) -> &SharedImage {
        &self.inner.shared
    }
    /// Width and height in texels.
    pub fn size(&self) -> (u32, u32) {
        let s = self.inner.descriptor.size;
        (s.width, s.height)
    }
    /// The texture's format.
    pub fn format(&self) -> wgpu::TextureFormat {
        self.inner.descriptor.format
    }
    /// A surface handle of the image for CUDA kernels inside Bevy's queue: the kernel's
    /// `cudaSurfaceObject_t` (`surf2Dwrite(value, surface, x * texel_bytes, y)`: x in bytes),
    /// passed as [`InlineImage::kernel_arg`] to [`crate::InlineKernel::record`]. Every shared
    /// image has Vulkan `STORAGE` usage, whatever `usage` it was created with. Needs inline
    /// kernels ([`crate::CuvkStatus::Ready`]'s `inline_kernels`; else [`CuvkError::Shared`]
    /// with cuvk's reason). Make it once and keep it with the kernel: dropping it is safe at any
    /// time, frames in flight or not (see [`InlineImage`]).
    pub fn inline_surface(&self) -> Result<InlineImage, CuvkError> {
        let handle = self
            .inner
            .shared
            .inline_surface(0, ViewLayers::All)
            .map_err(|source| CuvkError::Shared { source })?;
        Ok(InlineImage::new(handle, &self.inner.late))
    }

    /// A texture handle of the image, sampled as `desc` says, for CUDA kernels inside Bevy's
    /// queue: the kernel's `cudaTextureObject_t` (`tex2D<float4>(texture, x, y)`). Needs an
    /// image created with `TextureUsages::TEXTURE_BINDING` (Vulkan `SAMPLED`) and inline kernels
    /// ([`CuvkError::Shared`] otherwise); dropped as [`Self::inline_surface`]'s.
    pub fn inline_texture(&self, desc: &InlineTextureDesc) -> Result<InlineImage, CuvkError> {
        let handle = self
            .inner
            .shared
            .inline_texture(desc)
            .map_err(|source| CuvkError::Shared { source })?;
        Ok(InlineImage::new(handle, &self.inner.late))
    }

    /// The `GpuImage` Bevy's pipelines use for this image, sampled with `sampler` ([`CuvkImages`]
    /// publishes it with Bevy's default image sampler).
    pub fn gpu_image(&self, sampler: bevy::render::render_resource::Sampler) -> GpuImage {
        GpuImage {
            texture: self.inner.texture.clone(),
            texture_view: self.inner.view.clone(),
            sampler,
            texture_descriptor: self.inner.descriptor.clone(),
            texture_view_descriptor: None,
            had_data: true,
        }
    }
}

/// An image handle of a [`CuvkImage`] for CUDA kernels inside Bevy's queue
/// ([`CuvkImage::inline_surface`], [`CuvkImage::inline_texture`]): cuvk's
/// [`InlineImageHandle`] (it reads as one; [`Self::kernel_arg`] is the kernel's
/// `cudaSurfaceObject_t` / `cudaTextureObject_t` argument), whose drop the plugin defers.
///
/// A command buffer that launched a kernel with the handle names its image view until the GPU
/// has run it, which is after the frame that recorded it. Dropped — in a system, with a
/// resource, or with the app while frames are still in flight — the handle goes to the plugin,
/// which destroys the view (and sampler) once the GPU has run everything submitted by the end
/// of that frame, as it does for dropped buffers and kernels; dropped after the last frame
/// (the app ending), once Bevy's queue has finished, waited for within the context's drop
/// timeout. So it may be dropped at any time; the image itself stays alive while the handle
/// does.
pub struct InlineImage {
    handle: LateDrop<InlineImageHandle>,
}

impl InlineImage {
    fn new(handle: InlineImageHandle, late: &Arc<LateWork>) -> Self {
        Self {
            handle: LateDrop::new(handle, late.clone()),
        }
    }

    /// The kernel argument: the handle as a 64-bit integer, what the kernel's
    /// `cudaSurfaceObject_t` / `cudaTextureObject_t` parameter takes
    /// ([`InlineImageHandle::kernel_arg`]).
    pub fn kernel_arg(&self) -> KernelArg {
        self.handle.kernel_arg()
    }
}

impl std::ops::Deref for InlineImage {
    type Target = InlineImageHandle;
    fn deref(&self) -> &InlineImageHandle {
        &self.handle
    }
}

impl std::fmt::Debug for InlineImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("InlineImage").field(&*self.handle).finish()
    }
}

impl CuvkDevice {
    /// A `width` x `height` image of `format` shared by CUDA and Bevy, which Bevy uses with
    /// `usage` (sampling, storage, copies, render attachment). Checked before anything is made:
    /// the format is one CUDA shares ([`vk_format`], else [`CuvkError::ImageFormat`]) and cuvk's
    /// rules for the device ([`CuvkError::Shared`] with the rule).
    ///
    /// `usage` is what Bevy's (wgpu's) side may do with the texture; CUDA needs none of it. The
    /// `VkImage` always has `STORAGE` (what CUDA surfaces and [`CuvkImage::inline_surface`]
    /// write through) and transfer usage, so a kernel may write an image created with
    /// `TextureUsages::TEXTURE_BINDING` alone. Ask for:
    ///
    /// - `TEXTURE_BINDING` where Bevy samples it (sprites, materials, UI) and for
    ///   [`CuvkImage::inline_texture`] (Vulkan `SAMPLED`);
    /// - `STORAGE_BINDING` only where a WGSL pass binds it as a storage texture;
    /// - `COPY_SRC` / `COPY_DST` for wgpu copies from / to it;
    /// - `RENDER_ATTACHMENT` to render into it.
    ///
    /// Its first transition (to `GENERAL`, released to CUDA) is submitted on Bevy's queue and
    /// waited for before this returns, so CUDA may write it at once. Call it in the render
    /// world outside the render graph — in a `Render` system before `RenderSystems::Render`
    /// once [`CuvkDevice`] is there (the plugin inserts it at `RenderStartup`) — and register
    /// it in [`CuvkImages`] before `RenderSystems::PrepareAssets` of the frame that first draws
    /// it (a frame registered later draws from the next one on).
    pub fn create_image(
        &self,
        width: u32,
        height: u32,
        format: wgpu::TextureFormat,
        usage: wgpu::TextureUsages,
    ) -> Result<CuvkImage, CuvkError> {
        let Some(vk_format) = vk_format(format) else {
            return Err(CuvkError::ImageFormat {
                format: format!("{format:?}"),
            });
        };
        let shared_err = |source| CuvkError::Shared { source };
        let desc = ImageDesc::d2(vk_format, width, height, vk_usage(usage));
        let vulkan = self.vulkan();
        let support = SharedImage::validate_desc(vulkan, &desc).map_err(shared_err)?;
        // SAFETY: `support` is the answer of SharedImage's checks for this device and
        // description (ImageOptions::EXPORT); nothing uses the image before the first
        // transition below has run (it is waited for before the image is returned).
        let bound =
            unsafe { BoundImage::new_untransitioned(vulkan, &desc, ImageOptions::EXPORT, support) }
                .map_err(shared_err)?;
        let shared = self.bridge().share_image(bound).map_err(shared_err)?;
        let descriptor = StaticTextureDescriptor {
            label: Some("cuvk shared image"),
            size: wgpu::Extent3d {
                width,
                height,
                depth_or_array_layers: 1,
            },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format,
            usage,
            view_formats: &[],
        };
        let texture = self.wrap(&shared, &descriptor)?;
        self.first_transition(&texture, &shared)?;
        let view = texture.create_view(&wgpu::TextureViewDescriptor::default());
        Ok(CuvkImage {
            inner: Arc::new(ImageInner {
                texture: Texture::from(texture),
                view: TextureView::from(view),
                shared,
                descriptor,
                late: self.late().clone(),
            }),
        })
    }

    /// One submission on Bevy's queue, waited for: wgpu's tracked transition of the new
    /// texture to `GENERAL` (from `UNDEFINED`: wgpu tracks it as UNINITIALIZED), then its
    /// release to `VK_QUEUE_FAMILY_EXTERNAL`. On a failed wait the texture (which holds the
    /// image through its drop callback) is destroyed by wgpu only after that submission.
    fn first_transition(
        &self,
        texture: &wgpu::Texture,
        shared: &SharedImage,
    ) -> Result<(), CuvkError> {
        let mut encoder =
            self.wgpu_device()
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("cuvk image to GENERAL"),
                });
        encoder.transition_resources(
            std::iter::empty(),
            std::iter::once(wgpu::TextureTransition {
                texture,
                selector: None,
                state: wgpu::TextureUses::STORAGE_READ_WRITE,
            }),
        );
        let family = self.vulkan().queue_family_index();
        let release = ownership_barriers(
            [shared as &dyn AsVkImage],
            family,
            OwnershipTransfer::Release,
        );
        let vk_device = self.vulkan().device().clone();
        // SAFETY: one release barrier of a live image of this device (the texture submitted
        // with it keeps the image alive until the submission completed), in GENERAL after the
        // wgpu transition submitted just before it.
        let release = unsafe {
            self.record_vulkan(|cmd| {
                vk_device.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::ALL_COMMANDS,
                    vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                    vk::DependencyFlags::empty(),
                    &[],
                    &[],
                    &release,
                );
                Ok(())
            })
        }?;
        let index = self.wgpu_queue().submit([encoder.finish(), release]);
        self.wgpu_device()
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: Some(self.vulkan().drop_timeout()),
            })
            .map_err(|e| CuvkError::Alias {
                reason: format!("waiting for the image's first transition: {e}"),
            })?;
        Ok(())
    }

    /// wgpu's texture over `shared`'s `VkImage`, keeping the image, memory and CUDA array
    /// alive until wgpu drops it; wgpu is told it is in `GENERAL` (STORAGE_READ_WRITE).
    fn wrap(
        &self,
        shared: &SharedImage,
        desc: &StaticTextureDescriptor,
    ) -> Result<wgpu::Texture, CuvkError> {
        let hal_desc = cuvk::wgpu_hal_texture_descriptor!(wgpu, desc);
        let keep = (shared.mipmapped_array().clone(), shared.bound_arc().clone());
        let raw = shared.vk_image();
        // SAFETY: the hal device is only used to wrap the image.
        let hal_device = unsafe { self.wgpu_device().as_hal::<hal::api::Vulkan>() };
        let Some(hal_device) = hal_device else {
            return Err(CuvkError::NotVulkan {
                backend: self
                    .wgpu_device()
                    .adapter_info()
                    .backend
                    .to_str()
                    .to_owned(),
            });
        };
        // SAFETY: `raw` is a live image of this device, created as `hal_desc` says (2D, one
        // level and layer, the format and at least the usages), no MUTABLE_FORMAT and no view
        // formats; the callback keeps it and its memory alive (External: not wgpu's).
        let hal_texture = unsafe {
            hal_device.texture_from_raw(
                raw,
                &hal_desc,
                Some(Box::new(move || drop(keep))),
                hal::vulkan::TextureMemory::External,
            )
        };
        drop(hal_device);
        // SAFETY: created on this device from a live, bound image as `desc` says; wgpu 29
        // marks it initialised (never clears it) and starts tracking it as UNINITIALIZED,
        // which `first_transition` turns into GENERAL before any other use.
        Ok(unsafe {
            self.wgpu_device()
                .create_texture_from_hal::<hal::api::Vulkan>(hal_texture, desc)
        })
    }
}

/// The images of the app that are shared with CUDA, by the `Handle<Image>` Bevy knows them
/// as: a render-world resource the plugin adds. Insert a [`CuvkImage`] under an image asset's
/// id: from then on that handle's `GpuImage` is the shared image, for sprites, materials and
/// UI, and the plugin acquires it for Bevy's queue before the cameras render and releases it
/// to CUDA after, every frame ([`crate::CuvkSystems`]).
///
/// Make the asset in the main world with the image's size and format and
/// `RenderAssetUsages::MAIN_WORLD` (e.g. `Image::new_uninit`): Bevy then makes no `GpuImage`
/// of its own for it, so what uses the handle waits until the shared image is there (Bevy's
/// sprites, materials and UI cache bind groups per image and would otherwise keep Bevy's).
///
/// # Sampler
///
/// The `GpuImage` the plugin puts under the handle samples with Bevy's default image sampler
/// (the render world's `DefaultImageSampler`: `ImagePlugin::default_sampler`, linear unless
/// the app adds `ImagePlugin::default_nearest()`, clamped to the edge). The `Image` asset's own
/// `sampler` field is not used: with `RenderAssetUsages::MAIN_WORLD` the asset never reaches
/// the render world. For another sampler in a pass of your own, bind [`CuvkImage::view`] with
/// it, or make the `GpuImage` with [`CuvkImage::gpu_image`].
#[derive(Resource, Default)]
pub struct CuvkImages {
    images: HashMap<AssetId<Image>, CuvkImage>,
    /// The ids whose `GpuImage` the plugin put in place (removed with the registration).
    published: Vec<AssetId<Image>>,
}

impl CuvkImages {
    /// Shares `image` under `id` (replacing one already there, returned).
    pub fn insert(&mut self, id: impl Into<AssetId<Image>>, image: CuvkImage) -> Option<CuvkImage> {
        self.images.insert(id.into(), image)
    }
    /// Stops sharing under `id`: the plugin removes the shared `GpuImage` at the next frame.
    pub fn remove(&mut self, id: impl Into<AssetId<Image>>) -> Option<CuvkImage> {
        self.images.remove(&id.into())
    }
    /// The image under `id`.
    pub fn get(&self, id: impl Into<AssetId<Image>>) -> Option<&CuvkImage> {
        self.images.get(&id.into())
    }
    /// Every shared image.
    pub fn iter(&self) -> impl Iterator<Item = (&AssetId<Image>, &CuvkImage)> {
        self.images.iter()
    }
}

/// `PrepareAssets`, after Bevy prepared its images: each shared image's `GpuImage` is the
/// shared texture (re-inserted whenever Bevy replaced it).
pub(crate) fn publish_gpu_images(
    images: Option<ResMut<CuvkImages>>,
    gpu_images: Option<ResMut<RenderAssets<GpuImage>>>,
    sampler: Option<Res<DefaultImageSampler>>,
) {
    // (Absent without Bevy's ImagePlugin: then nothing samples images anyway.)
    let (Some(mut images), Some(mut gpu_images), Some(sampler)) = (images, gpu_images, sampler)
    else {
        return;
    };
    let images = &mut *images;
    for (id, image) in images.images.iter() {
        let current = gpu_images.get(*id).map(|g| g.texture.id());
        if current != Some(image.texture().id()) {
            gpu_images.insert(*id, image.gpu_image((**sampler).clone()));
        }
    }
    let registered = &images.images;
    images.published.retain(|id| {
        let keep = registered.contains_key(id);
        if !keep {
            gpu_images.remove(*id);
        }
        keep
    });
    images.published.extend(
        registered
            .keys()
            .copied()
            .filter(|id| !images.published.contains(id))
            .collect::<Vec<_>>(),
    );
}

/// Records one raw pipeline barrier of `barriers` into a command buffer for the render graph.
fn add_barriers(
    ctx: &mut RenderContext,
    device: &CuvkDevice,
    (src_stage, dst_stage): (vk::PipelineStageFlags, vk::PipelineStageFlags),
    barriers: &[vk::ImageMemoryBarrier<'static>],
) {
    let vk_device = device.vulkan().device().clone();
    // SAFETY: barriers of live images of this device (checked by the callers; AcquiredImages
    // or the caller holds them until the submission, and their textures' drop callbacks keep
    // them alive until wgpu has destroyed the textures, after every submission using them).
    let recorded = unsafe {
        device.record_vulkan(|cmd| {
            vk_device.cmd_pipeline_barrier(
                cmd,
                src_stage,
                dst_stage,
                vk::DependencyFlags::empty(),
                &[],
                &[],
                barriers,
            );
            Ok(())
        })
    };
    match recorded {
        Ok(commands) => ctx.add_command_buffer(commands),
        Err(e) => error!("cuvk: recording the shared images' barriers failed: {e}"),
    }
}

/// The shared images acquired for Bevy's queue this frame (each `VkImage` once): what the
/// release gives back, whatever happened to [`CuvkImages`] in between. Holding them keeps the
/// images alive until their barriers were submitted.
#[derive(Resource, Default)]
pub(crate) struct AcquiredImages(Vec<CuvkImage>);

/// Render graph, before the cameras: the shared images, from CUDA (`EXTERNAL`) to Bevy's queue.
pub(crate) fn acquire_images(
    mut ctx: RenderContext,
    images: Option<Res<CuvkImages>>,
    device: Option<Res<CuvkDevice>>,
    mut acquired: ResMut<AcquiredImages>,
) {
    acquired.0.clear();
    let (Some(images), Some(device)) = (images, device) else {
        return;
    };
    for (_, image) in images.iter() {
        let raw = image.shared().vk_image();
        let ours = device
            .vulkan()
            .same_device(image.shared().bound().image().context());
        if ours && !acquired.0.iter().any(|a| a.shared().vk_image() == raw) {
            acquired.0.push(image.clone());
        }
    }
    if acquired.0.is_empty() {
        return;
    }
    let family = device.vulkan().queue_family_index();
    let barriers = ownership_barriers(
        acquired.0.iter().map(|i| i.shared() as &dyn AsVkImage),
        family,
        OwnershipTransfer::Acquire,
    );
    let stages = (
        vk::PipelineStageFlags::TOP_OF_PIPE,
        vk::PipelineStageFlags::ALL_COMMANDS,
    );
    add_barriers(&mut ctx, &device, stages, &barriers);
}

/// Render graph, after the cameras: a wgpu-tracked transition of each image acquired this
/// frame back to `GENERAL`, then its release to CUDA (`EXTERNAL`).
pub(crate) fn release_images(
    mut ctx: RenderContext,
    device: Option<Res<CuvkDevice>>,
    mut acquired: ResMut<AcquiredImages>,
) {
    let Some(device) = device else { return };
    let images = std::mem::take(&mut acquired.0);
    if images.is_empty() {
        return;
    }
    let transitions: Vec<wgpu::TextureTransition<&wgpu::Texture>> = images
        .iter()
        .map(|image| wgpu::TextureTransition {
            texture: &**image.texture(),
            selector: None,
            state: wgpu::TextureUses::STORAGE_READ_WRITE,
        })
        .collect();
    ctx.command_encoder()
        .transition_resources(std::iter::empty(), transitions.into_iter());
    let family = device.vulkan().queue_family_index();
    let barriers = ownership_barriers(
        images.iter().map(|i| i.shared() as &dyn AsVkImage),
        family,
        OwnershipTransfer::Release,
    );
    let stages = (
        vk::PipelineStageFlags::ALL_COMMANDS,
        vk::PipelineStageFlags::BOTTOM_OF_PIPE,
    );
    add_barriers(&mut ctx, &device, stages, &barriers);
}
#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn every_shareable_format_is_in_cuvks_table_with_its_texel_size() {
        use wgpu::TextureFormat as T;
        let all = [
            T::R8Unorm,
            T::Rg8Unorm,
            T::Rgba8Unorm,
            T::Bgra8Unorm,
            T::R8Uint,
            T::Rgba8Uint,
            T::R16Float,
            T::Rg16Float,
            T::Rgba16Float,
            T::R32Uint,
            T::Rg32Uint,
            T::Rgba32Uint,
            T::R32Sint,
            T::R32Float,
            T::Rg32Float,
            T::Rgba32Float,
        ];
        for format in all {
            let vk = vk_format(format).unwrap_or_else(|| panic!("{format:?} not mapped"));
            let info = cuvk::FORMATS
                .iter()
                .find(|f| f.format == vk)
                .unwrap_or_else(|| panic!("{vk:?} not in cuvk's table"));
            assert_eq!(
                Some(info.texel_bytes()),
                format.block_copy_size(None),
                "{format:?}"
            );
        }
        for refused in [
            T::Rgba8UnormSrgb,
            T::Depth32Float,
            T::Bc1RgbaUnorm,
            T::Rgb10a2Unorm,
        ] {
            assert_eq!(vk_format(refused), None, "{refused:?}");
        }
    }

    #[test]
    fn shared_images_always_have_storage_and_copies() {
        let flags = vk_usage(wgpu::TextureUsages::TEXTURE_BINDING);
        assert!(flags.contains(
            vk::ImageUsageFlags::STORAGE
                | vk::ImageUsageFlags::SAMPLED
                | vk::ImageUsageFlags::TRANSFER_SRC
                | vk::ImageUsageFlags::TRANSFER_DST
        ));
        assert!(!flags.contains(vk::ImageUsageFlags::COLOR_ATTACHMENT));
        assert_eq!(
            cuvk::wgpu_hal_texture_uses!(
                wgpu,
                wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_SRC
            ),
            wgpu::TextureUses::RESOURCE | wgpu::TextureUses::COPY_SRC
        );
    }

    /// cuvk's WebGPU table works on raw bits: wgpu 29's must be the spec's.
    #[test]
    fn wgpu_29_usage_bits_are_cuvks_table() {
        use cuvk::vulkan::webgpu::{same_bits, BUFFER_BITS, TEXTURE_BITS};
        let b = wgpu::BufferUsages::all()
            .iter_names()
            .map(|(n, f)| (n, f.bits()));
        assert!(same_bits(&BUFFER_BITS, b));
        let t = wgpu::TextureUsages::all()
            .iter_names()
            .map(|(n, f)| (n, f.bits()));
        assert!(same_bits(&TEXTURE_BITS, t));
    }
}
