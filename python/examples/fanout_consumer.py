"""A Python consumer of a simulation in another process: CuPy reads each frame it holds
straight from the publisher's memory (no copy), ordered on the GPU (its stream waits for the
frame to be written; the publisher's next write of the slot waits for this read), and prints
what it sees: the particles' centre of mass and spread, and frames per second.

    cargo run --release --example particles -- --publish galaxies --particles 4000000 &
    cargo run --release --example particles -- --view galaxies --headless --frames 600 &
    python python/examples/fanout_consumer.py galaxies --frames 600

Any number of these and of viewers can attach and leave, in any order; killing one changes
nothing for the others. `--every-frame` asks for every frame instead of the newest.
"""

import argparse
import time

import cupy

import cuvk


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name")
    ap.add_argument("--frames", type=int, default=600)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--every-frame", action="store_true")
    args = ap.parse_args()

    sub = cuvk.Subscriber(args.name, device=args.device, every_frame=args.every_frame, timeout=60.0)
    print(f"attached to {args.name!r}: {len(sub.slots)} slots of {sub.slots[0].shape} {sub.slots[0].dtype}")
    stream = cupy.cuda.Stream(non_blocking=True)
    start, held, last = time.perf_counter(), 0, 0
    while held < args.frames:
        try:
            frame = sub.hold(stream, timeout=5.0)
        except cuvk.IoError:
            print("the publisher ended")
            break
        if frame is None:
            print("no new frame in 5 s")
            break
        with stream:
            pos = cupy.from_dlpack(sub.slots[frame.slot])
            xyz = pos[:, :3]
            centre = xyz.mean(axis=0)
            spread = cupy.sqrt(((xyz - centre) ** 2).sum(axis=1).mean())
        sub.release(frame, stream)
        held += 1
        if held % 100 == 0:
            c, r = cupy.asnumpy(centre), float(spread.get())
            fps = held / (time.perf_counter() - start)
            print(f"frame {frame.number} (held {held}, skipped {frame.number - last - 1}): centre "
                  f"({c[0]:+.3f}, {c[1]:+.3f}, {c[2]:+.3f}), spread {r:.3f}, {fps:.0f} frames/s")
        last = frame.number
    stream.synchronize()


if __name__ == "__main__":
    main()
