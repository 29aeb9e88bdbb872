// py_dtype.h: dtypes as Python spells them (py_dtype.cpp): the DType type, every spelling a user
// may pass, NumPy dtype objects.
#pragma once

#include "core/dtype.h"
#include "python/py_glue.h"

namespace hb {

void bind_dtype(py::module_ &m);
/// Any dtype spelling a user may pass (name, NumPy or ml_dtypes dtype, torch/jax dtype).
const DType &to_dtype(py::handle obj, const char *entry);
/// A NumPy dtype of big-endian elements ('>', not NumPy's isnative): this library reads
/// little-endian ones only.
inline bool big_endian(PyObject *descr) { return py::detail::array_descriptor_proxy(descr)->byteorder == '>'; }
/// The NumPy dtype object of a row (ml_dtypes for exotic rows), created once.
py::dtype numpy_dtype(const DType &t);

}  // namespace hb
