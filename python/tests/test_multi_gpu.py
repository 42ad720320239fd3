"""Several GPUs (issue 28): a tensor of another GPU copied into cuvk memory by copy engine
(`SharedBuffer.copy_from`), and torchrun ranks gathering into rank 0's cuvk memory with NCCL.
Skipped where the machine has one GPU; REQUIRE_GPUS=2 makes that a failure."""

import os
import subprocess
import sys
import time

import pytest

import cuvk
from conftest import need

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


@pytest.fixture(scope="module")
def torch2():
    torch = need("torch")
    n = torch.cuda.device_count()
    if n < 2:
        if int(os.environ.get("REQUIRE_GPUS", "0")) >= 2:
            pytest.fail(f"REQUIRE_GPUS={os.environ['REQUIRE_GPUS']} but torch sees {n} GPU(s)")
        pytest.skip(f"needs 2 GPUs, torch sees {n}")
    return torch


def test_copy_from_a_peer_gpu_is_exact_ordered_and_checked(bridge, torch2):
    torch = torch2
    n = 1 << 22
    buf = bridge.buffer((n,), "float32")
    other = 1 if bridge.cuda_device == 0 else 0
    with torch.cuda.device(other):
        src = torch.arange(n, dtype=torch.float32, device=f"cuda:{other}") * 3 + 1
        s = torch.cuda.current_stream()
        buf.copy_from(src, stream=s)
        # The producer may overwrite its tensor right away: its stream waited for the copy.
        src.fill_(-1)
    got = torch.frombuffer(bytearray(buf.vulkan_read()), dtype=torch.float32)
    want = torch.arange(n, dtype=torch.float32) * 3 + 1
    assert torch.equal(got, want), "Vulkan sees what the peer GPU's tensor held"
    # Refusals: nothing copied, and the next copy works.
    with pytest.raises(cuvk.InvalidInputError) as e:
        buf.copy_from(torch.zeros(n + 1, device=f"cuda:{other}"))
    assert e.value.rule == "Peer.SizeMismatch"
    with pytest.raises(cuvk.InvalidInputError) as e:
        buf.copy_from(torch.zeros(2 * n, device=f"cuda:{other}")[::2])
    assert e.value.rule == "Array.Layout"
    with pytest.raises(cuvk.InvalidInputError) as e:
        buf.copy_from(b"not a tensor")
    assert e.value.rule == "Array.Type"
    buf.copy_from(torch.full((n,), 5.0, device=f"cuda:{other}"))
    assert set(torch.frombuffer(bytearray(buf.vulkan_read()), dtype=torch.float32).tolist()) == {5.0}


def test_copy_from_against_torch_copy_(bridge, torch2):
    """Not a timed assert: prints what a user gets each way (BENCHMARKS.md)."""
    torch = torch2
    n = 64 << 20  # 256 MiB of float32
    other = 1 if bridge.cuda_device == 0 else 0
    dev = f"cuda:{bridge.cuda_device}"
    src = torch.ones(n, device=f"cuda:{other}")
    buf = bridge.buffer((n,), "float32")
    view = torch.from_dlpack(buf)
    plain = torch.empty(n, device=dev)

    def gbps(fn, reps=10):
        fn()
        torch.cuda.synchronize(bridge.cuda_device)
        torch.cuda.synchronize(other)
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize(bridge.cuda_device)
        torch.cuda.synchronize(other)
        return 4 * n * reps / (time.perf_counter() - t) / 1e9

    rows = [
        ("torch copy_ into torch memory", gbps(lambda: plain.copy_(src))),
        ("torch copy_ into a DLPack view of cuvk memory", gbps(lambda: view.copy_(src))),
        ("SharedBuffer.copy_from (peer copy engine)", gbps(lambda: buf.copy_from(src, torch.cuda.current_stream(other)))),
    ]
    for name, g in rows:
        print(f"peer copy 256 MiB, GPU {other} -> GPU {bridge.cuda_device}: {name}: {g:.1f} GB/s")
    assert (buf.read() == plain.cpu().numpy().tobytes())


def test_torchrun_ranks_gather_into_rank0_cuvk_memory_exactly(torch2):
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         os.path.join(EXAMPLES, "torchrun_particles.py"), "--particles", "2000000", "--frames", "60",
         "--check", "--check-every", "5", "--out", os.path.join(os.environ.get("OUT", "/tmp"), "torchrun")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    print(out.stdout[-3000:])
    print(out.stderr[-3000:])
    assert out.returncode == 0
    assert "12 frames checked exactly through Vulkan" in out.stdout


def test_torchrun_depth_composite_equals_the_one_rank_picture_bit_for_bit(torch2):
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         os.path.join(EXAMPLES, "torchrun_depth.py"), "--particles", "400000", "--frames", "10", "--check",
         "--out", os.path.join(os.environ.get("OUT", "/tmp"), "torchrun-depth")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    print(out.stdout[-3000:])
    print(out.stderr[-3000:])
    assert out.returncode == 0
    assert "composite vs one rank: 0 pixels differ" in out.stdout
