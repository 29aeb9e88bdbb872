// peer_def_buffer.cpp: the pybind11 peer of bench_export.py.
//
// The textbook pybind11 way to expose a C++ array to NumPy: a class holding its elements,
// declared with py::buffer_protocol() and a .def_buffer(...) lambda returning a py::buffer_info.
// bench_export.py compiles this file at run time (g++, pybind11's include flags, the
// interpreter's extension suffix) into a temporary directory and imports it as
// `peer_def_buffer`; np.asarray(Matrix(4, 4)) is then timed beside np.asarray(Buffer(...)).
#include <pybind11/pybind11.h>

#include <vector>

namespace py = pybind11;

namespace {

class Matrix {
public:
    Matrix(py::ssize_t rows, py::ssize_t cols)
        : rows_(rows), cols_(cols), data_(static_cast<size_t>(rows * cols), 0.0f) {}

    float *data() { return data_.data(); }
    py::ssize_t rows() const { return rows_; }
    py::ssize_t cols() const { return cols_; }

private:
    py::ssize_t rows_, cols_;
    std::vector<float> data_;
};

}  // namespace

PYBIND11_MODULE(peer_def_buffer, m) {
    m.doc() = "A pybind11 def_buffer class, the peer of halide_buffer's buffer protocol export.";
    py::class_<Matrix>(m, "Matrix", py::buffer_protocol())
        .def(py::init<py::ssize_t, py::ssize_t>(), py::arg("rows"), py::arg("cols"))
        .def_buffer([](Matrix &mat) -> py::buffer_info {
            return py::buffer_info(mat.data(), sizeof(float), py::format_descriptor<float>::format(),
                                   2, {mat.rows(), mat.cols()},
                                   {static_cast<py::ssize_t>(sizeof(float)) * mat.cols(),
                                    static_cast<py::ssize_t>(sizeof(float))});
        });
}
