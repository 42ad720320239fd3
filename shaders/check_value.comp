#version 450
// Counts the elements of `data` that differ from `expected` (the frame number CUDA wrote):
// the frame-pacing tests' Vulkan-side reader. Grid-stride, so any element count fits.
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer Data { uint data[]; };
layout(std430, set = 0, binding = 1) buffer Result {
    uint mismatches;
    uint checks;
    uint last_bad;
};
layout(push_constant) uniform Push {
    uint expected;
    uint count;
};

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint bad = 0;
    uint seen = 0;
    for (uint i = gl_GlobalInvocationID.x; i < count; i += stride) {
        uint v = data[i];
        if (v != expected) { bad += 1; seen = v; }
    }
    if (bad != 0) {
        atomicAdd(mismatches, bad);
        atomicExchange(last_bad, seen);
    }
    if (gl_GlobalInvocationID.x == 0) {
        atomicAdd(checks, 1);
    }
}
