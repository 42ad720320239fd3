#!/usr/bin/env bash
# Stages everything for the GPU machine: the C example (built against the release cdylib of the
# capi crate, with the library beside it) and then the shared stage script (release tests of
# cuvk and of cuvk-capi, examples, loader). The capi test binary finds libcuvk.so beside it.
#   scripts/stage-gpu.sh            then on the GPU machine: bash .gpu/run.sh
#                                   and: bash .gpu/run.sh .gpu/bin/capi_example
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p cuvk-capi
mkdir -p target/release/examples
cp target/release/libcuvk.so target/release/examples/libcuvk.so
cc -std=c11 -Wall -Wextra -Werror -O1 -I capi/include capi/examples/example.c \
   -L target/release -lcuvk -lvulkan -ldl '-Wl,-rpath,$ORIGIN' -o target/release/examples/capi_example
bash ../shared/gpu/stage.sh -p cuvk -p cuvk-capi --features cuvk/wgpu
# What travels is at most 64 MiB with the working tree: the binaries go compressed (about a
# quarter of their size). On the GPU machine, unpack them first:
#   tar -xJf .gpu/bin.tar.xz -C .gpu && bash .gpu/run.sh
XZ_OPT='-T0 -6' tar -C .gpu -cJf .gpu/bin.tar.xz bin
rm -rf .gpu/bin
du -sh .gpu | awk '{print "packed stage: " $1}'
