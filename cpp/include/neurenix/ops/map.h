// Op library: element-wise maps of an expression (expr.h) and fills.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "neurenix/expr.h"
#include "neurenix/graph.h"

namespace neurenix::ops {

// Element-wise map of an expression over operands broadcast (numpy rules) to
// `out_shape`. The result takes the tile mapping of an operand of its size.
Tensor map(Graph& g, const std::vector<ExprInstr>& expr, const std::vector<Tensor>& inputs, DeviceType out_dtype,
           const Shape& out_shape, uint32_t ipu, const std::string& name);

// Fills a new tensor with one value (used for padding borders and the like).
Tensor fill(Graph& g, DeviceType dtype, const Shape& shape, double value, uint32_t ipu, const std::string& name);

}  // namespace neurenix::ops
