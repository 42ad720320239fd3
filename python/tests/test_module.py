"""What runs everywhere (CI has no GPU): the module imports, its types and stubs agree, and
refusals arrive as the documented exceptions with their rule and numbers."""

import ast
import pathlib

import pytest

import cuvk
from cuvk import _cuvk

STUB = pathlib.Path(cuvk.__file__).with_name("_cuvk.pyi")


def test_version_and_exports():
    assert cuvk.__version__ == "0.3.0"
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
    for cls in (cuvk.Bridge, cuvk.SharedBuffer, cuvk.ParticleRenderer):
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
