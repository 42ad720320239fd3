// The particle step in CUDA (the path with CUDA): the same arithmetic as `simulate` in
// particles.wgsl, on the particles Bevy draws (a cuvk shared buffer, no copy).

struct Attractor {
    float4 pos_strength;  // xy: position; z: pull; w: swirl
};

struct Params {
    unsigned int count;
    unsigned int width;
    unsigned int height;
    unsigned int simulate;
    float dt;
    float damping;
    float aspect;
    float exposure;
    Attractor attractors[3];
};

struct Particle {
    float2 pos;
    float2 vel;
};

#define SOFTENING 0.02f

extern "C" __global__ void simulate(Particle* particles, Params params) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= params.count || params.simulate == 0u) {
        return;
    }
    Particle p = particles[i];
    float2 acc = make_float2(0.0f, 0.0f);
    for (int a = 0; a < 3; a++) {
        float4 at = params.attractors[a].pos_strength;
        float2 d = make_float2(at.x - p.pos.x, at.y - p.pos.y);
        float r2 = d.x * d.x + d.y * d.y + SOFTENING;
        float inv = 1.0f / sqrtf(r2);
        float inv2 = inv * inv;
        float pull = at.z * inv2 * inv;
        float swirl = at.w * inv2;
        acc.x += d.x * pull;
        acc.y += d.y * pull;
        acc.x += -d.y * swirl;
        acc.y += d.x * swirl;
    }
    float2 vel = make_float2(p.vel.x * params.damping + acc.x * params.dt,
                             p.vel.y * params.damping + acc.y * params.dt);
    float2 pos = make_float2(p.pos.x + vel.x * params.dt, p.pos.y + vel.y * params.dt);
    if (pos.x > params.aspect) { pos.x = params.aspect; vel.x = -0.5f * vel.x; }
    if (pos.x < -params.aspect) { pos.x = -params.aspect; vel.x = -0.5f * vel.x; }
    if (pos.y > 1.0f) { pos.y = 1.0f; vel.y = -0.5f * vel.y; }
    if (pos.y < -1.0f) { pos.y = -1.0f; vel.y = -0.5f * vel.y; }
    particles[i].pos = pos;
    particles[i].vel = vel;
}
