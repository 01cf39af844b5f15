// Op library: data movement by exchange alone (no vertices).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "neurenix/graph.h"

namespace neurenix::ops {

// Materialises a strided view (transpose, slice, broadcast) as a new tensor.
Tensor rearrange(Graph& g, const View& src, uint32_t ipu, const std::string& name);
// Concatenates along `axis`.
Tensor concat(Graph& g, const std::vector<Tensor>& xs, uint32_t axis, uint32_t ipu, const std::string& name);
// Copies a tensor to another IPU (over the IPU-Links).
Tensor copy_to_ipu(Graph& g, const Tensor& x, uint32_t ipu, const std::string& name);
// Copies `src` into the constant `dst` (same type and element count) at this
// point of the program: state that the next run reads, a trained weight say.
void assign(Graph& g, const Tensor& dst, const Tensor& src, const std::string& name);

}  // namespace neurenix::ops
