// Particle simulation step, CUDA version. Must stay in step with shaders/sim.comp: the two
// simulations are compared to float tolerance (tests/demos/gpu_particles.rs).
//
// Each particle: pos = (x, y, z, unused), vel = (vx, vy, vz, unused). One step:
//   a  = -G * p / (|p|^2 + soft)^(3/2)  +  swirl * (-p.y, p.x, 0)
//   v' = v * damping + a * dt
//   p' = p + v' * dt

struct Params {
    unsigned int count;
    float dt;
    float g;
    float softening;
    float swirl;
    float damping;
    float pad0, pad1;
};

extern "C" __global__ void step(const float4* __restrict__ pos_in, const float4* __restrict__ vel_in,
                                float4* __restrict__ pos_out, float4* __restrict__ vel_out, Params prm) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < prm.count; i += gridDim.x * blockDim.x) {
        float4 p = pos_in[i];
        float4 v = vel_in[i];
        float r2 = __fadd_rn(__fadd_rn(__fmul_rn(p.x, p.x), __fmul_rn(p.y, p.y)), __fmul_rn(p.z, p.z));
        float d = __fadd_rn(r2, prm.softening);
        float inv = __fdiv_rn(1.0f, __fmul_rn(d, sqrtf(d)));
        float k = __fmul_rn(-prm.g, inv);
        float ax = __fadd_rn(__fmul_rn(k, p.x), __fmul_rn(-prm.swirl, p.y));
        float ay = __fadd_rn(__fmul_rn(k, p.y), __fmul_rn(prm.swirl, p.x));
        float az = __fmul_rn(k, p.z);
        v.x = __fadd_rn(__fmul_rn(v.x, prm.damping), __fmul_rn(ax, prm.dt));
        v.y = __fadd_rn(__fmul_rn(v.y, prm.damping), __fmul_rn(ay, prm.dt));
        v.z = __fadd_rn(__fmul_rn(v.z, prm.damping), __fmul_rn(az, prm.dt));
        p.x = __fadd_rn(p.x, __fmul_rn(v.x, prm.dt));
        p.y = __fadd_rn(p.y, __fmul_rn(v.y, prm.dt));
        p.z = __fadd_rn(p.z, __fmul_rn(v.z, prm.dt));
        pos_out[i] = p;
        vel_out[i] = v;
    }
}
