"""cuvk: Vulkan memory as PyTorch, CuPy and JAX tensors with no copy, ordered on the GPU.

    import cuvk, torch
    bridge = cuvk.Bridge()                                    # CUDA device 0 + its Vulkan device
    pos = torch.from_dlpack(bridge.buffer((n, 4), "float32"))  # Vulkan memory, as a tensor
    renderer = cuvk.ParticleRenderer(bridge, 1280, 720)
    step(pos)                                                  # any PyTorch code, on its stream
    renderer.draw(pos, stream=torch.cuda.current_stream())     # ordered on the GPU, no copy
    renderer.save_png("frame.png")

A `SharedBuffer` exports its memory through DLPack (`__dlpack__`, versioned capsules where
the consumer asks for them) and `__cuda_array_interface__` (v3). A consumer's stream waits on
the GPU for cuvk's last Vulkan use of the memory; `cuda_release(x, stream)` makes Vulkan's next
use wait for what that stream has done; `draw(x, stream)` is a release, the draw, then an
acquire. A DLPack capsule holds the memory: tensors outlive the cuvk objects safely. Writes
must be in place (`pos += v`, `pos.copy_(y)`; `pos = pos + v` leaves cuvk memory).

The whole ordering contract (which stream each call orders, which calls wait on the host,
which release the GIL) is the module docstring of the stub, cuvk/_cuvk.pyi, and
python/README.md.
"""

from ._cuvk import (
    AttachedBuffer,
    Bridge,
    Frame,
    HeldFrame,
    ParticleRenderer,
    Producer,
    Publisher,
    SharedBuffer,
    Subscriber,
    __version__,
)
from ._errors import (
    CuvkError,
    DriverError,
    InvalidInputError,
    IoError,
    NotEnabledError,
    NotFoundError,
    OutOfMemoryError,
    CuvkTimeoutError,
    UnsupportedError,
    WrongDeviceError,
)

__all__ = [
    "Bridge",
    "SharedBuffer",
    "ParticleRenderer",
    "Producer",
    "AttachedBuffer",
    "Frame",
    "Publisher",
    "Subscriber",
    "HeldFrame",
    "CuvkError",
    "InvalidInputError",
    "UnsupportedError",
    "NotEnabledError",
    "NotFoundError",
    "OutOfMemoryError",
    "WrongDeviceError",
    "DriverError",
    "CuvkTimeoutError",
    "IoError",
    "__version__",
]
