#version 450
// Draws particles by splatting: each particle projects to one pixel and adds 1 to its count.
// (A compute splat, not point-list rasterisation: see BENCHMARKS.md for the comparison.)
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer Pos { vec4 pos[]; };
layout(std430, set = 0, binding = 1) buffer Counts { uint counts[]; };
layout(push_constant) uniform Push {
    mat4 view_proj;
    uint count;
    uint width;
    uint height;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.count; i += stride) {
        vec4 clip = pc.view_proj * vec4(pos[i].xyz, 1.0);
        if (clip.w <= 0.0) continue;
        vec3 ndc = clip.xyz / clip.w;
        if (any(lessThan(ndc.xy, vec2(-1.0))) || any(greaterThanEqual(ndc.xy, vec2(1.0))) || ndc.z < 0.0 || ndc.z > 1.0) continue;
        uint x = uint((ndc.x * 0.5 + 0.5) * float(pc.width));
        uint y = uint((ndc.y * 0.5 + 0.5) * float(pc.height));
        atomicAdd(counts[y * pc.width + x], 1u);
    }
}
