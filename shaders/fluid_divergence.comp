#version 450
#extension GL_GOOGLE_include_directive : require
// div = 0.5 * ((R.x - L.x) + (T.y - B.y)); outside the grid a wall mirrors the edge texel
// (fluid.cu: fluid_divergence).
#include "fluid_common.glsl"

layout(set = 0, binding = 0, rg32f) uniform readonly image2D vel;
layout(set = 0, binding = 1, r32f) uniform writeonly image2D div;

void main() {
    ivec2 c = this_texel();
    if (!in_grid(c)) return;
    vec2 v = imageLoad(vel, c).xy;
    float l = c.x > 0 ? imageLoad(vel, c - ivec2(1, 0)).x : -v.x;
    float r = c.x < int(P.width) - 1 ? imageLoad(vel, c + ivec2(1, 0)).x : -v.x;
    float b = c.y > 0 ? imageLoad(vel, c - ivec2(0, 1)).y : -v.y;
    float t = c.y < int(P.height) - 1 ? imageLoad(vel, c + ivec2(0, 1)).y : -v.y;
    precise float d = 0.5 * ((r - l) + (t - b));
    imageStore(div, c, vec4(d));
}
