#version 450
// Draws the fluid demo's dye: samples the dye image (bilinear, through a sampler) for each
// output pixel, shades it by the dye's slope so filaments read as relief, tone-maps
// (1 - exp(-exposure * dye)), encodes for display and packs RGBA8 (R in the low byte).
layout(local_size_x = 16, local_size_y = 16) in;

layout(set = 0, binding = 0) uniform sampler2D dye;
layout(std430, set = 0, binding = 1) writeonly buffer Pixels { uint pixels[]; };
layout(push_constant) uniform Push {
    uint width;      // output pixels
    uint height;
    uint bgra;       // 1: pack for a B8G8R8A8 target (swapchains that lack R8G8B8A8)
    float exposure;
    vec2 uv_scale;   // output uv -> dye uv (the dye covers the output, cropped to its aspect)
    vec2 uv_offset;
} pc;

float hash(uvec2 p) {
    uint h = p.x * 1664525u + p.y * 1013904223u;
    h ^= h >> 16;
    h *= 2246822519u;
    h ^= h >> 13;
    return float(h & 0xffffu) / 65535.0;
}

void main() {
    uvec2 px = gl_GlobalInvocationID.xy;
    if (px.x >= pc.width || px.y >= pc.height) return;
    vec2 uv = (vec2(px) + 0.5) / vec2(pc.width, pc.height) * pc.uv_scale + pc.uv_offset;
    vec2 texel = 1.0 / vec2(textureSize(dye, 0));
    vec3 c = max(texture(dye, uv).rgb, vec3(0.0));

    // Relief: a normal from the dye's brightness gradient, lit from above-left.
    float l = length(texture(dye, uv - vec2(texel.x, 0.0)).rgb);
    float r = length(texture(dye, uv + vec2(texel.x, 0.0)).rgb);
    float b = length(texture(dye, uv - vec2(0.0, texel.y)).rgb);
    float t = length(texture(dye, uv + vec2(0.0, texel.y)).rgb);
    vec3 n = normalize(vec3(l - r, b - t, 0.08));
    float light = clamp(dot(n, normalize(vec3(-0.4, -0.5, 1.0))) + 0.25, 0.55, 1.15);

    // Tone mapping: mostly hue-preserving (dense dye stays its colour), a little per channel
    // (the densest cores glow towards white).
    vec3 e = c * pc.exposure * light;
    float m = max(e.r, max(e.g, e.b));
    vec3 keep_hue = e / max(m, 1e-6) * (1.0 - exp(-m));
    vec3 mapped = mix(keep_hue, vec3(1.0) - exp(-e), 0.12);
    vec3 rgb = pow(clamp(mapped, 0.0, 1.0), vec3(1.0 / 2.2));
    // Encoding for display pales colours; give them back some saturation.
    float grey = dot(rgb, vec3(0.2126, 0.7152, 0.0722));
    rgb = clamp(mix(vec3(grey), rgb, 1.35), 0.0, 1.0);
    // A deep blue-black background with a soft vignette where there is no dye.
    vec2 d = uv - 0.5;
    vec3 bg = vec3(0.030, 0.036, 0.070) * (1.0 - 1.2 * dot(d, d));
    float cover = max(rgb.r, max(rgb.g, rgb.b));
    rgb += bg * (1.0 - cover);
    rgb += (hash(px) - 0.5) / 255.0;

    uvec3 q = uvec3(clamp(rgb, 0.0, 1.0) * 255.0 + 0.5);
    if (pc.bgra != 0u) q = q.bgr;
    pixels[px.y * pc.width + px.x] = q.r | (q.g << 8) | (q.b << 16) | (255u << 24);
}
