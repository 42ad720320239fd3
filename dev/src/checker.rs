//! The Vulkan-side reader of the frame tests and benchmark: a compute shader
//! (shaders/check_value.comp) that counts elements differing from the expected frame number,
//! with one command pool per command slot. Shared by examples and tests.

use crate::{CommandSlots, ComputePipeline};
use cuvk::ash::vk;
use cuvk::vulkan::{cmd_acquire_buffers, cmd_release_buffers, AsVkBuffer, HostBuffer};
use cuvk::{Bridge, SharedBuffer};

pub const CHECK_SPV: &[u8] = include_bytes!("../../shaders/check_value.spv");

/// `k` shared buffers of `elements` u32 each, storage usage: the frame slots CUDA writes and
/// the checker reads.
pub fn slots(bridge: &Bridge, k: u32, elements: usize) -> cuvk::Result<Vec<SharedBuffer<u32>>> {
    (0..k)
        .map(|_| bridge.create_buffer(elements, cuvk::BufferUsage::STORAGE_BUFFER))
        .collect()
}

/// The checker's 12-byte result buffer (mismatches, checks, last bad value), zeroed.
pub fn result_buffer(
    ctx: &std::sync::Arc<cuvk::vulkan::VulkanContext>,
) -> cuvk::Result<HostBuffer> {
    let mut result = HostBuffer::new(ctx, 12, vk::BufferUsageFlags::STORAGE_BUFFER)?;
    result.write(&[0u32; 3])?;
    Ok(result)
}

pub struct Checker {
    pipeline: ComputePipeline,
    sets: Vec<vk::DescriptorSet>,
    cmds: CommandSlots,
    elements: u32,
    device: cuvk::ash::Device,
    queue_family: u32,
}

impl Checker {
    /// `result` is a 12-byte host buffer: mismatches, checks, last bad value.
    pub fn new(
        bridge: &Bridge,
        slots: &[SharedBuffer<u32>],
        result: &HostBuffer,
        command_slots: usize,
    ) -> anyhow::Result<Self> {
        let slots: Vec<&dyn AsVkBuffer> = slots.iter().map(|s| s as &dyn AsVkBuffer).collect();
        Self::for_buffers(bridge.vulkan(), &slots, result, command_slots)
    }

    /// As [`Self::new`] for any buffers of `ctx` holding u32 elements (slots imported from
    /// another process, say).
    pub fn for_buffers(
        ctx: &std::sync::Arc<cuvk::vulkan::VulkanContext>,
        slots: &[&dyn AsVkBuffer],
        result: &HostBuffer,
        command_slots: usize,
    ) -> anyhow::Result<Self> {
        let pipeline = ComputePipeline::new(ctx, CHECK_SPV, 2, 8, slots.len() as u32)?;
        let sets = slots
            .iter()
            .map(|&s| pipeline.descriptor_set(&[s, result]))
            .collect::<cuvk::Result<Vec<_>>>()?;
        let cmds = CommandSlots::new(ctx, command_slots)?;
        let elements = slots.first().map_or(0, |s| (s.vk_size() / 4) as u32);
        Ok(Self {
            pipeline,
            sets,
            cmds,
            elements,
            device: ctx.device().clone(),
            queue_family: ctx.queue_family_index(),
        })
    }

    /// The fence of command slot `command_slot`, for its submission: the next record into the
    /// slot waits for it (see `CommandSlots::fence`; what keeps the validation layer's model
    /// right where the loop waits on an exported timeline).
    pub fn fence(&self, command_slot: usize) -> vk::Fence {
        self.cmds.fence(command_slot)
    }

    /// Waits for every command slot's fence handed out (bounded): before the checker drops,
    /// once its frames are known complete.
    pub fn wait_fenced(&self) -> cuvk::Result<()> {
        self.cmds.wait_fenced()
    }

    /// Records the check of `slot` against `expected` into command slot `command_slot`, with
    /// the ownership transfers of `transfer` from/to CUDA when given.
    ///
    /// # Safety
    /// The previous use of `command_slot` must have completed; `slots[slot]` must be the
    /// buffer the descriptor set was made for.
    pub unsafe fn record(
        &self,
        command_slot: usize,
        slot: usize,
        expected: u32,
        transfer: Option<&dyn AsVkBuffer>,
    ) -> anyhow::Result<vk::CommandBuffer> {
        // SAFETY: forwarded from the caller.
        unsafe { self.record_with(command_slot, slot, expected, transfer, |_| Ok(())) }
    }

    /// As [`Self::record`], with `before` recorded ahead of the check (after the acquire):
    /// e.g. a CUDA kernel launched in the Vulkan queue and its barrier.
    ///
    /// # Safety
    /// As [`Self::record`]; `before` must record valid commands.
    pub unsafe fn record_with(
        &self,
        command_slot: usize,
        slot: usize,
        expected: u32,
        transfer: Option<&dyn AsVkBuffer>,
        before: impl FnOnce(vk::CommandBuffer) -> anyhow::Result<()>,
    ) -> anyhow::Result<vk::CommandBuffer> {
        let device = &self.device;
        // SAFETY: the caller promised the command slot is free; everything recorded is ours.
        unsafe {
            let cmd = self.cmds.begin(command_slot)?;
            if let Some(buf) = transfer {
                cmd_acquire_buffers(
                    device,
                    cmd,
                    self.queue_family,
                    &[buf],
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
                );
            }
            // Earlier checks' atomic adds to the result buffer happen before this one's.
            let mem = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
            device.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::DependencyFlags::empty(),
                &mem,
                &[],
                &[],
            );
            // After the checker's own barrier, so that only what `before` records orders its
            // work before the check (the inline-kernel tests remove it as a negative control).
            before(cmd)?;
            let push: Vec<u8> = [expected, self.elements]
                .iter()
                .flat_map(|w| w.to_ne_bytes())
                .collect();
            let groups = self.elements.div_ceil(256).clamp(1, 1024);
            self.pipeline
                .record_dispatch(cmd, self.sets[slot], &push, groups);
            if let Some(buf) = transfer {
                cmd_release_buffers(
                    device,
                    cmd,
                    self.queue_family,
                    &[buf],
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::AccessFlags::SHADER_READ,
                );
            }
            device.end_command_buffer(cmd)?;
            Ok(cmd)
        }
    }
}

/// Reads (mismatches, checks, last bad value) from the result buffer.
pub fn read_result(result: &HostBuffer) -> anyhow::Result<(u32, u32, u32)> {
    let r: Vec<u32> = result.read()?;
    Ok((r[0], r[1], r[2]))
}

/// `frames` frames through the frame pacer at K = `frames_in_flight`: a CUDA kernel writes the
/// frame number into every element of slot `frame % K`, Vulkan checks it (the work of
/// `bench_frames`' pacer rows, which `bench_ipc` compares the cross-process handoff with).
/// Returns (µs per frame, wrong elements); `result` is reset first.
pub fn paced_frames(
    bridge: &Bridge,
    kernels: &crate::kernels::Kernels,
    slots: &[SharedBuffer<u32>],
    result: &mut HostBuffer,
    frames_in_flight: u32,
    frames: u64,
    acquire: cuvk::AcquireWait,
) -> anyhow::Result<(f64, u32)> {
    result.write(&[0u32; 3])?;
    let stream = bridge.cuda().new_stream()?;
    let mut pacer = cuvk::FramePacer::new(bridge, frames_in_flight)?;
    pacer.set_acquire_wait(acquire);
    let checker = Checker::new(bridge, slots, result, pacer.command_slots())?;
    let t = std::time::Instant::now();
    for _ in 0..frames {
        let f = pacer.begin_frame()?;
        let slot = &slots[f.slot()];
        pacer.cuda_acquire(&f, &stream)?;
        kernels.fill(
            &stream,
            slot.kernel_arg(),
            slot.len() as u64,
            f.number() as u32,
        )?;
        pacer.cuda_release(&f, &stream)?;
        // SAFETY: begin_frame freed the command slot; everything lives until wait_idle.
        unsafe {
            let cmd = checker.record(f.command_slot(), f.slot(), f.number() as u32, Some(slot))?;
            pacer.vulkan_submit(
                &f,
                &cuvk::FrameSubmit::new(&[cmd], vk::PipelineStageFlags::COMPUTE_SHADER),
            )?;
        }
    }
    pacer.wait_idle(std::time::Duration::from_secs(30))?;
    let us = t.elapsed().as_secs_f64() * 1e6 / frames as f64;
    drop(checker);
    Ok((us, read_result(result)?.0))
}
