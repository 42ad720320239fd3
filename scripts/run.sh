#!/usr/bin/env bash
# The main job: the particle demo on whatever GPU is there — CUDA simulation drawn by Vulkan
# from the same memory on an NVIDIA GPU, the Vulkan compute simulation elsewhere; a window
# where there is a display, PNG frames in out/ where there is none. Extra arguments go to the
# demo (e.g. --particles 10000000, --bench, --headless --frames 300).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
cargo run --release --example particles -- "$@"
