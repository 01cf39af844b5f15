// Pooling over the two innermost dimensions of `planes` planes: max or
// average windows. The input window holds, per plane, the input rows listed in
// `rows` (ascending; only the rows the outputs read, so dilated kernels do not
// fetch the rows they skip), each restricted to columns [wi0, wi0 + in_cols).
#pragma once

#include <cstdint>
#include <vector>

#include "neurenix/graph.h"

namespace neurenix {

enum class PoolMode : uint8_t { kMax, kAverage, kAverageIncludePad };

struct PoolWindow {
  uint32_t planes = 0;
  uint32_t in_w = 0, in_h = 0;
  int32_t wi0 = 0;
  uint32_t in_cols = 0;
  std::vector<int32_t> rows;
  uint32_t ho0 = 0, out_rows = 0, wo0 = 0, out_cols = 0;
  uint32_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int32_t pad_top = 0, pad_left = 0;
  uint32_t pad_bottom = 0, pad_right = 0;  // explicit end pads (count_include_pad divisor)
  uint32_t ld_out_plane = 0, ld_out_row = 0;  // in the output field
};

class PoolVertex : public Vertex {
 public:
  PoolVertex(uint32_t tile, Field in, Field out, PoolWindow shape, PoolMode mode, DeviceType dtype);
  const char* name() const override { return "Pool"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 768; }

 protected:
  void list_fields(std::vector<Field*>& out) override;
  void list_refs(std::vector<const FieldRef*>& out) const override;

 private:
  FieldRef in_, out_;
  PoolWindow s_;
  PoolMode mode_;
  DeviceType dtype_;
};

}  // namespace neurenix
