// Op library (PopLibs' role): grouped matrix multiplication,
// [G, M, K] x [G, K, N] -> [G, M, N], and its planner. Like every op it adds
// its variables, vertices, compute sets and exchanges to a graph and appends
// its steps to the program; operands nobody has mapped yet (constants,
// inputs) are laid out the way the plan wants, as PopLibs' createInput
// functions do.
#pragma once

#include <cstdint>
#include <vector>
#include <string>

#include "neurenix/graph.h"
#include "neurenix/ops/split_plan.h"

namespace neurenix::ops {

struct MatMulOptions {
  // Fraction of each tile's memory the plan may use for temporaries
  // (Poplar's availableMemoryProportion).
  double memory_proportion = 0.6;
  DeviceType partials = DeviceType::kFloat32;
  DeviceType out_dtype = DeviceType::kFloat32;
  uint32_t ipu = 0;
  std::string name = "matmul";
  // Float8 operands (both of one float8 type, ipu21 only): their
  // power-of-two scales, float32 scalars, A's then B's. The partials are half.
  std::vector<Tensor> scales;
};

struct MatMulPlan : SplitPlan {
  uint64_t groups = 0, m = 0, n = 0, k = 0;
  std::string describe() const;
};

struct MatMulProblem {
  uint64_t groups, m, n, k;
  DeviceType in_dtype, partials, out_dtype;
  bool a_unmapped, b_unmapped;  // laid out by this plan: no exchange needed
};

// The cheapest plan that keeps temporaries within the memory target and fits
// a tile (with `occupied` bytes already on it), found as search_splits in
// src/ops/planning.h describes: lowering the proportion never gives a plan
// that holds more on a tile. When the target cannot be met, the leanest such
// plan, with meets_memory_target false.
MatMulPlan plan_matmul(const TargetSpec& target, uint32_t tiles, uint64_t bytes_per_tile, const MatMulProblem& p,
                       double memory_proportion, uint64_t occupied = 0);

Tensor matmul(Graph& g, const Tensor& a, const Tensor& b, const MatMulOptions& opts, MatMulPlan* plan_out = nullptr);

}  // namespace neurenix::ops
