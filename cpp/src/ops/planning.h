// Shared machinery of the matmul and convolution planners (internal header).
//
// Both split a grouped product [G x M x K] . [G x K x N] over tiles: G, M and
// N in parallel, K in parallel with a second reduction stage, and N (output
// columns / channels) optionally in serial passes. A plan is judged by a
// problem-specific cost function that fills in its temporaries, resident
// bytes and cycles.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "neurenix/graph.h"
#include "neurenix/ops/split_plan.h"

namespace neurenix::ops {

inline uint64_t ceil_div(uint64_t a, uint64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

// Candidate split counts for a dimension of size d (each the number of
// non-empty blocks it really produces). With `grain`, blocks are whole
// multiples of it (the last may be shorter), as the AMP consumes channels in
// groups and exchange moves whole runs.
std::vector<uint32_t> split_candidates(uint64_t d, uint64_t max_split, uint64_t grain = 1);

// Judges plans by what they put on their busiest tile while they run
// (temporaries + resident bytes) and by what they keep there for the whole
// program (the operands they lay out). A plan fits a tile if that leaves room
// for code and other fixed costs (1/8 of the tile and 2 KiB, at most half
// the tile). Among the plans that fit, it
// starts from the fastest and, while that plan's temporaries exceed
// `proportion` of a tile, moves to the fastest plan with fewer temporaries
// that holds no more on a tile, all told or kept; so lowering the proportion
// never makes the chosen plan hold more. When the walk cannot reach the
// target, its last plan is used and meets_memory_target is false. `occupied`:
// bytes the busiest tile already holds (constants mapped so far, the
// operation's mapped operands); if the chosen plan would overflow on top of
// them, the fastest plan that fits them and meets the target is used, else
// the smallest that fits them, else the smallest of all.
// `n_grain` / `k_grain`: block granularity of N and K (see split_candidates).
SplitPlan search_splits(uint64_t g, uint64_t m, uint64_t n, uint64_t k, uint32_t tiles, uint64_t bytes_per_tile,
                        double proportion, const std::function<void(SplitPlan&)>& evaluate, uint64_t n_grain = 1,
                        uint64_t k_grain = 1, uint64_t occupied = 0);

// Elements of N block `ni` over all `serial` passes when N is split in
// `n_split` blocks per pass of grain-multiple chunks (as SplitLayout::n_chunk).
uint64_t n_columns(uint64_t n, uint32_t n_split, uint32_t serial, uint32_t ni, uint64_t grain);

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

// What an operation's busiest tile may already hold when it runs, for
// search_splits: the most constants any tile of `ipu` keeps so far, plus, for
// each mapped operand that is not a constant, the most of it on one tile.
uint64_t occupied_bytes(const Graph& g, uint32_t ipu, std::initializer_list<const Tensor*> operands);

// Cycles of the accumulating matrix product unit for m x n outputs of depth k.
uint64_t amp_cycles(const TargetSpec& t, DeviceType in, uint64_t m, uint64_t n, uint64_t k);

// Throws kInvalidArgument unless `proportion` is in (0, 1]; `op` names the
// operation ("matmul 'fc1'").
void check_memory_proportion(const std::string& op, double proportion);
// Warns on the graph when `plan` (found by search_splits) misses the memory
// target.
void warn_unless_meets_target(Graph& g, const std::string& op, const SplitPlan& plan, double proportion);

// One block of a split: indices along G, M, N and K, its tile, and its ranges
// of groups, rows (M) and K. N is covered pass by pass (SplitLayout::n_chunk).
struct SplitBlock {
  uint32_t gi, mi, ni, ki, tile;
  Range gr, mr, kr;
};

// A plan's split of [G x M x K] . [G x K x N] placed on a window of
// plan.tiles_used() consecutive tiles of one IPU (reserved on construction):
// block (gi, mi, ni, ki) is the ((gi * m_split + mi) * n_split + ni) *
// k_split + ki -th of the window. N and K are split in blocks that are whole
// multiples of `grain` (see split_candidates). `kept`, if given, says how many
// bytes block (gi, mi, ni, ki) keeps on its tile for the whole program (the
// weights the operation lays out); the window then starts where they add
// least to what tiles already keep (Graph::reserve_tiles_balanced).
class SplitLayout {
 public:
  using KeptBytes = std::function<uint64_t(uint32_t gi, uint32_t mi, uint32_t ni, uint32_t ki)>;
  SplitLayout(Graph& g, uint32_t ipu, const SplitPlan& plan, uint64_t G, uint64_t M, uint64_t N, uint64_t K,
              uint64_t grain, const KeptBytes& kept = {});

  uint32_t index(uint32_t gi, uint32_t mi, uint32_t ni, uint32_t ki) const {
    return ((gi * plan_.m_split + mi) * plan_.n_split + ni) * plan_.k_split + ki;
  }
  uint32_t tile(uint32_t gi, uint32_t mi, uint32_t ni, uint32_t ki) const {
    return g_.window_tile(ipu_, first_, index(gi, mi, ni, ki));
  }
  Range groups(uint32_t gi) const { return part(G_, plan_.g_split, gi); }
  Range rows(uint32_t mi) const { return part(M_, plan_.m_split, mi); }
  Range k_range(uint32_t ki) const { return part_g(K_, plan_.k_split, ki, grain_); }
  // The N range block ni covers in serial pass `pass`.
  Range n_chunk(uint32_t pass, uint32_t ni) const {
    return part_g(N_, static_cast<uint64_t>(plan_.serial_split) * plan_.n_split, pass * plan_.n_split + ni, grain_);
  }
  // Calls fn(gi, mi, ni, ki, pass) for every block of the split in every
  // serial pass, in (g, m, pass, n, k) order.
  template <typename Fn>
  void each_block(Fn&& fn) const {
    for (uint32_t gi = 0; gi < plan_.g_split; ++gi)
      for (uint32_t mi = 0; mi < plan_.m_split; ++mi)
        for (uint32_t pass = 0; pass < plan_.serial_split; ++pass)
          for (uint32_t ni = 0; ni < plan_.n_split; ++ni)
            for (uint32_t ki = 0; ki < plan_.k_split; ++ki) fn(gi, mi, ni, ki, pass);
  }
  // The blocks with groups, rows and K to work on, in index order.
  const std::vector<SplitBlock>& blocks() const { return blocks_; }
  // Position in blocks() of block (gi, mi, ni, ki); SIZE_MAX if it is empty.
  size_t position(uint32_t gi, uint32_t mi, uint32_t ni, uint32_t ki) const { return position_[index(gi, mi, ni, ki)]; }

 private:
  const Graph& g_;
  uint32_t ipu_;
  SplitPlan plan_;
  uint64_t G_, M_, N_, K_, grain_;
  uint32_t first_;
  std::vector<SplitBlock> blocks_;
  std::vector<size_t> position_;
};

// Over how many of the `holders` tiles that use it an operand block of
// `bytes` is spread: pieces of at least 8 KiB, as every holder gathers every
// piece (more pieces, more exchange code) and small blocks do not pile up.
inline uint64_t spread_count(uint64_t bytes, uint64_t holders) {
  constexpr uint64_t kMinPiece = 8192;
  return std::max<uint64_t>(1, std::min<uint64_t>(holders, bytes / kMinPiece));
}

// Appends intervals that spread the flat element runs `runs` (of one
// variable, in order) over `tiles` in nearly equal shares, in order.
void spread_runs(const std::vector<Range>& runs, const std::vector<uint32_t>& tiles, std::vector<TileInterval>& out);

// A flat temporary made of blocks laid back to back, each on one tile: add()
// them (returning each block's first flat element), then create() it.
class PackedBlocks {
 public:
  uint64_t add(uint32_t tile, uint64_t size) {
    const uint64_t at = total_;
    if (size) intervals_.push_back(TileInterval{at, at + size, tile, 0});
    total_ += size;
    return at;
  }
  uint64_t total() const { return total_; }
  Tensor create(Graph& g, const std::string& name, DeviceType dtype, uint32_t ipu);

 private:
  std::vector<TileInterval> intervals_;
  uint64_t total_ = 0;
};

// The float32 scalar `scale` (a float8 operand's scale) on each of `tiles`:
// in place where a tile holds it, elsewhere a copy received in exchange `ex`.
// Returns one field per tile, in the order of `tiles` (duplicates allowed).
std::vector<Field> scalar_on_tiles(Graph& g, const Tensor& scale, const std::vector<uint32_t>& tiles, uint32_t ex,
                                   const std::string& name, uint32_t ipu);

// Checks a float8 product's operand type and scales: the target must have an
// AMP for float8, and there must be two scales, float32 scalars on `ipu`.
void check_float8_operands(const Graph& g, const std::string& what, DeviceType in, const std::vector<Tensor>& scales,
                           uint32_t ipu);

}  // namespace neurenix::ops
