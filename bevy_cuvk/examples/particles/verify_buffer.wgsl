// Appended to verify.wgsl: the shared buffer variant.

@group(0) @binding(1) var<storage, read> data: array<u32>;

@compute @workgroup_size(256)
fn check(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = id.x + id.y * groups.x * 256u;
    if (i >= params.n) {
        return;
    }
    // The read comes first and alone: the hash after it is what makes the pass long.
    let seen = data[i];
    if (seen != pattern(i, params.frame, params.rounds)) {
        atomicAdd(&mismatches[params.frame], 1u);
    }
}
