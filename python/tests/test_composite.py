"""cuvk.composite (issue 38) on a CUDA GPU with PyTorch: the depth key preserves order, a draw
keeps the nearest fragment whatever their order, the signed reduction the composite uses gives
the unsigned minimum bit for bit, and bad samples are refused. Skipped without torch and a
GPU (fails with REQUIRE_GPU=1)."""

import os
import random

import pytest

import cuvk
import cuvk.composite as cc
from conftest import need


@pytest.fixture(scope="module")
def torch_cuda():
    torch = need("torch")
    if not torch.cuda.is_available():
        if os.environ.get("REQUIRE_GPU") == "1":
            pytest.fail("REQUIRE_GPU=1 but torch sees no CUDA GPU")
        pytest.skip("torch sees no CUDA GPU")
    return torch


def test_the_depth_key_keeps_the_order_of_depths(torch_cuda):
    torch = torch_cuda
    depths = sorted([-1e9, -2.5, -1e-30, -0.0, 0.0, 1e-30, 0.25, 0.5, 1.0, 3.0, 1e9] + [random.uniform(-5, 5) for _ in range(500)])
    keys = cc.depth_key(torch.tensor(depths, device="cuda")).tolist()
    assert all(0 <= k < 2**32 for k in keys)
    assert keys == sorted(keys), "nearer depths must have smaller keys"


def test_a_draw_keeps_the_nearest_fragment_in_any_order_and_the_colour_reads_back(torch_cuda):
    torch = torch_cuda
    n, pixels = 20000, 64
    pixel = torch.randint(0, pixels, (n,), device="cuda")
    depth = torch.rand(n, device="cuda")
    rgba = torch.randint(0, 256, (n, 4), device="cuda", dtype=torch.uint8)
    want = torch.full((pixels,), cc.EMPTY, dtype=torch.int64, device="cuda")
    packed = cc.pack(depth, rgba)
    # The reference: per pixel, the fragment of the smallest depth (as unsigned samples).
    for p in range(pixels):
        sel = (pixel == p).nonzero().flatten()
        if len(sel):
            best = sel[depth[sel].argmin()]
            want[p] = packed[best]
    for _ in range(3):
        order = torch.randperm(n, device="cuda")
        got = torch.empty(pixels, dtype=torch.int64, device="cuda")
        cc.clear(got)
        cc.draw(got, pixel[order], depth[order], rgba[order])
        assert torch.equal(got, want)
    colours = cc.colour(want.view(8, 8))
    assert colours.shape == (8, 8, 4) and colours.dtype == torch.uint8


def test_the_signed_reduction_is_the_unsigned_minimum(torch_cuda):
    torch = torch_cuda
    # Samples across the whole unsigned range, empty ones included: what composite() reduces.
    values = [0, 1, 2**31, 2**32 - 1, 2**63 - 1, 2**63, 2**63 + 5, 2**64 - 2, 2**64 - 1]
    a = [random.choice(values) for _ in range(256)]
    b = [random.choice(values) for _ in range(256)]
    signed = lambda v: v - 2**64 if v >= 2**63 else v  # noqa: E731
    ta = torch.tensor([signed(v) for v in a], device="cuda") ^ cc._TOP
    tb = torch.tensor([signed(v) for v in b], device="cuda") ^ cc._TOP
    got = (torch.minimum(ta, tb) ^ cc._TOP).tolist()
    assert [g % 2**64 for g in got] == [min(x, y) for x, y in zip(a, b)]


def test_bad_samples_are_refused_with_their_rule(torch_cuda):
    torch = torch_cuda
    with pytest.raises(cuvk.InvalidInputError) as e:
        cc.clear(torch.zeros(4, dtype=torch.float32, device="cuda"))
    assert e.value.rule == "Array.Dtype"
    with pytest.raises(cuvk.InvalidInputError) as e:
        cc.clear(torch.zeros(4, 4, dtype=torch.int64, device="cuda").t())
    assert e.value.rule == "Array.Layout"
    with pytest.raises(cuvk.InvalidInputError) as e:
        cc.pack(torch.zeros(4, device="cuda"), torch.zeros(4, 3, dtype=torch.uint8, device="cuda"))
    assert e.value.rule == "Array.Shape"
