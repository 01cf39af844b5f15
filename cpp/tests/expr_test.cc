// The expression IR: type checking, names and costs (and the cost of a map
// vertex built from it).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "codelet_util.h"
#include "expr_util.h"
#include "neurenix/codelets/map.h"

namespace {

using namespace neurenix;
using namespace nxtest;

TEST(Expr, CheckExpressionTypes) {
  const std::vector<DeviceType> f1 = {kF32}, i1 = {kI32}, b1 = {kBool};
  EXPECT_EQ(check_expression({in(0), op(E::kExp)}, f1), ValueKind::kFloat);
  EXPECT_EQ(check_expression({in(0), op(E::kNeg)}, i1), ValueKind::kInt);
  EXPECT_EQ(check_expression({in(0), ci(1), op(E::kLt)}, i1), ValueKind::kBool);
  EXPECT_EQ(check_expression({in(0), op(E::kCastF16)}, b1), ValueKind::kFloat);
  EXPECT_EQ(check_expression({in(0), in(1), in(2), op(E::kSelect)}, {kBool, kI32, kI32}),
            ValueKind::kInt);
  EXPECT_EQ(check_expression({in(0), op(E::kIsNan)}, {kF16}), ValueKind::kBool);
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({}, f1), "empty");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({op(E::kExp)}, f1), "exp", "underflow");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), op(E::kAdd)}, f1), "add", "underflow");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), in(0)}, f1), "2 values");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(1)}, f1), "out of range");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), op(E::kSigmoid)}, i1), "sigmoid", "int");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), op(E::kNeg)}, b1), "neg", "bool");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), op(E::kNot)}, f1), "not");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), op(E::kIsNan)}, i1), "isnan");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), ci(1), op(E::kAdd)}, f1), "add", "float", "int");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), in(0), op(E::kAnd)}, i1), "and");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), in(0), in(0), op(E::kSelect)}, f1), "select");
  EXPECT_NX_ERROR(kInvalidArgument,
                  check_expression({in(0), in(1), in(2), op(E::kSelect)}, {kBool, kF32, kI32}),
                  "select");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), in(0), op(E::kAdd)}, b1), "add", "bool");
  EXPECT_EQ(check_expression({in(0), opp(E::kRoundF8, 19, 1)}, f1), ValueKind::kFloat);
  EXPECT_EQ(check_expression({in(0), op(E::kRoundBf16)}, {kF16}), ValueKind::kFloat);
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), opp(E::kRoundF8, 16, 1)}, f1), "round_f8", "17 to 20");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), opp(E::kRoundF8, 17, 1)}, i1), "round_f8", "int");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), op(E::kRoundBf16)}, i1), "round_bf16", "int");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), op(E::kCount)}, f1), "unknown");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), op(static_cast<E>(999))}, f1), "999");
}

TEST(Expr, NamesAndCostsOfEveryOperation) {
  std::set<std::string> names;
  for (int i = 0; i < static_cast<int>(E::kCount); ++i) {
    std::string n = expr_op_name(static_cast<E>(i));
    EXPECT_NE(n, "?");
    EXPECT_TRUE(names.insert(n).second) << "duplicate name " << n;
    const double c32 = expr_op_cycles(static_cast<E>(i), false), c16 = expr_op_cycles(static_cast<E>(i), true);
    if (i <= static_cast<int>(E::kConstI)) {
      EXPECT_EQ(c32, 0.0);
    } else {
      EXPECT_GT(c32, 0.0) << n;
      EXPECT_LT(c16, c32) << n << ": half vectors are twice as wide";
    }
  }
  EXPECT_STREQ(expr_op_name(E::kCount), "?");
  EXPECT_GT(expr_op_cycles(E::kExp, false), expr_op_cycles(E::kAdd, false));
  // A vertex's cost grows with its element count and expression length.
  const TargetSpec& t = target_for("ipu2");
  TileMem mem;
  auto mk = [&](uint64_t count, std::vector<ExprInstr> expr) {
    Field a = mem.field(count, kF32), o = mem.field(count, kF32);
    return MapVertex(0, std::make_shared<const std::vector<ExprInstr>>(expr), {MapVertex::Operand{a, kF32, false}}, o,
                     kF32)
        .cycles(t);
  };
  const uint64_t small = mk(10, {in(0), op(E::kNeg)}), big = mk(10000, {in(0), op(E::kNeg)});
  EXPECT_GT(small, t.vertex_overhead_cycles - 1);
  EXPECT_GT(big, small);
  EXPECT_GT(mk(10000, {in(0), op(E::kExp), op(E::kExp)}), big);
  EXPECT_NX_ERROR(kInternal,
                  MapVertex(0, std::make_shared<const std::vector<ExprInstr>>(std::vector<ExprInstr>{in(0)}),
                            {MapVertex::Operand{mem.field(3, kF32), kF32, false}},
                            mem.field(4, kF32), kF32),
                  "size");
}

}  // namespace
