// The op library (PopLibs' role): each function adds the variables, vertices,
// compute sets and exchanges of one operation to a graph and appends its steps
// to the program. Operands may be unmapped (constants and inputs); the first
// operation that uses them lays them out the way it wants, as PopLibs'
// createInput functions do.
#pragma once

#include <string>
#include <vector>

#include "neurenix/codelets.h"
#include "neurenix/graph.h"

namespace neurenix::ops {

// ---------------------------------------------------------------------------
// Matrix multiplication, grouped: [G, M, K] x [G, K, N] -> [G, M, N].

struct MatMulOptions {
  // Fraction of each tile's memory the plan may use for temporaries
  // (Poplar's availableMemoryProportion).
  double available_memory_proportion = 0.6;
  DType partials = DType::kFloat32;
  DType out_dtype = DType::kFloat32;
  uint32_t ipu = 0;
  std::string name = "matmul";
};

// How a grouped product is split over tiles: G, M, N in parallel, K in
// parallel with a reduction stage, N also in serial passes.
struct SplitPlan {
  uint32_t g_split = 1, m_split = 1, n_split = 1, k_split = 1, serial_split = 1;
  uint64_t temp_bytes = 0;      // planner temporaries on the busiest tile
  uint64_t resident_bytes = 0;  // operands laid out by the plan, and the result
  uint64_t cycles = 0;          // estimate for the whole operation
  bool meets_memory_target = true;
  uint32_t tiles_used() const { return g_split * m_split * n_split * k_split; }
};

struct MatMulPlan : SplitPlan {
  uint64_t groups = 0, m = 0, n = 0, k = 0;
  std::string describe() const;
};

struct MatMulProblem {
  uint64_t groups, m, n, k;
  DType in_dtype, partials, out_dtype;
  bool a_unmapped, b_unmapped;  // laid out by this plan: no exchange needed
};

// The cheapest plan that keeps temporaries within the memory target, or the
// smallest-memory plan when none does.
MatMulPlan plan_matmul(const TargetSpec& target, uint32_t tiles, uint64_t bytes_per_tile, const MatMulProblem& p,
                       double available_memory_proportion);

Tensor matmul(Graph& g, const Tensor& a, const Tensor& b, const MatMulOptions& opts, MatMulPlan* plan_out = nullptr);

// ---------------------------------------------------------------------------
// 2-D convolution, NCHW: x [N, C, H, W], weights [Co, C/groups, kh, kw],
// optional bias [Co] -> [N, Co, Ho, Wo]. Planned like a grouped matmul
// (G = groups, M = output rows N*Ho, N = output channels per group, K = input
// channels per group) with the same memory target; each tile receives the
// input rows its output rows need (halo included) by exchange.

struct ConvOptions {
  uint32_t groups = 1;
  uint32_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  uint32_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  double available_memory_proportion = 0.6;
  DType partials = DType::kFloat32;
  DType out_dtype = DType::kFloat32;
  uint32_t ipu = 0;
  std::string name = "conv";
};

struct ConvPlan : SplitPlan {
  uint64_t batch = 0, in_channels = 0, out_channels = 0, groups = 0, out_h = 0, out_w = 0, kernel = 0;
  std::string describe() const;
};

Tensor conv(Graph& g, const Tensor& x, const Tensor& w, const Tensor* bias, const ConvOptions& o,
            ConvPlan* plan_out = nullptr);

// Max / average pooling over the two innermost dimensions of [..., H, W].
struct PoolOptions {
  PoolMode mode = PoolMode::kMax;
  uint32_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  uint32_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  uint32_t out_h = 0, out_w = 0;  // given by the caller (ceil_mode decides them)
  uint32_t ipu = 0;
  std::string name = "pool";
};
Tensor pool(Graph& g, const Tensor& x, const PoolOptions& o);

// Gather with indices known only at run time: table [V, D] (rows = V),
// indices int32 of any shape -> [..., D]. The table is split by columns over
// tiles; every table tile receives all indices and looks up its columns.
Tensor gather_rows(Graph& g, const Tensor& table, const Tensor& indices, uint32_t ipu, const std::string& name);

// ---------------------------------------------------------------------------
// Element-wise map of an expression over operands broadcast (numpy rules) to
// `out_shape`.
Tensor map(Graph& g, const std::vector<ExprInstr>& expr, const std::vector<Tensor>& inputs, DType out_dtype,
           const Shape& out_shape, uint32_t ipu, const std::string& name);

// Fills a new tensor with one value (used for padding borders and the like).
Tensor fill(Graph& g, DType dtype, const Shape& shape, double value, uint32_t ipu, const std::string& name);

// ---------------------------------------------------------------------------
// Reduction over `axes` (any subset); the result drops the reduced axes.
// `final_op`/`scale` post-process each result (mean = sum then scale).
Tensor reduce(Graph& g, const Tensor& x, const std::vector<uint32_t>& axes, ReduceOp op, ReduceFinal final_op,
              double scale, DType out_dtype, uint32_t ipu, const std::string& name);

// ---------------------------------------------------------------------------
// Data movement.

// Materialises a strided view (transpose, slice, broadcast) as a new tensor.
Tensor rearrange(Graph& g, const View& src, uint32_t ipu, const std::string& name);
// Concatenates along `axis`.
Tensor concat(Graph& g, const std::vector<Tensor>& xs, uint32_t axis, uint32_t ipu, const std::string& name);
// Copies a tensor to another IPU (over the IPU-Links).
Tensor copy_to_ipu(Graph& g, const Tensor& x, uint32_t ipu, const std::string& name);

}  // namespace neurenix::ops
