#version 450
// Particle simulation step, Vulkan version of shaders/particles.cu: the same formula in the
// same order of operations (see there); `precise` forbids contraction into FMAs so that both,
// and the CPU reference in dev/src/sim/particles.rs, round alike.
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer PosIn { vec4 pos_in[]; };
layout(std430, set = 0, binding = 1) readonly buffer VelIn { vec4 vel_in[]; };
layout(std430, set = 0, binding = 2) writeonly buffer PosOut { vec4 pos_out[]; };
layout(std430, set = 0, binding = 3) writeonly buffer VelOut { vec4 vel_out[]; };
layout(push_constant) uniform Params {
    uint count;
    float dt;
    float mass[2];
    float softening;
} prm;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < prm.count; i += stride) {
        precise vec4 p = pos_in[i];
        precise vec4 v = vel_in[i];
        precise float ax = 0.0, ay = 0.0, az = 0.0, depth = 0.0;
        for (uint j = 0u; j < 2u; ++j) {
            if (j >= prm.count || j == i) continue;
            vec4 c = pos_in[j];
            precise float dx = c.x - p.x;
            precise float dy = c.y - p.y;
            precise float dz = c.z - p.z;
            precise float s = dx * dx + dy * dy + dz * dz + prm.softening;
            precise float inv = 1.0 / (s * sqrt(s));
            precise float k = prm.mass[j] * inv;
            ax = ax + k * dx;
            ay = ay + k * dy;
            az = az + k * dz;
            depth = depth + prm.mass[j] * (s * inv);
        }
        v.x = v.x + ax * prm.dt;
        v.y = v.y + ay * prm.dt;
        v.z = v.z + az * prm.dt;
        p.x = p.x + v.x * prm.dt;
        p.y = p.y + v.y * prm.dt;
        p.z = p.z + v.z * prm.dt;
        p.w = depth;
        pos_out[i] = p;
        vel_out[i] = v;
    }
}
