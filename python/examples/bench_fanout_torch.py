"""A training-like PyTorch loop that publishes every step (issue 37): a fixed matmul workload
per step, then its (n, 4) float32 "positions" published with `cuvk.Publisher`. Step time with
0, 1, 2, 4 and 8 consumers attached (CuPy/torch `cuvk.Subscriber` processes that hold every
frame they can and read it), side by side in one run; the target is 8 consumers <= 1.02x none.

    python python/examples/bench_fanout_torch.py [--steps 2000] [--size 4096]

Each consumer is `python bench_fanout_torch.py --consume NAME`: it attaches, then holds,
reads (a sum over the frame on its own stream) and releases frames until the publisher ends:
as fast as it can (the worst case), and in a second table at 60 frames per second (what a
viewer or a dashboard does).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

import cuvk

PARTICLES = 1_000_000


def consume(name, fps):
    sub = cuvk.Subscriber(name, timeout=60.0)
    stream = torch.cuda.Stream()
    held = 0
    tick = time.monotonic()
    while True:
        if fps:
            tick += 1.0 / fps
            time.sleep(max(0.0, tick - time.monotonic()))
        try:
            frame = sub.hold(stream, timeout=5.0)
        except cuvk.CuvkError:
            break  # the publisher ended
        if frame is None:
            continue  # the run has not started yet (the others are still attaching)
        with torch.cuda.stream(stream):
            total = torch.from_dlpack(sub.slots[frame.slot]).sum()
        sub.release(frame, stream)
        held += 1
    stream.synchronize()
    print(f"HELD {held} {float(total) if held else 0.0}", flush=True)


def run(bridge, consumers, steps, size, fps):
    name = f"bench-fanout-torch-{os.getpid()}-{consumers}"
    a = torch.randn(size, size, device="cuda")
    b = torch.randn(size, size, device="cuda")
    stream = torch.cuda.current_stream()
    with cuvk.Publisher(bridge, name, (PARTICLES, 4), "float32", slots=consumers + 2) as pub:
        slots = [torch.from_dlpack(s) for s in pub.slots]
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--consume", name, "--consumer-fps", str(fps)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(consumers)
        ]
        deadline = time.monotonic() + 120
        while pub.consumers < consumers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{consumers} consumers did not attach")
            time.sleep(0.05)
        times = []
        for step in range(steps):
            t = time.perf_counter()
            c = a @ b  # the training step's work
            a.add_(c, alpha=1e-9)
            frame = pub.acquire(stream)
            slots[frame.slot][:, 0].fill_(float(step))  # the published state
            pub.release(frame, stream)
            if step % 10 == 9:
                stream.synchronize()  # a training loop's loss.item() every few steps
            times.append(time.perf_counter() - t)
        stream.synchronize()
    held = 0
    for p in procs:
        try:
            out, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        for line in out.splitlines():
            if line.startswith("HELD "):
                held += int(line.split()[1])
    steady = sorted(times[len(times) // 10:])
    return statistics.mean(steady) * 1e3, steady[len(steady) // 2] * 1e3, steady[int(len(steady) * 0.99)] * 1e3, held


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--consume")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--size", type=int, default=4096, help="matmul size per step")
    ap.add_argument("--consumer-fps", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.consume:
        return consume(args.consume, args.consumer_fps)
    bridge = cuvk.Bridge()
    print(f"{bridge}, torch {torch.__version__}, {args.size}x{args.size} matmul per step, "
          f"{PARTICLES:,} float4 published per step")
    for fps, what in ((0.0, "as fast as they can"), (60.0, "at 60 frames/s")):
        rows = []
        for consumers in (0, 1, 2, 4, 8):
            rows.append((consumers, *run(bridge, consumers, args.steps, args.size, fps)))
        base = rows[0][1]
        print(f"\nconsumers reading {what}")
        print("| consumers | step ms mean | p50 | p99 | vs none | frames held (all consumers) |")
        print("|---|---|---|---|---|---|")
        for consumers, mean, p50, p99, held in rows:
            print(f"| {consumers} | {mean:.3f} | {p50:.3f} | {p99:.3f} | {mean / base:.3f}x | {held} |")


if __name__ == "__main__":
    main()
