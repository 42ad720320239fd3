"""A simulation in this process, drawn live by another: PyTorch steps the particles straight
into the memory of a viewer started with `particles --serve NAME` (no copy), each frame
ordered on the GPU by the viewer's timelines (no host round trip per frame).

    cargo run --release --example particles -- --serve galaxies --headless --frames 600 &
    python python/examples/ipc_producer.py galaxies

Kill the viewer: this process stops with a message; kill this one: the viewer keeps its last
frame and waits for the next producer.
"""

import argparse
import os
import sys
import time

import torch

import cuvk

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_particles import initial_state, step  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name")
    ap.add_argument("--frames", type=int, default=10**9)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.cuda.set_device(args.device)
    producer = cuvk.Producer(args.name, device=args.device)
    # The viewer's position buffers, as tensors over its memory.
    slots = [torch.as_tensor(s, device=f"cuda:{args.device}") for s in producer.slots]
    k, n = len(slots), slots[0].shape[0]
    pos0, vel = initial_state(n, args.seed)
    stream = torch.cuda.current_stream()
    print(f"attached to '{args.name}': {n:,} particles, {k} slots")
    t = time.perf_counter()
    for f in range(1, args.frames + 1):
        try:
            producer.acquire(f, stream)  # the viewer drew frame f - k: its slot is ours
        except cuvk.IoError as e:
            producer.release_waits()
            print(f"the viewer went away after frame {f - 1} ({e}): stopping")
            return
        dst = slots[(f - 1) % k]
        if f == 1:
            dst.copy_(pos0)
        else:
            step(slots[(f - 2) % k], dst, vel)
        try:
            producer.release(f, stream)  # the viewer's draw of frame f waits for this, on the GPU
        except cuvk.IoError as e:
            producer.release_waits()
            print(f"the viewer went away at frame {f} ({e}): stopping")
            return
        if f % 300 == 0:
            print(f"{f} frames, {f / (time.perf_counter() - t):.0f} fps", flush=True)


if __name__ == "__main__":
    main()
