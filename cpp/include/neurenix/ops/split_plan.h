// How the op library splits a grouped product over tiles (the matmul and
// convolution planners share it).
#pragma once

#include <cstdint>

namespace neurenix::ops {

// G, M, N in parallel, K in parallel with a reduction stage, N also in serial
// passes.
struct SplitPlan {
  uint32_t g_split = 1, m_split = 1, n_split = 1, k_split = 1, serial_split = 1;
  uint64_t temp_bytes = 0;      // planner temporaries on the busiest tile
  uint64_t resident_bytes = 0;  // operands laid out by the plan, and the result
  uint64_t kept_bytes = 0;      // of resident_bytes, the operands (weights): kept all program long
  uint64_t code_bytes = 0;      // estimated vertex state, exchange and control code
  uint64_t cycles = 0;          // estimate for the whole operation
  bool meets_memory_target = true;
  uint32_t tiles_used() const { return g_split * m_split * n_split * k_split; }
  // What the plan puts on its busiest tile while it runs.
  uint64_t total_bytes() const { return temp_bytes + resident_bytes + code_bytes; }
};

}  // namespace neurenix::ops
