//! `cuvk.Producer`: a simulation in this process writing frames into a viewer in another
//! process (`particles --serve NAME`, or any `cuvk::ipc::FrameServer`), zero-copy, ordered on
//! the GPU by the viewer's timelines. The viewer's buffers are CUDA arrays here
//! (`__cuda_array_interface__`): `torch.as_tensor(slot, device="cuda")` is a tensor over the
//! viewer's memory.

use std::sync::{Arc, Mutex};

use cuvk::cuda::MappedRange;
use cuvk::ipc::FrameClient;
use cuvk::{ElementFormat, Frame};
use dlpark::ffi::{
    DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned,
};
use dlpark::metadata::Dynamic;
use dlpark::python::{export_dlpack, DlpackExporter, ExportRequest};
use dlpark::{DlpackFlags, Managed, ManagedTensorBase};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::bridge::timeout_seconds;
use crate::dtype::DType;
use crate::errors::{refusal, IntoPyResult};
use crate::stream::{self, Convention, StreamArg};

/// Memory shared with another process — a viewer's buffer mapped here, or a publisher's
/// slot — and what it holds.
pub(crate) struct AttachedCore {
    ptr: u64,
    bytes: u64,
    element: ElementFormat,
    device: usize,
    /// What keeps the memory alive (the mapping, or the publisher that owns the slot).
    _keep: Box<dyn std::any::Any + Send + Sync>,
}

impl AttachedCore {
    /// `bytes` at `ptr` on CUDA device `device`, typed `element`, alive while `keep` is.
    pub(crate) fn new(
        ptr: u64,
        bytes: u64,
        element: ElementFormat,
        device: usize,
        keep: Box<dyn std::any::Any + Send + Sync>,
    ) -> Self {
        Self {
            ptr,
            bytes,
            element,
            device,
            _keep: keep,
        }
    }

    /// A viewer's buffer, mapped here.
    fn mapped(range: MappedRange, element: ElementFormat, device: usize) -> Self {
        Self::new(
            range.device_ptr(),
            range.size(),
            element,
            device,
            Box::new(range),
        )
    }

    /// Rows, then values per row where there are several (DLPack's lanes are in its dtype).
    fn shape(&self) -> Vec<usize> {
        let rows = (self.bytes / self.element.row_bytes().max(1)) as usize;
        match self.element.columns {
            1 => vec![rows],
            c => vec![rows, c as usize],
        }
    }

    fn managed<M: ManagedTensorBase>(self: &Arc<Self>) -> PyResult<Managed<M>> {
        let shape: Vec<i64> = self.shape().iter().map(|&d| d as i64).collect();
        let strides: Vec<i64> = match shape.as_slice() {
            [_, c] => vec![*c, 1],
            _ => vec![1],
        };
        let metadata = Dynamic::new(shape.as_slice(), strides.as_slice())
            .prepare_as::<M>()
            .map_err(|e| PyRuntimeError::new_err(format!("DLPack metadata: {e}")))?;
        let mut init = metadata.initialize(self.clone());
        init.set_device(DLDevice {
            device_type: DLDeviceType::CUDA,
            device_id: self.device as i32,
        });
        init.set_dtype(DLDataType {
            code: DLDataTypeCode(self.element.code),
            bits: self.element.bits,
            lanes: self.element.lanes,
        });
        init.set_data(self.ptr as *mut std::ffi::c_void);
        // SAFETY: the data pointer is our live mapping, covered by the compact shape (whole
        // rows: checked when the description was received); the context (an Arc of the
        // mapping) keeps it alive until the consumer calls the deleter.
        Ok(unsafe { init.finish() })
    }
}

/// One `__dlpack__` call on an attached buffer. No stream work: frames are ordered by
/// `Producer.acquire` / `Producer.release` on the stream the caller names there.
struct Exporter<'a>(&'a Arc<AttachedCore>);

impl DlpackExporter for Exporter<'_> {
    fn device(&self) -> DLDevice {
        DLDevice {
            device_type: DLDeviceType::CUDA,
            device_id: self.0.device as i32,
        }
    }
    fn flags(&self) -> DlpackFlags {
        DlpackFlags::empty()
    }
    fn prepare_export(&self, _py: Python<'_>, _request: &ExportRequest<'_>) -> PyResult<()> {
        Ok(())
    }
    fn export_legacy(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensor>> {
        self.0.managed()
    }
    fn export_versioned(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensorVersioned>> {
        self.0.managed()
    }
}

/// One of the viewer's buffers, mapped into this process's CUDA context, typed as the viewer
/// published it (DLPack's data type, rows of values). Tensors made from it (through DLPack or
/// the CUDA array interface) hold it, and it holds the mapping.
#[pyclass(name = "AttachedBuffer", module = "cuvk", frozen)]
pub struct PyAttachedBuffer {
    pub(crate) core: Arc<AttachedCore>,
}

#[pymethods]
impl PyAttachedBuffer {
    /// Size in bytes.
    #[getter]
    fn nbytes(&self) -> u64 {
        self.core.bytes
    }

    /// The CUDA device pointer.
    #[getter]
    fn ptr(&self) -> u64 {
        self.core.ptr
    }

    /// Rows, then values per row where there are several: `(n, 4)` for float4 positions.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.core.shape())
    }

    /// The element type's name ("float32"), as the viewer published it; DLPack's
    /// `(code, bits, lanes)` for a type NumPy has no name for.
    #[getter]
    fn dtype(&self) -> String {
        let e = self.core.element;
        match (dtype_of(e), e.lanes) {
            (Some(d), 1) => d.name(),
            _ => format!("dlpack({}, {}, {})", e.code, e.bits, e.lanes),
        }
    }

    /// Version 3 of the CUDA array interface, typed and shaped as the viewer published the
    /// buffer. No stream: order with `Producer.acquire` / `Producer.release`. Refused
    /// (`Layout.ElementFormat`) for a type the interface cannot name (bfloat16, vectors).
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let e = self.core.element;
        let dtype = dtype_of(e).filter(|_| e.lanes == 1).ok_or_else(|| {
            refusal(
                "InvalidInput",
                "Layout.ElementFormat",
                format!(
                    "the CUDA array interface has no type string for DLPack ({}, {}, {}): use DLPack",
                    e.code, e.bits, e.lanes
                ),
                &[],
            )
        })?;
        let d = PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, self.core.shape())?)?;
        d.set_item("typestr", dtype.typestr())?;
        d.set_item("data", (self.core.ptr, false))?;
        d.set_item("strides", py.None())?;
        d.set_item("version", 3)?;
        d.set_item("stream", py.None())?;
        Ok(d)
    }

    /// DLPack export (`torch.from_dlpack`, `cupy.from_dlpack`): the same memory, typed as
    /// published; the capsule holds the mapping. `stream` is read and not used: order frames
    /// with `Producer.acquire` / `Producer.release` on that stream.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(u32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        stream::parse(stream, Convention::Dlpack)?;
        let request = ExportRequest::parse(None, max_version, dl_device, copy)?;
        export_dlpack(&Exporter(&self.core), py, request)
    }

    /// `(2, ordinal)`: a CUDA device, as DLPack names it.
    fn __dlpack_device__(&self) -> (u32, i32) {
        (2, self.core.device as i32)
    }

    fn __repr__(&self) -> String {
        format!(
            "cuvk.AttachedBuffer(shape={:?}, dtype={}, nbytes={})",
            self.core.shape(),
            self.dtype(),
            self.core.bytes
        )
    }
}

/// The NumPy-named type of an element format, where it has one.
fn dtype_of(e: ElementFormat) -> Option<DType> {
    let bytes = e.bits / 8;
    match e.code {
        ElementFormat::BOOL if e.bits == 8 => Some(DType::Bool),
        ElementFormat::INT => Some(DType::Int(bytes)),
        ElementFormat::UINT => Some(DType::UInt(bytes)),
        ElementFormat::FLOAT if e.bits >= 16 => Some(DType::Float(bytes)),
        _ => None,
    }
}

/// A frame handed out by `Producer.acquire`: its number and the slot it writes.
#[pyclass(name = "Frame", module = "cuvk", frozen)]
pub struct PyFrame {
    pub(crate) frame: Frame,
}

#[pymethods]
impl PyFrame {
    /// The frame's number (1, 2, ...): the timeline value of this frame.
    #[getter]
    fn number(&self) -> u64 {
        self.frame.number()
    }

    /// The index in `Producer.slots` this frame writes: `number % len(slots)`.
    #[getter]
    fn slot(&self) -> usize {
        self.frame.slot()
    }

    /// The last frame that wrote this slot (`number - K`), or None.
    #[getter]
    fn previous_use(&self) -> Option<u64> {
        self.frame.previous_use()
    }

    fn __repr__(&self) -> String {
        format!(
            "cuvk.Frame(number={}, slot={})",
            self.frame.number(),
            self.frame.slot()
        )
    }
}

/// A producer attached to the viewer `name`: its buffers (`slots`), and the calls that order
/// this process's CUDA work against the viewer's drawing on the GPU.
#[pyclass(name = "Producer", module = "cuvk", frozen)]
pub struct PyProducer {
    client: Mutex<FrameClient>,
    slots: Vec<Py<PyAttachedBuffer>>,
    device: usize,
}

fn no_ordering() -> PyErr {
    refusal(
        "InvalidInput",
        "Stream.NoSync",
        "Producer.acquire/release order a stream: -1 (no ordering) is not one",
        &[],
    )
}

#[pymethods]
impl PyProducer {
    /// Attaches to the viewer `name` from CUDA device `device` (the viewer's GPU: checked);
    /// waits at most `timeout` seconds. Frames in flight: the viewer's (`len(slots)`).
    #[new]
    #[pyo3(signature = (name, device = 0, timeout = 30.0))]
    fn new(py: Python<'_>, name: &str, device: usize, timeout: f64) -> PyResult<Self> {
        let timeout = timeout_seconds(timeout)?;
        let (client, ranges) = py
            .detach(|| -> cuvk::Result<_> {
                let cuda = cuvk::cuda::context(device)?;
                let client = FrameClient::attach(name, &cuda, timeout)?;
                let ranges = (0..client.frames_in_flight() as usize)
                    .map(|s| Ok((client.slot_bytes(s)?, client.slot_info(s)?.element)))
                    .collect::<cuvk::Result<Vec<_>>>()?;
                Ok((client, ranges))
            })
            .py()?;
        let slots = ranges
            .into_iter()
            .map(|(range, element)| {
                let core = Arc::new(AttachedCore::mapped(range, element, device));
                Py::new(py, PyAttachedBuffer { core })
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Self {
            client: Mutex::new(client),
            slots,
            device,
        })
    }

    /// The viewer's buffers, in the order it published them (frame n writes slot
    /// `n % len(slots)`: `Frame.slot`).
    #[getter]
    fn slots(&self, py: Python<'_>) -> Vec<Py<PyAttachedBuffer>> {
        self.slots.iter().map(|s| s.clone_ref(py)).collect()
    }

    /// The CUDA device ordinal.
    #[getter]
    fn device(&self) -> usize {
        self.device
    }

    /// The next frame: `stream` waits on the GPU until the viewer drew the last frame that
    /// used its slot (`number - K`). Waits on the host (at most `timeout` seconds, the GIL
    /// released) only while the viewer has not announced that frame yet. After a timeout the
    /// same frame is acquired again by the next call.
    #[pyo3(signature = (stream = None, timeout = 30.0))]
    fn acquire(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        timeout: f64,
    ) -> PyResult<PyFrame> {
        let stream = stream_handle(stream)?;
        let timeout = timeout_seconds(timeout)?;
        let frame = py
            .detach(|| -> cuvk::Result<Frame> {
                let mut client = self.client.lock().unwrap_or_else(|p| p.into_inner());
                // The frame begun and not yet released, again after a timeout; else the next.
                let frame = client.begin_frame()?;
                // SAFETY: Python names the stream as live (as DLPack's protocol does); its
                // context is checked against ours.
                unsafe { client.acquire_raw(&frame, raw(stream), timeout) }?;
                Ok(frame)
            })
            .py()?;
        Ok(PyFrame { frame })
    }

    /// After writing `frame`: `stream` signals it written (the viewer's draw waits for it
    /// on the GPU) and the viewer is told. No host wait.
    #[pyo3(signature = (frame, stream = None))]
    fn release(
        &self,
        py: Python<'_>,
        frame: &Bound<'_, PyFrame>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let stream = stream_handle(stream)?;
        let frame = frame.get().frame;
        py.detach(|| {
            let mut client = self.client.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: as in `acquire`.
            unsafe { client.release_raw(&frame, raw(stream)) }
        })
        .py()
    }

    /// The newest frame the viewer announced drawn (no wait).
    fn drawn(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| {
            self.client
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drawn()
        })
        .py()
    }

    /// After the viewer is gone: releases this process's stream waits on its timeline.
    fn release_waits(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| {
            self.client
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .release_waits()
        })
        .py()
    }

    fn __repr__(&self) -> String {
        format!(
            "cuvk.Producer(device={}, slots={})",
            self.device,
            self.slots.len()
        )
    }
}

/// The stream's handle as an integer (a raw pointer is not `Send`: the GIL-free closures
/// turn it back with [`raw`]).
pub(crate) fn stream_handle(stream: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
    match stream::parse(stream, Convention::Cuvk)? {
        StreamArg::NoSync => Err(no_ordering()),
        StreamArg::Handle(h) => Ok(h),
    }
}

pub(crate) fn raw(handle: usize) -> cuvk::cudarc::driver::sys::CUstream {
    handle as cuvk::cudarc::driver::sys::CUstream
}
