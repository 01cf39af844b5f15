// Convolution vertex: the window split into stride-phase planes in
// per-thread scratch, then the same float products as the matrix-product
// vertex, with the same accumulator rules (float partials: exact products
// summed in float; half partials: chunks of 16 products rounded to half and
// accumulated in half).
#include "neurenix/codelets/conv.h"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "neurenix/codelets/gemm.h"
#include "neurenix/error.h"
#include "neurenix/half.h"
#include "neurenix/stochastic_rounding.h"
#include "amp.h"
#include "deinterleave.h"
#include "scratch.h"

// GCC 12 reports the AVX-512 conversion intrinsics' own placeholder
// operands as maybe uninitialized (a false positive in its headers).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace neurenix {
namespace {

// dst[j] = src[j * stride] for j < n; src holds at least (n - 1) * stride + 1
// floats, and nothing past them is read. Stride 2 (the stride-2 windows'
// phase planes) deinterleaves 16 at a time where the build has AVX-512.
void gather_strided(float* __restrict dst, const float* __restrict src, size_t n, size_t stride) {
#if defined(__AVX512F__)
  if (stride == 2) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    size_t j = 0;
    // Whole vectors read src[2j, 2j + 32): inside while 2j + 31 <= 2(n - 1).
    for (; j + 16 < n; j += 16) {
      const __m512 lo = _mm512_loadu_ps(src + 2 * j), hi = _mm512_loadu_ps(src + 2 * j + 16);
      _mm512_storeu_ps(dst + j, _mm512_permutex2var_ps(lo, even, hi));
    }
    if (j < n)
      _mm512_mask_storeu_ps(dst + j, static_cast<__mmask16>((1u << (n - j)) - 1), load_even(src + 2 * j, static_cast<uint32_t>(n - j)));
    return;
  }
#endif
  for (size_t j = 0; j < n; ++j) dst[j] = src[j * stride];
}

// dst[j] = src[j] (+ bias, when `add`) for j < n: nothing outside either
// row is touched (masked last step where the build has AVX-512).
void store_row(float* __restrict dst, const float* __restrict src, size_t n, bool add, float bias) {
#if defined(__AVX512F__)
  const __m512 b = _mm512_set1_ps(bias);
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 x = _mm512_loadu_ps(src + j);
    _mm512_storeu_ps(dst + j, add ? _mm512_add_ps(x, b) : x);
  }
  if (j < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(m, src + j);
    _mm512_mask_storeu_ps(dst + j, m, add ? _mm512_add_ps(x, b) : x);
  }
#else
  if (add) {
    for (size_t j = 0; j < n; ++j) dst[j] = src[j] + bias;
  } else {
    std::memcpy(dst, src, n * sizeof(float));
  }
#endif
}

#if defined(__AVX512F__)
// dst[j] = src[j] (+ bias, when `add`) rounded to half (to nearest, ties to
// even) for j < n; nothing outside either row is touched.
void store_row_half(half_bits* __restrict dst, const float* __restrict src, size_t n, bool add, float bias) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 b = _mm512_set1_ps(bias);
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 x = _mm512_loadu_ps(src + j);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), _mm512_cvtps_ph(add ? _mm512_add_ps(x, b) : x, kRound));
  }
  if (j < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(m, src + j);
    const __m256i h = _mm512_cvtps_ph(add ? _mm512_add_ps(x, b) : x, kRound);
#if defined(__AVX512BW__)
    // (A masked store of the last lanes: rows of a few outputs, 13 or 27
    // wide, are all tail.)
    _mm512_mask_storeu_epi16(dst + j, static_cast<__mmask32>(m), _mm512_castsi256_si512(h));
#else
    alignas(32) half_bits t[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(t), h);
    std::memcpy(dst + j, t, (n - j) * sizeof(half_bits));
#endif
  }
}
#endif

// x / d and x % d for a stride or a dilation: 1 and 2 (almost all of them)
// without a division instruction (a vertex asks for dozens, one per tap).
inline uint32_t quot(uint32_t x, uint32_t d) { return d == 1 ? x : d == 2 ? x >> 1 : x / d; }
inline uint32_t rem(uint32_t x, uint32_t d) { return d == 1 ? 0 : d == 2 ? x & 1 : x % d; }

// dst[j] = src[j] for j < n, for the short rows of a window (a few to a few
// dozen floats): inline vector moves, not a call per row.
inline void copy_row(float* __restrict dst, const float* __restrict src, size_t n) {
#if defined(__AVX512F__)
  size_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(dst + j, _mm512_loadu_ps(src + j));
  if (j < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(dst + j, m, _mm512_maskz_loadu_ps(m, src + j));
  }
#else
  std::memcpy(dst, src, n * sizeof(float));
#endif
}

// table[c] = where channel c of a window in pieces lies, from its channel
// runs (ConvVertex::derive), as a T (float or half_bits) pointer.
template <typename T, typename Runs>
void channel_pointers(const uint8_t* mem, const Runs& runs, uint32_t cin, std::vector<const T*>& table) {
  table.resize(cin);
  for (const auto& r : runs) {
    const uint8_t* at = mem + r.address;
    for (uint32_t c = 0; c < r.count; ++c, at += r.stride) table[r.first + c] = reinterpret_cast<const T*>(at);
  }
}

// The engine asks for the first four cache lines of each vertex object
// before its turn (engine.cc): the convolution vertex fits in them.
static_assert(sizeof(ConvVertex) <= 256, "a convolution vertex object past four cache lines");

// A host thread's scratch for the convolution vertex (thread_scratch).
struct ConvScratch {
  std::vector<float> win, wts, acc, tmp, ph, row_buf;
  std::vector<const float*> chans, rows;
  std::vector<const half_bits*> half_rows;
  std::vector<size_t> tap_at;
  std::vector<uint8_t> used;
};

}  // namespace

ConvVertex::ConvVertex(uint32_t tile_, Field in, Field weights, Field out, ConvWindow shape, DeviceType in_dtype,
                       DeviceType partials_dtype, DeviceType out_dtype)
    : in_(in), w_(weights), out_(out), s_(shape), in_dtype_(in_dtype), partials_(partials_dtype), out_dtype_(out_dtype) {
  tile = tile_;
  in_.field().access = Access::kRead;
  // A window the product reads in place may be received from several
  // senders, each channel read where it was sent from.
  in_.field().piecewise = reads_in_place() || reads_half_rows();
  w_.field().access = Access::kRead;
  out_.field().access = Access::kWrite;
  const uint64_t k = static_cast<uint64_t>(s_.cin) * s_.kh * s_.kw;
  NX_CHECK(static_cast<uint64_t>(s_.cin) * s_.in_rows * s_.in_w <= in_.count, "conv input window exceeds its field");
  NX_CHECK(s_.cout == 0 || (s_.cout - 1) * static_cast<uint64_t>(s_.ldw) + k <= w_.count, "conv weights exceed their field");
  NX_CHECK(s_.cout == 0 || (s_.cout - 1) * static_cast<uint64_t>(s_.ld_out) + static_cast<uint64_t>(s_.rows) * s_.out_w <= out_.count,
           "conv output exceeds its field");
  NX_CHECK(!(partials_ == DeviceType::kFloat16 && in_dtype_ == DeviceType::kFloat32), "half partials need half inputs");
  NX_CHECK(!is_float8(in_dtype_) || partials_ == DeviceType::kFloat16, "float8 operands need half partials");
}

void ConvVertex::set_scales(Field a, Field b) {
  NX_CHECK(a.count >= 1 && b.count >= 1, "conv scale field is empty");
  scales_ = std::make_unique<Float8Scales>(Float8Scales{a, b});
  scales_->a.access = Access::kRead;
  scales_->b.access = Access::kRead;
}

void ConvVertex::set_bias(Field bias, DeviceType dtype) {
  NX_CHECK(bias.count >= s_.cout, "conv bias shorter than the output channels");
  bias_ = std::make_unique<BiasField>(BiasField{bias, dtype});
  bias_->field.access = Access::kRead;
}

void ConvVertex::list_fields(std::vector<Field*>& out) {
  out.push_back(&in_.field());
  out.push_back(&w_.field());
  out.push_back(&out_.field());
  if (bias_) out.push_back(&bias_->field);
  if (scales_) {
    out.push_back(&scales_->a);
    out.push_back(&scales_->b);
  }
}

void ConvVertex::list_refs(std::vector<const FieldRef*>& out) const {
  out.push_back(&in_);
  out.push_back(&w_);
  out.push_back(&out_);
}

bool ConvVertex::window_is_plane() const {
  const ConvWindow& s = s_;
  return s.sh == 1 && s.sw == 1 && s.kh == 1 && s.kw == 1 && static_cast<int32_t>(s.ho0) - s.pad_top == s.hi0 &&
         s.pad_left == 0 && s.in_rows == s.rows && s.out_w == s.in_w;
}

bool ConvVertex::reads_in_place() const {
  return in_dtype_ == DeviceType::kFloat32 && partials_ == DeviceType::kFloat32 && window_is_plane();
}

bool ConvVertex::reads_half_rows() const {
  return in_dtype_ == DeviceType::kFloat16 && partials_ == DeviceType::kFloat16 && window_is_plane();
}

void ConvVertex::derive() {
  channels_.clear();
  if (!(reads_in_place() || reads_half_rows()) || in_.pieces.empty()) return;
  const uint64_t chan = static_cast<uint64_t>(s_.in_rows) * s_.in_w, es = device_type_size(in_dtype_);
  std::vector<ChannelRun> runs;
  uint64_t ci = 0;
  for (size_t i = 0; i < in_.pieces.size() && ci < s_.cin; ++i) {
    const Field::Piece& p = in_.pieces[i];
    const uint64_t end = i + 1 < in_.pieces.size() ? in_.pieces[i + 1].begin : in_.count;
    for (; ci < s_.cin && ci * chan < end; ++ci) {
      if (ci * chan < p.begin || ci * chan + chan > end) return;  // straddles: gathered
      const int64_t at = p.address + static_cast<int64_t>((ci * chan - p.begin) * es);
      if (!runs.empty()) {
        ChannelRun& r = runs.back();
        if (r.count == 1) r.stride = at - r.address;
        if (at == r.address + static_cast<int64_t>(r.count) * r.stride) {
          ++r.count;
          continue;
        }
      }
      runs.push_back(ChannelRun{static_cast<uint32_t>(ci), 1, at, 0});
    }
  }
  if (ci == s_.cin) channels_ = runs;
}

uint64_t ConvVertex::cycles(const TargetSpec& t) const {
  const uint64_t rate = std::max<uint32_t>(1, amp_flops_per_cycle(t, in_dtype_));
  const uint64_t depth = amp_depth(in_dtype_);
  const uint64_t k = static_cast<uint64_t>(s_.cin) * s_.kh * s_.kw;
  const uint64_t p = static_cast<uint64_t>(s_.rows) * s_.out_w;
  const uint64_t compute = 2 * s_.cout * p * ((k + depth - 1) / depth * depth) / rate;  // AMP, as MatMulVertex
  return t.vertex_overhead_cycles + compute + 4ull * s_.rows * s_.cout * s_.kh;
}

void ConvVertex::compute(uint8_t* mem) const {
  const ConvWindow& s = s_;
  const uint32_t k = s.cin * s.kh * s.kw;
  const uint32_t p = s.rows * s.out_w;
  if (s.cout == 0 || p == 0) return;
  ConvScratch& scratch = thread_scratch<ConvScratch>();
  std::vector<float> &win = scratch.win, &wts = scratch.wts, &acc = scratch.acc, &tmp = scratch.tmp;
  // Whether stochastic rounding is on, asked once (each ask is a call
  // into another file and an atomic load).
  const bool stochastic = active_rounding_rng() != nullptr;
  // Input window as float. One received in pieces (receive aliases from
  // several senders) that the product reads in place is read a channel at a
  // time where each channel is, unless a channel straddles two pieces;
  // otherwise it is gathered first.
  const size_t win_n = static_cast<size_t>(s.cin) * s.in_rows * s.in_w;
  const bool in_place = reads_in_place();
  // A window that is its own phase plane but is not read in place (float8
  // data, float16 under float partials, float16 under half partials when
  // gathered (stochastic rounding, or a channel straddling two pieces), or
  // float32 gathered from pieces): converted into `win`, with the slack a
  // phase plane has, and read there; float16 under half partials otherwise
  // reads its rows where they lie (half_plane, below).
  const bool own_plane = !in_place && window_is_plane();
  // (Its phase plane's rows are the window's: rq = in_rows, wq = in_w.)
  const size_t own_slack = own_plane ? static_cast<size_t>(s.in_w) + 64 : 0;
  std::vector<const float*>& chans = scratch.chans;
  bool by_channel = false;
  const float* in_f = nullptr;
  // A float16 window that goes into phase planes of unit column stride is
  // widened row by row as the planes are built (below), not first as a
  // whole into `win`: one pass over it instead of two (the same floats).
  const half_bits* in_h = nullptr;
  // A float16 window that is its own phase plane under half partials: its
  // channel rows are read where they lie (in one piece, or a channel at a
  // time where each was received, derive()), each vector widened as the
  // product loads it (not widened first into `win`; under stochastic
  // rounding the product runs chunk by chunk on floats).
  const bool half_plane =
      reads_half_rows() && (in_.pieces.empty() || !channels_.empty()) && !stochastic;
  if (half_plane) {
    if (in_.pieces.empty()) in_h = reinterpret_cast<const half_bits*>(mem + in_.address);
  } else if (in_dtype_ == DeviceType::kFloat32 && in_.pieces.empty()) {
    in_f = reinterpret_cast<const float*>(mem + in_.address);
  } else if (in_dtype_ == DeviceType::kFloat16 && in_.pieces.empty() && !in_place && !own_plane && s.sw == 1) {
    in_h = reinterpret_cast<const half_bits*>(mem + in_.address);
  } else {
    if (in_place && !channels_.empty()) {
      // Each channel read where it lies (derive()).
      by_channel = true;
      channel_pointers(mem, channels_, s.cin, chans);
    }
    if (!by_channel) {
      win.resize(win_n + own_slack);
      load_field_floats(mem, in_, in_dtype_, 0, win_n, win.data());
      std::fill(win.begin() + static_cast<std::ptrdiff_t>(win_n), win.end(), 0.0f);
      in_f = win.data();
    }
  }
  // Weights as float [cout][k].
  const float* w_f;
  uint32_t ldw = s.ldw;
  if (in_dtype_ == DeviceType::kFloat32) {
    w_f = reinterpret_cast<const float*>(mem + w_.address);
  } else {
    wts.resize(static_cast<size_t>(s.cout) * k);
    if (s.ldw == k) {  // one conversion of the whole block
      load_floats(mem + w_.address, in_dtype_, wts.data(), static_cast<size_t>(s.cout) * k);
    } else {
      for (uint32_t co = 0; co < s.cout; ++co)
        load_floats(mem + w_.address + static_cast<size_t>(co) * s.ldw * device_type_size(in_dtype_), in_dtype_,
                    wts.data() + static_cast<size_t>(co) * k, k);
    }
    w_f = wts.data();
    ldw = k;
  }
  // No im2col: the padded input window is split into
  // sh x sw phases (rows i*sh + ph, columns j*sw + pc of the padded window),
  // so that tap (a, b) of output (r, wo) reads phase ((a*dh) % sh, (b*dw) % sw)
  // at row r + (a*dh) / sh, column wo + (b*dw) / sw: a shifted view of one
  // phase plane. The sum runs over k = (ci, a, b) in one product whose rows
  // are those shifted views, read through a table of row pointers (the same
  // sums, in the same order, as a product with im2col's packed panels);
  // columns wo >= out_w of each row are computed and dropped. With half
  // partials it runs in chunks of the AMP depth.
  // A 1x1 kernel with float partials has one tap: one product of the
  // weights with its phase plane, read as a strided matrix (packed panels
  // run up to 1.7x faster than row pointers there). Larger kernels once ran
  // a strided product per tap, accumulated: 0.98-2.9x the time of the one
  // product over all taps (docs/benchmarks.md).
  const bool half_rows = partials_ == DeviceType::kFloat16;
  const bool one_tap = !half_rows && s.kh * s.kw == 1;
  // Phase rows and their width: what the taps of the outputs read, no more
  // (the products' columns are rows x wq, padded to whole panels).
  const uint32_t wq = s.out_w + quot((s.kw - 1) * s.dw, s.sw);
  const uint32_t rq = s.rows + quot((s.kh - 1) * s.dh, s.sh);
  const uint32_t plane = rq * wq;
  const uint32_t phases = s.sh * s.sw;
  // Slack after the last plane: the products read whole panels past each
  // row (into the next plane, values landing in dropped columns only).
  const size_t slack = static_cast<size_t>(wq) + 64;
  std::vector<float>& ph = scratch.ph;
  // Input row of padded row 0, and input column of padded column 0.
  const int32_t first_row = static_cast<int32_t>(s.ho0 * s.sh) - s.pad_top;
  const int32_t first_col = -s.pad_left;
  // A 1x1 stride-1 window without padding is its own (only) phase plane
  // (in_place and own_plane, above).
  const uint32_t in_plane = in_place ? s.in_rows * s.in_w : plane;
  if (!in_place && !own_plane) {
    ph.resize(static_cast<size_t>(phases) * s.cin * plane + slack);
    // Only the phases some tap reads are built (a 1x1 stride-2 window reads
    // one of four). Each is zeroed whole, then its rows inside the image
    // and the window written: padding stays zero.
    std::vector<uint8_t>& used = scratch.used;
    used.assign(phases, 0);
    for (uint32_t a = 0; a < s.kh; ++a)
      for (uint32_t bb = 0; bb < s.kw; ++bb) used[rem(a * s.dh, s.sh) * s.sw + rem(bb * s.dw, s.sw)] = 1;
    // The columns j of column phase px that lie inside the image
    // (0 <= first_col + j*sw + px < in_w): [j_lo, j_lo + run), the first of
    // them at input column `first`.
    struct Columns {
      int32_t j_lo, run, first;
    };
    auto columns = [&](uint32_t px) {
      const int32_t sw = static_cast<int32_t>(s.sw), in_w = static_cast<int32_t>(s.in_w);
      const int32_t c0 = first_col + static_cast<int32_t>(px);
      int32_t j_lo = c0 >= 0 ? 0 : static_cast<int32_t>(quot(static_cast<uint32_t>(-c0 + sw - 1), s.sw));
      int32_t j_hi = in_w - c0 <= 0 ? 0 : static_cast<int32_t>(quot(static_cast<uint32_t>(in_w - c0 + sw - 1), s.sw));
      j_lo = std::min<int32_t>(j_lo, static_cast<int32_t>(wq));
      j_hi = std::clamp<int32_t>(j_hi, j_lo, static_cast<int32_t>(wq));
      return Columns{j_lo, j_hi - j_lo, c0 + j_lo * sw};
    };
    // The window row (local) that phase row i of row phase py reads, or -1:
    // rows outside the image (padding) or past the window (never read) stay
    // zero.
    auto window_row = [&](uint32_t i, uint32_t py) -> int32_t {
      const int32_t hi_row = first_row + static_cast<int32_t>(i * s.sh + py);
      const int32_t local = hi_row - s.hi0;
      const bool outside = hi_row < 0 || hi_row >= static_cast<int32_t>(s.in_h) || local < 0 ||
                           local >= static_cast<int32_t>(s.in_rows);
      return outside ? -1 : local;
    };
    auto zero_phase = [&](uint32_t py, uint32_t px) {
      float* phase = ph.data() + static_cast<size_t>(py * s.sw + px) * s.cin * plane;
      std::memset(phase, 0, static_cast<size_t>(s.cin) * plane * sizeof(float));
      return phase;
    };
    const size_t src_chan = static_cast<size_t>(s.in_rows) * s.in_w;
    // Stride 2 across with both column phases read: each input row is
    // loaded once and split into its even and odd columns together (the
    // phase that starts on the earlier column takes the even ones).
    // Returns false, having written nothing, where that does not apply.
    auto both_column_phases = [&](uint32_t py) -> bool {
#if defined(__AVX512F__)
      if (s.sw != 2 || !used[py * 2] || !used[py * 2 + 1]) return false;
      const Columns col[2] = {columns(0), columns(1)};
      const int ev = col[0].first < col[1].first ? 0 : 1, od = 1 - ev;
      if (col[0].run == 0 || col[1].run == 0 || col[od].first != col[ev].first + 1) return false;
      // Floats read from column col[ev].first on: all inside the row.
      const int32_t need = std::max(2 * col[ev].run - 1, 2 * col[od].run);
      float* phase_ev = zero_phase(py, ev);
      float* phase_od = zero_phase(py, od);
      const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
      auto lanes = [](int32_t n) {
        return static_cast<__mmask16>(n >= 16 ? 0xFFFFu : n <= 0 ? 0u : (1u << n) - 1);
      };
      const int32_t runs = std::max(col[ev].run, col[od].run);
      for (uint32_t i = 0; i < rq; ++i) {
        const int32_t local = window_row(i, py);
        if (local < 0) continue;
        const float* src = in_f + static_cast<size_t>(local) * s.in_w + col[ev].first;
        float* de = phase_ev + static_cast<size_t>(i) * wq + col[ev].j_lo;
        float* dd = phase_od + static_cast<size_t>(i) * wq + col[od].j_lo;
        for (uint32_t ci = 0; ci < s.cin; ++ci, src += src_chan, de += plane, dd += plane)
          for (int32_t t = 0; t < runs; t += 16) {
            const __m512 lo = _mm512_maskz_loadu_ps(lanes(need - 2 * t), src + 2 * t);
            const __m512 hi = _mm512_maskz_loadu_ps(lanes(need - 2 * t - 16), src + 2 * t + 16);
            _mm512_mask_storeu_ps(de + t, lanes(col[ev].run - t), _mm512_permutex2var_ps(lo, even, hi));
            _mm512_mask_storeu_ps(dd + t, lanes(col[od].run - t), _mm512_permutex2var_ps(lo, odd, hi));
          }
      }
      return true;
#else
      (void)py;
      return false;
#endif
    };
    for (uint32_t py = 0; py < s.sh; ++py) {
      if (both_column_phases(py)) continue;
      for (uint32_t px = 0; px < s.sw; ++px) {
        if (!used[py * s.sw + px]) continue;
        float* phase = zero_phase(py, px);
        const Columns col = columns(px);
        if (col.run == 0) continue;
        const size_t run = static_cast<size_t>(col.run);
        for (uint32_t i = 0; i < rq; ++i) {
          const int32_t local = window_row(i, py);
          if (local < 0) continue;
          const size_t at = static_cast<size_t>(local) * s.in_w + static_cast<size_t>(col.first);
          float* row = phase + static_cast<size_t>(i) * wq + col.j_lo;
          if (in_h) {  // (unit column stride)
            const half_bits* hs = in_h + at;
            for (uint32_t ci = 0; ci < s.cin; ++ci, hs += src_chan, row += plane) half_to_float_n_inline(hs, row, run);
            continue;
          }
          const float* src = in_f + at;
          if (s.sw == 1) {
            for (uint32_t ci = 0; ci < s.cin; ++ci, src += src_chan, row += plane) copy_row(row, src, run);
          } else {
            for (uint32_t ci = 0; ci < s.cin; ++ci, src += src_chan, row += plane)
              gather_strided(row, src, run, static_cast<size_t>(s.sw));
          }
        }
      }
    }
    std::fill(ph.end() - static_cast<std::ptrdiff_t>(slack), ph.end(), 0.0f);
  }
  const float* planes = own_plane ? in_f : ph.data();
  // The product of a window read a channel at a time where each lies: one
  // strided matrix where its channels are evenly spaced (one channel run),
  // through the channels' pointers otherwise (the same sums either way).
  auto by_channels = [&](float* c, uint32_t ldc) {
    const ChannelRun& r = channels_[0];
    const uint32_t n = s.rows * s.in_w;
    if (channels_.size() == 1 && r.stride > 0 && r.stride % sizeof(float) == 0 && r.stride / sizeof(float) <= UINT32_MAX)
      gemm_f32_strided(w_f, ldw, 1, chans[0], static_cast<uint32_t>(r.stride / sizeof(float)), c, s.cout, n, s.cin, ldc,
                       false, false);
    else
      gemm_f32_rows(w_f, ldw, chans.data(), c, s.cout, n, s.cin, ldc, false);
  };
  // A float32 output written by the product itself: the bias added to the
  // first `cols` outputs of each channel (each sum plus the bias once, as
  // the stores below add it).
  auto add_bias = [&](float* out, uint32_t cols) {
    if (!bias_) return;
    for (uint32_t co = 0; co < s.cout; ++co) {
      const float bv = static_cast<float>(load_element(mem + bias_->field.address, bias_->dtype, co));
      float* o = out + static_cast<size_t>(co) * s.ld_out;
      for (uint32_t i = 0; i < cols; ++i) o[i] += bv;
    }
  };
  const uint32_t row_w = in_place ? s.in_w : wq;
  const uint32_t n = s.rows * row_w;
  if (in_place && out_dtype_ == DeviceType::kFloat32) {
    // Rows hold no dropped columns: the product goes straight to the output.
    float* out = reinterpret_cast<float*>(mem + out_.address);
    if (by_channel)
      by_channels(out, s.ld_out);
    else
      gemm_f32_strided(w_f, ldw, 1, in_f, in_plane, out, s.cout, n, s.cin, s.ld_out, false, false);
    add_bias(out, n);
    return;
  }
  acc.resize(static_cast<size_t>(s.cout) * n);
  const uint32_t khw = s.kh * s.kw;
  if (!one_tap) {
    // Row kk = (ci * kh + a) * kw + b is tap (a, b)'s view of channel ci:
    // each tap's offset from channel 0 once, then a plane further per
    // channel.
    std::vector<const float*>& rows = scratch.rows;
    std::vector<size_t>& tap_at = scratch.tap_at;
    rows.resize(k);
    tap_at.resize(khw);
    for (uint32_t a = 0; a < s.kh; ++a)
      for (uint32_t bb = 0; bb < s.kw; ++bb) {
        const uint32_t ra = a * s.dh, cb = bb * s.dw;
        tap_at[a * s.kw + bb] = static_cast<size_t>(rem(ra, s.sh) * s.sw + rem(cb, s.sw)) * s.cin * plane +
                                static_cast<size_t>(quot(ra, s.sh)) * wq + quot(cb, s.sw);
      }
    if (!half_plane) {
      const float** row = rows.data();
      const float* chan = planes;
      for (uint32_t ci = 0; ci < s.cin; ++ci, chan += plane)
        for (uint32_t t = 0; t < khw; ++t) *row++ = chan + tap_at[t];
    }
    // The planes have slack: the product reads whole panels.
    if (!half_rows && out_dtype_ == DeviceType::kFloat32 && s.rows == 1) {
      // One output row in float: its product straight into the output (its
      // out_w columns, the phase row's dropped columns not computed), then
      // the bias: the sums `acc` would hold, each plus the bias once. (Rows
      // of several output rows run one product each this way: 1-5% slower
      // than one product over all of them and the copy below.)
      float* out = reinterpret_cast<float*>(mem + out_.address);
      gemm_f32_rows(w_f, ldw, rows.data(), out, s.cout, s.out_w, k, s.ld_out, true);
      add_bias(out, p);
      return;
    }
    if (half_plane) {
      // (One tap: row ci is channel ci's plane, nothing read past it.)
      std::vector<const half_bits*>& hrows = scratch.half_rows;
      if (in_h) {
        hrows.resize(k);
        const size_t chan_n = static_cast<size_t>(s.in_rows) * s.in_w;
        for (uint32_t ci = 0; ci < k; ++ci) hrows[ci] = in_h + ci * chan_n;
      } else {
        channel_pointers(mem, channels_, s.cin, hrows);
      }
      gemm_half_partials_rows(w_f, ldw, hrows.data(), acc.data(), s.cout, n, k, n, amp_depth(in_dtype_),
                              operand_scale(mem, scales_.get()), false);
    } else if (!half_rows) {
      gemm_f32_rows(w_f, ldw, rows.data(), acc.data(), s.cout, n, k, n, true);
    } else {
      NX_CHECK(scales_ || !is_float8(in_dtype_), "float8 conv vertex without its scale");
      const float scale = operand_scale(mem, scales_.get());
      if (!stochastic) {
        gemm_half_partials_rows(w_f, ldw, rows.data(), acc.data(), s.cout, n, k, n, amp_depth(in_dtype_), scale, true);
      } else {
        // Stochastic rounding draws per element in pass order: chunk by chunk.
        sum_in_half_partials(acc, tmp, k, amp_depth(in_dtype_), scale, [&](uint32_t k0, uint32_t kc, float* out) {
          gemm_f32_rows(w_f + k0, ldw, rows.data() + k0, out, s.cout, n, kc, n, true);
        });
      }
    }
  } else if (by_channel) {  // in place
    by_channels(acc.data(), n);
  } else {
    // (The tap reads phase (0, 0): the first plane.)
    gemm_f32_strided(w_f, ldw, 1, in_place ? in_f : planes, in_plane, acc.data(), s.cout, n, s.cin, n, false, !in_place);
  }
  // Valid columns are acc[co][r * row_w + wo], wo < out_w. The stores
  // below run once per output row (thousands a step), converting to the
  // output type and adding the bias. Their loop reads locals, not the
  // vertex's fields or the scratch's vectors, which the compiler would
  // load again for every row. A channel whose rows lie back to back in both the sums and the output
  // (no dropped columns: kernels one column wide, or no wider than their
  // column stride) is stored as one run; not under stochastic rounding,
  // which draws for each row's rounding and then its store, in that order.
  const float* const sums = acc.data();
  uint8_t* const out = mem + out_.address;
  const size_t es = device_type_size(out_dtype_);
  const uint8_t* const bias_at = bias_ ? mem + bias_->field.address : nullptr;
  const DeviceType bias_dtype = bias_ ? bias_->dtype : DeviceType::kFloat32;
  const uint32_t cout = s.cout, out_w = s.out_w, ld_out = s.ld_out;
  const bool whole = row_w == out_w && !stochastic;
  const uint32_t segs = whole ? 1 : s.rows, seg_n = whole ? s.rows * out_w : out_w;
  // write(at, src, bias, count) for every output row (or whole channel),
  // src its `count` valid sums.
  auto each_row = [&](auto write) {
    for (uint32_t co = 0; co < cout; ++co) {
      const float bv = bias_at ? static_cast<float>(load_element(bias_at, bias_dtype, co)) : 0.0f;
      const float* src = sums + static_cast<size_t>(co) * n;
      size_t at = static_cast<size_t>(co) * ld_out;
      for (uint32_t r = 0; r < segs; ++r, src += row_w, at += out_w) write(at, src, bv, seg_n);
    }
  };
  if (out_dtype_ == DeviceType::kFloat32 && partials_ == DeviceType::kFloat32) {
    // Rows (or channels) copied, or added to the bias, inline.
    each_row([&](size_t at, const float* src, float bv, uint32_t count) {
      store_row(reinterpret_cast<float*>(out) + at, src, count, bias_at != nullptr, bv);
    });
    return;
  }
#if defined(__AVX512F__)
  if (out_dtype_ == DeviceType::kFloat16 && !stochastic) {
    // Each output (plus the bias) rounded to half once, as the general path
    // below (rounding a sum already rounded to half changes nothing).
    each_row([&](size_t at, const float* src, float bv, uint32_t count) {
      store_row_half(reinterpret_cast<half_bits*>(out) + at, src, count, bias_at != nullptr, bv);
    });
    return;
  }
#endif
  std::vector<float>& row_buf = scratch.row_buf;
  row_buf.resize(seg_n);
  float* const buf = row_buf.data();
  each_row([&](size_t at, const float* src, float bv, uint32_t count) {
    if (bias_at) {
      for (uint32_t i = 0; i < count; ++i) buf[i] = src[i] + bv;
      if (partials_ == DeviceType::kFloat16) round_to_half_n(buf, count);
      src = buf;
    }
    store_floats(src, out_dtype_, out + at * es, count);
  });
}

}  // namespace neurenix
