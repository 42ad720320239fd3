// The viewer of a publisher in another process (`--view NAME`): the publisher's particles
// (rows x, y, z, key, in one of its slots, read where they lie) drawn as `particles --view`
// draws them, in WGSL: a splat of each particle into one pixel's counts, then a resolve into
// the image the sprite shows — the pixel's mean key through the galaxies' palette, its count
// compressed (square root), a dark sky, a vignette, ACES filmic tone map. The image is linear
// half floats (Rgba16Float: 8 bits would band the dark sky): Bevy's output encodes it to
// sRGB, so no gamma here.

struct Params {
    view_proj: mat4x4<f32>,
    count: u32,
    width: u32,
    height: u32,
    // Scales the counts before they are compressed.
    exposure: f32,
    // The key (w) that gets the middle of the palette.
    depth_half: f32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> positions: array<vec4<f32>>;
// Two words per pixel: particles, sum of their keys (0..255 each).
@group(0) @binding(2) var<storage, read_write> counts: array<atomic<u32>>;
@group(0) @binding(3) var output: texture_storage_2d<rgba16float, write>;

@compute @workgroup_size(256)
fn splat(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * 256u;
    for (var i = id.x; i < params.count; i += stride) {
        let p = positions[i];
        let clip = params.view_proj * vec4<f32>(p.xyz, 1.0);
        if (clip.w <= 0.0) {
            continue;
        }
        let ndc = clip.xyz / clip.w;
        if (ndc.x < -1.0 || ndc.x >= 1.0 || ndc.y <= -1.0 || ndc.y > 1.0 || ndc.z < 0.0 || ndc.z > 1.0) {
            continue;
        }
        // Rows go down the image, y up on screen.
        let x = min(u32((ndc.x * 0.5 + 0.5) * f32(params.width)), params.width - 1u);
        let y = min(u32((0.5 - ndc.y * 0.5) * f32(params.height)), params.height - 1u);
        let depth = max(p.w, 0.0);
        let key = u32(255.0 * depth / (depth + params.depth_half) + 0.5);
        let at = 2u * (y * params.width + x);
        atomicAdd(&counts[at], 1u);
        atomicAdd(&counts[at + 1u], key);
    }
}

// Magenta and orange tails, gold discs, blue-white cores (as particles_resolve.comp).
fn palette(t: f32) -> vec3<f32> {
    var stops = array<vec3<f32>, 5>(
        vec3<f32>(0.80, 0.16, 0.62),
        vec3<f32>(1.00, 0.38, 0.10),
        vec3<f32>(1.00, 0.74, 0.36),
        vec3<f32>(0.70, 0.82, 1.00),
        vec3<f32>(0.40, 0.55, 1.00),
    );
    let x = clamp(t, 0.0, 1.0) * 4.0;
    let i = min(u32(x), 3u);
    return mix(stops[i], stops[i + 1u], x - f32(i));
}

fn aces(x: vec3<f32>) -> vec3<f32> {
    return clamp((x * (2.51 * x + 0.03)) / (x * (2.43 * x + 0.59) + 0.14), vec3<f32>(0.0), vec3<f32>(1.0));
}

// One pixel: its colour from the counts (cleared for the next frame), into the image.
@compute @workgroup_size(8, 8)
fn resolve(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x >= params.width || id.y >= params.height) {
        return;
    }
    let i = 2u * (id.y * params.width + id.x);
    let n = atomicLoad(&counts[i]);
    let keys = atomicLoad(&counts[i + 1u]);
    atomicStore(&counts[i], 0u);
    atomicStore(&counts[i + 1u], 0u);
    let v = f32(id.y) / f32(params.height);
    var colour = mix(vec3<f32>(0.012, 0.016, 0.040), vec3<f32>(0.003, 0.004, 0.012), v);
    if (n > 0u) {
        colour += sqrt(f32(n) * params.exposure) * palette(f32(keys) / (255.0 * f32(n)));
    }
    let uv = vec2<f32>(f32(id.x) / f32(params.width), v) - 0.5;
    colour *= 1.0 - 0.6 * dot(uv, uv);
    textureStore(output, vec2<i32>(id.xy), vec4<f32>(aces(colour * 1.4), 1.0));
}
