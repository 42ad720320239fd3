#!/usr/bin/env bash
# On the GPU machine (through .gpu/run.sh, which unpacks the Vulkan loader): installs the
# staged wheel into a private directory and runs the Python tests against torch, cupy and jax.
# Extra arguments go to pytest.
set -euo pipefail
lib=$(mktemp -d)
python3 -m pip install -q --no-deps --no-index --target "$lib" .gpu/wheels/cuvk-*.whl
# The validation layer (staged by .gpu/run.sh) checks every Vulkan call of the tests.
export PYTHONPATH="$lib${PYTHONPATH:+:$PYTHONPATH}" REQUIRE_GPU=1 CUVK_VALIDATION=1
python3 -c 'import cuvk, sys; print("cuvk", cuvk.__version__, "python", sys.version.split()[0])'
python3 -m pytest -q -rs -p no:cacheprovider python/tests "$@"
