//! The particle demos' cameras and the little vector math they need: an orbiting camera
//! looking at the origin, its view-projection matrix (Vulkan clip space), and the projection
//! of a point to a pixel that the splat shaders make.

/// A point or direction in the world.
pub type Vec3 = [f32; 3];

/// `a + b`.
pub fn add(a: Vec3, b: Vec3) -> Vec3 {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}

/// `a · s`.
pub fn scale(a: Vec3, s: f32) -> Vec3 {
    [a[0] * s, a[1] * s, a[2] * s]
}

/// The dot product.
pub fn dot(a: Vec3, b: Vec3) -> f32 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// The cross product.
pub fn cross(a: Vec3, b: Vec3) -> Vec3 {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

/// `v` scaled to unit length.
pub fn normalize(v: Vec3) -> Vec3 {
    let l = dot(v, v).sqrt();
    [v[0] / l, v[1] / l, v[2] / l]
}

/// A camera looking at the origin from `distance` away, z up on the screen where it can be:
/// the eye at `distance · (cos pitch · sin yaw, −sin pitch, cos pitch · cos yaw)`. What the
/// wgpu particle demo, `bench_draw` and the Python renderer draw with.
#[derive(Clone, Copy, Debug)]
pub struct Camera {
    /// Turn about the vertical, radians.
    pub yaw: f32,
    /// Elevation, radians.
    pub pitch: f32,
    /// Distance from the origin.
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

/// A 4×4 matrix, column-major (`m[col][row]`), as GLSL reads it.
pub type Mat4 = [[f32; 4]; 4];

fn mul(a: &Mat4, b: &Mat4) -> Mat4 {
    let mut m = [[0.0; 4]; 4];
    for c in 0..4 {
        for r in 0..4 {
            m[c][r] = (0..4).map(|k| a[k][r] * b[c][k]).sum();
        }
    }
    m
}

/// Vertical field of view of both cameras.
const FOV_Y: f32 = 50f32.to_radians();

/// The view's unit axes in the world for an eye looking at the origin, z up where it can be:
/// right, up (on screen) and forward.
fn view_axes(eye: Vec3) -> [Vec3; 3] {
    let f = normalize(scale(eye, -1.0));
    let s = normalize(cross(f, [0.0, 0.0, 1.0]));
    let u = cross(s, f);
    [s, u, f]
}

/// The cameras' near and far planes.
pub const NEAR: f32 = 0.05;
/// See [`NEAR`].
pub const FAR: f32 = 100.0;

/// How a point's clip-space z changes as it moves towards the eye by one unit, per unit of
/// clip w (`FAR / (FAR - NEAR)`): the sphere pass pulls a surface point's depth with it.
pub fn depth_scale() -> f32 {
    FAR / (FAR - NEAR)
}

/// View-projection matrix (Vulkan clip space: depth 0..1, y down) of an eye looking at the
/// origin, for `aspect`.
fn look_at(eye: Vec3, aspect: f32) -> Mat4 {
    let [s, u, f] = view_axes(eye);
    let view: Mat4 = [
        [s[0], u[0], -f[0], 0.0],
        [s[1], u[1], -f[1], 0.0],
        [s[2], u[2], -f[2], 0.0],
        [-dot(s, eye), -dot(u, eye), dot(f, eye), 1.0],
    ];
    let (near, far) = (NEAR, FAR);
    let t = 1.0 / (FOV_Y / 2.0).tan();
    let proj: Mat4 = [
        [t / aspect, 0.0, 0.0, 0.0],
        [0.0, -t, 0.0, 0.0],
        [0.0, 0.0, far / (near - far), -1.0],
        [0.0, 0.0, near * far / (near - far), 0.0],
    ];
    mul(&proj, &view)
}

impl Camera {
    /// View-projection matrix (Vulkan clip space: depth 0..1, y down) for `aspect`.
    pub fn view_proj(&self, aspect: f32) -> Mat4 {
        let eye = [
            self.distance * self.pitch.cos() * self.yaw.sin(),
            -self.distance * self.pitch.sin(),
            self.distance * self.pitch.cos() * self.yaw.cos(),
        ];
        look_at(eye, aspect)
    }
}

/// The galaxy demo's camera: it circles the z axis (the galaxies' orbit is in the xy plane)
/// `pitch` above that plane, looking at the origin (their centre of mass) from `distance`.
#[derive(Clone, Copy, Debug)]
pub struct OrbitCamera {
    /// Turn about the z axis, radians.
    pub yaw: f32,
    /// Elevation above the xy plane, radians.
    pub pitch: f32,
    /// Distance from the origin.
    pub distance: f32,
}

impl Default for OrbitCamera {
    fn default() -> Self {
        Self {
            yaw: 0.3,
            pitch: 0.55,
            distance: 10.0,
        }
    }
}

impl OrbitCamera {
    /// Yaw added per frame by the automatic orbit: one turn in about a minute at 60 fps.
    pub const ORBIT_STEP: f32 = 0.0018;

    /// Turns one frame's step of the automatic orbit.
    pub fn orbit(&mut self) {
        self.yaw += Self::ORBIT_STEP;
    }

    /// The default camera after `frames` frames of automatic orbit (what the demo shows at
    /// frame `frames` when nobody drags the view).
    pub fn orbited(frames: u64) -> Self {
        let mut c = Self::default();
        for _ in 0..frames {
            c.orbit();
        }
        c
    }

    fn eye(&self) -> Vec3 {
        let (sy, cy) = self.yaw.sin_cos();
        let (sp, cp) = self.pitch.sin_cos();
        scale([cp * sy, -cp * cy, sp], self.distance)
    }

    /// The view's unit axes in the world: right, up (on screen) and forward.
    pub fn axes(&self) -> [Vec3; 3] {
        view_axes(self.eye())
    }

    /// tan(fov/2) vertically: the view ray through pixel row `y` of `h` is
    /// `forward + (1 - 2(y + ½)/h) · tan · up` (plus the same across, times the aspect).
    pub fn tan_half_fov(&self) -> f32 {
        (FOV_Y / 2.0).tan()
    }

    /// View-projection matrix (Vulkan clip space: depth 0..1, y down) for `aspect`.
    pub fn view_proj(&self, aspect: f32) -> Mat4 {
        look_at(self.eye(), aspect)
    }
}

/// The pixel a particle lands on, as the splat shaders compute it, or None when off-screen.
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
        (((x * 0.5 + 0.5) * width as f32) as u32).min(width - 1),
        (((y * 0.5 + 0.5) * height as f32) as u32).min(height - 1),
    ))
}
