//! `cuvk.Bridge`: a CUDA device and the Vulkan device with the same UUID, its stream order
//! (`cuvk::StreamOrder`), and the register of the buffers it made (so that a tensor over cuvk memory can
//! be traced back to its buffer).

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use cuvk::cuda::CudaDeviceChoice;
use cuvk::vulkan::Validation;
use cuvk::{Bridge, BridgeConfig, StreamOrder};
use cuvk_canvas::PrivateAllocator;
use pyo3::prelude::*;

use crate::array::{self, Array};
use crate::buffer::{BufferCore, PySharedBuffer};
use crate::dtype::{self, DType};
use crate::errors::{refusal, IntoPyResult};
use crate::stream::{self, Convention};

/// What every object of one bridge shares.
pub struct Shared {
    /// The devices.
    pub bridge: Bridge,
    /// CUDA ↔ Vulkan ordering.
    pub order: StreamOrder,
    /// The CUDA device ordinal.
    pub ordinal: usize,
    // Host-visible staging for `vulkan_read` / `vulkan_write`, made on first use.
    allocator: OnceLock<Arc<PrivateAllocator>>,
    // (device pointer, bytes, buffer) of every buffer made; dead entries pruned on insert.
    register: Mutex<Vec<(u64, u64, Weak<BufferCore>)>>,
}

impl Shared {
    /// Notes a new buffer.
    pub fn register(&self, core: &Arc<BufferCore>) {
        let mut r = self.register.lock().unwrap_or_else(|p| p.into_inner());
        r.retain(|(_, _, w)| w.strong_count() > 0);
        r.push((core.ptr(), core.nbytes() as u64, Arc::downgrade(core)));
    }

    /// The live buffer whose memory holds `[ptr, ptr + bytes)`.
    pub fn find(&self, ptr: u64, bytes: u64) -> Option<Arc<BufferCore>> {
        let r = self.register.lock().unwrap_or_else(|p| p.into_inner());
        r.iter()
            .filter(|(start, len, _)| ptr >= *start && ptr.saturating_add(bytes) <= start + len)
            .find_map(|(_, _, w)| w.upgrade())
    }

    /// The allocator of non-shared Vulkan buffers.
    pub fn allocator(&self) -> cuvk::Result<Arc<PrivateAllocator>> {
        if let Some(a) = self.allocator.get() {
            return Ok(a.clone());
        }
        let a = PrivateAllocator::new(self.bridge.vulkan())?;
        Ok(self.allocator.get_or_init(|| a).clone())
    }

    /// Waits until every Vulkan submission made so far is done.
    pub fn wait_vulkan_idle(&self, timeout: Duration) -> cuvk::Result<()> {
        self.order.wait_vulkan(self.order.last_vulkan(), timeout)
    }
}

/// A CUDA device and the Vulkan device on the same GPU (paired by UUID), with what orders
/// CUDA streams and cuvk's Vulkan work on the GPU.
#[pyclass(name = "Bridge", module = "cuvk", frozen)]
pub struct PyBridge {
    pub shared: Arc<Shared>,
}

pub fn timeout_seconds(timeout: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(timeout).map_err(|_| {
        refusal(
            "InvalidInput",
            "Timeout.Value",
            format!("timeout must be a finite number of seconds >= 0, not {timeout}"),
            &[],
        )
    })
}

/// Reads `shape` (an int or a sequence of ints).
pub(crate) fn parse_shape(shape: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    if let Ok(n) = shape.extract::<usize>() {
        return Ok(vec![n]);
    }
    shape.extract::<Vec<usize>>().map_err(|_| {
        refusal(
            "InvalidInput",
            "Array.Shape",
            "shape must be a non-negative int or a sequence of them",
            &[],
        )
    })
}

/// Reads `dtype`: None (float32), a name, or a dtype object (torch.float32, numpy.float32,
/// numpy.dtype) by its str().
pub(crate) fn parse_dtype(dtype: Option<&Bound<'_, PyAny>>) -> PyResult<DType> {
    let name = match dtype {
        None => "float32".to_owned(),
        Some(d) => match d.extract::<String>() {
            Ok(name) => name,
            Err(_) => d.str()?.to_string(),
        },
    };
    let name = name.trim_start_matches("<class '").trim_end_matches("'>");
    DType::parse(name).ok_or_else(|| {
        refusal(
            "InvalidInput",
            "Array.Dtype",
            format!("unknown dtype '{name}' (one of: {})", dtype::NAMES),
            &[],
        )
    })
}

/// The bytes `Bridge.buffer(shape, dtype)` would allocate, or its refusal of the arguments:
/// the checks it makes before it touches a device, reachable without a GPU (for tests).
#[pyfunction(name = "_buffer_nbytes")]
#[pyo3(signature = (shape, dtype = None))]
pub fn buffer_nbytes(
    shape: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<usize> {
    let shape = parse_shape(shape)?;
    let dtype = parse_dtype(dtype)?;
    array::nbytes(&shape, dtype)
}

#[pymethods]
impl PyBridge {
    /// Opens CUDA device `device` and the Vulkan device with the same UUID.
    #[new]
    #[pyo3(signature = (device = 0, *, validation = false))]
    fn new(py: Python<'_>, device: usize, validation: bool) -> PyResult<Self> {
        let config = BridgeConfig {
            cuda_device: CudaDeviceChoice::Ordinal(device),
            validation: if validation {
                Validation::Required
            } else {
                Validation::Off
            },
            ..Default::default()
        };
        let shared = py
            .detach(|| -> cuvk::Result<Shared> {
                let bridge = Bridge::new(config)?;
                let order = StreamOrder::new(&bridge)?;
                Ok(Shared {
                    bridge,
                    order,
                    ordinal: device,
                    allocator: OnceLock::new(),
                    register: Mutex::new(Vec::new()),
                })
            })
            .py()?;
        Ok(Self {
            shared: Arc::new(shared),
        })
    }

    /// The CUDA device ordinal.
    #[getter]
    fn cuda_device(&self) -> usize {
        self.shared.ordinal
    }

    /// The Vulkan device's name.
    #[getter]
    fn device_name(&self) -> String {
        self.shared.bridge.vulkan().info().name.clone()
    }

    /// The GPU's UUID (CUDA's and Vulkan's `deviceUUID`), as text.
    #[getter]
    fn uuid(&self) -> String {
        self.shared.bridge.uuid().to_string()
    }

    /// Whether CUDA kernels can run inside Vulkan command buffers (`VK_NVX_binary_import`).
    #[getter]
    fn inline_kernels(&self) -> bool {
        self.shared.bridge.vulkan().info().capabilities.cuda_kernels
    }

    /// Vulkan validation-layer messages so far (empty without `validation=True`).
    fn validation_messages(&self) -> Vec<String> {
        self.shared.bridge.vulkan().validation_messages()
    }

    /// A new buffer of `shape` elements of `dtype` in Vulkan memory shared with CUDA
    /// (zero-filled). `torch.from_dlpack(buf)`, `cupy.from_dlpack(buf)` and
    /// `jax.dlpack.from_dlpack(buf)` see its memory with no copy.
    #[pyo3(signature = (shape, dtype = None))]
    fn buffer(
        &self,
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PySharedBuffer> {
        let shape = parse_shape(shape)?;
        let dtype = parse_dtype(dtype)?;
        let shared = self.shared.clone();
        let core = py.detach(move || BufferCore::new(&shared, shape, dtype))?;
        self.shared.register(&core);
        Ok(PySharedBuffer { core })
    }

    /// The cuvk buffer under `array` (a `SharedBuffer`, or a tensor / array whose memory is
    /// one: anything with `__cuda_array_interface__`).
    fn buffer_of(&self, array: &Bound<'_, PyAny>) -> PyResult<PySharedBuffer> {
        let a = array::resolve(&self.shared, array)?;
        Ok(PySharedBuffer { core: a.core })
    }

    /// Makes `stream` wait (on the GPU) until Vulkan's last use of `array`'s memory is done:
    /// call it before CUDA work on that stream writes the memory again.
    #[pyo3(signature = (array, stream = None))]
    fn cuda_acquire(
        &self,
        array: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let a: Array = array::resolve(&self.shared, array)?;
        a.core
            .cuda_acquire(stream::parse(stream, Convention::Cuvk)?)
    }

    /// Makes Vulkan's next use of `array`'s memory wait (on the GPU) for the work enqueued on
    /// `stream` so far: call it after CUDA work on that stream wrote the memory.
    #[pyo3(signature = (array, stream = None))]
    fn cuda_release(
        &self,
        array: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let a = array::resolve(&self.shared, array)?;
        a.core
            .cuda_release(stream::parse(stream, Convention::Cuvk)?)
    }

    /// Waits on the host until every Vulkan submission made through this bridge is done.
    #[pyo3(signature = (timeout = 10.0))]
    fn synchronize(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let timeout = timeout_seconds(timeout)?;
        let shared = self.shared.clone();
        py.detach(move || shared.wait_vulkan_idle(timeout)).py()
    }

    fn __repr__(&self) -> String {
        format!(
            "cuvk.Bridge(cuda_device={}, vulkan='{}', uuid={}, inline_kernels={})",
            self.shared.ordinal,
            self.device_name(),
            self.uuid(),
            if self.inline_kernels() {
                "True"
            } else {
                "False"
            }
        )
    }
}
