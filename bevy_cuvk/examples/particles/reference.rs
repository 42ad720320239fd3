//! The particle field's data and arithmetic on the CPU: the initial particles (both paths
//! start from them), the per-step parameters, and a reference of one step and of the drawing
//! (`particles.wgsl` does the same on the GPU; the tests compare them).

#![allow(dead_code)] // shared by the example and the tests, each using a part

use bytemuck::{Pod, Zeroable};

/// One particle, as the shaders and kernels see it (16 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct Particle {
    /// Position in [-aspect, aspect] x [-1, 1].
    pub pos: [f32; 2],
    /// Velocity per second.
    pub vel: [f32; 2],
}

/// The uniform block of `particles.wgsl` (80 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct Params {
    pub count: u32,
    pub width: u32,
    pub height: u32,
    /// 1 when this frame steps the simulation, 0 when it only draws.
    pub simulate: u32,
    pub dt: f32,
    pub damping: f32,
    pub aspect: f32,
    pub exposure: f32,
    /// xy: position; z: pull; w: swirl.
    pub attractors: [[f32; 4]; 3],
}

/// Seconds per step (a fixed step: the same frames for the same settings, whatever the fps).
pub const DT: f32 = 1.0 / 60.0;
pub const DAMPING: f32 = 0.996;
const SOFTENING: f32 = 0.02;
const SPEED_SCALE: f32 = 64.0;

/// The parameters of step `step` (0-based) for a `width` x `height` picture.
pub fn params(step: u32, count: u32, width: u32, height: u32, simulate: bool) -> Params {
    let aspect = width as f32 / height as f32;
    let t = step as f32 * DT;
    // Exposure so that a pixel reaches ~63% brightness at twice the mean density.
    let mean = count as f32 / (width as f32 * height as f32);
    let exposure = 1.0 / (2.0 * mean).max(0.05);
    Params {
        count,
        width,
        height,
        simulate: simulate as u32,
        dt: DT,
        damping: DAMPING,
        aspect,
        exposure,
        attractors: [
            [
                0.55 * aspect * (0.31 * t).sin(),
                0.45 * (0.43 * t + 1.0).sin(),
                0.9,
                0.35,
            ],
            [
                0.60 * aspect * (0.23 * t + 2.0).cos(),
                0.50 * (0.37 * t).sin(),
                0.7,
                -0.45,
            ],
            [
                0.35 * aspect * (0.19 * t + 4.0).sin(),
                0.60 * (0.29 * t + 2.2).cos(),
                0.6,
                0.25,
            ],
        ],
    }
}

/// A 32-bit integer hash (lowbias32).
fn hash(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

fn unit(x: u32) -> f32 {
    (hash(x) >> 8) as f32 / (1u32 << 24) as f32
}

/// The initial particles: a disc in orbit around the centre, with a little spread.
pub fn initial_particles(count: u32, aspect: f32, seed: u32) -> Vec<Particle> {
    (0..count)
        .map(|i| {
            let k = i
                .wrapping_mul(4)
                .wrapping_add(seed.wrapping_mul(0x9e37_79b9));
            let r = 0.15 + 0.75 * unit(k).sqrt();
            let theta = std::f32::consts::TAU * unit(k + 1);
            let (s, c) = theta.sin_cos();
            let orbit = 0.9 / r.sqrt();
            let jitter = 0.15 * (unit(k + 2) - 0.5);
            Particle {
                pos: [r * c * aspect.min(1.6), r * s],
                vel: [
                    -s * orbit + jitter,
                    c * orbit + jitter * (unit(k + 3) - 0.5),
                ],
            }
        })
        .collect()
}

/// One step of the simulation, as `simulate` in `particles.wgsl`.
pub fn step(particles: &mut [Particle], p: &Params) {
    for q in particles.iter_mut() {
        let mut acc = [0.0f32; 2];
        for a in &p.attractors {
            let d = [a[0] - q.pos[0], a[1] - q.pos[1]];
            let r2 = d[0] * d[0] + d[1] * d[1] + SOFTENING;
            let inv = 1.0 / r2.sqrt();
            let inv2 = inv * inv;
            let pull = a[2] * inv2 * inv;
            let swirl = a[3] * inv2;
            acc[0] += d[0] * pull;
            acc[1] += d[1] * pull;
            acc[0] += -d[1] * swirl;
            acc[1] += d[0] * swirl;
        }
        let mut vel = [
            q.vel[0] * p.damping + acc[0] * p.dt,
            q.vel[1] * p.damping + acc[1] * p.dt,
        ];
        let mut pos = [q.pos[0] + vel[0] * p.dt, q.pos[1] + vel[1] * p.dt];
        if pos[0] > p.aspect {
            pos[0] = p.aspect;
            vel[0] *= -0.5;
        }
        if pos[0] < -p.aspect {
            pos[0] = -p.aspect;
            vel[0] *= -0.5;
        }
        if pos[1] > 1.0 {
            pos[1] = 1.0;
            vel[1] *= -0.5;
        }
        if pos[1] < -1.0 {
            pos[1] = -1.0;
            vel[1] *= -0.5;
        }
        *q = Particle { pos, vel };
    }
}

fn palette(s: f32) -> [f32; 3] {
    const C: [[f32; 3]; 4] = [
        [0.10, 0.25, 0.95],
        [0.75, 0.20, 0.85],
        [1.00, 0.55, 0.15],
        [1.00, 0.95, 0.70],
    ];
    let t = s.clamp(0.0, 1.0) * 3.0;
    let (a, b, f) = if t < 1.0 {
        (C[0], C[1], t)
    } else if t < 2.0 {
        (C[1], C[2], t - 1.0)
    } else {
        (C[2], C[3], t - 2.0)
    };
    [
        a[0] + (b[0] - a[0]) * f,
        a[1] + (b[1] - a[1]) * f,
        a[2] + (b[2] - a[2]) * f,
    ]
}

/// The picture (RGBA8, rows top to bottom), as `clear`, `splat` and `resolve` draw it.
pub fn draw(particles: &[Particle], p: &Params) -> Vec<u8> {
    let (w, h) = (p.width as usize, p.height as usize);
    let mut accum = vec![0u32; 2 * w * h];
    for q in particles {
        let fx = (q.pos[0] / p.aspect * 0.5 + 0.5) * p.width as f32 - 0.5;
        let fy = (0.5 - q.pos[1] * 0.5) * p.height as f32 - 0.5;
        let (x0, y0) = (fx.floor(), fy.floor());
        let (tx, ty) = (fx - x0, fy - y0);
        let speed = (q.vel[0] * q.vel[0] + q.vel[1] * q.vel[1]).sqrt();
        let (ix, iy) = (x0 as i32, y0 as i32);
        for (x, y, wt) in [
            (ix, iy, (1.0 - tx) * (1.0 - ty)),
            (ix + 1, iy, tx * (1.0 - ty)),
            (ix, iy + 1, (1.0 - tx) * ty),
            (ix + 1, iy + 1, tx * ty),
        ] {
            if x < 0 || y < 0 || x >= w as i32 || y >= h as i32 {
                continue;
            }
            let wq = (wt * 256.0 + 0.5) as u32;
            if wq == 0 {
                continue;
            }
            let k = 2 * (y as usize * w + x as usize);
            accum[k] = accum[k].wrapping_add(wq);
            accum[k + 1] = accum[k + 1]
                .wrapping_add((wq as f32 * (speed * SPEED_SCALE).min(255.0) + 0.5) as u32);
        }
    }
    let mut out = Vec::with_capacity(4 * w * h);
    for px in accum.chunks_exact(2) {
        let mut rgb = [0.0f32; 3];
        if px[0] > 0 {
            let density = px[0] as f32 / 256.0;
            let speed = px[1] as f32 / px[0] as f32 / 255.0;
            let glow = 1.0 - (-density * p.exposure).exp();
            let c = palette(speed);
            let hot = glow * glow * glow * glow * 0.2;
            rgb = [c[0] * glow + hot, c[1] * glow + hot, c[2] * glow + hot];
        }
        let floor = [0.003, 0.003, 0.008];
        for (c, f) in rgb.iter().zip(floor) {
            out.push((c.max(f).clamp(0.0, 1.0) * 255.0).round() as u8);
        }
        out.push(255);
    }
    out
}
