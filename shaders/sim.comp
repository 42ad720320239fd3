#version 450
// Particle simulation step, Vulkan version of shaders/particles.cu (same formula, same order
// of operations; `precise` forbids contraction into FMAs so both round alike).
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer PosIn { vec4 pos_in[]; };
layout(std430, set = 0, binding = 1) readonly buffer VelIn { vec4 vel_in[]; };
layout(std430, set = 0, binding = 2) writeonly buffer PosOut { vec4 pos_out[]; };
layout(std430, set = 0, binding = 3) writeonly buffer VelOut { vec4 vel_out[]; };
layout(push_constant) uniform Params {
    uint count;
    float dt;
    float g;
    float softening;
    float swirl;
    float damping;
} prm;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < prm.count; i += stride) {
        precise vec4 p = pos_in[i];
        precise vec4 v = vel_in[i];
        precise float r2 = p.x * p.x + p.y * p.y + p.z * p.z;
        precise float d = r2 + prm.softening;
        precise float inv = 1.0 / (d * sqrt(d));
        precise float k = -prm.g * inv;
        precise float ax = k * p.x + (-prm.swirl) * p.y;
        precise float ay = k * p.y + prm.swirl * p.x;
        precise float az = k * p.z;
        v.x = v.x * prm.damping + ax * prm.dt;
        v.y = v.y * prm.damping + ay * prm.dt;
        v.z = v.z * prm.damping + az * prm.dt;
        p.x = p.x + v.x * prm.dt;
        p.y = p.y + v.y * prm.dt;
        p.z = p.z + v.z * prm.dt;
        pos_out[i] = p;
        vel_out[i] = v;
    }
}
