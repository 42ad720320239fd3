//! A ring of command buffers for frame loops: one pool per slot, reset as a whole when its
//! slot comes round again (after the frame that last used it completed).

use std::sync::Arc;

use cuvk::ash::vk;

use cuvk::Result;

use crate::VkResultExt;
use cuvk::vulkan::VulkanContext;

/// `n` command pools, each with one primary command buffer.
pub struct CommandSlots {
    ctx: Arc<VulkanContext>,
    pools: Vec<vk::CommandPool>,
    cmds: Vec<vk::CommandBuffer>,
    // Set by `assume_idle`: drop need not wait for the queue.
    idle: bool,
}

impl CommandSlots {
    /// Creates `n` slots on the context's queue family.
    pub fn new(ctx: &Arc<VulkanContext>, n: usize) -> Result<Self> {
        let mut me = Self {
            ctx: ctx.clone(),
            pools: Vec::with_capacity(n),
            cmds: Vec::with_capacity(n),
            idle: false,
        };
        let device = ctx.device();
        for _ in 0..n {
            let info = vk::CommandPoolCreateInfo::default()
                .flags(vk::CommandPoolCreateFlags::TRANSIENT)
                .queue_family_index(ctx.queue_family_index());
            // SAFETY: valid device; `me` destroys the pool (also on the error paths below).
            let pool =
                unsafe { device.create_command_pool(&info, None) }.vk("vkCreateCommandPool")?;
            me.pools.push(pool);
            let alloc = vk::CommandBufferAllocateInfo::default()
                .command_pool(pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(1);
            // SAFETY: our pool.
            let cmd = unsafe { device.allocate_command_buffers(&alloc) }
                .vk("vkAllocateCommandBuffers")?;
            me.cmds.extend(cmd);
        }
        Ok(me)
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.cmds.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }

    /// Resets slot `slot % len` and begins its command buffer for one submission.
    ///
    /// # Safety
    /// The submission that last used this slot must have completed.
    pub unsafe fn begin(&self, slot: usize) -> Result<vk::CommandBuffer> {
        let i = slot % self.cmds.len().max(1);
        let device = self.ctx.device();
        // SAFETY: the caller promised the slot's last submission completed.
        unsafe {
            device
                .reset_command_pool(self.pools[i], vk::CommandPoolResetFlags::empty())
                .vk("vkResetCommandPool")?;
            let begin = vk::CommandBufferBeginInfo::default()
                .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
            device
                .begin_command_buffer(self.cmds[i], &begin)
                .vk("vkBeginCommandBuffer")?;
        }
        Ok(self.cmds[i])
    }
}

impl CommandSlots {
    /// Tells drop that every submission of these command buffers has completed (the owner
    /// waited for them, within its own bound), so it need not wait for the whole queue, which
    /// may hold other, unrelated work that never finishes.
    ///
    /// # Safety
    /// No submission of these command buffers may still be pending when they drop.
    pub unsafe fn assume_idle(&mut self) {
        self.idle = true;
    }
}

impl Drop for CommandSlots {
    fn drop(&mut self) {
        let device = self.ctx.device();
        // SAFETY: once the context's own queue is idle (or the owner said its submissions
        // completed) no submission uses the buffers (the examples submit them there only);
        // the pools are ours.
        unsafe {
            if !self.idle {
                let _ = device.queue_wait_idle(*self.ctx.lock_queue());
            }
            for &p in &self.pools {
                device.destroy_command_pool(p, None);
            }
        }
    }
}
