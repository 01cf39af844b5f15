// Internal: the compiler's choice of shadowed temporaries
// (Executable::shadowed).
#pragma once

#include "neurenix/compiler.h"

namespace neurenix {

// Marks the fused exchanges whose temporaries the host keeps in shadow
// regions, moves those copies to the front of each tile's (FusedTile::
// shadow_end), points the reading fields into the regions (Field::shadow)
// and adds the regions to the host block. Needs the fused exchanges, the
// receive aliases and the host copies.
void shadow_temporaries(Executable& exe);

}  // namespace neurenix
