//! The one rulebook for what crosses a process boundary: a received (or published) description
//! is checked with the rules an in-process request follows (`rules::layout`,
//! `rules::image_format`, the memory rules), so a description that lies is refused with the
//! `LayoutError`, `ImageError` or `MemoryError` a user of the in-process API already knows.
//! What is the wire's own (its magic, version, kinds, descriptor counts, booleans, the image
//! shape byte against the extent) stays an [`IpcError`].

use ash::vk;

use super::wire::{BufferInfo, ImageInfo, ImageShape, Message};
use crate::error::{Error, IpcError, MemoryError, Result};
use crate::rules::layout::{self, AlignmentRule, LayoutError};
use crate::vulkan::Dedicated;
use crate::{DeviceObject, ImageDesc, ImageKind};

/// Checks a buffer or image description (other messages carry no placement): what
/// [`check_buffer`] and [`image_desc`] check.
pub(crate) fn check_message(msg: &Message) -> Result<()> {
    match msg {
        Message::Buffer(info) => check_buffer(info),
        Message::Image(info) => image_desc(info).map(drop),
        _ => Ok(()),
    }
}

/// A buffer's range lies in its memory (`Layout.ZeroSize`, `Layout.Overflow`,
/// `Layout.OutOfBounds`), its element format is one DLPack describes (`Layout.ElementFormat`)
/// and it holds whole rows of it (`Layout.PartialElement`).
pub(crate) fn check_buffer(info: &BufferInfo) -> Result<()> {
    layout::check_range(info.offset, info.size, "memory", info.memory_size)?;
    info.element.check()?;
    let row_bytes = info.element.row_bytes();
    if !info.size.is_multiple_of(row_bytes) {
        return Err(LayoutError::PartialElement {
            bytes: info.size,
            element_size: row_bytes,
        }
        .into());
    }
    Ok(())
}

/// The image description an [`ImageInfo`] stands for, checked as an in-process image is: its
/// kind from the Vulkan image type, depth, layers and cube flag
/// ([`ImageKind::from_vulkan`]: `Image.DepthOn2d`, `Image.LayersOn3d`, `Image.CubeNot2d`,
/// `Image.CubeLayers`), its extent and mip chain (`Image.ZeroExtent`, `Image.CubeNotSquare`,
/// `Image.MipLevels`), OPTIMAL tiling (`Image.LinearTiling`: CUDA maps arrays), no create
/// flag but `CUBE_COMPATIBLE` (`Argument.UnknownImageFlags`), its offset inside its memory
/// (`Layout.OutOfBounds`); and the wire's shape byte agreeing with all that
/// ([`IpcError::ShapeContradicted`]).
pub(crate) fn image_desc(info: &ImageInfo) -> Result<ImageDesc> {
    let cube = vk::ImageCreateFlags::CUBE_COMPATIBLE;
    if !(info.flags & !cube).is_empty() {
        return Err(Error::UnknownImageFlags {
            flags: info.flags.as_raw(),
            known: cube.as_raw(),
        });
    }
    if info.tiling != vk::ImageTiling::OPTIMAL {
        return Err(crate::ImageError::LinearTiling.into());
    }
    let image_type = match info.shape {
        ImageShape::D3 => vk::ImageType::TYPE_3D,
        _ => vk::ImageType::TYPE_2D,
    };
    let made = ImageKind::from_vulkan(
        image_type,
        info.depth,
        info.array_layers,
        info.flags.contains(cube),
    )?;
    let kind = match (info.shape, made) {
        (ImageShape::D2, ImageKind::D2)
        | (ImageShape::D2Array, ImageKind::D2Array { .. })
        | (ImageShape::D3, ImageKind::D3 { .. })
        | (ImageShape::Cube, ImageKind::Cube) => made,
        // A 2D array of one layer (a layered CUDA array) is what `from_vulkan` calls 2D.
        (ImageShape::D2Array, ImageKind::D2) => ImageKind::D2Array { layers: 1 },
        (shape, kind) => {
            return Err(IpcError::ShapeContradicted {
                id: info.id,
                shape,
                kind,
            }
            .into())
        }
    };
    let desc = ImageDesc {
        kind,
        format: info.format,
        extent: vk::Extent2D {
            width: info.width,
            height: info.height,
        },
        mip_levels: info.mip_levels,
        usage: info.usage,
        dedicated: if info.dedicated {
            Dedicated::Always
        } else {
            Dedicated::Auto
        },
    };
    desc.shape().validate()?;
    layout::check_range(info.offset, 1, "memory", info.memory_size)?;
    Ok(desc)
}

/// A received resource's place in the received memory, against what the importing driver
/// requires of it (`size`, `alignment`, `requires_dedicated`), checked before anything is
/// imported with the rules of an in-process bind: the offset aligned (`Layout.Misaligned`),
/// the resource inside the memory (`Layout.OutOfBounds`), a dedicated allocation where the
/// driver requires one (`Memory.DedicatedRequired`), and a dedicated allocation bound at 0
/// (`Layout.DedicatedOffset`) and exactly its resource's size (`Memory.DedicatedSize`,
/// VUID-VkMemoryDedicatedAllocateInfo-buffer-02965 / -image-02964).
pub(crate) fn check_import(
    object: DeviceObject,
    (offset, memory_size, dedicated): (u64, u64, bool),
    (size, alignment, requires_dedicated): (u64, u64, bool),
) -> Result<()> {
    let rule = match object {
        DeviceObject::Image => AlignmentRule::VulkanImage,
        _ => AlignmentRule::VulkanBuffer,
    };
    layout::check_aligned("offset", offset, alignment.max(1), rule)?;
    layout::check_range(offset, size, "memory", memory_size)?;
    if requires_dedicated && !dedicated {
        return Err(MemoryError::DedicatedRequired { object }.into());
    }
    if dedicated && offset != 0 {
        return Err(LayoutError::DedicatedOffset { offset }.into());
    }
    if dedicated && memory_size != size {
        return Err(MemoryError::DedicatedSize {
            required: size,
            given: memory_size,
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::ipc::wire::tests::samples;

    /// A buffer of rows of `row_bytes` bytes.
    fn buffer(size: u64, offset: u64, memory_size: u64, row_bytes: u32) -> BufferInfo {
        let Message::Buffer(b) = samples()[1] else {
            unreachable!()
        };
        BufferInfo {
            size,
            offset,
            memory_size,
            element: crate::ElementFormat {
                columns: row_bytes,
                ..crate::ElementFormat::BYTES
            },
            ..b
        }
    }

    fn image(width: u32, height: u32, depth: u32, layers: u32, mips: u32) -> ImageInfo {
        let Message::Image(i) = samples()[2] else {
            unreachable!()
        };
        ImageInfo {
            width,
            height,
            depth,
            array_layers: layers,
            mip_levels: mips,
            ..i
        }
    }

    fn rule(r: Result<impl Sized>) -> &'static str {
        r.err().and_then(|e| e.rule()).map_or("none", |r| r.name())
    }

    /// A description's placement, elements, extent and mip chain are refused with the rules
    /// an in-process request meets (0.4 restated them as `Ipc.ZeroSize`, `Ipc.RangeOverflow`,
    /// `Ipc.RangeExceedsMemory`, `Ipc.PartialElement`, `Ipc.ZeroExtent`, `Ipc.MipLevels`).
    #[test]
    fn lies_are_refused_with_the_in_process_rules() {
        assert_eq!(rule(check_buffer(&buffer(0, 0, 16, 4))), "Layout.ZeroSize");
        assert_eq!(
            rule(check_buffer(&buffer(16, 0, 0, 4))),
            "Layout.OutOfBounds"
        );
        assert_eq!(
            rule(check_buffer(&buffer(16, 0, 16, 0))),
            "Layout.ElementFormat"
        );
        let twelve_bits = BufferInfo {
            element: crate::ElementFormat {
                bits: 12,
                ..crate::ElementFormat::F32X4
            },
            ..buffer(16, 0, 16, 16)
        };
        assert_eq!(rule(check_buffer(&twelve_bits)), "Layout.ElementFormat");
        assert_eq!(
            rule(check_buffer(&buffer(16, u64::MAX - 8, u64::MAX, 4))),
            "Layout.Overflow"
        );
        let e = check_buffer(&buffer(16, 8, 16, 4)).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Layout(LayoutError::OutOfBounds {
                    offset: 8,
                    size: 16,
                    container_size: 16,
                    ..
                })
            ),
            "{e}"
        );
        check_buffer(&buffer(16, 0, 16, 4)).unwrap();
        assert_eq!(
            rule(check_buffer(&buffer(10, 0, 16, 4))),
            "Layout.PartialElement"
        );
        assert_eq!(rule(image_desc(&image(4, 0, 1, 1, 1))), "Image.ZeroExtent");
        // 1024 texels: 11 levels (1024 .. 1); a 1x1 image has one.
        image_desc(&image(1024, 3, 1, 1, 11)).unwrap();
        assert_eq!(
            rule(image_desc(&image(1024, 3, 1, 1, 12))),
            "Image.MipLevels"
        );
        assert_eq!(rule(image_desc(&image(1, 1, 1, 1, 2))), "Image.MipLevels");
        assert_eq!(
            rule(image_desc(&image(3, 1000, 1, 1, 0))),
            "Image.MipLevels"
        );
        // The shape byte against the rest: the wire's own rule.
        assert_eq!(
            rule(image_desc(&image(4, 4, 1, 3, 1))),
            "Ipc.ShapeContradicted"
        );
        let at_end = ImageInfo {
            offset: 1 << 30,
            ..image(4, 4, 1, 1, 1)
        };
        assert_eq!(rule(image_desc(&at_end)), "Layout.OutOfBounds");
    }

    /// A received resource's place against the driver's requirements: the rules of a bind.
    #[test]
    fn imports_follow_the_bind_rules() {
        let buffer = DeviceObject::Buffer;
        check_import(buffer, (256, 4096, false), (1024, 256, false)).unwrap();
        let cases = [
            ((100, 4096, false), (1024, 256, false), "Layout.Misaligned"),
            (
                (3840, 4096, false),
                (1024, 256, false),
                "Layout.OutOfBounds",
            ),
            (
                (0, 4096, false),
                (1024, 256, true),
                "Memory.DedicatedRequired",
            ),
            (
                (256, 4096, true),
                (1024, 256, false),
                "Layout.DedicatedOffset",
            ),
            ((0, 4096, true), (1024, 256, false), "Memory.DedicatedSize"),
        ];
        for (described, required, want) in cases {
            assert_eq!(rule(check_import(buffer, described, required)), want);
        }
        check_import(DeviceObject::Image, (0, 1024, true), (1024, 256, true)).unwrap();
    }
}
