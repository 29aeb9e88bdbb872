/*
 * halide_buffer_cuda.c: makes a Halide AOT pipeline built for a "-cuda" target run in the CUDA
 * device's PRIMARY context, on the legacy default stream.
 *
 * WHAT
 *   Halide's CUDA runtime (the one compile_to_object embeds in every object file) creates a
 *   context of its own with cuCtxCreate the first time it needs one. This file defines strong
 *   versions of three of that runtime's weak hooks:
 *
 *     int halide_cuda_acquire_context(void *user_context, CUcontext *ctx, bool create);
 *     int halide_cuda_release_context(void *user_context);
 *     int halide_cuda_get_stream(void *user_context, CUcontext ctx, CUstream *stream);
 *
 *   so that the runtime uses the device's primary context (cuDevicePrimaryCtxRetain: the context
 *   the CUDA runtime API, CuPy, PyTorch and JAX all use) and stream 0, the legacy default stream.
 *   It does not need the CUDA toolkit: the driver (libcuda.so.1) is opened with dlopen() at the
 *   first call, and nothing of CUDA is needed to compile or link.
 *
 * WHY
 *   Device memory belongs to a context. Memory Halide allocates in a private context is unusable
 *   by code running in another one, so a pipeline's device output could not be handed to CuPy,
 *   PyTorch or JAX (DLPack, __cuda_array_interface__) without a copy, and their device arrays
 *   could not be wrapped as pipeline inputs. In the primary context it is the same memory for
 *   everyone: zero-copy in both directions. Stream 0 (the legacy default stream) synchronizes
 *   with all blocking streams of the context, so work the frameworks queued on their default
 *   streams is ordered with the pipeline's (JAX/XLA uses non-blocking streams of its own:
 *   synchronize there, e.g. block_until_ready(), before handing its arrays over).
 *
 * BUILD
 *   Compile this file into the same shared library as the pipeline's object file:
 *
 *     # Python: hl.Func.compile_to_object("brighter.o", args, "brighter",
 *     #             hl.Target("x86-64-linux-avx-avx2-f16c-fma-sse41-cuda"))
 *     HB_INCLUDE=$(python -c "import halide_buffer as hb; print(hb.get_include())")
 *     cc -O2 -fPIC -c "$HB_INCLUDE/halide_buffer_cuda.c" -o halide_buffer_cuda.o
 *     cc -shared -o libbrighter.so brighter.o halide_buffer_cuda.o -lpthread -ldl -lm
 *
 *   or in one step: cc -shared -fPIC -o libbrighter.so brighter.o \
 *                      "$HB_INCLUDE/halide_buffer_cuda.c" -lpthread -ldl -lm
 *
 *   A Halide-generated Python extension (OutputFileType.python_extension) the same way: add this
 *   file to the compile/link line of the extension (it compiles as C99 or as C++). Link it once
 *   per shared library; every pipeline in that library shares the runtime and so the hooks.
 *   No -I is needed: the few Halide and CUDA declarations used are written out below. Compiling
 *   with -DHALIDE_BUFFER_CUDA_CHECK_HEADERS -I <halide>/include checks them against Halide's
 *   HalideRuntime.h (the tests do this).
 *
 * SEMANTICS (checked against Halide 21's runtime; see tests/test_cuda_glue.py)
 *   - halide_cuda_acquire_context RETURNS the primary context and does NOT make it current.
 *     Halide's runtime wraps every operation as acquire -> cuCtxPushCurrent(ctx) -> work ->
 *     cuCtxPopCurrent -> release (its Context helper in src/runtime/cuda.cpp; the runtime aborts
 *     if acquire succeeds with a NULL context). HalidePyTorchCudaHelpers.h, Halide's own override
 *     of these hooks, likewise only returns the context. Pushing here too would be redundant,
 *     and a push not undone on some path would leave the thread's context stack altered.
 *   - The primary context of each device ordinal is retained once, at its first acquire, and
 *     kept for the life of the process (never released, never destroyed: Halide's
 *     halide_device_release only destroys a context it created itself, which it no longer does).
 *     halide_cuda_release_context therefore does nothing.
 *   - acquire with create == false (Halide's halide_device_release asks this way) returns the
 *     context if this process retained it already, else NULL with success: nothing to release.
 *   - The device ordinal is halide_get_gpu_device(user_context) (Halide's HL_GPU_DEVICE
 *     environment variable or halide_set_gpu_device()); -1, its "not set" value, means device
 *     0, the frameworks' default device (Halide's own default would take the LAST device).
 *   - halide_cuda_get_stream gives stream 0 (NULL), the legacy default stream.
 *   - No driver: acquire calls halide_error() with a message starting "halide_buffer_cuda.c: "
 *     and returns halide_error_code_symbol_not_found (-21, what Halide itself returns when it
 *     finds no libcuda); a failing driver call returns halide_error_code_gpu_device_error (-29).
 *     The pipeline returns that code (hb.aot raises hb.PipelineError); nothing aborts.
 *   - Defining these hooks bypasses Halide's halide_set_cuda_acquire_context /
 *     _release_context / _get_stream setters in this library.
 *   - Side effect worth knowing: the driver is opened RTLD_GLOBAL, so Halide's own lookup of
 *     the driver's functions (which searches the global namespace before dlopen("libcuda.so"))
 *     succeeds even where only libcuda.so.1 is installed (no unversioned development symlink).
 *   - Thread-safe: the driver is loaded under pthread_once, the per-ordinal table under a mutex.
 */

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#ifdef HALIDE_BUFFER_CUDA_CHECK_HEADERS
#include "HalideRuntime.h"
#endif

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#define HB_CUDA_BOOL bool
#else
#define HB_CUDA_BOOL _Bool
#endif

#if defined(__GNUC__) || defined(__clang__)
/* Exported even under -fvisibility=hidden: the hooks replace the runtime's weak ones either way;
   exporting them keeps them visible to tools (nm -D, ctypes). */
#define HB_CUDA_EXPORT __attribute__((visibility("default")))
#else
#define HB_CUDA_EXPORT
#endif

/* ---- The CUDA driver API, as much as is used (cuda.h) ---------------------------------------- */
typedef int CUresult; /* enum cudaError_enum; 0 is CUDA_SUCCESS */
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;

/* ---- The Halide runtime, as much as is used (HalideRuntime.h) --------------------------------- */
extern void halide_error(void *user_context, const char *msg);
extern int halide_get_gpu_device(void *user_context);

enum {
    hb_cuda_error_symbol_not_found = -21,  /* halide_error_code_symbol_not_found */
    hb_cuda_error_gpu_device_error = -29   /* halide_error_code_gpu_device_error */
};

#ifdef HALIDE_BUFFER_CUDA_CHECK_HEADERS
/* C99 has no static_assert: a negative array size fails the build. */
typedef char hb_cuda_check_symbol_not_found
    [(int)hb_cuda_error_symbol_not_found == (int)halide_error_code_symbol_not_found ? 1 : -1];
typedef char hb_cuda_check_gpu_device_error
    [(int)hb_cuda_error_gpu_device_error == (int)halide_error_code_gpu_device_error ? 1 : -1];
#endif

/* The hooks (defined below), declared first for -Wmissing-prototypes. */
HB_CUDA_EXPORT int halide_cuda_acquire_context(void *user_context, CUcontext *ctx, HB_CUDA_BOOL create);
HB_CUDA_EXPORT int halide_cuda_release_context(void *user_context);
HB_CUDA_EXPORT int halide_cuda_get_stream(void *user_context, CUcontext ctx, CUstream *stream);

/* ---- The driver, loaded once ------------------------------------------------------------------ */
#define HB_CUDA_MAX_DEVICES 64

static pthread_once_t hb_cuda_once = PTHREAD_ONCE_INIT;
static CUresult (*hb_cuInit)(unsigned int flags);
static CUresult (*hb_cuDeviceGet)(CUdevice *device, int ordinal);
static CUresult (*hb_cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice device);
static CUresult (*hb_cuGetErrorName)(CUresult error, const char **name); /* optional */
static int hb_cuda_loaded;           /* the three functions above were found */
static CUresult hb_cuda_init_result; /* cuInit(0), called once */
static char hb_cuda_load_error[512]; /* why the driver could not be used; set once */

static pthread_mutex_t hb_cuda_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext hb_cuda_primary[HB_CUDA_MAX_DEVICES]; /* retained primary contexts, by ordinal */

/* dlsym's object pointer to a function pointer, without the cast ISO C frowns upon. */
static int hb_cuda_symbol(void *library, const char *name, void *function_pointer, size_t size) {
    void *address = dlsym(library, name);
    if (!address) return 0;
    memcpy(function_pointer, &address, size);
    return 1;
}

static void hb_cuda_load(void) {
    static const char *const names[] = {"libcuda.so.1", "libcuda.so"};
    char first_error[256] = "";
    void *library = NULL;
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0] && !library; i++) {
        /* RTLD_GLOBAL: see SEMANTICS above. Never closed: the contexts outlive every call. */
        library = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
        if (!library && i == 0) {
            const char *why = dlerror();
            snprintf(first_error, sizeof first_error, "%s", why ? why : "unknown error");
        }
    }
    if (!library) {
        snprintf(hb_cuda_load_error, sizeof hb_cuda_load_error,
                 "halide_buffer_cuda.c: no CUDA driver: cannot load libcuda.so.1 (%s); a CUDA pipeline "
                 "needs an NVIDIA driver",
                 first_error);
        return;
    }
    if (!hb_cuda_symbol(library, "cuInit", &hb_cuInit, sizeof hb_cuInit) ||
        !hb_cuda_symbol(library, "cuDeviceGet", &hb_cuDeviceGet, sizeof hb_cuDeviceGet) ||
        !hb_cuda_symbol(library, "cuDevicePrimaryCtxRetain", &hb_cuDevicePrimaryCtxRetain,
                        sizeof hb_cuDevicePrimaryCtxRetain)) {
        snprintf(hb_cuda_load_error, sizeof hb_cuda_load_error,
                 "halide_buffer_cuda.c: the CUDA driver library lacks cuInit, cuDeviceGet or "
                 "cuDevicePrimaryCtxRetain");
        return;
    }
    hb_cuda_symbol(library, "cuGetErrorName", &hb_cuGetErrorName, sizeof hb_cuGetErrorName);
    hb_cuda_loaded = 1;
    hb_cuda_init_result = hb_cuInit(0);
}

static const char *hb_cuda_error_name(CUresult result) {
    const char *name = NULL;
    if (hb_cuGetErrorName && hb_cuGetErrorName(result, &name) == 0 && name) return name;
    return "unknown CUresult";
}

/* Writes "<call> for device <ordinal> failed: <name> (<code>)" into message. */
static int hb_cuda_driver_error(char *message, size_t size, const char *call, int ordinal, CUresult result) {
    snprintf(message, size, "halide_buffer_cuda.c: %s for device %d failed: %s (%d)", call, ordinal,
             hb_cuda_error_name(result), (int)result);
    return hb_cuda_error_gpu_device_error;
}

/* ---- The hooks ---------------------------------------------------------------------------------- */

HB_CUDA_EXPORT int halide_cuda_acquire_context(void *user_context, CUcontext *ctx, HB_CUDA_BOOL create) {
    char message[sizeof hb_cuda_load_error];
    int ordinal = halide_get_gpu_device(user_context);
    int rc = 0;
    CUdevice device;
    CUresult result;
    *ctx = NULL;
    if (ordinal == -1) ordinal = 0; /* "not set": the default device of the frameworks */
    if (ordinal < 0 || ordinal >= HB_CUDA_MAX_DEVICES) {
        snprintf(message, sizeof message, "halide_buffer_cuda.c: GPU device ordinal %d is out of range [0, %d)",
                 ordinal, HB_CUDA_MAX_DEVICES);
        halide_error(user_context, message);
        return hb_cuda_error_gpu_device_error;
    }
    pthread_mutex_lock(&hb_cuda_lock);
    if (!hb_cuda_primary[ordinal] && create) {
        pthread_once(&hb_cuda_once, hb_cuda_load);
        if (!hb_cuda_loaded) {
            snprintf(message, sizeof message, "%s", hb_cuda_load_error);
            rc = hb_cuda_error_symbol_not_found;
        } else if (hb_cuda_init_result != 0) {
            rc = hb_cuda_driver_error(message, sizeof message, "cuInit", ordinal, hb_cuda_init_result);
        } else if ((result = hb_cuDeviceGet(&device, ordinal)) != 0) {
            rc = hb_cuda_driver_error(message, sizeof message, "cuDeviceGet", ordinal, result);
        } else if ((result = hb_cuDevicePrimaryCtxRetain(&hb_cuda_primary[ordinal], device)) != 0) {
            hb_cuda_primary[ordinal] = NULL;
            rc = hb_cuda_driver_error(message, sizeof message, "cuDevicePrimaryCtxRetain", ordinal, result);
        } else if (!hb_cuda_primary[ordinal]) {
            snprintf(message, sizeof message, "halide_buffer_cuda.c: cuDevicePrimaryCtxRetain gave no context");
            rc = hb_cuda_error_gpu_device_error;
        }
    }
    /* create == false and never retained: NULL with success, there is nothing to release. */
    *ctx = hb_cuda_primary[ordinal];
    pthread_mutex_unlock(&hb_cuda_lock);
    if (rc != 0) halide_error(user_context, message); /* outside the lock: handlers may call back */
    return rc;
}

HB_CUDA_EXPORT int halide_cuda_release_context(void *user_context) {
    (void)user_context; /* the primary context stays retained for the process */
    return 0;
}

HB_CUDA_EXPORT int halide_cuda_get_stream(void *user_context, CUcontext ctx, CUstream *stream) {
    (void)user_context;
    (void)ctx;
    *stream = NULL; /* stream 0: the legacy default stream */
    return 0;
}

#ifdef __cplusplus
} /* extern "C" */
#endif
