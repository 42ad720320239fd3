"""On a CUDA GPU, against the real consumers (PyTorch, CuPy, JAX): the same device pointer
(zero-copy), exact data both ways between each framework and Vulkan, frames ordered on the GPU
with a removed-ordering negative control, lifetimes, and refusals of foreign tensors. Skipped
without a GPU (fails with REQUIRE_GPU=1)."""

import gc
import os
import struct

import pytest

import cuvk
from conftest import need

N = 1 << 16


def pattern(n_words, seed):
    """Distinct 32-bit words (no zero, no repeats within 2^32)."""
    return struct.pack(f"<{n_words}I", *[(i * 2654435761 + seed) & 0xFFFFFFFF | 1 for i in range(n_words)])


def fds():
    return len(os.listdir("/proc/self/fd"))


def test_torch_sees_the_same_memory(bridge):
    torch = need("torch")
    buf = bridge.buffer((N, 4), "float32")
    t = torch.from_dlpack(buf)
    assert t.data_ptr() == buf.ptr
    assert t.shape == (N, 4) and t.dtype == torch.float32 and t.device == torch.device("cuda", 0)
    # The CUDA array interface path too.
    u = torch.as_tensor(buf, device="cuda")
    assert u.data_ptr() == buf.ptr


def test_torch_writes_vulkan_reads_exactly_and_back(bridge):
    torch = need("torch")
    buf = bridge.buffer(N, "int32")
    t = torch.from_dlpack(buf)
    s = torch.cuda.current_stream()
    t.copy_(torch.arange(N, dtype=torch.int32, device="cuda") * 7 - 3)
    bridge.cuda_release(t, s)
    assert buf.vulkan_read() == struct.pack(f"<{N}i", *[i * 7 - 3 for i in range(N)])
    data = pattern(N, 11)
    buf.vulkan_write(data)
    buf.cuda_acquire(s)
    assert t.cpu().numpy().tobytes() == data
    # CPU tensors are read through DLPack (no copy on the way in), by both write paths.
    host = torch.arange(N, dtype=torch.int32) * -5
    buf.write(host)
    assert torch.equal(t.cpu(), host)
    buf.vulkan_write(host.numpy() + 1)
    assert torch.equal(t.cpu(), host + 1)
    with pytest.raises(cuvk.InvalidInputError) as e:
        buf.write(torch.zeros(N + 1, dtype=torch.int32))
    assert e.value.numbers == {"expected": 4 * N, "given": 4 * (N + 1)}


def test_cupy_same_pointer_and_exact_data(bridge):
    cupy = need("cupy")
    buf = bridge.buffer((256, 256), "uint32")
    a = cupy.from_dlpack(buf)
    assert a.data.ptr == buf.ptr and a.shape == (256, 256) and a.dtype == cupy.uint32
    b = cupy.asarray(buf)  # __cuda_array_interface__
    assert b.data.ptr == buf.ptr
    data = pattern(256 * 256, 5)
    buf.vulkan_write(data)
    buf.cuda_acquire(cupy.cuda.get_current_stream())
    assert a.get().tobytes() == data
    a *= 3
    bridge.cuda_release(a, cupy.cuda.get_current_stream())
    expected = struct.pack("<65536I", *[(w * 3) & 0xFFFFFFFF for w in struct.unpack("<65536I", data)])
    assert buf.vulkan_read() == expected


def test_jax_same_pointer_and_exact_data(bridge):
    jax = need("jax")
    import jax.dlpack
    import jax.numpy as jnp

    buf = bridge.buffer((N,), "float32")
    data = struct.pack(f"<{N}f", *[float(i) * 0.5 for i in range(N)])
    buf.vulkan_write(data)
    x = jax.dlpack.from_dlpack(buf)
    assert x.unsafe_buffer_pointer() == buf.ptr
    assert x.shape == (N,) and x.dtype == jnp.float32
    assert bytes(jax.device_get(x).tobytes()) == data


class Frames:
    """A 64x32 renderer and 4096 particles in a tensor over cuvk memory, all at world
    x = +1 or -1, which land on different halves of the picture."""

    def __init__(self, bridge, torch):
        self.torch = torch
        self.r = cuvk.ParticleRenderer(bridge, 64, 32)
        self.r.set_camera(yaw=0.0, pitch=0.0, distance=4.0)  # along +y: world x is screen x
        self.r.set_exposure(4.0)
        self.pos = torch.from_dlpack(bridge.buffer((4096, 4), "float32"))
        self.stream = torch.cuda.Stream()
        self.sides = {}
        for y in (1.0, -1.0):  # which half each lands on, after a full synchronisation
            self.place(y)
            torch.cuda.synchronize()
            self.r.draw(self.pos)
            self.sides[y] = self.bright_side()
        assert self.sides[1.0] != self.sides[-1.0], "the two positions must land on different halves"

    def place(self, x):
        self.pos[:] = 0.0
        self.pos[:, 0] = x

    def bright_side(self):
        rgba = self.r.read_rgba()
        left = sum(rgba[(y * 64 + c) * 4] for y in range(32) for c in range(32))
        right = sum(rgba[(y * 64 + c) * 4] for y in range(32) for c in range(32, 64))
        return right > left

    def run(self, frames, ordered, spin_cycles):
        """Frames where the stream spins, then moves the particles; returns how many frames
        Vulkan drew from stale positions."""
        torch, s = self.torch, self.stream
        self.r.draw(self.pos, stream=s)  # the stream waits for the draws it should
        wrong = 0
        for f in range(frames):
            y = 1.0 if f % 2 else -1.0
            with torch.cuda.stream(s):
                torch.cuda._sleep(spin_cycles)
                self.place(y)
            self.r.draw(self.pos, stream=s if ordered else -1)
            wrong += self.bright_side() != self.sides[y]
            if not ordered:
                s.synchronize()  # the next frame starts clean
        s.synchronize()
        return wrong


def test_1000_frames_torch_writes_vulkan_draws_in_order(bridge):
    """Each frame a slow PyTorch stream (a ~2 ms spin, then a write) moves every particle to
    the other half of the picture and Vulkan draws it with `draw(stream=...)`: every frame
    shows the half just written."""
    f = Frames(bridge, need("torch"))
    wrong = f.run(1000, True, 4_000_000)
    assert wrong == 0, f"{wrong} of 1000 frames drew stale positions"


def test_negative_control_without_the_ordering_vulkan_draws_stale_frames(bridge):
    """The same frames drawn with `draw()` (no stream): Vulkan does not wait for PyTorch. The
    GPU time-slices the two contexts, so how often the draw overtakes the write depends on
    how long the write is delayed: some delay must show stale frames, or the test above
    could not fail."""
    f = Frames(bridge, need("torch"))
    counts = {}
    for ms, cycles in ((2, 4_000_000), (20, 40_000_000), (100, 200_000_000)):
        counts[ms] = f.run(20, False, cycles)
        print(f"negative control, write delayed ~{ms} ms: {counts[ms]} of 20 frames stale")
    assert any(counts.values()), f"no delay made a frame stale: {counts}"


def test_releases_from_two_streams_run_in_value_order(bridge):
    """Stream A (slow: a ~20 ms spin, then a write) releases buffer X; then stream B (fast)
    releases Y. Both signal the one `cuda_done` timeline: B's later value must not run before
    A's, or the draw of X would start while A still writes it."""
    torch = need("torch")
    f = Frames(bridge, torch)
    other = torch.from_dlpack(bridge.buffer((4096, 4), "float32"))
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    wrong = 0
    for i in range(10):
        x = 1.0 if i % 2 else -1.0
        with torch.cuda.stream(a):
            torch.cuda._sleep(40_000_000)
            f.place(x)
        bridge.cuda_release(f.pos, a)
        with torch.cuda.stream(b):
            other.fill_(0.5)
        bridge.cuda_release(other, b)
        f.r.draw(f.pos, stream=-1)  # ordered by the releases alone
        wrong += f.bright_side() != f.sides[x]
        torch.cuda.synchronize()
    assert wrong == 0, f"{wrong} of 10 draws started before the slow stream's write"


def test_a_capturing_stream_is_refused(bridge):
    torch = need("torch")
    t = torch.from_dlpack(bridge.buffer(1024, "float32"))
    s = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    with pytest.raises(cuvk.InvalidInputError) as e:
        with torch.cuda.graph(g, stream=s):
            t.add_(1.0)
            bridge.cuda_release(t, torch.cuda.current_stream())
    assert e.value.rule == "Stream.Capturing"
    torch.cuda.synchronize()
    bridge.cuda_release(t, s)  # outside the capture it works


def test_a_tensor_outlives_every_cuvk_object_and_memory_comes_back(bridge):
    torch = need("torch")
    torch.cuda.synchronize()
    gc.collect()
    free0, _ = torch.cuda.mem_get_info()
    fd0 = fds()
    size = 64 << 20
    b = cuvk.Bridge()
    buf = b.buffer(size // 4, "float32")
    r = cuvk.ParticleRenderer(b, 32, 32)
    t = torch.from_dlpack(buf)
    free1, _ = torch.cuda.mem_get_info()
    assert free0 - free1 >= size
    del buf, r, b
    gc.collect()
    t.fill_(2.5)  # the memory is still there, and still the tensor's
    assert float(t.sum()) == 2.5 * (size // 4)
    del t
    gc.collect()
    torch.cuda.synchronize()
    free2, _ = torch.cuda.mem_get_info()
    assert abs(free2 - free0) < (8 << 20), f"{(free0 - free2) >> 20} MiB not given back"
    assert fds() == fd0


def test_foreign_tensors_are_refused_with_their_rule(bridge):
    torch = need("torch")
    r = cuvk.ParticleRenderer(bridge, 32, 32)
    with pytest.raises(cuvk.InvalidInputError) as e:
        r.draw(torch.zeros((16, 4), device="cuda"))
    assert e.value.rule == "Array.NotShared" and e.value.numbers["bytes"] == 256
    with pytest.raises(cuvk.WrongDeviceError) as e:
        r.draw(torch.zeros((16, 4)))
    assert e.value.rule == "Array.Device" and e.value.numbers["device_type"] == 1
    buf = bridge.buffer((16, 4), "float64")
    with pytest.raises(cuvk.InvalidInputError) as e:
        r.draw(torch.from_dlpack(buf))
    assert e.value.rule == "Positions.Layout"
    t = torch.from_dlpack(bridge.buffer((16, 4)))
    with pytest.raises(cuvk.InvalidInputError) as e:
        r.draw(t.t())
    assert e.value.rule == "Array.Layout"
    with pytest.raises(cuvk.InvalidInputError) as e:
        bridge.buffer(16, "complex64")
    assert e.value.rule == "Array.Dtype"
    with pytest.raises(cuvk.InvalidInputError) as e:
        bridge.buffer(0)
    assert e.value.kind == "InvalidInput"
    with pytest.raises(cuvk.InvalidInputError) as e:
        bridge.buffer(4).write(b"123")
    assert e.value.numbers == {"expected": 16, "given": 3}
    with pytest.raises(TypeError):
        bridge.buffer(4).write(16)  # not bytes(16): an int has no buffer to copy
    with pytest.raises(cuvk.WrongDeviceError) as e:
        bridge.buffer(4).write(torch.zeros(4, device="cuda"))
    assert e.value.rule == "Array.Device"
    assert bridge.buffer(4, torch.float64).dtype == "float64"
    with pytest.raises(cuvk.InvalidInputError) as e:
        bridge.buffer(4, "float")  # NumPy's float64 or PyTorch's float32? refused
    assert e.value.rule == "Array.Dtype"
    with pytest.raises(cuvk.InvalidInputError) as e:
        cuvk.ParticleRenderer(bridge, 8, 8).read_rgba()
    assert e.value.rule == "Renderer.NoFrame"
    with pytest.raises(cuvk.InvalidInputError) as e:
        r.set_camera(yaw=0.0, pitch=1.5707964)  # straight down the vertical axis
    assert e.value.rule == "Renderer.Camera"
    # Nothing was left half-done: the next valid call works.
    assert r.draw(t, stream=torch.cuda.current_stream()) == 1


def test_bad_device_ordinal_is_not_found():
    with pytest.raises(cuvk.CuvkError) as e:
        cuvk.Bridge(999)
    assert e.value.kind in ("NotFound", "InvalidInput", "Driver"), e.value.kind


def test_every_entry_point_takes_the_same_streams(bridge):
    """One parser: `__dlpack__`, `cuda_acquire`, `cuda_release` and `draw` take stream objects,
    their handles and DLPack's special values alike, and refuse the same values with a
    CuvkError naming the rule."""
    torch = need("torch")
    buf = bridge.buffer((1024, 4), "float32")
    s = torch.cuda.Stream()
    assert cuvk._cuvk._parse_stream(s, "dlpack") == s.cuda_stream
    assert cuvk._cuvk._parse_stream(torch.cuda.default_stream()) == 0
    t = torch.from_dlpack(buf.__dlpack__(stream=s))  # a stream object (refused before)
    assert t.data_ptr() == buf.ptr
    r = cuvk.ParticleRenderer(bridge, 32, 32)
    for stream in (s, s.cuda_stream, torch.cuda.default_stream(), None, 0, 1, 2, -1):
        bridge.cuda_release(t, stream)
        bridge.cuda_acquire(t, stream)
        buf.cuda_release(stream)
        buf.cuda_acquire(stream)
        r.draw(t, stream=stream)
    with pytest.raises(cuvk.InvalidInputError) as e:
        buf.__dlpack__(stream=0)
    assert (e.value.rule, e.value.numbers) == ("Stream.Zero", {"stream": 0})
    for call in (lambda v: buf.__dlpack__(stream=v), lambda v: r.draw(t, stream=v), lambda v: bridge.cuda_release(t, v)):
        for v in (1 << 63, 1 << 64, -2):
            with pytest.raises(cuvk.InvalidInputError) as e:
                call(v)
            assert e.value.rule == "Stream.Handle" and e.value.numbers["stream"] == v
    torch.cuda.synchronize()
    r.wait_idle()


def test_cupy_streams_are_taken_everywhere(bridge):
    cupy = need("cupy")
    s = cupy.cuda.Stream(non_blocking=True)
    assert cuvk._cuvk._parse_stream(s, "dlpack") == s.ptr
    assert cuvk._cuvk._parse_stream(cupy.cuda.Stream.null) == 0
    buf = bridge.buffer((256, 4), "float32")
    with s:
        a = cupy.from_dlpack(buf)
        a[:] = 1.0
    r = cuvk.ParticleRenderer(bridge, 32, 32)
    r.draw(a, stream=s)
    buf.__dlpack__(stream=s)
    s.synchronize()
    r.wait_idle()


def test_pictures_are_deterministic_opaque_and_top_row_first(bridge):
    """The same particles in another order give the same bytes; alpha is 255; particles
    above the x-y plane (world z > 0) land in the upper rows (rows come top first)."""
    torch = need("torch")
    r = cuvk.ParticleRenderer(bridge, 64, 32)
    r.set_camera(yaw=0.0, pitch=0.0, distance=4.0)  # along +y: world x right, world z up
    r.set_exposure(4.0)
    pos = torch.from_dlpack(bridge.buffer((4096, 4), "float32"))
    g = torch.Generator(device="cuda").manual_seed(3)
    pts = torch.rand((4096, 4), device="cuda", generator=g) * 2 - 1
    pts[:, 2] = pts[:, 2].abs() * 0.8 + 0.1
    pts[:, 3] = pts[:, 3].abs() * 3
    pos.copy_(pts)
    r.draw(pos)
    first = r.read_rgba()
    assert len(first) == 64 * 32 * 4
    pos.copy_(pts.flip(0))
    r.draw(pos)
    assert r.read_rgba() == first
    pos.copy_(pts[torch.randperm(4096, device="cuda", generator=g)])
    r.draw(pos)
    assert r.read_rgba() == first
    assert all(first[i] == 255 for i in range(3, len(first), 4))
    rows = [sum(first[(y * 64 + x) * 4 + c] for x in range(64) for c in range(3)) for y in range(32)]
    assert sum(rows[:16]) > 2 * sum(rows[16:]), rows


def test_writes_must_be_in_place(bridge):
    torch = need("torch")
    r = cuvk.ParticleRenderer(bridge, 16, 16)
    pos = torch.from_dlpack(bridge.buffer((64, 4), "float32"))
    pos += 1.0
    pos.copy_(pos * 2)
    assert r.draw(pos) == 1
    assert r.draw(pos[:10]) == 2  # a prefix view draws the first particles
    pos = pos + 1.0  # a new tensor in PyTorch's memory
    with pytest.raises(cuvk.InvalidInputError) as e:
        r.draw(pos)
    assert e.value.rule == "Array.NotShared"
    with pytest.raises(cuvk.InvalidInputError) as e:
        bridge.buffer((1 << 40, 1 << 40))
    assert e.value.rule == "Array.Overflow" and e.value.numbers["axis"] == 1
    r.wait_idle()


def test_vulkan_read_and_write_behind_stuck_gpu_work_time_out_on_time(bridge):
    """A draw whose Vulkan work waits (on the GPU) for 1.5 s of CUDA work holds the queue:
    a one-shot Vulkan copy of another buffer queued behind it returns its timeout on time
    (0.3 waited the 1.5 s), what the copy uses stays alive until the GPU ran it, and the next
    call with room to wait reads and writes exactly."""
    import time

    torch = need("torch")
    r = cuvk.ParticleRenderer(bridge, 64, 32)
    pos = torch.from_dlpack(bridge.buffer((4096, 4), "float32"))
    other = bridge.buffer(N, "int32")
    words = struct.pack(f"<{N}i", *range(N))
    other.vulkan_write(words)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(2_500_000_000)  # about 1.5 s on an H100
        pos[:] = 0.0
    r.draw(pos, stream=s)  # Vulkan's draw waits on the GPU for the stream
    calls = (lambda: other.vulkan_read(timeout=0.05), lambda: other.vulkan_write(words, timeout=0.05))
    for call in calls:
        start = time.monotonic()
        with pytest.raises(cuvk.CuvkTimeoutError):
            call()
        took = time.monotonic() - start
        assert took < 0.5, f"returned after {took:.2f} s for a 0.05 s timeout"
    s.synchronize()
    assert other.vulkan_read(timeout=30.0) == words
    again = struct.pack(f"<{N}i", *[3 * i + 1 for i in range(N)])
    other.vulkan_write(again, timeout=30.0)
    assert other.vulkan_read(timeout=30.0) == again
    del r


SPIN_SOURCE = r"""
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
"""


@pytest.mark.parametrize("spinner", ["torch, one thread", "cupy, every SM"])
def test_timeouts_hold_behind_a_running_stream(bridge, spinner):
    """A stream that is *running* (a kernel spinning 2 s: torch's one-thread spin, or a CuPy
    kernel keeping every SM busy), released to Vulkan, and then a host call given
    timeout=0.25: every call raises CuvkTimeoutError instead of waiting for the spin. Prints
    each call's time."""
    torch = need("torch")
    import time

    if spinner.startswith("cupy"):
        cupy = need("cupy")
        kernel = cupy.RawKernel(SPIN_SOURCE, "spin")
        sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
        keep = cupy.cuda.Stream(non_blocking=True)  # owns the stream torch sees below
        s = torch.cuda.ExternalStream(keep.ptr)

        def spin(seconds):
            kernel((sms * 8,), (256,), (cupy.uint64(int(seconds * 1e9)),), stream=keep)
    else:
        s = torch.cuda.Stream()
        keep = None
        # Cycles per second of torch's spin kernel, measured (clock rates vary with boost).
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(s):
            start.record()
            torch.cuda._sleep(50_000_000)
            end.record()
        end.synchronize()
        per_second = 50_000_000 / (start.elapsed_time(end) / 1000.0)

        def spin(seconds):
            with torch.cuda.stream(s):
                torch.cuda._sleep(int(seconds * per_second))

    buf = bridge.buffer((4096, 4), "float32")
    t = torch.from_dlpack(buf)
    with torch.cuda.stream(s):
        t.zero_()
    r = cuvk.ParticleRenderer(bridge, 64, 32)
    r.draw(t, s)
    r.wait_idle()

    def spin_then_release(draw=False):
        spin(2.0)
        if draw:
            r.draw(t, s)  # releases the stream's work to the draw
        else:
            buf.cuda_release(s)

    host = bytes(4096 * 16)
    calls = [
        ("read", False, lambda: buf.read(timeout=0.25)),
        ("write", False, lambda: buf.write(host, timeout=0.25)),
        ("vulkan_read", False, lambda: buf.vulkan_read(timeout=0.25)),
        ("vulkan_write", False, lambda: buf.vulkan_write(host, timeout=0.25)),
        ("Bridge.synchronize after draw", True, lambda: bridge.synchronize(timeout=0.25)),
        ("read_rgba after draw", True, lambda: r.read_rgba(timeout=0.25)),
        ("save_png after draw", True, lambda: r.save_png("/tmp/cuvk-timeout.png", timeout=0.25)),
        ("wait_idle after draw", True, lambda: r.wait_idle(timeout=0.25)),
        ("vulkan_read after draw", True, lambda: buf.vulkan_read(timeout=0.25)),
    ]
    not_bounded = []
    for name, draw, call in calls:
        t0 = time.monotonic()
        spin_then_release(draw)
        t1 = time.monotonic()
        try:
            call()
            outcome = "returned data"
        except cuvk.CuvkTimeoutError:
            outcome = "CuvkTimeoutError"
        t2 = time.monotonic()
        print(f"  {name}: release/draw {t1 - t0:.3f} s, call {t2 - t1:.3f} s: {outcome}")
        if outcome != "CuvkTimeoutError":
            not_bounded.append(name)
        s.synchronize()
        r.wait_idle(timeout=30)
        bridge.synchronize(timeout=30)
    del keep
    assert not not_bounded, f"not bounded by their timeout: {not_bounded}"
