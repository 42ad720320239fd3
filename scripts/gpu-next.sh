#!/usr/bin/env bash
# Branch `next` on the GPU machine, in one call after scripts/stage-gpu.sh and
# scripts/stage-python.sh (run through .gpu/run.sh): what this branch added and never ran
# there — the fan-out front ends and measurements (gpu-ipc.sh fanout: three viewers, a CuPy
# consumer, the C subscriber, a viewer killed; bench_fanout with its phase columns;
# bench_fanout_torch), the Python depth compositor (its GPU tests and the torchrun check),
# bench_composite on every GPU. Logs in $OUT/next.tgz. The suite itself is `bash .gpu/run.sh`.
#   bash .gpu/run.sh bash scripts/gpu-next.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
W=$(mktemp -d)
step() { echo "=== $*"; }
step python: composite, fan-out, torchrun depth
timeout 300 bash python/gpu-test.sh -k "composite or fanout or subscriber or depth" > $W/py.log 2>&1; echo "python rc=$?"; tail -3 $W/py.log
step bench_composite
timeout 200 .gpu/bin/bench_composite > $W/bench_composite.log 2>&1; echo "rc=$?"; tail -20 $W/bench_composite.log
step gpu-ipc.sh fanout
OUT=$W timeout 400 bash scripts/gpu-ipc.sh fanout > $W/fanout.log 2>&1; echo "rc=$?"; grep -E "rc=|===|\| " $W/fanout.log | tail -60
tar -czf $OUT/next.tgz -C $W . 2>/dev/null
