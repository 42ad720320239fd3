//! What `CuvkPlugin` turns on at Bevy's `vkCreateDevice` (through `raw_vulkan_init`): the
//! choice is a pure function of what the physical device offers ([`plan`]), applied by the
//! callback ([`device_callback`]).

use std::ffi::CStr;

use cuvk::ash::{self, vk};
use cuvk::{MEMORY_EXTENSION, SEMAPHORE_EXTENSION};
use wgpu::hal;

/// The `buffer_device_address` extension name, which cuvk never pushes itself (see [`plan`]).
const BDA_EXTENSION: &CStr = ash::khr::buffer_device_address::NAME;
/// `VK_NVX_binary_import`: CUDA kernels recorded in Vulkan command buffers.
const BINARY_IMPORT: &CStr = ash::nvx::binary_import::NAME;
/// `VK_NVX_image_view_handle`: images reached from such kernels.
const IMAGE_VIEW_HANDLE: &CStr = ash::nvx::image_view_handle::NAME;

/// Marker put in Bevy's `AdditionalVulkanFeatures` when the callback ran (the device was
/// created with cuvk's choices).
pub(crate) struct CallbackRan;
/// Marker put in Bevy's `AdditionalVulkanFeatures` when the device has `bufferDeviceAddress`
/// enabled (by wgpu's own feature struct, by an earlier callback's, or by cuvk's).
pub(crate) struct BufferDeviceAddress;

/// What the physical device offers, and what earlier code already put in the request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Offer {
    /// The device is Vulkan 1.2 or newer (where `bufferDeviceAddress` is a core feature).
    pub vulkan_1_2: bool,
    /// The platform's external memory extension.
    pub memory: bool,
    /// The platform's external semaphore extension.
    pub semaphore: bool,
    /// The `bufferDeviceAddress` feature.
    pub buffer_device_address: bool,
    /// `VK_NVX_binary_import`.
    pub binary_import: bool,
    /// `VK_NVX_image_view_handle`.
    pub image_view_handle: bool,
}

/// Whether a `bufferDeviceAddress` feature struct is already in the request, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddressRequest {
    /// No struct that names the feature.
    Absent,
    /// wgpu will chain its own struct (its extension list has `VK_KHR_buffer_device_address`,
    /// for its ray-tracing features), with the feature on.
    Wgpu,
    /// An earlier callback chained a struct (a BDA or Vulkan 1.2 features struct) with this
    /// value: a second struct would be invalid, so cuvk takes it as it is.
    Chained(bool),
}

/// What to add to the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Device extensions to add (those not already in the list).
    pub extensions: Vec<&'static CStr>,
    /// Whether to chain a `bufferDeviceAddress` feature struct.
    pub chain_buffer_device_address: bool,
    /// Whether the device will have `bufferDeviceAddress` enabled.
    pub buffer_device_address: bool,
}

/// The extensions and features to add, given what is offered and already requested.
///
/// - the external memory and semaphore extensions wherever offered (wgpu-hal 29 already adds
///   the memory one; a missing one is reported at adoption, not here);
/// - `bufferDeviceAddress` through a feature struct, never through the extension name: with
///   `VK_KHR_buffer_device_address` in its list, wgpu-hal tells gpu-allocator to allocate
///   *all* its memory with device addresses (and chains a struct of its own). Where wgpu or an
///   earlier callback already chained one, it is left alone;
/// - the NVX extensions only where the device will have device addresses (and `inline` asks):
///   kernels inside Vulkan queues take buffers by address.
pub(crate) fn plan(
    offer: Offer,
    requested: &[&'static CStr],
    address: AddressRequest,
    inline: bool,
) -> Plan {
    let mut extensions = Vec::new();
    let mut add = |name: &'static CStr, offered: bool| {
        if offered && !requested.contains(&name) && !extensions.contains(&name) {
            extensions.push(name);
        }
    };
    add(MEMORY_EXTENSION, offer.memory);
    add(SEMAPHORE_EXTENSION, offer.semaphore);
    let (chain, address_on) = match address {
        AddressRequest::Wgpu => (false, true),
        AddressRequest::Chained(on) => (false, on),
        AddressRequest::Absent => {
            let on = offer.vulkan_1_2 && offer.buffer_device_address;
            (on, on)
        }
    };
    if inline && address_on && offer.binary_import {
        add(BINARY_IMPORT, true);
        if offer.image_view_handle {
            add(IMAGE_VIEW_HANDLE, true);
        }
    }
    Plan {
        extensions,
        chain_buffer_device_address: chain,
        buffer_device_address: address_on,
    }
}

/// What `adapter` offers (queried from its physical device).
pub(crate) fn offer_of(adapter: &hal::vulkan::Adapter) -> Offer {
    let caps = adapter.physical_device_capabilities();
    let vulkan_1_2 = caps.properties().api_version >= vk::API_VERSION_1_2;
    let buffer_device_address = vulkan_1_2 && {
        let instance = adapter.shared_instance().raw_instance();
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f12);
        // SAFETY: a valid Vulkan 1.2 physical device of this instance (checked above); the
        // chain is well formed and only written by the driver.
        unsafe { instance.get_physical_device_features2(adapter.raw_physical_device(), &mut f2) };
        f12.buffer_device_address == vk::TRUE
    };
    Offer {
        vulkan_1_2,
        memory: caps.supports_extension(MEMORY_EXTENSION),
        semaphore: caps.supports_extension(SEMAPHORE_EXTENSION),
        buffer_device_address,
        binary_import: caps.supports_extension(BINARY_IMPORT),
        image_view_handle: caps.supports_extension(IMAGE_VIEW_HANDLE),
    }
}

/// Whether the request already names `bufferDeviceAddress`: wgpu's extension list, or a
/// feature struct an earlier callback chained to `create_info`.
pub(crate) fn address_request(
    extensions: &[&'static CStr],
    create_info: &vk::DeviceCreateInfo<'_>,
) -> AddressRequest {
    if extensions.contains(&BDA_EXTENSION) {
        return AddressRequest::Wgpu;
    }
    let mut next = create_info.p_next.cast::<vk::BaseInStructure<'_>>();
    while !next.is_null() {
        // SAFETY: every pNext chain member starts with sType and pNext (the Vulkan rule for
        // extension structs); the chain was built by callbacks whose structs outlive
        // vkCreateDevice (the callback contract), so each pointer is valid here.
        let base = unsafe { &*next };
        match base.s_type {
            vk::StructureType::PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES => {
                // SAFETY: the sType says which struct this is.
                let s =
                    unsafe { &*next.cast::<vk::PhysicalDeviceBufferDeviceAddressFeatures<'_>>() };
                return AddressRequest::Chained(s.buffer_device_address == vk::TRUE);
            }
            vk::StructureType::PHYSICAL_DEVICE_VULKAN_1_2_FEATURES => {
                // SAFETY: the sType says which struct this is.
                let s = unsafe { &*next.cast::<vk::PhysicalDeviceVulkan12Features<'_>>() };
                return AddressRequest::Chained(s.buffer_device_address == vk::TRUE);
            }
            _ => next = base.p_next,
        }
    }
    AddressRequest::Absent
}

/// Applies [`plan`] to Bevy's device request: adds extensions, chains the feature struct (leaked:
/// one small struct per device Bevy creates, as the callback must outlive nothing), and records
/// what the device will have in Bevy's `AdditionalVulkanFeatures`.
pub(crate) fn apply(
    args: &mut hal::vulkan::CreateDeviceCallbackArgs<'_, '_, '_>,
    adapter: &hal::vulkan::Adapter,
    extra: &mut bevy::render::renderer::raw_vulkan_init::AdditionalVulkanFeatures,
    inline: bool,
) {
    let offer = offer_of(adapter);
    let address = address_request(args.extensions, args.create_info);
    let plan = plan(offer, args.extensions, address, inline);
    args.extensions.extend(plan.extensions.iter().copied());
    if plan.chain_buffer_device_address {
        // The create info borrows its pNext members for a lifetime the callback cannot name:
        // a leaked (static) struct is the one that satisfies every lifetime.
        let feature: &'static mut vk::PhysicalDeviceBufferDeviceAddressFeatures<'static> =
            Box::leak(Box::new(
                vk::PhysicalDeviceBufferDeviceAddressFeatures::default()
                    .buffer_device_address(true),
            ));
        *args.create_info = std::mem::take(args.create_info).push_next(feature);
    }
    if plan.buffer_device_address {
        extra.insert::<BufferDeviceAddress>();
    }
    extra.insert::<CallbackRan>();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> Offer {
        Offer {
            vulkan_1_2: true,
            memory: true,
            semaphore: true,
            buffer_device_address: true,
            binary_import: true,
            image_view_handle: true,
        }
    }

    #[test]
    fn nvidia_like_device_gets_everything_through_a_feature_struct() {
        let p = plan(full(), &[], AddressRequest::Absent, true);
        assert_eq!(
            p.extensions,
            vec![
                MEMORY_EXTENSION,
                SEMAPHORE_EXTENSION,
                BINARY_IMPORT,
                IMAGE_VIEW_HANDLE
            ]
        );
        assert!(p.chain_buffer_device_address && p.buffer_device_address);
        assert!(!p.extensions.contains(&BDA_EXTENSION));
    }

    #[test]
    fn wgpu_own_address_struct_is_not_doubled() {
        let p = plan(
            full(),
            &[BDA_EXTENSION, MEMORY_EXTENSION],
            AddressRequest::Wgpu,
            true,
        );
        assert!(!p.chain_buffer_device_address && p.buffer_device_address);
        assert!(
            !p.extensions.contains(&MEMORY_EXTENSION),
            "already in wgpu's list"
        );
        assert!(p.extensions.contains(&BINARY_IMPORT));
    }

    #[test]
    fn an_earlier_struct_with_the_feature_off_means_no_inline_kernels() {
        let p = plan(full(), &[], AddressRequest::Chained(false), true);
        assert!(!p.chain_buffer_device_address && !p.buffer_device_address);
        assert!(!p.extensions.contains(&BINARY_IMPORT));
        assert!(!p.extensions.contains(&IMAGE_VIEW_HANDLE));
    }

    #[test]
    fn lavapipe_like_device_gets_memory_only() {
        let offer = Offer {
            semaphore: false,
            binary_import: false,
            image_view_handle: false,
            ..full()
        };
        let p = plan(offer, &[], AddressRequest::Absent, true);
        assert_eq!(p.extensions, vec![MEMORY_EXTENSION]);
        assert!(p.chain_buffer_device_address);
    }

    #[test]
    fn inline_off_or_no_address_means_no_nvx() {
        let p = plan(full(), &[], AddressRequest::Absent, false);
        assert!(!p.extensions.contains(&BINARY_IMPORT));
        let offer = Offer {
            buffer_device_address: false,
            ..full()
        };
        let p = plan(offer, &[], AddressRequest::Absent, true);
        assert!(!p.extensions.contains(&BINARY_IMPORT) && !p.buffer_device_address);
    }

    #[test]
    fn chained_structs_are_found() {
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default().buffer_device_address(true);
        let info = vk::DeviceCreateInfo::default().push_next(&mut f12);
        assert_eq!(address_request(&[], &info), AddressRequest::Chained(true));
        let mut bda = vk::PhysicalDeviceBufferDeviceAddressFeatures::default();
        let mut other = vk::PhysicalDeviceMultiviewFeatures::default();
        let info = vk::DeviceCreateInfo::default()
            .push_next(&mut bda)
            .push_next(&mut other);
        assert_eq!(address_request(&[], &info), AddressRequest::Chained(false));
        assert_eq!(
            address_request(&[], &vk::DeviceCreateInfo::default()),
            AddressRequest::Absent
        );
        assert_eq!(
            address_request(&[BDA_EXTENSION], &vk::DeviceCreateInfo::default()),
            AddressRequest::Wgpu
        );
    }
}
