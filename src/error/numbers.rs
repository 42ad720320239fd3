//! A refusal's numbers and an error's name, for front ends that report them as data (Python's
//! `numbers` and `rule` attributes), read from the refusal tables ([`super::table`]): each
//! variant's fields by name and type, never from its `Debug` text.

use std::ops::Range;

use ash::vk;

use crate::error::table::Table;
use crate::error::Error;

impl Error {
    /// The integer fields of the error and of the errors it nests (`offset`, `size`,
    /// `alignment`, ...; an `Option` that holds one counts), by field name, first occurrence
    /// of each name: the numbers a refusal was checked with.
    pub fn numbers(&self) -> Vec<(String, i128)> {
        let mut out = Numbers::default();
        Table::numbers(self, &mut out);
        out.0
    }

    /// The refusal's rule name ([`crate::Rule::name`], `"Layout.OutOfBounds"`), or, for an
    /// error that is not a refusal (a driver call that failed), its variant path (`"Vulkan"`,
    /// `"Cuda"`, `"Timeout"`).
    pub fn name(&self) -> String {
        // A rule's name is its variant's path by construction (both are the table's path and
        // the variant's name), so one lookup serves refusals and failed calls alike.
        Table::path(self).to_owned()
    }
}

/// The integers gathered from an error's fields, by field name, first occurrence of each.
#[derive(Debug, Default)]
pub(crate) struct Numbers(Vec<(String, i128)>);

impl Numbers {
    /// Adds what the field `name` holding `value` contributes.
    pub(crate) fn field<T: FieldNumbers + ?Sized>(&mut self, name: &'static str, value: &T) {
        value.add_to(name, self);
    }

    /// Adds `name = value`, unless a field of that name came first (an outer field wins over
    /// one of a nested value, as the names are what callers look up).
    fn push(&mut self, name: &str, value: i128) {
        if !self.0.iter().any(|(n, _)| n == name) {
            self.0.push((name.to_owned(), value));
        }
    }
}

/// What a field of a refusal contributes to [`Error::numbers`]: an integer itself, an
/// `Option` what it holds, a nested value its own integer fields, anything else nothing.
/// Every field type of a table implements it, so a field of a new type is a decision (a
/// compile error until it has an impl below), not a silent gap.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is a refusal field type without a `FieldNumbers` impl",
    note = "add one in src/error/numbers.rs: its integers, or none (`no_numbers!`)"
)]
pub(crate) trait FieldNumbers {
    /// Adds this value's numbers, as the field `name`, to `out`.
    fn add_to(&self, name: &'static str, out: &mut Numbers);
}

/// Integers are numbers, under their field's name.
macro_rules! integers {
    ($($t:ty),*) => {$(
        impl FieldNumbers for $t {
            fn add_to(&self, name: &'static str, out: &mut Numbers) {
                // Lossless: every integer type here is at most 64 bits wide.
                out.push(name, *self as i128);
            }
        }
    )*};
}
integers!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

/// Types whose values are not numbers (text, flags, names of things, Vulkan enums): their
/// fields add nothing.
macro_rules! no_numbers {
    ($($t:ty),* $(,)?) => {$(
        impl FieldNumbers for $t {
            fn add_to(&self, _: &'static str, _: &mut Numbers) {}
        }
    )*};
}
no_numbers!(
    bool,
    String,
    &str,
    cudarc::driver::DriverError,
    vk::Result,
    vk::Format,
    vk::ImageType,
    vk::ImageTiling,
    vk::ImageUsageFlags,
    vk::BufferUsageFlags,
    vk::MemoryPropertyFlags,
    vk::ExternalMemoryHandleTypeFlags,
    vk::ExternalMemoryFeatureFlags,
    vk::ExternalSemaphoreHandleTypeFlags,
    crate::uuid::Uuid,
    crate::error::ApiVersion,
    crate::error::ExtensionState,
    crate::error::Importer,
    crate::error::DeviceObject,
    crate::error::DeviceOwner,
    crate::error::Exportable,
    crate::error::FrameStep,
    crate::error::InlineKernelsMissing,
    crate::rules::layout::AlignmentRule,
    crate::rules::image_format::FormatRefusal,
    crate::ipc::MessageKind,
    crate::ipc::ImageShape,
);
#[cfg(feature = "wgpu")]
no_numbers!(
    crate::error::WgpuObject,
    ::wgpu::Features,
    ::wgpu::BufferUsages,
);

/// A list of numbers is not one number (`[u32; 3]` grids, a multicast team's devices).
impl<T, const N: usize> FieldNumbers for [T; N] {
    fn add_to(&self, _: &'static str, _: &mut Numbers) {}
}

/// A list of numbers is not one number.
impl<T> FieldNumbers for Vec<T> {
    fn add_to(&self, _: &'static str, _: &mut Numbers) {}
}

/// A range is two numbers without a name each.
impl<T> FieldNumbers for Range<T> {
    fn add_to(&self, _: &'static str, _: &mut Numbers) {}
}

/// An `Option` counts where it holds a value.
impl<T: FieldNumbers> FieldNumbers for Option<T> {
    fn add_to(&self, name: &'static str, out: &mut Numbers) {
        if let Some(value) = self {
            value.add_to(name, out);
        }
    }
}

/// An OS error's number, as `code` (the name `std::io::Error` gives it).
impl FieldNumbers for std::io::Error {
    fn add_to(&self, _: &'static str, out: &mut Numbers) {
        if let Some(code) = self.raw_os_error() {
            out.push("code", code.into());
        }
    }
}

/// An image kind's count: a 2D array's `layers`, a 3D image's `depth`.
impl FieldNumbers for crate::rules::image_format::ImageKind {
    fn add_to(&self, _: &'static str, out: &mut Numbers) {
        use crate::rules::image_format::ImageKind as K;
        match *self {
            K::D2Array { layers } => out.push("layers", layers.into()),
            K::D3 { depth } => out.push("depth", depth.into()),
            K::D2 | K::Cube => {}
        }
    }
}

/// Why an image is no wgpu texture: the layer count of a cube-viewable array.
#[cfg(feature = "wgpu")]
impl FieldNumbers for crate::error::NotTextureReason {
    fn add_to(&self, _: &'static str, out: &mut Numbers) {
        if let crate::error::NotTextureReason::CubeViewableArray { layers } = *self {
            out.push("layers", layers.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::image_format::{ImageError, ImageKind};
    use crate::rules::layout::{AlignmentRule, LayoutError};

    #[test]
    fn a_refusal_reports_its_rule_name_and_numbers() {
        let e: Error = LayoutError::Misaligned {
            what: "offset",
            value: 4,
            alignment: 16,
            rule: AlignmentRule::CudaMappedBuffer,
        }
        .into();
        assert_eq!(e.name(), "Layout.Misaligned");
        assert_eq!(
            e.numbers(),
            vec![("value".to_owned(), 4), ("alignment".to_owned(), 16)]
        );
        let t = Error::Timeout {
            what: "a test",
            timeout_ns: 5_000_000,
        };
        assert_eq!(t.name(), "Timeout");
        assert_eq!(t.numbers(), vec![("timeout_ns".to_owned(), 5_000_000)]);
    }

    /// Nested values add their own fields, after the fields before them and once per name;
    /// an `Option` counts when it holds a number; text and OS errors as `std::io::Error`
    /// names them.
    #[test]
    fn nested_optional_and_os_numbers() {
        let e = Error::from(ImageError::LayeredMipChain {
            kind: ImageKind::D2Array { layers: 4 },
            mip_levels: 2,
        });
        assert_eq!(
            e.numbers(),
            vec![("layers".to_owned(), 4), ("mip_levels".to_owned(), 2)]
        );
        let mut out = Numbers::default();
        out.field("limit", &Some(100u64));
        out.field("none", &None::<u64>);
        out.field("neg", &-3i64);
        out.field("limit", &7u32);
        out.field("text", &"cuInit: 5");
        assert_eq!(
            out.0,
            vec![("limit".to_owned(), 100), ("neg".to_owned(), -3)]
        );
        let io = Error::Io {
            call: "open",
            source: std::io::Error::from_raw_os_error(2),
        };
        assert_eq!(
            (io.name(), io.numbers()),
            ("Io".to_owned(), vec![("code".to_owned(), 2)])
        );
        let loader = Error::VulkanLoader("libvulkan: 5".into());
        assert_eq!(
            (loader.name(), loader.numbers()),
            ("VulkanLoader".to_owned(), vec![])
        );
    }
}
