// Pooling vertex: max and average windows, computed in float.
#include "neurenix/codelets/pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "neurenix/error.h"
#include "deinterleave.h"
#include "scratch.h"

namespace neurenix {
namespace {

// o[i] = max(o[i], src[i * sw]) (a NaN cell taken: `v > o || v != v`), or
// o[i] += src[i * sw] when `max` is false, for i < n (`Stride`: the column
// stride, a constant for unit strides, whose loops the compiler vectorises).
template <typename Stride>
inline void taps(float* __restrict o, const float* __restrict src, uint32_t n, Stride sw, bool max) {
  if (max) {
    for (uint32_t i = 0; i < n; ++i) {
      const float v = src[static_cast<size_t>(i) * sw];
      o[i] = (v > o[i] || v != v) ? v : o[i];
    }
  } else {
    for (uint32_t i = 0; i < n; ++i) o[i] += src[static_cast<size_t>(i) * sw];
  }
}

#if defined(__AVX512F__)
// G groups of sixteen output columns from column i on (the last group's
// `last` lanes; every earlier group whole): every cell of each column taken
// in a register, rows then taps along the row, as PoolVertex::compute's
// loop below takes them, and stored once. The groups' running values are
// independent, so their compare-and-select chains overlap instead of one
// group waiting on its own chain.
template <uint32_t G>
inline void pool_groups(float* o, const float* const* real, uint32_t real_rows, uint32_t kw, int64_t first, uint32_t dw,
                        uint32_t sw, uint32_t i, uint32_t last, float init, bool max) {
  __m512 acc[G];
  __mmask16 lanes[G];
  for (uint32_t g = 0; g < G; ++g) {
    acc[g] = _mm512_set1_ps(init);
    lanes[g] = g + 1 < G ? static_cast<__mmask16>(0xFFFFu)
                         : static_cast<__mmask16>(last == 16 ? 0xFFFFu : (1u << last) - 1);
  }
  for (uint32_t q = 0; q < real_rows; ++q)
    for (uint32_t b = 0; b < kw; ++b) {
      const float* src = real[q] + first + static_cast<int64_t>(b) * dw + static_cast<int64_t>(i) * sw;
      for (uint32_t g = 0; g < G; ++g) {
        const float* at = src + static_cast<int64_t>(16 * g) * sw;
        const uint32_t m = g + 1 < G ? 16 : last;
        const __m512 v = sw == 2 ? load_even(at, m) : _mm512_maskz_loadu_ps(lanes[g], at);
        if (max) {
          const __mmask16 take = _mm512_cmp_ps_mask(v, acc[g], _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
          acc[g] = _mm512_mask_mov_ps(acc[g], take, v);
        } else {
          acc[g] = _mm512_add_ps(acc[g], v);
        }
      }
    }
  for (uint32_t g = 0; g < G; ++g) _mm512_mask_storeu_ps(o + i + 16 * g, lanes[g], acc[g]);
}
#endif

}  // namespace

PoolVertex::PoolVertex(uint32_t tile_, Field in, Field out, PoolWindow shape, PoolMode mode, DeviceType dtype)
    : in_(in), out_(out), s_(std::move(shape)), mode_(mode), dtype_(dtype) {
  tile = tile_;
  in_.field().access = Access::kRead;
  out_.field().access = Access::kWrite;
  NX_CHECK(is_float(dtype_), "pooling of non-float data");
  NX_CHECK(static_cast<uint64_t>(s_.planes) * s_.rows.size() * s_.in_cols <= in_.count, "pool window exceeds its field");
  NX_CHECK(s_.planes == 0 || s_.out_rows == 0 ||
               (s_.planes - 1) * static_cast<uint64_t>(s_.ld_out_plane) + (s_.out_rows - 1) * static_cast<uint64_t>(s_.ld_out_row) +
                       s_.out_cols <= out_.count,
           "pool output exceeds its field");
  NX_CHECK(std::is_sorted(s_.rows.begin(), s_.rows.end()), "pool window rows must ascend");
}

void PoolVertex::list_fields(std::vector<Field*>& out) {
  out.push_back(&in_.field());
  out.push_back(&out_.field());
}

void PoolVertex::list_refs(std::vector<const FieldRef*>& out) const {
  out.push_back(&in_);
  out.push_back(&out_);
}

uint64_t PoolVertex::cycles(const TargetSpec& t) const {
  const double per = dtype_ == DeviceType::kFloat16 ? 0.25 : 0.5;
  const double outputs = static_cast<double>(worker_rounded(t, static_cast<uint64_t>(s_.planes) * s_.out_rows * s_.out_cols));
  const double work = outputs * s_.kh * s_.kw;
  return t.vertex_overhead_cycles + static_cast<uint64_t>(per * work) + 4ull * s_.planes * s_.out_rows;
}

void PoolVertex::compute(uint8_t* mem) const {
  const PoolWindow& s = s_;
  // (A host thread's scratch for the pooling vertex: thread_scratch.)
  struct Scratch {
    std::vector<float> win, res;
    std::vector<int32_t> row_of;
  };
  Scratch& scratch = thread_scratch<Scratch>();
  std::vector<float> &win = scratch.win, &res = scratch.res;
  std::vector<int32_t>& row_of = scratch.row_of;
  const size_t nrows = s.rows.size();
  const size_t win_n = static_cast<size_t>(s.planes) * nrows * s.in_cols;
  // The window as float: float32 read where it is, other types widened.
  const float* win_f = reinterpret_cast<const float*>(mem + in_.address);
  if (dtype_ != DeviceType::kFloat32) {
    win.resize(win_n);
    if (win_n) load_floats(mem + in_.address, dtype_, win.data(), win_n);
    win_f = win.data();
  }
  // Input row -> window row (or -1 when the window does not hold it).
  const int32_t r_lo = nrows ? s.rows.front() : 0;
  row_of.assign(nrows ? static_cast<size_t>(s.rows.back() - r_lo + 1) : 0, -1);
  for (size_t i = 0; i < nrows; ++i) row_of[static_cast<size_t>(s.rows[i] - r_lo)] = static_cast<int32_t>(i);
  if (dtype_ != DeviceType::kFloat32) res.resize(static_cast<size_t>(s.out_rows) * s.out_cols);
  const size_t es = device_type_size(dtype_);
  const int32_t padded_h = static_cast<int32_t>(s.in_h + s.pad_top + s.pad_bottom);
  const int32_t padded_w = static_cast<int32_t>(s.in_w + s.pad_left + s.pad_right);
  // Output columns whose whole window lies inside the image's columns (and
  // the window's): [c_in0, c_in1). There every cell of a real row counts, so
  // those columns are computed in vectors of columns (sixteen at a time in
  // a register where the build has AVX-512, else tap by tap across the row
  // in loops the compiler vectorises), each column seeing its cells in the
  // same order as the general loop below (bit for bit the same result, NaNs
  // and signed zeros included).
  uint32_t c_in0 = s.out_cols, c_in1 = s.out_cols;
  {
    const int64_t span = static_cast<int64_t>(s.kw - 1) * s.dw;
    const int64_t lo = std::max<int64_t>(0, s.wi0);
    const int64_t hi = std::min<int64_t>(s.in_w, static_cast<int64_t>(s.wi0) + s.in_cols);  // exclusive
    auto first_col = [&](uint32_t c) { return static_cast<int64_t>(s.wo0 + c) * s.sw - s.pad_left; };
    uint32_t c0 = 0;
    while (c0 < s.out_cols && first_col(c0) < lo) ++c0;
    uint32_t c1 = c0;
    while (c1 < s.out_cols && first_col(c1) + span < hi) ++c1;
    if (c1 > c0) {
      c_in0 = c0;
      c_in1 = c1;
    }
  }
  // Float32 results go straight to the output's rows; others are rounded
  // from `res` at the end of each plane.
  const bool direct = dtype_ == DeviceType::kFloat32;
  for (uint32_t pl = 0; pl < s.planes; ++pl) {
    const float* plane = win_f + static_cast<size_t>(pl) * nrows * s.in_cols;
    uint8_t* dst = mem + out_.address + static_cast<size_t>(pl) * s.ld_out_plane * es;
    for (uint32_t r = 0; r < s.out_rows; ++r) {
      const int32_t h0 = static_cast<int32_t>((s.ho0 + r) * s.sh) - s.pad_top;
      float* out_row = direct ? reinterpret_cast<float*>(dst + static_cast<size_t>(r) * s.ld_out_row * es)
                              : res.data() + static_cast<size_t>(r) * s.out_cols;
      if (c_in1 > c_in0) {
        const float init = mode_ == PoolMode::kMax ? -std::numeric_limits<float>::infinity() : 0.0f;
        const bool max = mode_ == PoolMode::kMax;
        // The window's rows inside the image, in order (the first kMaxRows
        // of them kept).
        constexpr uint32_t kMaxRows = 16;
        const float* real[kMaxRows];
        uint32_t real_rows = 0, padded_rows = 0;
        for (uint32_t a = 0; a < s.kh; ++a) {
          const int32_t hi = h0 + static_cast<int32_t>(a * s.dh);
          if (hi + s.pad_top >= 0 && hi + s.pad_top < padded_h) ++padded_rows;
          if (hi < 0 || hi >= static_cast<int32_t>(s.in_h)) continue;
          const int32_t idx = (hi >= r_lo && hi - r_lo < static_cast<int32_t>(row_of.size())) ? row_of[hi - r_lo] : -1;
          NX_CHECK(idx >= 0, "pool window misses an input row");
          if (real_rows < kMaxRows) real[real_rows] = plane + static_cast<size_t>(idx) * s.in_cols;
          ++real_rows;
        }
        // Cell (a, b) of column c: row[(wo0 + c) * sw - pad_left + b * dw - wi0].
        const int64_t first = static_cast<int64_t>(s.wo0 + c_in0) * s.sw - s.pad_left - s.wi0;
        float* o = out_row + c_in0;
        const uint32_t n = c_in1 - c_in0;
#if defined(__AVX512F__)
        if ((s.sw == 1 || s.sw == 2) && real_rows <= kMaxRows) {
          // Sixteen columns at a time, all their cells taken in a register
          // (stride 2: deinterleaved from two loads), rows then taps along
          // the row, and stored once: the same values, in the same order
          // per column, as the loop below.
          // Four groups of sixteen columns at a time, then the one to three
          // groups left.
          uint32_t i = 0;
          for (; n - i > 64; i += 64) pool_groups<4>(o, real, real_rows, s.kw, first, s.dw, s.sw, i, 16, init, max);
          const uint32_t left = n - i, groups = (left + 15) / 16, last = left - 16 * (groups - 1);
          switch (groups) {
            case 1: pool_groups<1>(o, real, real_rows, s.kw, first, s.dw, s.sw, i, last, init, max); break;
            case 2: pool_groups<2>(o, real, real_rows, s.kw, first, s.dw, s.sw, i, last, init, max); break;
            case 3: pool_groups<3>(o, real, real_rows, s.kw, first, s.dw, s.sw, i, last, init, max); break;
            case 4: pool_groups<4>(o, real, real_rows, s.kw, first, s.dw, s.sw, i, last, init, max); break;
            default: break;
          }
        } else
#endif
        {
          std::fill(o, o + n, init);
          uint32_t q = 0;
          for (uint32_t a = 0; a < s.kh; ++a) {
            const int32_t hi = h0 + static_cast<int32_t>(a * s.dh);
            if (hi < 0 || hi >= static_cast<int32_t>(s.in_h)) continue;
            const float* row = q < kMaxRows ? real[q] : plane + static_cast<size_t>(row_of[hi - r_lo]) * s.in_cols;
            ++q;
            for (uint32_t b = 0; b < s.kw; ++b) {
              const float* src = row + first + static_cast<int64_t>(b) * s.dw;
              if (s.sw == 1) taps(o, src, n, std::integral_constant<uint32_t, 1>{}, max);
              else taps(o, src, n, s.sw, max);
            }
          }
        }
        const uint32_t count = real_rows * s.kw, padded_count = padded_rows * s.kw;
        if (mode_ == PoolMode::kAverage)
          for (uint32_t c = c_in0; c < c_in1; ++c) out_row[c] = count ? out_row[c] / static_cast<float>(count) : 0.0f;
        if (mode_ == PoolMode::kAverageIncludePad)
          for (uint32_t c = c_in0; c < c_in1; ++c)
            out_row[c] = padded_count ? out_row[c] / static_cast<float>(padded_count) : 0.0f;
      }
      for (uint32_t c = 0; c < s.out_cols; ++c) {
        if (c == c_in0) {
          c = c_in1 - 1;
          continue;
        }
        const int32_t w0 = static_cast<int32_t>((s.wo0 + c) * s.sw) - s.pad_left;
        float acc = mode_ == PoolMode::kMax ? -std::numeric_limits<float>::infinity() : 0.0f;
        uint32_t count = 0, padded_count = 0;
        for (uint32_t a = 0; a < s.kh; ++a) {
          const int32_t hi = h0 + static_cast<int32_t>(a * s.dh);
          // Window cells inside the explicitly padded extent count for
          // count_include_pad; cells beyond it (ceil_mode overhang) do not.
          const bool in_pad_h = hi + s.pad_top >= 0 && hi + s.pad_top < padded_h;
          const bool real_row = hi >= 0 && hi < static_cast<int32_t>(s.in_h);
          const float* row = nullptr;
          if (real_row) {
            const int32_t idx = (hi >= r_lo && hi - r_lo < static_cast<int32_t>(row_of.size())) ? row_of[hi - r_lo] : -1;
            NX_CHECK(idx >= 0, "pool window misses an input row");
            row = plane + static_cast<size_t>(idx) * s.in_cols;
          }
          for (uint32_t b = 0; b < s.kw; ++b) {
            const int32_t wi = w0 + static_cast<int32_t>(b * s.dw);
            if (in_pad_h && wi + s.pad_left >= 0 && wi + s.pad_left < padded_w) ++padded_count;
            if (!real_row || wi < 0 || wi >= static_cast<int32_t>(s.in_w)) continue;
            const float v = row[wi - s.wi0];
            ++count;
            if (mode_ == PoolMode::kMax) {
              if (v > acc || v != v) acc = v;
            } else {
              acc += v;
            }
          }
        }
        if (mode_ == PoolMode::kAverage) acc = count ? acc / static_cast<float>(count) : 0.0f;
        if (mode_ == PoolMode::kAverageIncludePad) acc = padded_count ? acc / static_cast<float>(padded_count) : 0.0f;
        out_row[c] = acc;
      }
    }
    if (direct) continue;
    for (uint32_t r = 0; r < s.out_rows; ++r) {
      uint8_t* d = dst + static_cast<size_t>(r) * s.ld_out_row * es;
      const float* src = res.data() + static_cast<size_t>(r) * s.out_cols;
      store_floats(src, dtype_, d, s.out_cols);
    }
  }
}

}  // namespace neurenix
