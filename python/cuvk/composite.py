"""Depth compositing for torch.distributed (issue 38): each rank draws its share of an opaque
scene into per-pixel *samples* — a 64-bit value per pixel, the depth as an order-preserving key
in the high 32 bits over the colour (RGBA8) in the low 32, all ones where nothing was drawn —
and the composite keeps, per pixel, the nearest sample of every rank: one NCCL reduction with
MIN, no custom kernel. A minimum does not depend on how the scene was split or in what order
it was drawn, so N ranks give the one-rank picture bit for bit. The layout is cuvk's own
(`rules::composite` in Rust, `nccl::DepthCompositor`, the particle demo's opaque mode), so a
Rust rank and a Python rank composite together.

    import cuvk.composite as cc
    samples = torch.from_dlpack(bridge.buffer((h, w), "int64"))   # cuvk memory, or any tensor
    cc.clear(samples)
    cc.draw(samples, pixel_index, depth, rgba)     # your renderer's fragments, nearest kept
    cc.composite(samples, dst=0)                   # torch.distributed, on the current stream
    if rank == 0:
        rgba = cc.colour(samples)                  # (h, w, 4) uint8, the background where empty

Samples are held in ``int64`` tensors (PyTorch reduces ``int64`` with MIN everywhere; its
``uint64`` support is partial). cuvk's samples are unsigned: :func:`composite` flips the top
bit before and after the reduction (which maps unsigned order onto signed order exactly), so
the result is the unsigned minimum, bit for bit.

Everything here runs on the current CUDA stream of the tensors' device, with no host wait
except :func:`composite`'s size agreement on its first call for a group and shape. PyTorch is
imported on first use: ``import cuvk`` does not need it.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from ._errors import InvalidInputError

#: A pixel nothing was drawn on (all ones, as unsigned).
EMPTY = -1
_TOP = -(1 << 63)
# (group id, shape) pairs whose sizes every rank agreed on.
_agreed: Dict[Tuple[int, Tuple[int, ...]], bool] = {}


def _torch():
    import torch  # noqa: PLC0415 - optional dependency, imported on first use

    return torch


def _check(samples: Any) -> None:
    torch = _torch()
    if not isinstance(samples, torch.Tensor) or samples.dtype != torch.int64:
        raise InvalidInputError(
            f"samples must be an int64 tensor, not {getattr(samples, 'dtype', type(samples).__name__)}",
            kind="InvalidInput",
            rule="Array.Dtype",
        )
    if not samples.is_contiguous():
        raise InvalidInputError(
            "samples must be contiguous", kind="InvalidInput", rule="Array.Layout"
        )


def depth_key(depth: Any) -> Any:
    """The order-preserving 32-bit key of float32 depths (nearer = smaller = smaller key), as
    an int64 tensor in ``[0, 2**32)``: positive floats get the top bit set, negative ones are
    inverted (cuvk's ``rules::composite::depth_key``)."""
    torch = _torch()
    bits = depth.to(torch.float32).contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    negative = (bits & 0x80000000) != 0
    return torch.where(negative, bits ^ 0xFFFFFFFF, bits | 0x80000000)


def pack(depth: Any, rgba: Any) -> Any:
    """Samples from depths (float32, any shape) and colours (uint8 ``(..., 4)`` RGBA, or int32
    / int64 values already packed as ``R | G << 8 | B << 16 | A << 24``): an int64 tensor of
    the depths' shape."""
    torch = _torch()
    if rgba.dtype == torch.uint8:
        if rgba.shape[-1] != 4:
            raise InvalidInputError(
                f"uint8 colours need a last dimension of 4 (RGBA), not {rgba.shape[-1]}",
                kind="InvalidInput",
                rule="Array.Shape",
            )
        c = rgba.to(torch.int64)
        colour = c[..., 0] | (c[..., 1] << 8) | (c[..., 2] << 16) | (c[..., 3] << 24)
    else:
        colour = rgba.to(torch.int64) & 0xFFFFFFFF
    return (depth_key(depth) << 32) | colour


def clear(samples: Any) -> None:
    """Every pixel empty (all ones)."""
    _check(samples)
    samples.fill_(EMPTY)


def draw(samples: Any, pixel: Any, depth: Any, rgba: Any) -> None:
    """Keeps, at each ``pixel`` (flat indices into ``samples``), the nearer of what is there and
    the fragment's sample (``pack(depth, rgba)``): the nearest fragment of every pixel, whatever
    their order (a scatter with MIN, as the GPU's 64-bit atomicMin)."""
    torch = _torch()
    _check(samples)
    flat = samples.view(-1)
    new = pack(depth, rgba).view(-1) ^ _TOP  # unsigned order as signed order
    flat.bitwise_xor_(_TOP)
    flat.scatter_reduce_(0, pixel.reshape(-1).to(torch.int64), new, reduce="amin")
    flat.bitwise_xor_(_TOP)


def composite(samples: Any, dst: Optional[int] = 0, group: Any = None) -> None:
    """Keeps, per pixel, the nearest sample of every rank of ``group`` (torch.distributed, NCCL):
    in ``dst``'s samples (``dst=None``: in every rank's). A collective: every rank calls it with
    the same ``dst`` and a tensor of the same shape — checked, with every rank, on the first
    call for a group and shape (``InvalidInputError``, rule ``Peer.SizeMismatch``, on every
    rank, with the smallest and largest pixel counts; a host wait, once). The check runs where
    a rank sees a shape for the first time, so ranks change their picture size together (as a
    resize does): a rank that changes alone is out of step with the others' collectives. Runs
    on the current stream; the other ranks' samples are only read by a reduction to one rank
    (restored after it)."""
    torch = _torch()
    import torch.distributed as dist  # noqa: PLC0415

    _check(samples)
    key = (id(group), tuple(samples.shape))
    if key not in _agreed:
        n = samples.numel()
        both = torch.tensor([n, -n], dtype=torch.int64, device=samples.device)
        dist.all_reduce(both, op=dist.ReduceOp.MAX, group=group)
        largest, smallest = int(both[0]), -int(both[1])
        if largest != smallest:
            raise InvalidInputError(
                f"ranks composite pictures of different sizes: {smallest} to {largest} pixels "
                f"(this rank {n})",
                kind="InvalidInput",
                rule="Peer.SizeMismatch",
                numbers={"len": n, "min": smallest, "max": largest},
            )
        _agreed[key] = True
    samples.bitwise_xor_(_TOP)
    if dst is None:
        dist.all_reduce(samples, op=dist.ReduceOp.MIN, group=group)
    else:
        dist.reduce(samples, dst=dst, op=dist.ReduceOp.MIN, group=group)
    samples.bitwise_xor_(_TOP)


def colour(samples: Any, background: Tuple[int, int, int] = (4, 6, 14)) -> Any:
    """The picture: ``samples.shape + (4,)`` uint8 RGBA, ``background`` (opaque) where empty."""
    torch = _torch()
    _check(samples)
    c = samples & 0xFFFFFFFF
    rgba = torch.stack([(c >> s) & 0xFF for s in (0, 8, 16, 24)], dim=-1).to(torch.uint8)
    empty = samples == EMPTY
    bg = torch.tensor([*background, 255], dtype=torch.uint8, device=samples.device)
    return torch.where(empty.unsqueeze(-1), bg, rgba)
