/* exporter.c: fuzz_exporter, a CPython extension whose Exporter objects export any Py_buffer
 * fields the harness sets (tests/fuzz/fuzz_from_host.py builds it at start):
 *
 *   Exporter(buf, len, readonly, itemsize, format, ndim, shape, strides, suboffsets, fail)
 *
 * buf is an address (int); format is bytes or None (NULL); shape, strides and suboffsets are
 * tuples of ints or None (NULL), copied into arrays of exactly their length; fail makes
 * getbuffer raise BufferError. The arrays live as long as the object, and every view holds a
 * reference to it. .gets and .releases count getbuffer and releasebuffer calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    void *buf;
    Py_ssize_t len, itemsize;
    int readonly, ndim, fail;
    char *format;
    Py_ssize_t *shape, *strides, *suboffsets;
    long gets, releases;
} Exporter;

static int to_array(PyObject *tuple, Py_ssize_t **out) {
    *out = NULL;
    if (tuple == Py_None) return 0;
    if (!PyTuple_Check(tuple)) {
        PyErr_SetString(PyExc_TypeError, "shape, strides and suboffsets are tuples or None");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    *out = malloc(sizeof(Py_ssize_t) * (size_t)(n > 0 ? n : 1));
    if (!*out) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; ++i) {
        (*out)[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(tuple, i));
        if ((*out)[i] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

static int exporter_init(Exporter *self, PyObject *args, PyObject *kwargs) {
    unsigned long long buf;
    PyObject *format, *shape, *strides, *suboffsets;
    if (!PyArg_ParseTuple(args, "KnpnOiOOOp", &buf, &self->len, &self->readonly, &self->itemsize, &format,
                          &self->ndim, &shape, &strides, &suboffsets, &self->fail))
        return -1;
    self->buf = (void *)(uintptr_t)buf;
    if (format != Py_None) {
        char *text;
        Py_ssize_t n;
        if (PyBytes_AsStringAndSize(format, &text, &n) < 0) return -1;
        self->format = malloc((size_t)n + 1);
        if (!self->format) return PyErr_NoMemory(), -1;
        memcpy(self->format, text, (size_t)n + 1);  /* bytes objects end with a NUL */
    }
    if (to_array(shape, &self->shape) < 0 || to_array(strides, &self->strides) < 0 ||
        to_array(suboffsets, &self->suboffsets) < 0)
        return -1;
    return 0;
}

static void exporter_dealloc(Exporter *self) {
    free(self->format);
    free(self->shape);
    free(self->strides);
    free(self->suboffsets);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int exporter_getbuffer(Exporter *self, Py_buffer *view, int flags) {
    if (self->fail) {
        PyErr_SetString(PyExc_BufferError, "this exporter refuses");
        return -1;
    }
    if ((flags & PyBUF_WRITABLE) && self->readonly) {
        PyErr_SetString(PyExc_BufferError, "read-only exporter");
        return -1;
    }
    view->obj = (PyObject *)self;
    Py_INCREF(self);
    view->buf = self->buf;
    view->len = self->len;
    view->readonly = self->readonly;
    view->itemsize = self->itemsize;
    view->format = self->format;
    view->ndim = self->ndim;
    view->shape = self->shape;
    view->strides = self->strides;
    view->suboffsets = self->suboffsets;
    view->internal = NULL;
    self->gets++;
    return 0;
}

static void exporter_releasebuffer(Exporter *self, Py_buffer *view) {
    (void)view;
    self->releases++;
}

static PyObject *get_gets(Exporter *self, void *closure) { return PyLong_FromLong(self->gets); }
static PyObject *get_releases(Exporter *self, void *closure) { return PyLong_FromLong(self->releases); }

static PyGetSetDef exporter_getset[] = {
    {"gets", (getter)get_gets, NULL, "getbuffer calls", NULL},
    {"releases", (getter)get_releases, NULL, "releasebuffer calls", NULL},
    {NULL},
};

static PyBufferProcs exporter_as_buffer = {
    (getbufferproc)exporter_getbuffer,
    (releasebufferproc)exporter_releasebuffer,
};

static PyTypeObject ExporterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fuzz_exporter.Exporter",
    .tp_basicsize = sizeof(Exporter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)exporter_init,
    .tp_dealloc = (destructor)exporter_dealloc,
    .tp_as_buffer = &exporter_as_buffer,
    .tp_getset = exporter_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "fuzz_exporter", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_fuzz_exporter(void) {
    if (PyType_Ready(&ExporterType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&ExporterType);
    if (PyModule_AddObject(m, "Exporter", (PyObject *)&ExporterType) < 0) {
        Py_DECREF(&ExporterType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
