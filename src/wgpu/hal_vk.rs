//! What every wgpu-hal call of the integration names: the Vulkan API marker, and the refusal of
//! an object on another backend.

use ::wgpu::hal;

use crate::{Error, WgpuError, WgpuObject};

/// The wgpu-hal Vulkan API marker every `as_hal` call names.
pub(crate) type Vk = hal::api::Vulkan;

/// [`WgpuError::WrongBackend`] for `object`, an object of `device`.
pub(crate) fn wrong_backend(device: &::wgpu::Device, object: WgpuObject) -> Error {
    WgpuError::WrongBackend {
        object,
        backend: device.adapter_info().backend.to_str(),
    }
    .into()
}
