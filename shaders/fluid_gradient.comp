#version 450
#extension GL_GOOGLE_include_directive : require
// Velocity minus the pressure gradient (fluid.cu: fluid_gradient).
#include "fluid_common.glsl"

layout(set = 0, binding = 0, r32f) uniform readonly image2D pressure;
layout(set = 0, binding = 1, rg32f) uniform readonly image2D vel_in;
layout(set = 0, binding = 2, rg32f) uniform writeonly image2D vel_out;

float p_at(ivec2 t) {
    return imageLoad(pressure, clamp_texel(t)).x;
}

void main() {
    ivec2 c = this_texel();
    if (!in_grid(c)) return;
    precise float gx = p_at(c + ivec2(1, 0)) - p_at(c - ivec2(1, 0));
    precise float gy = p_at(c + ivec2(0, 1)) - p_at(c - ivec2(0, 1));
    precise vec2 v = imageLoad(vel_in, c).xy;
    v.x = v.x - 0.5 * gx;
    v.y = v.y - 0.5 * gy;
    imageStore(vel_out, c, vec4(v, 0.0, 0.0));
}
