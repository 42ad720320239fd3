#!/usr/bin/env bash
# Issue 29 on the GPU machine (run through .gpu/run.sh after scripts/stage-gpu.sh and
# scripts/stage-python.sh): the cross-process tests, the handoff benchmark, the fault runs and
# the viewer/producer pairs (Rust and Python). Logs and PNGs under $OUT.
#   bash .gpu/run.sh bash scripts/gpu-ipc.sh [tests|bench|pair|py|fanout|all]   (py: the Python pair alone)
# fanout (issue 37): one publisher, three viewers, a CuPy consumer and the C ABI's subscriber
# (the C example against it), one viewer SIGKILLed; bench_fanout.
set -uo pipefail
what=${1:-all}
B=.gpu/bin
step() { echo "=== $*"; }
lib=$(mktemp -d)
python3 -m pip install -q --no-deps --no-index --target "$lib" .gpu/wheels/cuvk-*.whl
export PYTHONPATH="$lib${PYTHONPATH:+:$PYTHONPATH}"
python_pair() {
  step python pair
  timeout 150 $B/particles --serve galaxies --headless --frames 400 --save-every 100 --out $OUT/serve-py > $OUT/serve-py.log 2>&1 &
  viewer=$!
  sleep 3
  timeout 120 python3 python/examples/ipc_producer.py galaxies > $OUT/producer-py.log 2>&1; echo "producer rc=$?"
  wait $viewer; echo "viewer rc=$?"
  tail -6 $OUT/serve-py.log; tail -4 $OUT/producer-py.log
}
if [ "$what" = tests ] || [ "$what" = all ]; then
  step test-gpu ipc; timeout 300 $B/test-gpu ipc --include-ignored --nocapture > $OUT/test-gpu-ipc.log 2>&1; echo "rc=$?"; grep -E "^test |test result|panicked|ipc_|vulkan validation" $OUT/test-gpu-ipc.log | tail -30
  step test-vulkan ipc; timeout 200 $B/test-vulkan ipc --include-ignored > $OUT/test-vulkan-ipc.log 2>&1; echo "rc=$?"; grep "test result" $OUT/test-vulkan-ipc.log
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  step bench_ipc; timeout 300 $B/bench_ipc --frames 5000 2>&1 | tee $OUT/bench_ipc.log | tail -25
  step bench_ipc faults; timeout 200 $B/bench_ipc --faults 2>&1 | tee $OUT/bench_ipc_faults.log | tail -25
fi
if [ "$what" = pair ] || [ "$what" = all ]; then
  step rust pair
  mkdir -p $OUT/serve-rust $OUT/serve-py
  timeout 120 $B/particles --serve galaxies --headless --frames 400 --save-every 100 --out $OUT/serve-rust > $OUT/serve-rust.log 2>&1 &
  viewer=$!
  sleep 3
  timeout 100 $B/ipc_producer galaxies > $OUT/producer-rust.log 2>&1; echo "producer rc=$?"
  wait $viewer; echo "viewer rc=$?"
  tail -6 $OUT/serve-rust.log; tail -4 $OUT/producer-rust.log
  python_pair
  step kill the producer mid-run, a second one takes over
  timeout 120 $B/particles --serve galaxies --headless --frames 6000 --save-every 1000 --out $OUT/serve-kill > $OUT/serve-kill.log 2>&1 &
  viewer=$!
  sleep 3
  $B/ipc_producer galaxies > $OUT/producer-kill1.log 2>&1 &
  p=$!; sleep 1.5; kill -9 $p; echo "producer 1 killed (SIGKILL)"; sleep 1
  timeout 100 $B/ipc_producer galaxies > $OUT/producer-kill2.log 2>&1; echo "second producer rc=$?"
  wait $viewer; echo "viewer rc=$?"
  grep -v "vulkan validation" $OUT/serve-kill.log | tail -8; tail -3 $OUT/producer-kill2.log
  # The release after the kill must let every old timeline go at once (0 expected).
  echo "drops that waited in vain: $(grep -c 'Semaphore drop:\|dropped while its GPU work' $OUT/serve-kill.log)"
  step a second producer while one is served: turned away at once
  timeout 60 $B/particles --serve galaxies --headless --frames 4000 --save-every 0 --out $OUT/serve-busy > $OUT/serve-busy.log 2>&1 &
  viewer=$!
  sleep 2
  $B/ipc_producer galaxies > $OUT/producer-busy1.log 2>&1 &
  p=$!; sleep 1
  start=$(date +%s%N)
  $B/ipc_producer galaxies > $OUT/producer-busy2.log 2>&1
  echo "second producer rc=$? after $(( ($(date +%s%N) - start) / 1000000 )) ms: $(grep -m1 '^Error' $OUT/producer-busy2.log)"
  wait $p; echo "first producer rc=$?"; wait $viewer; echo "viewer rc=$?"
  if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
    step a producer on the other GPU is refused, the next one is served
    timeout 90 $B/particles --serve galaxies --headless --frames 300 --save-every 0 --out $OUT/serve-wrong > $OUT/serve-wrong.log 2>&1 &
    viewer=$!
    sleep 3
    CUDA_VISIBLE_DEVICES=1 timeout 30 $B/ipc_producer galaxies > $OUT/producer-wrong.log 2>&1
    echo "producer on GPU 1 rc=$?: $(grep -m1 -i 'error' $OUT/producer-wrong.log)"
    timeout 60 $B/ipc_producer galaxies > $OUT/producer-right.log 2>&1; echo "producer on GPU 0 rc=$?"
    wait $viewer; echo "viewer rc=$?"; tail -2 $OUT/serve-wrong.log
  fi
fi
if [ "$what" = fanout ] || [ "$what" = all ]; then
  step fanout: a publisher, three viewers, a CuPy consumer, the C subscriber, a viewer killed
  timeout 90 $B/particles --publish galaxies --particles 4000000 --wait-viewers 3 --fps 240 --frames 6000 > $OUT/serve-publish.log 2>&1 &
  pub=$!
  for v in a b c; do
    timeout 80 $B/particles --view galaxies --headless --frames 600 --save-every 200 --out $OUT/serve-view-$v > $OUT/serve-view-$v.log 2>&1 &
  done
  sleep 4
  timeout 60 python3 python/examples/fanout_consumer.py galaxies --frames 300 > $OUT/serve-cupy.log 2>&1 &
  CUVK_EXAMPLE_PUBLISHER=galaxies timeout 60 $B/capi_example > $OUT/serve-capi.log 2>&1; echo "C subscriber rc=$?: $(grep -m1 'subscriber:' $OUT/serve-capi.log)"
  timeout 60 $B/particles --view galaxies --headless --frames 100000 --save-every 10 --out $OUT/serve-view-k > $OUT/serve-view-k.log 2>&1 &
  k=$!
  # Killed once it draws (its first PNG), not while it is still starting.
  for _ in $(seq 100); do grep -q '^wrote' $OUT/serve-view-k.log 2>/dev/null && break; sleep 0.2; done
  # $k is `timeout`; the viewer is its child (killing timeout alone leaves the viewer running).
  kill -9 $(pgrep -P $k) $k; echo "a viewer killed (SIGKILL) after: $(grep -c '^wrote' $OUT/serve-view-k.log) PNGs"
  wait $pub; echo "publisher rc=$?"; wait
  tail -2 $OUT/serve-view-*.log $OUT/serve-cupy.log $OUT/serve-publish.log
  step bench_fanout; timeout 200 $B/bench_fanout --frames 2000 2>&1 | tee $OUT/bench_fanout.log | tail -45
  step bench_fanout paced at 1 kHz; timeout 200 $B/bench_fanout --frames 2000 --fps 1000 2>&1 | tee $OUT/bench_fanout_paced.log | tail -30
  step bench_fanout_torch; timeout 300 python3 python/examples/bench_fanout_torch.py --steps 1000 2>&1 | tee $OUT/bench_fanout_torch.log | tail -20
fi
echo "=== validation messages in the viewers: $(cat $OUT/serve-*.log 2>/dev/null | grep -c 'vulkan validation')"
if [ "$what" = py ]; then
  python_pair
fi
# Few files come back: one archive.
cd $OUT && tar czf logs.tgz --remove-files *.log serve-* 2>/dev/null; ls -la $OUT
