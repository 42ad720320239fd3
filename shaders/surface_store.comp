#version 450
// The Vulkan side of bench_surface: writes images.cu's pattern (word 0 of each texel) into an
// RGBA8 storage image with imageStore, one invocation per texel, as surface_write_pattern
// writes it through an inline surface handle. Both must leave the same bytes.
layout(local_size_x = 16, local_size_y = 16) in;

layout(set = 0, binding = 0, rgba8) uniform writeonly image2D img;
layout(push_constant) uniform Push {
    uint width;
    uint height;
    uint seed;
} pc;

uint pattern_word(uint i, uint w, uint seed) {
    uint h = (i * 4u + w) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return h;
}

void main() {
    uvec2 p = gl_GlobalInvocationID.xy;
    if (p.x >= pc.width || p.y >= pc.height) return;
    uint i = p.y * pc.width + p.x;
    imageStore(img, ivec2(p), unpackUnorm4x8(pattern_word(i, 0u, pc.seed)));
}
