/* fuzz_pipeline.c: a stand-in for a Halide AOT pipeline library, whose metadata the harness
 * (tests/fuzz/fuzz_aot.py) rewrites before each hb.aot.load(path, "fuzz").
 *
 * Exports what hb.aot.load looks up: fuzz_metadata() (a pointer to fuzz_metadata_value),
 * fuzz_argv() and halide_set_error_handler(). fuzz_argv does what a pipeline does with its
 * arguments, as the metadata declares them: reads each scalar; answers a bounds query (a
 * buffer with host == NULL) with fuzz_query_extent on every dimension; reads every element of
 * each input buffer and writes every element of each output buffer (so a halide_buffer_t that
 * describes memory it does not have is caught); then returns fuzz_argv_result, reporting
 * fuzz_error_message through the error handler when it is not 0.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct { uint8_t code, bits; uint16_t lanes; } halide_type_t;
typedef struct { int32_t min, extent, stride; uint32_t flags; } halide_dimension_t;
typedef struct {
    uint64_t device;
    const void *device_interface;
    uint8_t *host;
    uint64_t flags;
    halide_type_t type;
    int32_t dimensions;
    halide_dimension_t *dim;
    void *padding;
} halide_buffer_t;
typedef struct {
    const char *name;
    int32_t kind;
    int32_t dimensions;
    halide_type_t type;
    const void *scalar_def, *scalar_min, *scalar_max, *scalar_estimate;
    const int64_t *const *buffer_estimates;
} halide_filter_argument_t;
typedef struct {
    int32_t version;
    int32_t num_arguments;
    const halide_filter_argument_t *arguments;
    const char *target;
    const char *name;
} halide_filter_metadata_t;

typedef void (*error_handler_t)(void *, const char *);

halide_filter_metadata_t fuzz_metadata_value;
int32_t fuzz_argv_result;
const char *fuzz_error_message;
int32_t fuzz_query_extent = 1;
int64_t fuzz_walk_limit = 1 << 16;  /* elements walked per buffer, at most */
uint64_t fuzz_checksum;              /* what the reads summed: they cannot be optimised away */
int32_t fuzz_calls;

static error_handler_t handler;

error_handler_t halide_set_error_handler(error_handler_t h) {
    error_handler_t old = handler;
    handler = h;
    return old;
}

const halide_filter_metadata_t *fuzz_metadata(void) { return &fuzz_metadata_value; }

static void walk(halide_buffer_t *b, int d, uint8_t *at, int bytes, int write, int64_t *budget) {
    if (d < 0) {
        if (--*budget < 0) return;
        for (int i = 0; i < bytes; ++i) {
            fuzz_checksum += at[i];
            if (write) at[i] = (uint8_t)(fuzz_checksum);
        }
        return;
    }
    const halide_dimension_t *dim = &b->dim[d];
    for (int32_t i = 0; i < dim->extent && *budget >= 0; ++i)
        walk(b, d - 1, at + (int64_t)i * dim->stride * bytes, bytes, write, budget);
}

int fuzz_argv(void **args) {
    const halide_filter_metadata_t *m = &fuzz_metadata_value;
    fuzz_calls++;
    for (int32_t i = 0; i < m->num_arguments; ++i) {
        const halide_filter_argument_t *a = &m->arguments[i];
        if (a->name && strcmp(a->name, "__user_context") == 0) continue;
        if (a->kind == 0) {  /* a scalar: the address of a halide_scalar_value_t */
            const uint8_t *v = args[i];
            for (int k = 0; k < 8; ++k) fuzz_checksum += v[k];
            continue;
        }
        halide_buffer_t *b = args[i];
        if (!b->host) {  /* a bounds query: the pipeline says what it needs */
            int32_t stride = 1;
            for (int32_t d = 0; d < b->dimensions; ++d) {
                b->dim[d].min = 0;
                b->dim[d].extent = fuzz_query_extent;
                b->dim[d].stride = stride;
                stride *= fuzz_query_extent > 0 ? fuzz_query_extent : 1;
            }
            continue;
        }
        int bytes = (b->type.bits + 7) / 8 * (b->type.lanes ? b->type.lanes : 1);
        int64_t budget = fuzz_walk_limit;
        walk(b, b->dimensions - 1, b->host, bytes, a->kind == 2, &budget);
    }
    if (fuzz_argv_result != 0 && handler) handler(NULL, fuzz_error_message);
    return fuzz_argv_result;
}
