//! Refusals and failures of the wgpu integration (feature `wgpu`): each variant is one rule a
//! request broke, with its values as typed fields, or one wgpu call that failed. Everything
//! here is the feature's, but the table's rules (`Rule` is the same with every feature).

#[cfg(feature = "wgpu")]
use ash::vk;

#[cfg(feature = "wgpu")]
/// Which wgpu object a [`WgpuError::WrongBackend`] refusal is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WgpuObject {
    /// A `wgpu::Adapter`.
    Adapter,
    /// A `wgpu::Device`.
    Device,
    /// A `wgpu::Queue`.
    Queue,
}

#[cfg(feature = "wgpu")]
impl std::fmt::Display for WgpuObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WgpuObject::Adapter => "adapter",
            WgpuObject::Device => "device",
            WgpuObject::Queue => "queue",
        })
    }
}

#[cfg(feature = "wgpu")]
/// Why a Vulkan image cannot be presented to wgpu as a texture ([`WgpuError::NotTexture`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotTextureReason {
    /// The format is not in cuvk's shared format table ([`crate::FORMATS`]), whose formats all
    /// have wgpu counterparts.
    NotInTable,
    /// A square 2D array of a multiple of 6 layers: wgpu allows cube views of such a texture,
    /// which need a `CUBE_COMPATIBLE` image.
    CubeViewableArray {
        /// The array's layer count.
        layers: u32,
    },
    /// A 3D image with `COLOR_ATTACHMENT` usage: wgpu renders into 3D slices through 2D views,
    /// which need a `2D_ARRAY_COMPATIBLE` image, which cuvk does not create.
    RenderTarget3d,
    /// The wgpu format needs wgpu features the device was opened without.
    FeaturesNotEnabled {
        /// The wgpu format.
        format: ::wgpu::TextureFormat,
        /// The features it needs and the device lacks.
        missing: ::wgpu::Features,
    },
    /// wgpu does not allow these usages of the format on this device.
    UsageNotAllowed {
        /// The wgpu format.
        format: ::wgpu::TextureFormat,
        /// The usages wgpu does not allow.
        usage: ::wgpu::TextureUsages,
    },
}

#[cfg(feature = "wgpu")]
impl std::fmt::Display for NotTextureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotTextureReason::NotInTable => {
                f.write_str("the format is not in cuvk's shared format table (cuvk::FORMATS)")
            }
            NotTextureReason::CubeViewableArray { layers } => write!(
                f,
                "a square array of {layers} layers (6k) may be viewed as a cube by wgpu, which \
                 needs a CUBE_COMPATIBLE image; create it as ImageKind::Cube or change the layers"
            ),
            NotTextureReason::RenderTarget3d => f.write_str(
                "a 3D render attachment needs a 2D_ARRAY_COMPATIBLE image, which cuvk does not \
                 create",
            ),
            NotTextureReason::FeaturesNotEnabled { format, missing } => write!(
                f,
                "{format:?} needs the wgpu features {missing:?}, not enabled on the device"
            ),
            NotTextureReason::UsageNotAllowed { format, usage } => write!(
                f,
                "wgpu does not allow usage {usage:?} of {format:?} on this device"
            ),
        }
    }
}

// The table: the enum, and beside each variant its rule (see `error::table`).
crate::error::table::refusals! {
    #![cfg(feature = "wgpu")]
    rows wgpu_rules, path "Wgpu.";
    /// A broken wgpu rule, or a failed wgpu call.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum WgpuError {
        /// A wgpu object is not on the Vulkan backend, the only one cuvk shares memory through.
        #[error(
            "the wgpu {object} is on the {backend} backend; cuvk shares memory and semaphores \
             through Vulkan only"
        )]
        WrongBackend {
            /// Which object.
            object: WgpuObject,
            /// The backend it is on.
            backend: &'static str,
        } => {
            /// A wgpu object that is not on the Vulkan backend.
            WgpuWrongBackend = 0x0B01
        },
        /// A wgpu call failed (its own message).
        #[error("{call} failed: {message}")]
        Call {
            /// The wgpu (or wgpu-hal) function.
            call: &'static str,
            /// What it reported.
            message: String,
        } => _,
        /// A wgpu future did not complete at once: wgpu-core's futures on native backends do;
        /// cuvk drives them without an executor.
        #[error("the future of {call} did not complete at once (not a native wgpu-core backend)")]
        NotReady {
            /// The wgpu function whose future it was.
            call: &'static str,
        } => _,
        /// wgpu gave no recording Vulkan command encoder (`CommandEncoder::as_hal_mut`).
        #[error(
            "wgpu gave no recording Vulkan command encoder for raw commands \
             (CommandEncoder::as_hal_mut: the encoder is invalid or not on Vulkan)"
        )]
        NoRawEncoder => {
            /// wgpu gave no recording Vulkan command encoder.
            WgpuNoRawEncoder = 0x0B02
        },
        /// The adapter does not offer wgpu features the device descriptor requires.
        #[error("the adapter does not offer the wgpu features {missing:?}")]
        MissingFeatures {
            /// The features required and not offered.
            missing: ::wgpu::Features,
        } => {
            /// wgpu features the adapter does not offer.
            WgpuMissingFeatures = 0x0B03
        },
        /// Experimental wgpu features required without
        /// `DeviceDescriptor::experimental_features` enabled.
        #[error(
            "the experimental wgpu features {features:?} need \
             DeviceDescriptor::experimental_features enabled"
        )]
        ExperimentalFeatures {
            /// The experimental features required.
            features: ::wgpu::Features,
        } => {
            /// Experimental wgpu features required without enabling them.
            WgpuExperimentalFeatures = 0x0B04
        },
        /// A wgpu limit beyond what the adapter offers.
        #[error("the wgpu limit {limit} = {requested} is beyond the adapter's {adapter}")]
        LimitBeyondAdapter {
            /// The limit's name in `wgpu::Limits`.
            limit: &'static str,
            /// The value required.
            requested: u64,
            /// The adapter's value.
            adapter: u64,
        } => {
            /// A wgpu limit beyond what the adapter offers.
            WgpuLimitBeyondAdapter = 0x0B05
        },
        /// A Vulkan image cuvk cannot present to wgpu as a texture.
        #[error("a {format:?} image cannot be a wgpu texture: {reason}")]
        NotTexture {
            /// The image's Vulkan format.
            format: vk::Format,
            /// Why not.
            reason: NotTextureReason,
        } => {
            /// A Vulkan image cuvk cannot present to wgpu as a texture.
            WgpuNotTexture = 0x0B06
        },
        /// Vulkan image usages that have no wgpu texture usage (input, depth-stencil, transient
        /// attachments...).
        #[error("image usage {usage:?} has no wgpu texture usage")]
        ImageUsageNotInWgpu {
            /// The usages without a counterpart.
            usage: vk::ImageUsageFlags,
        } => {
            /// Vulkan image usages with no wgpu texture usage.
            WgpuImageUsageNotInWgpu = 0x0B07
        },
        /// A wgpu buffer usage that is empty.
        #[error("the wgpu buffer usage is empty")]
        EmptyBufferUsage => {
            /// An empty wgpu buffer usage.
            WgpuEmptyBufferUsage = 0x0B08
        },
        /// `MAP_READ` / `MAP_WRITE` on a buffer whose memory is cuvk's: wgpu-hal never maps an
        /// externally owned buffer.
        #[error(
            "wgpu usage {usage:?}: wgpu cannot map a buffer whose memory it does not own (wgpu-hal: \
             externally owned buffers are not mappable); copy into a mappable wgpu buffer"
        )]
        MappableUsage {
            /// The usage asked for.
            usage: ::wgpu::BufferUsages,
        } => {
            /// MAP_READ / MAP_WRITE on a buffer whose memory is cuvk's.
            WgpuMappableUsage = 0x0B09
        },
        /// Acceleration-structure inputs, which cuvk does not share.
        #[error("wgpu usage {usage:?}: acceleration-structure inputs are not shared by cuvk")]
        AccelerationStructureUsage {
            /// The usage asked for.
            usage: ::wgpu::BufferUsages,
        } => {
            /// Acceleration-structure inputs, which cuvk does not share.
            WgpuAccelerationStructureUsage = 0x0B0A
        },
        /// wgpu buffer usages cuvk does not know how to create a Vulkan buffer for.
        #[error("wgpu usage {usage:?} is not one cuvk knows how to create a Vulkan buffer for")]
        UnknownBufferUsage {
            /// The unknown usages.
            usage: ::wgpu::BufferUsages,
        } => {
            /// wgpu buffer usages cuvk cannot create a Vulkan buffer for.
            WgpuUnknownBufferUsage = 0x0B0B
        },
        /// A Vulkan buffer that lacks a Vulkan usage the wgpu usage needs.
        #[error(
            "wgpu usage {wgpu_usage:?} needs Vulkan usage {needed:?}; the buffer has {have:?} \
             (missing {:?})",
            *needed & !*have
        )]
        MissingVulkanUsage {
            /// The wgpu usage asked for.
            wgpu_usage: ::wgpu::BufferUsages,
            /// The Vulkan usage it needs ([`crate::wgpu::vk_buffer_usage`]).
            needed: vk::BufferUsageFlags,
            /// The Vulkan usage the buffer was created with.
            have: vk::BufferUsageFlags,
        } => {
            /// A Vulkan buffer without a usage the wgpu usage needs.
            WgpuMissingVulkanUsage = 0x0B0C
        },
        /// A buffer larger than the wgpu device's `max_buffer_size`.
        #[error("a {size} byte buffer is larger than the wgpu device's max_buffer_size {max}")]
        BufferTooLarge {
            /// The buffer's size.
            size: u64,
            /// The device's `max_buffer_size`.
            max: u64,
        } => {
            /// A buffer larger than the wgpu device's max_buffer_size.
            WgpuBufferTooLarge = 0x0B0D
        },
        /// A `wgpu::Texture` that does not wrap the Vulkan image paired with it.
        #[error("a wgpu texture does not wrap the Vulkan image paired with it")]
        TextureNotPaired => {
            /// A wgpu texture that cuvk did not pair with a shared image.
            WgpuTextureNotPaired = 0x0B0E
        },
        /// An image whose memory is not shared needs no ownership transfer.
        #[error(
            "an image whose memory is not shared (not external) needs no queue-family ownership \
             transfer"
        )]
        ImageNotShared => {
            /// An image that is not shared with the wgpu device.
            WgpuImageNotShared = 0x0B0F
        },
        /// wgpu accepted a submission call but did not hand the work to the driver (a
        /// validation error, which went to wgpu's error handler): its semaphore operations were
        /// withdrawn and no timeline value was recorded, so the same values may be used again.
        #[error(
            "wgpu did not submit the work (its error handler has the reason); the submission's \
             {withdrawn} semaphore operations were withdrawn and no timeline value was recorded"
        )]
        NotSubmitted {
            /// How many semaphore waits and signals were withdrawn from wgpu's queue.
            withdrawn: usize,
        } => _,
        /// A cuvk submission on a wgpu queue made from inside another one on the same thread (a
        /// wgpu callback that wgpu ran during the outer submission).
        #[error(
            "a cuvk submission on a wgpu queue was made from inside another one on this thread \
             (from a wgpu callback run during it): submit after the callback returns"
        )]
        ReentrantSubmit => {
            /// A cuvk submission from inside a wgpu callback of another.
            WgpuReentrantSubmit = 0x0B10
        },
    }
}

#[cfg(feature = "wgpu")]
impl WgpuError {
    /// What kind of failure this is.
    pub fn kind(&self) -> crate::ErrorKind {
        use crate::ErrorKind as K;
        match self {
            WgpuError::WrongBackend { .. }
            | WgpuError::MissingFeatures { .. }
            | WgpuError::LimitBeyondAdapter { .. }
            | WgpuError::AccelerationStructureUsage { .. } => K::Unsupported,
            WgpuError::NotTexture { reason, .. } => match reason {
                NotTextureReason::FeaturesNotEnabled { .. } => K::NotEnabled,
                NotTextureReason::NotInTable
                | NotTextureReason::CubeViewableArray { .. }
                | NotTextureReason::RenderTarget3d
                | NotTextureReason::UsageNotAllowed { .. } => K::Unsupported,
            },
            WgpuError::Call { .. } | WgpuError::NotReady { .. } | WgpuError::NoRawEncoder => {
                K::Driver
            }
            WgpuError::ExperimentalFeatures { .. }
            | WgpuError::ImageUsageNotInWgpu { .. }
            | WgpuError::EmptyBufferUsage
            | WgpuError::MappableUsage { .. }
            | WgpuError::UnknownBufferUsage { .. }
            | WgpuError::MissingVulkanUsage { .. }
            | WgpuError::BufferTooLarge { .. }
            | WgpuError::TextureNotPaired
            | WgpuError::ImageNotShared
            | WgpuError::NotSubmitted { .. }
            | WgpuError::ReentrantSubmit => K::InvalidInput,
        }
    }
}

#[cfg(all(test, feature = "wgpu"))]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_rule_and_its_values() {
        let e = WgpuError::MissingVulkanUsage {
            wgpu_usage: ::wgpu::BufferUsages::VERTEX,
            needed: vk::BufferUsageFlags::VERTEX_BUFFER,
            have: vk::BufferUsageFlags::STORAGE_BUFFER,
        };
        let m = e.to_string();
        assert!(m.contains("VERTEX_BUFFER") && m.contains("missing"), "{m}");
        assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
        let e = WgpuError::BufferTooLarge { size: 10, max: 4 };
        assert!(e.to_string().contains("10 byte") && e.to_string().contains(" 4"));
        let e = WgpuError::NotTexture {
            format: vk::Format::R8G8B8A8_SRGB,
            reason: NotTextureReason::NotInTable,
        };
        assert!(e.to_string().contains("R8G8B8A8_SRGB"), "{e}");
        assert_eq!(e.kind(), crate::ErrorKind::Unsupported);
        let e = WgpuError::NotTexture {
            format: vk::Format::R16_UNORM,
            reason: NotTextureReason::FeaturesNotEnabled {
                format: ::wgpu::TextureFormat::R16Unorm,
                missing: ::wgpu::Features::TEXTURE_FORMAT_16BIT_NORM,
            },
        };
        assert_eq!(e.kind(), crate::ErrorKind::NotEnabled);
        let e = WgpuError::WrongBackend {
            object: WgpuObject::Queue,
            backend: "gl",
        };
        assert!(
            e.to_string().contains("wgpu queue is on the gl backend"),
            "{e}"
        );
        let e = crate::Error::from(WgpuError::LimitBeyondAdapter {
            limit: "max_buffer_size",
            requested: 8,
            adapter: 4,
        });
        assert_eq!(e.kind(), crate::ErrorKind::Unsupported);
        assert!(e.to_string().contains("max_buffer_size = 8"), "{e}");
    }
}
