//! CUDA streams handed in from Python, read by one parser for every entry point
//! (`__dlpack__`, `cuda_acquire`, `cuda_release`, `draw`).
//!
//! A stream is one of:
//! - `None`: the legacy default stream;
//! - an int (or an object with `__index__`), by DLPack's convention: `-1` no ordering, `1` the
//!   legacy default stream, `2` the per-thread default stream, any other value a `cudaStream_t`
//!   handle. `0` is where the two conventions differ: DLPack (`__dlpack__`) refuses it as
//!   ambiguous; cuvk's own calls read it as the NULL handle, the legacy default stream (what
//!   `torch.cuda.default_stream().cuda_stream` and CuPy's null stream's `ptr` are);
//! - a stream object, by its handle: the CUDA stream protocol (`__cuda_stream__()` returning
//!   `(0, handle)`; a bare handle or a non-callable attribute is also read), else a
//!   `cuda_stream` (PyTorch), `ptr` (CuPy) or `handle` (PyCUDA) int attribute, in that order.
//!   An object's handle is a `cudaStream_t` as it is (0 the NULL stream), never `-1`.
//!
//! Handles are `intptr_t` values, as DLPack and the frameworks pass them: an int outside
//! `-1 ..= isize::MAX` (2**63 and above, below -1) names no stream. Every refusal is a cuvk
//! exception with its rule (`Stream.*`) and, where there is one, the value it was given.

use cuvk::cudarc::driver::sys;
use pyo3::exceptions::PyAttributeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyTuple};

use crate::errors::{refusal, with_number};

/// A stream a Python caller named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamArg {
    /// No ordering wanted (DLPack's `-1`).
    NoSync,
    /// A CUDA stream handle; null is the legacy default stream.
    Handle(usize),
}

impl StreamArg {
    /// The raw handle, when there is one.
    pub fn handle(self) -> Option<sys::CUstream> {
        match self {
            StreamArg::NoSync => None,
            StreamArg::Handle(h) => Some(h as sys::CUstream),
        }
    }
}

/// What a bare integer means where it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Convention {
    /// `__dlpack__(stream=)`, the Python array API's rule for CUDA: `0` is refused (it could
    /// mean the legacy default stream, the per-thread one, or "none given").
    Dlpack,
    /// cuvk's `cuda_acquire`, `cuda_release` and `draw`: as DLPack, but `0` is the NULL
    /// handle, the legacy default stream, as in CUDA's own API.
    Cuvk,
}

/// CUDA's per-thread default stream handle (`CU_STREAM_PER_THREAD`).
const PER_THREAD: usize = 2;
/// The legacy default stream as a handle (`CU_STREAM_LEGACY`); cuvk passes null for it.
const LEGACY: i128 = 1;

/// Reads a stream argument (see the module's documentation); `None` is the legacy default
/// stream under both conventions.
pub fn parse(stream: Option<&Bound<'_, PyAny>>, convention: Convention) -> PyResult<StreamArg> {
    let Some(s) = stream.filter(|s| !s.is_none()) else {
        return Ok(StreamArg::Handle(0));
    };
    if let Some(int) = as_int(s) {
        let value = int_value(&int);
        return match value {
            Some(-1) => Ok(StreamArg::NoSync),
            Some(0) if convention == Convention::Dlpack => Err(with_number(
                refusal(
                    "InvalidInput",
                    "Stream.Zero",
                    "DLPack disallows stream=0 for CUDA (it could mean the legacy default \
                     stream, the per-thread default stream or none): pass 1 for the legacy \
                     default stream, 2 for the per-thread one, -1 for no ordering",
                    &[],
                ),
                "stream",
                &int,
            )),
            _ => handle(&int, value, false),
        };
    }
    let int = object_handle(s)?;
    handle(&int, int_value(&int), true)
}

/// `value` (the int `int`, when it fits an i128) as a stream handle: `0 ..= isize::MAX`.
/// `of_object`: the handle came from a stream object (for the message).
fn handle(int: &Bound<'_, PyInt>, value: Option<i128>, of_object: bool) -> PyResult<StreamArg> {
    match value {
        Some(0 | LEGACY) => Ok(StreamArg::Handle(0)),
        // 2 (`CU_STREAM_PER_THREAD`) or a handle; in range for isize, so for usize.
        Some(v) if (PER_THREAD as i128..=isize::MAX as i128).contains(&v) => {
            Ok(StreamArg::Handle(v as usize))
        }
        _ => Err(with_number(
            refusal(
                "InvalidInput",
                "Stream.Handle",
                if of_object {
                    format!(
                        "the stream object's handle {int} is not a cudaStream_t: handles are \
                         0 to 2**{bits} - 1",
                        bits = isize::BITS - 1
                    )
                } else {
                    format!(
                        "stream={int} names no CUDA stream: a stream is -1 (no ordering), 1 \
                         (the legacy default stream), 2 (the per-thread default stream) or a \
                         cudaStream_t handle below 2**{bits}",
                        bits = isize::BITS - 1
                    )
                },
                &[("max", isize::MAX as i128)],
            ),
            "stream",
            int,
        )),
    }
}

/// The int `s` is (an `int`, or an object with `__index__` such as a NumPy integer), or None
/// when it is not one. A `bool` is not a stream.
fn as_int<'py>(s: &Bound<'py, PyAny>) -> Option<Bound<'py, PyInt>> {
    if s.is_instance_of::<PyBool>() {
        return None;
    }
    if let Ok(int) = s.cast::<PyInt>() {
        return Some(int.clone());
    }
    if !s.hasattr("__index__").unwrap_or(false) {
        return None;
    }
    // An `__index__` that fails (a tensor of several elements) makes no int.
    s.call_method0("__index__")
        .ok()
        .and_then(|i| i.cast_into::<PyInt>().ok())
}

/// An int's value where it fits an i128 (else it is out of every stream range anyway).
fn int_value(int: &Bound<'_, PyInt>) -> Option<i128> {
    int.extract::<i128>().ok()
}

/// The handle inside a stream object (an int, not yet range-checked).
fn object_handle<'py>(s: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyInt>> {
    let py = s.py();
    let proto = match s.getattr("__cuda_stream__") {
        Ok(p) => Some(p),
        Err(e) if e.is_instance_of::<PyAttributeError>(py) => None,
        // The object has the protocol but cannot give it: its own error says why.
        Err(e) => return Err(e),
    };
    if let Some(proto) = proto {
        let value = if proto.is_callable() {
            proto.call0()?
        } else {
            proto
        };
        return protocol_handle(&value);
    }
    for attr in ["cuda_stream", "ptr", "handle"] {
        if let Ok(v) = s.getattr(attr) {
            if let Some(int) = as_int(&v) {
                return Ok(int);
            }
        }
    }
    Err(refusal(
        "InvalidInput",
        "Stream.Type",
        format!(
            "stream must be None, an int, or a CUDA stream object (torch.cuda.Stream, \
             cupy.cuda.Stream, anything with __cuda_stream__), not {}",
            s.get_type().name()?
        ),
        &[],
    ))
}

/// The handle in what `__cuda_stream__` gave: `(0, handle)` (the protocol, version 0), or a
/// bare handle.
fn protocol_handle<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyInt>> {
    if let Some(int) = as_int(value) {
        return Ok(int);
    }
    let bad = |message: String, numbers: &[(&str, i128)]| {
        refusal("InvalidInput", "Stream.Protocol", message, numbers)
    };
    let Ok(pair) = value.cast::<PyTuple>() else {
        return Err(bad(
            format!(
                "__cuda_stream__ must give (version, handle), not {}",
                value.get_type().name()?
            ),
            &[],
        ));
    };
    if pair.len() != 2 {
        return Err(bad(
            format!(
                "__cuda_stream__ must give (version, handle), not a tuple of {}",
                pair.len()
            ),
            &[("len", pair.len() as i128)],
        ));
    }
    let (version, handle) = (pair.get_item(0)?, pair.get_item(1)?);
    match as_int(&version) {
        Some(v) if int_value(&v) == Some(0) => {}
        Some(v) => {
            return Err(with_number(
                bad(
                    format!("__cuda_stream__ gave protocol version {v}; cuvk reads version 0"),
                    &[],
                ),
                "version",
                &v,
            ))
        }
        None => {
            return Err(bad(
                format!(
                    "__cuda_stream__'s version must be an int, not {}",
                    version.get_type().name()?
                ),
                &[],
            ))
        }
    }
    as_int(&handle).ok_or_else(|| {
        let name = handle
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        bad(
            format!("__cuda_stream__'s handle must be an int, not {name}"),
            &[],
        )
    })
}

/// `_parse_stream(stream, convention="cuvk")`: the handle cuvk would order on for `stream`
/// (0 the legacy default stream, 2 the per-thread one), None for no ordering, or the
/// refusal. `convention` is `"dlpack"` (`__dlpack__`) or `"cuvk"` (`cuda_acquire`,
/// `cuda_release`, `draw`). The parser every entry point uses, reachable without a GPU (for
/// tests).
#[pyfunction(name = "_parse_stream")]
#[pyo3(signature = (stream, convention = "cuvk"))]
pub fn py_parse_stream(stream: &Bound<'_, PyAny>, convention: &str) -> PyResult<Option<usize>> {
    let convention = match convention {
        "dlpack" => Convention::Dlpack,
        "cuvk" => Convention::Cuvk,
        other => {
            return Err(refusal(
                "InvalidInput",
                "Stream.Convention",
                format!("convention is \"dlpack\" or \"cuvk\", not {other:?}"),
                &[],
            ))
        }
    };
    Ok(match parse(Some(stream), convention)? {
        StreamArg::NoSync => None,
        StreamArg::Handle(h) => Some(h),
    })
}

/// Refuses a stream that is capturing a CUDA graph (e.g. under `torch.compile(mode=
/// "reduce-overhead")` or `torch.cuda.graph`): a semaphore wait or signal would be recorded
/// into the graph instead of running, and Vulkan would wait for a value that never comes.
///
/// # Safety
/// `stream` must be null or a live CUDA stream.
pub unsafe fn refuse_capturing(stream: sys::CUstream) -> PyResult<()> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the caller vouches for the stream; `status` is a valid out-pointer.
    let result = unsafe { sys::cuStreamIsCapturing(stream, &mut status) };
    if result == sys::CUresult::CUDA_SUCCESS
        && status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
    {
        return Ok(());
    }
    if result != sys::CUresult::CUDA_SUCCESS {
        // Not a stream cuvk can ask (the caller's context is not current, ...): the ordering
        // call itself reports what is wrong with it.
        return Ok(());
    }
    Err(refusal(
        "InvalidInput",
        "Stream.Capturing",
        "the stream is capturing a CUDA graph: cuvk's GPU waits and signals would be \
         recorded into the graph instead of running; order outside the capture",
        &[],
    ))
}
