// Shared by the fluid demo's simulation shaders (fluid_*.comp), the Vulkan fallback of
// shaders/fluid.cu: the parameters, the texel helpers, bilinear taps and emitter falloff.
// Same operations in the same order as the CUDA kernels; every variable that holds
// arithmetic is `precise`, so no multiply and add is fused (tests/vulkan/shaders.rs checks that
// every float add, subtract and multiply in the shipped SPIR-V is NoContraction).

layout(local_size_x = 16, local_size_y = 16) in;

struct Emitter {
    vec2 pos;
    vec2 force;
    vec4 color;  // rgb: dye; w: 1 / radius^2
};

// The layout of Params in dev/src/sim/fluid.rs and fluid.cu.
layout(std140, set = 1, binding = 0) uniform ParamsBlock {
    uint width;
    uint height;
    float dt;
    float vorticity;
    float velocity_keep;
    float dye_keep;
    uint emitters;
    uint pad;
    Emitter emitter[8];
} P;

ivec2 this_texel() {
    return ivec2(gl_GlobalInvocationID.xy);
}

bool in_grid(ivec2 t) {
    return t.x < int(P.width) && t.y < int(P.height);
}

ivec2 clamp_texel(ivec2 t) {
    return clamp(t, ivec2(0), ivec2(int(P.width) - 1, int(P.height) - 1));
}

// The texel's centre.
vec2 centre(ivec2 t) {
    precise vec2 c = vec2(t) + 0.5;
    return c;
}

// Where a bilinear sample at p reads: texels t0 and t1 (corners), weights f.
struct Taps {
    ivec2 t0;
    ivec2 t1;
    vec2 f;
};

Taps taps(vec2 p) {
    precise vec2 q = min(max(p - 0.5, vec2(0.0)), vec2(float(P.width - 1u), float(P.height - 1u)));
    vec2 q0 = floor(q);
    precise vec2 f = q - q0;
    Taps t;
    t.f = f;
    t.t0 = ivec2(q0);
    t.t1 = min(t.t0 + 1, ivec2(int(P.width) - 1, int(P.height) - 1));
    return t;
}

float lerp1(float a, float b, float t) {
    precise float r = a + (b - a) * t;
    return r;
}

// 1 - d^2 / r^2 for emitter i at p: positive inside its radius, where its weight is the cube.
float falloff(uint i, vec2 p) {
    precise vec2 d = p - P.emitter[i].pos;
    precise float r = 1.0 - (d.x * d.x + d.y * d.y) * P.emitter[i].color.w;
    return r;
}

// x rounded to the nearest half float (ties to even) while still an f32, so that an RGBA16F
// store converts it exactly whatever rounding the implementation uses (Vulkan allows either;
// lavapipe and NVIDIA's driver truncate, CUDA's cvt.rn rounds to nearest); below the smallest
// normal half, 0. Integer operations only (fluid.cu: to_half_exact).
float to_half_exact(float x) {
    if (abs(x) < 6.103515625e-05) return 0.0;
    uint b = floatBitsToUint(x);
    b = (b + 0x0fffu + ((b >> 13) & 1u)) & 0xffffe000u;
    return uintBitsToFloat(b);
}
