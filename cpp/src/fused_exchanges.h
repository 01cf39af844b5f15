// Internal: the compiler's search for fused exchanges (Executable::fused).
#pragma once

#include "neurenix/compiler.h"

namespace neurenix {

// Fills exe's fused exchanges: every exchange step, unstaged, followed in the
// same segment by a compute step, with the tiles of the two merged; a tile
// whose vertices write bytes that a copy to another tile reads (memory a
// dead variable left, say) is listed in fused_late instead, to run its
// vertices after every copy. Needs the byte copies with receive aliases
// removed and the compute schedule.
void fuse_exchanges(Executable& exe);

}  // namespace neurenix
