"""Type stubs of the extension module (cuvk/__init__.py has the overview, python/README.md
the same contract with examples).

Ordering contract
=================

cuvk orders CUDA streams and its own Vulkan work on the GPU with two timeline semaphores;
nothing waits on the host unless a call below says it does. Vulkan uses a buffer only in
``ParticleRenderer.draw`` (it reads the positions) and in ``vulkan_read`` / ``vulkan_write``.

- ``bridge.cuda_release(x, stream)``: Vulkan's next use of ``x`` waits (on the GPU) for the
  work enqueued on ``stream`` so far. Call it after CUDA work on ``stream`` wrote ``x``.
  Releases run in call order on the GPU: a release makes its stream wait for every earlier
  release, on any stream.
- ``bridge.cuda_acquire(x, stream)``: ``stream`` waits (on the GPU) until Vulkan's last use
  of ``x`` so far is done. Call it before CUDA work on ``stream`` writes ``x`` while a draw
  may still be reading it.
- ``renderer.draw(x, stream)`` is ``cuda_release(x, stream)``, the draw, then
  ``cuda_acquire(x, stream)``: the loop "write ``x`` on ``stream``, draw" needs no other
  call. ``draw(x, stream=-1)`` does neither: order with the two calls yourself.
- Both calls order only the stream named. Any other stream that writes ``x`` needs its own
  ``cuda_acquire`` before and ``cuda_release`` after (or is the one passed to ``draw``).
- A DLPack import (``torch.from_dlpack(buf)``, ``cupy.from_dlpack(buf)``) is a
  ``cuda_acquire`` on the stream the consumer passes to ``__dlpack__`` (PyTorch and CuPy:
  their current stream), once, at the import: it orders that stream after the draws
  submitted before it, not after later ones. Reading ``__cuda_array_interface__`` is a
  ``cuda_acquire`` on the legacy default stream, which the interface's ``stream`` field
  names (1).
- Host copies (``read``, ``write``, ``vulkan_read``, ``vulkan_write``) first wait on the
  host for the buffer's last draw and its last ``cuda_release``, then copy and wait for the
  copy: when they return the data is in place, and CUDA work enqueued afterwards needs no
  ``cuda_acquire`` for them. CUDA work that was never released is not waited for: release
  it (or synchronise its stream) first. After ``draw(x, stream)`` they need no other release
  unless ``stream`` wrote ``x`` again after the draw.
- ``read_rgba`` and ``save_png`` wait on the host for the renderer's last frame; they read
  the renderer's own pixels, not ``x``, and need no CUDA ordering before or after.
- Writes must be in place: ``pos += v``, ``pos.copy_(y)``, ``pos[:] = y``,
  ``torch.add(pos, v, out=pos)``. ``pos = pos + v`` makes a new tensor in the framework's
  own memory; cuvk no longer sees it (``draw`` refuses it: ``Array.NotShared``). JAX arrays
  are immutable: JAX can read cuvk memory but its results are new JAX memory.

Host waits release the GIL: ``Bridge()``, ``Bridge.buffer``, ``Bridge.synchronize``,
``read``, ``vulkan_read``, ``write`` and ``vulkan_write`` (after copying ``data``, which
holds it), ``ParticleRenderer()``, ``draw`` (while it waits for a free frame slot, records
and submits), ``read_rgba``, ``save_png`` and ``wait_idle``. ``cuda_acquire``,
``cuda_release``, ``__dlpack__`` and ``__cuda_array_interface__`` only enqueue GPU work and
hold it.
``timeout`` arguments are seconds per host wait; past it a ``CuvkTimeoutError``
(a ``TimeoutError``).
"""

from os import PathLike
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

__version__: str

#: A CUDA stream, read the same way by every call that takes one:
#:
#: - None: the legacy default stream (PyTorch's and CuPy's default);
#: - an int (or an object with ``__index__``), DLPack's convention: -1 no ordering, 1 the
#:   legacy default stream, 2 the per-thread default stream, else a ``cudaStream_t`` handle.
#:   0 is refused by ``__dlpack__`` (the DLPack spec disallows it for CUDA: ``Stream.Zero``);
#:   ``cuda_acquire``, ``cuda_release`` and ``draw`` read it as the NULL handle, the legacy
#:   default stream;
#: - a stream object: ``__cuda_stream__()`` returning ``(0, handle)`` (the CUDA stream
#:   protocol), else a ``cuda_stream`` (``torch.cuda.Stream``), ``ptr`` (``cupy.cuda.Stream``)
#:   or ``handle`` (PyCUDA) int attribute. An object's handle is a ``cudaStream_t`` as it is: 0
#:   is the NULL stream (the legacy default stream), -1 is refused.
#:
#: Handles are ``intptr_t`` values: an int below -1 or at or above 2**63 names no stream
#: (``Stream.Handle``, ``numbers["stream"]`` the value given). Other refusals:
#: ``Stream.Type`` (not a stream), ``Stream.Protocol`` (``__cuda_stream__`` gave something
#: other than ``(0, int)``); an exception raised by the object's own ``__cuda_stream__``
#: propagates. All are ``InvalidInputError``. A handle must name a live stream of the
#: bridge's device: cuvk checks its context, but a destroyed stream's handle is undefined
#: behaviour, as everywhere in CUDA. A stream that is capturing a CUDA graph is refused
#: (``Stream.Capturing``).
Stream = Union[None, int, Any]
#: A `SharedBuffer`, or a tensor / array over one's memory (anything with
#: `__cuda_array_interface__`: PyTorch, CuPy, JAX, Numba). It must be C-contiguous
#: (``Array.Layout``) and lie inside one buffer of the bridge (``Array.NotShared``).
ArrayLike = Any

class Bridge:
    """A CUDA device and the Vulkan device on the same GPU (paired by UUID), with the two
    timeline semaphores that order CUDA streams and cuvk's Vulkan work on the GPU.

    Opening one loads the CUDA driver (libcuda.so), then the Vulkan loader
    (libvulkan.so.1); ``NotFoundError`` where a piece is missing, its ``rule`` saying which:
    ``CudaUnavailable`` (no libcuda), ``VulkanLoader`` (no libvulkan.so.1),
    ``NoVulkanDevice`` (no Vulkan device with the CUDA device's UUID). ``validation=True``
    turns on the Khronos validation layer (``NotFoundError``, ``ValidationLayerMissing``,
    without it) and collects its messages (``validation_messages``)."""

    def __init__(self, device: int = 0, *, validation: bool = False) -> None: ...
    @property
    def cuda_device(self) -> int:
        """The CUDA device ordinal."""
    @property
    def device_name(self) -> str:
        """The Vulkan device's name."""
    @property
    def uuid(self) -> str:
        """The GPU's UUID (CUDA's and Vulkan's ``deviceUUID``), as text."""
    @property
    def inline_kernels(self) -> bool:
        """Whether CUDA kernels can run inside Vulkan command buffers (VK_NVX_binary_import)."""
    def validation_messages(self) -> List[str]:
        """Vulkan validation-layer messages so far (empty without ``validation=True``)."""
    def buffer(self, shape: Union[int, Sequence[int]], dtype: Any = None) -> SharedBuffer:
        """A zero-filled buffer of Vulkan memory shared with CUDA (waits for the zeroing).

        dtype (default float32): bool, int8/16/32/64, uint8/16/32/64, float16/32/64, as a name
        ("float32", "<f4", "torch.float32") or a dtype object (torch.float32, numpy.float32).
        A shape whose byte count overflows is refused (``Array.Overflow``, with ``numbers``
        ``itemsize``, ``axis``, ``dim`` and ``bytes_so_far``).
        """
    def buffer_of(self, array: ArrayLike) -> SharedBuffer:
        """The cuvk buffer under `array` (InvalidInputError if it is not cuvk memory)."""
    def cuda_acquire(self, array: ArrayLike, stream: Stream = None) -> None:
        """`stream` waits on the GPU until Vulkan's last use of `array`'s buffer so far is
        done (no host wait). Call it before CUDA work on `stream` writes memory a draw may
        still be reading. See the ordering contract at the top of this file."""
    def cuda_release(self, array: ArrayLike, stream: Stream = None) -> None:
        """Vulkan's next use of `array`'s buffer waits on the GPU for the work enqueued on
        `stream` so far (no host wait). Call it after CUDA work on `stream` wrote the memory.
        Releases run in call order: this one also waits for every earlier release."""
    def synchronize(self, timeout: float = 10.0) -> None:
        """Waits on the host until every Vulkan submission through this bridge is done (not
        CUDA work: synchronise your streams for that)."""

class SharedBuffer:
    """Vulkan memory shared with CUDA, with a dtype and a shape; a DLPack and CUDA array
    interface producer (no copy). A DLPack capsule holds the memory: a tensor made by
    ``from_dlpack`` stays valid after the buffer, the bridge and the renderer are gone."""

    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def dtype(self) -> str:
        """The element type's name ("float32")."""
    @property
    def itemsize(self) -> int:
        """Bytes per element."""
    @property
    def nbytes(self) -> int:
        """Size in bytes."""
    @property
    def ptr(self) -> int:
        """The CUDA device pointer."""
    @property
    def device(self) -> int:
        """The CUDA device ordinal."""
    def cuda_acquire(self, stream: Stream = None) -> None:
        """As ``Bridge.cuda_acquire(self, stream)``."""
    def cuda_release(self, stream: Stream = None) -> None:
        """As ``Bridge.cuda_release(self, stream)``."""
    def copy_from(self, src: Any, stream: Stream = None) -> None:
        """Copies `src`, a C-contiguous CUDA array of exactly `nbytes` bytes on this GPU or
        any GPU with a peer path (a PyTorch tensor on ``cuda:1``), into the buffer by copy
        engine, ordered on the GPU: after the work enqueued on `stream` (the producer's
        stream on the source's GPU; None: its legacy default stream) and after Vulkan's last
        use; Vulkan's next use waits for the copy, and `stream` waits for it before its next
        work (the source may be reused at once). The fast path where ``view.copy_(src)`` from
        another GPU into a DLPack view of cuvk memory is slow. Refused (nothing copied):
        ``Array.Type``, ``Array.Interface``, ``Array.Layout``, ``Peer.SizeMismatch``,
        ``Peer.NoPeerAccess`` (UnsupportedError), ``Layout.OutOfBounds``."""
    def read(self, timeout: float = 10.0) -> bytes:
        """A host copy made by CUDA. Waits on the host for the last draw of the buffer and
        its last ``cuda_release`` (not for CUDA work never released), then for the copy."""
    def write(self, data: Any, timeout: float = 10.0) -> None:
        """Copies exactly `nbytes` bytes into the buffer through CUDA: a C-contiguous CPU
        tensor or array (read through DLPack) or any buffer-protocol object. Waits as `read`
        does, then for the copy: the data is in place when it returns."""
    def vulkan_read(self, timeout: float = 10.0) -> bytes:
        """A host copy made by Vulkan (vkCmdCopyBuffer): what Vulkan sees. Waits as `read`."""
    def vulkan_write(self, data: Any, timeout: float = 10.0) -> None:
        """Writes exactly `nbytes` bytes (as `write` takes them) through Vulkan: host-visible
        staging, then vkCmdCopyBuffer. Waits as `read`, then for the copy: CUDA work enqueued
        after it returns sees the data with no ``cuda_acquire``."""
    def __dlpack__(
        self,
        *,
        stream: Stream = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """A DLPack capsule (versioned where `max_version` asks for it) over the buffer's
        memory. `stream` (DLPack's convention; None: the legacy default stream, -1: none)
        waits on the GPU for the buffer's last Vulkan use so far. ``copy=True`` and another
        ``dl_device`` are refused with a ``BufferError`` (zero-copy only)."""
    def __dlpack_device__(self) -> Tuple[int, int]:
        """``(2, ordinal)``: a CUDA device, as DLPack names it."""
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """The CUDA array interface (version 3). Reading it makes the legacy default stream
        wait on the GPU for the buffer's last Vulkan use; its ``stream`` field (1) says so."""
    def __len__(self) -> int: ...

class AttachedBuffer:
    """One of a viewer's buffers, mapped into this process's CUDA context, typed as the viewer
    published it (``particles --serve`` publishes float32 rows of ``x, y, z, key``: shape
    ``(n, 4)``). ``torch.from_dlpack(buf)``, ``cupy.from_dlpack(buf)`` or
    ``torch.as_tensor(buf, device="cuda")`` is an array over the viewer's memory, no copy; the
    array holds the buffer, the buffer holds the mapping. Neither export orders anything:
    write a slot only between ``Producer.acquire`` and ``Producer.release`` of its frame, on
    the stream passed to them."""

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
    @property
    def ptr(self) -> int:
        """The CUDA device pointer."""
    @property
    def shape(self) -> Tuple[int, ...]:
        """Rows, then values per row where there are several."""
    @property
    def dtype(self) -> str:
        """The element type's name (``"float32"``); ``"dlpack(code, bits, lanes)"`` for one
        NumPy has no name for."""
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """Version 3, typed and shaped as published; no stream. Raises ``InvalidInputError``
        (``Layout.ElementFormat``) for bfloat16 or vector types: use DLPack."""
    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """DLPack export of the same memory; ``stream`` is read, not used."""
    def __dlpack_device__(self) -> Tuple[int, int]:
        """``(2, ordinal)``: a CUDA device."""

class Frame:
    """A frame handed out by ``Producer.acquire`` or ``Publisher.acquire``."""

    @property
    def number(self) -> int:
        """1, 2, ...: the frame's timeline value."""
    @property
    def slot(self) -> int:
        """The index in ``slots`` it writes (``Producer``: ``number % len(slots)``;
        ``Publisher``: a slot no consumer holds)."""
    @property
    def previous_use(self) -> Optional[int]:
        """The last frame that wrote this slot (``number - K``), or None."""

class Producer:
    """A simulation in this process writing frames into a viewer in another process
    (``particles --serve NAME``), zero-copy, ordered on the GPU by the viewer's timelines:

        p = cuvk.Producer("galaxies")
        slots = [torch.from_dlpack(s) for s in p.slots]
        stream = torch.cuda.current_stream()
        while True:
            frame = p.acquire(stream)     # the viewer drew this slot's last frame
            step(slots[(frame.slot - 1) % len(slots)], slots[frame.slot])
            p.release(frame, stream)      # the viewer's draw waits for this, on the GPU

    Frames in flight (K) are the viewer's: one slot each. A viewer that goes away makes
    ``acquire`` or ``release`` raise ``IoError`` (a closed connection, no rule); call
    ``release_waits`` then."""

    def __init__(self, name: str, device: int = 0, timeout: float = 30.0) -> None: ...
    @property
    def slots(self) -> List[AttachedBuffer]:
        """The viewer's buffers, in the order published; a frame writes ``slots[frame.slot]``."""
    @property
    def device(self) -> int:
        """The CUDA device ordinal."""
    def acquire(self, stream: Stream = None, timeout: float = 30.0) -> Frame:
        """The next frame: ``stream`` waits on the GPU until the viewer drew the slot's last
        frame (a host wait, GIL released, only while the viewer has not announced it; after a
        timeout the next call acquires the same frame)."""
    def release(self, frame: Frame, stream: Stream = None) -> None:
        """After writing ``frame``: ``stream`` signals it written; the viewer is told."""
    def drawn(self) -> int:
        """The newest frame the viewer announced drawn (no wait)."""
    def release_waits(self) -> None:
        """After the viewer is gone: releases this process's stream waits on its timeline."""

class Publisher:
    """Frames this process writes (a simulation, a PyTorch job) for any number of consumers in
    other processes — ``particles --view NAME`` viewers, ``cuvk.Subscriber``s, recorders —
    each reading the newest frame (or every frame, if it asked), none able to slow this
    process down:

        bridge = cuvk.Bridge()
        with cuvk.Publisher(bridge, "galaxies", (n, 4), "float32", slots=8) as pub:
            slots = [torch.from_dlpack(s) for s in pub.slots]
            stream = torch.cuda.current_stream()
            while training:
                frame = pub.acquire(stream)   # a slot no consumer holds; no host wait
                slots[frame.slot].copy_(x)    # any work on `stream`
                pub.release(frame, stream)    # consumers' reads wait for this, on the GPU

    K = ``slots``: ``slots - 2`` consumers can hold frames at once (more raise
    ``Sync.SlotsHeld`` from ``acquire``). ``frame.slot`` is the slot to write (not
    ``number % K``: held slots are skipped)."""

    def __init__(
        self,
        bridge: Bridge,
        name: str,
        shape: Union[int, Sequence[int]],
        dtype: Any = None,
        slots: int = 5,
    ) -> None: ...
    @property
    def slots(self) -> List[AttachedBuffer]:
        """The slots, typed ``shape``/``dtype``; a frame writes ``slots[frame.slot]``."""
    @property
    def device(self) -> int:
        """The CUDA device ordinal."""
    @property
    def consumers(self) -> int:
        """Consumers attached now."""
    def acquire(self, stream: Stream = None, timeout: float = 30.0) -> Frame:
        """The next frame, in a slot no consumer holds: ``stream`` waits on the GPU for the
        consumers' reads of it. No host wait unless every-frame consumers hold every free slot
        (then at most ``timeout`` seconds, GIL released, before they get the newest only)."""
    def release(self, frame: Frame, stream: Stream = None) -> None:
        """After writing ``frame`` on ``stream``: it signals the frame written. No host wait."""
    def close(self) -> None:
        """Stops publishing (bounded wait for the frames released): consumers see the end,
        the name is free; tensors over the slots stay valid. Idempotent."""
    def __enter__(self) -> "Publisher": ...
    def __exit__(self, *exc: object) -> bool: ...

class HeldFrame:
    """A frame a ``Subscriber`` holds."""

    @property
    def number(self) -> int:
        """The publisher's frame number."""
    @property
    def slot(self) -> int:
        """The index in ``Subscriber.slots`` it is in."""

class Subscriber:
    """A consumer of a publisher in another process (``particles --publish NAME`` or a
    ``cuvk.Publisher``), reading its frames as CuPy / PyTorch arrays with no copy:

        sub = cuvk.Subscriber("galaxies")
        stream = cupy.cuda.get_current_stream()
        while (frame := sub.hold(stream, timeout=1.0)) is not None:
            pos = cupy.from_dlpack(sub.slots[frame.slot])  # written: `stream` waited for it
            centre = pos[:, :3].mean(axis=0)                # any reads on `stream`
            sub.release(frame, stream)                      # the publisher may rewrite it

    One frame is held at a time; the publisher never writes a slot whose read is not released
    (on the GPU). ``hold`` raises ``IoError`` once the publisher is gone."""

    def __init__(
        self, name: str, device: int = 0, every_frame: bool = False, timeout: float = 30.0
    ) -> None: ...
    @property
    def slots(self) -> List[AttachedBuffer]:
        """The publisher's slots, mapped here, typed as it published them."""
    @property
    def device(self) -> int:
        """The CUDA device ordinal."""
    def hold(self, stream: Stream = None, timeout: float = 30.0) -> Optional[HeldFrame]:
        """The next frame (newest; with ``every_frame`` the oldest not read), held until
        ``release``: ``stream`` waits on the GPU until it is written. Waits on the host at most
        ``timeout`` seconds (GIL released) for a new frame; None if none came."""
    def release(self, frame: HeldFrame, stream: Stream = None) -> None:
        """After reading ``frame`` on ``stream``: it signals the read done; no host wait."""

class ParticleRenderer:
    """The particle demo's renderer, headless, drawing (N, 4) float32 particles straight
    from cuvk memory: a compute splat of each particle into one pixel's HDR counts, a
    blurred glow, a faint star field fixed on the sky over a dark blue background (so an
    empty picture is not black), a vignette, an ACES tone map and gamma 1/2.2.

    Positions: ``x, y, z`` in world units and ``w``, the colour key. ``pos[:n]`` (a prefix
    view) draws the first n particles; a view that starts elsewhere is refused
    (``Positions.Offset``). Coordinates are not checked: where a non-finite one lands is
    undefined.

    Colour: each pixel takes the palette colour at the mean key of its particles, where a
    particle's key is ``w' / (w' + 1)`` for ``w' = max(w, 0)`` (rounded to 1/255): w = 0
    magenta, 1/3 orange, 1 gold, 3 pale blue, large blue.

    Pictures are deterministic: the same positions (in any order: the splat adds integer
    counts), camera, exposure and size give the same bytes on the same GPU and driver.
    """

    def __init__(self, bridge: Bridge, width: int = 1280, height: int = 720) -> None:
        """`width` and `height`: 1 to 8192 pixels (``Renderer.Size``)."""
    @property
    def width(self) -> int:
        """Picture width in pixels."""
    @property
    def height(self) -> int:
        """Picture height in pixels."""
    @property
    def frames(self) -> int:
        """Frames drawn (submitted) so far."""
    def set_camera(self, yaw: float = 0.3, pitch: float = 0.55, distance: float = 10.0) -> None:
        """Orbit camera looking at the world origin from `distance` world units away (the
        positions' units). `yaw` turns about the vertical z axis, `pitch` lifts above the x-y
        plane, both in radians: the eye is at ``distance * (cos(pitch) sin(yaw),
        -cos(pitch) cos(yaw), sin(pitch))``, z up on screen (yaw 0, pitch 0: looking along +y,
        world x to the right). Vertical field of view 50 degrees, horizontal from the aspect
        ratio. Particles nearer than 0.05 or farther than 100 world units along the view
        direction are not drawn. Takes effect at the next draw. A pitch that looks straight
        along z is refused (``Renderer.Camera``)."""
    def set_exposure(self, exposure: Optional[float] = None) -> None:
        """Brightness per particle, > 0: a pixel's own colour (before the glow, stars and tone
        map are added) is ``sqrt(count * exposure)`` times its palette colour. None (default):
        ``min(0.034 * width * height / N, 0.1)`` for N particles. Takes effect at the next
        draw."""
    def draw(self, positions: ArrayLike, stream: Stream = None) -> int:
        """Submits a frame drawing `positions` and returns its number (1 for the first).

        Ordered with `stream` (None: the legacy default stream): after the work enqueued
        there so far, before the work enqueued there next (``cuda_release``, the draw,
        ``cuda_acquire``); ``stream=-1``: no ordering. It returns once the frame is
        submitted, not drawn: up to 3 frames (and ``read_rgba`` copies) of a renderer are
        queued on the GPU, and a draw beyond that waits on the host, GIL released, for the
        oldest (``CuvkTimeoutError`` after 10 s). The renderer holds `positions`' memory
        until the GPU is done with it."""
    def read_rgba(self, timeout: float = 10.0) -> bytes:
        """The last frame's pixels (waits for it on the host): ``height`` rows of ``width``
        pixels, the top row first, each pixel 4 bytes R, G, B, A; colours gamma-encoded
        (x ** (1/2.2) of the tone-mapped value, close to sRGB; not linear); alpha 255.
        ``numpy.frombuffer(b, numpy.uint8).reshape(height, width, 4)`` is the picture.
        Refused before the first draw (``Renderer.NoFrame``)."""
    def save_png(self, path: Union[str, "PathLike[str]"], timeout: float = 10.0) -> None:
        """Writes the last frame (as `read_rgba` gives it) as an 8-bit RGBA PNG."""
    def wait_idle(self, timeout: float = 10.0) -> None:
        """Waits on the host until every frame drawn is done (every Vulkan submission of the
        bridge, in fact)."""

# Internal: the argument checks of the calls above, reachable without a GPU (for tests).

def _parse_stream(stream: Stream, convention: str = "cuvk") -> Optional[int]:
    """The handle cuvk would order on for `stream` (0: the legacy default stream, 2: the
    per-thread one), None for no ordering, or the refusal. `convention`: "dlpack" (as
    `__dlpack__` reads it) or "cuvk" (as `cuda_acquire`, `cuda_release` and `draw` do)."""

def _buffer_nbytes(shape: Union[int, Sequence[int]], dtype: Any = None) -> int:
    """The bytes `Bridge.buffer(shape, dtype)` would allocate, or its refusal of the arguments."""
