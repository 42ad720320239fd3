//! The reverse direction: memory CUDA allocates (`cuMemCreate`, exportable) that Vulkan
//! imports (outside the Vulkan specification; it works on NVIDIA's drivers, measured).

use std::sync::Arc;

use ash::vk;

use crate::cuda::vmm::{AddressReservation, VmmAllocation};
use crate::error::Capability;
use crate::error::{Error, Result};
use crate::interop::shared_buffer::{transfer_usage, CudaSide};
use crate::interop::{Bridge, BufferUsage, SharedBuffer};
use crate::rules::layout;
use crate::vulkan::{BoundBuffer, Buffer, BufferDesc, DeviceMemory, ExternalUse, VulkanContext};

impl Bridge {
    /// CUDA allocates `len` elements (`cuMemCreate`, exportable), maps them with an
    /// accessible virtual address, and Vulkan imports the same memory behind a buffer.
    ///
    /// Importing CUDA-exported memory into Vulkan is outside the Vulkan specification (it
    /// works on NVIDIA's drivers, measured); where the driver refuses, this returns
    /// [`Error::Unsupported`] and frees everything it made.
    pub fn create_buffer_from_cuda<T: bytemuck::Pod>(
        &self,
        len: usize,
        usage: BufferUsage,
    ) -> Result<SharedBuffer<T>> {
        self.vmm_buffer(len, usage, &[self.cuda.cu_device()])
    }

    /// `len` elements CUDA allocates on this bridge's GPU, maps once, opens to `devices` (this
    /// GPU among them) and Vulkan imports: [`Self::create_buffer_from_cuda`] and
    /// [`Self::create_peer_buffer`](crate::Bridge::create_peer_buffer).
    pub(crate) fn vmm_buffer<T: bytemuck::Pod>(
        &self,
        len: usize,
        usage: BufferUsage,
        devices: &[cudarc::driver::sys::CUdevice],
    ) -> Result<SharedBuffer<T>> {
        let bytes = layout::bytes_for::<T>(len)?;
        let granularity = self.vmm_granularity()?;
        let size = layout::align_up(bytes, granularity).ok_or(layout::LayoutError::Overflow {
            offset: bytes,
            size: granularity,
        })?;
        let memory = VmmAllocation::new(&self.cuda, size, crate::cuda::vmm::VmmExport::OsHandle)?;
        let reservation = AddressReservation::new(&self.cuda, size)?;
        let mapping = reservation
            .map(0, &memory, size)?
            .enable_access_for(devices)?;
        let bound = import_into_vulkan(&self.vulkan, &memory, bytes, usage | transfer_usage())?;
        SharedBuffer::assemble(bound, CudaSide::Vmm(mapping), self.stream.clone(), len)
    }
}

/// Imports a CUDA VMM allocation into Vulkan and binds a buffer of `bytes` and `usage` to it.
pub(crate) fn import_into_vulkan(
    vk: &Arc<VulkanContext>,
    memory: &VmmAllocation,
    bytes: u64,
    usage: vk::BufferUsageFlags,
) -> Result<BoundBuffer> {
    let buffer = Buffer::new(
        vk,
        BufferDesc {
            size: bytes,
            usage,
            external: ExternalUse::Import,
        },
    )?;
    let r = buffer.requirements();
    let dedicated = r.requires_dedicated.then_some(&buffer);
    let imported = import_vmm_memory(vk, memory, r.memory_type_bits, dedicated)?;
    buffer.bind(Arc::new(imported), 0)
}

/// Imports a CUDA VMM allocation as Vulkan memory of a device-local type in `type_bits`.
pub(crate) fn import_vmm_memory(
    vk: &Arc<VulkanContext>,
    memory: &VmmAllocation,
    type_bits: u32,
    dedicated: Option<&Buffer>,
) -> Result<DeviceMemory> {
    let handle = memory.export()?;
    // SAFETY: the handle was just exported from `memory`, an allocation of exactly
    // `memory.size()` bytes on the same GPU; only device-local types the caller's buffer
    // accepts are allowed.
    unsafe {
        DeviceMemory::import(
            vk,
            handle,
            memory.size(),
            type_bits & device_local_types(vk),
            dedicated,
        )
    }
    .map_err(|e| match e {
        // Out of memory stays out of memory; any other refusal means the driver does not take
        // CUDA's memory.
        Error::Vulkan { result, .. } if e.kind() != crate::ErrorKind::OutOfMemory => {
            Capability::CudaMemoryImport { result }.into()
        }
        other => other,
    })
}

fn device_local_types(vk: &VulkanContext) -> u32 {
    let p = vk.memory_properties();
    (0..p.memory_type_count)
        .filter(|&i| {
            p.memory_types[i as usize]
                .property_flags
                .contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
        })
        .fold(0, |bits, i| bits | (1 << i))
}
