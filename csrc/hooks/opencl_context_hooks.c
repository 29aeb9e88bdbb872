/*
 * opencl_context_hooks.c: the library halide_buffer loads with RTLD_GLOBAL when it is imported
 * (halide_buffer._opencl_hooks), so that every Halide OpenCL runtime opened after it uses the
 * context and queue of the call's device instead of a context of its own.
 *
 * Halide's OpenCL runtime (the one compile_to_object embeds in each pipeline library) reaches
 * its context through two weak functions, called through the PLT:
 *
 *     int halide_acquire_cl_context(void *user_context, cl_context *ctx, cl_command_queue *q, bool create);
 *     int halide_release_cl_context(void *user_context);
 *
 * A definition earlier in the global symbol scope is the one a library opened later binds to.
 * These two forward to the functions halide_buffer's core installs (backends/opencl_context.cpp);
 * they are the only code here, so this library never changes with the core. A library opened
 * before this one keeps its runtime's own definitions (hb.aot finds out at its first call).
 */
#include <stdbool.h>
#include <stddef.h>

#define HB_EXPORT __attribute__((visibility("default")))

typedef int (*hb_acquire_cl)(void *user_context, void **context, void **queue, bool create);
typedef int (*hb_release_cl)(void *user_context);

static hb_acquire_cl acquire_hook;
static hb_release_cl release_hook;

/* Installed once by the core, before any pipeline library is opened. */
HB_EXPORT void halide_buffer_set_cl_context_hooks(hb_acquire_cl acquire, hb_release_cl release) {
    acquire_hook = acquire;
    release_hook = release;
}

/* Halide's halide_error_code_gpu_device_error (-29): no hooks installed, no context to give. */
HB_EXPORT int halide_acquire_cl_context(void *user_context, void **context, void **queue, bool create) {
    if (!acquire_hook) return -29;
    return acquire_hook(user_context, context, queue, create);
}

HB_EXPORT int halide_release_cl_context(void *user_context) {
    return release_hook ? release_hook(user_context) : 0;
}
