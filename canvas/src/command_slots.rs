//! A ring of command buffers for frame loops: one pool per slot, reset as a whole when its
//! slot comes round again (after the frame that last used it completed).
//!
//! Each slot also has a fence a submission may signal ([`CommandSlots::fence`]); `begin` then
//! waits for it before the reset. Where the loop already knows the frame completed (a timeline
//! it waited for) the wait returns at once; it is there because the Khronos validation layer
//! does not retire work on a wait for an *exported* timeline (its model cannot see the other
//! process's or API's signals), and reports every reuse after one as in use
//! (KhronosGroup/Vulkan-ValidationLayers#5295). A fence it tracks exactly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cuvk::ash::vk;

use cuvk::Result;

use cuvk::vulkan::VulkanContext;
use cuvk::VkResultExt;

/// `n` command pools, each with one primary command buffer.
pub struct CommandSlots {
    ctx: Arc<VulkanContext>,
    pools: Vec<vk::CommandPool>,
    cmds: Vec<vk::CommandBuffer>,
    fences: Vec<vk::Fence>,
    // Per slot: its fence was handed out for a submission, not yet waited for.
    fenced: Vec<AtomicBool>,
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
            fences: Vec::with_capacity(n),
            fenced: (0..n).map(|_| AtomicBool::new(false)).collect(),
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
            // SAFETY: valid device; `me` destroys the fence.
            let fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }
                .vk("vkCreateFence")?;
            me.fences.push(fence);
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

    /// The fence of slot `slot % len`, for the submission of its command buffer: the next
    /// [`Self::begin`] of the slot waits for it (bounded) and resets it. Taken once per
    /// submission; a submission without it leaves `begin` to the caller's promise alone. If
    /// the submission then fails before the queue took it, [`Self::cancel_fence`].
    pub fn fence(&self, slot: usize) -> vk::Fence {
        let i = slot % self.cmds.len().max(1);
        self.fenced[i].store(true, Ordering::Release);
        self.fences[i]
    }

    /// Takes back slot `slot % len`'s fence after a submission that failed before the queue
    /// took it (the fence will never signal: `begin` must not wait for it).
    ///
    /// # Safety
    /// No submission given this fence may be pending.
    pub unsafe fn cancel_fence(&self, slot: usize) {
        let i = slot % self.cmds.len().max(1);
        self.fenced[i].store(false, Ordering::Release);
    }

    /// Waits for slot `i`'s fence where it was handed out (at most 10 s), and resets it.
    fn wait_slot(&self, i: usize) -> Result<()> {
        let device = self.ctx.device();
        if self.fenced[i].load(Ordering::Acquire) {
            const BOUND: Duration = Duration::from_secs(10);
            // SAFETY: our fence, handed to a submission (or still unsignalled: then the
            // bound ends the wait).
            match unsafe {
                device.wait_for_fences(&[self.fences[i]], true, BOUND.as_nanos() as u64)
            } {
                Ok(()) => {}
                Err(vk::Result::TIMEOUT) => {
                    return Err(cuvk::Error::Timeout {
                        what: "a command slot's last submission",
                        timeout_ns: BOUND.as_nanos() as u64,
                    })
                }
                Err(e) => return Err(e).vk("vkWaitForFences"),
            }
            // SAFETY: signalled, so no pending submission uses it.
            unsafe { device.reset_fences(&[self.fences[i]]) }.vk("vkResetFences")?;
            self.fenced[i].store(false, Ordering::Release);
        }
        Ok(())
    }

    /// Resets slot `slot % len` and begins its command buffer for one submission. Where the
    /// slot's fence was taken, waits for it first (at most 10 s: `Timeout` otherwise).
    ///
    /// # Safety
    /// The submission that last used this slot must have completed, or have been given the
    /// slot's fence.
    pub unsafe fn begin(&self, slot: usize) -> Result<vk::CommandBuffer> {
        let i = slot % self.cmds.len().max(1);
        let device = self.ctx.device();
        self.wait_slot(i)?;
        // SAFETY: the caller promised the slot's last submission completed (or it signalled
        // the fence waited for above).
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
    /// Waits (at most 10 s) for every fence handed out and not yet waited for, and resets
    /// them: before the resources the command buffers use are destroyed, once the loop knows
    /// its frames completed (the validation layer then knows too).
    pub fn wait_fenced(&self) -> Result<()> {
        // Every slot, even after one fails: the first error is reported.
        let mut first = Ok(());
        for i in 0..self.cmds.len() {
            let r = self.wait_slot(i);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

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
            for &f in &self.fences {
                device.destroy_fence(f, None);
            }
        }
    }
}
