// Building element-wise expressions (postfix) in tests.
#pragma once

#include <cstdint>
#include <vector>

#include "neurenix/expr.h"

namespace nxtest {

using E = neurenix::ExprOpCode;
using neurenix::ExprInstr;

inline ExprInstr in(uint32_t i, bool half = false) { return ExprInstr{E::kInput, i, 0, 0, half}; }
inline ExprInstr op(E o, bool half = false) { return ExprInstr{o, 0, 0, 0, half}; }
inline ExprInstr opp(E o, double imm, double imm2 = 0, bool half = false) { return ExprInstr{o, 0, imm, imm2, half}; }
inline ExprInstr cf(double v, bool half = false) { return ExprInstr{E::kConstF, 0, v, 0, half}; }
inline ExprInstr ci(int32_t v) { return ExprInstr{E::kConstI, 0, static_cast<double>(v), 0, false}; }

// Marks every instruction of `expr` as half precision.
inline std::vector<ExprInstr> in_half(std::vector<ExprInstr> expr) {
  for (auto& i : expr) i.half = true;
  return expr;
}

}  // namespace nxtest
