// Appended to verify.wgsl: the shared image variant (RGBA8 UNORM, opaque: verify.cu); texel
// (x, y) is element y * width + x, its four bytes the word (R the low byte).

@group(0) @binding(1) var image: texture_2d<f32>;

@compute @workgroup_size(256)
fn check_image(@builtin(global_invocation_id) id: vec3<u32>) {
    let size = textureDimensions(image);
    if (id.x >= size.x || id.y >= size.y) {
        return;
    }
    // pack4x8unorm inverts the UNORM8 decode exactly.
    let seen = pack4x8unorm(textureLoad(image, vec2<u32>(id.x, id.y), 0));
    if (seen != (pattern(id.y * size.x + id.x, params.frame, params.rounds) | 0xff000000u)) {
        atomicAdd(&mismatches[params.frame], 1u);
    }
}
