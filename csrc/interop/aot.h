// aot.h: Halide ahead-of-time compiled pipelines: the shared library, its metadata, its
// runtime's device interface and error handler, and one call through <name>_argv.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "abi/halide_abi.h"
#include "backends/device_opencl.h"

namespace hb {

class AotPipeline {
public:
    /// Opens `library_path` (kept loaded for the process: buffers may hold device memory its
    /// runtime allocated) and finds <name>_argv and <name>_metadata. A path naming a file is
    /// opened as that file (a bare name too: dlopen alone would search only the system's
    /// directories for it); any other bare name goes to the system's search. Throws ValueError
    /// naming what is missing and what was tried.
    static std::shared_ptr<AotPipeline> load(const std::string &library_path, const std::string &name);

    const std::string &name() const { return name_; }
    /// The path the library was opened by, which another process (another working directory)
    /// opens the same file by: a path naming a file made absolute, a bare name that went to the
    /// system's search as given.
    const std::string &library_path() const { return library_path_; }
    const halide_filter_metadata_t &metadata() const { return *metadata_; }
    /// The device interface of the pipeline's runtime (OpenCL or CUDA targets), else null.
    const halide_device_interface_t *device_interface() const { return device_interface_; }
    /// A CUDA target: its runtime takes the primary context and stream of the device the call
    /// names (TargetDevice), through our handlers installed at load.
    bool uses_cuda() const { return uses_cuda_; }
    /// An OpenCL target: its runtime looks the OpenCL API up by name in the process, where
    /// each call first makes our loader visible (ocl::api()).
    bool uses_opencl() const { return uses_opencl_; }
    /// An OpenCL target whose runtime asks us for its context (backends/opencl_context.h): its
    /// calls compute on our devices, in our memory. Found out once, at the first call (on
    /// `device`); false for a library opened before halide_buffer, whose runtime keeps its own.
    bool runs_in_our_context(OpenCLDevice &device) const;

    /// Runs the pipeline (the caller has released the GIL). A failure throws PipelineError with
    /// the messages Halide's runtime reported and its error code; an OpenCL pipeline without
    /// any OpenCL loader throws DeviceError saying what to install, before it runs.
    void call(void **argv) const;

private:
    std::string name_;
    std::string library_path_;
    int (*argv_)(void **) = nullptr;
    const halide_filter_metadata_t *metadata_ = nullptr;
    const halide_device_interface_t *device_interface_ = nullptr;
    bool uses_cuda_ = false;
    bool uses_opencl_ = false;
    mutable std::once_flag probed_;
    mutable bool in_our_context_ = false;
};

}  // namespace hb
