//! The one reader of `__cuda_array_interface__` (version 2 and 3: `data`, `shape`, `typestr`,
//! optional `strides`): what every front end that takes a CUDA array (`draw`, `cuda_release`,
//! `copy_from`, ...) reads, with one set of rule names for what it refuses: `Array.Type` (no
//! interface), `Array.Interface` (a key missing or malformed), `Array.Layout` (not
//! C-contiguous).

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::refusal;

/// What a C-contiguous CUDA array's interface says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaArrayView {
    /// The device pointer of its first element.
    pub ptr: u64,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its element type (`"<f4"`, ...).
    pub typestr: String,
    /// Bytes per element, from `typestr`.
    pub itemsize: usize,
}

impl CudaArrayView {
    /// Its size in bytes, if it fits.
    pub fn nbytes(&self) -> Option<usize> {
        self.shape
            .iter()
            .try_fold(self.itemsize, |n, &d| n.checked_mul(d))
    }
}

/// Reads `obj.__cuda_array_interface__` (`what_expected` says what the call takes, for the
/// refusal of an object without one): a C-contiguous array or a typed refusal.
pub fn read(obj: &Bound<'_, PyAny>, what_expected: &str) -> PyResult<CudaArrayView> {
    let cai = obj.getattr("__cuda_array_interface__").map_err(|e| {
        if !e.is_instance_of::<pyo3::exceptions::PyAttributeError>(obj.py()) {
            // The object has the interface but cannot give it (e.g. a tensor that requires
            // grad): its own error says why.
            return e;
        }
        refusal(
            "InvalidInput",
            "Array.Type",
            format!(
                "expected {what_expected} (with __cuda_array_interface__), not {}",
                obj.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ),
            &[],
        )
    })?;
    let malformed = |what: String| refusal("InvalidInput", "Array.Interface", what, &[]);
    let cai = cai
        .cast::<PyDict>()
        .map_err(|_| malformed("__cuda_array_interface__ is not a dict".into()))?;
    let item = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        cai.get_item(k)?
            .ok_or_else(|| malformed(format!("__cuda_array_interface__ has no '{k}'")))
    };
    let shape: Vec<usize> = item("shape")?.extract()?;
    let typestr: String = item("typestr")?.extract()?;
    let (ptr, _read_only): (u64, bool) = item("data")?.extract()?;
    let itemsize: usize = typestr
        .get(2..)
        .and_then(|d| d.parse().ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| malformed(format!("typestr '{typestr}' names no element size")))?;
    if let Some(strides) = cai.get_item("strides")?.filter(|s| !s.is_none()) {
        let strides: Vec<i64> = strides.extract()?;
        if !is_c_contiguous(&shape, &strides, itemsize) {
            return Err(refusal(
                "InvalidInput",
                "Array.Layout",
                format!(
                    "the array is not C-contiguous (shape {shape:?}, strides {strides:?} bytes): \
                     pass .contiguous() / a copy"
                ),
                &[],
            ));
        }
    }
    Ok(CudaArrayView {
        ptr,
        shape,
        typestr,
        itemsize,
    })
}

/// Whether `strides` (bytes) describe a C-contiguous array of `shape` (unit dimensions may
/// have any stride).
fn is_c_contiguous(shape: &[usize], strides: &[i64], itemsize: usize) -> bool {
    let mut expected = itemsize as i64;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d > 1 && s != expected {
            return false;
        }
        expected *= d as i64;
    }
    strides.len() == shape.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguity_ignores_unit_dimensions() {
        assert!(is_c_contiguous(&[10, 4], &[16, 4], 4));
        assert!(is_c_contiguous(&[1, 4], &[0, 4], 4));
        assert!(!is_c_contiguous(&[10, 4], &[4, 40], 4));
        assert!(!is_c_contiguous(&[10, 4], &[16], 4));
    }
}
