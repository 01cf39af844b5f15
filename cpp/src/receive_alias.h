// The compiler's search for receive aliases (Executable::aliased_copies).
#pragma once

#include <cstdint>
#include <vector>

#include "neurenix/compiler.h"

namespace neurenix {

// The variables a byte copy reads and writes.
struct CopyVars {
  VarId src;
  VarId dst;
};

// Finds the receive aliases of a compiled executable: points the aliased
// fields at their senders and returns, per exchange, which byte copies the
// host can skip. Needs addresses, arena offsets, segments and the schedules
// resolved; `vars[e][k]` are the variables of byte copy k of exchange e.
std::vector<std::vector<uint8_t>> alias_receives(Executable& exe, const std::vector<std::vector<CopyVars>>& vars,
                                                 uint64_t* aliased_fields);

}  // namespace neurenix
