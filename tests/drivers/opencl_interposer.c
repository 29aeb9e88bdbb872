/* opencl_interposer.c: test support, not part of the package.
 *
 * A shared library that sits between the process and the real OpenCL ICD loader. It defines
 * the OpenCL entry points halide_buffer's core resolves (csrc/opencl_api.cpp) and those that
 * move bytes, launch kernels or make memory objects in Halide's runtime and pyopencl; each one
 * counts what it does and forwards to the same function of the real loader, looked up with
 * dlsym on the loader's own handle (never by name in the process, so no call can come back
 * here). It can also fail the N-th call of an entry point with a chosen error code, without
 * calling the driver.
 *
 * How calls reach it:
 *  - halide_buffer's core opens the path in HALIDE_BUFFER_OPENCL_LIBRARY and looks each entry
 *    point up on that handle: set it to this library (every entry point the core needs is
 *    defined here);
 *  - Halide's runtime and pyopencl's extension look cl* up by name in the process's global
 *    scope: this library, opened with RTLD_GLOBAL before them, is found first for what it
 *    defines; the real loader, opened here with RTLD_GLOBAL, answers the rest (program builds,
 *    kernel arguments, events ...).
 *
 * The real loader is opened by hb_interposer_open(path), or, when this library is loaded, from
 * HALIDE_BUFFER_TEST_OPENCL_LOADER; the libraries named in HALIDE_BUFFER_TEST_OPENCL_PRELOAD
 * (':'-separated) are opened first, so a loader whose ICDs are found only through another
 * library's search path (pyopencl's bundled loader and PoCL) finds them already loaded.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_bitfield;
typedef void *Platform, *Device, *Context, *Queue, *Mem, *Event, *Kernel;

#define CL_SUCCESS 0
#define CL_INVALID_VALUE (-30)
#define CL_INVALID_OPERATION (-59)
#define CL_PLATFORM_NOT_FOUND_KHR (-1001)

/* ----------------------------------------------------------------------------------------- */
/* Entry points                                                                               */
/* ----------------------------------------------------------------------------------------- */

#define ENTRIES(X)                                                                             \
    X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetDeviceIDs) X(clGetDeviceInfo)            \
    X(clCreateContext) X(clGetContextInfo) X(clRetainContext) X(clReleaseContext)            \
    X(clCreateCommandQueue) X(clGetCommandQueueInfo) X(clRetainCommandQueue)                 \
    X(clReleaseCommandQueue) X(clFinish) X(clFlush) X(clCreateBuffer) X(clCreateSubBuffer)   \
    X(clRetainMemObject) X(clReleaseMemObject) X(clGetMemObjectInfo) X(clEnqueueReadBuffer)  \
    X(clEnqueueWriteBuffer) X(clEnqueueReadBufferRect) X(clEnqueueWriteBufferRect)           \
    X(clEnqueueCopyBuffer) X(clEnqueueCopyBufferRect) X(clEnqueueFillBuffer)                 \
    X(clEnqueueNDRangeKernel) X(clEnqueueMapBuffer) X(clEnqueueUnmapMemObject)

#define AS_ENUM(name) E_##name,
#define AS_NAME(name) #name,
enum { ENTRIES(AS_ENUM) ENTRY_COUNT };
static const char *const entry_names[ENTRY_COUNT] = {ENTRIES(AS_NAME)};

static _Atomic(void *) loader;                 /* the real loader's handle */
static _Atomic(void *) real_functions[ENTRY_COUNT];
static char loader_path[4096];
static char last_error[4096];

/* ----------------------------------------------------------------------------------------- */
/* Counts                                                                                     */
/* ----------------------------------------------------------------------------------------- */

#define COUNTS(X)                                                                              \
    X(reads) X(read_bytes) X(writes) X(write_bytes) X(copies) X(fills) X(kernels) X(finishes) \
    X(mem_created) X(mem_released) X(maps) X(unmaps)
#define AS_COUNT(name) C_##name,
enum { COUNTS(AS_COUNT) COUNT_COUNT };
static const char *const count_names[COUNT_COUNT] = {COUNTS(AS_NAME)};
static atomic_llong counts[COUNT_COUNT];
static atomic_llong injected;

static void add(int which, long long n) { atomic_fetch_add(&counts[which], n); }

/* ----------------------------------------------------------------------------------------- */
/* Faults: one rule per entry point, under one mutex                                          */
/* ----------------------------------------------------------------------------------------- */

struct fault {
    long long countdown; /* calls until the failing one; 0: no rule */
    cl_int code;
    int repeat;          /* after firing, every later call fails too */
};
static struct fault faults[ENTRY_COUNT];
static atomic_int armed; /* how many rules are set: the common path takes no lock */
static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;

/* 1 (and the code) when this call of `entry` is to fail. */
static int take_fault(int entry, cl_int *code) {
    if (atomic_load(&armed) == 0) return 0;
    int fire = 0;
    pthread_mutex_lock(&fault_lock);
    struct fault *f = &faults[entry];
    if (f->countdown > 0 && --f->countdown == 0) {
        fire = 1;
        *code = f->code;
        if (f->repeat) {
            f->countdown = 1;
        } else {
            atomic_fetch_sub(&armed, 1);
        }
    }
    pthread_mutex_unlock(&fault_lock);
    if (fire) atomic_fetch_add(&injected, 1);
    return fire;
}

/* The real function, or NULL with the code to return: an injected fault, no loader yet, or a
 * loader without this entry point. */
static void *enter(int entry, cl_int *code) {
    if (take_fault(entry, code)) return NULL;
    void *fn = atomic_load(&real_functions[entry]);
    if (fn) return fn;
    void *handle = atomic_load(&loader);
    if (!handle) {
        *code = CL_PLATFORM_NOT_FOUND_KHR;
        return NULL;
    }
    fn = dlsym(handle, entry_names[entry]);
    if (!fn) {
        *code = CL_INVALID_OPERATION;
        return NULL;
    }
    atomic_store(&real_functions[entry], fn);
    return fn;
}

/* ----------------------------------------------------------------------------------------- */
/* Memory objects: the API reference count of every cl_mem created through here               */
/* ----------------------------------------------------------------------------------------- */

#define BUCKETS 4096
struct tracked {
    Mem mem;
    long long refs;
    struct tracked *next;
};
static struct tracked *buckets[BUCKETS];
static long long live;
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;

static struct tracked **slot(Mem m) {
    uintptr_t h = (uintptr_t)m;
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ull;
    struct tracked **p = &buckets[(h >> 20) % BUCKETS];
    while (*p && (*p)->mem != m) p = &(*p)->next;
    return p;
}

/* Adds `delta` to m's count (creating the entry at `delta` when `create`); returns the count
 * after, or -1 when m is not tracked. An entry reaching 0 is removed. */
static long long adjust(Mem m, long long delta, int create) {
    pthread_mutex_lock(&mem_lock);
    struct tracked **p = slot(m);
    long long after = -1;
    if (*p) {
        after = ((*p)->refs += delta);
        if (after <= 0) {
            struct tracked *gone = *p;
            *p = gone->next;
            free(gone);
            live--;
        }
    } else if (create && delta > 0) {
        struct tracked *t = malloc(sizeof *t);
        if (t) {
            *t = (struct tracked){m, delta, NULL};
            *p = t;
            live++;
            after = delta;
        }
    }
    pthread_mutex_unlock(&mem_lock);
    return after;
}

static void created(Mem m) {
    if (!m) return;
    adjust(m, 1, 1);
    add(C_mem_created, 1);
}

/* ----------------------------------------------------------------------------------------- */
/* Control API, read through ctypes                                                           */
/* ----------------------------------------------------------------------------------------- */

static void set_error(const char *what, const char *detail) {
    snprintf(last_error, sizeof last_error, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
}

const char *hb_interposer_error(void) { return last_error; }
const char *hb_interposer_loader(void) { return atomic_load(&loader) ? loader_path : ""; }
int hb_interposer_entry_count(void) { return ENTRY_COUNT; }
const char *hb_interposer_entry_name(int i) { return i >= 0 && i < ENTRY_COUNT ? entry_names[i] : NULL; }
int hb_interposer_count_fields(void) { return COUNT_COUNT; }
const char *hb_interposer_count_name(int i) { return i >= 0 && i < COUNT_COUNT ? count_names[i] : NULL; }
long long hb_interposer_count(int i) { return i >= 0 && i < COUNT_COUNT ? atomic_load(&counts[i]) : -1; }
long long hb_interposer_injected(void) { return atomic_load(&injected); }

long long hb_interposer_live_mem_objects(void) {
    pthread_mutex_lock(&mem_lock);
    long long n = live;
    pthread_mutex_unlock(&mem_lock);
    return n;
}

/* Opens the real loader at `path` (RTLD_GLOBAL: what is not defined here is found there by
 * name). 0 on success (again for the loader already open); -1 with hb_interposer_error(). */
int hb_interposer_open(const char *path) {
    void *handle = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!handle) {
        set_error("cannot open the OpenCL loader", dlerror());
        return -1;
    }
    if (dlsym(handle, "hb_interposer_open")) {  /* forwarding to an interposer would loop */
        dlclose(handle);
        set_error("the real OpenCL loader is an interposer", path);
        return -1;
    }
    if (!dlsym(handle, "clGetPlatformIDs")) {
        dlclose(handle);
        set_error("not an OpenCL loader (no clGetPlatformIDs)", path);
        return -1;
    }
    void *expected = NULL;
    if (!atomic_compare_exchange_strong(&loader, &expected, handle)) {
        dlclose(handle); /* the reference just taken; the open one stays */
        if (expected == handle) return 0;
        set_error("another OpenCL loader is already open", loader_path);
        return -1;
    }
    snprintf(loader_path, sizeof loader_path, "%s", path);
    return 0;
}

/* Fails the nth call from now of `entry` with `code`; with `repeat`, every later call too,
 * until hb_interposer_clear_faults(). 0, or -1 for an unknown entry or nth < 1. */
int hb_interposer_fail(const char *entry, int code, long long nth, int repeat) {
    if (nth < 1 || code == CL_SUCCESS) return -1;
    for (int i = 0; i < ENTRY_COUNT; i++) {
        if (strcmp(entry, entry_names[i]) != 0) continue;
        pthread_mutex_lock(&fault_lock);
        if (faults[i].countdown == 0) atomic_fetch_add(&armed, 1);
        faults[i] = (struct fault){nth, code, repeat != 0};
        pthread_mutex_unlock(&fault_lock);
        return 0;
    }
    return -1;
}

void hb_interposer_clear_faults(void) {
    pthread_mutex_lock(&fault_lock);
    memset(faults, 0, sizeof faults);
    atomic_store(&armed, 0);
    pthread_mutex_unlock(&fault_lock);
}

/* Completes the OpenCL user event `event` `ms` milliseconds from now, on a thread of its own that
 * runs no Python: a gate on a queue (tests/queue_gate.py) then opens even while the thread that
 * waits for it holds the GIL. 0, or -1 when no thread or no clSetUserEventStatus. */
typedef cl_int (*SetUserEventStatus)(Event, cl_int);
typedef cl_int (*EventReference)(Event);
struct opening {
    SetUserEventStatus set_status;
    EventReference release;
    Event event;
    long ms;
};

static void *open_later(void *p) {
    struct opening *o = p;
    struct timespec wait = {o->ms / 1000, (o->ms % 1000) * 1000000L};
    while (nanosleep(&wait, &wait) != 0) {
    }
    o->set_status(o->event, CL_SUCCESS); /* CL_COMPLETE is 0, as CL_SUCCESS */
    o->release(o->event);                 /* the reference taken for this thread */
    free(o);
    return NULL;
}

int hb_interposer_complete_event_after(void *event, long ms) {
    void *handle = atomic_load(&loader);
    struct opening *o = malloc(sizeof *o);
    if (!handle || !o) {
        free(o);
        return -1;
    }
    EventReference retain = (EventReference)dlsym(handle, "clRetainEvent");
    *o = (struct opening){(SetUserEventStatus)dlsym(handle, "clSetUserEventStatus"),
                          (EventReference)dlsym(handle, "clReleaseEvent"), event, ms};
    pthread_t thread;
    if (!o->set_status || !o->release || !retain || retain(event) != CL_SUCCESS) {
        free(o);
        return -1;
    }
    if (pthread_create(&thread, NULL, open_later, o) != 0) {
        o->release(event);
        free(o);
        return -1;
    }
    pthread_detach(thread);
    return 0;
}

__attribute__((constructor)) static void from_environment(void) {
    const char *preload = getenv("HALIDE_BUFFER_TEST_OPENCL_PRELOAD");
    if (preload && *preload) {
        char *list = strdup(preload);
        for (char *save = NULL, *p = list ? strtok_r(list, ":", &save) : NULL; p;
             p = strtok_r(NULL, ":", &save)) {
            dlopen(p, RTLD_NOW | RTLD_GLOBAL);  /* held for the process */
        }
        free(list);
    }
    const char *path = getenv("HALIDE_BUFFER_TEST_OPENCL_LOADER");
    if (path && *path) hb_interposer_open(path);
}

/* ----------------------------------------------------------------------------------------- */
/* The entry points                                                                           */
/* ----------------------------------------------------------------------------------------- */

/* In an entry point returning cl_int: `fn`, the real one, typed as this one; a fault or a
 * missing loader returns its code. */
#define FORWARD(name)                                          \
    cl_int rc_;                                                \
    __typeof__(&name) fn = (__typeof__(&name))enter(E_##name, &rc_); \
    if (!fn) return rc_

/* In an entry point returning an object, with its code through errcode_ret. */
#define FORWARD_CREATE(name, errcode_ret)                      \
    cl_int rc_;                                                \
    __typeof__(&name) fn = (__typeof__(&name))enter(E_##name, &rc_); \
    if (!fn) {                                                 \
        if (errcode_ret) *(errcode_ret) = rc_;                 \
        return NULL;                                           \
    }

typedef void (*ContextNotify)(const char *, const void *, size_t, void *);

cl_int clGetPlatformIDs(cl_uint n, Platform *platforms, cl_uint *count) {
    FORWARD(clGetPlatformIDs);
    return fn(n, platforms, count);
}

cl_int clGetPlatformInfo(Platform p, cl_uint what, size_t size, void *value, size_t *size_ret) {
    FORWARD(clGetPlatformInfo);
    return fn(p, what, size, value, size_ret);
}

cl_int clGetDeviceIDs(Platform p, cl_bitfield type, cl_uint n, Device *devices, cl_uint *count) {
    FORWARD(clGetDeviceIDs);
    return fn(p, type, n, devices, count);
}

cl_int clGetDeviceInfo(Device d, cl_uint what, size_t size, void *value, size_t *size_ret) {
    FORWARD(clGetDeviceInfo);
    return fn(d, what, size, value, size_ret);
}

Context clCreateContext(const intptr_t *props, cl_uint n, const Device *devices,
                        ContextNotify notify, void *user, cl_int *errcode_ret) {
    FORWARD_CREATE(clCreateContext, errcode_ret);
    return fn(props, n, devices, notify, user, errcode_ret);
}

cl_int clGetContextInfo(Context c, cl_uint what, size_t size, void *value, size_t *size_ret) {
    FORWARD(clGetContextInfo);
    return fn(c, what, size, value, size_ret);
}

cl_int clRetainContext(Context c) {
    FORWARD(clRetainContext);
    return fn(c);
}

cl_int clReleaseContext(Context c) {
    FORWARD(clReleaseContext);
    return fn(c);
}

Queue clCreateCommandQueue(Context c, Device d, cl_bitfield props, cl_int *errcode_ret) {
    FORWARD_CREATE(clCreateCommandQueue, errcode_ret);
    return fn(c, d, props, errcode_ret);
}

cl_int clGetCommandQueueInfo(Queue q, cl_uint what, size_t size, void *value, size_t *size_ret) {
    FORWARD(clGetCommandQueueInfo);
    return fn(q, what, size, value, size_ret);
}

cl_int clRetainCommandQueue(Queue q) {
    FORWARD(clRetainCommandQueue);
    return fn(q);
}

cl_int clReleaseCommandQueue(Queue q) {
    FORWARD(clReleaseCommandQueue);
    return fn(q);
}

cl_int clFinish(Queue q) {
    FORWARD(clFinish);
    cl_int rc = fn(q);
    if (rc == CL_SUCCESS) add(C_finishes, 1);
    return rc;
}

cl_int clFlush(Queue q) {
    FORWARD(clFlush);
    return fn(q);
}

Mem clCreateBuffer(Context c, cl_bitfield flags, size_t size, void *host, cl_int *errcode_ret) {
    FORWARD_CREATE(clCreateBuffer, errcode_ret);
    Mem m = fn(c, flags, size, host, errcode_ret);
    created(m);
    return m;
}

Mem clCreateSubBuffer(Mem parent, cl_bitfield flags, cl_uint type, const void *info,
                      cl_int *errcode_ret) {
    FORWARD_CREATE(clCreateSubBuffer, errcode_ret);
    Mem m = fn(parent, flags, type, info, errcode_ret);
    created(m);
    return m;
}

cl_int clRetainMemObject(Mem m) {
    FORWARD(clRetainMemObject);
    /* Counted before the call and undone on failure: m cannot be freed meanwhile. */
    int tracked = adjust(m, 1, 0) >= 0;
    cl_int rc = fn(m);
    if (rc != CL_SUCCESS && tracked) adjust(m, -1, 0);
    return rc;
}

cl_int clReleaseMemObject(Mem m) {
    FORWARD(clReleaseMemObject);
    /* Counted before the call: once the driver frees m, a new object may get its address. */
    long long after = adjust(m, -1, 0);
    cl_int rc = fn(m);
    if (rc != CL_SUCCESS) {
        if (after >= 0) adjust(m, 1, after == 0);
    } else if (after == 0) {
        add(C_mem_released, 1);
    }
    return rc;
}

cl_int clGetMemObjectInfo(Mem m, cl_uint what, size_t size, void *value, size_t *size_ret) {
    FORWARD(clGetMemObjectInfo);
    return fn(m, what, size, value, size_ret);
}

cl_int clEnqueueReadBuffer(Queue q, Mem m, cl_uint blocking, size_t offset, size_t n, void *p,
                           cl_uint ne, const Event *wait, Event *e) {
    FORWARD(clEnqueueReadBuffer);
    cl_int rc = fn(q, m, blocking, offset, n, p, ne, wait, e);
    if (rc == CL_SUCCESS) {
        add(C_reads, 1);
        add(C_read_bytes, (long long)n);
    }
    return rc;
}

/* Maps move no bytes on a device sharing the host's memory: counted apart from reads and writes. */
void *clEnqueueMapBuffer(Queue q, Mem m, cl_uint blocking, cl_bitfield flags, size_t offset, size_t n,
                         cl_uint ne, const Event *wait, Event *e, cl_int *errcode_ret) {
    FORWARD_CREATE(clEnqueueMapBuffer, errcode_ret);
    cl_int rc = CL_SUCCESS;
    void *p = fn(q, m, blocking, flags, offset, n, ne, wait, e, &rc);
    if (errcode_ret) *errcode_ret = rc;
    if (rc == CL_SUCCESS) add(C_maps, 1);
    return p;
}

cl_int clEnqueueUnmapMemObject(Queue q, Mem m, void *p, cl_uint ne, const Event *wait, Event *e) {
    FORWARD(clEnqueueUnmapMemObject);
    cl_int rc = fn(q, m, p, ne, wait, e);
    if (rc == CL_SUCCESS) add(C_unmaps, 1);
    return rc;
}

cl_int clEnqueueWriteBuffer(Queue q, Mem m, cl_uint blocking, size_t offset, size_t n,
                            const void *p, cl_uint ne, const Event *wait, Event *e) {
    FORWARD(clEnqueueWriteBuffer);
    cl_int rc = fn(q, m, blocking, offset, n, p, ne, wait, e);
    if (rc == CL_SUCCESS) {
        add(C_writes, 1);
        add(C_write_bytes, (long long)n);
    }
    return rc;
}

static long long region_bytes(const size_t *region) {
    return region ? (long long)(region[0] * region[1] * region[2]) : 0;
}

cl_int clEnqueueReadBufferRect(Queue q, Mem m, cl_uint blocking, const size_t *buffer_origin,
                               const size_t *host_origin, const size_t *region,
                               size_t buffer_row_pitch, size_t buffer_slice_pitch,
                               size_t host_row_pitch, size_t host_slice_pitch, void *p,
                               cl_uint ne, const Event *wait, Event *e) {
    FORWARD(clEnqueueReadBufferRect);
    cl_int rc = fn(q, m, blocking, buffer_origin, host_origin, region, buffer_row_pitch,
                   buffer_slice_pitch, host_row_pitch, host_slice_pitch, p, ne, wait, e);
    if (rc == CL_SUCCESS) {
        add(C_reads, 1);
        add(C_read_bytes, region_bytes(region));
    }
    return rc;
}

cl_int clEnqueueWriteBufferRect(Queue q, Mem m, cl_uint blocking, const size_t *buffer_origin,
                                const size_t *host_origin, const size_t *region,
                                size_t buffer_row_pitch, size_t buffer_slice_pitch,
                                size_t host_row_pitch, size_t host_slice_pitch, const void *p,
                                cl_uint ne, const Event *wait, Event *e) {
    FORWARD(clEnqueueWriteBufferRect);
    cl_int rc = fn(q, m, blocking, buffer_origin, host_origin, region, buffer_row_pitch,
                   buffer_slice_pitch, host_row_pitch, host_slice_pitch, p, ne, wait, e);
    if (rc == CL_SUCCESS) {
        add(C_writes, 1);
        add(C_write_bytes, region_bytes(region));
    }
    return rc;
}

cl_int clEnqueueCopyBuffer(Queue q, Mem src, Mem dst, size_t src_offset, size_t dst_offset,
                           size_t n, cl_uint ne, const Event *wait, Event *e) {
    FORWARD(clEnqueueCopyBuffer);
    cl_int rc = fn(q, src, dst, src_offset, dst_offset, n, ne, wait, e);
    if (rc == CL_SUCCESS) add(C_copies, 1);
    return rc;
}

cl_int clEnqueueCopyBufferRect(Queue q, Mem src, Mem dst, const size_t *src_origin,
                               const size_t *dst_origin, const size_t *region,
                               size_t src_row_pitch, size_t src_slice_pitch, size_t dst_row_pitch,
                               size_t dst_slice_pitch, cl_uint ne, const Event *wait, Event *e) {
    FORWARD(clEnqueueCopyBufferRect);
    cl_int rc = fn(q, src, dst, src_origin, dst_origin, region, src_row_pitch, src_slice_pitch,
                   dst_row_pitch, dst_slice_pitch, ne, wait, e);
    if (rc == CL_SUCCESS) add(C_copies, 1);
    return rc;
}

cl_int clEnqueueFillBuffer(Queue q, Mem m, const void *pattern, size_t pattern_size,
                           size_t offset, size_t n, cl_uint ne, const Event *wait, Event *e) {
    FORWARD(clEnqueueFillBuffer);
    cl_int rc = fn(q, m, pattern, pattern_size, offset, n, ne, wait, e);
    if (rc == CL_SUCCESS) add(C_fills, 1);
    return rc;
}

cl_int clEnqueueNDRangeKernel(Queue q, Kernel k, cl_uint dims, const size_t *offset,
                              const size_t *global, const size_t *local, cl_uint ne,
                              const Event *wait, Event *e) {
    FORWARD(clEnqueueNDRangeKernel);
    cl_int rc = fn(q, k, dims, offset, global, local, ne, wait, e);
    if (rc == CL_SUCCESS) add(C_kernels, 1);
    return rc;
}
