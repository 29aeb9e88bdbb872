// peer_tvm_ffi_add.cpp: the Apache TVM FFI peer of bench_tvm_ffi.py and bench_calls.py.
//
// The kernel a TVM FFI user writes for `out = in + 1` on float32 2-D CPU tensors: one function
// taking two tvm::ffi::TensorView arguments, exported under the name `add_one` with TVM FFI's
// export macro, so tvm_ffi.load_module(path).add_one is a tvm_ffi.Function. It checks what a
// kernel of this kind checks before it touches memory (the TVM FFI examples check as much): both
// tensors on the CPU, float32, 2-D, the same shape, and densely laid out in row-major order (a
// strided view would be read and written in the wrong places, so it is refused, not computed).
// A failed check is an exception of the kind it names on the Python side.
//
//   add_one(in, out)   // out[i, j] = in[i, j] + 1; returns nothing
//
// bench_tvm_ffi.py compiles this file at run time with the C++ compiler of bench_pipelines.py,
// TVM FFI's include directories and its library (tvm_ffi.libinfo), into a shared library in a
// temporary directory.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

#include <cstdint>

namespace {

using tvm::ffi::TensorView;

// float32, one lane: DLPack's (code, bits, lanes).
constexpr DLDataType kFloat32{kDLFloat, 32, 1};

// A 2-D float32 tensor in host memory whose rows are dense and adjacent (strides (cols, 1) in
// elements); `what` names the argument in the error.
void check_dense_f32_2d(const TensorView &t, const char *what) {
    if (t.device().device_type != kDLCPU)
        TVM_FFI_THROW(ValueError) << "add_one(): " << what << " is not in host memory (device type "
                                  << t.device().device_type << "); this kernel runs on the CPU";
    if (!(t.dtype() == kFloat32))
        TVM_FFI_THROW(TypeError) << "add_one(): " << what << " is not float32";
    if (t.ndim() != 2)
        TVM_FFI_THROW(ValueError) << "add_one(): " << what << " has " << t.ndim() << " dimensions, not 2";
    if (!t.IsContiguous())
        TVM_FFI_THROW(ValueError) << "add_one(): " << what
                                  << " is not row-major contiguous; pass a contiguous copy";
}

void add_one(TensorView in, TensorView out) {
    check_dense_f32_2d(in, "in");
    check_dense_f32_2d(out, "out");
    if (in.size(0) != out.size(0) || in.size(1) != out.size(1))
        TVM_FFI_THROW(ValueError) << "add_one(): in has shape (" << in.size(0) << ", " << in.size(1)
                                  << "), out (" << out.size(0) << ", " << out.size(1) << "); they must match";
    // byte_offset is part of DLPack's address of the first element (torch views use it).
    const float *src = reinterpret_cast<const float *>(static_cast<const char *>(in.data_ptr()) + in.byte_offset());
    float *dst = reinterpret_cast<float *>(static_cast<char *>(out.data_ptr()) + out.byte_offset());
    const int64_t n = in.numel();
    for (int64_t i = 0; i < n; ++i)
        dst[i] = src[i] + 1.0f;
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_one, add_one);
