// Op library: reductions over any subset of axes, in two stages as PopLibs
// does them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "neurenix/codelets/reduce.h"
#include "neurenix/graph.h"

namespace neurenix::ops {

// Reduction over `axes` (any subset); the result drops the reduced axes.
// `final_op`/`scale` post-process each result (mean = sum then scale).
Tensor reduce(Graph& g, const Tensor& x, const std::vector<uint32_t>& axes, ReduceOp op, ReduceFinal final_op,
              double scale, DeviceType out_dtype, uint32_t ipu, const std::string& name);

}  // namespace neurenix::ops
