//! Compute passes over images: descriptor set layouts with their pools, compute pipelines
//! that take several sets and push constants, image views and a sampler — the Vulkan
//! plumbing the fluid's passes and its drawing need (cuvk-dev's `ComputePipeline` binds
//! storage buffers only).

use std::sync::Arc;

use anyhow::Context;
use cuvk::ash::vk;
use cuvk::vulkan::VulkanContext;

/// What one binding of a descriptor set points at.
#[derive(Clone, Copy, Debug)]
pub enum Resource {
    /// A storage image in `GENERAL` layout.
    StorageImage(vk::ImageView),
    /// A combined image sampler over an image in `GENERAL` layout.
    Sampled(vk::ImageView, vk::Sampler),
    /// A whole storage buffer.
    StorageBuffer(vk::Buffer),
    /// A whole uniform buffer.
    Uniform(vk::Buffer),
}

impl Resource {
    fn kind(&self) -> vk::DescriptorType {
        match self {
            Resource::StorageImage(_) => vk::DescriptorType::STORAGE_IMAGE,
            Resource::Sampled(..) => vk::DescriptorType::COMBINED_IMAGE_SAMPLER,
            Resource::StorageBuffer(_) => vk::DescriptorType::STORAGE_BUFFER,
            Resource::Uniform(_) => vk::DescriptorType::UNIFORM_BUFFER,
        }
    }
}

/// A descriptor set layout (bindings 0..n of the given kinds, compute stage) and a pool for
/// up to `max_sets` sets of it.
pub struct SetLayout {
    ctx: Arc<VulkanContext>,
    kinds: Vec<vk::DescriptorType>,
    layout: vk::DescriptorSetLayout,
    pool: vk::DescriptorPool,
}

impl SetLayout {
    pub fn new(
        ctx: &Arc<VulkanContext>,
        kinds: &[vk::DescriptorType],
        max_sets: u32,
    ) -> anyhow::Result<Self> {
        let d = ctx.device();
        let bindings: Vec<_> = kinds
            .iter()
            .enumerate()
            .map(|(i, &k)| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(i as u32)
                    .descriptor_type(k)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let mut me = Self {
            ctx: ctx.clone(),
            kinds: kinds.to_vec(),
            layout: vk::DescriptorSetLayout::null(),
            pool: vk::DescriptorPool::null(),
        };
        // SAFETY: valid device; `me` destroys what exists, also on the error path.
        me.layout = unsafe {
            d.create_descriptor_set_layout(
                &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                None,
            )
        }
        .context("vkCreateDescriptorSetLayout")?;
        let sizes: Vec<_> = kinds
            .iter()
            .map(|&k| {
                vk::DescriptorPoolSize::default()
                    .ty(k)
                    .descriptor_count(max_sets)
            })
            .collect();
        // SAFETY: valid device; the sizes live across the call.
        me.pool = unsafe {
            d.create_descriptor_pool(
                &vk::DescriptorPoolCreateInfo::default()
                    .max_sets(max_sets)
                    .pool_sizes(&sizes),
                None,
            )
        }
        .context("vkCreateDescriptorPool")?;
        Ok(me)
    }

    pub fn handle(&self) -> vk::DescriptorSetLayout {
        self.layout
    }

    /// A set pointing binding `i` at `resources[i]`. The set lives as long as this layout;
    /// the resources must outlive the commands that use it.
    pub fn allocate(&self, resources: &[Resource]) -> anyhow::Result<vk::DescriptorSet> {
        anyhow::ensure!(
            resources.len() == self.kinds.len()
                && resources
                    .iter()
                    .zip(&self.kinds)
                    .all(|(r, &k)| r.kind() == k),
            "descriptor set layout {:?} given {resources:?}",
            self.kinds
        );
        let layouts = [self.layout];
        // SAFETY: our pool and layout.
        let set = unsafe {
            self.ctx.device().allocate_descriptor_sets(
                &vk::DescriptorSetAllocateInfo::default()
                    .descriptor_pool(self.pool)
                    .set_layouts(&layouts),
            )
        }
        .context("vkAllocateDescriptorSets")?[0];
        let images: Vec<[vk::DescriptorImageInfo; 1]> = resources
            .iter()
            .map(|r| {
                let (view, sampler) = match *r {
                    Resource::StorageImage(v) => (v, vk::Sampler::null()),
                    Resource::Sampled(v, s) => (v, s),
                    _ => (vk::ImageView::null(), vk::Sampler::null()),
                };
                [vk::DescriptorImageInfo::default()
                    .image_view(view)
                    .sampler(sampler)
                    .image_layout(vk::ImageLayout::GENERAL)]
            })
            .collect();
        let buffers: Vec<[vk::DescriptorBufferInfo; 1]> = resources
            .iter()
            .map(|r| {
                let b = match *r {
                    Resource::StorageBuffer(b) | Resource::Uniform(b) => b,
                    _ => vk::Buffer::null(),
                };
                [vk::DescriptorBufferInfo::default()
                    .buffer(b)
                    .range(vk::WHOLE_SIZE)]
            })
            .collect();
        let writes: Vec<_> = resources
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let w = vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(i as u32)
                    .descriptor_type(r.kind());
                match r {
                    Resource::StorageImage(_) | Resource::Sampled(..) => w.image_info(&images[i]),
                    _ => w.buffer_info(&buffers[i]),
                }
            })
            .collect();
        // SAFETY: the set was just allocated; the views, samplers and buffers are live
        // handles of this device (the caller's).
        unsafe { self.ctx.device().update_descriptor_sets(&writes, &[]) };
        Ok(set)
    }
}

impl Drop for SetLayout {
    fn drop(&mut self) {
        // SAFETY: ours (null handles are ignored); commands using the sets were waited for.
        unsafe {
            let d = self.ctx.device();
            d.destroy_descriptor_pool(self.pool, None);
            d.destroy_descriptor_set_layout(self.layout, None);
        }
    }
}

/// A compute pipeline over the given set layouts (set i = `sets[i]`) with `push_bytes` of
/// push constants; 16×16 work groups.
pub struct Pass {
    ctx: Arc<VulkanContext>,
    module: vk::ShaderModule,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    push_bytes: u32,
}

impl Pass {
    pub fn new(
        ctx: &Arc<VulkanContext>,
        spirv: &[u8],
        sets: &[&SetLayout],
        push_bytes: u32,
    ) -> anyhow::Result<Self> {
        let code =
            cuvk::ash::util::read_spv(&mut std::io::Cursor::new(spirv)).context("not SPIR-V")?;
        let d = ctx.device();
        let mut me = Self {
            ctx: ctx.clone(),
            module: vk::ShaderModule::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            push_bytes,
        };
        // SAFETY: valid device; the code lives across the call; `me` destroys what exists.
        me.module = unsafe {
            d.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&code), None)
        }
        .context("vkCreateShaderModule")?;
        let set_layouts: Vec<_> = sets.iter().map(|s| s.handle()).collect();
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .size(push_bytes)];
        let mut info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
        if push_bytes > 0 {
            info = info.push_constant_ranges(&ranges);
        }
        // SAFETY: valid device and set layouts; the info lives across the call.
        me.layout =
            unsafe { d.create_pipeline_layout(&info, None) }.context("vkCreatePipelineLayout")?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(me.module)
            .name(c"main");
        let info = [vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(me.layout)];
        // SAFETY: the module and layout were made above on this device.
        me.pipeline = unsafe { d.create_compute_pipelines(vk::PipelineCache::null(), &info, None) }
            .map_err(|(_, e)| e)
            .context("vkCreateComputePipelines")?[0];
        Ok(me)
    }

    /// Records binding the pipeline and `sets`, pushing `push`, and dispatching enough 16×16
    /// groups to cover `width`×`height`.
    ///
    /// # Safety
    /// `cmd` must be recording on this device; the sets must match the layouts the pass was
    /// made with, and what they point at must outlive the commands.
    pub unsafe fn record(
        &self,
        cmd: vk::CommandBuffer,
        sets: &[vk::DescriptorSet],
        push: &[u8],
        (width, height): (u32, u32),
    ) {
        let d = self.ctx.device();
        // SAFETY: forwarded from the caller; the push range is clamped to the declared one.
        unsafe {
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, self.pipeline);
            d.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                self.layout,
                0,
                sets,
                &[],
            );
            let n = push.len().min(self.push_bytes as usize);
            if n > 0 {
                d.cmd_push_constants(
                    cmd,
                    self.layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    &push[..n],
                );
            }
            d.cmd_dispatch(cmd, width.div_ceil(16), height.div_ceil(16), 1);
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        // SAFETY: ours; commands using the pipeline were waited for by the engine.
        unsafe {
            let d = self.ctx.device();
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_shader_module(self.module, None);
        }
    }
}

/// A 2D view of the whole of `image` (one level, one layer).
pub fn image_view(
    ctx: &VulkanContext,
    image: vk::Image,
    format: vk::Format,
) -> anyhow::Result<vk::ImageView> {
    let info = vk::ImageViewCreateInfo::default()
        .image(image)
        .view_type(vk::ImageViewType::TYPE_2D)
        .format(format)
        .subresource_range(vk::ImageSubresourceRange {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            base_mip_level: 0,
            level_count: 1,
            base_array_layer: 0,
            layer_count: 1,
        });
    // SAFETY: a live image of this device; the caller destroys the view before the image.
    unsafe { ctx.device().create_image_view(&info, None) }.context("vkCreateImageView")
}

/// A bilinear, clamp-to-edge sampler with normalized coordinates, destroyed on drop.
pub struct Sampler {
    ctx: Arc<VulkanContext>,
    pub handle: vk::Sampler,
}

impl Sampler {
    pub fn linear(ctx: &Arc<VulkanContext>) -> anyhow::Result<Self> {
        let clamp = vk::SamplerAddressMode::CLAMP_TO_EDGE;
        let info = vk::SamplerCreateInfo::default()
            .mag_filter(vk::Filter::LINEAR)
            .min_filter(vk::Filter::LINEAR)
            .mipmap_mode(vk::SamplerMipmapMode::NEAREST)
            .address_mode_u(clamp)
            .address_mode_v(clamp)
            .address_mode_w(clamp)
            .max_lod(0.0);
        // SAFETY: valid device; destroyed on drop, after the commands that use it.
        let handle =
            unsafe { ctx.device().create_sampler(&info, None) }.context("vkCreateSampler")?;
        Ok(Self {
            ctx: ctx.clone(),
            handle,
        })
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        // SAFETY: ours; its owner waited for the commands that used it.
        unsafe { self.ctx.device().destroy_sampler(self.handle, None) };
    }
}
