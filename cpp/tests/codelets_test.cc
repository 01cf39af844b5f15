// Codelets run directly on a byte buffer standing in for one tile's memory, so
// each vertex's arithmetic is checked in isolation, against references
// computed here in double precision (or exactly, with integers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <tuple>

#include "neurenix/codelets.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;
using E = ExprOpCode;
using MNK = std::tuple<uint32_t, uint32_t, uint32_t>;

// Position of a binary16 value on the number line, in steps.
int64_t half_ordinal(uint16_t h) { return (h & 0x8000) ? -static_cast<int64_t>(h & 0x7fff) : h; }

// A tile's memory: fields are carved out of it at 8-byte aligned offsets,
// with a guard gap between them that no vertex may touch.
struct TileMem {
  std::vector<uint8_t> bytes;
  static constexpr uint8_t kGuard = 0xa5;
  uint64_t carve(uint64_t size) {
    uint64_t off = (bytes.size() + 7) / 8 * 8 + 16;
    bytes.resize(off + size + 16, kGuard);
    return off;
  }
  Field field(uint64_t count, DType dt) {
    Field f;
    f.var = 0;
    f.tile = 0;
    f.local = 0;
    f.count = count;
    f.byte_offset = carve(count * dtype_size(dt));
    return f;
  }
  void put(const Field& f, DType dt, uint64_t i, double v) {
    uint8_t* p = bytes.data() + f.byte_offset;
    switch (dt) {
      case DType::kFloat32: { float x = static_cast<float>(v); std::memcpy(p + 4 * i, &x, 4); break; }
      case DType::kFloat16: { uint16_t h = ref_double_to_half(v); std::memcpy(p + 2 * i, &h, 2); break; }
      case DType::kInt32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p + 4 * i, &x, 4); break; }
      case DType::kBool: p[i] = v != 0; break;
    }
  }
  double get(const Field& f, DType dt, uint64_t i) const {
    const uint8_t* p = bytes.data() + f.byte_offset;
    switch (dt) {
      case DType::kFloat32: { float x; std::memcpy(&x, p + 4 * i, 4); return x; }
      case DType::kFloat16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); return ref_half_to_double(h); }
      case DType::kInt32: { int32_t x; std::memcpy(&x, p + 4 * i, 4); return x; }
      case DType::kBool: return p[i];
    }
    return 0;
  }
  uint16_t half_bits_at(const Field& f, uint64_t i) const {
    uint16_t h;
    std::memcpy(&h, bytes.data() + f.byte_offset + 2 * i, 2);
    return h;
  }
  bool guards_intact(const std::vector<std::pair<uint64_t, uint64_t>>& used) const {
    for (uint64_t b = 0; b < bytes.size(); ++b) {
      bool inside = false;
      for (const auto& [off, len] : used)
        if (b >= off && b < off + len) inside = true;
      if (!inside && bytes[b] != kGuard) return false;
    }
    return true;
  }
};

struct Operand {
  DType dtype;
  std::vector<double> values;
  bool scalar = false;
};

// Runs one MapVertex over `n` elements; returns the outputs decoded to double.
std::vector<double> run_map(const std::vector<ExprInstr>& expr, const std::vector<Operand>& operands, DType out_dtype,
                            uint64_t n, TileMem* keep = nullptr) {
  TileMem mem;
  std::vector<MapVertex::Operand> ops;
  std::vector<std::pair<uint64_t, uint64_t>> used;
  for (const Operand& o : operands) {
    const uint64_t count = o.scalar ? 1 : n;
    Field f = mem.field(count, o.dtype);
    for (uint64_t i = 0; i < count; ++i) mem.put(f, o.dtype, i, o.values[o.scalar ? 0 : i]);
    used.push_back({f.byte_offset, count * dtype_size(o.dtype)});
    ops.push_back(MapVertex::Operand{f, o.dtype, o.scalar});
  }
  Field out = mem.field(n, out_dtype);
  used.push_back({out.byte_offset, n * dtype_size(out_dtype)});
  MapVertex v(0, std::make_shared<const std::vector<ExprInstr>>(expr), ops, out, out_dtype);
  v.compute(mem.bytes.data());
  EXPECT_TRUE(mem.guards_intact(used)) << "the vertex wrote outside its output";
  std::vector<double> r(n);
  for (uint64_t i = 0; i < n; ++i) r[i] = mem.get(out, out_dtype, i);
  if (keep) *keep = mem;
  return r;
}

ExprInstr in(uint32_t i, bool half = false) { return ExprInstr{E::kInput, i, 0, 0, half}; }
ExprInstr op(E o, bool half = false) { return ExprInstr{o, 0, 0, 0, half}; }
ExprInstr opp(E o, double imm, double imm2 = 0, bool half = false) { return ExprInstr{o, 0, imm, imm2, half}; }
ExprInstr cf(double v, bool half = false) { return ExprInstr{E::kConstF, 0, v, 0, half}; }
ExprInstr ci(int32_t v) { return ExprInstr{E::kConstI, 0, static_cast<double>(v), 0, false}; }

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
    auto got = run_map({in(0), opp(o, a, b)}, {{DType::kFloat32, xd}}, DType::kFloat32, xd.size());
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
    auto got = run_map({in(0), opp(o, a, b, true)}, {{DType::kFloat16, xh}}, DType::kFloat16, xh.size(), &mem);
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
  auto pymod = [](double a, double b) {
    double r = std::fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
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
    auto got = run_map({in(0), in(1), op(c.o)}, {{DType::kFloat32, xa}, {DType::kFloat32, xb}}, DType::kFloat32, n);
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
    auto goth = run_map({in(0), in(1), op(c.o, true)}, {{DType::kFloat16, ha}, {DType::kFloat16, hb}}, DType::kFloat32, n);
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

TEST(MapCodelet, FloatComparisons) {
  std::vector<double> a = {1, 1, 2, -0.0, NAN, NAN, 1, INFINITY, -INFINITY, 3.5, -2};
  std::vector<double> b = {1, 2, 1, 0.0, 1, NAN, NAN, INFINITY, INFINITY, 3.5000002, -2.0000002};
  const std::pair<E, std::function<bool(double, double)>> cases[] = {
      {E::kEq, [](double x, double y) { return x == y; }}, {E::kLt, [](double x, double y) { return x < y; }},
      {E::kLe, [](double x, double y) { return x <= y; }}, {E::kGt, [](double x, double y) { return x > y; }},
      {E::kGe, [](double x, double y) { return x >= y; }}};
  for (const auto& [o, f] : cases) {
    SCOPED_TRACE(expr_op_name(o));
    auto got = run_map({in(0), in(1), op(o)}, {{DType::kFloat32, a}, {DType::kFloat32, b}}, DType::kBool, a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const double fa = static_cast<float>(a[i]), fb = static_cast<float>(b[i]);
      EXPECT_EQ(got[i], f(fa, fb) ? 1.0 : 0.0) << a[i] << " vs " << b[i];
    }
    // Half flags do not apply to boolean results.
    auto goth = run_map({in(0), in(1), op(o, true)}, {{DType::kFloat32, a}, {DType::kFloat32, b}}, DType::kBool, a.size());
    EXPECT_EQ(goth, got);
  }
  std::vector<double> v = {0, 1, -1, INFINITY, -INFINITY, NAN, FLT_MAX};
  EXPECT_EQ(run_map({in(0), op(E::kIsNan)}, {{DType::kFloat32, v}}, DType::kBool, v.size()),
            (std::vector<double>{0, 0, 0, 0, 0, 1, 0}));
  EXPECT_EQ(run_map({in(0), op(E::kIsInf)}, {{DType::kFloat32, v}}, DType::kBool, v.size()),
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
    auto got = run_map({in(0), in(1), op(o)}, {{DType::kInt32, a}, {DType::kInt32, b}}, DType::kInt32, n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], wrap(f(static_cast<int64_t>(a[i]), static_cast<int64_t>(b[i])))) << a[i] << " , " << b[i];
  }
  // The cases that trap on x86 if done naively.
  auto d = run_map({in(0), in(1), op(E::kDiv)}, {{DType::kInt32, {INT_MIN, 5, -5, 0}}, {DType::kInt32, {-1, 0, 0, 0}}},
                   DType::kInt32, 4);
  EXPECT_EQ(d, (std::vector<double>{INT_MIN, 0, 0, 0}));
  auto m = run_map({in(0), in(1), op(E::kMod)}, {{DType::kInt32, {INT_MIN, 5, -7, 7}}, {DType::kInt32, {-1, 0, 3, -3}}},
                   DType::kInt32, 4);
  EXPECT_EQ(m, (std::vector<double>{0, 0, 2, -2}));
  auto fm = run_map({in(0), in(1), op(E::kFmod)}, {{DType::kInt32, {INT_MIN, 5, -7, 7}}, {DType::kInt32, {-1, 0, 3, -3}}},
                    DType::kInt32, 4);
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
  EXPECT_EQ(run_map({in(0), in(1), op(E::kPow)}, {{DType::kInt32, base}, {DType::kInt32, ex}}, DType::kInt32, base.size()), want);

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
    auto got = run_map({in(0), op(o)}, {{DType::kInt32, v}}, DType::kInt32, v.size());
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
    auto got = run_map({in(0), in(1), op(o)}, {{DType::kInt32, a}, {DType::kInt32, b}}, DType::kBool, a.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(got[i], f(static_cast<int64_t>(a[i]), static_cast<int64_t>(b[i])) ? 1 : 0);
  }
}

TEST(MapCodelet, BooleanLogicAndSelect) {
  std::vector<double> p = {0, 0, 1, 1}, q = {0, 1, 0, 1};
  auto run2 = [&](E o) { return run_map({in(0), in(1), op(o)}, {{DType::kBool, p}, {DType::kBool, q}}, DType::kBool, 4); };
  EXPECT_EQ(run2(E::kAnd), (std::vector<double>{0, 0, 0, 1}));
  EXPECT_EQ(run2(E::kOr), (std::vector<double>{0, 1, 1, 1}));
  EXPECT_EQ(run2(E::kXor), (std::vector<double>{0, 1, 1, 0}));
  EXPECT_EQ(run2(E::kEq), (std::vector<double>{1, 0, 0, 1}));
  EXPECT_EQ(run2(E::kLt), (std::vector<double>{0, 1, 0, 0}));
  EXPECT_EQ(run_map({in(0), op(E::kNot)}, {{DType::kBool, p}}, DType::kBool, 4), (std::vector<double>{1, 1, 0, 0}));
  // Any non-zero byte is true.
  {
    TileMem mem;
    Field a = mem.field(3, DType::kBool), out = mem.field(3, DType::kBool);
    mem.bytes[a.byte_offset] = 2;
    mem.bytes[a.byte_offset + 1] = 0;
    mem.bytes[a.byte_offset + 2] = 255;
    MapVertex v(0, std::make_shared<const std::vector<ExprInstr>>(std::vector<ExprInstr>{in(0), op(E::kNot)}),
                {MapVertex::Operand{a, DType::kBool, false}}, out, DType::kBool);
    v.compute(mem.bytes.data());
    EXPECT_EQ(mem.get(out, DType::kBool, 0), 0);
    EXPECT_EQ(mem.get(out, DType::kBool, 1), 1);
    EXPECT_EQ(mem.get(out, DType::kBool, 2), 0);
  }
  std::vector<double> c = {1, 0, 1, 0, 0}, x = {1.5, 2.5, -3, NAN, 7}, y = {10, 20, 30, 40, NAN};
  EXPECT_EQ(run_map({in(0), in(1), in(2), op(E::kSelect)}, {{DType::kBool, c}, {DType::kFloat32, x}, {DType::kFloat32, y}},
                    DType::kFloat32, 5)[0],
            1.5);
  auto sel = run_map({in(0), in(1), in(2), op(E::kSelect)}, {{DType::kBool, c}, {DType::kFloat32, x}, {DType::kFloat32, y}},
                     DType::kFloat32, 5);
  EXPECT_EQ(sel[1], 20);
  EXPECT_EQ(sel[2], -3);
  EXPECT_EQ(sel[3], 40);
  EXPECT_TRUE(std::isnan(sel[4]));
  auto seli = run_map({in(0), in(1), in(2), op(E::kSelect)},
                      {{DType::kBool, c}, {DType::kInt32, {1, 2, 3, 4, 5}}, {DType::kInt32, {-1, -2, -3, -4, -5}}},
                      DType::kInt32, 5);
  EXPECT_EQ(seli, (std::vector<double>{1, -2, 3, -4, -5}));
  auto selb = run_map({in(0), in(1), in(2), op(E::kSelect)},
                      {{DType::kBool, c}, {DType::kBool, {1, 1, 1, 1, 1}}, {DType::kBool, {0, 0, 0, 0, 0}}}, DType::kBool, 5);
  EXPECT_EQ(selb, c);
  // A half-flagged select rounds a float result.
  auto selh = run_map({in(0), in(1), in(2), op(E::kSelect, true)},
                      {{DType::kBool, {1, 0}}, {DType::kFloat32, {0.1, 0.1}}, {DType::kFloat32, {2049, 2049}}},
                      DType::kFloat32, 2);
  EXPECT_EQ(selh[0], ref_round_half(static_cast<float>(0.1)));
  EXPECT_EQ(selh[1], 2048.0);
}

TEST(MapCodelet, Casts) {
  // float -> int32 truncates toward zero and saturates; NaN gives INT32_MIN.
  std::vector<double> f = {0.0, -0.0, 0.9, -0.9, 1.5, -1.5, 2147483520.0, 2147483648.0, -2147483648.0, -3e9, 3e9,
                           INFINITY, -INFINITY, NAN, 16777217.0};
  std::vector<double> want_i = {0, 0, 0, 0, 1, -1, 2147483520.0, INT_MAX, INT_MIN, INT_MIN, INT_MAX, INT_MAX, INT_MIN,
                                INT_MIN, 16777216};
  EXPECT_EQ(run_map({in(0), op(E::kCastI32)}, {{DType::kFloat32, f}}, DType::kInt32, f.size()), want_i);
  // int32 -> float rounds to nearest even.
  std::vector<double> i = {0, 1, -1, 16777217, 16777219, INT_MAX, INT_MIN, -16777217};
  auto gf = run_map({in(0), op(E::kCastF32)}, {{DType::kInt32, i}}, DType::kFloat32, i.size());
  for (size_t k = 0; k < i.size(); ++k) EXPECT_EQ(gf[k], static_cast<double>(static_cast<float>(i[k]))) << i[k];
  EXPECT_EQ(gf[3], 16777216.0);
  EXPECT_EQ(gf[4], 16777220.0);
  // float -> float16 rounds (also from ints, and kCastF16 rounds without a half flag).
  std::vector<double> h = {0.1, 2049, 2051, 65519, 65520, -1e6, 1e-8};
  auto gh = run_map({in(0), op(E::kCastF16)}, {{DType::kFloat32, h}}, DType::kFloat32, h.size());
  for (size_t k = 0; k < h.size(); ++k) EXPECT_EQ(gh[k], ref_round_half(static_cast<float>(h[k]))) << h[k];
  auto gih = run_map({in(0), op(E::kCastF16)}, {{DType::kInt32, {2049, 4097, 70000}}}, DType::kFloat32, 3);
  EXPECT_EQ(gih, (std::vector<double>{2048, 4096, INFINITY}));
  // A half-flagged cast to float32 rounds too.
  auto gfh = run_map({in(0), op(E::kCastF32, true)}, {{DType::kInt32, {2049}}}, DType::kFloat32, 1);
  EXPECT_EQ(gfh[0], 2048);
  // Casts to bool: non-zero is true, NaN is true, -0 is false.
  EXPECT_EQ(run_map({in(0), op(E::kCastBool)}, {{DType::kFloat32, {0.0, -0.0, 1e-30, NAN, -2}}}, DType::kBool, 5),
            (std::vector<double>{0, 0, 1, 1, 1}));
  EXPECT_EQ(run_map({in(0), op(E::kCastBool)}, {{DType::kInt32, {0, 1, -1, INT_MIN}}}, DType::kBool, 4),
            (std::vector<double>{0, 1, 1, 1}));
  // bool -> numbers.
  EXPECT_EQ(run_map({in(0), op(E::kCastF32)}, {{DType::kBool, {0, 1}}}, DType::kFloat32, 2), (std::vector<double>{0, 1}));
  EXPECT_EQ(run_map({in(0), op(E::kCastI32)}, {{DType::kBool, {0, 1}}}, DType::kInt32, 2), (std::vector<double>{0, 1}));
  // int -> int is the identity.
  EXPECT_EQ(run_map({in(0), op(E::kCastI32)}, {{DType::kInt32, {INT_MIN, 5}}}, DType::kInt32, 2),
            (std::vector<double>{INT_MIN, 5}));
}

TEST(MapCodelet, OutputConversions) {
  // A float result stored as float16 is rounded once, to nearest even.
  std::vector<double> x = {0.1, 2049, 2051, 65519, 65520, -65520, 1e-8, 3e-8, NAN};
  auto h = run_map({in(0)}, {{DType::kFloat32, x}}, DType::kFloat16, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(h[i]));
    } else {
      EXPECT_EQ(h[i], ref_round_half(static_cast<float>(x[i]))) << x[i];
    }
  }
  // Integer and boolean results into every output type.
  EXPECT_EQ(run_map({in(0)}, {{DType::kInt32, {3, -4, 2049}}}, DType::kFloat32, 3), (std::vector<double>{3, -4, 2049}));
  EXPECT_EQ(run_map({in(0)}, {{DType::kInt32, {3, -4, 2049}}}, DType::kFloat16, 3), (std::vector<double>{3, -4, 2048}));
  EXPECT_EQ(run_map({in(0)}, {{DType::kInt32, {3, 0, -1}}}, DType::kBool, 3), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(run_map({in(0)}, {{DType::kBool, {1, 0}}}, DType::kInt32, 2), (std::vector<double>{1, 0}));
  EXPECT_EQ(run_map({in(0)}, {{DType::kFloat32, {0.0, 0.5, NAN}}}, DType::kBool, 3), (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(run_map({in(0)}, {{DType::kFloat32, {2.9, -2.9}}}, DType::kInt32, 2), (std::vector<double>{2, -2}));
  // float16 operands are widened exactly.
  std::vector<double> hv;
  for (uint32_t b = 0; b < 0x7c00; b += 37) hv.push_back(ref_half_to_double(static_cast<uint16_t>(b)));
  EXPECT_EQ(run_map({in(0)}, {{DType::kFloat16, hv}}, DType::kFloat32, hv.size()), hv);
}

TEST(MapCodelet, ConstantsAndScalarsBroadcast) {
  const uint64_t n = 700;  // several blocks and a tail
  std::vector<double> x(n);
  for (uint64_t i = 0; i < n; ++i) x[i] = static_cast<double>(i) * 0.25 - 40;
  // (x * s + 0.5) - 3, with s a broadcast scalar operand.
  auto got = run_map({in(0), in(1), op(E::kMul), cf(0.5), op(E::kAdd), ci(3), op(E::kCastF32), op(E::kSub)},
                     {{DType::kFloat32, x}, {DType::kFloat32, {1.5}, true}}, DType::kFloat32, n);
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], x[i] * 1.5 + 0.5 - 3) << i;
  // Integer constants and a scalar int operand.
  auto gi = run_map({in(0), op(E::kCastI32), in(1), op(E::kAdd), ci(-7), op(E::kMul)},
                    {{DType::kFloat32, x}, {DType::kInt32, {100}, true}}, DType::kInt32, n);
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(gi[i], (std::trunc(x[i]) + 100) * -7) << i;
  // A half-flagged constant is rounded before use.
  auto gh = run_map({in(0), cf(0.1, true), op(E::kMul)}, {{DType::kFloat32, {1.0, 3.0}}}, DType::kFloat32, 2);
  EXPECT_EQ(gh[0], ref_round_half(0.1));
  EXPECT_EQ(gh[1], static_cast<double>(static_cast<float>(3.0 * ref_round_half(0.1))));
  // Deep expression (stack depth 5) over a half scalar.
  auto gd = run_map({in(0), in(0), in(0), in(0), in(1), op(E::kAdd), op(E::kAdd), op(E::kAdd), op(E::kAdd)},
                    {{DType::kFloat32, x}, {DType::kFloat16, {0.5}, true}}, DType::kFloat32, n);
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(gd[i], 3 * x[i] + (x[i] + 0.5)) << i;
  EXPECT_TRUE(run_map({in(0), op(E::kNeg)}, {{DType::kFloat32, {}}}, DType::kFloat32, 0).empty());
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
                     {{DType::kFloat16, a}, {DType::kFloat16, b}, {DType::kFloat32, c}}, DType::kFloat32, n);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(got[i], static_cast<double>(static_cast<float>(ref_round_half(a[i] * b[i]) + c[i]))) << i;
  // round16(round16(a * b) + c): all in half.
  auto goth = run_map(in_half({in(0), in(1), op(E::kMul), in(2), op(E::kAdd)}),
                      {{DType::kFloat16, a}, {DType::kFloat16, b}, {DType::kFloat32, c}}, DType::kFloat32, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(goth[i], ref_round_half(ref_round_half(a[i] * b[i]) + c[i])) << i;
  auto flags = in_half({in(0), op(E::kNeg)});
  for (const auto& ins : flags) EXPECT_TRUE(ins.half);
}

// An input instruction flagged half should round a float32 operand like
// every other flagged instruction does (the header: each instruction says
// whether its float result is rounded).
TEST(MapCodelet, HalfFlaggedInputRoundsFloat32Operand) {
  auto got = run_map({in(0, true)}, {{DType::kFloat32, {0.1, 2049}}}, DType::kFloat32, 2);
  EXPECT_EQ(got[0], ref_round_half(static_cast<float>(0.1)));
  EXPECT_EQ(got[1], 2048.0);
  auto cmp = run_map({in(0, true), cf(2048, true), op(E::kEq, true)}, {{DType::kFloat32, {2049}}}, DType::kBool, 1);
  EXPECT_EQ(cmp[0], 1.0);
}

TEST(MapCodelet, CheckExpressionTypes) {
  const std::vector<DType> f1 = {DType::kFloat32}, i1 = {DType::kInt32}, b1 = {DType::kBool};
  EXPECT_EQ(check_expression({in(0), op(E::kExp)}, f1), ValueKind::kFloat);
  EXPECT_EQ(check_expression({in(0), op(E::kNeg)}, i1), ValueKind::kInt);
  EXPECT_EQ(check_expression({in(0), ci(1), op(E::kLt)}, i1), ValueKind::kBool);
  EXPECT_EQ(check_expression({in(0), op(E::kCastF16)}, b1), ValueKind::kFloat);
  EXPECT_EQ(check_expression({in(0), in(1), in(2), op(E::kSelect)}, {DType::kBool, DType::kInt32, DType::kInt32}),
            ValueKind::kInt);
  EXPECT_EQ(check_expression({in(0), op(E::kIsNan)}, {DType::kFloat16}), ValueKind::kBool);
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
                  check_expression({in(0), in(1), in(2), op(E::kSelect)}, {DType::kBool, DType::kFloat32, DType::kInt32}),
                  "select");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), in(0), op(E::kAdd)}, b1), "add", "bool");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), op(E::kCount)}, f1), "unknown");
  EXPECT_NX_ERROR(kInvalidArgument, check_expression({in(0), op(static_cast<E>(999))}, f1), "999");
}

TEST(MapCodelet, NamesAndCosts) {
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
    Field a = mem.field(count, DType::kFloat32), o = mem.field(count, DType::kFloat32);
    return MapVertex(0, std::make_shared<const std::vector<ExprInstr>>(expr), {MapVertex::Operand{a, DType::kFloat32, false}}, o,
                     DType::kFloat32)
        .cycles(t);
  };
  const uint64_t small = mk(10, {in(0), op(E::kNeg)}), big = mk(10000, {in(0), op(E::kNeg)});
  EXPECT_GT(small, t.vertex_overhead_cycles - 1);
  EXPECT_GT(big, small);
  EXPECT_GT(mk(10000, {in(0), op(E::kExp), op(E::kExp)}), big);
  EXPECT_NX_ERROR(kInternal,
                  MapVertex(0, std::make_shared<const std::vector<ExprInstr>>(std::vector<ExprInstr>{in(0)}),
                            {MapVertex::Operand{mem.field(3, DType::kFloat32), DType::kFloat32, false}},
                            mem.field(4, DType::kFloat32), DType::kFloat32),
                  "size");
}

TEST(FillCodelet, EveryType) {
  for (auto [dt, value, want] : std::vector<std::tuple<DType, double, double>>{{DType::kFloat32, 1.25, 1.25},
                                 {DType::kFloat32, 0.1, static_cast<float>(0.1)},
                                 {DType::kFloat16, 0.1, ref_round_half(0.1)},
                                 {DType::kFloat16, -INFINITY, -INFINITY},
                                 {DType::kInt32, -7, -7},
                                 {DType::kInt32, 2.9, 2},
                                 {DType::kBool, 0.5, 1},
                                 {DType::kBool, 0, 0}}) {
    TileMem mem;
    Field f = mem.field(37, dt);
    FillVertex v(0, f, dt, value);
    v.compute(mem.bytes.data());
    EXPECT_TRUE(mem.guards_intact({{f.byte_offset, 37 * dtype_size(dt)}}));
    for (uint64_t i = 0; i < 37; ++i) ASSERT_EQ(mem.get(f, dt, i), want) << dtype_name(dt) << " " << value;
    EXPECT_GT(v.cycles(target_for("ipu2")), 0u);
  }
}

TEST(Elements, LoadAndStoreEveryType) {
  uint8_t buf[16] = {0};
  store_element(buf, DType::kFloat32, 1, 0.1);
  EXPECT_EQ(load_element(buf, DType::kFloat32, 1), static_cast<float>(0.1));
  store_element(buf, DType::kFloat16, 3, 2049);
  EXPECT_EQ(load_element(buf, DType::kFloat16, 3), 2048);
  store_element(buf, DType::kInt32, 2, -3.9);
  EXPECT_EQ(load_element(buf, DType::kInt32, 2), -3);
  store_element(buf, DType::kBool, 15, 0.25);
  EXPECT_EQ(buf[15], 1);
  EXPECT_EQ(load_element(buf, DType::kBool, 15), 1.0);
  store_element(buf, DType::kBool, 15, 0.0);
  EXPECT_EQ(load_element(buf, DType::kBool, 15), 0.0);
}

// ---------------------------------------------------------------------------
// Matrix products.

TEST(Gemm, MatchesDoubleReference) {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd;
  for (auto [m, n, k] : std::vector<MNK>{{1, 1, 1}, {3, 5, 7}, {4, 4, 4}, {9, 13, 130},
                         {5, 600, 3}, {6, 520, 260}, {17, 3, 1}}) {
    const uint32_t lda = k + 3, ldb = n + 1, ldc = n + 2;
    std::vector<float> a(m * lda), b(k * ldb), c(m * ldc, 0.5f);
    for (auto& v : a) v = nd(rng);
    for (auto& v : b) v = nd(rng);
    for (bool accumulate : {false, true}) {
      std::vector<float> cc = c;
      gemm_f32(a.data(), b.data(), cc.data(), m, n, k, lda, ldb, ldc, accumulate);
      for (uint32_t i = 0; i < m; ++i)
        for (uint32_t j = 0; j < ldc; ++j) {
          if (j >= n) {
            ASSERT_EQ(cc[i * ldc + j], 0.5f) << "touched padding";
            continue;
          }
          double ref = accumulate ? 0.5 : 0.0, mag = std::fabs(ref);
          for (uint32_t p = 0; p < k; ++p) {
            ref += static_cast<double>(a[i * lda + p]) * b[p * ldb + j];
            mag += std::fabs(static_cast<double>(a[i * lda + p]) * b[p * ldb + j]);
          }
          ASSERT_NEAR(cc[i * ldc + j], ref, 1e-6 * mag + (k + 1) * mag * std::ldexp(1.0, -24)) << m << "x" << n << "x" << k;
        }
    }
  }
}

struct MatMulFields {
  TileMem mem;
  Field a, b, c;
};

// Lays out A (m x k, ld lda), B (k x n, ld ldb) and C (m x n, ld ldc) and runs
// a MatMulVertex. C's padding holds a sentinel that must survive.
std::vector<double> run_matmul_vertex(const std::vector<double>& a, const std::vector<double>& b, MatMulBlock s, DType in,
                                      DType partials, DType out, bool* padding_ok = nullptr) {
  TileMem mem;
  auto extent = [](uint32_t r, uint32_t c, uint32_t ld) { return r == 0 ? 0 : (r - 1) * ld + c; };
  Field fa = mem.field(extent(s.m, s.k, s.lda), in), fb = mem.field(extent(s.k, s.n, s.ldb), in),
        fc = mem.field(extent(s.m, s.n, s.ldc), out);
  for (uint32_t i = 0; i < s.m; ++i)
    for (uint32_t p = 0; p < s.k; ++p) mem.put(fa, in, i * s.lda + p, a[i * s.k + p]);
  for (uint32_t p = 0; p < s.k; ++p)
    for (uint32_t j = 0; j < s.n; ++j) mem.put(fb, in, p * s.ldb + j, b[p * s.n + j]);
  for (uint64_t i = 0; i < fc.count; ++i) mem.put(fc, out, i, -1000);
  MatMulVertex v(0, fa, fb, fc, s, in, partials, out);
  v.compute(mem.bytes.data());
  std::vector<double> c(s.m * s.n);
  bool pad = true;
  for (uint32_t i = 0; i < s.m; ++i)
    for (uint32_t j = 0; j < s.ldc && i * s.ldc + j < fc.count; ++j) {
      if (j < s.n) c[i * s.n + j] = mem.get(fc, out, i * s.ldc + j);
      else if (mem.get(fc, out, i * s.ldc + j) != -1000) pad = false;
    }
  if (padding_ok) *padding_ok = pad && mem.guards_intact({{fa.byte_offset, fa.count * dtype_size(in)},
                                                          {fb.byte_offset, fb.count * dtype_size(in)},
                                                          {fc.byte_offset, fc.count * dtype_size(out)}});
  return c;
}

TEST(MatMulCodelet, Float32WithLeadingDimensions) {
  std::mt19937 rng(22);
  std::normal_distribution<double> nd;
  for (auto [m, n, k] : std::vector<MNK>{{1, 1, 1}, {2, 3, 4}, {7, 5, 31}, {16, 16, 16}, {3, 1, 200},
                         {1, 9, 0}}) {
    MatMulBlock s{m, n, k, k + 2, n + 3, n + 1};
    std::vector<double> a(m * k), b(k * n);
    for (auto& v : a) v = static_cast<float>(nd(rng));
    for (auto& v : b) v = static_cast<float>(nd(rng));
    bool pad = false;
    auto c = run_matmul_vertex(a, b, s, DType::kFloat32, DType::kFloat32, DType::kFloat32, &pad);
    EXPECT_TRUE(pad) << "wrote outside the C block";
    for (uint32_t i = 0; i < m; ++i)
      for (uint32_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (uint32_t p = 0; p < k; ++p) {
          ref += a[i * k + p] * b[p * n + j];
          mag += std::fabs(a[i * k + p] * b[p * n + j]);
        }
        ASSERT_NEAR(c[i * n + j], ref, 1e-5 * mag + 1e-30);
      }
  }
}

// Small multiples of 1/4 make every product and partial sum exact in float,
// so only the final rounding (to half on output) can change the result.
TEST(MatMulCodelet, HalfInputsFloatPartialsAreExactlyRounded) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> q(-40, 40);
  for (auto [m, n, k] : std::vector<MNK>{{3, 4, 5}, {8, 8, 64}, {2, 3, 100}, {5, 7, 17}}) {
    std::vector<double> a(m * k), b(k * n);
    for (auto& v : a) v = q(rng) / 4.0;
    for (auto& v : b) v = q(rng);
    MatMulBlock s{m, n, k, k, n, n};
    auto c32 = run_matmul_vertex(a, b, s, DType::kFloat16, DType::kFloat32, DType::kFloat32);
    auto c16 = run_matmul_vertex(a, b, s, DType::kFloat16, DType::kFloat32, DType::kFloat16);
    for (uint32_t i = 0; i < m; ++i)
      for (uint32_t j = 0; j < n; ++j) {
        double exact = 0;
        for (uint32_t p = 0; p < k; ++p) exact += a[i * k + p] * b[p * n + j];
        ASSERT_EQ(c32[i * n + j], exact);
        ASSERT_EQ(c16[i * n + j], ref_round_half(exact));
      }
  }
}

// Half partials: chunks of 16 products summed in float (exact here), each
// chunk rounded to half and accumulated in half, rounding after every add.
double half_partials_dot(const std::vector<double>& a, const std::vector<double>& b, uint32_t i, uint32_t j, uint32_t k0,
                         uint32_t k1, uint32_t k, uint32_t n) {
  double acc = 0;
  for (uint32_t c0 = k0; c0 < k1; c0 += 16) {
    double chunk = 0;
    for (uint32_t p = c0; p < std::min(k1, c0 + 16); ++p) chunk += a[i * k + p] * b[p * n + j];
    acc = ref_round_half(acc + ref_round_half(chunk));
  }
  return acc;
}

TEST(MatMulCodelet, HalfPartialsEmulateTheAmp) {
  std::mt19937 rng(24);
  std::uniform_int_distribution<int> q(-60, 60);
  int differs = 0;
  for (auto [m, n, k] : std::vector<MNK>{{2, 3, 15}, {3, 3, 16}, {4, 5, 17}, {2, 2, 100}, {6, 4, 64},
                         {1, 1, 1}}) {
    std::vector<double> a(m * k), b(k * n);
    for (auto& v : a) v = q(rng) / 4.0;
    for (auto& v : b) v = q(rng) + 0.5;
    MatMulBlock s{m, n, k, k, n, n + 2};
    bool pad = false;
    auto c = run_matmul_vertex(a, b, s, DType::kFloat16, DType::kFloat16, DType::kFloat16, &pad);
    auto cf32 = run_matmul_vertex(a, b, s, DType::kFloat16, DType::kFloat16, DType::kFloat32);
    EXPECT_TRUE(pad);
    for (uint32_t i = 0; i < m; ++i)
      for (uint32_t j = 0; j < n; ++j) {
        const double want = half_partials_dot(a, b, i, j, 0, k, k, n);
        ASSERT_EQ(c[i * n + j], want) << m << "x" << n << "x" << k << " at " << i << "," << j;
        ASSERT_EQ(cf32[i * n + j], want) << "half partials are half values whatever the output type";
        double exact = 0;
        for (uint32_t p = 0; p < k; ++p) exact += a[i * k + p] * b[p * n + j];
        if (want != ref_round_half(exact)) ++differs;
      }
  }
  EXPECT_GT(differs, 0) << "the inputs should make half partials observable";
}

TEST(MatMulCodelet, ConstructorChecks) {
  TileMem mem;
  Field a = mem.field(6, DType::kFloat32), b = mem.field(6, DType::kFloat32), c = mem.field(4, DType::kFloat32);
  EXPECT_NO_THROW(MatMulVertex(0, a, b, c, MatMulBlock{2, 2, 3, 3, 2, 2}, DType::kFloat32, DType::kFloat32, DType::kFloat32));
  EXPECT_NX_ERROR(kInternal,
                  MatMulVertex(0, a, b, c, MatMulBlock{2, 2, 3, 3, 2, 2}, DType::kFloat32, DType::kFloat16, DType::kFloat32),
                  "half partials");
  EXPECT_NX_ERROR(kInternal,
                  MatMulVertex(0, a, b, c, MatMulBlock{2, 2, 3, 3, 2, 2}, DType::kInt32, DType::kFloat32, DType::kFloat32),
                  "non-float");
  EXPECT_NX_ERROR(kInternal,
                  MatMulVertex(0, a, b, c, MatMulBlock{2, 2, 3, 4, 2, 2}, DType::kFloat32, DType::kFloat32, DType::kFloat32),
                  "A block");
  EXPECT_NX_ERROR(kInternal,
                  MatMulVertex(0, a, b, c, MatMulBlock{2, 2, 3, 3, 3, 2}, DType::kFloat32, DType::kFloat32, DType::kFloat32),
                  "B block");
  EXPECT_NX_ERROR(kInternal,
                  MatMulVertex(0, a, b, c, MatMulBlock{2, 2, 3, 3, 2, 3}, DType::kFloat32, DType::kFloat32, DType::kFloat32),
                  "C block");
}

TEST(MatMulCodelet, CyclesGrowWithWorkAndFavourHalf) {
  const TargetSpec& t = target_for("ipu2");
  TileMem mem;
  auto cyc = [&](uint32_t m, uint32_t n, uint32_t k, DType in, DType partials) {
    Field a = mem.field(m * k, in), b = mem.field(k * n, in), c = mem.field(m * n, DType::kFloat32);
    return MatMulVertex(0, a, b, c, MatMulBlock{m, n, k, k, n, n}, in, partials, DType::kFloat32).cycles(t);
  };
  const uint64_t base = cyc(16, 16, 16, DType::kFloat32, DType::kFloat32);
  EXPECT_GT(cyc(32, 16, 16, DType::kFloat32, DType::kFloat32), base);
  EXPECT_GT(cyc(16, 32, 16, DType::kFloat32, DType::kFloat32), base);
  EXPECT_GT(cyc(16, 16, 64, DType::kFloat32, DType::kFloat32), base);
  EXPECT_LT(cyc(16, 16, 16, DType::kFloat16, DType::kFloat32), base);
  EXPECT_LE(cyc(64, 64, 64, DType::kFloat16, DType::kFloat16), cyc(64, 64, 64, DType::kFloat16, DType::kFloat32));
  // At scale the cost approaches flops / rate: 2*128^3 / 32 per cycle.
  const double big = static_cast<double>(cyc(128, 128, 128, DType::kFloat32, DType::kFloat32));
  EXPECT_GT(big, 2.0 * 128 * 128 * 128 / 32);
  EXPECT_LT(big, 1.2 * 2.0 * 128 * 128 * 128 / 32);
}

TEST(SumPartialsCodelet, FloatAndHalf) {
  std::mt19937 rng(25);
  std::uniform_int_distribution<int> q(-3000, 3000);
  for (auto [parts, rows, cols] : std::vector<MNK>{{1, 2, 3}, {3, 4, 5}, {7, 1, 9}, {2, 3, 1}}) {
    const uint32_t ld = cols + 2;
    for (DType pd : {DType::kFloat32, DType::kFloat16}) {
      for (DType od : {DType::kFloat32, DType::kFloat16}) {
        TileMem mem;
        Field in = mem.field(parts * rows * cols, pd), out = mem.field((rows - 1) * ld + cols, od);
        std::vector<double> v(parts * rows * cols);
        for (size_t i = 0; i < v.size(); ++i) {
          v[i] = pd == DType::kFloat16 ? ref_round_half(q(rng) * 0.75) : static_cast<float>(q(rng) * 0.3);
          mem.put(in, pd, i, v[i]);
        }
        for (uint64_t i = 0; i < out.count; ++i) mem.put(out, od, i, -1);
        SumPartialsVertex sp(0, in, out, parts, rows, cols, ld, pd, od);
        sp.compute(mem.bytes.data());
        for (uint32_t r = 0; r < rows; ++r)
          for (uint32_t c = 0; c < ld && r * ld + c < out.count; ++c) {
            const double got = mem.get(out, od, r * ld + c);
            if (c >= cols) {
              ASSERT_EQ(got, -1) << "padding overwritten";
              continue;
            }
            double want = 0;
            if (pd == DType::kFloat16) {
              for (uint32_t p = 0; p < parts; ++p) want = ref_round_half(want + v[(p * rows + r) * cols + c]);
              ASSERT_EQ(got, want);
            } else {
              double mag = 0;
              for (uint32_t p = 0; p < parts; ++p) {
                want += v[(p * rows + r) * cols + c];
                mag += std::fabs(v[(p * rows + r) * cols + c]);
              }
              if (od == DType::kFloat16) {
                ASSERT_LE(std::fabs(got - ref_round_half(want)), std::fabs(want) * std::ldexp(1.0, -10));
              } else {
                ASSERT_NEAR(got, want, parts * mag * std::ldexp(1.0, -24));
              }
            }
          }
      }
    }
  }
  TileMem mem;
  Field in = mem.field(10, DType::kFloat32), out = mem.field(4, DType::kFloat32);
  EXPECT_NX_ERROR(kInternal, SumPartialsVertex(0, in, out, 2, 2, 2, 2, DType::kFloat32, DType::kFloat32), "size mismatch");
  Field in8 = mem.field(8, DType::kFloat32);
  EXPECT_NX_ERROR(kInternal, SumPartialsVertex(0, in8, out, 2, 2, 2, 3, DType::kFloat32, DType::kFloat32), "exceeds");
}

// ---------------------------------------------------------------------------
// Reductions.

double reduce_identity(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProd: return 1;
    case ReduceOp::kMax: return -INFINITY;
    case ReduceOp::kMin: return INFINITY;
    default: return 0;
  }
}

double reduce_ref(ReduceOp op, const std::vector<double>& xs) {
  double acc = reduce_identity(op);
  for (double x : xs) {
    switch (op) {
      case ReduceOp::kSum: acc += x; break;
      case ReduceOp::kSumSquare: acc += x * x; break;
      case ReduceOp::kSumAbs: acc += std::fabs(x); break;
      case ReduceOp::kProd: acc *= x; break;
      case ReduceOp::kMax: acc = (std::isnan(x) || std::isnan(acc)) ? NAN : std::max(acc, x); break;
      case ReduceOp::kMin: acc = (std::isnan(x) || std::isnan(acc)) ? NAN : std::min(acc, x); break;
    }
  }
  return acc;
}

const ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd, ReduceOp::kSumSquare,
                                  ReduceOp::kSumAbs};

TEST(ReduceCodelet, FloatSegmentsWithStridesAndFinalOps) {
  std::mt19937 rng(31);
  std::uniform_real_distribution<double> u(0.5, 1.5), s(-4, 4);
  for (ReduceOp op : kAllReduceOps) {
    for (ReduceFinal fin : {ReduceFinal::kNone, ReduceFinal::kScale, ReduceFinal::kSqrt, ReduceFinal::kLog}) {
      for (DType dt : {DType::kFloat32, DType::kFloat16}) {
        SCOPED_TRACE(testing::Message() << reduce_op_name(op) << " final " << static_cast<int>(fin) << " " << dtype_name(dt));
        TileMem mem;
        const uint64_t n = 300;
        Field in = mem.field(n, dt), out = mem.field(8, DType::kFloat32);
        std::vector<double> v(n);
        for (uint64_t i = 0; i < n; ++i) {
          double x = op == ReduceOp::kProd ? u(rng) * (rng() % 2 ? 1 : -1) : s(rng);
          v[i] = dt == DType::kFloat16 ? ref_round_half(x) : static_cast<float>(x);
          mem.put(in, dt, i, v[i]);
        }
        // Contiguous, strided, single-element and empty segments, written out of order.
        std::vector<ReduceSegment> segs = {{0, 100, 1, 3}, {100, 50, 3, 0}, {7, 1, 1, 5}, {299, 0, 1, 6}, {101, 66, 2, 1}};
        const double scale = 0.37;
        ReduceVertex rv(0, in, dt, out, DType::kFloat32, op, false, fin, scale, segs);
        rv.compute(mem.bytes.data());
        for (const ReduceSegment& sg : segs) {
          std::vector<double> xs;
          double mag = 0;
          for (uint64_t i = 0; i < sg.len; ++i) {
            xs.push_back(v[sg.in_offset + i * sg.in_stride]);
            mag += std::fabs(xs.back()) * (op == ReduceOp::kSumSquare ? std::fabs(xs.back()) : 1);
          }
          double r = reduce_ref(op, xs);
          double tol = 2 * (sg.len + 1) * std::ldexp(1.0, -24) * (op == ReduceOp::kProd ? std::fabs(r) : mag);
          if (fin == ReduceFinal::kScale) {
            r *= static_cast<float>(scale);
            tol = tol * scale + std::fabs(r) * std::ldexp(1.0, -23);
          } else if (fin == ReduceFinal::kSqrt) {
            tol = std::sqrt(std::fabs(r)) > 0 ? tol / (2 * std::sqrt(std::fabs(r))) + std::ldexp(1.0, -22) * std::sqrt(std::fabs(r)) : 1e-30;
            r = std::sqrt(r);
          } else if (fin == ReduceFinal::kLog) {
            tol = std::fabs(r) > 0 ? tol / std::fabs(r) + std::ldexp(1.0, -22) * std::fabs(std::log(std::fabs(r))) : 0;
            r = std::log(r);
          }
          const double got = mem.get(out, DType::kFloat32, sg.out_offset);
          if (std::isnan(r)) {
            ASSERT_TRUE(std::isnan(got)) << "segment at " << sg.in_offset;
          } else if (std::isinf(r)) {
            ASSERT_EQ(got, r);
          } else {
            ASSERT_NEAR(got, r, tol + 1e-37) << "segment at " << sg.in_offset << " len " << sg.len;
          }
        }
        // Untouched outputs keep their contents.
        for (int byte = 0; byte < 4; ++byte) EXPECT_EQ(mem.bytes[out.byte_offset + 8 + byte], TileMem::kGuard);
      }
    }
  }
}

TEST(ReduceCodelet, EmptySegmentsGiveIdentities) {
  for (ReduceOp op : kAllReduceOps) {
    TileMem mem;
    Field in = mem.field(4, DType::kFloat32), out = mem.field(1, DType::kFloat32);
    ReduceVertex rv(0, in, DType::kFloat32, out, DType::kFloat32, op, false, ReduceFinal::kNone, 1, {{0, 0, 1, 0}});
    rv.compute(mem.bytes.data());
    EXPECT_EQ(mem.get(out, DType::kFloat32, 0), reduce_identity(op)) << reduce_op_name(op);
    TileMem mi;
    Field ini = mi.field(4, DType::kInt32), outi = mi.field(1, DType::kInt32);
    ReduceVertex ri(0, ini, DType::kInt32, outi, DType::kInt32, op, false, ReduceFinal::kNone, 1, {{0, 0, 1, 0}});
    ri.compute(mi.bytes.data());
    const double want = op == ReduceOp::kMax ? INT_MIN : op == ReduceOp::kMin ? INT_MAX : reduce_identity(op);
    EXPECT_EQ(mi.get(outi, DType::kInt32, 0), want) << reduce_op_name(op);
  }
}

TEST(ReduceCodelet, NanPropagatesThroughMaxAndMin) {
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    for (size_t at : {0u, 3u, 7u}) {
      TileMem mem;
      Field in = mem.field(8, DType::kFloat32), out = mem.field(1, DType::kFloat32);
      for (uint64_t i = 0; i < 8; ++i) mem.put(in, DType::kFloat32, i, i == at ? NAN : static_cast<double>(i));
      ReduceVertex rv(0, in, DType::kFloat32, out, DType::kFloat32, op, false, ReduceFinal::kNone, 1, {{0, 8, 1, 0}});
      rv.compute(mem.bytes.data());
      EXPECT_TRUE(std::isnan(mem.get(out, DType::kFloat32, 0))) << reduce_op_name(op) << " NaN at " << at;
    }
  }
}

TEST(ReduceCodelet, CombiningPartialsSumsThemForSquaresAndAbs) {
  // Partial results of sum-of-squares / sum-of-abs are combined by summing,
  // not squared again; max/min/prod combine with themselves.
  std::vector<double> parts = {-1.5, 2, 3.25, -0.5};
  const std::pair<ReduceOp, double> cases[] = {{ReduceOp::kSumSquare, 3.25}, {ReduceOp::kSumAbs, 3.25},
                                               {ReduceOp::kSum, 3.25},       {ReduceOp::kMax, 3.25},
                                               {ReduceOp::kMin, -1.5},       {ReduceOp::kProd, 4.875}};
  for (const auto& [op, want] : cases) {
    TileMem mem;
    Field in = mem.field(4, DType::kFloat32), out = mem.field(1, DType::kFloat32);
    for (uint64_t i = 0; i < 4; ++i) mem.put(in, DType::kFloat32, i, parts[i]);
    ReduceVertex rv(0, in, DType::kFloat32, out, DType::kFloat32, op, true, ReduceFinal::kNone, 1, {{0, 4, 1, 0}});
    rv.compute(mem.bytes.data());
    EXPECT_EQ(mem.get(out, DType::kFloat32, 0), want) << reduce_op_name(op);
  }
}

TEST(ReduceCodelet, IntegersAndBools) {
  std::mt19937 rng(32);
  std::uniform_int_distribution<int32_t> any(INT_MIN, INT_MAX), small(-9, 9);
  for (ReduceOp op : kAllReduceOps) {
    TileMem mem;
    const uint64_t n = 64;
    Field in = mem.field(n, DType::kInt32), out = mem.field(3, DType::kInt32);
    std::vector<int64_t> v(n);
    for (uint64_t i = 0; i < n; ++i) {
      v[i] = i < 32 ? any(rng) : small(rng);
      mem.put(in, DType::kInt32, i, static_cast<double>(v[i]));
    }
    ReduceVertex rv(0, in, DType::kInt32, out, DType::kInt32, op, false, ReduceFinal::kNone, 1,
                    {{0, 32, 1, 0}, {32, 32, 1, 1}, {1, 16, 2, 2}});
    rv.compute(mem.bytes.data());
    auto ref = [&](uint64_t off, uint64_t len, uint64_t stride) {
      // Sums wrap modulo 2^32 at the end; products wrap at every step.
      uint32_t sum = 0, prod = 1;
      int64_t mx = INT_MIN, mn = INT_MAX;
      for (uint64_t i = 0; i < len; ++i) {
        const int64_t x = v[off + i * stride];
        switch (op) {
          case ReduceOp::kSum: sum += static_cast<uint32_t>(x); break;
          case ReduceOp::kSumSquare: sum += static_cast<uint32_t>(static_cast<uint64_t>(x * x)); break;
          case ReduceOp::kSumAbs: sum += static_cast<uint32_t>(x < 0 ? -x : x); break;
          case ReduceOp::kProd: prod *= static_cast<uint32_t>(x); break;
          case ReduceOp::kMax: mx = std::max(mx, x); break;
          case ReduceOp::kMin: mn = std::min(mn, x); break;
        }
      }
      if (op == ReduceOp::kMax) return static_cast<double>(mx);
      if (op == ReduceOp::kMin) return static_cast<double>(mn);
      return static_cast<double>(static_cast<int32_t>(op == ReduceOp::kProd ? prod : sum));
    };
    EXPECT_EQ(mem.get(out, DType::kInt32, 0), ref(0, 32, 1)) << reduce_op_name(op);
    EXPECT_EQ(mem.get(out, DType::kInt32, 1), ref(32, 32, 1)) << reduce_op_name(op);
    EXPECT_EQ(mem.get(out, DType::kInt32, 2), ref(1, 16, 2)) << reduce_op_name(op);
  }
  // Bools count as 0/1; any non-zero byte is one.
  TileMem mem;
  Field in = mem.field(6, DType::kBool), out = mem.field(4, DType::kInt32);
  const uint8_t bytes[6] = {1, 0, 7, 1, 0, 255};
  std::memcpy(mem.bytes.data() + in.byte_offset, bytes, 6);
  ReduceVertex rs(0, in, DType::kBool, out, DType::kInt32, ReduceOp::kSum, false, ReduceFinal::kNone, 1,
                  {{0, 6, 1, 0}, {1, 3, 2, 1}});
  rs.compute(mem.bytes.data());
  EXPECT_EQ(mem.get(out, DType::kInt32, 0), 4);
  EXPECT_EQ(mem.get(out, DType::kInt32, 1), 2);  // bytes 0, 1, 255
  ReduceVertex rm(0, in, DType::kBool, out, DType::kInt32, ReduceOp::kMin, false, ReduceFinal::kNone, 1, {{0, 6, 1, 2}, {2, 2, 1, 3}});
  rm.compute(mem.bytes.data());
  EXPECT_EQ(mem.get(out, DType::kInt32, 2), 0);
  EXPECT_EQ(mem.get(out, DType::kInt32, 3), 1);
  // Integer mean: the scaled result truncates toward zero.
  TileMem mi;
  Field ini = mi.field(3, DType::kInt32), outi = mi.field(1, DType::kInt32);
  for (uint64_t i = 0; i < 3; ++i) mi.put(ini, DType::kInt32, i, -1.0 - static_cast<double>(i));
  ReduceVertex rmean(0, ini, DType::kInt32, outi, DType::kInt32, ReduceOp::kSum, false, ReduceFinal::kScale, 0.25,
                     {{0, 3, 1, 0}});
  rmean.compute(mi.bytes.data());
  EXPECT_EQ(mi.get(outi, DType::kInt32, 0), -1);  // -6 / 4 = -1.5
}

TEST(ReduceCodelet, HalfOutputAndChecks) {
  TileMem mem;
  Field in = mem.field(5, DType::kFloat16), out = mem.field(1, DType::kFloat16);
  const double vals[5] = {1000, 1000, 40, 8, 1.5};
  for (uint64_t i = 0; i < 5; ++i) mem.put(in, DType::kFloat16, i, vals[i]);
  ReduceVertex rv(0, in, DType::kFloat16, out, DType::kFloat16, ReduceOp::kSum, false, ReduceFinal::kNone, 1, {{0, 5, 1, 0}});
  rv.compute(mem.bytes.data());
  EXPECT_EQ(mem.get(out, DType::kFloat16, 0), ref_round_half(2049.5)) << "accumulates in float, rounds once";
  EXPECT_NX_ERROR(kInternal,
                  ReduceVertex(0, in, DType::kFloat16, out, DType::kFloat16, ReduceOp::kSum, false, ReduceFinal::kNone, 1,
                               {{0, 5, 1, 1}}),
                  "outside its output");
  EXPECT_NX_ERROR(kInternal,
                  ReduceVertex(0, in, DType::kFloat16, out, DType::kFloat16, ReduceOp::kSum, false, ReduceFinal::kNone, 1,
                               {{1, 3, 2, 0}}),
                  "outside its input");
  const TargetSpec& t = target_for("ipu2");
  ReduceVertex small(0, in, DType::kFloat32, out, DType::kFloat32, ReduceOp::kSum, false, ReduceFinal::kNone, 1, {{0, 2, 1, 0}});
  ReduceVertex more(0, in, DType::kFloat32, out, DType::kFloat32, ReduceOp::kSum, false, ReduceFinal::kNone, 1, {{0, 5, 1, 0}});
  EXPECT_GE(more.cycles(t), small.cycles(t));
  EXPECT_GT(small.cycles(t), 0u);
  for (ReduceOp op : kAllReduceOps) EXPECT_STRNE(reduce_op_name(op), "?");
}

}  // namespace
