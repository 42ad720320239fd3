//! Which [`CuvkRule`](crate::CuvkRule) a `cuvk::Error` broke: cuvk's own [`cuvk::Rule`]
//! (`Error::rule`, the one home of the mapping from refusals to rules) as the C enum constant
//! of the same code. Errors that are not a rule (a driver, compiler or OS call that failed, a
//! timeout) are `CUVK_RULE_NONE`; `CUVK_RULE_OTHER` is kept for the ABI and is not returned.
//!
//! The C enum is the one table on this side: [`ALL`] lists its constants through
//! `c_rules!`, which does not compile while a constant is left out, and `tests/capi.rs`
//! holds the enum (and the header made from it) to cuvk's rules — the same codes, each named
//! from cuvk's rule name — so a new rule is its row in cuvk's refusal table, a constant in
//! `CuvkRule` and its line below (then the header regenerated). The enum stays written out
//! because cbindgen reads the source (a generated enum would be missing from the header), and
//! the list below because turning a code into the enum safely needs every constant named.

use cuvk::Error;

use crate::CuvkRule as R;

/// The rule `e` broke.
pub(crate) fn rule_of(e: &Error) -> R {
    match e.rule() {
        None => R::CuvkRuleNone,
        // A cuvk rule without a constant here fails the tests; a build that ships one anyway
        // reports the code it cannot name as OTHER rather than as no rule.
        Some(rule) => from_code(rule.code()).unwrap_or(R::CuvkRuleOther),
    }
}

/// The constant with `code`, if the C enum has one.
pub(crate) fn from_code(code: u32) -> Option<R> {
    ALL.iter().copied().find(|&r| r as u32 == code)
}

/// `ALL` from the constants listed, and a match over the enum that fails to compile unless
/// every constant but `NONE` and `OTHER` is listed.
macro_rules! c_rules {
    ($($rule:ident),* $(,)?) => {
        /// Every rule constant of the C enum (not `NONE` and `OTHER`), in the enum's order.
        pub(crate) const ALL: &[R] = &[$(R::$rule),*];

        const _: () = {
            /// Exhaustive: a constant of `CuvkRule` missing from the list is a compile error.
            #[allow(dead_code)]
            const fn listed(r: R) {
                match r {
                    R::CuvkRuleNone | R::CuvkRuleOther => {}
                    $(R::$rule => {})*
                }
            }
        };
    };
}

c_rules![
    CuvkRuleLayoutZeroSize,
    CuvkRuleLayoutOverflow,
    CuvkRuleLayoutElementCountOverflow,
    CuvkRuleLayoutPartialElement,
    CuvkRuleLayoutOutOfBounds,
    CuvkRuleLayoutMisaligned,
    CuvkRuleLayoutBadAlignment,
    CuvkRuleLayoutDedicatedOffset,
    CuvkRuleLayoutNonZeroAllocationOffset,
    CuvkRuleLayoutOverlap,
    CuvkRuleLayoutElementSize,
    CuvkRuleLayoutElementFormat,
    CuvkRuleImageUnsupportedFormat,
    CuvkRuleImageUnsupportedImageType,
    CuvkRuleImageZeroExtent,
    CuvkRuleImageCubeNotSquare,
    CuvkRuleImageCubeLayers,
    CuvkRuleImageCubeNot2d,
    CuvkRuleImageLayersOn3d,
    CuvkRuleImageDepthOn2d,
    CuvkRuleImageMipLevels,
    CuvkRuleImageOverLimit,
    CuvkRuleImageLinearTiling,
    CuvkRuleImageMissingUsage,
    CuvkRuleImageNoSurfaceFlag,
    CuvkRuleImageLayeredMipChain,
    CuvkRuleImageLevelOutOfRange,
    CuvkRuleImageLayerOutOfRange,
    CuvkRuleImageDescriptorMismatch,
    CuvkRuleImageHostSize,
    CuvkRuleImageNoUsage,
    CuvkRuleTextureLinearFilterNeedsFloatReads,
    CuvkRuleTextureMipChainNeedsNormalizedCoordinates,
    CuvkRuleTextureWrapNeedsNormalizedCoordinates,
    CuvkRuleTextureRawReadsNeedNormalizedFormat,
    CuvkRuleTextureNormalizedReadsNeedNarrowIntegers,
    CuvkRulePtxNoEntry,
    CuvkRulePtxMalformed,
    CuvkRulePtxParamSizeOverflow,
    CuvkRulePtxParamsTooLarge,
    CuvkRuleMemoryDedicatedRequired,
    CuvkRuleMemoryDedicatedOnlyUsage,
    CuvkRuleMemoryDedicatedToAnother,
    CuvkRuleMemoryDedicatedHoldsOneBuffer,
    CuvkRuleMemoryDedicatedSize,
    CuvkRuleMemoryTypeNotAllowed,
    CuvkRuleMemoryDeviceAddressNotAllocated,
    CuvkRuleMemoryNotExportable,
    CuvkRuleMemoryNoMemoryType,
    CuvkRuleMemoryExceedsHeap,
    CuvkRuleMemoryBufferExceedsHeaps,
    CuvkRuleMemoryUsageNotInPool,
    CuvkRuleMemoryNotHostVisible,
    CuvkRuleMemoryPoolBlockTooSmall,
    CuvkRuleMemoryPoolThreshold,
    CuvkRuleMemoryPoolRequestTooLarge,
    CuvkRuleMemoryChunkNotWholeElements,
    CuvkRuleMemoryCopyLength,
    CuvkRuleMemoryMissingBufferUsage,
    CuvkRuleMemoryHostSizeOverflow,
    CuvkRuleMemoryNotInMulticastTeam,
    CuvkRuleMemoryMulticastNeedsShareable,
    CuvkRuleMemoryEmptyMulticastTeam,
    CuvkRuleMemoryImportNeedsSource,
    CuvkRuleSyncNeedsTimeline,
    CuvkRuleSyncImportKind,
    CuvkRuleSyncTimelineNotIncreasing,
    CuvkRuleSyncSignalledTwice,
    CuvkRuleSyncWaitNeverSignalled,
    CuvkRuleSyncEmptyWaitStage,
    CuvkRuleSyncBinaryNotAccepted,
    CuvkRuleSyncFramesInFlight,
    CuvkRuleSyncForeignFrame,
    CuvkRuleSyncWrongFrame,
    CuvkRuleLaunchArgumentCount,
    CuvkRuleLaunchArgumentSize,
    CuvkRuleLaunchAddressToNonPointer,
    CuvkRuleLaunchParameterBytes,
    CuvkRuleLaunchZeroDimension,
    CuvkRuleLaunchThreadsPerBlock,
    CuvkRuleLaunchDimensionLimit,
    CuvkRuleLaunchSharedMemory,
    CuvkRuleLaunchNulByte,
    CuvkRuleUnsupportedSparseBinding,
    CuvkRuleUnsupportedSparseImport,
    CuvkRuleUnsupportedExternalBuffer,
    CuvkRuleUnsupportedImageCreate,
    CuvkRuleUnsupportedExternalImage,
    CuvkRuleUnsupportedSemaphoreExport,
    CuvkRuleUnsupportedTimelineSemaphore,
    CuvkRuleUnsupportedNvrtc,
    CuvkRuleUnsupportedMulticast,
    CuvkRuleUnsupportedCudaMemoryImport,
    CuvkRuleUnsupportedInlineKernels,
    CuvkRuleDeviceWrongDevice,
    CuvkRuleDeviceNoCudaDevice,
    CuvkRuleDeviceNoVulkanDevice,
    CuvkRuleDeviceMismatch,
    CuvkRuleDeviceMissingExtension,
    CuvkRuleDeviceFeatureNotEnabled,
    CuvkRuleDeviceMissingFunction,
    CuvkRuleDeviceApiVersion,
    CuvkRuleDeviceValidationLayerMissing,
    CuvkRuleDeviceNoQueueFamily,
    CuvkRuleDeviceNoQueue,
    CuvkRuleOsHandleNotOpen,
    CuvkRuleMemoryShared,
    CuvkRuleSyncSignalPending,
    CuvkRuleSyncFrameOutOfOrder,
    CuvkRuleSyncForeignMarks,
    CuvkRuleSyncTimelineJumpTooLarge,
    CuvkRuleSyncSlotCount,
    CuvkRuleSyncSlotsHeld,
    CuvkRuleLaunchImageHandleToNonInteger,
    CuvkRuleUnsupportedLinearFilter,
    CuvkRuleUnsupportedNccl,
    CuvkRuleUnsupportedAtomic64,
    CuvkRuleWgpuWrongBackend,
    CuvkRuleWgpuNoRawEncoder,
    CuvkRuleWgpuMissingFeatures,
    CuvkRuleWgpuExperimentalFeatures,
    CuvkRuleWgpuLimitBeyondAdapter,
    CuvkRuleWgpuNotTexture,
    CuvkRuleWgpuImageUsageNotInWgpu,
    CuvkRuleWgpuEmptyBufferUsage,
    CuvkRuleWgpuMappableUsage,
    CuvkRuleWgpuAccelerationStructureUsage,
    CuvkRuleWgpuUnknownBufferUsage,
    CuvkRuleWgpuMissingVulkanUsage,
    CuvkRuleWgpuBufferTooLarge,
    CuvkRuleWgpuTextureNotPaired,
    CuvkRuleWgpuImageNotShared,
    CuvkRuleWgpuReentrantSubmit,
    CuvkRuleIpcBadMagic,
    CuvkRuleIpcUnsupportedVersion,
    CuvkRuleIpcUnknownKind,
    CuvkRuleIpcTruncatedHeader,
    CuvkRuleIpcTruncatedBody,
    CuvkRuleIpcBodyLengthMismatch,
    CuvkRuleIpcTrailingBytes,
    CuvkRuleIpcFdCountMismatch,
    CuvkRuleIpcFdsNotAsAnnounced,
    CuvkRuleIpcBadBool,
    CuvkRuleIpcUnknownRole,
    CuvkRuleIpcTruncatedControl,
    CuvkRuleIpcTooManyFds,
    CuvkRuleIpcUnsupported,
    CuvkRuleIpcWrongDevice,
    CuvkRuleIpcDriverMismatch,
    CuvkRuleIpcWrongFdKind,
    CuvkRuleIpcSizeLie,
    CuvkRuleIpcUnexpectedMessage,
    CuvkRuleIpcNoSuchObject,
    CuvkRuleIpcStillConnected,
    CuvkRuleIpcUnknownImageShape,
    CuvkRuleIpcShapeContradicted,
    CuvkRuleIpcUnknownHoldOp,
    CuvkRulePeerNoPeerAccess,
    CuvkRulePeerDeviceMismatch,
    CuvkRulePeerSizeMismatch,
    CuvkRulePeerRankLost,
    CuvkRulePeerAborted,
    CuvkRulePeerRankOutOfRange,
    CuvkRuleArgumentUnknownImageFlags,
    CuvkRuleArgumentUnknownAddressMode,
    CuvkRuleArgumentUnknownFilterMode,
    CuvkRuleArgumentNotUtf8,
    CuvkRuleArgumentBufferNotShared,
    CuvkRuleArgumentNotBoolean,
];
