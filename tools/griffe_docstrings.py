"""Griffe extension: the package's docstrings as the API reference shows them.

- The compiled extension's signatures come from its stubs (`halide_buffer/_core.pyi`, checked
  against it by tests/test_stubs.py), which have few docstrings; where a stub has none, the
  compiled object's is taken (the extension is imported, so the package must be built), less the
  first line pybind11 writes with its own signature. A method the stubs declare only through
  `@overload`s is shown with them.
- Sphinx roles in docstrings (:class:`Buffer`) become code spans: the reference is Markdown.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import griffe

PACKAGE = "halide_buffer"
COMPILED = "halide_buffer._core"
ROLE = re.compile(r":(?:class|func|meth|attr|mod|exc|data|obj):`~?([^`]+)`")


def compiled_object(path: str) -> Any:
    """The compiled object at a dotted path inside COMPILED, or None."""
    obj: Any = importlib.import_module(COMPILED)
    for name in path[len(COMPILED) + 1:].split("."):
        obj = getattr(obj, name, None)
    return obj


def own_text(name: str, doc: str | None) -> str:
    """A compiled object's docstring without pybind11's signature lines ('' if nothing is left)."""
    if not doc or (hasattr(object, name) and doc == getattr(object, name).__doc__):
        return ""  # none, or object's own (__init__'s "Initialize self. ...")
    signature = re.compile(rf"^(\d+\. )?{re.escape(name)}\(.*\)( -> .*)?$")
    lines = [line for line in doc.splitlines() if not signature.match(line.strip())]
    return "\n".join(line for line in lines if line.strip() != "Overloaded function.").strip()


def fill_from_compiled(obj: griffe.Object) -> None:
    """Gives an undocumented stub object the compiled object's docstring."""
    if obj.docstring is None and obj.path.startswith(COMPILED + "."):
        text = own_text(obj.name, getattr(compiled_object(obj.path), "__doc__", None))
        if text:
            obj.docstring = griffe.Docstring(text, parent=obj)


def add_overloaded(cls: griffe.Class) -> None:
    """Makes a method the stubs declare only through @overload a member, shown with them, in its
    place among the others (the reference lists a class's members in the stub's order)."""
    for name, overloads in cls.overloads.items():
        if overloads and name not in cls.members:
            *others, method = overloads
            method.overloads = others
            cls.set_member(name, method)
            fill_from_compiled(method)
    in_order = sorted(cls.members.items(), key=lambda item: item[1].lineno or 0)
    cls.members.clear()
    cls.members.update(in_order)


def without_roles(obj: griffe.Object) -> None:
    """Turns the Sphinx roles of a docstring into code spans."""
    if obj.docstring is not None:
        obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)


class ReferenceDocstrings(griffe.Extension):
    """See the module's docstring."""

    def on_class(self, *, cls: griffe.Class, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if cls.path.startswith(COMPILED + "."):
            add_overloaded(cls)

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.path.startswith(PACKAGE + "."):
            fill_from_compiled(obj)
            without_roles(obj)

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.path == PACKAGE:  # on_object is not called for the package itself
            without_roles(pkg)
