"""halide_buffer/_core.pyi describes exactly what the extension module defines."""

import ast
import pathlib

import halide_buffer
from halide_buffer import _core

STUB = pathlib.Path(halide_buffer.__file__).with_name("_core.pyi")
# Attributes every pybind11 class or module has that no stub needs to repeat.
IMPLICIT = {"__init__", "__doc__", "__module__", "__dict__", "__weakref__", "__new__",
            "__repr__", "__str__", "__getstate__", "__setstate__", "__annotations__",
            "_pybind11_conduit_v1_"}


def stub_names():
    tree = ast.parse(STUB.read_text())
    top, classes = set(), {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = {n.name for n in ast.walk(node)
                                  if isinstance(n, ast.FunctionDef)} - IMPLICIT
        elif isinstance(node, ast.FunctionDef):
            top.add(node.name)
    return top, classes


def runtime_names(obj):
    return {n for n in vars(obj) if not (n.startswith("__") and n.endswith("__")) or
            n in {"__len__", "__getitem__", "__setitem__", "__array__", "__eq__", "__hash__",
                    "__sub__", "__dlpack__", "__dlpack_device__", "__call__",
                    "__cuda_array_interface__", "__reduce__", "__reduce_ex__", "__copy__",
                    "__deepcopy__"}} - IMPLICIT


def test_module_functions_match():
    top, classes = stub_names()
    runtime = {n for n in vars(_core) if not n.startswith("__")} - set(classes)
    assert top == runtime


def test_class_members_match():
    _, classes = stub_names()
    assert set(classes) == {"DType", "Buffer", "Device", "OpenCLDevice", "CudaDevice", "DeviceError",
                              "Transfers", "Pipeline", "PipelineError", "ReadOnlyError"}
    for name, members in classes.items():
        if name in ("DeviceError", "PipelineError"):  # plain exception classes; attributes set when raised
            assert issubclass(getattr(_core, name), RuntimeError)
            continue
        if name == "ReadOnlyError":
            assert _core.ReadOnlyError.__bases__ == (BufferError, ValueError)
            continue
        runtime = runtime_names(getattr(_core, name))
        # __buffer__ is the buffer-protocol slot: Python shows it as a method from 3.12 on.
        assert members - {"__buffer__"} == runtime - {"__buffer__"}, name


def test_the_exchange_api_attribute_is_declared():
    tree = ast.parse(STUB.read_text())
    buffer = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Buffer")
    declared = {n.target.id for n in buffer.body if isinstance(n, ast.AnnAssign)}
    assert declared == {"__dlpack_c_exchange_api__"}
    assert hasattr(_core.Buffer, "__dlpack_c_exchange_api__")
