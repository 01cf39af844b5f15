// Op library: gather with indices known only at run time (embedding lookup).
#pragma once

#include <cstdint>
#include <string>

#include "neurenix/graph.h"

namespace neurenix::ops {

// table [V, D] (rows = V), indices int32 of any shape -> [n, D] with n the
// number of indices. The table is split by columns over tiles; every table
// tile receives all indices and looks up its columns.
Tensor gather_rows(Graph& g, const Tensor& table, const Tensor& indices, uint32_t ipu, const std::string& name);

}  // namespace neurenix::ops
