#!/usr/bin/env python3
"""Fails when code reaches up a layer (docs/architecture.md, "Layers").

Three rules, each read from the sources:

- **Includes.** A file of ``csrc/<folder>/`` includes project headers by folder
  (``#include "storage/buffer.h"``), only from its own folder or one below it in ``LAYERS``;
  ``backends/`` includes nothing of ``storage/``; ``hooks/`` includes nothing of the project.
- **Python.** Only the binding layer (``csrc/python/``) includes pybind11 or ``Python.h``.
- **Calls up to the package.** Every ``py::module_::import("halide_buffer...")`` in the binding
  layer is listed in docs/architecture.md's table of calls up a layer, and every row of that
  table is in the code: the document and the code cannot drift apart.
- **One way up from the core.** The core reaches the binding only through its embedder
  (``device/embedder.h``): outside it, no core file declares a ``virtual`` function (a hook
  a layer above would fill by deriving; ``Device`` and ``DeviceAllocator`` are calls down, to
  the backends) or a setter (``set_*``, ``install_*``) taking a callable (``std::function``, a
  function pointer or an alias of one) to call later; no binding class derives from a core class.

Run it from anywhere: ``python tools/check_layers.py`` prints each breach and exits 1, or exits 0.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# csrc's folders, lowest first: a file includes from its own folder and those before it.
LAYERS = ("abi", "core", "device", "storage", "backends", "interop", "python")
# Folders that may not include another one although it lies below them.
FORBIDDEN = {"backends": {"storage"}}
STANDALONE = "hooks"  # a library of its own: includes nothing of the project
# The one way up from the core: the embedder's answers, installed by the binding.
EMBEDDER = ("csrc/device/embedder.h", "csrc/device/embedder.cpp")
# Core files whose virtual functions are calls down: the abstract device the rules call, and the
# allocator a device holds (the backends' driver allocators fill it).
CALLS_DOWN = ("csrc/device/device.h", "csrc/device/device_pool.h")
# A function-pointer alias: `using Name = int (*)(void *);`.
POINTER_ALIAS = re.compile(r"\busing\s+(\w+)\s*=\s*[^;]*\(\s*\*\s*\)")
# A setter: `set_x(` or `install_x(` and its parameters.
SETTER = re.compile(r"\b((?:set|install)_\w+)\s*\(([^;{)]*(?:\([^)]*\)[^;{)]*)*)\)")
DERIVES = re.compile(r"\b(?:class|struct)\s+\w+(?:\s+final)?\s*:\s*(?:public|private|protected)\s+([\w:]+)")

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)
PACKAGE_IMPORT = re.compile(r'module_::import\("(halide_buffer[\w.]*)"\)\s*\.attr\("(\w+)"\)')
# The document's table: | `csrc/python/x.cpp` | `halide_buffer.mod.name` | why |
DOC_ROW = re.compile(r"^\|\s*`(csrc/python/[\w.]+)`\s*\|\s*`(halide_buffer[\w.]+)`\s*\|", re.MULTILINE)
DOC_SECTION = "### Calls up a layer"


def sources(root: Path):
    """Every C and C++ file of csrc/, with its folder."""
    for path in sorted((root / "csrc").rglob("*")):
        if path.suffix in (".h", ".hpp", ".c", ".cpp") and path.is_file():
            yield path, path.relative_to(root / "csrc").parts[0]


def include_breaches(root: Path) -> list[str]:
    """Includes that go up a layer, skip the folder, or bring Python below the binding layer."""
    breaches = []
    for path, folder in sources(root):
        name = path.relative_to(root).as_posix()
        for bracket, target in INCLUDE.findall(path.read_text()):
            python = target.startswith("pybind11/") or target == "Python.h"
            if python and folder != "python":
                breaches.append(f"{name}: includes {target}; only csrc/python/ may use Python")
            if bracket != '"':
                continue
            parts = target.split("/")
            if folder == STANDALONE:
                breaches.append(f"{name}: includes {target}; {STANDALONE}/ includes nothing of the project")
            elif len(parts) < 2 or parts[0] not in LAYERS:
                breaches.append(f'{name}: includes "{target}"; name the folder ("storage/buffer.h")')
            elif folder in LAYERS and LAYERS.index(parts[0]) > LAYERS.index(folder):
                breaches.append(f"{name}: includes {target}, a layer above {folder}/")
            elif parts[0] in FORBIDDEN.get(folder, ()):
                breaches.append(f"{name}: includes {target}; {folder}/ knows nothing of {parts[0]}/")
    return breaches


def upward_calls(root: Path) -> set[tuple[str, str]]:
    """(binding file, package function) for each call from the binding layer up to the package."""
    calls = set()
    for path in sorted((root / "csrc" / "python").glob("*")):
        for module, name in PACKAGE_IMPORT.findall(path.read_text()):
            calls.add((path.relative_to(root).as_posix(), f"{module}.{name}"))
    return calls


def documented_calls(root: Path) -> set[tuple[str, str]]:
    """The rows of docs/architecture.md's table of calls up a layer."""
    text = (root / "docs" / "architecture.md").read_text()
    start = text.find(DOC_SECTION)
    if start < 0:
        return set()
    end = text.find("\n#", start + len(DOC_SECTION))
    return set(DOC_ROW.findall(text[start:end if end >= 0 else len(text)]))


def call_breaches(root: Path) -> list[str]:
    """Calls up to the package the document does not list, and rows the code no longer has."""
    code, doc = upward_calls(root), documented_calls(root)
    breaches = [f"{f}: calls {c} up a layer; list it in docs/architecture.md, '{DOC_SECTION}', or call "
                f"it from the package instead" for f, c in sorted(code - doc)]
    breaches += [f"docs/architecture.md, '{DOC_SECTION}': {f} no longer calls {c}; remove the row"
                 for f, c in sorted(doc - code)]
    return breaches


def binding_classes(root: Path) -> set[str]:
    """The names of the classes and structs the binding layer declares."""
    names = set()
    for path in sorted((root / "csrc" / "python").glob("*")):
        names.update(re.findall(r"\b(?:class|struct)\s+(\w+)", path.read_text()))
    return names


def seam_breaches(root: Path) -> list[str]:
    """Ways up from the core other than its embedder: hooks declared below the binding, and
    binding classes deriving from core classes."""
    core = [(p, p.relative_to(root).as_posix()) for p, folder in sources(root)
            if folder not in ("python", STANDALONE)]
    texts = {name: re.sub(r"//[^\n]*", "", p.read_text()) for p, name in core}  # comments may speak of hooks
    aliases = {a for text in texts.values() for a in POINTER_ALIAS.findall(text)}
    callable_type = re.compile(r"std::function|\(\s*\*" + "".join(rf"|\b{a}\b" for a in sorted(aliases)))
    hint = "; the core reaches up only through its embedder (device/embedder.h)"
    breaches = []
    for name, text in texts.items():
        if name in EMBEDDER:
            continue
        if re.search(r"\bvirtual\b", text) and name not in CALLS_DOWN:
            breaches.append(f"{name}: declares a virtual function, a hook for a layer above to fill{hint}")
        for setter, params in SETTER.findall(text):
            if callable_type.search(params):
                breaches.append(f"{name}: {setter}() takes a callable for a layer above to install{hint}")
    ours = binding_classes(root)
    for path in sorted((root / "csrc" / "python").glob("*")):
        for base in DERIVES.findall(path.read_text()):
            if base.split("::")[-1] not in ours and not base.startswith(("py::", "pybind11::", "std::")):
                breaches.append(f"{path.relative_to(root).as_posix()}: derives from the core's {base}{hint}")
    return breaches


def breaches(root: Path = ROOT) -> list[str]:
    return include_breaches(root) + call_breaches(root) + seam_breaches(root)


def main() -> int:
    found = breaches()
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
