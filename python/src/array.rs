//! Arrays handed in from Python: a `SharedBuffer`, or a tensor / array over cuvk memory
//! (PyTorch, CuPy, JAX, Numba: anything with `__cuda_array_interface__`), traced back to its
//! buffer, with its device, dtype and layout checked.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::bridge::Shared;
use crate::buffer::{BufferCore, PySharedBuffer};
use crate::dtype::DType;
use crate::errors::refusal;

/// An array over a cuvk buffer.
pub struct Array {
    /// The buffer holding it.
    pub core: Arc<BufferCore>,
    /// Its first byte, as a device pointer.
    pub ptr: u64,
    /// Elements per dimension.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
}

impl Array {
    /// Element count (the shape was checked not to overflow when the array was resolved).
    pub fn len(&self) -> usize {
        self.shape
            .iter()
            .fold(1usize, |acc, &d| acc.saturating_mul(d))
    }
}

/// Finds the cuvk buffer under `obj` and checks it is on `shared`'s device, C-contiguous.
pub fn resolve(shared: &Arc<Shared>, obj: &Bound<'_, PyAny>) -> PyResult<Array> {
    if let Ok(buf) = obj.cast::<PySharedBuffer>() {
        let core = buf.get().core.clone();
        if !Arc::ptr_eq(&core.shared, shared) {
            return Err(refusal(
                "WrongDevice",
                "Array.Bridge",
                "this SharedBuffer belongs to another cuvk.Bridge",
                &[],
            ));
        }
        return Ok(Array {
            ptr: core.ptr(),
            shape: core.shape.clone(),
            dtype: core.dtype,
            core,
        });
    }
    check_device(shared, obj)?;
    let view = crate::cai::read(obj, "a cuvk.SharedBuffer or a CUDA array over one")?;
    let dtype = DType::parse(&view.typestr).ok_or_else(|| {
        refusal(
            "InvalidInput",
            "Array.Dtype",
            format!("element type '{}' is not one cuvk shares", view.typestr),
            &[],
        )
    })?;
    let (ptr, shape) = (view.ptr, view.shape);
    let bytes = nbytes(&shape, dtype)? as u64;
    let core = shared.find(ptr, bytes).ok_or_else(|| {
        refusal(
            "InvalidInput",
            "Array.NotShared",
            format!(
                "the array's memory (0x{ptr:x}, {bytes} bytes) is not in a buffer of this \
                 bridge: make it with bridge.buffer(...) and torch.from_dlpack / cupy.from_dlpack"
            ),
            &[("ptr", i128::from(ptr)), ("bytes", i128::from(bytes))],
        )
    })?;
    Ok(Array {
        core,
        ptr,
        shape,
        dtype,
    })
}

/// Where the byte count of a shape left `usize`: the product `bytes_so_far` (the element
/// size times the dimensions before `axis`) times `dim`, the size of dimension `axis`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overflow {
    /// Bytes per element.
    pub itemsize: usize,
    /// The dimension whose size overflowed the product (0 is the first).
    pub axis: usize,
    /// That dimension's size.
    pub dim: usize,
    /// The element size times every dimension before `axis`.
    pub bytes_so_far: usize,
}

/// Bytes of `shape` elements of `itemsize` bytes each, or where the product overflows (a
/// shape with a zero dimension holds 0 bytes, whatever the other dimensions).
pub fn checked_nbytes(shape: &[usize], itemsize: usize) -> Result<usize, Overflow> {
    if shape.contains(&0) {
        return Ok(0);
    }
    let mut bytes = itemsize;
    for (axis, &dim) in shape.iter().enumerate() {
        bytes = bytes.checked_mul(dim).ok_or(Overflow {
            itemsize,
            axis,
            dim,
            bytes_so_far: bytes,
        })?;
    }
    Ok(bytes)
}

/// Bytes of an array of `shape` × `dtype`, refused (`Array.Overflow`, with the dimension
/// that overflowed and the product before it as numbers) when it does not fit the address
/// space.
pub fn nbytes(shape: &[usize], dtype: DType) -> PyResult<usize> {
    checked_nbytes(shape, dtype.itemsize()).map_err(|o| {
        refusal(
            "InvalidInput",
            "Array.Overflow",
            format!(
                "shape {shape:?} of {} overflows the address space: {} bytes before axis {} \
                 times its size {} exceed {}",
                dtype.name(),
                o.bytes_so_far,
                o.axis,
                o.dim,
                usize::MAX
            ),
            &[
                ("itemsize", o.itemsize as i128),
                ("axis", o.axis as i128),
                ("dim", o.dim as i128),
                ("bytes_so_far", o.bytes_so_far as i128),
            ],
        )
    })
}

/// `__dlpack_device__` must say CUDA device `shared.ordinal` where the object has it.
fn check_device(shared: &Shared, obj: &Bound<'_, PyAny>) -> PyResult<()> {
    let Ok(f) = obj.getattr("__dlpack_device__") else {
        return Ok(());
    };
    let (kind, id): (i64, i64) = f.call0()?.extract()?;
    // kDLCUDA = 2 (kDLCUDAManaged = 13 is also device memory, but never cuvk's).
    if kind != 2 || id != shared.ordinal as i64 {
        let what = match kind {
            1 => "the CPU".to_owned(),
            2 => format!("CUDA device {id}"),
            k => format!("DLPack device type {k} (id {id})"),
        };
        return Err(refusal(
            "WrongDevice",
            "Array.Device",
            format!(
                "the array is on {what}; this bridge shares memory of CUDA device {}",
                shared.ordinal
            ),
            &[
                ("device_type", i128::from(kind)),
                ("device_id", i128::from(id)),
                ("expected_device_id", shared.ordinal as i128),
            ],
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_name_the_dimension_that_overflows() {
        assert_eq!(checked_nbytes(&[3, 5], 4), Ok(60));
        assert_eq!(checked_nbytes(&[], 8), Ok(8));
        assert_eq!(checked_nbytes(&[0, usize::MAX], 4), Ok(0));
        assert_eq!(checked_nbytes(&[usize::MAX, usize::MAX, 0], 4), Ok(0));
        assert_eq!(
            checked_nbytes(&[1 << 20, 1 << 50, 3], 4),
            Err(Overflow {
                itemsize: 4,
                axis: 1,
                dim: 1 << 50,
                bytes_so_far: 4 << 20,
            })
        );
        assert_eq!(
            checked_nbytes(&[usize::MAX], 2),
            Err(Overflow {
                itemsize: 2,
                axis: 0,
                dim: usize::MAX,
                bytes_so_far: 2,
            })
        );
    }
}
