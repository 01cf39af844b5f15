// Pooling vertex: max and average windows, computed in float.
#include "neurenix/codelets/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "neurenix/error.h"

namespace neurenix {

PoolVertex::PoolVertex(uint32_t tile_, Field in, Field out, PoolWindow shape, PoolMode mode, DeviceType dtype)
    : in_(in), out_(out), s_(std::move(shape)), mode_(mode), dtype_(dtype) {
  tile = tile_;
  in_.access = Access::kRead;
  out_.access = Access::kWrite;
  NX_CHECK(is_float(dtype_), "pooling of non-float data");
  NX_CHECK(static_cast<uint64_t>(s_.planes) * s_.rows.size() * s_.in_cols <= in_.count, "pool window exceeds its field");
  NX_CHECK(s_.planes == 0 || s_.out_rows == 0 ||
               (s_.planes - 1) * static_cast<uint64_t>(s_.ld_out_plane) + (s_.out_rows - 1) * static_cast<uint64_t>(s_.ld_out_row) +
                       s_.out_cols <= out_.count,
           "pool output exceeds its field");
  NX_CHECK(std::is_sorted(s_.rows.begin(), s_.rows.end()), "pool window rows must ascend");
}

void PoolVertex::list_fields(std::vector<Field*>& out) {
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
  thread_local std::vector<float> win, res;
  thread_local std::vector<int32_t> row_of;
  const size_t nrows = s.rows.size();
  const size_t win_n = static_cast<size_t>(s.planes) * nrows * s.in_cols;
  win.resize(win_n);
  if (win_n) {
    load_floats(mem + in_.byte_offset, dtype_, win.data(), win_n);
  }
  // Input row -> window row (or -1 when the window does not hold it).
  const int32_t r_lo = nrows ? s.rows.front() : 0;
  row_of.assign(nrows ? static_cast<size_t>(s.rows.back() - r_lo + 1) : 0, -1);
  for (size_t i = 0; i < nrows; ++i) row_of[static_cast<size_t>(s.rows[i] - r_lo)] = static_cast<int32_t>(i);
  res.resize(static_cast<size_t>(s.out_rows) * s.out_cols);
  const size_t es = device_type_size(dtype_);
  const int32_t padded_h = static_cast<int32_t>(s.in_h + s.pad_top + s.pad_bottom);
  const int32_t padded_w = static_cast<int32_t>(s.in_w + s.pad_left + s.pad_right);
  for (uint32_t pl = 0; pl < s.planes; ++pl) {
    const float* plane = win.data() + static_cast<size_t>(pl) * nrows * s.in_cols;
    for (uint32_t r = 0; r < s.out_rows; ++r) {
      const int32_t h0 = static_cast<int32_t>((s.ho0 + r) * s.sh) - s.pad_top;
      for (uint32_t c = 0; c < s.out_cols; ++c) {
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
        res[static_cast<size_t>(r) * s.out_cols + c] = acc;
      }
    }
    uint8_t* dst = mem + out_.byte_offset + static_cast<size_t>(pl) * s.ld_out_plane * es;
    for (uint32_t r = 0; r < s.out_rows; ++r) {
      uint8_t* d = dst + static_cast<size_t>(r) * s.ld_out_row * es;
      const float* src = res.data() + static_cast<size_t>(r) * s.out_cols;
      store_floats(src, dtype_, d, s.out_cols);
    }
  }
}

}  // namespace neurenix
