//! Images shared with CUDA (a mipmapped array, surfaces per level) and the CUDA texture
//! objects over them.

use cuvk::ash::vk::{self, Handle};
use cuvk::cuda::{AddressMode, FilterMode, SurfaceObject, TextureObject};
use cuvk::vulkan::{BoundImage, ImageOptions, SHARED_LAYOUT};
use cuvk::{
    Dedicated, Error, ImageDesc, ImageKind, SharedImage, TextureLevels, TextureOptions, TextureRead,
};

use crate::bridge::{bridge_of, CuvkBridge};
use crate::error::{desc_in, desc_out, fail, guard, out, CResult, CuvkResult};
use crate::handle::{insert, remove, with, HandleObject, Kind};

/// Image creation flag: a cube map (`VK_IMAGE_CREATE_CUBE_COMPATIBLE_BIT`: 2D, square, 6
/// layers).
pub const CUVK_IMAGE_CUBE: u32 = 1;

/// Image creation flag: always give the image its own (dedicated) allocation.
pub const CUVK_IMAGE_DEDICATED: u32 = 2;

/// `CuvkTextureDesc::level` value for a texture over the whole mip chain.
pub const CUVK_TEXTURE_ALL_LEVELS: u32 = u32::MAX;

/// A Vulkan image shared with CUDA (a mipmapped array, surfaces per level).
pub type CuvkImage = u64;

/// A CUDA texture object over a shared image.
pub type CuvkTexture = u64;

/// What image to create (the fields of a `VkImageCreateInfo` that matter; tiling is OPTIMAL,
/// memory exportable and device-local).
#[repr(C)]
pub struct CuvkImageDesc {
    /// `sizeof(CuvkImageDesc)`.
    pub struct_size: u32,
    /// `VkImageType`: `VK_IMAGE_TYPE_2D` (plain, array, cube) or `VK_IMAGE_TYPE_3D`.
    pub image_type: u32,
    /// `VkFormat` (one of the formats in cuvk's table; others are refused with the list).
    pub format: u32,
    /// Width in texels.
    pub width: u32,
    /// Height in texels.
    pub height: u32,
    /// Depth in texels: 1 unless 3D.
    pub depth: u32,
    /// Array layers: 1; more for a 2D array; 6 for a cube; 1 for 3D.
    pub array_layers: u32,
    /// Mip levels (1 to the full chain).
    pub mip_levels: u32,
    /// `VkImageUsageFlags` (`STORAGE` for CUDA surfaces).
    pub usage: u32,
    /// `CUVK_IMAGE_CUBE`, `CUVK_IMAGE_DEDICATED`.
    pub flags: u32,
}

/// What an image is to each API.
#[repr(C)]
pub struct CuvkImageInfo {
    /// `sizeof(CuvkImageInfo)`, set by the caller.
    pub struct_size: u32,
    /// The `VkImage` handle.
    pub vk_image: u64,
    /// The layout the image is in between uses: `VK_IMAGE_LAYOUT_GENERAL`.
    pub vk_layout: u32,
    /// Non-zero: between uses the image is owned by `VK_QUEUE_FAMILY_EXTERNAL` (always, as
    /// images are created exportable).
    pub external: u32,
    /// The `CUmipmappedArray` (0 on a Vulkan-only bridge).
    pub cuda_mipmapped_array: u64,
    /// Its `CUarray_format` (0 on a Vulkan-only bridge).
    pub cuda_format: u32,
    /// Its channel count (0 on a Vulkan-only bridge).
    pub cuda_channels: u32,
    /// Its `CUDA_ARRAY3D_*` flags.
    pub cuda_flags: u32,
}

/// How a texture samples.
#[repr(C)]
pub struct CuvkTextureDesc {
    /// `sizeof(CuvkTextureDesc)`.
    pub struct_size: u32,
    /// The mip level read, or `CUVK_TEXTURE_ALL_LEVELS` (needs normalized coordinates).
    pub level: u32,
    /// `CUaddress_mode`: 0 wrap, 1 clamp, 2 mirror, 3 border (wrap and mirror need
    /// normalized coordinates).
    pub address_mode: u32,
    /// `CUfilter_mode`: 0 point, 1 linear (float reads only); also between levels.
    pub filter: u32,
    /// Non-zero: coordinates in [0, 1).
    pub normalized_coordinates: u32,
    /// Non-zero: a UNORM/SNORM format reads its stored integers instead of normalized floats.
    pub raw_integers: u32,
    /// The colour the border address mode returns.
    pub border_color: [f32; 4],
}

enum CImageKind {
    Shared(SharedImage),
    VulkanOnly(BoundImage),
}

/// An image and the CUDA surfaces made for its levels (one slot per level).
pub(crate) struct CImage {
    // Surfaces go first (field order); each keeps the CUDA array alive anyway.
    surfaces: Vec<Option<SurfaceObject>>,
    image: CImageKind,
}

/// The image description `d` gives, checked for what only the C struct can get wrong (unknown
/// flags, a 3D image with layers, a cube that is not 6 layers).
fn image_desc(d: &CuvkImageDesc) -> CResult<ImageDesc> {
    let known = CUVK_IMAGE_CUBE | CUVK_IMAGE_DEDICATED;
    if d.flags & !known != 0 {
        return Err(Error::UnknownImageFlags {
            flags: d.flags,
            known,
        }
        .into());
    }
    let kind = ImageKind::from_vulkan(
        vk::ImageType::from_raw(d.image_type as i32),
        d.depth,
        d.array_layers,
        d.flags & CUVK_IMAGE_CUBE != 0,
    )
    .map_err(Error::from)?;
    Ok(ImageDesc {
        kind,
        format: vk::Format::from_raw(d.format as i32),
        extent: vk::Extent2D {
            width: d.width,
            height: d.height,
        },
        mip_levels: d.mip_levels,
        usage: vk::ImageUsageFlags::from_raw(d.usage),
        dedicated: if d.flags & CUVK_IMAGE_DEDICATED != 0 {
            Dedicated::Always
        } else {
            Dedicated::Auto
        },
    })
}

/// Creates an image as `desc` says (OPTIMAL tiling, exportable device-local memory), shared
/// with CUDA unless the bridge is Vulkan-only. Every check (format in the table, shape, the
/// device's support and limits) is made before anything is created. The new image is in
/// `VK_IMAGE_LAYOUT_GENERAL`, owned by `VK_QUEUE_FAMILY_EXTERNAL` (see the protocol above).
///
/// # Safety
/// `desc` must point to a filled `CuvkImageDesc`; `out_image` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_image_create(
    bridge: CuvkBridge,
    desc: *const CuvkImageDesc,
    out_image: *mut CuvkImage,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let out_image = unsafe { out(out_image, "out_image") }?;
        // SAFETY: the caller passes a readable descriptor or null (checked).
        let d = unsafe { desc_in(desc, "desc") }?;
        let b = bridge_of(bridge)?;
        let desc = image_desc(d)?;
        let image = match &b.cuda {
            Some(bridge) => CImageKind::Shared(bridge.create_image(&desc)?),
            None => {
                SharedImage::validate_desc(&b.vk, &desc)?;
                CImageKind::VulkanOnly(BoundImage::new(&b.vk, &desc, ImageOptions::EXPORT)?)
            }
        };
        let surfaces = (0..desc.mip_levels).map(|_| None).collect();
        *out_image = insert(CImage { surfaces, image });
        Ok(())
    })
}

fn with_image<T>(handle: CuvkImage, f: impl FnOnce(&mut CImage) -> CResult<T>) -> CResult<T> {
    with(handle, f)
}

impl HandleObject for CImage {
    const KIND: Kind = Kind::Image;
}

impl HandleObject for TextureObject {
    const KIND: Kind = Kind::Texture;
}

fn shared(image: &CImage) -> CResult<&SharedImage> {
    match &image.image {
        CImageKind::Shared(s) => Ok(s),
        CImageKind::VulkanOnly(_) => fail(
            CuvkResult::CuvkErrorUnsupported,
            "the bridge is Vulkan-only: the image has no CUDA side",
        ),
    }
}

/// Fills `info` (whose `struct_size` the caller sets) with the image's handles.
///
/// # Safety
/// `info` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_image_info(image: CuvkImage, info: *mut CuvkImageInfo) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let info = unsafe { desc_out(info, "info") }?;
        with_image(image, |i| {
            info.vk_layout = SHARED_LAYOUT.as_raw() as u32;
            info.external = 1;
            match &i.image {
                CImageKind::Shared(s) => {
                    let d = s.cuda_desc();
                    info.vk_image = s.vk_image().as_raw();
                    info.cuda_mipmapped_array = s.mipmapped_array().raw() as u64;
                    info.cuda_format = d.format as u32;
                    info.cuda_channels = d.channels;
                    info.cuda_flags = d.flags.0;
                }
                CImageKind::VulkanOnly(v) => {
                    info.vk_image = v.handle().as_raw();
                    info.cuda_mipmapped_array = 0;
                    info.cuda_format = 0;
                    info.cuda_channels = 0;
                    info.cuda_flags = 0;
                }
            }
            Ok(())
        })
    })
}

/// The `CUarray` of mip level `level` (owned by the image: valid until it is destroyed).
///
/// # Safety
/// `out_array` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_image_cuda_array(
    image: CuvkImage,
    level: u32,
    out_array: *mut u64,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let o = unsafe { out(out_array, "out_array") }?;
        with_image(image, |i| {
            *o = shared(i)?.level(level)?.raw() as u64;
            Ok(())
        })
    })
}

/// The `CUsurfObject` of mip level `level`, for kernel loads and stores (x in bytes). Made
/// once per level and owned by the image (destroyed with it). The image needs `STORAGE` usage.
///
/// # Safety
/// `out_surface` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_image_surface(
    image: CuvkImage,
    level: u32,
    out_surface: *mut u64,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let o = unsafe { out(out_surface, "out_surface") }?;
        with_image(image, |i| {
            let s = shared(i)?;
            if let Some(Some(surface)) = i.surfaces.get(level as usize) {
                *o = surface.raw();
                return Ok(());
            }
            let surface = s.surface(level)?; // checks STORAGE and the level
            *o = surface.raw();
            if let Some(slot) = i.surfaces.get_mut(level as usize) {
                *slot = Some(surface);
            }
            Ok(())
        })
    })
}

/// Creates a CUDA texture object over the image as `desc` says; `out_tex_object` receives the
/// `CUtexObject` for kernels. Reads follow the format (UNORM/SNORM normalized floats, SFLOAT
/// floats, UINT/SINT integers) unless `raw_integers`. The texture keeps the image's CUDA
/// array alive: it stays valid after `cuvk_image_destroy`, until `cuvk_texture_destroy`.
///
/// # Safety
/// `desc` must point to a filled `CuvkTextureDesc`; the out pointers must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_texture_create(
    image: CuvkImage,
    desc: *const CuvkTextureDesc,
    out_texture: *mut CuvkTexture,
    out_tex_object: *mut u64,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes writable pointers or null (checked).
        let out_texture = unsafe { out(out_texture, "out_texture") }?;
        // SAFETY: as above.
        let out_tex_object = unsafe { out(out_tex_object, "out_tex_object") }?;
        // SAFETY: the caller passes a readable descriptor or null (checked).
        let d = unsafe { desc_in(desc, "desc") }?;
        let address_mode = match d.address_mode {
            0 => AddressMode::Wrap,
            1 => AddressMode::Clamp,
            2 => AddressMode::Mirror,
            3 => AddressMode::Border,
            mode => return Err(Error::UnknownAddressMode { mode }.into()),
        };
        let filter = match d.filter {
            0 => FilterMode::Point,
            1 => FilterMode::Linear,
            mode => return Err(Error::UnknownFilterMode { mode }.into()),
        };
        let options = TextureOptions {
            address_mode,
            filter,
            normalized_coordinates: d.normalized_coordinates != 0,
            levels: if d.level == CUVK_TEXTURE_ALL_LEVELS {
                TextureLevels::All { filter }
            } else {
                TextureLevels::One(d.level)
            },
            read: if d.raw_integers != 0 {
                TextureRead::RawIntegers
            } else {
                TextureRead::Values
            },
            border_color: d.border_color,
        };
        let texture = with_image(image, |i| Ok(shared(i)?.texture(&options)?))?;
        *out_tex_object = texture.raw();
        *out_texture = insert(texture);
        Ok(())
    })
}

/// The texture's `CUtexObject` (the value `cuvk_texture_create` returned).
///
/// # Safety
/// `out_tex_object` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuvk_texture_object(
    texture: CuvkTexture,
    out_tex_object: *mut u64,
) -> CuvkResult {
    guard(|| {
        // SAFETY: the caller passes a writable pointer or null (checked).
        let o = unsafe { out(out_tex_object, "out_tex_object") }?;
        with(texture, |t: &mut TextureObject| {
            *o = t.raw();
            Ok(())
        })
    })
}

/// Destroys a texture (the GPU must be done with it).
#[no_mangle]
pub extern "C" fn cuvk_texture_destroy(texture: CuvkTexture) -> CuvkResult {
    guard(|| remove::<TextureObject>(texture))
}

/// Destroys an image and its surfaces (the GPU must be done with them). Textures made from
/// it stay valid until they are destroyed.
#[no_mangle]
pub extern "C" fn cuvk_image_destroy(image: CuvkImage) -> CuvkResult {
    guard(|| remove::<CImage>(image))
}

crate::error::c_structs!(CuvkImageDesc, CuvkImageInfo, CuvkTextureDesc);
