//! `SharedBuffer.copy_from(tensor, stream)`: a tensor of any GPU into cuvk memory by copy
//! engine, ordered on the GPU both ways — the fast path beside PyTorch's `copy_` from another
//! GPU into a DLPack view of cuvk memory, which takes a slow path (37 GB/s on the H100s
//! against 391 GB/s for a peer copy: DESIGN.md).
//!
//! The source is checked before anything is enqueued: a CUDA array (`__cuda_array_interface__`)
//! that is C-contiguous, of exactly the buffer's size, whose range the driver says lies inside
//! one allocation on a GPU that can reach the buffer's.

use cuvk::cudarc::driver::sys;
use pyo3::prelude::*;

use crate::buffer::BufferCore;
use crate::errors::{refusal, IntoPyResult};
use crate::stream::StreamArg;

/// A CUDA array's pointer and size (the one `__cuda_array_interface__` reader: C-contiguous
/// only).
fn cuda_array(src: &Bound<'_, PyAny>) -> PyResult<(u64, u64)> {
    let view = crate::cai::read(src, "a CUDA array (a PyTorch CUDA tensor, a CuPy array)")?;
    let bytes = view.nbytes().ok_or_else(|| {
        refusal(
            "InvalidInput",
            "Array.Interface",
            format!(
                "copy_from: shape {:?} overflows the address space",
                view.shape
            ),
            &[],
        )
    })?;
    Ok((view.ptr, bytes as u64))
}

/// See the module documentation.
pub fn copy_from(core: &BufferCore, src: &Bound<'_, PyAny>, stream: StreamArg) -> PyResult<()> {
    let (ptr, bytes) = cuda_array(src)?;
    let size = core.nbytes() as u64;
    if bytes != size {
        return Err(refusal(
            "InvalidInput",
            "Peer.SizeMismatch",
            format!("copy_from: the source has {bytes} bytes, the buffer {size}: they must match"),
            &[
                ("source_bytes", bytes.into()),
                ("buffer_bytes", size.into()),
            ],
        ));
    }
    let (ordinal, range) = cuvk::device_pointer_range(ptr).py()?;
    if ptr.saturating_add(bytes) > range.end {
        return Err(refusal(
            "InvalidInput",
            "Layout.OutOfBounds",
            format!(
                "copy_from: the source's {bytes} bytes at {ptr:#x} run past its allocation \
                 ({:#x}..{:#x})",
                range.start, range.end
            ),
            &[
                ("offset", (ptr - range.start).into()),
                ("size", bytes.into()),
                ("container_size", (range.end - range.start).into()),
            ],
        ));
    }
    let shared = &core.shared;
    let dst_ctx = shared.bridge.cuda();
    let src_ctx = cuvk::cuda::context(ordinal).py()?;
    // The buffer's context reads the source's memory: peer access (refused, typed, where none).
    cuvk::enable_peer_access(dst_ctx, &src_ctx).py()?;
    let producer = match stream {
        StreamArg::NoSync => None,
        StreamArg::Handle(h) => Some(h as sys::CUstream),
    };
    let copy_stream = shared.bridge.stream();
    let quiet = Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING);
    let cuda = |call: &'static str| move |source| cuvk::Error::Cuda { call, source };
    let written = src_ctx
        .new_event(quiet)
        .map_err(cuda("cuEventCreate"))
        .py()?;
    let read = dst_ctx
        .new_event(quiet)
        .map_err(cuda("cuEventCreate"))
        .py()?;
    if let Some(s) = producer {
        src_ctx
            .bind_to_thread()
            .map_err(cuda("cuCtxSetCurrent"))
            .py()?;
        if !s.is_null() {
            let mut owner: sys::CUcontext = std::ptr::null_mut();
            // SAFETY: Python names the stream as live (as DLPack's protocol does).
            unsafe { sys::cuStreamGetCtx(s, &mut owner) }
                .result()
                .map_err(cuda("cuStreamGetCtx"))
                .py()?;
            if owner != src_ctx.cu_ctx() {
                return Err(refusal(
                    "WrongDevice",
                    "WrongDevice",
                    format!("copy_from: the stream is not on the source's GPU ({ordinal})"),
                    &[],
                ));
            }
        }
        // SAFETY: an event of the source's context recorded on a live stream of it.
        unsafe { sys::cuEventRecord(written.cu_event(), s) }
            .result()
            .map_err(cuda("cuEventRecord"))
            .py()?;
        copy_stream
            .wait(&written)
            .map_err(cuda("cuStreamWaitEvent"))
            .py()?;
    }
    shared.order.cuda_acquire(&core.marks, copy_stream).py()?;
    // SAFETY: the source range lies in one allocation on a GPU the buffer's context reaches
    // (checked above, peer access enabled); the destination is the buffer's own mapping of
    // exactly `bytes`; the copy runs after the producer's work and Vulkan's last use.
    unsafe {
        sys::cuMemcpyPeerAsync(
            core.ptr(),
            dst_ctx.cu_ctx(),
            ptr,
            src_ctx.cu_ctx(),
            bytes as usize,
            copy_stream.cu_stream(),
        )
    }
    .result()
    .map_err(cuda("cuMemcpyPeerAsync"))
    .py()?;
    shared
        .order
        .cuda_release(&[&core.marks], copy_stream)
        .py()?;
    if let Some(s) = producer {
        // The producer may reuse (or free) the source only after the copy has read it.
        read.record(copy_stream)
            .map_err(cuda("cuEventRecord"))
            .py()?;
        src_ctx
            .bind_to_thread()
            .map_err(cuda("cuCtxSetCurrent"))
            .py()?;
        // SAFETY: a live stream (above) waits for an event of another context: allowed.
        unsafe { sys::cuStreamWaitEvent(s, read.cu_event(), 0) }
            .result()
            .map_err(cuda("cuStreamWaitEvent"))
            .py()?;
    }
    Ok(())
}
