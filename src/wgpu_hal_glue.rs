//! Glue for any wgpu-hal version (macros: wgpu 29's and 30's types differ, their method and
//! field names do not), written once for `cuvk::wgpu` (wgpu 30) and `bevy_cuvk` (wgpu 29,
//! which Bevy 0.19 needs). Each expands where it is used, against that crate's wgpu; nothing
//! here depends on wgpu.

/// The [`ExistingVulkan`](crate::vulkan::ExistingVulkan) of a wgpu-hal Vulkan device
/// (`wgpu::hal::vulkan::Device`, any version): wgpu's instance, physical device and device,
/// the extensions wgpu-hal enabled, no queue (wgpu submits), the instance's API version capped
/// at `$max_api_version` (what that wgpu-hal calls), and `$buffer_device_address` as the
/// feature's state.
///
/// Expands to an `unsafe` call: use it inside an `unsafe` block whose `// SAFETY:` says the
/// handles are wgpu's live ones.
#[macro_export]
macro_rules! existing_vulkan_from_wgpu_hal {
    ($hal_device:expr, $max_api_version:expr, $buffer_device_address:expr) => {{
        let hal = $hal_device;
        let shared = hal.shared_instance();
        let mut existing = $crate::vulkan::ExistingVulkan::without_queue(
            shared.entry().clone(),
            shared.raw_instance().clone(),
            shared.instance_api_version().min($max_api_version),
            hal.raw_physical_device(),
            hal.raw_device().clone(),
            hal.queue_family_index(),
            hal.enabled_device_extensions(),
        );
        existing.buffer_device_address_enabled = $buffer_device_address;
        existing
    }};
}

/// The wgpu-hal texture uses wgpu-core derives for a texture of `$usage` (a
/// `$wgpu::TextureUsages`; wgpu-hal only records them): a `$wgpu::TextureUses`. `$wgpu` names
/// the wgpu crate at the call site.
#[macro_export]
macro_rules! wgpu_hal_texture_uses {
    ($wgpu:ident, $usage:expr) => {{
        use $wgpu::{TextureUsages as U, TextureUses as H};
        let usage: U = $usage;
        [
            (U::COPY_SRC, H::COPY_SRC),
            (U::COPY_DST, H::COPY_DST),
            (U::TEXTURE_BINDING, H::RESOURCE),
            (
                U::STORAGE_BINDING,
                H::STORAGE_READ_ONLY | H::STORAGE_WRITE_ONLY | H::STORAGE_READ_WRITE,
            ),
            (U::RENDER_ATTACHMENT, H::COLOR_TARGET),
        ]
        .iter()
        .filter(|(u, _)| usage.contains(*u))
        .fold(H::empty(), |a, (_, h)| a | *h)
    }};
}

/// The `$wgpu::hal::TextureDescriptor` of a texture cuvk wraps, from its wgpu descriptor
/// (`$desc`: a reference to any `wgpu::wgt::TextureDescriptor`): the same size, levels,
/// samples, dimension, format, the uses [`wgpu_hal_texture_uses!`] derives, no memory flags
/// and no view formats (cuvk's images are not `MUTABLE_FORMAT`).
#[macro_export]
macro_rules! wgpu_hal_texture_descriptor {
    ($wgpu:ident, $desc:expr) => {{
        let desc = $desc;
        $wgpu::hal::TextureDescriptor {
            label: desc.label,
            size: desc.size,
            mip_level_count: desc.mip_level_count,
            sample_count: desc.sample_count,
            dimension: desc.dimension,
            format: desc.format,
            usage: $crate::wgpu_hal_texture_uses!($wgpu, desc.usage),
            memory_flags: $wgpu::hal::MemoryFlags::empty(),
            view_formats: Vec::new(),
        }
    }};
}
