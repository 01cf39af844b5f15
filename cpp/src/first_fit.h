// Internal: first-fit placement of blocks with lifetimes, in program order
// (a tile's variables in its memory; the variables in the host block).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "neurenix/graph.h"

namespace neurenix {

// Blocks (a variable's share of a tile) start on 8-byte boundaries.
constexpr uint64_t kAlign = 8;
inline uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// The steps a variable is used in, first to last (-1: never).
struct LiveRange {
  int64_t first = -1;
  int64_t last = -1;
  void touch(int64_t s) {
    if (first < 0 || s < first) first = s;
    if (s > last) last = s;
  }
};

// Blocks are placed in order of their first step: release_before(first)
// frees the blocks whose last step is before it, then place() puts the new
// block at the lowest offset where it fits between the live ones.
struct FirstFit {
  struct Block {
    VarId var;
    uint64_t offset;
    uint64_t size;
    int64_t end;  // last step
  };
  std::vector<Block> active;  // sorted by offset
  uint64_t hwm = 0;
  std::vector<std::pair<VarId, uint64_t>> at_peak;  // live blocks when the high-water mark was set

  void release_before(int64_t step) {
    active.erase(std::remove_if(active.begin(), active.end(), [&](const Block& b) { return b.end < step; }), active.end());
  }
  uint64_t place(VarId var, uint64_t size, int64_t end) {
    uint64_t at = 0;
    size_t pos = 0;
    for (; pos < active.size(); ++pos) {
      if (active[pos].offset >= at + size) break;
      at = std::max(at, active[pos].offset + active[pos].size);
    }
    active.insert(active.begin() + static_cast<std::ptrdiff_t>(pos), Block{var, at, size, end});
    if (at + size > hwm) {
      hwm = at + size;
      at_peak.clear();
      for (const Block& b : active) at_peak.push_back({b.var, b.size});
    }
    return at;
  }
};

}  // namespace neurenix
