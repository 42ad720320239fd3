//! `cuvk.Publisher` and `cuvk.Subscriber` (fan-out, issue 37): a PyTorch job (or any CUDA
//! code) publishes frames that any number of consumers in other processes read, and a Python
//! consumer reads another process's frames as CuPy / PyTorch arrays. Both order their work on
//! the stream the caller names (its GPU waits and signals, no host waits per frame); the
//! slots are typed DLPack / `__cuda_array_interface__` buffers (`cuvk.AttachedBuffer`).

use std::sync::{Arc, Mutex};

use cuvk::ipc::{CudaSubscriber, Held, Publisher, PublisherDesc};
use cuvk::ElementFormat;
use pyo3::prelude::*;

use crate::bridge::{parse_dtype, parse_shape, timeout_seconds, PyBridge};
use crate::errors::{refusal, IntoPyResult};
use crate::ipc::{raw, stream_handle, AttachedCore, PyAttachedBuffer, PyFrame};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Typed buffers over `slots` (`(device pointer, bytes, element)` on CUDA device `device`),
/// each holding `keep` — the owner of the memory — for as long as any tensor made from it.
fn shared_slots<K: Clone + Send + Sync + 'static>(
    py: Python<'_>,
    slots: impl IntoIterator<Item = (u64, u64, ElementFormat)>,
    device: usize,
    keep: &K,
) -> PyResult<Vec<Py<PyAttachedBuffer>>> {
    slots
        .into_iter()
        .map(|(ptr, bytes, element)| {
            let keep = Box::new(keep.clone());
            let core = Arc::new(AttachedCore::new(ptr, bytes, element, device, keep));
            Py::new(py, PyAttachedBuffer { core })
        })
        .collect()
}

/// A slot's element format and bytes from a NumPy-style shape (`rows` or `(rows, columns)`)
/// and dtype.
fn slot_format(
    shape: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<(ElementFormat, u64)> {
    let shape = parse_shape(shape)?;
    let dtype = parse_dtype(dtype)?;
    let (rows, columns) = match shape.as_slice() {
        [rows] => (*rows, 1),
        [rows, columns] => (*rows, *columns),
        _ => {
            return Err(refusal(
                "InvalidInput",
                "Array.Shape",
                format!(
                    "a slot is rows or (rows, columns), not {} dimensions",
                    shape.len()
                ),
                &[],
            ))
        }
    };
    let dl = dtype.dlpack();
    let element = ElementFormat {
        code: dl.code.0,
        bits: dl.bits,
        lanes: 1,
        columns: u32::try_from(columns).unwrap_or(u32::MAX),
    };
    let bytes = (rows as u64)
        .checked_mul(columns as u64)
        .and_then(|n| n.checked_mul(dtype.itemsize() as u64))
        .ok_or_else(|| {
            refusal(
                "InvalidInput",
                "Array.Overflow",
                format!("{rows} x {columns} x {} bytes overflows", dtype.itemsize()),
                &[],
            )
        })?;
    Ok((element, bytes))
}

/// A publisher: K slots of GPU memory this process writes, frame after frame, and any number
/// of consumers in other processes (viewers, recorders, Python consumers) read — each the
/// newest frame (or every frame, if it asked), none able to slow this process down.
#[pyclass(name = "Publisher", module = "cuvk", frozen)]
pub struct PyPublisher {
    inner: Arc<Mutex<Publisher>>,
    slots: Vec<Py<PyAttachedBuffer>>,
    device: usize,
    name: String,
}

#[pymethods]
impl PyPublisher {
    /// Publishes `slots` slots of `shape` elements of `dtype` under `name` (an abstract
    /// socket name, or a path with a `/`: see the module's docs) on `bridge`'s GPU. K =
    /// `slots`: it serves `slots - 2` consumers holding frames at once.
    #[new]
    #[pyo3(signature = (bridge, name, shape, dtype = None, slots = 5))]
    fn new(
        py: Python<'_>,
        bridge: &Bound<'_, PyBridge>,
        name: &str,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        slots: u32,
    ) -> PyResult<Self> {
        let (element, bytes) = slot_format(shape, dtype)?;
        let shared = bridge.get().shared.clone();
        let desc = PublisherDesc {
            slots,
            bytes,
            element,
        };
        let publisher = py
            .detach(|| Publisher::new(name, &shared.bridge, desc))
            .py()?;
        let ptrs: Vec<_> = (0..slots as usize)
            .filter_map(|s| publisher.slot(s))
            .map(|b| (b.cuda_ptr(), bytes, element))
            .collect();
        let inner = Arc::new(Mutex::new(publisher));
        let device = shared.ordinal;
        // A tensor keeps the publisher (and so the slot's memory) alive.
        let slots = shared_slots(py, ptrs, device, &inner)?;
        Ok(Self {
            inner,
            slots,
            device,
            name: name.to_owned(),
        })
    }

    /// The slots (`torch.from_dlpack(publisher.slots[frame.slot])`): frame n writes the slot
    /// `Frame.slot` names, which is not `n % K` — a slot a consumer holds is skipped.
    #[getter]
    fn slots(&self, py: Python<'_>) -> Vec<Py<PyAttachedBuffer>> {
        self.slots.iter().map(|s| s.clone_ref(py)).collect()
    }

    /// The CUDA device ordinal.
    #[getter]
    fn device(&self) -> usize {
        self.device
    }

    /// Consumers attached now.
    #[getter]
    fn consumers(&self) -> usize {
        lock(&self.inner).consumers()
    }

    /// The next frame to write, in a slot no consumer holds; `stream` waits on the GPU for
    /// every consumer's read of that slot. No host wait, except while consumers that asked
    /// for every frame hold every free slot (at most `timeout` seconds, then they get the
    /// newest frames only). Raises `cuvk.SyncError` (`Sync.SlotsHeld`) when more consumers
    /// hold frames than `slots - 2`.
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
            .detach(|| -> cuvk::Result<_> {
                let mut p = lock(&self.inner);
                let frame = p.begin_frame(timeout)?;
                // SAFETY: Python names the stream as live (as DLPack's protocol does); its
                // context is checked against ours.
                unsafe { p.acquire_raw(&frame, raw(stream)) }?;
                Ok(frame)
            })
            .py()?;
        Ok(PyFrame { frame })
    }

    /// After writing `frame` on `stream`: `stream` signals it written; the consumers' reads
    /// wait for that on the GPU. No host wait.
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
            // SAFETY: as in `acquire`.
            unsafe { lock(&self.inner).release_raw(&frame, raw(stream)) }
        })
        .py()
    }

    /// Stops publishing: waits (bounded) until every frame released is written, then every
    /// consumer sees the publisher end and the name is free. Tensors over the slots stay
    /// valid. Idempotent; leaving a `with` block, or dropping the publisher, does it.
    fn close(&self, py: Python<'_>) {
        py.detach(|| lock(&self.inner).close());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "cuvk.Publisher(name={:?}, device={}, slots={})",
            self.name,
            self.device,
            self.slots.len()
        )
    }
}

/// A frame a `cuvk.Subscriber` holds: read `Subscriber.slots[frame.slot]`, then release it.
#[pyclass(name = "HeldFrame", module = "cuvk", frozen)]
pub struct PyHeldFrame {
    held: Held,
}

#[pymethods]
impl PyHeldFrame {
    /// The publisher's frame number.
    #[getter]
    fn number(&self) -> u64 {
        self.held.frame()
    }

    /// The index in `Subscriber.slots` the frame is in.
    #[getter]
    fn slot(&self) -> usize {
        self.held.slot()
    }

    fn __repr__(&self) -> String {
        format!(
            "cuvk.HeldFrame(number={}, slot={})",
            self.held.frame(),
            self.held.slot()
        )
    }
}

/// A consumer of a publisher in another process (`particles --publish NAME`, or a
/// `cuvk.Publisher`): its slots mapped into this process's CUDA context, read as CuPy /
/// PyTorch arrays, frames held one at a time and ordered on the caller's stream.
#[pyclass(name = "Subscriber", module = "cuvk", frozen)]
pub struct PySubscriber {
    inner: Arc<Mutex<CudaSubscriber>>,
    slots: Vec<Py<PyAttachedBuffer>>,
    device: usize,
}

#[pymethods]
impl PySubscriber {
    /// Attaches to the publisher `name` from CUDA device `device` (the publisher's GPU:
    /// checked), waiting at most `timeout` seconds for it to exist. `every_frame`: take every
    /// frame, not only the newest (the publisher then waits for this consumer, at most its
    /// own timeout, before it demotes it to the newest frames).
    #[new]
    #[pyo3(signature = (name, device = 0, every_frame = false, timeout = 30.0))]
    fn new(
        py: Python<'_>,
        name: &str,
        device: usize,
        every_frame: bool,
        timeout: f64,
    ) -> PyResult<Self> {
        let timeout = timeout_seconds(timeout)?;
        let (sub, slots) = py
            .detach(|| -> cuvk::Result<_> {
                let cuda = cuvk::cuda::context(device)?;
                let sub = CudaSubscriber::attach(name, &cuda, every_frame, timeout)?;
                let slots: Vec<(u64, u64, ElementFormat)> = sub
                    .slots()
                    .iter()
                    .zip(sub.slot_elements())
                    .map(|(r, e)| (r.device_ptr(), r.size(), e))
                    .collect();
                Ok((sub, slots))
            })
            .py()?;
        let inner = Arc::new(Mutex::new(sub));
        // An array keeps the subscriber (and so its mapping of the slot) alive.
        let slots = shared_slots(py, slots, device, &inner)?;
        Ok(Self {
            inner,
            slots,
            device,
        })
    }

    /// The publisher's slots, mapped here (`cupy.from_dlpack(sub.slots[frame.slot])`).
    #[getter]
    fn slots(&self, py: Python<'_>) -> Vec<Py<PyAttachedBuffer>> {
        self.slots.iter().map(|s| s.clone_ref(py)).collect()
    }

    /// The CUDA device ordinal.
    #[getter]
    fn device(&self) -> usize {
        self.device
    }

    /// The next frame (the newest not read yet; with `every_frame`, the oldest), held until
    /// `release`; `stream` waits on the GPU until it is written. Waits on the host at most
    /// `timeout` seconds for a new frame (the GIL released); None if none came. Raises
    /// `cuvk.IpcError` (`PeerClosed`) once the publisher is gone.
    #[pyo3(signature = (stream = None, timeout = 30.0))]
    fn hold(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        timeout: f64,
    ) -> PyResult<Option<PyHeldFrame>> {
        let stream = stream_handle(stream)?;
        let timeout = timeout_seconds(timeout)?;
        let held = py
            .detach(|| -> cuvk::Result<_> {
                let mut s = lock(&self.inner);
                let Some(held) = s.hold(timeout)? else {
                    return Ok(None);
                };
                // SAFETY: Python names the stream as live; its context is checked.
                unsafe { s.acquire_raw(&held, raw(stream)) }?;
                Ok(Some(held))
            })
            .py()?;
        Ok(held.map(|held| PyHeldFrame { held }))
    }

    /// After reading `frame` on `stream`: `stream` signals the read done (the publisher's
    /// next write of the slot waits for it on the GPU) and the publisher is told. No host
    /// wait.
    #[pyo3(signature = (frame, stream = None))]
    fn release(
        &self,
        py: Python<'_>,
        frame: &Bound<'_, PyHeldFrame>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let stream = stream_handle(stream)?;
        let held = frame.get().held;
        py.detach(|| {
            // SAFETY: as in `hold`.
            unsafe { lock(&self.inner).release_raw(&held, raw(stream)) }
        })
        .py()
    }

    fn __repr__(&self) -> String {
        format!(
            "cuvk.Subscriber(device={}, slots={})",
            self.device,
            self.slots.len()
        )
    }
}
