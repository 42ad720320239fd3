//! CUDA arrays on imported memory: the mipmapped array an OPTIMAL-tiled image becomes
//! (`cuExternalMemoryGetMappedMipmappedArray`), its per-level arrays
//! (`cuMipmappedArrayGetLevel`), surface objects for kernel loads and stores
//! (`cuSurfObjectCreate`) and texture objects for sampled reads (`cuTexObjectCreate`).
//!
//! Ownership by construction: a [`SurfaceObject`] or [`TextureObject`] holds its
//! [`ArrayLevel`] / [`MipmappedArray`]; an [`ArrayLevel`] holds its [`MipmappedArray`]; a
//! [`MipmappedArray`] holds the [`ImportedMemory`], which holds the exporter's memory. So
//! objects are destroyed before the array, the array (`cuMipmappedArrayDestroy`) before the
//! import, the import before the memory — whatever order the caller drops them in.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaStream};

use crate::cuda::external_memory::destroy_result;
use crate::cuda::ImportedMemory;
use crate::error::MemoryError;
use crate::error::{CudaResultExt, Error, Result};
use crate::rules::image_format::{full_mip_chain, ArrayDesc, ArrayFlags, ImageError, TextureRule};
use crate::rules::layout;

/// The raw `CUDA_ARRAY3D_DESCRIPTOR` of `desc`.
fn to_sys(desc: &ArrayDesc) -> Result<sys::CUDA_ARRAY3D_DESCRIPTOR> {
    let size = |v: u64| {
        usize::try_from(v).map_err(|_| Error::from(MemoryError::HostSizeOverflow { bytes: v }))
    };
    Ok(sys::CUDA_ARRAY3D_DESCRIPTOR {
        Width: size(desc.width)?,
        Height: size(desc.height)?,
        Depth: size(desc.depth)?,
        Format: desc.format,
        NumChannels: desc.channels,
        Flags: desc.flags.0,
    })
}

/// Whether `desc` counts layers in `depth` (layered and cube arrays).
fn is_layered(desc: &ArrayDesc) -> bool {
    desc.flags.contains(ArrayFlags::LAYERED) || desc.flags.contains(ArrayFlags::CUBEMAP)
}

/// Bytes per channel of a CUDA array format in the image format table.
fn channel_bytes(format: sys::CUarray_format) -> u64 {
    use sys::CUarray_format as F;
    match format {
        F::CU_AD_FORMAT_UNSIGNED_INT8 | F::CU_AD_FORMAT_SIGNED_INT8 => 1,
        F::CU_AD_FORMAT_UNSIGNED_INT16 | F::CU_AD_FORMAT_SIGNED_INT16 | F::CU_AD_FORMAT_HALF => 2,
        _ => 4,
    }
}

impl ImportedMemory {
    /// Maps a mipmapped array of `levels` levels described by `desc` at `offset` of the
    /// imported memory (`cuExternalMemoryGetMappedMipmappedArray`). It keeps the import alive.
    /// Checked first: an extent of at least 1×1, 1 ≤ `levels` ≤ the full chain, `offset`
    /// inside the import, and offset 0 in a dedicated import.
    ///
    /// # Safety
    /// `offset`, `desc` and `levels` must describe an OPTIMAL-tiled image the exporting API
    /// bound at `offset` of this memory: the same format, channels, extent and levels, with
    /// the flags its type and usage need (derived from the image, checked against the format table). CUDA
    /// cannot check the layout it is told; a wrong description reads and writes wrong texels.
    pub unsafe fn map_mipmapped_array(
        self: &Arc<Self>,
        offset: u64,
        desc: &ArrayDesc,
        levels: u32,
    ) -> Result<Arc<MipmappedArray>> {
        let layered = is_layered(desc);
        let depth = if layered { 1 } else { desc.depth.max(1) };
        let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        if desc.width == 0 || desc.height == 0 || (layered && desc.depth == 0) {
            return Err(ImageError::ZeroExtent {
                width: clamp(desc.width),
                height: clamp(desc.height),
                depth: clamp(depth),
                layers: if layered { clamp(desc.depth) } else { 1 },
            }
            .into());
        }
        let max = full_mip_chain(clamp(desc.width), clamp(desc.height), clamp(depth));
        if levels == 0 || levels > max {
            return Err(ImageError::MipLevels {
                requested: levels,
                max,
                width: clamp(desc.width),
                height: clamp(desc.height),
                depth: clamp(depth),
            }
            .into());
        }
        layout::check_range(offset, 1, "imported memory", self.size())?;
        if self.is_dedicated() && offset != 0 {
            return Err(layout::LayoutError::DedicatedOffset { offset }.into());
        }
        let raw = sys::CUDA_EXTERNAL_MEMORY_MIPMAPPED_ARRAY_DESC {
            offset,
            arrayDesc: to_sys(desc)?,
            numLevels: levels,
            reserved: [0; 16],
        };
        self.context().bind_to_thread().cuda("cuCtxSetCurrent")?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: a live import; the descriptor is fully initialised and lives across the
        // call; the caller vouches that it describes the image at `offset`.
        unsafe { sys::cuExternalMemoryGetMappedMipmappedArray(&mut handle, self.raw(), &raw) }
            .result()
            .cuda("cuExternalMemoryGetMappedMipmappedArray")?;
        Ok(Arc::new(MipmappedArray {
            memory: self.clone(),
            handle,
            desc: *desc,
            levels,
        }))
    }
}

/// A CUDA mipmapped array mapped onto imported memory, destroyed with
/// `cuMipmappedArrayDestroy` when the last level, surface and texture of it are gone.
pub struct MipmappedArray {
    memory: Arc<ImportedMemory>,
    handle: sys::CUmipmappedArray,
    desc: ArrayDesc,
    levels: u32,
}

// SAFETY: the handle is an opaque driver handle usable from any thread once the context is
// bound (every method binds it); nothing here is mutated after creation.
unsafe impl Send for MipmappedArray {}
// SAFETY: as for Send.
unsafe impl Sync for MipmappedArray {}

impl std::fmt::Debug for MipmappedArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MipmappedArray")
            .field("desc", &self.desc)
            .field("levels", &self.levels)
            .finish_non_exhaustive()
    }
}

impl MipmappedArray {
    /// The raw handle (valid while `self` lives).
    pub fn raw(&self) -> sys::CUmipmappedArray {
        self.handle
    }
    /// The descriptor of level 0 it was mapped with.
    pub fn desc(&self) -> &ArrayDesc {
        &self.desc
    }
    /// Number of mip levels.
    pub fn levels(&self) -> u32 {
        self.levels
    }
    /// The import it lives in.
    pub fn memory(&self) -> &Arc<ImportedMemory> {
        &self.memory
    }
    /// The CUDA context.
    pub fn context(&self) -> &Arc<CudaContext> {
        self.memory.context()
    }

    /// Width, height and `Depth` of level `level` as CUDA counts them: width and height halved
    /// per level (at least 1); depth halved for 3D arrays, 0 for 2D, the layer count for
    /// layered and cube arrays.
    pub fn level_extent(&self, level: u32) -> (u64, u64, u64) {
        let shrink = |v: u64| v.checked_shr(level).unwrap_or(0).max(1);
        let depth = if is_layered(&self.desc) || self.desc.depth == 0 {
            self.desc.depth
        } else {
            shrink(self.desc.depth)
        };
        (shrink(self.desc.width), shrink(self.desc.height), depth)
    }

    /// The array of mip level `level` (`cuMipmappedArrayGetLevel`); it keeps `self` alive.
    pub fn level(self: &Arc<Self>, level: u32) -> Result<ArrayLevel> {
        if level >= self.levels {
            return Err(ImageError::LevelOutOfRange {
                level,
                levels: self.levels,
            }
            .into());
        }
        self.context().bind_to_thread().cuda("cuCtxSetCurrent")?;
        let mut array = std::ptr::null_mut();
        // SAFETY: a live mipmapped array; the level is in range (checked).
        unsafe { sys::cuMipmappedArrayGetLevel(&mut array, self.handle, level) }
            .result()
            .cuda("cuMipmappedArrayGetLevel")?;
        let (width, height, depth) = self.level_extent(level);
        Ok(ArrayLevel {
            parent: self.clone(),
            array,
            level,
            width,
            height,
            depth,
        })
    }
}

impl Drop for MipmappedArray {
    fn drop(&mut self) {
        // Every level, surface and texture holds an Arc to us, so none is alive now; the
        // import (a field) is released after this.
        let ctx = self.memory.context();
        ctx.record_err(ctx.bind_to_thread());
        // SAFETY: the handle came from a successful mapping and is destroyed once, here.
        let destroyed = unsafe { sys::cuMipmappedArrayDestroy(self.handle) }.result();
        destroy_result(ctx, "cuMipmappedArrayDestroy", destroyed);
    }
}

/// One mip level of a [`MipmappedArray`] (owned by it: never destroyed on its own).
#[derive(Clone)]
pub struct ArrayLevel {
    parent: Arc<MipmappedArray>,
    array: sys::CUarray,
    level: u32,
    width: u64,
    height: u64,
    depth: u64,
}

// SAFETY: the CUarray is an opaque handle owned by the parent, usable from any thread once the
// context is bound (every method binds it).
unsafe impl Send for ArrayLevel {}
// SAFETY: as for Send.
unsafe impl Sync for ArrayLevel {}

impl std::fmt::Debug for ArrayLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrayLevel")
            .field("level", &self.level)
            .field("extent", &(self.width, self.height, self.depth))
            .finish_non_exhaustive()
    }
}

impl ArrayLevel {
    /// The raw handle (valid while `self` lives).
    pub fn raw(&self) -> sys::CUarray {
        self.array
    }
    /// The mip level.
    pub fn level(&self) -> u32 {
        self.level
    }
    /// Width, height and `Depth` as CUDA counts them ([`MipmappedArray::level_extent`]).
    pub fn extent(&self) -> (u64, u64, u64) {
        (self.width, self.height, self.depth)
    }
    /// The mipmapped array it belongs to.
    pub fn parent(&self) -> &Arc<MipmappedArray> {
        &self.parent
    }
    /// Bytes per texel.
    pub fn texel_bytes(&self) -> u64 {
        let d = self.parent.desc;
        u64::from(d.channels) * channel_bytes(d.format)
    }
    /// Bytes of the whole level (every layer or slice), tightly packed: what the host copies
    /// move.
    pub fn byte_size(&self) -> u64 {
        self.width * self.height * self.depth.max(1) * self.texel_bytes()
    }

    /// A surface object for kernel loads and stores (`surf2Dwrite`, `surf2DLayeredread`, ...,
    /// x in bytes). The array must have been mapped with `CUDA_ARRAY3D_SURFACE_LDST`.
    pub fn surface(&self) -> Result<SurfaceObject> {
        if !self.parent.desc.flags.contains(ArrayFlags::SURFACE_LDST) {
            return Err(ImageError::NoSurfaceFlag.into());
        }
        // SAFETY: checked just above.
        unsafe { self.surface_unchecked() }
    }

    /// [`Self::surface`] without the flag check.
    ///
    /// # Safety
    /// The array must have been mapped with `CUDA_ARRAY3D_SURFACE_LDST`.
    pub(crate) unsafe fn surface_unchecked(&self) -> Result<SurfaceObject> {
        let mut res = zeroed_resource_desc();
        res.resType = sys::CUresourcetype::CU_RESOURCE_TYPE_ARRAY;
        res.res.array =
            sys::CUDA_RESOURCE_DESC_st__bindgen_ty_1__bindgen_ty_1 { hArray: self.array };
        self.parent
            .context()
            .bind_to_thread()
            .cuda("cuCtxSetCurrent")?;
        let mut handle = 0;
        // SAFETY: a live level array with surface load/store (caller); the descriptor lives
        // across the call.
        unsafe { sys::cuSurfObjectCreate(&mut handle, &res) }
            .result()
            .cuda("cuSurfObjectCreate")?;
        Ok(SurfaceObject {
            level: self.clone(),
            handle,
        })
    }

    /// A texture object reading this level (`tex2D`, `tex2DLayered`, `tex3D`,
    /// `texCubemap`, ...), checked against [`TextureDesc::validate`].
    pub fn texture(&self, desc: &TextureDesc) -> Result<TextureObject> {
        desc.validate(self.parent.desc.format, false)?;
        // SAFETY: validated just above.
        unsafe { TextureObject::create(TextureSource::Level(self.clone()), desc) }
    }

    fn check_host_size(&self, given: usize) -> Result<()> {
        let expected = self.byte_size();
        if given as u64 != expected {
            return Err(ImageError::HostSize {
                expected,
                given: given as u64,
            }
            .into());
        }
        Ok(())
    }

    /// The `CUDA_MEMCPY3D` of the whole level to or from tightly packed host memory.
    fn host_copy(&self, host: *mut u8, to_host: bool) -> sys::CUDA_MEMCPY3D {
        let pitch = (self.width * self.texel_bytes()) as usize;
        let mut c = zeroed_memcpy3d();
        if to_host {
            c.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_ARRAY;
            c.srcArray = self.array;
            c.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_HOST;
            c.dstHost = host.cast();
            c.dstPitch = pitch;
            c.dstHeight = self.height as usize;
        } else {
            c.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_HOST;
            c.srcHost = host.cast_const().cast();
            c.srcPitch = pitch;
            c.srcHeight = self.height as usize;
            c.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_ARRAY;
            c.dstArray = self.array;
        }
        c.WidthInBytes = pitch;
        c.Height = self.height as usize;
        c.Depth = self.depth.max(1) as usize;
        c
    }

    /// Copies the whole level (every layer or slice, in order, tightly packed) into `dst`
    /// on `stream` (`cuMemcpy3DAsync`), and synchronises the stream. `dst` must be exactly
    /// [`Self::byte_size`] bytes.
    pub fn copy_to_host(&self, stream: &CudaStream, dst: &mut [u8]) -> Result<()> {
        self.check_host_size(dst.len())?;
        let copy = self.host_copy(dst.as_mut_ptr(), true);
        // SAFETY: `dst` has exactly the level's bytes (checked) and outlives the call, which
        // synchronises the stream before returning.
        unsafe { self.run_copy(stream, &copy) }
    }

    /// Copies `src` (every layer or slice, in order, tightly packed) into the whole level on
    /// `stream`, and synchronises the stream. `src` must be exactly [`Self::byte_size`] bytes.
    pub fn copy_from_host(&self, stream: &CudaStream, src: &[u8]) -> Result<()> {
        self.check_host_size(src.len())?;
        let copy = self.host_copy(src.as_ptr().cast_mut(), false);
        // SAFETY: as copy_to_host; the host side is only read.
        unsafe { self.run_copy(stream, &copy) }
    }

    /// Runs a copy and waits for it.
    ///
    /// # Safety
    /// The copy's host pointer must be valid for its whole extent until this returns.
    unsafe fn run_copy(&self, stream: &CudaStream, copy: &sys::CUDA_MEMCPY3D) -> Result<()> {
        if !Arc::ptr_eq(stream.context(), self.parent.context()) {
            return Err(Error::WrongDevice {
                object: crate::DeviceObject::Stream,
                owner: crate::DeviceOwner::CudaContext,
            });
        }
        self.parent
            .context()
            .bind_to_thread()
            .cuda("cuCtxSetCurrent")?;
        // SAFETY: a live level array of exactly the copy's extent; host memory as the caller
        // promised.
        unsafe { sys::cuMemcpy3DAsync_v2(copy, stream.cu_stream()) }
            .result()
            .cuda("cuMemcpy3DAsync")?;
        stream.synchronize().cuda("cuStreamSynchronize")
    }
}

/// A CUDA surface object over one [`ArrayLevel`], destroyed with `cuSurfObjectDestroy`; it
/// keeps the level (and so the array and the memory) alive.
pub struct SurfaceObject {
    level: ArrayLevel,
    handle: sys::CUsurfObject,
}

impl std::fmt::Debug for SurfaceObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SurfaceObject")
            .field("handle", &self.handle)
            .field("level", &self.level)
            .finish()
    }
}

impl SurfaceObject {
    /// The `CUsurfObject` (`cudaSurfaceObject_t`), valid while `self` lives.
    pub fn raw(&self) -> sys::CUsurfObject {
        self.handle
    }
    /// The handle by reference, for `launch_builder(..).arg(surface.kernel_arg())`.
    pub fn kernel_arg(&self) -> &sys::CUsurfObject {
        &self.handle
    }
    /// The level it accesses.
    pub fn level(&self) -> &ArrayLevel {
        &self.level
    }
}

impl Drop for SurfaceObject {
    fn drop(&mut self) {
        let ctx = self.level.parent.context();
        ctx.record_err(ctx.bind_to_thread());
        // SAFETY: created by cuSurfObjectCreate, destroyed once, before its array (we hold it).
        let destroyed = unsafe { sys::cuSurfObjectDestroy(self.handle) }.result();
        destroy_result(ctx, "cuSurfObjectDestroy", destroyed);
    }
}

/// How texture coordinates outside [0, 1) (or [0, size)) are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AddressMode {
    /// Repeat (normalized coordinates only).
    Wrap,
    /// Clamp to the edge texel.
    #[default]
    Clamp,
    /// Mirror (normalized coordinates only).
    Mirror,
    /// Return the border colour.
    Border,
}

impl AddressMode {
    fn raw(self) -> sys::CUaddress_mode {
        use sys::CUaddress_mode as M;
        match self {
            AddressMode::Wrap => M::CU_TR_ADDRESS_MODE_WRAP,
            AddressMode::Clamp => M::CU_TR_ADDRESS_MODE_CLAMP,
            AddressMode::Mirror => M::CU_TR_ADDRESS_MODE_MIRROR,
            AddressMode::Border => M::CU_TR_ADDRESS_MODE_BORDER,
        }
    }
}

/// Texel filtering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FilterMode {
    /// Nearest texel.
    #[default]
    Point,
    /// Linear interpolation (float reads only).
    Linear,
}

impl FilterMode {
    fn raw(self) -> sys::CUfilter_mode {
        match self {
            FilterMode::Point => sys::CUfilter_mode::CU_TR_FILTER_MODE_POINT,
            FilterMode::Linear => sys::CUfilter_mode::CU_TR_FILTER_MODE_LINEAR,
        }
    }
}

/// A `CUDA_TEXTURE_DESC` in the terms that matter here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TextureDesc {
    /// Addressing in every dimension.
    pub address_mode: AddressMode,
    /// Filtering within a level.
    pub filter: FilterMode,
    /// Filtering between levels (mip-chain textures).
    pub mipmap_filter: FilterMode,
    /// Coordinates in [0, 1) rather than texels.
    pub normalized_coordinates: bool,
    /// `CU_TRSF_READ_AS_INTEGER`: integer arrays return integers instead of normalized floats.
    pub read_as_integer: bool,
    /// The colour [`AddressMode::Border`] returns.
    pub border_color: [f32; 4],
}

impl Default for TextureDesc {
    fn default() -> Self {
        Self {
            address_mode: AddressMode::Clamp,
            filter: FilterMode::Point,
            mipmap_filter: FilterMode::Point,
            normalized_coordinates: false,
            read_as_integer: false,
            border_color: [0.0; 4],
        }
    }
}

impl TextureDesc {
    /// CUDA's texture rules for an array of `format`: linear filtering only with float reads,
    /// normalized float reads of integers only for 8- and 16-bit integers, normalized
    /// coordinates for a whole mip chain and for wrap / mirror addressing.
    pub fn validate(&self, format: sys::CUarray_format, mip_chain: bool) -> Result<(), ImageError> {
        use sys::CUarray_format as F;
        let integer = !matches!(format, F::CU_AD_FORMAT_HALF | F::CU_AD_FORMAT_FLOAT);
        let wide_integer = matches!(
            format,
            F::CU_AD_FORMAT_UNSIGNED_INT32 | F::CU_AD_FORMAT_SIGNED_INT32
        );
        let reads_integers = integer && (self.read_as_integer || wide_integer);
        if wide_integer && !self.read_as_integer {
            return Err(ImageError::Texture(
                TextureRule::NormalizedReadsNeedNarrowIntegers,
            ));
        }
        if self.filter == FilterMode::Linear && reads_integers {
            return Err(ImageError::Texture(
                TextureRule::LinearFilterNeedsFloatReads,
            ));
        }
        if mip_chain && !self.normalized_coordinates {
            return Err(ImageError::Texture(
                TextureRule::MipChainNeedsNormalizedCoordinates,
            ));
        }
        if matches!(self.address_mode, AddressMode::Wrap | AddressMode::Mirror)
            && !self.normalized_coordinates
        {
            return Err(ImageError::Texture(
                TextureRule::WrapNeedsNormalizedCoordinates,
            ));
        }
        Ok(())
    }
}

/// What a [`TextureObject`] reads.
#[derive(Debug, Clone)]
pub enum TextureSource {
    /// One mip level.
    Level(ArrayLevel),
    /// The whole mip chain (`tex2DLod`, trilinear filtering).
    MipChain(Arc<MipmappedArray>),
}

impl TextureSource {
    fn parent(&self) -> &Arc<MipmappedArray> {
        match self {
            TextureSource::Level(l) => &l.parent,
            TextureSource::MipChain(m) => m,
        }
    }
}

/// A CUDA texture object, destroyed with `cuTexObjectDestroy`; it keeps what it reads alive.
pub struct TextureObject {
    source: TextureSource,
    handle: sys::CUtexObject,
}

impl std::fmt::Debug for TextureObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextureObject")
            .field("handle", &self.handle)
            .field("source", &self.source)
            .finish()
    }
}

impl TextureObject {
    /// A texture over the whole mip chain of `array`, checked against
    /// [`TextureDesc::validate`].
    pub fn mip_chain(array: &Arc<MipmappedArray>, desc: &TextureDesc) -> Result<Self> {
        desc.validate(array.desc.format, true)?;
        // SAFETY: validated just above.
        unsafe { Self::create(TextureSource::MipChain(array.clone()), desc) }
    }

    /// `cuTexObjectCreate` without checks.
    ///
    /// # Safety
    /// `desc` must have passed [`TextureDesc::validate`] for `source`'s format (with
    /// `mip_chain` true for [`TextureSource::MipChain`]).
    pub(crate) unsafe fn create(source: TextureSource, desc: &TextureDesc) -> Result<Self> {
        let mut res = zeroed_resource_desc();
        let mut tex = sys::CUDA_TEXTURE_DESC {
            addressMode: [desc.address_mode.raw(); 3],
            filterMode: desc.filter.raw(),
            flags: 0,
            maxAnisotropy: 0,
            mipmapFilterMode: desc.mipmap_filter.raw(),
            mipmapLevelBias: 0.0,
            minMipmapLevelClamp: 0.0,
            maxMipmapLevelClamp: 0.0,
            borderColor: desc.border_color,
            reserved: [0; 12],
        };
        if desc.normalized_coordinates {
            tex.flags |= sys::CU_TRSF_NORMALIZED_COORDINATES;
        }
        if desc.read_as_integer {
            tex.flags |= sys::CU_TRSF_READ_AS_INTEGER;
        }
        match &source {
            TextureSource::Level(level) => {
                res.resType = sys::CUresourcetype::CU_RESOURCE_TYPE_ARRAY;
                res.res.array = sys::CUDA_RESOURCE_DESC_st__bindgen_ty_1__bindgen_ty_1 {
                    hArray: level.array,
                };
            }
            TextureSource::MipChain(array) => {
                res.resType = sys::CUresourcetype::CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
                res.res.mipmap = sys::CUDA_RESOURCE_DESC_st__bindgen_ty_1__bindgen_ty_2 {
                    hMipmappedArray: array.handle,
                };
                tex.maxMipmapLevelClamp = array.levels.saturating_sub(1) as f32;
            }
        }
        let ctx = source.parent().context().clone();
        ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        let mut handle = 0;
        // SAFETY: live arrays; both descriptors are fully initialised and live across the
        // call; no resource view (null is allowed).
        unsafe { sys::cuTexObjectCreate(&mut handle, &res, &tex, std::ptr::null()) }
            .result()
            .cuda("cuTexObjectCreate")?;
        Ok(Self { source, handle })
    }

    /// The `CUtexObject` (`cudaTextureObject_t`), valid while `self` lives.
    pub fn raw(&self) -> sys::CUtexObject {
        self.handle
    }
    /// The handle by reference, for `launch_builder(..).arg(texture.kernel_arg())`.
    pub fn kernel_arg(&self) -> &sys::CUtexObject {
        &self.handle
    }
    /// What it reads.
    pub fn source(&self) -> &TextureSource {
        &self.source
    }
}

impl Drop for TextureObject {
    fn drop(&mut self) {
        let ctx = self.source.parent().context();
        ctx.record_err(ctx.bind_to_thread());
        // SAFETY: created by cuTexObjectCreate, destroyed once, before what it reads (held).
        let destroyed = unsafe { sys::cuTexObjectDestroy(self.handle) }.result();
        destroy_result(ctx, "cuTexObjectDestroy", destroyed);
    }
}

/// An all-zero `CUDA_RESOURCE_DESC` (type `ARRAY`, null handles, no flags).
fn zeroed_resource_desc() -> sys::CUDA_RESOURCE_DESC {
    // SAFETY: a C struct of an enum whose value 0 is CU_RESOURCE_TYPE_ARRAY, a union of
    // integers and pointers, and an integer: all-zero bytes are a valid value.
    unsafe { std::mem::zeroed() }
}

/// An all-zero `CUDA_MEMCPY3D` (offsets 0, null pointers), both memory types `HOST` until the
/// caller sets them.
fn zeroed_memcpy3d() -> sys::CUDA_MEMCPY3D {
    let mut c: std::mem::MaybeUninit<sys::CUDA_MEMCPY3D> = std::mem::MaybeUninit::zeroed();
    let p = c.as_mut_ptr();
    // SAFETY: `p` points to the zeroed struct. Every field but the two CUmemorytype enums is an
    // integer or a pointer, for which zero is valid; the enums (where zero is no value) are
    // written before the struct is read as a whole.
    unsafe {
        std::ptr::addr_of_mut!((*p).srcMemoryType).write(sys::CUmemorytype::CU_MEMORYTYPE_HOST);
        std::ptr::addr_of_mut!((*p).dstMemoryType).write(sys::CUmemorytype::CU_MEMORYTYPE_HOST);
        c.assume_init()
    }
}
