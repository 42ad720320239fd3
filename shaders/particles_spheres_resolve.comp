#version 450
// Turns the opaque mode's packed samples (particles_spheres.comp: depth key high, RGBA8 low,
// u64::MAX where nothing was drawn) into the picture — the colour where a sphere was drawn, a
// dark blue gradient elsewhere — and clears the samples for the next frame. A composite of
// several GPUs' samples (ncclMin) resolves the same way.
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) buffer Depth { uint64_t samples[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Pixels { uint pixels[]; };
layout(push_constant) uniform Push {
    uint width;
    uint height;
    uint bgra;   // 1: pack for a B8G8R8A8 target
    uint clear;  // 1: reset the samples to empty after reading them
} pc;

void resolve(uint i) {
    uint64_t s = samples[i];
    vec3 c;
    if (s == 0xFFFFFFFFFFFFFFFFul) {
        float y = float(i / pc.width) / float(pc.height);
        c = mix(vec3(0.035, 0.045, 0.09), vec3(0.01, 0.012, 0.03), y);
    } else {
        uint rgba = uint(s & 0xFFFFFFFFul);
        c = vec3(rgba & 255u, (rgba >> 8) & 255u, (rgba >> 16) & 255u) / 255.0;
    }
    if (pc.clear != 0u) samples[i] = 0xFFFFFFFFFFFFFFFFul;
    uvec3 b = uvec3(clamp(c, 0.0, 1.0) * 255.0 + 0.5);
    if (pc.bgra != 0u) b = b.bgr;
    pixels[i] = b.r | (b.g << 8) | (b.b << 16) | (255u << 24);
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.width * pc.height; i += stride) {
        resolve(i);
    }
}
