/* cuda_standin.c: a stand-in for the CUDA driver (libcuda), on host memory, for tests.
 *
 * It implements exactly the driver entry points halide_buffer resolves (csrc/cuda_api.cpp), plus
 * cuStreamCreate/cuStreamDestroy_v2 for tests, and a control API (hb_standin_*) read through
 * ctypes. It proves halide_buffer's bookkeeping (which calls, in which order, on which memory,
 * in which context and stream), never CUDA's behaviour: no kernel runs here, and no GPU peer
 * (CuPy, PyTorch, JAX) can read this memory.
 *
 * The model:
 * - devices: HB_STANDIN_DEVICES (default 2), each with HB_STANDIN_MEMORY bytes (default 4 GiB);
 * - device addresses come from a reserved, inaccessible range of the address space: never equal
 *   to a host address, and a device pointer dereferenced on the host faults. Each allocation has
 *   a host block of its own behind it; addresses are never reused, so a freed pointer stays
 *   unknown;
 * - one primary context per device, retain/release counted; a context stack per thread; every
 *   call on memory needs a current context;
 * - streams hold queued work, run only when something waits for it (cuStreamSynchronize, an
 *   event a running stream waits for, the legacy stream's implicit ordering, cuMemFree). Work
 *   not waited for has not happened: a missing synchronisation reads stale bytes;
 * - strict checks: misuse (double free, an unknown pointer, a copy outside an allocation, a host
 *   address given as device memory or the reverse, a released context or destroyed stream or
 *   event, a stream of another context, popping an empty stack, releasing a context with live
 *   allocations) is recorded as a violation with its message, and the call fails as the driver
 *   would; tests read the violations after each test;
 * - faults: the N-th call (from now) of a named entry point fails with a given code, before it
 *   does anything; once, or on every call until cleared.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
};

#define MAX_DEVICES 8
#define MAX_STREAMS 256
#define MAX_EVENTS 4096
#define MAX_STACK 64
#define MAX_FAULTS 32
#define MAX_VIOLATIONS 64
#define MAX_ENTRIES 64
#define ALIGNMENT 256

/* ------------------------------------------------------------------------------------------ */
/* State                                                                                       */
/* ------------------------------------------------------------------------------------------ */

struct CUctx_st {
    int ordinal;
    long refs;     /* primary context retains minus releases */
    long retains;  /* ever */
};

struct Allocation {
    CUdeviceptr base;
    size_t size;
    int ordinal;
    unsigned char *host;  /* the bytes behind it */
    struct Allocation *next;
};

enum OpKind { OP_COPY, OP_SET, OP_RECORD, OP_WAIT };

/* One end of a copy: device memory (an address) or host memory. */
struct End {
    int device;
    CUdeviceptr address;
    unsigned char *host;
    size_t pitch, height;
};

struct Op {
    enum OpKind kind;
    uint64_t time;  /* global enqueue order */
    /* OP_COPY: rows x slices rows of `width` bytes; OP_SET: the same box of `word`-byte values */
    struct End src, dst;
    size_t width, rows, slices;
    unsigned word_size;
    uint32_t word;
    /* OP_RECORD: the event; OP_WAIT: the stream and time waited for */
    int event;
    int wait_stream;
    uint64_t wait_time;
    const char *entry;
    struct Op *next;
};

struct CUstream_st {
    int id;            /* index in streams[] */
    int alive;
    int ordinal;       /* -1: the legacy or per-thread default stream (any context) */
    int non_blocking;  /* no implicit ordering with the legacy stream */
    struct Op *head, *tail;
};

struct CUevent_st {
    int id;
    int alive;
    int ordinal;
    int recorded_stream;  /* -1: never recorded */
    uint64_t recorded_time;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialised;
static int device_count = 2;
static size_t device_memory = (size_t)4 << 30;
static struct CUctx_st contexts[MAX_DEVICES];
static size_t live_bytes[MAX_DEVICES];

static unsigned char *reserved;       /* the device address range */
static size_t reserved_size;
static size_t next_offset = ALIGNMENT; /* bump allocation: addresses are never reused */
static struct Allocation *allocations;
static long live_allocations;
static long total_allocations;

static struct CUstream_st streams[MAX_STREAMS];  /* 0: legacy, 1: per-thread default */
static struct CUevent_st events[MAX_EVENTS];
static uint64_t clock_now;

static __thread struct CUctx_st *stack[MAX_STACK];
static __thread int depth;

struct Fault {
    char entry[48];
    long countdown; /* calls to let through first */
    CUresult code;
    int repeat;
};
static struct Fault faults[MAX_FAULTS];
static int fault_count;

static char violations[MAX_VIOLATIONS][256];
static long violation_count;

static struct {
    char name[48];
    long calls;
} entries[MAX_ENTRIES];

/* ------------------------------------------------------------------------------------------ */
/* Bookkeeping helpers (called with the lock held)                                            */
/* ------------------------------------------------------------------------------------------ */

static void violation(const char *format, ...) {
    if (violation_count < MAX_VIOLATIONS) {
        va_list args;
        va_start(args, format);
        vsnprintf(violations[violation_count], sizeof violations[0], format, args);
        va_end(args);
    }
    ++violation_count;
}

/* Counts the call; returns the injected failure for it, or CUDA_SUCCESS. */
static CUresult enter(const char *entry) {
    int i;
    for (i = 0; i < MAX_ENTRIES && entries[i].name[0]; ++i) {
        if (!strcmp(entries[i].name, entry)) break;
    }
    if (i < MAX_ENTRIES) {
        if (!entries[i].name[0]) snprintf(entries[i].name, sizeof entries[i].name, "%s", entry);
        ++entries[i].calls;
    }
    for (int f = 0; f < fault_count; ++f) {
        struct Fault *fault = &faults[f];
        if (strcmp(fault->entry, entry) != 0) continue;
        if (fault->countdown > 0) {
            --fault->countdown;
            continue;
        }
        CUresult code = fault->code;
        if (!fault->repeat) faults[f] = faults[--fault_count];
        return code;
    }
    return CUDA_SUCCESS;
}

static int is_device_address(uint64_t address) {
    return reserved && address >= (uint64_t)(uintptr_t)reserved &&
           address < (uint64_t)(uintptr_t)reserved + reserved_size;
}

static struct Allocation *find(CUdeviceptr address) {
    for (struct Allocation *a = allocations; a; a = a->next) {
        if (address >= a->base && address < a->base + a->size) return a;
    }
    return NULL;
}

static struct CUctx_st *current(void) { return depth > 0 ? stack[depth - 1] : NULL; }

/* The current context, or a violation naming `entry` and NULL. */
static struct CUctx_st *need_context(const char *entry) {
    struct CUctx_st *c = current();
    if (!c) {
        violation("%s: no current context (push one first)", entry);
        return NULL;
    }
    if (c->refs <= 0) {
        violation("%s: the current context (device %d) was released", entry, c->ordinal);
        return NULL;
    }
    return c;
}

/* The stream a handle stands for, checked against the current context; NULL after a violation. */
static struct CUstream_st *stream_of(void *handle, const char *entry) {
    uintptr_t h = (uintptr_t)handle;
    if (h == 0 || h == 1) return &streams[0];
    if (h == 2) return &streams[1];
    for (int i = 2; i < MAX_STREAMS; ++i) {
        if ((uintptr_t)&streams[i] != h) continue;
        if (!streams[i].alive) {
            violation("%s: stream %p was destroyed", entry, handle);
            return NULL;
        }
        struct CUctx_st *c = current();
        if (c && streams[i].ordinal != c->ordinal) {
            violation("%s: stream %p belongs to device %d, the current context is device %d's", entry, handle,
                      streams[i].ordinal, c->ordinal);
            return NULL;
        }
        return &streams[i];
    }
    violation("%s: %p is no stream", entry, handle);
    return NULL;
}

static struct CUevent_st *event_of(void *handle, const char *entry) {
    for (int i = 0; i < MAX_EVENTS; ++i) {
        if ((uintptr_t)&events[i] != (uintptr_t)handle) continue;
        if (!events[i].alive) {
            violation("%s: event %p was destroyed", entry, handle);
            return NULL;
        }
        return &events[i];
    }
    violation("%s: %p is no event", entry, handle);
    return NULL;
}

/* Checks that `bytes` at an end of a copy are inside one allocation (device) or outside the
 * device range (host); the host pointer to use, or NULL after a violation. */
static unsigned char *resolve(const struct End *end, size_t offset, size_t bytes, const char *entry,
                              const char *side) {
    if (end->device) {
        CUdeviceptr at = end->address + offset;
        if (!is_device_address(at)) {
            violation("%s: %s 0x%llx is not device memory (a host pointer?)", entry, side, (unsigned long long)at);
            return NULL;
        }
        struct Allocation *a = find(at);
        if (!a) {
            violation("%s: %s 0x%llx is in no live allocation (freed?)", entry, side, (unsigned long long)at);
            return NULL;
        }
        if (bytes > a->base + a->size - at) {
            violation("%s: %s 0x%llx + %zu bytes runs past its allocation (0x%llx, %zu bytes)", entry, side,
                      (unsigned long long)at, bytes, (unsigned long long)a->base, a->size);
            return NULL;
        }
        return a->host + (at - a->base);
    }
    unsigned char *p = end->host + offset;
    if (!end->host || is_device_address((uint64_t)(uintptr_t)p)) {
        violation("%s: %s %p is device memory or null, given as host memory", entry, side, (void *)p);
        return NULL;
    }
    return p;
}

/* Where row (y, z) of an end starts, in bytes from its first byte. */
static size_t row_offset(const struct End *e, size_t y, size_t z) { return (z * e->height + y) * e->pitch; }

/* Checks (or, with `run`, performs) an op's rows; returns 0 after a violation. */
static int walk(struct Op *op, int run) {
    for (size_t z = 0; z < op->slices; ++z) {
        for (size_t y = 0; y < op->rows; ++y) {
            unsigned char *to = resolve(&op->dst, row_offset(&op->dst, y, z), op->width, op->entry, "destination");
            if (!to) return 0;
            if (op->kind == OP_SET) {
                if (run) {
                    for (size_t i = 0; i < op->width; i += op->word_size) memcpy(to + i, &op->word, op->word_size);
                }
                continue;
            }
            unsigned char *from = resolve(&op->src, row_offset(&op->src, y, z), op->width, op->entry, "source");
            if (!from) return 0;
            if (run) memmove(to, from, op->width);
        }
    }
    return 1;
}

static void drain(struct CUstream_st *s, uint64_t until);

/* Runs one op after what it waits for: the legacy stream waits for every blocking stream's
 * earlier work and they for its; a wait op for its event's stream. */
static void run_op(struct CUstream_st *s, struct Op *op) {
    if (s->id == 0) {
        for (int i = 1; i < MAX_STREAMS; ++i) {
            if (streams[i].head && !streams[i].non_blocking) drain(&streams[i], op->time - 1);
        }
    } else if (!s->non_blocking) {
        drain(&streams[0], op->time - 1);
    }
    switch (op->kind) {
        case OP_COPY:
        case OP_SET:
            walk(op, 1);  /* memory freed since it was queued is a violation here */
            break;
        case OP_RECORD:
            break;
        case OP_WAIT:
            drain(&streams[op->wait_stream], op->wait_time);
            break;
    }
}

/* Runs the work queued on `s` up to (and including) enqueue time `until`. */
static void drain(struct CUstream_st *s, uint64_t until) {
    while (s->head && s->head->time <= until) {
        struct Op *op = s->head;
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        run_op(s, op);
        free(op);
    }
}

static void drain_all(void) {
    for (int i = 0; i < MAX_STREAMS; ++i) drain(&streams[i], UINT64_MAX);
}

static CUresult enqueue(struct CUstream_st *s, struct Op *op) {
    struct Op *queued = malloc(sizeof *op);
    if (!queued) return CUDA_ERROR_OUT_OF_MEMORY;
    *queued = *op;
    queued->time = ++clock_now;
    queued->next = NULL;
    if (s->tail) s->tail->next = queued;
    else s->head = queued;
    s->tail = queued;
    return CUDA_SUCCESS;
}

static struct End device_end(CUdeviceptr address, size_t pitch, size_t height) {
    struct End e = {1, address, NULL, pitch, height};
    return e;
}
static struct End host_end(void *host, size_t pitch, size_t height) {
    struct End e = {0, 0, (unsigned char *)host, pitch, height};
    return e;
}

/* Queues a copy or a set after checking it; the common tail of every memcpy and memset. */
static CUresult queue_box(const char *entry, struct Op *op, void *stream) {
    if (!need_context(entry)) return CUDA_ERROR_INVALID_CONTEXT;
    struct CUstream_st *s = stream_of(stream, entry);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    op->entry = entry;
    if (op->width == 0 || op->rows == 0 || op->slices == 0) return CUDA_SUCCESS;
    if (!walk(op, 0)) return CUDA_ERROR_INVALID_VALUE;
    return enqueue(s, op);
}

#define ENTER(name)                                   \
    pthread_mutex_lock(&lock);                        \
    CUresult injected_ = enter(name);                 \
    if (injected_ != CUDA_SUCCESS) {                  \
        pthread_mutex_unlock(&lock);                  \
        return injected_;                             \
    }
#define RETURN(value)                 \
    do {                              \
        CUresult r_ = (value);        \
        pthread_mutex_unlock(&lock);  \
        return r_;                    \
    } while (0)

static void read_environment(void) {
    const char *n = getenv("HB_STANDIN_DEVICES");
    if (n && atoi(n) >= 0 && atoi(n) <= MAX_DEVICES) device_count = atoi(n);
    const char *m = getenv("HB_STANDIN_MEMORY");
    if (m && strtoull(m, NULL, 10) > 0) device_memory = (size_t)strtoull(m, NULL, 10);
}

/* ------------------------------------------------------------------------------------------ */
/* The driver API                                                                              */
/* ------------------------------------------------------------------------------------------ */

CUresult cuInit(unsigned flags) {
    ENTER("cuInit");
    if (flags != 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!initialised) {
        read_environment();
        for (size_t size = (size_t)1 << 40; size >= ((size_t)1 << 32) && !reserved; size >>= 1) {
            void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p != MAP_FAILED) {
                reserved = p;
                reserved_size = size;
            }
        }
        if (!reserved) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
        for (int i = 0; i < MAX_DEVICES; ++i) contexts[i].ordinal = i;
        for (int i = 0; i < MAX_STREAMS; ++i) streams[i].id = i;
        for (int i = 0; i < MAX_EVENTS; ++i) events[i].id = i;
        streams[0].alive = streams[1].alive = 1;
        streams[0].ordinal = streams[1].ordinal = -1;
        initialised = 1;
    }
    RETURN(CUDA_SUCCESS);
}

#define NEED_INIT()                                              \
    if (!initialised) RETURN(CUDA_ERROR_NOT_INITIALIZED)

CUresult cuDeviceGetCount(int *count) {
    ENTER("cuDeviceGetCount");
    NEED_INIT();
    *count = device_count;
    RETURN(CUDA_SUCCESS);
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    ENTER("cuDeviceGet");
    NEED_INIT();
    if (ordinal < 0 || ordinal >= device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    *device = ordinal;
    RETURN(CUDA_SUCCESS);
}

CUresult cuDeviceGetName(char *name, int length, CUdevice device) {
    ENTER("cuDeviceGetName");
    NEED_INIT();
    if (device < 0 || device >= device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    snprintf(name, (size_t)length, "CUDA driver stand-in %d (host memory, no kernels)", device);
    RETURN(CUDA_SUCCESS);
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice device) {
    ENTER("cuDeviceTotalMem");
    NEED_INIT();
    if (device < 0 || device >= device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    *bytes = device_memory;
    RETURN(CUDA_SUCCESS);
}

CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice device) {
    ENTER("cuDeviceGetAttribute");
    NEED_INIT();
    if (device < 0 || device >= device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (attribute == 75) *value = 9;       /* compute capability major */
    else if (attribute == 76) *value = 0;  /* minor */
    else RETURN(CUDA_ERROR_INVALID_VALUE);
    RETURN(CUDA_SUCCESS);
}

CUresult cuDevicePrimaryCtxRetain(struct CUctx_st **context, CUdevice device) {
    ENTER("cuDevicePrimaryCtxRetain");
    NEED_INIT();
    if (device < 0 || device >= device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    ++contexts[device].refs;
    ++contexts[device].retains;
    *context = &contexts[device];
    RETURN(CUDA_SUCCESS);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
    ENTER("cuDevicePrimaryCtxRelease");
    NEED_INIT();
    if (device < 0 || device >= device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (contexts[device].refs <= 0) {
        violation("cuDevicePrimaryCtxRelease: device %d's primary context released more often than retained", device);
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    }
    if (--contexts[device].refs == 0) {
        long alive = 0;
        for (struct Allocation *a = allocations; a; a = a->next) alive += a->ordinal == device;
        if (alive)
            violation("cuDevicePrimaryCtxRelease: device %d's primary context destroyed with %ld allocation(s) "
                      "alive (freed with it: later uses would fault)", device, alive);
    }
    RETURN(CUDA_SUCCESS);
}

CUresult cuCtxPushCurrent_v2(struct CUctx_st *context) {
    ENTER("cuCtxPushCurrent");
    NEED_INIT();
    if (!context || context < contexts || context >= contexts + device_count) {
        violation("cuCtxPushCurrent: %p is no context", (void *)context);
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    }
    if (context->refs <= 0) {
        violation("cuCtxPushCurrent: device %d's primary context was released", context->ordinal);
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    }
    if (depth == MAX_STACK) {
        violation("cuCtxPushCurrent: %d contexts pushed and never popped", depth);
        RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    stack[depth++] = context;
    RETURN(CUDA_SUCCESS);
}

CUresult cuCtxPopCurrent_v2(struct CUctx_st **context) {
    ENTER("cuCtxPopCurrent");
    NEED_INIT();
    if (depth == 0) {
        violation("cuCtxPopCurrent: no context to pop");
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    }
    struct CUctx_st *top = stack[--depth];
    if (context) *context = top;
    RETURN(CUDA_SUCCESS);
}

CUresult cuMemAlloc_v2(CUdeviceptr *pointer, size_t bytes) {
    ENTER("cuMemAlloc");
    NEED_INIT();
    struct CUctx_st *c = need_context("cuMemAlloc");
    if (!c) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (bytes == 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    size_t span = (bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    if (bytes > device_memory - live_bytes[c->ordinal] || span > reserved_size - next_offset)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    struct Allocation *a = calloc(1, sizeof *a);
    unsigned char *host = a ? malloc(bytes) : NULL;
    if (!host) {
        free(a);
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    }
    memset(host, 0xA5, bytes);  /* fresh device memory holds garbage, never zeros */
    a->base = (CUdeviceptr)(uintptr_t)(reserved + next_offset);
    a->size = bytes;
    a->ordinal = c->ordinal;
    a->host = host;
    a->next = allocations;
    allocations = a;
    next_offset += span + ALIGNMENT;  /* a gap: one past the end is in no allocation */
    live_bytes[c->ordinal] += bytes;
    ++live_allocations;
    ++total_allocations;
    *pointer = a->base;
    RETURN(CUDA_SUCCESS);
}

CUresult cuMemFree_v2(CUdeviceptr pointer) {
    ENTER("cuMemFree");
    NEED_INIT();
    if (!need_context("cuMemFree")) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    drain_all();  /* cuMemFree waits for the work queued on the memory */
    struct Allocation **link = &allocations;
    while (*link && (*link)->base != pointer) link = &(*link)->next;
    if (!*link) {
        struct Allocation *inside = find(pointer);
        if (inside)
            violation("cuMemFree: 0x%llx is inside an allocation (0x%llx), not its start", (unsigned long long)pointer,
                      (unsigned long long)inside->base);
        else if (is_device_address(pointer))
            violation("cuMemFree: 0x%llx is no live allocation (freed twice?)", (unsigned long long)pointer);
        else
            violation("cuMemFree: 0x%llx is not device memory", (unsigned long long)pointer);
        RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    struct Allocation *a = *link;
    if (contexts[a->ordinal].refs <= 0)
        violation("cuMemFree: 0x%llx outlived device %d's primary context", (unsigned long long)pointer, a->ordinal);
    *link = a->next;
    live_bytes[a->ordinal] -= a->size;
    --live_allocations;
    free(a->host);
    free(a);
    RETURN(CUDA_SUCCESS);
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr pointer) {
    ENTER("cuMemGetAddressRange");
    NEED_INIT();
    if (!need_context("cuMemGetAddressRange")) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    struct Allocation *a = find(pointer);
    if (!a) RETURN(CUDA_ERROR_NOT_FOUND);
    if (base) *base = a->base;
    if (size) *size = a->size;
    RETURN(CUDA_SUCCESS);
}

CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr pointer) {
    ENTER("cuPointerGetAttribute");
    NEED_INIT();
    struct Allocation *a = find(pointer);
    if (!a) RETURN(CUDA_ERROR_INVALID_VALUE);  /* host memory the driver does not know */
    if (attribute == 9) *(int *)data = a->ordinal;           /* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */
    else if (attribute == 2) *(unsigned *)data = 2;          /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE: device */
    else RETURN(CUDA_ERROR_INVALID_VALUE);
    RETURN(CUDA_SUCCESS);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, void *stream) {
    ENTER("cuMemcpyHtoDAsync");
    NEED_INIT();
    struct Op op = {.kind = OP_COPY, .src = host_end((void *)src, bytes, 1), .dst = device_end(dst, bytes, 1),
                    .width = bytes, .rows = 1, .slices = 1};
    RETURN(queue_box("cuMemcpyHtoDAsync", &op, stream));
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, void *stream) {
    ENTER("cuMemcpyDtoHAsync");
    NEED_INIT();
    struct Op op = {.kind = OP_COPY, .src = device_end(src, bytes, 1), .dst = host_end(dst, bytes, 1),
                    .width = bytes, .rows = 1, .slices = 1};
    RETURN(queue_box("cuMemcpyDtoHAsync", &op, stream));
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void *stream) {
    ENTER("cuMemcpyDtoDAsync");
    NEED_INIT();
    struct Op op = {.kind = OP_COPY, .src = device_end(src, bytes, 1), .dst = device_end(dst, bytes, 1),
                    .width = bytes, .rows = 1, .slices = 1};
    RETURN(queue_box("cuMemcpyDtoDAsync", &op, stream));
}

/* cuda.h's CUDA_MEMCPY3D (_v2). */
typedef struct {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    int srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    void *reserved0;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    void *reserved1;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;

/* One side of a 3-D copy as an End at its first byte; 0 when the memory type is unknown. */
static int end_of_3d(int type, const void *host, CUdeviceptr device, size_t x, size_t y, size_t z, size_t pitch,
                     size_t height, struct End *out) {
    size_t first = x + (z * height + y) * pitch;
    if (type == 1) *out = host_end((unsigned char *)host + first, pitch, height);
    else if (type == 2) *out = device_end(device + first, pitch, height);
    else return 0;
    return 1;
}

CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *c, void *stream) {
    ENTER("cuMemcpy3DAsync");
    NEED_INIT();
    struct Op op = {.kind = OP_COPY, .width = c->WidthInBytes, .rows = c->Height, .slices = c->Depth};
    if (c->srcLOD || c->dstLOD || c->srcArray || c->dstArray ||
        !end_of_3d(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch,
                   c->srcHeight, &op.src) ||
        !end_of_3d(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ, c->dstPitch,
                   c->dstHeight, &op.dst)) {
        violation("cuMemcpy3DAsync: only host and device memory (types 1 and 2), no arrays or LODs");
        RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    if ((c->Height > 1 || c->Depth > 1) &&
        (c->srcPitch < c->WidthInBytes || c->dstPitch < c->WidthInBytes || c->srcHeight < c->Height ||
         c->dstHeight < c->Height)) {
        violation("cuMemcpy3DAsync: a pitch narrower than a row, or a height lower than the rows");
        RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    RETURN(queue_box("cuMemcpy3DAsync", &op, stream));
}

static CUresult memset_box(const char *entry, CUdeviceptr at, size_t pitch, uint32_t value, unsigned word,
                           size_t count, size_t height, void *stream) {
    if (at % word) {
        violation("%s: 0x%llx is not aligned to %u bytes", entry, (unsigned long long)at, word);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (height > 1 && (pitch < count * word || pitch % word)) {
        violation("%s: pitch %zu does not fit %zu values of %u bytes", entry, pitch, count, word);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct Op op = {.kind = OP_SET, .dst = device_end(at, height > 1 ? pitch : count * word, 1),
                    .width = count * word, .rows = height, .slices = 1, .word_size = word, .word = value};
    return queue_box(entry, &op, stream);
}

#define MEMSET(name, type, word)                                                              \
    CUresult name##Async(CUdeviceptr at, type value, size_t count, void *stream) {            \
        ENTER(#name "Async");                                                                 \
        NEED_INIT();                                                                          \
        RETURN(memset_box(#name "Async", at, count * word, value, word, count, 1, stream));   \
    }
#define MEMSET2D(name, type, word)                                                                     \
    CUresult name##Async(CUdeviceptr at, size_t pitch, type value, size_t count, size_t rows, void *stream) { \
        ENTER(#name "Async");                                                                          \
        NEED_INIT();                                                                                   \
        RETURN(memset_box(#name "Async", at, pitch, value, word, count, rows, stream));                \
    }
MEMSET(cuMemsetD8, unsigned char, 1)
MEMSET(cuMemsetD16, unsigned short, 2)
MEMSET(cuMemsetD32, unsigned int, 4)
MEMSET2D(cuMemsetD2D8, unsigned char, 1)
MEMSET2D(cuMemsetD2D16, unsigned short, 2)
MEMSET2D(cuMemsetD2D32, unsigned int, 4)

CUresult cuStreamSynchronize(void *stream) {
    ENTER("cuStreamSynchronize");
    NEED_INIT();
    if (!need_context("cuStreamSynchronize")) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    struct CUstream_st *s = stream_of(stream, "cuStreamSynchronize");
    if (!s) RETURN(CUDA_ERROR_INVALID_HANDLE);
    drain(s, UINT64_MAX);
    RETURN(CUDA_SUCCESS);
}

CUresult cuStreamCreate(struct CUstream_st **stream, unsigned flags) {
    ENTER("cuStreamCreate");
    NEED_INIT();
    struct CUctx_st *c = need_context("cuStreamCreate");
    if (!c) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    for (int i = 2; i < MAX_STREAMS; ++i) {
        if (streams[i].alive || streams[i].head) continue;
        streams[i].alive = 1;
        streams[i].ordinal = c->ordinal;
        streams[i].non_blocking = (flags & 1) != 0;
        *stream = &streams[i];
        RETURN(CUDA_SUCCESS);
    }
    RETURN(CUDA_ERROR_OUT_OF_MEMORY);
}

CUresult cuStreamDestroy_v2(struct CUstream_st *stream) {
    ENTER("cuStreamDestroy");
    NEED_INIT();
    struct CUstream_st *s = stream_of(stream, "cuStreamDestroy");
    if (!s) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (s->id < 2) {
        violation("cuStreamDestroy: a default stream cannot be destroyed");
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    }
    drain(s, UINT64_MAX);  /* queued work still completes */
    s->alive = 0;
    RETURN(CUDA_SUCCESS);
}

CUresult cuStreamWaitEvent(void *stream, struct CUevent_st *event, unsigned flags) {
    ENTER("cuStreamWaitEvent");
    NEED_INIT();
    if (!need_context("cuStreamWaitEvent")) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    struct CUstream_st *s = stream_of(stream, "cuStreamWaitEvent");
    struct CUevent_st *e = s ? event_of(event, "cuStreamWaitEvent") : NULL;
    if (!e) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (flags != 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (e->recorded_stream < 0) RETURN(CUDA_SUCCESS);  /* never recorded: nothing to wait for */
    struct Op op = {.kind = OP_WAIT, .wait_stream = e->recorded_stream, .wait_time = e->recorded_time,
                    .entry = "cuStreamWaitEvent"};
    RETURN(enqueue(s, &op));
}

CUresult cuEventCreate(struct CUevent_st **event, unsigned flags) {
    ENTER("cuEventCreate");
    NEED_INIT();
    struct CUctx_st *c = need_context("cuEventCreate");
    if (!c) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    (void)flags;
    for (int i = 0; i < MAX_EVENTS; ++i) {
        if (events[i].alive) continue;
        events[i].alive = 1;
        events[i].ordinal = c->ordinal;
        events[i].recorded_stream = -1;
        *event = &events[i];
        RETURN(CUDA_SUCCESS);
    }
    violation("cuEventCreate: %d events alive (destroy the ones you are done with)", MAX_EVENTS);
    RETURN(CUDA_ERROR_OUT_OF_MEMORY);
}

CUresult cuEventRecord(struct CUevent_st *event, void *stream) {
    ENTER("cuEventRecord");
    NEED_INIT();
    if (!need_context("cuEventRecord")) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    struct CUevent_st *e = event_of(event, "cuEventRecord");
    struct CUstream_st *s = e ? stream_of(stream, "cuEventRecord") : NULL;
    if (!s) RETURN(CUDA_ERROR_INVALID_HANDLE);
    struct Op op = {.kind = OP_RECORD, .entry = "cuEventRecord"};
    CUresult rc = enqueue(s, &op);
    if (rc == CUDA_SUCCESS) {
        e->recorded_stream = s->id;
        e->recorded_time = clock_now;
    }
    RETURN(rc);
}

CUresult cuEventDestroy_v2(struct CUevent_st *event) {
    ENTER("cuEventDestroy");
    NEED_INIT();
    struct CUevent_st *e = event_of(event, "cuEventDestroy");
    if (!e) RETURN(CUDA_ERROR_INVALID_HANDLE);
    e->alive = 0;  /* waits already queued keep what they wait for */
    RETURN(CUDA_SUCCESS);
}

static const struct {
    CUresult code;
    const char *name, *text;
} kErrors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static int error_row(CUresult code) {
    for (size_t i = 0; i < sizeof kErrors / sizeof kErrors[0]; ++i) {
        if (kErrors[i].code == code) return (int)i;
    }
    return -1;
}

CUresult cuGetErrorName(CUresult code, const char **name) {
    int row = error_row(code);
    if (row < 0) return CUDA_ERROR_INVALID_VALUE;
    *name = kErrors[row].name;
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult code, const char **text) {
    int row = error_row(code);
    if (row < 0) return CUDA_ERROR_INVALID_VALUE;
    *text = kErrors[row].text;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* Control API for tests (hb_standin_*)                                                        */
/* ------------------------------------------------------------------------------------------ */

#define CONTROL(...)                  \
    do {                              \
        pthread_mutex_lock(&lock);    \
        __VA_ARGS__;                  \
        pthread_mutex_unlock(&lock);  \
    } while (0)

long hb_standin_live_allocations(void) {
    long n;
    CONTROL(n = live_allocations);
    return n;
}

long hb_standin_total_allocations(void) {
    long n;
    CONTROL(n = total_allocations);
    return n;
}

long hb_standin_context_refs(int ordinal) {
    long n = -1;
    CONTROL(if (ordinal >= 0 && ordinal < MAX_DEVICES) n = contexts[ordinal].refs);
    return n;
}

/* How many violations there were; copies the first `index`-th message into `out`. */
long hb_standin_violations(long index, char *out, size_t size) {
    long n;
    CONTROL(n = violation_count;
            if (out && size && index >= 0 && index < n && index < MAX_VIOLATIONS)
                snprintf(out, size, "%s", violations[index]));
    return n;
}

void hb_standin_clear_violations(void) { CONTROL(violation_count = 0); }

long hb_standin_calls(const char *entry) {
    long n = 0;
    CONTROL(for (int i = 0; i < MAX_ENTRIES && entries[i].name[0]; ++i) {
        if (!strcmp(entries[i].name, entry)) n = entries[i].calls;
    });
    return n;
}

/* The `nth` call from now (1: the next) of `entry` fails with `code`; with `repeat`, every call
 * from then on, until cleared. */
int hb_standin_fail(const char *entry, long nth, int code, int repeat) {
    int ok = 0;
    CONTROL(if (fault_count < MAX_FAULTS && nth >= 1 && strlen(entry) < sizeof faults[0].entry) {
        struct Fault *f = &faults[fault_count++];
        snprintf(f->entry, sizeof f->entry, "%s", entry);
        f->countdown = nth - 1;
        f->code = code;
        f->repeat = repeat;
        ok = 1;
    });
    return ok;
}

void hb_standin_clear_faults(void) { CONTROL(fault_count = 0); }

/* Reads or writes device memory as a kernel would, now (queued work is not waited for). */
static int access_memory(CUdeviceptr at, void *host, size_t bytes, int write) {
    int ok = 0;
    CONTROL(struct Allocation *a = find(at);
            if (a && bytes <= a->base + a->size - at) {
                if (write) memcpy(a->host + (at - a->base), host, bytes);
                else memcpy(host, a->host + (at - a->base), bytes);
                ok = 1;
            });
    return ok;
}
int hb_standin_read(CUdeviceptr at, void *host, size_t bytes) { return access_memory(at, host, bytes, 0); }
int hb_standin_write(CUdeviceptr at, const void *host, size_t bytes) {
    return access_memory(at, (void *)host, bytes, 1);
}

/* Queues a write of `bytes` (copied now) to device memory on `stream`, as a producer's kernel
 * queued there would: it lands when something waits for the stream. */
int hb_standin_enqueue_write(void *stream, CUdeviceptr at, const void *bytes, size_t size) {
    int ok = 0;
    void *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, bytes, size);
    CONTROL(struct CUstream_st *s = stream_of(stream, "hb_standin_enqueue_write");
            struct Op op = {.kind = OP_COPY, .src = host_end(copy, size, 1), .dst = device_end(at, size, 1),
                            .width = size, .rows = 1, .slices = 1, .entry = "hb_standin_enqueue_write"};
            if (s && walk(&op, 0)) ok = enqueue(s, &op) == CUDA_SUCCESS);
    /* the copy is kept for the queued op: a test helper's bytes, never freed (small) */
    if (!ok) free(copy);
    return ok;
}

/* How many ops are queued, over all streams (work nobody waited for yet). */
long hb_standin_pending(void) {
    long n = 0;
    CONTROL(for (int i = 0; i < MAX_STREAMS; ++i) {
        for (struct Op *op = streams[i].head; op; op = op->next) ++n;
    });
    return n;
}
