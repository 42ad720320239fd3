//! Fan-out consumers (issue 37): a [`Subscriber`] reads the
//! publisher's frames with Vulkan (a viewer), a [`CudaSubscriber`] with CUDA (a recorder, a
//! dashboard, a training job's consumer). Both speak one hold protocol ([`Holds`]): one
//! request outstanding at a time, every answer paired with it, a demotion a notice beside
//! them; a frame is read on the GPU after `written >= N` and ends with this consumer's read
//! timeline reaching the hold's value, which the publisher's next write of the slot waits for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaStream};

use super::error::IpcError;
use super::publish::hold;
use super::share::Attached;
use super::wire::{HoldMessage, HoldOp, MessageKind, TimelineRole};
use crate::cuda::{ExternalSemaphore, MappedRange};
use crate::error::{CudaResultExt, FrameStep, Result, SyncError};
use crate::vulkan::{BoundBuffer, ProgressSignal, Semaphore, SemaphoreOp, VulkanContext};
use crate::FrameSubmit;

/// A frame a consumer holds: read slot [`Self::slot`] after the GPU wait for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    frame: u64,
    slot: usize,
    read_value: u64,
}

impl Held {
    /// The frame's number (the publisher's `written` value for it).
    pub fn frame(&self) -> u64 {
        self.frame
    }
    /// The slot it is in.
    pub fn slot(&self) -> usize {
        self.slot
    }
}

/// The consumer's half of the hold protocol, the same for every consumer.
struct Holds {
    attached: Attached,
    held: Option<Held>,
    /// A hold request sent and not yet answered.
    requested: bool,
    /// Whether the publisher demoted this (lossless) consumer to the newest frames.
    demoted: bool,
    /// A release the socket had no room for: its read is scheduled, the notice goes first
    /// with the next hold (a full socket never fails a submission that happened).
    unsent: Option<HoldMessage>,
}

impl Holds {
    /// Connects to the publisher `name` (GPU `device_uuid`, and driver where given) and says
    /// how this consumer takes frames.
    fn connect(
        name: &str,
        device_uuid: crate::Uuid,
        driver_uuid: Option<crate::Uuid>,
        every_frame: bool,
        timeout: Duration,
    ) -> Result<Self> {
        let mut attached = Attached::connect(name, device_uuid, driver_uuid, timeout)?;
        attached
            .link()
            .send_hold(hold(HoldOp::Subscribe, 0, 0, u64::from(every_frame)))?;
        Ok(Self {
            attached,
            held: None,
            requested: false,
            demoted: false,
            unsent: None,
        })
    }

    /// The ids of the publisher's `written` timeline and of this consumer's `read` one.
    fn timeline_ids(&self) -> Result<(u32, u32)> {
        let id_of = |role| {
            self.attached
                .timelines()
                .find(|t| t.role == role)
                .map(|t| t.id)
                .ok_or(IpcError::NoSuchObject {
                    id: u32::from(role == TimelineRole::Attacher),
                    kind: MessageKind::Timeline,
                })
        };
        Ok((
            id_of(TimelineRole::Publisher)?,
            id_of(TimelineRole::Attacher)?,
        ))
    }

    /// What each slot holds, in order.
    fn slot_elements(&self) -> Vec<crate::ElementFormat> {
        self.attached.buffers().map(|b| b.element).collect()
    }

    /// The ids of the publisher's slots, in order.
    fn slot_ids(&self) -> Vec<u32> {
        self.attached.buffers().map(|b| b.id).collect()
    }

    /// The next frame held, waiting at most `timeout`; see [`Subscriber::hold`].
    fn hold(&mut self, timeout: Duration) -> Result<Option<Held>> {
        if let Some(h) = self.held {
            return Err(SyncError::FrameOutOfOrder {
                frame: h.frame,
                last_step: FrameStep::Begin,
                reason: FrameStep::Begin,
            }
            .into());
        }
        if let Some(m) = self.unsent.take() {
            if let Err(e) = self.attached.link().send_hold(m) {
                if !is_peer_closed(&e) {
                    self.unsent = Some(m);
                }
                return Err(e);
            }
        }
        let deadline = Instant::now().checked_add(timeout);
        let left = || deadline.map_or(timeout, |d| d.saturating_duration_since(Instant::now()));
        loop {
            // One request at a time: every answer is to the request outstanding, so a late
            // answer (after a timeout) is taken by the next call, never paired with a newer
            // request.
            if !self.requested {
                self.attached
                    .link()
                    .send_hold(hold(HoldOp::Request, 0, 0, 0))?;
                self.requested = true;
            }
            match self.attached.link().recv_hold(left())? {
                Some(m) if m.op == HoldOp::Granted => {
                    self.requested = false;
                    // A slot this consumer has: indexing its slots with it cannot panic.
                    if m.slot as usize >= self.attached.buffers().count() {
                        return Err(IpcError::NoSuchObject {
                            id: m.slot,
                            kind: MessageKind::Buffer,
                        }
                        .into());
                    }
                    let held = Held {
                        frame: m.frame,
                        slot: m.slot as usize,
                        read_value: m.value,
                    };
                    self.held = Some(held);
                    return Ok(Some(held));
                }
                Some(m) if m.op == HoldOp::Nothing => {
                    self.requested = false;
                    // Nothing new: wait for the publisher's next frame notice, then ask again.
                    let link = self.attached.link();
                    let seen = link.last_seen();
                    if link.latest(seen, left())?.is_none() {
                        return Ok(None);
                    }
                }
                // Not an answer: a notice that this consumer now gets the newest frames.
                Some(m) if m.op == HoldOp::Demoted => {
                    log::info!("subscriber: demoted to the newest frames by the publisher");
                    self.demoted = true;
                }
                Some(_) => {
                    return Err(IpcError::UnexpectedMessage {
                        expected: "the publisher's answer to a hold",
                        got: MessageKind::Hold,
                    }
                    .into())
                }
                None => return Ok(None),
            }
            if left().is_zero() {
                return Ok(None);
            }
        }
    }

    /// `held` checked to be the frame held now.
    fn check(&self, held: &Held) -> Result<()> {
        if self.held != Some(*held) {
            return Err(SyncError::WrongFrame {
                frame: held.frame,
                current: self.held.map_or(0, |h| h.frame),
                reason: FrameStep::Submit,
            }
            .into());
        }
        Ok(())
    }

    /// The read of `held` is scheduled (its read-timeline signal enqueued): the publisher is
    /// told, and the next hold may be asked for.
    /// Once the publisher is gone there is no one to tell: the release still succeeds (the
    /// read's signal is enqueued), and the next [`Self::hold`] reports the end. A socket with
    /// no room keeps the notice for the next hold.
    fn released(&mut self, held: &Held) -> Result<()> {
        self.held = None;
        let m = hold(
            HoldOp::Released,
            held.frame,
            held.slot as u32,
            held.read_value,
        );
        match self.attached.link().send_hold(m) {
            Err(e) if is_peer_closed(&e) => Ok(()),
            Err(e) if e.kind() == crate::ErrorKind::Timeout => {
                self.unsent = Some(m);
                Ok(())
            }
            other => other,
        }
    }
}

fn is_peer_closed(e: &crate::Error) -> bool {
    matches!(e, crate::Error::Ipc(IpcError::PeerClosed { .. }))
}

/// A consumer that reads frames with Vulkan (a viewer).
pub struct Subscriber {
    vk: Arc<VulkanContext>,
    written: Arc<Semaphore>,
    read: Arc<Semaphore>,
    slots: Vec<Arc<BoundBuffer>>,
    /// Whether the waits on a gone publisher's timeline were released.
    released: bool,
    holds: Holds,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("slots", &self.slots.len())
            .field("held", &self.holds.held)
            .finish_non_exhaustive()
    }
}

impl Subscriber {
    /// Attaches to the publisher `name` from `vk`'s device (checked against the
    /// publisher's), importing its slots and timelines; `every_frame` asks for every frame
    /// (the publisher waits for this consumer, at most its timeout, then demotes it).
    pub fn attach(
        name: &str,
        vk: &Arc<VulkanContext>,
        every_frame: bool,
        timeout: Duration,
    ) -> Result<Self> {
        let info = vk.info();
        let holds = Holds::connect(
            name,
            info.device_uuid,
            Some(info.driver_uuid),
            every_frame,
            timeout,
        )?;
        let (written_id, read_id) = holds.timeline_ids()?;
        let a = &holds.attached;
        let written = a.import_vulkan_timeline(written_id, vk)?;
        let read = a.import_vulkan_timeline(read_id, vk)?;
        let slots = holds
            .slot_ids()
            .into_iter()
            .map(|id| a.import_vulkan_buffer(id, vk).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            vk: vk.clone(),
            written,
            read,
            slots,
            released: false,
            holds,
        })
    }

    /// The publisher's slots, imported (a held frame is in [`Held::slot`]).
    pub fn slots(&self) -> &[Arc<BoundBuffer>] {
        &self.slots
    }

    /// What each slot holds, as the publisher described it (in the order of [`Self::slots`]).
    pub fn slot_elements(&self) -> Vec<crate::ElementFormat> {
        self.holds.slot_elements()
    }

    /// Whether the publisher demoted this lossless consumer to the newest frames (it held
    /// the publisher back past its timeout).
    pub fn demoted(&self) -> bool {
        self.holds.demoted
    }

    /// The frame held now, if any (held by [`Self::hold`], not yet released).
    pub fn held(&self) -> Option<Held> {
        self.holds.held
    }

    /// Holds the newest frame (or the next, lossless), waiting at most `timeout` for one
    /// newer than the last held; `Ok(None)` if none came. Refused while a frame is held.
    /// [`IpcError::PeerClosed`] once the publisher is gone (this consumer's queue waits on
    /// its timeline are then released).
    pub fn hold(&mut self, timeout: Duration) -> Result<Option<Held>> {
        match self.holds.hold(timeout) {
            Ok(Some(h)) => {
                self.written.note_remote_signal(h.frame)?;
                Ok(Some(h))
            }
            Err(e) if is_peer_closed(&e) => {
                self.release_waits()?;
                Err(e)
            }
            other => other,
        }
    }

    /// After the publisher is gone: releases this consumer's queue waits on `written` (a
    /// host signal above every frame it announced), so its submissions complete.
    fn release_waits(&mut self) -> Result<()> {
        let above = self.written.highest_signal();
        if self.released || above == 0 {
            return Ok(());
        }
        self.written.release_after_peer_lost(above + 1)?;
        self.released = true;
        Ok(())
    }

    /// Submits `submit`, reading `held`'s slot: it waits on the GPU (at `submit.wait_stage`)
    /// for the frame written and signals this consumer's read timeline after it; the
    /// publisher is told, and may write the slot again once that signal ran.
    ///
    /// # Safety
    /// As [`VulkanContext::submit_with_semaphores`]: executable command buffers of this
    /// device whose resources live until the read timeline reaches the hold's value.
    pub unsafe fn submit_read(&mut self, held: &Held, submit: &FrameSubmit<'_>) -> Result<()> {
        self.holds.check(held)?;
        self.written.check_scheduled(held.frame)?;
        let mut waits = vec![SemaphoreOp::wait(
            &self.written,
            held.frame,
            submit.wait_stage,
        )];
        waits.extend_from_slice(submit.waits);
        let mut signals = vec![SemaphoreOp::signal(&self.read, held.read_value)];
        signals.extend_from_slice(submit.signals);
        // SAFETY: forwarded; the wait is for a value the publisher announced.
        unsafe {
            self.vk
                .submit_with_semaphores(submit.command_buffers, &waits, &signals, submit.fence)
        }?;
        self.holds.released(held)
    }

    /// For an engine whose queue cannot wait on a semaphore (wgpu 29, so Bevy 0.19): waits on
    /// the host, at most `timeout`, until the publisher's write of `held` is complete; the
    /// engine then submits its reads of the slot as it likes, and ends the frame with
    /// [`Self::release_foreign`]. (Where the engine's submission can carry a wait,
    /// [`Self::submit_read`] orders it on the GPU instead.)
    pub fn wait_written(&self, held: &Held, timeout: Duration) -> Result<()> {
        self.holds.check(held)?;
        self.written.check_scheduled(held.frame)?;
        self.written.wait_host(held.frame, timeout)
    }

    /// Releases `held` through a submission another library makes on this device's queue
    /// after its reads of the slot (wgpu's, on its own queue: a signal covers every command
    /// submitted before it): `submit` is called, holding the context's queue lock, with the
    /// context's [`ProgressSignal`] and this consumer's read-timeline signal `(semaphore,
    /// value)`, and must submit both (an empty batch is enough). The publisher is told once
    /// it returned `Ok`. If `submit` (or a check before it) fails, nothing is recorded and
    /// the frame stays held ([`Self::held`]); if only telling the publisher fails, the read
    /// is released all the same (its signal is submitted) and the error says why.
    ///
    /// # Safety
    /// As [`VulkanContext::submit_foreign`]: `submit` returns `Err` only if nothing reached a
    /// queue, and `Ok` only once it submitted, on this device's queue after every command
    /// that reads the slot, a batch signalling both semaphores with their values.
    pub unsafe fn release_foreign(
        &mut self,
        held: &Held,
        submit: impl FnOnce(ProgressSignal, (ash::vk::Semaphore, u64)) -> Result<()>,
    ) -> Result<()> {
        self.holds.check(held)?;
        let signals = [SemaphoreOp::signal(&self.read, held.read_value)];
        let read = (self.read.handle(), held.read_value);
        // SAFETY: forwarded to the caller's promise.
        unsafe {
            self.vk
                .submit_foreign(&[], &signals, |progress| submit(progress, read))
        }?;
        self.holds.released(held)
    }

    /// Waits on the host, at most `timeout`, until this consumer's read of `held` is done.
    pub fn wait_read(&self, held: &Held, timeout: Duration) -> Result<()> {
        self.read.check_scheduled(held.read_value)?;
        self.read.wait_host(held.read_value, timeout)
    }
}

/// A consumer that reads frames with CUDA (a recorder, a dashboard, a job's consumer): the
/// publisher's slots mapped into its context; per frame [`Self::hold`], [`Self::acquire`] on
/// the stream that reads it, the kernels, [`Self::release`].
pub struct CudaSubscriber {
    written: ExternalSemaphore,
    read: ExternalSemaphore,
    slots: Vec<MappedRange>,
    cuda: Arc<CudaContext>,
    /// The value `written` was released to after the publisher went (0: not yet).
    released: u64,
    holds: Holds,
}

impl std::fmt::Debug for CudaSubscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaSubscriber")
            .field("slots", &self.slots.len())
            .field("held", &self.holds.held)
            .finish_non_exhaustive()
    }
}

impl CudaSubscriber {
    /// Attaches to the publisher `name` from `cuda`'s GPU (checked against the publisher's),
    /// mapping its slots into `cuda`; `every_frame` as for [`Subscriber::attach`].
    pub fn attach(
        name: &str,
        cuda: &Arc<CudaContext>,
        every_frame: bool,
        timeout: Duration,
    ) -> Result<Self> {
        let start = Instant::now();
        let uuid = crate::cuda::uuid_of(cuda)?;
        let holds = Holds::connect(name, uuid, None, every_frame, timeout)?;
        let connected = start.elapsed();
        let (written_id, read_id) = holds.timeline_ids()?;
        let a = &holds.attached;
        let written = a.import_cuda_timeline(written_id, cuda)?;
        let read = a.import_cuda_timeline(read_id, cuda)?;
        let timelines = start.elapsed();
        let slots = holds
            .slot_ids()
            .into_iter()
            .map(|id| a.import_cuda_bytes(id, cuda))
            .collect::<Result<Vec<_>>>()?;
        // Where an attach's time goes (bench_fanout's consumers print it with RUST_LOG).
        log::debug!(
            "ipc: attached to {name:?}: connected and described at {connected:?}, timelines \
             imported at {timelines:?}, {} slots imported and mapped at {:?}",
            slots.len(),
            start.elapsed()
        );
        Ok(Self {
            written,
            read,
            slots,
            cuda: cuda.clone(),
            released: 0,
            holds,
        })
    }

    /// The publisher's slots, mapped into CUDA (a held frame is in [`Held::slot`]).
    pub fn slots(&self) -> &[MappedRange] {
        &self.slots
    }

    /// As [`Subscriber::hold`] (on the publisher gone, this consumer's stream waits on its
    /// timeline are released from a fresh stream).
    pub fn hold(&mut self, timeout: Duration) -> Result<Option<Held>> {
        match self.holds.hold(timeout) {
            Ok(Some(h)) => {
                self.written.ledger().note_remote(h.frame);
                Ok(Some(h))
            }
            Err(e) if is_peer_closed(&e) => {
                self.release_waits()?;
                Err(e)
            }
            other => other,
        }
    }

    /// Before reading `held`: `stream` waits on the GPU for the frame written.
    pub fn acquire(&self, held: &Held, stream: &CudaStream) -> Result<()> {
        self.holds.check(held)?;
        self.written.wait(stream, held.frame)
    }

    /// As [`Self::acquire`] on a raw stream (another library's: CuPy's, PyTorch's), checked
    /// to be of this consumer's CUDA context.
    ///
    /// # Safety
    /// `stream` must be null (the context's legacy default stream) or a live `CUstream`.
    pub unsafe fn acquire_raw(
        &self,
        held: &Held,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<()> {
        self.holds.check(held)?;
        // SAFETY: forwarded from the caller.
        unsafe { self.written.enqueue_raw(stream, held.frame, false) }
    }

    /// As [`Self::release`] on a raw stream, checked to be of this consumer's CUDA context.
    ///
    /// # Safety
    /// `stream` must be null (the context's legacy default stream) or a live `CUstream`.
    pub unsafe fn release_raw(
        &mut self,
        held: &Held,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<()> {
        self.holds.check(held)?;
        // SAFETY: forwarded from the caller.
        unsafe { self.read.enqueue_raw(stream, held.read_value, true) }?;
        self.holds.released(held)
    }

    /// The GPU this consumer reads on (its CUDA context's ordinal).
    pub fn cuda_ordinal(&self) -> usize {
        self.cuda.ordinal()
    }

    /// What each slot holds, as the publisher described it (in the order of [`Self::slots`]).
    pub fn slot_elements(&self) -> Vec<crate::ElementFormat> {
        self.holds.slot_elements()
    }

    /// After reading `held` on `stream`: `stream` signals this consumer's read timeline; the
    /// publisher is told.
    pub fn release(&mut self, held: &Held, stream: &CudaStream) -> Result<()> {
        self.holds.check(held)?;
        self.read.signal(stream, held.read_value)?;
        self.holds.released(held)
    }

    /// After the publisher is gone: a signal from a fresh stream above every frame it
    /// announced, so this consumer's streams waiting on it run on.
    fn release_waits(&mut self) -> Result<()> {
        let above = self.written.ledger().highest();
        if self.released != 0 || above == 0 {
            return Ok(());
        }
        let stream = self.cuda.new_stream().cuda("cuStreamCreate")?;
        self.written.signal(&stream, above + 1)?;
        self.released = above + 1;
        stream.synchronize().cuda("cuStreamSynchronize")
    }
}
