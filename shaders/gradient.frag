#version 450
// A gradient every side can predict exactly: channel values k/255 with k an integer, so a
// UNORM8 attachment stores k (dev/src/testing/render.rs, gradient_texel).
layout(location = 0) out vec4 color;

void main() {
    ivec2 p = ivec2(gl_FragCoord.xy);
    color = vec4(float(p.x & 255), float(p.y & 255), float((p.x + 2 * p.y) & 255), 255.0) / 255.0;
}
