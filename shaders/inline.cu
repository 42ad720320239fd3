// Kernels for CUDA-in-Vulkan-queue launches (VK_NVX_binary_import): the same CUDA C++ as the
// CUDA context runs, compiled to PTX by NVRTC. Pointer arguments are Vulkan buffer device
// addresses. What each kernel exercises is tested in tests/gpu/inline.rs.

// Writes value + i into n words: the basic data path.
extern "C" __global__ void stamp(unsigned int* out, unsigned long long n, unsigned int value) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        out[i] = value + (unsigned int)i;
    }
}

// Adds `add` to n words in place (Vulkan wrote them: the read path).
extern "C" __global__ void add_in_place(unsigned int* data, unsigned long long n, unsigned int add) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        data[i] += add;
    }
}

// Sum of n words: a block-level reduction in static shared memory, then one atomicAdd per
// block into *sum (shared memory and global atomics).
extern "C" __global__ void sum_shared_atomic(const unsigned int* in, unsigned long long n,
                                             unsigned long long* sum) {
    __shared__ unsigned long long partial[256];
    unsigned long long local = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        local += in[i];
    }
    partial[threadIdx.x] = local;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(sum, partial[0]);
}

// The same reduction with dynamic shared memory (sized at launch).
extern "C" __global__ void sum_dynamic_shared(const unsigned int* in, unsigned long long n,
                                              unsigned long long* sum) {
    extern __shared__ unsigned long long dyn[];
    unsigned long long local = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        local += in[i];
    }
    dyn[threadIdx.x] = local;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) dyn[threadIdx.x] += dyn[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(sum, dyn[0]);
}

// printf from a kernel (does its output reach the process's stdout from a Vulkan queue?).
extern "C" __global__ void hello(unsigned int tag) {
    if (threadIdx.x == 0 && blockIdx.x == 0) printf("cuvk inline kernel says %u\n", tag);
}

// 16-byte vector copy: the bandwidth comparison's kernel.
extern "C" __global__ void copy16(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                  unsigned long long n16) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n16;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        dst[i] = src[i];
    }
}

// A struct argument passed by value (16-byte aligned), like particles.cu's Params.
struct __align__(16) Affine {
    float scale;
    float offset;
    unsigned int count;
    unsigned int pad;
};
extern "C" __global__ void affine(float* data, Affine a) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += gridDim.x * blockDim.x) {
        data[i] = data[i] * a.scale + a.offset;
    }
}
