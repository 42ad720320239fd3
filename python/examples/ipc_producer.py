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
    slots = [torch.from_dlpack(s) for s in producer.slots]  # float32 (n, 4), as published
    k, n = len(slots), slots[0].shape[0]
    pos0, vel = initial_state(n, args.seed)
    stream = torch.cuda.current_stream()
    print(f"attached to '{args.name}': {n:,} particles, {k} slots")
    t = time.perf_counter()
    for _ in range(args.frames):
        try:
            frame = producer.acquire(stream)  # the viewer drew the slot's last frame: it is ours
        except cuvk.IoError as e:
            producer.release_waits()
            print(f"the viewer went away ({e}): stopping")
            return
        dst = slots[frame.slot]
        if frame.number == 1:
            dst.copy_(pos0)
        else:
            step(slots[(frame.slot - 1) % k], dst, vel)  # from the previous frame's slot
        try:
            producer.release(frame, stream)  # the viewer's draw of this frame waits for it, on the GPU
        except cuvk.IoError as e:
            producer.release_waits()
            print(f"the viewer went away at frame {frame.number} ({e}): stopping")
            return
        if frame.number % 300 == 0:
            print(f"{frame.number} frames, {frame.number / (time.perf_counter() - t):.0f} fps", flush=True)


if __name__ == "__main__":
    main()
