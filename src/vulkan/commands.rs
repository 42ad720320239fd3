//! One-shot command submission and the safe transfer helpers built on it (copy, fill).
//!
//! These wait on a fence before returning: they are for setup, tests and examples, not for
//! frame loops (the semaphore module orders those on the GPU). The waits are bounded where
//! what the GPU uses can outlive the call: on a timeout the submission's command pool, its
//! fence and what keeps its buffers alive are parked in the context's drop budget until the
//! fence signals, and the call returns [`Error::Timeout`].

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use ash::vk;

use crate::error::{Error, Result, VkResultExt};
use crate::rules::layout;
use crate::teardown::duration_ns;
use crate::vulkan::memory::check_buffer_usage;
use crate::vulkan::{AsVkBuffer, VulkanContext};

impl VulkanContext {
    /// Records commands with `record`, submits them to the queue and waits for completion,
    /// without bound. A final barrier makes all writes visible to the host.
    ///
    /// # Safety
    /// Every handle `record` uses must be valid and belong to this device, and the commands
    /// must be valid Vulkan usage (the validation layer reports what is not).
    pub unsafe fn submit_and_wait<R>(
        &self,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer) -> R,
    ) -> Result<R> {
        // SAFETY: forwarded from the caller; an unbounded wait returns only once it ran.
        unsafe { self.submit_and_wait_timeout(Duration::MAX, (), record) }
    }

    /// As [`Self::submit_and_wait`], waiting at most `timeout`: past it, returns
    /// [`Error::Timeout`] and parks the command buffer, its fence and `keep_alive` in the
    /// context's drop budget until the GPU has run the commands (the budget is wedged
    /// meanwhile, see [`Self::is_wedged`]).
    ///
    /// # Safety
    /// As [`Self::submit_and_wait`]; and every object the commands use must stay alive until
    /// they have run: owned by `keep_alive`, or known by the caller to outlive them even if
    /// this returns early.
    pub unsafe fn submit_and_wait_timeout<R>(
        &self,
        timeout: Duration,
        keep_alive: impl Send + 'static,
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
        let mut guard = PoolGuard {
            device: device.clone(),
            pool,
            fence: vk::Fence::null(),
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
        // SAFETY: valid device.
        guard.fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }
            .vk("vkCreateFence")?;
        let cmds = [cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        {
            let queue = self.lock_queue();
            // SAFETY: the queue is locked; the command buffer is executable.
            unsafe { device.queue_submit(*queue, &submit, guard.fence) }.vk("vkQueueSubmit")?;
        }
        // SAFETY: the fence was just submitted.
        match unsafe { device.wait_for_fences(&[guard.fence], true, duration_ns(timeout)) } {
            Ok(()) => Ok(out),
            Err(vk::Result::TIMEOUT) => {
                let (fence, probe_device) = (guard.fence, device.clone());
                self.drop_budget().park_until(
                    "a one-shot submission",
                    (guard, keep_alive),
                    Box::new(move || {
                        // SAFETY: the parked fence, destroyed only after this says done.
                        unsafe { probe_device.get_fence_status(fence) }.unwrap_or(true)
                    }),
                );
                Err(Error::Timeout {
                    what: "a one-shot submission",
                    timeout_ns: duration_ns(timeout),
                })
            }
            Err(result) => {
                // Not known to have finished: the pool and fence go with the device.
                std::mem::forget(guard);
                Err(Error::vulkan("vkWaitForFences", result))
            }
        }
    }

    /// The bound of the safe one-shot helpers' waits: the drop timeout where everything the
    /// submission uses can be kept alive past the call (every keep-alive is `Some`:
    /// [`AsVkBuffer::vk_keep_alive`], [`AsVkImage::vk_image_keep_alive`](crate::vulkan::AsVkImage::vk_image_keep_alive)), none otherwise; and
    /// what keeps it alive.
    pub(crate) fn one_shot_bound(
        &self,
        keep_alives: impl IntoIterator<Item = Option<Arc<dyn Any + Send + Sync>>>,
    ) -> (Duration, Vec<Arc<dyn Any + Send + Sync>>) {
        let kept: Option<Vec<_>> = keep_alives.into_iter().collect();
        match kept {
            Some(kept) => (self.drop_timeout(), kept),
            None => (Duration::MAX, Vec::new()),
        }
    }

    /// Copies `size` bytes from `src` at `src_offset` to `dst` at `dst_offset`, and waits.
    /// `dst` is borrowed mutably: the GPU writes it, so no host view of it may be alive.
    ///
    /// The wait is bounded by the context's drop timeout ([`Self::set_drop_timeout`]) where
    /// both buffers can be kept alive past the call ([`AsVkBuffer::vk_keep_alive`]: cuvk's
    /// shared and host buffers): past it, [`Error::Timeout`], and the copy keeps them alive
    /// until the GPU has run it. Other buffers (host-imported memory, types of other crates)
    /// make it wait without bound.
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
        let (timeout, kept) = self.one_shot_bound([src.vk_keep_alive(), dst.vk_keep_alive()]);
        // SAFETY: both buffers belong to this device, ranges checked; they are alive across
        // the call (borrowed), and past it until the copy has run (`kept`) where it may
        // return early.
        unsafe {
            self.submit_and_wait_timeout(timeout, kept, |dev, cmd| {
                dev.cmd_copy_buffer(cmd, s, d, &region)
            })
        }
    }

    /// Fills `size` bytes of `dst` at `offset` with the 32-bit word `value`, and waits.
    /// Offset and size must be multiples of 4 (`vkCmdFillBuffer`). `dst` is borrowed
    /// mutably: the GPU writes it, so no host view of it may be alive. The wait is bounded
    /// as [`Self::copy_buffer`]'s.
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
        let (timeout, kept) = self.one_shot_bound([dst.vk_keep_alive()]);
        // SAFETY: the buffer belongs to this device; range and alignment checked; alive
        // across the call (borrowed) and past it until the fill has run (`kept`) where it may
        // return early.
        unsafe {
            self.submit_and_wait_timeout(timeout, kept, |dev, cmd| {
                dev.cmd_fill_buffer(cmd, d, offset, size, value)
            })
        }
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

/// Destroys the transient pool (and its command buffer) and fence: dropped when the
/// submission has completed (or was never made), or parked in the drop budget until it has.
struct PoolGuard {
    device: ash::Device,
    pool: vk::CommandPool,
    fence: vk::Fence,
}

impl Drop for PoolGuard {
    fn drop(&mut self) {
        // SAFETY: nothing submitted from the pool is pending: dropped only once the fence
        // signalled or where nothing was submitted (a failed wait forgets the guard).
        unsafe {
            self.device.destroy_fence(self.fence, None);
            self.device.destroy_command_pool(self.pool, None);
        }
    }
}
