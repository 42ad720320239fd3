//! [`Rule`]: which rule a refusal broke, as data — a stable code and a name per rule, written
//! once here beside the refusals, and used by every front end (the C ABI's
//! `cuvk_last_error_rule`, Python's `rule`, Bevy's `CuvkStatus`) instead of rebuilding it.
//!
//! Codes are grouped by the byte above the lowest (`code >> 8`): 1 ranges and alignment, 2
//! images, 3 textures, 4 PTX, 5 memory and buffers, 6 semaphores and frames, 7 kernel
//! launches, 8 what the device or driver lacks, 9 devices and what they enabled, 10 OS
//! handles, 11 wgpu, 12 processes (`ipc`), 13 several GPUs, 14 raw arguments only a
//! foreign-language front end (the C ABI) can get wrong. A code is never reused; a new rule
//! takes the next number of its group.
//! Names are the refusal's path in [`Error`] (`"Layout.OutOfBounds"`,
//! `"Image.Texture.LinearFilterNeedsFloatReads"`, `"WrongDevice"`), as Python has reported
//! them since 0.3. The C ABI's constant follows from the group and the name: `CUVK_RULE_`, the
//! group's word (Layout, Image, Texture, Ptx, Memory, Sync, Launch, Unsupported, Device,
//! OsHandle, Wgpu, Ipc, Peer, Argument), `_`, and the name's last part, in
//! SCREAMING_SNAKE_CASE, with words the two repeat where they meet written once
//! (`"Peer.NoPeerAccess"` → `CUVK_RULE_PEER_NO_PEER_ACCESS`, `"DeviceMismatch"` →
//! `CUVK_RULE_DEVICE_MISMATCH`); the C ABI's tests hold every rule to it.

#[cfg(feature = "wgpu")]
use crate::error::WgpuError;
use crate::error::{Capability, Error, LaunchError, MemoryError, PeerError, SyncError};
use crate::ipc::IpcError;
use crate::rules::image_format::{ImageError, TextureRule};
use crate::rules::layout::LayoutError;
use crate::rules::ptx::PtxError;

/// A rule a refusal broke: matched by callers, reported by the C ABI as its code and by
/// Python as its name (see the module documentation for the groups).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
#[repr(u32)]
pub enum Rule {
    /// A range of zero bytes.
    LayoutZeroSize = 0x0101,
    /// Offset + size does not fit in 64 bits.
    LayoutOverflow = 0x0102,
    /// Element count × element size does not fit in 64 bits.
    LayoutElementCountOverflow = 0x0103,
    /// A byte count that is not a whole number of elements.
    LayoutPartialElement = 0x0104,
    /// A range outside its allocation, buffer or block.
    LayoutOutOfBounds = 0x0105,
    /// An offset, size or address that is not a multiple of the alignment a rule requires.
    LayoutMisaligned = 0x0106,
    /// An alignment that is not a power of two.
    LayoutBadAlignment = 0x0107,
    /// A non-zero offset in a dedicated allocation (CUDA maps those only at offset 0).
    LayoutDedicatedOffset = 0x0108,
    /// A non-zero offset into a CUDA allocation (`cuMemMap` requires 0).
    LayoutNonZeroAllocationOffset = 0x0109,
    /// A range that overlaps a live mapping or registration.
    LayoutOverlap = 0x010A,
    /// A format outside cuvk's table of formats CUDA can share.
    ImageUnsupportedFormat = 0x0201,
    /// An image type other than 2D and 3D.
    ImageUnsupportedType = 0x0202,
    /// A zero width, height, depth or layer count.
    ImageZeroExtent = 0x0203,
    /// A cube map whose faces are not square.
    ImageCubeNotSquare = 0x0204,
    /// A cube map without exactly 6 layers.
    ImageCubeLayers = 0x0205,
    /// A cube map that is not a 2D image.
    ImageCubeNot2d = 0x0206,
    /// A 3D image with more than one layer.
    ImageLayersOn3d = 0x0207,
    /// A 2D image with a depth above 1.
    ImageDepthOn2d = 0x0208,
    /// Zero mip levels, or more than the full chain.
    ImageMipLevels = 0x0209,
    /// A dimension above the device's limit for the format, usage and tiling.
    ImageOverLimit = 0x020A,
    /// A LINEAR-tiled image where CUDA needs an OPTIMAL one.
    ImageLinearTiling = 0x020B,
    /// The image lacks a usage the request needs (e.g. `STORAGE` for a surface).
    ImageMissingUsage = 0x020C,
    /// A surface of a CUDA array mapped without surface load/store.
    ImageNoSurfaceFlag = 0x020D,
    /// A layered image (array or cube) with more than one mip level.
    ImageLayeredMipChain = 0x020E,
    /// A mip level the image does not have.
    ImageLevelOutOfRange = 0x020F,
    /// Array layers the image does not have.
    ImageLayerOutOfRange = 0x0210,
    /// A CUDA array descriptor that differs from the one the image implies.
    ImageDescriptorMismatch = 0x0211,
    /// A host buffer whose size is not the mip level's.
    ImageHostSize = 0x0212,
    /// An image without any usage.
    ImageNoUsage = 0x0213,
    /// Linear filtering of a texture that reads integers.
    TextureLinearFilterNeedsFloatReads = 0x0301,
    /// A texture over the whole mip chain with unnormalized coordinates.
    TextureMipChainNeedsNormalizedCoordinates = 0x0302,
    /// Wrap or mirror addressing with unnormalized coordinates.
    TextureWrapNeedsNormalizedCoordinates = 0x0303,
    /// Raw integer reads of a format that is not UNORM/SNORM.
    TextureRawReadsNeedNormalizedFormat = 0x0304,
    /// Normalized float reads of 32-bit integers.
    TextureNormalizedReadsNeedNarrowIntegers = 0x0305,
    /// PTX without a kernel of that name.
    PtxNoEntry = 0x0401,
    /// A PTX parameter list that does not parse.
    PtxMalformed = 0x0402,
    /// A PTX array parameter whose byte size overflows 64 bits.
    PtxParamSizeOverflow = 0x0403,
    /// PTX parameters larger in all than a kernel launch passes.
    PtxParamsTooLarge = 0x0404,
    /// The object needs a dedicated allocation.
    MemoryDedicatedRequired = 0x0501,
    /// Exportable buffers of this usage must be dedicated on this device (no sub-allocation).
    MemoryDedicatedOnlyUsage = 0x0502,
    /// The memory is a dedicated allocation for another object.
    MemoryDedicatedToAnother = 0x0503,
    /// A dedicated allocation holds exactly one buffer.
    MemoryDedicatedHoldsOneBuffer = 0x0504,
    /// A dedicated allocation whose size is not its buffer's required size.
    MemoryDedicatedSize = 0x0505,
    /// A memory type the buffer or image does not accept.
    MemoryTypeNotAllowed = 0x0506,
    /// A device-address buffer on memory allocated without device addresses.
    MemoryDeviceAddressNotAllocated = 0x0507,
    /// The object was not created exportable.
    MemoryNotExportable = 0x0508,
    /// No memory type fits the request.
    MemoryNoMemoryType = 0x0509,
    /// An allocation larger than its memory heap.
    MemoryExceedsHeap = 0x050A,
    /// A buffer larger than every memory heap of the device.
    MemoryBufferExceedsHeaps = 0x050B,
    /// A pool buffer with a usage its pool was not created with.
    MemoryUsageNotInPool = 0x050C,
    /// Memory the host cannot see.
    MemoryNotHostVisible = 0x050D,
    /// A pool block size below the unit its ranges are counted in.
    MemoryPoolBlockTooSmall = 0x050E,
    /// A pool's dedicated threshold outside 1 to its block size.
    MemoryPoolThreshold = 0x050F,
    /// No pool block can hold the request.
    MemoryPoolRequestTooLarge = 0x0510,
    /// A growable buffer's chunk that does not hold whole elements.
    MemoryChunkNotWholeElements = 0x0511,
    /// A copy whose element count is not the buffer's.
    MemoryCopyLength = 0x0512,
    /// A buffer without a usage the command needs.
    MemoryMissingBufferUsage = 0x0513,
    /// A size that does not fit the host's address space.
    MemoryHostSizeOverflow = 0x0514,
    /// Memory of a device outside the multicast team.
    MemoryNotInMulticastTeam = 0x0515,
    /// A shareable multicast object given memory that is not shareable.
    MemoryMulticastNeedsShareable = 0x0516,
    /// A multicast team without devices.
    MemoryEmptyMulticastTeam = 0x0517,
    /// An image description that imports memory given where memory is allocated.
    MemoryImportNeedsSource = 0x0518,
    /// Memory another owner still holds (a mapping, a view, a parked copy): the call needs it
    /// alone.
    MemoryShared = 0x0519,
    /// A binary semaphore where a timeline one is needed.
    SyncNeedsTimeline = 0x0601,
    /// A semaphore imported into CUDA as the other kind.
    SyncImportKind = 0x0602,
    /// A timeline value that does not exceed the last one scheduled (values must increase).
    SyncTimelineNotIncreasing = 0x0603,
    /// One semaphore signalled twice in one submission.
    SyncSignalledTwice = 0x0604,
    /// A wait for a timeline value nothing has scheduled (it would never end).
    SyncWaitNeverSignalled = 0x0605,
    /// A semaphore wait with an empty stage mask.
    SyncEmptyWaitStage = 0x0606,
    /// A binary semaphore where only timeline semaphores are accepted.
    SyncBinaryNotAccepted = 0x0607,
    /// Frames in flight out of range.
    SyncFramesInFlight = 0x0608,
    /// A frame another frame pacer issued.
    SyncForeignFrame = 0x0609,
    /// A frame that is not the pacer's current one.
    SyncWrongFrame = 0x060A,
    /// A host signal while a signal already scheduled has not executed.
    SyncSignalPending = 0x060B,
    /// A frame step out of order (a release before the acquire, a submission before the
    /// release, ...).
    SyncFrameOutOfOrder = 0x060C,
    /// A resource's use marks handed to a stream order that did not make them.
    SyncForeignMarks = 0x060D,
    /// A timeline signal further above the counter than every device must accept.
    SyncTimelineJumpTooLarge = 0x060E,
    /// An argument count that differs from the kernel's parameters.
    LaunchArgumentCount = 0x0701,
    /// An argument whose size differs from its parameter's.
    LaunchArgumentSize = 0x0702,
    /// A device address for a parameter that is not a 64-bit integer.
    LaunchAddressToNonPointer = 0x0703,
    /// Too many bytes of parameters.
    LaunchParameterBytes = 0x0704,
    /// A zero grid or block dimension.
    LaunchZeroDimension = 0x0705,
    /// Too many threads in a block.
    LaunchThreadsPerBlock = 0x0706,
    /// A grid or block dimension beyond CUDA's limits.
    LaunchDimensionLimit = 0x0707,
    /// Too much dynamic shared memory.
    LaunchSharedMemory = 0x0708,
    /// Text handed to a C API with a NUL byte.
    LaunchNulByte = 0x0709,
    /// An image handle passed to a kernel parameter that is not a 64-bit integer.
    LaunchImageHandleToNonInteger = 0x070A,
    /// The device (or its queue) has no sparse binding.
    UnsupportedSparseBinding = 0x0801,
    /// Sparse buffers of this usage cannot take imported memory.
    UnsupportedSparseImport = 0x0802,
    /// The device cannot export or import buffers of this usage.
    UnsupportedExternalBuffer = 0x0803,
    /// The device cannot create the image.
    UnsupportedImageCreate = 0x0804,
    /// The device cannot export or import images of this kind.
    UnsupportedExternalImage = 0x0805,
    /// The device cannot export semaphores of this kind.
    UnsupportedSemaphoreExport = 0x0806,
    /// The device has no `timelineSemaphore` feature.
    UnsupportedTimelineSemaphore = 0x0807,
    /// No NVRTC library on this machine.
    UnsupportedNvrtc = 0x0808,
    /// The CUDA device cannot create multicast objects.
    UnsupportedMulticast = 0x0809,
    /// The Vulkan driver refused memory allocated by CUDA.
    UnsupportedCudaMemoryImport = 0x080A,
    /// CUDA kernels cannot run inside this device's Vulkan queues.
    UnsupportedInlineKernels = 0x080B,
    /// Linear filtering of a format the device cannot filter.
    UnsupportedLinearFilter = 0x080C,
    /// No NCCL library on this machine.
    UnsupportedNccl = 0x080D,
    /// Objects of different devices (or contexts) were mixed.
    DeviceWrongDevice = 0x0901,
    /// No CUDA device has the UUID.
    DeviceNoCudaDevice = 0x0902,
    /// No Vulkan physical device matches.
    DeviceNoVulkanDevice = 0x0903,
    /// The CUDA and Vulkan devices are different GPUs.
    DeviceMismatch = 0x0904,
    /// A device extension that is not supported, or that the engine did not enable.
    DeviceMissingExtension = 0x0905,
    /// A device feature the engine did not enable.
    DeviceFeatureNotEnabled = 0x0906,
    /// A Vulkan entry point that does not resolve on the engine's instance or device.
    DeviceMissingFunction = 0x0907,
    /// A Vulkan API version below the one required.
    DeviceApiVersion = 0x0908,
    /// The validation layer was required but is not installed.
    DeviceValidationLayerMissing = 0x0909,
    /// No queue family can do what is needed.
    DeviceNoQueueFamily = 0x090A,
    /// The Vulkan context has no queue of its own.
    DeviceNoQueue = 0x090B,
    /// An OS handle (file descriptor) that is not open, e.g. already imported.
    OsHandleNotOpen = 0x0A01,
    /// A wgpu object that is not on the Vulkan backend.
    WgpuWrongBackend = 0x0B01,
    /// wgpu gave no recording Vulkan command encoder.
    WgpuNoRawEncoder = 0x0B02,
    /// wgpu features the adapter does not offer.
    WgpuMissingFeatures = 0x0B03,
    /// Experimental wgpu features required without enabling them.
    WgpuExperimentalFeatures = 0x0B04,
    /// A wgpu limit beyond what the adapter offers.
    WgpuLimitBeyondAdapter = 0x0B05,
    /// A Vulkan image cuvk cannot present to wgpu as a texture.
    WgpuNotTexture = 0x0B06,
    /// Vulkan image usages with no wgpu texture usage.
    WgpuImageUsageNotInWgpu = 0x0B07,
    /// An empty wgpu buffer usage.
    WgpuEmptyBufferUsage = 0x0B08,
    /// MAP_READ / MAP_WRITE on a buffer whose memory is cuvk's.
    WgpuMappableUsage = 0x0B09,
    /// Acceleration-structure inputs, which cuvk does not share.
    WgpuAccelerationStructureUsage = 0x0B0A,
    /// wgpu buffer usages cuvk cannot create a Vulkan buffer for.
    WgpuUnknownBufferUsage = 0x0B0B,
    /// A Vulkan buffer without a usage the wgpu usage needs.
    WgpuMissingVulkanUsage = 0x0B0C,
    /// A buffer larger than the wgpu device's max_buffer_size.
    WgpuBufferTooLarge = 0x0B0D,
    /// A wgpu texture that cuvk did not pair with a shared image.
    WgpuTextureNotPaired = 0x0B0E,
    /// An image that is not shared with the wgpu device.
    WgpuImageNotShared = 0x0B0F,
    /// A cuvk submission from inside a wgpu callback of another.
    WgpuReentrantSubmit = 0x0B10,
    /// The message does not start with `b"CUVK"`.
    IpcBadMagic = 0x0C01,
    /// The message is of a wire version this build does not read.
    IpcUnsupportedVersion = 0x0C02,
    /// The header names a message kind this version does not have.
    IpcUnknownKind = 0x0C03,
    /// Fewer bytes than a header.
    IpcTruncatedHeader = 0x0C04,
    /// Fewer body bytes than the header announced.
    IpcTruncatedBody = 0x0C05,
    /// The header's body length is not the size of its kind's body.
    IpcBodyLengthMismatch = 0x0C06,
    /// Bytes after the end of the message the header describes.
    IpcTrailingBytes = 0x0C07,
    /// A header (or a send) with a descriptor count other than its kind carries.
    IpcFdCountMismatch = 0x0C08,
    /// Descriptors received differ from the count the header announced (they were closed).
    IpcFdsNotAsAnnounced = 0x0C09,
    /// A size that must not be zero is zero.
    IpcZeroSize = 0x0C0A,
    /// A buffer's offset + size does not fit in 64 bits.
    IpcRangeOverflow = 0x0C0B,
    /// A buffer's range ends past its memory allocation.
    IpcRangeExceedsMemory = 0x0C0C,
    /// A buffer size that is not a whole number of elements.
    IpcPartialElement = 0x0C0D,
    /// An image extent or layer count of zero.
    IpcZeroExtent = 0x0C0E,
    /// Zero mip levels, or more than the full chain (`floor(log2(max extent)) + 1`).
    IpcMipLevels = 0x0C0F,
    /// A boolean byte other than 0 or 1.
    IpcBadBool = 0x0C10,
    /// A timeline role other than 0 (publisher signals) or 1 (attacher signals).
    IpcUnknownRole = 0x0C11,
    /// The descriptors did not fit the control buffer (`MSG_CTRUNC`); those that arrived were closed.
    IpcTruncatedControl = 0x0C14,
    /// More descriptors than one message carries.
    IpcTooManyFds = 0x0C15,
    /// The transport does not exist on this platform.
    IpcUnsupported = 0x0C17,
    /// The server's objects live on another GPU than the client's.
    IpcWrongDevice = 0x0C18,
    /// The server's driver is another than the client's (opaque handles need the same one).
    IpcDriverMismatch = 0x0C19,
    /// A descriptor that cannot be GPU memory or a semaphore.
    IpcWrongFdKind = 0x0C1A,
    /// A description that claims more memory than its descriptor holds.
    IpcSizeLie = 0x0C1B,
    /// A message of another kind than the protocol expects next.
    IpcUnexpectedMessage = 0x0C1C,
    /// An object id the server did not publish (of that kind).
    IpcNoSuchObject = 0x0C1D,
    /// A description the importing driver (or the caller's types) contradicts.
    IpcDescriptionRefused = 0x0C1E,
    /// A release meant for a lost peer asked for while the peer is still connected.
    IpcStillConnected = 0x0C1F,
    /// A second producer for a frame server.
    IpcOneProducer = 0x0C20,
    /// An image shape other than 0 (2D), 1 (2D array), 2 (3D) or 3 (cube).
    IpcUnknownImageShape = 0x0C22,
    /// Peer access asked for between GPUs that have no peer path.
    PeerNoAccess = 0x0D01,
    /// A shared buffer handed to something on another GPU.
    PeerDeviceMismatch = 0x0D02,
    /// The ranks of a collective hold buffers of different sizes.
    PeerSizeMismatch = 0x0D03,
    /// A rank of a collective lost (died, hung): the communicator was aborted.
    PeerRankLost = 0x0D04,
    /// A communicator used after it was aborted.
    PeerAborted = 0x0D05,
    /// A rank number outside the communicator.
    PeerRankOutOfRange = 0x0D06,
    /// Image creation flags with bits that name no flag.
    ArgumentUnknownImageFlags = 0x0E01,
    /// A texture address mode that names no mode.
    ArgumentUnknownAddressMode = 0x0E02,
    /// A texture filter mode that names no mode.
    ArgumentUnknownFilterMode = 0x0E03,
    /// Text that must be UTF-8 and is not.
    ArgumentNotUtf8 = 0x0E04,
    /// A buffer without a CUDA side where a buffer shared with CUDA is needed.
    ArgumentBufferNotShared = 0x0E05,
}

impl Rule {
    /// Every rule, in code order.
    pub const ALL: &'static [Rule] = &[
        Rule::LayoutZeroSize,
        Rule::LayoutOverflow,
        Rule::LayoutElementCountOverflow,
        Rule::LayoutPartialElement,
        Rule::LayoutOutOfBounds,
        Rule::LayoutMisaligned,
        Rule::LayoutBadAlignment,
        Rule::LayoutDedicatedOffset,
        Rule::LayoutNonZeroAllocationOffset,
        Rule::LayoutOverlap,
        Rule::ImageUnsupportedFormat,
        Rule::ImageUnsupportedType,
        Rule::ImageZeroExtent,
        Rule::ImageCubeNotSquare,
        Rule::ImageCubeLayers,
        Rule::ImageCubeNot2d,
        Rule::ImageLayersOn3d,
        Rule::ImageDepthOn2d,
        Rule::ImageMipLevels,
        Rule::ImageOverLimit,
        Rule::ImageLinearTiling,
        Rule::ImageMissingUsage,
        Rule::ImageNoSurfaceFlag,
        Rule::ImageLayeredMipChain,
        Rule::ImageLevelOutOfRange,
        Rule::ImageLayerOutOfRange,
        Rule::ImageDescriptorMismatch,
        Rule::ImageHostSize,
        Rule::ImageNoUsage,
        Rule::TextureLinearFilterNeedsFloatReads,
        Rule::TextureMipChainNeedsNormalizedCoordinates,
        Rule::TextureWrapNeedsNormalizedCoordinates,
        Rule::TextureRawReadsNeedNormalizedFormat,
        Rule::TextureNormalizedReadsNeedNarrowIntegers,
        Rule::PtxNoEntry,
        Rule::PtxMalformed,
        Rule::PtxParamSizeOverflow,
        Rule::PtxParamsTooLarge,
        Rule::MemoryDedicatedRequired,
        Rule::MemoryDedicatedOnlyUsage,
        Rule::MemoryDedicatedToAnother,
        Rule::MemoryDedicatedHoldsOneBuffer,
        Rule::MemoryDedicatedSize,
        Rule::MemoryTypeNotAllowed,
        Rule::MemoryDeviceAddressNotAllocated,
        Rule::MemoryNotExportable,
        Rule::MemoryNoMemoryType,
        Rule::MemoryExceedsHeap,
        Rule::MemoryBufferExceedsHeaps,
        Rule::MemoryUsageNotInPool,
        Rule::MemoryNotHostVisible,
        Rule::MemoryPoolBlockTooSmall,
        Rule::MemoryPoolThreshold,
        Rule::MemoryPoolRequestTooLarge,
        Rule::MemoryChunkNotWholeElements,
        Rule::MemoryCopyLength,
        Rule::MemoryMissingBufferUsage,
        Rule::MemoryHostSizeOverflow,
        Rule::MemoryNotInMulticastTeam,
        Rule::MemoryMulticastNeedsShareable,
        Rule::MemoryEmptyMulticastTeam,
        Rule::MemoryImportNeedsSource,
        Rule::MemoryShared,
        Rule::SyncNeedsTimeline,
        Rule::SyncImportKind,
        Rule::SyncTimelineNotIncreasing,
        Rule::SyncSignalledTwice,
        Rule::SyncWaitNeverSignalled,
        Rule::SyncEmptyWaitStage,
        Rule::SyncBinaryNotAccepted,
        Rule::SyncFramesInFlight,
        Rule::SyncForeignFrame,
        Rule::SyncWrongFrame,
        Rule::SyncSignalPending,
        Rule::SyncFrameOutOfOrder,
        Rule::SyncForeignMarks,
        Rule::SyncTimelineJumpTooLarge,
        Rule::LaunchArgumentCount,
        Rule::LaunchArgumentSize,
        Rule::LaunchAddressToNonPointer,
        Rule::LaunchParameterBytes,
        Rule::LaunchZeroDimension,
        Rule::LaunchThreadsPerBlock,
        Rule::LaunchDimensionLimit,
        Rule::LaunchSharedMemory,
        Rule::LaunchNulByte,
        Rule::LaunchImageHandleToNonInteger,
        Rule::UnsupportedSparseBinding,
        Rule::UnsupportedSparseImport,
        Rule::UnsupportedExternalBuffer,
        Rule::UnsupportedImageCreate,
        Rule::UnsupportedExternalImage,
        Rule::UnsupportedSemaphoreExport,
        Rule::UnsupportedTimelineSemaphore,
        Rule::UnsupportedNvrtc,
        Rule::UnsupportedMulticast,
        Rule::UnsupportedCudaMemoryImport,
        Rule::UnsupportedInlineKernels,
        Rule::UnsupportedLinearFilter,
        Rule::UnsupportedNccl,
        Rule::DeviceWrongDevice,
        Rule::DeviceNoCudaDevice,
        Rule::DeviceNoVulkanDevice,
        Rule::DeviceMismatch,
        Rule::DeviceMissingExtension,
        Rule::DeviceFeatureNotEnabled,
        Rule::DeviceMissingFunction,
        Rule::DeviceApiVersion,
        Rule::DeviceValidationLayerMissing,
        Rule::DeviceNoQueueFamily,
        Rule::DeviceNoQueue,
        Rule::OsHandleNotOpen,
        Rule::WgpuWrongBackend,
        Rule::WgpuNoRawEncoder,
        Rule::WgpuMissingFeatures,
        Rule::WgpuExperimentalFeatures,
        Rule::WgpuLimitBeyondAdapter,
        Rule::WgpuNotTexture,
        Rule::WgpuImageUsageNotInWgpu,
        Rule::WgpuEmptyBufferUsage,
        Rule::WgpuMappableUsage,
        Rule::WgpuAccelerationStructureUsage,
        Rule::WgpuUnknownBufferUsage,
        Rule::WgpuMissingVulkanUsage,
        Rule::WgpuBufferTooLarge,
        Rule::WgpuTextureNotPaired,
        Rule::WgpuImageNotShared,
        Rule::WgpuReentrantSubmit,
        Rule::IpcBadMagic,
        Rule::IpcUnsupportedVersion,
        Rule::IpcUnknownKind,
        Rule::IpcTruncatedHeader,
        Rule::IpcTruncatedBody,
        Rule::IpcBodyLengthMismatch,
        Rule::IpcTrailingBytes,
        Rule::IpcFdCountMismatch,
        Rule::IpcFdsNotAsAnnounced,
        Rule::IpcZeroSize,
        Rule::IpcRangeOverflow,
        Rule::IpcRangeExceedsMemory,
        Rule::IpcPartialElement,
        Rule::IpcZeroExtent,
        Rule::IpcMipLevels,
        Rule::IpcBadBool,
        Rule::IpcUnknownRole,
        Rule::IpcTruncatedControl,
        Rule::IpcTooManyFds,
        Rule::IpcUnsupported,
        Rule::IpcWrongDevice,
        Rule::IpcDriverMismatch,
        Rule::IpcWrongFdKind,
        Rule::IpcSizeLie,
        Rule::IpcUnexpectedMessage,
        Rule::IpcNoSuchObject,
        Rule::IpcDescriptionRefused,
        Rule::IpcStillConnected,
        Rule::IpcOneProducer,
        Rule::IpcUnknownImageShape,
        Rule::PeerNoAccess,
        Rule::PeerDeviceMismatch,
        Rule::PeerSizeMismatch,
        Rule::PeerRankLost,
        Rule::PeerAborted,
        Rule::PeerRankOutOfRange,
        Rule::ArgumentUnknownImageFlags,
        Rule::ArgumentUnknownAddressMode,
        Rule::ArgumentUnknownFilterMode,
        Rule::ArgumentNotUtf8,
        Rule::ArgumentBufferNotShared,
    ];

    /// The stable code (the C ABI's `CuvkRule`).
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The rule with `code`, if there is one.
    pub fn from_code(code: u32) -> Option<Rule> {
        Self::ALL.iter().copied().find(|r| r.code() == code)
    }

    /// The refusal's path in [`Error`], e.g. `"Layout.OutOfBounds"`.
    pub const fn name(self) -> &'static str {
        match self {
            Rule::LayoutZeroSize => "Layout.ZeroSize",
            Rule::LayoutOverflow => "Layout.Overflow",
            Rule::LayoutElementCountOverflow => "Layout.ElementCountOverflow",
            Rule::LayoutPartialElement => "Layout.PartialElement",
            Rule::LayoutOutOfBounds => "Layout.OutOfBounds",
            Rule::LayoutMisaligned => "Layout.Misaligned",
            Rule::LayoutBadAlignment => "Layout.BadAlignment",
            Rule::LayoutDedicatedOffset => "Layout.DedicatedOffset",
            Rule::LayoutNonZeroAllocationOffset => "Layout.NonZeroAllocationOffset",
            Rule::LayoutOverlap => "Layout.Overlap",
            Rule::ImageUnsupportedFormat => "Image.UnsupportedFormat",
            Rule::ImageUnsupportedType => "Image.UnsupportedImageType",
            Rule::ImageZeroExtent => "Image.ZeroExtent",
            Rule::ImageCubeNotSquare => "Image.CubeNotSquare",
            Rule::ImageCubeLayers => "Image.CubeLayers",
            Rule::ImageCubeNot2d => "Image.CubeNot2D",
            Rule::ImageLayersOn3d => "Image.LayersOn3D",
            Rule::ImageDepthOn2d => "Image.DepthOn2D",
            Rule::ImageMipLevels => "Image.MipLevels",
            Rule::ImageOverLimit => "Image.OverLimit",
            Rule::ImageLinearTiling => "Image.LinearTiling",
            Rule::ImageMissingUsage => "Image.MissingUsage",
            Rule::ImageNoSurfaceFlag => "Image.NoSurfaceFlag",
            Rule::ImageLayeredMipChain => "Image.LayeredMipChain",
            Rule::ImageLevelOutOfRange => "Image.LevelOutOfRange",
            Rule::ImageLayerOutOfRange => "Image.LayerOutOfRange",
            Rule::ImageDescriptorMismatch => "Image.DescriptorMismatch",
            Rule::ImageHostSize => "Image.HostSize",
            Rule::ImageNoUsage => "Image.NoUsage",
            Rule::TextureLinearFilterNeedsFloatReads => "Image.Texture.LinearFilterNeedsFloatReads",
            Rule::TextureMipChainNeedsNormalizedCoordinates => {
                "Image.Texture.MipChainNeedsNormalizedCoordinates"
            }
            Rule::TextureWrapNeedsNormalizedCoordinates => {
                "Image.Texture.WrapNeedsNormalizedCoordinates"
            }
            Rule::TextureRawReadsNeedNormalizedFormat => {
                "Image.Texture.RawReadsNeedNormalizedFormat"
            }
            Rule::TextureNormalizedReadsNeedNarrowIntegers => {
                "Image.Texture.NormalizedReadsNeedNarrowIntegers"
            }
            Rule::PtxNoEntry => "Ptx.NoEntry",
            Rule::PtxMalformed => "Ptx.Malformed",
            Rule::PtxParamSizeOverflow => "Ptx.ParamSizeOverflow",
            Rule::PtxParamsTooLarge => "Ptx.ParamsTooLarge",
            Rule::MemoryDedicatedRequired => "Memory.DedicatedRequired",
            Rule::MemoryDedicatedOnlyUsage => "Memory.DedicatedOnlyUsage",
            Rule::MemoryDedicatedToAnother => "Memory.DedicatedToAnother",
            Rule::MemoryDedicatedHoldsOneBuffer => "Memory.DedicatedHoldsOneBuffer",
            Rule::MemoryDedicatedSize => "Memory.DedicatedSize",
            Rule::MemoryTypeNotAllowed => "Memory.MemoryTypeNotAllowed",
            Rule::MemoryDeviceAddressNotAllocated => "Memory.DeviceAddressNotAllocated",
            Rule::MemoryNotExportable => "Memory.NotExportable",
            Rule::MemoryNoMemoryType => "Memory.NoMemoryType",
            Rule::MemoryExceedsHeap => "Memory.ExceedsHeap",
            Rule::MemoryBufferExceedsHeaps => "Memory.BufferExceedsHeaps",
            Rule::MemoryUsageNotInPool => "Memory.UsageNotInPool",
            Rule::MemoryNotHostVisible => "Memory.NotHostVisible",
            Rule::MemoryPoolBlockTooSmall => "Memory.PoolBlockTooSmall",
            Rule::MemoryPoolThreshold => "Memory.PoolThreshold",
            Rule::MemoryPoolRequestTooLarge => "Memory.PoolRequestTooLarge",
            Rule::MemoryChunkNotWholeElements => "Memory.ChunkNotWholeElements",
            Rule::MemoryCopyLength => "Memory.CopyLength",
            Rule::MemoryMissingBufferUsage => "Memory.MissingBufferUsage",
            Rule::MemoryHostSizeOverflow => "Memory.HostSizeOverflow",
            Rule::MemoryNotInMulticastTeam => "Memory.NotInMulticastTeam",
            Rule::MemoryMulticastNeedsShareable => "Memory.MulticastNeedsShareable",
            Rule::MemoryEmptyMulticastTeam => "Memory.EmptyMulticastTeam",
            Rule::MemoryImportNeedsSource => "Memory.ImportNeedsSource",
            Rule::MemoryShared => "Memory.MemoryShared",
            Rule::SyncNeedsTimeline => "Sync.NeedsTimeline",
            Rule::SyncImportKind => "Sync.ImportKind",
            Rule::SyncTimelineNotIncreasing => "Sync.TimelineNotIncreasing",
            Rule::SyncSignalledTwice => "Sync.SignalledTwice",
            Rule::SyncWaitNeverSignalled => "Sync.WaitNeverSignalled",
            Rule::SyncEmptyWaitStage => "Sync.EmptyWaitStage",
            Rule::SyncBinaryNotAccepted => "Sync.BinaryNotAccepted",
            Rule::SyncFramesInFlight => "Sync.FramesInFlight",
            Rule::SyncForeignFrame => "Sync.ForeignFrame",
            Rule::SyncWrongFrame => "Sync.WrongFrame",
            Rule::SyncSignalPending => "Sync.SignalPending",
            Rule::SyncFrameOutOfOrder => "Sync.FrameOutOfOrder",
            Rule::SyncForeignMarks => "Sync.ForeignMarks",
            Rule::SyncTimelineJumpTooLarge => "Sync.TimelineJumpTooLarge",
            Rule::LaunchArgumentCount => "Launch.ArgumentCount",
            Rule::LaunchArgumentSize => "Launch.ArgumentSize",
            Rule::LaunchAddressToNonPointer => "Launch.AddressToNonPointer",
            Rule::LaunchParameterBytes => "Launch.ParameterBytes",
            Rule::LaunchZeroDimension => "Launch.ZeroDimension",
            Rule::LaunchThreadsPerBlock => "Launch.ThreadsPerBlock",
            Rule::LaunchDimensionLimit => "Launch.DimensionLimit",
            Rule::LaunchSharedMemory => "Launch.SharedMemory",
            Rule::LaunchNulByte => "Launch.NulByte",
            Rule::LaunchImageHandleToNonInteger => "Launch.ImageHandleToNonInteger",
            Rule::UnsupportedSparseBinding => "Unsupported.SparseBinding",
            Rule::UnsupportedSparseImport => "Unsupported.SparseImport",
            Rule::UnsupportedExternalBuffer => "Unsupported.ExternalBuffer",
            Rule::UnsupportedImageCreate => "Unsupported.ImageCreate",
            Rule::UnsupportedExternalImage => "Unsupported.ExternalImage",
            Rule::UnsupportedSemaphoreExport => "Unsupported.SemaphoreExport",
            Rule::UnsupportedTimelineSemaphore => "Unsupported.TimelineSemaphore",
            Rule::UnsupportedNvrtc => "Unsupported.Nvrtc",
            Rule::UnsupportedMulticast => "Unsupported.Multicast",
            Rule::UnsupportedCudaMemoryImport => "Unsupported.CudaMemoryImport",
            Rule::UnsupportedInlineKernels => "Unsupported.InlineKernels",
            Rule::UnsupportedLinearFilter => "Unsupported.LinearFilter",
            Rule::UnsupportedNccl => "Unsupported.Nccl",
            Rule::DeviceWrongDevice => "WrongDevice",
            Rule::DeviceNoCudaDevice => "NoCudaDevice",
            Rule::DeviceNoVulkanDevice => "NoVulkanDevice",
            Rule::DeviceMismatch => "DeviceMismatch",
            Rule::DeviceMissingExtension => "MissingExtension",
            Rule::DeviceFeatureNotEnabled => "FeatureNotEnabled",
            Rule::DeviceMissingFunction => "MissingFunction",
            Rule::DeviceApiVersion => "ApiVersion",
            Rule::DeviceValidationLayerMissing => "ValidationLayerMissing",
            Rule::DeviceNoQueueFamily => "NoQueueFamily",
            Rule::DeviceNoQueue => "NoQueue",
            Rule::OsHandleNotOpen => "HandleNotOpen",
            Rule::WgpuWrongBackend => "Wgpu.WrongBackend",
            Rule::WgpuNoRawEncoder => "Wgpu.NoRawEncoder",
            Rule::WgpuMissingFeatures => "Wgpu.MissingFeatures",
            Rule::WgpuExperimentalFeatures => "Wgpu.ExperimentalFeatures",
            Rule::WgpuLimitBeyondAdapter => "Wgpu.LimitBeyondAdapter",
            Rule::WgpuNotTexture => "Wgpu.NotTexture",
            Rule::WgpuImageUsageNotInWgpu => "Wgpu.ImageUsageNotInWgpu",
            Rule::WgpuEmptyBufferUsage => "Wgpu.EmptyBufferUsage",
            Rule::WgpuMappableUsage => "Wgpu.MappableUsage",
            Rule::WgpuAccelerationStructureUsage => "Wgpu.AccelerationStructureUsage",
            Rule::WgpuUnknownBufferUsage => "Wgpu.UnknownBufferUsage",
            Rule::WgpuMissingVulkanUsage => "Wgpu.MissingVulkanUsage",
            Rule::WgpuBufferTooLarge => "Wgpu.BufferTooLarge",
            Rule::WgpuTextureNotPaired => "Wgpu.TextureNotPaired",
            Rule::WgpuImageNotShared => "Wgpu.ImageNotShared",
            Rule::WgpuReentrantSubmit => "Wgpu.ReentrantSubmit",
            Rule::IpcBadMagic => "Ipc.BadMagic",
            Rule::IpcUnsupportedVersion => "Ipc.UnsupportedVersion",
            Rule::IpcUnknownKind => "Ipc.UnknownKind",
            Rule::IpcTruncatedHeader => "Ipc.TruncatedHeader",
            Rule::IpcTruncatedBody => "Ipc.TruncatedBody",
            Rule::IpcBodyLengthMismatch => "Ipc.BodyLengthMismatch",
            Rule::IpcTrailingBytes => "Ipc.TrailingBytes",
            Rule::IpcFdCountMismatch => "Ipc.FdCountMismatch",
            Rule::IpcFdsNotAsAnnounced => "Ipc.FdsNotAsAnnounced",
            Rule::IpcZeroSize => "Ipc.ZeroSize",
            Rule::IpcRangeOverflow => "Ipc.RangeOverflow",
            Rule::IpcRangeExceedsMemory => "Ipc.RangeExceedsMemory",
            Rule::IpcPartialElement => "Ipc.PartialElement",
            Rule::IpcZeroExtent => "Ipc.ZeroExtent",
            Rule::IpcMipLevels => "Ipc.MipLevels",
            Rule::IpcBadBool => "Ipc.BadBool",
            Rule::IpcUnknownRole => "Ipc.UnknownRole",
            Rule::IpcTruncatedControl => "Ipc.TruncatedControl",
            Rule::IpcTooManyFds => "Ipc.TooManyFds",
            Rule::IpcUnsupported => "Ipc.Unsupported",
            Rule::IpcWrongDevice => "Ipc.WrongDevice",
            Rule::IpcDriverMismatch => "Ipc.DriverMismatch",
            Rule::IpcWrongFdKind => "Ipc.WrongFdKind",
            Rule::IpcSizeLie => "Ipc.SizeLie",
            Rule::IpcUnexpectedMessage => "Ipc.UnexpectedMessage",
            Rule::IpcNoSuchObject => "Ipc.NoSuchObject",
            Rule::IpcDescriptionRefused => "Ipc.DescriptionRefused",
            Rule::IpcStillConnected => "Ipc.StillConnected",
            Rule::IpcOneProducer => "Ipc.OneProducer",
            Rule::IpcUnknownImageShape => "Ipc.UnknownImageShape",
            Rule::PeerNoAccess => "Peer.NoPeerAccess",
            Rule::PeerDeviceMismatch => "Peer.DeviceMismatch",
            Rule::PeerSizeMismatch => "Peer.SizeMismatch",
            Rule::PeerRankLost => "Peer.RankLost",
            Rule::PeerAborted => "Peer.Aborted",
            Rule::PeerRankOutOfRange => "Peer.RankOutOfRange",
            Rule::ArgumentUnknownImageFlags => "UnknownImageFlags",
            Rule::ArgumentUnknownAddressMode => "UnknownAddressMode",
            Rule::ArgumentUnknownFilterMode => "UnknownFilterMode",
            Rule::ArgumentNotUtf8 => "NotUtf8",
            Rule::ArgumentBufferNotShared => "BufferNotShared",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Error {
    /// The rule this error says was broken, or `None` where no rule was: a driver, compiler or
    /// OS call that failed, a timeout, memory that ran out.
    pub fn rule(&self) -> Option<Rule> {
        Some(match self {
            Error::Layout(LayoutError::ZeroSize { .. }) => Rule::LayoutZeroSize,
            Error::Layout(LayoutError::Overflow { .. }) => Rule::LayoutOverflow,
            Error::Layout(LayoutError::ElementCountOverflow { .. }) => {
                Rule::LayoutElementCountOverflow
            }
            Error::Layout(LayoutError::PartialElement { .. }) => Rule::LayoutPartialElement,
            Error::Layout(LayoutError::OutOfBounds { .. }) => Rule::LayoutOutOfBounds,
            Error::Layout(LayoutError::Misaligned { .. }) => Rule::LayoutMisaligned,
            Error::Layout(LayoutError::BadAlignment { .. }) => Rule::LayoutBadAlignment,
            Error::Layout(LayoutError::DedicatedOffset { .. }) => Rule::LayoutDedicatedOffset,
            Error::Layout(LayoutError::NonZeroAllocationOffset { .. }) => {
                Rule::LayoutNonZeroAllocationOffset
            }
            Error::Layout(LayoutError::Overlap { .. }) => Rule::LayoutOverlap,
            Error::Image(ImageError::UnsupportedFormat { .. }) => Rule::ImageUnsupportedFormat,
            Error::Image(ImageError::UnsupportedImageType { .. }) => Rule::ImageUnsupportedType,
            Error::Image(ImageError::ZeroExtent { .. }) => Rule::ImageZeroExtent,
            Error::Image(ImageError::CubeNotSquare { .. }) => Rule::ImageCubeNotSquare,
            Error::Image(ImageError::CubeLayers { .. }) => Rule::ImageCubeLayers,
            Error::Image(ImageError::CubeNot2D) => Rule::ImageCubeNot2d,
            Error::Image(ImageError::LayersOn3D { .. }) => Rule::ImageLayersOn3d,
            Error::Image(ImageError::DepthOn2D { .. }) => Rule::ImageDepthOn2d,
            Error::Image(ImageError::MipLevels { .. }) => Rule::ImageMipLevels,
            Error::Image(ImageError::OverLimit { .. }) => Rule::ImageOverLimit,
            Error::Image(ImageError::LinearTiling) => Rule::ImageLinearTiling,
            Error::Image(ImageError::MissingUsage { .. }) => Rule::ImageMissingUsage,
            Error::Image(ImageError::NoSurfaceFlag) => Rule::ImageNoSurfaceFlag,
            Error::Image(ImageError::LayeredMipChain { .. }) => Rule::ImageLayeredMipChain,
            Error::Image(ImageError::LevelOutOfRange { .. }) => Rule::ImageLevelOutOfRange,
            Error::Image(ImageError::LayerOutOfRange { .. }) => Rule::ImageLayerOutOfRange,
            Error::Image(ImageError::DescriptorMismatch { .. }) => Rule::ImageDescriptorMismatch,
            Error::Image(ImageError::HostSize { .. }) => Rule::ImageHostSize,
            Error::Image(ImageError::NoUsage) => Rule::ImageNoUsage,
            Error::Image(ImageError::Texture(TextureRule::LinearFilterNeedsFloatReads)) => {
                Rule::TextureLinearFilterNeedsFloatReads
            }
            Error::Image(ImageError::Texture(TextureRule::MipChainNeedsNormalizedCoordinates)) => {
                Rule::TextureMipChainNeedsNormalizedCoordinates
            }
            Error::Image(ImageError::Texture(TextureRule::WrapNeedsNormalizedCoordinates)) => {
                Rule::TextureWrapNeedsNormalizedCoordinates
            }
            Error::Image(ImageError::Texture(TextureRule::RawReadsNeedNormalizedFormat)) => {
                Rule::TextureRawReadsNeedNormalizedFormat
            }
            Error::Image(ImageError::Texture(TextureRule::NormalizedReadsNeedNarrowIntegers)) => {
                Rule::TextureNormalizedReadsNeedNarrowIntegers
            }
            Error::Ptx(PtxError::NoEntry { .. }) => Rule::PtxNoEntry,
            Error::Ptx(PtxError::Malformed { .. }) => Rule::PtxMalformed,
            Error::Ptx(PtxError::ParamSizeOverflow { .. }) => Rule::PtxParamSizeOverflow,
            Error::Ptx(PtxError::ParamsTooLarge { .. }) => Rule::PtxParamsTooLarge,
            Error::Memory(MemoryError::DedicatedRequired { .. }) => Rule::MemoryDedicatedRequired,
            Error::Memory(MemoryError::DedicatedOnlyUsage { .. }) => Rule::MemoryDedicatedOnlyUsage,
            Error::Memory(MemoryError::DedicatedToAnother) => Rule::MemoryDedicatedToAnother,
            Error::Memory(MemoryError::DedicatedHoldsOneBuffer) => {
                Rule::MemoryDedicatedHoldsOneBuffer
            }
            Error::Memory(MemoryError::DedicatedSize { .. }) => Rule::MemoryDedicatedSize,
            Error::Memory(MemoryError::MemoryTypeNotAllowed { .. }) => Rule::MemoryTypeNotAllowed,
            Error::Memory(MemoryError::DeviceAddressNotAllocated) => {
                Rule::MemoryDeviceAddressNotAllocated
            }
            Error::Memory(MemoryError::NotExportable { .. }) => Rule::MemoryNotExportable,
            Error::Memory(MemoryError::NoMemoryType { .. }) => Rule::MemoryNoMemoryType,
            Error::Memory(MemoryError::ExceedsHeap { .. }) => Rule::MemoryExceedsHeap,
            Error::Memory(MemoryError::BufferExceedsHeaps { .. }) => Rule::MemoryBufferExceedsHeaps,
            Error::Memory(MemoryError::UsageNotInPool { .. }) => Rule::MemoryUsageNotInPool,
            Error::Memory(MemoryError::NotHostVisible) => Rule::MemoryNotHostVisible,
            Error::Memory(MemoryError::PoolBlockTooSmall { .. }) => Rule::MemoryPoolBlockTooSmall,
            Error::Memory(MemoryError::PoolThreshold { .. }) => Rule::MemoryPoolThreshold,
            Error::Memory(MemoryError::PoolRequestTooLarge { .. }) => {
                Rule::MemoryPoolRequestTooLarge
            }
            Error::Memory(MemoryError::ChunkNotWholeElements { .. }) => {
                Rule::MemoryChunkNotWholeElements
            }
            Error::Memory(MemoryError::CopyLength { .. }) => Rule::MemoryCopyLength,
            Error::Memory(MemoryError::MissingBufferUsage { .. }) => Rule::MemoryMissingBufferUsage,
            Error::Memory(MemoryError::HostSizeOverflow { .. }) => Rule::MemoryHostSizeOverflow,
            Error::Memory(MemoryError::NotInMulticastTeam { .. }) => Rule::MemoryNotInMulticastTeam,
            Error::Memory(MemoryError::MulticastNeedsShareable) => {
                Rule::MemoryMulticastNeedsShareable
            }
            Error::Memory(MemoryError::EmptyMulticastTeam) => Rule::MemoryEmptyMulticastTeam,
            Error::Memory(MemoryError::ImportNeedsSource) => Rule::MemoryImportNeedsSource,
            Error::Memory(MemoryError::MemoryShared) => Rule::MemoryShared,
            Error::Sync(SyncError::NeedsTimeline { .. }) => Rule::SyncNeedsTimeline,
            Error::Sync(SyncError::ImportKind { .. }) => Rule::SyncImportKind,
            Error::Sync(SyncError::TimelineNotIncreasing { .. }) => Rule::SyncTimelineNotIncreasing,
            Error::Sync(SyncError::SignalledTwice) => Rule::SyncSignalledTwice,
            Error::Sync(SyncError::WaitNeverSignalled { .. }) => Rule::SyncWaitNeverSignalled,
            Error::Sync(SyncError::EmptyWaitStage) => Rule::SyncEmptyWaitStage,
            Error::Sync(SyncError::BinaryNotAccepted { .. }) => Rule::SyncBinaryNotAccepted,
            Error::Sync(SyncError::FramesInFlight { .. }) => Rule::SyncFramesInFlight,
            Error::Sync(SyncError::ForeignFrame { .. }) => Rule::SyncForeignFrame,
            Error::Sync(SyncError::WrongFrame { .. }) => Rule::SyncWrongFrame,
            Error::Sync(SyncError::SignalPending { .. }) => Rule::SyncSignalPending,
            Error::Sync(SyncError::FrameOutOfOrder { .. }) => Rule::SyncFrameOutOfOrder,
            Error::Sync(SyncError::ForeignMarks { .. }) => Rule::SyncForeignMarks,
            Error::Sync(SyncError::TimelineJumpTooLarge { .. }) => Rule::SyncTimelineJumpTooLarge,
            Error::Launch(LaunchError::ArgumentCount { .. }) => Rule::LaunchArgumentCount,
            Error::Launch(LaunchError::ArgumentSize { .. }) => Rule::LaunchArgumentSize,
            Error::Launch(LaunchError::AddressToNonPointer { .. }) => {
                Rule::LaunchAddressToNonPointer
            }
            Error::Launch(LaunchError::ParameterBytes { .. }) => Rule::LaunchParameterBytes,
            Error::Launch(LaunchError::ZeroDimension { .. }) => Rule::LaunchZeroDimension,
            Error::Launch(LaunchError::ThreadsPerBlock { .. }) => Rule::LaunchThreadsPerBlock,
            Error::Launch(LaunchError::DimensionLimit { .. }) => Rule::LaunchDimensionLimit,
            Error::Launch(LaunchError::SharedMemory { .. }) => Rule::LaunchSharedMemory,
            Error::Launch(LaunchError::NulByte { .. }) => Rule::LaunchNulByte,
            Error::Launch(LaunchError::ImageHandleToNonInteger { .. }) => {
                Rule::LaunchImageHandleToNonInteger
            }
            Error::Unsupported(Capability::SparseBinding) => Rule::UnsupportedSparseBinding,
            Error::Unsupported(Capability::SparseImport { .. }) => Rule::UnsupportedSparseImport,
            Error::Unsupported(Capability::ExternalBuffer { .. }) => {
                Rule::UnsupportedExternalBuffer
            }
            Error::Unsupported(Capability::ImageCreate { .. }) => Rule::UnsupportedImageCreate,
            Error::Unsupported(Capability::ExternalImage { .. }) => Rule::UnsupportedExternalImage,
            Error::Unsupported(Capability::SemaphoreExport { .. }) => {
                Rule::UnsupportedSemaphoreExport
            }
            Error::Unsupported(Capability::TimelineSemaphore) => Rule::UnsupportedTimelineSemaphore,
            Error::Unsupported(Capability::Nvrtc) => Rule::UnsupportedNvrtc,
            Error::Unsupported(Capability::Multicast { .. }) => Rule::UnsupportedMulticast,
            Error::Unsupported(Capability::Nccl { .. }) => Rule::UnsupportedNccl,
            Error::Unsupported(Capability::CudaMemoryImport { .. }) => {
                Rule::UnsupportedCudaMemoryImport
            }
            Error::Unsupported(Capability::InlineKernels { .. }) => Rule::UnsupportedInlineKernels,
            Error::Unsupported(Capability::LinearFilter { .. }) => Rule::UnsupportedLinearFilter,
            Error::WrongDevice { .. } => Rule::DeviceWrongDevice,
            Error::NoCudaDevice { .. } => Rule::DeviceNoCudaDevice,
            Error::NoVulkanDevice { .. } => Rule::DeviceNoVulkanDevice,
            Error::DeviceMismatch { .. } => Rule::DeviceMismatch,
            Error::MissingExtension { .. } => Rule::DeviceMissingExtension,
            Error::FeatureNotEnabled { .. } => Rule::DeviceFeatureNotEnabled,
            Error::MissingFunction { .. } => Rule::DeviceMissingFunction,
            Error::ApiVersion { .. } => Rule::DeviceApiVersion,
            Error::ValidationLayerMissing => Rule::DeviceValidationLayerMissing,
            Error::NoQueueFamily(_) => Rule::DeviceNoQueueFamily,
            Error::NoQueue { .. } => Rule::DeviceNoQueue,
            Error::HandleNotOpen { .. } => Rule::OsHandleNotOpen,
            Error::UnknownImageFlags { .. } => Rule::ArgumentUnknownImageFlags,
            Error::UnknownAddressMode { .. } => Rule::ArgumentUnknownAddressMode,
            Error::UnknownFilterMode { .. } => Rule::ArgumentUnknownFilterMode,
            Error::NotUtf8 { .. } => Rule::ArgumentNotUtf8,
            Error::BufferNotShared { .. } => Rule::ArgumentBufferNotShared,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::WrongBackend { .. }) => Rule::WgpuWrongBackend,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::NoRawEncoder) => Rule::WgpuNoRawEncoder,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::MissingFeatures { .. }) => Rule::WgpuMissingFeatures,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::ExperimentalFeatures { .. }) => Rule::WgpuExperimentalFeatures,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::LimitBeyondAdapter { .. }) => Rule::WgpuLimitBeyondAdapter,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::NotTexture { .. }) => Rule::WgpuNotTexture,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::ImageUsageNotInWgpu { .. }) => Rule::WgpuImageUsageNotInWgpu,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::EmptyBufferUsage) => Rule::WgpuEmptyBufferUsage,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::MappableUsage { .. }) => Rule::WgpuMappableUsage,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::AccelerationStructureUsage { .. }) => {
                Rule::WgpuAccelerationStructureUsage
            }
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::UnknownBufferUsage { .. }) => Rule::WgpuUnknownBufferUsage,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::MissingVulkanUsage { .. }) => Rule::WgpuMissingVulkanUsage,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::BufferTooLarge { .. }) => Rule::WgpuBufferTooLarge,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::TextureNotPaired) => Rule::WgpuTextureNotPaired,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::ImageNotShared) => Rule::WgpuImageNotShared,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(WgpuError::ReentrantSubmit) => Rule::WgpuReentrantSubmit,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(
                WgpuError::Call { .. }
                | WgpuError::NotReady { .. }
                | WgpuError::NotSubmitted { .. },
            ) => return None,
            Error::Ipc(IpcError::BadMagic { .. }) => Rule::IpcBadMagic,
            Error::Ipc(IpcError::UnsupportedVersion { .. }) => Rule::IpcUnsupportedVersion,
            Error::Ipc(IpcError::UnknownKind { .. }) => Rule::IpcUnknownKind,
            Error::Ipc(IpcError::TruncatedHeader { .. }) => Rule::IpcTruncatedHeader,
            Error::Ipc(IpcError::TruncatedBody { .. }) => Rule::IpcTruncatedBody,
            Error::Ipc(IpcError::BodyLengthMismatch { .. }) => Rule::IpcBodyLengthMismatch,
            Error::Ipc(IpcError::TrailingBytes { .. }) => Rule::IpcTrailingBytes,
            Error::Ipc(IpcError::FdCountMismatch { .. }) => Rule::IpcFdCountMismatch,
            Error::Ipc(IpcError::FdsNotAsAnnounced { .. }) => Rule::IpcFdsNotAsAnnounced,
            Error::Ipc(IpcError::ZeroSize { .. }) => Rule::IpcZeroSize,
            Error::Ipc(IpcError::RangeOverflow { .. }) => Rule::IpcRangeOverflow,
            Error::Ipc(IpcError::RangeExceedsMemory { .. }) => Rule::IpcRangeExceedsMemory,
            Error::Ipc(IpcError::PartialElement { .. }) => Rule::IpcPartialElement,
            Error::Ipc(IpcError::ZeroExtent { .. }) => Rule::IpcZeroExtent,
            Error::Ipc(IpcError::MipLevels { .. }) => Rule::IpcMipLevels,
            Error::Ipc(IpcError::BadBool { .. }) => Rule::IpcBadBool,
            Error::Ipc(IpcError::UnknownRole { .. }) => Rule::IpcUnknownRole,
            Error::Ipc(IpcError::TruncatedControl { .. }) => Rule::IpcTruncatedControl,
            Error::Ipc(IpcError::TooManyFds { .. }) => Rule::IpcTooManyFds,
            Error::Ipc(IpcError::Unsupported { .. }) => Rule::IpcUnsupported,
            Error::Ipc(IpcError::WrongDevice { .. }) => Rule::IpcWrongDevice,
            Error::Ipc(IpcError::DriverMismatch { .. }) => Rule::IpcDriverMismatch,
            Error::Ipc(IpcError::WrongFdKind { .. }) => Rule::IpcWrongFdKind,
            Error::Ipc(IpcError::SizeLie { .. }) => Rule::IpcSizeLie,
            Error::Ipc(IpcError::UnexpectedMessage { .. }) => Rule::IpcUnexpectedMessage,
            Error::Ipc(IpcError::NoSuchObject { .. }) => Rule::IpcNoSuchObject,
            Error::Ipc(IpcError::DescriptionRefused { .. }) => Rule::IpcDescriptionRefused,
            Error::Ipc(IpcError::StillConnected { .. }) => Rule::IpcStillConnected,
            Error::Ipc(IpcError::OneProducer) => Rule::IpcOneProducer,
            Error::Ipc(IpcError::UnknownImageShape { .. }) => Rule::IpcUnknownImageShape,
            Error::Ipc(
                IpcError::PeerClosed { .. }
                | IpcError::Timeout { .. }
                | IpcError::Io { .. }
                | IpcError::Busy,
            ) => return None,
            Error::Peer(PeerError::NoPeerAccess { .. }) => Rule::PeerNoAccess,
            Error::Peer(PeerError::DeviceMismatch { .. }) => Rule::PeerDeviceMismatch,
            Error::Peer(PeerError::SizeMismatch { .. }) => Rule::PeerSizeMismatch,
            Error::Peer(PeerError::RankLost { .. }) => Rule::PeerRankLost,
            Error::Peer(PeerError::Aborted { .. }) => Rule::PeerAborted,
            Error::Peer(PeerError::RankOutOfRange { .. }) => Rule::PeerRankOutOfRange,
            Error::VulkanLoader(_)
            | Error::Nccl { .. }
            | Error::Vulkan { .. }
            | Error::CudaUnavailable
            | Error::Cuda { .. }
            | Error::Nvrtc { .. }
            | Error::NoHandleReturned { .. }
            | Error::Timeout { .. }
            | Error::HostOutOfMemory { .. }
            | Error::Io { .. } => return None,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_rule_has_a_distinct_code_and_name_and_round_trips() {
        let codes: HashSet<u32> = Rule::ALL.iter().map(|r| r.code()).collect();
        let names: HashSet<&str> = Rule::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(codes.len(), Rule::ALL.len());
        assert_eq!(names.len(), Rule::ALL.len());
        for &r in Rule::ALL {
            assert_eq!(Rule::from_code(r.code()), Some(r));
            assert!(r.code() >> 8 >= 1 && r.code() >> 8 <= 14, "{r:?}");
        }
        assert_eq!(Rule::from_code(0), None);
    }

    #[test]
    fn refusals_report_their_rule_and_calls_report_none() {
        let e = Error::Layout(LayoutError::BadAlignment { alignment: 3 });
        assert_eq!(e.rule(), Some(Rule::LayoutBadAlignment));
        assert_eq!(e.rule().unwrap().name(), "Layout.BadAlignment");
        let e = Error::Image(ImageError::Texture(
            TextureRule::LinearFilterNeedsFloatReads,
        ));
        assert_eq!(
            e.rule().unwrap().name(),
            "Image.Texture.LinearFilterNeedsFloatReads"
        );
        let e = Error::Timeout {
            what: "x",
            timeout_ns: 1,
        };
        assert_eq!(e.rule(), None);
    }

    /// The raw arguments a foreign-language front end checks: each its own rule, its message
    /// naming the value, its numbers as data.
    #[test]
    fn argument_refusals_name_their_rule_and_value() {
        let cases = [
            (
                Error::UnknownImageFlags {
                    flags: 0x83,
                    known: 0x3,
                },
                Rule::ArgumentUnknownImageFlags,
                "unknown bits 0x80",
                ("flags", 0x83),
            ),
            (
                Error::UnknownAddressMode { mode: 7 },
                Rule::ArgumentUnknownAddressMode,
                "address mode 7",
                ("mode", 7),
            ),
            (
                Error::UnknownFilterMode { mode: 9 },
                Rule::ArgumentUnknownFilterMode,
                "filter mode 9",
                ("mode", 9),
            ),
            (
                Error::NotUtf8 {
                    what: "frame server name",
                    position: 2,
                    byte: 0xff,
                },
                Rule::ArgumentNotUtf8,
                "byte 0xff at 2",
                ("position", 2),
            ),
            (
                Error::BufferNotShared {
                    buffer: 0x10,
                    needed_for: "a frame server",
                },
                Rule::ArgumentBufferNotShared,
                "buffer 0x10",
                ("buffer", 16),
            ),
        ];
        for (e, rule, text, (field, value)) in cases {
            assert_eq!(e.rule(), Some(rule));
            assert_eq!(e.name(), rule.name());
            assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
            assert!(e.to_string().contains(text), "{e}");
            assert!(
                e.numbers().contains(&(field.to_owned(), value)),
                "{:?}",
                e.numbers()
            );
        }
    }
}
