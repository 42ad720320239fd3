// The CUDA side of bench_surface: the same work as shaders/surface_store.comp, one thread per
// texel of a 16x16 block grid, word 0 of images.cu's pattern written through a surface handle
// (an inline image handle from VK_NVX_image_view_handle, passed as a 64-bit value).
typedef unsigned long long u64;

__device__ __forceinline__ unsigned int pattern_word(unsigned int i, unsigned int w, unsigned int seed) {
    unsigned int h = (i * 4u + w) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return h;
}

extern "C" __global__ void surface_store(u64 surf, unsigned int width, unsigned int height, unsigned int seed) {
    unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    unsigned int word = pattern_word(y * width + x, 0u, seed);
    asm volatile("sust.b.2d.b32.trap [%0, {%1, %2}], {%3};" ::"l"(surf), "r"(x * 4u), "r"(y), "r"(word) : "memory");
}
