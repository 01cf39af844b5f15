// Op library: 2-D convolution, NCHW: x [N, C, H, W], weights
// [Co, C/groups, kh, kw], optional bias [Co] -> [N, Co, Ho, Wo]. Planned like
// a grouped matmul (G = groups, M = output rows N*Ho, N = output channels per
// group, K = input channels per group) with the same memory target; each tile
// receives the input rows its output rows need (halo included) by exchange.
#pragma once

#include <cstdint>
#include <string>

#include <vector>
#include <string>

#include "neurenix/graph.h"
#include "neurenix/ops/split_plan.h"

namespace neurenix::ops {

struct ConvOptions {
  uint32_t groups = 1;
  uint32_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  uint32_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  double memory_proportion = 0.6;  // as MatMulOptions::memory_proportion
  DeviceType partials = DeviceType::kFloat32;
  DeviceType out_dtype = DeviceType::kFloat32;
  uint32_t ipu = 0;
  std::string name = "conv";
  // Float8 input and weights (one float8 type, ipu21 only): their
  // power-of-two scales, float32 scalars, the input's then the weights';
  // partials and the bias are half.
  std::vector<Tensor> scales;
};

struct ConvPlan : SplitPlan {
  uint64_t batch = 0, in_channels = 0, out_channels = 0, groups = 0, out_h = 0, out_w = 0, kernel = 0;
  std::string describe() const;
};

Tensor conv(Graph& g, const Tensor& x, const Tensor& w, const Tensor* bias, const ConvOptions& o,
            ConvPlan* plan_out = nullptr);

}  // namespace neurenix::ops
