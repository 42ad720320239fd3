// The particle field, WGSL compute (the path without CUDA): one step of the simulation, then a
// drawing into the storage image the sprite shows. `reference.rs` is the same arithmetic on the
// CPU (the tests compare them); `particles.cu` is the same step in CUDA.

struct Attractor {
    // xy: position; z: pull strength; w: swirl strength.
    pos_strength: vec4<f32>,
}

struct Params {
    count: u32,
    width: u32,
    height: u32,
    simulate: u32,
    dt: f32,
    damping: f32,
    aspect: f32,
    exposure: f32,
    attractors: array<Attractor, 3>,
}

struct Particle {
    pos: vec2<f32>,
    vel: vec2<f32>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> particles: array<Particle>;
// Two words per pixel: splat weight (1/256 units), weight × speed (1/256 units).
@group(0) @binding(2) var<storage, read_write> accum: array<atomic<u32>>;
@group(0) @binding(3) var output: texture_storage_2d<rgba8unorm, write>;

const SOFTENING: f32 = 0.02;
const SPEED_SCALE: f32 = 64.0;

@compute @workgroup_size(256)
fn simulate(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i >= params.count || params.simulate == 0u) {
        return;
    }
    var p = particles[i];
    var acc = vec2<f32>(0.0, 0.0);
    for (var a = 0u; a < 3u; a++) {
        let at = params.attractors[a].pos_strength;
        let d = at.xy - p.pos;
        let r2 = d.x * d.x + d.y * d.y + SOFTENING;
        let inv = 1.0 / sqrt(r2);
        let inv2 = inv * inv;
        acc += d * (at.z * inv2 * inv);
        acc += vec2<f32>(-d.y, d.x) * (at.w * inv2);
    }
    var vel = p.vel * params.damping + acc * params.dt;
    var pos = p.pos + vel * params.dt;
    // Soft walls: reflect, losing half the speed.
    if (pos.x > params.aspect) { pos.x = params.aspect; vel.x = -0.5 * vel.x; }
    if (pos.x < -params.aspect) { pos.x = -params.aspect; vel.x = -0.5 * vel.x; }
    if (pos.y > 1.0) { pos.y = 1.0; vel.y = -0.5 * vel.y; }
    if (pos.y < -1.0) { pos.y = -1.0; vel.y = -0.5 * vel.y; }
    particles[i] = Particle(pos, vel);
}

@compute @workgroup_size(8, 8)
fn clear(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x >= params.width || id.y >= params.height) {
        return;
    }
    let k = 2u * (id.y * params.width + id.x);
    atomicStore(&accum[k], 0u);
    atomicStore(&accum[k + 1u], 0u);
}

fn splat_at(x: i32, y: i32, w: f32, speed: f32) {
    if (x < 0 || y < 0 || x >= i32(params.width) || y >= i32(params.height)) {
        return;
    }
    let wq = u32(w * 256.0 + 0.5);
    if (wq == 0u) {
        return;
    }
    let k = 2u * (u32(y) * params.width + u32(x));
    atomicAdd(&accum[k], wq);
    atomicAdd(&accum[k + 1u], u32(f32(wq) * min(speed * SPEED_SCALE, 255.0) + 0.5));
}

@compute @workgroup_size(256)
fn splat(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i >= params.count) {
        return;
    }
    let p = particles[i];
    // Domain [-aspect, aspect] x [-1, 1] onto pixel centres, y down.
    let fx = (p.pos.x / params.aspect * 0.5 + 0.5) * f32(params.width) - 0.5;
    let fy = (0.5 - p.pos.y * 0.5) * f32(params.height) - 0.5;
    let x0 = floor(fx);
    let y0 = floor(fy);
    let tx = fx - x0;
    let ty = fy - y0;
    let speed = sqrt(p.vel.x * p.vel.x + p.vel.y * p.vel.y);
    let ix = i32(x0);
    let iy = i32(y0);
    splat_at(ix, iy, (1.0 - tx) * (1.0 - ty), speed);
    splat_at(ix + 1, iy, tx * (1.0 - ty), speed);
    splat_at(ix, iy + 1, (1.0 - tx) * ty, speed);
    splat_at(ix + 1, iy + 1, tx * ty, speed);
}

// Dark blue -> violet -> orange -> pale yellow by speed (0..1).
fn palette(s: f32) -> vec3<f32> {
    let c0 = vec3<f32>(0.10, 0.25, 0.95);
    let c1 = vec3<f32>(0.75, 0.20, 0.85);
    let c2 = vec3<f32>(1.00, 0.55, 0.15);
    let c3 = vec3<f32>(1.00, 0.95, 0.70);
    let t = clamp(s, 0.0, 1.0) * 3.0;
    if (t < 1.0) { return mix(c0, c1, t); }
    if (t < 2.0) { return mix(c1, c2, t - 1.0); }
    return mix(c2, c3, t - 2.0);
}

@compute @workgroup_size(8, 8)
fn resolve(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x >= params.width || id.y >= params.height) {
        return;
    }
    let k = 2u * (id.y * params.width + id.x);
    let wsum = atomicLoad(&accum[k]);
    let ssum = atomicLoad(&accum[k + 1u]);
    var rgb = vec3<f32>(0.0, 0.0, 0.0);
    if (wsum > 0u) {
        let density = f32(wsum) / 256.0;
        let speed = f32(ssum) / f32(wsum) / 255.0;
        let glow = 1.0 - exp(-density * params.exposure);
        // Dense cores burn towards white.
        let hot = glow * glow * glow * glow * 0.2;
        rgb = palette(speed) * glow + vec3<f32>(hot, hot, hot);
    }
    // A faint background so the frame is never pure black.
    rgb = max(rgb, vec3<f32>(0.003, 0.003, 0.008));
    textureStore(output, vec2<i32>(id.xy), vec4<f32>(rgb, 1.0));
}
