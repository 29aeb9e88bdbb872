"""Halide ahead-of-time compiled pipelines, called with Buffers.

``load(library_path, function_name)`` opens a shared library built from a Halide pipeline
(``Func.compile_to_object`` and a link step) and returns a :class:`Pipeline` built from the
pipeline's own metadata. Call it with Buffers (or anything ``Buffer.from_host`` wraps) and
scalars, by position or by name; an output that is not given is allocated when the pipeline
fixes its size (bounds queries tell), else the call asks for it. A device pipeline computes
in our memory on the device its buffer arguments are on (the default device when none is): its
runtime is given that device's context, inputs are uploaded by us once (counted), and outputs
are ordinary device copies of ours, staying there until a reader needs them on the host.
Halide's runtime errors raise :class:`PipelineError` with Halide's message and code; the
process is never aborted.
"""

from __future__ import annotations

import os

from . import _elf, opencl
from ._core import Pipeline, PipelineError, _aot_load

__all__ = ["Pipeline", "PipelineError", "load"]


def load(library_path: str | os.PathLike[str], function_name: str | None = None) -> Pipeline:
    """The pipeline ``function_name`` of the shared library at ``library_path``.

    Without ``function_name``, the library's only pipeline: the one function whose
    ``<name>_argv`` and ``<name>_metadata`` the library exports (every Halide pipeline does),
    else the file's name up to its first dot with a leading ``lib`` dropped (``libblur.so`` →
    ``blur``), as Halide's own runtime guesses it. A library of several pipelines raises
    ``ValueError`` naming them: pass the one you want.

    A path naming a file opens that file, relative or absolute (``"libbrighter.so"`` in the
    current directory too); a bare name that names no file goes to the system's library
    search (``LD_LIBRARY_PATH``, the ldconfig cache). An OpenCL pipeline needs nothing else:
    its first call opens the OpenCL loader ``halide_buffer.opencl`` uses (``DeviceError``
    saying what to install when there is none); a CUDA pipeline's call opens the CUDA driver.
    Raises ``ValueError`` naming what was tried when the library or function is not found.

    The pipeline keeps the path (``Pipeline.library_path``), absolute when it names a file, and
    is pickled as that path and ``function_name``: unpickling loads it again, so the library
    must exist at the same path wherever it is unpickled.
    """
    path = os.fspath(library_path)
    if function_name is None:
        function_name = _only_pipeline(path)
    pipeline = _aot_load(path, function_name)
    if pipeline.device_api == "opencl":
        # Its first call opens the OpenCL loader our devices use: the candidates are found here.
        opencl._choose_loader()
    return pipeline


def _only_pipeline(path: str) -> str:
    """The name of the one pipeline the library at ``path`` exports (see load())."""
    exported = set(_elf.exported_names(path)) if os.path.isfile(path) else set()
    stems = (n.removesuffix("_argv") for n in exported if n.endswith("_argv"))
    names = sorted(stem for stem in stems if stem + "_metadata" in exported)
    if len(names) == 1:
        return names[0]
    if names:
        raise ValueError(f"aot.load(): {path} holds {len(names)} pipelines ({', '.join(names)}); pass the one "
                         f"you want: aot.load({path!r}, {names[0]!r})")
    stem = os.path.basename(path).split(".", 1)[0]
    return stem[3:] if stem.startswith("lib") and len(stem) > 3 else stem


def _unpickle(library_path: str, function_name: str) -> Pipeline:
    """A pickled Pipeline, loaded again in this process (``Pipeline.__reduce__`` names this)."""
    try:
        return load(library_path, function_name)
    except ValueError as e:
        raise ValueError(
            f"aot.load(): cannot unpickle the Pipeline {function_name!r} of {library_path} ({e}); a pickled "
            f"Pipeline holds only its library's path and function name: the library must exist at that same "
            f"path, with that function, in every process and on every machine that unpickles it") from e
