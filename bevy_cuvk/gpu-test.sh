#!/usr/bin/env bash
# bevy_cuvk's tests on the GPU machine (CUDA + Vulkan, no Rust): the example staged by
# scripts/stage-bevy.sh, run as the checks a test binary would make (one Bevy binary is most of
# the 64 MiB that may travel). Fails on any unexpected outcome.
#   on the GPU machine: bash .gpu/run.sh bash bevy_cuvk/gpu-test.sh
#
# 1. --check on the inline and stream paths: the CUDA-stepped particles Bevy drew equal the CPU
#    reference; the WGSL path too.
# 2. --verify, 1,000 frames, buffer and image, inline and stream: CUDA writes, Bevy's compute
#    pass reads every element the same frame, exact every frame and in the final wgpu
#    read-back, and (image) a Bevy Sprite draws the shared image exactly. Negative controls:
#    the stream path --unordered (no semaphore, no host wait) must show races; the inline path
#    --swapped (the kernel recorded after the check) must too. The inline path --unordered (no
#    barriers) is reported, not judged: on the H200 the driver serialised the launch with the
#    next dispatch (0 races in 1,000 frames), which Vulkan does not promise.
# 3. Under the validation layer: no message but the one plain Bevy gets on this driver (an old
#    layer, 1.3.239, not knowing a struct wgpu chains: VUID-VkDeviceCreateInfo-pNext-pNext).
# 4. Exits mid-run (update 3 and 40, ordered and not, with work in flight): exit status 0, no
#    error logged, no validation message.
# 5. --view: Bevy attached as a viewer to `particles --publish` in another process draws 300
#    frames (PNGs), under the validation layer; then the publisher is SIGKILLed while Bevy
#    draws: the viewer says so and exits 0, no error, no validation message. (Sections 1-4
#    may be skipped with BEVY_VIEW_ONLY=1.)
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BEVY_PARTICLES:-.gpu/bin/bevy_particles}
out=${OUT:-/tmp}/bevy_cuvk_gpu_test
mkdir -p "$out"
export RUST_LOG=warn
known="VUID-VkDeviceCreateInfo-pNext-pNext"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
vuids() { grep -o 'VUID-[A-Za-z0-9_-]*' "$1" | grep -v "$known" | sort | uniq -c | tr '\n' ' '; }

if [ "${BEVY_VIEW_ONLY:-0}" != 1 ]; then
echo "=== 1. --check (inline, stream, WGSL)"
for args in "--launch inline" "--launch stream" "--sim wgsl"; do
  log=$out/check-${args// /}.txt
  WGPU_VALIDATION=1 timeout 120 $B --headless --frames 8 --check --particles 16384 --size 256x128 \
    $args --out "$out/check" >"$log" 2>&1
  rc=$?; line=$(grep '^check (' "$log")
  echo "$args: rc=$rc $line"
  [ $rc = 0 ] && [[ $line == *PASS ]] || bad "--check $args"
  v=$(vuids "$log"); [ -z "$v" ] || bad "--check $args: validation: $v"
done

echo "=== 2. --verify, 1000 frames"
for t in "" --image; do for l in inline stream; do for u in "" --unordered --swapped; do
  [ $l = stream ] && [ "$u" = --swapped ] && continue
  log=$out/verify$t-$l$u.txt
  timeout 200 $B --verify --launch $l $t $u --frames 1000 >"$log" 2>&1
  rc=$?; line=$(grep '^verify (' "$log")
  echo "rc=$rc $line"
  if [ -z "$u" ]; then
    [ $rc = 0 ] && [[ $line == *": PASS" ]] || { bad "verify $l $t"; grep -E 'ERROR|panic' "$log" | grep -v "$known" | head -5 | cut -c1-400; }
  elif [ $l = inline ] && [ $u = --unordered ]; then
    [[ $line == *"(negative control)" ]] || bad "verify $l $t $u did not run"
  else
    [ $rc = 0 ] && [[ $line == *"RACES SEEN (negative control)" ]] || bad "negative control $l $t $u saw no race"
  fi
done; done; done

echo "=== 3. and 4. the validation layer, exits mid-run"
for t in "" --image; do for l in inline stream; do
  log=$out/val$t-$l.txt
  WGPU_VALIDATION=1 timeout 200 $B --verify --launch $l $t --frames 300 >"$log" 2>&1
  rc=$?; line=$(grep '^verify (' "$log"); v=$(vuids "$log")
  echo "validation $l $t: rc=$rc ${v:-no message} | $line"
  [ $rc = 0 ] && [ -z "$v" ] && [[ $line == *": PASS" ]] || { bad "validation $l $t"; grep -E 'ERROR|panic|VUID' "$log" | grep -v "$known" | head -5 | cut -c1-400; }
  for at in 3 40; do for u in "" --unordered; do
    log=$out/exit$t-$l$u-$at.txt
    WGPU_VALIDATION=1 timeout 100 $B --verify --launch $l $t $u --frames 1000 --exit-at $at >"$log" 2>&1
    rc=$?; v=$(vuids "$log"); e=$(grep -E 'ERROR|panic' "$log" | grep -c -v "$known")
    echo "exit at update $at, $l $t $u: rc=$rc errors=$e ${v:-no validation message}"
    if [ $rc != 0 ] || [ "$e" != 0 ] || [ -n "$v" ]; then
      bad "exit at $at $l $t $u"; grep -E 'ERROR|panic|VUID' "$log" | grep -v "$known" | head -5 | cut -c1-400
    fi
  done; done
done; done

fi

echo "=== 5. --view: Bevy as a viewer of a publisher in another process (CuvkSubscriber)"
P=${PARTICLES:-.gpu/bin/particles}
name=bevy-view-$$
timeout 150 $P --publish $name --particles 1000000 --wait-viewers 1 --fps 240 --frames 4000 >"$out/publish.txt" 2>&1 &
pub=$!
log=$out/view.txt
WGPU_VALIDATION=1 timeout 120 $B --view $name --headless --frames 300 --every 100 --yaw 1.2 --out "$out/view" >"$log" 2>&1
rc=$?; v=$(vuids "$log"); pngs=$(ls "$out/view" 2>/dev/null | grep -c png)
echo "view: rc=$rc, $(grep -m1 '^attached' "$log"), $pngs PNGs, ${v:-no validation message} | $(grep '^frames:' "$log")"
[ $rc = 0 ] && [ -z "$v" ] && [ "$pngs" -ge 3 ] && grep -q '^attached' "$log" || { bad "view"; grep -E 'ERROR|panic|could not|failed' "$log" | grep -v "$known" | head -5 | cut -c1-400; }
# The publisher killed (SIGKILL) while Bevy draws: the viewer says so and ends cleanly.
log=$out/view-killed.txt
WGPU_VALIDATION=1 timeout 120 $B --view $name --headless --frames 100000 --every 0 --out "$out/view-killed" >"$log" 2>&1 &
viewer=$!
for _ in $(seq 100); do grep -q '^attached' "$log" 2>/dev/null && break; sleep 0.2; done
sleep 2
kill -9 $(pgrep -P $pub) $pub 2>/dev/null
wait $viewer; rc=$?; v=$(vuids "$log"); e=$(grep -E 'ERROR|panic' "$log" | grep -c -v "$known")
echo "view, publisher killed: rc=$rc errors=$e ${v:-no validation message} | $(grep -m1 'publisher ended' "$log") | $(grep '^frames:' "$log")"
[ $rc = 0 ] && [ "$e" = 0 ] && [ -z "$v" ] && grep -q 'publisher ended' "$log" || { bad "view, publisher killed"; grep -E 'ERROR|panic|VUID' "$log" | grep -v "$known" | head -5 | cut -c1-400; }

echo "=== bevy_cuvk GPU tests: $([ $fail = 0 ] && echo passed || echo FAILED)"
exit $fail
