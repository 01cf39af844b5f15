// The element-wise expression IR: operation names, costs and type checking.
#include "neurenix/expr.h"

#include <string>

#include "neurenix/error.h"

namespace neurenix {
namespace {

const char* kind_name(ValueKind k) {
  return k == ValueKind::kFloat ? "float" : k == ValueKind::kInt ? "int" : "bool";
}

[[noreturn]] void bad(ExprOpCode op, const std::string& why) {
  fail(ErrorCode::kInvalidArgument, std::string("malformed element-wise expression at ") + expr_op_name(op) + ": " + why);
}

// Result kind of one instruction given its operand kinds.
ValueKind result_kind(const ExprInstr& ins, const ValueKind* in) {
  auto need = [&](ValueKind k, size_t i) {
    if (in[i] != k) bad(ins.op, std::string("operand ") + std::to_string(i) + " is " + kind_name(in[i]) + ", needs " + kind_name(k));
  };
  auto numeric = [&](size_t i) {
    if (in[i] == ValueKind::kBool) bad(ins.op, "operand is bool, needs a number");
  };
  switch (ins.op) {
    case ExprOpCode::kNeg: case ExprOpCode::kAbs: case ExprOpCode::kSign: case ExprOpCode::kSquare:
    case ExprOpCode::kRelu:
      numeric(0);
      return in[0];
    case ExprOpCode::kNot:
      need(ValueKind::kBool, 0);
      return ValueKind::kBool;
    case ExprOpCode::kIsNan: case ExprOpCode::kIsInf:
      need(ValueKind::kFloat, 0);
      return ValueKind::kBool;
    case ExprOpCode::kCastF32: case ExprOpCode::kCastF16: return ValueKind::kFloat;
    case ExprOpCode::kCastI32: return ValueKind::kInt;
    case ExprOpCode::kCastBool: return ValueKind::kBool;
    case ExprOpCode::kAdd: case ExprOpCode::kSub: case ExprOpCode::kMul: case ExprOpCode::kDiv:
    case ExprOpCode::kPow: case ExprOpCode::kMin: case ExprOpCode::kMax: case ExprOpCode::kMod:
    case ExprOpCode::kFmod:
      numeric(0);
      need(in[0], 1);
      return in[0];
    case ExprOpCode::kEq: case ExprOpCode::kLt: case ExprOpCode::kLe: case ExprOpCode::kGt: case ExprOpCode::kGe:
      need(in[0], 1);
      return ValueKind::kBool;
    case ExprOpCode::kAnd: case ExprOpCode::kOr: case ExprOpCode::kXor:
      need(ValueKind::kBool, 0);
      need(ValueKind::kBool, 1);
      return ValueKind::kBool;
    case ExprOpCode::kSelect:
      need(ValueKind::kBool, 0);
      need(in[1], 2);
      return in[1];
    case ExprOpCode::kDivPow2:
      need(ValueKind::kFloat, 0);
      need(ValueKind::kFloat, 1);
      return ValueKind::kFloat;
    case ExprOpCode::kRoundF8:
      if (!(ins.imm == 17 || ins.imm == 18 || ins.imm == 19 || ins.imm == 20))
        bad(ins.op, "the format must be an ONNX float8 type code (17 to 20), got " + std::to_string(ins.imm));
      need(ValueKind::kFloat, 0);
      return ValueKind::kFloat;
    default:  // float-only unary ops
      need(ValueKind::kFloat, 0);
      return ValueKind::kFloat;
  }
}

}  // namespace

ExprArity expr_arity(ExprOpCode op) {
  static const ExprArity arities[] = {
#define NX_EXPR_OP(name, text, arity) ExprArity::k##arity,
#include "neurenix/expr_ops.def"
#undef NX_EXPR_OP
  };
  size_t i = static_cast<size_t>(op);
  if (i >= static_cast<size_t>(ExprOpCode::kCount)) fail(ErrorCode::kInvalidArgument, "unknown element-wise operation code " + std::to_string(i));
  return arities[i];
}

ValueKind value_kind(DeviceType t) {
  switch (t) {
    case DeviceType::kFloat32:
    case DeviceType::kFloat16:
    case DeviceType::kFloat8E4M3FNUZ:
    case DeviceType::kFloat8E5M2FNUZ: return ValueKind::kFloat;
    case DeviceType::kInt32: return ValueKind::kInt;
    case DeviceType::kBool: return ValueKind::kBool;
  }
  return ValueKind::kFloat;
}

const char* expr_op_name(ExprOpCode op) {
  static const char* names[] = {
#define NX_EXPR_OP(name, text, arity) text,
#include "neurenix/expr_ops.def"
#undef NX_EXPR_OP
  };
  size_t i = static_cast<size_t>(op);
  return i < static_cast<size_t>(ExprOpCode::kCount) ? names[i] : "?";
}

double expr_op_cycles(ExprOpCode op, bool half) {
  // Tile throughput with all six workers busy: 64-bit vector ALU (2 x f32 or
  // 4 x f16 per instruction); transcendentals use the hardware's iterative
  // units and cost several cycles per element.
  double per = half ? 0.25 : 0.5;
  switch (op) {
    case ExprOpCode::kInput: case ExprOpCode::kConstF: case ExprOpCode::kConstI: return 0.0;
    case ExprOpCode::kRandomUniform: return per * 4;  // a generator step, a conversion, a scale
    case ExprOpCode::kExp: case ExprOpCode::kLog: case ExprOpCode::kTanh: case ExprOpCode::kSigmoid:
    case ExprOpCode::kSqrt: case ExprOpCode::kRsqrt: case ExprOpCode::kReciprocal: case ExprOpCode::kDiv:
    case ExprOpCode::kRoundF8:  // exponent, scale, round, clamp and select: several ALU operations
      return per * 4;
    case ExprOpCode::kErf: case ExprOpCode::kGeluErf: case ExprOpCode::kGeluTanh: case ExprOpCode::kPow:
    case ExprOpCode::kSin: case ExprOpCode::kCos: case ExprOpCode::kSoftplus: case ExprOpCode::kElu:
      return per * 8;
    default: return per;
  }
}

ValueKind check_expression(const std::vector<ExprInstr>& expr, const std::vector<DeviceType>& operand_types) {
  std::vector<ValueKind> stack;
  if (expr.empty()) fail(ErrorCode::kInvalidArgument, "empty element-wise expression");
  for (const ExprInstr& ins : expr) {
    if (static_cast<size_t>(ins.op) >= static_cast<size_t>(ExprOpCode::kCount))
      fail(ErrorCode::kInvalidArgument, "unknown element-wise operation code " + std::to_string(static_cast<int>(ins.op)));
    const ExprArity a = expr_arity(ins.op);
    if (a == ExprArity::kLeaf) {
      if (ins.op == ExprOpCode::kInput) {
        if (ins.arg >= operand_types.size()) bad(ins.op, "operand index out of range");
        stack.push_back(value_kind(operand_types[ins.arg]));
      } else {
        stack.push_back(ins.op == ExprOpCode::kConstI ? ValueKind::kInt : ValueKind::kFloat);
      }
      continue;
    }
    const size_t n = a == ExprArity::kUnary ? 1 : a == ExprArity::kBinary ? 2 : 3;
    if (stack.size() < n) bad(ins.op, "stack underflow");
    ValueKind in[3];
    for (size_t i = 0; i < n; ++i) in[i] = stack[stack.size() - n + i];
    stack.resize(stack.size() - n);
    stack.push_back(result_kind(ins, in));
  }
  if (stack.size() != 1) fail(ErrorCode::kInvalidArgument, "element-wise expression leaves " + std::to_string(stack.size()) + " values");
  return stack.back();
}

}  // namespace neurenix
