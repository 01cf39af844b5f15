// Dynamic gather (embedding lookup): out[i][c] = table[index[i]][c] for a
// column slice of the table held by this tile (rows x cols, leading dimension
// ld). Negative indices count from the end; out-of-range indices give zeros.
#pragma once

#include <cstdint>
#include <vector>

#include "neurenix/graph.h"

namespace neurenix {

class GatherVertex : public Vertex {
 public:
  GatherVertex(uint32_t tile, Field table, Field indices, Field out, uint32_t rows, uint32_t cols, uint32_t ld,
               DeviceType dtype);
  const char* name() const override { return "Gather"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 384; }

 protected:
  void list_fields(std::vector<Field*>& out) override;
  void list_refs(std::vector<const FieldRef*>& out) const override;

 private:
  FieldRef table_, idx_, out_;
  uint32_t rows_, cols_, ld_;
  DeviceType dtype_;
};

}  // namespace neurenix
