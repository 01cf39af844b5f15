// The reduction vertex on one tile's memory.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "codelet_util.h"
#include "neurenix/codelets/reduce.h"

namespace {

using namespace neurenix;
using namespace nxtest;

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
      case ReduceOp::kMaxAbs: acc = (std::isnan(x) || std::isnan(acc)) ? NAN : std::max(acc, std::fabs(x)); break;
      case ReduceOp::kProd: acc *= x; break;
      case ReduceOp::kMax: acc = (std::isnan(x) || std::isnan(acc)) ? NAN : std::max(acc, x); break;
      case ReduceOp::kMin: acc = (std::isnan(x) || std::isnan(acc)) ? NAN : std::min(acc, x); break;
    }
  }
  return acc;
}

const ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd, ReduceOp::kSumSquare,
                                  ReduceOp::kSumAbs, ReduceOp::kMaxAbs};

TEST(ReduceCodelet, FloatSegmentsWithStridesAndFinalOps) {
  std::mt19937 rng(31);
  std::uniform_real_distribution<double> u(0.5, 1.5), s(-4, 4);
  for (ReduceOp op : kAllReduceOps) {
    for (ReduceFinal fin : {ReduceFinal::kNone, ReduceFinal::kScale, ReduceFinal::kSqrt, ReduceFinal::kLog}) {
      for (DeviceType dt : {kF32, kF16}) {
        SCOPED_TRACE(testing::Message() << reduce_op_name(op) << " final " << static_cast<int>(fin) << " " << device_type_name(dt));
        TileMem mem;
        const uint64_t n = 300;
        Field in = mem.field(n, dt), out = mem.field(8, kF32);
        std::vector<double> v(n);
        for (uint64_t i = 0; i < n; ++i) {
          double x = op == ReduceOp::kProd ? u(rng) * (rng() % 2 ? 1 : -1) : s(rng);
          v[i] = dt == kF16 ? ref_round_half(x) : static_cast<float>(x);
          mem.put(in, dt, i, v[i]);
        }
        // Contiguous, strided, single-element and empty segments, written out of order.
        std::vector<ReduceSegment> segs = {{0, 100, 1, 3}, {100, 50, 3, 0}, {7, 1, 1, 5}, {299, 0, 1, 6}, {101, 66, 2, 1}};
        const double scale = 0.37;
        ReduceVertex rv(0, in, dt, out, kF32, op, false, fin, scale, segs);
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
          const double got = mem.get(out, kF32, sg.out_offset);
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

// Float sums in the order the codelet documents (element i into the i % 8-th
// of eight float accumulators, combined ((a0 + a1) + (a2 + a3)) + ((a4 + a5) +
// (a6 + a7))), bit for bit, for contiguous segments of every length around
// the eight-wide steps and for strided ones; magnitudes that differ widely
// make any other order give other bits.
TEST(ReduceCodelet, FloatSumsInEightInterleavedAccumulators) {
  std::mt19937 rng(8);
  std::uniform_real_distribution<double> mant(-1, 1);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kSumAbs}) {
    for (uint64_t stride : {uint64_t{1}, uint64_t{3}}) {
      TileMem mem;
      const uint64_t n = 40 * 3 + 1;
      Field in = mem.field(n, kF32), out = mem.field(41, kF32);
      std::vector<float> v(n);
      for (uint64_t i = 0; i < n; ++i) {
        v[i] = static_cast<float>(std::ldexp(mant(rng), static_cast<int>(rng() % 40) - 20));
        mem.put(in, kF32, i, v[i]);
      }
      std::vector<ReduceSegment> segs;
      for (uint64_t len = 0; len <= 40; ++len) segs.push_back({0, len, stride, len});
      ReduceVertex rv(0, in, kF32, out, kF32, op, false, ReduceFinal::kNone, 1.0, segs);
      rv.compute(mem.bytes.data());
      for (uint64_t len = 0; len <= 40; ++len) {
        float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (uint64_t i = 0; i < len; ++i) {
          const float x = v[i * stride];
          a[i % 8] += op == ReduceOp::kSumAbs ? std::fabs(x) : x;
        }
        const float want = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        ASSERT_EQ(mem.get(out, kF32, len), static_cast<double>(want))
            << reduce_op_name(op) << ", stride " << stride << ", length " << len;
      }
    }
  }
}

// Float maxima and minima bit for bit as a scan in element order finds
// them: the first NaN met (its own bits), else the extreme value, the first
// of -0 and +0 when it is a zero. Contiguous segments of every length
// around the eight-wide steps, over values with ties, signed zeros, NaNs of
// different payloads and infinities.
TEST(ReduceCodelet, FloatExtremesAsAScanFindsThem) {
  std::mt19937 rng(11);
  auto bits = [](float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    return b;
  };
  auto nan_with = [](uint32_t payload) {
    const uint32_t b = 0x7fc00000u | (payload & 0x3fffffu);
    float x;
    std::memcpy(&x, &b, 4);
    return x;
  };
  const uint64_t n = 40;
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kMaxAbs}) {
    for (int family = 0; family < 4; ++family) {
      for (int trial = 0; trial < 6; ++trial) {
        std::vector<float> v(n);
        for (uint64_t i = 0; i < n; ++i) {
          switch (family) {
            case 0: v[i] = static_cast<float>(static_cast<int>(rng() % 7) - 3) * 0.5f; break;  // ties
            case 1: v[i] = rng() % 2 ? 0.0f : -0.0f; break;
            case 2: v[i] = rng() % 9 == 0 ? nan_with(rng()) : static_cast<float>(rng() % 100) - 50.0f; break;
            default: v[i] = rng() % 5 == 0 ? (rng() % 2 ? INFINITY : -INFINITY) : static_cast<float>(rng() % 10); break;
          }
          // Signed zeros among negatives (max) or positives (min): the
          // extreme is then a zero.
          if (family == 1 && rng() % 3 == 0) v[i] = op == ReduceOp::kMin ? 1.0f : -1.0f;
        }
        TileMem mem;
        Field in = mem.field(n, kF32), out = mem.field(n + 1, kF32);
        std::memcpy(mem.bytes.data() + in.byte_offset, v.data(), n * sizeof(float));
        std::vector<ReduceSegment> segs;
        for (uint64_t len = 0; len <= n; ++len) segs.push_back({0, len, 1, len});
        ReduceVertex rv(0, in, kF32, out, kF32, op, false, ReduceFinal::kNone, 1.0, segs);
        rv.compute(mem.bytes.data());
        for (uint64_t len = 0; len <= n; ++len) {
          float acc = op == ReduceOp::kMaxAbs ? 0.0f : op == ReduceOp::kMin ? INFINITY : -INFINITY;
          for (uint64_t i = 0; i < len; ++i) {
            const float x = op == ReduceOp::kMaxAbs ? std::fabs(v[i]) : v[i];
            const bool better = op == ReduceOp::kMin ? x < acc : x > acc;
            if (better || std::isnan(x)) acc = x;
            if (std::isnan(acc)) break;
          }
          float got;
          std::memcpy(&got, mem.bytes.data() + out.byte_offset + 4 * len, 4);
          ASSERT_EQ(bits(got), bits(acc)) << reduce_op_name(op) << ", family " << family << ", length " << len;
        }
      }
    }
  }
}

// Contiguous float32 and float16 segments, short and spanning several of
// the codelet's 256-element chunks: sums in the documented accumulator
// order and extremes as the scan finds them, bit for bit, the float16
// values widened exactly (a NaN keeps its payload, quieted).
TEST(ReduceCodelet, LongAndHalfSegmentsAsTheFloatScans) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<double> mant(-1, 1);
  auto bits = [](float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    return b;
  };
  const std::vector<uint64_t> lengths = {0, 1, 7, 8, 9, 31, 255, 256, 257, 263, 600};
  const uint64_t n = 600;
  for (DeviceType dt : {kF32, kF16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kSumAbs, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kMaxAbs}) {
      for (int family = 0; family < 3; ++family) {
        TileMem mem;
        Field in = mem.field(n, dt), out = mem.field(lengths.size(), kF32);
        std::vector<float> v(n);  // the values as the codelet reads them
        for (uint64_t i = 0; i < n; ++i) {
          uint16_t h = ref_double_to_half(std::ldexp(mant(rng), static_cast<int>(rng() % 16) - 8));
          if (family == 1) h = rng() % 2 ? 0x0000 : 0x8000;  // signed zeros ...
          if (family == 1 && rng() % 3 == 0) h = op == ReduceOp::kMin ? 0x3c00 : 0xbc00;  // ... among +-1
          if (family == 2 && rng() % 50 == 0) h = static_cast<uint16_t>(0x7e00 | (rng() & 0x81ff));  // NaNs
          uint32_t fb;
          if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            fb = (static_cast<uint32_t>(h & 0x8000) << 16) | 0x7fc00000u | (static_cast<uint32_t>(h & 0x3ff) << 13);
          } else {
            const float x = static_cast<float>(ref_half_to_double(h));
            fb = bits(x);
          }
          std::memcpy(&v[i], &fb, 4);
          if (dt == kF16) std::memcpy(mem.bytes.data() + in.byte_offset + 2 * i, &h, 2);
          else std::memcpy(mem.bytes.data() + in.byte_offset + 4 * i, &v[i], 4);
        }
        std::vector<ReduceSegment> segs;
        for (size_t k = 0; k < lengths.size(); ++k) segs.push_back({0, lengths[k], 1, k});
        ReduceVertex rv(0, in, dt, out, kF32, op, false, ReduceFinal::kNone, 1.0, segs);
        rv.compute(mem.bytes.data());
        for (size_t k = 0; k < lengths.size(); ++k) {
          const uint64_t len = lengths[k];
          float want;
          if (op == ReduceOp::kSum || op == ReduceOp::kSumAbs) {
            float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (uint64_t i = 0; i < len; ++i) a[i % 8] += op == ReduceOp::kSumAbs ? std::fabs(v[i]) : v[i];
            want = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
          } else {
            want = op == ReduceOp::kMaxAbs ? 0.0f : op == ReduceOp::kMin ? INFINITY : -INFINITY;
            for (uint64_t i = 0; i < len; ++i) {
              const float x = op == ReduceOp::kMaxAbs ? std::fabs(v[i]) : v[i];
              if ((op == ReduceOp::kMin ? x < want : x > want) || std::isnan(x)) want = x;
              if (std::isnan(want)) break;
            }
          }
          float got;
          std::memcpy(&got, mem.bytes.data() + out.byte_offset + 4 * k, 4);
          // (Which NaN a sum of NaNs keeps is the compiler's choice of
          // operand order: only the scan's is specified.)
          if (std::isnan(want) && (op == ReduceOp::kSum || op == ReduceOp::kSumAbs)) {
            ASSERT_TRUE(std::isnan(got)) << device_type_name(dt) << " " << reduce_op_name(op) << ", length " << len;
            continue;
          }
          ASSERT_EQ(bits(got), bits(want)) << device_type_name(dt) << " " << reduce_op_name(op) << ", family " << family
                                           << ", length " << len;
        }
      }
    }
  }
}

TEST(ReduceCodelet, EmptySegmentsGiveIdentities) {
  for (ReduceOp op : kAllReduceOps) {
    TileMem mem;
    Field in = mem.field(4, kF32), out = mem.field(1, kF32);
    ReduceVertex rv(0, in, kF32, out, kF32, op, false, ReduceFinal::kNone, 1, {{0, 0, 1, 0}});
    rv.compute(mem.bytes.data());
    EXPECT_EQ(mem.get(out, kF32, 0), reduce_identity(op)) << reduce_op_name(op);
    TileMem mi;
    Field ini = mi.field(4, kI32), outi = mi.field(1, kI32);
    ReduceVertex ri(0, ini, kI32, outi, kI32, op, false, ReduceFinal::kNone, 1, {{0, 0, 1, 0}});
    ri.compute(mi.bytes.data());
    const double want = op == ReduceOp::kMax ? INT_MIN : op == ReduceOp::kMin ? INT_MAX : reduce_identity(op);
    EXPECT_EQ(mi.get(outi, kI32, 0), want) << reduce_op_name(op);
  }
}

TEST(ReduceCodelet, NanPropagatesThroughMaxAndMin) {
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    for (size_t at : {0u, 3u, 7u}) {
      TileMem mem;
      Field in = mem.field(8, kF32), out = mem.field(1, kF32);
      for (uint64_t i = 0; i < 8; ++i) mem.put(in, kF32, i, i == at ? NAN : static_cast<double>(i));
      ReduceVertex rv(0, in, kF32, out, kF32, op, false, ReduceFinal::kNone, 1, {{0, 8, 1, 0}});
      rv.compute(mem.bytes.data());
      EXPECT_TRUE(std::isnan(mem.get(out, kF32, 0))) << reduce_op_name(op) << " NaN at " << at;
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
    Field in = mem.field(4, kF32), out = mem.field(1, kF32);
    for (uint64_t i = 0; i < 4; ++i) mem.put(in, kF32, i, parts[i]);
    ReduceVertex rv(0, in, kF32, out, kF32, op, true, ReduceFinal::kNone, 1, {{0, 4, 1, 0}});
    rv.compute(mem.bytes.data());
    EXPECT_EQ(mem.get(out, kF32, 0), want) << reduce_op_name(op);
  }
}

TEST(ReduceCodelet, IntegersAndBools) {
  std::mt19937 rng(32);
  std::uniform_int_distribution<int32_t> any(INT_MIN, INT_MAX), small(-9, 9);
  for (ReduceOp op : kAllReduceOps) {
    TileMem mem;
    const uint64_t n = 64;
    Field in = mem.field(n, kI32), out = mem.field(3, kI32);
    std::vector<int64_t> v(n);
    for (uint64_t i = 0; i < n; ++i) {
      v[i] = i < 32 ? any(rng) : small(rng);
      mem.put(in, kI32, i, static_cast<double>(v[i]));
    }
    ReduceVertex rv(0, in, kI32, out, kI32, op, false, ReduceFinal::kNone, 1,
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
          case ReduceOp::kMaxAbs: mx = std::max<int64_t>(mx, x < 0 ? -x : x); break;
        }
      }
      if (op == ReduceOp::kMax) return static_cast<double>(mx);
      if (op == ReduceOp::kMaxAbs) return static_cast<double>(std::max<int64_t>(mx, 0));
      if (op == ReduceOp::kMin) return static_cast<double>(mn);
      return static_cast<double>(static_cast<int32_t>(op == ReduceOp::kProd ? prod : sum));
    };
    EXPECT_EQ(mem.get(out, kI32, 0), ref(0, 32, 1)) << reduce_op_name(op);
    EXPECT_EQ(mem.get(out, kI32, 1), ref(32, 32, 1)) << reduce_op_name(op);
    EXPECT_EQ(mem.get(out, kI32, 2), ref(1, 16, 2)) << reduce_op_name(op);
  }
  // Bools count as 0/1; any non-zero byte is one.
  TileMem mem;
  Field in = mem.field(6, kBool), out = mem.field(4, kI32);
  const uint8_t bytes[6] = {1, 0, 7, 1, 0, 255};
  std::memcpy(mem.bytes.data() + in.byte_offset, bytes, 6);
  ReduceVertex rs(0, in, kBool, out, kI32, ReduceOp::kSum, false, ReduceFinal::kNone, 1,
                  {{0, 6, 1, 0}, {1, 3, 2, 1}});
  rs.compute(mem.bytes.data());
  EXPECT_EQ(mem.get(out, kI32, 0), 4);
  EXPECT_EQ(mem.get(out, kI32, 1), 2);  // bytes 0, 1, 255
  ReduceVertex rm(0, in, kBool, out, kI32, ReduceOp::kMin, false, ReduceFinal::kNone, 1, {{0, 6, 1, 2}, {2, 2, 1, 3}});
  rm.compute(mem.bytes.data());
  EXPECT_EQ(mem.get(out, kI32, 2), 0);
  EXPECT_EQ(mem.get(out, kI32, 3), 1);
  // Integer mean: the scaled result truncates toward zero.
  TileMem mi;
  Field ini = mi.field(3, kI32), outi = mi.field(1, kI32);
  for (uint64_t i = 0; i < 3; ++i) mi.put(ini, kI32, i, -1.0 - static_cast<double>(i));
  ReduceVertex rmean(0, ini, kI32, outi, kI32, ReduceOp::kSum, false, ReduceFinal::kScale, 0.25,
                     {{0, 3, 1, 0}});
  rmean.compute(mi.bytes.data());
  EXPECT_EQ(mi.get(outi, kI32, 0), -1);  // -6 / 4 = -1.5
}

TEST(ReduceCodelet, HalfOutputAndChecks) {
  TileMem mem;
  Field in = mem.field(5, kF16), out = mem.field(1, kF16);
  const double vals[5] = {1000, 1000, 40, 8, 1.5};
  for (uint64_t i = 0; i < 5; ++i) mem.put(in, kF16, i, vals[i]);
  ReduceVertex rv(0, in, kF16, out, kF16, ReduceOp::kSum, false, ReduceFinal::kNone, 1, {{0, 5, 1, 0}});
  rv.compute(mem.bytes.data());
  EXPECT_EQ(mem.get(out, kF16, 0), ref_round_half(2049.5)) << "accumulates in float, rounds once";
  EXPECT_NX_ERROR(kInternal,
                  ReduceVertex(0, in, kF16, out, kF16, ReduceOp::kSum, false, ReduceFinal::kNone, 1,
                               {{0, 5, 1, 1}}),
                  "outside its output");
  EXPECT_NX_ERROR(kInternal,
                  ReduceVertex(0, in, kF16, out, kF16, ReduceOp::kSum, false, ReduceFinal::kNone, 1,
                               {{1, 3, 2, 0}}),
                  "outside its input");
  const TargetSpec& t = target_for("ipu2");
  ReduceVertex small(0, in, kF32, out, kF32, ReduceOp::kSum, false, ReduceFinal::kNone, 1, {{0, 2, 1, 0}});
  ReduceVertex more(0, in, kF32, out, kF32, ReduceOp::kSum, false, ReduceFinal::kNone, 1, {{0, 5, 1, 0}});
  EXPECT_GE(more.cycles(t), small.cycles(t));
  EXPECT_GT(small.cycles(t), 0u);
  for (ReduceOp op : kAllReduceOps) EXPECT_STRNE(reduce_op_name(op), "?");
}

}  // namespace
