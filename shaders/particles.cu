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

extern "C" __global__ void step(const float4* __restrict__ pos_in, const float4* __restrict__ vel_in,
                                float4* __restrict__ pos_out, float4* __restrict__ vel_out, Params prm) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < prm.count; i += gridDim.x * blockDim.x) {
        float4 p = pos_in[i];
        float4 v = vel_in[i];
        float ax = 0.0f, ay = 0.0f, az = 0.0f, depth = 0.0f;
        // Unrolled: j is a constant in each copy, so prm.mass[j] stays a plain parameter load.
#pragma unroll
        for (unsigned int j = 0; j < 2u; ++j) {
            if (j >= prm.count || j == i) continue;
            const float4 c = pos_in[j];
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
        pos_out[i] = p;
        vel_out[i] = v;
    }
}
