#!/usr/bin/env bash
# Everything the tests need, then the tests: formatting, lints, unit + property tests, Vulkan
# tests on whatever Vulkan device there is (lavapipe in CI) under the validation layer, and
# the GPU tests (which skip with a printed reason where there is no CUDA GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
# A machine with the packages above has a Vulkan device: its absence is a failure, not a skip.
export REQUIRE_VULKAN=1
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo test
# The wgpu integration (feature `wgpu`, off by default).
cargo clippy --all-targets --features wgpu -- -D warnings
cargo test --features wgpu
