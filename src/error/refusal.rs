//! The structured refusals: each variant is one rule a request broke, with its numbers as
//! typed fields (and the Vulkan VUID where the spec has one), checked before any driver call.

use ash::vk;

/// Which kind of object a [`WrongDevice`](crate::Error::WrongDevice) refusal is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeviceObject {
    /// A Vulkan buffer.
    Buffer,
    /// A Vulkan image.
    Image,
    /// Vulkan device memory.
    Memory,
    /// A Vulkan semaphore.
    Semaphore,
    /// A module of CUDA kernels loaded into a Vulkan device.
    KernelModule,
    /// A CUDA stream.
    Stream,
    /// A CUDA (mipmapped) array.
    CudaArray,
    /// A CUDA virtual-memory allocation.
    VmmAllocation,
    /// A wgpu queue.
    Queue,
    /// A frame of a frame pacer.
    Frame,
}

impl std::fmt::Display for DeviceObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DeviceObject::Buffer => "buffer",
            DeviceObject::Image => "image",
            DeviceObject::Memory => "memory",
            DeviceObject::Semaphore => "semaphore",
            DeviceObject::KernelModule => "kernel module",
            DeviceObject::Stream => "stream",
            DeviceObject::CudaArray => "CUDA array",
            DeviceObject::VmmAllocation => "CUDA virtual-memory allocation",
            DeviceObject::Queue => "queue",
            DeviceObject::Frame => "frame",
        })
    }
}

/// What an object should have belonged to, in a [`WrongDevice`](crate::Error::WrongDevice)
/// refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeviceOwner {
    /// The Vulkan device (`VkDevice`) of the call.
    VulkanDevice,
    /// The physical device and driver (opaque handles import only where `deviceUUID` and
    /// `driverUUID` both match the exporter's).
    PhysicalDevice,
    /// The CUDA context of the call.
    CudaContext,
    /// The wgpu device of the call.
    WgpuDevice,
    /// The frame pacer the frame is given to.
    FramePacer,
}

impl std::fmt::Display for DeviceOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DeviceOwner::VulkanDevice => "Vulkan device",
            DeviceOwner::PhysicalDevice => {
                "physical device or driver (opaque handles import only where deviceUUID and \
                 driverUUID match)"
            }
            DeviceOwner::CudaContext => "CUDA context",
            DeviceOwner::WgpuDevice => "wgpu device",
            DeviceOwner::FramePacer => "frame pacer",
        })
    }
}

// The table: the enum, and beside each variant its rule (see `error::table`).
crate::error::table::refusals! {
    rows memory_rules, path "Memory.";
    /// A broken memory, buffer or allocation rule (checked before the driver sees the request).
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum MemoryError {
        /// The object needs a dedicated allocation and was given a shared one (or an offset).
        #[error(
            "this {object} requires a dedicated allocation (VkMemoryDedicatedRequirements or \
             DEDICATED_ONLY external memory); it cannot be bound to shared memory or at an offset"
        )]
        DedicatedRequired {
            /// A buffer or an image.
            object: super::DeviceObject,
        } => {
            /// The object needs a dedicated allocation.
            MemoryDedicatedRequired = 0x0501
        },
        /// Exportable buffers of this usage must be dedicated allocations on this device, so they
        /// cannot share a block (`SharedAllocation`, `SharedPool`).
        #[error(
            "this device requires dedicated allocations for exportable buffers of usage {usage:?}: \
             they cannot be sub-allocated; use Bridge::create_buffer, one buffer per allocation"
        )]
        DedicatedOnlyUsage {
            /// The buffer usage.
            usage: vk::BufferUsageFlags,
        } => {
            /// Exportable buffers of this usage must be dedicated on this device (no
            /// sub-allocation).
            MemoryDedicatedOnlyUsage = 0x0502
        },
        /// The memory is a dedicated allocation for another buffer or image.
        #[error("the memory is a dedicated allocation for another buffer or image")]
        DedicatedToAnother => {
            /// The memory is a dedicated allocation for another object.
            MemoryDedicatedToAnother = 0x0503
        },
        /// A dedicated allocation holds exactly one buffer.
        #[error("a dedicated allocation holds exactly one buffer (the one it was allocated for)")]
        DedicatedHoldsOneBuffer => {
            /// A dedicated allocation holds exactly one buffer.
            MemoryDedicatedHoldsOneBuffer = 0x0504
        },
        /// A dedicated allocation's size differs from its buffer's required size.
        #[error(
            "a dedicated allocation for a buffer must be exactly its required size, {required} \
             bytes, not {given}"
        )]
        DedicatedSize {
            /// `VkMemoryRequirements::size` of the buffer.
            required: u64,
            /// The size asked for.
            given: u64,
        } => {
            /// A dedicated allocation whose size is not its buffer's required size.
            MemoryDedicatedSize = 0x0505
        },
        /// The memory's type is not one the buffer or image accepts.
        #[error("memory type {memory_type} is not in the {object}'s memoryTypeBits {type_bits:#x}")]
        MemoryTypeNotAllowed {
            /// A buffer or an image.
            object: super::DeviceObject,
            /// The memory's type index.
            memory_type: u32,
            /// What the object accepts.
            type_bits: u32,
        } => {
            /// A memory type the buffer or image does not accept.
            MemoryTypeNotAllowed = 0x0506
        },
        /// A buffer with `SHADER_DEVICE_ADDRESS` usage on memory allocated without
        /// `DEVICE_ADDRESS`.
        #[error(
            "a buffer with SHADER_DEVICE_ADDRESS usage needs memory allocated with DEVICE_ADDRESS \
             (imported memory has none): drop the usage for this buffer"
        )]
        DeviceAddressNotAllocated => {
            /// A device-address buffer on memory allocated without device addresses.
            MemoryDeviceAddressNotAllocated = 0x0507
        },
        /// The object was not created exportable, so it cannot be shared.
        #[error("the {what} was not created exportable")]
        NotExportable {
            /// Which object.
            what: Exportable,
        } => {
            /// The object was not created exportable.
            MemoryNotExportable = 0x0508
        },
        /// No memory type fits the request.
        #[error(
            "no memory type with properties {required:?} in type bits {type_bits:#x}{}",
            if *.exportable { " that can be exported" } else { "" }
        )]
        NoMemoryType {
            /// `memoryTypeBits` that were allowed.
            type_bits: u32,
            /// Property flags that were required.
            required: vk::MemoryPropertyFlags,
            /// Whether the type also had to be exportable.
            exportable: bool,
        } => {
            /// No memory type fits the request.
            MemoryNoMemoryType = 0x0509
        },
        /// An allocation is larger than the memory heap it would come from.
        #[error(
            "allocation of {size} bytes is larger than memory heap {heap_index} ({heap_size} bytes) \
             of memory type {memory_type}"
        )]
        ExceedsHeap {
            /// The requested allocation size.
            size: u64,
            /// The memory type chosen.
            memory_type: u32,
            /// Its heap.
            heap_index: u32,
            /// The heap's size.
            heap_size: u64,
        } => {
            /// An allocation larger than its memory heap.
            MemoryExceedsHeap = 0x050A
        },
        /// A buffer is larger than any heap of the device (refused before `vkCreateBuffer`).
        #[error(
            "a buffer of {size} bytes is larger than the largest memory heap of the device \
             ({largest_heap} bytes)"
        )]
        BufferExceedsHeaps {
            /// The size asked for.
            size: u64,
            /// The size of the device's largest heap.
            largest_heap: u64,
        } => {
            /// A buffer larger than every memory heap of the device.
            MemoryBufferExceedsHeaps = 0x050B
        },
        /// A pool buffer asked for a usage its pool's buffers are not created with.
        #[error(
            "buffer usage {requested:?} is not within the pool's usage {pool:?}: a pool's blocks \
             are allocated for the memory types of its usage and its buffers are created with it; \
             create the pool with every usage its buffers need"
        )]
        UsageNotInPool {
            /// The usage asked for (with transfer source and destination).
            requested: vk::BufferUsageFlags,
            /// The pool's usage (with transfer source and destination).
            pool: vk::BufferUsageFlags,
        } => {
            /// A pool buffer with a usage its pool was not created with.
            MemoryUsageNotInPool = 0x050C
        },
        /// The memory is not host-visible, so the host cannot read or write it.
        #[error("the memory is not host-visible")]
        NotHostVisible => {
            /// Memory the host cannot see.
            MemoryNotHostVisible = 0x050D
        },
        /// A pool's block size is smaller than the unit its ranges are counted in.
        #[error(
            "pool block_size {block_size} is smaller than the {unit}-byte unit its ranges are \
             counted in (the buffers' Vulkan alignment, at least CUDA's 16-byte mapped-offset rule)"
        )]
        PoolBlockTooSmall {
            /// The block size asked for.
            block_size: u64,
            /// The range unit.
            unit: u64,
        } => {
            /// A pool block size below the unit its ranges are counted in.
            MemoryPoolBlockTooSmall = 0x050E
        },
        /// A pool's dedicated threshold is 0 or above its block size.
        #[error(
            "pool dedicated_threshold {threshold} must be in 1..={block_size} (block_size): requests \
             above it get their own allocation, so a block must hold any request up to it"
        )]
        PoolThreshold {
            /// The threshold asked for.
            threshold: u64,
            /// The pool's block size.
            block_size: u64,
        } => {
            /// A pool's dedicated threshold outside 1 to its block size.
            MemoryPoolThreshold = 0x050F
        },
        /// No pool block can hold the request.
        #[error("no pool block of {block_size} bytes holds {size} bytes aligned to {alignment}")]
        PoolRequestTooLarge {
            /// The request's size.
            size: u64,
            /// The request's alignment.
            alignment: u64,
            /// The pool's block size (0: none fits).
            block_size: u64,
        } => {
            /// No pool block can hold the request.
            MemoryPoolRequestTooLarge = 0x0510
        },
        /// A growable buffer's chunk does not hold whole elements.
        #[error("chunk of {chunk_bytes} bytes does not hold whole elements of {element_size} bytes")]
        ChunkNotWholeElements {
            /// The chunk size.
            chunk_bytes: u64,
            /// The element size.
            element_size: u64,
        } => {
            /// A growable buffer's chunk that does not hold whole elements.
            MemoryChunkNotWholeElements = 0x0511
        },
        /// A copy's element count differs from the buffer's.
        #[error("a copy of {given} elements into or out of a buffer of {len}")]
        CopyLength {
            /// The elements given.
            given: usize,
            /// The buffer's length.
            len: usize,
        } => {
            /// A copy whose element count is not the buffer's.
            MemoryCopyLength = 0x0512
        },
        /// A buffer or image lacks a usage a command needs (with the VUID that requires it).
        #[error(
            "{command} needs {needed:?} usage on its {object}; it was created with {have:?} ({vuid})"
        )]
        MissingBufferUsage {
            /// The command.
            command: &'static str,
            /// Source or destination buffer.
            object: &'static str,
            /// The usage needed.
            needed: vk::BufferUsageFlags,
            /// The usage the buffer has.
            have: vk::BufferUsageFlags,
            /// The Vulkan valid-usage ID.
            vuid: &'static str,
        } => {
            /// A buffer without a usage the command needs.
            MemoryMissingBufferUsage = 0x0513
        },
        /// A size or element count that does not fit the host's address space.
        #[error("{bytes} bytes do not fit in this host's address space")]
        HostSizeOverflow {
            /// The size.
            bytes: u64,
        } => {
            /// A size that does not fit the host's address space.
            MemoryHostSizeOverflow = 0x0514
        },
        /// The memory lives on a device outside the multicast team.
        #[error(
            "the memory lives on CUDA device {device}, which is not in the multicast team {team:?}"
        )]
        NotInMulticastTeam {
            /// The memory's device ordinal.
            device: i32,
            /// The team's device ordinals.
            team: Vec<i32>,
        } => {
            /// Memory of a device outside the multicast team.
            MemoryNotInMulticastTeam = 0x0515
        },
        /// A shareable multicast object binds only shareable memory.
        #[error(
            "a shareable multicast object binds only shareable memory (cuMemCreate with a shareable \
             handle type)"
        )]
        MulticastNeedsShareable => {
            /// A shareable multicast object given memory that is not shareable.
            MemoryMulticastNeedsShareable = 0x0516
        },
        /// A multicast team needs at least one device.
        #[error("a multicast team needs at least one device")]
        EmptyMulticastTeam => {
            /// A multicast team without devices.
            MemoryEmptyMulticastTeam = 0x0517
        },
        /// Host writes through a buffer whose memory another owner also holds.
        #[error("the memory is shared with another owner: host writes need the only handle to it")]
        MemoryShared => {
            /// Memory another owner still holds (a mapping, a view, a parked copy): the call needs
            /// it alone.
            MemoryShared = 0x0519
        },
        /// `BoundImage::new` was given a description that imports memory.
        #[error(
            "BoundImage::new allocates the image's memory; an image that imports memory comes from \
             BoundImage::import_from"
        )]
        ImportNeedsSource => {
            /// An image description that imports memory given where memory is allocated.
            MemoryImportNeedsSource = 0x0518
        },
    }
}

impl MemoryError {
    /// The Vulkan valid-usage ID of the rule, where the Vulkan spec states it.
    pub fn vuid(&self) -> Option<&'static str> {
        Some(match self {
            MemoryError::DedicatedRequired {
                object: super::DeviceObject::Image,
            } => "VUID-vkBindImageMemory-image-01445",
            MemoryError::DedicatedRequired { .. } => "VUID-vkBindBufferMemory-buffer-01444",
            MemoryError::DedicatedToAnother => "VUID-vkBindBufferMemory-memory-01508",
            MemoryError::DedicatedSize { .. } => "VUID-VkMemoryDedicatedAllocateInfo-buffer-02965",
            MemoryError::MemoryTypeNotAllowed {
                object: super::DeviceObject::Image,
                ..
            } => "VUID-vkBindImageMemory-memory-01047",
            MemoryError::MemoryTypeNotAllowed { .. } => "VUID-vkBindBufferMemory-memory-01035",
            MemoryError::DeviceAddressNotAllocated => {
                "VUID-vkBindBufferMemory-bufferDeviceAddress-03339"
            }
            MemoryError::MissingBufferUsage { vuid, .. } => vuid,
            _ => return None,
        })
    }
}

/// Which object was not created exportable ([`MemoryError::NotExportable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Exportable {
    /// Vulkan device memory.
    Memory,
    /// A Vulkan buffer.
    Buffer,
    /// A Vulkan image.
    Image,
    /// A Vulkan semaphore.
    Semaphore,
    /// A CUDA virtual-memory allocation.
    VmmAllocation,
}

impl std::fmt::Display for Exportable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Exportable::Memory => "memory",
            Exportable::Buffer => "buffer",
            Exportable::Image => "image",
            Exportable::Semaphore => "semaphore",
            Exportable::VmmAllocation => "CUDA allocation",
        })
    }
}

// The table: the enum, and beside each variant its rule (see `error::table`).
crate::error::table::refusals! {
    rows sync_rules, path "Sync.";
    /// A broken semaphore, timeline or frame-pacing rule.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum SyncError {
        /// An operation that needs a timeline semaphore was given a binary one.
        #[error("{operation} needs a timeline semaphore")]
        NeedsTimeline {
            /// The operation.
            operation: &'static str,
        } => {
            /// A binary semaphore where a timeline one is needed.
            SyncNeedsTimeline = 0x0601
        },
        /// A semaphore is imported into CUDA as the other kind.
        #[error("a {} semaphore cannot be imported into CUDA as a {} semaphore",
            if *.timeline { "timeline" } else { "binary" },
            if *.timeline { "binary" } else { "timeline" })]
        ImportKind {
            /// Whether the semaphore is a timeline.
            timeline: bool,
        } => {
            /// A semaphore imported into CUDA as the other kind.
            SyncImportKind = 0x0602
        },
        /// A timeline signal value does not exceed the last value scheduled for that semaphore.
        #[error(
            "timeline value {value} does not increase: {last} was already scheduled (values must \
             strictly increase)"
        )]
        TimelineNotIncreasing {
            /// The value asked for.
            value: u64,
            /// The highest value already scheduled.
            last: u64,
        } => {
            /// A timeline value that does not exceed the last one scheduled (values must increase).
            SyncTimelineNotIncreasing = 0x0603
        },
        /// One semaphore is signalled twice in one submission.
        #[error("one semaphore is signalled twice in one submission")]
        SignalledTwice => {
            /// One semaphore signalled twice in one submission.
            SyncSignalledTwice = 0x0604
        },
        /// A wait for a timeline value that no submission has scheduled: the GPU would wait
        /// forever.
        #[error(
            "a wait for timeline value {value}, which no submission has scheduled (the highest \
             scheduled is {scheduled}): the GPU would wait forever"
        )]
        WaitNeverSignalled {
            /// The value waited for.
            value: u64,
            /// The highest value scheduled so far.
            scheduled: u64,
        } => {
            /// A wait for a timeline value nothing has scheduled (it would never end).
            SyncWaitNeverSignalled = 0x0605
        },
        /// A host signal while a signal already scheduled (on a queue or a CUDA stream) has not
        /// executed: that signal would then run after the higher host value, which Vulkan forbids
        /// (VUID-VkSemaphoreSignalInfo-value-03259).
        #[error(
            "a host signal of {value} while the scheduled signal of {pending} has not executed yet \
             (the counter is at {current}): wait for it first"
        )]
        SignalPending {
            /// The value asked for.
            value: u64,
            /// The highest value scheduled, not yet reached.
            pending: u64,
            /// The semaphore's counter now.
            current: u64,
        } => {
            /// A host signal while a signal already scheduled has not executed.
            SyncSignalPending = 0x060B
        },
        /// A semaphore wait whose stage mask is empty.
        #[error("a semaphore wait needs the stages that wait (its stage mask is empty)")]
        EmptyWaitStage => {
            /// A semaphore wait with an empty stage mask.
            SyncEmptyWaitStage = 0x0606
        },
        /// A binary semaphore where only timeline semaphores are accepted.
        #[error("{what} waits on and signals timeline semaphores only")]
        BinaryNotAccepted {
            /// Who accepts only timelines.
            what: &'static str,
        } => {
            /// A binary semaphore where only timeline semaphores are accepted.
            SyncBinaryNotAccepted = 0x0607
        },
        /// Frames in flight out of range.
        #[error("frames in flight must be 1 to {max}, not {requested}")]
        FramesInFlight {
            /// The count asked for.
            requested: u32,
            /// The largest count.
            max: u32,
        } => {
            /// Frames in flight out of range.
            SyncFramesInFlight = 0x0608
        },
        /// A frame that this pacer did not issue.
        #[error("frame {frame} was issued by another frame pacer")]
        ForeignFrame {
            /// The frame's number.
            frame: u64,
        } => {
            /// A frame another frame pacer issued.
            SyncForeignFrame = 0x0609
        },
        /// A frame that is not the one the pacer expects now (an earlier or later frame).
        #[error("frame {frame} is not the pacer's current frame ({current}): {reason}")]
        WrongFrame {
            /// The frame given.
            frame: u64,
            /// The pacer's current frame.
            current: u64,
            /// Why the step needs the current frame.
            reason: FrameStep,
        } => {
            /// A frame that is not the pacer's current one.
            SyncWrongFrame = 0x060A
        },
        /// The pacer's current frame, asked for a step its state does not allow (e.g. CUDA's
        /// release before its acquire, a second submission, the next frame before this one is
        /// submitted).
        #[error("frame {frame} was last {}: {reason}", frame_step_done(.last_step))]
        FrameOutOfOrder {
            /// The frame.
            frame: u64,
            /// The last step the frame went through ([`FrameStep::Begin`], `CudaAcquire`,
            /// `CudaRelease` or `Submit`).
            last_step: FrameStep,
            /// The step refused, and why.
            reason: FrameStep,
        } => {
            /// A frame step out of order (a release before the acquire, a submission before the
            /// release, ...).
            SyncFrameOutOfOrder = 0x060C
        },
        /// A resource's [`UseMarks`](crate::interop::UseMarks) handed to a
        /// [`StreamOrder`](crate::interop::StreamOrder) that did not make them.
        #[error("use marks of stream order {marks} given to stream order {order}")]
        ForeignMarks {
            /// The order that made the marks.
            marks: u64,
            /// The order they were given to.
            order: u64,
        } => {
            /// A resource's use marks handed to a stream order that did not make them.
            SyncForeignMarks = 0x060D
        },
        /// A timeline signal further above the counter than every device must accept
        /// (`maxTimelineSemaphoreValueDifference` is at least 2^31 - 1; a driver may ignore a
        /// larger jump: measured on NVIDIA).
        #[error("timeline jump too large: signalling {value} with the counter at {current} (at most {max} above it)")]
        TimelineJumpTooLarge {
            /// The value asked for.
            value: u64,
            /// The counter now.
            current: u64,
            /// The largest jump every device accepts.
            max: u64,
        } => {
            /// A timeline signal further above the counter than every device must accept.
            SyncTimelineJumpTooLarge = 0x060E
        },
        /// A frame server accepting a producer with other than one published slot per frame in
        /// flight (the producer reads K from the slot count).
        #[error(
            "a frame server publishes one slot per frame in flight: {published} published, \
             {frames_in_flight} frames in flight"
        )]
        SlotCount {
            /// Slots published.
            published: u32,
            /// Frames in flight (K).
            frames_in_flight: u32,
        } => {
            /// A frame server's slot count is not its frames in flight.
            SyncSlotCount = 0x060F
        },
        /// Every slot of a fan-out publisher is held by a consumer or is the newest frame.
        #[error(
            "all {slots} slots are held ({holding} consumers hold a frame) or newest: a publisher \
             needs consumers + 2 slots"
        )]
        SlotsHeld {
            /// Slots (K).
            slots: u32,
            /// Consumers holding a frame.
            holding: u32,
        } => {
            /// A publisher with no slot free to write: too few slots for its consumers.
            SyncSlotsHeld = 0x0610
        },
    }
}

/// The past tense of a frame's step, for [`SyncError::FrameOutOfOrder`].
fn frame_step_done(step: &FrameStep) -> &'static str {
    match step {
        FrameStep::Begin => "begun",
        FrameStep::CudaAcquire => "acquired by CUDA",
        FrameStep::CudaRelease => "released by CUDA",
        FrameStep::Submit | FrameStep::MarkSubmitted => "submitted",
        FrameStep::RecordCommands => "recorded",
    }
}

/// Which step of a frame needed the current frame ([`SyncError::WrongFrame`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FrameStep {
    /// CUDA's work of the frame is ordered after the pacer's previous use of the slot.
    CudaAcquire,
    /// CUDA's release of the frame signals the value the Vulkan submission waits for.
    CudaRelease,
    /// The Vulkan submission of the frame.
    Submit,
    /// Marking the frame submitted (by a submission made elsewhere).
    MarkSubmitted,
    /// Handing out the next frame: the current one must be submitted first.
    Begin,
    /// Recording the frame's command buffer: only before the frame is submitted.
    RecordCommands,
}

impl std::fmt::Display for FrameStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FrameStep::CudaAcquire => {
                "CUDA can acquire only the frame begun last, before it is released"
            }
            FrameStep::CudaRelease => "CUDA can release only the frame it acquired last",
            FrameStep::Submit => "only the frame released by CUDA can be submitted",
            FrameStep::MarkSubmitted => "only the frame released by CUDA can be marked submitted",
            FrameStep::Begin => {
                "the next frame begins only once this one is submitted (to skip a frame, acquire, \
                 release and submit it with no work)"
            }
            FrameStep::RecordCommands => {
                "a frame's command buffer can be recorded only before the frame is submitted"
            }
        })
    }
}

// The table: the enum, and beside each variant its rule (see `error::table`).
crate::error::table::refusals! {
    rows launch_rules, path "Launch.";
    /// A kernel launch that breaks the kernel's PTX signature or CUDA's limits (refused before it
    /// is recorded: such a launch would fault on the GPU, not return an error).
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum LaunchError {
        /// The argument count differs from the kernel's parameter count.
        #[error("kernel {kernel}: {given} arguments given, the kernel takes {expected} ({params})")]
        ArgumentCount {
            /// The kernel.
            kernel: String,
            /// Arguments given.
            given: usize,
            /// Parameters declared.
            expected: usize,
            /// The parameters, as PTX declares them.
            params: String,
        } => {
            /// An argument count that differs from the kernel's parameters.
            LaunchArgumentCount = 0x0701
        },
        /// An argument's size differs from its parameter's.
        #[error(
            "kernel {kernel}: argument {index} is {given} bytes, parameter {param} is {expected} bytes"
        )]
        ArgumentSize {
            /// The kernel.
            kernel: String,
            /// The argument's position.
            index: usize,
            /// Its size.
            given: usize,
            /// The parameter's size.
            expected: usize,
            /// The parameter as PTX declares it.
            param: String,
        } => {
            /// An argument whose size differs from its parameter's.
            LaunchArgumentSize = 0x0702
        },
        /// A device address (or image handle) given for a parameter that is not a 64-bit integer.
        #[error("kernel {kernel}: argument {index} is a device address, parameter {param} is not a 64-bit integer")]
        AddressToNonPointer {
            /// The kernel.
            kernel: String,
            /// The argument's position.
            index: usize,
            /// The parameter as PTX declares it.
            param: String,
        } => {
            /// A device address for a parameter that is not a 64-bit integer.
            LaunchAddressToNonPointer = 0x0703
        },
        /// An image handle ([`crate::vulkan::InlineImageHandle`]) given for a parameter that is
        /// not a 64-bit integer (`cudaSurfaceObject_t` / `cudaTextureObject_t` are `.u64`).
        #[error(
            "kernel {kernel}: argument {index} is an image handle (a cudaSurfaceObject_t / \
             cudaTextureObject_t, a 64-bit integer), parameter {param} is not a 64-bit integer"
        )]
        ImageHandleToNonInteger {
            /// The kernel.
            kernel: String,
            /// The argument's position.
            index: usize,
            /// The parameter as PTX declares it.
            param: String,
        } => {
            /// An image handle passed to a kernel parameter that is not a 64-bit integer.
            LaunchImageHandleToNonInteger = 0x070A
        },
        /// Too many bytes of parameters.
        #[error("kernel {kernel}: {total} bytes of parameters; at most {max}")]
        ParameterBytes {
            /// The kernel.
            kernel: String,
            /// The bytes given.
            total: usize,
            /// CUDA's limit.
            max: usize,
        } => {
            /// Too many bytes of parameters.
            LaunchParameterBytes = 0x0704
        },
        /// A zero grid or block dimension.
        #[error("kernel {kernel}: grid {grid:?} and block {block:?} must have no zero dimension")]
        ZeroDimension {
            /// The kernel.
            kernel: String,
            /// The grid.
            grid: [u32; 3],
            /// The block.
            block: [u32; 3],
        } => {
            /// A zero grid or block dimension.
            LaunchZeroDimension = 0x0705
        },
        /// Too many threads in a block.
        #[error("kernel {kernel}: block {block:?} has {threads} threads; at most {max}")]
        ThreadsPerBlock {
            /// The kernel.
            kernel: String,
            /// The block.
            block: [u32; 3],
            /// Its thread count.
            threads: u64,
            /// CUDA's limit.
            max: u32,
        } => {
            /// Too many threads in a block.
            LaunchThreadsPerBlock = 0x0706
        },
        /// A grid or block dimension beyond CUDA's limits.
        #[error("kernel {kernel}: grid {grid:?} / block {block:?} exceed CUDA's limits {max_grid:?} / {max_block:?} in dimension {axis}")]
        DimensionLimit {
            /// The kernel.
            kernel: String,
            /// The axis (0 = x).
            axis: usize,
            /// The grid.
            grid: [u32; 3],
            /// The block.
            block: [u32; 3],
            /// CUDA's grid limits.
            max_grid: [u32; 3],
            /// CUDA's block limits.
            max_block: [u32; 3],
        } => {
            /// A grid or block dimension beyond CUDA's limits.
            LaunchDimensionLimit = 0x0707
        },
        /// Too much dynamic shared memory.
        #[error("kernel {kernel}: {bytes} bytes of dynamic shared memory; at most {max} without a per-kernel opt-in")]
        SharedMemory {
            /// The kernel.
            kernel: String,
            /// The bytes asked for.
            bytes: u32,
            /// CUDA's default limit.
            max: u32,
        } => {
            /// Too much dynamic shared memory.
            LaunchSharedMemory = 0x0708
        },
        /// Text handed to a C API (PTX, kernel source, a kernel name) has a NUL byte.
        #[error("the {what} has a NUL byte at {position}")]
        NulByte {
            /// What text.
            what: &'static str,
            /// Where.
            position: usize,
        } => {
            /// Text handed to a C API with a NUL byte.
            LaunchNulByte = 0x0709
        },
    }
}

// The table: the enum, and beside each variant its rule (see `error::table`).
crate::error::table::refusals! {
    rows capability_rules, path "Unsupported.";
    /// A capability the device, driver or platform lacks ([`Error::Unsupported`](crate::Error)).
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum Capability {
        /// The device (or its queue) has no sparse binding.
        #[error("the device (or its queue) has no sparse binding")]
        SparseBinding => {
            /// The device (or its queue) has no sparse binding.
            UnsupportedSparseBinding = 0x0801
        },
        /// Sparse buffers of this usage cannot take imported memory.
        #[error("sparse buffers of usage {usage:?} cannot take imported {handle_type:?} memory")]
        SparseImport {
            /// The usage.
            usage: vk::BufferUsageFlags,
            /// The handle type.
            handle_type: vk::ExternalMemoryHandleTypeFlags,
        } => {
            /// Sparse buffers of this usage cannot take imported memory.
            UnsupportedSparseImport = 0x0802
        },
        /// The device cannot export or import buffers of this usage through the handle type.
        #[error(
            "the device offers {offered:?} for buffers with usage {usage:?} as {handle_type:?}; \
             {needed:?} is needed"
        )]
        ExternalBuffer {
            /// The usage.
            usage: vk::BufferUsageFlags,
            /// The handle type.
            handle_type: vk::ExternalMemoryHandleTypeFlags,
            /// What the device offers.
            offered: vk::ExternalMemoryFeatureFlags,
            /// What is needed.
            needed: vk::ExternalMemoryFeatureFlags,
        } => {
            /// The device cannot export or import buffers of this usage.
            UnsupportedExternalBuffer = 0x0803
        },
        /// The device cannot create the image at all.
        #[error(
            "the device cannot create {kind:?} {format:?} images with usage {usage:?}, {tiling:?} \
             tiling, external handle types {handle_types:?} (vkGetPhysicalDeviceImageFormatProperties2)"
        )]
        ImageCreate {
            /// The image's kind.
            kind: crate::ImageKind,
            /// The format.
            format: vk::Format,
            /// The usage.
            usage: vk::ImageUsageFlags,
            /// The tiling.
            tiling: vk::ImageTiling,
            /// The external handle types (empty: not shared).
            handle_types: vk::ExternalMemoryHandleTypeFlags,
        } => {
            /// The device cannot create the image.
            UnsupportedImageCreate = 0x0804
        },
        /// The device cannot export or import images of this kind through the handle type.
        #[error(
            "the device offers {offered:?} for {kind:?} {format:?} images with usage {usage:?} as \
             {handle_types:?}; {needed:?} is needed"
        )]
        ExternalImage {
            /// The image's kind.
            kind: crate::ImageKind,
            /// The format.
            format: vk::Format,
            /// The usage.
            usage: vk::ImageUsageFlags,
            /// The external handle types.
            handle_types: vk::ExternalMemoryHandleTypeFlags,
            /// What the device offers.
            offered: vk::ExternalMemoryFeatureFlags,
            /// What is needed.
            needed: vk::ExternalMemoryFeatureFlags,
        } => {
            /// The device cannot export or import images of this kind.
            UnsupportedExternalImage = 0x0805
        },
        /// The device cannot export semaphores of this kind through the handle type.
        #[error("the device cannot export {} semaphores as {handle_type:?}", if *.timeline { "timeline" } else { "binary" })]
        SemaphoreExport {
            /// Whether the semaphore is a timeline.
            timeline: bool,
            /// The handle type.
            handle_type: vk::ExternalSemaphoreHandleTypeFlags,
        } => {
            /// The device cannot export semaphores of this kind.
            UnsupportedSemaphoreExport = 0x0806
        },
        /// The device has no `timelineSemaphore` feature (Vulkan 1.2).
        #[error("the device has no timelineSemaphore feature (Vulkan 1.2)")]
        TimelineSemaphore => {
            /// The device has no `timelineSemaphore` feature.
            UnsupportedTimelineSemaphore = 0x0807
        },
        /// The NVRTC library is not on this machine.
        #[error("NVRTC library (libnvrtc) not found")]
        Nvrtc => {
            /// No NVRTC library on this machine.
            UnsupportedNvrtc = 0x0808
        },
        /// The NCCL library is not on this machine (or lacks a function cuvk calls).
        #[error("{reason}")]
        Nccl {
            /// What was tried.
            reason: String,
        } => {
            /// No NCCL library on this machine.
            UnsupportedNccl = 0x080D
        },
        /// A CUDA device cannot create multicast objects.
        #[error("CUDA device {device} reports CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 0: no multicast object is created")]
        Multicast {
            /// The device ordinal.
            device: i32,
        } => {
            /// The CUDA device cannot create multicast objects.
            UnsupportedMulticast = 0x0809
        },
        /// The Vulkan driver refused memory allocated by CUDA (`cuMemCreate`), which is outside
        /// the Vulkan specification.
        #[error("the Vulkan driver refused memory allocated by CUDA ({result}); importing cuMemCreate memory is outside the Vulkan specification")]
        CudaMemoryImport {
            /// What the driver returned.
            result: vk::Result,
        } => {
            /// The Vulkan driver refused memory allocated by CUDA.
            UnsupportedCudaMemoryImport = 0x080A
        },
        /// The device cannot filter images of this format linearly with this tiling (no
        /// `SAMPLED_IMAGE_FILTER_LINEAR` format feature), so no linear sampler is made for them.
        #[error(
            "the device cannot filter {format:?} images with {tiling:?} tiling linearly (no \
             SAMPLED_IMAGE_FILTER_LINEAR format feature): use point sampling"
        )]
        LinearFilter {
            /// The image's format.
            format: vk::Format,
            /// The image's tiling.
            tiling: vk::ImageTiling,
        } => {
            /// Linear filtering of a format the device cannot filter.
            UnsupportedLinearFilter = 0x080C
        },
        /// CUDA kernels cannot run inside this device's Vulkan queues.
        #[error("CUDA kernels cannot run in this device's Vulkan queues: {reason}")]
        InlineKernels {
            /// Why not.
            reason: InlineKernelsMissing,
        } => {
            /// CUDA kernels cannot run inside this device's Vulkan queues.
            UnsupportedInlineKernels = 0x080B
        },
        /// The device has no 64-bit buffer atomics (`shaderInt64`,
        /// `shaderBufferInt64Atomics`), which the opaque, depth-composited particle mode keeps
        /// its nearest samples with.
        #[error("the device has no 64-bit buffer atomics (shaderInt64 + shaderBufferInt64Atomics)")]
        Atomic64 => {
            /// The device has no 64-bit buffer atomics.
            UnsupportedAtomic64 = 0x080E
        },
    }
}

/// Why CUDA kernels cannot run inside a device's Vulkan queues ([`Capability::InlineKernels`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InlineKernelsMissing {
    /// `VK_NVX_binary_import` is not offered by the device (not an NVIDIA driver).
    BinaryImportNotSupported,
    /// `VK_NVX_binary_import` is offered but was not enabled on the device.
    BinaryImportNotEnabled,
    /// `bufferDeviceAddress` (pointer arguments) was not enabled.
    BufferDeviceAddress,
    /// `VK_NVX_image_view_handle` is not offered by the device: kernels in its queues cannot
    /// reach images (no [`crate::vulkan::InlineImageHandle`]).
    ImageViewHandleNotSupported,
    /// `VK_NVX_image_view_handle` is offered but was not enabled on the device.
    ImageViewHandleNotEnabled,
}

impl std::fmt::Display for InlineKernelsMissing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            InlineKernelsMissing::BinaryImportNotSupported => {
                "VK_NVX_binary_import is not supported by the device"
            }
            InlineKernelsMissing::BinaryImportNotEnabled => {
                "VK_NVX_binary_import is supported but was not enabled on the device"
            }
            InlineKernelsMissing::BufferDeviceAddress => {
                "the bufferDeviceAddress feature was not enabled"
            }
            InlineKernelsMissing::ImageViewHandleNotSupported => {
                "VK_NVX_image_view_handle is not supported by the device, so such kernels cannot \
                 reach images (surface and texture handles)"
            }
            InlineKernelsMissing::ImageViewHandleNotEnabled => {
                "VK_NVX_image_view_handle is supported but was not enabled on the device, so \
                 such kernels cannot reach images (surface and texture handles)"
            }
        })
    }
}
