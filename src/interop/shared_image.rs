//! Images both APIs see: a Vulkan image (exportable, OPTIMAL tiling) that CUDA maps as a
//! mipmapped array, reads through texture objects and writes through surface objects.
//!
//! Everything CUDA is told is derived from the image: the array format and channels from the
//! format table ([`crate::rules::image_format::FORMATS`]), the extent and flags from its kind and
//! usage ([`crate::rules::image_format::array_desc`]), the offset from its bind offset, the level
//! count from its mip levels, the import's dedicated flag from its allocation. Every request is
//! validated here, at the public entry point, before any object is created.
//!
//! Between uses the image is in `GENERAL` layout, owned by `VK_QUEUE_FAMILY_EXTERNAL`: Vulkan
//! acquires it before use and releases it after (see [`crate::vulkan::SHARED_LAYOUT`] and
//! [`crate::FramePacer::record_image_acquire_from_cuda`]); CUDA reads and writes it in between,
//! ordered with Vulkan by semaphores.

use std::sync::Arc;

use ash::vk;
use cudarc::driver::CudaStream;

use crate::cuda::{
    AddressMode, ArrayLevel, FilterMode, ImportedMemory, MipmappedArray, SurfaceObject,
    TextureDesc, TextureObject,
};
use crate::error::MemoryError;
use crate::error::{Error, Result};
use crate::interop::Bridge;
use crate::platform::MEMORY_HANDLE_TYPE;
use crate::rules::image_format::{
    self, ArrayDesc, FormatInfo, ImageError, NumericClass, TextureRule,
};
use crate::vulkan::{
    AsVkImage, BoundImage, DeviceMemory, ExternalUse, Image, ImageDesc, ImageOptions,
    InlineImageHandle, InlineTextureDesc, ViewLayers, VulkanContext,
};

/// Which levels a texture reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextureLevels {
    /// One mip level (coordinates may be unnormalized).
    One(u32),
    /// The whole mip chain (normalized coordinates), filtered between levels with `filter`.
    All {
        /// Filtering between levels.
        filter: FilterMode,
    },
}

/// What texture reads return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TextureRead {
    /// What the format means: UNORM / SNORM as normalized floats, SFLOAT as floats,
    /// UINT / SINT as integers.
    #[default]
    Values,
    /// The stored integers of a UNORM / SNORM format, unconverted (no linear filtering).
    RawIntegers,
}

/// How [`SharedImage::texture`] samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TextureOptions {
    /// Addressing outside the image (wrap and mirror need normalized coordinates).
    pub address_mode: AddressMode,
    /// Filtering within a level (linear needs float reads).
    pub filter: FilterMode,
    /// Coordinates in [0, 1) rather than texels.
    pub normalized_coordinates: bool,
    /// Which levels.
    pub levels: TextureLevels,
    /// What reads return.
    pub read: TextureRead,
    /// The colour [`AddressMode::Border`] returns.
    pub border_color: [f32; 4],
}

impl Default for TextureOptions {
    /// Level 0, point sampling, texel coordinates, clamped, values as the format means them.
    fn default() -> Self {
        Self {
            address_mode: AddressMode::Clamp,
            filter: FilterMode::Point,
            normalized_coordinates: false,
            levels: TextureLevels::One(0),
            read: TextureRead::Values,
            border_color: [0.0; 4],
        }
    }
}

impl Bridge {
    /// Creates an image as `desc` says — exportable, OPTIMAL tiling, in device-local memory
    /// dedicated exactly when Vulkan asks or `desc.dedicated` says always — and maps it into
    /// CUDA. Checked before anything is created: the format is in the table, the shape rules,
    /// and the device's support and limits for this format, usage and external use.
    pub fn create_image(&self, desc: &ImageDesc) -> Result<SharedImage> {
        let (format, support) = validate_create(&self.vulkan, desc)?;
        // SAFETY: validated just above.
        let bound = unsafe {
            BoundImage::new_unchecked(&self.vulkan, desc, ImageOptions::EXPORT, support)
        }?;
        self.import_unchecked(Arc::new(bound), format)
    }

    /// Maps an image the caller created ([`BoundImage::new`] with [`ImageOptions::EXPORT`],
    /// or bound by hand to exportable memory) into CUDA. Refused: another device, LINEAR
    /// tiling, an image not created exportable or memory not allocated exportable, a format
    /// outside the table.
    pub fn share_image(&self, image: BoundImage) -> Result<SharedImage> {
        let format = validate_share(&self.vulkan, &image, None)?;
        self.import_unchecked(Arc::new(image), format)
    }

    /// As [`Self::share_image`], for callers that built a CUDA array descriptor of their own:
    /// it must equal the one the image implies ([`ImageError::DescriptorMismatch`] names the
    /// first field that differs).
    pub fn share_image_with_descriptor(
        &self,
        image: BoundImage,
        descriptor: &ArrayDesc,
    ) -> Result<SharedImage> {
        let format = validate_share(&self.vulkan, &image, Some(descriptor))?;
        self.import_unchecked(Arc::new(image), format)
    }

    /// Exports the image's memory, imports it (dedicated exactly when the allocation is) and
    /// maps the mipmapped array the image implies at its bind offset.
    pub(crate) fn import_unchecked(
        &self,
        bound: Arc<BoundImage>,
        format: FormatInfo,
    ) -> Result<SharedImage> {
        let memory: Arc<DeviceMemory> = bound.memory().clone();
        let fd = memory.export()?;
        // SAFETY: the handle was just exported from `memory`, whose allocation size and
        // dedicated-ness its import layout says; the import keeps `memory` alive through the
        // exporter Arc.
        let imported = unsafe {
            ImportedMemory::import(&self.cuda, fd, memory.import_layout(), Some(memory.clone()))
        }?;
        let desc = *bound.desc();
        let cuda_desc = image_format::array_desc(&desc.shape(), &format, desc.usage);
        // SAFETY: the descriptor, level count and offset are those of the OPTIMAL-tiled image
        // bound at `bound.offset()` of this memory (derived from it just above).
        let array =
            unsafe { imported.map_mipmapped_array(bound.offset(), &cuda_desc, desc.mip_levels) }?;
        Ok(SharedImage {
            array,
            bound,
            format,
            cuda_desc,
            stream: self.stream.clone(),
        })
    }
}

/// A Vulkan image CUDA sees as a mipmapped array: `vk_image()` for Vulkan (descriptors,
/// render passes, copies), [`Self::surface`] / [`Self::texture`] / [`Self::level`] for CUDA
/// kernels. Drop in any order is safe: surfaces, textures and levels keep the CUDA array, the
/// array keeps the import, the import keeps the Vulkan memory.
///
/// The two APIs do not order their accesses by themselves: Vulkan acquires the image before
/// use and releases it after (the protocol of [`crate::vulkan::SHARED_LAYOUT`]), and CUDA work
/// is ordered with Vulkan work by semaphores or a host wait.
///
/// Kernels reach surfaces and textures through raw handles, in launches that are `unsafe`:
/// keeping the objects alive until such a kernel has finished (stream sync, event or
/// semaphore) is part of that launch's contract. Unlike [`crate::SharedBuffer`], nothing here
/// records events for them.
pub struct SharedImage {
    // Declared first: released before the Vulkan image (either order is safe).
    array: Arc<MipmappedArray>,
    bound: Arc<BoundImage>,
    format: FormatInfo,
    cuda_desc: ArrayDesc,
    stream: Arc<CudaStream>,
}

impl std::fmt::Debug for SharedImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedImage")
            .field("desc", self.bound.desc())
            .field("cuda_desc", &self.cuda_desc)
            .finish_non_exhaustive()
    }
}

impl SharedImage {
    /// The Vulkan image handle (valid while `self` lives).
    pub fn vk_image(&self) -> vk::Image {
        self.bound.handle()
    }
    /// What it was created as.
    pub fn desc(&self) -> &ImageDesc {
        self.bound.desc()
    }
    /// Its row of the format table.
    pub fn format_info(&self) -> &FormatInfo {
        &self.format
    }
    /// The CUDA array descriptor it was mapped with.
    pub fn cuda_desc(&self) -> &ArrayDesc {
        &self.cuda_desc
    }
    /// The Vulkan image and its memory.
    pub fn bound(&self) -> &BoundImage {
        &self.bound
    }
    /// The CUDA mipmapped array.
    pub fn mipmapped_array(&self) -> &Arc<MipmappedArray> {
        &self.array
    }
    /// The Vulkan image and its memory, shared (what a wgpu texture's drop callback holds).
    pub fn bound_arc(&self) -> &Arc<BoundImage> {
        &self.bound
    }

    /// The CUDA array of mip level `level`.
    pub fn level(&self, level: u32) -> Result<ArrayLevel> {
        self.desc().shape().check_level(level)?;
        self.array.level(level)
    }

    /// A CUDA surface object over mip level `level`, for kernel loads and stores (x in bytes).
    /// The image needs `STORAGE` usage.
    pub fn surface(&self, level: u32) -> Result<SurfaceObject> {
        let desc = self.desc();
        image_format::check_usage(
            desc.usage,
            vk::ImageUsageFlags::STORAGE,
            "a CUDA surface object (CUDA_ARRAY3D_SURFACE_LDST)",
            None,
        )?;
        desc.shape().check_level(level)?;
        let level = self.array.level(level)?;
        // SAFETY: STORAGE usage (checked) is what mapped the array with SURFACE_LDST.
        unsafe { level.surface_unchecked() }
    }

    /// A CUDA texture object for sampled reads, as `options` say; whether reads return
    /// floats or integers follows the format ([`TextureRead`]).
    pub fn texture(&self, options: &TextureOptions) -> Result<TextureObject> {
        let class = self.format.class;
        let normalized_format = matches!(class, NumericClass::Unorm | NumericClass::Snorm);
        if options.read == TextureRead::RawIntegers && !normalized_format {
            return Err(ImageError::Texture(TextureRule::RawReadsNeedNormalizedFormat).into());
        }
        let (mip_chain, mipmap_filter) = match options.levels {
            TextureLevels::One(level) => {
                self.desc().shape().check_level(level)?;
                (false, FilterMode::Point)
            }
            TextureLevels::All { filter } => (true, filter),
        };
        let desc = TextureDesc {
            address_mode: options.address_mode,
            filter: options.filter,
            mipmap_filter,
            normalized_coordinates: options.normalized_coordinates,
            read_as_integer: class.reads_as_integer() || options.read == TextureRead::RawIntegers,
            border_color: options.border_color,
        };
        desc.validate(self.cuda_desc.format, mip_chain)?;
        match options.levels {
            TextureLevels::One(level) => self.array.level(level)?.texture(&desc),
            TextureLevels::All { .. } => TextureObject::mip_chain(&self.array, &desc),
        }
    }

    /// A surface handle over mip level `level` (`layers` of it) for CUDA kernels inside Vulkan
    /// queues ([`crate::vulkan::CuFunction::record_launch`] with
    /// [`InlineImageHandle::kernel_arg`]): the kernel's `cudaSurfaceObject_t`, x in bytes, no
    /// CUDA context involved. The image needs `STORAGE` usage; the device needs
    /// `VK_NVX_image_view_handle` ([`crate::vulkan::image_handles_supported`]). The handle
    /// keeps the Vulkan image alive: it works after `self` drops. See
    /// [`InlineImageHandle::surface`].
    pub fn inline_surface(&self, level: u32, layers: ViewLayers) -> Result<InlineImageHandle> {
        InlineImageHandle::surface(&self.bound, level, layers)
    }

    /// A texture handle sampled as `desc` says, for CUDA kernels inside Vulkan queues: the
    /// kernel's `cudaTextureObject_t` (a Vulkan sampler and view; reads return what the format
    /// means). The image needs `SAMPLED` usage. As [`Self::inline_surface`]; see
    /// [`InlineImageHandle::texture`].
    pub fn inline_texture(&self, desc: &InlineTextureDesc) -> Result<InlineImageHandle> {
        InlineImageHandle::texture(&self.bound, desc)
    }

    /// Copies `data` (the whole level: every layer or slice in order, tightly packed) into
    /// mip level `level` through CUDA, and waits. Vulkan must not be using the image.
    pub fn cuda_upload(&mut self, level: u32, data: &[u8]) -> Result<()> {
        self.level(level)?.copy_from_host(&self.stream, data)
    }

    /// Copies mip level `level` (every layer or slice in order, tightly packed) to the host
    /// through CUDA, and waits. Vulkan must not be writing the image.
    pub fn cuda_download(&self, level: u32) -> Result<Vec<u8>> {
        let level = self.level(level)?;
        let mut out = vec![0u8; level.byte_size() as usize];
        level.copy_to_host(&self.stream, &mut out)?;
        Ok(out)
    }
}

impl SharedImage {
    /// Every check [`Bridge::create_image`] makes before it creates anything, on the Vulkan
    /// side alone (no CUDA needed): format in the table, a usage, the shape rules, the
    /// device's support and limits for this format, usage and export. Returns the device's
    /// answer, which [`BoundImage::new_untransitioned`] takes.
    pub fn validate_desc(
        vulkan: &VulkanContext,
        desc: &ImageDesc,
    ) -> Result<crate::vulkan::ImageSupport> {
        validate_create(vulkan, desc).map(|(_, support)| support)
    }

    /// Every check [`Bridge::share_image`] (with `descriptor`:
    /// [`Bridge::share_image_with_descriptor`]) makes before it exports anything, on the Vulkan side
    /// alone: same device, OPTIMAL tiling, created and allocated exportable, format in the
    /// table, descriptor equal to the one the image implies.
    pub fn validate_shareable(
        vulkan: &VulkanContext,
        image: &BoundImage,
        descriptor: Option<&ArrayDesc>,
    ) -> Result<()> {
        validate_share(vulkan, image, descriptor).map(|_| ())
    }
}

// SAFETY: the handle is owned by this value (destroyed only on its drop), created on the
// context it names with the size or description it reports; host views of its memory are
// only lent through `&self` methods that the `&mut` GPU-write helpers exclude.
unsafe impl AsVkImage for SharedImage {
    fn vk_image(&self) -> vk::Image {
        self.bound.handle()
    }
    fn vk_image_desc(&self) -> &ImageDesc {
        self.bound.desc()
    }
    fn vk_image_context(&self) -> &Arc<VulkanContext> {
        self.bound.vk_image_context()
    }
    fn vk_image_is_external(&self) -> bool {
        true
    }
    fn vk_image_keep_alive(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        Some(self.bound_arc().clone())
    }
}

/// Every check of [`Bridge::create_image`], made before anything is created: the format is
/// in the table, then [`Image::validate`] (a usage, the shape rules, the device's support and
/// limits for this format, usage and export).
pub(crate) fn validate_create(
    vulkan: &VulkanContext,
    desc: &ImageDesc,
) -> Result<(FormatInfo, crate::vulkan::ImageSupport)> {
    let format = image_format::format_info(desc.format)?;
    desc.shape().validate_for_cuda()?;
    let support = Image::validate(vulkan, desc, ImageOptions::EXPORT)?;
    Ok((format, support))
}

/// Every check of [`Bridge::share_image`] (and, with a descriptor, of
/// [`Bridge::share_image_with_descriptor`]): same device, OPTIMAL tiling, created exportable, memory
/// allocated exportable, format in the table, descriptor equal to the implied one.
fn validate_share(
    vulkan: &VulkanContext,
    image: &BoundImage,
    descriptor: Option<&ArrayDesc>,
) -> Result<FormatInfo> {
    let vk_image = image.image();
    if !vulkan.same_device(vk_image.context()) {
        return Err(Error::WrongDevice {
            object: crate::DeviceObject::Image,
            owner: crate::DeviceOwner::VulkanDevice,
        });
    }
    if vk_image.options().tiling != vk::ImageTiling::OPTIMAL {
        return Err(ImageError::LinearTiling.into());
    }
    if vk_image.options().external != ExternalUse::Export
        || !vk_image
            .external_handle_types()
            .contains(MEMORY_HANDLE_TYPE)
    {
        return Err(MemoryError::NotExportable {
            what: crate::Exportable::Image,
        }
        .into());
    }
    if !image.memory().handle_types().contains(MEMORY_HANDLE_TYPE) {
        return Err(MemoryError::NotExportable {
            what: crate::Exportable::Memory,
        }
        .into());
    }
    let format = image_format::format_info(image.desc().format)?;
    image.desc().shape().validate_for_cuda()?;
    if let Some(given) = descriptor {
        let desc = image.desc();
        let implied = image_format::array_desc(&desc.shape(), &format, desc.usage);
        image_format::check_descriptor(&implied, given)?;
    }
    Ok(format)
}
