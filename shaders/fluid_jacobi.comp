#version 450
#extension GL_GOOGLE_include_directive : require
// One Jacobi iteration of the pressure Poisson equation; `scale` < 1 on the first iteration
// keeps part of the last step's pressure as the first guess (fluid.cu: fluid_jacobi).
#include "fluid_common.glsl"

layout(set = 0, binding = 0, r32f) uniform readonly image2D p_in;
layout(set = 0, binding = 1, r32f) uniform readonly image2D div;
layout(set = 0, binding = 2, r32f) uniform writeonly image2D p_out;
layout(push_constant) uniform Push {
    float scale;
} pc;

float p_at(ivec2 t) {
    return imageLoad(p_in, clamp_texel(t)).x;
}

void main() {
    ivec2 c = this_texel();
    if (!in_grid(c)) return;
    precise float s = p_at(c - ivec2(1, 0)) + p_at(c + ivec2(1, 0)) + p_at(c - ivec2(0, 1)) + p_at(c + ivec2(0, 1));
    precise float p = (s * pc.scale - imageLoad(div, c).x) * 0.25;
    imageStore(p_out, c, vec4(p));
}
