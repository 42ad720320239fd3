//! CUDA streams handed in from Python: an integer handle (DLPack's convention: 1 the legacy
//! default stream, 2 the per-thread default stream), a `torch.cuda.Stream` (`cuda_stream`),
//! a CuPy stream (`ptr`), or any object with `__cuda_stream__` (the CUDA stream protocol:
//! a `(version, handle)` pair, or a handle).

use cuvk::cudarc::driver::sys;
use pyo3::prelude::*;

use crate::errors::refusal;

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

/// CUDA's per-thread default stream handle (`CU_STREAM_PER_THREAD`).
const PER_THREAD: usize = 2;

/// Reads a stream argument; `None` is the legacy default stream (DLPack's rule for CUDA).
pub fn parse(stream: Option<&Bound<'_, PyAny>>) -> PyResult<StreamArg> {
    let Some(s) = stream else {
        return Ok(StreamArg::Handle(0));
    };
    if s.is_none() {
        return Ok(StreamArg::Handle(0));
    }
    let value: i64 = match s.extract::<i64>() {
        Ok(v) => v,
        Err(_) => handle_of(s)?,
    };
    match value {
        -1 => Ok(StreamArg::NoSync),
        // 0 is ambiguous in DLPack; CUDA means the legacy default stream by it, as by 1.
        0 | 1 => Ok(StreamArg::Handle(0)),
        2 => Ok(StreamArg::Handle(PER_THREAD)),
        v if v > 2 => Ok(StreamArg::Handle(v as usize)),
        v => Err(refusal(
            "InvalidInput",
            "Stream.Handle",
            format!("a CUDA stream is -1, 1, 2 or a stream handle, not {v}"),
            &[("stream", i128::from(v))],
        )),
    }
}

/// The handle inside a stream object.
fn handle_of(s: &Bound<'_, PyAny>) -> PyResult<i64> {
    if let Ok(proto) = s.getattr("__cuda_stream__") {
        let value = if proto.is_callable() {
            proto.call0()?
        } else {
            proto
        };
        if let Ok((_version, handle)) = value.extract::<(i64, i64)>() {
            return Ok(handle);
        }
        if let Ok(handle) = value.extract::<i64>() {
            return Ok(handle);
        }
    }
    for attr in ["cuda_stream", "ptr", "handle"] {
        if let Ok(v) = s.getattr(attr).and_then(|v| v.extract::<i64>()) {
            return Ok(v);
        }
    }
    Err(refusal(
        "InvalidInput",
        "Stream.Type",
        format!(
            "stream must be None, an int, or a CUDA stream object (torch.cuda.Stream, \
             cupy.cuda.Stream, __cuda_stream__), not {}",
            s.get_type().name()?
        ),
        &[],
    ))
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
