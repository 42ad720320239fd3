#version 450
// Each point adds a little light; additive blending accumulates density.
layout(location = 0) out vec4 color;

void main() {
    color = vec4(0.1, 0.06, 0.02, 1.0);
}
