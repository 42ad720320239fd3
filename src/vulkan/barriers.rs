//! The layout and queue-family ownership protocol, buffers and images, in one place.
//!
//! Memory CUDA shares is owned by `VK_QUEUE_FAMILY_EXTERNAL` between uses (images in
//! [`SHARED_LAYOUT`], `GENERAL`). Before Vulkan's first use in a submission it is *acquired*
//! (ownership to the queue's family; an image also goes to the layout Vulkan wants); after
//! Vulkan's last use it is *released* back (an image returns to `GENERAL`, which is what lets
//! CUDA read a colour attachment Vulkan rendered compressed). The acquire's source stage is
//! `ALL_COMMANDS` and the release's destination `BOTTOM_OF_PIPE`: the semaphore wait before
//! and the signal after the submission carry the execution dependency with CUDA.

use ash::vk;

use super::image::{AsVkImage, SHARED_LAYOUT};
use super::memory::AsVkBuffer;

/// Records the acquire of `buffers` from `VK_QUEUE_FAMILY_EXTERNAL` (CUDA) by `queue_family`,
/// before Vulkan's first access (`dst_stage`, `dst_access`) in this submission.
///
/// # Safety
/// `cmd` must be recording on `device`, which every buffer belongs to; the buffers must stay
/// alive until the commands complete.
pub unsafe fn cmd_acquire_buffers(
    device: &ash::Device,
    cmd: vk::CommandBuffer,
    queue_family: u32,
    buffers: &[&dyn AsVkBuffer],
    dst_stage: vk::PipelineStageFlags,
    dst_access: vk::AccessFlags,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        cmd_buffer_ownership(
            device,
            cmd,
            buffers,
            (vk::QUEUE_FAMILY_EXTERNAL, queue_family),
            // ALL_COMMANDS, as for images: the acquire chains with the semaphore wait before
            // it whatever the wait's stage.
            (vk::PipelineStageFlags::ALL_COMMANDS, dst_stage),
            (vk::AccessFlags::empty(), dst_access),
        )
    }
}

/// Records the release of `buffers` from `queue_family` back to `VK_QUEUE_FAMILY_EXTERNAL`
/// (CUDA), after Vulkan's last access (`src_stage`, `src_access`) in this submission.
///
/// # Safety
/// As [`cmd_acquire_buffers`], each buffer acquired earlier.
pub unsafe fn cmd_release_buffers(
    device: &ash::Device,
    cmd: vk::CommandBuffer,
    queue_family: u32,
    buffers: &[&dyn AsVkBuffer],
    src_stage: vk::PipelineStageFlags,
    src_access: vk::AccessFlags,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        cmd_buffer_ownership(
            device,
            cmd,
            buffers,
            (queue_family, vk::QUEUE_FAMILY_EXTERNAL),
            (src_stage, vk::PipelineStageFlags::BOTTOM_OF_PIPE),
            (src_access, vk::AccessFlags::empty()),
        )
    }
}

/// One queue-family ownership barrier for whole buffers.
///
/// # Safety
/// As [`cmd_acquire_buffers`].
unsafe fn cmd_buffer_ownership(
    device: &ash::Device,
    cmd: vk::CommandBuffer,
    buffers: &[&dyn AsVkBuffer],
    (src_family, dst_family): (u32, u32),
    (src_stage, dst_stage): (vk::PipelineStageFlags, vk::PipelineStageFlags),
    (src_access, dst_access): (vk::AccessFlags, vk::AccessFlags),
) {
    let barriers: Vec<vk::BufferMemoryBarrier> = buffers
        .iter()
        .map(|b| {
            vk::BufferMemoryBarrier::default()
                .src_access_mask(src_access)
                .dst_access_mask(dst_access)
                .src_queue_family_index(src_family)
                .dst_queue_family_index(dst_family)
                .buffer(b.vk_buffer())
                .offset(0)
                .size(vk::WHOLE_SIZE)
        })
        .collect();
    // SAFETY: forwarded from the caller (a recording command buffer of this device, live
    // buffers of it).
    unsafe {
        device.cmd_pipeline_barrier(
            cmd,
            src_stage,
            dst_stage,
            vk::DependencyFlags::empty(),
            &[],
            &barriers,
            &[],
        )
    }
}

/// The acquire barrier of the protocol: ownership from `VK_QUEUE_FAMILY_EXTERNAL` to
/// `queue_family` (for an external image), [`SHARED_LAYOUT`] → `new_layout`, every level and
/// layer. Record it with `srcStageMask = ALL_COMMANDS` (so the transition follows the
/// semaphore wait whatever its stage), as [`cmd_acquire_images`] does.
pub fn acquire_barrier(
    image: &dyn AsVkImage,
    queue_family: u32,
    new_layout: vk::ImageLayout,
    dst_access: vk::AccessFlags,
) -> vk::ImageMemoryBarrier<'static> {
    let src_family = if image.vk_image_is_external() {
        vk::QUEUE_FAMILY_EXTERNAL
    } else {
        queue_family
    };
    vk::ImageMemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::empty())
        .dst_access_mask(dst_access)
        .old_layout(SHARED_LAYOUT)
        .new_layout(new_layout)
        .src_queue_family_index(src_family)
        .dst_queue_family_index(queue_family)
        .image(image.vk_image())
        .subresource_range(image.vk_image_desc().full_range())
}

/// The release barrier of the protocol: `old_layout` (the layout Vulkan last used) →
/// [`SHARED_LAYOUT`], ownership from `queue_family` to `VK_QUEUE_FAMILY_EXTERNAL` (for an
/// external image), every level and layer.
pub fn release_barrier(
    image: &dyn AsVkImage,
    queue_family: u32,
    old_layout: vk::ImageLayout,
    src_access: vk::AccessFlags,
) -> vk::ImageMemoryBarrier<'static> {
    let dst_family = if image.vk_image_is_external() {
        vk::QUEUE_FAMILY_EXTERNAL
    } else {
        queue_family
    };
    vk::ImageMemoryBarrier::default()
        .src_access_mask(src_access)
        .dst_access_mask(vk::AccessFlags::empty())
        .old_layout(old_layout)
        .new_layout(SHARED_LAYOUT)
        .src_queue_family_index(queue_family)
        .dst_queue_family_index(dst_family)
        .image(image.vk_image())
        .subresource_range(image.vk_image_desc().full_range())
}

/// Which way [`ownership_barriers`] move shared images.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnershipTransfer {
    /// From CUDA (`VK_QUEUE_FAMILY_EXTERNAL`) to the queue family, before Vulkan's use.
    Acquire,
    /// From the queue family back to CUDA, after Vulkan's use.
    Release,
}

/// The protocol's ownership barriers of `images` for an engine whose own render graph records
/// the layout transitions (wgpu, Bevy): each image stays in [`SHARED_LAYOUT`] and moves between
/// `VK_QUEUE_FAMILY_EXTERNAL` and `queue_family` ([`acquire_barrier`] / [`release_barrier`]),
/// with every memory access made available and visible.
pub fn ownership_barriers<'a>(
    images: impl IntoIterator<Item = &'a dyn AsVkImage>,
    queue_family: u32,
    transfer: OwnershipTransfer,
) -> Vec<vk::ImageMemoryBarrier<'static>> {
    let all = vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE;
    images
        .into_iter()
        .map(|image| match transfer {
            OwnershipTransfer::Acquire => acquire_barrier(image, queue_family, SHARED_LAYOUT, all),
            OwnershipTransfer::Release => release_barrier(image, queue_family, SHARED_LAYOUT, all),
        })
        .collect()
}

/// Records the acquire of each image (with the layout Vulkan will use it in), in one barrier:
/// `ALL_COMMANDS` → `dst_stage`.
///
/// # Safety
/// `cmd` must be recording on `device`, which every image belongs to; each image must be in
/// [`SHARED_LAYOUT`] and released (the protocol's state between uses) when the commands run,
/// and stay alive until they complete.
pub unsafe fn cmd_acquire_images(
    device: &ash::Device,
    cmd: vk::CommandBuffer,
    queue_family: u32,
    images: &[(&dyn AsVkImage, vk::ImageLayout)],
    dst_stage: vk::PipelineStageFlags,
    dst_access: vk::AccessFlags,
) {
    let barriers: Vec<vk::ImageMemoryBarrier> = images
        .iter()
        .map(|&(image, layout)| acquire_barrier(image, queue_family, layout, dst_access))
        .collect();
    // SAFETY: forwarded from the caller.
    unsafe {
        device.cmd_pipeline_barrier(
            cmd,
            vk::PipelineStageFlags::ALL_COMMANDS,
            dst_stage,
            vk::DependencyFlags::empty(),
            &[],
            &[],
            &barriers,
        )
    }
}

/// Records the release of each image (from the layout Vulkan last used), in one barrier:
/// `src_stage` → `BOTTOM_OF_PIPE` (a later semaphore signal covers the transition).
///
/// # Safety
/// As [`cmd_acquire_images`], each image acquired earlier and now in the given layout.
pub unsafe fn cmd_release_images(
    device: &ash::Device,
    cmd: vk::CommandBuffer,
    queue_family: u32,
    images: &[(&dyn AsVkImage, vk::ImageLayout)],
    src_stage: vk::PipelineStageFlags,
    src_access: vk::AccessFlags,
) {
    let barriers: Vec<vk::ImageMemoryBarrier> = images
        .iter()
        .map(|&(image, layout)| release_barrier(image, queue_family, layout, src_access))
        .collect();
    // SAFETY: forwarded from the caller.
    unsafe {
        device.cmd_pipeline_barrier(
            cmd,
            src_stage,
            vk::PipelineStageFlags::BOTTOM_OF_PIPE,
            vk::DependencyFlags::empty(),
            &[],
            &[],
            &barriers,
        )
    }
}
