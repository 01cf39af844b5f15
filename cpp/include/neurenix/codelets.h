// Vertex types (codelets): the code that runs on one tile, on that tile's
// memory only. Each declares its fields, its arithmetic and its cycle cost.
#pragma once

#include <cstdint>
#include <vector>

#include "neurenix/graph.h"

namespace neurenix {

// ---------------------------------------------------------------------------
// Element-wise expressions (popops::map's expression trees, flattened to
// postfix). Each instruction says whether its float result is rounded to
// half, so one fused expression can mix precisions exactly as the unfused
// operations would.

enum class ExprOpCode : uint16_t {
  // leaves
  kInput,   // arg = operand index
  kConstF,  // imm (float)
  kConstI,  // imm (int32, stored in the float exactly when |v| < 2^24) ; see imm_i
  // unary
  kNeg, kAbs, kRelu, kSigmoid, kTanh, kExp, kLog, kSqrt, kRsqrt, kReciprocal, kErf,
  kGeluErf, kGeluTanh, kFloor, kCeil, kRound, kSign, kSin, kCos, kNot, kIsNan, kIsInf,
  kSquare, kSoftplus, kSoftsign, kCastF32, kCastF16, kCastI32, kCastBool,
  // binary
  kAdd, kSub, kMul, kDiv, kPow, kMin, kMax, kMod, kFmod, kEq, kLt, kLe, kGt, kGe,
  kAnd, kOr, kXor,
  // ternary
  kSelect,  // select(cond, a, b)
  // parametric unary (imm, imm2): clip, leaky relu, elu, hard sigmoid...
  kClamp,      // clamp(x, imm, imm2)
  kLeakyRelu,  // x >= 0 ? x : imm * x
  kElu,        // x >= 0 ? x : imm * (exp(x) - 1)
  kHardSigmoid,// max(0, min(1, imm * x + imm2))
  kCount
};

struct ExprInstr {
  ExprOpCode op;
  uint32_t arg = 0;      // operand index for kInput
  double imm = 0.0;      // constant / parameter
  double imm2 = 0.0;     // second parameter
  bool half = false;     // round this instruction's float result to binary16
};

// Marks every instruction of `expr` as half precision (for graphs built by hand).
std::vector<ExprInstr> in_half(std::vector<ExprInstr> expr);

// Kinds of values inside an expression.
enum class ValueKind : uint8_t { kFloat, kInt, kBool };

// Checks an expression (postfix) against operand types and returns the kind
// of its result; throws kInvalidArgument for a malformed expression.
ValueKind check_expression(const std::vector<ExprInstr>& expr, const std::vector<DType>& operand_types);
const char* expr_op_name(ExprOpCode op);
// Cycles per element (tile throughput) of one instruction.
double expr_op_cycles(ExprOpCode op, bool half);

class MapVertex : public Vertex {
 public:
  // One operand: a field of `count` elements, or a single element broadcast
  // (`scalar`).
  struct Operand {
    Field field;
    DType dtype;
    bool scalar;
  };
  MapVertex(uint32_t tile, std::shared_ptr<const std::vector<ExprInstr>> expr, std::vector<Operand> operands,
            Field out, DType out_dtype);
  const char* name() const override { return "Map"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 512; }

 protected:
  void list_fields(std::vector<Field*>& out) override;

 private:
  std::shared_ptr<const std::vector<ExprInstr>> expr_;
  std::vector<Operand> operands_;
  Field out_;
  DType out_dtype_;
};

// Fills a field with one value.
class FillVertex : public Vertex {
 public:
  FillVertex(uint32_t tile, Field out, DType dtype, double value);
  const char* name() const override { return "Fill"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 64; }

 protected:
  void list_fields(std::vector<Field*>& out) override { out.push_back(&out_); }

 private:
  Field out_;
  DType dtype_;
  double value_;
};

// ---------------------------------------------------------------------------
// Matrix products: one tile's block of C = A . B, on the accumulating matrix
// product unit. Operands are row-major blocks with leading dimensions (in
// elements) inside tile-local fields.

struct MatMulBlock {
  uint32_t m = 0, n = 0, k = 0;
  uint32_t lda = 0, ldb = 0, ldc = 0;
};

class MatMulVertex : public Vertex {
 public:
  MatMulVertex(uint32_t tile, Field a, Field b, Field c, MatMulBlock shape, DType in_dtype, DType partials_dtype,
               DType out_dtype);
  const char* name() const override { return "MatMul"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 1536; }

 protected:
  void list_fields(std::vector<Field*>& out) override;

 private:
  Field a_, b_, c_;
  MatMulBlock s_;
  DType in_, partials_, out_;
};

// Sums `parts` partial blocks laid out back to back in `in` (each a packed
// rows x cols block) into the rows x cols block of `out` (leading dimension
// `ld_out`), accumulating in the partials type.
class SumPartialsVertex : public Vertex {
 public:
  SumPartialsVertex(uint32_t tile, Field in, Field out, uint32_t parts, uint32_t rows, uint32_t cols, uint32_t ld_out,
                    DType partials_dtype, DType out_dtype);
  // Adds bias[r] to every element of row r (convolution bias).
  void set_bias(Field bias, DType dtype);
  const char* name() const override { return "SumPartials"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 256; }

 protected:
  void list_fields(std::vector<Field*>& out) override;

 private:
  Field in_, out_;
  uint32_t parts_, rows_, cols_, ld_out_;
  DType partials_, out_dtype_;
  bool has_bias_ = false;
  Field bias_;
  DType bias_dtype_ = DType::kFloat32;
};

// ---------------------------------------------------------------------------
// Convolution: one tile's block of a 2-D convolution (one group, one image
// segment): out[co][r][wo] for `rows` output rows starting at `ho0`, from an
// input window holding rows [hi0, hi0 + in_rows) of `cin` channels (each row
// `in_w` wide; rows outside the window are padding) and weights
// [cout][cin][kh][kw] (leading dimension `ldw` between output channels).

struct ConvWindow {
  uint32_t cin = 0, cout = 0;
  uint32_t in_w = 0, in_h = 0;      // full input width and height
  int32_t hi0 = 0;                  // first input row held
  uint32_t in_rows = 0;             // input rows held
  uint32_t ho0 = 0, rows = 0, out_w = 0;
  uint32_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int32_t pad_top = 0, pad_left = 0;
  uint32_t ldw = 0;                 // between output channels in the weight field
  uint32_t ld_out = 0;              // between output channels in the output field
};

class ConvVertex : public Vertex {
 public:
  ConvVertex(uint32_t tile, Field in, Field weights, Field out, ConvWindow shape, DType in_dtype, DType partials_dtype,
             DType out_dtype);
  void set_bias(Field bias, DType dtype);
  const char* name() const override { return "Conv"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 2048; }

 protected:
  void list_fields(std::vector<Field*>& out) override;

 private:
  Field in_, w_, out_;
  ConvWindow s_;
  DType in_dtype_, partials_, out_dtype_;
  bool has_bias_ = false;
  Field bias_;
  DType bias_dtype_ = DType::kFloat32;
};

// ---------------------------------------------------------------------------
// Pooling over the two innermost dimensions of `planes` planes: max or
// average windows. The input window holds, per plane, the input rows listed in
// `rows` (ascending; only the rows the outputs read, so dilated kernels do not
// fetch the rows they skip), each restricted to columns [wi0, wi0 + in_cols).

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
  PoolVertex(uint32_t tile, Field in, Field out, PoolWindow shape, PoolMode mode, DType dtype);
  const char* name() const override { return "Pool"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 768; }

 protected:
  void list_fields(std::vector<Field*>& out) override;

 private:
  Field in_, out_;
  PoolWindow s_;
  PoolMode mode_;
  DType dtype_;
};

// ---------------------------------------------------------------------------
// Dynamic gather (embedding lookup): out[i][c] = table[index[i]][c] for a
// column slice of the table held by this tile (rows x cols, leading dimension
// ld). Negative indices count from the end; out-of-range indices give zeros.

class GatherVertex : public Vertex {
 public:
  GatherVertex(uint32_t tile, Field table, Field indices, Field out, uint32_t rows, uint32_t cols, uint32_t ld,
               DType dtype);
  const char* name() const override { return "Gather"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 384; }

 protected:
  void list_fields(std::vector<Field*>& out) override;

 private:
  Field table_, idx_, out_;
  uint32_t rows_, cols_, ld_;
  DType dtype_;
};

// Float products shared by the codelets (and their tests).
//
// gemm_f32: C[m x n] = A . B with row-major leading dimensions; adds into C
// when `accumulate`.
// B may also be given packed: K x N in column panels of `panel` columns
// (gemm_panel(N) picks the width), element (k, j) at
// gemm_packed_index(panel, K, k, j), zero-padded to whole panels. The
// convolution vertex writes its im2col matrix in that layout directly.
uint32_t gemm_panel(uint32_t n);
inline size_t gemm_packed_index(uint32_t panel, uint32_t k_total, uint32_t k, uint32_t j) {
  return (static_cast<size_t>(j / panel) * k_total + k) * panel + j % panel;
}
size_t gemm_packed_size(uint32_t panel, uint32_t k, uint32_t n);
void gemm_pack_b(uint32_t panel, const float* b, uint32_t ldb, uint32_t k, uint32_t n, float* packed);
// `packed_b` points at row k0 of a packed matrix of `ktot` rows (so a K range
// of it can be multiplied alone).
void gemm_f32_packed(uint32_t panel, const float* a, uint32_t lda, const float* packed_b, uint32_t ktot, float* c,
                     uint32_t m, uint32_t n, uint32_t k, uint32_t ldc, bool accumulate);
// Unpacked B read in place (rows `ldb` apart), A's k-th element of row r at
// a[r * lda + k * a_kstride]. With `readable_tail`, every row of B may be read
// up to a whole panel (gemm_panel(n) floats) past its n-th element (the
// values there are ignored); otherwise a partial last panel is copied.
void gemm_f32_strided(const float* a, uint32_t lda, uint32_t a_kstride, const float* b, uint32_t ldb, float* c, uint32_t m,
                      uint32_t n, uint32_t k, uint32_t ldc, bool accumulate, bool readable_tail);
void gemm_f32(const float* a, const float* b, float* c, uint32_t m, uint32_t n, uint32_t k, uint32_t lda, uint32_t ldb,
              uint32_t ldc, bool accumulate);

// ---------------------------------------------------------------------------
// Reductions.

enum class ReduceOp : uint8_t { kSum, kMax, kMin, kProd, kSumSquare, kSumAbs };
enum class ReduceFinal : uint8_t { kNone, kScale, kSqrt, kLog };

const char* reduce_op_name(ReduceOp op);

struct ReduceSegment {
  uint64_t in_offset;   // element offset within the input field
  uint64_t len;         // elements reduced
  uint64_t in_stride;   // distance between reduced elements (1 = contiguous)
  uint64_t out_offset;  // element offset within the output field
};

// Reduces segments of `in` into single elements of `out`. With `combine` the
// inputs are partial results (so sum-of-squares combines by summing).
class ReduceVertex : public Vertex {
 public:
  ReduceVertex(uint32_t tile, Field in, DType in_dtype, Field out, DType out_dtype, ReduceOp op, bool combine,
               ReduceFinal final_op, double scale, std::vector<ReduceSegment> segments);
  const char* name() const override { return "Reduce"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 384; }

 protected:
  void list_fields(std::vector<Field*>& out) override;

 private:
  Field in_, out_;
  DType in_dtype_, out_dtype_;
  ReduceOp op_;
  bool combine_;
  ReduceFinal final_;
  double scale_;
  std::vector<ReduceSegment> segs_;
};

// Reads element i of a field of `dtype` at `base` as a double / writes one.
double load_element(const uint8_t* base, DType dtype, uint64_t i);
void store_element(uint8_t* base, DType dtype, uint64_t i, double v);

}  // namespace neurenix
