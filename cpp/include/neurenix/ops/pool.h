// Op library: max / average pooling over the two innermost dimensions of
// [..., H, W]. Output rows are spread over tiles (split in column chunks when
// there are fewer rows than tiles); each tile receives the input rows its
// windows read by exchange.
#pragma once

#include <cstdint>
#include <string>

#include "neurenix/codelets/pool.h"
#include "neurenix/graph.h"

namespace neurenix::ops {

struct PoolOptions {
  PoolMode mode = PoolMode::kMax;
  uint32_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  uint32_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  uint32_t out_h = 0, out_w = 0;  // given by the caller (ceil_mode decides them)
  uint32_t ipu = 0;
  std::string name = "pool";
};

Tensor pool(Graph& g, const Tensor& x, const PoolOptions& o);

}  // namespace neurenix::ops
