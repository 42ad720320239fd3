// Kernels for the shared-image tests and benchmark. Compiled at run time with NVRTC
// (cuvk::cuda::compile_module). Surfaces are accessed with PTX `sust`/`suld` (unformatted:
// x in bytes, the texel's raw bits) and textures with PTX `tex`, so no CUDA header is needed.
//
// `geometry`: 0 = 2D, 1 = layered 2D (array layers and cube faces: coordinate {layer, x, y}),
// 2 = 3D. `d` counts layers (geometry 1) or slices (geometry 2), 1 for 2D. Texel i counts x
// fastest, then y, then the layer or slice.

typedef unsigned long long u64;

// Word `w` (0..4) of texel `i` of the pattern with `seed` (image_kernels.rs: pattern_word).
__device__ __forceinline__ unsigned int pattern_word(u64 i, unsigned int w, unsigned int seed) {
    unsigned int h = ((unsigned int)i * 4u + w) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return h;
}

__device__ __forceinline__ void store_texel(u64 surf, int geometry, unsigned int xb, unsigned int y,
                                            unsigned int z, unsigned int tb, const unsigned int* w) {
    unsigned short s = (unsigned short)w[0];
    if (geometry == 0) {
        switch (tb) {
        case 1: asm volatile("sust.b.2d.b8.trap [%0, {%1, %2}], {%3};" ::"l"(surf), "r"(xb), "r"(y), "h"(s) : "memory"); break;
        case 2: asm volatile("sust.b.2d.b16.trap [%0, {%1, %2}], {%3};" ::"l"(surf), "r"(xb), "r"(y), "h"(s) : "memory"); break;
        case 4: asm volatile("sust.b.2d.b32.trap [%0, {%1, %2}], {%3};" ::"l"(surf), "r"(xb), "r"(y), "r"(w[0]) : "memory"); break;
        case 8: asm volatile("sust.b.2d.v2.b32.trap [%0, {%1, %2}], {%3, %4};" ::"l"(surf), "r"(xb), "r"(y), "r"(w[0]), "r"(w[1]) : "memory"); break;
        case 16: asm volatile("sust.b.2d.v4.b32.trap [%0, {%1, %2}], {%3, %4, %5, %6};" ::"l"(surf), "r"(xb), "r"(y), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory"); break;
        }
    } else if (geometry == 1) {
        switch (tb) {
        case 1: asm volatile("sust.b.a2d.b8.trap [%0, {%3, %1, %2, %2}], {%4};" ::"l"(surf), "r"(xb), "r"(y), "r"(z), "h"(s) : "memory"); break;
        case 2: asm volatile("sust.b.a2d.b16.trap [%0, {%3, %1, %2, %2}], {%4};" ::"l"(surf), "r"(xb), "r"(y), "r"(z), "h"(s) : "memory"); break;
        case 4: asm volatile("sust.b.a2d.b32.trap [%0, {%3, %1, %2, %2}], {%4};" ::"l"(surf), "r"(xb), "r"(y), "r"(z), "r"(w[0]) : "memory"); break;
        case 8: asm volatile("sust.b.a2d.v2.b32.trap [%0, {%3, %1, %2, %2}], {%4, %5};" ::"l"(surf), "r"(xb), "r"(y), "r"(z), "r"(w[0]), "r"(w[1]) : "memory"); break;
        case 16: asm volatile("sust.b.a2d.v4.b32.trap [%0, {%3, %1, %2, %2}], {%4, %5, %6, %7};" ::"l"(surf), "r"(xb), "r"(y), "r"(z), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory"); break;
        }
    } else {
        switch (tb) {
        case 1: asm volatile("sust.b.3d.b8.trap [%0, {%1, %2, %3, %3}], {%4};" ::"l"(surf), "r"(xb), "r"(y), "r"(z), "h"(s) : "memory"); break;
        case 2: asm volatile("sust.b.3d.b16.trap [%0, {%1, %2, %3, %3}], {%4};" ::"l"(surf), "r"(xb), "r"(y), "r"(z), "h"(s) : "memory"); break;
        case 4: asm volatile("sust.b.3d.b32.trap [%0, {%1, %2, %3, %3}], {%4};" ::"l"(surf), "r"(xb), "r"(y), "r"(z), "r"(w[0]) : "memory"); break;
        case 8: asm volatile("sust.b.3d.v2.b32.trap [%0, {%1, %2, %3, %3}], {%4, %5};" ::"l"(surf), "r"(xb), "r"(y), "r"(z), "r"(w[0]), "r"(w[1]) : "memory"); break;
        case 16: asm volatile("sust.b.3d.v4.b32.trap [%0, {%1, %2, %3, %3}], {%4, %5, %6, %7};" ::"l"(surf), "r"(xb), "r"(y), "r"(z), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory"); break;
        }
    }
}

__device__ __forceinline__ void load_texel(u64 surf, int geometry, unsigned int xb, unsigned int y,
                                           unsigned int z, unsigned int tb, unsigned int* w) {
    unsigned short s = 0;
    w[0] = w[1] = w[2] = w[3] = 0;
    if (geometry == 0) {
        switch (tb) {
        case 1: asm volatile("suld.b.2d.b8.trap {%0}, [%1, {%2, %3}];" : "=h"(s) : "l"(surf), "r"(xb), "r"(y) : "memory"); w[0] = s & 0xff; break;
        case 2: asm volatile("suld.b.2d.b16.trap {%0}, [%1, {%2, %3}];" : "=h"(s) : "l"(surf), "r"(xb), "r"(y) : "memory"); w[0] = s; break;
        case 4: asm volatile("suld.b.2d.b32.trap {%0}, [%1, {%2, %3}];" : "=r"(w[0]) : "l"(surf), "r"(xb), "r"(y) : "memory"); break;
        case 8: asm volatile("suld.b.2d.v2.b32.trap {%0, %1}, [%2, {%3, %4}];" : "=r"(w[0]), "=r"(w[1]) : "l"(surf), "r"(xb), "r"(y) : "memory"); break;
        case 16: asm volatile("suld.b.2d.v4.b32.trap {%0, %1, %2, %3}, [%4, {%5, %6}];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(surf), "r"(xb), "r"(y) : "memory"); break;
        }
    } else if (geometry == 1) {
        switch (tb) {
        case 1: asm volatile("suld.b.a2d.b8.trap {%0}, [%1, {%4, %2, %3, %3}];" : "=h"(s) : "l"(surf), "r"(xb), "r"(y), "r"(z) : "memory"); w[0] = s & 0xff; break;
        case 2: asm volatile("suld.b.a2d.b16.trap {%0}, [%1, {%4, %2, %3, %3}];" : "=h"(s) : "l"(surf), "r"(xb), "r"(y), "r"(z) : "memory"); w[0] = s; break;
        case 4: asm volatile("suld.b.a2d.b32.trap {%0}, [%1, {%4, %2, %3, %3}];" : "=r"(w[0]) : "l"(surf), "r"(xb), "r"(y), "r"(z) : "memory"); break;
        case 8: asm volatile("suld.b.a2d.v2.b32.trap {%0, %1}, [%2, {%5, %3, %4, %4}];" : "=r"(w[0]), "=r"(w[1]) : "l"(surf), "r"(xb), "r"(y), "r"(z) : "memory"); break;
        case 16: asm volatile("suld.b.a2d.v4.b32.trap {%0, %1, %2, %3}, [%4, {%7, %5, %6, %6}];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(surf), "r"(xb), "r"(y), "r"(z) : "memory"); break;
        }
    } else {
        switch (tb) {
        case 1: asm volatile("suld.b.3d.b8.trap {%0}, [%1, {%2, %3, %4, %4}];" : "=h"(s) : "l"(surf), "r"(xb), "r"(y), "r"(z) : "memory"); w[0] = s & 0xff; break;
        case 2: asm volatile("suld.b.3d.b16.trap {%0}, [%1, {%2, %3, %4, %4}];" : "=h"(s) : "l"(surf), "r"(xb), "r"(y), "r"(z) : "memory"); w[0] = s; break;
        case 4: asm volatile("suld.b.3d.b32.trap {%0}, [%1, {%2, %3, %4, %4}];" : "=r"(w[0]) : "l"(surf), "r"(xb), "r"(y), "r"(z) : "memory"); break;
        case 8: asm volatile("suld.b.3d.v2.b32.trap {%0, %1}, [%2, {%3, %4, %5, %5}];" : "=r"(w[0]), "=r"(w[1]) : "l"(surf), "r"(xb), "r"(y), "r"(z) : "memory"); break;
        case 16: asm volatile("suld.b.3d.v4.b32.trap {%0, %1, %2, %3}, [%4, {%5, %6, %7, %7}];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(surf), "r"(xb), "r"(y), "r"(z) : "memory"); break;
        }
    }
}

// Writes the pattern with `seed` into every texel of a w×h×d level through its surface.
extern "C" __global__ void surface_write_pattern(u64 surf, int geometry, unsigned int w, unsigned int h,
                                                 unsigned int d, unsigned int tb, unsigned int seed) {
    u64 n = (u64)w * h * d;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        unsigned int x = (unsigned int)(i % w), y = (unsigned int)((i / w) % h), z = (unsigned int)(i / ((u64)w * h));
        unsigned int words[4];
        for (unsigned int k = 0; k < 4; k++) words[k] = pattern_word(i, k, seed);
        store_texel(surf, geometry, x * tb, y, z, tb, words);
    }
}

// Copies every texel of a w×h×d level, through its surface, into `out` (tightly packed).
extern "C" __global__ void surface_read(u64 surf, int geometry, unsigned int w, unsigned int h, unsigned int d,
                                        unsigned int tb, unsigned char* out) {
    u64 n = (u64)w * h * d;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        unsigned int x = (unsigned int)(i % w), y = (unsigned int)((i / w) % h), z = (unsigned int)(i / ((u64)w * h));
        unsigned int words[4];
        load_texel(surf, geometry, x * tb, y, z, tb, words);
        for (unsigned int b = 0; b < tb; b++) out[i * tb + b] = (unsigned char)(words[b / 4] >> (8 * (b % 4)));
    }
}

// Point-samples every texel centre of a w×h×d level (unnormalized coordinates) as floats.
extern "C" __global__ void texture_fetch_float(u64 tex, int geometry, unsigned int w, unsigned int h,
                                               unsigned int d, float4* out) {
    u64 n = (u64)w * h * d;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        unsigned int z = (unsigned int)(i / ((u64)w * h));
        float x = (float)(i % w) + 0.5f, y = (float)((i / w) % h) + 0.5f, zf = (float)z + 0.5f;
        float4 v;
        if (geometry == 0)
            asm volatile("tex.2d.v4.f32.f32 {%0, %1, %2, %3}, [%4, {%5, %6}];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(tex), "f"(x), "f"(y));
        else if (geometry == 1)
            asm volatile("tex.a2d.v4.f32.f32 {%0, %1, %2, %3}, [%4, {%5, %6, %7, %7}];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(tex), "r"(z), "f"(x), "f"(y));
        else
            asm volatile("tex.3d.v4.f32.f32 {%0, %1, %2, %3}, [%4, {%5, %6, %7, %7}];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(tex), "f"(x), "f"(y), "f"(zf));
        out[i] = v;
    }
}

// As texture_fetch_float, for textures that read integers (signed: sign-extended).
extern "C" __global__ void texture_fetch_int(u64 tex, int geometry, unsigned int w, unsigned int h,
                                             unsigned int d, int is_signed, uint4* out) {
    u64 n = (u64)w * h * d;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        unsigned int z = (unsigned int)(i / ((u64)w * h));
        float x = (float)(i % w) + 0.5f, y = (float)((i / w) % h) + 0.5f, zf = (float)z + 0.5f;
        uint4 v;
        if (is_signed) {
            if (geometry == 0)
                asm volatile("tex.2d.v4.s32.f32 {%0, %1, %2, %3}, [%4, {%5, %6}];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(tex), "f"(x), "f"(y));
            else if (geometry == 1)
                asm volatile("tex.a2d.v4.s32.f32 {%0, %1, %2, %3}, [%4, {%5, %6, %7, %7}];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(tex), "r"(z), "f"(x), "f"(y));
            else
                asm volatile("tex.3d.v4.s32.f32 {%0, %1, %2, %3}, [%4, {%5, %6, %7, %7}];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(tex), "f"(x), "f"(y), "f"(zf));
        } else {
            if (geometry == 0)
                asm volatile("tex.2d.v4.u32.f32 {%0, %1, %2, %3}, [%4, {%5, %6}];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(tex), "f"(x), "f"(y));
            else if (geometry == 1)
                asm volatile("tex.a2d.v4.u32.f32 {%0, %1, %2, %3}, [%4, {%5, %6, %7, %7}];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(tex), "r"(z), "f"(x), "f"(y));
            else
                asm volatile("tex.3d.v4.u32.f32 {%0, %1, %2, %3}, [%4, {%5, %6, %7, %7}];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(tex), "f"(x), "f"(y), "f"(zf));
        }
        out[i] = v;
    }
}

// Samples a 2D mip-chain texture (normalized coordinates) at level `lod`, at the centre of
// each texel of that level (w×h).
extern "C" __global__ void texture_fetch_lod(u64 tex, unsigned int w, unsigned int h, float lod, float4* out) {
    u64 n = (u64)w * h;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        float x = ((float)(i % w) + 0.5f) / (float)w, y = ((float)(i / w) + 0.5f) / (float)h;
        float4 v;
        asm volatile("tex.level.2d.v4.f32.f32 {%0, %1, %2, %3}, [%4, {%5, %6}], %7;" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(tex), "f"(x), "f"(y), "f"(lod));
        out[i] = v;
    }
}

// The benchmark's kernel: writes an RGBA16F value per texel (a moving gradient) through a
// surface, or into a linear buffer of the same texels (pitch = w * 8 bytes).
__device__ __forceinline__ void gradient_rgba16f(unsigned int x, unsigned int y, unsigned int frame, unsigned int* lo, unsigned int* hi) {
    unsigned short r, g, b, a;
    float fr = (float)((x + frame) & 1023) / 1023.0f, fg = (float)((y + frame) & 1023) / 1023.0f;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(fr));
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(g) : "f"(fg));
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(0.5f));
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(a) : "f"(1.0f));
    *lo = (unsigned int)r | ((unsigned int)g << 16);
    *hi = (unsigned int)b | ((unsigned int)a << 16);
}

extern "C" __global__ void bench_surface_rgba16f(u64 surf, unsigned int w, unsigned int h, unsigned int frame) {
    unsigned int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    unsigned int lo, hi;
    gradient_rgba16f(x, y, frame, &lo, &hi);
    asm volatile("sust.b.2d.v2.b32.trap [%0, {%1, %2}], {%3, %4};" ::"l"(surf), "r"(x * 8), "r"(y), "r"(lo), "r"(hi) : "memory");
}

extern "C" __global__ void bench_linear_rgba16f(uint2* out, unsigned int w, unsigned int h, unsigned int frame) {
    unsigned int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    unsigned int lo, hi;
    gradient_rgba16f(x, y, frame, &lo, &hi);
    uint2 v;
    v.x = lo;
    v.y = hi;
    out[(u64)y * w + x] = v;
}
