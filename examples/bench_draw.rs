//! How to draw millions of points on this GPU: point-list rasterisation (shaders/points.vert +
//! points.frag, additive blending into an RGBA16F image) against the compute splat the demo
//! uses (shaders/splat.comp into a per-pixel counter buffer, then resolve.comp). Both read the
//! same particle buffer; each is timed on the GPU with timestamp queries.
//!
//!     cargo run --release --example bench_draw [-- --json out.json]

use std::sync::Arc;

use anyhow::{bail, Context};
use cuvk::ash::vk;
use cuvk::vulkan::{AsVkBuffer, BoundBuffer, HostBuffer, Validation, VulkanConfig, VulkanContext};
use cuvk_dev::{logger, sim::particles as sim, stats, ComputePipeline};
use stats::median;

const W: u32 = 1920;
const H: u32 = 1080;
const FORMAT: vk::Format = vk::Format::R16G16B16A16_SFLOAT;

fn spv(name: &str) -> anyhow::Result<Vec<u32>> {
    let path = format!("{}/shaders/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path)
        .or_else(|_| std::fs::read(format!("shaders/{name}")))
        .with_context(|| format!("reading {path}"))?;
    Ok(cuvk::ash::util::read_spv(&mut std::io::Cursor::new(bytes))?)
}

fn spv_bytes(name: &str) -> anyhow::Result<Vec<u8>> {
    Ok(spv(name)?.iter().flat_map(|w| w.to_ne_bytes()).collect())
}

/// The raster path's Vulkan objects (destroyed on drop).
struct Raster {
    vk: Arc<VulkanContext>,
    image: vk::Image,
    memory: vk::DeviceMemory,
    view: vk::ImageView,
    pass: vk::RenderPass,
    fb: vk::Framebuffer,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    pool: vk::DescriptorPool,
    set: vk::DescriptorSet,
    modules: [vk::ShaderModule; 2],
}

impl Raster {
    fn new(vk: &Arc<VulkanContext>, positions: &dyn AsVkBuffer) -> anyhow::Result<Self> {
        let d = vk.device();
        // SAFETY: (all calls in this function) valid device; create infos live across each
        // call; every handle is destroyed in Drop.
        unsafe {
            let image = d.create_image(
                &vk::ImageCreateInfo::default()
                    .image_type(vk::ImageType::TYPE_2D)
                    .format(FORMAT)
                    .extent(vk::Extent3D {
                        width: W,
                        height: H,
                        depth: 1,
                    })
                    .mip_levels(1)
                    .array_layers(1)
                    .samples(vk::SampleCountFlags::TYPE_1)
                    .usage(vk::ImageUsageFlags::COLOR_ATTACHMENT),
                None,
            )?;
            let req = d.get_image_memory_requirements(image);
            let ty = vk
                .find_memory_type(req.memory_type_bits, vk::MemoryPropertyFlags::DEVICE_LOCAL)
                .context("no device-local memory for the image")?;
            let memory = d.allocate_memory(
                &vk::MemoryAllocateInfo::default()
                    .allocation_size(req.size)
                    .memory_type_index(ty),
                None,
            )?;
            d.bind_image_memory(image, memory, 0)?;
            let range = vk::ImageSubresourceRange {
                aspect_mask: vk::ImageAspectFlags::COLOR,
                base_mip_level: 0,
                level_count: 1,
                base_array_layer: 0,
                layer_count: 1,
            };
            let view = d.create_image_view(
                &vk::ImageViewCreateInfo::default()
                    .image(image)
                    .view_type(vk::ImageViewType::TYPE_2D)
                    .format(FORMAT)
                    .subresource_range(range),
                None,
            )?;
            let attachment = [vk::AttachmentDescription::default()
                .format(FORMAT)
                .samples(vk::SampleCountFlags::TYPE_1)
                .load_op(vk::AttachmentLoadOp::CLEAR)
                .store_op(vk::AttachmentStoreOp::STORE)
                .initial_layout(vk::ImageLayout::UNDEFINED)
                .final_layout(vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL)];
            let color_ref = [vk::AttachmentReference {
                attachment: 0,
                layout: vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
            }];
            let subpass = [vk::SubpassDescription::default()
                .pipeline_bind_point(vk::PipelineBindPoint::GRAPHICS)
                .color_attachments(&color_ref)];
            let pass = d.create_render_pass(
                &vk::RenderPassCreateInfo::default()
                    .attachments(&attachment)
                    .subpasses(&subpass),
                None,
            )?;
            let views = [view];
            let fb = d.create_framebuffer(
                &vk::FramebufferCreateInfo::default()
                    .render_pass(pass)
                    .attachments(&views)
                    .width(W)
                    .height(H)
                    .layers(1),
                None,
            )?;
            let binding = [vk::DescriptorSetLayoutBinding::default()
                .binding(0)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::VERTEX)];
            let set_layout = d.create_descriptor_set_layout(
                &vk::DescriptorSetLayoutCreateInfo::default().bindings(&binding),
                None,
            )?;
            let push = [vk::PushConstantRange::default()
                .stage_flags(vk::ShaderStageFlags::VERTEX)
                .size(64)];
            let set_layouts = [set_layout];
            let layout = d.create_pipeline_layout(
                &vk::PipelineLayoutCreateInfo::default()
                    .set_layouts(&set_layouts)
                    .push_constant_ranges(&push),
                None,
            )?;
            let vert = d.create_shader_module(
                &vk::ShaderModuleCreateInfo::default().code(&spv("points.vert.spv")?),
                None,
            )?;
            let frag = d.create_shader_module(
                &vk::ShaderModuleCreateInfo::default().code(&spv("points.frag.spv")?),
                None,
            )?;
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
                .topology(vk::PrimitiveTopology::POINT_LIST);
            let viewport = [vk::Viewport {
                x: 0.0,
                y: 0.0,
                width: W as f32,
                height: H as f32,
                min_depth: 0.0,
                max_depth: 1.0,
            }];
            let scissor = [vk::Rect2D {
                offset: vk::Offset2D::default(),
                extent: vk::Extent2D {
                    width: W,
                    height: H,
                },
            }];
            let viewport_state = vk::PipelineViewportStateCreateInfo::default()
                .viewports(&viewport)
                .scissors(&scissor);
            let raster = vk::PipelineRasterizationStateCreateInfo::default()
                .polygon_mode(vk::PolygonMode::FILL)
                .cull_mode(vk::CullModeFlags::NONE)
                .line_width(1.0);
            let multisample = vk::PipelineMultisampleStateCreateInfo::default()
                .rasterization_samples(vk::SampleCountFlags::TYPE_1);
            let blend_attachment = [vk::PipelineColorBlendAttachmentState::default()
                .blend_enable(true)
                .src_color_blend_factor(vk::BlendFactor::ONE)
                .dst_color_blend_factor(vk::BlendFactor::ONE)
                .color_blend_op(vk::BlendOp::ADD)
                .src_alpha_blend_factor(vk::BlendFactor::ONE)
                .dst_alpha_blend_factor(vk::BlendFactor::ONE)
                .alpha_blend_op(vk::BlendOp::ADD)
                .color_write_mask(vk::ColorComponentFlags::RGBA)];
            let blend =
                vk::PipelineColorBlendStateCreateInfo::default().attachments(&blend_attachment);
            let info = [vk::GraphicsPipelineCreateInfo::default()
                .stages(&stages)
                .vertex_input_state(&vertex_input)
                .input_assembly_state(&assembly)
                .viewport_state(&viewport_state)
                .rasterization_state(&raster)
                .multisample_state(&multisample)
                .color_blend_state(&blend)
                .layout(layout)
                .render_pass(pass)];
            let pipeline = d
                .create_graphics_pipelines(vk::PipelineCache::null(), &info, None)
                .map_err(|(_, e)| e)?[0];
            let sizes = [vk::DescriptorPoolSize::default()
                .ty(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)];
            let pool = d.create_descriptor_pool(
                &vk::DescriptorPoolCreateInfo::default()
                    .max_sets(1)
                    .pool_sizes(&sizes),
                None,
            )?;
            let set = d.allocate_descriptor_sets(
                &vk::DescriptorSetAllocateInfo::default()
                    .descriptor_pool(pool)
                    .set_layouts(&set_layouts),
            )?[0];
            let info = [vk::DescriptorBufferInfo::default()
                .buffer(positions.vk_buffer())
                .range(vk::WHOLE_SIZE)];
            let write = [vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(0)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(&info)];
            d.update_descriptor_sets(&write, &[]);
            Ok(Self {
                vk: vk.clone(),
                image,
                memory,
                view,
                pass,
                fb,
                set_layout,
                layout,
                pipeline,
                pool,
                set,
                modules: [vert, frag],
            })
        }
    }

    /// Records a render pass drawing `count` points.
    ///
    /// # Safety
    /// `cmd` must be recording on this pipeline's device, outside a render pass.
    unsafe fn record(&self, cmd: vk::CommandBuffer, view_proj: &[u8], count: u32) {
        let d = self.vk.device();
        let clear = [vk::ClearValue {
            color: vk::ClearColorValue { float32: [0.0; 4] },
        }];
        let begin = vk::RenderPassBeginInfo::default()
            .render_pass(self.pass)
            .framebuffer(self.fb)
            .render_area(vk::Rect2D {
                offset: vk::Offset2D::default(),
                extent: vk::Extent2D {
                    width: W,
                    height: H,
                },
            })
            .clear_values(&clear);
        // SAFETY: recording state; all objects are ours and alive.
        unsafe {
            d.cmd_begin_render_pass(cmd, &begin, vk::SubpassContents::INLINE);
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::GRAPHICS, self.pipeline);
            d.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::GRAPHICS,
                self.layout,
                0,
                &[self.set],
                &[],
            );
            d.cmd_push_constants(cmd, self.layout, vk::ShaderStageFlags::VERTEX, 0, view_proj);
            d.cmd_draw(cmd, count, 1, 0, 0);
            d.cmd_end_render_pass(cmd);
        }
    }
}

impl Drop for Raster {
    fn drop(&mut self) {
        let d = self.vk.device();
        // SAFETY: the device is idle after every timed submission; objects are ours.
        unsafe {
            let _ = d.device_wait_idle();
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_pool(self.pool, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
            for m in self.modules {
                d.destroy_shader_module(m, None);
            }
            d.destroy_framebuffer(self.fb, None);
            d.destroy_render_pass(self.pass, None);
            d.destroy_image_view(self.view, None);
            d.destroy_image(self.image, None);
            d.free_memory(self.memory, None);
        }
    }
}

/// Median GPU milliseconds of `reps` submissions of what `record` records, by timestamps.
fn time_ms(
    vk: &Arc<VulkanContext>,
    reps: usize,
    record: &dyn Fn(vk::CommandBuffer),
) -> anyhow::Result<f64> {
    let d = vk.device();
    // SAFETY: valid device; destroyed below.
    let pool = unsafe {
        d.create_query_pool(
            &vk::QueryPoolCreateInfo::default()
                .query_type(vk::QueryType::TIMESTAMP)
                .query_count(2),
            None,
        )
    }?;
    // SAFETY: valid instance/physical device.
    let period = unsafe {
        vk.instance()
            .get_physical_device_properties(vk.physical_device())
    }
    .limits
    .timestamp_period as f64;
    let mut v = Vec::new();
    for i in 0..reps + 2 {
        // SAFETY: everything recorded is alive until the submission is waited for.
        unsafe {
            vk.submit_and_wait(|dev, cmd| {
                dev.cmd_reset_query_pool(cmd, pool, 0, 2);
                dev.cmd_write_timestamp(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, pool, 0);
                record(cmd);
                dev.cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, pool, 1);
            })?;
        }
        let mut ts = [0u64; 2];
        // SAFETY: both queries were written by the completed submission.
        unsafe {
            d.get_query_pool_results(
                pool,
                0,
                &mut ts,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }?;
        if i >= 2 {
            v.push((ts[1] - ts[0]) as f64 * period * 1e-6);
        }
    }
    // SAFETY: no submission uses it any more.
    unsafe { d.destroy_query_pool(pool, None) };
    Ok(median(v))
}

fn main() -> anyhow::Result<()> {
    logger::init();
    let mut json_path = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json_path = Some(args.next().context("--json PATH")?),
            other => bail!("unknown argument {other}"),
        }
    }
    let vk = VulkanContext::new(VulkanConfig {
        validation: Validation::IfAvailable.or_from_env(),
        ..Default::default()
    })?;
    println!("device: {}; image {W}x{H}", vk.info().describe());
    println!(
        "| particles | point raster ms | compute splat ms | splat + resolve ms | raster / splat |"
    );
    println!(
        "|-----------|-----------------|------------------|--------------------|----------------|"
    );
    let usage = vk::BufferUsageFlags::STORAGE_BUFFER
        | vk::BufferUsageFlags::TRANSFER_SRC
        | vk::BufferUsageFlags::TRANSFER_DST;
    let mut counts = BoundBuffer::new_exportable(
        &vk,
        u64::from(W * H) * 4,
        usage,
        vk::MemoryPropertyFlags::DEVICE_LOCAL,
    )?;
    vk.fill_buffer(&mut counts, 0, u64::from(W * H) * 4, 0)?;
    let pixels = BoundBuffer::new_exportable(
        &vk,
        u64::from(W * H) * 4,
        usage,
        vk::MemoryPropertyFlags::DEVICE_LOCAL,
    )?;
    let vp = sim::Camera::default().view_proj(W as f32 / H as f32);
    let vp_bytes: Vec<u8> = bytemuck::cast_slice(&vp).to_vec();
    let mut rows = Vec::new();
    for n in [100_000u32, 1_000_000, 10_000_000] {
        if u64::from(n) * 16 > vk.info().max_storage_buffer_range {
            println!(
                "| {n:>9} | exceeds maxStorageBufferRange ({} bytes) |",
                vk.info().max_storage_buffer_range
            );
            continue;
        }
        let (pos, _) = sim::initial_state(n as usize, 1);
        let mut buf = BoundBuffer::new_exportable(
            &vk,
            u64::from(n) * 16,
            usage,
            vk::MemoryPropertyFlags::DEVICE_LOCAL,
        )?;
        let mut up = HostBuffer::new(&vk, u64::from(n) * 16, vk::BufferUsageFlags::empty())?;
        up.write(&pos)?;
        vk.copy_buffer(&up, 0, &mut buf, 0, u64::from(n) * 16)?;
        drop(up);
        let raster = Raster::new(&vk, &buf)?;
        let splat = ComputePipeline::new(&vk, &spv_bytes("splat.spv")?, 2, 76, 1)?;
        let splat_set = splat.descriptor_set(&[&buf, &counts])?;
        let resolve = ComputePipeline::new(&vk, &spv_bytes("resolve.spv")?, 2, 12, 1)?;
        let resolve_set = resolve.descriptor_set(&[&counts, &pixels])?;
        let mut splat_push = vp_bytes.clone();
        splat_push.extend_from_slice(bytemuck::cast_slice(&[n, W, H]));
        let mut resolve_push: Vec<u8> = bytemuck::cast_slice(&[W * H]).to_vec();
        resolve_push.extend_from_slice(bytemuck::bytes_of(&0.1f32));
        resolve_push.extend_from_slice(bytemuck::bytes_of(&0u32));
        let groups = n.div_ceil(256).clamp(1, 65535);
        // SAFETY: recording into the timed command buffer; all objects alive.
        let raster_ms = time_ms(&vk, 20, &|cmd| unsafe { raster.record(cmd, &vp_bytes, n) })?;
        // SAFETY: as above.
        let splat_ms = time_ms(&vk, 20, &|cmd| unsafe {
            splat.record_dispatch(cmd, splat_set, &splat_push, groups)
        })?;
        // SAFETY: as above.
        let both_ms = time_ms(&vk, 20, &|cmd| unsafe {
            splat.record_dispatch(cmd, splat_set, &splat_push, groups);
            let b = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
            vk.device().cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::DependencyFlags::empty(),
                &b,
                &[],
                &[],
            );
            resolve.record_dispatch(cmd, resolve_set, &resolve_push, (W * H).div_ceil(256));
        })?;
        println!(
            "| {n:>9} | {raster_ms:>15.3} | {splat_ms:>16.3} | {both_ms:>18.3} | {:>14.1} |",
            raster_ms / splat_ms
        );
        rows.push(format!("{{\"particles\":{n},\"raster_ms\":{raster_ms:.4},\"splat_ms\":{splat_ms:.4},\"splat_resolve_ms\":{both_ms:.4}}}"));
    }
    let msgs = vk.validation_messages();
    if !msgs.is_empty() {
        bail!("validation: {}", msgs[0]);
    }
    if let Some(p) = json_path {
        std::fs::write(
            &p,
            format!(
                "{{\"device\":\"{}\",\"width\":{W},\"height\":{H},\"rows\":[{}]}}\n",
                vk.info().name,
                rows.join(",")
            ),
        )?;
        println!("wrote {p}");
    }
    Ok(())
}
