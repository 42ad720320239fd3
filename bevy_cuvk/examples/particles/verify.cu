// `--verify`'s writer: frame `frame`'s pattern into the shared buffer, `rounds` hash rounds
// per element so that the kernel runs long enough for a missing ordering to show.
// The same hash as verify.wgsl (which checks it) and verify.rs (the CPU's final check).

__device__ unsigned int lowbias32(unsigned int x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

__device__ unsigned int pattern(unsigned int i, unsigned int frame, unsigned int rounds) {
    unsigned int v = i ^ (frame * 0x9e3779b9u);
    for (unsigned int r = 0; r < rounds; ++r) {
        v = lowbias32(v + r);
    }
    return v;
}

extern "C" __global__ void fill(unsigned int* data, unsigned int n, unsigned int frame,
                                unsigned int rounds) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        data[i] = pattern(i, frame, rounds);
    }
}

// The image variant: frame `frame`'s pattern into an RGBA8 image (one 32-bit word per texel,
// R in the low byte), through a surface handle
// (a CUDA surface object on the stream path, an inline image handle from
// VK_NVX_image_view_handle on the inline path: both are 64-bit values to the kernel).
extern "C" __global__ void fill_image(unsigned long long surf, unsigned int width,
                                      unsigned int height, unsigned int frame,
                                      unsigned int rounds) {
    unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int y = blockIdx.y;
    if (x >= width || y >= height) {
        return;
    }
    // Opaque (alpha 255): Bevy's sprite pipeline blends by alpha, and draws this image too.
    unsigned int word = pattern(y * width + x, frame, rounds) | 0xff000000u;
    asm volatile("sust.b.2d.b32.trap [%0, {%1, %2}], {%3};" ::"l"(surf), "r"(x * 4u), "r"(y),
                 "r"(word)
                 : "memory");
}
