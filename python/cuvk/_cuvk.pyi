"""Type stubs of the extension module (see cuvk/__init__.py for the overview)."""

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
#: `__cuda_array_interface__`: PyTorch, CuPy, JAX, Numba).
ArrayLike = Any

class Bridge:
    """A CUDA device and the Vulkan device on the same GPU (paired by UUID), with the two
    timeline semaphores that order CUDA streams and cuvk's Vulkan work on the GPU."""

    def __init__(self, device: int = 0, *, validation: bool = False) -> None: ...
    @property
    def cuda_device(self) -> int: ...
    @property
    def device_name(self) -> str: ...
    @property
    def uuid(self) -> str: ...
    @property
    def inline_kernels(self) -> bool:
        """Whether CUDA kernels can run inside Vulkan command buffers (VK_NVX_binary_import)."""
    def validation_messages(self) -> List[str]: ...
    def buffer(self, shape: Union[int, Sequence[int]], dtype: Any = None) -> SharedBuffer:
        """A zero-filled buffer of Vulkan memory shared with CUDA.

        dtype (default float32): bool, int8/16/32/64, uint8/16/32/64, float16/32/64, as a name
        ("float32", "<f4", "torch.float32") or a dtype object (torch.float32, numpy.float32).
        """
    def buffer_of(self, array: ArrayLike) -> SharedBuffer:
        """The cuvk buffer under `array` (InvalidInputError if it is not cuvk memory)."""
    def cuda_acquire(self, array: ArrayLike, stream: Stream = None) -> None:
        """`stream` waits on the GPU until Vulkan's last use of `array` is done."""
    def cuda_release(self, array: ArrayLike, stream: Stream = None) -> None:
        """Vulkan's next use of `array` waits on the GPU for the work enqueued on `stream`."""
    def synchronize(self, timeout: float = 10.0) -> None:
        """Waits on the host until every Vulkan submission through this bridge is done."""

class SharedBuffer:
    """Vulkan memory shared with CUDA, with a dtype and a shape; a DLPack and CUDA array
    interface producer (no copy)."""

    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def ptr(self) -> int:
        """The CUDA device pointer."""
    @property
    def device(self) -> int:
        """The CUDA device ordinal."""
    def cuda_acquire(self, stream: Stream = None) -> None: ...
    def cuda_release(self, stream: Stream = None) -> None: ...
    def read(self, timeout: float = 10.0) -> bytes:
        """A host copy, after Vulkan's last use and the last CUDA release."""
    def write(self, data: Any, timeout: float = 10.0) -> None:
        """Copies exactly `nbytes` bytes into the buffer through CUDA: a C-contiguous CPU
        tensor or array (read through DLPack, no extra copy) or any buffer-protocol object."""
    def vulkan_read(self, timeout: float = 10.0) -> bytes:
        """A host copy made by Vulkan (vkCmdCopyBuffer), after the last CUDA release."""
    def vulkan_write(self, data: Any, timeout: float = 10.0) -> None:
        """Writes exactly `nbytes` bytes (as `write` takes them) through Vulkan: host-visible
        staging, then vkCmdCopyBuffer."""
    def __dlpack__(
        self,
        *,
        stream: Stream = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]: ...
    def __len__(self) -> int: ...

class ParticleRenderer:
    """The particle demo's renderer (HDR splat, glow, tone map, star field), headless, drawing
    (N, 4) float32 particles straight from cuvk memory: x, y, z and a colour key w >= 0 (0:
    the warm outer colour, about 1: gold, large: blue-white)."""

    def __init__(self, bridge: Bridge, width: int = 1280, height: int = 720) -> None: ...
    @property
    def width(self) -> int: ...
    @property
    def height(self) -> int: ...
    @property
    def frames(self) -> int: ...
    def set_camera(self, yaw: float = 0.3, pitch: float = 0.55, distance: float = 10.0) -> None:
        """Orbit camera: yaw about the vertical (z) axis, pitch above the x-y plane (radians)."""
    def set_exposure(self, exposure: Optional[float] = None) -> None:
        """Brightness per particle; None: chosen from the particle count and image size."""
    def draw(self, positions: ArrayLike, stream: Stream = None) -> int:
        """Draws a frame ordered with `stream` (None: the legacy default stream): after the
        work enqueued there so far, before the work enqueued there next. -1: no ordering."""
    def read_rgba(self, timeout: float = 10.0) -> bytes: ...
    def save_png(self, path: Union[str, "PathLike[str]"], timeout: float = 10.0) -> None: ...
    def wait_idle(self, timeout: float = 10.0) -> None: ...


# Internal: the argument checks of the calls above, reachable without a GPU (for tests).

def _parse_stream(stream: Stream, convention: str = "cuvk") -> Optional[int]:
    """The handle cuvk would order on for `stream` (0: the legacy default stream, 2: the
    per-thread one), None for no ordering, or the refusal. `convention`: "dlpack" (as
    `__dlpack__` reads it) or "cuvk" (as `cuda_acquire`, `cuda_release` and `draw` do)."""

def _buffer_nbytes(shape: Union[int, Sequence[int]], dtype: Any = None) -> int:
    """The bytes `Bridge.buffer(shape, dtype)` would allocate, or its refusal of the arguments."""
