// peer_nanobind_ndarray.cpp: the nanobind peer of bench_dlpack.py.
//
// The usual nanobind way to hand a C++ array to Python through DLPack: a function returning an
// nb::ndarray over memory that C++ keeps. With the array_api framework nanobind returns its own
// Python object, nanobind.nb_ndarray, whose type implements __dlpack__ and __dlpack_device__
// (with no framework, recent nanobind returns a bare DLPack capsule instead, which
// np.from_dlpack does not accept). np.from_dlpack(matrix()) then goes through nanobind's
// __dlpack__ and makes a capsule on every call, as np.from_dlpack(Buffer) does through ours.
//
// bench_dlpack.py compiles this file at run time together with nanobind's nb_combined.cpp
// (the library in one translation unit), with nanobind's include directories and the
// interpreter's extension suffix, into a temporary directory, and imports it as
// `peer_nanobind_ndarray`.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>

namespace nb = nanobind;

namespace {

// Static storage outlives every export, so the ndarray needs no owner.
float storage[16] = {};

using Matrix = nb::ndarray<nb::array_api, float, nb::shape<4, 4>, nb::c_contig>;

}  // namespace

NB_MODULE(peer_nanobind_ndarray, m) {
    m.doc() = "A nanobind ndarray, the peer of halide_buffer's DLPack export.";
    // rv_policy::reference: a view of the static storage. Without an owner, nanobind's default
    // policy would ask for a copy, which the array_api framework refuses.
    m.def("matrix", []() { return Matrix(storage, {4, 4}, nb::handle()); },
          nb::rv_policy::reference,
          "A (4, 4) float32 nanobind.nb_ndarray over static storage.");
    m.def("data_address", []() { return reinterpret_cast<std::uintptr_t>(storage); },
          "The address of the storage every matrix() views.");
}
