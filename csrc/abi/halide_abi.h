// halide_abi.h: our declarations of Halide's C ABI for buffers and device interfaces.
//
// These structs are passed by pointer to and from Halide AOT pipelines and Halide's runtime,
// so their layout must be identical to the declarations in Halide's HalideRuntime.h.
// tests/test_abi_layout.py compiles a program against the real header and compares every
// sizeof/offsetof with the values this file produces (see abi_layout() in py_module.cpp).
#pragma once

#include <cstdint>

extern "C" {

// ---------------------------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------------------------

/// What kind of number an element is. Stored in one byte of halide_type_t.
enum halide_type_code_t : uint8_t {
    halide_type_int = 0,     ///< signed integer
    halide_type_uint = 1,    ///< unsigned integer; bool is uint with bits = 1
    halide_type_float = 2,   ///< IEEE floating point
    halide_type_handle = 3,  ///< opaque pointer
    halide_type_bfloat = 4,  ///< brain floating point (bits = 16)
};

/// One element's type. Generated pipelines compare all four bytes at once, so lanes must be 1
/// (Halide 21 rejects 0; its successor renames the field and expects 0 there).
struct halide_type_t {
    uint8_t code;    ///< a halide_type_code_t
    uint8_t bits;    ///< bits of precision of one lane; the element occupies (bits + 7) / 8 bytes
    uint16_t lanes;  ///< vector width; 1 for every buffer element
};

// ---------------------------------------------------------------------------------------------
// The ABI's version
// ---------------------------------------------------------------------------------------------

/// The major version of Halide whose ABI these declarations are (HalideRuntime.h's
/// HALIDE_VERSION_MAJOR): the one detail in which versions lay a buffer out differently is the
/// type's last field (lanes = 1 here; 0, renamed, from version 22).
#define HB_HALIDE_ABI_MAJOR 21

// ---------------------------------------------------------------------------------------------
// Buffers
// ---------------------------------------------------------------------------------------------

/// One axis of a buffer. Dimension 0 is the innermost (NumPy's last axis).
struct halide_dimension_t {
    int32_t min;     ///< coordinate of the first element along this axis
    int32_t extent;  ///< number of elements along this axis
    int32_t stride;  ///< distance between neighbours, in elements (not bytes); may be negative
    uint32_t flags;  ///< reserved by Halide; always 0 here
};

/// Bits of halide_buffer_t::flags.
enum halide_buffer_flags : uint64_t {
    halide_buffer_flag_host_dirty = 1,    ///< the host copy holds data the device copy lacks
    halide_buffer_flag_device_dirty = 2,  ///< the device copy holds data the host copy lacks
};

struct halide_device_interface_t;

/// The buffer every Halide pipeline reads and writes.
struct halide_buffer_t {
    uint64_t device;  ///< device handle (meaning is up to device_interface); 0 when none
    const halide_device_interface_t *device_interface;  ///< who owns `device`; null when none
    uint8_t *host;    ///< address of the element at the mins of every dimension; may be null
    uint64_t flags;   ///< halide_buffer_flags
    halide_type_t type;        ///< element type
    int32_t dimensions;        ///< number of entries in dim
    halide_dimension_t *dim;   ///< dimensions, innermost first
    void *padding;             ///< reserved; keeps the struct size stable
};

// ---------------------------------------------------------------------------------------------
// Device interfaces
// ---------------------------------------------------------------------------------------------

struct halide_device_interface_impl_t;

/// The public table of a device API. Halide's runtime functions (halide_copy_to_host, ...)
/// call through the table stored in a buffer; each entry forwards to the impl table.
struct halide_device_interface_t {
    int (*device_malloc)(void *user_context, halide_buffer_t *buf,
                         const halide_device_interface_t *device_interface);
    int (*device_free)(void *user_context, halide_buffer_t *buf);
    int (*device_sync)(void *user_context, halide_buffer_t *buf);
    void (*device_release)(void *user_context, const halide_device_interface_t *device_interface);
    int (*copy_to_host)(void *user_context, halide_buffer_t *buf);
    int (*copy_to_device)(void *user_context, halide_buffer_t *buf,
                          const halide_device_interface_t *device_interface);
    int (*device_and_host_malloc)(void *user_context, halide_buffer_t *buf,
                                  const halide_device_interface_t *device_interface);
    int (*device_and_host_free)(void *user_context, halide_buffer_t *buf);
    int (*buffer_copy)(void *user_context, halide_buffer_t *src,
                       const halide_device_interface_t *dst_device_interface, halide_buffer_t *dst);
    int (*device_crop)(void *user_context, const halide_buffer_t *src, halide_buffer_t *dst);
    int (*device_slice)(void *user_context, const halide_buffer_t *src, int slice_dim,
                        int slice_pos, halide_buffer_t *dst);
    int (*device_release_crop)(void *user_context, halide_buffer_t *buf);
    int (*wrap_native)(void *user_context, halide_buffer_t *buf, uint64_t handle,
                       const halide_device_interface_t *device_interface);
    int (*detach_native)(void *user_context, halide_buffer_t *buf);
    int (*compute_capability)(void *user_context, int *major, int *minor);
    const halide_device_interface_impl_t *impl;  ///< the backend's private table
};

/// A backend's private table (declared opaque in HalideRuntime.h; this order is the runtime's).
/// The public entries above take the interface as an argument; these do not.
struct halide_device_interface_impl_t {
    void (*use_module)();      ///< pins the code of the backend (JIT); no-op for AOT
    void (*release_module)();  ///< unpins it
    int (*device_malloc)(void *user_context, halide_buffer_t *buf);
    int (*device_free)(void *user_context, halide_buffer_t *buf);
    int (*device_sync)(void *user_context, halide_buffer_t *buf);
    int (*device_release)(void *user_context);
    int (*copy_to_host)(void *user_context, halide_buffer_t *buf);
    int (*copy_to_device)(void *user_context, halide_buffer_t *buf);
    int (*device_and_host_malloc)(void *user_context, halide_buffer_t *buf);
    int (*device_and_host_free)(void *user_context, halide_buffer_t *buf);
    int (*buffer_copy)(void *user_context, halide_buffer_t *src,
                       const halide_device_interface_t *dst_device_interface, halide_buffer_t *dst);
    int (*device_crop)(void *user_context, const halide_buffer_t *src, halide_buffer_t *dst);
    int (*device_slice)(void *user_context, const halide_buffer_t *src, int slice_dim,
                        int slice_pos, halide_buffer_t *dst);
    int (*device_release_crop)(void *user_context, halide_buffer_t *buf);
    int (*wrap_native)(void *user_context, halide_buffer_t *buf, uint64_t handle);
    int (*detach_native)(void *user_context, halide_buffer_t *buf);
    // No compute_capability here: the runtime answers that through the public table only.
};

// ---------------------------------------------------------------------------------------------
// AOT pipeline metadata (<name>_metadata())
// ---------------------------------------------------------------------------------------------

/// What an argument of a pipeline is.
enum halide_argument_kind_t : int32_t {
    halide_argument_kind_input_scalar = 0,
    halide_argument_kind_input_buffer = 1,
    halide_argument_kind_output_buffer = 2,
};

/// A scalar argument's value, as <name>_argv takes it (by address).
union halide_scalar_value_t {
    bool b;
    int8_t i8;
    int16_t i16;
    int32_t i32;
    int64_t i64;
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    float f32;
    double f64;
    void *handle;
};

/// One argument of a pipeline, in call order.
struct halide_filter_argument_t {
    const char *name;        ///< never null or empty
    int32_t kind;            ///< halide_argument_kind_t
    int32_t dimensions;      ///< 0 for scalars
    halide_type_t type;
    const halide_scalar_value_t *scalar_def, *scalar_min, *scalar_max, *scalar_estimate;  ///< may be null
    const int64_t *const *buffer_estimates;
};

/// A pipeline's description, returned by <name>_metadata().
struct halide_filter_metadata_t {
    int32_t version;  ///< 1
    int32_t num_arguments;
    const halide_filter_argument_t *arguments;
    const char *target;  ///< the target string it was compiled for
    const char *name;
};

}  // extern "C"

static_assert(sizeof(halide_type_t) == 4, "halide_type_t is one 32-bit word");
static_assert(sizeof(halide_dimension_t) == 16, "halide_dimension_t is four 32-bit fields");
static_assert(sizeof(halide_buffer_t) == 56, "halide_buffer_t is 56 bytes on 64-bit targets");
static_assert(sizeof(halide_device_interface_t) == 16 * sizeof(void *), "15 entries and impl");
static_assert(sizeof(halide_device_interface_impl_t) == 16 * sizeof(void *), "16 entries");

/// The name of Halide's typed capsule of a halide_buffer_t* (obj._get_halide_buffer_t_capsule(),
/// the protocol of Halide's Python runtime and generated extensions): "halide.halide_buffer_t.v"
/// and the ABI's major version, so a struct of another layout is never taken for ours.
#define HB_STRINGIFY_VALUE(x) #x
#define HB_STRINGIFY(x) HB_STRINGIFY_VALUE(x)
constexpr const char *kHalideBufferCapsule = "halide.halide_buffer_t.v" HB_STRINGIFY(HB_HALIDE_ABI_MAJOR);
