"""The exceptions cuvk raises.

Every refusal of the Rust library arrives as a subclass of :class:`CuvkError` chosen by the
error's *kind*, and keeps what the Rust error says in attributes a program can match on:

- ``kind``: the kind as a string (``"InvalidInput"``, ``"Unsupported"``, ...),
- ``rule``: the rule that was broken, as the Rust enum path (``"Layout.OutOfBounds"``),
- ``numbers``: the integers the rule was checked with (``{"offset": 4096, "size": 64, ...}``),
- ``vuid``: the Vulkan valid-usage ID of the rule where the Vulkan spec states one, else None.

The subclasses also derive from the built-in exception a Python program would expect
(``ValueError`` for bad input, ``MemoryError``, ``TimeoutError``, ``OSError``).
"""

from __future__ import annotations

from typing import Dict, Optional


class CuvkError(Exception):
    """Base class of every error cuvk raises."""

    def __init__(
        self,
        message: str,
        kind: str = "",
        rule: str = "",
        numbers: Optional[Dict[str, int]] = None,
        vuid: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.rule = rule
        self.numbers: Dict[str, int] = dict(numbers or {})
        self.vuid = vuid


class InvalidInputError(CuvkError, ValueError):
    """An argument broke a rule (range, alignment, size, dtype, shape, state): fix the call."""


class UnsupportedError(CuvkError):
    """The device, driver or platform cannot do this at all."""


class NotEnabledError(UnsupportedError):
    """The device could, but the extension or feature is not enabled on it."""


class NotFoundError(CuvkError):
    """A library or device is missing: no CUDA driver, no Vulkan loader, no matching GPU."""


class OutOfMemoryError(CuvkError, MemoryError):
    """Out of device or host memory, or a request larger than the memory heap."""


class WrongDeviceError(CuvkError, ValueError):
    """Objects of different devices were mixed (a tensor on another GPU, or on the CPU)."""


class DriverError(CuvkError, RuntimeError):
    """A Vulkan or CUDA call failed for another reason."""


class CuvkTimeoutError(CuvkError, TimeoutError):
    """A host wait timed out."""


class IoError(CuvkError, OSError):
    """An OS call failed (reading a file, writing a PNG)."""


BY_KIND = {
    "InvalidInput": InvalidInputError,
    "Unsupported": UnsupportedError,
    "NotEnabled": NotEnabledError,
    "NotFound": NotFoundError,
    "OutOfMemory": OutOfMemoryError,
    "WrongDevice": WrongDeviceError,
    "Driver": DriverError,
    "Timeout": CuvkTimeoutError,
    "Io": IoError,
}


def _make(message: str, kind: str, rule: str, numbers: Dict[str, int], vuid: Optional[str]) -> CuvkError:
    """Called by the extension module to build the exception for a Rust error."""
    return BY_KIND.get(kind, CuvkError)(message, kind, rule, numbers, vuid)
