"""PyTorch simulation drawn by Vulkan: cuvk's zero-copy tensors ordered on the GPU vs what a
PyTorch user does without interop (`tensor.cpu()`, then an upload into the Vulkan buffer
through host-visible memory). One run, both paths, 1M and 10M particles; prints a table and
writes JSON.

    python examples/bench_torch.py [--frames 300] [--json bench-torch.json]
"""

import argparse
import json
import time

import torch

import cuvk
from torch_particles import initial_state, percentile, step


def run(bridge, n, frames, zero_copy):
    renderer = cuvk.ParticleRenderer(bridge, 1280, 720)
    bufs = [bridge.buffer((n, 4), "float32") for _ in range(2)]
    views = [torch.from_dlpack(b) for b in bufs]
    pos0, vel = initial_state(n, 1)
    stream = torch.cuda.current_stream()
    if zero_copy:
        state = views
        views[0].copy_(pos0)
    else:
        # The simulation in PyTorch's own memory; each frame to the host and up to Vulkan.
        state = [pos0.clone(), torch.empty_like(pos0)]
    del pos0
    starts = []
    for f in range(1, frames + 1):
        starts.append(time.perf_counter())
        src, dst = state[(f - 1) % 2], state[f % 2]
        if zero_copy:
            bridge.cuda_acquire(dst, stream)
            step(src, dst, vel)
            bridge.cuda_release(dst, stream)
            renderer.draw(dst, stream=-1)
        else:
            step(src, dst, vel)
            host = dst.cpu()  # waits for the step
            target = bufs[f % 2]
            target.vulkan_write(host)  # memcpy into host-visible staging, vkCmdCopyBuffer
            renderer.draw(target, stream=-1)  # the upload above waited for everything
    renderer.wait_idle()
    starts.append(time.perf_counter())
    warm = min(20, frames // 4)
    ms = sorted((b - a) * 1e3 for a, b in zip(starts[warm:-1], starts[warm + 1 :]))
    return {
        "mean": sum(ms) / len(ms),
        "p50": percentile(ms, 0.5),
        "p99": percentile(ms, 0.99),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--json")
    ap.add_argument("--particles", type=int, nargs="*", default=[1_000_000, 10_000_000])
    args = ap.parse_args()
    bridge = cuvk.Bridge()
    print(f"{bridge.device_name}, torch {torch.__version__}, {args.frames} frames (ms per frame)")
    rows = []
    print(f"{'particles':>11}  {'path':<36} {'mean':>8} {'p50':>8} {'p99':>8}")
    for n in args.particles:
        results = {}
        for name, zc in (("zero-copy + GPU ordering (cuvk)", True), (".cpu() + upload", False)):
            frames = args.frames if zc else max(30, args.frames // 5)
            r = run(bridge, n, frames, zc)
            results[name] = r
            rows.append({"particles": n, "path": name, "frames": frames, **r})
            print(f"{n:>11,}  {name:<36} {r['mean']:8.3f} {r['p50']:8.3f} {r['p99']:8.3f}")
        zc, cpu = results["zero-copy + GPU ordering (cuvk)"], results[".cpu() + upload"]
        print(f"{'':>11}  zero-copy is {cpu['mean'] / zc['mean']:.1f}x faster per frame")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": bridge.device_name, "torch": torch.__version__, "rows": rows}, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
