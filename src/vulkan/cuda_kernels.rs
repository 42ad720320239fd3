//! CUDA kernels inside Vulkan command buffers (`VK_NVX_binary_import`): modules loaded into a
//! Vulkan device from PTX (or a cubin), and launches recorded like any other command, so they
//! run in the Vulkan device's context — no CUDA↔Vulkan context switch per frame.
//!
//! Measured on an H200 (driver 580): `vkCreateCuModuleNVX` takes PTX text as NVRTC and nvcc
//! emit it, kernel pointer arguments are buffer device addresses, and a launch takes
//! `cuLaunchKernel`-style `kernelParams` (one pointer per argument). A launch whose arguments
//! do not match the kernel is a GPU fault, not an error, so every launch is checked first
//! against the kernel's PTX signature ([`crate::rules::ptx`]) and CUDA's launch limits.
//!
//! What works in such kernels, measured on the H200 (`tests/gpu/inline.rs`, `bench_inline`):
//! - global loads/stores through buffer device addresses, bit-identical to the CUDA context
//!   (the particle simulation gives the same positions either way);
//! - static and dynamic shared memory (`LaunchDims::shared_mem_bytes`, up to 48 KiB),
//!   `__syncthreads`, and global atomics (a block reduction + `atomicAdd` sums exactly);
//! - bandwidth: a copy kernel runs at 0.999× its CUDA-context speed;
//! - the kernel executes in the `COMPUTE_SHADER` stage with `SHADER_WRITE` accesses
//!   ([`record_kernel_barrier`]).
//!
//! What does not: device-side `printf` prints nothing (no output reached the process in the
//! test); CUDA texture and surface objects are handles of a CUDA context and cannot be passed
//! to a kernel running in the Vulkan device (the driver's image handles can:
//! [`crate::vulkan::InlineImageHandle`]); `VkCuLaunchInfoNVX` has no cooperative-launch or
//! cluster attribute, so grid-wide sync is not available. Use the CUDA context for those (the
//! same [`crate::SharedBuffer`] serves both paths).

use std::ffi::CString;
use std::sync::Arc;

use ash::vk;

use crate::error::LaunchError;
use crate::error::{Error, Result};
use crate::rules::ptx::{self, KernelSignature};
use crate::vulkan::{InlineImageHandle, VulkanContext};

/// CUDA's limits for one launch (identical on every GPU since compute capability 3.0).
pub mod limits {
    /// Threads in one block.
    pub const MAX_THREADS_PER_BLOCK: u32 = 1024;
    /// Block dimensions (x, y, z).
    pub const MAX_BLOCK_DIM: [u32; 3] = [1024, 1024, 64];
    /// Grid dimensions (x, y, z).
    pub const MAX_GRID_DIM: [u32; 3] = [i32::MAX as u32, 65535, 65535];
    /// Shared memory a block may use without opting in per kernel
    /// (`cudaFuncAttributeMaxDynamicSharedMemorySize`, which this path cannot set).
    pub const MAX_SHARED_MEMORY_BYTES: u32 = 48 << 10;
    /// Total bytes of kernel parameters.
    pub const MAX_PARAM_BYTES: usize = 4096;
}

/// A CUDA module loaded into a Vulkan device, with the signatures of its kernels. Its
/// functions hold it alive; destroyed on drop.
pub struct CuModule {
    ctx: Arc<VulkanContext>,
    module: vk::CuModuleNVX,
    signatures: Vec<KernelSignature>,
}

impl std::fmt::Debug for CuModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuModule")
            .field(
                "kernels",
                &self.signatures.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

fn loader(ctx: &VulkanContext) -> Result<&ash::nvx::binary_import::Device> {
    let caps = ctx.info().capabilities;
    match &ctx.ext.binary_import {
        Some(l) if caps.buffer_device_address => Ok(l),
        Some(_) => Err(Error::FeatureNotEnabled {
            feature: "bufferDeviceAddress",
            needed_for: "passing buffers to CUDA kernels in Vulkan queues",
        }),
        None => Err(Error::MissingExtension {
            extension: ash::nvx::binary_import::NAME.to_string_lossy().into_owned(),
            state: ctx.extension_state(ash::nvx::binary_import::NAME),
            needed_for: "launching CUDA kernels in Vulkan queues (NVIDIA drivers only)",
        }),
    }
}

/// Whether `ctx` can load CUDA modules, or why not.
pub fn cuda_kernels_supported(ctx: &VulkanContext) -> Result<()> {
    loader(ctx).map(|_| ())
}

impl CuModule {
    /// Loads PTX text (as NVRTC or `nvcc -ptx` produce it) into `ctx`'s device. Its `.entry`
    /// signatures are read first, so every later launch can be checked.
    pub fn from_ptx(ctx: &Arc<VulkanContext>, ptx_text: &str) -> Result<Arc<Self>> {
        let loader = loader(ctx)?;
        let signatures = ptx::entries(ptx_text).map_err(Error::Ptx)?;
        let data = CString::new(ptx_text).map_err(|e| {
            Error::from(LaunchError::NulByte {
                what: "PTX text",
                position: e.nul_position(),
            })
        })?;
        // The driver reads `dataSize` bytes; PTX is passed with its terminating NUL.
        let bytes = data.as_bytes_with_nul();
        let info = vk::CuModuleCreateInfoNVX {
            data_size: bytes.len(),
            p_data: bytes.as_ptr().cast(),
            ..Default::default()
        };
        let mut module = vk::CuModuleNVX::null();
        // Never beside a device creation or destruction (see `driver_lock`).
        let _driver = super::driver_lock();
        // SAFETY: valid device with the extension enabled; the info points at `bytes`, alive
        // across the call.
        unsafe {
            (loader.fp().create_cu_module_nvx)(
                ctx.device().handle(),
                &info,
                std::ptr::null(),
                &mut module,
            )
        }
        .result()
        .map_err(|result| Error::vulkan("vkCreateCuModuleNVX", result))?;
        Ok(Arc::new(Self {
            ctx: ctx.clone(),
            module,
            signatures,
        }))
    }

    /// The kernels the module declares.
    pub fn kernels(&self) -> &[KernelSignature] {
        &self.signatures
    }

    /// The kernel `name` (refused if the PTX declares no such `.entry`).
    pub fn function(self: &Arc<Self>, name: &str) -> Result<CuFunction> {
        let signature = self
            .signatures
            .iter()
            .find(|s| s.name == name)
            .cloned()
            .ok_or_else(|| {
                Error::Ptx(ptx::PtxError::NoEntry {
                    name: name.to_string(),
                    available: self
                        .signatures
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                })
            })?;
        let loader = loader(&self.ctx)?;
        let cname = CString::new(name).map_err(|e| LaunchError::NulByte {
            what: "kernel name",
            position: e.nul_position(),
        })?;
        let info = vk::CuFunctionCreateInfoNVX {
            module: self.module,
            p_name: cname.as_ptr(),
            ..Default::default()
        };
        let mut function = vk::CuFunctionNVX::null();
        // Never beside a device creation or destruction (see `driver_lock`).
        let _driver = super::driver_lock();
        // SAFETY: our live module; the name is a NUL-terminated string alive across the call.
        unsafe {
            (loader.fp().create_cu_function_nvx)(
                self.ctx.device().handle(),
                &info,
                std::ptr::null(),
                &mut function,
            )
        }
        .result()
        .map_err(|result| Error::vulkan("vkCreateCuFunctionNVX", result))?;
        Ok(CuFunction {
            module: self.clone(),
            function,
            signature,
        })
    }
}

impl Drop for CuModule {
    fn drop(&mut self) {
        if let Some(l) = &self.ctx.ext.binary_import {
            // Never beside a device creation or destruction (see `driver_lock`).
            let _driver = super::driver_lock();
            // SAFETY: ours; every function holds an Arc to the module, and command buffers
            // that launch them were promised complete by their (unsafe) recorders.
            unsafe {
                (l.fp().destroy_cu_module_nvx)(
                    self.ctx.device().handle(),
                    self.module,
                    std::ptr::null(),
                )
            };
        }
    }
}

/// A kernel of a [`CuModule`], with its PTX signature; destroyed on drop.
pub struct CuFunction {
    module: Arc<CuModule>,
    function: vk::CuFunctionNVX,
    signature: KernelSignature,
}

impl std::fmt::Debug for CuFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuFunction")
            .field("signature", &self.signature)
            .finish_non_exhaustive()
    }
}

/// Grid and block dimensions and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchDims {
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Threads per block in x, y, z.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchDims {
    /// A one-dimensional launch of `blocks` blocks of `threads` threads.
    pub fn linear(blocks: u32, threads: u32) -> Self {
        Self {
            grid: [blocks, 1, 1],
            block: [threads, 1, 1],
            shared_mem_bytes: 0,
        }
    }
}

/// One kernel argument, as bytes the launch passes by pointer (`kernelParams`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelArg {
    bytes: Vec<u8>,
    what: ArgKind,
    /// The device an image handle belongs to (a launch on another device is refused).
    device: Option<vk::Device>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArgKind {
    Address,
    Value,
    ImageHandle,
}

impl KernelArg {
    /// A device address (what a kernel's pointer parameter takes), e.g.
    /// [`crate::vulkan::BoundBuffer::device_address`] or a shared buffer's.
    pub fn address(address: u64) -> Self {
        Self {
            bytes: address.to_ne_bytes().to_vec(),
            what: ArgKind::Address,
            device: None,
        }
    }
    /// An image handle (what a kernel's `cudaSurfaceObject_t` / `cudaTextureObject_t`
    /// parameter takes, a 64-bit integer): the handle's 32-bit form zero-extended, as measured
    /// to work in plain modules. Launches check the parameter is a 64-bit integer and the
    /// handle belongs to the kernel's device.
    pub fn image(handle: &InlineImageHandle) -> Self {
        Self {
            bytes: u64::from(handle.handle()).to_ne_bytes().to_vec(),
            what: ArgKind::ImageHandle,
            device: Some(handle.device()),
        }
    }
    /// A value passed by copy: a scalar or a `#[repr(C)]` struct the kernel takes by value.
    pub fn value<T: bytemuck::Pod>(value: &T) -> Self {
        Self {
            bytes: bytemuck::bytes_of(value).to_vec(),
            what: ArgKind::Value,
            device: None,
        }
    }
    /// Its size in bytes.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }
}

impl CuFunction {
    /// The context of the device the kernel's module was loaded into.
    pub fn context(&self) -> &Arc<VulkanContext> {
        &self.module.ctx
    }
    /// The kernel's PTX signature.
    pub fn signature(&self) -> &KernelSignature {
        &self.signature
    }

    /// Every rule a launch must meet, checked against the kernel's PTX signature and CUDA's
    /// limits: argument count and sizes, device addresses and image handles for 64-bit integer
    /// parameters only, image handles of the kernel's device, block and grid dimensions, shared
    /// memory.
    pub fn validate_launch(&self, dims: &LaunchDims, args: &[KernelArg]) -> Result<()> {
        self.validate_args(args)?;
        self.validate_dims(dims)
    }

    /// Count and sizes against the PTX signature; addresses only for 64-bit parameters.
    fn validate_args(&self, args: &[KernelArg]) -> Result<()> {
        let kernel = || self.signature.name.clone();
        let params = &self.signature.params;
        if args.len() != params.len() {
            return Err(LaunchError::ArgumentCount {
                kernel: kernel(),
                given: args.len(),
                expected: params.len(),
                params: params
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            }
            .into());
        }
        for (index, (arg, param)) in args.iter().zip(params).enumerate() {
            if arg.what == ArgKind::ImageHandle {
                if arg.device != Some(self.module.ctx.device().handle()) {
                    return Err(Error::WrongDevice {
                        object: crate::DeviceObject::Image,
                        owner: crate::DeviceOwner::VulkanDevice,
                    });
                }
                if !param.can_hold_pointer() {
                    return Err(LaunchError::ImageHandleToNonInteger {
                        kernel: kernel(),
                        index,
                        param: param.to_string(),
                    }
                    .into());
                }
            }
            if arg.size() != param.size {
                return Err(LaunchError::ArgumentSize {
                    kernel: kernel(),
                    index,
                    given: arg.size(),
                    expected: param.size,
                    param: param.to_string(),
                }
                .into());
            }
            if arg.what == ArgKind::Address && !param.can_hold_pointer() {
                return Err(LaunchError::AddressToNonPointer {
                    kernel: kernel(),
                    index,
                    param: param.to_string(),
                }
                .into());
            }
        }
        let total: usize = args.iter().map(KernelArg::size).sum();
        if total > limits::MAX_PARAM_BYTES {
            return Err(LaunchError::ParameterBytes {
                kernel: kernel(),
                total,
                max: limits::MAX_PARAM_BYTES,
            }
            .into());
        }
        Ok(())
    }

    /// Grid, block and shared memory against CUDA's limits.
    fn validate_dims(&self, dims: &LaunchDims) -> Result<()> {
        let kernel = || self.signature.name.clone();
        let (grid, block) = (dims.grid, dims.block);
        if block.contains(&0) || grid.contains(&0) {
            return Err(LaunchError::ZeroDimension {
                kernel: kernel(),
                grid,
                block,
            }
            .into());
        }
        let threads = block.iter().map(|&b| u64::from(b)).product::<u64>();
        if threads > u64::from(limits::MAX_THREADS_PER_BLOCK) {
            return Err(LaunchError::ThreadsPerBlock {
                kernel: kernel(),
                block,
                threads,
                max: limits::MAX_THREADS_PER_BLOCK,
            }
            .into());
        }
        for axis in 0..3 {
            if block[axis] > limits::MAX_BLOCK_DIM[axis] || grid[axis] > limits::MAX_GRID_DIM[axis]
            {
                return Err(LaunchError::DimensionLimit {
                    kernel: kernel(),
                    axis,
                    grid,
                    block,
                    max_grid: limits::MAX_GRID_DIM,
                    max_block: limits::MAX_BLOCK_DIM,
                }
                .into());
            }
        }
        if dims.shared_mem_bytes > limits::MAX_SHARED_MEMORY_BYTES {
            return Err(LaunchError::SharedMemory {
                kernel: kernel(),
                bytes: dims.shared_mem_bytes,
                max: limits::MAX_SHARED_MEMORY_BYTES,
            }
            .into());
        }
        Ok(())
    }

    /// Records a launch into `cmd` after [`Self::validate_launch`].
    ///
    /// # Safety
    /// `cmd` must be a command buffer of this module's device in the recording state; every
    /// device address among `args` must stay valid (its buffer alive) until the command buffer
    /// completes, and the kernel must only access memory those addresses cover; every image
    /// handle among `args` ([`KernelArg::image`]) must stay alive until then too, the kernel
    /// must use it as what it is (a surface as a surface, within its level and layers), and its
    /// image must be in a layout that allows the kernel's access (`GENERAL`) and owned by
    /// `cmd`'s queue family when the kernel runs; the module and this function must outlive
    /// the command buffer's execution.
    pub unsafe fn record_launch(
        &self,
        cmd: vk::CommandBuffer,
        dims: &LaunchDims,
        args: &[KernelArg],
    ) -> Result<()> {
        self.validate_launch(dims, args)?;
        let loader = loader(&self.module.ctx)?;
        let params: Vec<*const std::ffi::c_void> =
            args.iter().map(|a| a.bytes.as_ptr().cast()).collect();
        let info = vk::CuLaunchInfoNVX {
            function: self.function,
            grid_dim_x: dims.grid[0],
            grid_dim_y: dims.grid[1],
            grid_dim_z: dims.grid[2],
            block_dim_x: dims.block[0],
            block_dim_y: dims.block[1],
            block_dim_z: dims.block[2],
            shared_mem_bytes: dims.shared_mem_bytes,
            param_count: params.len(),
            p_params: params.as_ptr(),
            ..Default::default()
        };
        // SAFETY: validated launch of our live function; the parameter pointers point at
        // `args`' bytes, alive across the call (the driver copies them at record time); the
        // caller vouches for the command buffer and the addresses.
        unsafe { (loader.fp().cmd_cu_launch_kernel_nvx)(cmd, &info) };
        Ok(())
    }
}

impl Drop for CuFunction {
    fn drop(&mut self) {
        let ctx = &self.module.ctx;
        if let Some(l) = &ctx.ext.binary_import {
            // Never beside a device creation or destruction (see `driver_lock`).
            let _driver = super::driver_lock();
            // SAFETY: ours; command buffers that launch it were promised complete by their
            // (unsafe) recorders.
            unsafe {
                (l.fp().destroy_cu_function_nvx)(
                    ctx.device().handle(),
                    self.function,
                    std::ptr::null(),
                )
            };
        }
    }
}

/// Records the barrier that makes a CUDA kernel's writes visible to every Vulkan command after
/// it (and orders its reads before their writes).
///
/// Measured on an H200 (driver 580, `bench_inline`): a kernel launched this way executes in
/// the `COMPUTE_SHADER` stage and its global writes are `SHADER_WRITE` accesses — with that
/// source scope a following copy read all 1M words of 300 frames right, with no barrier every
/// frame was wrong. The destination covers all commands, whatever follows.
///
/// # Safety
/// `cmd` must be a command buffer of `ctx`'s device in the recording state.
pub unsafe fn record_kernel_barrier(ctx: &VulkanContext, cmd: vk::CommandBuffer) {
    // SAFETY: forwarded from the caller.
    unsafe {
        record_memory_barrier(
            ctx,
            cmd,
            (
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::SHADER_WRITE,
            ),
            (
                vk::PipelineStageFlags::ALL_COMMANDS,
                vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE,
            ),
        )
    }
}

/// Records the barrier between two CUDA kernels in one Vulkan queue: the first one's writes
/// (`COMPUTE_SHADER` / `SHADER_WRITE`, where such launches execute) made visible to the next
/// kernel only (`COMPUTE_SHADER` / `SHADER_READ | SHADER_WRITE`). Cheaper than
/// [`record_kernel_barrier`] (which makes them visible to every later command) in a chain of
/// kernels; end the chain with that one before other commands read what the kernels wrote.
///
/// # Safety
/// `cmd` must be a command buffer of `ctx`'s device in the recording state.
pub unsafe fn record_kernel_to_kernel_barrier(ctx: &VulkanContext, cmd: vk::CommandBuffer) {
    // SAFETY: forwarded from the caller.
    unsafe {
        record_memory_barrier(
            ctx,
            cmd,
            (
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::SHADER_WRITE,
            ),
            (
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
            ),
        )
    }
}

/// Records the barrier that makes earlier Vulkan writes (`src_stage` / `src_access`, e.g.
/// `TRANSFER` / `TRANSFER_WRITE` after a copy or fill) visible to a CUDA kernel launched after
/// it, and orders earlier reads before the kernel's writes.
///
/// # Safety
/// `cmd` must be a command buffer of `ctx`'s device in the recording state.
pub unsafe fn record_barrier_before_kernel(
    ctx: &VulkanContext,
    cmd: vk::CommandBuffer,
    src_stage: vk::PipelineStageFlags,
    src_access: vk::AccessFlags,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        record_memory_barrier(
            ctx,
            cmd,
            (src_stage, src_access),
            (
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
            ),
        )
    }
}

/// One global memory barrier.
///
/// # Safety
/// `cmd` must be a command buffer of `ctx`'s device in the recording state.
unsafe fn record_memory_barrier(
    ctx: &VulkanContext,
    cmd: vk::CommandBuffer,
    (src_stage, src_access): (vk::PipelineStageFlags, vk::AccessFlags),
    (dst_stage, dst_access): (vk::PipelineStageFlags, vk::AccessFlags),
) {
    let barrier = [vk::MemoryBarrier::default()
        .src_access_mask(src_access)
        .dst_access_mask(dst_access)];
    // SAFETY: forwarded from the caller; a global memory barrier is always valid.
    unsafe {
        ctx.device().cmd_pipeline_barrier(
            cmd,
            src_stage,
            dst_stage,
            vk::DependencyFlags::empty(),
            &barrier,
            &[],
            &[],
        )
    }
}
