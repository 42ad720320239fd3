#version 450
// Draws particles by splatting: each particle projects to one pixel and adds itself to that
// pixel's HDR counts: one particle, and its colour key (0..255, from its depth in the galaxies'
// potential, pos.w). particles_resolve.comp turns the counts into colour. (A compute splat, not
// point-list rasterisation: see BENCHMARKS.md for the comparison.)
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer Pos { vec4 pos[]; };
layout(std430, set = 0, binding = 1) buffer Hdr { uint hdr[]; }; // per pixel: particles, Σ key
layout(push_constant) uniform Push {
    mat4 view_proj;
    uint count;
    uint width;
    uint height;
    float depth_half; // the depth that gets the middle key, 128
    uint first;       // particles [first, count) are drawn (a multi-GPU rank skips the cores)
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = pc.first + gl_GlobalInvocationID.x; i < pc.count; i += stride) {
        vec4 p = pos[i];
        vec4 clip = pc.view_proj * vec4(p.xyz, 1.0);
        if (clip.w <= 0.0) continue;
        vec3 ndc = clip.xyz / clip.w;
        if (any(lessThan(ndc.xy, vec2(-1.0))) || any(greaterThanEqual(ndc.xy, vec2(1.0))) || ndc.z < 0.0 || ndc.z > 1.0) continue;
        // min: a coordinate just under 1 can round up to the edge
        uint x = min(uint((ndc.x * 0.5 + 0.5) * float(pc.width)), pc.width - 1u);
        uint y = min(uint((ndc.y * 0.5 + 0.5) * float(pc.height)), pc.height - 1u);
        float depth = max(p.w, 0.0);
        uint key = uint(255.0 * depth / (depth + pc.depth_half) + 0.5);
        uint at = 2u * (y * pc.width + x);
        atomicAdd(hdr[at], 1u);
        atomicAdd(hdr[at + 1u], key);
    }
}
