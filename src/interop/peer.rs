//! Memory one GPU's Vulkan draws and other GPUs write at NVLink speed, by copy engine and by
//! their own kernels.
//!
//! Measured (DESIGN.md): peer access does not map *imported* Vulkan memory into peers — a
//! kernel on GPU 1 storing into GPU 0's imported memory faults. Memory CUDA allocates with
//! `cuMemCreate` on the render GPU, exported to Vulkan and opened to the peers with
//! `cuMemSetAccess` (the seed pages' VMM path) is reachable from every peer that has a peer
//! path; so that is what a peer buffer is.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext};

use crate::error::{CudaResultExt, PeerError, Result};
use crate::interop::{Bridge, BufferUsage, SharedBuffer};

/// Whether GPU `peer`'s kernels and copies can reach GPU `owner`'s memory
/// (`cuDeviceCanAccessPeer`; true for a GPU and itself).
pub fn can_access_peer(peer: &CudaContext, owner: &CudaContext) -> Result<bool> {
    if peer.cu_device() == owner.cu_device() {
        return Ok(true);
    }
    let mut can = 0;
    // SAFETY: two device handles of an initialised driver, one out-parameter.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, peer.cu_device(), owner.cu_device()) }
        .result()
        .cuda("cuDeviceCanAccessPeer")?;
    Ok(can != 0)
}

/// Lets kernels and copies issued in `from`'s context reach memory `to`'s context allocated
/// (`cuCtxEnablePeerAccess`; nothing to do for one GPU, already enabled is fine). Refused with
/// [`PeerError::NoPeerAccess`] where the GPUs have no peer path. This maps `to`'s ordinary
/// allocations (and makes copy engines take the direct path for any memory of `to`'s GPU), not
/// memory imported from Vulkan: for peer *kernels* writing render-GPU memory, use
/// [`Bridge::create_peer_buffer`].
pub fn enable_peer_access(from: &CudaContext, to: &CudaContext) -> Result<()> {
    if from.cu_device() == to.cu_device() {
        return Ok(());
    }
    if !can_access_peer(from, to)? {
        return Err(PeerError::NoPeerAccess {
            peer: from.ordinal(),
            owner: to.ordinal(),
        }
        .into());
    }
    from.bind_to_thread().cuda("cuCtxSetCurrent")?;
    // SAFETY: two live contexts of GPUs with a peer path (checked); no flags.
    match unsafe { sys::cuCtxEnablePeerAccess(to.cu_ctx(), 0) } {
        sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
            Ok(())
        }
        e => e.result().cuda("cuCtxEnablePeerAccess"),
    }
}

/// Where a raw device pointer lives, as the driver reports it: the CUDA ordinal of its GPU and
/// the allocation that holds it (`cuPointerGetAttribute`: `DEVICE_ORDINAL`,
/// `RANGE_START_ADDR`, `RANGE_SIZE`). What a caller handing in a raw pointer (a PyTorch tensor's
/// `data_ptr`) is checked against: [`Error::Cuda`](crate::Error::Cuda) for a pointer the driver
/// does not know.
pub fn device_pointer_range(ptr: sys::CUdeviceptr) -> Result<(usize, std::ops::Range<u64>)> {
    use sys::CUpointer_attribute as A;
    let mut ordinal: i32 = -1;
    let mut start: sys::CUdeviceptr = 0;
    let mut size: usize = 0;
    // SAFETY: each out-parameter has the type its attribute writes (int, CUdeviceptr, size_t);
    // the pointer value is only looked up.
    unsafe {
        sys::cuPointerGetAttribute(
            (&mut ordinal as *mut i32).cast(),
            A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr,
        )
        .result()
        .cuda("cuPointerGetAttribute(DEVICE_ORDINAL)")?;
        sys::cuPointerGetAttribute(
            (&mut start as *mut sys::CUdeviceptr).cast(),
            A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            ptr,
        )
        .result()
        .cuda("cuPointerGetAttribute(RANGE_START_ADDR)")?;
        sys::cuPointerGetAttribute(
            (&mut size as *mut usize).cast(),
            A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
            ptr,
        )
        .result()
        .cuda("cuPointerGetAttribute(RANGE_SIZE)")?;
    }
    // -1: host or managed memory, which lives on no GPU.
    let ordinal = usize::try_from(ordinal).map_err(|_| crate::Error::Cuda {
        call: "cuPointerGetAttribute(DEVICE_ORDINAL): not device memory",
        source: cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE),
    })?;
    Ok((ordinal, start..start + size as u64))
}

/// The devices a peer buffer opens to: the owner first, then each other device once; refused
/// (before anything is allocated) where one cannot reach the owner.
pub(crate) fn access_list(
    owner: (usize, sys::CUdevice),
    peers: &[(usize, sys::CUdevice)],
    can_access: impl Fn(usize) -> Result<bool>,
) -> Result<Vec<sys::CUdevice>> {
    let mut devices = vec![owner.1];
    for (i, &(ordinal, device)) in peers.iter().enumerate() {
        if devices.contains(&device) {
            continue;
        }
        if !can_access(i)? {
            return Err(PeerError::NoPeerAccess {
                peer: ordinal,
                owner: owner.0,
            }
            .into());
        }
        devices.push(device);
    }
    Ok(devices)
}

impl Bridge {
    /// `len` elements of shared memory that this bridge's Vulkan draws and that the GPUs of
    /// `peers` (their CUDA contexts, e.g. other bridges' [`Bridge::cuda`]) read and write
    /// directly: their kernels store into [`SharedBuffer::cuda_ptr`] and their copy engines
    /// copy into it over NVLink or PCIe.
    ///
    /// CUDA allocates it on this bridge's GPU (`cuMemCreate`), Vulkan imports it, and
    /// `cuMemSetAccess` opens it to every peer. Refused with [`PeerError::NoPeerAccess`] where a
    /// peer has no path to this GPU (checked first: nothing is allocated then); peers on this
    /// bridge's own GPU need nothing and are accepted.
    ///
    /// Order the peers' work against Vulkan's with a [`StreamOrder`](crate::StreamOrder): its
    /// `cuda_acquire` and `cuda_release` take streams of any GPU.
    pub fn create_peer_buffer<T: bytemuck::Pod>(
        &self,
        len: usize,
        usage: BufferUsage,
        peers: &[&Arc<CudaContext>],
    ) -> Result<SharedBuffer<T>> {
        let owner = self.cuda();
        let listed: Vec<(usize, sys::CUdevice)> =
            peers.iter().map(|p| (p.ordinal(), p.cu_device())).collect();
        let devices = access_list((owner.ordinal(), owner.cu_device()), &listed, |i| {
            can_access_peer(peers[i], owner)
        })?;
        self.vmm_buffer(len, usage, &devices)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::{Error, Rule};

    #[test]
    fn peers_without_a_path_are_refused_with_both_gpus_named() {
        let no_path = |i: usize| Ok(i != 1); // the second peer, device 7, has no path
        let err = access_list((0, 10), &[(1, 11), (3, 7)], no_path).unwrap_err();
        assert!(matches!(
            err,
            Error::Peer(PeerError::NoPeerAccess { peer: 3, owner: 0 })
        ));
        assert_eq!(err.rule(), Some(Rule::PeerNoAccess));
        assert_eq!(err.kind(), crate::ErrorKind::Unsupported);
        assert!(err.to_string().contains("GPU 3 cannot reach GPU 0"));
    }

    #[test]
    fn the_owner_comes_first_and_each_device_once() {
        let all = |_| Ok(true);
        let devices = access_list((0, 10), &[(1, 11), (0, 10), (1, 11), (2, 12)], all).unwrap();
        assert_eq!(devices, vec![10, 11, 12]);
        // The owner's own device is never asked about.
        let never = |_: usize| -> Result<bool> { panic!("asked") };
        assert_eq!(access_list((0, 10), &[(0, 10)], never).unwrap(), vec![10]);
    }
}
