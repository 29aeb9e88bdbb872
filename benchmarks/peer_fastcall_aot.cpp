// peer_fastcall_aot.cpp: the FASTCALL limit of bench_aot_calls.py.
//
// The least a Python binding of an AOT pipeline `int name(halide_buffer_t *in, int32_t k,
// halide_buffer_t *out)` can do per call: one METH_FASTCALL function (no argument tuple, no
// keyword dict) whose buffers were resolved once, at bind() time, to their halide_buffer_t
// addresses. Each call still does what any binding must: it checks the argument count, checks
// that the buffers are the ones it was bound to (a call on others would silently compute on the
// bound ones), reads the scalar with a range check, calls the pipeline and turns a failure into
// an exception. It releases the GIL around the pipeline, as hb.aot and Halide's generated
// extension do (another thread may run Python while a pipeline computes); compiled with
// -DKEEP_GIL it keeps it (bench_tvm_ffi.py measures both: the limit keeps the GIL, and
// releasing it is part of what a real binding pays).
//
//   bind(fn_address, b_in, in_address, b_out, out_address)
//   call(b_in, k, b_out) -> b_out
//
// bench_aot_calls.py compiles this file at run time, as bench_pipelines.py compiles Halide's
// generated extension (Python's and Halide's include directories, the interpreter's extension
// suffix, a temporary directory), and imports it as `peer_fastcall_aot`. The addresses come from
// the pipeline's library as hb.aot loaded it and from Buffer._get_raw_halide_buffer_t().
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <HalideRuntime.h>

#include <cstdint>

namespace {

using Pipeline = int (*)(halide_buffer_t *, int32_t, halide_buffer_t *);

// What bind() resolved: the entry point, the two buffers (kept alive) and their structs.
struct Bound {
    Pipeline fn = nullptr;
    PyObject *in = nullptr, *out = nullptr;
    halide_buffer_t *in_raw = nullptr, *out_raw = nullptr;
} bound;

PyObject *bind(PyObject *, PyObject *args) {
    unsigned long long fn, in_raw, out_raw;
    PyObject *in, *out;
    if (!PyArg_ParseTuple(args, "KOKOK:bind", &fn, &in, &in_raw, &out, &out_raw))
        return nullptr;
    if (fn == 0 || in_raw == 0 || out_raw == 0) {
        PyErr_SetString(PyExc_ValueError, "bind(): null address");
        return nullptr;
    }
    Py_INCREF(in);
    Py_INCREF(out);
    Py_XSETREF(bound.in, in);
    Py_XSETREF(bound.out, out);
    bound.fn = reinterpret_cast<Pipeline>(static_cast<uintptr_t>(fn));
    bound.in_raw = reinterpret_cast<halide_buffer_t *>(static_cast<uintptr_t>(in_raw));
    bound.out_raw = reinterpret_cast<halide_buffer_t *>(static_cast<uintptr_t>(out_raw));
    Py_RETURN_NONE;
}

PyObject *call(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "call(): takes 3 arguments (in, k, out), %zd given", nargs);
        return nullptr;
    }
    if (bound.fn == nullptr || args[0] != bound.in || args[2] != bound.out) {
        PyErr_SetString(PyExc_TypeError, "call(): in and out must be the buffers given to bind()");
        return nullptr;
    }
    int overflow = 0;
    long k = PyLong_AsLongAndOverflow(args[1], &overflow);
    if (k == -1 && PyErr_Occurred())
        return nullptr;
    if (overflow != 0 || k < INT32_MIN || k > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "call(): k does not fit in int32");
        return nullptr;
    }
    int rc;
#ifdef KEEP_GIL
    rc = bound.fn(bound.in_raw, static_cast<int32_t>(k), bound.out_raw);
#else
    Py_BEGIN_ALLOW_THREADS
    rc = bound.fn(bound.in_raw, static_cast<int32_t>(k), bound.out_raw);
    Py_END_ALLOW_THREADS
#endif
    if (rc != 0) {
        PyErr_Format(PyExc_RuntimeError, "call(): the pipeline returned %d", rc);
        return nullptr;
    }
    Py_INCREF(args[2]);
    return args[2];
}

PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, "bind(fn_address, b_in, in_address, b_out, out_address)"},
    {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call)), METH_FASTCALL,
     "call(b_in, k, b_out) -> b_out"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "peer_fastcall_aot", nullptr, -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_peer_fastcall_aot() { return PyModule_Create(&module); }
