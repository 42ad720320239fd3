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
# Formatting, then lints on every target (warnings are errors).
cargo fmt --all -- --check
cargo clippy --workspace --exclude bevy_cuvk --all-targets -- -D warnings
# The library type-checks for Windows with no warnings: Debian's rustc (deps.sh) builds std
# from source for the target (-Zbuild-std, allowed on a stable rustc by RUSTC_BOOTSTRAP), into
# its own target dir so that the RUSTFLAGS change does not invalidate the normal build.
# Dependencies' warnings do not count: cargo caps their lints (--cap-lints allow).
RUSTFLAGS="-D warnings" RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 \
  cargo check -Zbuild-std=std,panic_abort --target x86_64-pc-windows-msvc --lib \
  --target-dir target/windows-check
# The API docs build with no warnings (broken intra-doc links, bad code blocks).
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --lib
# Unit, property, Vulkan and GPU tests, and every example and bench built and run as tests;
# then the doctests, which --all-targets leaves out.
cargo test --workspace --exclude bevy_cuvk --all-targets
cargo test --workspace --exclude bevy_cuvk --doc
# The wgpu integration (feature `wgpu`, off by default).
cargo clippy --all-targets --features wgpu -- -D warnings
cargo test --features wgpu
# The Bevy plugin (bevy_cuvk/), a step of its own: it builds Bevy (about 300 crates). Lints,
# then its tests on lavapipe (the plugin's status and refusals, the WGSL path against the CPU
# reference, the example headless and in a window under Xvfb, the example's --verify saying
# why it cannot run without CUDA) and its doctests. Its GPU tests: bevy_cuvk/gpu-test.sh.
cargo clippy -p bevy_cuvk --all-targets -- -D warnings
cargo test -p bevy_cuvk --all-targets
cargo test -p bevy_cuvk --doc
# The Python module (python/): maturin builds the abi3 wheel (debug profile) from this tree,
# pip installs it into a venv under target/, pytest runs what runs without a GPU (import,
# stubs, exceptions) and skips the GPU tests with the reason (REQUIRE_GPU=1 makes that a
# failure, as on the GPU machine).
python3 -m venv target/pyenv
target/pyenv/bin/pip install -q --disable-pip-version-check "maturin>=1.7,<2" pytest
rm -rf target/wheels
target/pyenv/bin/maturin build -q -m python/Cargo.toml -o target/wheels
target/pyenv/bin/pip install -q --disable-pip-version-check --force-reinstall --no-deps target/wheels/cuvk-*.whl
(cd target && pyenv/bin/python -m pytest -q -rs ../python/tests)
