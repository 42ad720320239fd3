//! cuvk for Python: Vulkan memory as PyTorch, CuPy and JAX tensors with no copy (DLPack,
//! `__cuda_array_interface__`), CUDA streams and Vulkan ordered on the GPU by timeline
//! semaphores, and the particle demo's renderer to look at the data.
//!
//! Built by maturin (`python/pyproject.toml`) into one abi3 wheel, imported as `cuvk`.

mod array;
mod bridge;
mod buffer;
mod cai;
mod dtype;
mod errors;
mod fanout;
mod ipc;
mod peer;
mod render;
mod stream;

use pyo3::prelude::*;

/// The extension module (`cuvk._cuvk`); `cuvk/__init__.py` re-exports it.
#[pymodule]
fn _cuvk(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<bridge::PyBridge>()?;
    m.add_class::<buffer::PySharedBuffer>()?;
    m.add_class::<render::PyRenderer>()?;
    m.add_class::<ipc::PyProducer>()?;
    m.add_class::<ipc::PyAttachedBuffer>()?;
    m.add_class::<ipc::PyFrame>()?;
    m.add_class::<fanout::PyPublisher>()?;
    m.add_class::<fanout::PySubscriber>()?;
    m.add_class::<fanout::PyHeldFrame>()?;
    m.add_function(wrap_pyfunction!(bridge::buffer_nbytes, m)?)?;
    m.add_function(wrap_pyfunction!(stream::py_parse_stream, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
