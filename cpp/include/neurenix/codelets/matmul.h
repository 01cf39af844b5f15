// Matrix products: one tile's block of C = A . B, on the accumulating matrix
// product unit (operands are row-major blocks with leading dimensions, in
// elements, inside tile-local fields), and the sum of K-split partials.
// Float8 operands (IPU21) are codes read with their scales: a float32 scalar
// field each, holding the operand's power-of-two scale.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "neurenix/graph.h"

namespace neurenix {

struct MatMulBlock {
  uint32_t m = 0, n = 0, k = 0;
  uint32_t lda = 0, ldb = 0, ldc = 0;
};

class MatMulVertex : public Vertex {
 public:
  MatMulVertex(uint32_t tile, Field a, Field b, Field c, MatMulBlock shape, DeviceType in_dtype, DeviceType partials_dtype,
               DeviceType out_dtype);
  // The scale fields of float8 operands, A's and B's (required for them).
  void set_scales(Field a, Field b);
  const char* name() const override { return "MatMul"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 1536; }

 protected:
  void list_fields(std::vector<Field*>& out) override;
  void list_refs(std::vector<const FieldRef*>& out) const override;

 private:
  FieldRef a_, b_, c_;
  MatMulBlock s_;
  DeviceType in_, partials_, out_;
  std::unique_ptr<Float8Scales> scales_;  // float8 operands only
};

// Sums `parts` partial blocks laid out back to back in `in` (each a packed
// rows x cols block) into the rows x cols block of `out` (leading dimension
// `ld_out`), accumulating in the partials type.
class SumPartialsVertex : public Vertex {
 public:
  SumPartialsVertex(uint32_t tile, Field in, Field out, uint32_t parts, uint32_t rows, uint32_t cols, uint32_t ld_out,
                    DeviceType partials_dtype, DeviceType out_dtype);
  // Adds bias[r] to every element of row r (convolution bias).
  void set_bias(Field bias, DeviceType dtype);
  const char* name() const override { return "SumPartials"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 256; }

 protected:
  void list_fields(std::vector<Field*>& out) override;
  void list_refs(std::vector<const FieldRef*>& out) const override;

 private:
  // visit(part, bytes, at, len) for the runs of the partials, part by part
  // in order: `len` elements of part `part` from its element `at`, read at
  // `bytes` (each piece where it is; `n` elements a part).
  template <class Visit>
  void for_each_part_run(const uint8_t* mem, uint64_t n, size_t elem_size, Visit visit) const {
    if (n == 0) return;
    // The runs come in order of `at`: the part and its first element follow
    // them (no division per run).
    uint32_t p = 0;
    uint64_t start = 0;
    for_each_field_run(mem, in_, 0, static_cast<uint64_t>(parts_) * n, elem_size,
                       [&](const uint8_t* src, uint64_t at, uint64_t len) {
                         while (len) {
                           while (at >= start + n) {
                             ++p;
                             start += n;
                           }
                           const uint64_t off = at - start, take = std::min(len, n - off);
                           visit(p, src, off, take);
                           src += take * elem_size;
                           at += take;
                           len -= take;
                         }
                       });
  }
  FieldRef in_, out_;
  uint32_t parts_, rows_, cols_, ld_out_;
  DeviceType partials_, out_dtype_;
  std::unique_ptr<BiasField> bias_;  // a convolution's bias, if it has one
};

}  // namespace neurenix
