//! The element types a shared buffer can hold, with their DLPack codes and the
//! `__cuda_array_interface__` type strings.

use dlpark::ffi::{DLDataType, DLDataTypeCode};

/// An element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    /// `bool` (one byte).
    Bool,
    /// Signed integers of 1, 2, 4, 8 bytes.
    Int(u8),
    /// Unsigned integers of 1, 2, 4, 8 bytes.
    UInt(u8),
    /// IEEE floats of 2, 4, 8 bytes.
    Float(u8),
}

/// The names `parse` accepts, for messages.
pub const NAMES: &str =
    "bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64";

impl DType {
    /// From a NumPy/PyTorch-style name: "float32", "torch.float32", "f4", "<f4", "int64", ...
    /// ("float" and "int" are refused: NumPy and PyTorch read them as different widths.)
    pub fn parse(name: &str) -> Option<Self> {
        let n = name
            .trim()
            .trim_start_matches("torch.")
            .trim_start_matches("numpy.");
        let n = n.trim_start_matches(['<', '|', '=']);
        Some(match n {
            "bool" | "b1" | "?" => DType::Bool,
            "int8" | "i1" => DType::Int(1),
            "int16" | "i2" | "short" => DType::Int(2),
            "int32" | "i4" => DType::Int(4),
            "int64" | "i8" | "long" => DType::Int(8),
            "uint8" | "u1" => DType::UInt(1),
            "uint16" | "u2" => DType::UInt(2),
            "uint32" | "u4" => DType::UInt(4),
            "uint64" | "u8" => DType::UInt(8),
            "float16" | "f2" | "half" => DType::Float(2),
            "float32" | "f4" => DType::Float(4),
            "float64" | "f8" | "double" => DType::Float(8),
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn itemsize(self) -> usize {
        match self {
            DType::Bool => 1,
            DType::Int(b) | DType::UInt(b) | DType::Float(b) => usize::from(b),
        }
    }

    /// The canonical name ("float32").
    pub fn name(self) -> String {
        match self {
            DType::Bool => "bool".into(),
            DType::Int(b) => format!("int{}", 8 * b),
            DType::UInt(b) => format!("uint{}", 8 * b),
            DType::Float(b) => format!("float{}", 8 * b),
        }
    }

    /// The `__cuda_array_interface__` / NumPy type string ("<f4", "|u1").
    pub fn typestr(self) -> String {
        let (kind, size) = match self {
            DType::Bool => ('b', 1),
            DType::Int(b) => ('i', b),
            DType::UInt(b) => ('u', b),
            DType::Float(b) => ('f', b),
        };
        let order = if size == 1 { '|' } else { '<' };
        format!("{order}{kind}{size}")
    }

    /// The DLPack data type.
    pub fn dlpack(self) -> DLDataType {
        let (code, bits) = match self {
            DType::Bool => (DLDataTypeCode::BOOL, 8),
            DType::Int(b) => (DLDataTypeCode::INT, 8 * b),
            DType::UInt(b) => (DLDataTypeCode::UINT, 8 * b),
            DType::Float(b) => (DLDataTypeCode::FLOAT, 8 * b),
        };
        DLDataType {
            code,
            bits,
            lanes: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_type_strings_match_numpy() {
        for name in NAMES.split(", ") {
            let d = DType::parse(name).unwrap();
            assert_eq!(d.name(), name);
            assert_eq!(DType::parse(&d.typestr()), Some(d));
        }
        assert_eq!(DType::parse("torch.float32"), Some(DType::Float(4)));
        assert_eq!(DType::Float(4).typestr(), "<f4");
        assert_eq!(DType::UInt(1).typestr(), "|u1");
        assert_eq!(DType::parse("complex64"), None);
    }
}
