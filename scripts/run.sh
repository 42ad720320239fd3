#!/usr/bin/env bash
# The main job on whatever GPU is there: the round trip through shared memory, CUDA <-> Vulkan
# on an NVIDIA GPU; where there is no CUDA, the Vulkan-only round trip on any Vulkan device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
cargo run --release --example roundtrip -- "$@"
