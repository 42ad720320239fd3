//! The round-trip kernels (shaders/roundtrip.cu) with typed launch helpers, shared by the
//! examples and the GPU tests.

use std::sync::Arc;

use cuvk::cudarc::driver::{
    sys::CUdeviceptr, sys::CUevent_flags, CudaContext, CudaFunction, CudaStream, LaunchConfig,
    PushKernelArg,
};

pub const SOURCE: &str = include_str!("../../shaders/roundtrip.cu");

/// Element `i` of a buffer written with `seed` (matches `pattern` in roundtrip.cu).
pub fn pattern(i: usize, seed: u32) -> u32 {
    (i as u32).wrapping_mul(2_654_435_761) ^ seed
}

pub struct Kernels {
    write_pattern: CudaFunction,
    count_not_equal: CudaFunction,
    copy16: CudaFunction,
    fill_u32: CudaFunction,
    spin_ns: CudaFunction,
    sms: u32,
}

fn grid(sms: u32, n: u64) -> LaunchConfig {
    let blocks = (n.div_ceil(256)).clamp(1, sms as u64 * 8) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl Kernels {
    pub fn load(ctx: &Arc<CudaContext>) -> anyhow::Result<Self> {
        let module = cuvk::cuda::compile_module(ctx, "roundtrip.cu", SOURCE)?;
        let sms = ctx.attribute(
            cuvk::cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )? as u32;
        Ok(Self {
            write_pattern: module.load_function("write_pattern")?,
            count_not_equal: module.load_function("count_not_equal")?,
            copy16: module.load_function("copy16")?,
            fill_u32: module.load_function("fill_u32")?,
            spin_ns: module.load_function("spin_ns")?,
            sms,
        })
    }

    /// Writes `pattern(i, seed)` into `n` u32 elements at `ptr`.
    pub fn write_pattern(
        &self,
        stream: &Arc<CudaStream>,
        ptr: &CUdeviceptr,
        n: u64,
        seed: u32,
    ) -> anyhow::Result<()> {
        let mut b = stream.launch_builder(&self.write_pattern);
        b.arg(ptr).arg(&n).arg(&seed);
        // SAFETY: `ptr` points to at least n u32 elements of live device memory (caller).
        unsafe { b.launch(grid(self.sms, n)) }?;
        Ok(())
    }

    /// Number of the `n` u32 elements at `ptr` that are not `value` (synchronises).
    pub fn count_not_equal(
        &self,
        stream: &Arc<CudaStream>,
        ptr: &CUdeviceptr,
        n: u64,
        value: u32,
    ) -> anyhow::Result<u64> {
        let mut counter = stream.alloc_zeros::<u64>(1)?;
        let mut b = stream.launch_builder(&self.count_not_equal);
        b.arg(ptr).arg(&n).arg(&value).arg(&mut counter);
        // SAFETY: `ptr` points to at least n u32 elements of live device memory (caller).
        unsafe { b.launch(grid(self.sms, n)) }?;
        Ok(stream.clone_dtoh(&counter)?[0])
    }

    /// Writes `value` into `n` u32 elements at `ptr`.
    pub fn fill(
        &self,
        stream: &Arc<CudaStream>,
        ptr: &CUdeviceptr,
        n: u64,
        value: u32,
    ) -> anyhow::Result<()> {
        let mut b = stream.launch_builder(&self.fill_u32);
        b.arg(ptr).arg(&n).arg(&value);
        // SAFETY: `ptr` points to at least n u32 elements of live device memory (caller).
        unsafe { b.launch(grid(self.sms, n)) }?;
        Ok(())
    }

    /// Keeps `stream` running (one thread spinning on the GPU's timer) for `duration`: CUDA
    /// work that is running, not a stream blocked on a gate.
    pub fn spin(
        &self,
        stream: &Arc<CudaStream>,
        duration: std::time::Duration,
    ) -> anyhow::Result<()> {
        self.spin_grid(stream, duration, 1, 1)
    }

    /// As [`Self::spin`] with every SM busy (8 blocks of 256 threads per SM).
    pub fn spin_all(
        &self,
        stream: &Arc<CudaStream>,
        duration: std::time::Duration,
    ) -> anyhow::Result<()> {
        self.spin_grid(stream, duration, self.sms * 8, 256)
    }

    fn spin_grid(
        &self,
        stream: &Arc<CudaStream>,
        duration: std::time::Duration,
        blocks: u32,
        threads: u32,
    ) -> anyhow::Result<()> {
        let ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let mut b = stream.launch_builder(&self.spin_ns);
        b.arg(&ns);
        let grid = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: no memory arguments.
        unsafe { b.launch(grid) }?;
        Ok(())
    }

    /// Copies `bytes` (a multiple of 16) from `src` to `dst`.
    pub fn copy(
        &self,
        stream: &Arc<CudaStream>,
        src: &CUdeviceptr,
        dst: &CUdeviceptr,
        bytes: u64,
    ) -> anyhow::Result<()> {
        let n16 = bytes / 16;
        let mut b = stream.launch_builder(&self.copy16);
        b.arg(src).arg(dst).arg(&n16);
        // SAFETY: both point to at least `bytes` of live device memory (caller).
        unsafe { b.launch(grid(self.sms, n16)) }?;
        Ok(())
    }

    /// GB/s (bytes read + written) of each of `iters` timed copies of `bytes` from `src` to
    /// `dst`, after 3 warm-up copies, each timed with CUDA events on `stream`.
    pub fn copy_gbps(
        &self,
        stream: &Arc<CudaStream>,
        src: CUdeviceptr,
        dst: CUdeviceptr,
        bytes: u64,
        iters: usize,
    ) -> anyhow::Result<Vec<f64>> {
        let ctx = stream.context();
        for _ in 0..3 {
            self.copy(stream, &src, &dst, bytes)?;
        }
        let mut gbps = Vec::with_capacity(iters);
        for _ in 0..iters {
            let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
            let end = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
            start.record(stream)?;
            self.copy(stream, &src, &dst, bytes)?;
            end.record(stream)?;
            end.synchronize()?;
            let ms = start.elapsed_ms(&end)? as f64;
            gbps.push(2.0 * bytes as f64 / (ms * 1e-3) / 1e9);
        }
        Ok(gbps)
    }
}
