// Element-wise expressions (popops::map's expression trees, flattened to
// postfix). Each instruction says whether its float result is rounded to
// half, so one fused expression can mix precisions exactly as the unfused
// operations would. The map vertex (codelets/map.h) evaluates them; the op
// library checks them (ops/map.h).
#pragma once

#include <cstdint>
#include <vector>

#include "neurenix/device_type.h"

namespace neurenix {

enum class ExprOpCode : uint16_t {
  // leaves
  kInput,   // arg = operand index
  kConstF,  // imm (float)
  kConstI,  // imm (an int32; exact in the double)
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

// Kinds of values inside an expression.
enum class ValueKind : uint8_t { kFloat, kInt, kBool };

// Checks an expression (postfix) against operand types and returns the kind
// of its result; throws kInvalidArgument for a malformed expression.
ValueKind check_expression(const std::vector<ExprInstr>& expr, const std::vector<DeviceType>& operand_types);
const char* expr_op_name(ExprOpCode op);
// Cycles per element (tile throughput) of one instruction.
double expr_op_cycles(ExprOpCode op, bool half);

// How many values an instruction pops: leaves push one and pop none.
enum class ExprArity : uint8_t { kLeaf, kUnary, kBinary, kTernary };
ExprArity expr_arity(ExprOpCode op);
// The kind of value an element of `type` is inside an expression.
ValueKind value_kind(DeviceType type);

}  // namespace neurenix
