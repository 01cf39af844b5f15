// The element-wise vertices (Map, Fill) on one tile's memory, against
// references computed here in double precision (or exactly, with integers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cfloat>
#include <climits>
#include <cmath>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <tuple>

#include "codelet_util.h"
#include "expr_util.h"
#include "neurenix/codelets/map.h"
#include "neurenix/stochastic_rounding.h"

namespace {

using namespace neurenix;
using namespace nxtest;

// Position of a binary16 value on the number line, in steps.
int64_t half_ordinal(uint16_t h) { return (h & 0x8000) ? -static_cast<int64_t>(h & 0x7fff) : h; }

struct Operand {
  DeviceType dtype;
  std::vector<double> values;
  bool scalar = false;
};

// Runs one MapVertex over `n` elements; returns the outputs decoded to double.
std::vector<double> run_map(const std::vector<ExprInstr>& expr, const std::vector<Operand>& operands, DeviceType out_dtype,
                            uint64_t n, TileMem* keep = nullptr) {
  TileMem mem;
  std::vector<MapVertex::Operand> ops;
  std::vector<std::pair<uint64_t, uint64_t>> used;
  for (const Operand& o : operands) {
    const uint64_t count = o.scalar ? 1 : n;
    Field f = mem.field(count, o.dtype);
    for (uint64_t i = 0; i < count; ++i) mem.put(f, o.dtype, i, o.values[o.scalar ? 0 : i]);
    used.push_back({f.byte_offset, count * device_type_size(o.dtype)});
    ops.push_back(MapVertex::Operand{f, o.dtype, o.scalar});
  }
  Field out = mem.field(n, out_dtype);
  used.push_back({out.byte_offset, n * device_type_size(out_dtype)});
  MapVertex v(0, std::make_shared<const std::vector<ExprInstr>>(expr), ops, out, out_dtype);
  v.compute(mem.bytes.data());
  EXPECT_TRUE(mem.guards_intact(used)) << "the vertex wrote outside its output";
  std::vector<double> r(n);
  for (uint64_t i = 0; i < n; ++i) r[i] = mem.get(out, out_dtype, i);
  if (keep) *keep = mem;
  return r;
}

// ---------------------------------------------------------------------------
// Float references.

double ref_unary(E o, double x, double a, double b) {
  switch (o) {
    case E::kNeg: return -x;
    case E::kAbs: return std::fabs(x);
    case E::kRelu: return std::isnan(x) ? x : (x > 0 ? x : 0.0);
    case E::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case E::kTanh: return std::tanh(x);
    case E::kExp: return std::exp(x);
    case E::kLog: return std::log(x);
    case E::kSqrt: return std::sqrt(x);
    case E::kRsqrt: return 1.0 / std::sqrt(x);
    case E::kReciprocal: return 1.0 / x;
    case E::kErf: return std::erf(x);
    case E::kGeluErf: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    case E::kGeluTanh: return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case E::kFloor: return std::floor(x);
    case E::kCeil: return std::ceil(x);
    case E::kRound: return std::isfinite(x) ? std::copysign(ref_round_even(x), x) : x;
    case E::kSign: return x > 0 ? 1.0 : x < 0 ? -1.0 : x;
    case E::kSin: return std::sin(x);
    case E::kCos: return std::cos(x);
    case E::kSquare: return x * x;
    case E::kSoftplus: return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
    case E::kSoftsign: return x / (1.0 + std::fabs(x));
    case E::kClamp: return x < a ? a : (x > b ? b : x);
    case E::kLeakyRelu: return x >= 0 ? x : a * x;
    case E::kElu: return x >= 0 ? x : a * std::expm1(x);
    case E::kHardSigmoid: { const double v = a * x + b; return std::isnan(v) ? v : std::max(0.0, std::min(1.0, v)); }
    default: ADD_FAILURE() << "no reference for " << expr_op_name(o); return NAN;
  }
}

// Accuracy each float operation must reach: `ulps` of the exact result, or an
// absolute error of `rel_x * |x| * 2^-24` where the formula itself cancels
// (gelu's tail, elu and hard sigmoid near their zeros).
struct Accuracy {
  int64_t ulps;
  double rel_x;
};

Accuracy unary_accuracy(E o) {
  switch (o) {
    case E::kSigmoid: return {3, 0};
    case E::kTanh: case E::kExp: case E::kLog: case E::kRsqrt: case E::kErf: case E::kSin: case E::kCos:
    case E::kSoftplus: case E::kSoftsign:
      return {2, 0};
    case E::kGeluErf: case E::kGeluTanh: return {4, 8};
    case E::kElu: return {2, 4};
    case E::kHardSigmoid: return {1, 4};
    default: return {0, 0};  // exact (correctly rounded)
  }
}

bool float_close(double got, double ref, Accuracy acc, double x_scale) {
  if (std::isnan(ref)) return std::isnan(got);
  const float rf = static_cast<float>(ref);
  if (std::isinf(rf)) return got == rf || ulp_distance(static_cast<float>(got), rf) <= acc.ulps;
  if (ulp_distance(static_cast<float>(got), rf) <= acc.ulps) return true;
  return std::fabs(got - ref) <= acc.rel_x * x_scale * std::ldexp(1.0, -24);
}

std::vector<float> interesting_floats(E o, std::mt19937& rng) {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f, 3.0f, 1e-3f, -1e-3f,
                          1e-30f, -1e-30f, FLT_MIN, -FLT_MIN, FLT_TRUE_MIN, 1e30f, -1e30f, 100.0f, -100.0f,
                          0.49999997f, 8388609.0f, -8388609.0f, INFINITY, -INFINITY, NAN};
  // Inputs outside the range where the double formula is a fair reference.
  if (o == E::kGeluErf || o == E::kGeluTanh || o == E::kSoftsign) {
    v.erase(std::remove_if(v.begin(), v.end(), [](float x) { return std::isinf(x) || std::fabs(x) > 1e20f; }), v.end());
  }
  std::uniform_real_distribution<float> small(-10.0f, 10.0f), unit(-1.0f, 1.0f), lg(-30.0f, 30.0f);
  for (int i = 0; i < 300; ++i) v.push_back(small(rng));
  for (int i = 0; i < 100; ++i) v.push_back(unit(rng));
  for (int i = 0; i < 100; ++i) v.push_back((rng() % 2 ? 1 : -1) * std::exp(lg(rng)));
  if (o == E::kSin || o == E::kCos) {
    for (int k = -20; k <= 20; ++k) v.push_back(static_cast<float>(k * M_PI / 2));
  }
  if (o == E::kLog || o == E::kSqrt || o == E::kRsqrt)
    for (int i = 0; i < 200; ++i) v.push_back(std::exp(lg(rng)));
  return v;
}

const E kFloatUnary[] = {E::kNeg,   E::kAbs,     E::kRelu,     E::kSigmoid,  E::kTanh,   E::kExp,     E::kLog,
                         E::kSqrt,  E::kRsqrt,   E::kReciprocal, E::kErf,    E::kGeluErf, E::kGeluTanh, E::kFloor,
                         E::kCeil,  E::kRound,   E::kSign,     E::kSin,      E::kCos,    E::kSquare,  E::kSoftplus,
                         E::kSoftsign, E::kClamp, E::kLeakyRelu, E::kElu,    E::kHardSigmoid};

double param_a(E o) { return o == E::kClamp ? -0.75 : o == E::kLeakyRelu ? 0.01 : o == E::kElu ? 1.3 : 0.2; }
double param_b(E o) { return o == E::kClamp ? 2.5 : o == E::kHardSigmoid ? 0.5 : 0.0; }

TEST(MapCodelet, EveryFloatUnaryOpMatchesDoubleReference) {
  std::mt19937 rng(11);
  for (E o : kFloatUnary) {
    SCOPED_TRACE(expr_op_name(o));
    const double a = param_a(o), b = param_b(o);
    std::vector<float> xs = interesting_floats(o, rng);
    std::vector<double> xd(xs.begin(), xs.end());
    auto got = run_map({in(0), opp(o, a, b)}, {{kF32, xd}}, kF32, xd.size());
    const Accuracy acc = unary_accuracy(o);
    // Parameters reach the vertex as floats.
    const double af = static_cast<float>(a), bf = static_cast<float>(b);
    for (size_t i = 0; i < xs.size(); ++i) {
      const double ref = ref_unary(o, xd[i], af, bf);
      ASSERT_TRUE(float_close(got[i], ref, acc, std::fabs(xd[i]) + std::fabs(af) + std::fabs(bf)))
          << "x=" << xd[i] << " got " << got[i] << " want " << ref << " (" << ulp_distance(got[i], ref) << " ulp)";
    }
  }
}

// A float32 operand through one float operation written over itself (the
// output field is the operand's bytes), over more than one block of
// elements: the double reference, as when the output has bytes of its own.
TEST(MapCodelet, UnaryOpOverItsOwnOperand) {
  std::mt19937 rng(13);
  for (E o : {E::kRelu, E::kSigmoid, E::kGeluErf, E::kElu, E::kNeg}) {
    SCOPED_TRACE(expr_op_name(o));
    std::vector<float> xs = interesting_floats(o, rng);
    const double a = param_a(o), b = param_b(o);
    TileMem mem;
    Field f = mem.field(xs.size(), kF32);
    for (size_t i = 0; i < xs.size(); ++i) mem.put(f, kF32, i, xs[i]);
    MapVertex v(0, std::make_shared<const std::vector<ExprInstr>>(std::vector<ExprInstr>{in(0), opp(o, a, b)}),
                {MapVertex::Operand{f, kF32, false}}, f, kF32);
    v.compute(mem.bytes.data());
    EXPECT_TRUE(mem.guards_intact({{f.byte_offset, xs.size() * 4}})) << "the vertex wrote outside its output";
    const double af = static_cast<float>(a), bf = static_cast<float>(b);
    for (size_t i = 0; i < xs.size(); ++i) {
      const double got = mem.get(f, kF32, i), ref = ref_unary(o, xs[i], af, bf);
      ASSERT_TRUE(float_close(got, ref, unary_accuracy(o), std::fabs(xs[i]) + std::fabs(af) + std::fabs(bf)))
          << "x=" << xs[i] << " got " << got << " want " << ref;
    }
  }
}

// With half inputs, a half-flagged op and a half output, the result is the
// float result rounded to binary16: exactly the correctly rounded value for
// the exact ops, within one binary16 step for the others.
TEST(MapCodelet, EveryFloatUnaryOpInHalf) {
  std::mt19937 rng(12);
  for (E o : kFloatUnary) {
    SCOPED_TRACE(expr_op_name(o));
    const double a = param_a(o), b = param_b(o);
    std::vector<double> xh;
    for (float x : interesting_floats(o, rng)) xh.push_back(ref_round_half(x));
    if (o == E::kGeluErf || o == E::kGeluTanh || o == E::kSoftsign)
      xh.erase(std::remove_if(xh.begin(), xh.end(), [](double x) { return std::isinf(x); }), xh.end());
    TileMem mem;
    auto got = run_map({in(0), opp(o, a, b, true)}, {{kF16, xh}}, kF16, xh.size(), &mem);
    const Accuracy acc = unary_accuracy(o);
    const double af = static_cast<float>(a), bf = static_cast<float>(b);
    for (size_t i = 0; i < xh.size(); ++i) {
      const double ref = ref_unary(o, xh[i], af, bf);
      const uint16_t want = ref_double_to_half(ref);
      const uint16_t have = ref_double_to_half(got[i]);
      if (std::isnan(ref)) {
        ASSERT_TRUE(std::isnan(got[i])) << xh[i];
        continue;
      }
      if (acc.ulps == 0 && o != E::kLeakyRelu) {
        ASSERT_EQ(have, want) << "x=" << xh[i] << " got " << got[i] << " want " << ref_half_to_double(want);
      } else {
        const int64_t d = std::abs(half_ordinal(have) - half_ordinal(want));
        ASSERT_TRUE(d <= 1 || std::fabs(got[i] - ref) <= acc.rel_x * (std::fabs(xh[i]) + 1) * std::ldexp(1.0, -10))
            << "x=" << xh[i] << " got " << got[i] << " want " << ref;
      }
    }
  }
}

TEST(MapCodelet, FloatBinaryOps) {
  std::mt19937 rng(13);
  std::vector<double> xa, xb;
  const float sp[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -3.0f, 0.5f, 7.25f, -7.25f, 1e30f, -1e30f, 1e-30f, FLT_TRUE_MIN,
                      INFINITY, -INFINITY, NAN};
  for (float p : sp)
    for (float q : sp) {
      xa.push_back(p);
      xb.push_back(q);
    }
  std::uniform_real_distribution<float> u(-20.0f, 20.0f);
  for (int i = 0; i < 600; ++i) {
    xa.push_back(u(rng));
    xb.push_back(i % 7 == 0 ? xa.back() : u(rng));
  }
  const size_t n = xa.size();
  struct Case {
    E o;
    std::function<double(double, double)> ref;
    int64_t ulps;
  };
  // Python's %: a zero result takes the divisor's sign (ONNX Mod 28).
  auto pymod = [](double a, double b) {
    double r = std::fmod(a, b);
    if (r == 0) return std::copysign(0.0, b);
    if ((r < 0) != (b < 0)) r += b;
    return r;
  };
  const Case cases[] = {
      {E::kAdd, [](double a, double b) { return a + b; }, 0},
      {E::kSub, [](double a, double b) { return a - b; }, 0},
      {E::kMul, [](double a, double b) { return a * b; }, 0},
      {E::kDiv, [](double a, double b) { return a / b; }, 0},
      {E::kMin, [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }, 0},
      {E::kMax, [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }, 0},
      {E::kFmod, [](double a, double b) { return std::fmod(a, b); }, 0},
      {E::kMod, pymod, 1},
      {E::kPow, [](double a, double b) { return std::pow(a, b); }, 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(expr_op_name(c.o));
    auto got = run_map({in(0), in(1), op(c.o)}, {{kF32, xa}, {kF32, xb}}, kF32, n);
    for (size_t i = 0; i < n; ++i) {
      const double ref = c.ref(xa[i], xb[i]);
      ASSERT_TRUE(float_close(got[i], ref, {c.ulps, 0}, 0)) << xa[i] << " , " << xb[i] << " got " << got[i] << " want " << ref;
      if (c.o == E::kMin || c.o == E::kMax) {
        if (ref == 0) {
          ASSERT_EQ(got[i], 0.0);
        }
      }
    }
    // The same in half: halves in, the float result rounded once.
    std::vector<double> ha, hb;
    for (size_t i = 0; i < n; ++i) {
      ha.push_back(ref_round_half(xa[i]));
      hb.push_back(ref_round_half(xb[i]));
    }
    auto goth = run_map({in(0), in(1), op(c.o, true)}, {{kF16, ha}, {kF16, hb}}, kF32, n);
    for (size_t i = 0; i < n; ++i) {
      const double ref = c.ref(ha[i], hb[i]);
      if (std::isnan(ref)) {
        ASSERT_TRUE(std::isnan(goth[i]));
        continue;
      }
      if (c.ulps == 0) {
        ASSERT_EQ(ref_double_to_half(goth[i]), ref_double_to_half(ref)) << ha[i] << " , " << hb[i];
        ASSERT_EQ(goth[i], ref_round_half(ref)) << "the result must be a binary16 value";
      } else {
        ASSERT_EQ(goth[i], ref_round_half(goth[i])) << "the result must be a binary16 value";
        if (std::isinf(goth[i]) || std::isinf(ref_round_half(ref))) {
          ASSERT_GE(std::fabs(ref), 65000.0) << ha[i] << " , " << hb[i];
          continue;
        }
        ASSERT_LE(std::fabs(goth[i] - ref_round_half(ref)), std::fabs(ref) * std::ldexp(1.0, -10) + 1e-7)
            << ha[i] << " , " << hb[i];
      }
    }
  }
}

// The operations a map computes straight from two whole operands (Add,
// Sub, Mul, Min, Max), each with its exact result in double (NaN if either
// operand is NaN).
std::vector<std::pair<E, std::function<double(double, double)>>> arith_references() {
  return {
      {E::kAdd, [](double a, double b) { return a + b; }},
      {E::kSub, [](double a, double b) { return a - b; }},
      {E::kMul, [](double a, double b) { return a * b; }},
      {E::kMin, [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }},
      {E::kMax, [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }},
  };
}

// A binary operation written over its first or its second operand (a
// residual Add in place): each element read before it is written, the
// operands kept in their order.
TEST(MapCodelet, BinaryOpOverEitherOperand) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-20.0f, 20.0f);
  const size_t n = 700;  // several of the interpreter's blocks
  std::vector<float> xa(n), xb(n);
  for (size_t i = 0; i < n; ++i) {
    xa[i] = u(rng);
    xb[i] = i % 5 == 0 ? xa[i] : u(rng);
  }
  xa[3] = NAN;
  xb[4] = NAN;
  xa[5] = -0.0f;
  xb[5] = 0.0f;
  for (const auto& [o, ref] : arith_references())
    for (int into : {0, 1}) {
      SCOPED_TRACE(std::string(expr_op_name(o)) + (into == 0 ? " into its first operand" : " into its second"));
      TileMem mem;
      Field fa = mem.field(n, kF32), fb = mem.field(n, kF32);
      for (size_t i = 0; i < n; ++i) {
        mem.put(fa, kF32, i, xa[i]);
        mem.put(fb, kF32, i, xb[i]);
      }
      const Field out = into == 0 ? fa : fb;
      MapVertex v(0, std::make_shared<const std::vector<ExprInstr>>(std::vector<ExprInstr>{in(0), in(1), op(o)}),
                  {MapVertex::Operand{fa, kF32, false}, MapVertex::Operand{fb, kF32, false}}, out, kF32);
      v.compute(mem.bytes.data());
      EXPECT_TRUE(mem.guards_intact({{fa.byte_offset, n * 4}, {fb.byte_offset, n * 4}}));
      for (size_t i = 0; i < n; ++i) {
        const double got = mem.get(out, kF32, i), want = static_cast<float>(ref(xa[i], xb[i]));
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(got)) << i;
        } else {
          ASSERT_EQ(got, want) << "element " << i << ": " << xa[i] << ", " << xb[i];
        }
      }
    }
}

// The same in float16: halves in and out, with and without the operation's
// half flag, into a field of its own and over the first operand; each
// result the exact result rounded once to binary16.
TEST(MapCodelet, BinaryOpInHalf) {
  std::mt19937 rng(19);
  std::uniform_real_distribution<float> u(-300.0f, 300.0f);
  const size_t n = 600;
  std::vector<double> ha(n), hb(n);
  for (size_t i = 0; i < n; ++i) {
    ha[i] = ref_round_half(u(rng));
    hb[i] = i % 6 == 0 ? ha[i] : ref_round_half(u(rng));
  }
  const double special[][2] = {{65504.0, 65504.0}, {-65504.0, 16.0}, {NAN, 1.0}, {2.0, NAN}, {INFINITY, -INFINITY},
                               {-0.0, 0.0}, {0x1p-24, 0x1p-24}, {1024.0, 0x1p-14}};
  for (size_t i = 0; i < std::size(special); ++i) {
    ha[i] = special[i][0];
    hb[i] = special[i][1];
  }
  for (const auto& [o, ref] : arith_references())
    for (bool half_flag : {false, true})
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(std::string(expr_op_name(o)) + (half_flag ? " flagged half" : "") + (in_place ? " in place" : ""));
        TileMem mem;
        Field fa = mem.field(n, kF16), fb = mem.field(n, kF16);
        for (size_t i = 0; i < n; ++i) {
          mem.put(fa, kF16, i, ha[i]);
          mem.put(fb, kF16, i, hb[i]);
        }
        const Field out = in_place ? fa : mem.field(n, kF16);
        MapVertex v(0,
                    std::make_shared<const std::vector<ExprInstr>>(std::vector<ExprInstr>{in(0), in(1), op(o, half_flag)}),
                    {MapVertex::Operand{fa, kF16, false}, MapVertex::Operand{fb, kF16, false}}, out, kF16);
        v.compute(mem.bytes.data());
        for (size_t i = 0; i < n; ++i) {
          const double got = mem.get(out, kF16, i), want = ref(ha[i], hb[i]);
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(got)) << i;
          } else {
            ASSERT_EQ(ref_double_to_half(got), ref_double_to_half(want)) << "element " << i << ": " << ha[i] << ", " << hb[i];
          }
        }
      }
}

TEST(MapCodelet, FloatComparisons) {
  std::vector<double> a = {1, 1, 2, -0.0, NAN, NAN, 1, INFINITY, -INFINITY, 3.5, -2};
  std::vector<double> b = {1, 2, 1, 0.0, 1, NAN, NAN, INFINITY, INFINITY, 3.5000002, -2.0000002};
  const std::pair<E, std::function<bool(double, double)>> cases[] = {
      {E::kEq, [](double x, double y) { return x == y; }}, {E::kLt, [](double x, double y) { return x < y; }},
      {E::kLe, [](double x, double y) { return x <= y; }}, {E::kGt, [](double x, double y) { return x > y; }},
      {E::kGe, [](double x, double y) { return x >= y; }}};
  for (const auto& [o, f] : cases) {
    SCOPED_TRACE(expr_op_name(o));
    auto got = run_map({in(0), in(1), op(o)}, {{kF32, a}, {kF32, b}}, kBool, a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const double fa = static_cast<float>(a[i]), fb = static_cast<float>(b[i]);
      EXPECT_EQ(got[i], f(fa, fb) ? 1.0 : 0.0) << a[i] << " vs " << b[i];
    }
    // Half flags do not apply to boolean results.
    auto goth = run_map({in(0), in(1), op(o, true)}, {{kF32, a}, {kF32, b}}, kBool, a.size());
    EXPECT_EQ(goth, got);
  }
  std::vector<double> v = {0, 1, -1, INFINITY, -INFINITY, NAN, FLT_MAX};
  EXPECT_EQ(run_map({in(0), op(E::kIsNan)}, {{kF32, v}}, kBool, v.size()),
            (std::vector<double>{0, 0, 0, 0, 0, 1, 0}));
  EXPECT_EQ(run_map({in(0), op(E::kIsInf)}, {{kF32, v}}, kBool, v.size()),
            (std::vector<double>{0, 0, 0, 1, 1, 0, 0}));
}

// ---------------------------------------------------------------------------
// Integers: two's complement wrap-around, truncating division, and no traps.

int32_t wrap(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v))); }

std::vector<int32_t> interesting_ints(std::mt19937& rng) {
  std::vector<int32_t> v = {0, 1, -1, 2, -2, 3, -3, 7, -7, 100, -100, 46341, -46341, 65536, INT_MAX, INT_MIN,
                            INT_MAX - 1, INT_MIN + 1};
  std::uniform_int_distribution<int32_t> any(INT_MIN, INT_MAX), small(-1000, 1000);
  for (int i = 0; i < 50; ++i) v.push_back(any(rng));
  for (int i = 0; i < 50; ++i) v.push_back(small(rng));
  return v;
}

TEST(MapCodelet, IntegerBinaryOps) {
  std::mt19937 rng(14);
  auto vals = interesting_ints(rng);
  std::vector<double> a, b;
  for (int32_t x : vals)
    for (int32_t y : vals) {
      a.push_back(x);
      b.push_back(y);
    }
  const size_t n = a.size();
  auto tdiv = [](int64_t x, int64_t y) -> int64_t { return y == 0 ? 0 : x / y; };  // in 64 bits: no overflow
  auto fmodi = [](int64_t x, int64_t y) -> int64_t { return y == 0 ? 0 : x % y; };
  auto pymod = [&](int64_t x, int64_t y) -> int64_t {
    if (y == 0) return 0;
    int64_t r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
  };
  const std::pair<E, std::function<int64_t(int64_t, int64_t)>> cases[] = {
      {E::kAdd, [](int64_t x, int64_t y) { return x + y; }},
      {E::kSub, [](int64_t x, int64_t y) { return x - y; }},
      {E::kMul, [](int64_t x, int64_t y) { return static_cast<int64_t>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y)); }},
      {E::kDiv, tdiv},
      {E::kFmod, fmodi},
      {E::kMod, pymod},
      {E::kMin, [](int64_t x, int64_t y) { return std::min(x, y); }},
      {E::kMax, [](int64_t x, int64_t y) { return std::max(x, y); }},
  };
  for (const auto& [o, f] : cases) {
    SCOPED_TRACE(expr_op_name(o));
    auto got = run_map({in(0), in(1), op(o)}, {{kI32, a}, {kI32, b}}, kI32, n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], wrap(f(static_cast<int64_t>(a[i]), static_cast<int64_t>(b[i])))) << a[i] << " , " << b[i];
  }
  // The cases that trap on x86 if done naively.
  auto d = run_map({in(0), in(1), op(E::kDiv)}, {{kI32, {INT_MIN, 5, -5, 0}}, {kI32, {-1, 0, 0, 0}}},
                   kI32, 4);
  EXPECT_EQ(d, (std::vector<double>{INT_MIN, 0, 0, 0}));
  auto m = run_map({in(0), in(1), op(E::kMod)}, {{kI32, {INT_MIN, 5, -7, 7}}, {kI32, {-1, 0, 3, -3}}},
                   kI32, 4);
  EXPECT_EQ(m, (std::vector<double>{0, 0, 2, -2}));
  auto fm = run_map({in(0), in(1), op(E::kFmod)}, {{kI32, {INT_MIN, 5, -7, 7}}, {kI32, {-1, 0, 3, -3}}},
                    kI32, 4);
  EXPECT_EQ(fm, (std::vector<double>{0, 0, -1, 1}));
}

TEST(MapCodelet, IntegerPowUnaryAndComparisons) {
  std::vector<double> base, ex, want;
  for (int x = -5; x <= 5; ++x)
    for (int y = 0; y <= 9; ++y) {
      base.push_back(x);
      ex.push_back(y);
      int64_t p = 1;
      for (int k = 0; k < y; ++k) p *= x;
      want.push_back(static_cast<double>(p));
    }
  // Negative exponents truncate toward zero: 2^-1 = 0, (-1)^-1 = -1, 1^-3 = 1.
  for (auto [x, y, w] : std::vector<std::tuple<int, int, int>>{{2, -1, 0}, {-1, -1, -1}, {1, -3, 1}, {-2, -2, 0}}) {
    base.push_back(x);
    ex.push_back(y);
    want.push_back(w);
  }
  // Powers past int32 and huge integer constants come out as the x86
  // conversion gives them: INT32_MIN.
  for (auto [x, y] : std::vector<std::pair<int, int>>{{10, 10}, {-3, 21}, {2, 31}, {2, 300}}) {
    base.push_back(x);
    ex.push_back(y);
    want.push_back(INT_MIN);
  }
  EXPECT_EQ(run_map({in(0), in(1), op(E::kPow)}, {{kI32, base}, {kI32, ex}}, kI32, base.size()), want);
  EXPECT_EQ(run_map({in(0), ci(1), op(E::kAdd)}, {{kI32, {1, 2}}}, kI32, 2), (std::vector<double>{2, 3}));
  EXPECT_EQ(run_map({in(0), opp(E::kConstI, 1e10), op(E::kAdd)}, {{kI32, {1, 2}}}, kI32, 2),
            (std::vector<double>{INT_MIN + 1.0, INT_MIN + 2.0}));

  std::mt19937 rng(15);
  auto vals = interesting_ints(rng);
  std::vector<double> v(vals.begin(), vals.end());
  const std::pair<E, std::function<int64_t(int64_t)>> unary[] = {
      {E::kNeg, [](int64_t x) { return -x; }},
      {E::kAbs, [](int64_t x) { return x < 0 ? -x : x; }},
      {E::kRelu, [](int64_t x) { return x > 0 ? x : 0; }},
      {E::kSign, [](int64_t x) { return (x > 0) - (x < 0); }},
      {E::kSquare, [](int64_t x) { return static_cast<int64_t>(static_cast<uint64_t>(x) * static_cast<uint64_t>(x)); }},
  };
  for (const auto& [o, f] : unary) {
    SCOPED_TRACE(expr_op_name(o));
    auto got = run_map({in(0), op(o)}, {{kI32, v}}, kI32, v.size());
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i], wrap(f(static_cast<int64_t>(v[i])))) << v[i];
  }
  std::vector<double> a, b;
  for (int32_t x : vals)
    for (int32_t y : {INT_MIN, -1, 0, 1, 7, INT_MAX}) {
      a.push_back(x);
      b.push_back(y);
    }
  const std::pair<E, std::function<bool(int64_t, int64_t)>> cmp[] = {
      {E::kEq, [](int64_t x, int64_t y) { return x == y; }}, {E::kLt, [](int64_t x, int64_t y) { return x < y; }},
      {E::kLe, [](int64_t x, int64_t y) { return x <= y; }}, {E::kGt, [](int64_t x, int64_t y) { return x > y; }},
      {E::kGe, [](int64_t x, int64_t y) { return x >= y; }}};
  for (const auto& [o, f] : cmp) {
    auto got = run_map({in(0), in(1), op(o)}, {{kI32, a}, {kI32, b}}, kBool, a.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(got[i], f(static_cast<int64_t>(a[i]), static_cast<int64_t>(b[i])) ? 1 : 0);
  }
}

TEST(MapCodelet, BooleanLogicAndSelect) {
  std::vector<double> p = {0, 0, 1, 1}, q = {0, 1, 0, 1};
  auto run2 = [&](E o) { return run_map({in(0), in(1), op(o)}, {{kBool, p}, {kBool, q}}, kBool, 4); };
  EXPECT_EQ(run2(E::kAnd), (std::vector<double>{0, 0, 0, 1}));
  EXPECT_EQ(run2(E::kOr), (std::vector<double>{0, 1, 1, 1}));
  EXPECT_EQ(run2(E::kXor), (std::vector<double>{0, 1, 1, 0}));
  EXPECT_EQ(run2(E::kEq), (std::vector<double>{1, 0, 0, 1}));
  EXPECT_EQ(run2(E::kLt), (std::vector<double>{0, 1, 0, 0}));
  EXPECT_EQ(run_map({in(0), op(E::kNot)}, {{kBool, p}}, kBool, 4), (std::vector<double>{1, 1, 0, 0}));
  // Any non-zero byte is true.
  {
    TileMem mem;
    Field a = mem.field(3, kBool), out = mem.field(3, kBool);
    mem.bytes[a.byte_offset] = 2;
    mem.bytes[a.byte_offset + 1] = 0;
    mem.bytes[a.byte_offset + 2] = 255;
    MapVertex v(0, std::make_shared<const std::vector<ExprInstr>>(std::vector<ExprInstr>{in(0), op(E::kNot)}),
                {MapVertex::Operand{a, kBool, false}}, out, kBool);
    v.compute(mem.bytes.data());
    EXPECT_EQ(mem.get(out, kBool, 0), 0);
    EXPECT_EQ(mem.get(out, kBool, 1), 1);
    EXPECT_EQ(mem.get(out, kBool, 2), 0);
  }
  std::vector<double> c = {1, 0, 1, 0, 0}, x = {1.5, 2.5, -3, NAN, 7}, y = {10, 20, 30, 40, NAN};
  EXPECT_EQ(run_map({in(0), in(1), in(2), op(E::kSelect)}, {{kBool, c}, {kF32, x}, {kF32, y}},
                    kF32, 5)[0],
            1.5);
  auto sel = run_map({in(0), in(1), in(2), op(E::kSelect)}, {{kBool, c}, {kF32, x}, {kF32, y}},
                     kF32, 5);
  EXPECT_EQ(sel[1], 20);
  EXPECT_EQ(sel[2], -3);
  EXPECT_EQ(sel[3], 40);
  EXPECT_TRUE(std::isnan(sel[4]));
  auto seli = run_map({in(0), in(1), in(2), op(E::kSelect)},
                      {{kBool, c}, {kI32, {1, 2, 3, 4, 5}}, {kI32, {-1, -2, -3, -4, -5}}},
                      kI32, 5);
  EXPECT_EQ(seli, (std::vector<double>{1, -2, 3, -4, -5}));
  auto selb = run_map({in(0), in(1), in(2), op(E::kSelect)},
                      {{kBool, c}, {kBool, {1, 1, 1, 1, 1}}, {kBool, {0, 0, 0, 0, 0}}}, kBool, 5);
  EXPECT_EQ(selb, c);
  // A half-flagged select rounds a float result.
  auto selh = run_map({in(0), in(1), in(2), op(E::kSelect, true)},
                      {{kBool, {1, 0}}, {kF32, {0.1, 0.1}}, {kF32, {2049, 2049}}},
                      kF32, 2);
  EXPECT_EQ(selh[0], ref_round_half(static_cast<float>(0.1)));
  EXPECT_EQ(selh[1], 2048.0);
}

TEST(MapCodelet, Casts) {
  // float -> int32 truncates toward zero and saturates; NaN gives INT32_MIN.
  std::vector<double> f = {0.0, -0.0, 0.9, -0.9, 1.5, -1.5, 2147483520.0, 2147483648.0, -2147483648.0, -3e9, 3e9,
                           INFINITY, -INFINITY, NAN, 16777217.0};
  std::vector<double> want_i = {0, 0, 0, 0, 1, -1, 2147483520.0, INT_MAX, INT_MIN, INT_MIN, INT_MAX, INT_MAX, INT_MIN,
                                INT_MIN, 16777216};
  EXPECT_EQ(run_map({in(0), op(E::kCastI32)}, {{kF32, f}}, kI32, f.size()), want_i);
  // int32 -> float rounds to nearest even.
  std::vector<double> i = {0, 1, -1, 16777217, 16777219, INT_MAX, INT_MIN, -16777217};
  auto gf = run_map({in(0), op(E::kCastF32)}, {{kI32, i}}, kF32, i.size());
  for (size_t k = 0; k < i.size(); ++k) EXPECT_EQ(gf[k], static_cast<double>(static_cast<float>(i[k]))) << i[k];
  EXPECT_EQ(gf[3], 16777216.0);
  EXPECT_EQ(gf[4], 16777220.0);
  // float -> float16 rounds (also from ints, and kCastF16 rounds without a half flag).
  std::vector<double> h = {0.1, 2049, 2051, 65519, 65520, -1e6, 1e-8};
  auto gh = run_map({in(0), op(E::kCastF16)}, {{kF32, h}}, kF32, h.size());
  for (size_t k = 0; k < h.size(); ++k) EXPECT_EQ(gh[k], ref_round_half(static_cast<float>(h[k]))) << h[k];
  auto gih = run_map({in(0), op(E::kCastF16)}, {{kI32, {2049, 4097, 70000}}}, kF32, 3);
  EXPECT_EQ(gih, (std::vector<double>{2048, 4096, INFINITY}));
  // A half-flagged cast to float32 rounds too.
  auto gfh = run_map({in(0), op(E::kCastF32, true)}, {{kI32, {2049}}}, kF32, 1);
  EXPECT_EQ(gfh[0], 2048);
  // Casts to bool: non-zero is true, NaN is true, -0 is false.
  EXPECT_EQ(run_map({in(0), op(E::kCastBool)}, {{kF32, {0.0, -0.0, 1e-30, NAN, -2}}}, kBool, 5),
            (std::vector<double>{0, 0, 1, 1, 1}));
  EXPECT_EQ(run_map({in(0), op(E::kCastBool)}, {{kI32, {0, 1, -1, INT_MIN}}}, kBool, 4),
            (std::vector<double>{0, 1, 1, 1}));
  // bool -> numbers.
  EXPECT_EQ(run_map({in(0), op(E::kCastF32)}, {{kBool, {0, 1}}}, kF32, 2), (std::vector<double>{0, 1}));
  EXPECT_EQ(run_map({in(0), op(E::kCastI32)}, {{kBool, {0, 1}}}, kI32, 2), (std::vector<double>{0, 1}));
  // int -> int is the identity.
  EXPECT_EQ(run_map({in(0), op(E::kCastI32)}, {{kI32, {INT_MIN, 5}}}, kI32, 2),
            (std::vector<double>{INT_MIN, 5}));
}

// Every finite value of a float8 format, decoded from its bit fields: (value,
// code). `ebits`/`mbits` exponent and mantissa widths, `bias`; `fn`: the
// all-ones pattern is NaN (E4M3FN); `ieee`: the top exponent is
// infinity/NaN (E5M2); `uz`: 0x80 is NaN, no -0 (the FNUZ formats).
std::vector<std::pair<double, int>> float8_values(int ebits, int mbits, int bias, bool fn, bool ieee, bool uz) {
  std::vector<std::pair<double, int>> out;
  for (int code = 0; code < 256; ++code) {
    const int s = code >> 7, e = (code >> mbits) & ((1 << ebits) - 1), m = code & ((1 << mbits) - 1);
    if (uz && code == 0x80) continue;
    if (fn && e == (1 << ebits) - 1 && m == (1 << mbits) - 1) continue;
    if (ieee && e == (1 << ebits) - 1) continue;
    const double mag = e == 0 ? std::ldexp(m, 1 - bias - mbits) : std::ldexp((1 << mbits) + m, e - bias - mbits);
    out.push_back({s ? -mag : mag, code});
  }
  return out;
}

// The value of `values` nearest to x, ties to the even code. Rounding sees
// one more value past the largest finite one, a step further with the next
// code (as if the exponent went on); landing there gives `over`.
double nearest(std::vector<std::pair<double, int>> values, double x, double over) {
  double max = 0, below = 0;
  int max_code = 0;
  for (const auto& [v, code] : values)
    if (v > max) max = v, max_code = code;
  for (const auto& [v, code] : values)
    if (v < max && v > below) below = v;
  const double beyond = max + (max - below);
  if (std::fabs(x) >= beyond) return std::copysign(over, x);
  values.push_back({beyond, max_code + 1});
  values.push_back({-beyond, (max_code + 1) | 0x80});
  double best = NAN, best_d = INFINITY;
  for (const auto& [v, code] : values) {
    const double d = std::fabs(v - x);
    if (d < best_d || (d == best_d && (code & 1) == 0)) best = v, best_d = d;
  }
  if (std::fabs(best) == beyond) return std::copysign(over, x);
  return best == 0 ? std::copysign(0.0, x) : best;
}

TEST(MapCodelet, RoundingToBfloat16AndFloat8GivesTheNearestValueTiesToEven) {
  // bfloat16: float32 with the low 16 bits rounded off.
  std::mt19937 rng(21);
  std::vector<double> xs = {0.0, -0.0, 1.0, 1.0 + 0x1p-8, 1.0 + 0x3p-8, 1.0 + 0x1p-8 + 0x1p-23, -(1.0 + 0x1p-8),
                            0x1.fffep127, 0x1.ff7fp127, 0x1.ff8p127, FLT_TRUE_MIN, INFINITY, -INFINITY, NAN};
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2000; ++i) {
    uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, 4);
    xs.push_back(f);
  }
  auto got = run_map({in(0), op(E::kRoundBf16)}, {{kF32, xs}}, kF32, xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const float x = static_cast<float>(xs[i]);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(got[i]));
      continue;
    }
    // Reference: the two bfloat16 neighbours by truncation, picked by distance.
    uint32_t b;
    std::memcpy(&b, &x, 4);
    const uint32_t lo_b = b & 0xffff0000u, hi_b = lo_b + 0x10000u;
    float lo, hi;
    std::memcpy(&lo, &lo_b, 4);
    std::memcpy(&hi, &hi_b, 4);
    // Past the largest bfloat16 the next step is 2^128, which is infinity.
    const double hi_d = std::isinf(hi) ? std::copysign(0x1p128, hi) : static_cast<double>(hi);
    const double dl = std::fabs(static_cast<double>(x) - lo), dh = std::fabs(hi_d - x);
    const double want = (std::isinf(x) || dl < dh || (dl == dh && ((lo_b >> 16) & 1) == 0)) ? lo : hi;
    ASSERT_EQ(got[i], want) << xs[i];
    ASSERT_EQ(std::signbit(got[i]), std::signbit(x)) << xs[i];
  }

  struct Format {
    int code, ebits, mbits, bias;
    bool fn, ieee, uz;
    double max;
  };
  const Format formats[] = {{17, 4, 3, 7, true, false, false, 448},
                            {18, 4, 3, 8, false, false, true, 240},
                            {19, 5, 2, 15, false, true, false, 57344},
                            {20, 5, 2, 16, false, false, true, 57344}};
  for (const Format& f : formats) {
    SCOPED_TRACE(f.code);
    const auto values = float8_values(f.ebits, f.mbits, f.bias, f.fn, f.ieee, f.uz);
    double largest = 0;
    for (const auto& v : values) largest = std::max(largest, v.first);
    ASSERT_EQ(largest, f.max);
    // Every value, every midpoint between neighbours and a little either
    // side, values beyond the range, specials and random floats.
    std::vector<double> sorted;
    for (const auto& v : values) sorted.push_back(v.first);
    std::sort(sorted.begin(), sorted.end());
    std::vector<double> x = {INFINITY, -INFINITY, NAN, 1e30, -1e30, f.max * 1.04, f.max * 1.07, -f.max * 1.1};
    for (size_t k = 0; k < sorted.size(); ++k) {
      x.push_back(sorted[k]);
      if (k + 1 < sorted.size() && sorted[k + 1] != sorted[k]) {
        const double mid = (sorted[k] + sorted[k + 1]) / 2;
        x.push_back(mid);
        x.push_back(std::nextafter(static_cast<float>(mid), INFINITY));
        x.push_back(std::nextafter(static_cast<float>(mid), -INFINITY));
      }
    }
    std::uniform_real_distribution<double> u(-f.max * 1.2, f.max * 1.2), small(-4, 4);
    for (int i = 0; i < 500; ++i) x.push_back(static_cast<float>(u(rng)));
    for (int i = 0; i < 500; ++i) x.push_back(static_cast<float>(small(rng)));
    for (int saturate = 0; saturate <= 1; ++saturate) {
      SCOPED_TRACE(saturate ? "saturate" : "no saturation");
      auto g = run_map({in(0), opp(E::kRoundF8, f.code, saturate)}, {{kF32, x}}, kF32, x.size());
      const double over = saturate ? f.max : f.ieee ? INFINITY : NAN;
      for (size_t i = 0; i < x.size(); ++i) {
        if (std::isnan(x[i])) {
          ASSERT_TRUE(std::isnan(g[i]));
          continue;
        }
        double want = std::isinf(x[i]) ? std::copysign(over, x[i]) : nearest(values, x[i], over);
        if (f.uz && want == 0) want = 0.0;
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(g[i])) << x[i] << " got " << g[i];
          continue;
        }
        ASSERT_EQ(g[i], want) << x[i];
        ASSERT_EQ(std::signbit(g[i]), std::signbit(want)) << x[i];
      }
    }
  }
}

TEST(MapCodelet, OutputConversions) {
  // A float result stored as float16 is rounded once, to nearest even.
  std::vector<double> x = {0.1, 2049, 2051, 65519, 65520, -65520, 1e-8, 3e-8, NAN};
  auto h = run_map({in(0)}, {{kF32, x}}, kF16, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(h[i]));
    } else {
      EXPECT_EQ(h[i], ref_round_half(static_cast<float>(x[i]))) << x[i];
    }
  }
  // Integer and boolean results into every output type.
  EXPECT_EQ(run_map({in(0)}, {{kI32, {3, -4, 2049}}}, kF32, 3), (std::vector<double>{3, -4, 2049}));
  EXPECT_EQ(run_map({in(0)}, {{kI32, {3, -4, 2049}}}, kF16, 3), (std::vector<double>{3, -4, 2048}));
  EXPECT_EQ(run_map({in(0)}, {{kI32, {3, 0, -1}}}, kBool, 3), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(run_map({in(0)}, {{kBool, {1, 0}}}, kI32, 2), (std::vector<double>{1, 0}));
  EXPECT_EQ(run_map({in(0)}, {{kF32, {0.0, 0.5, NAN}}}, kBool, 3), (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(run_map({in(0)}, {{kF32, {2.9, -2.9}}}, kI32, 2), (std::vector<double>{2, -2}));
  // float16 operands are widened exactly.
  std::vector<double> hv;
  for (uint32_t b = 0; b < 0x7c00; b += 37) hv.push_back(ref_half_to_double(static_cast<uint16_t>(b)));
  EXPECT_EQ(run_map({in(0)}, {{kF16, hv}}, kF32, hv.size()), hv);
}

TEST(MapCodelet, ConstantsAndScalarsBroadcast) {
  const uint64_t n = 700;  // several blocks and a tail
  std::vector<double> x(n);
  for (uint64_t i = 0; i < n; ++i) x[i] = static_cast<double>(i) * 0.25 - 40;
  // (x * s + 0.5) - 3, with s a broadcast scalar operand.
  auto got = run_map({in(0), in(1), op(E::kMul), cf(0.5), op(E::kAdd), ci(3), op(E::kCastF32), op(E::kSub)},
                     {{kF32, x}, {kF32, {1.5}, true}}, kF32, n);
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], x[i] * 1.5 + 0.5 - 3) << i;
  // Integer constants and a scalar int operand.
  auto gi = run_map({in(0), op(E::kCastI32), in(1), op(E::kAdd), ci(-7), op(E::kMul)},
                    {{kF32, x}, {kI32, {100}, true}}, kI32, n);
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(gi[i], (std::trunc(x[i]) + 100) * -7) << i;
  // A half-flagged constant is rounded before use.
  auto gh = run_map({in(0), cf(0.1, true), op(E::kMul)}, {{kF32, {1.0, 3.0}}}, kF32, 2);
  EXPECT_EQ(gh[0], ref_round_half(0.1));
  EXPECT_EQ(gh[1], static_cast<double>(static_cast<float>(3.0 * ref_round_half(0.1))));
  // Deep expression (stack depth 5) over a half scalar.
  auto gd = run_map({in(0), in(0), in(0), in(0), in(1), op(E::kAdd), op(E::kAdd), op(E::kAdd), op(E::kAdd)},
                    {{kF32, x}, {kF16, {0.5}, true}}, kF32, n);
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(gd[i], 3 * x[i] + (x[i] + 0.5)) << i;
  EXPECT_TRUE(run_map({in(0), op(E::kNeg)}, {{kF32, {}}}, kF32, 0).empty());
}

// Float32 expressions of arithmetic and functions (those of arithmetic
// alone evaluated sixteen elements at a time in registers, up to 128
// elements, where the build has AVX-512): every element as the operations
// one by one give it, each arithmetic operation IEEE float32 arithmetic
// (computed in double and rounded: exact for +, -, x, /) and each function
// what a one-operation vertex computes on the same values. Lengths around
// the sixteen-element chunks, the register limit and the 256-element
// blocks, NaNs, infinities and values erf and exp take one by one among
// them, and an output that is its first operand's own bytes.
TEST(MapCodelet, FloatExpressionsMatchTheirOperationsOneByOne) {
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> u(-6.0f, 6.0f);
  const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-30f, FLT_TRUE_MIN, 1e30f};
  auto f32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };
  // A function of the one-operation vertex, over a whole array.
  auto fn = [](E o, const std::vector<double>& v) { return run_map({in(0), op(o)}, {{kF32, v}}, kF32, v.size()); };
  for (uint64_t n : {1u, 5u, 15u, 16u, 17u, 33u, 127u, 128u, 129u, 255u, 256u, 257u, 700u}) {
    std::vector<double> x(n), y(n), z(n), w(n);
    for (uint64_t i = 0; i < n; ++i) {
      x[i] = i % 29 == 3 ? special[(i / 29) % 8] : u(rng);
      y[i] = u(rng);
      z[i] = i % 31 == 7 ? 0.0 : u(rng);
      w[i] = u(rng);
    }
    // A normalisation's scale and shift: ((x * y) * z) + w.
    auto got = run_map({in(0), in(1), op(E::kMul), in(2), op(E::kMul), in(3), op(E::kAdd)},
                       {{kF32, x}, {kF32, y}, {kF32, z}, {kF32, w}}, kF32, n);
    for (uint64_t i = 0; i < n; ++i) {
      const double want = f32(f32(f32(x[i] * y[i]) * z[i]) + w[i]);
      ASSERT_TRUE(got[i] == want || (std::isnan(got[i]) && std::isnan(want))) << "n " << n << ", element " << i;
    }
    // A GELU written out: (x * (erf(x / 1.4142135) + 1)) * 0.5.
    std::vector<double> q(n);
    for (uint64_t i = 0; i < n; ++i) q[i] = f32(x[i] / f32(1.4142135));
    const std::vector<double> e = fn(E::kErf, q);
    got = run_map({in(0), in(0), cf(1.4142135), op(E::kDiv), op(E::kErf), cf(1.0), op(E::kAdd), op(E::kMul), cf(0.5),
                   op(E::kMul)},
                  {{kF32, x}}, kF32, n);
    for (uint64_t i = 0; i < n; ++i) {
      const double want = f32(f32(x[i] * f32(e[i] + 1.0)) * 0.5);
      ASSERT_TRUE(got[i] == want || (std::isnan(got[i]) && std::isnan(want))) << "gelu, n " << n << ", element " << i;
    }
    // A softmax's exponent and an order-sensitive tail: exp(x - y) / 3 - z.
    std::vector<double> d(n);
    for (uint64_t i = 0; i < n; ++i) d[i] = f32(x[i] - y[i]);
    const std::vector<double> ex = fn(E::kExp, d);
    got = run_map({in(0), in(1), op(E::kSub), op(E::kExp), cf(3.0), op(E::kDiv), in(2), op(E::kSub)},
                  {{kF32, x}, {kF32, y}, {kF32, z}}, kF32, n);
    for (uint64_t i = 0; i < n; ++i) {
      const double want = f32(f32(ex[i] / 3.0) - z[i]);
      ASSERT_TRUE(got[i] == want || (std::isnan(got[i]) && std::isnan(want))) << "softmax, n " << n << ", element " << i;
    }
    // In place: the output is the first operand's bytes; (x - y) * x.
    TileMem mem;
    Field fx = mem.field(n, kF32), fy = mem.field(n, kF32);
    for (uint64_t i = 0; i < n; ++i) {
      mem.put(fx, kF32, i, x[i]);
      mem.put(fy, kF32, i, y[i]);
    }
    MapVertex v(0, std::make_shared<const std::vector<ExprInstr>>(std::vector<ExprInstr>{in(0), in(1), op(E::kSub), in(0), op(E::kMul)}),
                {MapVertex::Operand{fx, kF32, false}, MapVertex::Operand{fy, kF32, false}}, fx, kF32);
    v.compute(mem.bytes.data());
    for (uint64_t i = 0; i < n; ++i) {
      const double want = f32(f32(x[i] - y[i]) * x[i]), g = mem.get(fx, kF32, i);
      ASSERT_TRUE(g == want || (std::isnan(g) && std::isnan(want))) << "in place, n " << n << ", element " << i;
    }
  }
}

// The same in registers with scalar and repeated operands (a row's mean
// and scale over the row, as a normalisation's and a softmax's vertices
// have them), with and without a function: runs
// inside a chunk, across chunks, of one element, empty, and the scalar in
// every lane; every element as the operations one by one give it.
TEST(MapCodelet, RepeatedAndScalarOperandsInExpressions) {
  std::mt19937 rng(22);
  std::uniform_real_distribution<float> u(-6.0f, 6.0f);
  auto f32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };
  for (uint64_t n : {1u, 5u, 16u, 17u, 33u, 36u, 48u, 100u, 128u, 129u, 200u}) {
    for (int trial = 0; trial < 8; ++trial) {
      // Runs covering n: lengths 0-40, short ones likelier.
      std::vector<uint32_t> runs;
      for (uint64_t covered = 0; covered < n;) {
        uint32_t r = static_cast<uint32_t>(rng() % 4 == 0 ? rng() % 41 : rng() % 6);
        r = static_cast<uint32_t>(std::min<uint64_t>(r, n - covered));
        runs.push_back(r);
        covered += r;
      }
      std::vector<double> x(n), g(n), mean(runs.size()), scale(runs.size());
      for (auto& v : x) v = u(rng);
      for (auto& v : g) v = u(rng);
      for (auto& v : mean) v = u(rng);
      for (auto& v : scale) v = u(rng);
      const double b = u(rng);
      TileMem mem;
      auto put = [&](const std::vector<double>& v) {
        Field f = mem.field(v.size(), kF32);
        for (uint64_t i = 0; i < v.size(); ++i) mem.put(f, kF32, i, v[i]);
        return f;
      };
      Field fx = put(x), fg = put(g), fm = put(mean), fs = put(scale), fb = put({b});
      Field out = mem.field(n, kF32);
      // ((x - mean) * scale) * g + b, (x / scale) - b, and a softmax's
      // exponent over its rows: exp(x - mean) / scale (exp from the
      // one-operation vertex).
      std::vector<double> d(n);
      {
        size_t r = 0;
        uint32_t used = 0;
        for (uint64_t i = 0; i < n; ++i, ++used) {
          while (used == runs[r]) {
            ++r;
            used = 0;
          }
          d[i] = f32(x[i] - mean[r]);
        }
      }
      const std::vector<double> ex = run_map({in(0), op(E::kExp)}, {{kF32, d}}, kF32, n);
      const std::vector<std::vector<ExprInstr>> exprs = {
          {in(0), in(1), op(E::kSub), in(2), op(E::kMul), in(3), op(E::kMul), in(4), op(E::kAdd)},
          {in(0), in(2), op(E::kDiv), in(4), op(E::kSub)},
          {in(0), in(1), op(E::kSub), op(E::kExp), in(2), op(E::kDiv)}};
      for (size_t e = 0; e < exprs.size(); ++e) {
        std::vector<MapVertex::Operand> ops = {{fx, kF32, false}, {fm, kF32, false, runs}, {fs, kF32, false, runs},
                                               {fg, kF32, false}, {fb, kF32, true}};
        MapVertex v(0, std::make_shared<const std::vector<ExprInstr>>(exprs[e]), ops, out, kF32);
        v.compute(mem.bytes.data());
        size_t r = 0;
        uint32_t used = 0;
        for (uint64_t i = 0; i < n; ++i) {
          while (used == runs[r]) {
            ++r;
            used = 0;
          }
          ++used;
          const double want = e == 0   ? f32(f32(f32(f32(x[i] - mean[r]) * scale[r]) * g[i]) + b)
                              : e == 1 ? f32(f32(x[i] / scale[r]) - b)
                                       : f32(ex[i] / scale[r]);
          ASSERT_EQ(mem.get(out, kF32, i), want) << "expression " << e << ", n " << n << ", element " << i;
        }
      }
    }
  }
}

// Float16 expressions, in registers up to 128 elements and by the
// interpreter past them: float16 operands whole, scalar and repeated, a
// float32 one (a repeated one read through a half-flagged leaf, which
// rounds it), half-flagged and unflagged instructions and constants, exp
// and erf, float16 and float32 outputs, and a float16 output over its own
// operand; every element as the operations one by one give it, each
// flagged result rounded to half once (exp and erf from the float32
// one-operation vertex), nothing written outside the output.
TEST(MapCodelet, HalfExpressionsRoundWhereFlagged) {
  std::mt19937 rng(31);
  std::uniform_real_distribution<double> u(-6.0, 6.0);
  auto f32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };
  auto h = [&](double v) { return ref_round_half(f32(v)); };  // a float result rounded to half
  for (uint64_t n : {1u, 5u, 16u, 17u, 33u, 100u, 128u, 129u, 200u}) {
    std::vector<uint32_t> runs;
    for (uint64_t covered = 0; covered < n;) {
      const uint32_t r = static_cast<uint32_t>(std::min<uint64_t>(rng() % 4 == 0 ? rng() % 41 : rng() % 6, n - covered));
      runs.push_back(r);
      covered += r;
    }
    std::vector<double> x(n), g(n), mean(runs.size()), scale(runs.size());
    for (auto& v : x) v = ref_round_half(u(rng));
    for (auto& v : g) v = ref_round_half(u(rng));
    for (auto& v : mean) v = ref_round_half(u(rng));
    for (auto& v : scale) v = f32(u(rng));  // float32, not a half value
    const double b = ref_round_half(u(rng));
    TileMem mem;
    auto put = [&](const std::vector<double>& v, DeviceType t) {
      Field f = mem.field(v.size(), t);
      for (uint64_t i = 0; i < v.size(); ++i) mem.put(f, t, i, v[i]);
      return f;
    };
    Field fx = put(x, kF16), fg = put(g, kF16), fm = put(mean, kF16), fs = put(scale, kF32), fb = put({b}, kF16);
    std::vector<size_t> run_of(n);
    for (size_t i = 0, r = 0, used = 0; i < n; ++i, ++used) {
      while (used == runs[r]) {
        ++r;
        used = 0;
      }
      run_of[i] = r;
    }
    std::vector<double> d(n), q(n);
    for (uint64_t i = 0; i < n; ++i) {
      d[i] = h(x[i] - mean[run_of[i]]);
      q[i] = h(x[i] * ref_round_half(0.7));
    }
    const std::vector<double> ex = run_map({in(0), op(E::kExp)}, {{kF32, d}}, kF32, n);
    const std::vector<double> er = run_map({in(0), op(E::kErf)}, {{kF32, q}}, kF32, n);
    const std::vector<std::vector<ExprInstr>> exprs = {
        in_half({in(0), in(1), op(E::kSub), in(2), op(E::kMul), in(3), op(E::kMul), in(4), op(E::kAdd)}),
        {in(0), in(2), op(E::kDiv), in(4), op(E::kSub, true)},
        in_half({in(0), in(1), op(E::kSub), op(E::kExp), in(2), op(E::kDiv), in(4), op(E::kAdd)}),
        in_half({in(0), cf(0.7), op(E::kMul), op(E::kErf), in(3), op(E::kMul)})};
    std::vector<std::pair<uint64_t, uint64_t>> used;
    for (auto [f, t] : std::vector<std::pair<Field, DeviceType>>{{fx, kF16}, {fg, kF16}, {fm, kF16}, {fs, kF32}, {fb, kF16}})
      used.push_back({f.byte_offset, f.count * device_type_size(t)});
    for (size_t e = 0; e < exprs.size(); ++e)
      for (DeviceType out_dtype : {kF16, kF32}) {
        Field out = mem.field(n, out_dtype);
        used.push_back({out.byte_offset, n * device_type_size(out_dtype)});
        mem.field(32, kF32);  // guard bytes past the output: nothing may write them
        std::vector<MapVertex::Operand> ops = {{fx, kF16, false}, {fm, kF16, false, runs}, {fs, kF32, false, runs},
                                               {fg, kF16, false}, {fb, kF16, true}};
        MapVertex v(0, std::make_shared<const std::vector<ExprInstr>>(exprs[e]), ops, out, out_dtype);
        v.compute(mem.bytes.data());
        for (uint64_t i = 0; i < n; ++i) {
          const size_t r = run_of[i];
          const double s = ref_round_half(scale[r]);  // through a half-flagged leaf
          const double want = e == 0   ? h(h(h(h(x[i] - mean[r]) * s) * g[i]) + b)
                              : e == 1 ? h(f32(x[i] / scale[r]) - b)
                              : e == 2 ? h(h(ref_round_half(ex[i]) / s) + b)
                                       : h(ref_round_half(er[i]) * g[i]);
          const double got = mem.get(out, out_dtype, i);
          ASSERT_EQ(got, out_dtype == kF16 ? ref_round_half(want) : want)
              << "expression " << e << ", " << device_type_name(out_dtype) << " out, n " << n << ", element " << i;
        }
        ASSERT_TRUE(mem.guards_intact(used)) << "expression " << e << " wrote outside its output, n " << n;
      }
    // In place: x = round16(round16(x - mean) * g), the output x's own bytes.
    MapVertex v(0, std::make_shared<const std::vector<ExprInstr>>(in_half({in(0), in(1), op(E::kSub), in(2), op(E::kMul)})),
                {{fx, kF16, false}, {fm, kF16, false, runs}, {fg, kF16, false}}, fx, kF16);
    v.compute(mem.bytes.data());
    for (uint64_t i = 0; i < n; ++i)
      ASSERT_EQ(mem.get(fx, kF16, i), h(h(x[i] - mean[run_of[i]]) * g[i])) << "in place, n " << n << ", element " << i;
    ASSERT_TRUE(mem.guards_intact(used)) << "in place, n " << n;
  }
}

// Float16 ReLU on every binary16 value: a positive one (+0, subnormals,
// +inf) comes back as it was, a negative one (-0, -inf too) as +0, a NaN
// quietened with its payload kept (what widening to float and narrowing
// back does); over lengths around a vector's 32 lanes, into another buffer
// or in place, half-flagged or not, and under stochastic rounding (the
// interpreter, element by element) the same bits.
TEST(MapCodelet, HalfReluOnEveryBinary16Value) {
  auto want = [](uint16_t h) -> uint16_t {
    if ((h & 0x7fff) > 0x7c00) return static_cast<uint16_t>(h | 0x0200);
    return (h & 0x8000) ? 0 : h;
  };
  std::mt19937 rng(41);
  RoundingRng draws(3, 0, 0);
  for (bool half_flag : {true, false})
    for (bool in_place : {false, true})
      for (bool stochastic : {false, true})
        for (uint64_t n : {1u, 5u, 31u, 32u, 33u, 100u, 65536u}) {
          // Every value once (n = 65536, in order: whole vectors of
          // neighbours, most without a NaN), or random bits with NaNs rare
          // enough that most vectors hold none, and a few special values.
          std::vector<uint16_t> bits(n);
          for (uint64_t i = 0; i < n; ++i) {
            uint16_t b = static_cast<uint16_t>(n == 65536 ? i : rng());
            if (n != 65536 && (b & 0x7fff) > 0x7c00 && (n == 32 || rng() % 8)) b &= 0x83ff;  // mostly not NaN
            bits[i] = b;
          }
          if (n == 32) {  // one whole vector of special values, no NaN among them
            const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400, 0x8400,
                                         0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x3c00, 0xbc00};
            for (size_t i = 0; i < std::size(specials); ++i) bits[i] = specials[i];
          }
          TileMem mem;
          Field x = mem.field(n, kF16);
          Field out = in_place ? x : mem.field(n, kF16);
          std::memcpy(mem.bytes.data() + x.byte_offset, bits.data(), n * 2);
          MapVertex v(0, std::make_shared<const std::vector<ExprInstr>>(std::vector<ExprInstr>{in(0), op(E::kRelu, half_flag)}),
                      {MapVertex::Operand{x, kF16, false}}, out, kF16);
          {
            ScopedRounding rounding(stochastic ? &draws : nullptr);
            v.compute(mem.bytes.data());
          }
          ASSERT_TRUE(mem.guards_intact({{x.byte_offset, n * 2}, {out.byte_offset, n * 2}}))
              << "the vertex wrote outside its output";
          for (uint64_t i = 0; i < n; ++i) {
            uint16_t got;
            std::memcpy(&got, mem.bytes.data() + out.byte_offset + i * 2, 2);
            ASSERT_EQ(got, want(bits[i])) << std::hex << "x=0x" << bits[i] << std::dec << ", n " << n
                                          << (in_place ? ", in place" : "") << (half_flag ? ", half-flagged" : "")
                                          << (stochastic ? ", stochastic" : "");
          }
        }
}

// Mixed precision in one fused expression: each flagged instruction rounds,
// unflagged ones stay in float, exactly as the separate operations would.
TEST(MapCodelet, HalfFlagsRoundExactlyWhereSet) {
  std::mt19937 rng(16);
  std::uniform_real_distribution<double> u(-300, 300);
  const size_t n = 500;
  std::vector<double> a(n), b(n), c(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = ref_round_half(u(rng));
    b[i] = ref_round_half(u(rng));
    c[i] = ref_round_half(u(rng));  // so every operation's operands are halves: one rounding is exact
  }
  // round16(a * b) + c, the add in float.
  auto got = run_map({in(0), in(1), op(E::kMul, true), in(2), op(E::kAdd)},
                     {{kF16, a}, {kF16, b}, {kF32, c}}, kF32, n);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(got[i], static_cast<double>(static_cast<float>(ref_round_half(a[i] * b[i]) + c[i]))) << i;
  // round16(round16(a * b) + c): all in half.
  auto goth = run_map(in_half({in(0), in(1), op(E::kMul), in(2), op(E::kAdd)}),
                      {{kF16, a}, {kF16, b}, {kF32, c}}, kF32, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(goth[i], ref_round_half(ref_round_half(a[i] * b[i]) + c[i])) << i;
  auto flags = in_half({in(0), op(E::kNeg)});
  for (const auto& ins : flags) EXPECT_TRUE(ins.half);
}

// An input instruction flagged half should round a float32 operand like
// every other flagged instruction does (the header: each instruction says
// whether its float result is rounded).
TEST(MapCodelet, HalfFlaggedInputRoundsFloat32Operand) {
  auto got = run_map({in(0, true)}, {{kF32, {0.1, 2049}}}, kF32, 2);
  EXPECT_EQ(got[0], ref_round_half(static_cast<float>(0.1)));
  EXPECT_EQ(got[1], 2048.0);
  auto cmp = run_map({in(0, true), cf(2048, true), op(E::kEq, true)}, {{kF32, {2049}}}, kBool, 1);
  EXPECT_EQ(cmp[0], 1.0);
}

TEST(FillCodelet, EveryType) {
  for (auto [dt, value, want] : std::vector<std::tuple<DeviceType, double, double>>{{kF32, 1.25, 1.25},
                                 {kF32, 0.1, static_cast<float>(0.1)},
                                 {kF16, 0.1, ref_round_half(0.1)},
                                 {kF16, -INFINITY, -INFINITY},
                                 {kI32, -7, -7},
                                 {kI32, 2.9, 2},
                                 {kI32, 1e20, INT_MIN},
                                 {kI32, NAN, INT_MIN},
                                 {kBool, 0.5, 1},
                                 {kBool, 0, 0}}) {
    TileMem mem;
    Field f = mem.field(37, dt);
    FillVertex v(0, f, dt, value);
    v.compute(mem.bytes.data());
    EXPECT_TRUE(mem.guards_intact({{f.byte_offset, 37 * device_type_size(dt)}}));
    for (uint64_t i = 0; i < 37; ++i) ASSERT_EQ(mem.get(f, dt, i), want) << device_type_name(dt) << " " << value;
    EXPECT_GT(v.cycles(target_for("ipu2")), 0u);
  }
}

}  // namespace
