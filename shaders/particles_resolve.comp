#version 450
// Turns the splat's per-pixel counts (particles_splat.comp) into the picture, in four passes
// of this one shader (push constant `pass`), each over its own output:
//   0  glow, downsample: each glow texel (`glow_scale` pixels each way, 90 texels down the
//      picture whatever its size) gets the mean HDR colour of its pixels;
//   1  glow, horizontal Gaussian blur: glow0 -> glow1;
//   2  glow, vertical Gaussian blur:   glow1 -> glow0;
//   3  composite: HDR colour + glow + a star field, ACES filmic tone map, vignette, gamma;
//      packed RGBA8 (little-endian: R in the low byte); clears the counts for the next frame.
// Blurring a small image keeps the glow cheap and the same size in the picture at any
// resolution: the particles cost one splat, everything after it costs per pixel or less.
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) buffer Hdr { uint hdr[]; }; // per pixel: particles, Σ key
layout(std430, set = 0, binding = 1) buffer Glow0 { vec4 glow0[]; };
layout(std430, set = 0, binding = 2) buffer Glow1 { vec4 glow1[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Pixels { uint pixels[]; };
layout(push_constant) uniform Push {
    uint pass;
    uint width;        // picture, pixels
    uint height;
    uint glow_scale;   // pixels per glow texel, each way
    uint glow_width;   // glow texels: width / glow_scale, height / glow_scale, rounded up
    uint glow_height;
    float exposure;    // scales the counts before they are compressed
    float glow;        // how much of the glow is added
    uint bgra;         // 1: pack for a B8G8R8A8 target (swapchains that lack R8G8B8A8)
    uint pad0, pad1, pad2;
    vec4 right;        // view ray = forward + x * right + y * up, for x, y in -1..1 (y up)
    vec4 up;
    vec4 forward;      // w: the view angle of one pixel (the stars' size)
} pc;

const int BLUR_RADIUS = 6;
const float BLUR_SIGMA = 2.5;
// Gaussian weights for offsets 0..BLUR_RADIUS, folded into constants by the compiler
// (unnormalised: blur() divides by their sum).
#define GAUSS(k) exp(-float((k) * (k)) / (2.0 * BLUR_SIGMA * BLUR_SIGMA))
const float BLUR_WEIGHT[BLUR_RADIUS + 1] =
    float[](GAUSS(0), GAUSS(1), GAUSS(2), GAUSS(3), GAUSS(4), GAUSS(5), GAUSS(6));

// The colour of a population of particles by its mean key (0: shallow in the galaxies'
// potential, out in a tidal tail; 1: deep in a core): magenta and orange tails, gold discs,
// blue-white cores.
vec3 palette(float t) {
    const vec3 stops[5] = vec3[5](
        vec3(0.80, 0.16, 0.62),
        vec3(1.00, 0.38, 0.10),
        vec3(1.00, 0.74, 0.36),
        vec3(0.70, 0.82, 1.00),
        vec3(0.40, 0.55, 1.00));
    float x = clamp(t, 0.0, 1.0) * 4.0;
    uint i = min(uint(x), 3u);
    return mix(stops[i], stops[i + 1u], x - float(i));
}

// HDR colour of pixel `i`: its particles, coloured by their mean key. The count is compressed
// (square root) so that a core a thousand times denser than a tail is not a thousand times
// brighter: the tone map can then keep both.
vec3 hdr_colour(uint i) {
    uint n = hdr[2u * i];
    if (n == 0u) return vec3(0.0);
    float key = float(hdr[2u * i + 1u]) / (255.0 * float(n));
    return sqrt(float(n) * pc.exposure) * palette(key);
}

void downsample(uint g) {
    uint gx = g % pc.glow_width, gy = g / pc.glow_width;
    vec3 sum = vec3(0.0);
    uint s = pc.glow_scale;
    for (uint y = gy * s; y < min((gy + 1u) * s, pc.height); ++y) {
        for (uint x = gx * s; x < min((gx + 1u) * s, pc.width); ++x) {
            sum += hdr_colour(y * pc.width + x);
        }
    }
    glow0[g] = vec4(sum / float(s * s), 0.0);
}

// One direction of the separable Gaussian: `dir` is (1, 0) or (0, 1), edges clamped.
vec3 blur(uint g, ivec2 dir, bool from_glow0) {
    ivec2 at = ivec2(g % pc.glow_width, g / pc.glow_width);
    ivec2 last = ivec2(pc.glow_width, pc.glow_height) - 1;
    vec3 sum = vec3(0.0);
    float total = 0.0;
    for (int k = -BLUR_RADIUS; k <= BLUR_RADIUS; ++k) {
        ivec2 p = clamp(at + k * dir, ivec2(0), last);
        uint j = uint(p.y) * pc.glow_width + uint(p.x);
        float w = BLUR_WEIGHT[abs(k)];
        sum += w * (from_glow0 ? glow0[j].rgb : glow1[j].rgb);
        total += w;
    }
    return sum / total;
}

// The blurred glow at pixel (x, y), bilinear between glow texel centres.
vec3 glow_at(uint x, uint y) {
    vec2 g = (vec2(x, y) + 0.5) / float(pc.glow_scale) - 0.5;
    vec2 last = vec2(pc.glow_width, pc.glow_height) - 1.0;
    vec2 lo = clamp(floor(g), vec2(0.0), last);
    vec2 f = clamp(g - lo, 0.0, 1.0);
    uvec2 a = uvec2(lo), b = uvec2(min(lo + 1.0, last));
    vec3 top = mix(glow0[a.y * pc.glow_width + a.x].rgb, glow0[a.y * pc.glow_width + b.x].rgb, f.x);
    vec3 bottom = mix(glow0[b.y * pc.glow_width + a.x].rgb, glow0[b.y * pc.glow_width + b.x].rgb, f.x);
    return mix(top, bottom, f.y);
}

uint hash(uint x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

// Faint stars fixed on the sky (they turn with the camera): the view ray's cube-map face is cut
// into cells, a quarter of which hold a star at a random place, brightness and tint.
vec3 stars(vec3 dir) {
    const float CELLS = 90.0; // per face side
    vec3 a = abs(dir);
    vec2 uv;
    uint face;
    if (a.x >= a.y && a.x >= a.z) {
        uv = dir.yz / a.x;
        face = dir.x > 0.0 ? 0u : 1u;
    } else if (a.y >= a.z) {
        uv = dir.xz / a.y;
        face = dir.y > 0.0 ? 2u : 3u;
    } else {
        uv = dir.xy / a.z;
        face = dir.z > 0.0 ? 4u : 5u;
    }
    vec2 g = (uv * 0.5 + 0.5) * CELLS;
    uvec2 cell = uvec2(floor(g));
    uint h = hash(cell.x + 1000u * (cell.y + 1000u * face));
    if ((h & 3u) != 0u) return vec3(0.0);
    vec2 centre = vec2(cell) + 0.2 + 0.6 * vec2((h >> 8) & 255u, (h >> 16) & 255u) / 255.0;
    float pixels = length(g - centre) * (2.0 / CELLS) / pc.forward.w;
    float r = float(hash(h) & 1023u) / 1023.0;
    // Mostly faint, none brighter than a sparse tail: the galaxies are the picture.
    float brightness = 0.03 * r * r * r * r + 0.004;
    vec3 tint = mix(vec3(1.0, 0.85, 0.7), vec3(0.75, 0.85, 1.0), float(h >> 24) / 255.0);
    return tint * brightness * exp(-2.0 * pixels * pixels);
}

// ACES filmic tone map (Narkowicz's fit): HDR -> 0..1 with a soft shoulder for the cores.
vec3 aces(vec3 x) {
    return clamp((x * (2.51 * x + 0.03)) / (x * (2.43 * x + 0.59) + 0.14), 0.0, 1.0);
}

void composite(uint i) {
    uint x = i % pc.width, y = i / pc.width;
    vec3 c = hdr_colour(i) + pc.glow * glow_at(x, y);
    hdr[2u * i] = 0u;
    hdr[2u * i + 1u] = 0u;
    vec2 ndc = (vec2(x, y) + 0.5) / vec2(pc.width, pc.height) * 2.0 - 1.0;
    vec3 ray = normalize(pc.forward.xyz + ndc.x * pc.right.xyz - ndc.y * pc.up.xyz);
    c += stars(ray) + vec3(0.002, 0.003, 0.008);
    c *= 1.0 - 0.15 * dot(ndc, ndc); // vignette
    vec3 rgb = pow(aces(c), vec3(1.0 / 2.2));
    uvec3 b = uvec3(rgb * 255.0 + 0.5);
    if (pc.bgra != 0u) b = b.bgr;
    pixels[i] = b.r | (b.g << 8) | (b.b << 16) | (255u << 24);
}

void main() {
    bool picture = pc.pass == 3u;
    uint n = picture ? pc.width * pc.height : pc.glow_width * pc.glow_height;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < n; i += stride) {
        if (pc.pass == 0u) {
            downsample(i);
        } else if (pc.pass == 1u) {
            glow1[i] = vec4(blur(i, ivec2(1, 0), true), 0.0);
        } else if (pc.pass == 2u) {
            glow0[i] = vec4(blur(i, ivec2(0, 1), false), 0.0);
        } else {
            composite(i);
        }
    }
}
