// text.h: how the core writes numbers into its messages.
#pragma once

#include <cstdint>
#include <string>

#include "core/axes.h"

namespace hb {

/// A number as decimal text, for messages.
inline std::string str(int64_t v) { return std::to_string(v); }

/// A shape or mins as Python writes a tuple, for messages: "(480, 640)", "(3,)".
inline std::string tuple_text(const Axes &values) {
    std::string out = "(";
    for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + str(values[i]);
    return out + (values.size() == 1 ? ",)" : ")");
}

}  // namespace hb
