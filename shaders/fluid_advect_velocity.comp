#version 450
#extension GL_GOOGLE_include_directive : require
// Semi-Lagrangian self-advection (fluid.cu: fluid_advect_velocity).
#include "fluid_common.glsl"

layout(set = 0, binding = 0, rg32f) uniform readonly image2D vel_in;
layout(set = 0, binding = 1, rg32f) uniform writeonly image2D vel_out;

vec2 sample2(vec2 p) {
    Taps t = taps(p);
    vec2 v00 = imageLoad(vel_in, t.t0).xy;
    vec2 v10 = imageLoad(vel_in, ivec2(t.t1.x, t.t0.y)).xy;
    vec2 v01 = imageLoad(vel_in, ivec2(t.t0.x, t.t1.y)).xy;
    vec2 v11 = imageLoad(vel_in, t.t1).xy;
    return vec2(lerp1(lerp1(v00.x, v10.x, t.f.x), lerp1(v01.x, v11.x, t.f.x), t.f.y),
                lerp1(lerp1(v00.y, v10.y, t.f.x), lerp1(v01.y, v11.y, t.f.x), t.f.y));
}

void main() {
    ivec2 c = this_texel();
    if (!in_grid(c)) return;
    vec2 u = imageLoad(vel_in, c).xy;
    precise vec2 p = centre(c) - P.dt * u;
    precise vec2 s = sample2(p) * P.velocity_keep;
    imageStore(vel_out, c, vec4(s, 0.0, 0.0));
}
