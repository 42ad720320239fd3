#version 450
// Turns per-pixel particle counts into RGBA8 pixels (packed little-endian: R in the low byte),
// and clears the counts for the next frame.
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) buffer Counts { uint counts[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Pixels { uint pixels[]; };
layout(push_constant) uniform Push {
    uint pixel_count;
    float exposure;
    uint bgra;  // 1: pack for a B8G8R8A8 target (swapchains that lack R8G8B8A8)
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.pixel_count; i += stride) {
        float c = float(counts[i]);
        counts[i] = 0u;
        float t = 1.0 - exp(-c * pc.exposure);
        vec3 rgb = vec3(0.02, 0.02, 0.05) + t * vec3(1.0, 0.55 + 0.4 * t, 0.2 + 0.8 * t * t);
        uvec3 b = uvec3(clamp(rgb, 0.0, 1.0) * 255.0 + 0.5);
        if (pc.bgra != 0u) b = b.bgr;
        pixels[i] = b.r | (b.g << 8) | (b.b << 16) | (255u << 24);
    }
}
