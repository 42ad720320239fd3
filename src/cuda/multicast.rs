//! Multicast objects (`cuMulticastCreate`, `cuMulticastAddDevice`, `cuMulticastBindMem`) with
//! capability detection first.
//!
//! **Safety of shared machines**: creating a multicast object on a system whose devices do not
//! support it can take shared GPUs out of service. [`MulticastGroup::new`] therefore reads
//! `CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED` for every device of the team and returns
//! [`Error::Unsupported`](crate::Error::Unsupported) before any multicast call when one of them reports 0. Every bind
//! rule of the reference page is checked before `cuMulticastBindMem`
//! (the layout rules of a multicast bind plus the team and shareability rules in
//! [`validate_bind_target`]), so the rules are tested without a GPU.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext};

use crate::cuda::vmm::VmmAllocation;
use crate::error::{Capability, MemoryError};
use crate::error::{CudaResultExt, Result};
use crate::rules::layout::{self, MulticastBindRequest};

/// Whether `ctx`'s device supports multicast objects.
pub fn multicast_supported(ctx: &Arc<CudaContext>) -> Result<bool> {
    ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED)
        .map(|v| v != 0)
        .cuda("cuDeviceGetAttribute(MULTICAST_SUPPORTED)")
}

/// What a bind target must satisfy beyond sizes: its memory lives on a device of the team, and
/// a shareable multicast object binds only shareable memory.
pub fn validate_bind_target(
    team: &[i32],
    memory_device: i32,
    multicast_shareable: bool,
    memory_shareable: bool,
) -> Result<()> {
    if !team.contains(&memory_device) {
        return Err(MemoryError::NotInMulticastTeam {
            device: memory_device,
            team: team.to_vec(),
        }
        .into());
    }
    if multicast_shareable && !memory_shareable {
        return Err(MemoryError::MulticastNeedsShareable.into());
    }
    Ok(())
}

/// A multicast object over a team of devices.
pub struct MulticastGroup {
    ctx: Arc<CudaContext>,
    handle: sys::CUmemGenericAllocationHandle,
    size: u64,
    granularity: u64,
    team: Vec<i32>,
    shareable: bool,
}

impl MulticastGroup {
    /// Creates a multicast object of `size` bytes for `devices` (contexts of the team), after
    /// checking that every device supports multicast: where one does not, it returns
    /// [`Error::Unsupported`](crate::Error::Unsupported) and makes no multicast call at all.
    pub fn new(devices: &[Arc<CudaContext>], size: u64) -> Result<Self> {
        let first = devices.first().ok_or(MemoryError::EmptyMulticastTeam)?;
        for d in devices {
            if !multicast_supported(d)? {
                return Err(Capability::Multicast {
                    device: d.cu_device(),
                }
                .into());
            }
        }
        Self::create_supported(first, devices, size)
    }

    /// The multicast calls proper; reached only when every device reported support.
    fn create_supported(
        first: &Arc<CudaContext>,
        devices: &[Arc<CudaContext>],
        size: u64,
    ) -> Result<Self> {
        // SAFETY: all-zero is a valid value of this plain C struct (then filled in below).
        let mut prop: sys::CUmulticastObjectProp = unsafe { std::mem::zeroed() };
        prop.numDevices = devices.len() as u32;
        prop.size = size as usize;
        prop.handleTypes =
            u64::from(sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0);
        first.bind_to_thread().cuda("cuCtxSetCurrent")?;
        let mut g = 0usize;
        // SAFETY: valid prop and out-pointer; the devices support multicast (checked by caller).
        unsafe {
            sys::cuMulticastGetGranularity(
                &mut g,
                &prop,
                sys::CUmulticastGranularity_flags::CU_MULTICAST_GRANULARITY_MINIMUM,
            )
        }
        .result()
        .cuda("cuMulticastGetGranularity")?;
        layout::check_aligned("size", size, g as u64, layout::AlignmentRule::Granularity)?;
        let mut handle = 0;
        // SAFETY: as above; size is a multiple of the multicast granularity (checked).
        unsafe { sys::cuMulticastCreate(&mut handle, &prop) }
            .result()
            .cuda("cuMulticastCreate")?;
        let mut group = Self {
            ctx: first.clone(),
            handle,
            size,
            granularity: g as u64,
            team: Vec::new(),
            shareable: true,
        };
        for d in devices {
            // SAFETY: a live multicast object; a device of the team (`group` releases on error).
            unsafe { sys::cuMulticastAddDevice(handle, d.cu_device()) }
                .result()
                .cuda("cuMulticastAddDevice")?;
            group.team.push(d.cu_device());
        }
        Ok(group)
    }

    /// Binds `size` bytes of `memory` (from `memory_offset`) at `offset` in the object, after
    /// checking every rule of the page.
    pub fn bind(
        &self,
        offset: u64,
        memory: &Arc<VmmAllocation>,
        memory_offset: u64,
        size: u64,
    ) -> Result<()> {
        layout::validate_multicast_bind(MulticastBindRequest {
            multicast_size: self.size,
            multicast_granularity: self.granularity,
            multicast_offset: offset,
            allocation_size: memory.size(),
            allocation_offset: memory_offset,
            size,
        })?;
        validate_bind_target(
            &self.team,
            memory.device(),
            self.shareable,
            memory.is_exportable(),
        )?;
        self.ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        // SAFETY: every rule of the reference page was checked above.
        unsafe {
            sys::cuMulticastBindMem(
                self.handle,
                offset as usize,
                memory.handle(),
                memory_offset as usize,
                size as usize,
                0,
            )
        }
        .result()
        .cuda("cuMulticastBindMem")
    }

    /// The object's granularity (minimum).
    pub fn granularity(&self) -> u64 {
        self.granularity
    }
}

impl Drop for MulticastGroup {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: created once, released once.
        self.ctx
            .record_err(unsafe { sys::cuMemRelease(self.handle) }.result());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bind_target_rules() {
        assert!(validate_bind_target(&[0, 1], 1, true, true).is_ok());
        let e = validate_bind_target(&[0, 1], 3, true, true).unwrap_err();
        assert!(
            e.to_string().contains("device 3") && e.to_string().contains("[0, 1]"),
            "{e}"
        );
        let e = validate_bind_target(&[0], 0, true, false).unwrap_err();
        assert!(e.to_string().contains("shareable"), "{e}");
        assert!(validate_bind_target(&[0], 0, false, false).is_ok());
    }
}
