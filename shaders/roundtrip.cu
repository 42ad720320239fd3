// Kernels for the round-trip example, the GPU tests and the bridge benchmark.
// Compiled at run time with NVRTC (cuvk::cuda::compile_module).

// The pattern every side agrees on: element i of a buffer written with `seed`.
__device__ __forceinline__ unsigned int pattern(unsigned long long i, unsigned int seed) {
    return (unsigned int)i * 2654435761u ^ seed;
}

extern "C" __global__ void write_pattern(unsigned int* out, unsigned long long n, unsigned int seed) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        out[i] = pattern(i, seed);
    }
}

// Counts elements that differ from `value` (what a Vulkan fill wrote).
extern "C" __global__ void count_not_equal(const unsigned int* in, unsigned long long n,
                                           unsigned int value, unsigned long long* mismatches) {
    unsigned long long local = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        local += in[i] != value;
    }
    if (local) atomicAdd(mismatches, local);
}

// 16-byte vector copy, grid-stride: the bandwidth benchmark's kernel.
extern "C" __global__ void copy16(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                  unsigned long long n16) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n16;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        dst[i] = src[i];
    }
}

// Writes `value` into every element: the frame-pacing tests' CUDA-side writer.
extern "C" __global__ void fill_u32(unsigned int* out, unsigned long long n, unsigned int value) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        out[i] = value;
    }
}

// Spins every thread of the grid for `ns` nanoseconds of the GPU's global timer: a stream that
// is running (not blocked on a gate) for a known time, for the tests of timeouts behind CUDA
// work; a large grid keeps every SM busy.
extern "C" __global__ void spin_ns(unsigned long long ns) {
    unsigned long long start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    unsigned long long now = start;
    while (now - start < ns) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    }
}
