#!/usr/bin/env bash
# Stages bevy_cuvk's example for the GPU machine: built with the `gpu` profile (small: a Bevy
# binary is most of the 64 MiB that may travel) into .gpu/bin/bevy_particles, beside the Vulkan
# loader and validation layer that ../shared/gpu/stage.sh stages (run that once first, or
# scripts/stage-gpu.sh).
#   scripts/stage-bevy.sh      then on the GPU machine: bash .gpu/run.sh .gpu/bin/bevy_particles --help
set -euo pipefail
cd "$(dirname "$0")/.."
if ! ls .gpu/debs/libvulkan1_*.deb >/dev/null 2>&1; then
  echo "no Vulkan loader staged in .gpu/debs: run scripts/stage-gpu.sh (or ../shared/gpu/stage.sh) first" >&2
  exit 1
fi
cargo build -p bevy_cuvk --profile gpu --example bevy_particles
mkdir -p .gpu/bin
target=${CARGO_TARGET_DIR:-target}
cp "$target/gpu/examples/bevy_particles" .gpu/bin/bevy_particles
cp ../shared/gpu/run.sh .gpu/run.sh
du -sh .gpu | awk '{print "staged size: " $1 " (limit 64M with the working tree)"}'
