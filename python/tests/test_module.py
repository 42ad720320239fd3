"""What runs everywhere (CI has no GPU): the module imports, its types and stubs agree, and
refusals arrive as the documented exceptions with their rule and numbers."""

import ast
import pathlib

import pytest

import cuvk
from cuvk import _cuvk

STUB = pathlib.Path(cuvk.__file__).with_name("_cuvk.pyi")


def test_version_and_exports():
    assert cuvk.__version__ == "0.5.0"
    for name in cuvk.__all__:
        assert hasattr(cuvk, name), name


def test_exceptions_derive_from_what_python_code_catches():
    assert issubclass(cuvk.InvalidInputError, ValueError)
    assert issubclass(cuvk.WrongDeviceError, ValueError)
    assert issubclass(cuvk.OutOfMemoryError, MemoryError)
    assert issubclass(cuvk.CuvkTimeoutError, TimeoutError)
    assert issubclass(cuvk.IoError, OSError)
    assert issubclass(cuvk.NotEnabledError, cuvk.UnsupportedError)
    for name in cuvk.__all__:
        obj = getattr(cuvk, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, cuvk.CuvkError)


def test_stub_lists_every_public_method_and_property():
    tree = ast.parse(STUB.read_text())
    stubbed = {
        node.name: {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }
    for cls in (cuvk.Bridge, cuvk.SharedBuffer, cuvk.ParticleRenderer, cuvk.Producer, cuvk.AttachedBuffer, cuvk.Frame):
        public = {
            n
            for n in dir(cls)
            if not n.startswith("_") or n in ("__dlpack__", "__dlpack_device__", "__cuda_array_interface__", "__len__")
        }
        missing = public - stubbed[cls.__name__] - {"__init__"}
        assert not missing, f"{cls.__name__}: not in the stub: {missing}"
        extra = stubbed[cls.__name__] - public - {"__init__"}
        assert not extra, f"{cls.__name__}: stubbed but absent: {extra}"


def test_a_machine_without_cuda_gets_not_found_with_its_rule():
    try:
        b = cuvk.Bridge()
    except cuvk.NotFoundError as e:
        assert e.kind == "NotFound"
        assert e.rule in ("CudaUnavailable", "NoCudaDevice", "NoVulkanDevice", "VulkanLoader")
        assert str(e)
        return
    b.synchronize()  # a GPU machine: the bridge opened


def test_bad_arguments_are_refused_before_any_device_is_opened():
    with pytest.raises(TypeError):
        cuvk.Bridge("zero")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        cuvk.ParticleRenderer(None)  # type: ignore[arg-type]


def test_error_factory_keeps_rule_and_numbers():
    e = cuvk._errors._make("bad offset", "InvalidInput", "Layout.Misaligned", {"value": 4, "alignment": 16}, None)
    assert isinstance(e, cuvk.InvalidInputError)
    assert (e.rule, e.numbers, e.vuid) == ("Layout.Misaligned", {"value": 4, "alignment": 16}, None)
    assert isinstance(cuvk._errors._make("x", "Something new", "", {}, None), cuvk.CuvkError)


def test_extension_module_classes_live_in_cuvk():
    assert cuvk.Bridge is _cuvk.Bridge
    assert cuvk.Bridge.__module__ == "cuvk"


def test_shape_overflow_names_the_dimension_and_the_product_before_it():
    """`Bridge.buffer`'s argument checks, reached without a GPU through `_buffer_nbytes`."""
    assert _cuvk._buffer_nbytes((3, 5), "float64") == 120
    assert _cuvk._buffer_nbytes(7) == 28  # float32 by default
    with pytest.raises(cuvk.InvalidInputError) as e:
        _cuvk._buffer_nbytes((1 << 20, 1 << 50, 3), "float32")
    assert e.value.rule == "Array.Overflow"
    assert e.value.numbers == {"itemsize": 4, "axis": 1, "dim": 1 << 50, "bytes_so_far": 4 << 20}
    with pytest.raises(cuvk.InvalidInputError) as e:
        _cuvk._buffer_nbytes(((1 << 64) - 1,), "int16")
    assert e.value.numbers == {"itemsize": 2, "axis": 0, "dim": (1 << 64) - 1, "bytes_so_far": 2}
    with pytest.raises(cuvk.InvalidInputError) as e:
        _cuvk._buffer_nbytes(16, "complex64")
    assert e.value.rule == "Array.Dtype"


# Streams: one parser for `__dlpack__(stream=)` (convention "dlpack") and `cuda_acquire`,
# `cuda_release`, `draw` (convention "cuvk"), reached without a GPU through `_parse_stream`,
# which returns the handle cuvk orders on (0: the legacy default stream) or None (no ordering).

HANDLE = 0x7F3A_1C00_4000  # what a cudaStream_t looks like


class ProtocolStream:
    """The CUDA stream protocol (cuda.core, newer PyTorch and CuPy): __cuda_stream__()."""

    def __init__(self, handle, version=0):
        self.handle_, self.version = handle, version

    def __cuda_stream__(self):
        return (self.version, self.handle_)


class TorchLikeStream:
    def __init__(self, handle):
        self.cuda_stream = handle


class CupyLikeStream:
    def __init__(self, handle):
        self.ptr = handle


class PyCudaLikeStream:
    def __init__(self, handle):
        self.handle = handle


class Index:
    """A NumPy-style integer: an int through __index__."""

    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v


BOTH = ("dlpack", "cuvk")


@pytest.mark.parametrize("convention", BOTH)
def test_streams_read_the_same_under_both_conventions(convention):
    parse = lambda s: _cuvk._parse_stream(s, convention)  # noqa: E731
    assert parse(None) == 0  # the legacy default stream
    assert parse(-1) is None  # no ordering
    assert parse(1) == 0  # the legacy default stream
    assert parse(2) == 2  # the per-thread default stream
    assert parse(HANDLE) == HANDLE
    assert parse(Index(HANDLE)) == HANDLE
    assert parse((1 << 63) - 1) == (1 << 63) - 1
    for make in (ProtocolStream, TorchLikeStream, CupyLikeStream, PyCudaLikeStream):
        assert parse(make(HANDLE)) == HANDLE, make
        # An object's handle is a cudaStream_t as it is: 0 is the NULL (legacy default)
        # stream, as torch.cuda.default_stream().cuda_stream and CuPy's null stream give.
        assert parse(make(0)) == 0, make
        assert parse(make(2)) == 2, make


def test_stream_zero_is_refused_by_dlpack_and_the_legacy_default_stream_elsewhere():
    with pytest.raises(cuvk.InvalidInputError) as e:
        _cuvk._parse_stream(0, "dlpack")
    assert (e.value.rule, e.value.numbers) == ("Stream.Zero", {"stream": 0})
    assert _cuvk._parse_stream(0, "cuvk") == 0
    assert _cuvk._parse_stream(0) == 0  # "cuvk" by default


def test_the_stream_protocol_wins_over_attributes_and_a_property_form_is_read():
    class Both(ProtocolStream):
        cuda_stream = 5
        ptr = 6

    assert _cuvk._parse_stream(Both(HANDLE), "dlpack") == HANDLE

    class Property:
        __cuda_stream__ = (0, HANDLE)

    assert _cuvk._parse_stream(Property(), "dlpack") == HANDLE


@pytest.mark.parametrize("convention", BOTH)
@pytest.mark.parametrize("value", [1 << 63, 1 << 64, 1 << 200, -2, -(1 << 63), -(1 << 200)])
def test_ints_that_fit_no_pointer_are_refused_with_the_value(convention, value):
    for given in (value, Index(value), ProtocolStream(value), TorchLikeStream(value)):
        with pytest.raises(cuvk.InvalidInputError) as e:
            _cuvk._parse_stream(given, convention)
        assert e.value.rule == "Stream.Handle", given
        assert e.value.numbers["stream"] == value
        assert e.value.numbers["max"] == (1 << 63) - 1
        assert not isinstance(e.value, OverflowError)


@pytest.mark.parametrize("convention", BOTH)
def test_an_object_handle_of_minus_one_is_no_stream(convention):
    """-1 means "no ordering" only as a bare int: a stream object with handle -1 is refused."""
    with pytest.raises(cuvk.InvalidInputError) as e:
        _cuvk._parse_stream(ProtocolStream(-1), convention)
    assert (e.value.rule, e.value.numbers["stream"]) == ("Stream.Handle", -1)


@pytest.mark.parametrize("convention", BOTH)
def test_what_is_no_stream_is_refused_with_its_rule(convention):
    for given in ("1", 1.0, True, object(), [1], TorchLikeStream("x")):
        with pytest.raises(cuvk.InvalidInputError) as e:
            _cuvk._parse_stream(given, convention)
        assert e.value.rule == "Stream.Type", given
    cases = [
        (ProtocolStream(HANDLE, version=1), {"version": 1}),
        (ProtocolStream("x"), {}),
        (ProtocolStream(HANDLE, version="0"), {}),
    ]
    for given, numbers in cases:
        with pytest.raises(cuvk.InvalidInputError) as e:
            _cuvk._parse_stream(given, convention)
        assert (e.value.rule, e.value.numbers) == ("Stream.Protocol", numbers)

    class Triple:
        def __cuda_stream__(self):
            return (0, HANDLE, 1)

    class Text:
        def __cuda_stream__(self):
            return "stream"

    for given, numbers in ((Triple(), {"len": 3}), (Text(), {})):
        with pytest.raises(cuvk.InvalidInputError) as e:
            _cuvk._parse_stream(given, convention)
        assert (e.value.rule, e.value.numbers) == ("Stream.Protocol", numbers)


def test_a_stream_object_that_fails_raises_its_own_error():
    class Broken:
        def __cuda_stream__(self):
            raise RuntimeError("stream destroyed")

    with pytest.raises(RuntimeError, match="stream destroyed"):
        _cuvk._parse_stream(Broken(), "dlpack")


def test_an_unknown_convention_is_refused():
    with pytest.raises(cuvk.InvalidInputError) as e:
        _cuvk._parse_stream(1, "cupy")
    assert e.value.rule == "Stream.Convention"


def test_stub_lists_every_module_function():
    tree = ast.parse(STUB.read_text())
    stubbed = {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}
    functions = {n for n in dir(_cuvk) if callable(getattr(_cuvk, n)) and not isinstance(getattr(_cuvk, n), type)}
    assert functions == stubbed


def test_a_subscriber_without_a_publisher_fails_typed_and_bounded():
    import time

    t = time.perf_counter()
    with pytest.raises(cuvk.CuvkError) as e:
        cuvk.Subscriber("no-such-publisher-%d" % id(t), timeout=0.5)
    assert e.value.kind in ("NotFound", "Timeout", "Io")
    assert time.perf_counter() - t < 10


def test_a_producer_without_a_viewer_fails_typed_and_bounded():
    import time

    t = time.perf_counter()
    with pytest.raises(cuvk.CuvkError) as e:
        cuvk.Producer("no-such-viewer-%d" % id(t), timeout=0.5)
    assert e.value.kind in ("NotFound", "Timeout", "Io")
    assert time.perf_counter() - t < 10
