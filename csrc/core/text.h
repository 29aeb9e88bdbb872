// text.h: how the core writes numbers into its messages.
#pragma once

#include <cstdint>
#include <string>

namespace hb {

/// A number as decimal text, for messages.
inline std::string str(int64_t v) { return std::to_string(v); }

}  // namespace hb
