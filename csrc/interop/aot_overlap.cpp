// aot_overlap.cpp: the outputs a call refuses for the memory they share (aot_call.h's
// refuse_overlapping_outputs()): an output whose elements share memory, an output partly over
// an input, two outputs over each other. Halide writes each element of an output once, in its
// schedule's order (in parallel too), and reads its inputs where it pleases: over shared memory
// the last write wins, or a read finds a value already overwritten, without a word. PyTorch
// refuses the same outputs for its in-place and out= operations. The geometry is core/overlap's.
#include <optional>

#include "core/errors.h"
#include "core/overlap.h"
#include "interop/aot_call.h"

namespace hb {
namespace {

ByteView byte_view(const Buffer &b) {
    return ByteView{b.data(), b.shape().data(), b.strides().data(), b.shape().size(), b.dtype().itemsize};
}

/// Buffer argument i's memory: a Buffer's view, or borrowed memory's description.
ByteView byte_view(const CallScratch &s, size_t i) {
    return s.buffers[i] ? byte_view(*s.buffers[i]) : s.borrowed(i)->bytes();
}

/// Whether buffer argument i was given (a Buffer, or borrowed memory).
bool given(const CallScratch &s, size_t i) { return s.buffers[i] || s.borrowed(i); }

/// Memory a storage allocated for itself (no other storage's, its views never showing one element
/// twice); borrowed memory is not.
bool own_memory(const CallScratch &s, size_t i) { return s.buffers[i] && s.buffers[i]->memory_of_its_own(); }

/// " may" where the check could not tell (Overlap::maybe), for a message: "<they> may share".
const char *may(Overlap o) { return o == Overlap::maybe ? " may" : ""; }
/// Why they may, where the check could not tell, for a message.
const char *undecided(Overlap o) {
    return o == Overlap::maybe ? " (the strides are too intricate to tell within the check's limit)" : "";
}

/// Output i's elements sharing memory (its axes do not nest in C order: decided exactly).
void refuse_shared_elements(const AotPipeline &p, const CallScratch &s, size_t i) {
    Overlap self = internal_overlap(byte_view(s, i));
    if (self != Overlap::none)
        throw ValueError(where_of(p, p.metadata().arguments[i]) + ": elements of the output" + may(self) +
                         " share memory (an expanded or overlapping view)" + undecided(self) +
                         ", so their results would overwrite each other; pass an output whose elements are "
                         "distinct (x.contiguous(), numpy.empty_like(x)), or leave the output out to have one "
                         "allocated");
}

/// Output i and buffer argument j sharing memory (their spans meet: decided exactly). The very
/// same view as an input is a call in place, allowed; two outputs are checked once, from the first.
void refuse_sharing(const AotPipeline &p, const CallScratch &s, size_t i, size_t j) {
    const halide_filter_metadata_t &m = p.metadata();
    bool output = m.arguments[j].kind == halide_argument_kind_output_buffer;
    if (output && j < i) return;
    Overlap both = views_overlap(byte_view(s, i), byte_view(s, j));
    if (both == Overlap::none || (both == Overlap::same && !output)) return;
    if (output)
        throw ValueError(p.name() + "(): outputs '" + m.arguments[i].name + "' and '" + m.arguments[j].name + "'" +
                         may(both) + " share memory" + undecided(both) +
                         ", so the results of one would overwrite the other's; pass outputs that share no memory "
                         "(numpy.empty_like(x)), or leave them out to have them allocated");
    throw ValueError(where_of(p, m.arguments[i]) + ": the output" + (may(both)[0] ? " may share" : " shares") +
                     " memory with input '" + m.arguments[j].name + "'" + undecided(both) +
                     " without being the very same view, so the pipeline could read elements it has already "
                     "overwritten; pass an output that shares no memory with the inputs (numpy.empty_like(x), "
                     "x.clone()), or the input itself to compute in place");
}

}  // namespace

void refuse_overlapping_outputs(const AotPipeline &p, const CallScratch &s) {
    for (size_t i : s.outputs) {
        if (!given(s, i)) continue;  // allocated by the call: its own memory
        // Memory allocated for a storage is no other storage's, and its views never show one
        // element twice: only the same storage, or borrowed memory, can meet (no geometry asked).
        bool own = own_memory(s, i);
        bool nested = true;
        std::optional<AddressSpan> span;
        if (!own) {
            span = address_span(byte_view(s, i), nested);
            // Axes nested in C order (most outputs' are) have distinct elements: no search to make.
            if (!nested) refuse_shared_elements(p, s, i);
        }
        for (size_t j = 0; j < s.buffers.size(); ++j) {
            if (!given(s, j) || j == i ||
                (own && own_memory(s, j) && !s.buffers[i]->shares_storage_with(*s.buffers[j])))
                continue;
            if (!span) span = address_span(byte_view(s, i), nested);
            // Most calls end here: each buffer in memory of its own.
            if (!spans_apart(*span, address_span(byte_view(s, j), nested))) refuse_sharing(p, s, i, j);
        }
    }
}

}  // namespace hb
