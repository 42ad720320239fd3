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

pub use cuvk_canvas::camera::{depth_scale, project, Camera, OrbitCamera};

/// One galaxy as `init_particles` in particles.cu reads it.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct GalaxyParams {
    pub mass: f32,
    pub centre: [f32; 3],
    pub velocity: [f32; 3],
    /// The disc's x, y (in its plane) and z (spin) axes.
    pub axes: [f32; 9],
}

/// The scene `init_particles` draws from: the same two galaxies as [`initial_state`].
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SceneParams {
    pub galaxies: [GalaxyParams; 2],
    pub epsilon2: f32,
    pub pad: [f32; 3],
}

// SAFETY: plain #[repr(C)] floats, passed by value to the CUDA kernel.
unsafe impl cuvk::cudarc::driver::DeviceRepr for SceneParams {}

/// The galaxies of [`initial_state`] for the GPU's counter-based initial state (the multi-GPU
/// mode makes hundreds of millions of particles, each rank its share).
pub fn scene() -> SceneParams {
    let g = galaxies().map(|g| GalaxyParams {
        mass: g.mass,
        centre: g.centre,
        velocity: g.velocity,
        axes: [
            g.axes[0][0],
            g.axes[0][1],
            g.axes[0][2],
            g.axes[1][0],
            g.axes[1][1],
            g.axes[1][2],
            g.axes[2][0],
            g.axes[2][1],
            g.axes[2][2],
        ],
    });
    SceneParams {
        galaxies: g,
        epsilon2: EPSILON * EPSILON,
        pad: [0.0; 3],
    }
}

/// The stars rank `rank` of `world` simulates in the multi-GPU mode: global indices `lo..hi`
/// (every rank also integrates the two cores, 0 and 1; rank 0 alone draws them).
pub fn rank_share(total: usize, rank: usize, world: usize) -> (usize, usize) {
    let stars = total.saturating_sub(CORES);
    (
        CORES + rank * stars / world,
        CORES + (rank + 1) * stars / world,
    )
}

/// The HDR counts particles_splat.comp adds for `pos` (particles `first..`), on the CPU: per
/// pixel, the particle count and the sum of colour keys.
pub fn splat_cpu(
    pos: &[[f32; 4]],
    first: usize,
    camera: &OrbitCamera,
    width: u32,
    height: u32,
) -> Vec<u32> {
    const DEPTH_HALF: f32 = 1.0;
    let vp = camera.view_proj(width as f32 / height as f32);
    let mut hdr = vec![0u32; 2 * (width * height) as usize];
    for p in pos.iter().skip(first) {
        if let Some((x, y)) = project(&vp, *p, width, height) {
            let depth = p[3].max(0.0);
            let key = (255.0 * depth / (depth + DEPTH_HALF) + 0.5) as u32;
            let at = 2 * (y * width + x) as usize;
            hdr[at] = hdr[at].wrapping_add(1);
            hdr[at + 1] = hdr[at + 1].wrapping_add(key);
        }
    }
    hdr
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The multi-GPU mode's compositing: each rank splats its share (the cores only on rank
    /// 0) and NCCL sums the counts as integers; the sum is the one-GPU picture's counts
    /// exactly, whatever the number of ranks or the order of the sums.
    #[test]
    fn sort_last_sums_of_rank_splats_equal_the_one_gpu_splat() {
        let total = 20_000;
        let (mut pos, mut vel) = initial_state(total, 3);
        let params = Params::new(total as u32);
        for _ in 0..40 {
            step_cpu(&params, &mut pos, &mut vel);
        }
        let camera = OrbitCamera::orbited(40);
        let (w, h) = (160, 90);
        let whole = splat_cpu(&pos, 0, &camera, w, h);
        assert!(whole.iter().step_by(2).map(|&n| n as u64).sum::<u64>() > (total / 2) as u64);
        for world in [1, 2, 3, 4, 7] {
            let mut sum = vec![0u32; whole.len()];
            // Summed in reverse rank order: integer sums do not care.
            for rank in (0..world).rev() {
                let (lo, hi) = rank_share(total, rank, world);
                let mut share: Vec<[f32; 4]> = pos[..CORES].to_vec();
                share.extend_from_slice(&pos[lo..hi]);
                let first = if rank == 0 { 0 } else { CORES };
                for (s, v) in sum.iter_mut().zip(splat_cpu(&share, first, &camera, w, h)) {
                    *s = s.wrapping_add(v);
                }
            }
            assert_eq!(sum, whole, "{world} ranks");
            // Every star belongs to exactly one rank.
            let covered: usize = (0..world)
                .map(|r| {
                    let (lo, hi) = rank_share(total, r, world);
                    hi - lo
                })
                .sum();
            assert_eq!(covered, total - CORES);
        }
    }
}
