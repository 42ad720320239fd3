//! Result codes, rule codes, the per-thread last error and [`guard`], the wrapper of every
//! exported function that catches panics and records failures.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use cuvk::{Error, ErrorKind};

use crate::rule;

/// Result codes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CuvkResult {
    /// Success.
    CuvkSuccess = 0,
    /// A required pointer argument was null.
    CuvkErrorNullPointer = 1,
    /// The handle is 0 or was never issued.
    CuvkErrorInvalidHandle = 2,
    /// The handle was destroyed.
    CuvkErrorStaleHandle = 3,
    /// The handle is of another kind (e.g. a buffer passed as a bridge).
    CuvkErrorWrongHandleKind = 4,
    /// An argument broke a rule (the message says which, with numbers).
    CuvkErrorInvalidArgument = 5,
    /// The device or driver cannot do it (e.g. no external semaphores).
    CuvkErrorUnsupported = 6,
    /// No CUDA or Vulkan device (or library) on this machine.
    CuvkErrorUnavailable = 7,
    /// A Vulkan call failed.
    CuvkErrorVulkan = 8,
    /// A CUDA call failed.
    CuvkErrorCuda = 9,
    /// A struct's `struct_size` is smaller than this library needs.
    CuvkErrorStructSize = 10,
    /// A host wait timed out.
    CuvkErrorTimeout = 11,
    /// A bug inside the library (a caught panic).
    CuvkErrorInternal = 12,
    /// The device could, but the engine did not enable the extension or feature needed.
    CuvkErrorNotEnabled = 13,
    /// Out of device or host memory, or larger than the memory heap.
    CuvkErrorOutOfMemory = 14,
    /// Objects of different devices were mixed.
    CuvkErrorWrongDevice = 15,
    /// A connection to another process failed or closed (the other side is gone).
    CuvkErrorIo = 16,
}

/// The rule a failed call broke ([`cuvk_last_error_rule`]), beside its [`CuvkResult`] and
/// message: a code to branch on, where the message is for people. The high byte is the group
/// (`rule >> 8`): 1 `LAYOUT` ranges and alignment, 2 `IMAGE` images, 3 `TEXTURE` textures,
/// 4 `PTX` PTX, 5 `MEMORY` memory and buffers, 6 `SYNC` semaphores and frames, 7 `LAUNCH`
/// kernel launches, 8 `UNSUPPORTED` what the device or driver lacks, 9 `DEVICE` the engine's
/// devices and what it enabled, 10 `OS_HANDLE` OS handles, 11 `WGPU` wgpu, 12 `IPC`
/// processes (frame servers and their messages), 13 `PEER` several GPUs, 14 `ARGUMENT` raw
/// arguments only C can get wrong (unknown flags or modes, text that is not UTF-8, a
/// Vulkan-only buffer where a shared one is needed). The codes are cuvk's own
/// (`cuvk::Rule::code`): every refusal has one, and a code is never reused. Each name is
/// `CUVK_RULE_`, the group's word above, `_`, and the last part of cuvk's rule name
/// (`cuvk::Rule::name`) in SCREAMING_SNAKE_CASE, words the two repeat where they meet
/// written once: `Peer.NoPeerAccess` is `CUVK_RULE_PEER_NO_PEER_ACCESS`, `DeviceMismatch`
/// (group 9) `CUVK_RULE_DEVICE_MISMATCH`.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CuvkRule {
    /// The last call succeeded, or its `CuvkResult` says it all: a null pointer, a bad handle,
    /// a short `struct_size`, a Vulkan-only bridge asked for CUDA, a timeout, or a driver,
    /// compiler or OS call that failed.
    CuvkRuleNone = 0,
    /// Kept for the ABI; no call returns it (every refusal has a code of its own).
    CuvkRuleOther = 1,

    /// A range of zero bytes.
    CuvkRuleLayoutZeroSize = 0x0101,
    /// Offset + size does not fit in 64 bits.
    CuvkRuleLayoutOverflow = 0x0102,
    /// Element count × element size does not fit in 64 bits.
    CuvkRuleLayoutElementCountOverflow = 0x0103,
    /// A byte count that is not a whole number of elements.
    CuvkRuleLayoutPartialElement = 0x0104,
    /// A range outside its allocation, buffer or block.
    CuvkRuleLayoutOutOfBounds = 0x0105,
    /// An offset, size or address that is not a multiple of the alignment a rule requires.
    CuvkRuleLayoutMisaligned = 0x0106,
    /// An alignment that is not a power of two.
    CuvkRuleLayoutBadAlignment = 0x0107,
    /// A non-zero offset in a dedicated allocation (CUDA maps those only at offset 0).
    CuvkRuleLayoutDedicatedOffset = 0x0108,
    /// A non-zero offset into a CUDA allocation (`cuMemMap` requires 0).
    CuvkRuleLayoutNonZeroAllocationOffset = 0x0109,
    /// A range that overlaps a live mapping or registration.
    CuvkRuleLayoutOverlap = 0x010A,
    /// An element type whose size is not the described element size.
    CuvkRuleLayoutElementSize = 0x010B,
    /// An element format with an unknown type code, a width that is not 8, 16, 32
    /// or 64 bits (8 for bool), or no lanes or columns.
    CuvkRuleLayoutElementFormat = 0x010C,

    /// A format outside cuvk's table of formats CUDA can share.
    CuvkRuleImageUnsupportedFormat = 0x0201,
    /// An image type other than 2D and 3D.
    CuvkRuleImageUnsupportedImageType = 0x0202,
    /// A zero width, height, depth or layer count.
    CuvkRuleImageZeroExtent = 0x0203,
    /// A cube map whose faces are not square.
    CuvkRuleImageCubeNotSquare = 0x0204,
    /// A cube map without exactly 6 layers.
    CuvkRuleImageCubeLayers = 0x0205,
    /// A cube map that is not a 2D image.
    CuvkRuleImageCubeNot2d = 0x0206,
    /// A 3D image with more than one layer.
    CuvkRuleImageLayersOn3d = 0x0207,
    /// A 2D image with a depth above 1.
    CuvkRuleImageDepthOn2d = 0x0208,
    /// Zero mip levels, or more than the full chain.
    CuvkRuleImageMipLevels = 0x0209,
    /// A dimension above the device's limit for the format, usage and tiling.
    CuvkRuleImageOverLimit = 0x020A,
    /// A LINEAR-tiled image where CUDA needs an OPTIMAL one.
    CuvkRuleImageLinearTiling = 0x020B,
    /// The image lacks a usage the request needs (e.g. `STORAGE` for a surface).
    CuvkRuleImageMissingUsage = 0x020C,
    /// A surface of a CUDA array mapped without surface load/store.
    CuvkRuleImageNoSurfaceFlag = 0x020D,
    /// A layered image (array or cube) with more than one mip level.
    CuvkRuleImageLayeredMipChain = 0x020E,
    /// A mip level the image does not have.
    CuvkRuleImageLevelOutOfRange = 0x020F,
    /// Array layers the image does not have.
    CuvkRuleImageLayerOutOfRange = 0x0210,
    /// A CUDA array descriptor that differs from the one the image implies.
    CuvkRuleImageDescriptorMismatch = 0x0211,
    /// A host buffer whose size is not the mip level's.
    CuvkRuleImageHostSize = 0x0212,
    /// An image without any usage.
    CuvkRuleImageNoUsage = 0x0213,

    /// Linear filtering of a texture that reads integers.
    CuvkRuleTextureLinearFilterNeedsFloatReads = 0x0301,
    /// A texture over the whole mip chain with unnormalized coordinates.
    CuvkRuleTextureMipChainNeedsNormalizedCoordinates = 0x0302,
    /// Wrap or mirror addressing with unnormalized coordinates.
    CuvkRuleTextureWrapNeedsNormalizedCoordinates = 0x0303,
    /// Raw integer reads of a format that is not UNORM/SNORM.
    CuvkRuleTextureRawReadsNeedNormalizedFormat = 0x0304,
    /// Normalized float reads of 32-bit integers.
    CuvkRuleTextureNormalizedReadsNeedNarrowIntegers = 0x0305,

    /// PTX without a kernel of that name.
    CuvkRulePtxNoEntry = 0x0401,
    /// A PTX parameter list that does not parse.
    CuvkRulePtxMalformed = 0x0402,
    /// A PTX array parameter whose byte size overflows 64 bits.
    CuvkRulePtxParamSizeOverflow = 0x0403,
    /// PTX parameters larger in all than a kernel launch passes.
    CuvkRulePtxParamsTooLarge = 0x0404,

    /// The object needs a dedicated allocation.
    CuvkRuleMemoryDedicatedRequired = 0x0501,
    /// Exportable buffers of this usage must be dedicated on this device (no sub-allocation).
    CuvkRuleMemoryDedicatedOnlyUsage = 0x0502,
    /// The memory is a dedicated allocation for another object.
    CuvkRuleMemoryDedicatedToAnother = 0x0503,
    /// A dedicated allocation holds exactly one buffer.
    CuvkRuleMemoryDedicatedHoldsOneBuffer = 0x0504,
    /// A dedicated allocation whose size is not its buffer's required size.
    CuvkRuleMemoryDedicatedSize = 0x0505,
    /// A memory type the buffer or image does not accept.
    CuvkRuleMemoryTypeNotAllowed = 0x0506,
    /// A device-address buffer on memory allocated without device addresses.
    CuvkRuleMemoryDeviceAddressNotAllocated = 0x0507,
    /// The object was not created exportable.
    CuvkRuleMemoryNotExportable = 0x0508,
    /// No memory type fits the request.
    CuvkRuleMemoryNoMemoryType = 0x0509,
    /// An allocation larger than its memory heap.
    CuvkRuleMemoryExceedsHeap = 0x050A,
    /// A buffer larger than every memory heap of the device.
    CuvkRuleMemoryBufferExceedsHeaps = 0x050B,
    /// A pool buffer with a usage its pool was not created with.
    CuvkRuleMemoryUsageNotInPool = 0x050C,
    /// Memory the host cannot see.
    CuvkRuleMemoryNotHostVisible = 0x050D,
    /// A pool block size below the unit its ranges are counted in.
    CuvkRuleMemoryPoolBlockTooSmall = 0x050E,
    /// A pool's dedicated threshold outside 1 to its block size.
    CuvkRuleMemoryPoolThreshold = 0x050F,
    /// No pool block can hold the request.
    CuvkRuleMemoryPoolRequestTooLarge = 0x0510,
    /// A growable buffer's chunk that does not hold whole elements.
    CuvkRuleMemoryChunkNotWholeElements = 0x0511,
    /// A copy whose element count is not the buffer's.
    CuvkRuleMemoryCopyLength = 0x0512,
    /// A buffer without a usage the command needs.
    CuvkRuleMemoryMissingBufferUsage = 0x0513,
    /// A size that does not fit the host's address space.
    CuvkRuleMemoryHostSizeOverflow = 0x0514,
    /// Memory of a device outside the multicast team.
    CuvkRuleMemoryNotInMulticastTeam = 0x0515,
    /// A shareable multicast object given memory that is not shareable.
    CuvkRuleMemoryMulticastNeedsShareable = 0x0516,
    /// A multicast team without devices.
    CuvkRuleMemoryEmptyMulticastTeam = 0x0517,
    /// An image description that imports memory given where memory is allocated.
    CuvkRuleMemoryImportNeedsSource = 0x0518,

    /// A binary semaphore where a timeline one is needed.
    CuvkRuleSyncNeedsTimeline = 0x0601,
    /// A semaphore imported into CUDA as the other kind.
    CuvkRuleSyncImportKind = 0x0602,
    /// A timeline value that does not exceed the last one scheduled (values must increase).
    CuvkRuleSyncTimelineNotIncreasing = 0x0603,
    /// One semaphore signalled twice in one submission.
    CuvkRuleSyncSignalledTwice = 0x0604,
    /// A wait for a timeline value nothing has scheduled (it would never end).
    CuvkRuleSyncWaitNeverSignalled = 0x0605,
    /// A semaphore wait with an empty stage mask.
    CuvkRuleSyncEmptyWaitStage = 0x0606,
    /// A binary semaphore where only timeline semaphores are accepted.
    CuvkRuleSyncBinaryNotAccepted = 0x0607,
    /// Frames in flight out of range.
    CuvkRuleSyncFramesInFlight = 0x0608,
    /// A frame another frame pacer issued.
    CuvkRuleSyncForeignFrame = 0x0609,
    /// A frame that is not the pacer's current one.
    CuvkRuleSyncWrongFrame = 0x060A,

    /// An argument count that differs from the kernel's parameters.
    CuvkRuleLaunchArgumentCount = 0x0701,
    /// An argument whose size differs from its parameter's.
    CuvkRuleLaunchArgumentSize = 0x0702,
    /// A device address for a parameter that is not a 64-bit integer.
    CuvkRuleLaunchAddressToNonPointer = 0x0703,
    /// Too many bytes of parameters.
    CuvkRuleLaunchParameterBytes = 0x0704,
    /// A zero grid or block dimension.
    CuvkRuleLaunchZeroDimension = 0x0705,
    /// Too many threads in a block.
    CuvkRuleLaunchThreadsPerBlock = 0x0706,
    /// A grid or block dimension beyond CUDA's limits.
    CuvkRuleLaunchDimensionLimit = 0x0707,
    /// Too much dynamic shared memory.
    CuvkRuleLaunchSharedMemory = 0x0708,
    /// Text handed to a C API with a NUL byte.
    CuvkRuleLaunchNulByte = 0x0709,

    /// The device (or its queue) has no sparse binding.
    CuvkRuleUnsupportedSparseBinding = 0x0801,
    /// Sparse buffers of this usage cannot take imported memory.
    CuvkRuleUnsupportedSparseImport = 0x0802,
    /// The device cannot export or import buffers of this usage.
    CuvkRuleUnsupportedExternalBuffer = 0x0803,
    /// The device cannot create the image.
    CuvkRuleUnsupportedImageCreate = 0x0804,
    /// The device cannot export or import images of this kind.
    CuvkRuleUnsupportedExternalImage = 0x0805,
    /// The device cannot export semaphores of this kind.
    CuvkRuleUnsupportedSemaphoreExport = 0x0806,
    /// The device has no `timelineSemaphore` feature.
    CuvkRuleUnsupportedTimelineSemaphore = 0x0807,
    /// No NVRTC library on this machine.
    CuvkRuleUnsupportedNvrtc = 0x0808,
    /// The CUDA device cannot create multicast objects.
    CuvkRuleUnsupportedMulticast = 0x0809,
    /// The Vulkan driver refused memory allocated by CUDA.
    CuvkRuleUnsupportedCudaMemoryImport = 0x080A,
    /// CUDA kernels cannot run inside this device's Vulkan queues.
    CuvkRuleUnsupportedInlineKernels = 0x080B,

    /// Objects of different devices (or contexts) were mixed.
    CuvkRuleDeviceWrongDevice = 0x0901,
    /// No CUDA device has the UUID.
    CuvkRuleDeviceNoCudaDevice = 0x0902,
    /// No Vulkan physical device matches.
    CuvkRuleDeviceNoVulkanDevice = 0x0903,
    /// The CUDA and Vulkan devices are different GPUs.
    CuvkRuleDeviceMismatch = 0x0904,
    /// A device extension that is not supported, or that the engine did not enable.
    CuvkRuleDeviceMissingExtension = 0x0905,
    /// A device feature the engine did not enable.
    CuvkRuleDeviceFeatureNotEnabled = 0x0906,
    /// A Vulkan entry point that does not resolve on the engine's instance or device.
    CuvkRuleDeviceMissingFunction = 0x0907,
    /// A Vulkan API version below the one required.
    CuvkRuleDeviceApiVersion = 0x0908,
    /// The validation layer was required but is not installed.
    CuvkRuleDeviceValidationLayerMissing = 0x0909,
    /// No queue family can do what is needed.
    CuvkRuleDeviceNoQueueFamily = 0x090A,
    /// The Vulkan context has no queue of its own.
    CuvkRuleDeviceNoQueue = 0x090B,

    /// An OS handle (file descriptor) that is not open, e.g. already imported.
    CuvkRuleOsHandleNotOpen = 0x0A01,

    /// Memory another owner still holds (a mapping, a view, a parked copy): the call needs it
    /// alone.
    CuvkRuleMemoryShared = 0x0519,

    /// A host signal while a signal already scheduled has not executed.
    CuvkRuleSyncSignalPending = 0x060B,

    /// A frame step out of order (a release before the acquire, a submission before the
    /// release, ...).
    CuvkRuleSyncFrameOutOfOrder = 0x060C,
    /// A resource's use marks handed to a stream order that did not make them.
    CuvkRuleSyncForeignMarks = 0x060D,
    /// A timeline signal further above the counter than every device must accept.
    CuvkRuleSyncTimelineJumpTooLarge = 0x060E,
    /// A frame server's slot count is not its frames in flight.
    CuvkRuleSyncSlotCount = 0x060F,
    /// A publisher with no slot free to write: too few slots for its consumers.
    CuvkRuleSyncSlotsHeld = 0x0610,

    /// An image handle passed to a kernel parameter that is not a 64-bit integer.
    CuvkRuleLaunchImageHandleToNonInteger = 0x070A,

    /// Linear filtering of a format the device cannot filter.
    CuvkRuleUnsupportedLinearFilter = 0x080C,

    /// No NCCL library on this machine.
    CuvkRuleUnsupportedNccl = 0x080D,

    /// The device has no 64-bit buffer atomics.
    CuvkRuleUnsupportedAtomic64 = 0x080E,

    /// A wgpu object that is not on the Vulkan backend.
    CuvkRuleWgpuWrongBackend = 0x0B01,

    /// wgpu gave no recording Vulkan command encoder.
    CuvkRuleWgpuNoRawEncoder = 0x0B02,

    /// wgpu features the adapter does not offer.
    CuvkRuleWgpuMissingFeatures = 0x0B03,

    /// Experimental wgpu features required without enabling them.
    CuvkRuleWgpuExperimentalFeatures = 0x0B04,

    /// A wgpu limit beyond what the adapter offers.
    CuvkRuleWgpuLimitBeyondAdapter = 0x0B05,

    /// A Vulkan image cuvk cannot present to wgpu as a texture.
    CuvkRuleWgpuNotTexture = 0x0B06,

    /// Vulkan image usages with no wgpu texture usage.
    CuvkRuleWgpuImageUsageNotInWgpu = 0x0B07,

    /// An empty wgpu buffer usage.
    CuvkRuleWgpuEmptyBufferUsage = 0x0B08,

    /// MAP_READ / MAP_WRITE on a buffer whose memory is cuvk's.
    CuvkRuleWgpuMappableUsage = 0x0B09,

    /// Acceleration-structure inputs, which cuvk does not share.
    CuvkRuleWgpuAccelerationStructureUsage = 0x0B0A,

    /// wgpu buffer usages cuvk cannot create a Vulkan buffer for.
    CuvkRuleWgpuUnknownBufferUsage = 0x0B0B,

    /// A Vulkan buffer without a usage the wgpu usage needs.
    CuvkRuleWgpuMissingVulkanUsage = 0x0B0C,

    /// A buffer larger than the wgpu device's max_buffer_size.
    CuvkRuleWgpuBufferTooLarge = 0x0B0D,

    /// A wgpu texture that cuvk did not pair with a shared image.
    CuvkRuleWgpuTextureNotPaired = 0x0B0E,

    /// An image that is not shared with the wgpu device.
    CuvkRuleWgpuImageNotShared = 0x0B0F,

    /// A cuvk submission from inside a wgpu callback of another.
    CuvkRuleWgpuReentrantSubmit = 0x0B10,

    /// The message does not start with `b"CUVK"`.
    CuvkRuleIpcBadMagic = 0x0C01,

    /// The message is of a wire version this build does not read.
    CuvkRuleIpcUnsupportedVersion = 0x0C02,

    /// The header names a message kind this version does not have.
    CuvkRuleIpcUnknownKind = 0x0C03,

    /// Fewer bytes than a header.
    CuvkRuleIpcTruncatedHeader = 0x0C04,

    /// Fewer body bytes than the header announced.
    CuvkRuleIpcTruncatedBody = 0x0C05,

    /// The header's body length is not the size of its kind's body.
    CuvkRuleIpcBodyLengthMismatch = 0x0C06,

    /// Bytes after the end of the message the header describes.
    CuvkRuleIpcTrailingBytes = 0x0C07,

    /// A header (or a send) with a descriptor count other than its kind carries.
    CuvkRuleIpcFdCountMismatch = 0x0C08,

    /// Descriptors received differ from the count the header announced (they were closed).
    CuvkRuleIpcFdsNotAsAnnounced = 0x0C09,

    /// A boolean byte other than 0 or 1.
    CuvkRuleIpcBadBool = 0x0C10,

    /// A timeline role other than 0 (publisher signals) or 1 (attacher signals).
    CuvkRuleIpcUnknownRole = 0x0C11,

    /// The descriptors did not fit the control buffer (`MSG_CTRUNC`); those that arrived were closed.
    CuvkRuleIpcTruncatedControl = 0x0C14,

    /// More descriptors than one message carries.
    CuvkRuleIpcTooManyFds = 0x0C15,

    /// The transport does not exist on this platform.
    CuvkRuleIpcUnsupported = 0x0C17,

    /// The server's objects live on another GPU than the client's.
    CuvkRuleIpcWrongDevice = 0x0C18,

    /// The server's driver is another than the client's (opaque handles need the same one).
    CuvkRuleIpcDriverMismatch = 0x0C19,

    /// A descriptor that cannot be GPU memory or a semaphore.
    CuvkRuleIpcWrongFdKind = 0x0C1A,

    /// A description that claims more memory than its descriptor holds.
    CuvkRuleIpcSizeLie = 0x0C1B,

    /// A message of another kind than the protocol expects next.
    CuvkRuleIpcUnexpectedMessage = 0x0C1C,

    /// An object id the server did not publish (of that kind).
    CuvkRuleIpcNoSuchObject = 0x0C1D,

    /// A release meant for a lost peer asked for while the peer is still connected.
    CuvkRuleIpcStillConnected = 0x0C1F,

    /// An image shape other than 0 (2D), 1 (2D array), 2 (3D) or 3 (cube).
    CuvkRuleIpcUnknownImageShape = 0x0C22,

    /// An image's described shape contradicts its extent, layers or flags.
    CuvkRuleIpcShapeContradicted = 0x0C23,

    /// A fan-out hold op other than 1 to 6.
    CuvkRuleIpcUnknownHoldOp = 0x0C24,

    /// Peer access asked for between GPUs that have no peer path.
    CuvkRulePeerNoPeerAccess = 0x0D01,

    /// A shared buffer handed to something on another GPU.
    CuvkRulePeerDeviceMismatch = 0x0D02,

    /// The ranks of a collective hold buffers of different sizes.
    CuvkRulePeerSizeMismatch = 0x0D03,

    /// A rank of a collective lost (died, hung): the communicator was aborted.
    CuvkRulePeerRankLost = 0x0D04,

    /// A communicator used after it was aborted.
    CuvkRulePeerAborted = 0x0D05,

    /// A rank number outside the communicator.
    CuvkRulePeerRankOutOfRange = 0x0D06,

    /// Image creation flags with bits that name no flag (`CuvkImageDesc::flags`).
    CuvkRuleArgumentUnknownImageFlags = 0x0E01,

    /// A texture address mode that names no mode (`CuvkTextureDesc::address_mode`).
    CuvkRuleArgumentUnknownAddressMode = 0x0E02,

    /// A texture filter mode that names no mode (`CuvkTextureDesc::filter`).
    CuvkRuleArgumentUnknownFilterMode = 0x0E03,

    /// Text that must be UTF-8 and is not (a frame server's name).
    CuvkRuleArgumentNotUtf8 = 0x0E04,

    /// A buffer without a CUDA side (made on a Vulkan-only bridge) where a buffer shared with
    /// CUDA is needed (`cuvk_frame_server_publish_buffer`).
    CuvkRuleArgumentBufferNotShared = 0x0E05,

    /// A yes/no argument that is neither 0 nor 1 (`cuvk_subscriber_attach`'s `every_frame`).
    CuvkRuleArgumentNotBoolean = 0x0E06,
}

/// Why a call failed: its result code, the rule it broke and the message.
pub(crate) struct Failure {
    code: CuvkResult,
    rule: CuvkRule,
    msg: String,
}

impl Failure {
    /// A failure found at the C boundary whose result says it all (`CUVK_RULE_NONE`): a null
    /// pointer, a bad handle, a short `struct_size`, a Vulkan-only bridge asked for CUDA. An
    /// argument that breaks a rule is a `cuvk::Error` instead (`Failure::from`: its result
    /// code, its rule and its message), never `CUVK_ERROR_INVALID_ARGUMENT` here (the tests
    /// check that the C boundary's code never names it).
    pub(crate) fn new(code: CuvkResult, msg: impl Into<String>) -> Self {
        Failure {
            code,
            rule: CuvkRule::CuvkRuleNone,
            msg: msg.into(),
        }
    }
}

/// A call's value, or why it failed.
pub(crate) type CResult<T> = std::result::Result<T, Failure>;

/// Fails with `code` and `msg` (no rule: see [`Failure::new`]).
pub(crate) fn fail<T>(code: CuvkResult, msg: impl Into<String>) -> CResult<T> {
    Err(Failure::new(code, msg))
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static LAST_RULE: Cell<CuvkRule> = const { Cell::new(CuvkRule::CuvkRuleNone) };
}

fn set_last_error(rule: CuvkRule, msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
    LAST_RULE.with(|r| r.set(rule));
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let code = match e.kind() {
            ErrorKind::NotFound => CuvkResult::CuvkErrorUnavailable,
            ErrorKind::Unsupported => CuvkResult::CuvkErrorUnsupported,
            ErrorKind::NotEnabled => CuvkResult::CuvkErrorNotEnabled,
            ErrorKind::OutOfMemory => CuvkResult::CuvkErrorOutOfMemory,
            ErrorKind::WrongDevice => CuvkResult::CuvkErrorWrongDevice,
            ErrorKind::Timeout => CuvkResult::CuvkErrorTimeout,
            ErrorKind::Driver => match e {
                Error::Cuda { .. } => CuvkResult::CuvkErrorCuda,
                _ => CuvkResult::CuvkErrorVulkan,
            },
            ErrorKind::Io => CuvkResult::CuvkErrorIo,
            ErrorKind::InvalidInput => CuvkResult::CuvkErrorInvalidArgument,
            // ErrorKind is #[non_exhaustive]: a kind added later is a refusal until it gets a
            // result code of its own (its message and rule say which).
            _ => CuvkResult::CuvkErrorInvalidArgument,
        };
        Failure {
            code,
            rule: rule::rule_of(&e),
            msg: e.to_string(),
        }
    }
}

/// The body of every exported function: catches panics, records the error message and rule.
pub(crate) fn guard(f: impl FnOnce() -> CResult<()>) -> CuvkResult {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            set_last_error(CuvkRule::CuvkRuleNone, "");
            CuvkResult::CuvkSuccess
        }
        Ok(Err(Failure { code, rule, msg })) => {
            set_last_error(rule, &msg);
            code
        }
        Err(_) => {
            set_last_error(
                CuvkRule::CuvkRuleNone,
                "internal error: a panic was caught at the C boundary",
            );
            CuvkResult::CuvkErrorInternal
        }
    }
}

/// The writable target of an out-pointer, or a null-pointer error naming it.
///
/// # Safety
/// `ptr` must be null or valid for writes for `'a`.
pub(crate) unsafe fn out<'a, T>(ptr: *mut T, what: &str) -> CResult<&'a mut T> {
    // SAFETY: null is checked; otherwise the caller vouches for the pointer.
    unsafe { ptr.as_mut() }.ok_or(Failure::new(
        CuvkResult::CuvkErrorNullPointer,
        format!("{what} is null"),
    ))
}

/// A struct that crosses the boundary with its `struct_size` first (the caller sets it to
/// `sizeof` the struct it was compiled with, so a newer library can refuse an older caller's
/// shorter struct).
pub(crate) trait CStruct {
    /// The struct's C name, for the refusal.
    const NAME: &'static str;
    /// The caller's `struct_size`.
    fn struct_size(&self) -> u32;
}

/// Implements [`CStruct`] for structs whose first field is `struct_size`.
macro_rules! c_structs {
    ($($t:ty),* $(,)?) => {$(
        impl $crate::error::CStruct for $t {
            const NAME: &'static str = stringify!($t);
            fn struct_size(&self) -> u32 {
                self.struct_size
            }
        }
    )*};
}
pub(crate) use c_structs;

/// A struct-size error unless `s` is at least as long as this library's `T`.
fn check_size<T: CStruct>(s: &T) -> CResult<()> {
    let (given, needed) = (s.struct_size(), std::mem::size_of::<T>());
    if (given as usize) < needed {
        return fail(
            CuvkResult::CuvkErrorStructSize,
            format!(
                "{}.struct_size is {given}; this library needs at least {needed}",
                T::NAME
            ),
        );
    }
    Ok(())
}

/// The descriptor the caller filled at `ptr`, refused when null (naming `what`) or shorter
/// than this library's `T`: every descriptor's preamble, once.
///
/// # Safety
/// `ptr` must be null or point to a readable `T` (of at least `struct_size` bytes).
pub(crate) unsafe fn desc_in<'a, T: CStruct>(ptr: *const T, what: &str) -> CResult<&'a T> {
    // SAFETY: null is checked; otherwise the caller vouches for the struct.
    let d = unsafe { ptr.as_ref() }.ok_or(Failure::new(
        CuvkResult::CuvkErrorNullPointer,
        format!("{what} is null"),
    ))?;
    check_size(d)?;
    Ok(d)
}

/// The struct at `ptr` this library fills, whose `struct_size` the caller set: refused when
/// null or shorter than this library's `T`.
///
/// # Safety
/// `ptr` must be null or point to a writable `T`.
pub(crate) unsafe fn desc_out<'a, T: CStruct>(ptr: *mut T, what: &str) -> CResult<&'a mut T> {
    // SAFETY: forwarded.
    let d = unsafe { out(ptr, what) }?;
    check_size(&*d)?;
    Ok(d)
}

/// The message of the last failed call on this thread ("" after a success). Valid until the
/// next cuvk call on this thread.
#[no_mangle]
pub extern "C" fn cuvk_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// The rule the last failed call on this thread broke (`CUVK_RULE_NONE` after a success, or
/// where the `CuvkResult` says it all): cuvk's own rule code (`cuvk::Rule`), the same the
/// Python module and the Bevy plugin report. Valid until the next cuvk call on this thread,
/// like `cuvk_last_error`.
#[no_mangle]
pub extern "C" fn cuvk_last_error_rule() -> CuvkRule {
    LAST_RULE.with(Cell::get)
}
