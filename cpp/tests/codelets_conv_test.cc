// The convolution codelet run directly on a stand-in tile memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "codelet_util.h"
#include "neurenix/codelets/conv.h"
#include "neurenix/stochastic_rounding.h"

using namespace neurenix;
using namespace nxtest;

namespace {

// How a 1x1 window's channels are placed in pieces.
enum class Placement {
  kEvenlySpaced,  // a piece per channel, the channels a fixed stride apart
  kScattered,     // a piece per channel, each anywhere
  kGrouped,       // pieces of several whole channels, anywhere
  kStraddling,    // pieces cut inside channels
};

}  // namespace

// A 1x1 window read in place in pieces (a receive alias from several
// senders): read a channel at a time where each lies (float32: evenly
// spaced channels as one strided matrix, others through their pointers;
// float16 under half partials: through half row pointers), or gathered
// where a piece cuts a channel or, in float16, under stochastic rounding.
// Small integers: every sum exact, whatever its order, in half too.
TEST(ConvCodelet, WindowInPiecesReadWhereEachChannelLies) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> val(-8, 8);
  struct Input {
    DeviceType dtype;  // the window's and the weights' (float16: half partials)
    bool stochastic;   // run under stochastic rounding
  };
  for (Input input : {Input{kF32, false}, Input{kF16, false}, Input{kF16, true}})
    for (Placement place : {Placement::kEvenlySpaced, Placement::kScattered, Placement::kGrouped, Placement::kStraddling})
      for (DeviceType od : {kF32, kF16})
        for (int trial = 0; trial < 20; ++trial) {
          const DeviceType id = input.dtype;
          const uint64_t es = device_type_size(id);
          ConvWindow s;
          s.cin = 1 + rng() % 24;
          s.cout = 1 + rng() % 19;
          s.rows = s.in_rows = 1 + rng() % 3;
          s.in_w = s.out_w = 1 + rng() % 30;
          s.in_h = s.rows;
          s.ldw = s.cin + rng() % 3;
          s.ld_out = s.rows * s.out_w + rng() % 3;
          const uint64_t chan = static_cast<uint64_t>(s.rows) * s.in_w, n = s.cin * chan;
          std::vector<double> x(n), w(static_cast<size_t>(s.cout) * s.ldw);
          for (double& v : x) v = val(rng);
          for (double& v : w) v = val(rng);
          TileMem mem;
          Field in = mem.field(n, id);
          for (uint64_t i = 0; i < n; ++i) mem.put(in, id, i, 30000);  // its own bytes: never read
          Field wf = mem.field(w.size(), id);
          for (size_t i = 0; i < w.size(); ++i) mem.put(wf, id, i, w[i]);
          Field out = mem.field(static_cast<uint64_t>(s.cout - 1) * s.ld_out + chan, od);
          // Cuts between pieces (elements of the window), each piece's
          // elements stored at a place of its own.
          std::vector<uint64_t> cuts;
          if (place == Placement::kStraddling) {
            cuts = {0};
            for (uint64_t e = 1; e < n; ++e)
              if (rng() % 4 == 0) cuts.push_back(e);
            if (cuts.size() == 1 && n > 1) cuts.push_back(1 + rng() % (n - 1));
          } else {
            for (uint32_t c = 0; c < s.cin; ++c)
              if (place != Placement::kGrouped || c == 0 || rng() % 3 == 0) cuts.push_back(c * chan);
          }
          std::vector<Field::Piece> pieces(cuts.size());
          const uint64_t stride = chan + 1 + rng() % 5;  // elements between evenly spaced channels
          Field spaced = mem.field(stride * s.cin, id);
          std::vector<size_t> order(cuts.size());
          std::iota(order.begin(), order.end(), 0);
          std::shuffle(order.begin(), order.end(), rng);
          for (size_t k : order) {
            const uint64_t b = cuts[k], e = k + 1 < cuts.size() ? cuts[k + 1] : n;
            uint64_t at;
            if (place == Placement::kEvenlySpaced) {
              at = spaced.byte_offset + b / chan * stride * es;
              for (uint64_t i = b; i < e; ++i) mem.put(spaced, id, b / chan * stride + (i - b), x[i]);
            } else {
              Field f = mem.field(e - b, id);
              at = f.byte_offset;
              for (uint64_t i = b; i < e; ++i) mem.put(f, id, i - b, x[i]);
            }
            pieces[k] = Field::Piece{b, static_cast<int64_t>(at), 1, 0};
          }
          ConvVertex v(0, in, wf, out, s, id, id, od);
          ASSERT_TRUE(v.all_fields()[0]->piecewise);
          v.all_fields()[0]->pieces = pieces;
          v.refresh();
          RoundingRng draws(7, 0, 0);
          {
            ScopedRounding rounding(input.stochastic ? &draws : nullptr);
            v.compute(mem.bytes.data());
          }
          if (input.stochastic && od == kF32) {
            // The window gathered and its chunks rounded by draws (the half
            // rows read in place draw none).
            RoundingRng fresh(7, 0, 0);
            EXPECT_NE(draws.next32(), fresh.next32()) << "no draws under stochastic rounding";
          }
          for (uint32_t co = 0; co < s.cout; ++co)
            for (uint64_t p = 0; p < chan; ++p) {
              double want = 0;
              for (uint32_t ci = 0; ci < s.cin; ++ci) want += w[co * s.ldw + ci] * x[ci * chan + p];
              ASSERT_EQ(mem.get(out, od, co * s.ld_out + p), want)
                  << device_type_name(id) << (input.stochastic ? " stochastic" : "") << ", placement "
                  << static_cast<int>(place) << ", trial " << trial << ", output channel " << co << ", column " << p;
            }
        }
}

// Windows with padding, strides and dilations, one output row or several,
// with a bias or without, float32 or float16 inputs (float16 with float or
// half partials) and outputs: every output the sum over channels and taps
// of the padded window, plus the bias (small integers: every sum exact,
// in half too).
TEST(ConvCodelet, PaddedStridedWindowsWithBias) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> val(-4, 4);
  for (int trial = 0; trial < 300; ++trial) {
    ConvWindow s;
    s.kh = 1 + rng() % 3;
    s.kw = 1 + rng() % 3;
    s.sh = 1 + rng() % 3;  // (3: the general division of strides)
    s.sw = 1 + rng() % 3;
    s.dh = 1 + rng() % 2;
    s.dw = 1 + rng() % 2;
    s.pad_top = static_cast<int32_t>(rng() % 2);
    s.pad_left = static_cast<int32_t>(rng() % 2);
    s.cin = 1 + rng() % 5;
    s.cout = 1 + rng() % 11;
    s.in_h = 4 + rng() % 8;
    s.in_w = 4 + rng() % 20;
    const int32_t eh = static_cast<int32_t>((s.kh - 1) * s.dh + 1), ew = static_cast<int32_t>((s.kw - 1) * s.dw + 1);
    const int32_t out_h = (static_cast<int32_t>(s.in_h) + 2 * s.pad_top - eh) / static_cast<int32_t>(s.sh) + 1;
    s.out_w = static_cast<uint32_t>((static_cast<int32_t>(s.in_w) + 2 * s.pad_left - ew) / static_cast<int32_t>(s.sw) + 1);
    if (out_h <= 0 || static_cast<int32_t>(s.out_w) <= 0) continue;
    s.ho0 = rng() % static_cast<uint32_t>(out_h);
    s.rows = trial % 2 ? 1 : 1 + rng() % (static_cast<uint32_t>(out_h) - s.ho0);
    // The window holds the input rows the outputs read, inside the image.
    const int32_t lo = std::max<int32_t>(0, static_cast<int32_t>(s.ho0 * s.sh) - s.pad_top);
    const int32_t hi = std::min<int32_t>(static_cast<int32_t>(s.in_h),
                                         static_cast<int32_t>((s.ho0 + s.rows - 1) * s.sh) - s.pad_top + eh);
    if (hi <= lo) continue;
    s.hi0 = lo;
    s.in_rows = static_cast<uint32_t>(hi - lo);
    const uint32_t k = s.cin * s.kh * s.kw;
    s.ldw = k + rng() % 2;
    s.ld_out = s.rows * s.out_w + rng() % 3;
    const DeviceType od = rng() % 3 == 0 ? kF16 : kF32;
    const DeviceType id = rng() % 3 == 0 ? kF16 : kF32;
    const DeviceType pd = id == kF16 && rng() % 2 ? kF16 : kF32;
    const bool with_bias = rng() % 2;
    const uint64_t chan = static_cast<uint64_t>(s.in_rows) * s.in_w;
    std::vector<double> x(s.cin * chan), w(static_cast<size_t>(s.cout) * s.ldw), bias(s.cout);
    for (double& v : x) v = val(rng);
    for (double& v : w) v = val(rng);
    for (double& v : bias) v = val(rng);
    TileMem mem;
    Field in = mem.field(x.size(), id), wf = mem.field(w.size(), id), bf = mem.field(s.cout, kF32);
    Field out = mem.field(static_cast<uint64_t>(s.cout - 1) * s.ld_out + s.rows * s.out_w, od);
    for (size_t i = 0; i < x.size(); ++i) mem.put(in, id, i, x[i]);
    for (size_t i = 0; i < w.size(); ++i) mem.put(wf, id, i, w[i]);
    for (uint32_t i = 0; i < s.cout; ++i) mem.put(bf, kF32, i, bias[i]);
    ConvVertex v(0, in, wf, out, s, id, pd, od);
    if (with_bias) v.set_bias(bf, kF32);
    v.refresh();
    v.compute(mem.bytes.data());
    for (uint32_t co = 0; co < s.cout; ++co)
      for (uint32_t r = 0; r < s.rows; ++r)
        for (uint32_t wo = 0; wo < s.out_w; ++wo) {
          double want = with_bias ? bias[co] : 0.0;
          for (uint32_t ci = 0; ci < s.cin; ++ci)
            for (uint32_t a = 0; a < s.kh; ++a)
              for (uint32_t b = 0; b < s.kw; ++b) {
                const int32_t hr = static_cast<int32_t>((s.ho0 + r) * s.sh + a * s.dh) - s.pad_top;
                const int32_t wc = static_cast<int32_t>(wo * s.sw + b * s.dw) - s.pad_left;
                if (hr < 0 || hr >= static_cast<int32_t>(s.in_h) || wc < 0 || wc >= static_cast<int32_t>(s.in_w)) continue;
                want += w[co * s.ldw + (ci * s.kh + a) * s.kw + b] * x[ci * chan + (hr - s.hi0) * s.in_w + wc];
              }
          ASSERT_EQ(mem.get(out, od, co * s.ld_out + r * s.out_w + wo), want)
              << "trial " << trial << ": output channel " << co << ", row " << r << ", column " << wo;
        }
  }
}

// Under stochastic rounding a float16 convolution with half partials draws
// in pass order: its chunk of products rounded, then the running sums (one
// chunk: one input channel), then each output row rounded with its bias
// added, then that row stored, row after row, channel after channel. A 1x1
// window of several rows, replayed from the same generator.
TEST(ConvCodelet, StochasticRoundingDrawsRowByRow) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> val(-2.0f, 2.0f);
  ConvWindow s;
  s.cin = 1;
  s.cout = 3;
  s.in_h = s.rows = s.in_rows = 4;
  s.in_w = s.out_w = 5;
  s.ldw = 1;
  s.ld_out = s.rows * s.out_w + 2;
  const uint32_t n = s.rows * s.out_w;
  std::vector<float> x(n), w(s.cout), bias(s.cout);
  for (float& v : x) v = round_to_half(val(rng));
  for (float& v : w) v = round_to_half(val(rng));
  for (float& v : bias) v = val(rng);  // not a half value: its rounding draws matter
  TileMem mem;
  Field in = mem.field(n, kF16), wf = mem.field(s.cout, kF16), bf = mem.field(s.cout, kF32);
  Field out = mem.field(static_cast<uint64_t>(s.cout - 1) * s.ld_out + n, kF16);
  for (uint32_t i = 0; i < n; ++i) mem.put(in, kF16, i, x[i]);
  for (uint32_t i = 0; i < s.cout; ++i) {
    mem.put(wf, kF16, i, w[i]);
    mem.put(bf, kF32, i, bias[i]);
  }
  ConvVertex v(0, in, wf, out, s, kF16, kF16, kF16);
  v.set_bias(bf, kF32);
  v.refresh();
  RoundingRng draws(7, 0, 0);
  {
    ScopedRounding rounding(&draws);
    v.compute(mem.bytes.data());
  }
  RoundingRng replay(7, 0, 0);
  auto sr = [&](float f) { return half_to_float(stochastic_float_to_half(f, replay.next32())); };
  // The products (exact in float), rounded; the running sums from zero,
  // rounded: two draws per sum, in order.
  std::vector<float> sums(static_cast<size_t>(s.cout) * n);
  for (uint32_t co = 0; co < s.cout; ++co)
    for (uint32_t i = 0; i < n; ++i) sums[co * n + i] = sr(w[co] * x[i]);
  for (float& v : sums) v = sr(0.0f + v);
  for (uint32_t co = 0; co < s.cout; ++co)
    for (uint32_t r = 0; r < s.rows; ++r) {
      float row[5];
      for (uint32_t wo = 0; wo < s.out_w; ++wo) row[wo] = sr(sums[co * n + r * s.out_w + wo] + bias[co]);
      for (uint32_t wo = 0; wo < s.out_w; ++wo) {
        const float want = sr(row[wo]);
        ASSERT_EQ(mem.get(out, kF16, co * s.ld_out + r * s.out_w + wo), want)
            << "output channel " << co << ", row " << r << ", column " << wo;
      }
    }
  EXPECT_EQ(draws.next32(), replay.next32()) << "as many draws as replayed";
}
