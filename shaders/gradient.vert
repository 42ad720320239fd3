#version 450
// One triangle covering the viewport: the image tests' render into a shared colour attachment
// (dev/src/testing/render.rs).
void main() {
    vec2 uv = vec2((gl_VertexIndex << 1) & 2, gl_VertexIndex & 2);
    gl_Position = vec4(uv * 2.0 - 1.0, 0.0, 1.0);
}
