// opencl_context.h: the context and queue every Halide OpenCL runtime in the process is given:
// those of the call's device (TargetDevice), else the default device's. The hooks library
// (csrc/hooks/opencl_context_hooks.c, loaded globally at import) forwards Halide's
// halide_acquire_cl_context / halide_release_cl_context here.
#pragma once

#include <memory>
#include <string>

#include "abi/halide_abi.h"
#include "backends/device_opencl.h"

namespace hb {

/// The default OpenCL device, one object for the process (hb.opencl.device() with no
/// arguments): made on first use, from the loader the Python layer chose.
std::shared_ptr<OpenCLDevice> default_opencl_device();

/// Opens the hooks library at `path` with RTLD_GLOBAL and installs our acquire and release in
/// it, so Halide OpenCL runtimes opened from now on ask us for their context. ValueError
/// naming what failed.
void share_opencl_context(const std::string &path);
/// Whether share_opencl_context() succeeded.
bool opencl_context_shared();

/// Whether the Halide runtime behind `interface` (an OpenCL pipeline library's) asks us for
/// its context: one device_sync through it, on `device`, reaches our acquire or not. A library
/// opened before the hooks library (or linked to bind its own hooks) does not.
bool runtime_uses_our_context(const halide_device_interface_t *interface, OpenCLDevice &device);

}  // namespace hb
