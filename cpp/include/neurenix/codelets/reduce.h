// The reduction vertex: reduces segments of a field into single elements,
// with the operations the op library's reductions (ops/reduce.h) use.
#pragma once

#include <cstdint>
#include <vector>

#include "neurenix/graph.h"

namespace neurenix {

enum class ReduceOp : uint8_t { kSum, kMax, kMin, kProd, kSumSquare, kSumAbs, kMaxAbs };
// kFloat8Scale: the power-of-two scale of a float8 tensor whose largest
// magnitude is the result (float8_scale_for), for the ONNX float8 format
// whose code is the reduction's `scale` argument.
enum class ReduceFinal : uint8_t { kNone, kScale, kSqrt, kLog, kFloat8Scale };

const char* reduce_op_name(ReduceOp op);

struct ReduceSegment {
  uint64_t in_offset;   // element offset within the input field
  uint64_t len;         // elements reduced
  uint64_t in_stride;   // distance between reduced elements (1 = contiguous)
  uint64_t out_offset;  // element offset within the output field
};

// Reduces segments of `in` into single elements of `out`; consecutive
// segments with the same output offset are combined into that one element.
// With `combine` the inputs are partial results (so sum-of-squares combines
// by summing).
class ReduceVertex : public Vertex {
 public:
  ReduceVertex(uint32_t tile, Field in, DeviceType in_dtype, Field out, DeviceType out_dtype, ReduceOp op, bool combine,
               ReduceFinal final_op, double scale, std::vector<ReduceSegment> segments);
  const char* name() const override { return "Reduce"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 384; }

 protected:
  void list_fields(std::vector<Field*>& out) override;
  void list_refs(std::vector<const FieldRef*>& out) const override;

 private:
  FieldRef in_, out_;
  DeviceType in_dtype_, out_dtype_;
  ReduceOp op_;
  bool combine_;
  ReduceFinal final_;
  double scale_;
  std::vector<ReduceSegment> segs_;
};

}  // namespace neurenix
