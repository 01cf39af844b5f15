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

// The operations are listed once, in expr_ops.def.
enum class ExprOpCode : uint16_t {
#define NX_EXPR_OP(name, text, arity) k##name,
#include "neurenix/expr_ops.def"
#undef NX_EXPR_OP
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
