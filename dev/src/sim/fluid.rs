//! The fluid's parameters (the layout `Params` has in shaders/fluid.cu and
//! shaders/fluid_common.glsl), the scripted emitters that stir it, and a CPU reference of one
//! step — the same operations in the same order as the two GPU simulations, in f32 with no
//! fused multiply-add. Shared by the fluid demo (`examples/fluid`) and the tests.

/// At most this many emitters act in one step (the scripted jets and a mouse splat).
pub const MAX_EMITTERS: usize = 8;
/// Scripted jets.
pub const JETS: usize = 5;
/// Jacobi iterations of the pressure solve per step (even: the result lands in pressure 0).
pub const DEFAULT_ITERATIONS: u32 = 40;
/// Pressure kept from the last step as the solver's first guess.
pub const PRESSURE_KEEP: f32 = 0.8;
/// Simulated frames per second of script time (the emitters move with the frame number, not
/// with the wall clock, so a run is the same on any machine).
pub const SCRIPT_FPS: f32 = 60.0;

/// One splat of force and dye: within `1 / sqrt(color[3])` texels of `pos`, weight
/// `(1 - d² · color[3])³` times `force` (texels per step) and `color.rgb`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Emitter {
    /// Centre in texels (texel i's centre is at i + 0.5).
    pub pos: [f32; 2],
    /// Velocity added at the centre, texels per step.
    pub force: [f32; 2],
    /// Dye added at the centre (rgb), and 1 / radius² in texels⁻² (w).
    pub color: [f32; 4],
}

/// Everything a step needs besides the fields. `#[repr(C)]`, 16-byte aligned: the same bytes
/// are a CUDA kernel argument and a std140 uniform block.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Params {
    pub width: u32,
    pub height: u32,
    /// Time step (velocity is in texels per unit time).
    pub dt: f32,
    /// Vorticity confinement strength (0: off).
    pub vorticity: f32,
    /// Velocity kept per step (dissipation).
    pub velocity_keep: f32,
    /// Dye kept per step.
    pub dye_keep: f32,
    /// Emitters in use (the first `emitters` of `emitter`).
    pub emitters: u32,
    pub pad: u32,
    pub emitter: [Emitter; MAX_EMITTERS],
}

// SAFETY: plain #[repr(C)] floats and integers, passed by value to the CUDA kernels.
unsafe impl cuvk::cudarc::driver::DeviceRepr for Params {}

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

/// The dye colours as displayed (gamma-encoded RGB): saturated, none that turns muddy dim,
/// in hue order (neighbours blend into colours, not greys).
const PALETTE: [[f32; 3]; 5] = [
    [1.0, 0.1, 0.45], // pink
    [1.0, 0.5, 0.0],  // orange
    [0.1, 1.0, 0.4],  // spring green
    [0.0, 0.6, 1.0],  // sky blue
    [0.55, 0.1, 1.0], // violet
];

/// A colour on the palette's circle (0..1, wrapping), blending neighbours, as linear RGB
/// (the dye is linear; the draw shader encodes for display).
pub fn hue(h: f32) -> [f32; 3] {
    let x = (h - h.floor()) * PALETTE.len() as f32;
    let i = x.floor() as usize % PALETTE.len();
    let f = x - x.floor();
    let (a, b) = (PALETTE[i], PALETTE[(i + 1) % PALETTE.len()]);
    std::array::from_fn(|c| (a[c] + (b[c] - a[c]) * f).powf(2.2))
}

/// How one scripted jet moves: it sits on a ring about the centre (the jets evenly spaced,
/// so no side wins and the dye stays in view), wobbles along it, and fires in bursts at the
/// centre, its nozzle swept to one side and back; each has its own colour.
#[derive(Clone, Copy, Debug)]
struct Jet {
    angle: f32,
    wobble: f32,
    phase: f32,
    sweep: f32,
    burst: f32,
    burst_phase: f32,
    hue: f32,
}

/// The scene: jets from `seed`, their emitters at frame `n`, the constants of a grid size.
#[derive(Clone, Debug)]
pub struct Script {
    jets: [Jet; JETS],
    pub width: u32,
    pub height: u32,
}

impl Script {
    pub fn new(seed: u64, width: u32, height: u32) -> Self {
        let mut s = seed ^ 0xf1d0_5eed_c0de_0001;
        let turn = unit(&mut s);
        let jets = std::array::from_fn(|i| {
            let side = if i % 2 == 0 { 1.0 } else { -1.0 };
            Jet {
                angle: (i as f32 + turn) / JETS as f32 * std::f32::consts::TAU,
                wobble: 0.2 + 0.3 * unit(&mut s),
                phase: unit(&mut s) * std::f32::consts::TAU,
                sweep: side * (0.2 + 0.3 * unit(&mut s)),
                burst: 0.5 + 0.6 * unit(&mut s),
                burst_phase: unit(&mut s) * std::f32::consts::TAU,
                hue: (i as f32 + 0.4 * unit(&mut s)) / JETS as f32,
            }
        });
        Self {
            jets,
            width,
            height,
        }
    }

    /// The grid's scale against the 512-texel grid the constants were tuned on.
    fn scale(&self) -> f32 {
        self.width.min(self.height) as f32 / 512.0
    }

    /// Splat radius in texels.
    pub fn radius(&self) -> f32 {
        10.0 * self.scale()
    }

    /// The scripted jets' emitters at frame `n` (from 1).
    pub fn emitters(&self, n: u64) -> Vec<Emitter> {
        let t = n as f32 / SCRIPT_FPS;
        let (w, h) = (self.width as f32, self.height as f32);
        let size = w.min(h);
        let inv_r2 = 1.0 / (self.radius() * self.radius());
        self.jets
            .iter()
            .map(|j| {
                let a = j.angle + j.wobble * (0.35 * t + j.phase).sin();
                let ring = 0.36 + 0.04 * (0.5 * t + j.phase).cos();
                let x = 0.5 * w + ring * size * a.cos();
                let y = 0.5 * h + ring * size * a.sin();
                // The nozzle points along the ring, a little inwards, and sweeps: the jets
                // chase each other round the centre.
                let aim = a + 0.62 * std::f32::consts::PI + j.sweep * (0.6 * t + j.phase).sin();
                // Bursts: on for part of each cycle, smoothly.
                let on = (0.5 + 0.5 * (j.burst * t + j.burst_phase).sin()).powi(2);
                let strength = 22.0 * self.scale() * on;
                let rgb = hue(j.hue + 0.01 * t);
                let dye = 1.2 * (0.1 + on);
                Emitter {
                    pos: [x, y],
                    force: [strength * aim.cos(), strength * aim.sin()],
                    color: [rgb[0] * dye, rgb[1] * dye, rgb[2] * dye, inv_r2],
                }
            })
            .collect()
    }
}

impl Params {
    /// The step of frame `n` with `emitters` (at most [`MAX_EMITTERS`]; more are dropped).
    pub fn new(width: u32, height: u32, emitters: &[Emitter]) -> Self {
        let mut p = Self {
            width,
            height,
            dt: 1.0,
            vorticity: 0.2,
            velocity_keep: 0.99,
            dye_keep: 0.975,
            emitters: 0,
            pad: 0,
            emitter: [Emitter::default(); MAX_EMITTERS],
        };
        for (slot, e) in p.emitter.iter_mut().zip(emitters) {
            *slot = *e;
            p.emitters += 1;
        }
        p
    }

    /// A step that changes nothing (paused): no time passes, no forces, nothing decays, so
    /// the force pass and the dye advection copy their inputs exactly.
    pub fn paused(width: u32, height: u32) -> Self {
        Self {
            dt: 0.0,
            vorticity: 0.0,
            velocity_keep: 1.0,
            dye_keep: 1.0,
            ..Self::new(width, height, &[])
        }
    }

    pub fn is_paused(&self) -> bool {
        self.dt == 0.0
    }
}

/// The simulation's state on the host (for the CPU reference and for dumps): velocity
/// (2 floats a texel), pressure (1), dye (4, stored as half floats on the GPU: rounded to
/// them here after each step). Row-major, x fastest.
#[derive(Clone, Debug, PartialEq)]
pub struct Fields {
    pub width: u32,
    pub height: u32,
    pub velocity: Vec<[f32; 2]>,
    pub pressure: Vec<f32>,
    pub dye: Vec<[f32; 4]>,
}

/// `x` rounded to the nearest half float (ties to even) while still an f32, 0 below the
/// smallest normal half: what the GPU passes do before storing dye, so that the store's own
/// conversion (which Vulkan lets round either way) is exact (`to_half_exact` in fluid.cu and
/// fluid_common.glsl).
pub fn to_half_exact(x: f32) -> f32 {
    if x.abs() < 1.0 / 16384.0 {
        return 0.0;
    }
    let b = x.to_bits();
    f32::from_bits((b + 0x0fff + ((b >> 13) & 1)) & 0xffff_e000)
}

/// IEEE half → f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: normalise.
            let shift = m.leading_zeros() - 21;
            let m = (m << shift) & 0x3ff;
            sign | ((127 - 15 + 1 - shift) << 23) | (m << 13)
        }
        (31, 0) => sign | 0x7f80_0000,
        (31, m) => sign | 0x7fc0_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

impl Fields {
    /// A fluid at rest with no dye.
    pub fn new(width: u32, height: u32) -> Self {
        let n = (width * height) as usize;
        Self {
            width,
            height,
            velocity: vec![[0.0; 2]; n],
            pressure: vec![0.0; n],
            dye: vec![[0.0; 4]; n],
        }
    }

    /// Reads a dump written by the demo's `--dump`: velocity (RG32F texels), then dye (RGBA16F
    /// texels), each `width × height`, little-endian.
    pub fn from_dump(bytes: &[u8], width: u32, height: u32) -> Option<Self> {
        let n = (width * height) as usize;
        if bytes.len() != n * 16 {
            return None;
        }
        let f = |i: usize| f32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap());
        let h = |i: usize| u16::from_le_bytes(bytes[i * 2..i * 2 + 2].try_into().unwrap());
        let velocity = (0..n).map(|i| [f(2 * i), f(2 * i + 1)]).collect();
        let base = n * 4; // in halves
        let dye = (0..n)
            .map(|i| std::array::from_fn(|c| f16_to_f32(h(base + 4 * i + c))))
            .collect();
        Some(Self {
            width,
            height,
            velocity,
            pressure: vec![0.0; n],
            dye,
        })
    }

    fn idx(&self, x: i32, y: i32) -> usize {
        let x = x.clamp(0, self.width as i32 - 1);
        let y = y.clamp(0, self.height as i32 - 1);
        (y as u32 * self.width + x as u32) as usize
    }

    /// Total dye per channel (a statistic chaos leaves nearly alone: the dye is passive).
    pub fn dye_total(&self) -> [f64; 4] {
        let mut t = [0f64; 4];
        for d in &self.dye {
            for c in 0..4 {
                t[c] += f64::from(d[c]);
            }
        }
        t
    }

    /// Kinetic energy, ½ Σ |v|².
    pub fn energy(&self) -> f64 {
        self.velocity
            .iter()
            .map(|v| 0.5 * (f64::from(v[0]).powi(2) + f64::from(v[1]).powi(2)))
            .sum()
    }
}

/// Bilinear sample of a cell-centred field at `(px, py)` (texels), clamped to the edge
/// texels' centres: the formula of `sample2`/`sample4` in fluid.cu and fluid_common.glsl.
fn sample<const C: usize>(f: &[[f32; C]], w: u32, h: u32, px: f32, py: f32) -> [f32; C] {
    let qx = (px - 0.5).max(0.0).min((w - 1) as f32);
    let qy = (py - 0.5).max(0.0).min((h - 1) as f32);
    let (x0, y0) = (qx.floor(), qy.floor());
    let (fx, fy) = (qx - x0, qy - y0);
    let (ix0, iy0) = (x0 as u32, y0 as u32);
    let (ix1, iy1) = ((ix0 + 1).min(w - 1), (iy0 + 1).min(h - 1));
    let at = |x: u32, y: u32| f[(y * w + x) as usize];
    let (v00, v10, v01, v11) = (at(ix0, iy0), at(ix1, iy0), at(ix0, iy1), at(ix1, iy1));
    std::array::from_fn(|c| {
        let a = v00[c] + (v10[c] - v00[c]) * fx;
        let b = v01[c] + (v11[c] - v01[c]) * fx;
        a + (b - a) * fy
    })
}

/// `Σ` of the emitters' weights at texel centre `(px, py)`, applied by `add(e, w³)` in order.
fn splat(p: &Params, px: f32, py: f32, mut add: impl FnMut(&Emitter, f32)) {
    for e in &p.emitter[..p.emitters as usize] {
        let dx = px - e.pos[0];
        let dy = py - e.pos[1];
        let d2 = dx * dx + dy * dy;
        let w = 1.0 - d2 * e.color[3];
        if w > 0.0 {
            add(e, w * w * w);
        }
    }
}

/// One step on the CPU, pass for pass as the kernels (fluid.cu) and shaders (fluid_*.comp):
/// curl, forces (vorticity confinement and emitters), self-advection of velocity,
/// divergence, `iterations` Jacobi iterations for pressure (the first from the kept
/// pressure), gradient subtraction, advection of dye with the emitters' dye.
pub fn step_cpu(f: &mut Fields, p: &Params, iterations: u32) {
    let (w, h) = (f.width, f.height);
    let n = (w * h) as usize;
    let coords = move |i: usize| ((i as u32 % w) as i32, (i as u32 / w) as i32);
    let centre = |x: i32, y: i32| (x as f32 + 0.5, y as f32 + 0.5);
    if !p.is_paused() {
        // curl
        let v = &f.velocity;
        let curl: Vec<f32> = (0..n)
            .map(|i| {
                let (x, y) = coords(i);
                let l = v[f.idx(x - 1, y)];
                let r = v[f.idx(x + 1, y)];
                let b = v[f.idx(x, y - 1)];
                let t = v[f.idx(x, y + 1)];
                0.5 * ((r[1] - l[1]) - (t[0] - b[0]))
            })
            .collect();
        // forces
        let forced: Vec<[f32; 2]> = (0..n)
            .map(|i| {
                let (x, y) = coords(i);
                let mut vx = v[i][0];
                let mut vy = v[i][1];
                if p.vorticity != 0.0 {
                    let c = curl[i];
                    let gx = curl[f.idx(x + 1, y)].abs() - curl[f.idx(x - 1, y)].abs();
                    let gy = curl[f.idx(x, y + 1)].abs() - curl[f.idx(x, y - 1)].abs();
                    let len2 = gx * gx + gy * gy + 1e-12;
                    let inv = 1.0 / len2.sqrt();
                    let s = p.vorticity * c * p.dt;
                    vx += gy * inv * s;
                    vy += -gx * inv * s;
                }
                let (px, py) = centre(x, y);
                splat(p, px, py, |e, k| {
                    vx += e.force[0] * k;
                    vy += e.force[1] * k;
                });
                [vx, vy]
            })
            .collect();
        // self-advection
        let advected: Vec<[f32; 2]> = (0..n)
            .map(|i| {
                let (x, y) = coords(i);
                let (cx, cy) = centre(x, y);
                let u = forced[i];
                let s = sample(&forced, w, h, cx - p.dt * u[0], cy - p.dt * u[1]);
                [s[0] * p.velocity_keep, s[1] * p.velocity_keep]
            })
            .collect();
        // divergence (free-slip walls: the wall's velocity mirrors the edge texel's)
        let div: Vec<f32> = (0..n)
            .map(|i| {
                let (x, y) = coords(i);
                let c = advected[i];
                let l = if x > 0 { advected[i - 1][0] } else { -c[0] };
                let r = if x < w as i32 - 1 {
                    advected[i + 1][0]
                } else {
                    -c[0]
                };
                let b = if y > 0 {
                    advected[i - w as usize][1]
                } else {
                    -c[1]
                };
                let t = if y < h as i32 - 1 {
                    advected[i + w as usize][1]
                } else {
                    -c[1]
                };
                0.5 * ((r - l) + (t - b))
            })
            .collect();
        // pressure
        for it in 0..iterations {
            let scale = if it == 0 { PRESSURE_KEEP } else { 1.0 };
            let pin = &f.pressure;
            let next: Vec<f32> = (0..n)
                .map(|i| {
                    let (x, y) = coords(i);
                    let s = pin[f.idx(x - 1, y)]
                        + pin[f.idx(x + 1, y)]
                        + pin[f.idx(x, y - 1)]
                        + pin[f.idx(x, y + 1)];
                    (s * scale - div[i]) * 0.25
                })
                .collect();
            f.pressure = next;
        }
        // gradient subtraction
        let pr = &f.pressure;
        f.velocity = (0..n)
            .map(|i| {
                let (x, y) = coords(i);
                let v = advected[i];
                let gx = pr[f.idx(x + 1, y)] - pr[f.idx(x - 1, y)];
                let gy = pr[f.idx(x, y + 1)] - pr[f.idx(x, y - 1)];
                [v[0] - 0.5 * gx, v[1] - 0.5 * gy]
            })
            .collect();
    }
    // dye
    let v = &f.velocity;
    let dye: Vec<[f32; 4]> = (0..n)
        .map(|i| {
            let (x, y) = coords(i);
            let (cx, cy) = centre(x, y);
            let u = v[i];
            let s = sample(&f.dye, w, h, cx - p.dt * u[0], cy - p.dt * u[1]);
            let mut d = s.map(|c| c * p.dye_keep);
            splat(p, cx, cy, |e, k| {
                d[0] += e.color[0] * k;
                d[1] += e.color[1] * k;
                d[2] += e.color[2] * k;
                d[3] += k;
            });
            d.map(to_half_exact)
        })
        .collect();
    f.dye = dye;
}
