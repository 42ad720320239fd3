//! `cuvk.Producer`: a simulation in this process writing frames into a viewer in another
//! process (`particles --serve NAME`, or any `cuvk::ipc::FrameServer`), zero-copy, ordered on
//! the GPU by the viewer's timelines. The viewer's buffers are CUDA arrays here
//! (`__cuda_array_interface__`): `torch.as_tensor(slot, device="cuda")` is a tensor over the
//! viewer's memory.

use std::sync::{Arc, Mutex};

use cuvk::cuda::MappedRange;
use cuvk::ipc::FrameClient;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::bridge::timeout_seconds;
use crate::errors::{refusal, IntoPyResult};
use crate::stream::{self, Convention, StreamArg};

/// One of the viewer's buffers, mapped into this process's CUDA context. Tensors made from
/// it (through the CUDA array interface) hold it, and it holds the mapping.
#[pyclass(name = "AttachedBuffer", module = "cuvk", frozen)]
pub struct PyAttachedBuffer {
    range: Arc<MappedRange>,
    element_size: u32,
}

#[pymethods]
impl PyAttachedBuffer {
    /// Size in bytes.
    #[getter]
    fn nbytes(&self) -> u64 {
        self.range.size()
    }

    /// The CUDA device pointer.
    #[getter]
    fn ptr(&self) -> u64 {
        self.range.device_ptr()
    }

    /// Version 3 of the CUDA array interface: float32, shape (n, 4) for the 16-byte elements
    /// the particle viewer publishes, else (bytes / 4,). No stream: order with
    /// `Producer.acquire` / `Producer.release`.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let words = self.range.size() / 4;
        if self.element_size == 16 {
            d.set_item("shape", PyTuple::new(py, [words / 4, 4])?)?;
        } else {
            d.set_item("shape", PyTuple::new(py, [words])?)?;
        }
        d.set_item("typestr", "<f4")?;
        d.set_item("data", (self.range.device_ptr(), false))?;
        d.set_item("strides", py.None())?;
        d.set_item("version", 3)?;
        d.set_item("stream", py.None())?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("cuvk.AttachedBuffer(nbytes={})", self.range.size())
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
                let ranges = client
                    .buffer_ids()
                    .iter()
                    .map(|&id| {
                        Ok((
                            client.buffer_bytes(id)?,
                            client.buffer_info(id)?.element_size,
                        ))
                    })
                    .collect::<cuvk::Result<Vec<_>>>()?;
                Ok((client, ranges))
            })
            .py()?;
        let slots = ranges
            .into_iter()
            .map(|(range, element_size)| {
                Py::new(
                    py,
                    PyAttachedBuffer {
                        range: Arc::new(range),
                        element_size,
                    },
                )
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Self {
            client: Mutex::new(client),
            slots,
            device,
        })
    }

    /// The viewer's buffers, in the order it published them (frame n writes slot
    /// `(n - 1) % len(slots)`).
    #[getter]
    fn slots(&self, py: Python<'_>) -> Vec<Py<PyAttachedBuffer>> {
        self.slots.iter().map(|s| s.clone_ref(py)).collect()
    }

    /// The CUDA device ordinal.
    #[getter]
    fn device(&self) -> usize {
        self.device
    }

    /// Before writing frame `n` (1, 2, ...): `stream` waits on the GPU until the viewer drew
    /// frame `n - K`. Waits on the host (at most `timeout` seconds, the GIL released) only
    /// while the viewer has not announced that frame yet.
    #[pyo3(signature = (n, stream = None, timeout = 30.0))]
    fn acquire(
        &self,
        py: Python<'_>,
        n: u64,
        stream: Option<&Bound<'_, PyAny>>,
        timeout: f64,
    ) -> PyResult<()> {
        let stream = stream_handle(stream)?;
        let timeout = timeout_seconds(timeout)?;
        py.detach(|| {
            let mut c = self.client.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: Python names the stream as live (as DLPack's protocol does); its
            // context is checked against ours.
            unsafe { c.acquire_raw(n, raw(stream), timeout) }
        })
        .py()
    }

    /// After writing frame `n`: `stream` signals it written (the viewer's draw waits for it
    /// on the GPU) and the viewer is told. No host wait.
    #[pyo3(signature = (n, stream = None))]
    fn release(&self, py: Python<'_>, n: u64, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let stream = stream_handle(stream)?;
        py.detach(|| {
            let mut c = self.client.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: as in `acquire`.
            unsafe { c.release_raw(n, raw(stream)) }
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
fn stream_handle(stream: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
    match stream::parse(stream, Convention::Cuvk)? {
        StreamArg::NoSync => Err(no_ordering()),
        StreamArg::Handle(h) => Ok(h),
    }
}

fn raw(handle: usize) -> cuvk::cudarc::driver::sys::CUstream {
    handle as cuvk::cudarc::driver::sys::CUstream
}
