#version 450
// The particle demo's HUD: lines of text in a 5x7 bitmap font on a darkened panel, written
// into the finished picture (after particles_resolve.comp), so the window and the PNG frames show it
// alike. One invocation per panel pixel.
layout(local_size_x = 256) in;

// Per ASCII code two words: glyph rows 0-3 and 4-6, a byte each (low byte first), bit 4 the
// leftmost of the five columns.
layout(std430, set = 0, binding = 0) readonly buffer Font { uint font[]; };
// `lines` rows of `stride` ASCII codes, four to a word (low byte first).
layout(std430, set = 0, binding = 1) readonly buffer Text { uint text[]; };
layout(std430, set = 0, binding = 2) buffer Pixels { uint pixels[]; };
layout(push_constant) uniform Push {
    uint width;        // picture, pixels
    uint height;
    uint left;         // panel's top-left corner, pixels
    uint top;
    uint panel_width;  // pixels
    uint panel_height;
    uint scale;        // pixels per font pixel
    uint columns;      // characters shown per line
    uint stride;       // characters per line in `text`
    uint lines;
    uint bgra;         // 1: pixels are B8G8R8A8
} pc;

// A character cell in font pixels (glyph and spacing), and the panel's margin around the text.
const uint CELL_W = 6u;
const uint CELL_H = 10u;
const uint MARGIN = 4u;

// Whether the font pixel (fx, fy), counted from the text's top-left corner, is ink.
bool ink(uint fx, uint fy) {
    uint col = fx / CELL_W, row = fy / CELL_H;
    uint gx = fx % CELL_W, gy = fy % CELL_H;
    if (col >= pc.columns || row >= pc.lines || gx >= 5u || gy >= 7u) return false;
    uint at = row * pc.stride + col;
    uint code = (text[at / 4u] >> (8u * (at % 4u))) & 127u;
    uint bits = (font[2u * code + gy / 4u] >> (8u * (gy % 4u))) & 31u;
    return (bits & (16u >> gx)) != 0u;
}

void main() {
    uint n = pc.panel_width * pc.panel_height;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < n; i += stride) {
        uint px = i % pc.panel_width, py = i / pc.panel_width;
        uint x = pc.left + px, y = pc.top + py;
        if (x >= pc.width || y >= pc.height) continue;
        uint at = y * pc.width + x;
        uint p = pixels[at];
        vec3 rgb = vec3(p & 255u, (p >> 8) & 255u, (p >> 16) & 255u) / 255.0;
        if (pc.bgra != 0u) rgb = rgb.bgr;
        rgb *= 0.3; // the panel: the picture, dimmed
        uint fx = px / pc.scale, fy = py / pc.scale;
        if (fx >= MARGIN && fy >= MARGIN && ink(fx - MARGIN, fy - MARGIN)) {
            // The first line (the title) in gold, the others in pale blue-white.
            rgb = (fy - MARGIN) / CELL_H == 0u ? vec3(1.0, 0.8, 0.45) : vec3(0.86, 0.9, 1.0);
        }
        uvec3 b = uvec3(clamp(rgb, 0.0, 1.0) * 255.0 + 0.5);
        if (pc.bgra != 0u) b = b.bgr;
        pixels[at] = b.r | (b.g << 8) | (b.b << 16) | (255u << 24);
    }
}
