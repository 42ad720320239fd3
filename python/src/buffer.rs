//! `cuvk.SharedBuffer`: Vulkan memory shared with CUDA, with a dtype and a shape, exported
//! to Python tensors through DLPack and `__cuda_array_interface__` with no copy. Every export
//! holds the memory: a tensor keeps it alive after the cuvk objects are gone.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cuvk::ash::vk;
use cuvk::cudarc::driver::{result as cuda, sys};
use cuvk::vulkan::{cmd_acquire_buffers, cmd_release_buffers, AsVkBuffer, HostAccess, HostBuffer};
use cuvk::SharedBuffer;
use dlpark::ffi::{DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned};
use dlpark::metadata::Dynamic;
use dlpark::python::{export_dlpack, from_dlpack, DlpackExporter, ExportRequest};
use dlpark::{DlpackFlags, Managed, ManagedTensorBase};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::array;
use crate::bridge::{timeout_seconds, Shared};
use crate::dtype::DType;
use crate::errors::{refusal, IntoPyResult};
use crate::stream::{self, Convention, StreamArg};
use cuvk::UseMarks;

/// A buffer and what Python sees of it.
pub struct BufferCore {
    /// The bridge it was made on.
    pub shared: Arc<Shared>,
    /// The memory (bytes).
    pub buffer: SharedBuffer<u8>,
    /// Elements per dimension.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// Where it stands on the bridge's stream order.
    pub marks: UseMarks,
    // Host-visible memory for `vulkan_read` / `vulkan_write`, made on first use and kept.
    staging: Mutex<Option<Arc<HostBuffer>>>,
}

impl BufferCore {
    /// Creates the memory for `shape` × `dtype` (zero-filled).
    pub fn new(shared: &Arc<Shared>, shape: Vec<usize>, dtype: DType) -> PyResult<Arc<Self>> {
        let bytes = array::nbytes(&shape, dtype)?;
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::VERTEX_BUFFER;
        let buffer = shared.bridge.create_buffer::<u8>(bytes, usage).py()?;
        // Vulkan memory starts undefined; a tensor over it should not.
        zero_sync(shared, buffer.cuda_ptr(), bytes).py()?;
        Ok(Arc::new(Self {
            shared: shared.clone(),
            buffer,
            shape,
            dtype,
            marks: shared.order.marks(),
            staging: Mutex::new(None),
        }))
    }

    /// The CUDA device pointer.
    pub fn ptr(&self) -> u64 {
        self.buffer.cuda_ptr()
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> usize {
        self.buffer.len()
    }

    /// See `Bridge.cuda_acquire`.
    pub fn cuda_acquire(&self, stream: StreamArg) -> PyResult<()> {
        let Some(handle) = self.ordering_stream(stream)? else {
            return Ok(());
        };
        // SAFETY: Python code names the stream; DLPack's protocol (and ours) takes it as a
        // live stream of this device, which `enqueue_raw` checks with cuStreamGetCtx.
        unsafe { self.shared.order.cuda_acquire_raw(&self.marks, handle) }.py()
    }

    /// See `Bridge.cuda_release`.
    pub fn cuda_release(&self, stream: StreamArg) -> PyResult<()> {
        let Some(handle) = self.ordering_stream(stream)? else {
            return Ok(());
        };
        // SAFETY: as in `cuda_acquire`.
        unsafe { self.shared.order.cuda_release_raw(&[&self.marks], handle) }
            .map(drop)
            .py()
    }

    /// The handle to order on (none for "no ordering"), with the bridge's context current,
    /// refused if the stream is capturing a CUDA graph.
    fn ordering_stream(&self, stream: StreamArg) -> PyResult<Option<sys::CUstream>> {
        let Some(handle) = stream.handle() else {
            return Ok(None);
        };
        self.shared
            .bridge
            .cuda()
            .bind_to_thread()
            .map_err(cuda_err("cuCtxSetCurrent"))
            .py()?;
        // SAFETY: as in `cuda_acquire`: a stream Python code names as live.
        unsafe { stream::refuse_capturing(handle) }?;
        Ok(Some(handle))
    }

    /// Waits on the host for Vulkan's last use and the last CUDA release of the buffer.
    fn wait_host(&self, timeout: Duration) -> cuvk::Result<()> {
        // One deadline for both waits: the caller's timeout bounds the whole call.
        let deadline = Deadline::after(timeout);
        let order = &self.shared.order;
        order.wait_vulkan(self.marks.vulkan_use(), timeout)?;
        order.wait_cuda(self.marks.cuda_release(), deadline.left())
    }

    /// The staging buffer, taken out of its slot (made on first use): a copy that completes
    /// puts it back ([`Self::return_staging`]); one that times out leaves it parked with its
    /// submission, and the next copy makes another.
    fn take_staging(&self) -> cuvk::Result<Arc<HostBuffer>> {
        let kept = self
            .staging
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match kept {
            Some(b) => Ok(b),
            // Host-visible and coherent, cached where the device has it (the host reads it
            // after Vulkan's copy, or writes it before): the core's staging buffer.
            None => Ok(Arc::new(HostBuffer::with_access(
                self.shared.bridge.vulkan(),
                self.nbytes() as u64,
                vk::BufferUsageFlags::empty(),
                HostAccess::Readback,
            )?)),
        }
    }

    /// Puts the staging buffer back for the next copy.
    fn return_staging(&self, b: Arc<HostBuffer>) {
        *self.staging.lock().unwrap_or_else(|p| p.into_inner()) = Some(b);
    }

    fn strides(&self) -> Vec<i64> {
        let mut strides = vec![1i64; self.shape.len()];
        for i in (0..self.shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * self.shape[i + 1] as i64;
        }
        strides
    }

    /// A fresh DLPack managed tensor that holds `self` until the consumer deletes it.
    fn managed<M: ManagedTensorBase>(self: &Arc<Self>) -> PyResult<Managed<M>> {
        let shape: Vec<i64> = self.shape.iter().map(|&d| d as i64).collect();
        let strides = self.strides();
        let metadata = Dynamic::new(shape.as_slice(), strides.as_slice())
            .prepare_as::<M>()
            .map_err(|e| PyRuntimeError::new_err(format!("DLPack metadata: {e}")))?;
        let mut init = metadata.initialize(self.clone());
        init.set_device(DLDevice {
            device_type: DLDeviceType::CUDA,
            device_id: self.shared.ordinal as i32,
        });
        init.set_dtype(self.dtype.dlpack());
        init.set_data(self.ptr() as *mut std::ffi::c_void);
        // SAFETY: the data pointer is our live mapping of `nbytes`, covered exactly by the
        // compact shape and strides; the context (an Arc of the buffer) keeps it alive until
        // the consumer calls the deleter.
        Ok(unsafe { init.finish() })
    }
}

/// dlpark's export protocol for one `__dlpack__` call: the buffer, and the consumer's stream
/// (read by cuvk's parser, not dlpark's: one reading of streams for every entry point).
struct Exporter<'a>(&'a Arc<BufferCore>, StreamArg);

impl DlpackExporter for Exporter<'_> {
    fn device(&self) -> DLDevice {
        DLDevice {
            device_type: DLDeviceType::CUDA,
            device_id: self.0.shared.ordinal as i32,
        }
    }

    fn flags(&self) -> DlpackFlags {
        DlpackFlags::empty()
    }

    fn prepare_export(&self, _py: Python<'_>, _request: &ExportRequest<'_>) -> PyResult<()> {
        // The consumer's stream waits on the GPU for Vulkan's last use (DLPack: the producer
        // makes the data ready on the consumer's stream).
        self.0.cuda_acquire(self.1)
    }

    fn export_legacy(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensor>> {
        self.0.managed()
    }

    fn export_versioned(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensorVersioned>> {
        self.0.managed()
    }
}

/// Vulkan memory shared with CUDA, with a dtype and a shape. Pass it to
/// `torch.from_dlpack`, `cupy.from_dlpack`, `jax.dlpack.from_dlpack` or anything that reads
/// `__cuda_array_interface__`: they see the same device memory, with no copy.
#[pyclass(name = "SharedBuffer", module = "cuvk", frozen)]
pub struct PySharedBuffer {
    pub core: Arc<BufferCore>,
}

#[pymethods]
impl PySharedBuffer {
    /// Elements per dimension.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.core.shape)
    }

    /// The element type's name ("float32").
    #[getter]
    fn dtype(&self) -> String {
        self.core.dtype.name()
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.core.dtype.itemsize()
    }

    /// Size in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.core.nbytes()
    }

    /// The CUDA device pointer.
    #[getter]
    fn ptr(&self) -> u64 {
        self.core.ptr()
    }

    /// The CUDA device ordinal.
    #[getter]
    fn device(&self) -> usize {
        self.core.shared.ordinal
    }

    /// See `Bridge.cuda_acquire`.
    #[pyo3(signature = (stream = None))]
    fn cuda_acquire(&self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.core
            .cuda_acquire(stream::parse(stream, Convention::Cuvk)?)
    }

    /// See `Bridge.cuda_release`.
    #[pyo3(signature = (stream = None))]
    fn cuda_release(&self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.core
            .cuda_release(stream::parse(stream, Convention::Cuvk)?)
    }

    /// Copies `src` (a CUDA array of the same size on any GPU with a peer path) into the
    /// buffer by copy engine, ordered on the GPU: after `stream`'s work (the producer's stream
    /// on the source's GPU; None: its legacy default stream) and Vulkan's last use; Vulkan's
    /// next use waits for it, and `stream` waits for it before reusing the source.
    #[pyo3(signature = (src, stream = None))]
    fn copy_from(&self, src: &Bound<'_, PyAny>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        crate::peer::copy_from(&self.core, src, stream::parse(stream, Convention::Cuvk)?)
    }

    /// Copies the buffer to the host (after Vulkan's last use and the last CUDA release).
    #[pyo3(signature = (timeout = 10.0))]
    fn read<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Bound<'py, PyBytes>> {
        let timeout = timeout_seconds(timeout)?;
        let core = self.core.clone();
        let bytes = py
            .detach(move || {
                core.wait_host(timeout)?;
                core.buffer.cuda_read()
            })
            .py()?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Copies `data` (any object with the buffer protocol, exactly `nbytes` long) into the
    /// buffer (after Vulkan's last use and the last CUDA release).
    #[pyo3(signature = (data, timeout = 10.0))]
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>, timeout: f64) -> PyResult<()> {
        let timeout = timeout_seconds(timeout)?;
        let bytes = exact_bytes(&self.core, data)?;
        let core = self.core.clone();
        py.detach(move || -> cuvk::Result<()> {
            core.wait_host(timeout)?;
            write_sync(&core, &bytes)
        })
        .py()
    }

    /// A host copy made by Vulkan (`vkCmdCopyBuffer` into host-visible memory), after the
    /// last CUDA release: what Vulkan sees of the memory.
    #[pyo3(signature = (timeout = 10.0))]
    fn vulkan_read<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Bound<'py, PyBytes>> {
        let timeout = timeout_seconds(timeout)?;
        let core = self.core.clone();
        let bytes = py
            .detach(move || -> cuvk::Result<Vec<u8>> {
                let deadline = Deadline::after(timeout);
                core.wait_host(deadline.left())?;
                let host = core.take_staging()?;
                vulkan_copy(&core, &host, false, deadline.left())?;
                let bytes = host.read::<u8>()?;
                core.return_staging(host);
                Ok(bytes)
            })
            .py()?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Writes `data` (exactly `nbytes`) through Vulkan (host-visible memory, then
    /// `vkCmdCopyBuffer`), after Vulkan's last use and the last CUDA release.
    #[pyo3(signature = (data, timeout = 10.0))]
    fn vulkan_write(&self, py: Python<'_>, data: &Bound<'_, PyAny>, timeout: f64) -> PyResult<()> {
        let timeout = timeout_seconds(timeout)?;
        let bytes = exact_bytes(&self.core, data)?;
        let core = self.core.clone();
        py.detach(move || -> cuvk::Result<()> {
            let deadline = Deadline::after(timeout);
            core.wait_host(deadline.left())?;
            // Never shared: a copy that timed out keeps its own (parked), not the slot's.
            let mut host = core.take_staging()?;
            Arc::get_mut(&mut host)
                .ok_or(cuvk::MemoryError::MemoryShared)?
                .write(&bytes)?;
            vulkan_copy(&core, &host, true, deadline.left())?;
            core.return_staging(host);
            Ok(())
        })
        .py()
    }

    /// DLPack export (the Python array API's `__dlpack__`): the consumer's `stream` (DLPack's
    /// convention, or a stream object) waits on the GPU for Vulkan's last use of the buffer;
    /// the capsule holds the memory.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(u32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        // Read first: a refused stream leaves nothing half-done.
        let stream = stream::parse(stream, Convention::Dlpack)?;
        let request = ExportRequest::parse(None, max_version, dl_device, copy)?;
        export_dlpack(&Exporter(&self.core, stream), py, request)
    }

    /// `(2, ordinal)`: a CUDA device, as DLPack names it.
    fn __dlpack_device__(&self) -> (u32, i32) {
        (2, self.core.shared.ordinal as i32)
    }

    /// The CUDA array interface (version 3). Reading it makes the bridge's CUDA stream wait
    /// on the GPU for Vulkan's last use; `stream` names that stream, so consumers order
    /// their own streams after it.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let stream = self.core.shared.bridge.stream().cu_stream();
        self.core.cuda_acquire(StreamArg::Handle(stream as usize))?;
        let d = PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, &self.core.shape)?)?;
        d.set_item("typestr", self.core.dtype.typestr())?;
        d.set_item("data", (self.core.ptr(), false))?;
        d.set_item("strides", py.None())?;
        d.set_item("version", 3)?;
        // The legacy default stream is 1 in the interface (0 is disallowed).
        d.set_item("stream", if stream.is_null() { 1 } else { stream as usize })?;
        Ok(d)
    }

    fn __len__(&self) -> usize {
        self.core.shape.first().copied().unwrap_or(1)
    }

    fn __repr__(&self) -> String {
        format!(
            "cuvk.SharedBuffer(shape={:?}, dtype={}, device=cuda:{}, ptr=0x{:x})",
            self.core.shape,
            self.core.dtype.name(),
            self.core.shared.ordinal,
            self.core.ptr()
        )
    }
}

/// `data`'s bytes, exactly the buffer's size: a C-contiguous CPU tensor / array through
/// DLPack (NumPy, PyTorch), else any object with the buffer protocol. Copied while the GIL is
/// held, so no Python thread writes the source during the copy (a tensor the GPU is still
/// writing, e.g. by a non-blocking copy, must be synchronised first).
fn exact_bytes(core: &BufferCore, data: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let device = data
        .getattr("__dlpack_device__")
        .and_then(|f| f.call0())
        .and_then(|d| d.extract::<(i64, i64)>())
        .ok();
    let bytes = match device {
        Some((1, _)) => {
            let imported = from_dlpack(data.as_borrowed(), None, None)?;
            let view = imported.validate().map_err(layout_refusal)?;
            // SAFETY: a validated CPU tensor, kept alive by `imported` for the copy; read once,
            // into our own memory, with the GIL held.
            unsafe { view.cpu_bytes() }
                .map_err(layout_refusal)?
                .to_vec()
        }
        Some((kind, id)) => {
            return Err(refusal(
                "WrongDevice",
                "Array.Device",
                format!(
                    "write takes host data; this array is on DLPack device ({kind}, {id}): \
                     copy it on the GPU (torch.from_dlpack(buf).copy_(x)) instead"
                ),
                &[
                    ("device_type", i128::from(kind)),
                    ("device_id", i128::from(id)),
                ],
            ))
        }
        None => data
            .py()
            .import("builtins")?
            .getattr("memoryview")?
            .call1((data,))?
            .call_method0("tobytes")?
            .extract()?,
    };
    if bytes.len() != core.nbytes() {
        return Err(refusal(
            "InvalidInput",
            "Array.Size",
            format!("needs exactly {} bytes, got {}", core.nbytes(), bytes.len()),
            &[
                ("expected", core.nbytes() as i128),
                ("given", bytes.len() as i128),
            ],
        ));
    }
    Ok(bytes)
}

fn layout_refusal(e: impl std::fmt::Display) -> PyErr {
    refusal(
        "InvalidInput",
        "Array.Layout",
        format!("the CPU array cannot be read as one block of bytes: {e}"),
        &[],
    )
}

/// Copies the whole buffer to (`to_shared` false) or from `host` with one Vulkan submission,
/// acquiring it from CUDA's queue family and releasing it back around the copy; waits.
fn vulkan_copy(
    core: &Arc<BufferCore>,
    host: &Arc<HostBuffer>,
    to_shared: bool,
    timeout: Duration,
) -> cuvk::Result<()> {
    let vk_ctx = core.shared.bridge.vulkan();
    let family = vk_ctx.queue_family_index();
    let shared: [&dyn AsVkBuffer; 1] = [&core.buffer];
    let (src, dst) = if to_shared {
        (host.vk_buffer(), core.buffer.vk_buffer())
    } else {
        (core.buffer.vk_buffer(), host.vk_buffer())
    };
    let access = if to_shared {
        vk::AccessFlags::TRANSFER_WRITE
    } else {
        vk::AccessFlags::TRANSFER_READ
    };
    let region = [vk::BufferCopy {
        src_offset: 0,
        dst_offset: 0,
        size: core.nbytes() as u64,
    }];
    let stage = vk::PipelineStageFlags::TRANSFER;
    let keep_alive = (core.clone(), host.clone());
    // SAFETY: both buffers are on the bridge's device and alive until the copy has run: for
    // the call, and past it (a timeout) in the parked clones of `core` and `host`; the copy
    // covers exactly their common size; the host view of `host` is not borrowed.
    unsafe {
        vk_ctx.submit_and_wait_timeout(timeout, keep_alive, |d, cmd| {
            cmd_acquire_buffers(d, cmd, family, &shared, stage, access);
            d.cmd_copy_buffer(cmd, src, dst, &region);
            cmd_release_buffers(d, cmd, family, &shared, stage, access);
        })
    }
}

/// The end of a call's timeout: what is left of it for each of its waits.
struct Deadline(Option<std::time::Instant>);

impl Deadline {
    fn after(timeout: Duration) -> Self {
        Self(std::time::Instant::now().checked_add(timeout))
    }
    /// What is left (none once passed; `Duration::MAX` for a timeout too long to represent).
    fn left(&self) -> Duration {
        self.0.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(std::time::Instant::now())
        })
    }
}

/// Zeroes `bytes` at `ptr` (a buffer just made) through CUDA, synchronously.
fn zero_sync(shared: &Shared, ptr: sys::CUdeviceptr, bytes: usize) -> cuvk::Result<()> {
    on_default_stream(shared, "cuMemsetD8Async", |stream| {
        // SAFETY: `ptr` is the mapping of a buffer of `bytes` that nothing else uses yet.
        unsafe { cuda::memset_d8_async(ptr, 0, bytes, stream) }
    })
}

/// Host → buffer through CUDA, synchronously.
fn write_sync(core: &BufferCore, bytes: &[u8]) -> cuvk::Result<()> {
    on_default_stream(&core.shared, "cuMemcpyHtoDAsync", |stream| {
        // SAFETY: `bytes` is exactly the buffer's size (checked by the caller) and the
        // destination is our live mapping of that size.
        unsafe { cuda::memcpy_htod_async(core.ptr(), bytes, stream) }
    })
}

/// Runs `op` (the driver call `call`) on the legacy default stream of the bridge's context,
/// made current, and waits for it.
fn on_default_stream(
    shared: &Shared,
    call: &'static str,
    op: impl FnOnce(sys::CUstream) -> Result<(), cuvk::cudarc::driver::DriverError>,
) -> cuvk::Result<()> {
    shared
        .bridge
        .cuda()
        .bind_to_thread()
        .map_err(cuda_err("cuCtxSetCurrent"))?;
    let stream: sys::CUstream = std::ptr::null_mut();
    op(stream).map_err(cuda_err(call))?;
    // SAFETY: the legacy default stream of the bound context.
    unsafe { cuda::stream::synchronize(stream) }.map_err(cuda_err("cuStreamSynchronize"))
}

fn cuda_err(call: &'static str) -> impl Fn(cuvk::cudarc::driver::DriverError) -> cuvk::Error {
    move |source| cuvk::Error::Cuda { call, source }
}
