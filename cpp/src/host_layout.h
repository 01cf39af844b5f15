// Internal: the host block laid out by variable (Executable::host_offset).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "neurenix/compiler.h"

namespace neurenix {

// Places every variable's shares side by side in the host block, variables
// first-fit by their lives (`live`, extended to their receive aliases'
// readers; `live`: each variable's first and last step, -1 for unused), and moves every address the host runs with (fields, byte and
// host copies, shadow regions) from the tile-major layout the compiler built
// to it. Needs everything else resolved: it runs last. Keeps the tile-major
// layout when the block would pass 4 GiB or 1.2 times (and 4 KiB) the
// tile-major one.
void lay_out_by_variable(Executable& exe, const std::vector<std::pair<int64_t, int64_t>>& live);

}  // namespace neurenix
