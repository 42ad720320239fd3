//! Which [`CuvkRule`](crate::CuvkRule) a `cuvk::Error` broke: cuvk's own [`cuvk::Rule`]
//! (`Error::rule`, the one home of the mapping from refusals to rules) as the C enum constant
//! of the same code. Errors that are not a rule (a driver, compiler or OS call that failed, a
//! timeout) are `CUVK_RULE_NONE`; `CUVK_RULE_OTHER` is kept for the ABI and is no longer
//! returned (a test keeps this enum's codes equal to cuvk's).

use cuvk::Error;

use crate::CuvkRule as R;

/// The rule `e` broke.
pub(crate) fn rule_of(e: &Error) -> R {
    match e.rule() {
        None => R::CuvkRuleNone,
        Some(rule) => from_code(rule.code()).unwrap_or(R::CuvkRuleOther),
    }
}

/// The constant with `code`, if the C enum has one.
pub(crate) fn from_code(code: u32) -> Option<R> {
    ALL.iter().copied().find(|&r| r as u32 == code)
}

/// Every rule constant of the C enum (not `NONE` and `OTHER`), in code order.
pub(crate) const ALL: &[R] = &[
    R::CuvkRuleLayoutZeroSize,
    R::CuvkRuleLayoutOverflow,
    R::CuvkRuleLayoutElementCountOverflow,
    R::CuvkRuleLayoutPartialElement,
    R::CuvkRuleLayoutOutOfBounds,
    R::CuvkRuleLayoutMisaligned,
    R::CuvkRuleLayoutBadAlignment,
    R::CuvkRuleLayoutDedicatedOffset,
    R::CuvkRuleLayoutNonZeroAllocationOffset,
    R::CuvkRuleLayoutOverlap,
    R::CuvkRuleImageUnsupportedFormat,
    R::CuvkRuleImageUnsupportedType,
    R::CuvkRuleImageZeroExtent,
    R::CuvkRuleImageCubeNotSquare,
    R::CuvkRuleImageCubeLayers,
    R::CuvkRuleImageCubeNot2d,
    R::CuvkRuleImageLayersOn3d,
    R::CuvkRuleImageDepthOn2d,
    R::CuvkRuleImageMipLevels,
    R::CuvkRuleImageOverLimit,
    R::CuvkRuleImageLinearTiling,
    R::CuvkRuleImageMissingUsage,
    R::CuvkRuleImageNoSurfaceFlag,
    R::CuvkRuleImageLayeredMipChain,
    R::CuvkRuleImageLevelOutOfRange,
    R::CuvkRuleImageLayerOutOfRange,
    R::CuvkRuleImageDescriptorMismatch,
    R::CuvkRuleImageHostSize,
    R::CuvkRuleImageNoUsage,
    R::CuvkRuleTextureLinearFilterNeedsFloatReads,
    R::CuvkRuleTextureMipChainNeedsNormalizedCoordinates,
    R::CuvkRuleTextureWrapNeedsNormalizedCoordinates,
    R::CuvkRuleTextureRawReadsNeedNormalizedFormat,
    R::CuvkRuleTextureNormalizedReadsNeedNarrowIntegers,
    R::CuvkRulePtxNoEntry,
    R::CuvkRulePtxMalformed,
    R::CuvkRulePtxParamSizeOverflow,
    R::CuvkRulePtxParamsTooLarge,
    R::CuvkRuleMemoryDedicatedRequired,
    R::CuvkRuleMemoryDedicatedOnlyUsage,
    R::CuvkRuleMemoryDedicatedToAnother,
    R::CuvkRuleMemoryDedicatedHoldsOneBuffer,
    R::CuvkRuleMemoryDedicatedSize,
    R::CuvkRuleMemoryTypeNotAllowed,
    R::CuvkRuleMemoryDeviceAddressNotAllocated,
    R::CuvkRuleMemoryNotExportable,
    R::CuvkRuleMemoryNoMemoryType,
    R::CuvkRuleMemoryExceedsHeap,
    R::CuvkRuleMemoryBufferExceedsHeaps,
    R::CuvkRuleMemoryUsageNotInPool,
    R::CuvkRuleMemoryNotHostVisible,
    R::CuvkRuleMemoryPoolBlockTooSmall,
    R::CuvkRuleMemoryPoolThreshold,
    R::CuvkRuleMemoryPoolRequestTooLarge,
    R::CuvkRuleMemoryChunkNotWholeElements,
    R::CuvkRuleMemoryCopyLength,
    R::CuvkRuleMemoryMissingBufferUsage,
    R::CuvkRuleMemoryHostSizeOverflow,
    R::CuvkRuleMemoryNotInMulticastTeam,
    R::CuvkRuleMemoryMulticastNeedsShareable,
    R::CuvkRuleMemoryEmptyMulticastTeam,
    R::CuvkRuleMemoryImportNeedsSource,
    R::CuvkRuleSyncNeedsTimeline,
    R::CuvkRuleSyncImportKind,
    R::CuvkRuleSyncTimelineNotIncreasing,
    R::CuvkRuleSyncSignalledTwice,
    R::CuvkRuleSyncWaitNeverSignalled,
    R::CuvkRuleSyncEmptyWaitStage,
    R::CuvkRuleSyncBinaryNotAccepted,
    R::CuvkRuleSyncFramesInFlight,
    R::CuvkRuleSyncForeignFrame,
    R::CuvkRuleSyncWrongFrame,
    R::CuvkRuleLaunchArgumentCount,
    R::CuvkRuleLaunchArgumentSize,
    R::CuvkRuleLaunchAddressToNonPointer,
    R::CuvkRuleLaunchParameterBytes,
    R::CuvkRuleLaunchZeroDimension,
    R::CuvkRuleLaunchThreadsPerBlock,
    R::CuvkRuleLaunchDimensionLimit,
    R::CuvkRuleLaunchSharedMemory,
    R::CuvkRuleLaunchNulByte,
    R::CuvkRuleUnsupportedSparseBinding,
    R::CuvkRuleUnsupportedSparseImport,
    R::CuvkRuleUnsupportedExternalBuffer,
    R::CuvkRuleUnsupportedImageCreate,
    R::CuvkRuleUnsupportedExternalImage,
    R::CuvkRuleUnsupportedSemaphoreExport,
    R::CuvkRuleUnsupportedTimelineSemaphore,
    R::CuvkRuleUnsupportedNvrtc,
    R::CuvkRuleUnsupportedMulticast,
    R::CuvkRuleUnsupportedCudaMemoryImport,
    R::CuvkRuleUnsupportedInlineKernels,
    R::CuvkRuleDeviceWrongDevice,
    R::CuvkRuleDeviceNoCudaDevice,
    R::CuvkRuleDeviceNoVulkanDevice,
    R::CuvkRuleDeviceMismatch,
    R::CuvkRuleDeviceMissingExtension,
    R::CuvkRuleDeviceFeatureNotEnabled,
    R::CuvkRuleDeviceMissingFunction,
    R::CuvkRuleDeviceApiVersion,
    R::CuvkRuleDeviceValidationLayerMissing,
    R::CuvkRuleDeviceNoQueueFamily,
    R::CuvkRuleDeviceNoQueue,
    R::CuvkRuleOsHandleNotOpen,
    R::CuvkRuleMemoryShared,
    R::CuvkRuleSyncSignalPending,
    R::CuvkRuleSyncFrameOutOfOrder,
    R::CuvkRuleSyncForeignMarks,
    R::CuvkRuleSyncTimelineJumpTooLarge,
    R::CuvkRuleLaunchImageHandleToNonInteger,
    R::CuvkRuleUnsupportedLinearFilter,
    R::CuvkRuleUnsupportedNccl,
    R::CuvkRuleWgpuWrongBackend,
    R::CuvkRuleWgpuNoRawEncoder,
    R::CuvkRuleWgpuMissingFeatures,
    R::CuvkRuleWgpuExperimentalFeatures,
    R::CuvkRuleWgpuLimitBeyondAdapter,
    R::CuvkRuleWgpuNotTexture,
    R::CuvkRuleWgpuImageUsageNotInWgpu,
    R::CuvkRuleWgpuEmptyBufferUsage,
    R::CuvkRuleWgpuMappableUsage,
    R::CuvkRuleWgpuAccelerationStructureUsage,
    R::CuvkRuleWgpuUnknownBufferUsage,
    R::CuvkRuleWgpuMissingVulkanUsage,
    R::CuvkRuleWgpuBufferTooLarge,
    R::CuvkRuleWgpuTextureNotPaired,
    R::CuvkRuleWgpuImageNotShared,
    R::CuvkRuleWgpuReentrantSubmit,
    R::CuvkRuleIpcBadMagic,
    R::CuvkRuleIpcUnsupportedVersion,
    R::CuvkRuleIpcUnknownKind,
    R::CuvkRuleIpcTruncatedHeader,
    R::CuvkRuleIpcTruncatedBody,
    R::CuvkRuleIpcBodyLengthMismatch,
    R::CuvkRuleIpcTrailingBytes,
    R::CuvkRuleIpcFdCountMismatch,
    R::CuvkRuleIpcFdsNotAsAnnounced,
    R::CuvkRuleIpcZeroSize,
    R::CuvkRuleIpcRangeOverflow,
    R::CuvkRuleIpcRangeExceedsMemory,
    R::CuvkRuleIpcPartialElement,
    R::CuvkRuleIpcZeroExtent,
    R::CuvkRuleIpcMipLevels,
    R::CuvkRuleIpcBadBool,
    R::CuvkRuleIpcUnknownRole,
    R::CuvkRuleIpcTruncatedControl,
    R::CuvkRuleIpcTooManyFds,
    R::CuvkRuleIpcUnsupported,
    R::CuvkRuleIpcWrongDevice,
    R::CuvkRuleIpcDriverMismatch,
    R::CuvkRuleIpcWrongFdKind,
    R::CuvkRuleIpcSizeLie,
    R::CuvkRuleIpcUnexpectedMessage,
    R::CuvkRuleIpcNoSuchObject,
    R::CuvkRuleIpcDescriptionRefused,
    R::CuvkRuleIpcStillConnected,
    R::CuvkRuleIpcOneProducer,
    R::CuvkRuleIpcUnknownImageShape,
    R::CuvkRulePeerNoAccess,
    R::CuvkRulePeerDeviceMismatch,
    R::CuvkRulePeerSizeMismatch,
    R::CuvkRulePeerRankLost,
    R::CuvkRulePeerAborted,
    R::CuvkRulePeerRankOutOfRange,
];

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;

    /// The C enum and cuvk's rules are the same codes with the same names: a rule cuvk adds
    /// without a constant here (or a constant whose code cuvk gave another rule) fails this.
    /// The same refusal as the Python and Bevy tests: the C ABI reports cuvk's rule code.
    #[test]
    fn refusals_carry_cuvks_rule_as_every_front_end_does() {
        let e = Error::Layout(cuvk::LayoutError::ZeroSize { offset: 64 });
        assert_eq!(rule_of(&e) as u32, cuvk::Rule::LayoutZeroSize.code());
        assert_eq!(rule_of(&e), R::CuvkRuleLayoutZeroSize);
        let t = Error::Timeout {
            what: "x",
            timeout_ns: 5,
        };
        assert_eq!(rule_of(&t), R::CuvkRuleNone);
    }

    #[test]
    fn every_cuvk_rule_has_its_constant_of_the_same_code_and_name() {
        assert_eq!(ALL.len(), cuvk::Rule::ALL.len());
        for &rule in cuvk::Rule::ALL {
            let c = from_code(rule.code());
            let Some(c) = c else {
                panic!(
                    "cuvk::Rule::{rule:?} ({:#06x}) has no CuvkRule",
                    rule.code()
                );
            };
            assert_eq!(format!("{c:?}"), format!("CuvkRule{rule:?}"));
        }
    }
}
