//! The order of submissions on one wgpu queue: the lock every submitter on it holds.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use ash::vk;

use crate::wgpu::hal_vk::{wrong_backend, Vk};
use crate::{Result, WgpuObject};

/// The lock that orders submissions on one wgpu queue (every [`WgpuDevice`] of that queue
/// shares it, and so must every other submitter: [`WgpuDevice::submit_lock`]). wgpu-hal
/// attaches semaphore operations to the queue's *next* submission, so a submission made by
/// another thread between cuvk attaching its waits and signals and its own `queue.submit`
/// would take them: cuvk's work would then run unordered. Holding this lock around every
/// `queue.submit` on the queue rules that out.
pub(crate) struct QueueOrder {
    lock: Mutex<()>,
}

/// The [`QueueOrder`] of each wgpu queue with a [`WgpuDevice`], by raw `VkQueue`.
static QUEUE_ORDERS: Mutex<Vec<(vk::Queue, Weak<QueueOrder>)>> = Mutex::new(Vec::new());

impl QueueOrder {
    /// The order of `queue`'s submissions: shared with the other [`WgpuDevice`]s of the same
    /// queue.
    pub(crate) fn of(queue: &::wgpu::Queue, device: &::wgpu::Device) -> Result<Arc<Self>> {
        // SAFETY: the hal queue is only read (its raw handle, an identity).
        let raw = unsafe { queue.as_hal::<Vk>() }
            .map(|q| q.as_raw())
            .ok_or_else(|| wrong_backend(device, WgpuObject::Queue))?;
        let mut all = QUEUE_ORDERS.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|(_, o)| o.strong_count() > 0);
        if let Some(order) = all
            .iter()
            .find(|(q, _)| *q == raw)
            .and_then(|(_, o)| o.upgrade())
        {
            return Ok(order);
        }
        let order = Arc::new(QueueOrder {
            lock: Mutex::new(()),
        });
        all.push((raw, Arc::downgrade(&order)));
        Ok(order)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
