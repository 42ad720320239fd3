//! The particle simulation's parameters, its deterministic initial state, a CPU reference step
//! (the same formula as shaders/particles.cu and shaders/sim.comp), and the camera. Shared by
//! the particle demos (`examples/particles`, `examples/wgpu_particles`), `bench_draw` and the
//! tests, which predict where particles land in the PNG.

/// Simulation constants; the layout matches `Params` in particles.cu and sim.comp.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Params {
    pub count: u32,
    pub dt: f32,
    pub g: f32,
    pub softening: f32,
    pub swirl: f32,
    pub damping: f32,
    pub pad: [f32; 2],
}

// SAFETY: plain #[repr(C)] floats and integers, passed by value to the CUDA kernel.
unsafe impl cuvk::cudarc::driver::DeviceRepr for Params {}

impl Params {
    pub fn new(count: u32) -> Self {
        Self {
            count,
            dt: 0.004,
            g: 1.0,
            softening: 0.05,
            swirl: 0.35,
            damping: 0.9995,
            pad: [0.0; 2],
        }
    }

    /// These parameters, or (paused) a step that leaves every particle exactly where it is:
    /// dt = 0 and damping = 1 copy position and velocity unchanged.
    pub fn for_frame(self, simulate: bool) -> Self {
        if simulate {
            self
        } else {
            Self {
                dt: 0.0,
                damping: 1.0,
                ..self
            }
        }
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn unit(state: &mut u64) -> f32 {
    (splitmix(state) >> 40) as f32 / (1u64 << 24) as f32
}

/// Positions and velocities for `count` particles from `seed`: a thick disc in near-circular
/// orbits, the same on every machine.
pub fn initial_state(count: usize, seed: u64) -> (Vec<[f32; 4]>, Vec<[f32; 4]>) {
    let mut s = seed ^ 0x5eed_0fc0_ffee;
    let mut pos = Vec::with_capacity(count);
    let mut vel = Vec::with_capacity(count);
    for _ in 0..count {
        let r = 0.3 + 1.2 * unit(&mut s).sqrt();
        let a = unit(&mut s) * std::f32::consts::TAU;
        let h = (unit(&mut s) - 0.5) * 0.15;
        let (x, y) = (r * a.cos(), r * a.sin());
        // Circular speed for the softened central force, slightly perturbed.
        let v = (1.0 / (r * r + 0.05).sqrt()).sqrt() * (0.9 + 0.2 * unit(&mut s));
        pos.push([x, y, h, 0.0]);
        vel.push([-v * a.sin(), v * a.cos(), 0.0, 0.0]);
    }
    (pos, vel)
}

/// One step on the CPU, operation for operation as the GPU versions (no fused multiply-add).
pub fn step_cpu(p: &Params, pos: &mut [[f32; 4]], vel: &mut [[f32; 4]]) {
    for (q, v) in pos.iter_mut().zip(vel.iter_mut()) {
        let r2 = q[0] * q[0] + q[1] * q[1] + q[2] * q[2];
        let d = r2 + p.softening;
        let inv = 1.0 / (d * d.sqrt());
        let k = -p.g * inv;
        let ax = k * q[0] + (-p.swirl) * q[1];
        let ay = k * q[1] + p.swirl * q[0];
        let az = k * q[2];
        v[0] = v[0] * p.damping + ax * p.dt;
        v[1] = v[1] * p.damping + ay * p.dt;
        v[2] = v[2] * p.damping + az * p.dt;
        q[0] += v[0] * p.dt;
        q[1] += v[1] * p.dt;
        q[2] += v[2] * p.dt;
    }
}

/// An orbiting camera looking at the origin.
#[derive(Clone, Copy, Debug)]
pub struct Camera {
    pub yaw: f32,
    pub pitch: f32,
    pub distance: f32,
}

impl Default for Camera {
    fn default() -> Self {
        Self {
            yaw: 0.4,
            pitch: 0.9,
            distance: 4.0,
        }
    }
}

type Mat4 = [[f32; 4]; 4]; // column-major: m[col][row], as GLSL reads it

fn mul(a: &Mat4, b: &Mat4) -> Mat4 {
    let mut m = [[0.0; 4]; 4];
    for c in 0..4 {
        for r in 0..4 {
            m[c][r] = (0..4).map(|k| a[k][r] * b[c][k]).sum();
        }
    }
    m
}

impl Camera {
    /// View-projection matrix (Vulkan clip space: depth 0..1, y down) for `aspect`.
    pub fn view_proj(&self, aspect: f32) -> Mat4 {
        let eye = [
            self.distance * self.pitch.cos() * self.yaw.sin(),
            -self.distance * self.pitch.sin(),
            self.distance * self.pitch.cos() * self.yaw.cos(),
        ];
        let norm = |v: [f32; 3]| {
            let l = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
            [v[0] / l, v[1] / l, v[2] / l]
        };
        let cross = |a: [f32; 3], b: [f32; 3]| {
            [
                a[1] * b[2] - a[2] * b[1],
                a[2] * b[0] - a[0] * b[2],
                a[0] * b[1] - a[1] * b[0],
            ]
        };
        let dot = |a: [f32; 3], b: [f32; 3]| a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
        let f = norm([-eye[0], -eye[1], -eye[2]]);
        let s = norm(cross(f, [0.0, 0.0, 1.0]));
        let u = cross(s, f);
        let view: Mat4 = [
            [s[0], u[0], -f[0], 0.0],
            [s[1], u[1], -f[1], 0.0],
            [s[2], u[2], -f[2], 0.0],
            [-dot(s, eye), -dot(u, eye), dot(f, eye), 1.0],
        ];
        let (near, far, fov) = (0.05f32, 100.0f32, 50f32.to_radians());
        let t = 1.0 / (fov / 2.0).tan();
        let proj: Mat4 = [
            [t / aspect, 0.0, 0.0, 0.0],
            [0.0, -t, 0.0, 0.0],
            [0.0, 0.0, far / (near - far), -1.0],
            [0.0, 0.0, near * far / (near - far), 0.0],
        ];
        mul(&proj, &view)
    }
}

/// The pixel a particle lands on, as splat.comp computes it, or None when off-screen.
pub fn project(vp: &Mat4, p: [f32; 4], width: u32, height: u32) -> Option<(u32, u32)> {
    let clip: Vec<f32> = (0..4)
        .map(|r| vp[0][r] * p[0] + vp[1][r] * p[1] + vp[2][r] * p[2] + vp[3][r])
        .collect();
    if clip[3] <= 0.0 {
        return None;
    }
    let (x, y, z) = (clip[0] / clip[3], clip[1] / clip[3], clip[2] / clip[3]);
    if !(-1.0..1.0).contains(&x) || !(-1.0..1.0).contains(&y) || !(0.0..=1.0).contains(&z) {
        return None;
    }
    Some((
        ((x * 0.5 + 0.5) * width as f32) as u32,
        ((y * 0.5 + 0.5) * height as f32) as u32,
    ))
}
