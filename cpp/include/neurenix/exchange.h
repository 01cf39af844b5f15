// Lowering data movement to exchange copies.
#pragma once

#include <map>
#include <tuple>
#include <vector>

#include "neurenix/graph.h"

namespace neurenix {

// Appends to exchange `ex` the copies that move every element of `src` into the
// matching element of `dst` (two views of the same shape and element type).
// Runs of elements that are consecutive on both sides become one copy.
void copy_view(Graph& g, uint32_t ex, const View& src, const View& dst);

// copy_view for views that many destinations receive alike (a convolution's
// input window that the tiles of every output-channel block read): the
// first copy of a source view into an exchange is built by copy_view; a
// later one into a destination that, like the first, is one contiguous run
// of one tile repeats the first's copies with their destination moved (the
// same copies copy_view would build, in the same order, without walking the
// source's mapping again).
class RepeatedCopies {
 public:
  void copy(Graph& g, uint32_t ex, const View& src, const View& dst);
  size_t repeated() const { return repeated_; }  // copies made by repeating

 private:
  struct First {
    size_t begin = 0, end = 0;  // its copies in the exchange
    View dst;
    bool one_run = false;  // dst is one contiguous run of one tile, from tile-local element `local`
    uint64_t local = 0;
  };
  std::map<std::tuple<uint32_t, VarId, int64_t, Shape, std::vector<int64_t>>, First> first_;
  size_t repeated_ = 0;
};

// The view of `t` broadcast (numpy rules) to `shape`.
View broadcast_view(const Tensor& t, const Shape& shape);

// A temporary variable with the same tile mapping as `like`, holding `src`
// (a view with like's element count) laid out in like's element order, filled
// by copies appended to `ex`.
Tensor gather_like(Graph& g, uint32_t ex, const View& src, DeviceType dtype, const Tensor& like, const std::string& name);

// A temporary variable with the same tile mapping as `like`, holding `t`
// repeated as a cycle: `t`'s elements are like's last ones (t's shape is
// like's trailing dimensions, after leading ones), so element e of the
// result holds element e % numel(t) of `t` (a bias over the rows of a
// product). One copy per run of `t` a row of a tile's block reads (a run
// within one of t's intervals), not merged into 2-D copies: the tiles that
// hold the same columns receive the same runs, which the exchange
// multicasts; placed with the result's first period (ops::map), a tile
// receives one copy per row of its block.
Tensor gather_cycle(Graph& g, uint32_t ex, const Tensor& t, const Tensor& like, const std::string& name);

// True if `a` and `b` are identical views of the same variable's tile blocks on
// `tile`, so a vertex can read one in place of the other.
bool same_layout_on_tile(const Graph& g, VarId a, VarId b, uint32_t tile);

// Where a row-major block (rows x cols, rows `row_stride` apart in the flat
// index, starting at `flat_start`) sits in `tile`'s memory, if it is stored
// there as regular rows: local index of its first element and the distance
// between rows.
struct LocalBlock {
  uint64_t local;
  uint64_t ld;
};
bool find_local_block(const Graph& g, VarId var, uint32_t tile, uint64_t flat_start, uint64_t rows, uint64_t cols,
                      uint64_t row_stride, LocalBlock* out);

}  // namespace neurenix
