"""Pickling an hb.aot Pipeline: it travels as its library's path and function name, and is loaded
again where it is unpickled (another process, with another working directory).

A library stays loaded for the process once opened, and the dynamic loader finds an opened path
again without looking at the file: what a missing library does is seen in a fresh process only.
The child processes are started with 'spawn' (each costs an interpreter start): few of them.
"""

import concurrent.futures
import copy
import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest

import halide_buffer as hb

from pipelines import affine_offset_func, affine_u8_func, build, c_compiler, expected_affine, random_u8

pytestmark = pytest.mark.needs_halide

NAME = "hb_aot_pickle"
LIBRARY = f"lib{NAME}.so"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The folder holding libhb_aot_pickle.so and libhb_aot_pickle_other.so (another function)."""
    directory = tmp_path_factory.mktemp("aot_pickle")
    cc = c_compiler()
    build(directory, cc, *affine_offset_func(), NAME)
    build(directory, cc, *affine_u8_func(False), NAME + "_other")
    return directory


@pytest.fixture
def src():
    return random_u8(np.random.default_rng(14), (6, 40))


def run(pipeline, array, offset):
    """In a child: the pipeline's output for an ndarray and for a Buffer of it, as ndarrays."""
    return np.asarray(pipeline(array, offset)), np.asarray(pipeline(hb.Buffer.from_host(array), offset))


def unpickling_error(data):
    """In a child: what unpickling `data` raises, its cause, and their types."""
    try:
        pickle.loads(data)
    except Exception as e:
        return type(e).__name__, str(e), type(e.__cause__).__name__, str(e.__cause__)
    return None


def spawn():
    return multiprocessing.get_context("spawn")


# ---------------------------------------------------------------------------------------------
# In this process
# ---------------------------------------------------------------------------------------------


def test_a_pipeline_reduces_to_its_library_path_and_name(built):
    p = hb.aot.load(built / LIBRARY, NAME)
    assert p.library_path == str(built / LIBRARY)
    assert p.__reduce__() == (hb.aot._unpickle, (str(built / LIBRARY), NAME))
    with pytest.raises(AttributeError):
        p.library_path = "elsewhere.so"


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_every_protocol_round_trips_to_a_pipeline_that_runs(built, src, protocol):
    p = hb.aot.load(built / LIBRARY, NAME)
    q = pickle.loads(pickle.dumps(p, protocol=protocol))
    assert type(q) is hb.aot.Pipeline
    assert (q.library_path, q.name, q.target, q.arguments) == (p.library_path, p.name, p.target, p.arguments)
    np.testing.assert_array_equal(np.asarray(q(src, -5)), np.asarray(p(src, -5)))
    np.testing.assert_array_equal(np.asarray(q(src, -5)), expected_affine(src, -5))


def test_copies_are_the_pipeline_itself(built):
    p = hb.aot.load(built / LIBRARY, NAME)
    assert copy.copy(p) is p
    assert copy.deepcopy(p) is p
    held = copy.deepcopy({"a": [p], "b": p})
    assert held["a"][0] is p and held["b"] is p


def test_a_relative_path_is_kept_absolute_and_unpickles_from_another_directory(built, src, tmp_path,
                                                                               monkeypatch):
    relative = f"{built.name}/{LIBRARY}"
    pickles = []
    for path, cwd in ((relative, built.parent), (f"./{relative}", built.parent), (LIBRARY, built),
                      (f".//{LIBRARY}", built)):
        monkeypatch.chdir(cwd)
        p = hb.aot.load(path, NAME)
        assert p.library_path == str(built / LIBRARY), path
        pickles.append(pickle.dumps(p))
    monkeypatch.chdir(tmp_path)  # where none of those relative paths names a file
    for data in pickles:
        q = pickle.loads(data)
        assert q.library_path == str(built / LIBRARY)
        np.testing.assert_array_equal(np.asarray(q(src, 3)), expected_affine(src, 3))


SYSTEM_SEARCH = f"""
import pickle
import halide_buffer as hb
p = hb.aot.load("{LIBRARY}", "{NAME}")
print(p.library_path, pickle.loads(pickle.dumps(p)).library_path)
"""


def test_a_bare_name_the_system_search_found_is_kept_as_given(built, tmp_path):
    # The loader reads LD_LIBRARY_PATH when the process starts: a fresh interpreter.
    search = os.pathsep.join(filter(None, (str(built), os.environ.get("LD_LIBRARY_PATH"))))
    run = subprocess.run([sys.executable, "-c", SYSTEM_SEARCH], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "LD_LIBRARY_PATH": search}, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"{LIBRARY} {LIBRARY}\n"


# ---------------------------------------------------------------------------------------------
# In other processes
# ---------------------------------------------------------------------------------------------


def test_a_spawned_pool_worker_runs_a_pipeline_it_is_sent(built, src):
    p = hb.aot.load(built / LIBRARY, NAME)
    with spawn().Pool(1) as pool:
        from_array, from_buffer = pool.apply(run, (p, src, 9))
    np.testing.assert_array_equal(from_array, expected_affine(src, 9))
    np.testing.assert_array_equal(from_buffer, expected_affine(src, 9))


def unpickle_message(path, name, cause):
    return (f"aot.load(): cannot unpickle the Pipeline '{name}' of {path} ({cause}); a pickled Pipeline holds "
            f"only its library's path and function name: the library must exist at that same path, with that "
            f"function, in every process and on every machine that unpickles it")


def test_a_process_pool_runs_it_and_a_missing_library_or_function_is_refused_there(built, src, tmp_path):
    # A copy that is deleted, and a copy whose file is then replaced by a library without the function.
    missing, replaced = tmp_path / "missing" / LIBRARY, tmp_path / "replaced" / LIBRARY
    for path in (missing, replaced):
        path.parent.mkdir()
        shutil.copy(built / LIBRARY, path)
    sent = {path: pickle.dumps(hb.aot.load(path, NAME)) for path in (missing, replaced)}
    missing.unlink()
    shutil.copy(built / f"lib{NAME}_other.so", tmp_path / "other.so")
    os.replace(tmp_path / "other.so", replaced)  # a new file: the one this process mapped stays intact
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn()) as pool:
        ran = pool.submit(run, hb.aot.load(built / LIBRARY, NAME), src, 250)
        gone, no_function = (pool.submit(unpickling_error, sent[path]) for path in (missing, replaced))
        from_array, from_buffer = ran.result()
        gone, no_function = gone.result(), no_function.result()
    np.testing.assert_array_equal(from_array, expected_affine(src, 250))
    np.testing.assert_array_equal(from_buffer, expected_affine(src, 250))
    cause = (f"aot.load(): cannot load {missing}: cannot open shared object file: No such file or directory; "
             f"pass the path of a shared library built from Halide's compile_to_object output")
    assert gone == ("ValueError", unpickle_message(missing, NAME, cause), "ValueError", cause)
    cause = (f"aot.load(): {replaced} has no {NAME}_argv / {NAME}_metadata; check the function name, and build "
             f"with Halide's metadata (the default)")
    assert no_function == ("ValueError", unpickle_message(replaced, NAME, cause), "ValueError", cause)
