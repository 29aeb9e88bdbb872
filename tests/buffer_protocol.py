"""The buffer protocol as a C consumer uses it: `request(obj, flags)` fills a `PyBuffer` (a
Py_buffer) through PyObject_GetBuffer, `release(view)` gives it back; the PyBUF_* flags."""

import ctypes


class PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
                ("strides", ctypes.POINTER(ctypes.c_ssize_t)), ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


PyBUF_SIMPLE, PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES = 0, 1, 4, 8, 0x18
PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS = 0x38, 0x58


def request(obj, flags):
    """Asks obj for a buffer exactly as a C consumer would; returns the filled Py_buffer."""
    view = PyBuffer()
    ctypes.pythonapi.PyObject_GetBuffer(ctypes.py_object(obj), ctypes.byref(view), flags)
    return view


def release(view):
    ctypes.pythonapi.PyBuffer_Release(ctypes.byref(view))
