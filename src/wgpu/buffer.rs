//! Buffers in cuvk's memory as `wgpu::Buffer`s: the same `VkBuffer`, wrapped with
//! `wgpu_hal::vulkan::Buffer::from_raw_externally_owned`, whose drop callback holds cuvk's
//! share of the buffer and its memory until wgpu has destroyed its view of it.

use std::sync::Arc;

use ::wgpu::hal;
use ash::vk;

use crate::vulkan::{webgpu, AsVkBuffer, BoundBuffer};
use crate::wgpu::hal_vk::Vk;
use crate::wgpu::{WgpuBridge, WgpuDevice};
use crate::{Dedicated, DeviceObject, DeviceOwner, Error, Result, SharedBuffer, WgpuError};

/// The Vulkan usage a `VkBuffer` needs for wgpu to use it as `usage`: what wgpu-core and
/// wgpu-hal 30 would create it with (`conv::map_buffer_usage`; `INDIRECT` and
/// `QUERY_RESOLVE` buffers are also storage buffers, which wgpu binds internally).
///
/// Refused: an empty usage, `MAP_READ` / `MAP_WRITE` (wgpu cannot map memory it does not own:
/// copy into a mappable wgpu buffer instead), and the acceleration-structure inputs.
pub fn vk_buffer_usage(usage: ::wgpu::BufferUsages) -> Result<vk::BufferUsageFlags> {
    use ::wgpu::BufferUsages as U;
    if usage.is_empty() {
        return Err(WgpuError::EmptyBufferUsage.into());
    }
    if usage.intersects(U::MAP_READ | U::MAP_WRITE) {
        return Err(WgpuError::MappableUsage { usage }.into());
    }
    if usage.intersects(U::BLAS_INPUT | U::TLAS_INPUT) {
        return Err(WgpuError::AccelerationStructureUsage { usage }.into());
    }
    // The one WebGPU usage table (`vulkan::webgpu`), on wgpu's spec-valued bits.
    webgpu::vk_buffer_usage(usage.bits()).map_err(|unknown| {
        WgpuError::UnknownBufferUsage {
            usage: ::wgpu::BufferUsages::from_bits_retain(unknown),
        }
        .into()
    })
}

impl WgpuDevice {
    /// Wraps a cuvk buffer on this device (e.g. `BoundBuffer::new_exportable(wgpu.vulkan(),
    /// ..)`) as a `wgpu::Buffer` of `usage`: no CUDA needed. The wgpu buffer holds a share of
    /// `bound` until wgpu has destroyed it (after its last submission using it completed),
    /// so the `VkBuffer` and its memory outlive wgpu's use, whoever drops first.
    ///
    /// Checked first: `bound` belongs to this device, was created with every Vulkan usage
    /// `usage` needs ([`vk_buffer_usage`]), and fits the device's `max_buffer_size`.
    pub fn wrap_buffer(
        &self,
        bound: Arc<BoundBuffer>,
        usage: ::wgpu::BufferUsages,
        label: Option<&str>,
    ) -> Result<::wgpu::Buffer> {
        self.validate_wrap(&bound, usage)?;
        // SAFETY: validated just above.
        Ok(unsafe { self.wrap_buffer_unchecked(bound, usage, label) })
    }

    /// Imports `source`'s memory (another `VkDevice` on the same GPU and driver, e.g. a cuvk
    /// [`crate::vulkan::VulkanContext`] of an engine) into this device and wraps the imported
    /// buffer as a `wgpu::Buffer` of `usage`: both devices then see the same bytes. `source`
    /// must have every Vulkan usage `usage` needs (the imported buffer gets `source`'s usage).
    pub fn import_buffer(
        &self,
        source: &BoundBuffer,
        usage: ::wgpu::BufferUsages,
        label: Option<&str>,
    ) -> Result<::wgpu::Buffer> {
        // The imported buffer gets `source`'s size and usage: checked before it is made.
        self.check_wrappable(source.vk_size(), source.buffer().usage(), usage)?;
        let imported = Arc::new(BoundBuffer::import_from(self.vulkan(), source)?);
        // SAFETY: on this device (just imported), with `source`'s usage and size (checked).
        Ok(unsafe { self.wrap_buffer_unchecked(imported, usage, label) })
    }

    /// Every rule of wrapping `bound` as a wgpu buffer of `usage`.
    pub(crate) fn validate_wrap(
        &self,
        bound: &BoundBuffer,
        usage: ::wgpu::BufferUsages,
    ) -> Result<()> {
        if !self.vulkan().same_device(bound.vk_context()) {
            return Err(Error::WrongDevice {
                object: DeviceObject::Buffer,
                owner: DeviceOwner::WgpuDevice,
            });
        }
        self.check_wrappable(bound.vk_size(), bound.buffer().usage(), usage)
    }

    /// The usage and size rules of a wgpu buffer of `usage` over a `VkBuffer` of `size` bytes
    /// created with `have`.
    fn check_wrappable(
        &self,
        size: u64,
        have: vk::BufferUsageFlags,
        usage: ::wgpu::BufferUsages,
    ) -> Result<()> {
        check_usage(have, vk_buffer_usage(usage)?, usage)?;
        let max = self.device().limits().max_buffer_size;
        if size > max {
            return Err(WgpuError::BufferTooLarge { size, max }.into());
        }
        Ok(())
    }

    /// Wraps without checking.
    ///
    /// # Safety
    /// [`Self::validate_wrap`] must have accepted `bound` and `usage`.
    pub(crate) unsafe fn wrap_buffer_unchecked(
        &self,
        bound: Arc<BoundBuffer>,
        usage: ::wgpu::BufferUsages,
        label: Option<&str>,
    ) -> ::wgpu::Buffer {
        let raw = bound.vk_buffer();
        let size = bound.vk_size();
        let keep = bound;
        // SAFETY: `raw` stays alive until the callback runs (it holds `keep`, the buffer's
        // owner, which also holds the memory); wgpu-hal never destroys an externally owned
        // buffer, and never maps it (MAP_* usages are refused).
        let hal_buffer = unsafe {
            hal::vulkan::Buffer::from_raw_externally_owned(raw, Box::new(move || drop(keep)))
        };
        let desc = ::wgpu::BufferDescriptor {
            label,
            size,
            usage,
            mapped_at_creation: false,
        };
        // SAFETY: created on this device's VkDevice (checked) with every Vulkan usage `usage`
        // needs (checked), bound to memory (initialised), `size` bytes and never 0; wgpu-core
        // treats it as initialised (it never clears it).
        unsafe {
            self.device()
                .create_buffer_from_hal::<Vk>(hal_buffer, &desc)
        }
    }
}

fn check_usage(
    have: vk::BufferUsageFlags,
    needed: vk::BufferUsageFlags,
    usage: ::wgpu::BufferUsages,
) -> Result<()> {
    if have.contains(needed) {
        Ok(())
    } else {
        Err(WgpuError::MissingVulkanUsage {
            wgpu_usage: usage,
            needed,
            have,
        }
        .into())
    }
}

/// `len` elements of `T` in memory shared by CUDA and wgpu: one `VkBuffer` seen as a
/// `wgpu::Buffer` and as a [`SharedBuffer`] (CUDA pointer, cudarc copies and kernels).
///
/// Drop in any order: the wgpu buffer keeps the `VkBuffer` and its memory alive until wgpu
/// is done with it; the shared buffer keeps its CUDA mapping, which keeps the memory alive.
/// As with every shared buffer, the two APIs do not order their accesses by themselves: use
/// [`crate::wgpu::WgpuFramePacer`] (or a stream sync and a device poll) between them.
pub struct WgpuSharedBuffer<T> {
    /// The wgpu view, for bind groups, vertex buffers and copies.
    pub wgpu: ::wgpu::Buffer,
    /// The CUDA view (and the Vulkan buffer handle).
    pub shared: SharedBuffer<T>,
}

impl<T: bytemuck::Pod> WgpuSharedBuffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shared.len()
    }
    /// Whether it holds no elements (never true).
    pub fn is_empty(&self) -> bool {
        self.shared.is_empty()
    }
}

impl WgpuBridge {
    /// Creates a buffer of `len` elements in its own allocation (dedicated when Vulkan prefers
    /// it), shared by CUDA and wgpu, with the wgpu `usage` (plus copies, and a device address
    /// where the device has them, on the Vulkan side).
    pub fn create_buffer<T: bytemuck::Pod>(
        &self,
        len: usize,
        usage: ::wgpu::BufferUsages,
    ) -> Result<WgpuSharedBuffer<T>> {
        let vk_usage = vk_buffer_usage(usage)?;
        let shared = self
            .bridge()
            .create_buffer_with::<T>(len, vk_usage, Dedicated::Auto)?;
        let wgpu = self.wrap_shared(&shared, usage, None)?;
        Ok(WgpuSharedBuffer { wgpu, shared })
    }

    /// A `wgpu::Buffer` of `usage` over the same `VkBuffer` as `shared` (made by this bridge,
    /// e.g. in a [`crate::SharedAllocation`] at an offset): it keeps the buffer and memory
    /// alive as long as wgpu needs them, whenever `shared` is dropped.
    pub fn wrap_shared<T: bytemuck::Pod>(
        &self,
        shared: &SharedBuffer<T>,
        usage: ::wgpu::BufferUsages,
        label: Option<&str>,
    ) -> Result<::wgpu::Buffer> {
        let bound = shared.vulkan_buffer();
        self.wgpu().validate_wrap(bound, usage)?;
        // SAFETY: validated just above.
        Ok(unsafe {
            self.wgpu()
                .wrap_buffer_unchecked(bound.clone(), usage, label)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ::wgpu::BufferUsages as U;

    #[test]
    fn usages_map_as_wgpu_creates_them() {
        let v = vk_buffer_usage(U::STORAGE | U::VERTEX | U::COPY_SRC).unwrap();
        assert_eq!(
            v,
            vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::VERTEX_BUFFER
                | vk::BufferUsageFlags::TRANSFER_SRC
        );
        let indirect = vk_buffer_usage(U::INDIRECT).unwrap();
        assert!(indirect.contains(vk::BufferUsageFlags::STORAGE_BUFFER));
        assert!(matches!(
            vk_buffer_usage(U::empty()),
            Err(Error::Wgpu(WgpuError::EmptyBufferUsage))
        ));
        let e = vk_buffer_usage(U::MAP_READ | U::COPY_DST).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Wgpu(WgpuError::MappableUsage { usage })
                    if usage == U::MAP_READ | U::COPY_DST
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("map"), "{e}");
        assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
        let e = vk_buffer_usage(U::BLAS_INPUT).unwrap_err();
        assert!(matches!(
            e,
            Error::Wgpu(WgpuError::AccelerationStructureUsage { .. })
        ));
        assert_eq!(e.kind(), crate::ErrorKind::Unsupported);
    }
}
