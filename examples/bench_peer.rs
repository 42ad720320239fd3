//! Several GPUs in one process: what a peer GPU's kernels and copy engines reach in the render
//! GPU's memory, side by side with plain `cuMemAlloc` memory on the render GPU (opened to the
//! peer with `cuCtxEnablePeerAccess`, what a CUDA user would do). GPU-timed with CUDA events
//! on the peer's stream, 256 MiB per operation.
//!
//!     cargo run --release --example bench_peer            (needs 2 GPUs with a peer path)
//!
//! Rows: a kernel on GPU 1 storing into GPU 0's memory; a copy-engine copy from GPU 1's
//! memory into GPU 0's (`cuMemcpyDtoDAsync`, peer to peer); a kernel on GPU 0 pulling from GPU 1.
//! Targets: peer buffer >= 0.9x plain memory. Vulkan-allocated (imported) memory is shown
//! for the copy, the only peer access it allows (a peer kernel storing into it faults).

use std::sync::Arc;

use anyhow::{bail, Context};
use cuvk::cudarc::driver::{result, sys, CudaContext, CudaStream};
use cuvk::{Bridge, BridgeConfig, BufferUsage, SharedBuffer};
use cuvk_dev::{kernels::Kernels, logger, stats::median};

const BYTES: u64 = 256 << 20;
const ITERS: usize = 20;

/// Median GB/s (bytes moved) of `op` on `stream`, timed with events after 3 warm-ups.
fn timed(
    stream: &Arc<CudaStream>,
    mut op: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    let ctx = stream.context();
    for _ in 0..3 {
        op()?;
    }
    let mut v = Vec::with_capacity(ITERS);
    for _ in 0..ITERS {
        let start = ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        let end = ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        start.record(stream)?;
        op()?;
        end.record(stream)?;
        end.synchronize()?;
        v.push(BYTES as f64 / (start.elapsed_ms(&end)? as f64 * 1e-3) / 1e9);
    }
    Ok(median(v))
}

/// A plain `cuMemAlloc` of `BYTES` on `ctx`'s GPU, freed on drop.
struct Plain(Arc<CudaContext>, sys::CUdeviceptr);
impl Plain {
    fn new(ctx: &Arc<CudaContext>) -> anyhow::Result<Self> {
        ctx.bind_to_thread()?;
        // SAFETY: a plain allocation, freed once in Drop.
        Ok(Self(ctx.clone(), unsafe {
            result::malloc_sync(BYTES as usize)
        }?))
    }
}
impl Drop for Plain {
    fn drop(&mut self) {
        let _ = self.0.bind_to_thread();
        // SAFETY: allocated in `new`, freed once; the benchmark synchronised its streams.
        let _ = unsafe { result::free_sync(self.1) };
    }
}

fn copy(dst: sys::CUdeviceptr, src: sys::CUdeviceptr, stream: &CudaStream) -> anyhow::Result<()> {
    // SAFETY: both are BYTES of live device memory the copy's GPU can reach (peer access
    // enabled or cuMemSetAccess'd); the stream is live.
    unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, BYTES as usize, stream.cu_stream()) }.result()?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    logger::init();
    if std::env::args().len() > 1 {
        bail!("bench_peer takes no arguments");
    }
    let gpus = cuvk::cuda::devices()?;
    if gpus.len() < 2 {
        println!(
            "bench_peer: needs 2 CUDA GPUs, this machine has {}",
            gpus.len()
        );
        return Ok(());
    }
    let bridge = Bridge::new(BridgeConfig::default())?;
    let render = bridge.cuda().clone();
    let peer = cuvk::cuda::context(1)?;
    println!(
        "render GPU 0: {}; peer GPU 1: {}",
        gpus[0].name, gpus[1].name
    );
    if !cuvk::can_access_peer(&peer, &render)? {
        println!(
            "GPUs 0 and 1 have no peer path: peer buffers are refused (PeerError::NoPeerAccess)"
        );
        return Ok(());
    }
    // What a CUDA user does for plain memory: enable peer access both ways.
    for (from, to) in [(&peer, &render), (&render, &peer)] {
        from.bind_to_thread()?;
        // SAFETY: two live primary contexts of GPUs with a peer path (checked above).
        match unsafe { sys::cuCtxEnablePeerAccess(to.cu_ctx(), 0) } {
            sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
            }
            e => bail!("cuCtxEnablePeerAccess: {e:?}"),
        }
    }
    let n = (BYTES / 4) as usize;
    let shared: SharedBuffer<u32> =
        bridge.create_peer_buffer(n, BufferUsage::STORAGE_BUFFER, &[&peer])?;
    let imported: SharedBuffer<u32> = bridge.create_buffer(n, BufferUsage::STORAGE_BUFFER)?;
    let plain = Plain::new(&render)?;
    let source = Plain::new(&peer)?;
    let on_peer = Kernels::load(&peer)?;
    let on_render = Kernels::load(&render)?;
    let ps = peer.new_stream()?;
    let rs = render.new_stream()?;
    on_peer.fill(&ps, &source.1, n as u64, 7)?;
    ps.synchronize()?;

    let store = |dst: sys::CUdeviceptr| timed(&ps, || on_peer.fill(&ps, &dst, n as u64, 3));
    let pcopy = |dst: sys::CUdeviceptr| timed(&ps, || copy(dst, source.1, &ps));
    let pull = |dst: sys::CUdeviceptr| timed(&rs, || on_render.copy(&rs, &source.1, &dst, BYTES));
    let rows = [
        (
            "GPU 1 kernel stores into GPU 0",
            store(plain.1)?,
            Some(store(shared.cuda_ptr())?),
            None,
        ),
        (
            "GPU 1 copy engine into GPU 0",
            pcopy(plain.1)?,
            Some(pcopy(shared.cuda_ptr())?),
            Some(pcopy(imported.cuda_ptr())?),
        ),
        (
            "GPU 0 kernel pulls from GPU 1",
            pull(plain.1)?,
            Some(pull(shared.cuda_ptr())?),
            Some(pull(imported.cuda_ptr())?),
        ),
    ];
    ps.synchronize()?;
    rs.synchronize()?;
    println!();
    println!(
        "{:<32} {:>14} {:>14} {:>8} {:>16}",
        "256 MiB, GB/s (median of 20)", "cuMemAlloc", "peer buffer", "ratio", "imported (Vulkan)"
    );
    for (name, plain, peer_buf, imported) in rows {
        let p = peer_buf.context("measured")?;
        let imp = imported.map_or("faults".to_string(), |g| format!("{g:.1}"));
        println!(
            "{name:<32} {plain:>14.1} {p:>14.1} {:>7.3}x {imp:>16}",
            p / plain
        );
    }
    Ok(())
}
