// py_buffer_protocol.cpp: the buffer protocol (PEP 3118) export of a Buffer.
//
// Checklist of a getbuffer, in order (see refusal()): refuse what cannot be described (no PEP 3118 format),
// refuse writable requests on read-only memory, refuse strided data to a consumer that did not
// ask for strides (it would read the wrong elements), then take the lease (a reader makes the
// host copy current; a writer also marks it dirty) and describe the view. Shape and strides
// point into the Buffer itself, which view->obj keeps alive: nothing is allocated per export.
#include "python/py_buffer_protocol.h"

#include <string>
#include <vector>

#include "core/errors.h"
#include "core/live_counts.h"
#include "python/py_buffer.h"
#include "python/py_glue.h"
#include "python/py_module.h"

namespace hb {
namespace {

static_assert(sizeof(Py_ssize_t) == sizeof(int64_t), "shape/strides are shared with Py_buffer");

/// Why the request cannot be served, or nullptr. A refusal is a hot path, not an accident:
/// np.asarray() tries the buffer protocol first and, for a dtype without a PEP 3118 format,
/// drops our BufferError and calls __array__. So no C++ exception here (a throw and a catch
/// cost ~1.6 us, 6x the whole float32 export), and each dtype's message is built once.
const char *refusal(const Buffer &b, int flags) {
    const DType &t = b.dtype();
    if (!t.format) {
        static std::vector<std::string> no_format(dtype_count());
        std::string &message = no_format[index_of(t)];
        if (message.empty())
            message = std::string("__buffer__(): dtype ") + t.name +
                      " has no PEP 3118 format; use numpy.asarray(b) or b.numpy() for the exact "
                      "ml_dtypes dtype, or b.bits() for raw unsigned integers";
        return message.c_str();
    }
    if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE && b.readonly())
        return "__buffer__(): the buffer wraps read-only memory; request a read-only view or use "
               "Buffer.from_host(obj, copy=True) for a writable copy";
    // Contiguity matters only to a consumer that asks for it (np.asarray() asks for strides).
    constexpr int kAsksContiguity = (PyBUF_C_CONTIGUOUS | PyBUF_F_CONTIGUOUS | PyBUF_ANY_CONTIGUOUS) & ~PyBUF_STRIDES;
    if ((flags & PyBUF_STRIDES) == PyBUF_STRIDES && !(flags & kAsksContiguity)) return nullptr;
    bool c_contiguous = b.is_c_contiguous();
    if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES && !c_contiguous)
        return "__buffer__(): the buffer is not C-contiguous and the consumer did not ask for "
               "strides; call b.copy() first";
    if ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS && !c_contiguous)
        return "__buffer__(): a C-contiguous buffer was requested; call b.copy() first";
    if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && !b.is_f_contiguous())
        return "__buffer__(): a Fortran-contiguous buffer was requested; use "
               "b.transposed().copy().transposed()";
    if ((flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS && !c_contiguous &&
        !b.is_f_contiguous())
        return "__buffer__(): a contiguous buffer was requested; call b.copy() first";
    return nullptr;
}

/// Counts an export taken (+1) or released (-1), in the process's live counts and the storage's.
/// Both run with the GIL held: plain reads and writes, no locked adds.
void note_export(const Buffer &b, int delta) {
    std::atomic<int64_t> &live = live_counts().exports;
    live.store(live.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
    b.note_host_export(delta);
}

int buffer_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    view->obj = nullptr;
    return c_call([&] {
        Buffer &b = own_buffer(self);  // the slot is the Buffer type's
        if (const char *why = refusal(b, flags)) {
            PyErr_SetString(PyExc_BufferError, why);
            return -1;
        }
        bool writable = (flags & PyBUF_WRITABLE) == PyBUF_WRITABLE;
        unlocked_if_may_copy(b, [&] { return b.lease_host("__buffer__", writable ? Access::write : Access::read); });

        view->buf = b.data();
        view->obj = self;
        Py_INCREF(self);
        view->len = b.nbytes();
        view->itemsize = b.dtype().itemsize;
        view->readonly = !writable;
        // Without PyBUF_ND the consumer sees one run of bytes (as PyBuffer_FillInfo describes
        // it): CPython assumes shape != NULL whenever ndim > 1.
        view->ndim = (flags & PyBUF_ND) == PyBUF_ND ? b.ndim() : 1;
        view->format = (flags & PyBUF_FORMAT) ? const_cast<char *>(b.dtype().format) : nullptr;
        view->shape = (flags & PyBUF_ND) == PyBUF_ND
                          ? reinterpret_cast<Py_ssize_t *>(const_cast<int64_t *>(b.shape().data()))
                          : nullptr;
        view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES
                            ? reinterpret_cast<Py_ssize_t *>(const_cast<int64_t *>(b.strides().data()))
                            : nullptr;
        view->suboffsets = nullptr;
        view->internal = nullptr;
        note_export(b, 1);
        return 0;
    });
}

void buffer_releasebuffer(PyObject *self, Py_buffer *) {
    note_export(*instance_parts(self).value_ptr<Buffer>(), -1);  // self is the Buffer getbuffer checked
}

}  // namespace

void install_buffer_protocol(py::handle type) {
    // pybind11's py::buffer_protocol() gave the heap type a PyBufferProcs; point it at ours.
    PyBufferProcs *procs = reinterpret_cast<PyTypeObject *>(type.ptr())->tp_as_buffer;
    procs->bf_getbuffer = buffer_getbuffer;
    procs->bf_releasebuffer = buffer_releasebuffer;
}

}  // namespace hb
