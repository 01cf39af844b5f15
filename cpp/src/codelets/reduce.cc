// Reduction vertex: reduces strided segments of its input into single
// elements. Float data accumulates in float (eight interleaved accumulators,
// as the vectorised codelet does), integers in 64-bit.
#include "neurenix/codelets/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "neurenix/error.h"
#include "neurenix/float8.h"
#include "neurenix/half.h"

namespace neurenix {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kSumSquare: return "sum_square";
    case ReduceOp::kSumAbs: return "sum_abs";
    case ReduceOp::kMaxAbs: return "max_abs";
  }
  return "?";
}

ReduceVertex::ReduceVertex(uint32_t tile_, Field in, DeviceType in_dtype, Field out, DeviceType out_dtype, ReduceOp op,
                           bool combine, ReduceFinal final_op, double scale, std::vector<ReduceSegment> segments)
    : in_(in), out_(out), in_dtype_(in_dtype), out_dtype_(out_dtype), op_(op), combine_(combine), final_(final_op),
      scale_(scale), segs_(std::move(segments)) {
  tile = tile_;
  in_.field().access = Access::kRead;
  out_.field().access = Access::kWrite;
  for (const auto& s : segs_) {
    NX_CHECK(s.out_offset < out_.count, "reduce segment writes outside its output");
    NX_CHECK(s.len == 0 || s.in_offset + (s.len - 1) * s.in_stride < in_.count, "reduce segment reads outside its input");
  }
}

void ReduceVertex::list_fields(std::vector<Field*>& out) {
  out.push_back(&in_.field());
  out.push_back(&out_.field());
}

void ReduceVertex::list_refs(std::vector<const FieldRef*>& out) const {
  out.push_back(&in_);
  out.push_back(&out_);
}

uint64_t ReduceVertex::cycles(const TargetSpec& t) const {
  uint64_t elems = 0;
  for (const auto& s : segs_) elems += s.len;
  const double per = in_dtype_ == DeviceType::kFloat16 ? 0.25 : 0.5;
  return t.vertex_overhead_cycles + static_cast<uint64_t>(per * static_cast<double>(worker_rounded(t, elems))) +
         6 * segs_.size();
}

namespace {

ReduceOp effective_op(ReduceOp op, bool combine) {
  if (combine && (op == ReduceOp::kSumSquare || op == ReduceOp::kSumAbs)) return ReduceOp::kSum;
  if (combine && op == ReduceOp::kMaxAbs) return ReduceOp::kMax;
  return op;
}

template <typename Load>
double reduce_float(ReduceOp op, uint64_t len, Load load) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kSumSquare:
    case ReduceOp::kSumAbs: {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (uint64_t i = 0; i < len; ++i) {
        float x = load(i);
        if (op == ReduceOp::kSumSquare) x = x * x;
        if (op == ReduceOp::kSumAbs) x = std::fabs(x);
        acc[i & 7] += x;
      }
      return static_cast<double>(((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])));
    }
    case ReduceOp::kProd: {
      float acc = 1.0f;
      for (uint64_t i = 0; i < len; ++i) acc *= load(i);
      return acc;
    }
    case ReduceOp::kMax:
    case ReduceOp::kMaxAbs: {
      float acc = op == ReduceOp::kMaxAbs ? 0.0f : -std::numeric_limits<float>::infinity();
      for (uint64_t i = 0; i < len; ++i) {
        float x = load(i);
        if (op == ReduceOp::kMaxAbs) x = std::fabs(x);
        if (x > acc || x != x) acc = x;
        if (acc != acc) break;
      }
      return acc;
    }
    case ReduceOp::kMin: {
      float acc = std::numeric_limits<float>::infinity();
      for (uint64_t i = 0; i < len; ++i) {
        float x = load(i);
        if (x < acc || x != x) acc = x;
        if (acc != acc) break;
      }
      return acc;
    }
  }
  return 0;
}

// Contiguous elements are read as floats a chunk at a time:
// chunk(at, n, buf) returns the n floats from element `at` on (in place,
// or converted into buf). Chunks start at multiples of eight.
constexpr uint64_t kChunk = 256;
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

// The `len` contiguous elements, chunk by chunk: vec(x) for each eight in
// order (magnitudes for kSumAbs and kMaxAbs), then rest(p, i, n) for a
// chunk's last n - i (fewer than eight; only the last chunk has them).
template <typename Chunk, typename Vec, typename Rest>
void for_each_eight(ReduceOp op, uint64_t len, Chunk chunk, Vec vec, Rest rest) {
  const bool abs = op == ReduceOp::kSumAbs || op == ReduceOp::kMaxAbs;
  alignas(32) float buf[kChunk];
  for (uint64_t at = 0; at < len; at += kChunk) {
    const uint64_t n = std::min(kChunk, len - at);
    const float* p = chunk(at, n, buf);
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      v8f x;
      std::memcpy(&x, p + i, sizeof x);
      if (abs) x = reinterpret_cast<v8f>(reinterpret_cast<v8i>(x) & 0x7fffffff);
      vec(x);
    }
    if (i < n) rest(p, i, n);
  }
}

// The sum (or sum of magnitudes) of `len` contiguous elements, as
// reduce_float sums them (element i into accumulator i % 8, the eight
// combined pairwise), eight elements at a time: the accumulators are the
// lanes of one vector.
template <typename Chunk>
double sum_unit(ReduceOp op, uint64_t len, Chunk chunk) {
  v8f acc = {0, 0, 0, 0, 0, 0, 0, 0};
  float a[8];
  for_each_eight(
      op, len, chunk, [&](v8f x) { acc += x; },
      [&](const float* p, uint64_t i, uint64_t n) {  // the last few, into their lanes
        std::memcpy(a, &acc, sizeof a);
        for (; i < n; ++i) a[i & 7] += op == ReduceOp::kSumAbs ? std::fabs(p[i]) : p[i];
        std::memcpy(&acc, a, sizeof a);
      });
  std::memcpy(a, &acc, sizeof a);
  return static_cast<double>(((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])));
}

// The maximum (kMax, kMaxAbs) or minimum (kMin) of `len` contiguous
// elements, as reduce_float finds it (`load(i)`: element i as a float),
// eight at a time. The lanes' result is the same value as the sequential
// scan's unless a NaN is met (the scan keeps the first NaN's bits) or the
// result is a zero (the scan keeps the first of -0 and +0 it meets): then
// the scan itself runs.
template <typename Chunk, typename Load>
double extreme_unit(ReduceOp op, uint64_t len, Chunk chunk, Load load) {
  const bool is_min = op == ReduceOp::kMin, is_abs = op == ReduceOp::kMaxAbs;
  const float start = is_abs ? 0.0f : is_min ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  v8f acc = {start, start, start, start, start, start, start, start};
  v8i nan = {0, 0, 0, 0, 0, 0, 0, 0};
  float r = start;
  bool any_nan = false;
  for_each_eight(
      op, len, chunk,
      [&](v8f x) {
        nan |= x != x;
        acc = is_min ? (x < acc ? x : acc) : (x > acc ? x : acc);
      },
      [&](const float* p, uint64_t i, uint64_t n) {
        for (; i < n; ++i) {
          const float x = is_abs ? std::fabs(p[i]) : p[i];
          any_nan |= x != x;
          r = is_min ? std::min(r, x) : std::max(r, x);
        }
      });
  float a[8];
  std::memcpy(a, &acc, sizeof a);
  for (int l = 0; l < 8; ++l) {
    any_nan |= nan[l] != 0;
    r = is_min ? std::min(r, a[l]) : std::max(r, a[l]);
  }
  if (!any_nan && r != 0.0f) return r;
  return reduce_float(op, len, load);
}

template <typename Load>
double reduce_int(ReduceOp op, uint64_t len, Load load) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kSumSquare:
    case ReduceOp::kSumAbs: {
      int64_t acc = 0;
      for (uint64_t i = 0; i < len; ++i) {
        int64_t x = load(i);
        if (op == ReduceOp::kSumSquare) x = x * x;
        if (op == ReduceOp::kSumAbs) x = x < 0 ? -x : x;
        acc += x;
      }
      return static_cast<double>(static_cast<int32_t>(acc));
    }
    case ReduceOp::kProd: {
      int64_t acc = 1;
      for (uint64_t i = 0; i < len; ++i) acc = static_cast<int64_t>(static_cast<int32_t>(acc * load(i)));
      return static_cast<double>(acc);
    }
    case ReduceOp::kMax:
    case ReduceOp::kMaxAbs: {
      int64_t acc = op == ReduceOp::kMaxAbs ? 0 : std::numeric_limits<int32_t>::min();
      for (uint64_t i = 0; i < len; ++i) {
        const int64_t x = load(i);
        acc = std::max<int64_t>(acc, op == ReduceOp::kMaxAbs && x < 0 ? -x : x);
      }
      return static_cast<double>(acc);
    }
    case ReduceOp::kMin: {
      int64_t acc = std::numeric_limits<int32_t>::max();
      for (uint64_t i = 0; i < len; ++i) acc = std::min<int64_t>(acc, load(i));
      return static_cast<double>(acc);
    }
  }
  return 0;
}

}  // namespace

void ReduceVertex::compute(uint8_t* mem) const {
  const uint8_t* in = mem + in_.address;
  uint8_t* out = mem + out_.address;
  const ReduceOp op = effective_op(op_, combine_);
  const ReduceOp merge = effective_op(op_, true);
  const bool float_data = is_float(in_dtype_);
  // Float sums, sums of magnitudes and extremes of contiguous segments run
  // eight lanes at a time (sum_unit, extreme_unit).
  const bool sum_op = op == ReduceOp::kSum || op == ReduceOp::kSumAbs;
  const bool extreme_op = op == ReduceOp::kMax || op == ReduceOp::kMaxAbs || op == ReduceOp::kMin;
  auto reduce_segment = [&](const ReduceSegment& s) -> double {
    const bool unit = s.in_stride == 1 || s.len <= 1;
    if (float_data) {
      if (in_dtype_ == DeviceType::kFloat32) {
        const float* p = reinterpret_cast<const float*>(in) + s.in_offset;
        auto chunk = [&](uint64_t at, uint64_t, float*) { return p + at; };
        auto load = [&](uint64_t i) { return p[i * s.in_stride]; };
        if (unit && sum_op) return sum_unit(op, s.len, chunk);
        if (unit && extreme_op) return extreme_unit(op, s.len, chunk, load);
        return reduce_float(op, s.len, load);
      }
      const half_bits* p = reinterpret_cast<const half_bits*>(in) + s.in_offset;
      auto chunk = [&](uint64_t at, uint64_t n, float* buf) {
        half_to_float_n(p + at, buf, n);
        return static_cast<const float*>(buf);
      };
      auto load = [&](uint64_t i) { return half_to_float(p[i * s.in_stride]); };
      if (unit && sum_op) return sum_unit(op, s.len, chunk);
      if (unit && extreme_op) return extreme_unit(op, s.len, chunk, load);
      return reduce_float(op, s.len, load);
    }
    if (in_dtype_ == DeviceType::kInt32) {
      const int32_t* p = reinterpret_cast<const int32_t*>(in) + s.in_offset;
      return reduce_int(op, s.len, [&](uint64_t i) { return static_cast<int64_t>(p[i * s.in_stride]); });
    }
    const uint8_t* p = in + s.in_offset;
    return reduce_int(op, s.len, [&](uint64_t i) { return static_cast<int64_t>(p[i * s.in_stride] != 0); });
  };
  // Two results for one output: combined as partials are (float in float32,
  // integers wrapping to int32).
  auto combine = [&](double a, double b) -> double {
    if (float_data) {
      const float fa = static_cast<float>(a), fb = static_cast<float>(b);
      switch (merge) {
        case ReduceOp::kMax: return (fa != fa || fb != fb) ? NAN : std::max(fa, fb);
        case ReduceOp::kMin: return (fa != fa || fb != fb) ? NAN : std::min(fa, fb);
        case ReduceOp::kProd: return fa * fb;
        default: return fa + fb;
      }
    }
    const int64_t ia = static_cast<int64_t>(a), ib = static_cast<int64_t>(b);
    switch (merge) {
      case ReduceOp::kMax: return static_cast<double>(std::max(ia, ib));
      case ReduceOp::kMin: return static_cast<double>(std::min(ia, ib));
      case ReduceOp::kProd: return static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(ia * ib)));
      default: return static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(ia + ib)));
    }
  };
  // Consecutive segments with the same output are combined into it (a
  // tile's pieces of one row, say).
  for (size_t k = 0; k < segs_.size();) {
    const uint64_t at = segs_[k].out_offset;
    double r = reduce_segment(segs_[k]);
    for (++k; k < segs_.size() && segs_[k].out_offset == at; ++k) r = combine(r, reduce_segment(segs_[k]));
    switch (final_) {
      case ReduceFinal::kNone: break;
      case ReduceFinal::kScale:
        if (is_float(out_dtype_)) {
          r = static_cast<double>(static_cast<float>(r) * static_cast<float>(scale_));
        } else {
          // Integer results truncate toward zero; nudge exact quotients
          // (6 * (1/3)) past the rounding error of the reciprocal first.
          const double v = r * scale_;
          r = std::trunc(v + std::copysign(std::fabs(v) * 1e-12, v));
        }
        break;
      case ReduceFinal::kSqrt: r = std::sqrt(static_cast<float>(r)); break;
      case ReduceFinal::kLog: r = std::log(static_cast<float>(r)); break;
      case ReduceFinal::kFloat8Scale:
        r = float8_scale_for(static_cast<float>(r), float8_format(static_cast<int>(scale_)));
        break;
    }
    store_element(out, out_dtype_, at, r);
  }
}

}  // namespace neurenix
