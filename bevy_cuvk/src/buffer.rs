//! [`CuvkBuffer`]: one piece of device memory that is both a Bevy render buffer (storage,
//! vertex, ... in Bevy's own pipelines) and a CUDA buffer.

use std::mem::ManuallyDrop;
use std::sync::Arc;

use bevy::render::render_resource::Buffer;
use cuvk::ash::vk;
use cuvk::vulkan::{webgpu, BoundBuffer};
use cuvk::{SharedBuffer, MEMORY_HANDLE_TYPE};
use wgpu::hal;

use crate::late::LateWork;
use crate::{CuvkDevice, CuvkError};

/// Shared memory seen two ways: a Bevy [`Buffer`] (`wgpu::Buffer`, for bind groups and vertex
/// buffers) and a [`SharedBuffer`] (its CUDA pointer for kernels). Clones share it.
///
/// wgpu 29 cannot take a `VkBuffer` it does not destroy, so the Bevy side is an alias: a
/// second `VkBuffer` over the same bytes of cuvk's (non-dedicated) allocation, which wgpu owns
/// and destroys. The memory is cuvk's and stays alive, by construction, as long as Bevy can
/// use it: when the last clone goes, the wgpu buffer is destroyed (a later submission that
/// still names it in a bind group fails wgpu's validation instead of reading freed memory) and
/// the memory is handed to the plugin, which frees it once the GPU has run everything
/// submitted by the end of the frame: Bevy's submission and one of the plugin's right after
/// it, which carries any `write_buffer` still pending. Never dropped in a frame (the app ending), it waits for the device,
/// bounded by the context's drop timeout, and past it leaks the memory with an error logged.
pub struct CuvkBuffer<T: bytemuck::Pod> {
    inner: Arc<Inner<T>>,
}

impl<T: bytemuck::Pod> Clone for CuvkBuffer<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<T: bytemuck::Pod> {
    buffer: Buffer,
    shared: ManuallyDrop<SharedBuffer<T>>,
    late: Arc<LateWork>,
}

impl<T: bytemuck::Pod> Drop for Inner<T> {
    fn drop(&mut self) {
        // No submission made from now on can use the buffer (wgpu refuses it).
        self.buffer.destroy();
        // SAFETY: taken once, here; `shared` is not used after.
        let shared = unsafe { ManuallyDrop::take(&mut self.shared) };
        self.late.bury(Dropped(shared));
    }
}

/// The memory of a dropped [`CuvkBuffer`], on its way to the plugin's late frees.
struct Dropped<T: bytemuck::Pod>(#[allow(dead_code)] SharedBuffer<T>);

// SAFETY: a SharedBuffer holds device memory, its CUDA mapping and their handles, and no value
// of `T` (`T` only types its views, through PhantomData): moving it to another thread to be
// dropped there moves no `T`. Its other parts are Send.
unsafe impl<T: bytemuck::Pod> Send for Dropped<T> {}

impl<T: bytemuck::Pod> std::fmt::Debug for CuvkBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuvkBuffer")
            .field("len", &self.inner.shared.len())
            .field("bytes", &self.inner.shared.byte_size())
            .finish_non_exhaustive()
    }
}

impl<T: bytemuck::Pod> CuvkBuffer<T> {
    /// The Bevy (wgpu) buffer: bind it like any render buffer.
    pub fn buffer(&self) -> &Buffer {
        &self.inner.buffer
    }
    /// The CUDA side (`kernel_arg()` for a launch, `cuda_ptr()`, `device_address()`).
    pub fn shared(&self) -> &SharedBuffer<T> {
        &self.inner.shared
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.inner.shared.len()
    }
    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.inner.shared.is_empty()
    }
}

/// The Vulkan usage a wgpu buffer usage needs: cuvk's WebGPU table (`cuvk::vulkan::webgpu`,
/// what wgpu-core and wgpu-hal create such a buffer with), plus copies (CUDA's initial upload
/// is not one, but users copy). `None` for a usage with no Vulkan counterpart here (mapping,
/// acceleration-structure inputs, unknown bits).
pub(crate) fn vk_usage(usage: wgpu::BufferUsages) -> Option<vk::BufferUsageFlags> {
    let copies = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
    webgpu::vk_buffer_usage(usage.bits())
        .ok()
        .map(|v| v | copies)
}

impl CuvkDevice {
    /// A buffer of `len` elements of `T` that Bevy uses with `usage` and CUDA through its
    /// pointer, filled with `data` (CUDA copies it in; `data.len()` must be `len`, or empty for
    /// zeros).
    ///
    /// Refused ([`CuvkError::BufferUsage`]): an empty usage, mapping usages (the memory is
    /// device-local: copy into a mappable Bevy buffer instead), acceleration-structure inputs,
    /// `len == 0`, a size that overflows, and a `data` of another length.
    pub fn create_buffer<T: bytemuck::Pod>(
        &self,
        len: usize,
        usage: wgpu::BufferUsages,
        data: &[T],
    ) -> Result<CuvkBuffer<T>, CuvkError> {
        let refused = || CuvkError::BufferUsage {
            usage: format!("{usage:?}"),
            len,
            data: data.len(),
        };
        let vk_usage = vk_usage(usage).ok_or_else(refused)?;
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(refused)?;
        if usage.is_empty() || len == 0 || (!data.is_empty() && data.len() != len) {
            return Err(refused());
        }
        let cuvk_err = |source| CuvkError::Shared { source };
        // A non-dedicated allocation: an alias VkBuffer may be bound to it.
        let allocation = self
            .bridge()
            .create_allocation(bytes as u64, vk_usage)
            .map_err(cuvk_err)?;
        let mut shared = allocation.buffer::<T>(0, len).map_err(cuvk_err)?;
        // wgpu takes the buffer as initialised: the data, or zeros (CUDA writes either).
        if data.is_empty() {
            shared
                .cuda_write(&vec![<T as bytemuck::Zeroable>::zeroed(); len])
                .map_err(cuvk_err)?;
        } else {
            shared.cuda_write(data).map_err(cuvk_err)?;
        }
        let alias = alias_buffer(self, shared.vulkan_buffer(), shared.byte_size())?;
        // SAFETY: `alias` is a live VkBuffer of Bevy's device bound to memory cuvk keeps alive
        // (see `Inner::drop`), created with at least the Vulkan usage `usage` needs and exactly
        // `byte_size` bytes, initialised (written above, and cuda_write waits for its copy).
        let buffer = unsafe { wrap_alias(self, alias, shared.byte_size(), usage) };
        Ok(CuvkBuffer {
            inner: Arc::new(Inner {
                buffer,
                shared: ManuallyDrop::new(shared),
                late: self.late().clone(),
            }),
        })
    }
}

/// Bevy's side of cuvk memory: `wgpu` owns the handle `alias` from here (it destroys it),
/// never the memory (no allocation is attached); the memory is device-local, never mapped by
/// wgpu.
///
/// # Safety
/// `alias` is a live VkBuffer of Bevy's device, of exactly `size` bytes, created with at least
/// the Vulkan usage `usage` needs, bound to initialised memory that outlives every submission
/// naming the returned buffer, and not used by anyone else.
pub(crate) unsafe fn wrap_alias(
    device: &CuvkDevice,
    alias: vk::Buffer,
    size: u64,
    usage: wgpu::BufferUsages,
) -> Buffer {
    // SAFETY: the caller's promise (a live buffer of this device, handed over).
    let hal_buffer = unsafe { hal::vulkan::Buffer::from_raw(alias) };
    let desc = wgpu::BufferDescriptor {
        label: Some("cuvk shared buffer"),
        size,
        usage,
        mapped_at_creation: false,
    };
    // SAFETY: as promised by the caller: of this device (Bevy's), with the usage `usage`
    // needs, `desc.size` bytes, initialised, not mapped.
    let wgpu_buffer = unsafe {
        device
            .wgpu_device()
            .create_buffer_from_hal::<hal::api::Vulkan>(hal_buffer, &desc)
    };
    Buffer::from(wgpu_buffer)
}

/// A second VkBuffer on Bevy's device over the `bytes` bytes of `bound` (cuvk's buffer, made
/// or imported by cuvk), with `bound`'s usage: what wgpu 29 can own. Refused where `bound`'s
/// memory is a dedicated allocation, or the alias would not fit it.
pub(crate) fn alias_buffer(
    device: &CuvkDevice,
    bound: &BoundBuffer,
    bytes: u64,
) -> Result<vk::Buffer, CuvkError> {
    let memory = bound.memory();
    if memory.is_dedicated() {
        return Err(CuvkError::Alias {
            reason: "the memory is a dedicated allocation (only its own buffer may be bound)"
                .into(),
        });
    }
    let vk_device = device.vulkan().device();
    let mut external =
        vk::ExternalMemoryBufferCreateInfo::default().handle_types(MEMORY_HANDLE_TYPE);
    let info = vk::BufferCreateInfo::default()
        .size(bytes)
        .usage(bound.buffer().usage())
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .push_next(&mut external);
    // SAFETY: a valid create info on Bevy's live device; the buffer is destroyed below on
    // failure, or by wgpu once handed over.
    let alias =
        unsafe { vk_device.create_buffer(&info, None) }.map_err(|result| CuvkError::Alias {
            reason: format!("vkCreateBuffer: {result}"),
        })?;
    // SAFETY: `alias` was just created on this device.
    let req = unsafe { vk_device.get_buffer_memory_requirements(alias) };
    let offset = bound.offset();
    let fits = req.memory_type_bits & (1 << memory.memory_type_index()) != 0
        && offset.is_multiple_of(req.alignment.max(1))
        && offset + req.size <= memory.size();
    let bind = if fits {
        // SAFETY: the memory is live (held by `bound`), of a type the alias accepts, and the
        // range [offset, offset + size) lies inside it at the required alignment (checked).
        unsafe { vk_device.bind_buffer_memory(alias, memory.handle(), offset) }
            .map_err(|result| format!("vkBindBufferMemory: {result}"))
    } else {
        Err(format!(
            "the alias does not fit cuvk's memory (type bits {:#x} vs type {}, alignment {} at \
             offset {offset}, size {} in {} bytes)",
            req.memory_type_bits,
            memory.memory_type_index(),
            req.alignment,
            req.size,
            memory.size()
        ))
    };
    match bind {
        Ok(()) => Ok(alias),
        Err(reason) => {
            // SAFETY: never bound or used; destroyed once.
            unsafe { vk_device.destroy_buffer(alias, None) };
            Err(CuvkError::Alias { reason })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usages_map_as_wgpu_creates_them_and_the_rest_is_refused() {
        use wgpu::BufferUsages as U;
        let indirect = vk_usage(U::INDIRECT);
        assert_eq!(
            indirect,
            Some(
                vk::BufferUsageFlags::INDIRECT_BUFFER
                    | vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST
            )
        );
        let vertex = vk_usage(U::VERTEX | U::STORAGE);
        assert!(vertex.is_some_and(|f| f
            .contains(vk::BufferUsageFlags::VERTEX_BUFFER | vk::BufferUsageFlags::STORAGE_BUFFER)));
        for refused in [U::MAP_READ, U::MAP_WRITE | U::COPY_SRC, U::BLAS_INPUT] {
            assert_eq!(vk_usage(refused), None, "{refused:?}");
        }
    }
}
