//! Which [`CuvkRule`] a `cuvk::Error` broke: one code per structured refusal of cuvk's
//! public error types. Errors that are not a rule (a driver, compiler or OS call that failed,
//! a timeout) are `CUVK_RULE_NONE`; a variant added to cuvk later is `CUVK_RULE_OTHER` until
//! it gets a code here (codes are never reused: a new one takes the next number of its group).

use cuvk::{
    Capability, Error, ImageError, LaunchError, LayoutError, MemoryError, PtxError, SyncError,
    TextureRule,
};

use crate::CuvkRule as R;

/// The rule `e` broke.
pub(crate) fn rule_of(e: &Error) -> R {
    match e {
        Error::Layout(e) => layout(e),
        Error::Image(e) => image(e),
        Error::Ptx(e) => ptx(e),
        Error::Memory(e) => memory(e),
        Error::Sync(e) => sync(e),
        Error::Launch(e) => launch(e),
        Error::Unsupported(c) => capability(c),
        Error::WrongDevice { .. } => R::CuvkRuleDeviceWrongDevice,
        Error::NoCudaDevice { .. } => R::CuvkRuleDeviceNoCudaDevice,
        Error::NoVulkanDevice { .. } => R::CuvkRuleDeviceNoVulkanDevice,
        Error::DeviceMismatch { .. } => R::CuvkRuleDeviceMismatch,
        Error::MissingExtension { .. } => R::CuvkRuleDeviceMissingExtension,
        Error::FeatureNotEnabled { .. } => R::CuvkRuleDeviceFeatureNotEnabled,
        Error::MissingFunction { .. } => R::CuvkRuleDeviceMissingFunction,
        Error::ApiVersion { .. } => R::CuvkRuleDeviceApiVersion,
        Error::ValidationLayerMissing => R::CuvkRuleDeviceValidationLayerMissing,
        Error::NoQueueFamily(_) => R::CuvkRuleDeviceNoQueueFamily,
        Error::NoQueue { .. } => R::CuvkRuleDeviceNoQueue,
        Error::HandleNotOpen { .. } => R::CuvkRuleOsHandleNotOpen,
        // Not a rule: the call itself failed, and the result code says which API.
        Error::VulkanLoader(_)
        | Error::Vulkan { .. }
        | Error::CudaUnavailable
        | Error::Cuda { .. }
        | Error::Nvrtc { .. }
        | Error::NoHandleReturned { .. }
        | Error::Timeout { .. }
        | Error::HostOutOfMemory { .. }
        | Error::Io { .. } => R::CuvkRuleNone,
        // `Error` is #[non_exhaustive] (and has feature-gated variants, e.g. wgpu's).
        _ => R::CuvkRuleOther,
    }
}

// LayoutError, ImageError, TextureRule and PtxError are exhaustive today; the wildcard arms
// keep this building if cuvk marks them #[non_exhaustive].
#[allow(unreachable_patterns)]
fn layout(e: &LayoutError) -> R {
    match e {
        LayoutError::ZeroSize { .. } => R::CuvkRuleLayoutZeroSize,
        LayoutError::Overflow { .. } => R::CuvkRuleLayoutOverflow,
        LayoutError::ElementCountOverflow { .. } => R::CuvkRuleLayoutElementCountOverflow,
        LayoutError::PartialElement { .. } => R::CuvkRuleLayoutPartialElement,
        LayoutError::OutOfBounds { .. } => R::CuvkRuleLayoutOutOfBounds,
        LayoutError::Misaligned { .. } => R::CuvkRuleLayoutMisaligned,
        LayoutError::BadAlignment { .. } => R::CuvkRuleLayoutBadAlignment,
        LayoutError::DedicatedOffset { .. } => R::CuvkRuleLayoutDedicatedOffset,
        LayoutError::NonZeroAllocationOffset { .. } => R::CuvkRuleLayoutNonZeroAllocationOffset,
        LayoutError::Overlap { .. } => R::CuvkRuleLayoutOverlap,
        _ => R::CuvkRuleOther,
    }
}

#[allow(unreachable_patterns)]
fn image(e: &ImageError) -> R {
    match e {
        ImageError::UnsupportedFormat { .. } => R::CuvkRuleImageUnsupportedFormat,
        ImageError::UnsupportedImageType { .. } => R::CuvkRuleImageUnsupportedType,
        ImageError::ZeroExtent { .. } => R::CuvkRuleImageZeroExtent,
        ImageError::CubeNotSquare { .. } => R::CuvkRuleImageCubeNotSquare,
        ImageError::CubeLayers { .. } => R::CuvkRuleImageCubeLayers,
        ImageError::CubeNot2D => R::CuvkRuleImageCubeNot2d,
        ImageError::LayersOn3D { .. } => R::CuvkRuleImageLayersOn3d,
        ImageError::DepthOn2D { .. } => R::CuvkRuleImageDepthOn2d,
        ImageError::MipLevels { .. } => R::CuvkRuleImageMipLevels,
        ImageError::OverLimit { .. } => R::CuvkRuleImageOverLimit,
        ImageError::LinearTiling => R::CuvkRuleImageLinearTiling,
        ImageError::MissingUsage { .. } => R::CuvkRuleImageMissingUsage,
        ImageError::NoSurfaceFlag => R::CuvkRuleImageNoSurfaceFlag,
        ImageError::LayeredMipChain { .. } => R::CuvkRuleImageLayeredMipChain,
        ImageError::LevelOutOfRange { .. } => R::CuvkRuleImageLevelOutOfRange,
        ImageError::LayerOutOfRange { .. } => R::CuvkRuleImageLayerOutOfRange,
        ImageError::DescriptorMismatch { .. } => R::CuvkRuleImageDescriptorMismatch,
        ImageError::HostSize { .. } => R::CuvkRuleImageHostSize,
        ImageError::NoUsage => R::CuvkRuleImageNoUsage,
        ImageError::Texture(t) => texture(*t),
        _ => R::CuvkRuleOther,
    }
}

#[allow(unreachable_patterns)]
fn texture(t: TextureRule) -> R {
    match t {
        TextureRule::LinearFilterNeedsFloatReads => R::CuvkRuleTextureLinearFilterNeedsFloatReads,
        TextureRule::MipChainNeedsNormalizedCoordinates => {
            R::CuvkRuleTextureMipChainNeedsNormalizedCoordinates
        }
        TextureRule::WrapNeedsNormalizedCoordinates => {
            R::CuvkRuleTextureWrapNeedsNormalizedCoordinates
        }
        TextureRule::RawReadsNeedNormalizedFormat => R::CuvkRuleTextureRawReadsNeedNormalizedFormat,
        TextureRule::NormalizedReadsNeedNarrowIntegers => {
            R::CuvkRuleTextureNormalizedReadsNeedNarrowIntegers
        }
        _ => R::CuvkRuleOther,
    }
}

#[allow(unreachable_patterns)]
fn ptx(e: &PtxError) -> R {
    match e {
        PtxError::NoEntry { .. } => R::CuvkRulePtxNoEntry,
        PtxError::Malformed { .. } => R::CuvkRulePtxMalformed,
        PtxError::ParamSizeOverflow { .. } => R::CuvkRulePtxParamSizeOverflow,
        PtxError::ParamsTooLarge { .. } => R::CuvkRulePtxParamsTooLarge,
        _ => R::CuvkRuleOther,
    }
}

fn memory(e: &MemoryError) -> R {
    match e {
        MemoryError::DedicatedRequired { .. } => R::CuvkRuleMemoryDedicatedRequired,
        MemoryError::DedicatedOnlyUsage { .. } => R::CuvkRuleMemoryDedicatedOnlyUsage,
        MemoryError::DedicatedToAnother => R::CuvkRuleMemoryDedicatedToAnother,
        MemoryError::DedicatedHoldsOneBuffer => R::CuvkRuleMemoryDedicatedHoldsOneBuffer,
        MemoryError::DedicatedSize { .. } => R::CuvkRuleMemoryDedicatedSize,
        MemoryError::MemoryTypeNotAllowed { .. } => R::CuvkRuleMemoryTypeNotAllowed,
        MemoryError::DeviceAddressNotAllocated => R::CuvkRuleMemoryDeviceAddressNotAllocated,
        MemoryError::NotExportable { .. } => R::CuvkRuleMemoryNotExportable,
        MemoryError::NoMemoryType { .. } => R::CuvkRuleMemoryNoMemoryType,
        MemoryError::ExceedsHeap { .. } => R::CuvkRuleMemoryExceedsHeap,
        MemoryError::BufferExceedsHeaps { .. } => R::CuvkRuleMemoryBufferExceedsHeaps,
        MemoryError::UsageNotInPool { .. } => R::CuvkRuleMemoryUsageNotInPool,
        MemoryError::NotHostVisible => R::CuvkRuleMemoryNotHostVisible,
        MemoryError::PoolBlockTooSmall { .. } => R::CuvkRuleMemoryPoolBlockTooSmall,
        MemoryError::PoolThreshold { .. } => R::CuvkRuleMemoryPoolThreshold,
        MemoryError::PoolRequestTooLarge { .. } => R::CuvkRuleMemoryPoolRequestTooLarge,
        MemoryError::ChunkNotWholeElements { .. } => R::CuvkRuleMemoryChunkNotWholeElements,
        MemoryError::CopyLength { .. } => R::CuvkRuleMemoryCopyLength,
        MemoryError::MissingBufferUsage { .. } => R::CuvkRuleMemoryMissingBufferUsage,
        MemoryError::HostSizeOverflow { .. } => R::CuvkRuleMemoryHostSizeOverflow,
        MemoryError::NotInMulticastTeam { .. } => R::CuvkRuleMemoryNotInMulticastTeam,
        MemoryError::MulticastNeedsShareable => R::CuvkRuleMemoryMulticastNeedsShareable,
        MemoryError::EmptyMulticastTeam => R::CuvkRuleMemoryEmptyMulticastTeam,
        MemoryError::ImportNeedsSource => R::CuvkRuleMemoryImportNeedsSource,
        _ => R::CuvkRuleOther,
    }
}

fn sync(e: &SyncError) -> R {
    match e {
        SyncError::NeedsTimeline { .. } => R::CuvkRuleSyncNeedsTimeline,
        SyncError::ImportKind { .. } => R::CuvkRuleSyncImportKind,
        SyncError::TimelineNotIncreasing { .. } => R::CuvkRuleSyncTimelineNotIncreasing,
        SyncError::SignalledTwice => R::CuvkRuleSyncSignalledTwice,
        SyncError::WaitNeverSignalled { .. } => R::CuvkRuleSyncWaitNeverSignalled,
        SyncError::EmptyWaitStage => R::CuvkRuleSyncEmptyWaitStage,
        SyncError::BinaryNotAccepted { .. } => R::CuvkRuleSyncBinaryNotAccepted,
        SyncError::FramesInFlight { .. } => R::CuvkRuleSyncFramesInFlight,
        SyncError::ForeignFrame { .. } => R::CuvkRuleSyncForeignFrame,
        SyncError::WrongFrame { .. } => R::CuvkRuleSyncWrongFrame,
        _ => R::CuvkRuleOther,
    }
}

fn launch(e: &LaunchError) -> R {
    match e {
        LaunchError::ArgumentCount { .. } => R::CuvkRuleLaunchArgumentCount,
        LaunchError::ArgumentSize { .. } => R::CuvkRuleLaunchArgumentSize,
        LaunchError::AddressToNonPointer { .. } => R::CuvkRuleLaunchAddressToNonPointer,
        LaunchError::ParameterBytes { .. } => R::CuvkRuleLaunchParameterBytes,
        LaunchError::ZeroDimension { .. } => R::CuvkRuleLaunchZeroDimension,
        LaunchError::ThreadsPerBlock { .. } => R::CuvkRuleLaunchThreadsPerBlock,
        LaunchError::DimensionLimit { .. } => R::CuvkRuleLaunchDimensionLimit,
        LaunchError::SharedMemory { .. } => R::CuvkRuleLaunchSharedMemory,
        LaunchError::NulByte { .. } => R::CuvkRuleLaunchNulByte,
        _ => R::CuvkRuleOther,
    }
}

fn capability(c: &Capability) -> R {
    match c {
        Capability::SparseBinding => R::CuvkRuleUnsupportedSparseBinding,
        Capability::SparseImport { .. } => R::CuvkRuleUnsupportedSparseImport,
        Capability::ExternalBuffer { .. } => R::CuvkRuleUnsupportedExternalBuffer,
        Capability::ImageCreate { .. } => R::CuvkRuleUnsupportedImageCreate,
        Capability::ExternalImage { .. } => R::CuvkRuleUnsupportedExternalImage,
        Capability::SemaphoreExport { .. } => R::CuvkRuleUnsupportedSemaphoreExport,
        Capability::TimelineSemaphore => R::CuvkRuleUnsupportedTimelineSemaphore,
        Capability::Nvrtc => R::CuvkRuleUnsupportedNvrtc,
        Capability::Multicast { .. } => R::CuvkRuleUnsupportedMulticast,
        Capability::CudaMemoryImport { .. } => R::CuvkRuleUnsupportedCudaMemoryImport,
        Capability::InlineKernels { .. } => R::CuvkRuleUnsupportedInlineKernels,
        _ => R::CuvkRuleOther,
    }
}
