//! CUDA C++ kernels compiled at run time with NVRTC for the device in hand.

use std::sync::{Arc, OnceLock};

use cudarc::driver::{sys, CudaContext, CudaModule};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};

use crate::error::{CudaResultExt, Error, Result};

fn nvrtc_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the NVRTC library by its known names.
    *PRESENT.get_or_init(|| unsafe { cudarc::nvrtc::sys::is_culib_present() })
}

/// Compiles CUDA C++ `source` for `ctx`'s device (`--gpu-architecture=compute_XY`) and loads it.
pub fn compile_module(ctx: &Arc<CudaContext>, name: &str, source: &str) -> Result<Arc<CudaModule>> {
    let ptx = compile(ctx, name, source)?;
    ctx.load_module(ptx).cuda("cuModuleLoadData")
}

/// Compiles CUDA C++ `source` for `ctx`'s device and returns the PTX text: what
/// `vulkan::CuModule::from_ptx` loads into a Vulkan device.
pub fn compile_ptx(ctx: &Arc<CudaContext>, name: &str, source: &str) -> Result<String> {
    Ok(compile(ctx, name, source)?.to_src())
}

fn compile(ctx: &Arc<CudaContext>, name: &str, source: &str) -> Result<cudarc::nvrtc::Ptx> {
    if !nvrtc_present() {
        return Err(Error::Unsupported(
            "NVRTC library (libnvrtc) not found".into(),
        ));
    }
    if source.contains('\0') || name.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "kernel source {name} contains a NUL byte"
        )));
    }
    let major = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .cuda("cuDeviceGetAttribute")?;
    let minor = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        .cuda("cuDeviceGetAttribute")?;
    let opts = CompileOptions {
        options: vec![
            format!("--gpu-architecture=compute_{major}{minor}"),
            "-std=c++17".into(),
        ],
        name: Some(name.to_string()),
        ..Default::default()
    };
    compile_ptx_with_opts(source, opts).map_err(|e| Error::Nvrtc {
        name: name.to_string(),
        message: format!("{e:?}"),
    })
}
