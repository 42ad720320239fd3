"""Fan-out on a CUDA GPU (issue 37): a PyTorch publisher, a CuPy subscriber in another process
and a PyTorch subscriber here read every frame they hold exactly; a read held back on the GPU
is never overwritten (the negative control without the subscriber's ordering would see other
frames); refusals are typed and leave the next call working. Skipped without a GPU (fails
with REQUIRE_GPU=1)."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

import cuvk
from conftest import need

N = 1 << 18  # uint32 per slot (1 MiB)


def name(tag):
    return f"pytest-fanout-{tag}-{os.getpid()}"


def publish(pub, torch, stream, count):
    """`count` frames, each slot filled with its frame number on `stream`."""
    slots = [torch.from_dlpack(s) for s in pub.slots]
    for _ in range(count):
        frame = pub.acquire(stream)
        with torch.cuda.stream(stream):
            slots[frame.slot].fill_(frame.number)
        pub.release(frame, stream)


CUPY_CONSUMER = textwrap.dedent(
    """
    import sys, cupy, cuvk
    sub = cuvk.Subscriber(sys.argv[1], timeout=30.0)
    stream = cupy.cuda.Stream(non_blocking=True)
    held = wrong = 0
    while True:
        try:
            frame = sub.hold(stream, timeout=5.0)
        except cuvk.CuvkError:
            break  # the publisher is gone
        if frame is None:
            break
        with stream:
            slot = cupy.from_dlpack(sub.slots[frame.slot])
            wrong += int(cupy.count_nonzero(slot != frame.number).get())
        sub.release(frame, stream)
        held += 1
    print(held, wrong)
    """
)


def test_a_torch_publisher_serves_a_cupy_process_and_a_torch_subscriber_exactly(bridge):
    torch = need("torch")
    need("cupy")
    n = name("roundtrip")
    with cuvk.Publisher(bridge, n, N, "uint32", slots=5) as pub:
        assert [s.shape for s in pub.slots] == [(N,)] * 5
        assert pub.slots[0].dtype == "uint32"
        child = subprocess.Popen(
            [sys.executable, "-c", CUPY_CONSUMER, n], stdout=subprocess.PIPE, text=True
        )
        sub = cuvk.Subscriber(n, timeout=10.0)
        assert sub.slots[0].dtype == "uint32"
        for _ in range(600):  # the child imports CuPy first
            if pub.consumers == 2:
                break
            time.sleep(0.05)
        assert pub.consumers == 2
        stream = torch.cuda.Stream()
        read_stream = torch.cuda.Stream()
        wrong = held = 0
        for round_ in range(100):
            publish(pub, torch, stream, 3)
            frame = sub.hold(read_stream, timeout=5.0)
            assert frame is not None
            with torch.cuda.stream(read_stream):
                slot = torch.from_dlpack(sub.slots[frame.slot])
                wrong += int((slot != frame.number).sum().item())
            sub.release(frame, read_stream)
            held += 1
        stream.synchronize()
    out, _ = child.communicate(timeout=60)
    child_held, child_wrong = map(int, out.split())
    assert wrong == 0 and held == 100
    assert child_wrong == 0, f"the CuPy process read {child_wrong} wrong elements"
    assert child_held > 0


def test_a_held_read_is_never_overwritten_and_the_control_shows_it_would_be(bridge):
    torch = need("torch")
    n = name("gate")
    with cuvk.Publisher(bridge, n, N, "uint32", slots=3) as pub:
        sub = cuvk.Subscriber(n, timeout=10.0)
        stream = torch.cuda.Stream()
        publish(pub, torch, stream, 1)
        frame = sub.hold(torch.cuda.current_stream(), timeout=5.0)
        assert frame is not None and frame.number == 1
        reader = torch.cuda.Stream()
        with torch.cuda.stream(reader):
            torch.cuda._sleep(200_000_000)  # the read is held back on the GPU (~0.1 s)
            slot = torch.from_dlpack(sub.slots[frame.slot])
            copy = slot.clone()
        sub.release(frame, reader)
        # 20 more frames: none may go into the held slot before the read is done.
        publish(pub, torch, stream, 20)
        reader.synchronize()
        assert int((copy != 1).sum().item()) == 0
        # Negative control: a write into that slot on another stream, with no ordering,
        # lands under a held-back read.
        frame = sub.hold(torch.cuda.current_stream(), timeout=5.0)
        slot = torch.from_dlpack(sub.slots[frame.slot])
        rogue = torch.cuda.Stream()
        with torch.cuda.stream(reader):
            torch.cuda._sleep(200_000_000)
            late = slot.clone()
        with torch.cuda.stream(rogue):
            slot.fill_(7)
        reader.synchronize()
        rogue.synchronize()
        assert int((late != frame.number).sum().item()) > 0
        sub.release(frame, reader)
        stream.synchronize()


def test_publisher_and_subscriber_refusals_are_typed(bridge):
    torch = need("torch")
    with pytest.raises(cuvk.InvalidInputError) as e:
        cuvk.Publisher(bridge, name("3d"), (2, 3, 4))
    assert e.value.rule == "Array.Shape"
    with pytest.raises(cuvk.CuvkError) as e:
        cuvk.Publisher(bridge, name("k1"), N, "uint32", slots=1)
    assert e.value.rule == "Sync.SlotsHeld"
    start = time.monotonic()
    with pytest.raises(cuvk.CuvkError) as e:
        cuvk.Subscriber(name("nobody"), timeout=0.2)
    assert e.value.kind in ("Timeout", "NotFound", "Io"), e.value
    assert time.monotonic() - start < 5.0
    n = name("twice")
    with cuvk.Publisher(bridge, n, N, "uint32", slots=3) as pub:
        stream = torch.cuda.Stream()
        frame = pub.acquire(stream)
        pub.release(frame, stream)
        with pytest.raises(cuvk.CuvkError):
            pub.release(frame, stream)  # released already
        publish(pub, torch, stream, 3)  # and the next frames work
        stream.synchronize()
