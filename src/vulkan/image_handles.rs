//! Images in CUDA kernels inside Vulkan queues (`VK_NVX_image_view_handle`): an image view
//! (and, for a texture, a sampler) made for one mip level of an image, and the handle
//! `vkGetImageViewHandleNVX` returns for it, which such a kernel takes as its
//! `cudaSurfaceObject_t` / `cudaTextureObject_t` ([`KernelArg::image`]).
//!
//! CUDA surface and texture objects belong to a CUDA context and cannot reach a kernel launched
//! with `vkCmdCuLaunchKernelNVX`. The Vulkan driver's own image handles can. Measured on an
//! H200 (driver 580, `VK_NVX_image_view_handle` revision 3, `VK_NVX_binary_import` revision 2):
//!
//! - the 32-bit handle, zero-extended to a 64-bit kernel parameter, works in plain modules
//!   ([`crate::vulkan::CuModule::from_ptx`]): descriptor type `STORAGE_IMAGE` as a surface
//!   (`surf2Dwrite` / `surf2Dread`, PTX `sust` / `suld`, x in bytes), `COMBINED_IMAGE_SAMPLER`
//!   (with a `VkSampler`, normalized and unnormalized coordinates) as a texture (`tex2D`), and
//!   `SAMPLED_IMAGE` as a texture with a default normalized sampler. Every texel exact (1024²,
//!   `R32_UINT`, `R8G8B8A8_UNORM`, `R32_SFLOAT`; OPTIMAL tiling, `GENERAL` layout), and a
//!   surface-write kernel ran at 0.99× a Vulkan `imageStore` compute shader;
//! - the 64-bit handle (`vkGetImageViewHandle64NVX`, revision 3) worked on the H200 for
//!   surfaces and normalized samplers only in modules created with `use64bitTexturing`, and
//!   called on an H100 with the same driver it crashed the process; cuvk neither loads nor
//!   needs it: kernel arguments carry the 32-bit handle.
//!
//! The kernel reads and writes the image as it is: it must be in a layout that allows storage
//! and sampled access ([`crate::vulkan::SHARED_LAYOUT`], `GENERAL`) and owned by the queue's
//! family while the kernel runs (acquired as for any Vulkan use: [`crate::vulkan::cmd_acquire_images`]
//! with `GENERAL`, then released), and ordered with other commands by barriers with the
//! `COMPUTE_SHADER` stage ([`crate::vulkan::record_kernel_barrier`]).
//!
//! An [`InlineImageHandle`] owns its view and sampler and keeps the image alive, so dropping the
//! image (or the [`crate::SharedImage`]) while a handle lives is safe: the handle still works.
//! Launches are `unsafe` ([`crate::vulkan::CuFunction::record_launch`]): keeping the handle
//! alive until every command buffer that launched with it has completed is part of their
//! contract, as it is for device addresses.

use std::any::Any;
use std::sync::Arc;

use ash::vk;

use crate::error::{Capability, Error, ExtensionState, InlineKernelsMissing, Result, VkResultExt};
use crate::rules::image_format::{self, FormatInfo, ImageError, ImageKind, TextureRule};
use crate::vulkan::{BoundImage, KernelArg, VulkanContext};

/// The extension's functions on one device (ash's table).
pub(crate) struct ImageViewHandleLoader {
    fns: ash::nvx::image_view_handle::Device,
}

impl ImageViewHandleLoader {
    /// Loads the functions of a device that has `VK_NVX_image_view_handle` enabled
    /// (`vkGetImageViewHandleNVX` resolves there: checked for engines' devices by
    /// `VulkanContext::from_existing`). `vkGetImageViewHandle64NVX` (revision 3) is not
    /// loaded: called on an H100 with driver 580 it crashed the process (measured), and the
    /// 32-bit handle serves every use.
    pub(crate) fn new(instance: &ash::Instance, device: &ash::Device) -> Self {
        Self {
            fns: ash::nvx::image_view_handle::Device::new(instance, device),
        }
    }

    /// The 32-bit handle `vkGetImageViewHandleNVX` returns for `info`.
    ///
    /// # Safety
    /// `info` must be valid for `device` (the loader's): a live view of it, a live sampler of
    /// it for `COMBINED_IMAGE_SAMPLER`, the image created with the usage the descriptor type
    /// needs.
    unsafe fn handles(&self, device: vk::Device, info: &vk::ImageViewHandleInfoNVX<'_>) -> u32 {
        // SAFETY: forwarded from the caller; the extension is enabled on `device`.
        unsafe { (self.fns.fp().get_image_view_handle_nvx)(device, info) }
    }
}

/// Refuses with [`Capability::InlineKernels`] and the reason where kernels inside `ctx`'s
/// queues cannot take image handles; else the loader.
fn loader(ctx: &VulkanContext) -> Result<&ImageViewHandleLoader> {
    let missing = |reason| Err(Error::from(Capability::InlineKernels { reason }));
    let Some(loader) = &ctx.ext.image_view_handle else {
        return missing(
            match ctx.extension_state(ash::nvx::image_view_handle::NAME) {
                ExtensionState::NotSupported => InlineKernelsMissing::ImageViewHandleNotSupported,
                ExtensionState::NotEnabled => InlineKernelsMissing::ImageViewHandleNotEnabled,
            },
        );
    };
    if ctx.ext.binary_import.is_none() {
        return missing(match ctx.extension_state(ash::nvx::binary_import::NAME) {
            ExtensionState::NotSupported => InlineKernelsMissing::BinaryImportNotSupported,
            ExtensionState::NotEnabled => InlineKernelsMissing::BinaryImportNotEnabled,
        });
    }
    if !ctx.info().capabilities.buffer_device_address {
        return missing(InlineKernelsMissing::BufferDeviceAddress);
    }
    Ok(loader)
}

/// Whether kernels inside `ctx`'s Vulkan queues can take [`InlineImageHandle`]s, or why not:
/// [`Capability::InlineKernels`] with `ImageViewHandleNotSupported` /
/// `ImageViewHandleNotEnabled` (`VK_NVX_image_view_handle` missing from the device, or only
/// from the extensions enabled on it), or the reason CUDA kernels cannot run there at all.
pub fn image_handles_supported(ctx: &VulkanContext) -> Result<()> {
    loader(ctx).map(|_| ())
}

/// Which array layers of a mip level a view covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ViewLayers {
    /// Every layer: a 2D view of a 2D image, a layered (2D array) view of a 2D array or of a
    /// cube's six faces (the kernel addresses `{layer, x, y}`: `surf2DLayeredwrite`,
    /// `tex2DLayered`; a cube view for `texCubemap` is not made), a 3D view of a 3D image.
    #[default]
    All,
    /// One layer (a cube face: 0..6), as a 2D view.
    One(u32),
}

/// Texel filtering of a texture handle's sampler (as [`crate::cuda::FilterMode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SamplerFilter {
    /// The nearest texel (`VK_FILTER_NEAREST`).
    #[default]
    Point,
    /// Linear interpolation (`VK_FILTER_LINEAR`): float formats only, where the device can
    /// filter the format.
    Linear,
}

impl SamplerFilter {
    fn filter(self) -> vk::Filter {
        match self {
            SamplerFilter::Point => vk::Filter::NEAREST,
            SamplerFilter::Linear => vk::Filter::LINEAR,
        }
    }
    fn mipmap_mode(self) -> vk::SamplerMipmapMode {
        match self {
            SamplerFilter::Point => vk::SamplerMipmapMode::NEAREST,
            SamplerFilter::Linear => vk::SamplerMipmapMode::LINEAR,
        }
    }
}

/// Addressing outside the image (as [`crate::cuda::AddressMode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SamplerAddressMode {
    /// Repeat (`REPEAT`; normalized coordinates only).
    Wrap,
    /// Clamp to the edge texel (`CLAMP_TO_EDGE`).
    #[default]
    Clamp,
    /// Mirror (`MIRRORED_REPEAT`; normalized coordinates only).
    Mirror,
    /// Return the border colour (`CLAMP_TO_BORDER`).
    Border,
}

impl SamplerAddressMode {
    fn vk(self) -> vk::SamplerAddressMode {
        match self {
            SamplerAddressMode::Wrap => vk::SamplerAddressMode::REPEAT,
            SamplerAddressMode::Clamp => vk::SamplerAddressMode::CLAMP_TO_EDGE,
            SamplerAddressMode::Mirror => vk::SamplerAddressMode::MIRRORED_REPEAT,
            SamplerAddressMode::Border => vk::SamplerAddressMode::CLAMP_TO_BORDER,
        }
    }
}

/// The colour [`SamplerAddressMode::Border`] returns: one of Vulkan's fixed border colours
/// (integers for UINT / SINT formats, floats otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BorderColor {
    /// (0, 0, 0, 0).
    #[default]
    TransparentBlack,
    /// (0, 0, 0, 1).
    OpaqueBlack,
    /// (1, 1, 1, 1).
    OpaqueWhite,
}

impl BorderColor {
    fn vk(self, integer: bool) -> vk::BorderColor {
        match (self, integer) {
            (BorderColor::TransparentBlack, false) => vk::BorderColor::FLOAT_TRANSPARENT_BLACK,
            (BorderColor::OpaqueBlack, false) => vk::BorderColor::FLOAT_OPAQUE_BLACK,
            (BorderColor::OpaqueWhite, false) => vk::BorderColor::FLOAT_OPAQUE_WHITE,
            (BorderColor::TransparentBlack, true) => vk::BorderColor::INT_TRANSPARENT_BLACK,
            (BorderColor::OpaqueBlack, true) => vk::BorderColor::INT_OPAQUE_BLACK,
            (BorderColor::OpaqueWhite, true) => vk::BorderColor::INT_OPAQUE_WHITE,
        }
    }
}

/// Which mip levels a texture handle reads (as [`crate::TextureLevels`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InlineLevels {
    /// One mip level (coordinates may be unnormalized).
    One(u32),
    /// The whole mip chain (normalized coordinates; `tex2DLod`), filtered between levels with
    /// `filter`.
    All {
        /// Filtering between levels.
        filter: SamplerFilter,
    },
}

/// How a texture handle samples ([`InlineImageHandle::texture`],
/// [`crate::SharedImage::inline_texture`]): the sampler, and which levels and layers the view
/// covers. Named as [`crate::TextureOptions`] is; reads return what the format means (UNORM /
/// SNORM as normalized floats, SFLOAT as floats, UINT / SINT as integers), in component order
/// as Vulkan samplers return them (`B8G8R8A8_UNORM`: `.x` is red, where a CUDA-context texture
/// of the same image returns memory order, `.x` blue). Surfaces load and store the raw texel
/// bits in memory order, as CUDA's do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineTextureDesc {
    /// Addressing outside the image (wrap and mirror need normalized coordinates).
    pub address_mode: SamplerAddressMode,
    /// Filtering within a level (linear needs a float format the device can filter).
    pub filter: SamplerFilter,
    /// Coordinates in [0, 1) rather than texels.
    pub normalized_coordinates: bool,
    /// Which levels.
    pub levels: InlineLevels,
    /// Which layers.
    pub layers: ViewLayers,
    /// The colour [`SamplerAddressMode::Border`] returns.
    pub border_color: BorderColor,
}

impl Default for InlineTextureDesc {
    /// Level 0, every layer, point sampling, texel coordinates, clamped (as
    /// [`crate::TextureOptions::default`]).
    fn default() -> Self {
        Self {
            address_mode: SamplerAddressMode::Clamp,
            filter: SamplerFilter::Point,
            normalized_coordinates: false,
            levels: InlineLevels::One(0),
            layers: ViewLayers::All,
            border_color: BorderColor::TransparentBlack,
        }
    }
}

/// What kind of image access a handle gives a kernel (its `VkImageViewHandleInfoNVX`
/// descriptor type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InlineImageKind {
    /// `STORAGE_IMAGE`: a `cudaSurfaceObject_t` (loads and stores, x in bytes).
    Surface,
    /// `COMBINED_IMAGE_SAMPLER`: a `cudaTextureObject_t` sampled with the handle's sampler.
    Texture,
    /// `SAMPLED_IMAGE`: a `cudaTextureObject_t` sampled with the driver's default sampler
    /// (normalized coordinates).
    SampledImage,
}

impl InlineImageKind {
    /// The descriptor type the handle was asked for.
    pub fn descriptor_type(self) -> vk::DescriptorType {
        match self {
            InlineImageKind::Surface => vk::DescriptorType::STORAGE_IMAGE,
            InlineImageKind::Texture => vk::DescriptorType::COMBINED_IMAGE_SAMPLER,
            InlineImageKind::SampledImage => vk::DescriptorType::SAMPLED_IMAGE,
        }
    }
}

/// How [`InlineImageHandle::from_raw_view`] asks for the handle of an engine's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawViewDescriptor {
    /// `STORAGE_IMAGE`: a surface (the image needs `STORAGE` usage).
    StorageImage,
    /// `COMBINED_IMAGE_SAMPLER` with this sampler: a texture (the image needs `SAMPLED` usage).
    CombinedImageSampler(vk::Sampler),
    /// `SAMPLED_IMAGE`: a texture with the driver's default sampler (the image needs `SAMPLED`
    /// usage).
    SampledImage,
}

/// A surface or texture handle for CUDA kernels inside Vulkan queues: an image view of one mip
/// level (or, for a texture, the mip chain) of an image, the sampler of a texture, and the
/// handle `vkGetImageViewHandleNVX` gives for them, which a kernel launched with
/// [`crate::vulkan::CuFunction::record_launch`] takes as its `cudaSurfaceObject_t` /
/// `cudaTextureObject_t` ([`Self::kernel_arg`]).
///
/// Owns the view and the sampler (destroyed on drop) and keeps the image alive (an `Arc` of
/// it, or what [`Self::from_raw_view`] was given), so the handle never outlives what it names.
/// Command buffers that launched with it must have completed before it drops (the launch's
/// contract).
pub struct InlineImageHandle {
    ctx: Arc<VulkanContext>,
    view: vk::ImageView,
    sampler: vk::Sampler,
    /// Whether the view and sampler are ours to destroy (not for [`Self::from_raw_view`]).
    owned: bool,
    kind: InlineImageKind,
    handle: u32,
    /// What keeps the image alive: dropped after [`Drop::drop`] destroyed the view and sampler.
    _keep_alive: Box<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for InlineImageHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlineImageHandle")
            .field("kind", &self.kind)
            .field("handle", &self.handle)
            .field("view", &self.view)
            .field("sampler", &self.sampler)
            .finish_non_exhaustive()
    }
}

/// The view's type and subresource range for `levels` (first, count) and `layers` of an image
/// of `kind`, after the layer checks.
fn view_range(
    kind: ImageKind,
    (first_level, level_count): (u32, u32),
    layers: ViewLayers,
) -> (vk::ImageViewType, vk::ImageSubresourceRange) {
    let (view_type, base_array_layer, layer_count) = match (kind, layers) {
        (ImageKind::D3 { .. }, _) => (vk::ImageViewType::TYPE_3D, 0, 1),
        (ImageKind::D2, _) => (vk::ImageViewType::TYPE_2D, 0, 1),
        (ImageKind::D2Array { .. } | ImageKind::Cube, ViewLayers::All) => {
            (vk::ImageViewType::TYPE_2D_ARRAY, 0, kind.layers())
        }
        (ImageKind::D2Array { .. } | ImageKind::Cube, ViewLayers::One(layer)) => {
            (vk::ImageViewType::TYPE_2D, layer, 1)
        }
    };
    let range = vk::ImageSubresourceRange {
        aspect_mask: vk::ImageAspectFlags::COLOR,
        base_mip_level: first_level,
        level_count,
        base_array_layer,
        layer_count,
    };
    (view_type, range)
}

/// The format's row of the table (what the handle's reads mean), the layers rule.
fn check_common(image: &BoundImage, layers: ViewLayers) -> Result<FormatInfo> {
    let desc = image.desc();
    let format = image_format::format_info(desc.format)?;
    if let ViewLayers::One(layer) = layers {
        desc.shape().check_layers(layer, 1)?;
    }
    Ok(format)
}

impl InlineImageHandle {
    /// Every check [`Self::surface`] makes before it creates anything: the format is in the
    /// table ([`crate::FORMATS`]), the image has `STORAGE` usage, the level and layer exist.
    pub fn validate_surface(image: &BoundImage, level: u32, layers: ViewLayers) -> Result<()> {
        let desc = image.desc();
        check_common(image, layers)?;
        image_format::check_usage(
            desc.usage,
            vk::ImageUsageFlags::STORAGE,
            "a surface handle for kernels inside Vulkan queues (STORAGE_IMAGE)",
            Some("VUID-VkImageViewHandleInfoNVX-imageView-02657"),
        )?;
        desc.shape().check_level(level)?;
        Ok(())
    }

    /// Every check [`Self::texture`] makes before it creates anything: the format is in the
    /// table, the image has `SAMPLED` usage, the levels and layer exist, and CUDA's texture
    /// rules ([`TextureRule`]: wrap and mirror addressing and mip chains need normalized
    /// coordinates, linear filtering needs a format that reads floats), then whether the device
    /// filters the format linearly ([`Capability::LinearFilter`]).
    pub fn validate_texture(image: &BoundImage, desc: &InlineTextureDesc) -> Result<()> {
        let image_desc = image.desc();
        let format = check_common(image, desc.layers)?;
        image_format::check_usage(
            image_desc.usage,
            vk::ImageUsageFlags::SAMPLED,
            "a texture handle for kernels inside Vulkan queues (COMBINED_IMAGE_SAMPLER)",
            Some("VUID-VkImageViewHandleInfoNVX-imageView-02656"),
        )?;
        let texture = |rule| Err(Error::from(ImageError::Texture(rule)));
        let mipmap_filter = match desc.levels {
            InlineLevels::One(level) => {
                image_desc.shape().check_level(level)?;
                SamplerFilter::Point
            }
            InlineLevels::All { filter } => {
                if !desc.normalized_coordinates {
                    return texture(TextureRule::MipChainNeedsNormalizedCoordinates);
                }
                filter
            }
        };
        if matches!(
            desc.address_mode,
            SamplerAddressMode::Wrap | SamplerAddressMode::Mirror
        ) && !desc.normalized_coordinates
        {
            return texture(TextureRule::WrapNeedsNormalizedCoordinates);
        }
        let linear = desc.filter == SamplerFilter::Linear || mipmap_filter == SamplerFilter::Linear;
        if linear && format.class.reads_as_integer() {
            return texture(TextureRule::LinearFilterNeedsFloatReads);
        }
        if linear {
            let ctx = image.image().context();
            let tiling = image.image().options().tiling;
            // SAFETY: a valid physical device of the context's instance.
            let props = unsafe {
                ctx.instance()
                    .get_physical_device_format_properties(ctx.physical_device(), format.format)
            };
            let features = if tiling == vk::ImageTiling::LINEAR {
                props.linear_tiling_features
            } else {
                props.optimal_tiling_features
            };
            if !features.contains(vk::FormatFeatureFlags::SAMPLED_IMAGE_FILTER_LINEAR) {
                return Err(Capability::LinearFilter {
                    format: format.format,
                    tiling,
                }
                .into());
            }
        }
        Ok(())
    }

    /// A surface handle (`STORAGE_IMAGE`) over mip level `level` of `image`, `layers` as
    /// [`ViewLayers`] says: what a kernel inside a Vulkan queue takes as `cudaSurfaceObject_t`
    /// (x in bytes). Refused, before anything is created: what [`Self::validate_surface`]
    /// checks, then where the device cannot ([`image_handles_supported`]).
    pub fn surface(image: &Arc<BoundImage>, level: u32, layers: ViewLayers) -> Result<Self> {
        Self::validate_surface(image, level, layers)?;
        let ctx = image.image().context();
        let loader = loader(ctx)?;
        let (view_type, range) = view_range(image.desc().kind, (level, 1), layers);
        let mut handle = Self::with_view(image, view_type, range, InlineImageKind::Surface)?;
        // SAFETY: our live view of an image with STORAGE usage (checked), on the loader's device.
        unsafe { handle.fetch_handles(loader) };
        Ok(handle)
    }

    /// A texture handle (`COMBINED_IMAGE_SAMPLER`) over `image` sampled as `desc` says: what a
    /// kernel inside a Vulkan queue takes as `cudaTextureObject_t`. Refused, before anything is
    /// created: what [`Self::validate_texture`] checks, then where the device cannot
    /// ([`image_handles_supported`]).
    pub fn texture(image: &Arc<BoundImage>, desc: &InlineTextureDesc) -> Result<Self> {
        Self::validate_texture(image, desc)?;
        let ctx = image.image().context();
        let loader = loader(ctx)?;
        let image_desc = image.desc();
        let format = image_format::format_info(image_desc.format)?;
        let (levels, mipmap_filter) = match desc.levels {
            InlineLevels::One(level) => ((level, 1), SamplerFilter::Point),
            InlineLevels::All { filter } => ((0, image_desc.mip_levels), filter),
        };
        let (view_type, range) = view_range(image_desc.kind, levels, desc.layers);
        let mut handle = Self::with_view(image, view_type, range, InlineImageKind::Texture)?;
        let address = desc.address_mode.vk();
        // Unnormalized coordinates: one level, no LOD range (VUID-VkSamplerCreateInfo-
        // unnormalizedCoordinates-01072..01077; the address modes were checked).
        let max_lod = if desc.normalized_coordinates {
            levels.1 as f32
        } else {
            0.0
        };
        let info = vk::SamplerCreateInfo::default()
            .mag_filter(desc.filter.filter())
            .min_filter(desc.filter.filter())
            .mipmap_mode(mipmap_filter.mipmap_mode())
            .address_mode_u(address)
            .address_mode_v(address)
            .address_mode_w(address)
            .mip_lod_bias(0.0)
            .anisotropy_enable(false)
            .compare_enable(false)
            .min_lod(0.0)
            .max_lod(max_lod)
            .border_color(desc.border_color.vk(format.class.reads_as_integer()))
            .unnormalized_coordinates(!desc.normalized_coordinates);
        // SAFETY: a valid device; the create info follows the sampler rules above. On an error
        // `handle` drops and destroys the view (its sampler is still null).
        handle.sampler =
            unsafe { ctx.device().create_sampler(&info, None) }.vk("vkCreateSampler")?;
        // SAFETY: our live view of an image with SAMPLED usage (checked) and our live sampler,
        // on the loader's device.
        unsafe { handle.fetch_handles(loader) };
        Ok(handle)
    }

    /// The handle of an image view (and sampler) the caller owns, e.g. an engine's: a surface
    /// ([`RawViewDescriptor::StorageImage`]) or a texture. Nothing of the caller's is destroyed
    /// on drop; `keep_alive` (e.g. an `Arc` of the engine's texture) is held until the handle
    /// drops. Refused where the device cannot ([`image_handles_supported`]).
    ///
    /// # Safety
    /// `view` must be a live image view of `ctx`'s device, of one mip level of a colour image
    /// (or of a mip chain, for a texture with normalized coordinates), and the image must have
    /// been created with `STORAGE` usage for [`RawViewDescriptor::StorageImage`] and `SAMPLED`
    /// usage otherwise; a [`RawViewDescriptor::CombinedImageSampler`] sampler must be a live
    /// sampler of the same device. The view, the sampler and the image must stay alive as long
    /// as the returned handle and every command buffer that launched a kernel with it: until it
    /// drops and they have completed (`keep_alive` may hold them; it drops after the handle).
    pub unsafe fn from_raw_view(
        ctx: &Arc<VulkanContext>,
        view: vk::ImageView,
        descriptor: RawViewDescriptor,
        keep_alive: Box<dyn Any + Send + Sync>,
    ) -> Result<Self> {
        let loader = loader(ctx)?;
        let (kind, sampler) = match descriptor {
            RawViewDescriptor::StorageImage => (InlineImageKind::Surface, vk::Sampler::null()),
            RawViewDescriptor::CombinedImageSampler(s) => (InlineImageKind::Texture, s),
            RawViewDescriptor::SampledImage => (InlineImageKind::SampledImage, vk::Sampler::null()),
        };
        let mut handle = Self {
            ctx: ctx.clone(),
            view,
            sampler,
            owned: false,
            kind,
            handle: 0,
            _keep_alive: keep_alive,
        };
        // SAFETY: the caller's promise: a live view (and sampler) of this device, the image
        // created with the usage the descriptor type needs.
        unsafe { handle.fetch_handles(loader) };
        Ok(handle)
    }

    /// Creates the view; the handle is filled in later. On an error nothing is left created.
    fn with_view(
        image: &Arc<BoundImage>,
        view_type: vk::ImageViewType,
        range: vk::ImageSubresourceRange,
        kind: InlineImageKind,
    ) -> Result<Self> {
        let ctx = image.image().context();
        let info = vk::ImageViewCreateInfo::default()
            .image(image.handle())
            .view_type(view_type)
            .format(image.desc().format)
            .components(vk::ComponentMapping::default())
            .subresource_range(range);
        // SAFETY: a live image of this device (the Arc), a range and view type checked against
        // its description (level and layers exist; 2D array views of layered images, 3D of 3D).
        let view =
            unsafe { ctx.device().create_image_view(&info, None) }.vk("vkCreateImageView")?;
        let keep: Arc<BoundImage> = image.clone();
        Ok(Self {
            ctx: ctx.clone(),
            view,
            sampler: vk::Sampler::null(),
            owned: true,
            kind,
            handle: 0,
            _keep_alive: Box::new(keep),
        })
    }

    /// Asks the driver for the handles of the view (and sampler).
    ///
    /// # Safety
    /// The view (and, for a texture, the sampler) must be live objects of `loader`'s device,
    /// the image created with the usage the kind needs.
    unsafe fn fetch_handles(&mut self, loader: &ImageViewHandleLoader) {
        let info = vk::ImageViewHandleInfoNVX::default()
            .image_view(self.view)
            .descriptor_type(self.kind.descriptor_type())
            .sampler(self.sampler);
        // SAFETY: forwarded from the caller.
        self.handle = unsafe { loader.handles(self.ctx.device().handle(), &info) };
    }

    /// What kind of access it gives.
    pub fn kind(&self) -> InlineImageKind {
        self.kind
    }
    /// The 32-bit handle `vkGetImageViewHandleNVX` returned: zero-extended, what a kernel of a
    /// plain module takes as its `cudaSurfaceObject_t` / `cudaTextureObject_t`.
    pub fn handle(&self) -> u32 {
        self.handle
    }
    /// The kernel argument: the 32-bit handle zero-extended to 64 bits, for a `.u64` / `.b64`
    /// / `.s64` parameter ([`KernelArg::image`]).
    pub fn kernel_arg(&self) -> KernelArg {
        KernelArg::image(self)
    }
    /// The image view (valid while `self` lives).
    pub fn view(&self) -> vk::ImageView {
        self.view
    }
    /// The sampler of a texture (valid while `self` lives); `None` for a surface or a sampled
    /// image.
    pub fn sampler(&self) -> Option<vk::Sampler> {
        (self.sampler != vk::Sampler::null()).then_some(self.sampler)
    }
    /// The context of the device the view belongs to.
    pub fn context(&self) -> &Arc<VulkanContext> {
        &self.ctx
    }
    /// The raw device, for the launch's device check.
    pub(crate) fn device(&self) -> vk::Device {
        self.ctx.device().handle()
    }
}

impl Drop for InlineImageHandle {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let device = self.ctx.device();
        // SAFETY: ours, created on this device; command buffers that launched with the handle
        // were promised complete by their (unsafe) recorders. The image (kept alive by
        // `_keep_alive`, dropped after this) outlives its view.
        unsafe {
            if self.sampler != vk::Sampler::null() {
                device.destroy_sampler(self.sampler, None);
            }
            device.destroy_image_view(self.view, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_cover_one_level_and_the_layers_asked_for() {
        let (t, r) = view_range(ImageKind::D2, (2, 1), ViewLayers::All);
        assert_eq!(t, vk::ImageViewType::TYPE_2D);
        assert_eq!((r.base_mip_level, r.level_count), (2, 1));
        assert_eq!((r.base_array_layer, r.layer_count), (0, 1));
        let (t, r) = view_range(ImageKind::D2Array { layers: 5 }, (0, 1), ViewLayers::All);
        assert_eq!(t, vk::ImageViewType::TYPE_2D_ARRAY);
        assert_eq!((r.base_array_layer, r.layer_count), (0, 5));
        let (t, r) = view_range(ImageKind::Cube, (0, 1), ViewLayers::All);
        assert_eq!(t, vk::ImageViewType::TYPE_2D_ARRAY);
        assert_eq!(r.layer_count, 6);
        let (t, r) = view_range(ImageKind::D2Array { layers: 5 }, (0, 1), ViewLayers::One(3));
        assert_eq!(t, vk::ImageViewType::TYPE_2D);
        assert_eq!((r.base_array_layer, r.layer_count), (3, 1));
        let (t, r) = view_range(ImageKind::D3 { depth: 8 }, (1, 1), ViewLayers::All);
        assert_eq!(t, vk::ImageViewType::TYPE_3D);
        assert_eq!((r.base_mip_level, r.layer_count), (1, 1));
        let (_, r) = view_range(ImageKind::D2, (0, 7), ViewLayers::All);
        assert_eq!(r.level_count, 7);
    }

    #[test]
    fn sampler_enums_map_to_vulkan() {
        assert_eq!(
            SamplerAddressMode::Wrap.vk(),
            vk::SamplerAddressMode::REPEAT
        );
        assert_eq!(
            SamplerAddressMode::Clamp.vk(),
            vk::SamplerAddressMode::CLAMP_TO_EDGE
        );
        assert_eq!(
            SamplerAddressMode::Mirror.vk(),
            vk::SamplerAddressMode::MIRRORED_REPEAT
        );
        assert_eq!(
            SamplerAddressMode::Border.vk(),
            vk::SamplerAddressMode::CLAMP_TO_BORDER
        );
        assert_eq!(SamplerFilter::Point.filter(), vk::Filter::NEAREST);
        assert_eq!(
            SamplerFilter::Linear.mipmap_mode(),
            vk::SamplerMipmapMode::LINEAR
        );
        assert_eq!(
            BorderColor::OpaqueWhite.vk(true),
            vk::BorderColor::INT_OPAQUE_WHITE
        );
        assert_eq!(
            BorderColor::TransparentBlack.vk(false),
            vk::BorderColor::FLOAT_TRANSPARENT_BLACK
        );
        assert_eq!(
            InlineImageKind::Surface.descriptor_type(),
            vk::DescriptorType::STORAGE_IMAGE
        );
        assert_eq!(
            InlineImageKind::Texture.descriptor_type(),
            vk::DescriptorType::COMBINED_IMAGE_SAMPLER
        );
    }
}
