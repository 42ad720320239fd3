// `--verify`'s reader, the part both variants share: Bevy's compute pass checks every element
// of the shared buffer or image against the pattern CUDA should have written for this frame
// (verify.cu) and counts the mismatches per frame. The example appends verify_buffer.wgsl or
// verify_image.wgsl (binding 1: what CUDA wrote).

struct Params {
    n: u32,
    frame: u32,
    rounds: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(2) var<storage, read_write> mismatches: array<atomic<u32>>;

fn lowbias32(x0: u32) -> u32 {
    var x = x0;
    x ^= x >> 16u;
    x *= 0x7feb352du;
    x ^= x >> 15u;
    x *= 0x846ca68bu;
    x ^= x >> 16u;
    return x;
}

fn pattern(i: u32, frame: u32, rounds: u32) -> u32 {
    var v = i ^ (frame * 0x9e3779b9u);
    for (var r = 0u; r < rounds; r++) {
        v = lowbias32(v + r);
    }
    return v;
}
