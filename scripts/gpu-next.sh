#!/usr/bin/env bash
# Branch `next` on the GPU machine, in one call after scripts/stage-gpu.sh and
# scripts/stage-python.sh (run through .gpu/run.sh): what this branch added and never ran
# there — the fan-out front ends and measurements (gpu-ipc.sh fanout: three viewers, a CuPy
# consumer, the C subscriber, a viewer killed; bench_fanout with its phase columns;
# bench_fanout_torch), the Python depth compositor (its GPU tests and the torchrun check),
# bench_composite on every GPU. Logs in $OUT/next.tgz (PNGs: one per viewer). The suite
# itself is `bash .gpu/run.sh`.
#   bash .gpu/run.sh bash scripts/gpu-next.sh [tests] [python] [composite] [fanout] [bench] [attach] [bevy]
#   (default: all; bevy needs scripts/stage-bevy.sh's binary in .gpu/bin)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
W=$(mktemp -d)
what=" ${*:-tests python composite fanout attach bevy} "
# The archive is rewritten after every step: a call cut short still brings back what ran.
pack() { (cd $W && { find . -type f ! -name '*.png'; find . -name '*00200.png' | head -4; } | tar -czf $OUT/next.tgz -T -) 2>/dev/null; }
step() { pack; echo "=== $*"; }
if [[ $what == *" tests "* ]]; then
  step test-gpu fanout
  timeout 200 .gpu/bin/test-gpu fanout --include-ignored --nocapture > $W/test-gpu-fanout.log 2>&1; echo "rc=$?"
  grep -E "^test |test result|panicked|fanout:|vulkan validation" $W/test-gpu-fanout.log | tail -20
fi
if [[ $what == *" python "* ]]; then
  step python: composite, fan-out, torchrun depth
  timeout 300 bash python/gpu-test.sh -k "composite or fanout or subscriber or depth" > $W/py.log 2>&1; echo "python rc=$?"
  grep -E "^(FAILED|ERROR)|Error|assert|passed|failed" $W/py.log | head -30
fi
if [[ $what == *" composite "* ]]; then
  step bench_composite
  timeout 200 .gpu/bin/bench_composite > $W/bench_composite.log 2>&1; echo "rc=$?"
  grep -v "^ *[0-9]*: \|^Stack backtrace" $W/bench_composite.log | tail -30
fi
if [[ $what == *" fanout "* ]]; then
  step gpu-ipc.sh fanout
  mkdir -p $W/ipc
  OUT=$W/ipc timeout 420 bash scripts/gpu-ipc.sh fanout > $W/fanout.log 2>&1; echo "rc=$?"
  (cd $W/ipc && tar -xzf logs.tgz && rm -f logs.tgz)
  grep -E "rc=|===|\| |killed|subscriber|attach of" $W/fanout.log | tail -90
fi
if [[ $what == *" bench "* ]]; then
  step bench_fanout
  timeout 240 .gpu/bin/bench_fanout --frames 2000 > $W/bench_fanout.log 2>&1; echo "rc=$?"
  grep -E "^\||attach of|Error" $W/bench_fanout.log | tail -60
fi
if [[ $what == *" attach "* ]]; then
  step where an attach of 8 x 64 MiB slots goes
  timeout 30 .gpu/bin/particles --publish attach-probe --particles 4000000 --frames 1500 --fps 240 > $W/attach-publisher.log 2>&1 &
  sleep 2
  for i in 1 2 3; do RUST_LOG=cuvk::ipc=debug timeout 20 .gpu/bin/bench_fanout --consumer attach-probe > $W/attach-$i.log 2>&1 & sleep 1; done
  wait; grep -h "attached to\|ATTACH" $W/attach-*.log | cut -c1-300
fi
if [[ $what == *" bevy "* ]]; then
  step bevy_cuvk gpu-test.sh section 5: Bevy as a viewer
  BEVY_VIEW_ONLY=${BEVY_VIEW_ONLY:-1} OUT=$W timeout 300 bash bevy_cuvk/gpu-test.sh 2>&1 | tee $W/bevy.log | tail -12
fi
pack
ls -la $OUT
