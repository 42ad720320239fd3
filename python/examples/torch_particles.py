"""PyTorch integrates N particles each frame in tensors that are Vulkan memory, and cuvk's
renderer draws them with no copy, ordered on the GPU (no host wait per frame).

    python examples/torch_particles.py                      # 1M particles, 600 frames, PNGs in out-torch/
    python examples/torch_particles.py --particles 10000000 --frames 300 --save-every 100

Prints fps and frame-time percentiles. Headless: frames are written as PNGs.
"""

import argparse
import math
import pathlib
import time

import torch

import cuvk


def initial_state(n, seed):
    """A thin rotating disc with a dense core, as the particle demo starts (positions with
    w = 0; velocities tangential)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = 0.15 + 1.6 * torch.rand(n, device="cuda", generator=g) ** 1.5
    a = 2 * math.pi * torch.rand(n, device="cuda", generator=g)
    z = 0.04 * torch.randn(n, device="cuda", generator=g)
    pos = torch.stack([r * torch.cos(a), r * torch.sin(a), z, torch.zeros_like(r)], 1)
    speed = (1.0 / r.clamp(min=0.2)).sqrt() * 0.9
    vel = torch.stack([-speed * torch.sin(a), speed * torch.cos(a), torch.zeros_like(r), torch.zeros_like(r)], 1)
    return pos, vel


def step(src, dst, vel, dt=0.004, g=1.0, soft=0.02, swirl=0.15, damping=0.9995):
    """One integration step on the current stream: dst = src moved by vel, vel updated;
    w = kinetic energy (the renderer's colour key: small is the warm outer colour, about 1
    gold, large the blue-white core)."""
    p = src[:, :3]
    d = (p * p).sum(1, keepdim=True) + soft
    acc = -g * p * d.pow(-1.5)
    acc[:, 0] -= swirl * p[:, 1]
    acc[:, 1] += swirl * p[:, 0]
    vel[:, :3].mul_(damping).add_(acc, alpha=dt)
    dst[:, :3] = p + dt * vel[:, :3]
    dst[:, 3] = 0.3 * vel[:, :3].square().sum(dim=1)


def percentile(sorted_ms, q):
    return sorted_ms[min(len(sorted_ms) - 1, round(q * (len(sorted_ms) - 1)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--particles", type=int, default=1_000_000)
    ap.add_argument("--frames", type=int, default=600)
    ap.add_argument("--size", default="1280x720")
    ap.add_argument("--out", default="out-torch")
    ap.add_argument("--save-every", type=int, default=0, help="0: only the last frame")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    width, height = (int(v) for v in args.size.split("x"))

    bridge = cuvk.Bridge()
    print(bridge)
    renderer = cuvk.ParticleRenderer(bridge, width, height)
    renderer.set_camera(yaw=0.5, pitch=0.6, distance=4.5)
    # Two position buffers (this frame's and the last), Vulkan memory seen as tensors.
    bufs = [torch.from_dlpack(bridge.buffer((args.particles, 4), "float32")) for _ in range(2)]
    pos0, vel = initial_state(args.particles, args.seed)
    bufs[0].copy_(pos0)
    del pos0
    stream = torch.cuda.current_stream()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    starts, saved = [], set()
    for f in range(1, args.frames + 1):
        starts.append(time.perf_counter())
        src, dst = bufs[(f - 1) % 2], bufs[f % 2]
        bridge.cuda_acquire(dst, stream)  # Vulkan finished drawing it (two frames ago)
        step(src, dst, vel)
        bridge.cuda_release(dst, stream)  # the draw waits for the step, on the GPU
        renderer.draw(dst, stream=-1)  # ordered by the two calls above
        if (args.save_every and f % args.save_every == 0) or f == args.frames:
            renderer.save_png(out / f"frame_{f:05}.png")
            saved.add(f)
    renderer.wait_idle()
    # Frame periods after a warm-up, leaving out the frames that waited for a PNG.
    ms = sorted(
        (b - a) * 1e3
        for f, (a, b) in enumerate(zip(starts, starts[1:]), start=1)
        if f > 10 and f not in saved
    )
    mean = sum(ms) / len(ms)
    print(
        f"{args.particles:,} particles, {args.frames} frames: {1e3 / mean:.0f} fps, frame "
        f"mean {mean:.3f} ms, p50 {percentile(ms, 0.5):.3f}, p99 {percentile(ms, 0.99):.3f} "
        f"(frames that wrote a PNG left out: {len(saved)})"
    )
    print(f"wrote {out}/frame_{args.frames:05}.png")


if __name__ == "__main__":
    main()
