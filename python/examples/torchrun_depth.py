"""Depth compositing with torchrun (issue 38): each rank steps its share of a particle disc in
PyTorch on its own GPU and draws it as opaque, shaded discs into per-pixel samples in cuvk
memory (depth key over RGBA8, the nearest kept: `cuvk.composite.draw`); one NCCL MIN
reduction (`cuvk.composite.composite`) keeps the nearest sample of every rank in rank 0's
picture, which it writes as PNGs. The composite of N ranks is the one-rank picture bit for bit:
`--check` has rank 0 draw every rank's particles alone and compare.

    torchrun --nproc-per-node 2 python/examples/torchrun_depth.py --particles 2000000 --check
"""

import argparse
import math
import os
import pathlib
import struct
import sys
import time
import zlib

import torch
import torch.distributed as dist

import cuvk
import cuvk.composite as cc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_particles import initial_state, step  # noqa: E402


def write_png(path, rgba):
    """An 8-bit RGBA PNG of an (h, w, 4) uint8 CPU tensor."""
    h, w, _ = rgba.shape
    raw = b"".join(b"\0" + bytes(row) for row in rgba.reshape(h, w * 4).tolist())

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
    pathlib.Path(path).write_bytes(png)


def camera(w, h, yaw=0.5, pitch=0.6, distance=4.5, fov=math.radians(50)):
    """(view matrix rows, focal length in pixels) of an orbit camera looking at the origin."""
    eye = torch.tensor([distance * math.cos(pitch) * math.sin(yaw), -distance * math.cos(pitch) * math.cos(yaw),
                        distance * math.sin(pitch)])
    fwd = -eye / eye.norm()
    right = torch.linalg.cross(fwd, torch.tensor([0.0, 0.0, 1.0]))
    right = right / right.norm()
    up = torch.linalg.cross(right, fwd)
    return eye, right, up, fwd, (h / 2) / math.tan(fov / 2)


def draw(samples, pos, w, h, cam, radius=0.012):
    """Each particle as a lit disc of `radius` world units (a few pixels), nearest kept."""
    eye, right, up, fwd, focal = (c.to(pos.device) if torch.is_tensor(c) else c for c in cam)
    rel = pos[:, :3] - eye
    z = rel @ fwd
    x = (rel @ right) * focal / z + w / 2
    y = h / 2 - (rel @ up) * focal / z
    r = (radius * focal / z).clamp(0.7, 4.0)
    keep = (z > 0.05) & (x > -8) & (x < w + 8) & (y > -8) & (y < h + 8)
    x, y, z, r, key = x[keep], y[keep], z[keep], r[keep], pos[keep, 3]
    warm = torch.tensor([1.0, 0.55, 0.2], device=pos.device)
    cold = torch.tensor([0.65, 0.8, 1.0], device=pos.device)
    t = (key / (key + 1)).clamp(0, 1).unsqueeze(1)
    base = warm * (1 - t) + cold * t
    for dy in range(-4, 5):
        for dx in range(-4, 5):
            px = x.floor() + dx + 0.5
            py = y.floor() + dy + 0.5
            ox, oy = (px - x) / r, (py - y) / r
            rr = ox * ox + oy * oy
            on = (rr <= 1) & (px >= 0) & (py >= 0) & (px < w) & (py < h)
            nz = (1 - rr[on]).sqrt()
            shade = (0.25 + 0.75 * (0.6 * nz - 0.4 * ox[on] + 0.5 * -oy[on]).clamp(min=0)).unsqueeze(1)
            rgb = (base[on] * shade * 255 + 0.5).clamp(0, 255).to(torch.uint8)
            rgba = torch.cat([rgb, torch.full_like(rgb[:, :1], 255)], 1)
            depth = z[on] - nz * radius
            pixel = py[on].long() * w + px[on].long()
            cc.draw(samples, pixel, depth, rgba)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--particles", type=int, default=2_000_000, help="in all, split evenly over the ranks")
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--size", default="1280x720")
    ap.add_argument("--out", default="out-torchrun-depth")
    ap.add_argument("--check", action="store_true", help="rank 0 also draws everything alone and compares")
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    w, h = (int(v) for v in args.size.split("x"))
    share = args.particles // world
    cam = camera(w, h)
    # Every rank's particles (rank 0 keeps them all for --check; the others only their own).
    shares = [initial_state(share, 1 + r) for r in range(world)] if (args.check and rank == 0) else None
    pos, vel = shares[0] if shares else initial_state(share, 1 + rank)
    mine = [pos, torch.empty_like(pos)]
    bridge = cuvk.Bridge(local)
    # cuvk memory: what a Vulkan renderer (or cuvk's own resolve) would read next.
    samples = torch.from_dlpack(bridge.buffer((h, w), "int64"))
    out = pathlib.Path(args.out)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    times, differ = [], None
    for f in range(1, args.frames + 1):
        t = time.perf_counter()
        src, dst = mine[(f - 1) % 2], mine[f % 2]
        step(src, dst, vel)
        cc.clear(samples)
        draw(samples, dst, w, h, cam)
        cc.composite(samples, dst=0)
        torch.cuda.current_stream().synchronize()
        times.append(time.perf_counter() - t)
        if args.check and rank == 0:
            for r in range(1, world):
                s, v = shares[r]
                step(s, s, v)  # the other ranks' particles, stepped the same way here
            alone = torch.full_like(samples, cc.EMPTY)
            draw(alone, dst, w, h, cam)
            for r in range(1, world):
                draw(alone, shares[r][0], w, h, cam)
            now = int((alone != samples).sum())
            if now and not differ:
                # Reported once; the run goes on (the other ranks are in the next collective).
                print(f"frame {f}: {now} pixels differ from the one-rank picture", flush=True)
            differ = differ or now
    if rank == 0:
        write_png(out / f"depth_{world}ranks_{args.frames:04d}.png", cc.colour(samples).cpu())
        ms = sorted(1e3 * x for x in times[len(times) // 5:])
        print(f"{world} ranks, {share * world:,} particles: frame p50 {ms[len(ms) // 2]:.2f} ms", flush=True)
        if args.check:
            print(f"composite vs one rank: {differ} pixels differ", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
