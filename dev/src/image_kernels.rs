//! The shared-image kernels (shaders/images.cu) with typed launch helpers, shared by the GPU
//! image tests and `bench_image`, and the texel pattern both sides agree on.

use std::sync::Arc;

use cuvk::ash::vk;
use cuvk::cuda::{ArrayLevel, SurfaceObject, TextureObject};
use cuvk::cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cuvk::{FormatInfo, ImageKind, NumericClass};

pub const SOURCE: &str = include_str!("../../shaders/images.cu");

/// Word `w` (0..4) of texel `i` of the pattern with `seed` (matches images.cu).
pub fn pattern_word(i: u64, w: u32, seed: u32) -> u32 {
    let mut h = (i as u32)
        .wrapping_mul(4)
        .wrapping_add(w)
        .wrapping_mul(2_654_435_761)
        ^ seed;
    h ^= h >> 15;
    h = h.wrapping_mul(2_246_822_519);
    h ^= h >> 13;
    h
}

/// `texels` texels of `texel_bytes` bytes of the pattern with `seed`, tightly packed: what
/// `surface_write_pattern` writes.
pub fn pattern_bytes(texels: u64, texel_bytes: u32, seed: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity((texels * u64::from(texel_bytes)) as usize);
    for i in 0..texels {
        for b in 0..texel_bytes {
            out.push((pattern_word(i, b / 4, seed) >> (8 * (b % 4))) as u8);
        }
    }
    out
}

/// How the kernels address a level: 2D, layered (arrays and cube faces) or 3D.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Geometry {
    D2 = 0,
    Layered = 1,
    D3 = 2,
}

impl Geometry {
    pub fn of(kind: ImageKind) -> Self {
        match kind {
            ImageKind::D2 => Geometry::D2,
            ImageKind::D2Array { .. } | ImageKind::Cube => Geometry::Layered,
            ImageKind::D3 { .. } => Geometry::D3,
        }
    }
}

/// The SNORM components of the clear every format of the table stores exactly (see
/// [`clear_float`]).
pub const CLEAR_SNORM: [f32; 4] = [1.0, -1.0, 0.0, -1.0];
/// The SFLOAT components of the clear (see [`clear_float`]).
pub const CLEAR_FLOAT: [f32; 4] = [1.5, -2.25, 0.125, 3.0];

/// The float a texture reads for component `c` (R, G, B, A) of the clear every format of the
/// table stores exactly: UNORM (c+1)/15, SNORM ±1 and 0, SFLOAT 1.5, −2.25, 0.125, 3 (exact in
/// half and float); 0 for integer formats.
pub fn clear_float(f: &FormatInfo, c: usize) -> f32 {
    match f.class {
        NumericClass::Unorm => (c + 1) as f32 / 15.0,
        NumericClass::Snorm => CLEAR_SNORM[c],
        NumericClass::Float => CLEAR_FLOAT[c],
        NumericClass::Uint | NumericClass::Sint => 0.0,
    }
}

/// The integer of component `c` of the clear of format `f`: UINT (c+1)·37, SINT −(c+1)·13
/// (0 for the others).
pub fn clear_int(f: &FormatInfo, c: usize) -> i64 {
    match f.class {
        NumericClass::Uint => (c as i64 + 1) * 37,
        NumericClass::Sint => -(c as i64 + 1) * 13,
        _ => 0,
    }
}

/// The `vkCmdClearColorImage` value of that clear for format `f`.
pub fn clear_value(f: &FormatInfo) -> vk::ClearColorValue {
    match f.class {
        NumericClass::Uint => vk::ClearColorValue {
            uint32: [0, 1, 2, 3].map(|c| clear_int(f, c) as u32),
        },
        NumericClass::Sint => vk::ClearColorValue {
            int32: [0, 1, 2, 3].map(|c| clear_int(f, c) as i32),
        },
        _ => vk::ClearColorValue {
            float32: [0, 1, 2, 3].map(|c| clear_float(f, c)),
        },
    }
}

/// Width, height and layers-or-slices (at least 1) of a level, as the kernels take them.
pub fn dims(level: &ArrayLevel) -> (u32, u32, u32) {
    let (w, h, d) = level.extent();
    (w as u32, h as u32, d.max(1) as u32)
}

pub struct ImageKernels {
    write: CudaFunction,
    read: CudaFunction,
    fetch_float: CudaFunction,
    fetch_int: CudaFunction,
    fetch_lod: CudaFunction,
    pub bench_surface: CudaFunction,
    pub bench_linear: CudaFunction,
}

fn grid(n: u64) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256).clamp(1, 4096) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl ImageKernels {
    pub fn load(ctx: &Arc<CudaContext>) -> anyhow::Result<Self> {
        let m = cuvk::cuda::compile_module(ctx, "images.cu", SOURCE)?;
        Ok(Self {
            write: m.load_function("surface_write_pattern")?,
            read: m.load_function("surface_read")?,
            fetch_float: m.load_function("texture_fetch_float")?,
            fetch_int: m.load_function("texture_fetch_int")?,
            fetch_lod: m.load_function("texture_fetch_lod")?,
            bench_surface: m.load_function("bench_surface_rgba16f")?,
            bench_linear: m.load_function("bench_linear_rgba16f")?,
        })
    }

    /// Writes the pattern with `seed` into the surface's whole level (not synchronised).
    pub fn write_pattern(
        &self,
        stream: &Arc<CudaStream>,
        surface: &SurfaceObject,
        geometry: Geometry,
        seed: u32,
    ) -> anyhow::Result<()> {
        let level = surface.level();
        let (w, h, d) = dims(level);
        let (geo, tb) = (geometry as i32, level.texel_bytes() as u32);
        let mut b = stream.launch_builder(&self.write);
        b.arg(surface.kernel_arg())
            .arg(&geo)
            .arg(&w)
            .arg(&h)
            .arg(&d)
            .arg(&tb)
            .arg(&seed);
        // SAFETY: the surface covers exactly w×h×d texels of tb bytes (its level's extent).
        unsafe { b.launch(grid(u64::from(w) * u64::from(h) * u64::from(d))) }?;
        Ok(())
    }

    /// Reads the surface's whole level, tightly packed (synchronises).
    pub fn read_surface(
        &self,
        stream: &Arc<CudaStream>,
        surface: &SurfaceObject,
        geometry: Geometry,
    ) -> anyhow::Result<Vec<u8>> {
        let level = surface.level();
        let (w, h, d) = dims(level);
        let (geo, tb) = (geometry as i32, level.texel_bytes() as u32);
        let n = u64::from(w) * u64::from(h) * u64::from(d);
        let mut out = stream.alloc_zeros::<u8>((n * u64::from(tb)) as usize)?;
        let mut b = stream.launch_builder(&self.read);
        b.arg(surface.kernel_arg())
            .arg(&geo)
            .arg(&w)
            .arg(&h)
            .arg(&d)
            .arg(&tb)
            .arg(&mut out);
        // SAFETY: the surface covers n texels; `out` holds n × tb bytes.
        unsafe { b.launch(grid(n)) }?;
        Ok(stream.clone_dtoh(&out)?)
    }

    /// Point-samples every texel centre of a texture over `level`, as floats (synchronises).
    pub fn fetch_float(
        &self,
        stream: &Arc<CudaStream>,
        texture: &TextureObject,
        level: &ArrayLevel,
        geometry: Geometry,
    ) -> anyhow::Result<Vec<[f32; 4]>> {
        let (w, h, d) = dims(level);
        let geo = geometry as i32;
        let n = u64::from(w) * u64::from(h) * u64::from(d);
        let mut out = stream.alloc_zeros::<f32>((n * 4) as usize)?;
        let mut b = stream.launch_builder(&self.fetch_float);
        b.arg(texture.kernel_arg())
            .arg(&geo)
            .arg(&w)
            .arg(&h)
            .arg(&d)
            .arg(&mut out);
        // SAFETY: `out` holds n float4s.
        unsafe { b.launch(grid(n)) }?;
        let flat = stream.clone_dtoh(&out)?;
        Ok(flat
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect())
    }

    /// As [`Self::fetch_float`] for textures that read integers.
    pub fn fetch_int(
        &self,
        stream: &Arc<CudaStream>,
        texture: &TextureObject,
        level: &ArrayLevel,
        geometry: Geometry,
        signed: bool,
    ) -> anyhow::Result<Vec<[u32; 4]>> {
        let (w, h, d) = dims(level);
        let (geo, is_signed) = (geometry as i32, i32::from(signed));
        let n = u64::from(w) * u64::from(h) * u64::from(d);
        let mut out = stream.alloc_zeros::<u32>((n * 4) as usize)?;
        let mut b = stream.launch_builder(&self.fetch_int);
        b.arg(texture.kernel_arg())
            .arg(&geo)
            .arg(&w)
            .arg(&h)
            .arg(&d)
            .arg(&is_signed)
            .arg(&mut out);
        // SAFETY: `out` holds n uint4s.
        unsafe { b.launch(grid(n)) }?;
        let flat = stream.clone_dtoh(&out)?;
        Ok(flat
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect())
    }

    /// Samples a 2D mip-chain texture at level `lod`, at each texel centre of that level
    /// (`w`×`h`), as floats (synchronises).
    pub fn fetch_lod(
        &self,
        stream: &Arc<CudaStream>,
        texture: &TextureObject,
        (w, h): (u32, u32),
        lod: f32,
    ) -> anyhow::Result<Vec<[f32; 4]>> {
        let n = u64::from(w) * u64::from(h);
        let mut out = stream.alloc_zeros::<f32>((n * 4) as usize)?;
        let mut b = stream.launch_builder(&self.fetch_lod);
        b.arg(texture.kernel_arg())
            .arg(&w)
            .arg(&h)
            .arg(&lod)
            .arg(&mut out);
        // SAFETY: `out` holds n float4s.
        unsafe { b.launch(grid(n)) }?;
        let flat = stream.clone_dtoh(&out)?;
        Ok(flat
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect())
    }
}
