#version 450
// Point-list rasterisation of the particles: the alternative to splat.comp measured by
// examples/bench_draw.rs (one vertex per particle, read from the storage buffer).
layout(std430, set = 0, binding = 0) readonly buffer Pos { vec4 pos[]; };
layout(push_constant) uniform Push { mat4 view_proj; } pc;

void main() {
    gl_Position = pc.view_proj * vec4(pos[gl_VertexIndex].xyz, 1.0);
    gl_PointSize = 1.0;
}
