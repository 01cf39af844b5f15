// Shared machinery of the matmul and convolution planners (internal header).
//
// Both split a grouped product [G x M x K] . [G x K x N] over tiles: G, M and
// N in parallel, K in parallel with a second reduction stage, and N (output
// columns / channels) optionally in serial passes. A plan is judged by a
// problem-specific cost function that fills in its temporaries, resident
// bytes and cycles.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "neurenix/ops.h"

namespace neurenix::ops {

inline uint64_t ceil_div(uint64_t a, uint64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

// Candidate split counts for a dimension of size d (each the number of
// non-empty blocks it really produces). With `grain`, blocks are whole
// multiples of it (the last may be shorter), as the AMP consumes channels in
// groups and exchange moves whole runs.
std::vector<uint32_t> split_candidates(uint64_t d, uint64_t max_split, uint64_t grain = 1);

// Among plans whose temporaries meet `proportion` of a tile (and which fit
// the tile with what they keep resident), the fastest; failing that, the
// plan with the fewest temporaries that fits; failing that, the smallest.
// The returned plan's meets_memory_target says which case applied.
// `n_grain` / `k_grain`: block granularity of N and K (see split_candidates).
SplitPlan search_splits(uint64_t g, uint64_t m, uint64_t n, uint64_t k, uint32_t tiles, uint64_t bytes_per_tile,
                        double proportion, const std::function<void(SplitPlan&)>& evaluate, uint64_t n_grain = 1,
                        uint64_t k_grain = 1);

// Block length when `total` is split in `parts` blocks that are whole
// multiples of `grain` (as split_candidates makes them).
inline uint64_t grain_block(uint64_t total, uint64_t parts, uint64_t grain) {
  uint64_t b = (total + parts - 1) / parts;
  if (grain > 1 && total > grain) b = (b + grain - 1) / grain * grain;
  return b;
}

// [begin, end) ranges of block i when `total` is split in `parts`.
struct Range {
  uint64_t begin, end;
  uint64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
};
inline Range part(uint64_t total, uint64_t parts, uint64_t i) {
  uint64_t block = ceil_div(total, parts);
  uint64_t b = i * block < total ? i * block : total, e = (i + 1) * block < total ? (i + 1) * block : total;
  return {b, e};
}
// Block i of `total` split in `parts` grain-multiple blocks (may be empty).
inline Range part_g(uint64_t total, uint64_t parts, uint64_t i, uint64_t grain) {
  const uint64_t block = grain_block(total, parts, grain);
  const uint64_t b = i * block < total ? i * block : total, e = (i + 1) * block < total ? (i + 1) * block : total;
  return {b, e};
}
inline Range sub(Range r, uint64_t parts, uint64_t i) {
  Range p = part(r.size(), parts, i);
  return {r.begin + p.begin, r.begin + p.end};
}

// Cycles of the accumulating matrix product unit for m x n outputs of depth k.
uint64_t amp_cycles(const TargetSpec& t, DType in, DType partials, uint64_t m, uint64_t n, uint64_t k);

}  // namespace neurenix::ops
