"""A tensor on one GPU into cuvk memory on another, side by side (needs 2 GPUs):

    python python/examples/bench_peer_copy.py

Rows, 256 MiB, GB/s (wall time of 20 copies, both GPUs synchronised): PyTorch's `copy_` into
PyTorch memory on the render GPU (what a user compares with); `copy_` into a DLPack view of
cuvk memory, first in a fresh process (no peer access enabled between the GPUs yet) and again
after; and `SharedBuffer.copy_from` (peer copy engine, ordered on the GPU).
"""

import time

import torch

import cuvk


def gbps(fn, n_bytes, devices, reps=20):
    fn()
    for d in devices:
        torch.cuda.synchronize(d)
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    for d in devices:
        torch.cuda.synchronize(d)
    return n_bytes * reps / (time.perf_counter() - t) / 1e9


def main():
    if torch.cuda.device_count() < 2:
        raise SystemExit("needs 2 GPUs")
    n = 64 << 20
    bridge = cuvk.Bridge(0)
    src = torch.ones(n, device="cuda:1")
    buf = bridge.buffer((n,), "float32")
    view = torch.from_dlpack(buf)
    plain = torch.empty(n, device="cuda:0")
    devs = (0, 1)
    rows = [("copy_ into a DLPack view of cuvk memory (fresh process)", gbps(lambda: view.copy_(src), 4 * n, devs))]
    rows.append(("copy_ into PyTorch memory on GPU 0", gbps(lambda: plain.copy_(src), 4 * n, devs)))
    s1 = torch.cuda.current_stream(1)
    rows.append(("SharedBuffer.copy_from (peer copy engine)", gbps(lambda: buf.copy_from(src, s1), 4 * n, devs)))
    rows.append(("copy_ into a DLPack view of cuvk memory (after copy_from)", gbps(lambda: view.copy_(src), 4 * n, devs)))
    print(f"{'256 MiB, GPU 1 -> GPU 0':<60} GB/s")
    for name, g in rows:
        print(f"{name:<60} {g:7.1f}")
    assert torch.equal(view, plain)


if __name__ == "__main__":
    main()
