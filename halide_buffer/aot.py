"""Halide ahead-of-time compiled pipelines, called with Buffers.

``load(library_path, function_name)`` opens a shared library built from a Halide pipeline
(``Func.compile_to_object`` and a link step) and returns a :class:`Pipeline` built from the
pipeline's own metadata. Call it with Buffers (or anything ``Buffer.from_host`` wraps) and
scalars, by position or by name; outputs that are not given are allocated after a bounds query.
Outputs of a device pipeline stay on the device, in the pipeline runtime's memory, until a
reader needs them on the host. Halide's runtime errors raise :class:`PipelineError` with
Halide's message and code; the process is never aborted.
"""

from __future__ import annotations

import os

from ._core import Pipeline, PipelineError, _aot_load

__all__ = ["Pipeline", "PipelineError", "load"]


def load(library_path: str | os.PathLike[str], function_name: str) -> Pipeline:
    """The pipeline ``function_name`` of the shared library at ``library_path``."""
    return _aot_load(os.fspath(library_path), function_name)
