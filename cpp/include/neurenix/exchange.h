// Lowering data movement to exchange copies.
#pragma once

#include "neurenix/graph.h"

namespace neurenix {

// Appends to exchange `ex` the copies that move every element of `src` into the
// matching element of `dst` (two views of the same shape and element type).
// Runs of elements that are consecutive on both sides become one copy.
void copy_view(Graph& g, uint32_t ex, const View& src, const View& dst);

// The view of `t` broadcast (numpy rules) to `shape`.
View broadcast_view(const Tensor& t, const Shape& shape);

// A temporary variable with the same tile mapping as `like`, holding `src`
// (a view with like's element count) laid out in like's element order, filled
// by copies appended to `ex`.
Tensor gather_like(Graph& g, uint32_t ex, const View& src, DeviceType dtype, const Tensor& like, const std::string& name);

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
