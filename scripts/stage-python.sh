#!/usr/bin/env bash
# Stages the Python module for the GPU machine: the release abi3 wheel in .gpu/wheels (next to
# the Vulkan loader debs that ../shared/gpu/stage.sh puts in .gpu/debs; python/ travels with the
# working tree). On the GPU machine (Python 3.12 with torch, cupy, jax; no network):
#   bash .gpu/run.sh bash python/gpu-test.sh           # pytest, REQUIRE_GPU=1
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x target/pyenv/bin/maturin ] || { python3 -m venv target/pyenv && target/pyenv/bin/pip install -q "maturin>=1.7,<2" pytest; }
rm -rf .gpu/wheels
mkdir -p .gpu/wheels
target/pyenv/bin/maturin build -q --release -m python/Cargo.toml -o .gpu/wheels
[ -f .gpu/run.sh ] || cp ../shared/gpu/run.sh .gpu/run.sh
ls -la .gpu/wheels
du -sh .gpu | awk '{print "staged size: " $1 " (limit 64M with the working tree)"}'
