//! One-shot transfers of shared images (copies to and from buffers, clears): each acquires the
//! image from CUDA, records its command, releases it back, and waits, as the buffer helpers in
//! `commands` do. Apart from `image`, so that the barriers (which know images) and the image
//! type (which knows no barrier) do not import each other.

use ash::vk;

use crate::error::{Error, Result};
use crate::rules::image_format;
use crate::rules::layout;
use crate::vulkan::barriers::{cmd_acquire_images, cmd_release_images};
use crate::vulkan::image::{AsVkImage, ImageDesc};
use crate::vulkan::{AsVkBuffer, VulkanContext};

/// One mip level and a range of its layers, as the one-shot copy helpers take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageRegion {
    /// Mip level.
    pub level: u32,
    /// First array layer (cube faces are layers 0..6).
    pub first_layer: u32,
    /// Number of layers (at least 1).
    pub layers: u32,
}

impl ImageRegion {
    /// Every layer of mip level `level` of an image described by `desc`.
    pub fn level(desc: &ImageDesc, level: u32) -> Self {
        Self {
            level,
            first_layer: 0,
            layers: desc.kind.layers(),
        }
    }
}

/// The `VkBufferImageCopy` of `region` (tightly packed at `buffer_offset`) and its byte size,
/// after checking the level, layers and format.
fn copy_region(
    desc: &ImageDesc,
    region: ImageRegion,
    buffer_offset: u64,
) -> Result<(vk::BufferImageCopy, u64)> {
    let shape = desc.shape();
    shape.check_level(region.level)?;
    shape.check_layers(region.first_layer, region.layers)?;
    let texel = image_format::format_info(desc.format)?.texel_bytes();
    layout::check_aligned(
        "offset",
        buffer_offset,
        u64::from(texel),
        layout::AlignmentRule::Texel,
    )?;
    let (w, h, d) = shape.level_extent(region.level);
    let bytes =
        u64::from(w) * u64::from(h) * u64::from(d) * u64::from(region.layers) * u64::from(texel);
    let copy = vk::BufferImageCopy {
        buffer_offset,
        buffer_row_length: 0,
        buffer_image_height: 0,
        image_subresource: vk::ImageSubresourceLayers {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            mip_level: region.level,
            base_array_layer: region.first_layer,
            layer_count: region.layers,
        },
        image_offset: vk::Offset3D::default(),
        image_extent: vk::Extent3D {
            width: w,
            height: h,
            depth: d,
        },
    };
    Ok((copy, bytes))
}

impl VulkanContext {
    fn check_image(&self, image: &dyn AsVkImage) -> Result<()> {
        if self.same_device(image.vk_image_context()) {
            Ok(())
        } else {
            Err(Error::WrongDevice {
                object: crate::DeviceObject::Image,
                owner: crate::DeviceOwner::VulkanDevice,
            })
        }
    }

    fn check_buffer(&self, buffer: &dyn AsVkBuffer) -> Result<()> {
        if self.same_device(buffer.vk_context()) {
            Ok(())
        } else {
            Err(Error::WrongDevice {
                object: crate::DeviceObject::Buffer,
                owner: crate::DeviceOwner::VulkanDevice,
            })
        }
    }

    /// Copies `region` of `src` (tightly packed, all its layers in order) into `dst` at
    /// `dst_offset`, and waits (bounded as [`VulkanContext::copy_buffer`]'s wait, with
    /// [`AsVkImage::vk_image_keep_alive`] for the image). The image follows the protocol: acquired from
    /// [`SHARED_LAYOUT`](crate::vulkan::SHARED_LAYOUT), released back to it. Its format must be in the table
    /// ([`image_format::FORMATS`]), which gives the texel size.
    pub fn copy_image_to_buffer(
        &self,
        src: &dyn AsVkImage,
        region: ImageRegion,
        dst: &mut dyn AsVkBuffer,
        dst_offset: u64,
    ) -> Result<()> {
        self.check_image(src)?;
        self.check_buffer(&*dst)?;
        image_format::check_usage(
            src.vk_image_desc().usage,
            vk::ImageUsageFlags::TRANSFER_SRC,
            "vkCmdCopyImageToBuffer",
            Some("VUID-vkCmdCopyImageToBuffer-srcImage-00186"),
        )?;
        crate::vulkan::memory::check_buffer_usage(
            &*dst,
            "vkCmdCopyImageToBuffer",
            "destination",
            vk::BufferUsageFlags::TRANSFER_DST,
            "VUID-vkCmdCopyImageToBuffer-dstBuffer-00191",
        )?;
        let (copy, bytes) = copy_region(src.vk_image_desc(), region, dst_offset)?;
        layout::check_range(dst_offset, bytes, "destination buffer", dst.vk_size())?;
        let (image, buffer) = (src.vk_image(), dst.vk_buffer());
        let layout = vk::ImageLayout::TRANSFER_SRC_OPTIMAL;
        let transfer = Transfer {
            image: src,
            layout,
            access: vk::AccessFlags::TRANSFER_READ,
            release_access: vk::AccessFlags::empty(),
            buffer: Some(&*dst),
        };
        // SAFETY: both objects are alive (borrowed), belong to this device, and are kept alive
        // past the call where it may return early; the image is in the protocol's state
        // between uses (its contract); region and range checked.
        unsafe {
            self.transfer(transfer, |dev, cmd| {
                dev.cmd_copy_image_to_buffer(cmd, image, layout, buffer, &[copy]);
            })
        }
    }

    /// Copies `src` at `src_offset` (tightly packed, all the region's layers in order) into
    /// `region` of `dst`, and waits; the image follows the protocol.
    pub fn copy_buffer_to_image(
        &self,
        src: &dyn AsVkBuffer,
        src_offset: u64,
        dst: &mut dyn AsVkImage,
        region: ImageRegion,
    ) -> Result<()> {
        self.check_buffer(src)?;
        self.check_image(&*dst)?;
        image_format::check_usage(
            dst.vk_image_desc().usage,
            vk::ImageUsageFlags::TRANSFER_DST,
            "vkCmdCopyBufferToImage",
            Some("VUID-vkCmdCopyBufferToImage-dstImage-00177"),
        )?;
        crate::vulkan::memory::check_buffer_usage(
            src,
            "vkCmdCopyBufferToImage",
            "source",
            vk::BufferUsageFlags::TRANSFER_SRC,
            "VUID-vkCmdCopyBufferToImage-srcBuffer-00174",
        )?;
        let (copy, bytes) = copy_region(dst.vk_image_desc(), region, src_offset)?;
        layout::check_range(src_offset, bytes, "source buffer", src.vk_size())?;
        let (image, buffer) = (dst.vk_image(), src.vk_buffer());
        let layout = vk::ImageLayout::TRANSFER_DST_OPTIMAL;
        let transfer = Transfer {
            image: &*dst,
            layout,
            access: vk::AccessFlags::TRANSFER_WRITE,
            release_access: vk::AccessFlags::TRANSFER_WRITE,
            buffer: Some(src),
        };
        // SAFETY: as copy_image_to_buffer.
        unsafe {
            self.transfer(transfer, |dev, cmd| {
                dev.cmd_copy_buffer_to_image(cmd, buffer, image, layout, &[copy]);
            })
        }
    }

    /// Clears every level and layer of `image` to `color` with `vkCmdClearColorImage`, and
    /// waits; the image follows the protocol (it needs `TRANSFER_DST` usage).
    pub fn clear_color_image(
        &self,
        image: &mut dyn AsVkImage,
        color: vk::ClearColorValue,
    ) -> Result<()> {
        self.check_image(&*image)?;
        let desc = *image.vk_image_desc();
        image_format::check_usage(
            desc.usage,
            vk::ImageUsageFlags::TRANSFER_DST,
            "vkCmdClearColorImage",
            Some("VUID-vkCmdClearColorImage-image-00002"),
        )?;
        let handle = image.vk_image();
        let layout = vk::ImageLayout::TRANSFER_DST_OPTIMAL;
        let transfer = Transfer {
            image: &*image,
            layout,
            access: vk::AccessFlags::TRANSFER_WRITE,
            release_access: vk::AccessFlags::TRANSFER_WRITE,
            buffer: None,
        };
        // SAFETY: as copy_image_to_buffer.
        unsafe {
            self.transfer(transfer, |dev, cmd| {
                dev.cmd_clear_color_image(cmd, handle, layout, &color, &[desc.full_range()]);
            })
        }
    }

    /// Records `command` between the acquire of `t.image` (into `t.layout`, for `t.access`)
    /// and its release back to the protocol's state, submits it and waits: at most the drop
    /// timeout where the image and the buffer can be kept alive past the call (parked with the
    /// submission meanwhile), else without bound.
    ///
    /// # Safety
    /// `command` must record valid transfer commands on `t.image` (in `t.layout`) and
    /// `t.buffer` only; both must belong to this device and be in the state the protocol
    /// promises between uses.
    unsafe fn transfer(
        &self,
        t: Transfer<'_>,
        command: impl FnOnce(&ash::Device, vk::CommandBuffer),
    ) -> Result<()> {
        let family = self.queue_family_index();
        let (timeout, kept) = self.one_shot_bound(
            std::iter::once(t.image.vk_image_keep_alive())
                .chain(t.buffer.map(|b| b.vk_keep_alive())),
        );
        let image = [(t.image, t.layout)];
        let stage = vk::PipelineStageFlags::TRANSFER;
        // SAFETY: forwarded from the caller; what the commands use is alive across the call
        // (borrowed) and past it (`kept`) where it may return early.
        unsafe {
            self.submit_and_wait_timeout(timeout, kept, |dev, cmd| {
                cmd_acquire_images(dev, cmd, family, &image, stage, t.access);
                command(dev, cmd);
                cmd_release_images(dev, cmd, family, &image, stage, t.release_access);
            })
        }
    }
}

/// One transfer of [`VulkanContext::transfer`]: the image, the layout and accesses of the
/// command on it, and the buffer it copies to or from.
struct Transfer<'a> {
    image: &'a dyn AsVkImage,
    layout: vk::ImageLayout,
    /// The command's accesses to the image (the acquire's destination access).
    access: vk::AccessFlags,
    /// What the release makes available (the writes; none after a read).
    release_access: vk::AccessFlags,
    buffer: Option<&'a dyn AsVkBuffer>,
}
