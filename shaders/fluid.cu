// The fluid demo's simulation, CUDA version: one kernel per pass of a stable-fluids step, on
// shared images (Vulkan images CUDA sees as arrays) read and written through surface objects.
// Compiled at run time with NVRTC (cuvk::cuda::compile_module); no CUDA header is needed:
// surfaces are accessed with PTX `suld`/`sust` (x in bytes), halves converted with `cvt`.
//
// Must stay in step with shaders/fluid_*.comp (the Vulkan fallback) and step_cpu in
// dev/src/sim/fluid.rs: the same passes, the same operations in the same order, in f32.
// Every add, subtract and multiply here is an explicit round-to-nearest intrinsic, never
// contracted into a fused multiply-add (the shaders mark theirs `precise`), and nothing
// divides (reciprocals come from the host), so the two simulations round alike;
// tests/demos/gpu_fluid.rs compares them. Bilinear sampling is done by hand from four texels for
// the same reason: hardware texture filtering uses low-precision weights.
//
// Fields: velocity RG32F (texels per unit time), pressure and scratch (curl, divergence)
// R32F, dye RGBA16F. Texel (x, y) has its centre at (x + 0.5, y + 0.5).

typedef unsigned long long u64;

struct Emitter {
    float2 pos;
    float2 force;
    float4 color;  // rgb: dye; w: 1 / radius^2
};

// The layout of Params in dev/src/sim/fluid.rs and fluid_common.glsl.
struct Params {
    unsigned int width;
    unsigned int height;
    float dt;
    float vorticity;
    float velocity_keep;
    float dye_keep;
    unsigned int emitters;
    unsigned int pad;
    Emitter emitter[8];
};

__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }

// ---- surface access (2D, unformatted: the texel's bits) ----

__device__ __forceinline__ float load1(u64 s, int x, int y) {
    unsigned int v;
    asm("suld.b.2d.b32.trap {%0}, [%1, {%2, %3}];" : "=r"(v) : "l"(s), "r"(x * 4), "r"(y));
    return __int_as_float(v);
}

__device__ __forceinline__ float2 load2(u64 s, int x, int y) {
    unsigned int a, b;
    asm("suld.b.2d.v2.b32.trap {%0, %1}, [%2, {%3, %4}];" : "=r"(a), "=r"(b) : "l"(s), "r"(x * 8), "r"(y));
    float2 v;
    v.x = __int_as_float(a);
    v.y = __int_as_float(b);
    return v;
}

__device__ __forceinline__ float half_to_float(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ unsigned short float_to_half(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float4 load_half4(u64 s, int x, int y) {
    unsigned int lo, hi;
    asm("suld.b.2d.v2.b32.trap {%0, %1}, [%2, {%3, %4}];" : "=r"(lo), "=r"(hi) : "l"(s), "r"(x * 8), "r"(y));
    float4 v;
    v.x = half_to_float((unsigned short)(lo & 0xffff));
    v.y = half_to_float((unsigned short)(lo >> 16));
    v.z = half_to_float((unsigned short)(hi & 0xffff));
    v.w = half_to_float((unsigned short)(hi >> 16));
    return v;
}

__device__ __forceinline__ void store1(u64 s, int x, int y, float v) {
    asm volatile("sust.b.2d.b32.trap [%0, {%1, %2}], {%3};" ::"l"(s), "r"(x * 4), "r"(y), "r"(__float_as_int(v)) : "memory");
}

__device__ __forceinline__ void store2(u64 s, int x, int y, float2 v) {
    asm volatile("sust.b.2d.v2.b32.trap [%0, {%1, %2}], {%3, %4};" ::"l"(s), "r"(x * 8), "r"(y),
                 "r"(__float_as_int(v.x)), "r"(__float_as_int(v.y)) : "memory");
}

// x rounded to the nearest half float (ties to even) while still an f32, so that the store's
// conversion is exact whatever rounding it uses (CUDA's cvt.rn rounds to nearest; Vulkan lets
// RGBA16F stores round either way, and lavapipe and NVIDIA's driver truncate); below the
// smallest normal half, 0. Integer operations only: the same bits on every implementation.
__device__ __forceinline__ float to_half_exact(float x) {
    if (fabsf(x) < 6.103515625e-05f) return 0.0f;
    unsigned int b = __float_as_uint(x);
    b = (b + 0x0fffu + ((b >> 13) & 1u)) & 0xffffe000u;
    return __uint_as_float(b);
}

__device__ __forceinline__ void store_half4(u64 s, int x, int y, float4 v) {
    unsigned int lo = (unsigned int)float_to_half(v.x) | ((unsigned int)float_to_half(v.y) << 16);
    unsigned int hi = (unsigned int)float_to_half(v.z) | ((unsigned int)float_to_half(v.w) << 16);
    asm volatile("sust.b.2d.v2.b32.trap [%0, {%1, %2}], {%3, %4};" ::"l"(s), "r"(x * 8), "r"(y), "r"(lo), "r"(hi) : "memory");
}

// ---- shared helpers ----

__device__ __forceinline__ int clampi(int v, int hi) { return v < 0 ? 0 : (v > hi ? hi : v); }

// This thread's texel, or false outside the grid.
__device__ __forceinline__ bool texel(const Params& p, int* x, int* y) {
    *x = blockIdx.x * blockDim.x + threadIdx.x;
    *y = blockIdx.y * blockDim.y + threadIdx.y;
    return *x < (int)p.width && *y < (int)p.height;
}

// Where a bilinear sample at (px, py) reads: the four texels and the weights.
struct Taps {
    int x0, y0, x1, y1;
    float fx, fy;
};

__device__ __forceinline__ Taps taps(const Params& p, float px, float py) {
    float qx = fminf(fmaxf(sub(px, 0.5f), 0.0f), (float)(p.width - 1));
    float qy = fminf(fmaxf(sub(py, 0.5f), 0.0f), (float)(p.height - 1));
    float x0 = floorf(qx), y0 = floorf(qy);
    Taps t;
    t.fx = sub(qx, x0);
    t.fy = sub(qy, y0);
    t.x0 = (int)x0;
    t.y0 = (int)y0;
    t.x1 = min(t.x0 + 1, (int)p.width - 1);
    t.y1 = min(t.y0 + 1, (int)p.height - 1);
    return t;
}

__device__ __forceinline__ float lerp(float a, float b, float t) { return add(a, mul(sub(b, a), t)); }

__device__ __forceinline__ float2 sample2(const Params& p, u64 s, float px, float py) {
    Taps t = taps(p, px, py);
    float2 v00 = load2(s, t.x0, t.y0), v10 = load2(s, t.x1, t.y0);
    float2 v01 = load2(s, t.x0, t.y1), v11 = load2(s, t.x1, t.y1);
    float2 r;
    r.x = lerp(lerp(v00.x, v10.x, t.fx), lerp(v01.x, v11.x, t.fx), t.fy);
    r.y = lerp(lerp(v00.y, v10.y, t.fx), lerp(v01.y, v11.y, t.fx), t.fy);
    return r;
}

__device__ __forceinline__ float4 sample4(const Params& p, u64 s, float px, float py) {
    Taps t = taps(p, px, py);
    float4 v00 = load_half4(s, t.x0, t.y0), v10 = load_half4(s, t.x1, t.y0);
    float4 v01 = load_half4(s, t.x0, t.y1), v11 = load_half4(s, t.x1, t.y1);
    float4 r;
    r.x = lerp(lerp(v00.x, v10.x, t.fx), lerp(v01.x, v11.x, t.fx), t.fy);
    r.y = lerp(lerp(v00.y, v10.y, t.fx), lerp(v01.y, v11.y, t.fx), t.fy);
    r.z = lerp(lerp(v00.z, v10.z, t.fx), lerp(v01.z, v11.z, t.fx), t.fy);
    r.w = lerp(lerp(v00.w, v10.w, t.fx), lerp(v01.w, v11.w, t.fx), t.fy);
    return r;
}

// 1 - d^2 / r^2 for the emitter at (px, py): positive inside its radius, where its weight
// is the cube of this.
__device__ __forceinline__ float falloff(const Emitter& e, float px, float py) {
    float dx = sub(px, e.pos.x);
    float dy = sub(py, e.pos.y);
    return sub(1.0f, mul(add(mul(dx, dx), mul(dy, dy)), e.color.w));
}

// ---- the passes, in the order a step runs them ----

// curl = 0.5 * ((R.y - L.y) - (T.x - B.x)), edges clamped.
extern "C" __global__ void fluid_curl(Params p, u64 vel, u64 curl) {
    int x, y;
    if (!texel(p, &x, &y)) return;
    int w = p.width - 1, h = p.height - 1;
    float2 l = load2(vel, clampi(x - 1, w), y), r = load2(vel, clampi(x + 1, w), y);
    float2 b = load2(vel, x, clampi(y - 1, h)), t = load2(vel, x, clampi(y + 1, h));
    store1(curl, x, y, mul(0.5f, sub(sub(r.y, l.y), sub(t.x, b.x))));
}

// Velocity + vorticity confinement + the emitters' forces.
extern "C" __global__ void fluid_force(Params p, u64 vel_in, u64 curl, u64 vel_out) {
    int x, y;
    if (!texel(p, &x, &y)) return;
    float2 v = load2(vel_in, x, y);
    if (p.vorticity != 0.0f) {
        int w = p.width - 1, h = p.height - 1;
        float c = load1(curl, x, y);
        float gx = sub(fabsf(load1(curl, clampi(x + 1, w), y)), fabsf(load1(curl, clampi(x - 1, w), y)));
        float gy = sub(fabsf(load1(curl, x, clampi(y + 1, h))), fabsf(load1(curl, x, clampi(y - 1, h))));
        float len2 = add(add(mul(gx, gx), mul(gy, gy)), 1e-12f);
        float inv = rsqrtf(len2);
        float s = mul(mul(p.vorticity, c), p.dt);
        v.x = add(v.x, mul(mul(gy, inv), s));
        v.y = add(v.y, mul(mul(-gx, inv), s));
    }
    float px = add((float)x, 0.5f), py = add((float)y, 0.5f);
    for (unsigned int i = 0; i < p.emitters; i++) {
        float f = falloff(p.emitter[i], px, py);
        if (f > 0.0f) {
            float k = mul(mul(f, f), f);
            v.x = add(v.x, mul(p.emitter[i].force.x, k));
            v.y = add(v.y, mul(p.emitter[i].force.y, k));
        }
    }
    store2(vel_out, x, y, v);
}

// Semi-Lagrangian self-advection: the velocity that arrives here from one step upstream.
extern "C" __global__ void fluid_advect_velocity(Params p, u64 vel_in, u64 vel_out) {
    int x, y;
    if (!texel(p, &x, &y)) return;
    float2 u = load2(vel_in, x, y);
    float px = sub(add((float)x, 0.5f), mul(p.dt, u.x));
    float py = sub(add((float)y, 0.5f), mul(p.dt, u.y));
    float2 s = sample2(p, vel_in, px, py);
    s.x = mul(s.x, p.velocity_keep);
    s.y = mul(s.y, p.velocity_keep);
    store2(vel_out, x, y, s);
}

// div = 0.5 * ((R.x - L.x) + (T.y - B.y)); outside the grid a wall mirrors the edge texel.
extern "C" __global__ void fluid_divergence(Params p, u64 vel, u64 div) {
    int x, y;
    if (!texel(p, &x, &y)) return;
    float2 c = load2(vel, x, y);
    float l = x > 0 ? load2(vel, x - 1, y).x : -c.x;
    float r = x < (int)p.width - 1 ? load2(vel, x + 1, y).x : -c.x;
    float b = y > 0 ? load2(vel, x, y - 1).y : -c.y;
    float t = y < (int)p.height - 1 ? load2(vel, x, y + 1).y : -c.y;
    store1(div, x, y, mul(0.5f, add(sub(r, l), sub(t, b))));
}

// One Jacobi iteration of the pressure Poisson equation; `scale` < 1 on the first iteration
// keeps part of the last step's pressure as the first guess.
extern "C" __global__ void fluid_jacobi(Params p, u64 p_in, u64 div, u64 p_out, float scale) {
    int x, y;
    if (!texel(p, &x, &y)) return;
    int w = p.width - 1, h = p.height - 1;
    float s = add(add(add(load1(p_in, clampi(x - 1, w), y), load1(p_in, clampi(x + 1, w), y)),
                      load1(p_in, x, clampi(y - 1, h))),
                  load1(p_in, x, clampi(y + 1, h)));
    store1(p_out, x, y, mul(sub(mul(s, scale), load1(div, x, y)), 0.25f));
}

// Velocity minus the pressure gradient: divergence-free.
extern "C" __global__ void fluid_gradient(Params p, u64 pressure, u64 vel_in, u64 vel_out) {
    int x, y;
    if (!texel(p, &x, &y)) return;
    int w = p.width - 1, h = p.height - 1;
    float gx = sub(load1(pressure, clampi(x + 1, w), y), load1(pressure, clampi(x - 1, w), y));
    float gy = sub(load1(pressure, x, clampi(y + 1, h)), load1(pressure, x, clampi(y - 1, h)));
    float2 v = load2(vel_in, x, y);
    v.x = sub(v.x, mul(0.5f, gx));
    v.y = sub(v.y, mul(0.5f, gy));
    store2(vel_out, x, y, v);
}

// Semi-Lagrangian advection of the dye by the final velocity, then the emitters' dye.
extern "C" __global__ void fluid_advect_dye(Params p, u64 vel, u64 dye_in, u64 dye_out) {
    int x, y;
    if (!texel(p, &x, &y)) return;
    float2 u = load2(vel, x, y);
    float cx = add((float)x, 0.5f), cy = add((float)y, 0.5f);
    float4 d = sample4(p, dye_in, sub(cx, mul(p.dt, u.x)), sub(cy, mul(p.dt, u.y)));
    d.x = mul(d.x, p.dye_keep);
    d.y = mul(d.y, p.dye_keep);
    d.z = mul(d.z, p.dye_keep);
    d.w = mul(d.w, p.dye_keep);
    for (unsigned int i = 0; i < p.emitters; i++) {
        float f = falloff(p.emitter[i], cx, cy);
        if (f > 0.0f) {
            float k = mul(mul(f, f), f);
            d.x = add(d.x, mul(p.emitter[i].color.x, k));
            d.y = add(d.y, mul(p.emitter[i].color.y, k));
            d.z = add(d.z, mul(p.emitter[i].color.z, k));
            d.w = add(d.w, k);
        }
    }
    d.x = to_half_exact(d.x);
    d.y = to_half_exact(d.y);
    d.z = to_half_exact(d.z);
    d.w = to_half_exact(d.w);
    store_half4(dye_out, x, y, d);
}
