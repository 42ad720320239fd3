//! CUDA devices and their UUIDs.

use std::sync::{Arc, OnceLock};

use cudarc::driver::{result, CudaContext};

use crate::error::{CudaResultExt, Error, Result};
use crate::uuid::Uuid;

/// Whether the CUDA driver library can be loaded on this machine (checked once).
pub fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the driver library by its known names.
    *PRESENT.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() })
}

/// Initialises the driver, or says why it cannot: [`Error::CudaUnavailable`] where there is no
/// driver library (every other CUDA call in cudarc would panic there).
pub fn init() -> Result<()> {
    if !driver_present() {
        return Err(Error::CudaUnavailable);
    }
    result::init().cuda("cuInit")
}

/// A CUDA device as the driver lists it.
#[derive(Debug, Clone)]
pub struct CudaDeviceInfo {
    /// Device ordinal.
    pub ordinal: usize,
    /// `cuDeviceGetName`.
    pub name: String,
    /// `cuDeviceGetUuid`.
    pub uuid: Uuid,
}

/// Every CUDA device with its UUID.
pub fn devices() -> Result<Vec<CudaDeviceInfo>> {
    init()?;
    let count = result::device::get_count().cuda("cuDeviceGetCount")?;
    (0..count)
        .map(|i| {
            let dev = result::device::get(i).cuda("cuDeviceGet")?;
            Ok(CudaDeviceInfo {
                ordinal: i as usize,
                name: result::device::get_name(dev).cuda("cuDeviceGetName")?,
                uuid: Uuid::from_cuda(result::device::get_uuid(dev).cuda("cuDeviceGetUuid")?.bytes),
            })
        })
        .collect()
}

/// The ordinal of the CUDA device with this UUID, or [`Error::NoCudaDevice`] listing the
/// UUIDs there are.
pub fn ordinal_for_uuid(uuid: Uuid) -> Result<usize> {
    let all = devices()?;
    all.iter()
        .find(|d| d.uuid == uuid)
        .map(|d| d.ordinal)
        .ok_or_else(|| Error::NoCudaDevice {
            uuid,
            available: all
                .iter()
                .map(|d| format!("{}: {} ({})", d.ordinal, d.name, d.uuid))
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The primary context of CUDA device `ordinal` (checks that a driver is present first).
pub fn context(ordinal: usize) -> Result<Arc<CudaContext>> {
    init()?;
    CudaContext::new(ordinal).cuda("cuDevicePrimaryCtxRetain")
}

/// Which CUDA device to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaDeviceChoice {
    /// The CUDA device with this ordinal.
    Ordinal(usize),
    /// The CUDA device with this UUID.
    Uuid(Uuid),
}

/// Opens (retains the primary context of) the chosen CUDA device and reads its UUID, the one
/// the Vulkan device must share: what `Bridge::new` and `WgpuBridge::new` both start with.
pub fn open(choice: CudaDeviceChoice) -> Result<(Arc<CudaContext>, Uuid)> {
    let ordinal = match choice {
        CudaDeviceChoice::Ordinal(o) => o,
        CudaDeviceChoice::Uuid(u) => ordinal_for_uuid(u)?,
    };
    let ctx = context(ordinal)?;
    let uuid = uuid_of(&ctx)?;
    Ok((ctx, uuid))
}

/// The UUID of a CUDA context's device (`cuDeviceGetUuid`), comparable with Vulkan's
/// `deviceUUID`.
pub fn uuid_of(ctx: &CudaContext) -> Result<Uuid> {
    let raw = result::device::get_uuid(ctx.cu_device()).cuda("cuDeviceGetUuid")?;
    Ok(Uuid::from_cuda(raw.bytes))
}

impl Default for CudaDeviceChoice {
    /// Device 0.
    fn default() -> Self {
        CudaDeviceChoice::Ordinal(0)
    }
}
