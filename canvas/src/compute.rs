//! A minimal compute pipeline: one descriptor set of storage buffers plus push constants —
//! what the bridge's Vulkan-side readers and simulations need.

use std::sync::Arc;

use cuvk::ash::vk;

use cuvk::{Error, Result};

use cuvk::vulkan::{AsVkBuffer, VulkanContext};
use cuvk::VkResultExt;

/// A compute pipeline whose set 0 holds `storage_buffers` storage buffers (bindings 0..n) and
/// which takes `push_constant_bytes` of push constants.
pub struct ComputePipeline {
    ctx: Arc<VulkanContext>,
    module: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    pool: vk::DescriptorPool,
    storage_buffers: u32,
    push_constant_bytes: u32,
}

impl ComputePipeline {
    /// Builds the pipeline from SPIR-V bytes (entry point `main`), with room for `max_sets`
    /// descriptor sets.
    pub fn new(
        ctx: &Arc<VulkanContext>,
        spirv: &[u8],
        storage_buffers: u32,
        push_constant_bytes: u32,
        max_sets: u32,
    ) -> Result<Self> {
        let code =
            cuvk::ash::util::read_spv(&mut std::io::Cursor::new(spirv)).map_err(|source| {
                Error::Io {
                    call: "read_spv",
                    source,
                }
            })?;
        let device = ctx.device();
        let mut me = Self {
            ctx: ctx.clone(),
            module: vk::ShaderModule::null(),
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            pool: vk::DescriptorPool::null(),
            storage_buffers,
            push_constant_bytes,
        };
        // Each step stores its handle in `me`, whose Drop destroys whatever exists on error.
        // SAFETY: valid device; the code lives across the call.
        me.module = unsafe {
            device.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&code), None)
        }
        .vk("vkCreateShaderModule")?;
        let bindings: Vec<vk::DescriptorSetLayoutBinding> = (0..storage_buffers)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        // SAFETY: valid device; the bindings live across the call.
        me.set_layout = unsafe {
            device.create_descriptor_set_layout(
                &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                None,
            )
        }
        .vk("vkCreateDescriptorSetLayout")?;
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .size(push_constant_bytes)];
        let set_layouts = [me.set_layout];
        let mut layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
        if push_constant_bytes > 0 {
            layout_info = layout_info.push_constant_ranges(&ranges);
        }
        // SAFETY: valid device; the layout info and its arrays live across the call.
        me.layout = unsafe { device.create_pipeline_layout(&layout_info, None) }
            .vk("vkCreatePipelineLayout")?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(me.module)
            .name(c"main");
        let info = [vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(me.layout)];
        // SAFETY: valid device, module and layout made above; the create info lives across it.
        me.pipeline =
            unsafe { device.create_compute_pipelines(vk::PipelineCache::null(), &info, None) }
                .map_err(|(_, result)| Error::Vulkan {
                    call: "vkCreateComputePipelines",
                    result,
                })?[0];
        let sizes = [vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(storage_buffers.max(1) * max_sets)];
        // SAFETY: valid device; the pool sizes live across the call.
        me.pool = unsafe {
            device.create_descriptor_pool(
                &vk::DescriptorPoolCreateInfo::default()
                    .max_sets(max_sets)
                    .pool_sizes(&sizes),
                None,
            )
        }
        .vk("vkCreateDescriptorPool")?;
        Ok(me)
    }

    /// Allocates a descriptor set pointing binding `i` at `buffers[i]` (whole buffer).
    /// The set stays valid while the pipeline lives; the buffers must outlive its use.
    pub fn descriptor_set(&self, buffers: &[&dyn AsVkBuffer]) -> Result<vk::DescriptorSet> {
        self.check_buffers(buffers)?;
        let layouts = [self.set_layout];
        // SAFETY: our pool and layout.
        let set = unsafe {
            self.ctx.device().allocate_descriptor_sets(
                &vk::DescriptorSetAllocateInfo::default()
                    .descriptor_pool(self.pool)
                    .set_layouts(&layouts),
            )
        }
        .vk("vkAllocateDescriptorSets")?[0];
        // SAFETY: the set was just allocated: no command buffer uses it.
        unsafe { self.write_set(set, buffers) };
        Ok(set)
    }

    /// Points the bindings of `set` (from [`Self::descriptor_set`]) at `buffers` instead,
    /// checked as there: for loops that draw from a different buffer each frame.
    ///
    /// # Safety
    /// No pending command buffer may use `set` (its last submission has completed).
    pub unsafe fn update_descriptor_set(
        &self,
        set: vk::DescriptorSet,
        buffers: &[&dyn AsVkBuffer],
    ) -> Result<()> {
        self.check_buffers(buffers)?;
        // SAFETY: forwarded from the caller.
        unsafe { self.write_set(set, buffers) };
        Ok(())
    }

    fn check_buffers(&self, buffers: &[&dyn AsVkBuffer]) -> Result<()> {
        if buffers.len() != self.storage_buffers as usize {
            return Err(cuvk::LaunchError::ArgumentCount {
                kernel: "compute pipeline".into(),
                given: buffers.len(),
                expected: self.storage_buffers as usize,
                params: format!("{} storage buffers", self.storage_buffers),
            }
            .into());
        }
        if buffers
            .iter()
            .any(|b| !self.ctx.same_device(b.vk_context()))
        {
            return Err(Error::WrongDevice {
                object: cuvk::DeviceObject::Buffer,
                owner: cuvk::DeviceOwner::VulkanDevice,
            });
        }
        Ok(())
    }

    /// Writes binding `i` of `set` as the whole of `buffers[i]` (checked by the caller).
    ///
    /// # Safety
    /// No pending command buffer may use `set`.
    unsafe fn write_set(&self, set: vk::DescriptorSet, buffers: &[&dyn AsVkBuffer]) {
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = buffers
            .iter()
            .map(|b| {
                [vk::DescriptorBufferInfo::default()
                    .buffer(b.vk_buffer())
                    .range(vk::WHOLE_SIZE)]
            })
            .collect();
        let writes: Vec<vk::WriteDescriptorSet> = infos
            .iter()
            .enumerate()
            .map(|(i, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(i as u32)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
            .collect();
        // SAFETY: no pending use of the set (caller); buffers alive (borrowed) on this device.
        unsafe { self.ctx.device().update_descriptor_sets(&writes, &[]) };
    }

    /// Records binding the pipeline and `set`, pushing `push`, and dispatching `groups` x 1 x 1.
    ///
    /// # Safety
    /// `cmd` must be recording on this device; `set` must come from [`Self::descriptor_set`]
    /// of this pipeline with its buffers alive until the commands complete.
    pub unsafe fn record_dispatch(
        &self,
        cmd: vk::CommandBuffer,
        set: vk::DescriptorSet,
        push: &[u8],
        groups: u32,
    ) {
        let device = self.ctx.device();
        // SAFETY: forwarded from the caller; push is clamped to the declared range.
        unsafe {
            device.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, self.pipeline);
            device.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                self.layout,
                0,
                &[set],
                &[],
            );
            let n = push.len().min(self.push_constant_bytes as usize);
            if n > 0 {
                device.cmd_push_constants(
                    cmd,
                    self.layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    &push[..n],
                );
            }
            device.cmd_dispatch(cmd, groups.max(1), 1, 1);
        }
    }
}

impl Drop for ComputePipeline {
    fn drop(&mut self) {
        let device = self.ctx.device();
        // SAFETY: our objects (null handles are ignored by vkDestroy*); commands that used them
        // were waited for by their submitters.
        unsafe {
            device.destroy_descriptor_pool(self.pool, None);
            device.destroy_pipeline(self.pipeline, None);
            device.destroy_pipeline_layout(self.layout, None);
            device.destroy_descriptor_set_layout(self.set_layout, None);
            device.destroy_shader_module(self.module, None);
        }
    }
}
