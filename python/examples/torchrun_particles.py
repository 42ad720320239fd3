"""Several GPUs with torchrun: each rank steps its share of the particles in PyTorch on its own
GPU; NCCL (torch.distributed) gathers every share straight into rank 0's cuvk memory; rank 0's
renderer draws it, ordered on the GPU (no host copy, no host wait per frame).

    torchrun --nproc-per-node 2 python/examples/torchrun_particles.py --particles 20000000

Rank 0 prints fps and frame-time percentiles and writes PNGs (headless). --check compares
what Vulkan sees with a second gather into plain PyTorch memory every --check-every frames
(the GPU test runs it so).
"""

import argparse
import os
import pathlib
import sys
import time

import torch
import torch.distributed as dist

import cuvk

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_particles import initial_state, percentile, step  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--particles", type=int, default=4_000_000, help="in all, split evenly over the ranks")
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--size", default="1280x720")
    ap.add_argument("--out", default="out-torchrun")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", action="store_true", help="compare Vulkan's view with plain memory")
    ap.add_argument("--check-every", type=int, default=10)
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    width, height = (int(v) for v in args.size.split("x"))
    share = args.particles // world

    # This rank's particles, stepped in PyTorch on its own GPU.
    pos0, vel = initial_state(share, args.seed + rank)
    mine = [pos0, torch.empty_like(pos0)]
    stream = torch.cuda.current_stream()
    if rank == 0:
        bridge = cuvk.Bridge(local)
        renderer = cuvk.ParticleRenderer(bridge, width, height)
        renderer.set_camera(yaw=0.5, pitch=0.6, distance=4.5)
        # Two targets: frame f is gathered into one while the other is still being drawn.
        targets = [bridge.buffer((share * world, 4), "float32") for _ in range(2)]
        views = [list(torch.from_dlpack(t).split(share)) for t in targets]
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        print(f"{world} ranks, {share * world:,} particles ({share:,} per GPU), {bridge}", flush=True)
    checked = 0
    starts = []
    for f in range(1, args.frames + 1):
        starts.append(time.perf_counter())
        src, dst = mine[(f - 1) % 2], mine[f % 2]
        step(src, dst, vel)
        if rank == 0:
            t = targets[f % 2]
            bridge.cuda_acquire(t, stream)  # its draw two frames ago is done (on the GPU)
            dist.gather(dst, gather_list=views[f % 2], dst=0)  # NCCL writes cuvk memory
            bridge.cuda_release(t, stream)  # the draw waits for the gather (on the GPU)
            renderer.draw(t, stream=-1)
        else:
            dist.gather(dst, dst=0)
        if args.check and f % args.check_every == 0:
            # The same gather into plain PyTorch memory: what Vulkan sees must equal it.
            ref = [torch.empty_like(dst) for _ in range(world)] if rank == 0 else None
            dist.gather(dst, gather_list=ref, dst=0)
            if rank == 0:
                want = torch.cat(ref).cpu().numpy().tobytes()
                seen = t.vulkan_read()
                if seen != want:
                    bad = sum(a != b for a, b in zip(seen, want))
                    raise SystemExit(f"frame {f}: Vulkan sees {bad} bytes that differ from the gather")
                checked += 1
    if rank == 0:
        renderer.save_png(out / f"frame_{args.frames:05}.png")
        renderer.wait_idle()
        ms = sorted((b - a) * 1e3 for a, b in zip(starts[10:], starts[11:]))
        mean = sum(ms) / len(ms)
        print(
            f"{world} GPUs, {share * world:,} particles, {args.frames} frames: {1e3 / mean:.0f} fps, "
            f"p50 {percentile(ms, 0.5):.3f} ms, p99 {percentile(ms, 0.99):.3f} ms"
            + (f"; {checked} frames checked exactly through Vulkan" if args.check else ""),
            flush=True,
        )
        print(f"wrote {out}/frame_{args.frames:05}.png")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
