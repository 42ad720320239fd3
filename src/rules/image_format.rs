//! Pure rules for images shared with CUDA: the table of Vulkan formats CUDA arrays can hold,
//! image shapes (2D, 2D array, 3D, cube) and their rules, and the CUDA array descriptor an
//! image implies.
//!
//! Nothing here touches a GPU: every rule is a function of numbers and enums, unit- and
//! property-tested everywhere (see the tests at the bottom of this file).
//!
//! # The format table
//!
//! [`FORMATS`] lists every format a [`crate::SharedImage`] can have: 8-, 16- and 32-bit
//! UNORM / SNORM / UINT / SINT / SFLOAT formats with 1, 2 and 4 channels (where Vulkan has
//! them), and `B8G8R8A8_UNORM`. Each maps to a CUDA array format and channel count:
//! UNORM formats are unsigned-integer arrays that textures read as normalized floats, SNORM
//! formats signed-integer arrays read as normalized floats, UINT/SINT formats integer arrays
//! read as integers, SFLOAT formats `HALF` / `FLOAT` arrays. Surfaces always load and store
//! the raw texel bits. `B8G8R8A8_UNORM` is an 8-bit 4-channel array whose channels CUDA sees
//! in memory order (`.x` is blue).
//!
//! Refused, each with the reason in the error ([`FormatRefusal`]): sRGB formats (CUDA arrays
//! have no sRGB format; cuvk does not rely on the texture-only sRGB decode), depth and
//! stencil formats (no CUDA array format; depth images use layouts CUDA cannot read),
//! block-compressed formats (surfaces cannot write them and their import is unverified),
//! 3-channel formats (CUDA arrays have 1, 2 or 4 channels), and everything else not in the
//! table (packed formats, 64-bit channels, multi-planar formats).

use std::fmt;

use ash::vk;
use cudarc::driver::sys::CUarray_format;

/// How a format's channels are interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NumericClass {
    /// Unsigned normalized: stored as unsigned integers, read as floats in [0, 1].
    Unorm,
    /// Signed normalized: stored as signed integers, read as floats in [-1, 1].
    Snorm,
    /// Unsigned integers.
    Uint,
    /// Signed integers.
    Sint,
    /// IEEE floats (16 or 32 bits).
    Float,
}

impl NumericClass {
    /// Whether texture reads return integers (UINT / SINT) rather than floats.
    pub fn reads_as_integer(self) -> bool {
        matches!(self, NumericClass::Uint | NumericClass::Sint)
    }
}

/// One row of the format table: a Vulkan format and the CUDA array format that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FormatInfo {
    /// The Vulkan format.
    pub format: vk::Format,
    /// The CUDA array format of each channel.
    pub cuda_format: CUarray_format,
    /// Number of channels (1, 2 or 4: CUDA arrays have no 3-channel formats).
    pub channels: u32,
    /// Bits per channel (8, 16 or 32).
    pub bits: u32,
    /// How the channels are interpreted.
    pub class: NumericClass,
}

impl FormatInfo {
    /// Bytes per texel.
    pub fn texel_bytes(&self) -> u32 {
        self.channels * self.bits / 8
    }
}

const fn row(
    format: vk::Format,
    cuda_format: CUarray_format,
    channels: u32,
    bits: u32,
    class: NumericClass,
) -> FormatInfo {
    FormatInfo {
        format,
        cuda_format,
        channels,
        bits,
        class,
    }
}

use CUarray_format as Cf;
use NumericClass as Nc;

/// Every format a shared image can have, with the CUDA array format and channel count it maps
/// to ([`format_info`] looks one up):
///
/// | bits | UNORM | SNORM | UINT | SINT | SFLOAT |
/// |---|---|---|---|---|---|
/// | 8 | `R8`, `R8G8`, `R8G8B8A8`, `B8G8R8A8` | `R8`, `R8G8`, `R8G8B8A8` | `R8`, `R8G8`, `R8G8B8A8` | `R8`, `R8G8`, `R8G8B8A8` | |
/// | 16 | `R16`, `R16G16`, `R16G16B16A16` | same | same | same | same |
/// | 32 | | | `R32`, `R32G32`, `R32G32B32A32` | same | same |
///
/// UNORM formats are unsigned-integer arrays that textures read as normalized floats, SNORM
/// signed-integer arrays read as normalized floats, UINT/SINT integer arrays read as
/// integers, SFLOAT `HALF` / `FLOAT` arrays. Surfaces load and store the raw texel bits.
/// `B8G8R8A8_UNORM` is an 8-bit 4-channel array whose channels CUDA sees in memory order
/// (`.x` is blue).
///
/// Refused, with the reason in the error ([`FormatRefusal`]): sRGB formats (CUDA arrays have
/// no sRGB format), depth and stencil formats, block-compressed formats, 3-channel formats
/// (CUDA arrays have 1, 2 or 4 channels), and everything else (packed formats, 64-bit
/// channels, multi-planar formats).
pub const FORMATS: &[FormatInfo] = &[
    row(
        vk::Format::R8_UNORM,
        Cf::CU_AD_FORMAT_UNSIGNED_INT8,
        1,
        8,
        Nc::Unorm,
    ),
    row(
        vk::Format::R8G8_UNORM,
        Cf::CU_AD_FORMAT_UNSIGNED_INT8,
        2,
        8,
        Nc::Unorm,
    ),
    row(
        vk::Format::R8G8B8A8_UNORM,
        Cf::CU_AD_FORMAT_UNSIGNED_INT8,
        4,
        8,
        Nc::Unorm,
    ),
    row(
        vk::Format::B8G8R8A8_UNORM,
        Cf::CU_AD_FORMAT_UNSIGNED_INT8,
        4,
        8,
        Nc::Unorm,
    ),
    row(
        vk::Format::R8_SNORM,
        Cf::CU_AD_FORMAT_SIGNED_INT8,
        1,
        8,
        Nc::Snorm,
    ),
    row(
        vk::Format::R8G8_SNORM,
        Cf::CU_AD_FORMAT_SIGNED_INT8,
        2,
        8,
        Nc::Snorm,
    ),
    row(
        vk::Format::R8G8B8A8_SNORM,
        Cf::CU_AD_FORMAT_SIGNED_INT8,
        4,
        8,
        Nc::Snorm,
    ),
    row(
        vk::Format::R8_UINT,
        Cf::CU_AD_FORMAT_UNSIGNED_INT8,
        1,
        8,
        Nc::Uint,
    ),
    row(
        vk::Format::R8G8_UINT,
        Cf::CU_AD_FORMAT_UNSIGNED_INT8,
        2,
        8,
        Nc::Uint,
    ),
    row(
        vk::Format::R8G8B8A8_UINT,
        Cf::CU_AD_FORMAT_UNSIGNED_INT8,
        4,
        8,
        Nc::Uint,
    ),
    row(
        vk::Format::R8_SINT,
        Cf::CU_AD_FORMAT_SIGNED_INT8,
        1,
        8,
        Nc::Sint,
    ),
    row(
        vk::Format::R8G8_SINT,
        Cf::CU_AD_FORMAT_SIGNED_INT8,
        2,
        8,
        Nc::Sint,
    ),
    row(
        vk::Format::R8G8B8A8_SINT,
        Cf::CU_AD_FORMAT_SIGNED_INT8,
        4,
        8,
        Nc::Sint,
    ),
    row(
        vk::Format::R16_UNORM,
        Cf::CU_AD_FORMAT_UNSIGNED_INT16,
        1,
        16,
        Nc::Unorm,
    ),
    row(
        vk::Format::R16G16_UNORM,
        Cf::CU_AD_FORMAT_UNSIGNED_INT16,
        2,
        16,
        Nc::Unorm,
    ),
    row(
        vk::Format::R16G16B16A16_UNORM,
        Cf::CU_AD_FORMAT_UNSIGNED_INT16,
        4,
        16,
        Nc::Unorm,
    ),
    row(
        vk::Format::R16_SNORM,
        Cf::CU_AD_FORMAT_SIGNED_INT16,
        1,
        16,
        Nc::Snorm,
    ),
    row(
        vk::Format::R16G16_SNORM,
        Cf::CU_AD_FORMAT_SIGNED_INT16,
        2,
        16,
        Nc::Snorm,
    ),
    row(
        vk::Format::R16G16B16A16_SNORM,
        Cf::CU_AD_FORMAT_SIGNED_INT16,
        4,
        16,
        Nc::Snorm,
    ),
    row(
        vk::Format::R16_UINT,
        Cf::CU_AD_FORMAT_UNSIGNED_INT16,
        1,
        16,
        Nc::Uint,
    ),
    row(
        vk::Format::R16G16_UINT,
        Cf::CU_AD_FORMAT_UNSIGNED_INT16,
        2,
        16,
        Nc::Uint,
    ),
    row(
        vk::Format::R16G16B16A16_UINT,
        Cf::CU_AD_FORMAT_UNSIGNED_INT16,
        4,
        16,
        Nc::Uint,
    ),
    row(
        vk::Format::R16_SINT,
        Cf::CU_AD_FORMAT_SIGNED_INT16,
        1,
        16,
        Nc::Sint,
    ),
    row(
        vk::Format::R16G16_SINT,
        Cf::CU_AD_FORMAT_SIGNED_INT16,
        2,
        16,
        Nc::Sint,
    ),
    row(
        vk::Format::R16G16B16A16_SINT,
        Cf::CU_AD_FORMAT_SIGNED_INT16,
        4,
        16,
        Nc::Sint,
    ),
    row(
        vk::Format::R16_SFLOAT,
        Cf::CU_AD_FORMAT_HALF,
        1,
        16,
        Nc::Float,
    ),
    row(
        vk::Format::R16G16_SFLOAT,
        Cf::CU_AD_FORMAT_HALF,
        2,
        16,
        Nc::Float,
    ),
    row(
        vk::Format::R16G16B16A16_SFLOAT,
        Cf::CU_AD_FORMAT_HALF,
        4,
        16,
        Nc::Float,
    ),
    row(
        vk::Format::R32_UINT,
        Cf::CU_AD_FORMAT_UNSIGNED_INT32,
        1,
        32,
        Nc::Uint,
    ),
    row(
        vk::Format::R32G32_UINT,
        Cf::CU_AD_FORMAT_UNSIGNED_INT32,
        2,
        32,
        Nc::Uint,
    ),
    row(
        vk::Format::R32G32B32A32_UINT,
        Cf::CU_AD_FORMAT_UNSIGNED_INT32,
        4,
        32,
        Nc::Uint,
    ),
    row(
        vk::Format::R32_SINT,
        Cf::CU_AD_FORMAT_SIGNED_INT32,
        1,
        32,
        Nc::Sint,
    ),
    row(
        vk::Format::R32G32_SINT,
        Cf::CU_AD_FORMAT_SIGNED_INT32,
        2,
        32,
        Nc::Sint,
    ),
    row(
        vk::Format::R32G32B32A32_SINT,
        Cf::CU_AD_FORMAT_SIGNED_INT32,
        4,
        32,
        Nc::Sint,
    ),
    row(
        vk::Format::R32_SFLOAT,
        Cf::CU_AD_FORMAT_FLOAT,
        1,
        32,
        Nc::Float,
    ),
    row(
        vk::Format::R32G32_SFLOAT,
        Cf::CU_AD_FORMAT_FLOAT,
        2,
        32,
        Nc::Float,
    ),
    row(
        vk::Format::R32G32B32A32_SFLOAT,
        Cf::CU_AD_FORMAT_FLOAT,
        4,
        32,
        Nc::Float,
    ),
];

/// Why a format is not in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FormatRefusal {
    /// `VK_FORMAT_UNDEFINED`.
    Undefined,
    /// An sRGB format.
    Srgb,
    /// A depth and/or stencil format.
    DepthStencil,
    /// A block-compressed format (BC, ETC2, EAC, ASTC, PVRTC).
    BlockCompressed,
    /// A format with 3 channels.
    ThreeChannels,
    /// Any other format (packed, 64-bit channels, multi-planar, ...).
    NotInTable,
}

impl fmt::Display for FormatRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FormatRefusal::Undefined => "VK_FORMAT_UNDEFINED is not a format",
            FormatRefusal::Srgb => {
                "CUDA arrays have no sRGB format (cuvk does not rely on the texture-only \
                 CU_TRSF_SRGB decode); use the UNORM format and convert in the shader and kernel"
            }
            FormatRefusal::DepthStencil => {
                "CUDA arrays have no depth or stencil format and depth images are kept in \
                 layouts CUDA cannot read; copy depth into an R32_SFLOAT image"
            }
            FormatRefusal::BlockCompressed => {
                "CUDA surfaces cannot write block-compressed texels and their import is \
                 unverified; decompress into an uncompressed image"
            }
            FormatRefusal::ThreeChannels => {
                "CUDA arrays have 1, 2 or 4 channels, never 3; use the 4-channel format"
            }
            FormatRefusal::NotInTable => "it is not in cuvk's format table",
        })
    }
}

/// Whether `raw` lies in `lo..=hi` of raw format values.
fn within(raw: i32, lo: vk::Format, hi: vk::Format) -> bool {
    (lo.as_raw()..=hi.as_raw()).contains(&raw)
}

/// Why `format` is refused (it is not in [`FORMATS`]).
pub fn refusal_of(format: vk::Format) -> FormatRefusal {
    use vk::Format as F;
    let raw = format.as_raw();
    if format == F::UNDEFINED {
        return FormatRefusal::Undefined;
    }
    if within(raw, F::D16_UNORM, F::D32_SFLOAT_S8_UINT) {
        return FormatRefusal::DepthStencil;
    }
    if within(raw, F::BC1_RGB_UNORM_BLOCK, F::ASTC_12X12_SRGB_BLOCK)
        || within(
            raw,
            F::PVRTC1_2BPP_UNORM_BLOCK_IMG,
            F::PVRTC2_4BPP_SRGB_BLOCK_IMG,
        )
        || within(raw, F::ASTC_4X4_SFLOAT_BLOCK, F::ASTC_12X12_SFLOAT_BLOCK)
    {
        return FormatRefusal::BlockCompressed;
    }
    let srgb = [
        F::R8_SRGB,
        F::R8G8_SRGB,
        F::R8G8B8_SRGB,
        F::B8G8R8_SRGB,
        F::R8G8B8A8_SRGB,
        F::B8G8R8A8_SRGB,
        F::A8B8G8R8_SRGB_PACK32,
    ];
    if srgb.contains(&format) {
        return FormatRefusal::Srgb;
    }
    if within(raw, F::R8G8B8_UNORM, F::B8G8R8_SRGB)
        || within(raw, F::R16G16B16_UNORM, F::R16G16B16_SFLOAT)
        || within(raw, F::R32G32B32_UINT, F::R32G32B32_SFLOAT)
        || within(raw, F::R64G64B64_UINT, F::R64G64B64_SFLOAT)
    {
        return FormatRefusal::ThreeChannels;
    }
    FormatRefusal::NotInTable
}

/// The table row of `format`, or [`ImageError::UnsupportedFormat`] naming it, the reason and
/// every supported format.
pub fn format_info(format: vk::Format) -> Result<FormatInfo, ImageError> {
    FORMATS
        .iter()
        .find(|f| f.format == format)
        .copied()
        .ok_or(ImageError::UnsupportedFormat {
            format,
            reason: refusal_of(format),
        })
}

/// The names of every supported format, comma-separated (for messages).
pub fn supported_formats() -> String {
    FORMATS
        .iter()
        .map(|f| format!("{:?}", f.format))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The shape of an image: what `VkImageType`, `arrayLayers` and `CUBE_COMPATIBLE` say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageKind {
    /// A 2D image (one layer).
    D2,
    /// A 2D array image of `layers` layers (a layered CUDA array).
    D2Array {
        /// Number of array layers (at least 1).
        layers: u32,
    },
    /// A 3D image `depth` texels deep (one layer).
    D3 {
        /// Depth in texels (at least 1).
        depth: u32,
    },
    /// A cube map: a square 2D image of 6 layers, created `CUBE_COMPATIBLE` (a CUDA cubemap).
    Cube,
}

impl ImageKind {
    /// Number of array layers (6 for a cube, 1 for 2D and 3D).
    pub fn layers(&self) -> u32 {
        match *self {
            ImageKind::D2Array { layers } => layers,
            ImageKind::Cube => 6,
            ImageKind::D2 | ImageKind::D3 { .. } => 1,
        }
    }

    /// Depth in texels (1 except for 3D).
    pub fn depth(&self) -> u32 {
        match *self {
            ImageKind::D3 { depth } => depth,
            _ => 1,
        }
    }

    /// The Vulkan image type.
    pub fn image_type(&self) -> vk::ImageType {
        match self {
            ImageKind::D3 { .. } => vk::ImageType::TYPE_3D,
            _ => vk::ImageType::TYPE_2D,
        }
    }

    /// The kind a `VkImageCreateInfo` describes (image type, depth, array layers, and whether
    /// it is `CUBE_COMPATIBLE`), with the rules Vulkan and CUDA share: a 3D image has one
    /// layer, a cube has exactly 6 layers and is 2D, a 2D image has depth 1, counts are at
    /// least 1. A 2D image of one layer is [`ImageKind::D2`].
    pub fn from_vulkan(
        image_type: vk::ImageType,
        depth: u32,
        layers: u32,
        cube: bool,
    ) -> Result<Self, ImageError> {
        // Zero counts pass through to `ImageShape::validate`, which reports them with the
        // whole extent (a 2D array of 0 layers, a 3D image of depth 0).
        match image_type {
            vk::ImageType::TYPE_3D if cube => Err(ImageError::CubeNot2D),
            vk::ImageType::TYPE_3D if layers != 1 => Err(ImageError::LayersOn3D { layers }),
            vk::ImageType::TYPE_3D => Ok(ImageKind::D3 { depth }),
            vk::ImageType::TYPE_2D if depth != 1 => Err(ImageError::DepthOn2D { depth }),
            vk::ImageType::TYPE_2D if cube && layers != 6 => Err(ImageError::CubeLayers { layers }),
            vk::ImageType::TYPE_2D if cube => Ok(ImageKind::Cube),
            vk::ImageType::TYPE_2D if layers == 1 => Ok(ImageKind::D2),
            vk::ImageType::TYPE_2D => Ok(ImageKind::D2Array { layers }),
            other => Err(ImageError::UnsupportedImageType { image_type: other }),
        }
    }
}

/// The shape an image is created with, as the rules take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ImageShape {
    /// 2D, 2D array, 3D or cube.
    pub kind: ImageKind,
    /// Width in texels.
    pub width: u32,
    /// Height in texels.
    pub height: u32,
    /// Number of mip levels.
    pub mip_levels: u32,
}

/// Number of levels in a full mip chain of `width × height × depth` (down to 1×1×1).
pub fn full_mip_chain(width: u32, height: u32, depth: u32) -> u32 {
    let largest = width.max(height).max(depth).max(1);
    32 - largest.leading_zeros()
}

impl ImageShape {
    /// Every shape rule: no zero extent (width, height, depth, layers), a cube is square,
    /// and 1 ≤ mip levels ≤ the full chain.
    pub fn validate(&self) -> Result<(), ImageError> {
        let (depth, layers) = (self.kind.depth(), self.kind.layers());
        if self.width == 0 || self.height == 0 || depth == 0 || layers == 0 {
            return Err(ImageError::ZeroExtent {
                width: self.width,
                height: self.height,
                depth,
                layers,
            });
        }
        if self.kind == ImageKind::Cube && self.width != self.height {
            return Err(ImageError::CubeNotSquare {
                width: self.width,
                height: self.height,
            });
        }
        let max = full_mip_chain(self.width, self.height, depth);
        if self.mip_levels == 0 || self.mip_levels > max {
            return Err(ImageError::MipLevels {
                requested: self.mip_levels,
                max,
                width: self.width,
                height: self.height,
                depth,
            });
        }
        Ok(())
    }

    /// Width, height and depth of mip level `level` (each halved per level, at least 1; the
    /// depth of 2D, array and cube images stays 1).
    pub fn level_extent(&self, level: u32) -> (u32, u32, u32) {
        let shrink = |v: u32| v.checked_shr(level).unwrap_or(0).max(1);
        (
            shrink(self.width),
            shrink(self.height),
            shrink(self.kind.depth()),
        )
    }

    /// Bytes of mip level `level` (all layers), tightly packed, with `texel_bytes` per texel.
    pub fn level_bytes(&self, level: u32, texel_bytes: u32) -> u64 {
        let (w, h, d) = self.level_extent(level);
        u64::from(w)
            * u64::from(h)
            * u64::from(d)
            * u64::from(self.kind.layers())
            * u64::from(texel_bytes)
    }

    /// The rule only sharing with CUDA adds to [`Self::validate`]: layered images (2D arrays,
    /// cubes) have one mip level (measured: see [`ImageError::LayeredMipChain`]).
    pub fn validate_for_cuda(&self) -> Result<(), ImageError> {
        self.validate()?;
        let layered = matches!(self.kind, ImageKind::D2Array { .. } | ImageKind::Cube);
        if layered && self.mip_levels > 1 {
            return Err(ImageError::LayeredMipChain {
                kind: self.kind,
                mip_levels: self.mip_levels,
            });
        }
        Ok(())
    }

    /// Checks `level` names one of the image's mip levels.
    pub fn check_level(&self, level: u32) -> Result<(), ImageError> {
        if level < self.mip_levels {
            Ok(())
        } else {
            Err(ImageError::LevelOutOfRange {
                level,
                levels: self.mip_levels,
            })
        }
    }

    /// Checks `first_layer .. first_layer + count` lies in the image's layers (count ≥ 1).
    pub fn check_layers(&self, first_layer: u32, count: u32) -> Result<(), ImageError> {
        let layers = self.kind.layers();
        match first_layer.checked_add(count) {
            Some(end) if count > 0 && end <= layers => Ok(()),
            _ => Err(ImageError::LayerOutOfRange {
                first_layer,
                count,
                layers,
            }),
        }
    }
}

/// What the device allows for one format, usage and tiling (from
/// `vkGetPhysicalDeviceImageFormatProperties2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ImageLimits {
    /// `maxExtent`.
    pub max_extent: (u32, u32, u32),
    /// `maxMipLevels`.
    pub max_mip_levels: u32,
    /// `maxArrayLayers`.
    pub max_array_layers: u32,
}

impl ImageShape {
    /// Checks the shape against the device's limits for its format and usage.
    pub fn check_limits(&self, limits: &ImageLimits) -> Result<(), ImageError> {
        let (mw, mh, md) = limits.max_extent;
        let checks = [
            ("width", self.width, mw),
            ("height", self.height, mh),
            ("depth", self.kind.depth(), md),
            ("array layers", self.kind.layers(), limits.max_array_layers),
            ("mip levels", self.mip_levels, limits.max_mip_levels),
        ];
        for (what, value, limit) in checks {
            if value > limit {
                return Err(ImageError::OverLimit { what, value, limit });
            }
        }
        Ok(())
    }
}

/// Checks `usage` has every flag of `needed`, or says what needs it.
pub fn check_usage(
    usage: vk::ImageUsageFlags,
    needed: vk::ImageUsageFlags,
    needed_for: &'static str,
    vuid: Option<&'static str>,
) -> Result<(), ImageError> {
    if usage.contains(needed) {
        Ok(())
    } else {
        Err(ImageError::MissingUsage {
            needed,
            usage,
            needed_for,
            vuid,
        })
    }
}

/// `CUDA_ARRAY3D_*` flags of a CUDA array descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ArrayFlags(pub u32);

impl ArrayFlags {
    /// `CUDA_ARRAY3D_LAYERED`: a layered (array) image; `Depth` counts layers.
    pub const LAYERED: Self = Self(cudarc::driver::sys::CUDA_ARRAY3D_LAYERED);
    /// `CUDA_ARRAY3D_SURFACE_LDST`: surface loads and stores allowed (Vulkan `STORAGE` usage).
    pub const SURFACE_LDST: Self = Self(cudarc::driver::sys::CUDA_ARRAY3D_SURFACE_LDST);
    /// `CUDA_ARRAY3D_CUBEMAP`: a cube map; `Depth` is 6.
    pub const CUBEMAP: Self = Self(cudarc::driver::sys::CUDA_ARRAY3D_CUBEMAP);
    /// `CUDA_ARRAY3D_COLOR_ATTACHMENT`: the image is a render target (Vulkan
    /// `COLOR_ATTACHMENT` usage).
    pub const COLOR_ATTACHMENT: Self = Self(cudarc::driver::sys::CUDA_ARRAY3D_COLOR_ATTACHMENT);

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for ArrayFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// A `CUDA_ARRAY3D_DESCRIPTOR`: what `cuExternalMemoryGetMappedMipmappedArray` is told about
/// level 0 of the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArrayDesc {
    /// `Width` in texels.
    pub width: u64,
    /// `Height` in texels.
    pub height: u64,
    /// `Depth`: 0 for a 2D image, the depth of a 3D image, the layers of a layered or cube image.
    pub depth: u64,
    /// `Format`.
    pub format: CUarray_format,
    /// `NumChannels`.
    pub channels: u32,
    /// `Flags`.
    pub flags: ArrayFlags,
}

/// The CUDA array descriptor of level 0 of an image of `shape`, `format` and `usage`: format
/// and channels from the table, extent from the shape (2D: depth 0; array and cube: depth =
/// layers with `LAYERED` / `CUBEMAP`), `SURFACE_LDST` for `STORAGE` usage and
/// `COLOR_ATTACHMENT` for `COLOR_ATTACHMENT` usage.
pub fn array_desc(
    shape: &ImageShape,
    format: &FormatInfo,
    usage: vk::ImageUsageFlags,
) -> ArrayDesc {
    let (depth, mut flags) = match shape.kind {
        ImageKind::D2 => (0, ArrayFlags::default()),
        ImageKind::D2Array { layers } => (u64::from(layers), ArrayFlags::LAYERED),
        ImageKind::D3 { depth } => (u64::from(depth), ArrayFlags::default()),
        ImageKind::Cube => (6, ArrayFlags::CUBEMAP),
    };
    if usage.contains(vk::ImageUsageFlags::STORAGE) {
        flags = flags | ArrayFlags::SURFACE_LDST;
    }
    if usage.contains(vk::ImageUsageFlags::COLOR_ATTACHMENT) {
        flags = flags | ArrayFlags::COLOR_ATTACHMENT;
    }
    ArrayDesc {
        width: u64::from(shape.width),
        height: u64::from(shape.height),
        depth,
        format: format.cuda_format,
        channels: format.channels,
        flags,
    }
}

/// Checks a caller's CUDA descriptor equals the one the image implies, naming the first field
/// that differs (CUDA itself answers a mismatch with `CUDA_ERROR_INVALID_VALUE`, or maps the
/// wrong texels).
pub fn check_descriptor(image: &ArrayDesc, given: &ArrayDesc) -> Result<(), ImageError> {
    let fields: [(&'static str, String, String); 6] = [
        ("Width", image.width.to_string(), given.width.to_string()),
        ("Height", image.height.to_string(), given.height.to_string()),
        ("Depth", image.depth.to_string(), given.depth.to_string()),
        (
            "Format",
            format!("{:?}", image.format),
            format!("{:?}", given.format),
        ),
        (
            "NumChannels",
            image.channels.to_string(),
            given.channels.to_string(),
        ),
        (
            "Flags",
            format!("{:#x}", image.flags.0),
            format!("{:#x}", given.flags.0),
        ),
    ];
    match fields.into_iter().find(|(_, a, b)| a != b) {
        Some((field, image, given)) => Err(ImageError::DescriptorMismatch {
            field,
            image,
            given,
        }),
        None => Ok(()),
    }
}

// The table: the enum, and beside each variant its rule (see `error::table`).
crate::error::table::refusals! {
    rows texture_rules, path "Image.Texture.";
    /// Which texture rule a request broke.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum TextureRule {
        /// Linear filtering of a texture that reads integers.
        LinearFilterNeedsFloatReads => {
            /// Linear filtering of a texture that reads integers.
            TextureLinearFilterNeedsFloatReads = 0x0301
        },
        /// A texture over the whole mip chain with unnormalized coordinates.
        MipChainNeedsNormalizedCoordinates => {
            /// A texture over the whole mip chain with unnormalized coordinates.
            TextureMipChainNeedsNormalizedCoordinates = 0x0302
        },
        /// Wrap or mirror addressing with unnormalized coordinates.
        WrapNeedsNormalizedCoordinates => {
            /// Wrap or mirror addressing with unnormalized coordinates.
            TextureWrapNeedsNormalizedCoordinates = 0x0303
        },
        /// Raw integer reads asked of a format that already reads integers or floats.
        RawReadsNeedNormalizedFormat => {
            /// Raw integer reads of a format that is not UNORM/SNORM.
            TextureRawReadsNeedNormalizedFormat = 0x0304
        },
        /// Normalized float reads of 32-bit integers.
        NormalizedReadsNeedNarrowIntegers => {
            /// Normalized float reads of 32-bit integers.
            TextureNormalizedReadsNeedNarrowIntegers = 0x0305
        },
    }
}

impl fmt::Display for TextureRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TextureRule::LinearFilterNeedsFloatReads => {
                "linear filtering needs a texture that reads floats; this one reads integers \
                 (a UINT/SINT format, or raw reads of a UNORM/SNORM format)"
            }
            TextureRule::MipChainNeedsNormalizedCoordinates => {
                "a texture over the whole mip chain needs normalized coordinates (CUDA's rule \
                 for mipmapped arrays)"
            }
            TextureRule::WrapNeedsNormalizedCoordinates => {
                "wrap and mirror addressing need normalized coordinates (CUDA's rule)"
            }
            TextureRule::RawReadsNeedNormalizedFormat => {
                "raw integer reads apply only to UNORM/SNORM formats"
            }
            TextureRule::NormalizedReadsNeedNarrowIntegers => {
                "32-bit integer arrays read only as integers (CU_TRSF_READ_AS_INTEGER): CUDA \
                 normalizes 8- and 16-bit integers only"
            }
        })
    }
}

// The table: the enum, and beside each variant its rule (see `error::table`).
crate::error::table::refusals! {
    rows image_rules, path "Image.";
    /// A broken image rule, with the numbers that broke it.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum ImageError {
        /// The format is not in [`FORMATS`].
        #[error(
            "format {format:?} cannot be shared with CUDA: {reason}; supported formats: {}",
            supported_formats()
        )]
        UnsupportedFormat {
            /// The format asked for.
            format: vk::Format,
            /// Why it is refused.
            reason: FormatRefusal,
        } => {
            /// A format outside cuvk's table of formats CUDA can share.
            ImageUnsupportedFormat = 0x0201
        },
        /// The image type is neither 2D nor 3D.
        #[error(
            "image type {image_type:?} cannot be shared: only 2D (plain, array, cube) and 3D images"
        )]
        UnsupportedImageType {
            /// The type asked for.
            image_type: vk::ImageType,
        } => {
            /// An image type other than 2D and 3D.
            ImageUnsupportedType = 0x0202
        },
        /// A zero width, height, depth or layer count.
        #[error(
            "zero extent: width {width}, height {height}, depth {depth}, layers {layers}; \
             each must be at least 1"
        )]
        ZeroExtent {
            /// Width asked for.
            width: u32,
            /// Height asked for.
            height: u32,
            /// Depth asked for.
            depth: u32,
            /// Layers asked for.
            layers: u32,
        } => {
            /// A zero width, height, depth or layer count.
            ImageZeroExtent = 0x0203
        },
        /// A cube map whose faces are not square.
        #[error("a cube map must be square: width {width} ≠ height {height}")]
        CubeNotSquare {
            /// Width asked for.
            width: u32,
            /// Height asked for.
            height: u32,
        } => {
            /// A cube map whose faces are not square.
            ImageCubeNotSquare = 0x0204
        },
        /// A cube map without exactly 6 layers.
        #[error("a cube map has exactly 6 layers, not {layers} (cube arrays are not supported)")]
        CubeLayers {
            /// Layers asked for.
            layers: u32,
        } => {
            /// A cube map without exactly 6 layers.
            ImageCubeLayers = 0x0205
        },
        /// A cube-compatible 3D image.
        #[error("a cube map must be a 2D image, not 3D")]
        CubeNot2D => {
            /// A cube map that is not a 2D image.
            ImageCubeNot2d = 0x0206
        },
        /// A 3D image with more than one layer.
        #[error("a 3D image has exactly 1 array layer, not {layers}")]
        LayersOn3D {
            /// Layers asked for.
            layers: u32,
        } => {
            /// A 3D image with more than one layer.
            ImageLayersOn3d = 0x0207
        },
        /// A 2D image with a depth above 1.
        #[error("a 2D image has depth 1, not {depth} (use a 3D image)")]
        DepthOn2D {
            /// Depth asked for.
            depth: u32,
        } => {
            /// A 2D image with a depth above 1.
            ImageDepthOn2d = 0x0208
        },
        /// Zero mip levels, or more than the full chain.
        #[error(
            "{requested} mip levels for {width}×{height}×{depth}: between 1 and {max} (the full chain)"
        )]
        MipLevels {
            /// Levels asked for.
            requested: u32,
            /// The full chain's length.
            max: u32,
            /// Width.
            width: u32,
            /// Height.
            height: u32,
            /// Depth.
            depth: u32,
        } => {
            /// Zero mip levels, or more than the full chain.
            ImageMipLevels = 0x0209
        },
        /// A dimension above what the device allows for this format, usage and tiling.
        #[error(
            "{what} {value} exceeds the device's limit of {limit} for this format, usage and \
             tiling (vkGetPhysicalDeviceImageFormatProperties2)"
        )]
        OverLimit {
            /// Which dimension ("width", "height", "depth", "array layers", "mip levels").
            what: &'static str,
            /// The value asked for.
            value: u32,
            /// The device's limit.
            limit: u32,
        } => {
            /// A dimension above the device's limit for the format, usage and tiling.
            ImageOverLimit = 0x020A
        },
        /// A LINEAR-tiled image where a CUDA array mapping was asked.
        #[error(
            "the image has LINEAR tiling: CUDA maps only OPTIMAL-tiled images as arrays \
             (share a LINEAR image as a pitched buffer instead)"
        )]
        LinearTiling => {
            /// A LINEAR-tiled image where CUDA needs an OPTIMAL one.
            ImageLinearTiling = 0x020B
        },
        /// The image lacks a usage the request needs.
        #[error("{needed_for} needs the image usage {needed:?}; the image was created with {usage:?}")]
        MissingUsage {
            /// The usage needed.
            needed: vk::ImageUsageFlags,
            /// The image's usage.
            usage: vk::ImageUsageFlags,
            /// What needs it.
            needed_for: &'static str,
            /// The Vulkan valid-usage ID that requires it, where there is one.
            vuid: Option<&'static str>,
        } => {
            /// The image lacks a usage the request needs (e.g. `STORAGE` for a surface).
            ImageMissingUsage = 0x020C
        },
        /// The CUDA array was mapped without `CUDA_ARRAY3D_SURFACE_LDST`.
        #[error(
            "the CUDA array was mapped without CUDA_ARRAY3D_SURFACE_LDST (the image has no \
             STORAGE usage): no surface object"
        )]
        NoSurfaceFlag => {
            /// A surface of a CUDA array mapped without surface load/store.
            ImageNoSurfaceFlag = 0x020D
        },
        /// A layered image (2D array or cube) with more than one mip level.
        #[error(
            "a {kind:?} image with {mip_levels} mip levels cannot be shared with CUDA: measured on \
             NVIDIA driver 580, CUDA's mipmapped-array view of a layered Vulkan image with more \
             than one level places layers 1.. elsewhere than Vulkan does (only layer 0 matched); \
             use one mip level for arrays and cubes (2D and 3D mip chains are fine)"
        )]
        LayeredMipChain {
            /// The image kind.
            kind: ImageKind,
            /// Mip levels asked for.
            mip_levels: u32,
        } => {
            /// A layered image (array or cube) with more than one mip level.
            ImageLayeredMipChain = 0x020E
        },
        /// A mip level the image does not have.
        #[error("mip level {level} is out of range: the image has {levels} levels (0..{levels})")]
        LevelOutOfRange {
            /// Level asked for.
            level: u32,
            /// Levels the image has.
            levels: u32,
        } => {
            /// A mip level the image does not have.
            ImageLevelOutOfRange = 0x020F
        },
        /// Array layers the image does not have.
        #[error(
            "array layers {first_layer}..{first_layer}+{count} are out of range: the image has \
             {layers} layers (and a range has at least 1)"
        )]
        LayerOutOfRange {
            /// First layer asked for.
            first_layer: u32,
            /// Number of layers asked for.
            count: u32,
            /// Layers the image has.
            layers: u32,
        } => {
            /// Array layers the image does not have.
            ImageLayerOutOfRange = 0x0210
        },
        /// A caller's CUDA array descriptor differs from the one the image implies.
        #[error(
            "CUDA array descriptor field {field} is {given}, but the image implies {image} \
             (cuExternalMemoryGetMappedMipmappedArray needs an exact match)"
        )]
        DescriptorMismatch {
            /// The `CUDA_ARRAY3D_DESCRIPTOR` field.
            field: &'static str,
            /// What the image implies.
            image: String,
            /// What was given.
            given: String,
        } => {
            /// A CUDA array descriptor that differs from the one the image implies.
            ImageDescriptorMismatch = 0x0211
        },
        /// A host buffer whose size is not the level's size.
        #[error("host buffer of {given} bytes for a mip level of {expected} bytes")]
        HostSize {
            /// The level's size (all layers, tightly packed).
            expected: u64,
            /// The buffer's size.
            given: u64,
        } => {
            /// A host buffer whose size is not the mip level's.
            ImageHostSize = 0x0212
        },
        /// A texture request broke a rule.
        #[error("texture: {0}")]
        Texture(TextureRule) => ..,
        /// An image without any usage.
        #[error("an image needs at least one usage flag")]
        NoUsage => {
            /// An image without any usage.
            ImageNoUsage = 0x0213
        },
    }
}

impl ImageError {
    /// The Vulkan valid-usage ID of the broken rule, where there is one.
    pub fn vuid(&self) -> Option<&'static str> {
        match self {
            ImageError::MissingUsage { vuid, .. } => *vuid,
            _ => None,
        }
    }

    /// Whether this says "cuvk or CUDA cannot do this" rather than "the call is wrong".
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self,
            ImageError::UnsupportedFormat { .. } | ImageError::UnsupportedImageType { .. }
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn shape(kind: ImageKind, width: u32, height: u32, mip_levels: u32) -> ImageShape {
        ImageShape {
            kind,
            width,
            height,
            mip_levels,
        }
    }

    #[test]
    fn table_is_consistent() {
        for f in FORMATS {
            assert!(matches!(f.channels, 1 | 2 | 4), "{f:?}");
            assert!(matches!(f.bits, 8 | 16 | 32), "{f:?}");
            let cuda_bits = match f.cuda_format {
                Cf::CU_AD_FORMAT_UNSIGNED_INT8 | Cf::CU_AD_FORMAT_SIGNED_INT8 => 8,
                Cf::CU_AD_FORMAT_UNSIGNED_INT16
                | Cf::CU_AD_FORMAT_SIGNED_INT16
                | Cf::CU_AD_FORMAT_HALF => 16,
                _ => 32,
            };
            assert_eq!(cuda_bits, f.bits, "{f:?}");
            let signed = matches!(
                f.cuda_format,
                Cf::CU_AD_FORMAT_SIGNED_INT8
                    | Cf::CU_AD_FORMAT_SIGNED_INT16
                    | Cf::CU_AD_FORMAT_SIGNED_INT32
            );
            assert_eq!(signed, matches!(f.class, Nc::Snorm | Nc::Sint), "{f:?}");
            let float = matches!(
                f.cuda_format,
                Cf::CU_AD_FORMAT_HALF | Cf::CU_AD_FORMAT_FLOAT
            );
            assert_eq!(float, f.class == Nc::Float, "{f:?}");
            // The name says what the row says.
            let name = format!("{:?}", f.format);
            let suffix = match f.class {
                Nc::Unorm => "UNORM",
                Nc::Snorm => "SNORM",
                Nc::Uint => "UINT",
                Nc::Sint => "SINT",
                Nc::Float => "SFLOAT",
            };
            assert!(name.ends_with(suffix), "{name}");
            assert_eq!(
                name.matches(&f.bits.to_string()).count() as u32,
                f.channels,
                "{name}"
            );
            assert_eq!(format_info(f.format), Ok(*f));
        }
        // No duplicates; 8/16/32-bit in 1, 2, 4 channels for every class Vulkan has.
        let mut seen: Vec<vk::Format> = FORMATS.iter().map(|f| f.format).collect();
        seen.sort_by_key(|f| f.as_raw());
        seen.dedup();
        assert_eq!(seen.len(), FORMATS.len());
        for bits in [8, 16, 32] {
            for channels in [1, 2, 4] {
                for class in [Nc::Unorm, Nc::Snorm, Nc::Uint, Nc::Sint, Nc::Float] {
                    let vulkan_has =
                        !matches!((bits, class), (8, Nc::Float) | (32, Nc::Unorm | Nc::Snorm));
                    let n = FORMATS
                        .iter()
                        .filter(|f| f.bits == bits && f.channels == channels && f.class == class)
                        .count();
                    assert_eq!(n >= 1, vulkan_has, "{bits}-bit {channels}ch {class:?}");
                }
            }
        }
    }

    #[test]
    fn refusals_name_the_format_the_reason_and_the_table() {
        let cases = [
            (vk::Format::UNDEFINED, FormatRefusal::Undefined),
            (vk::Format::R8G8B8A8_SRGB, FormatRefusal::Srgb),
            (vk::Format::B8G8R8A8_SRGB, FormatRefusal::Srgb),
            (vk::Format::D32_SFLOAT, FormatRefusal::DepthStencil),
            (vk::Format::D24_UNORM_S8_UINT, FormatRefusal::DepthStencil),
            (vk::Format::S8_UINT, FormatRefusal::DepthStencil),
            (
                vk::Format::BC1_RGB_UNORM_BLOCK,
                FormatRefusal::BlockCompressed,
            ),
            (vk::Format::BC7_SRGB_BLOCK, FormatRefusal::BlockCompressed),
            (
                vk::Format::ASTC_8X8_UNORM_BLOCK,
                FormatRefusal::BlockCompressed,
            ),
            (
                vk::Format::ETC2_R8G8B8_UNORM_BLOCK,
                FormatRefusal::BlockCompressed,
            ),
            (vk::Format::R8G8B8_UNORM, FormatRefusal::ThreeChannels),
            (vk::Format::B8G8R8_UINT, FormatRefusal::ThreeChannels),
            (vk::Format::R32G32B32_SFLOAT, FormatRefusal::ThreeChannels),
            (vk::Format::R16G16B16_SFLOAT, FormatRefusal::ThreeChannels),
            (
                vk::Format::A2B10G10R10_UNORM_PACK32,
                FormatRefusal::NotInTable,
            ),
            (vk::Format::R64_SFLOAT, FormatRefusal::NotInTable),
            (
                vk::Format::G8_B8R8_2PLANE_420_UNORM,
                FormatRefusal::NotInTable,
            ),
            (
                vk::Format::B10G11R11_UFLOAT_PACK32,
                FormatRefusal::NotInTable,
            ),
        ];
        for (format, reason) in cases {
            let e = format_info(format).unwrap_err();
            assert_eq!(e, ImageError::UnsupportedFormat { format, reason });
            let msg = e.to_string();
            assert!(msg.contains(&format!("{format:?}")), "{msg}");
            assert!(
                msg.contains("R8G8B8A8_UNORM") && msg.contains("R32G32B32A32_SFLOAT"),
                "{msg}"
            );
            assert!(e.is_unsupported());
        }
        assert!(format_info(vk::Format::R8G8B8_UNORM)
            .unwrap_err()
            .to_string()
            .contains("never 3"));
    }

    #[test]
    fn kinds_from_vulkan() {
        use vk::ImageType as T;
        assert_eq!(
            ImageKind::from_vulkan(T::TYPE_2D, 1, 1, false),
            Ok(ImageKind::D2)
        );
        assert_eq!(
            ImageKind::from_vulkan(T::TYPE_2D, 1, 4, false),
            Ok(ImageKind::D2Array { layers: 4 })
        );
        assert_eq!(
            ImageKind::from_vulkan(T::TYPE_2D, 1, 6, true),
            Ok(ImageKind::Cube)
        );
        assert_eq!(
            ImageKind::from_vulkan(T::TYPE_3D, 8, 1, false),
            Ok(ImageKind::D3 { depth: 8 })
        );
        assert_eq!(
            ImageKind::from_vulkan(T::TYPE_3D, 8, 2, false),
            Err(ImageError::LayersOn3D { layers: 2 })
        );
        assert_eq!(
            ImageKind::from_vulkan(T::TYPE_2D, 1, 5, true),
            Err(ImageError::CubeLayers { layers: 5 })
        );
        assert_eq!(
            ImageKind::from_vulkan(T::TYPE_3D, 6, 1, true),
            Err(ImageError::CubeNot2D)
        );
        assert_eq!(
            ImageKind::from_vulkan(T::TYPE_2D, 4, 1, false),
            Err(ImageError::DepthOn2D { depth: 4 })
        );
        assert_eq!(
            ImageKind::from_vulkan(T::TYPE_2D, 1, 0, false),
            Ok(ImageKind::D2Array { layers: 0 })
        );
        assert!(matches!(
            shape(ImageKind::D2Array { layers: 0 }, 4, 4, 1).validate(),
            Err(ImageError::ZeroExtent { layers: 0, .. })
        ));
        assert_eq!(
            ImageKind::from_vulkan(T::TYPE_1D, 1, 1, false),
            Err(ImageError::UnsupportedImageType {
                image_type: T::TYPE_1D
            })
        );
    }

    #[test]
    fn shape_rules() {
        assert!(shape(ImageKind::D2, 256, 128, 9).validate().is_ok());
        assert_eq!(
            shape(ImageKind::D2, 256, 128, 10).validate(),
            Err(ImageError::MipLevels {
                requested: 10,
                max: 9,
                width: 256,
                height: 128,
                depth: 1
            })
        );
        assert!(matches!(
            shape(ImageKind::D2, 16, 16, 0).validate(),
            Err(ImageError::MipLevels { requested: 0, .. })
        ));
        assert!(matches!(
            shape(ImageKind::D2, 0, 16, 1).validate(),
            Err(ImageError::ZeroExtent { width: 0, .. })
        ));
        assert!(matches!(
            shape(ImageKind::D3 { depth: 0 }, 4, 4, 1).validate(),
            Err(ImageError::ZeroExtent { depth: 0, .. })
        ));
        assert!(matches!(
            shape(ImageKind::D2Array { layers: 0 }, 4, 4, 1).validate(),
            Err(ImageError::ZeroExtent { layers: 0, .. })
        ));
        assert_eq!(
            shape(ImageKind::Cube, 64, 32, 1).validate(),
            Err(ImageError::CubeNotSquare {
                width: 64,
                height: 32
            })
        );
        // A 3D chain counts depth too.
        assert!(shape(ImageKind::D3 { depth: 512 }, 4, 4, 10)
            .validate()
            .is_ok());
        let s = shape(ImageKind::D2Array { layers: 3 }, 64, 48, 3);
        assert_eq!(s.level_extent(2), (16, 12, 1));
        assert_eq!(s.level_bytes(2, 4), 16 * 12 * 3 * 4);
        assert!(s.check_level(2).is_ok());
        assert_eq!(
            s.check_level(3),
            Err(ImageError::LevelOutOfRange {
                level: 3,
                levels: 3
            })
        );
        assert!(s.check_layers(0, 3).is_ok() && s.check_layers(2, 1).is_ok());
        for (first, count) in [(3, 1), (2, 2), (0, 0), (u32::MAX, 2)] {
            assert!(matches!(
                s.check_layers(first, count),
                Err(ImageError::LayerOutOfRange { .. })
            ));
        }
        let limits = ImageLimits {
            max_extent: (16384, 16384, 1),
            max_mip_levels: 15,
            max_array_layers: 2048,
        };
        assert!(shape(ImageKind::D2, 16384, 1, 1)
            .check_limits(&limits)
            .is_ok());
        let e = shape(ImageKind::D2, 16385, 1, 1)
            .check_limits(&limits)
            .unwrap_err();
        assert_eq!(
            e,
            ImageError::OverLimit {
                what: "width",
                value: 16385,
                limit: 16384
            }
        );
        assert!(e.to_string().contains("16385") && e.to_string().contains("16384"));
        assert!(matches!(
            shape(ImageKind::D2Array { layers: 4096 }, 4, 4, 1).check_limits(&limits),
            Err(ImageError::OverLimit {
                what: "array layers",
                ..
            })
        ));
    }

    #[test]
    fn descriptors_follow_the_image() {
        let rgba8 = format_info(vk::Format::R8G8B8A8_UNORM).unwrap();
        let u = vk::ImageUsageFlags::STORAGE | vk::ImageUsageFlags::SAMPLED;
        let d = array_desc(&shape(ImageKind::D2, 64, 32, 1), &rgba8, u);
        assert_eq!(
            d,
            ArrayDesc {
                width: 64,
                height: 32,
                depth: 0,
                format: Cf::CU_AD_FORMAT_UNSIGNED_INT8,
                channels: 4,
                flags: ArrayFlags::SURFACE_LDST
            }
        );
        let d = array_desc(
            &shape(ImageKind::D2Array { layers: 5 }, 8, 8, 1),
            &rgba8,
            vk::ImageUsageFlags::COLOR_ATTACHMENT,
        );
        assert_eq!(d.depth, 5);
        assert_eq!(d.flags, ArrayFlags::LAYERED | ArrayFlags::COLOR_ATTACHMENT);
        let d = array_desc(&shape(ImageKind::Cube, 8, 8, 1), &rgba8, u);
        assert_eq!(
            (d.depth, d.flags),
            (6, ArrayFlags::CUBEMAP | ArrayFlags::SURFACE_LDST)
        );
        let d = array_desc(
            &shape(ImageKind::D3 { depth: 7 }, 8, 8, 1),
            &rgba8,
            vk::ImageUsageFlags::SAMPLED,
        );
        assert_eq!((d.depth, d.flags), (7, ArrayFlags::default()));

        let image = array_desc(&shape(ImageKind::D2, 64, 32, 1), &rgba8, u);
        assert!(check_descriptor(&image, &image).is_ok());
        let wrong = ArrayDesc {
            channels: 2,
            ..image
        };
        let e = check_descriptor(&image, &wrong).unwrap_err();
        assert_eq!(
            e,
            ImageError::DescriptorMismatch {
                field: "NumChannels",
                image: "4".into(),
                given: "2".into()
            }
        );
        let no_surface = ArrayDesc {
            flags: ArrayFlags::default(),
            ..image
        };
        assert!(check_usage(u, vk::ImageUsageFlags::STORAGE, "x", None).is_ok());
        let e = check_usage(
            vk::ImageUsageFlags::SAMPLED,
            vk::ImageUsageFlags::STORAGE,
            "a surface",
            None,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("STORAGE") && e.to_string().contains("a surface"),
            "{e}"
        );
        assert!(check_descriptor(&image, &no_surface)
            .unwrap_err()
            .to_string()
            .contains("Flags is 0x0"));
    }

    fn any_kind() -> impl Strategy<Value = ImageKind> {
        prop_oneof![
            Just(ImageKind::D2),
            (0u32..8).prop_map(|layers| ImageKind::D2Array { layers }),
            (0u32..64).prop_map(|depth| ImageKind::D3 { depth }),
            Just(ImageKind::Cube),
        ]
    }

    proptest! {
        #[test]
        fn accepted_shapes_obey_every_rule(
            kind in any_kind(),
            width in 0u32..5000,
            height in 0u32..5000,
            mip_levels in 0u32..16,
        ) {
            let s = shape(kind, width, height, mip_levels);
            match s.validate() {
                Ok(()) => {
                    prop_assert!(width > 0 && height > 0 && kind.depth() > 0 && kind.layers() > 0);
                    prop_assert!(kind != ImageKind::Cube || width == height);
                    prop_assert!(mip_levels >= 1);
                    // The last level is at least 1 texel and the next would not exist.
                    let (w, h, d) = s.level_extent(mip_levels - 1);
                    prop_assert!(w >= 1 && h >= 1 && d >= 1);
                    let largest = width.max(height).max(kind.depth());
                    prop_assert!(largest >> (mip_levels - 1) >= 1);
                }
                Err(ImageError::ZeroExtent { .. }) => {
                    prop_assert!(width == 0 || height == 0 || kind.depth() == 0 || kind.layers() == 0)
                }
                Err(ImageError::CubeNotSquare { .. }) => prop_assert!(kind == ImageKind::Cube && width != height),
                Err(ImageError::MipLevels { max, .. }) => {
                    prop_assert!(mip_levels == 0 || mip_levels > max);
                    let largest = width.max(height).max(kind.depth());
                    prop_assert!(largest >> (max - 1) == 1);
                }
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
        }

        #[test]
        fn descriptors_match_shape_and_usage(
            kind in any_kind(),
            size in 1u32..4096,
            storage in any::<bool>(),
            attachment in any::<bool>(),
            index in 0usize..FORMATS.len(),
        ) {
            let f = FORMATS[index];
            let mut usage = vk::ImageUsageFlags::SAMPLED;
            if storage { usage |= vk::ImageUsageFlags::STORAGE; }
            if attachment { usage |= vk::ImageUsageFlags::COLOR_ATTACHMENT; }
            let d = array_desc(&shape(kind, size, size, 1), &f, usage);
            prop_assert_eq!(d.flags.contains(ArrayFlags::SURFACE_LDST), storage);
            prop_assert_eq!(d.flags.contains(ArrayFlags::COLOR_ATTACHMENT), attachment);
            prop_assert_eq!(d.flags.contains(ArrayFlags::LAYERED), matches!(kind, ImageKind::D2Array { .. }));
            prop_assert_eq!(d.flags.contains(ArrayFlags::CUBEMAP), kind == ImageKind::Cube);
            let depth = match kind {
                ImageKind::D2 => 0,
                ImageKind::D2Array { layers } => u64::from(layers),
                ImageKind::D3 { depth } => u64::from(depth),
                ImageKind::Cube => 6,
            };
            prop_assert_eq!(d.depth, depth);
            prop_assert_eq!((d.format, d.channels), (f.cuda_format, f.channels));
            prop_assert!(check_descriptor(&d, &d).is_ok());
        }

        #[test]
        fn every_raw_format_is_in_the_table_or_refused_with_a_reason(raw in -10i32..200) {
            let format = vk::Format::from_raw(raw);
            match format_info(format) {
                Ok(f) => prop_assert!(FORMATS.contains(&f)),
                Err(ImageError::UnsupportedFormat { format: named, reason }) => {
                    prop_assert_eq!(named, format);
                    prop_assert_eq!(reason, refusal_of(format));
                }
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
        }
    }
}
