#version 450
#extension GL_GOOGLE_include_directive : require
// Velocity + vorticity confinement + the emitters' forces (fluid.cu: fluid_force).
#include "fluid_common.glsl"

layout(set = 0, binding = 0, rg32f) uniform readonly image2D vel_in;
layout(set = 0, binding = 1, r32f) uniform readonly image2D curl;
layout(set = 0, binding = 2, rg32f) uniform writeonly image2D vel_out;

float curl_at(ivec2 t) {
    return imageLoad(curl, clamp_texel(t)).x;
}

void main() {
    ivec2 c = this_texel();
    if (!in_grid(c)) return;
    precise vec2 v = imageLoad(vel_in, c).xy;
    if (P.vorticity != 0.0) {
        float w = curl_at(c);
        precise float gx = abs(curl_at(c + ivec2(1, 0))) - abs(curl_at(c - ivec2(1, 0)));
        precise float gy = abs(curl_at(c + ivec2(0, 1))) - abs(curl_at(c - ivec2(0, 1)));
        precise float len2 = gx * gx + gy * gy + 1e-12;
        float inv = inversesqrt(len2);
        precise float s = P.vorticity * w * P.dt;
        v.x = v.x + gy * inv * s;
        v.y = v.y + (-gx) * inv * s;
    }
    vec2 p = centre(c);
    for (uint i = 0u; i < P.emitters; i++) {
        float f = falloff(i, p);
        if (f > 0.0) {
            precise float k = f * f * f;
            v.x = v.x + P.emitter[i].force.x * k;
            v.y = v.y + P.emitter[i].force.y * k;
        }
    }
    imageStore(vel_out, c, vec4(v, 0.0, 0.0));
}
