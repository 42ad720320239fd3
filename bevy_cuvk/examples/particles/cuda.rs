//! The particle step as a CUDA kernel (`particles.cu`, compiled with NVRTC) on a
//! `CuvkBuffer` that Bevy's WGSL drawing passes read: on a CUDA stream ordered with Bevy's
//! frames (`StreamSync`, the stream path), or recorded into Bevy's own command buffers
//! (`VK_NVX_binary_import`, the inline path).

#![allow(dead_code)] // shared by the example and the tests, each using a part

use std::sync::Arc;

use bevy::prelude::Resource;
use bevy::render::render_resource::BufferUsages;
use bevy_cuvk::cuvk::cudarc::driver::{
    CudaFunction, CudaModule, DeviceRepr, LaunchConfig, PushKernelArg,
};
use bevy_cuvk::cuvk::vulkan::{KernelArg, LaunchDims};
use bevy_cuvk::{CuvkBuffer, CuvkDevice, InlineKernel, StreamSync};

use crate::reference::{Params, Particle};

/// The uniform block, passed to the kernel by value (same layout as `Params` in the .cu).
#[repr(transparent)]
#[derive(Clone, Copy)]
struct KernelParams(Params);
// SAFETY: `Params` is `repr(C)` plain data whose layout matches the CUDA struct (80 bytes:
// four u32, four f32, three float4 at offset 32, 16-byte aligned on both sides).
unsafe impl DeviceRepr for KernelParams {}

/// The particles both paths step: Bevy's storage buffer and CUDA's memory, filled with
/// `initial`.
fn particle_buffer(
    device: &CuvkDevice,
    initial: &[Particle],
) -> Result<CuvkBuffer<Particle>, String> {
    device
        .create_buffer(
            initial.len(),
            BufferUsages::STORAGE | BufferUsages::COPY_SRC | BufferUsages::COPY_DST,
            initial,
        )
        .map_err(|e| e.to_string())
}

/// The CUDA side of the simulation (render world).
#[derive(Resource)]
pub struct CudaSim {
    /// The particles: Bevy's storage buffer and CUDA's pointer, one memory.
    pub buffer: CuvkBuffer<Particle>,
    /// Bevy ↔ CUDA ordering.
    pub sync: StreamSync,
    function: CudaFunction,
    _module: Arc<CudaModule>,
}

impl CudaSim {
    /// Compiles the kernel and makes the shared particle buffer, filled with `initial`.
    pub fn new(device: &CuvkDevice, initial: &[Particle]) -> Result<Self, String> {
        let module = bevy_cuvk::cuvk::cuda::compile_module(
            device.cuda(),
            "particles.cu",
            include_str!("particles.cu"),
        )
        .map_err(|e| format!("compiling particles.cu: {e}"))?;
        let function = module
            .load_function("simulate")
            .map_err(|e| format!("loading simulate: {e}"))?;
        let buffer = particle_buffer(device, initial)?;
        let sync = StreamSync::new(device).map_err(|e| e.to_string())?;
        Ok(Self {
            buffer,
            sync,
            function,
            _module: module,
        })
    }

    /// Enqueues one step on the CUDA stream, after Bevy's reads of the previous frame.
    pub fn step(&mut self, params: &Params) -> Result<(), String> {
        self.sync.cuda_wait_for_bevy().map_err(|e| e.to_string())?;
        let stream = self.sync.stream().clone();
        let args = KernelParams(*params);
        let mut launch = stream.launch_builder(&self.function);
        launch.arg(self.buffer.shared().kernel_arg()).arg(&args);
        // SAFETY: the kernel reads and writes `count` particles of the buffer, which holds
        // exactly that many; the arguments match its signature (pointer, Params by value).
        unsafe { launch.launch(LaunchConfig::for_num_elems(params.count)) }
            .map_err(|e| format!("launching simulate: {e}"))?;
        self.sync.cuda_done().map_err(|e| e.to_string())
    }
}

/// The inline path: the same kernel recorded into Bevy's own command buffers
/// (`VK_NVX_binary_import`), ordered by barriers in Bevy's queue — no CUDA stream, no
/// cross-API semaphore, no host wait.
#[derive(Resource)]
pub struct InlineSim {
    /// The particles (used by the kernel through their device address).
    pub buffer: CuvkBuffer<Particle>,
    kernel: InlineKernel,
    address: u64,
}

impl InlineSim {
    /// Compiles the kernel to PTX, loads it into Bevy's Vulkan device, makes the shared buffer.
    pub fn new(device: &CuvkDevice, initial: &[Particle]) -> Result<Self, String> {
        let ptx = bevy_cuvk::cuvk::cuda::compile_ptx(
            device.cuda(),
            "particles.cu",
            include_str!("particles.cu"),
        )
        .map_err(|e| format!("compiling particles.cu: {e}"))?;
        let kernel = device
            .load_inline_kernel(&ptx, "simulate")
            .map_err(|e| e.to_string())?;
        let buffer = particle_buffer(device, initial)?;
        let address = buffer
            .shared()
            .device_address()
            .ok_or("the shared buffer has no device address")?;
        Ok(Self {
            buffer,
            kernel,
            address,
        })
    }

    /// One step as a command buffer of Bevy's device, to go before the drawing's.
    pub fn record(
        &self,
        device: &CuvkDevice,
        params: &Params,
    ) -> Result<bevy_cuvk::wgpu::CommandBuffer, String> {
        let dims = LaunchDims::linear(params.count.div_ceil(256), 256);
        let args = [KernelArg::address(self.address), KernelArg::value(params)];
        // SAFETY: the kernel touches only the `count` particles of `buffer` (its address),
        // which outlives the submission (a CuvkBuffer keeps its memory until Bevy's work
        // completed); `record` orders it after the previous frame's reads and before this
        // frame's drawing.
        unsafe { self.kernel.record(device, &dims, &args) }.map_err(|e| e.to_string())
    }
}
