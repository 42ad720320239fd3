//! One-shot command submission and the safe transfer helpers built on it (copy, fill).
//!
//! These wait on a fence before returning: they are for setup, tests and examples, not for
//! frame loops (the semaphore module orders those on the GPU).

use ash::vk;

use crate::error::{Error, Result, VkResultExt};
use crate::rules::layout;
use crate::vulkan::memory::check_buffer_usage;
use crate::vulkan::{AsVkBuffer, VulkanContext};

impl VulkanContext {
    /// Records commands with `record`, submits them to the queue and waits for completion.
    /// A final barrier makes all writes visible to the host.
    ///
    /// # Safety
    /// Every handle `record` uses must be valid and belong to this device, and the commands
    /// must be valid Vulkan usage (the validation layer reports what is not).
    pub unsafe fn submit_and_wait<R>(
        &self,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer) -> R,
    ) -> Result<R> {
        self.require_queue("one-shot commands (submit_and_wait, copy_buffer, fill_buffer)")?;
        let device = self.device();
        let pool_info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(self.queue_family_index())
            .flags(vk::CommandPoolCreateFlags::TRANSIENT);
        // SAFETY: valid device.
        let pool =
            unsafe { device.create_command_pool(&pool_info, None) }.vk("vkCreateCommandPool")?;
        let guard = PoolGuard {
            device,
            pool,
            fence: vk::Fence::null(),
            submitted: false,
        };
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is ours; one primary buffer.
        let cmd =
            unsafe { device.allocate_command_buffers(&alloc) }.vk("vkAllocateCommandBuffers")?[0];
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: fresh command buffer from our pool.
        unsafe { device.begin_command_buffer(cmd, &begin) }.vk("vkBeginCommandBuffer")?;
        let out = record(device, cmd);
        let to_host = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
            .dst_access_mask(vk::AccessFlags::HOST_READ)];
        // SAFETY: recording state; the barrier is well formed.
        unsafe {
            device.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::ALL_COMMANDS,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &to_host,
                &[],
                &[],
            );
            device.end_command_buffer(cmd)
        }
        .vk("vkEndCommandBuffer")?;
        self.submit_fenced(guard, cmd)?;
        Ok(out)
    }

    fn submit_fenced(&self, mut guard: PoolGuard<'_>, cmd: vk::CommandBuffer) -> Result<()> {
        let device = self.device();
        // SAFETY: valid device.
        guard.fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }
            .vk("vkCreateFence")?;
        let cmds = [cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        {
            let queue = self.lock_queue();
            // SAFETY: the queue is locked; the command buffer is executable.
            unsafe { device.queue_submit(*queue, &submit, guard.fence) }.vk("vkQueueSubmit")?;
            guard.submitted = true;
        }
        // SAFETY: the fence was just submitted.
        unsafe { device.wait_for_fences(&[guard.fence], true, u64::MAX) }.vk("vkWaitForFences")?;
        Ok(())
    }

    /// Copies `size` bytes from `src` at `src_offset` to `dst` at `dst_offset`, and waits.
    /// `dst` is borrowed mutably: the GPU writes it, so no host view of it may be alive.
    pub fn copy_buffer(
        &self,
        src: &dyn AsVkBuffer,
        src_offset: u64,
        dst: &mut dyn AsVkBuffer,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        self.check_mine(src)?;
        self.check_mine(&*dst)?;
        use vk::BufferUsageFlags as U;
        let c = "vkCmdCopyBuffer";
        check_buffer_usage(
            src,
            c,
            "source",
            U::TRANSFER_SRC,
            "VUID-vkCmdCopyBuffer-srcBuffer-00118",
        )?;
        check_buffer_usage(
            &*dst,
            c,
            "destination",
            U::TRANSFER_DST,
            "VUID-vkCmdCopyBuffer-dstBuffer-00120",
        )?;
        layout::check_range(src_offset, size, "source buffer", src.vk_size())?;
        layout::check_range(dst_offset, size, "destination buffer", dst.vk_size())?;
        let region = [vk::BufferCopy {
            src_offset,
            dst_offset,
            size,
        }];
        let (s, d) = (src.vk_buffer(), dst.vk_buffer());
        // SAFETY: both buffers are alive (borrowed), belong to this device, ranges checked.
        unsafe { self.submit_and_wait(|dev, cmd| dev.cmd_copy_buffer(cmd, s, d, &region)) }
    }

    /// Fills `size` bytes of `dst` at `offset` with the 32-bit word `value`, and waits.
    /// Offset and size must be multiples of 4 (`vkCmdFillBuffer`). `dst` is borrowed
    /// mutably: the GPU writes it, so no host view of it may be alive.
    pub fn fill_buffer(
        &self,
        dst: &mut dyn AsVkBuffer,
        offset: u64,
        size: u64,
        value: u32,
    ) -> Result<()> {
        self.check_mine(&*dst)?;
        check_buffer_usage(
            &*dst,
            "vkCmdFillBuffer",
            "destination",
            vk::BufferUsageFlags::TRANSFER_DST,
            "VUID-vkCmdFillBuffer-dstBuffer-00029",
        )?;
        layout::check_range(offset, size, "buffer", dst.vk_size())?;
        layout::check_aligned("offset", offset, 4, layout::AlignmentRule::VulkanBuffer)?;
        layout::check_aligned("size", size, 4, layout::AlignmentRule::VulkanBuffer)?;
        let d = dst.vk_buffer();
        // SAFETY: the buffer is alive, belongs to this device; range and alignment checked.
        unsafe { self.submit_and_wait(|dev, cmd| dev.cmd_fill_buffer(cmd, d, offset, size, value)) }
    }

    fn check_mine(&self, b: &dyn AsVkBuffer) -> Result<()> {
        if self.same_device(b.vk_context()) {
            Ok(())
        } else {
            Err(Error::WrongDevice {
                object: crate::DeviceObject::Buffer,
                owner: crate::DeviceOwner::VulkanDevice,
            })
        }
    }
}

/// Destroys the transient pool (and its command buffer) and fence on every path.
struct PoolGuard<'a> {
    device: &'a ash::Device,
    pool: vk::CommandPool,
    fence: vk::Fence,
    submitted: bool,
}

impl Drop for PoolGuard<'_> {
    fn drop(&mut self) {
        if self.submitted {
            // The submission (if any) was waited for, or failed and is not pending; if the
            // wait itself failed, wait for this fence only (never the whole device), and leak
            // rather than destroy what the GPU may still use.
            // SAFETY: our fence, on this device.
            let done = unsafe {
                self.device
                    .wait_for_fences(&[self.fence], true, 10_000_000_000)
            };
            if let Err(e) = done {
                log::error!("one-shot submission did not finish ({e}); leaking its command pool");
                return;
            }
        }
        // SAFETY: nothing submitted from the pool is pending (waited above).
        unsafe {
            self.device.destroy_fence(self.fence, None);
            self.device.destroy_command_pool(self.pool, None);
        }
    }
}
