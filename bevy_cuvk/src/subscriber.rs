//! [`CuvkSubscriber`]: a Bevy app as a viewer of a cuvk publisher in another process
//! (`cuvk::ipc::Publisher`: `particles --publish NAME`, a PyTorch job's `cuvk.Publisher`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bevy::log::error;
use bevy::prelude::{Res, ResMut, Resource};
use bevy::render::render_resource::Buffer;
use cuvk::ipc::{Held, Subscriber};
use cuvk::vulkan::VulkanContext;
use cuvk::ElementFormat;
use wgpu::hal;

use crate::buffer::{alias_buffer, vk_usage, wrap_alias};
use crate::late::LateWork;
use crate::{CuvkDevice, CuvkError};

/// A frame of the publisher, held for this Bevy frame: draw from
/// [`CuvkSubscriber::slots`]`[slot]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldFrame {
    /// The publisher's frame number (1, 2, ...; a viewer sees the newest, so it may skip).
    pub frame: u64,
    /// Which slot holds it.
    pub slot: usize,
}

/// Bevy attached, as a viewer, to a publisher in another process (same GPU, same user or an
/// allowed one: `docs/FANOUT.md`): its K slots are Bevy render [`Buffer`]s over the
/// publisher's memory (no copy), and each frame [`Self::hold`] picks the newest frame.
///
/// Insert it as a render-world resource (one per app). A frame: in `Render` before the
/// render graph (e.g. `RenderSystems::PrepareResources`), [`Self::hold`]; in the render
/// graph, record Bevy's passes reading `slots()[held.slot]`; the plugin releases the frame
/// after Bevy's submission of that frame (`RenderGraphSystems::Finish`), and the publisher
/// may then write the slot again once the GPU ran Bevy's reads.
///
/// Ordering: Bevy 0.19's queue (wgpu 29) cannot wait on a semaphore, so [`Self::hold`] waits
/// on the host for the publisher's write of the frame (usually done: a viewer holds the
/// newest frame announced); the release is a GPU signal after Bevy's frame, never a host
/// wait. A publisher that ends or is killed: [`Self::hold`] returns an error whose source is
/// `cuvk::ipc::IpcError::PeerClosed`, the slots keep their last contents.
///
/// Dropping it is safe at any time: the buffers are destroyed for later submissions and the
/// imported memory is freed once Bevy's work submitted so far completed.
#[derive(Resource)]
pub struct CuvkSubscriber {
    /// `Some` until drop (taken there to be freed late).
    subscriber: Option<Subscriber>,
    slots: Vec<Buffer>,
    /// The frame held, until released after a Bevy frame that drew it.
    holding: Option<Holding>,
    /// The device it attached from (a renderer recovered onto a new device is not it).
    vulkan: Arc<VulkanContext>,
    late: Arc<LateWork>,
}

/// A frame held, and whether its write is known complete (then it may be drawn, and is
/// released after this Bevy frame); one whose write is not is kept, unreleased, until it is.
#[derive(Debug, Clone, Copy)]
struct Holding {
    held: Held,
    since: Instant,
    written: bool,
}

/// How long a held frame whose write never completes is kept (a publisher killed mid-write)
/// before it is released, so that the next [`CuvkSubscriber::hold`] learns what happened.
const WRITE_GIVE_UP: Duration = Duration::from_secs(5);

impl std::fmt::Debug for CuvkSubscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuvkSubscriber")
            .field("slots", &self.slots.len())
            .field("holding", &self.holding)
            .finish_non_exhaustive()
    }
}

impl CuvkSubscriber {
    /// Attaches to the publisher `name` (a name under cuvk's socket directory, or a socket
    /// path) from Bevy's device, waiting at most `timeout` for the publisher to answer.
    /// `usage`: what Bevy does with the slots — `STORAGE` (bind them **read-only**: other
    /// consumers read the same memory), `COPY_SRC`; the publisher makes its slots as storage
    /// buffers with transfers, so `VERTEX`, `INDEX` and `UNIFORM` are refused. Refused with the
    /// reason where the publisher is on another GPU or driver, or its slots are dedicated
    /// allocations (no second buffer may be bound to them).
    pub fn attach(
        device: &CuvkDevice,
        name: &str,
        usage: wgpu::BufferUsages,
        timeout: Duration,
    ) -> Result<Self, CuvkError> {
        let shared = |source| CuvkError::Shared { source };
        let subscriber =
            Subscriber::attach(name, device.vulkan(), false, timeout).map_err(shared)?;
        // What Bevy will do with the slots must be what the imported buffers were made for.
        let needed = vk_usage(usage).filter(|_| !usage.is_empty());
        for bound in subscriber.slots() {
            let has = bound.buffer().usage();
            if !needed.is_some_and(|n| has.contains(n)) {
                return Err(CuvkError::Alias {
                    reason: format!(
                        "Bevy usage {usage:?} needs Vulkan usage {needed:?}; the publisher's \
                         slots have {has:?}"
                    ),
                });
            }
        }
        let slots = subscriber
            .slots()
            .iter()
            .map(|bound| {
                let alias = alias_buffer(device, bound, bound.buffer().size())?;
                // SAFETY: `alias` is a live VkBuffer of Bevy's device over memory the
                // subscriber keeps alive until Bevy's work is done (`Drop` below); its usage is
                // the imported buffer's (storage, transfers) and its size the slot's.
                Ok(unsafe { wrap_alias(device, alias, bound.buffer().size(), usage) })
            })
            .collect::<Result<Vec<_>, CuvkError>>()?;
        Ok(Self {
            subscriber: Some(subscriber),
            slots,
            holding: None,
            vulkan: device.vulkan().clone(),
            late: device.late().clone(),
        })
    }

    /// The publisher's slots as Bevy buffers (a held frame is in [`HeldFrame::slot`]).
    pub fn slots(&self) -> &[Buffer] {
        &self.slots
    }

    /// What each slot holds, as the publisher described it (rows of an element format).
    pub fn slot_elements(&self) -> Vec<ElementFormat> {
        self.subscriber
            .as_ref()
            .map(Subscriber::slot_elements)
            .unwrap_or_default()
    }

    /// Holds the newest frame for this Bevy frame: waits at most `timeout` for one newer than
    /// the last drawn, and within the same bound on the host for the publisher's write of it.
    /// `Ok(None)`: none came in time, or its write is not complete yet (draw nothing new from
    /// the slots this frame; that frame stays held, unreleased, and the next call waits for
    /// its write first). Call it once per frame, before the render graph (again in the same
    /// frame: the same frame); a frame returned is released after Bevy's submission.
    pub fn hold(&mut self, timeout: Duration) -> Result<Option<HeldFrame>, CuvkError> {
        let shared = |source| CuvkError::Shared { source };
        let Some(subscriber) = self.subscriber.as_mut() else {
            return Ok(None);
        };
        let start = Instant::now();
        let mut holding = match self.holding {
            Some(h) if h.written => return Ok(Some(h.frame())),
            Some(h) => h,
            None => match subscriber.hold(timeout).map_err(shared)? {
                Some(held) => Holding {
                    held,
                    since: start,
                    written: false,
                },
                None => return Ok(None),
            },
        };
        self.holding = Some(holding);
        let left = timeout.saturating_sub(start.elapsed());
        match subscriber.wait_written(&holding.held, left) {
            Ok(()) => {
                holding.written = true;
                self.holding = Some(holding);
                Ok(Some(holding.frame()))
            }
            Err(e) if e.kind() == cuvk::ErrorKind::Timeout => Ok(None),
            Err(e) => Err(shared(e)),
        }
    }

    /// The frame to release after this Bevy frame: one drawn, or one whose write never came.
    fn due(&self) -> Option<Held> {
        self.holding
            .filter(|h| h.written || h.since.elapsed() > WRITE_GIVE_UP)
            .map(|h| h.held)
    }
}

impl Holding {
    fn frame(&self) -> HeldFrame {
        HeldFrame {
            frame: self.held.frame(),
            slot: self.held.slot(),
        }
    }
}

impl Drop for CuvkSubscriber {
    fn drop(&mut self) {
        // No submission made from now on can use the slots (wgpu refuses them).
        for slot in &self.slots {
            slot.destroy();
        }
        if let Some(subscriber) = self.subscriber.take() {
            // Freed (memory, timelines, the socket: the publisher frees this consumer's
            // slot) once Bevy's work submitted so far completed.
            self.late.bury(subscriber);
        }
    }
}

/// `RenderGraphSystems::Finish` (after Bevy submitted the frame): the frame drawn this frame
/// is released on an empty submission of the plugin's, after every command Bevy submitted.
/// (Bevy's `Readback` and screenshot copies are submitted after `Finish`: a copy of a slot
/// there is not covered; copy it in a pass of your own.)
pub(crate) fn release_held_frame(
    device: Option<Res<CuvkDevice>>,
    subscriber: Option<ResMut<CuvkSubscriber>>,
) {
    let (Some(device), Some(mut subscriber)) = (device, subscriber) else {
        return;
    };
    let Some(held) = subscriber.due() else {
        return;
    };
    if !device.vulkan().same_device(&subscriber.vulkan) {
        // Bevy's renderer was recreated: this subscriber's semaphores belong to the old
        // device, whose queue is gone; it is dropped with its resource.
        error!("cuvk: the subscriber was attached from another device; not releasing");
        subscriber.holding = None;
        return;
    }
    let queue = device.wgpu_queue();
    // SAFETY: the hal queue is only used to add signals to its next submission.
    let Some(hal_queue) = (unsafe { queue.as_hal::<hal::api::Vulkan>() }) else {
        error!("cuvk: Bevy's queue is not a Vulkan queue; the held frame is not released");
        return;
    };
    let Some(inner) = subscriber.subscriber.as_mut() else {
        return;
    };
    // SAFETY: the closure attaches both signals to the empty submission it makes at once,
    // which reaches Bevy's queue after Bevy's submission of this frame (wgpu-core submits even
    // an empty list): they are signalled after every command that reads the slot. It never
    // returns Err.
    let released = unsafe {
        inner.release_foreign(&held, |progress, (read, value)| {
            hal_queue.add_signal_semaphore(progress.semaphore, Some(progress.value));
            hal_queue.add_signal_semaphore(read, Some(value));
            drop(hal_queue);
            queue.submit([]);
            Ok(())
        })
    };
    if let Err(e) = &released {
        error!(
            "cuvk: releasing the publisher's frame {} failed: {e}",
            held.frame()
        );
    }
    // Released (or the publisher told in vain): the subscriber no longer holds it. Still held
    // (nothing submitted): kept, and released after the next frame.
    if inner.held() != Some(held) {
        subscriber.holding = None;
    }
}
