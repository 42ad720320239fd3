//! Vulkan images that other APIs share: created exportable (or importable) after the device
//! said it can ([`Image::new`] asks `vkGetPhysicalDeviceImageFormatProperties2` with
//! `VkPhysicalDeviceExternalImageFormatInfo`), bound to memory dedicated exactly when Vulkan or
//! the caller asks, and kept in one layout between uses.
//!
//! # The layout and ownership protocol
//!
//! CUDA knows nothing of image layouts: it reads and writes the memory as it is. So an image
//! shared with CUDA is kept, between uses, in [`SHARED_LAYOUT`] (`GENERAL`: the one layout
//! every access of every kind may use, which drivers keep uncompressed) and owned by
//! `VK_QUEUE_FAMILY_EXTERNAL`:
//!
//! - A new [`BoundImage`] is transitioned once from `UNDEFINED` to `GENERAL` and released to
//!   `VK_QUEUE_FAMILY_EXTERNAL` (exportable and imported images) before it is returned.
//! - Before Vulkan uses it, a command buffer records the *acquire*: an image barrier from
//!   `VK_QUEUE_FAMILY_EXTERNAL` to the queue's family, `GENERAL` → the layout Vulkan wants
//!   (`COLOR_ATTACHMENT_OPTIMAL`, `TRANSFER_DST_OPTIMAL`, ...) — [`acquire_barrier`],
//!   [`cmd_acquire_images`], or `FramePacer::record_image_acquire_from_cuda`.
//! - After Vulkan's last use in that submission, the *release*: the barrier back, the layout
//!   Vulkan used → `GENERAL`, to `VK_QUEUE_FAMILY_EXTERNAL` — [`release_barrier`],
//!   [`cmd_release_images`], `FramePacer::record_image_release_to_cuda`. The transition to
//!   `GENERAL` is what makes an image Vulkan rendered in a compressed layout (colour
//!   attachments) readable by CUDA: it decompresses.
//! - Between those, CUDA may read and write it; the two APIs order themselves with semaphores
//!   (the `FramePacer`), as for buffers.
//!
//! Images that are neither exported nor imported follow the same protocol without the
//! ownership transfer (the barriers are plain layout transitions around `GENERAL`). The
//! one-shot helpers ([`VulkanContext::copy_image_to_buffer`], ...) follow it too.

use std::sync::Arc;

use ash::vk;

use crate::error::{Capability, DeviceObject, MemoryError};
use crate::error::{Error, Result, VkResultExt};
use crate::platform::MEMORY_HANDLE_TYPE;
use crate::rules::image_format::{self, ImageError, ImageKind, ImageLimits, ImageShape};
use crate::rules::layout;
use crate::vulkan::memory::Dedication;
use crate::vulkan::{AllocateInfo, Dedicated, DeviceMemory, ExternalUse, VulkanContext};

/// The layout a shared image is in between uses: what CUDA sees. `GENERAL` is valid for every
/// access, and drivers keep images in it uncompressed.
pub const SHARED_LAYOUT: vk::ImageLayout = vk::ImageLayout::GENERAL;

/// What an image is: its shape, format, size, mip levels, usage and allocation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageDesc {
    /// 2D, 2D array, 3D or cube (the depth of a 3D image and the layers of an array are here).
    pub kind: ImageKind,
    /// The texel format; shared with CUDA only if it is in [`image_format::FORMATS`].
    pub format: vk::Format,
    /// Width and height of level 0.
    pub extent: vk::Extent2D,
    /// Number of mip levels (1 to the full chain).
    pub mip_levels: u32,
    /// Usage flags. `STORAGE` lets CUDA write through surfaces; `COLOR_ATTACHMENT` marks a
    /// render target (CUDA maps it with `CUDA_ARRAY3D_COLOR_ATTACHMENT`).
    pub usage: vk::ImageUsageFlags,
    /// Whether the image gets its own allocation.
    pub dedicated: Dedicated,
}

impl ImageDesc {
    /// A 2D image of one mip level, dedicated when Vulkan asks.
    pub fn d2(format: vk::Format, width: u32, height: u32, usage: vk::ImageUsageFlags) -> Self {
        Self {
            kind: ImageKind::D2,
            format,
            extent: vk::Extent2D { width, height },
            mip_levels: 1,
            usage,
            dedicated: Dedicated::Auto,
        }
    }

    /// The CUDA array descriptor this image implies (format, channels, extent, and the
    /// `LAYERED` / `CUBEMAP` / `SURFACE_LDST` / `COLOR_ATTACHMENT` flags its kind and usage
    /// need): what `Bridge::share_image_with_descriptor` compares a caller's descriptor with.
    pub fn cuda_array_desc(&self) -> Result<image_format::ArrayDesc> {
        let format = image_format::format_info(self.format)?;
        Ok(image_format::array_desc(&self.shape(), &format, self.usage))
    }

    /// Width, height and depth of mip level `level` (each halved per level, at least 1; the
    /// depth of 2D, array and cube images stays 1).
    pub fn level_extent(&self, level: u32) -> (u32, u32, u32) {
        self.shape().level_extent(level)
    }

    /// Bytes of mip level `level` (all layers), tightly packed, with `texel_bytes` per texel:
    /// the size of a buffer that holds the level.
    pub fn level_bytes(&self, level: u32, texel_bytes: u32) -> u64 {
        self.shape().level_bytes(level, texel_bytes)
    }

    /// The shape, as the image rules take it.
    pub(crate) fn shape(&self) -> ImageShape {
        ImageShape {
            kind: self.kind,
            width: self.extent.width,
            height: self.extent.height,
            mip_levels: self.mip_levels,
        }
    }

    /// Every level and layer, colour aspect.
    pub fn full_range(&self) -> vk::ImageSubresourceRange {
        vk::ImageSubresourceRange {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            base_mip_level: 0,
            level_count: self.mip_levels,
            base_array_layer: 0,
            layer_count: self.kind.layers(),
        }
    }

    fn create_flags(&self) -> vk::ImageCreateFlags {
        if self.kind == ImageKind::Cube {
            vk::ImageCreateFlags::CUBE_COMPATIBLE
        } else {
            vk::ImageCreateFlags::empty()
        }
    }

    fn vk_extent(&self) -> vk::Extent3D {
        vk::Extent3D {
            width: self.extent.width,
            height: self.extent.height,
            depth: self.kind.depth(),
        }
    }
}

/// How an image is created beyond what it is: tiling and external use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageOptions {
    /// `OPTIMAL` for anything CUDA maps as an array; `LINEAR` only for images shared as
    /// pitched buffers (not mapped as arrays).
    pub tiling: vk::ImageTiling,
    /// Whether its memory is exported, imported, or neither.
    pub external: ExternalUse,
}

impl ImageOptions {
    /// `OPTIMAL` tiling, exportable memory: what a shared image is.
    pub const EXPORT: Self = Self {
        tiling: vk::ImageTiling::OPTIMAL,
        external: ExternalUse::Export,
    };
    /// `OPTIMAL` tiling, imported memory.
    pub const IMPORT: Self = Self {
        tiling: vk::ImageTiling::OPTIMAL,
        external: ExternalUse::Import,
    };
    /// `OPTIMAL` tiling, memory of its own.
    pub const LOCAL: Self = Self {
        tiling: vk::ImageTiling::OPTIMAL,
        external: ExternalUse::None,
    };
}

/// What an image needs from the memory it is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageRequirements {
    /// `VkMemoryRequirements::size`.
    pub size: u64,
    /// `VkMemoryRequirements::alignment`.
    pub alignment: u64,
    /// `VkMemoryRequirements::memoryTypeBits`.
    pub memory_type_bits: u32,
    /// `VkMemoryDedicatedRequirements::prefersDedicatedAllocation`.
    pub prefers_dedicated: bool,
    /// `requiresDedicatedAllocation`, or the external memory properties say `DEDICATED_ONLY`.
    pub requires_dedicated: bool,
}

/// What the device said about an image description, before it was created (returned by the
/// crate's validation, consumed by its creation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageSupport {
    dedicated_only: bool,
}

/// A `vk::Image` with its description, destroyed on drop.
pub struct Image {
    ctx: Arc<VulkanContext>,
    image: vk::Image,
    desc: ImageDesc,
    options: ImageOptions,
    external: vk::ExternalMemoryHandleTypeFlags,
    requirements: ImageRequirements,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("desc", &self.desc)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn handle_types(external: ExternalUse) -> vk::ExternalMemoryHandleTypeFlags {
    match external {
        ExternalUse::None => vk::ExternalMemoryHandleTypeFlags::empty(),
        ExternalUse::Export | ExternalUse::Import => MEMORY_HANDLE_TYPE,
    }
}

impl Image {
    /// Creates an image as `desc` and `options` say, after checking the shape rules and asking
    /// the device whether it supports the format, usage, tiling and external use, and within
    /// which limits.
    pub fn new(ctx: &Arc<VulkanContext>, desc: &ImageDesc, options: ImageOptions) -> Result<Self> {
        let support = Self::validate(ctx, desc, options)?;
        // SAFETY: validated just above.
        unsafe { Self::new_unchecked(ctx, desc, options, support) }
    }

    /// Every check of [`Self::new`]: a usage, the shape rules, then the device's answer
    /// (`vkGetPhysicalDeviceImageFormatProperties2`, with the external handle type when the
    /// memory is shared: support, export/import features, dedicated-only, limits).
    pub fn validate(
        ctx: &VulkanContext,
        desc: &ImageDesc,
        options: ImageOptions,
    ) -> Result<ImageSupport> {
        if desc.usage.is_empty() {
            return Err(ImageError::NoUsage.into());
        }
        let shape = desc.shape();
        shape.validate()?;
        let external = handle_types(options.external);
        let mut external_info =
            vk::PhysicalDeviceExternalImageFormatInfo::default().handle_type(external);
        let mut info = vk::PhysicalDeviceImageFormatInfo2::default()
            .format(desc.format)
            .ty(desc.kind.image_type())
            .tiling(options.tiling)
            .usage(desc.usage)
            .flags(desc.create_flags());
        if !external.is_empty() {
            info = info.push_next(&mut external_info);
        }
        let mut external_props = vk::ExternalImageFormatProperties::default();
        let mut props = vk::ImageFormatProperties2::default().push_next(&mut external_props);
        // SAFETY: valid physical device (Vulkan 1.2, checked at context creation); the chains
        // are well formed and live across the call.
        let res = unsafe {
            ctx.instance().get_physical_device_image_format_properties2(
                ctx.physical_device(),
                &info,
                &mut props,
            )
        };
        match res {
            Ok(()) => {}
            Err(vk::Result::ERROR_FORMAT_NOT_SUPPORTED) => {
                return Err(Capability::ImageCreate {
                    kind: desc.kind,
                    format: desc.format,
                    usage: desc.usage,
                    tiling: options.tiling,
                    handle_types: external,
                }
                .into())
            }
            Err(e) => {
                return Err(Error::vulkan(
                    "vkGetPhysicalDeviceImageFormatProperties2",
                    e,
                ))
            }
        }
        // The last use of `props` (which borrows `external_props`).
        let p = props.image_format_properties;
        let features = external_props
            .external_memory_properties
            .external_memory_features;
        let needed = match options.external {
            ExternalUse::None => vk::ExternalMemoryFeatureFlags::empty(),
            ExternalUse::Export => vk::ExternalMemoryFeatureFlags::EXPORTABLE,
            ExternalUse::Import => vk::ExternalMemoryFeatureFlags::IMPORTABLE,
        };
        if !features.contains(needed) {
            return Err(Capability::ExternalImage {
                kind: desc.kind,
                format: desc.format,
                usage: desc.usage,
                handle_types: external,
                offered: features,
                needed,
            }
            .into());
        }
        shape.check_limits(&ImageLimits {
            max_extent: (p.max_extent.width, p.max_extent.height, p.max_extent.depth),
            max_mip_levels: p.max_mip_levels,
            max_array_layers: p.max_array_layers,
        })?;
        Ok(ImageSupport {
            dedicated_only: !external.is_empty()
                && features.contains(vk::ExternalMemoryFeatureFlags::DEDICATED_ONLY),
        })
    }

    /// Creates the image without checking.
    ///
    /// # Safety
    /// [`Self::validate`] must have accepted `desc` and `options` on this context and returned
    /// `support`.
    pub(crate) unsafe fn new_unchecked(
        ctx: &Arc<VulkanContext>,
        desc: &ImageDesc,
        options: ImageOptions,
        support: ImageSupport,
    ) -> Result<Self> {
        let external = handle_types(options.external);
        let mut ext_info = vk::ExternalMemoryImageCreateInfo::default().handle_types(external);
        let mut info = vk::ImageCreateInfo::default()
            .flags(desc.create_flags())
            .image_type(desc.kind.image_type())
            .format(desc.format)
            .extent(desc.vk_extent())
            .mip_levels(desc.mip_levels)
            .array_layers(desc.kind.layers())
            .samples(vk::SampleCountFlags::TYPE_1)
            .tiling(options.tiling)
            .usage(desc.usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .initial_layout(vk::ImageLayout::UNDEFINED);
        if !external.is_empty() {
            info = info.push_next(&mut ext_info);
        }
        let device = ctx.device();
        // SAFETY: the caller validated the description against the device's answer; the
        // create info lives across the call.
        let image = unsafe { device.create_image(&info, None) }.vk("vkCreateImage")?;
        let mut dedicated = vk::MemoryDedicatedRequirements::default();
        let mut reqs = vk::MemoryRequirements2::default().push_next(&mut dedicated);
        // SAFETY: the image was just created on this device.
        unsafe {
            device.get_image_memory_requirements2(
                &vk::ImageMemoryRequirementsInfo2::default().image(image),
                &mut reqs,
            )
        };
        let r = reqs.memory_requirements;
        Ok(Self {
            ctx: ctx.clone(),
            image,
            desc: *desc,
            options,
            external,
            requirements: ImageRequirements {
                size: r.size,
                alignment: r.alignment,
                memory_type_bits: r.memory_type_bits,
                prefers_dedicated: dedicated.prefers_dedicated_allocation == vk::TRUE,
                requires_dedicated: dedicated.requires_dedicated_allocation == vk::TRUE
                    || support.dedicated_only,
            },
        })
    }

    /// The raw handle.
    pub fn handle(&self) -> vk::Image {
        self.image
    }
    /// What it was created as.
    pub fn desc(&self) -> &ImageDesc {
        &self.desc
    }
    /// Its tiling and external use.
    pub fn options(&self) -> ImageOptions {
        self.options
    }
    /// External handle types it was created with (empty when not shared).
    pub fn external_handle_types(&self) -> vk::ExternalMemoryHandleTypeFlags {
        self.external
    }
    /// Its memory requirements.
    pub fn requirements(&self) -> ImageRequirements {
        self.requirements
    }
    /// The context it was created on.
    pub fn context(&self) -> &Arc<VulkanContext> {
        &self.ctx
    }

    /// Whether it gets a dedicated allocation, by `desc`'s policy ([`Dedicated`]) and what
    /// Vulkan requires or prefers.
    pub fn wants_dedicated(&self) -> bool {
        let r = self.requirements;
        match self.desc.dedicated {
            Dedicated::Always => true,
            Dedicated::Auto => r.requires_dedicated || r.prefers_dedicated,
            Dedicated::WhenRequired => r.requires_dedicated,
        }
    }

    /// Checks every rule of `vkBindImageMemory` the bridge can see, then binds, then (unless
    /// the image was created to import memory, whose contents and state are the exporter's)
    /// moves it into the protocol's state between uses: `UNDEFINED` → [`SHARED_LAYOUT`],
    /// released to `VK_QUEUE_FAMILY_EXTERNAL` when shared — one submission, waited for.
    pub fn bind(self, memory: Arc<DeviceMemory>, offset: u64) -> Result<BoundImage> {
        self.validate_bind(&memory, offset)?;
        let imported = self.options.external == ExternalUse::Import;
        // SAFETY: validated just above.
        let bound = unsafe { self.bind_unchecked(memory, offset) }?;
        if !imported {
            bound.enter_shared_layout()?;
        }
        Ok(bound)
    }

    /// Same device, dedicated rules, memory type, offset alignment and range, handle types.
    pub(crate) fn validate_bind(&self, memory: &DeviceMemory, offset: u64) -> Result<()> {
        if !self.ctx.same_device(memory.context()) {
            return Err(Error::WrongDevice {
                object: crate::DeviceObject::Memory,
                owner: crate::DeviceOwner::VulkanDevice,
            });
        }
        let r = self.requirements;
        match memory.dedicated_to() {
            Some(d) if d != Dedication::Image(self.image) => {
                return Err(MemoryError::DedicatedToAnother.into())
            }
            Some(_) if offset != 0 => {
                return Err(layout::LayoutError::DedicatedOffset { offset }.into());
            }
            None if r.requires_dedicated => {
                return Err(MemoryError::DedicatedRequired {
                    object: DeviceObject::Image,
                }
                .into())
            }
            _ => {}
        }
        if r.memory_type_bits & (1 << memory.memory_type_index()) == 0 {
            return Err(MemoryError::MemoryTypeNotAllowed {
                object: DeviceObject::Image,
                memory_type: memory.memory_type_index(),
                type_bits: r.memory_type_bits,
            }
            .into());
        }
        layout::check_aligned(
            "offset",
            offset,
            r.alignment,
            layout::AlignmentRule::VulkanImage,
        )?;
        layout::check_range(offset, r.size, "memory", memory.size())?;
        if !memory.handle_types().is_empty() && !self.external.intersects(memory.handle_types()) {
            return Err(MemoryError::NotExportable {
                what: crate::Exportable::Image,
            }
            .into());
        }
        Ok(())
    }

    /// Binds without checking.
    ///
    /// # Safety
    /// [`Self::validate_bind`] must have accepted `memory` and `offset`.
    unsafe fn bind_unchecked(self, memory: Arc<DeviceMemory>, offset: u64) -> Result<BoundImage> {
        // SAFETY: validated by the caller; the image is unbound.
        unsafe {
            self.ctx
                .device()
                .bind_image_memory(self.image, memory.handle(), offset)
        }
        .vk("vkBindImageMemory")?;
        Ok(BoundImage {
            image: self,
            memory,
            offset,
        })
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        // SAFETY: we created the image; GPU work using it was waited for by its users.
        unsafe { self.ctx.device().destroy_image(self.image, None) };
    }
}

/// An image bound to memory it keeps alive, in [`SHARED_LAYOUT`] between uses: `GENERAL`,
/// owned by `VK_QUEUE_FAMILY_EXTERNAL` when its memory is shared. Vulkan acquires it before
/// its commands and releases it after ([`cmd_acquire_images`](crate::vulkan::cmd_acquire_images),
/// [`cmd_release_images`](crate::vulkan::cmd_release_images), or the frame pacer's
/// `record_image_acquire_from_cuda` / `record_image_release_to_cuda`).
pub struct BoundImage {
    image: Image,
    memory: Arc<DeviceMemory>,
    offset: u64,
}

impl std::fmt::Debug for BoundImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundImage")
            .field("image", &self.image)
            .field("offset", &self.offset)
            .field("memory_size", &self.memory.size())
            .finish()
    }
}

impl BoundImage {
    /// Creates an image in device-local memory of its own (exportable when `options` export
    /// it), dedicated exactly when Vulkan requires or prefers it or `desc` says always, and
    /// transitions it to [`SHARED_LAYOUT`] (released to `VK_QUEUE_FAMILY_EXTERNAL` when
    /// shared) with one submission it waits for ([`Image::bind`]).
    /// Images that import memory come from [`Self::import_from`] instead.
    pub fn new(ctx: &Arc<VulkanContext>, desc: &ImageDesc, options: ImageOptions) -> Result<Self> {
        if options.external == ExternalUse::Import {
            return Err(MemoryError::ImportNeedsSource.into());
        }
        let support = Image::validate(ctx, desc, options)?;
        // SAFETY: validated just above.
        unsafe { Self::new_unchecked(ctx, desc, options, support) }
    }

    /// [`Self::new`] after [`Image::validate`] (and with `options` not importing).
    ///
    /// # Safety
    /// As [`Image::new_unchecked`].
    pub(crate) unsafe fn new_unchecked(
        ctx: &Arc<VulkanContext>,
        desc: &ImageDesc,
        options: ImageOptions,
        support: ImageSupport,
    ) -> Result<Self> {
        // SAFETY: forwarded from the caller.
        let bound = unsafe { Self::new_untransitioned(ctx, desc, options, support) }?;
        bound.enter_shared_layout()?;
        Ok(bound)
    }

    /// [`Self::new`] without the checks (made once, by [`Image::validate`]) and without the
    /// one-time transition: the image is bound and in `UNDEFINED` layout, owned by the
    /// context's queue family. For contexts without a queue (wgpu's device), whose owner
    /// records [`Self::enter_shared_layout_barrier`] itself.
    ///
    /// # Safety
    /// `support` must be [`Image::validate`]'s answer for `ctx`, `desc` and `options`; the
    /// image must not be used before that barrier has executed.
    pub unsafe fn new_untransitioned(
        ctx: &Arc<VulkanContext>,
        desc: &ImageDesc,
        options: ImageOptions,
        support: ImageSupport,
    ) -> Result<Self> {
        // SAFETY: forwarded from the caller.
        let image = unsafe { Image::new_unchecked(ctx, desc, options, support) }?;
        let r = image.requirements();
        let dedicated = image.wants_dedicated();
        let memory = DeviceMemory::allocate_dedicated(
            ctx,
            AllocateInfo {
                size: r.size,
                memory_type_bits: r.memory_type_bits,
                properties: vk::MemoryPropertyFlags::DEVICE_LOCAL,
                exportable: options.external == ExternalUse::Export,
            },
            dedicated.then_some(Dedication::Image(image.image)),
        )?;
        let memory = Arc::new(memory);
        image.validate_bind(&memory, 0)?;
        // SAFETY: validated just above.
        unsafe { image.bind_unchecked(memory, 0) }
    }

    /// The one-time transition `UNDEFINED` → `GENERAL` (and release to the external family).
    fn enter_shared_layout(&self) -> Result<()> {
        let ctx = self.image.context();
        let barrier = [self.enter_shared_layout_barrier()];
        // SAFETY: our live image on this device; one barrier, well formed.
        unsafe {
            ctx.submit_and_wait(|dev, cmd| {
                dev.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TOP_OF_PIPE,
                    vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                    vk::DependencyFlags::empty(),
                    &[],
                    &[],
                    &barrier,
                )
            })
        }
    }

    /// The barrier of the one-time transition `UNDEFINED` → [`SHARED_LAYOUT`] (released to
    /// `VK_QUEUE_FAMILY_EXTERNAL` when shared), every level and layer.
    pub fn enter_shared_layout_barrier(&self) -> vk::ImageMemoryBarrier<'static> {
        let ctx = self.image.context();
        let family = ctx.queue_family_index();
        let dst_family = if self.is_external() {
            vk::QUEUE_FAMILY_EXTERNAL
        } else {
            family
        };
        vk::ImageMemoryBarrier::default()
            .old_layout(vk::ImageLayout::UNDEFINED)
            .new_layout(SHARED_LAYOUT)
            .src_queue_family_index(family)
            .dst_queue_family_index(dst_family)
            .image(self.image.image)
            .subresource_range(self.image.desc.full_range())
    }

    /// Imports `source`'s memory into `ctx` (the same or another `VkDevice` on the same
    /// physical device and driver) and binds a new image of the same description to it, at
    /// the same offset. The new image is in whatever state `source` left the memory in
    /// ([`SHARED_LAYOUT`], released to `VK_QUEUE_FAMILY_EXTERNAL`, if `source` follows the
    /// protocol): no transition is made.
    pub fn import_from(ctx: &Arc<VulkanContext>, source: &BoundImage) -> Result<Self> {
        let (from, to) = (source.image.ctx.info(), ctx.info());
        if from.device_uuid != to.device_uuid || from.driver_uuid != to.driver_uuid {
            return Err(Error::WrongDevice {
                object: crate::DeviceObject::Memory,
                owner: crate::DeviceOwner::PhysicalDevice,
            });
        }
        let desc = source.image.desc;
        let support = Image::validate(ctx, &desc, ImageOptions::IMPORT)?;
        let handle = source.memory.export()?;
        // SAFETY: validated just above.
        let image = unsafe { Image::new_unchecked(ctx, &desc, ImageOptions::IMPORT, support) }?;
        let type_bits =
            image.requirements().memory_type_bits & (1 << source.memory.memory_type_index());
        let dedicated = source
            .memory
            .is_dedicated()
            .then_some(Dedication::Image(image.image));
        // SAFETY: the handle was just exported from `source`'s memory, of exactly that size,
        // on a device with the same UUIDs (checked), as the same memory type.
        let memory = unsafe {
            DeviceMemory::import_dedicated(ctx, handle, source.memory.size(), type_bits, dedicated)
        }?;
        image.bind(Arc::new(memory), source.offset)
    }

    /// The image.
    pub fn image(&self) -> &Image {
        &self.image
    }
    /// The raw handle.
    pub fn handle(&self) -> vk::Image {
        self.image.image
    }
    /// What it was created as.
    pub fn desc(&self) -> &ImageDesc {
        &self.image.desc
    }
    /// The memory it is bound to.
    pub fn memory(&self) -> &Arc<DeviceMemory> {
        &self.memory
    }
    /// Bind offset in the memory.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// Whether its memory is shared (exported or imported): its barriers then transfer
    /// ownership to and from `VK_QUEUE_FAMILY_EXTERNAL`.
    pub fn is_external(&self) -> bool {
        !self.image.external.is_empty()
    }
}

/// Anything that is a live `vk::Image` following the layout protocol of this module: what the
/// barrier and one-shot helpers accept.
///
/// # Safety
/// The safe helpers record GPU reads and writes from these answers alone, so an implementation
/// must guarantee, for as long as `&self` is borrowed: `vk_image` is a live image created on
/// `vk_image_context`'s device as `vk_image_desc` says, bound to memory, and between uses in
/// this module's shared layout; `vk_image_is_external` says truly whether its memory is shared.
pub unsafe trait AsVkImage {
    /// The image handle (valid while `self` lives).
    fn vk_image(&self) -> vk::Image;
    /// What it was created as.
    fn vk_image_desc(&self) -> &ImageDesc;
    /// The context that owns it.
    fn vk_image_context(&self) -> &Arc<VulkanContext>;
    /// Whether its memory is shared, so its barriers transfer ownership with
    /// `VK_QUEUE_FAMILY_EXTERNAL`.
    fn vk_image_is_external(&self) -> bool;
    /// What keeps the image and its memory alive after `self` is gone, where there is such a
    /// thing: the one-shot transfers ([`VulkanContext::copy_image_to_buffer`], ...) park it
    /// when they stop waiting for their submission. `None` (the default): they wait for their
    /// submission without bound.
    fn vk_image_keep_alive(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        None
    }
}

// SAFETY: the handle is owned by this value (destroyed only on its drop), created on the
// context it names with the size or description it reports; host views of its memory are
// only lent through `&self` methods that the `&mut` GPU-write helpers exclude.
unsafe impl AsVkImage for BoundImage {
    fn vk_image(&self) -> vk::Image {
        self.image.image
    }
    fn vk_image_desc(&self) -> &ImageDesc {
        &self.image.desc
    }
    fn vk_image_context(&self) -> &Arc<VulkanContext> {
        &self.image.ctx
    }
    fn vk_image_is_external(&self) -> bool {
        self.is_external()
    }
}
