"""Shared fixtures: a Bridge where there is a CUDA GPU, else a skip with the reason (a failure
with REQUIRE_GPU=1, as the Rust GPU tests do)."""

import os

import pytest

import cuvk


def _open_bridge():
    try:
        return cuvk.Bridge(validation=os.environ.get("CUVK_VALIDATION") == "1"), None
    except cuvk.CuvkError as e:
        if e.kind in ("NotFound", "Unsupported"):
            return None, f"no CUDA GPU with a matching Vulkan device: {e}"
        raise


@pytest.fixture(scope="session")
def bridge():
    b, why = _open_bridge()
    if b is None:
        if os.environ.get("REQUIRE_GPU") == "1":
            pytest.fail(f"REQUIRE_GPU=1 but {why}")
        pytest.skip(why)
    yield b
    b.synchronize()
    msgs = b.validation_messages()
    distinct = sorted({m[:400] for m in msgs})
    assert not msgs, f"{len(msgs)} validation messages, {len(distinct)} distinct:\n" + "\n".join(distinct[:8])


def need(module):
    """Imports a framework the GPU tests run against; skips (fails with REQUIRE_GPU=1) if absent."""
    try:
        return pytest.importorskip(module)
    except pytest.skip.Exception:
        if os.environ.get("REQUIRE_GPU") == "1":
            pytest.fail(f"REQUIRE_GPU=1 but {module} is not installed")
        raise
