//! WebGPU's usage bits and the Vulkan usages they need: the one table for every wgpu version
//! cuvk's crates meet (wgpu 30 in `cuvk::wgpu`, wgpu 29 in `bevy_cuvk`, which Bevy 0.19
//! needs). wgpu's `BufferUsages` and `TextureUsages` carry the WebGPU specification's bit
//! values (`GPUBufferUsage`, `GPUTextureUsage`; the same in wgpu 29 and 30, tested in each
//! crate that converts), so the table takes raw bits (`usage.bits()`) and needs no wgpu.

use ash::vk;

/// `GPUBufferUsage` bits (and wgpu's acceleration-structure inputs), as `wgpu::BufferUsages`
/// carries them.
pub mod buffer {
    /// `MAP_READ`.
    pub const MAP_READ: u32 = 1 << 0;
    /// `MAP_WRITE`.
    pub const MAP_WRITE: u32 = 1 << 1;
    /// `COPY_SRC`.
    pub const COPY_SRC: u32 = 1 << 2;
    /// `COPY_DST`.
    pub const COPY_DST: u32 = 1 << 3;
    /// `INDEX`.
    pub const INDEX: u32 = 1 << 4;
    /// `VERTEX`.
    pub const VERTEX: u32 = 1 << 5;
    /// `UNIFORM`.
    pub const UNIFORM: u32 = 1 << 6;
    /// `STORAGE`.
    pub const STORAGE: u32 = 1 << 7;
    /// `INDIRECT`.
    pub const INDIRECT: u32 = 1 << 8;
    /// `QUERY_RESOLVE`.
    pub const QUERY_RESOLVE: u32 = 1 << 9;
    /// wgpu's `BLAS_INPUT` (no WebGPU counterpart).
    pub const BLAS_INPUT: u32 = 1 << 10;
    /// wgpu's `TLAS_INPUT` (no WebGPU counterpart).
    pub const TLAS_INPUT: u32 = 1 << 11;
}

/// `GPUTextureUsage` bits, as `wgpu::TextureUsages` carries them.
pub mod texture {
    /// `COPY_SRC`.
    pub const COPY_SRC: u32 = 1 << 0;
    /// `COPY_DST`.
    pub const COPY_DST: u32 = 1 << 1;
    /// `TEXTURE_BINDING`.
    pub const TEXTURE_BINDING: u32 = 1 << 2;
    /// `STORAGE_BINDING`.
    pub const STORAGE_BINDING: u32 = 1 << 3;
    /// `RENDER_ATTACHMENT`.
    pub const RENDER_ATTACHMENT: u32 = 1 << 4;
}

/// Every buffer usage bit by its name in wgpu (`BufferUsages::iter_names`): what each crate
/// that converts checks its wgpu version against.
pub const BUFFER_BITS: [(&str, u32); 12] = [
    ("MAP_READ", buffer::MAP_READ),
    ("MAP_WRITE", buffer::MAP_WRITE),
    ("COPY_SRC", buffer::COPY_SRC),
    ("COPY_DST", buffer::COPY_DST),
    ("INDEX", buffer::INDEX),
    ("VERTEX", buffer::VERTEX),
    ("UNIFORM", buffer::UNIFORM),
    ("STORAGE", buffer::STORAGE),
    ("INDIRECT", buffer::INDIRECT),
    ("QUERY_RESOLVE", buffer::QUERY_RESOLVE),
    ("BLAS_INPUT", buffer::BLAS_INPUT),
    ("TLAS_INPUT", buffer::TLAS_INPUT),
];

/// The WebGPU texture usage bits by their names in wgpu (`TextureUsages::iter_names`; wgpu's
/// own additions differ between versions: 29's `TRANSIENT` is 30's `TRANSIENT_ATTACHMENT`).
pub const TEXTURE_BITS: [(&str, u32); 5] = [
    ("COPY_SRC", texture::COPY_SRC),
    ("COPY_DST", texture::COPY_DST),
    ("TEXTURE_BINDING", texture::TEXTURE_BINDING),
    ("STORAGE_BINDING", texture::STORAGE_BINDING),
    ("RENDER_ATTACHMENT", texture::RENDER_ATTACHMENT),
];

/// Whether a wgpu version's usage flags, as `(name, bits)` pairs (`iter_names`), agree with
/// `table`: every name of the table present with the table's bits, and no other flag on a
/// bit the table uses.
pub fn same_bits<'a>(
    table: &[(&str, u32)],
    flags: impl IntoIterator<Item = (&'a str, u32)>,
) -> bool {
    let used = table.iter().fold(0, |a, (_, b)| a | b);
    let mut seen = 0;
    for (name, bits) in flags {
        match table.iter().find(|(n, _)| *n == name) {
            Some(&(_, expected)) if expected == bits => seen += 1,
            Some(_) => return false,
            None if bits & used != 0 => return false,
            None => {}
        }
    }
    seen == table.len()
}

/// Buffer usage bits and the Vulkan usage wgpu-core and wgpu-hal create such a buffer with
/// (`conv::map_buffer_usage`: `INDIRECT` and `QUERY_RESOLVE` buffers are also storage
/// buffers, which wgpu binds internally). Mapping and acceleration-structure inputs are not
/// here: memory cuvk shares cannot be either.
pub const BUFFER_USAGES: [(u32, vk::BufferUsageFlags); 8] = [
    (buffer::COPY_SRC, vk::BufferUsageFlags::TRANSFER_SRC),
    (buffer::COPY_DST, vk::BufferUsageFlags::TRANSFER_DST),
    (buffer::UNIFORM, vk::BufferUsageFlags::UNIFORM_BUFFER),
    (buffer::STORAGE, vk::BufferUsageFlags::STORAGE_BUFFER),
    (buffer::INDEX, vk::BufferUsageFlags::INDEX_BUFFER),
    (buffer::VERTEX, vk::BufferUsageFlags::VERTEX_BUFFER),
    (
        buffer::INDIRECT,
        vk::BufferUsageFlags::from_raw(
            vk::BufferUsageFlags::INDIRECT_BUFFER.as_raw()
                | vk::BufferUsageFlags::STORAGE_BUFFER.as_raw(),
        ),
    ),
    (
        buffer::QUERY_RESOLVE,
        vk::BufferUsageFlags::from_raw(
            vk::BufferUsageFlags::TRANSFER_DST.as_raw()
                | vk::BufferUsageFlags::STORAGE_BUFFER.as_raw(),
        ),
    ),
];

/// Texture usage bits and the Vulkan image usage each needs.
pub const TEXTURE_USAGES: [(u32, vk::ImageUsageFlags); 5] = [
    (texture::COPY_SRC, vk::ImageUsageFlags::TRANSFER_SRC),
    (texture::COPY_DST, vk::ImageUsageFlags::TRANSFER_DST),
    (texture::TEXTURE_BINDING, vk::ImageUsageFlags::SAMPLED),
    (texture::STORAGE_BINDING, vk::ImageUsageFlags::STORAGE),
    (
        texture::RENDER_ATTACHMENT,
        vk::ImageUsageFlags::COLOR_ATTACHMENT,
    ),
];

/// The Vulkan usage of a buffer used as `bits` ([`BUFFER_USAGES`]), or the bits the table
/// does not know (mapping, acceleration-structure inputs, bits of a later version).
pub fn vk_buffer_usage(bits: u32) -> Result<vk::BufferUsageFlags, u32> {
    let known = BUFFER_USAGES.iter().fold(0, |a, (b, _)| a | b);
    if bits & !known != 0 {
        return Err(bits & !known);
    }
    Ok(BUFFER_USAGES
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .fold(vk::BufferUsageFlags::empty(), |a, (_, v)| a | *v))
}

/// The texture usage bits of an image created with the Vulkan `usage`, or the Vulkan usages
/// with no WebGPU counterpart (input, depth-stencil, transient attachments...).
pub fn texture_usage_bits(usage: vk::ImageUsageFlags) -> Result<u32, vk::ImageUsageFlags> {
    let known = TEXTURE_USAGES
        .iter()
        .fold(vk::ImageUsageFlags::empty(), |a, (_, v)| a | *v);
    if !known.contains(usage) {
        return Err(usage & !known);
    }
    Ok(TEXTURE_USAGES
        .iter()
        .filter(|(_, v)| usage.contains(*v))
        .fold(0, |a, (b, _)| a | b))
}

/// The Vulkan usage an image needs for the texture usage `bits` (unknown bits add nothing).
pub fn vk_image_usage(bits: u32) -> vk::ImageUsageFlags {
    TEXTURE_USAGES
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .fold(vk::ImageUsageFlags::empty(), |a, (_, v)| a | *v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_usages_map_and_unknown_bits_are_returned() {
        assert_eq!(
            vk_buffer_usage(buffer::INDIRECT),
            Ok(vk::BufferUsageFlags::INDIRECT_BUFFER | vk::BufferUsageFlags::STORAGE_BUFFER)
        );
        assert_eq!(vk_buffer_usage(0), Ok(vk::BufferUsageFlags::empty()));
        assert_eq!(
            vk_buffer_usage(buffer::VERTEX | buffer::MAP_READ | buffer::TLAS_INPUT),
            Err(buffer::MAP_READ | buffer::TLAS_INPUT)
        );
    }

    #[test]
    fn texture_usages_round_trip_and_unknown_usages_are_returned() {
        let all = vk_image_usage(0x1f);
        assert_eq!(texture_usage_bits(all), Ok(0x1f));
        assert_eq!(
            texture_usage_bits(
                vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::INPUT_ATTACHMENT
            ),
            Err(vk::ImageUsageFlags::INPUT_ATTACHMENT)
        );
    }
}
