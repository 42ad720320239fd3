//! Renders into a shared image as a colour attachment (a render-pass clear plus a triangle
//! drawn by shaders/gradient.{vert,frag} over the left half), following the image protocol:
//! acquire from `GENERAL` into `COLOR_ATTACHMENT_OPTIMAL`, render, release back. What a wrong
//! layout or a missing transition would spoil: compressed colour attachments and fast clears.
//! Shared by the Vulkan and the GPU image tests.

use std::sync::Arc;

use cuvk::ash::vk;
use cuvk::vulkan::{cmd_acquire_images, cmd_release_images, AsVkImage, VulkanContext};

const VERT: &[u8] = include_bytes!("../../../shaders/gradient.vert.spv");
const FRAG: &[u8] = include_bytes!("../../../shaders/gradient.frag.spv");

/// The render-pass clear colour, exact in UNORM8: (51, 102, 153, 255).
pub const CLEAR: [f32; 4] = [51.0 / 255.0, 102.0 / 255.0, 153.0 / 255.0, 1.0];
/// [`CLEAR`] as stored in an RGBA8 UNORM image.
pub const CLEAR_BYTES: [u8; 4] = [51, 102, 153, 255];

/// The RGBA8 texel at (x, y) of an image `width` wide after [`render_gradient`]: the gradient
/// on the left half (x < width / 2), the clear colour on the right.
pub fn gradient_texel(x: u32, y: u32, width: u32) -> [u8; 4] {
    if x < width / 2 {
        [
            (x & 255) as u8,
            (y & 255) as u8,
            ((x + 2 * y) & 255) as u8,
            255,
        ]
    } else {
        CLEAR_BYTES
    }
}

/// Every texel of level 0 of a `width`×`height` image after [`render_gradient`], row by row.
pub fn gradient_bytes(width: u32, height: u32) -> Vec<u8> {
    (0..height)
        .flat_map(|y| (0..width).flat_map(move |x| gradient_texel(x, y, width)))
        .collect()
}

/// How the render ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The protocol: `COLOR_ATTACHMENT_OPTIMAL` → `GENERAL`, to the external family.
    Protocol,
    /// The classic mistake: ownership released but the image left in
    /// `COLOR_ATTACHMENT_OPTIMAL` (no transition, so possibly still compressed).
    WithoutTransition,
}

/// Renders the gradient into level 0, layer 0 of `image` (an RGBA8 UNORM image with
/// `COLOR_ATTACHMENT` usage, in the protocol's state between uses) and waits.
pub fn render_gradient(ctx: &Arc<VulkanContext>, image: &dyn AsVkImage, release: Release) {
    let desc = *image.vk_image_desc();
    let (w, h) = (desc.extent.width, desc.extent.height);
    let dev = ctx.device();
    // SAFETY: every object is created on this device, used by one waited submission, and
    // destroyed after it; the image follows the protocol (caller).
    unsafe {
        let view = dev
            .create_image_view(
                &vk::ImageViewCreateInfo::default()
                    .image(image.vk_image())
                    .view_type(vk::ImageViewType::TYPE_2D)
                    .format(desc.format)
                    .subresource_range(vk::ImageSubresourceRange {
                        aspect_mask: vk::ImageAspectFlags::COLOR,
                        base_mip_level: 0,
                        level_count: 1,
                        base_array_layer: 0,
                        layer_count: 1,
                    }),
                None,
            )
            .unwrap();
        let attachment = [vk::AttachmentDescription::default()
            .format(desc.format)
            .samples(vk::SampleCountFlags::TYPE_1)
            .load_op(vk::AttachmentLoadOp::CLEAR)
            .store_op(vk::AttachmentStoreOp::STORE)
            .stencil_load_op(vk::AttachmentLoadOp::DONT_CARE)
            .stencil_store_op(vk::AttachmentStoreOp::DONT_CARE)
            .initial_layout(vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL)
            .final_layout(vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL)];
        let color_ref = [vk::AttachmentReference {
            attachment: 0,
            layout: vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
        }];
        let subpass = [vk::SubpassDescription::default()
            .pipeline_bind_point(vk::PipelineBindPoint::GRAPHICS)
            .color_attachments(&color_ref)];
        let render_pass = dev
            .create_render_pass(
                &vk::RenderPassCreateInfo::default()
                    .attachments(&attachment)
                    .subpasses(&subpass),
                None,
            )
            .unwrap();
        let views = [view];
        let framebuffer = dev
            .create_framebuffer(
                &vk::FramebufferCreateInfo::default()
                    .render_pass(render_pass)
                    .attachments(&views)
                    .width(w)
                    .height(h)
                    .layers(1),
                None,
            )
            .unwrap();
        let module = |spv: &[u8]| {
            let code = cuvk::ash::util::read_spv(&mut std::io::Cursor::new(spv)).unwrap();
            dev.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&code), None)
                .unwrap()
        };
        let (vert, frag) = (module(VERT), module(FRAG));
        let layout = dev
            .create_pipeline_layout(&vk::PipelineLayoutCreateInfo::default(), None)
            .unwrap();
        let stages = [
            vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::VERTEX)
                .module(vert)
                .name(c"main"),
            vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::FRAGMENT)
                .module(frag)
                .name(c"main"),
        ];
        let vertex_input = vk::PipelineVertexInputStateCreateInfo::default();
        let assembly = vk::PipelineInputAssemblyStateCreateInfo::default()
            .topology(vk::PrimitiveTopology::TRIANGLE_LIST);
        let viewport = [vk::Viewport {
            x: 0.0,
            y: 0.0,
            width: w as f32,
            height: h as f32,
            min_depth: 0.0,
            max_depth: 1.0,
        }];
        // The gradient covers the left half; the right half keeps the render-pass clear.
        let scissor = [vk::Rect2D {
            offset: vk::Offset2D { x: 0, y: 0 },
            extent: vk::Extent2D {
                width: w / 2,
                height: h,
            },
        }];
        let viewport_state = vk::PipelineViewportStateCreateInfo::default()
            .viewports(&viewport)
            .scissors(&scissor);
        let raster = vk::PipelineRasterizationStateCreateInfo::default()
            .polygon_mode(vk::PolygonMode::FILL)
            .cull_mode(vk::CullModeFlags::NONE)
            .front_face(vk::FrontFace::COUNTER_CLOCKWISE)
            .line_width(1.0);
        let multisample = vk::PipelineMultisampleStateCreateInfo::default()
            .rasterization_samples(vk::SampleCountFlags::TYPE_1);
        let blend_attachment = [vk::PipelineColorBlendAttachmentState::default()
            .color_write_mask(vk::ColorComponentFlags::RGBA)];
        let blend = vk::PipelineColorBlendStateCreateInfo::default().attachments(&blend_attachment);
        let info = [vk::GraphicsPipelineCreateInfo::default()
            .stages(&stages)
            .vertex_input_state(&vertex_input)
            .input_assembly_state(&assembly)
            .viewport_state(&viewport_state)
            .rasterization_state(&raster)
            .multisample_state(&multisample)
            .color_blend_state(&blend)
            .layout(layout)
            .render_pass(render_pass)
            .subpass(0)];
        let pipeline = dev
            .create_graphics_pipelines(vk::PipelineCache::null(), &info, None)
            .map_err(|(_, e)| e)
            .unwrap()[0];
        let family = ctx.queue_family_index();
        let attachment_layout = vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL;
        let clear = [vk::ClearValue {
            color: vk::ClearColorValue { float32: CLEAR },
        }];
        ctx.submit_and_wait(|dev, cmd| {
            cmd_acquire_images(
                dev,
                cmd,
                family,
                &[(image, attachment_layout)],
                vk::PipelineStageFlags::COLOR_ATTACHMENT_OUTPUT,
                vk::AccessFlags::COLOR_ATTACHMENT_WRITE,
            );
            dev.cmd_begin_render_pass(
                cmd,
                &vk::RenderPassBeginInfo::default()
                    .render_pass(render_pass)
                    .framebuffer(framebuffer)
                    .render_area(vk::Rect2D {
                        offset: vk::Offset2D { x: 0, y: 0 },
                        extent: vk::Extent2D {
                            width: w,
                            height: h,
                        },
                    })
                    .clear_values(&clear),
                vk::SubpassContents::INLINE,
            );
            dev.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::GRAPHICS, pipeline);
            dev.cmd_draw(cmd, 3, 1, 0, 0);
            dev.cmd_end_render_pass(cmd);
            match release {
                Release::Protocol => cmd_release_images(
                    dev,
                    cmd,
                    family,
                    &[(image, attachment_layout)],
                    vk::PipelineStageFlags::COLOR_ATTACHMENT_OUTPUT,
                    vk::AccessFlags::COLOR_ATTACHMENT_WRITE,
                ),
                Release::WithoutTransition => {
                    let barrier = [vk::ImageMemoryBarrier::default()
                        .src_access_mask(vk::AccessFlags::COLOR_ATTACHMENT_WRITE)
                        .old_layout(attachment_layout)
                        .new_layout(attachment_layout)
                        .src_queue_family_index(family)
                        .dst_queue_family_index(vk::QUEUE_FAMILY_EXTERNAL)
                        .image(image.vk_image())
                        .subresource_range(desc.full_range())];
                    dev.cmd_pipeline_barrier(
                        cmd,
                        vk::PipelineStageFlags::COLOR_ATTACHMENT_OUTPUT,
                        vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                        vk::DependencyFlags::empty(),
                        &[],
                        &[],
                        &barrier,
                    );
                }
            }
        })
        .unwrap();
        dev.destroy_pipeline(pipeline, None);
        dev.destroy_pipeline_layout(layout, None);
        dev.destroy_shader_module(vert, None);
        dev.destroy_shader_module(frag, None);
        dev.destroy_framebuffer(framebuffer, None);
        dev.destroy_render_pass(render_pass, None);
        dev.destroy_image_view(view, None);
    }
}
