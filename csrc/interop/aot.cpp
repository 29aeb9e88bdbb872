// aot.cpp: loading a Halide AOT pipeline and calling it, with Halide's errors as exceptions.
#include "interop/aot.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <mutex>

#include "backends/device_cuda.h"
#include "backends/opencl_api.h"
#include "backends/opencl_context.h"
#include "core/constants.h"
#include "core/dtype.h"
#include "core/errors.h"

namespace hb {
namespace {

/// Messages the runtime of the pipeline running on this thread reported.
thread_local std::string t_messages;

/// Replaces Halide's default handler (which aborts the process): collect, then the call throws.
extern "C" void collect_error(void *, const char *message) {
    if (!t_messages.empty()) t_messages += "; ";
    t_messages += message ? message : "(no message)";
    while (!t_messages.empty() && (t_messages.back() == '\n' || t_messages.back() == ' ')) t_messages.pop_back();
}

using ErrorHandler = void (*)(void *, const char *);

template <typename F>
F symbol(void *library, const std::string &name) {
    return reinterpret_cast<F>(dlsym(library, name.c_str()));
}

/// Makes the pipeline's CUDA runtime use the primary context and stream of the call's device
/// (its own default would create a context of its own: memory no framework could share). A
/// library linked with halide_buffer_cuda.c overrides the hooks these handlers are called by.
void install_cuda_handlers(void *library) {
    using Acquire = int (*)(void *, void **, bool);
    using Release = int (*)(void *);
    using Stream = int (*)(void *, void *, void **);
    auto set_acquire = symbol<Acquire (*)(Acquire)>(library, "halide_set_cuda_acquire_context");
    auto set_release = symbol<Release (*)(Release)>(library, "halide_set_cuda_release_context");
    auto set_stream = symbol<Stream (*)(Stream)>(library, "halide_set_cuda_get_stream");
    if (set_acquire) set_acquire(pipeline_acquire_context);
    if (set_release) set_release(pipeline_release_context);
    if (set_stream) set_stream(pipeline_get_stream);
}

/// A C identifier: what Halide names a pipeline's functions with. Anything else (a NUL, which
/// dlsym would cut the name at, a space, a path) could only find some other symbol.
bool is_c_identifier(const std::string &name) {
    if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
    for (char c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
    }
    return true;
}

/// `text` quoted, with what is not printable ASCII as \xNN (a NUL, say), for a message.
std::string quoted(const std::string &text) {
    std::string out = "'";
    for (char c : text) {
        auto u = static_cast<unsigned char>(c);
        if (u >= 0x20 && u < 0x7f && c != '\\' && c != '\'') {
            out += c;
        } else {
            char escaped[5];
            std::snprintf(escaped, sizeof escaped, "\\x%02x", u);
            out += escaped;
        }
    }
    return out + "'";
}

/// True when `text` is well-formed UTF-8 (what Python can name an argument with).
bool is_utf8(const char *text) {
    auto *p = reinterpret_cast<const unsigned char *>(text);
    while (*p) {
        int more = *p < 0x80 ? 0 : (*p >> 5) == 0x6 ? 1 : (*p >> 4) == 0xe ? 2 : (*p >> 3) == 0x1e ? 3 : -1;
        if (more < 0 || (more == 1 && *p < 0xc2)) return false;
        uint32_t code = more ? *p & (0x3f >> more) : *p;
        ++p;
        for (int k = 0; k < more; ++k, ++p) {
            if ((*p >> 6) != 0x2) return false;  // a continuation byte (a NUL ends the loop here)
            code = code << 6 | (*p & 0x3f);
        }
        // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
        if ((more == 2 && code < 0x800) || (more == 3 && (code < 0x10000 || code > 0x10ffff)) ||
            (code >= 0xd800 && code <= 0xdfff))
            return false;
    }
    return true;
}

/// Checks what a damaged or hand-written library could carry and Halide never generates, so
/// that no later use of the table reads past it: every argument named, of a known kind, a
/// dimension count in range, and a buffer argument of an element type we have.
void check_metadata(const std::string &path, const std::string &name, const halide_filter_metadata_t &m) {
    auto bad = [&](const std::string &what) {
        return ValueError("aot.load(): " + path + ": " + name + "_metadata() " + what +
                          "; rebuild the library with Halide's compile_to_object / compile_to_static_library");
    };
    if (m.num_arguments < 0 || (m.num_arguments > 0 && !m.arguments))
        throw bad("lists " + std::to_string(m.num_arguments) + " arguments" +
                  (m.arguments ? "" : " and no argument table"));
    if (!m.target || !is_utf8(m.target)) throw bad(m.target ? "has a target string that is not UTF-8" : "has no target string");
    for (int i = 0; i < m.num_arguments; ++i) {
        const halide_filter_argument_t &a = m.arguments[i];
        std::string which = "argument " + std::to_string(i);
        if (!a.name || !*a.name) throw bad("has no name for " + which);
        if (!is_utf8(a.name)) throw bad("names " + which + " " + quoted(a.name) + ", which is not UTF-8");
        which = "argument '" + std::string(a.name) + "'";
        if (a.kind < halide_argument_kind_input_scalar || a.kind > halide_argument_kind_output_buffer)
            throw bad("gives " + which + " the unknown kind " + std::to_string(a.kind) +
                      " (0: scalar input, 1: buffer input, 2: buffer output)");
        if (a.kind == halide_argument_kind_input_scalar) {
            if (a.dimensions != 0) throw bad("gives the scalar " + which + " " + std::to_string(a.dimensions) + " dimensions");
            continue;
        }
        if (a.dimensions < 0 || a.dimensions > kMaxDims)
            throw bad("gives " + which + " " + std::to_string(a.dimensions) + " dimensions (0 to " +
                      std::to_string(kMaxDims) + " are possible)");
        if (!dtype_by_halide(a.type))
            throw TypeError("aot.load(): " + path + ": " + which + " of " + name + " is a buffer of Halide type (code " +
                            std::to_string(a.type.code) + ", bits " + std::to_string(a.type.bits) + ", lanes " +
                            std::to_string(a.type.lanes) + "), which no halide_buffer dtype has; "
                            "give the pipeline's buffers a numeric element type");
    }
}

/// True when `path` names something that exists and is no directory.
bool is_file(const std::string &path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
}

/// Where the library `path` names is opened from, kept with the pipeline for other processes
/// (their working directory may differ): a path naming a file made absolute (a bare name too,
/// when it names a file of the current directory: dlopen alone would look for it only in the
/// system's directories); a bare name that names no file as given, for the system's search.
std::string library_location(const std::string &path) {
    bool bare = path.find('/') == std::string::npos;
    if ((!bare && path[0] == '/') || (bare && !is_file(path))) return path;
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) return bare ? "./" + path : path;  // relative, as dlopen takes it
    std::string location = cwd;
    if (location.back() != '/') location += '/';
    size_t from = 0;  // "./lib.so" is "lib.so" of the current directory
    while (from != std::string::npos && path.compare(from, 2, "./") == 0)
        from = path.find_first_not_of('/', from + 2);
    return from == std::string::npos ? location : location + path.substr(from);
}

/// The library at `location` (library_location() of `path`, which messages name), opened.
void *open_library(const std::string &path, const std::string &location) {
    // RTLD_LOCAL: each pipeline library has its own Halide runtime; never closed (see aot.h).
    void *library = dlopen(location.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library) return library;
    const char *error = dlerror();
    std::string why = error ? error : "unknown error";
    if (why.rfind(location + ": ", 0) == 0) why.erase(0, location.size() + 2);  // dlerror repeats it
    std::string what = "aot.load(): cannot load " + path + ": ";
    if (location.find('/') != std::string::npos)
        throw ValueError(what + why + "; pass the path of a shared library built from Halide's "
                         "compile_to_object output");
    char cwd[4096];
    std::string here = getcwd(cwd, sizeof cwd) ? std::string(" (") + cwd + ")" : "";
    throw ValueError(what + "no such file in the current directory" + here + ", and the system's library "
                     "search (LD_LIBRARY_PATH, the ldconfig cache, /lib, /usr/lib) gave: " + why +
                     "; pass the path of the library file, relative to the current directory or absolute");
}

}  // namespace

std::shared_ptr<AotPipeline> AotPipeline::load(const std::string &path, const std::string &name) {
    constexpr const char *entry = "aot.load";
    if (!is_c_identifier(name))
        throw ValueError(std::string(entry) + "(): the function name " + quoted(name) +
                         " is not a C identifier; pass the name the pipeline was compiled with "
                         "(letters, digits and '_')");
    std::string location = library_location(path);
    void *library = open_library(path, location);
    auto p = std::shared_ptr<AotPipeline>(new AotPipeline());
    p->name_ = name;
    p->library_path_ = location;
    p->argv_ = symbol<int (*)(void **)>(library, name + "_argv");
    auto metadata = symbol<const halide_filter_metadata_t *(*)()>(library, name + "_metadata");
    if (!p->argv_ || !metadata)
        throw ValueError(std::string(entry) + "(): " + path + " has no " + name + "_argv / " + name +
                         "_metadata; check the function name, and build with Halide's metadata (the default)");
    p->metadata_ = metadata();
    if (!p->metadata_ || p->metadata_->version != 1)
        throw ValueError(std::string(entry) + "(): " + name + "_metadata() is missing or of an unknown "
                         "version; rebuild the pipeline with Halide 16 or newer");
    check_metadata(path, name, *p->metadata_);
    auto set_handler = symbol<ErrorHandler (*)(ErrorHandler)>(library, "halide_set_error_handler");
    if (!set_handler)
        throw ValueError(std::string(entry) + "(): " + path + " has no halide_set_error_handler; link the "
                         "pipeline with its Halide runtime (compile_to_object embeds one)");
    set_handler(collect_error);
    // The device API of the target the pipeline was compiled for, as its runtime exposes it.
    std::string target = p->metadata_->target ? p->metadata_->target : "";
    for (const char *api : {"opencl", "cuda"}) {
        if (target.find(std::string("-") + api) == std::string::npos) continue;
        auto get = symbol<const halide_device_interface_t *(*)()>(library, std::string("halide_") + api +
                                                                              "_device_interface");
        if (get) p->device_interface_ = get();
    }
    p->uses_opencl_ = target.find("-opencl") != std::string::npos;
    if (p->device_interface_ && target.find("-cuda") != std::string::npos) {
        p->uses_cuda_ = true;
        install_cuda_handlers(library);
    }
    return p;
}

bool AotPipeline::runs_in_our_context(OpenCLDevice &device) const {
    std::call_once(probed_, [&] { in_our_context_ = runtime_uses_our_context(device_interface_, device); });
    return in_our_context_;
}

void AotPipeline::call(void **argv) const {
    // Halide's OpenCL runtime finds the API by name in the process (else it tries to open
    // libOpenCL.so itself): our loader, opened with RTLD_GLOBAL, is the one it must find. A
    // CUDA pipeline's call has opened the driver the same way (its device, in aot_call.cpp).
    if (uses_opencl_) ocl::api(name_.c_str());
    t_messages.clear();
    int rc = argv_(argv);
    if (rc == 0) return;
    std::string messages = t_messages.empty() ? "Halide error code " + std::to_string(rc) : t_messages;
    t_messages.clear();
    throw PipelineError(name_ + "(): " + messages + " (Halide error " + std::to_string(rc) + ")", rc);
}

}  // namespace hb
