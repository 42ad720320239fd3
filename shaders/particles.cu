// Particle simulation step, CUDA version: two colliding galaxies (dev/src/sim/particles.rs has
// the scene). Must stay in step with shaders/sim.comp and the CPU reference `step_cpu`: the
// simulations are compared to float tolerance (tests/demos/gpu_particles.rs), so every add and
// multiply is spelled __fadd_rn / __fmul_rn (no FMA contraction), as sim.comp marks them
// `precise`, and the order of operations is the same.
//
// Particles 0 and 1 are the galaxies' cores, the only masses; every particle feels them (a core
// feels the other one). pos = (x, y, z, depth), vel = (vx, vy, vz, 0). One step, per core j:
//   d     = c_j - p,  s = |d|^2 + softening,  inv = 1 / (s * sqrt(s))
//   a    += mass_j * inv * d            (a softened point mass)
//   depth += mass_j * (s * inv)         (= mass_j / sqrt(s): the depth of its potential here)
// then v' = v + a * dt, p' = p + v' * dt, p'.w = depth (the renderer colours by it).

struct Params {
    unsigned int count;
    float dt;
    float mass[2];
    float softening;
    float pad[3];
};

// One particle's step; `self_index` is its index among all particles (a core does not pull
// itself), `cores` the previous positions of particles 0 and 1.
__device__ __forceinline__ void step_one(unsigned long long self_index, const float4* __restrict__ cores,
                                         float4& p, float4& v, const Params& prm) {
    float ax = 0.0f, ay = 0.0f, az = 0.0f, depth = 0.0f;
    // Unrolled: j is a constant in each copy, so prm.mass[j] stays a plain parameter load.
#pragma unroll
    for (unsigned int j = 0; j < 2u; ++j) {
        if (j >= prm.count || j == self_index) continue;
        const float4 c = cores[j];
        float dx = __fsub_rn(c.x, p.x);
        float dy = __fsub_rn(c.y, p.y);
        float dz = __fsub_rn(c.z, p.z);
        float s = __fadd_rn(__fadd_rn(__fadd_rn(__fmul_rn(dx, dx), __fmul_rn(dy, dy)), __fmul_rn(dz, dz)),
                            prm.softening);
        float inv = __fdiv_rn(1.0f, __fmul_rn(s, __fsqrt_rn(s)));
        float k = __fmul_rn(prm.mass[j], inv);
        ax = __fadd_rn(ax, __fmul_rn(k, dx));
        ay = __fadd_rn(ay, __fmul_rn(k, dy));
        az = __fadd_rn(az, __fmul_rn(k, dz));
        depth = __fadd_rn(depth, __fmul_rn(prm.mass[j], __fmul_rn(s, inv)));
    }
    v.x = __fadd_rn(v.x, __fmul_rn(ax, prm.dt));
    v.y = __fadd_rn(v.y, __fmul_rn(ay, prm.dt));
    v.z = __fadd_rn(v.z, __fmul_rn(az, prm.dt));
    p.x = __fadd_rn(p.x, __fmul_rn(v.x, prm.dt));
    p.y = __fadd_rn(p.y, __fmul_rn(v.y, prm.dt));
    p.z = __fadd_rn(p.z, __fmul_rn(v.z, prm.dt));
    p.w = depth;
}

extern "C" __global__ void step(const float4* __restrict__ pos_in, const float4* __restrict__ vel_in,
                                float4* __restrict__ pos_out, float4* __restrict__ vel_out, Params prm) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < prm.count; i += gridDim.x * blockDim.x) {
        float4 p = pos_in[i];
        float4 v = vel_in[i];
        step_one(i, pos_in, p, v, prm);
        pos_out[i] = p;
        vel_out[i] = v;
    }
}

// The same step for one chunk of a larger set (the multi-GPU mode keeps each rank's particles
// in chunks of at most 4 GiB, a Vulkan storage buffer's range): `n` particles, the first of
// which is particle `first` of the set; the cores are read from `cores` (chunk 0's input).
// prm.count is the size of the whole set (at least 2 where there are cores).
extern "C" __global__ void step_chunk(const float4* __restrict__ cores, const float4* __restrict__ pos_in,
                                      const float4* __restrict__ vel_in, float4* __restrict__ pos_out,
                                      float4* __restrict__ vel_out, unsigned long long first, unsigned int n,
                                      Params prm) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float4 p = pos_in[i];
        float4 v = vel_in[i];
        step_one(first + i, cores, p, v, prm);
        pos_out[i] = p;
        vel_out[i] = v;
    }
}

// ---- Initial state on the GPU (the multi-GPU mode: hundreds of millions of particles) -----
// The same galaxies as dev/src/sim/particles.rs's `initial_state`, drawn from a counter-based
// generator (each particle's numbers depend only on the seed and its global index), so any
// rank makes any share of the set, identically.

struct Galaxy {
    float mass;
    float centre[3];
    float velocity[3];
    float axes[9];  // x, y (in the disc's plane), z (the spin), each 3 floats
};

struct Scene {
    Galaxy g[2];
    float epsilon2;
    float pad[3];
};

__device__ __forceinline__ unsigned long long splitmix(unsigned long long& state) {
    state += 0x9e3779b97f4a7c15ull;
    unsigned long long z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
__device__ __forceinline__ float unit(unsigned long long& s) { return (float)(splitmix(s) >> 40) / 16777216.0f; }
__device__ __forceinline__ float normal(unsigned long long& s) {
    float u = 1.0f - unit(s);
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * unit(s));
}
__device__ __forceinline__ float3 nrm(float3 a) {
    float l = rsqrtf(a.x * a.x + a.y * a.y + a.z * a.z + 1e-30f);
    return make_float3(a.x * l, a.y * l, a.z * l);
}
__device__ __forceinline__ float3 crs(float3 a, float3 b) {
    return make_float3(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}
__device__ __forceinline__ float circular_speed(const Galaxy& g, float r, float eps2) {
    float d = r * r + eps2;
    return sqrtf(g.mass * r * r / (d * sqrtf(d)));
}
__device__ __forceinline__ float3 to_world(const Galaxy& g, float3 l) {
    return make_float3(g.axes[0] * l.x + g.axes[3] * l.y + g.axes[6] * l.z,
                       g.axes[1] * l.x + g.axes[4] * l.y + g.axes[7] * l.z,
                       g.axes[2] * l.x + g.axes[5] * l.y + g.axes[8] * l.z);
}

// Writes particles [first, first + n) of the set (0 and 1: the cores) into pos/vel[0..n).
extern "C" __global__ void init_particles(float4* __restrict__ pos, float4* __restrict__ vel,
                                          unsigned long long first, unsigned int n, unsigned long long seed,
                                          Scene scene) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        unsigned long long gi = first + i;
        const Galaxy& g = scene.g[gi & 1ull];
        if (gi < 2ull) {
            pos[i] = make_float4(g.centre[0], g.centre[1], g.centre[2], 0.0f);
            vel[i] = make_float4(g.velocity[0], g.velocity[1], g.velocity[2], 0.0f);
            continue;
        }
        unsigned long long s = (seed ^ 0x5eed0fc0ffeeull) + gi * 0xd1b54a32d192ed03ull;
        float3 lp, lv;
        if (unit(s) < 0.12f) {
            float r = 0.03f + 0.3f * unit(s) * unit(s);
            float3 dir = nrm(make_float3(normal(s), normal(s), normal(s)));
            float3 other = nrm(make_float3(normal(s), normal(s), normal(s)));
            float3 t = nrm(crs(dir, other));
            float sp = circular_speed(g, r, scene.epsilon2);
            lp = make_float3(dir.x * r, dir.y * r, dir.z * r);
            lv = make_float3(t.x * sp, t.y * sp, t.z * sp);
        } else {
            const float scale_length = 0.55f, edge = 1.8f;
            float cut = 1.0f - expf(-edge / scale_length);
            float r = 0.08f - scale_length * logf(1.0f - unit(s) * cut);
            float angle;
            if (unit(s) < 0.65f) {
                float arm = unit(s) < 0.5f ? 0.0f : 3.14159265f;
                angle = arm - 3.2f * logf(r / 0.3f) + 0.35f * normal(s);
            } else {
                angle = 6.2831853f * unit(s);
            }
            float sn, cs;
            sincosf(angle, &sn, &cs);
            float height = 0.02f * (1.0f + r) * normal(s);
            float v = circular_speed(g, r, scene.epsilon2);
            float along = v * (1.0f + 0.03f * normal(s)), out = 0.05f * v * normal(s);
            lp = make_float3(r * cs, r * sn, height);
            lv = make_float3(out * cs - along * sn, out * sn + along * cs, 0.02f * normal(s));
        }
        float3 wp = to_world(g, lp), wv = to_world(g, lv);
        pos[i] = make_float4(g.centre[0] + wp.x, g.centre[1] + wp.y, g.centre[2] + wp.z, 0.0f);
        vel[i] = make_float4(g.velocity[0] + wv.x, g.velocity[1] + wv.y, g.velocity[2] + wv.z, 0.0f);
    }
}
