"""No code reaches up a layer (tools/check_layers.py; docs/architecture.md, "Layers"): the real
tree passes, and each kind of breach planted in a small stand-in tree is found and named."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("check_layers", ROOT / "tools" / "check_layers.py")
check_layers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_layers)

DOC = """# Architecture

## Layers

### Calls up a layer

| binding file | calls | why |
| --- | --- | --- |
| `csrc/python/py_a.cpp` | `halide_buffer.opencl.device` | the default device |

### The C++ core
"""

CLEAN = {
    "csrc/abi/abi.h": "struct A {};\n",
    "csrc/core/c.h": '#include <cstdint>\n#include "abi/abi.h"\n',
    "csrc/storage/s.h": '#include "core/c.h"\n#include "device/d.h"\n',
    "csrc/device/d.h": '#include "core/c.h"\n',
    "csrc/backends/b.cpp": '#include "device/d.h"\n',
    "csrc/hooks/h.c": "#include <stddef.h>\n",
    "csrc/python/py_a.cpp": '#include <pybind11/pybind11.h>\n#include "storage/s.h"\n'
                            'auto d = py::module_::import("halide_buffer.opencl").attr("device")();\n',
}


def make_tree(root, files, doc=DOC):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "docs").mkdir(exist_ok=True)
    (root / "docs" / "architecture.md").write_text(doc)
    return root


def test_the_project_reaches_up_no_layer():
    assert check_layers.breaches() == []


def test_a_clean_stand_in_passes(tmp_path):
    assert check_layers.breaches(make_tree(tmp_path, CLEAN)) == []


@pytest.mark.parametrize("name, text, words", [
    ("csrc/core/c.h", '#include "storage/s.h"\n', "a layer above core/"),
    ("csrc/device/d.h", '#include "interop/x.h"\n', "a layer above device/"),
    ("csrc/backends/b.cpp", '#include "storage/s.h"\n', "backends/ knows nothing of storage/"),
    ("csrc/storage/s.h", '#include "buffer.h"\n', "name the folder"),
    ("csrc/hooks/h.c", '#include "core/c.h"\n', "hooks/ includes nothing of the project"),
    ("csrc/interop/i.cpp", "#include <pybind11/numpy.h>\n", "only csrc/python/ may use Python"),
    ("csrc/storage/t.cpp", "#include <Python.h>\n", "only csrc/python/ may use Python"),
])
def test_an_include_up_a_layer_is_found(tmp_path, name, text, words):
    found = check_layers.breaches(make_tree(tmp_path, {**CLEAN, name: text}))
    assert len(found) == 1 and found[0].startswith(name) and words in found[0]


def test_a_call_up_to_the_package_the_document_does_not_list_is_found(tmp_path):
    call = 'py::module_::import("halide_buffer.opencl").attr("_choose_loader")();\n'
    files = {**CLEAN, "csrc/python/py_b.cpp": call}
    found = check_layers.breaches(make_tree(tmp_path, files))
    assert found == [f"csrc/python/py_b.cpp: calls halide_buffer.opencl._choose_loader up a layer; list it in "
                     f"docs/architecture.md, '### Calls up a layer', or call it from the package instead"]


def test_a_row_the_code_no_longer_has_is_found(tmp_path):
    files = {**CLEAN, "csrc/python/py_a.cpp": "#include <pybind11/pybind11.h>\n"}
    found = check_layers.breaches(make_tree(tmp_path, files))
    assert len(found) == 1 and "py_a.cpp no longer calls halide_buffer.opencl.device" in found[0]


def test_a_row_outside_the_section_does_not_count(tmp_path):
    doc = DOC.replace("### Calls up a layer", "### Something else")
    found = check_layers.breaches(make_tree(tmp_path, CLEAN, doc))
    assert len(found) == 1 and "calls halide_buffer.opencl.device up a layer" in found[0]


@pytest.mark.parametrize("name, text, words", [
    ("csrc/interop/i.h", "class Caller {\npublic:\n    virtual int device() = 0;\n};\n",
     "csrc/interop/i.h: declares a virtual function"),
    ("csrc/storage/t.h", "#include <functional>\nvoid set_waiter(std::function<void()> w);\n",
     "csrc/storage/t.h: set_waiter() takes a callable"),
    ("csrc/storage/t.h", "using Waiter = void (*)(int);\nvoid set_waiter(Waiter w);\n",
     "csrc/storage/t.h: set_waiter() takes a callable"),
    ("csrc/core/t.h", "void install_hook(int (*hook)(void *));\n", "csrc/core/t.h: install_hook() takes a callable"),
])
def test_a_way_up_from_the_core_besides_its_embedder_is_found(tmp_path, name, text, words):
    found = check_layers.breaches(make_tree(tmp_path, {**CLEAN, name: text}))
    assert len(found) >= 1 and all(f.startswith(words) and "device/embedder.h" in f for f in found)


def test_the_embedder_and_calls_down_are_no_way_up(tmp_path):
    files = {**CLEAN,
             "csrc/device/embedder.h": "struct Embedder { void (*run_unlocked)(int); };\n"
                                       "void install_embedder(void (*run)(int));\n",
             "csrc/device/device.h": "class Device {\npublic:\n    virtual int fill() = 0;\n};\n",
             "csrc/device/copy.h": "int for_each(int (*command)(long));  // a visitor: called now, kept nowhere\n"}
    assert check_layers.breaches(make_tree(tmp_path, files)) == []


def test_a_binding_class_deriving_from_a_core_class_is_found(tmp_path):
    files = {**CLEAN, "csrc/python/py_b.cpp": "class PyCall final : public CallArguments {};\n"
                                              "class Kept {};\nclass KeptMore : public Kept {};\n"}
    found = check_layers.breaches(make_tree(tmp_path, files))
    assert found == ["csrc/python/py_b.cpp: derives from the core's CallArguments; the core reaches up only through "
                     "its embedder (device/embedder.h)"]
