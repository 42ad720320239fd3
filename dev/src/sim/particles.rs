//! The particle demos' scene: two disc galaxies colliding, in the restricted three-body style of
//! Toomre & Toomre (1972). Its parameters, its deterministic initial state, a CPU reference step
//! (the same formula as shaders/particles.cu and shaders/sim.comp) and the cameras. Shared by
//! the particle demos (`examples/particles`, `examples/wgpu_particles`), `bench_draw`, the
//! Python renderer (its camera) and the tests, which predict where particles land in the PNG.
//!
//! Particles 0 and 1 are the galaxies' cores: the only masses. Every other particle is a
//! massless star pulled by both cores; each core is pulled by the other. So one step stays
//! O(1) per particle and needs nothing but the previous state: the cores' orbit is integrated
//! by the same step as the stars, identically on every path (CUDA, Vulkan, CPU).
//!
//! Layout per particle: `pos = (x, y, z, depth)`, `vel = (vx, vy, vz, 0)`. `depth` is written
//! by each step: the depth of the particle in the cores' potential, Σ G·M/√(r² + ε²), which the
//! renderer colours by (deep: in a galaxy's core; shallow: out in a tidal tail).

/// The particles that carry mass: indices `0..CORES`.
pub const CORES: usize = 2;

/// Simulation constants; the layout matches `Params` in particles.cu and sim.comp.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Params {
    pub count: u32,
    /// Time step; 0 leaves every particle where it is.
    pub dt: f32,
    /// G·M of core 0 and core 1 (particles 0 and 1).
    pub mass: [f32; 2],
    /// Softening ε² of each core's potential (a Plummer sphere): the pull stays finite
    /// through a core, so stars that fall in come out again.
    pub softening: f32,
    pub pad: [f32; 3],
}

// SAFETY: plain #[repr(C)] floats and integers, passed by value to the CUDA kernel.
unsafe impl cuvk::cudarc::driver::DeviceRepr for Params {}

/// G·M of each core.
const MASS: [f32; 2] = [1.0, 1.0];
/// Plummer softening length ε of the cores (ε² goes to the GPU).
const EPSILON: f32 = 0.2;

impl Params {
    pub fn new(count: u32) -> Self {
        Self {
            count,
            dt: 0.024,
            mass: MASS,
            softening: EPSILON * EPSILON,
            pad: [0.0; 3],
        }
    }

    /// These parameters, or (paused) a step that leaves every particle exactly where it is:
    /// with dt = 0, position and velocity are copied unchanged (the pull is finite).
    pub fn for_frame(self, simulate: bool) -> Self {
        if simulate {
            self
        } else {
            Self { dt: 0.0, ..self }
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

/// Uniform in [0, 1).
fn unit(state: &mut u64) -> f32 {
    (splitmix(state) >> 40) as f32 / (1u64 << 24) as f32
}

/// Standard normal (Box–Muller).
fn normal(state: &mut u64) -> f32 {
    let u = 1.0 - unit(state); // (0, 1]: ln stays finite
    (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * unit(state)).cos()
}

use cuvk_canvas::camera::{add, cross, normalize, scale, Vec3};

/// One galaxy: its core's place and motion, and its disc's orientation.
struct Galaxy {
    mass: f32,
    centre: Vec3,
    velocity: Vec3,
    /// The disc's axes in the world: `x`, `y` in its plane, `z` along its spin.
    axes: [Vec3; 3],
}

impl Galaxy {
    /// A disc spinning about the unit normal `spin`.
    fn new(mass: f32, centre: Vec3, velocity: Vec3, spin: Vec3) -> Self {
        let z = normalize(spin);
        let reference = if z[2].abs() < 0.9 {
            [0.0, 0.0, 1.0]
        } else {
            [1.0, 0.0, 0.0]
        };
        let x = normalize(cross(reference, z));
        let y = cross(z, x);
        Self {
            mass,
            centre,
            velocity,
            axes: [x, y, z],
        }
    }

    fn to_world(&self, local: Vec3) -> Vec3 {
        let [x, y, z] = self.axes;
        add(
            add(scale(x, local[0]), scale(y, local[1])),
            scale(z, local[2]),
        )
    }

    /// Speed of a circular orbit at radius `r` about this core (softened point mass).
    fn circular_speed(&self, r: f32) -> f32 {
        let d = r * r + EPSILON * EPSILON;
        (self.mass * r * r / (d * d.sqrt())).sqrt()
    }

    /// A star of this galaxy: 12% in a round bulge on randomly tilted orbits, the rest in a
    /// thin disc (exponential profile) on circular orbits, most of them along two spiral arms.
    fn star(&self, s: &mut u64) -> ([f32; 4], [f32; 4]) {
        let (local_pos, local_vel) = if unit(s) < 0.12 {
            self.bulge_star(s)
        } else {
            self.disc_star(s)
        };
        let p = add(self.centre, self.to_world(local_pos));
        let v = add(self.velocity, self.to_world(local_vel));
        ([p[0], p[1], p[2], 0.0], [v[0], v[1], v[2], 0.0])
    }

    fn bulge_star(&self, s: &mut u64) -> (Vec3, Vec3) {
        let r = 0.03 + 0.3 * unit(s) * unit(s);
        let dir = normalize([normal(s), normal(s), normal(s)]);
        // A circular orbit in a random plane through the core.
        let other = normalize([normal(s), normal(s), normal(s)]);
        let tangent = normalize(cross(dir, other));
        (scale(dir, r), scale(tangent, self.circular_speed(r)))
    }

    fn disc_star(&self, s: &mut u64) -> (Vec3, Vec3) {
        const SCALE_LENGTH: f32 = 0.55;
        const EDGE: f32 = 1.8;
        let cut = 1.0 - (-EDGE / SCALE_LENGTH).exp();
        let r = 0.08 - SCALE_LENGTH * (1.0 - unit(s) * cut).ln();
        let angle = if unit(s) < 0.65 {
            // Two trailing logarithmic arms (pitch ~17°), a star scattered about its arm.
            let arm = if unit(s) < 0.5 {
                0.0
            } else {
                std::f32::consts::PI
            };
            arm - 3.2 * (r / 0.3).ln() + 0.35 * normal(s)
        } else {
            std::f32::consts::TAU * unit(s)
        };
        let (sin, cos) = angle.sin_cos();
        let height = 0.02 * (1.0 + r) * normal(s);
        // Circular, plus a little random motion: stars that all started on exact circles would
        // oscillate in step and draw rings.
        let v = self.circular_speed(r);
        let (along, out) = (v * (1.0 + 0.03 * normal(s)), 0.05 * v * normal(s));
        let vel = [
            out * cos - along * sin,
            out * sin + along * cos,
            0.02 * normal(s),
        ];
        ([r * cos, r * sin, height], vel)
    }
}

/// The two galaxies on a bound orbit in the xy plane (centre of mass at rest at the origin):
/// separation `START` now, closest approach `PERICENTRE` a few hundred frames later.
fn galaxies() -> [Galaxy; 2] {
    const START: f32 = 4.0;
    const PERICENTRE: f32 = 1.3;
    const ECCENTRICITY: f32 = 0.6;
    let total = MASS[0] + MASS[1];
    // The relative orbit (Kepler): speed from the vis-viva equation, angular momentum from the
    // pericentre; the radial part of the velocity closes the distance.
    let semi_major = PERICENTRE / (1.0 - ECCENTRICITY);
    let speed2 = total * (2.0 / START - 1.0 / semi_major);
    let tangential = (total * PERICENTRE * (1.0 + ECCENTRICITY)).sqrt() / START;
    let radial = -(speed2 - tangential * tangential).max(0.0).sqrt();
    let rel_pos = [START, 0.0, 0.0];
    let rel_vel = [radial, tangential, 0.0];
    let share = [MASS[1] / total, -MASS[0] / total];
    // Both discs turn with the orbit (prograde: long tails), tilted out of its plane.
    let spin = [[0.25, -0.1, 1.0], [-0.7, 0.45, 0.6]];
    [0, 1].map(|g| {
        Galaxy::new(
            MASS[g],
            scale(rel_pos, share[g]),
            scale(rel_vel, share[g]),
            spin[g],
        )
    })
}

/// Positions and velocities for `count` particles from `seed`: the two cores first, then the
/// stars of both galaxies alternately, the same on every machine.
pub fn initial_state(count: usize, seed: u64) -> (Vec<[f32; 4]>, Vec<[f32; 4]>) {
    let mut s = seed ^ 0x5eed_0fc0_ffee;
    let galaxies = galaxies();
    let mut pos = Vec::with_capacity(count);
    let mut vel = Vec::with_capacity(count);
    for i in 0..count {
        let g = &galaxies[i % 2];
        let (p, v) = if i < CORES {
            let [x, y, z] = g.centre;
            let [vx, vy, vz] = g.velocity;
            ([x, y, z, 0.0], [vx, vy, vz, 0.0])
        } else {
            g.star(&mut s)
        };
        pos.push(p);
        vel.push(v);
    }
    (pos, vel)
}

/// One step on the CPU, operation for operation as the GPU versions (no fused multiply-add;
/// the cores are read as they were before the step, as the GPU reads the previous buffer).
pub fn step_cpu(p: &Params, pos: &mut [[f32; 4]], vel: &mut [[f32; 4]]) {
    let cores: Vec<[f32; 4]> = pos.iter().take(CORES).copied().collect();
    for (i, (q, v)) in pos.iter_mut().zip(vel.iter_mut()).enumerate() {
        let (mut ax, mut ay, mut az, mut depth) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
        for (j, c) in cores.iter().enumerate() {
            if j == i {
                continue;
            }
            let dx = c[0] - q[0];
            let dy = c[1] - q[1];
            let dz = c[2] - q[2];
            let d = dx * dx + dy * dy + dz * dz + p.softening;
            let inv = 1.0 / (d * d.sqrt());
            let k = p.mass[j] * inv;
            ax += k * dx;
            ay += k * dy;
            az += k * dz;
            depth += p.mass[j] * (d * inv);
        }
        v[0] += ax * p.dt;
        v[1] += ay * p.dt;
        v[2] += az * p.dt;
        q[0] += v[0] * p.dt;
        q[1] += v[1] * p.dt;
        q[2] += v[2] * p.dt;
        q[3] = depth;
    }
}

pub use cuvk_canvas::camera::{project, Camera, OrbitCamera};
