//! Pure range, alignment and granularity rules, checked before any driver sees a request.
//!
//! Nothing here touches a GPU: every rule is a function of numbers, unit- and
//! property-tested everywhere (see the tests at the bottom of this file).

use std::fmt;
use std::ops::Range;

/// The smallest offset alignment at which `cuExternalMemoryGetMappedBuffer` maps a buffer
/// inside non-dedicated imported memory.
///
/// Measured on the GPU machine (NVIDIA H200, driver 580): offsets 16, 256, 4096, 64 KiB and
/// 2 MiB mapped and offset 4 did not; CUDA's documentation only says "suitably aligned".
pub const CUDA_MAPPED_OFFSET_ALIGNMENT: u64 = 16;

/// Which rule asked for an alignment, so that an error can say where the number came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AlignmentRule {
    /// `VkMemoryRequirements::alignment` of the Vulkan buffer that views the range.
    VulkanBuffer,
    /// `VkMemoryRequirements::alignment` of a Vulkan image bound at that offset.
    VulkanImage,
    /// The texel size of an image copied to or from a buffer at that offset.
    Texel,
    /// [`CUDA_MAPPED_OFFSET_ALIGNMENT`], the measured CUDA rule for mapped buffers.
    CudaMappedBuffer,
    /// A VMM allocation granularity (`cuMemGetAllocationGranularity`).
    Granularity,
    /// `minImportedHostPointerAlignment` of `VK_EXT_external_memory_host`.
    VulkanHostPointer,
    /// The host page size that `cuMemHostRegister` requires.
    HostPage,
    /// `align_of::<T>()` of the element type viewed at that offset.
    Element,
}

impl fmt::Display for AlignmentRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AlignmentRule::VulkanBuffer => "the Vulkan buffer's memory alignment",
            AlignmentRule::VulkanImage => "the Vulkan image's memory alignment",
            AlignmentRule::Texel => "the image's texel size",
            AlignmentRule::CudaMappedBuffer => "CUDA's mapped-buffer offset alignment",
            AlignmentRule::Granularity => "the CUDA allocation granularity",
            AlignmentRule::VulkanHostPointer => "Vulkan's minImportedHostPointerAlignment",
            AlignmentRule::HostPage => "the host page size",
            AlignmentRule::Element => "the element type's alignment",
        })
    }
}

// The table: the enum, and beside each variant its rule (see `error::table`).
crate::error::table::refusals! {
    rows layout_rules, path "Layout.";
    /// A broken range or alignment rule, with the numbers that broke it.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum LayoutError {
        /// A range of zero bytes was requested.
        #[error("zero-size range requested at offset {offset}: sizes must be at least 1 byte")]
        ZeroSize {
            /// Requested offset.
            offset: u64,
        } => {
            /// A range of zero bytes.
            LayoutZeroSize = 0x0101
        },
        /// `offset + size` does not fit in a u64.
        #[error("offset {offset} + size {size} overflows u64")]
        Overflow {
            /// Requested offset.
            offset: u64,
            /// Requested size.
            size: u64,
        } => {
            /// Offset + size does not fit in 64 bits.
            LayoutOverflow = 0x0102
        },
        /// `len × size_of::<T>()` does not fit in a u64.
        #[error("{len} elements × {element_size} bytes per element overflows u64")]
        ElementCountOverflow {
            /// Number of elements requested.
            len: u64,
            /// `size_of::<T>()`.
            element_size: u64,
        } => {
            /// Element count × element size does not fit in 64 bits.
            LayoutElementCountOverflow = 0x0103
        },
        /// A byte count is not a whole number of elements.
        #[error("{bytes} bytes is not a whole number of {element_size}-byte elements")]
        PartialElement {
            /// The byte count given.
            bytes: u64,
            /// `size_of::<T>()`.
            element_size: u64,
        } => {
            /// A byte count that is not a whole number of elements.
            LayoutPartialElement = 0x0104
        },
        /// The range does not lie inside its parent.
        #[error(
            "range {offset}..{end} ({size} bytes) is outside the {container} of {container_size} bytes"
        )]
        OutOfBounds {
            /// Requested offset.
            offset: u64,
            /// Requested size.
            size: u64,
            /// `offset + size`.
            end: u64,
            /// What the range must lie in (e.g. "allocation").
            container: &'static str,
            /// Size of that container in bytes.
            container_size: u64,
        } => {
            /// A range outside its allocation, buffer or block.
            LayoutOutOfBounds = 0x0105
        },
        /// A value is not a multiple of the alignment a rule requires.
        #[error("{what} {} is not a multiple of {alignment} ({rule})", show_value(what, *value))]
        Misaligned {
            /// What was misaligned ("offset", "size", "address", "pointer").
            what: &'static str,
            /// The offending value.
            value: u64,
            /// The required alignment.
            alignment: u64,
            /// The rule that requires it.
            rule: AlignmentRule,
        } => {
            /// An offset, size or address that is not a multiple of the alignment a rule requires.
            LayoutMisaligned = 0x0106
        },
        /// An alignment given to a rule is not a power of two (or is zero).
        #[error("alignment {alignment} is not a power of two")]
        BadAlignment {
            /// The value given.
            alignment: u64,
        } => {
            /// An alignment that is not a power of two.
            LayoutBadAlignment = 0x0107
        },
        /// Memory imported with `CUDA_EXTERNAL_MEMORY_DEDICATED` maps only at offset 0.
        #[error(
            "offset {offset} in a dedicated import: CUDA maps dedicated memory only at offset 0 \
             (measured: every non-zero offset fails with CUDA_ERROR_INVALID_VALUE); \
             use a non-dedicated allocation to place several buffers in one allocation"
        )]
        DedicatedOffset {
            /// Requested offset.
            offset: u64,
        } => {
            /// A non-zero offset in a dedicated allocation (CUDA maps those only at offset 0).
            LayoutDedicatedOffset = 0x0108
        },
        /// `cuMemMap`'s offset into the allocation must currently be zero (its reference page).
        #[error(
            "cuMemMap offset into the allocation is {mem_offset}; the driver currently requires 0"
        )]
        NonZeroAllocationOffset {
            /// The offset given.
            mem_offset: u64,
        } => {
            /// A non-zero offset into a CUDA allocation (`cuMemMap` requires 0).
            LayoutNonZeroAllocationOffset = 0x0109
        },
        /// The range overlaps a live one (a CUDA mapping, a host registration) where that is
        /// not allowed.
        #[error(
            "range {} overlaps the live {what} {}{}",
            show_range(what, requested), show_range(what, existing),
            if *what == "mapping" {
                "; overlapping mappings alias (CUDA requires volatile access to them) and need `allow_overlap`"
            } else {
                ""
            }
        )]
        Overlap {
            /// What the live range is ("mapping", "registration").
            what: &'static str,
            /// Requested range.
            requested: Range<u64>,
            /// The live range it overlaps.
            existing: Range<u64>,
        } => {
            /// A range that overlaps a live mapping or registration.
            LayoutOverlap = 0x010A
        },
        /// Memory described as elements of one size, viewed as elements of another.
        #[error(
            "the memory holds {described}-byte elements; it cannot be viewed as {requested}-byte \
             elements"
        )]
        ElementSize {
            /// The element size the memory was described with.
            described: u64,
            /// The size of the element type asked for.
            requested: u64,
        } => {
            /// An element type whose size is not the described element size.
            LayoutElementSize = 0x010B
        },
        /// An element format DLPack cannot describe, or an empty row.
        #[error(
            "element format code {code}, {bits} bits × {lanes} lanes, {columns} per row: {why}"
        )]
        ElementFormat {
            /// DLPack's type code.
            code: u8,
            /// Bits per lane.
            bits: u8,
            /// Lanes per value.
            lanes: u16,
            /// Values per row.
            columns: u32,
            /// Which part is wrong.
            why: &'static str,
        } => {
            /// An element format with an unknown type code, a width that is not 8, 16, 32
            /// or 64 bits (8 for bool), or no lanes or columns.
            LayoutElementFormat = 0x010C
        },
    }
}

/// What a buffer holds, as DLPack describes an array: rows of `columns` values of one data
/// type (`code`, `bits`, `lanes`: DLPack's `DLDataType`), in C order. The array's shape is
/// `(rows, columns)`, or `(rows,)` where `columns` is 1; `rows` is the buffer's size over
/// [`Self::row_bytes`]. Checked by [`Self::check`] wherever one is published or received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ElementFormat {
    /// DLPack's type code: [`Self::INT`], [`Self::UINT`], [`Self::FLOAT`], [`Self::BFLOAT`]
    /// or [`Self::BOOL`].
    pub code: u8,
    /// Bits per lane: 8, 16, 32 or 64 (8 for bool).
    pub bits: u8,
    /// Lanes per value (1 for scalars; DLPack's vector types).
    pub lanes: u16,
    /// Values per row (4 for `float4` positions).
    pub columns: u32,
}

impl ElementFormat {
    /// DLPack's `kDLInt`.
    pub const INT: u8 = 0;
    /// DLPack's `kDLUInt`.
    pub const UINT: u8 = 1;
    /// DLPack's `kDLFloat`.
    pub const FLOAT: u8 = 2;
    /// DLPack's `kDLBfloat`.
    pub const BFLOAT: u8 = 4;
    /// DLPack's `kDLBool`.
    pub const BOOL: u8 = 6;
    /// Rows of four `float32`: the particle demo's `float4` positions, shape `(n, 4)`.
    pub const F32X4: Self = Self::float32(4);
    /// Plain bytes, shape `(n,)`.
    pub const BYTES: Self = Self {
        code: Self::UINT,
        bits: 8,
        lanes: 1,
        columns: 1,
    };

    /// Rows of `columns` `float32` values.
    pub const fn float32(columns: u32) -> Self {
        Self {
            code: Self::FLOAT,
            bits: 32,
            lanes: 1,
            columns,
        }
    }

    /// Bytes per value (`bits / 8 × lanes`).
    pub fn value_bytes(&self) -> u64 {
        u64::from(self.bits / 8) * u64::from(self.lanes)
    }

    /// Bytes per row: what a buffer holds a whole number of.
    pub fn row_bytes(&self) -> u64 {
        self.value_bytes() * u64::from(self.columns)
    }

    /// `Layout.ElementFormat` unless DLPack can describe it: a known code, 8/16/32/64 bits
    /// (8 for bool, 16 for bfloat), at least one lane and one column.
    pub fn check(&self) -> Result<(), LayoutError> {
        let refuse = |why| LayoutError::ElementFormat {
            code: self.code,
            bits: self.bits,
            lanes: self.lanes,
            columns: self.columns,
            why,
        };
        let widths_ok = match self.code {
            Self::INT | Self::UINT | Self::FLOAT => matches!(self.bits, 8 | 16 | 32 | 64),
            Self::BFLOAT => self.bits == 16,
            Self::BOOL => self.bits == 8,
            _ => {
                return Err(refuse(
                    "not a DLPack type code (0 int, 1 uint, 2 float, 4 bfloat, 6 bool)",
                ))
            }
        };
        if !widths_ok {
            return Err(refuse("no such width for this type code"));
        }
        if self.lanes == 0 {
            return Err(refuse("no lanes"));
        }
        if self.columns == 0 {
            return Err(refuse("no values per row"));
        }
        Ok(())
    }
}

/// Addresses read better in hex, offsets and sizes in decimal.
fn show_value(what: &str, value: u64) -> String {
    if matches!(what, "pointer" | "address") {
        format!("{value:#x}")
    } else {
        value.to_string()
    }
}

/// Host address ranges in hex, offsets inside allocations in decimal.
fn show_range(what: &str, r: &Range<u64>) -> String {
    if what == "registration" {
        format!("{:#x}..{:#x}", r.start, r.end)
    } else {
        format!("{}..{}", r.start, r.end)
    }
}

/// Checks that `alignment` is a non-zero power of two.
pub fn check_power_of_two(alignment: u64) -> Result<(), LayoutError> {
    if alignment.is_power_of_two() {
        Ok(())
    } else {
        Err(LayoutError::BadAlignment { alignment })
    }
}

/// Checks that `value` is a multiple of `alignment` (a power of two).
pub fn check_aligned(
    what: &'static str,
    value: u64,
    alignment: u64,
    rule: AlignmentRule,
) -> Result<(), LayoutError> {
    check_power_of_two(alignment)?;
    if value & (alignment - 1) == 0 {
        Ok(())
    } else {
        Err(LayoutError::Misaligned {
            what,
            value,
            alignment,
            rule,
        })
    }
}

/// Checks that `offset..offset + size` is non-empty, does not overflow, and lies inside
/// `0..container_size`. Returns the range.
pub fn check_range(
    offset: u64,
    size: u64,
    container: &'static str,
    container_size: u64,
) -> Result<Range<u64>, LayoutError> {
    if size == 0 {
        return Err(LayoutError::ZeroSize { offset });
    }
    let end = offset
        .checked_add(size)
        .ok_or(LayoutError::Overflow { offset, size })?;
    if end > container_size {
        return Err(LayoutError::OutOfBounds {
            offset,
            size,
            end,
            container,
            container_size,
        });
    }
    Ok(offset..end)
}

/// Whether two half-open ranges share at least one byte.
pub fn overlaps(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

/// Returns the first live range that `requested` overlaps, if any.
pub fn check_no_overlap<'a>(
    what: &'static str,
    requested: &Range<u64>,
    live: impl IntoIterator<Item = &'a Range<u64>>,
) -> Result<(), LayoutError> {
    match live.into_iter().find(|r| overlaps(requested, r)) {
        Some(existing) => Err(LayoutError::Overlap {
            what,
            requested: requested.clone(),
            existing: existing.clone(),
        }),
        None => Ok(()),
    }
}

/// Rounds `value` up to a multiple of `alignment` (a power of two); `None` on overflow.
pub fn align_up(value: u64, alignment: u64) -> Option<u64> {
    if !alignment.is_power_of_two() {
        return None;
    }
    value
        .checked_add(alignment - 1)
        .map(|v| v & !(alignment - 1))
}

/// A request to map `offset..offset + size` of imported memory into CUDA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappingRequest {
    /// Byte offset inside the imported allocation.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// Alignment the Vulkan buffer viewing this range requires (1 when no Vulkan buffer).
    pub vulkan_alignment: u64,
    /// Whether the range may overlap live mappings.
    pub allow_overlap: bool,
}

/// What is known about imported memory when a mapping is requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportLayout {
    /// The allocation size it was imported with.
    pub allocation_size: u64,
    /// Whether it was imported with `CUDA_EXTERNAL_MEMORY_DEDICATED`.
    pub dedicated: bool,
}

/// Every rule a mapped buffer must satisfy, in the order a reader would check them:
/// non-empty, no overflow, inside the allocation, offset 0 for dedicated imports, offset
/// aligned to the Vulkan buffer and to CUDA, and no overlap with a live mapping unless allowed.
pub fn validate_mapping<'a>(
    import: ImportLayout,
    request: MappingRequest,
    live: impl IntoIterator<Item = &'a Range<u64>>,
) -> Result<Range<u64>, LayoutError> {
    let range = check_range(
        request.offset,
        request.size,
        "allocation",
        import.allocation_size,
    )?;
    if import.dedicated && request.offset != 0 {
        return Err(LayoutError::DedicatedOffset {
            offset: request.offset,
        });
    }
    check_aligned(
        "offset",
        request.offset,
        request.vulkan_alignment,
        AlignmentRule::VulkanBuffer,
    )?;
    check_aligned(
        "offset",
        request.offset,
        CUDA_MAPPED_OFFSET_ALIGNMENT,
        AlignmentRule::CudaMappedBuffer,
    )?;
    if !request.allow_overlap {
        check_no_overlap("mapping", &range, live)?;
    }
    Ok(range)
}

/// Where a buffer goes in an allocation, proven: made only by [`place`], which checked every
/// range and alignment rule once; the Vulkan bind and the CUDA mapping consume it without
/// checking again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    range: Range<u64>,
    import: ImportLayout,
    vulkan_alignment: u64,
    vulkan_size: u64,
}

impl Placement {
    /// The byte range CUDA maps (the buffer's size).
    pub(crate) fn range(&self) -> Range<u64> {
        self.range.clone()
    }
    /// The byte offset in the allocation.
    pub(crate) fn offset(&self) -> u64 {
        self.range.start
    }
    /// The allocation it was checked against.
    pub(crate) fn import(&self) -> ImportLayout {
        self.import
    }
    /// Whether it was checked for a Vulkan buffer of this alignment and required size.
    pub(crate) fn suits(&self, vulkan_alignment: u64, vulkan_size: u64) -> bool {
        self.vulkan_alignment == vulkan_alignment && self.vulkan_size == vulkan_size
    }
}

/// A request to place a buffer in an allocation (for [`place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PlacementRequest {
    /// Byte offset in the allocation.
    pub offset: u64,
    /// The buffer's size in bytes (what CUDA maps).
    pub size: u64,
    /// `VkMemoryRequirements::alignment` of the Vulkan buffer.
    pub vulkan_alignment: u64,
    /// `VkMemoryRequirements::size` of the Vulkan buffer (what Vulkan binds).
    pub vulkan_size: u64,
    /// The element type's alignment (`align_of::<T>()`).
    pub element_alignment: u64,
}

/// Every range and alignment rule of a buffer in an allocation, once: the CUDA mapping rules
/// ([`validate_mapping`]: range, dedicated offset, Vulkan and CUDA alignment), the element's
/// alignment, and the Vulkan bind range (`offset + VkMemoryRequirements::size`). Overlap with
/// live mappings is left to the mapping, which holds the lock that guards them.
pub(crate) fn place(import: ImportLayout, req: PlacementRequest) -> Result<Placement, LayoutError> {
    let range = validate_mapping(
        import,
        MappingRequest {
            offset: req.offset,
            size: req.size,
            vulkan_alignment: req.vulkan_alignment,
            allow_overlap: true,
        },
        [],
    )?;
    check_aligned(
        "offset",
        req.offset,
        req.element_alignment,
        AlignmentRule::Element,
    )?;
    check_range(
        req.offset,
        req.vulkan_size,
        "allocation",
        import.allocation_size,
    )?;
    Ok(Placement {
        range,
        import,
        vulkan_alignment: req.vulkan_alignment,
        vulkan_size: req.vulkan_size,
    })
}

/// Byte size of `len` elements of `T`, or an overflow error naming the numbers.
pub fn bytes_for<T>(len: usize) -> Result<u64, LayoutError> {
    let element_size = std::mem::size_of::<T>() as u64;
    (len as u64)
        .checked_mul(element_size)
        .ok_or(LayoutError::ElementCountOverflow {
            len: len as u64,
            element_size,
        })
}

/// Number of `T` in `bytes`, which must be a whole number of elements.
pub fn elements_in<T>(bytes: u64) -> Result<u64, LayoutError> {
    let element_size = std::mem::size_of::<T>() as u64;
    if element_size == 0 || !bytes.is_multiple_of(element_size) {
        return Err(LayoutError::PartialElement {
            bytes,
            element_size,
        });
    }
    Ok(bytes / element_size)
}

#[cfg(test)]
/// Checks that `offset` suits elements of `T`: a multiple of `align_of::<T>()`.
pub fn check_element_offset<T>(offset: u64) -> Result<(), LayoutError> {
    check_aligned(
        "offset",
        offset,
        std::mem::align_of::<T>() as u64,
        AlignmentRule::Element,
    )
}

/// A request to map physical memory into a virtual address reservation (`cuMemMap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmmMapRequest {
    /// Base address of the reservation.
    pub reservation_base: u64,
    /// Size of the reservation.
    pub reservation_size: u64,
    /// Offset of the mapping inside the reservation.
    pub offset: u64,
    /// Size of the mapping.
    pub size: u64,
    /// Size of the physical allocation (`cuMemCreate`).
    pub allocation_size: u64,
    /// Offset into the physical allocation.
    pub allocation_offset: u64,
    /// `cuMemGetAllocationGranularity(.., MINIMUM)`.
    pub granularity: u64,
}

/// Every rule of `cuMemMap`'s reference page: address, size and offset multiples of the
/// allocation granularity, the allocation offset zero (as the page says the driver requires),
/// the range inside the reservation and the allocation, and not already mapped.
pub fn validate_vmm_map<'a>(
    req: VmmMapRequest,
    live: impl IntoIterator<Item = &'a Range<u64>>,
) -> Result<Range<u64>, LayoutError> {
    let g = req.granularity;
    check_power_of_two(g)?;
    let range = check_range(
        req.offset,
        req.size,
        "address reservation",
        req.reservation_size,
    )?;
    let address = req
        .reservation_base
        .checked_add(req.offset)
        .ok_or(LayoutError::Overflow {
            offset: req.reservation_base,
            size: req.offset,
        })?;
    check_aligned("address", address, g, AlignmentRule::Granularity)?;
    check_aligned("size", req.size, g, AlignmentRule::Granularity)?;
    check_aligned(
        "offset",
        req.allocation_offset,
        g,
        AlignmentRule::Granularity,
    )?;
    if req.allocation_offset != 0 {
        return Err(LayoutError::NonZeroAllocationOffset {
            mem_offset: req.allocation_offset,
        });
    }
    check_range(
        req.allocation_offset,
        req.size,
        "physical allocation",
        req.allocation_size,
    )?;
    check_no_overlap("virtual-memory mapping", &range, live)?;
    Ok(range)
}

/// A request to bind physical memory to a multicast object (`cuMulticastBindMem`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MulticastBindRequest {
    /// Size of the multicast object.
    pub multicast_size: u64,
    /// `cuMulticastGetGranularity(.., MINIMUM)`.
    pub multicast_granularity: u64,
    /// Offset into the multicast object.
    pub multicast_offset: u64,
    /// Size of the memory allocation.
    pub allocation_size: u64,
    /// Offset into the memory allocation.
    pub allocation_offset: u64,
    /// Size of the bind.
    pub size: u64,
}

/// The size and offset rules of `cuMulticastBindMem`'s reference page: size, multicast offset
/// and memory offset multiples of the multicast granularity; `size + memOffset` within the
/// allocation; `size + mcOffset` within the multicast object.
pub fn validate_multicast_bind(req: MulticastBindRequest) -> Result<(), LayoutError> {
    let g = req.multicast_granularity;
    check_power_of_two(g)?;
    if req.size == 0 {
        return Err(LayoutError::ZeroSize {
            offset: req.multicast_offset,
        });
    }
    check_aligned("size", req.size, g, AlignmentRule::Granularity)?;
    check_aligned(
        "offset",
        req.multicast_offset,
        g,
        AlignmentRule::Granularity,
    )?;
    check_aligned(
        "offset",
        req.allocation_offset,
        g,
        AlignmentRule::Granularity,
    )?;
    check_range(
        req.allocation_offset,
        req.size,
        "memory allocation",
        req.allocation_size,
    )?;
    check_range(
        req.multicast_offset,
        req.size,
        "multicast object",
        req.multicast_size,
    )?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic, clippy::single_range_in_vec_init)]
mod tests {
    #[test]
    fn place_checks_every_rule_once() {
        let import = ImportLayout {
            allocation_size: 1 << 20,
            dedicated: false,
        };
        let req = PlacementRequest {
            offset: 4096,
            size: 100,
            vulkan_alignment: 256,
            vulkan_size: 256,
            element_alignment: 32,
        };
        let p = place(import, req).unwrap();
        assert_eq!(p.range(), 4096..4196);
        assert!(p.suits(256, 256) && !p.suits(64, 256));
        // Element alignment: a 32-byte type at offset 16 (CUDA's 16 is met).
        let e = place(
            import,
            PlacementRequest {
                offset: 16,
                vulkan_alignment: 16,
                ..req
            },
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                LayoutError::Misaligned {
                    rule: AlignmentRule::Element,
                    ..
                }
            ),
            "{e}"
        );
        // The Vulkan bind range: the CUDA range fits, the required size does not.
        let end = (1 << 20) - 128;
        let e = place(
            import,
            PlacementRequest {
                offset: end,
                element_alignment: 1,
                vulkan_alignment: 128,
                ..req
            },
        )
        .unwrap_err();
        assert!(
            matches!(e, LayoutError::OutOfBounds { size: 256, .. }),
            "{e}"
        );
        // Dedicated imports map only at offset 0.
        let dedicated = ImportLayout {
            dedicated: true,
            ..import
        };
        let e = place(dedicated, req).unwrap_err();
        assert!(
            matches!(e, LayoutError::DedicatedOffset { offset: 4096 }),
            "{e}"
        );
    }

    use super::*;
    use proptest::prelude::*;

    fn import(size: u64, dedicated: bool) -> ImportLayout {
        ImportLayout {
            allocation_size: size,
            dedicated,
        }
    }

    fn req(offset: u64, size: u64) -> MappingRequest {
        MappingRequest {
            offset,
            size,
            vulkan_alignment: 16,
            allow_overlap: false,
        }
    }

    #[test]
    fn accepts_whole_allocation() {
        assert_eq!(
            validate_mapping(import(4096, false), req(0, 4096), []),
            Ok(0..4096)
        );
    }

    #[test]
    fn unaligned_size_is_fine() {
        // Measured: a 100-byte mapped buffer works.
        assert_eq!(
            validate_mapping(import(4096, false), req(256, 100), []),
            Ok(256..356)
        );
    }

    #[test]
    fn zero_size() {
        assert_eq!(
            validate_mapping(import(4096, false), req(0, 0), []),
            Err(LayoutError::ZeroSize { offset: 0 })
        );
    }

    #[test]
    fn past_the_end() {
        let err = validate_mapping(import(4096, false), req(4096, 16), []).unwrap_err();
        assert_eq!(
            err,
            LayoutError::OutOfBounds {
                offset: 4096,
                size: 16,
                end: 4112,
                container: "allocation",
                container_size: 4096
            }
        );
        assert!(err.to_string().contains("4096..4112"), "{err}");
    }

    #[test]
    fn overflow() {
        assert_eq!(
            validate_mapping(import(4096, false), req(u64::MAX - 15, 32), []),
            Err(LayoutError::Overflow {
                offset: u64::MAX - 15,
                size: 32
            })
        );
    }

    #[test]
    fn dedicated_only_at_zero() {
        assert_eq!(
            validate_mapping(import(1 << 20, true), req(256, 16), []),
            Err(LayoutError::DedicatedOffset { offset: 256 })
        );
        assert!(validate_mapping(import(1 << 20, true), req(0, 16), []).is_ok());
    }

    #[test]
    fn misaligned_for_cuda_and_vulkan() {
        let mut r = req(4, 16);
        r.vulkan_alignment = 1;
        assert_eq!(
            validate_mapping(import(4096, false), r, []),
            Err(LayoutError::Misaligned {
                what: "offset",
                value: 4,
                alignment: 16,
                rule: AlignmentRule::CudaMappedBuffer
            })
        );
        let mut r = req(64, 16);
        r.vulkan_alignment = 256;
        assert_eq!(
            validate_mapping(import(4096, false), r, []),
            Err(LayoutError::Misaligned {
                what: "offset",
                value: 64,
                alignment: 256,
                rule: AlignmentRule::VulkanBuffer
            })
        );
    }

    #[test]
    fn bad_alignment_value() {
        let mut r = req(0, 16);
        r.vulkan_alignment = 48;
        assert_eq!(
            validate_mapping(import(4096, false), r, []),
            Err(LayoutError::BadAlignment { alignment: 48 })
        );
    }

    #[test]
    fn overlap_rejected_unless_allowed() {
        let live = [0..256u64];
        assert_eq!(
            validate_mapping(import(4096, false), req(128, 256), &live),
            Err(LayoutError::Overlap {
                what: "mapping",
                requested: 128..384,
                existing: 0..256
            })
        );
        let mut r = req(128, 256);
        r.allow_overlap = true;
        assert!(validate_mapping(import(4096, false), r, &live).is_ok());
        // Touching is not overlapping.
        assert!(validate_mapping(import(4096, false), req(256, 256), &live).is_ok());
    }

    #[test]
    fn align_up_works() {
        assert_eq!(align_up(0, 16), Some(0));
        assert_eq!(align_up(1, 16), Some(16));
        assert_eq!(align_up(16, 16), Some(16));
        assert_eq!(align_up(u64::MAX, 16), None);
        assert_eq!(align_up(5, 3), None);
    }

    proptest! {
        #[test]
        fn accepted_ranges_obey_every_rule(
            size in 1u64..1 << 40,
            offset in any::<u64>(),
            len in any::<u64>(),
            dedicated in any::<bool>(),
            valign_log in 0u32..16,
        ) {
            let r = MappingRequest { offset, size: len, vulkan_alignment: 1 << valign_log, allow_overlap: false };
            match validate_mapping(import(size, dedicated), r, []) {
                Ok(range) => {
                    prop_assert!(len > 0);
                    prop_assert_eq!(range.start, offset);
                    prop_assert_eq!(range.end - range.start, len);
                    prop_assert!(range.end <= size);
                    prop_assert!(!dedicated || offset == 0);
                    prop_assert_eq!(offset % (1 << valign_log), 0);
                    prop_assert_eq!(offset % CUDA_MAPPED_OFFSET_ALIGNMENT, 0);
                }
                Err(LayoutError::ZeroSize { .. }) => prop_assert_eq!(len, 0),
                Err(LayoutError::Overflow { .. }) => prop_assert!(offset.checked_add(len).is_none()),
                Err(LayoutError::OutOfBounds { end, .. }) => prop_assert!(end > size),
                Err(LayoutError::DedicatedOffset { .. }) => prop_assert!(dedicated && offset != 0),
                Err(LayoutError::Misaligned { value, alignment, .. }) => prop_assert!(value % alignment != 0),
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
        }

        #[test]
        fn disjoint_mappings_never_overlap(
            cuts in proptest::collection::btree_set(0u64..1 << 20, 2..20),
        ) {
            // Split 0..2^20 at random 16-aligned cut points; each piece must map beside the others.
            let points: Vec<u64> = cuts.into_iter().map(|c| c & !15).collect();
            let mut live: Vec<Range<u64>> = Vec::new();
            for w in points.windows(2) {
                if w[1] > w[0] {
                    let r = MappingRequest { offset: w[0], size: w[1] - w[0], vulkan_alignment: 16, allow_overlap: false };
                    let got = validate_mapping(import(1 << 20, false), r, &live);
                    prop_assert!(got.is_ok(), "{:?}", got);
                    // Any request that starts inside this piece must now be rejected.
                    let inside = MappingRequest { offset: w[0], size: 1, ..r };
                    live.push(w[0]..w[1]);
                    let overlap_is_rejected = matches!(
                        validate_mapping(import(1 << 20, false), inside, &live),
                        Err(LayoutError::Overlap { .. })
                    );
                    prop_assert!(overlap_is_rejected);
                }
            }
        }
    }

    const MIB2: u64 = 2 << 20;

    fn vmm(offset: u64, size: u64) -> VmmMapRequest {
        VmmMapRequest {
            reservation_base: 64 * MIB2,
            reservation_size: 16 * MIB2,
            offset,
            size,
            allocation_size: 4 * MIB2,
            allocation_offset: 0,
            granularity: MIB2,
        }
    }

    #[test]
    fn vmm_map_rules() {
        assert_eq!(validate_vmm_map(vmm(0, 4 * MIB2), []), Ok(0..4 * MIB2));
        assert!(matches!(
            validate_vmm_map(vmm(4096, MIB2), []),
            Err(LayoutError::Misaligned {
                what: "address",
                ..
            })
        ));
        assert!(matches!(
            validate_vmm_map(vmm(0, MIB2 + 4096), []),
            Err(LayoutError::Misaligned { what: "size", .. })
        ));
        assert!(matches!(
            validate_vmm_map(vmm(14 * MIB2, 4 * MIB2), []),
            Err(LayoutError::OutOfBounds {
                container: "address reservation",
                ..
            })
        ));
        assert!(matches!(
            validate_vmm_map(vmm(0, 6 * MIB2), []),
            Err(LayoutError::OutOfBounds {
                container: "physical allocation",
                ..
            })
        ));
        let mut r = vmm(0, MIB2);
        r.allocation_offset = MIB2;
        assert_eq!(
            validate_vmm_map(r, []),
            Err(LayoutError::NonZeroAllocationOffset { mem_offset: MIB2 })
        );
        let live = [2 * MIB2..4 * MIB2];
        assert!(matches!(
            validate_vmm_map(vmm(MIB2, 2 * MIB2), &live),
            Err(LayoutError::Overlap { .. })
        ));
        assert!(validate_vmm_map(vmm(4 * MIB2, 2 * MIB2), &live).is_ok());
        assert!(matches!(
            validate_vmm_map(vmm(0, 0), []),
            Err(LayoutError::ZeroSize { .. })
        ));
    }

    fn bind(mc_off: u64, mem_off: u64, size: u64) -> MulticastBindRequest {
        MulticastBindRequest {
            multicast_size: 8 * MIB2,
            multicast_granularity: MIB2,
            multicast_offset: mc_off,
            allocation_size: 4 * MIB2,
            allocation_offset: mem_off,
            size,
        }
    }

    #[test]
    fn multicast_bind_rules() {
        assert!(validate_multicast_bind(bind(0, 0, 4 * MIB2)).is_ok());
        assert!(validate_multicast_bind(bind(4 * MIB2, 2 * MIB2, 2 * MIB2)).is_ok());
        assert!(matches!(
            validate_multicast_bind(bind(0, 0, MIB2 / 2)),
            Err(LayoutError::Misaligned { what: "size", .. })
        ));
        assert!(matches!(
            validate_multicast_bind(bind(4096, 0, MIB2)),
            Err(LayoutError::Misaligned { what: "offset", .. })
        ));
        assert!(matches!(
            validate_multicast_bind(bind(0, 4096, MIB2)),
            Err(LayoutError::Misaligned { what: "offset", .. })
        ));
        // size + memOffset past the allocation; size + mcOffset past the multicast object
        assert!(matches!(
            validate_multicast_bind(bind(0, 2 * MIB2, 4 * MIB2)),
            Err(LayoutError::OutOfBounds {
                container: "memory allocation",
                ..
            })
        ));
        assert!(matches!(
            validate_multicast_bind(bind(6 * MIB2, 0, 4 * MIB2)),
            Err(LayoutError::OutOfBounds {
                container: "multicast object",
                ..
            })
        ));
        assert!(matches!(
            validate_multicast_bind(bind(0, 0, 0)),
            Err(LayoutError::ZeroSize { .. })
        ));
    }

    proptest! {
        #[test]
        fn accepted_vmm_maps_obey_the_page(offset in 0u64..1 << 30, size in 0u64..1 << 30, g_log in 12u32..24) {
            let g = 1u64 << g_log;
            let req = VmmMapRequest { reservation_base: 1 << 40, reservation_size: 1 << 30, offset, size, allocation_size: 1 << 29, allocation_offset: 0, granularity: g };
            if let Ok(r) = validate_vmm_map(req, []) {
                prop_assert_eq!(r.start % g, 0);
                prop_assert_eq!(size % g, 0);
                prop_assert!(size > 0 && r.end <= 1 << 30 && size <= 1 << 29);
            }
        }

        #[test]
        fn accepted_binds_obey_the_page(mc in 0u64..1 << 28, mem in 0u64..1 << 28, size in 0u64..1 << 28) {
            let req = MulticastBindRequest { multicast_size: 1 << 27, multicast_granularity: 1 << 21, multicast_offset: mc, allocation_size: 1 << 26, allocation_offset: mem, size };
            if validate_multicast_bind(req).is_ok() {
                prop_assert!(size > 0);
                prop_assert!(size % (1 << 21) == 0 && mc % (1 << 21) == 0 && mem % (1 << 21) == 0);
                prop_assert!(size + mem <= 1 << 26 && size + mc <= 1 << 27);
            }
        }
    }

    #[repr(C, align(32))]
    #[derive(Clone, Copy)]
    struct Wide([u32; 8]);

    #[test]
    fn element_rules_name_their_numbers() {
        assert!(check_element_offset::<Wide>(64).is_ok());
        let e = check_element_offset::<Wide>(16).unwrap_err();
        assert!(matches!(
            e,
            LayoutError::Misaligned {
                value: 16,
                alignment: 32,
                rule: AlignmentRule::Element,
                ..
            }
        ));
        assert!(e.to_string().contains("element type"), "{e}");
        let e = bytes_for::<u64>(usize::MAX).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} elements × 8 bytes per element overflows u64",
                usize::MAX
            )
        );
        assert_eq!(elements_in::<u32>(12), Ok(3));
        assert!(matches!(
            elements_in::<u32>(10),
            Err(LayoutError::PartialElement {
                bytes: 10,
                element_size: 4
            })
        ));
    }

    proptest! {
        #[test]
        fn element_offsets_accepted_iff_aligned(offset in 0u64..1 << 20) {
            prop_assert_eq!(check_element_offset::<Wide>(offset).is_ok(), offset % 32 == 0);
            prop_assert_eq!(check_element_offset::<u8>(offset).is_ok(), true);
        }
    }
}
