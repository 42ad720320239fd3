#!/usr/bin/env bash
# Issue 28's checks on a machine with several GPUs, through .gpu/run.sh (stage first with
# scripts/stage-gpu.sh and scripts/stage-python.sh). Logs and PNGs under $OUT.
#   bash .gpu/run.sh bash scripts/gpu-multi.sh [bench]
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 REQUIRE_GPUS=2
B=.gpu/bin
OUT=${OUT:-/tmp/cuvk-multi}
mkdir -p "$OUT"
nvidia-smi topo -m | tee "$OUT/topo.txt"
step() { echo "=== $*"; }
if [ "${1:-}" = bench ]; then
  step bench; timeout 580 $B/particles --gpus 4 --bench --out "$OUT/bench" 2>&1 | grep -v "^GPU\|Legend\|^ \|^$" | tail -30
  exit
fi
step tests; timeout 240 $B/test-gpu peers --include-ignored 2>&1 | tail -12
step demo-tests; timeout 200 $B/test-demos multi_gpu --include-ignored --nocapture 2>&1 | grep -v "^\$ particles" | tail -14
step bench_peer; timeout 120 $B/bench_peer 2>&1 | tail -5
for g in 1 2 4; do
  step "sortlast $g"; timeout 120 $B/particles --gpus $g --particles 20000000 --frames 120 --out "$OUT/g$g" 2>&1 | tail -2
done
step "sortlast 2, network transport"; timeout 120 $B/particles --gpus 2 --particles 20000000 --frames 120 --net --out "$OUT/n2" 2>&1 | tail -1
step python-bench; timeout 120 bash python/gpu-test.sh --co -q >/dev/null 2>&1; lib=$(mktemp -d); python3 -m pip install -q --no-deps --no-index --target "$lib" .gpu/wheels/cuvk-*.whl; PYTHONPATH=$lib timeout 120 python3 python/examples/bench_peer_copy.py 2>&1 | tail -6
step python-tests; OUT=$OUT timeout 300 bash python/gpu-test.sh python/tests/test_multi_gpu.py 2>&1 | tail -4
