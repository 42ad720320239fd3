#version 450
#extension GL_GOOGLE_include_directive : require
// curl = 0.5 * ((R.y - L.y) - (T.x - B.x)), edges clamped (fluid.cu: fluid_curl).
#include "fluid_common.glsl"

layout(set = 0, binding = 0, rg32f) uniform readonly image2D vel;
layout(set = 0, binding = 1, r32f) uniform writeonly image2D curl;

void main() {
    ivec2 c = this_texel();
    if (!in_grid(c)) return;
    vec2 l = imageLoad(vel, clamp_texel(c - ivec2(1, 0))).xy;
    vec2 r = imageLoad(vel, clamp_texel(c + ivec2(1, 0))).xy;
    vec2 b = imageLoad(vel, clamp_texel(c - ivec2(0, 1))).xy;
    vec2 t = imageLoad(vel, clamp_texel(c + ivec2(0, 1))).xy;
    precise float w = 0.5 * ((r.y - l.y) - (t.x - b.x));
    imageStore(curl, c, vec4(w));
}
