#version 450
#extension GL_GOOGLE_include_directive : require
// Semi-Lagrangian advection of the dye by the final velocity, then the emitters' dye
// (fluid.cu: fluid_advect_dye). The dye is RGBA16F: loads give its exact values as floats.
#include "fluid_common.glsl"

layout(set = 0, binding = 0, rg32f) uniform readonly image2D vel;
layout(set = 0, binding = 1, rgba16f) uniform readonly image2D dye_in;
layout(set = 0, binding = 2, rgba16f) uniform writeonly image2D dye_out;

vec4 sample4(vec2 p) {
    Taps t = taps(p);
    vec4 v00 = imageLoad(dye_in, t.t0);
    vec4 v10 = imageLoad(dye_in, ivec2(t.t1.x, t.t0.y));
    vec4 v01 = imageLoad(dye_in, ivec2(t.t0.x, t.t1.y));
    vec4 v11 = imageLoad(dye_in, t.t1);
    vec4 r;
    for (int i = 0; i < 4; i++) {
        r[i] = lerp1(lerp1(v00[i], v10[i], t.f.x), lerp1(v01[i], v11[i], t.f.x), t.f.y);
    }
    return r;
}

void main() {
    ivec2 c = this_texel();
    if (!in_grid(c)) return;
    vec2 u = imageLoad(vel, c).xy;
    vec2 cp = centre(c);
    precise vec2 p = cp - P.dt * u;
    precise vec4 d = sample4(p) * P.dye_keep;
    for (uint i = 0u; i < P.emitters; i++) {
        float f = falloff(i, cp);
        if (f > 0.0) {
            precise float k = f * f * f;
            d.x = d.x + P.emitter[i].color.x * k;
            d.y = d.y + P.emitter[i].color.y * k;
            d.z = d.z + P.emitter[i].color.z * k;
            d.w = d.w + k;
        }
    }
    imageStore(dye_out, c, vec4(to_half_exact(d.x), to_half_exact(d.y), to_half_exact(d.z), to_half_exact(d.w)));
}
