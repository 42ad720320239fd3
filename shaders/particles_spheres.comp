#version 450
// Draws particles as opaque, lit spheres (issue 38: the depth-composited mode). Each particle
// projects to a small screen disc; every pixel of the disc gets the sphere's surface depth and
// shaded colour, packed into one 64-bit value — the depth as an order-preserving key in the
// high 32 bits, RGBA8 in the low 32 (src/rules/composite.rs) — and kept with a 64-bit
// atomicMin. The nearest surface wins whatever the order; so does the composite of several
// GPUs' pictures (ncclMin on ncclUint64), bit for bit. particles_spheres_resolve.comp turns
// the packed values into pixels.
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_atomic_int64 : require
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer Pos { vec4 pos[]; };
layout(std430, set = 0, binding = 1) buffer Depth { uint64_t samples[]; }; // per pixel
layout(push_constant) uniform Push {
    mat4 view_proj;
    uint count;
    uint width;
    uint height;
    float radius;     // world units
    uint first;       // particles [first, count) are drawn (a rank's share)
    float focal;      // pixels per world unit at depth 1 (height / (2 tan(fov / 2)))
    float depth_scale; // far / (far - near): clip z per unit towards the eye, per unit of clip w
} pc;

// The order-preserving key of a float (composite.rs `depth_key`).
uint depth_key(float d) {
    uint b = floatBitsToUint(d);
    return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}

// The colour key's palette (as the glow mode's): magenta, orange, gold, pale blue, blue.
vec3 palette(float k) {
    vec3 c0 = vec3(0.85, 0.20, 0.55), c1 = vec3(1.00, 0.55, 0.20), c2 = vec3(1.00, 0.82, 0.35);
    vec3 c3 = vec3(0.65, 0.80, 1.00), c4 = vec3(0.30, 0.45, 1.00);
    k = clamp(k, 0.0, 1.0) * 4.0;
    if (k < 1.0) return mix(c0, c1, k);
    if (k < 2.0) return mix(c1, c2, k - 1.0);
    if (k < 3.0) return mix(c2, c3, k - 2.0);
    return mix(c3, c4, k - 3.0);
}

const vec3 LIGHT = normalize(vec3(-0.4, 0.7, 0.6));
const int MAX_R = 8; // pixels: a nearer sphere is drawn at this size (a cap keeps the cost bounded)

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = pc.first + gl_GlobalInvocationID.x; i < pc.count; i += stride) {
        vec4 p = pos[i];
        vec4 clip = pc.view_proj * vec4(p.xyz, 1.0);
        // Written so that a NaN fails every test: such a particle is skipped.
        if (!(clip.w > pc.radius)) continue;
        vec3 ndc = clip.xyz / clip.w;
        if (!(ndc.z >= 0.0 && ndc.z <= 1.0)) continue;
        vec2 centre = (ndc.xy * 0.5 + 0.5) * vec2(pc.width, pc.height);
        if (!(abs(centre.x) < 1.0e6 && abs(centre.y) < 1.0e6)) continue;
        // At least the pixels around the centre: a distant sphere never vanishes.
        float r = clamp(pc.radius * pc.focal / clip.w, 0.71, float(MAX_R));
        int ri = int(ceil(r));
        float key = max(p.w, 0.0) / (max(p.w, 0.0) + 1.0);
        vec3 base = palette(key);
        for (int dy = -ri; dy <= ri; dy++) {
            for (int dx = -ri; dx <= ri; dx++) {
                vec2 px = floor(centre) + vec2(dx, dy) + 0.5;
                if (!(px.x >= 0.0 && px.y >= 0.0 && px.x < float(pc.width) && px.y < float(pc.height))) continue;
                vec2 o = (px - centre) / r;
                float rr = dot(o, o);
                if (rr > 1.0) continue;
                // The sphere's surface there: its normal, and its depth — the centre's, moved
                // towards the eye by n.z radii, through the projection.
                vec3 n = vec3(o.x, -o.y, sqrt(1.0 - rr));
                float dw = n.z * pc.radius;
                float depth = (clip.z - dw * pc.depth_scale) / (clip.w - dw);
                float diffuse = max(dot(n, LIGHT), 0.0);
                float rim = pow(1.0 - n.z, 3.0);
                vec3 colour = base * (0.18 + 0.82 * diffuse) + vec3(0.25) * rim;
                uvec4 c = uvec4(clamp(colour, 0.0, 1.0) * 255.0 + 0.5, 255u);
                uint rgba = c.r | (c.g << 8) | (c.b << 16) | (c.a << 24);
                uint64_t sample_ = (uint64_t(depth_key(depth)) << 32) | uint64_t(rgba);
                uint at = uint(px.y) * pc.width + uint(px.x);
                // The kept value only ever falls: one seen at or below ours (even a stale one)
                // means ours cannot win, and the atomic is skipped. In a dense core most
                // spheres are behind, and their atomics would queue on the same pixels.
                if (samples[at] <= sample_) continue;
                atomicMin(samples[at], sample_);
            }
        }
    }
}
