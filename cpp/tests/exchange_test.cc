// Lowering data movement to exchange copies. Views follow numpy's strided
// semantics (negative steps, broadcast stride 0); the copies are executed by
// the engine and the result compared with the element permutation the view
// defines, computed here from the view's offset and strides.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <random>

#include "neurenix/exchange.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

enum class Layout { kLinear, kOneTile, kRandom };

void lay_out(Graph& g, VarId v, Layout how, std::mt19937& rng) {
  const Variable& var = g.var(v);
  if (var.numel == 0) return;
  switch (how) {
    case Layout::kLinear: g.map_linearly(v, 1 + rng() % 4); break;
    case Layout::kOneTile: g.map_to_tile(v, g.first_tile(var.ipu) + rng() % g.tiles_per_ipu()); break;
    case Layout::kRandom: {
      std::vector<TileInterval> ivs;
      const uint64_t n = var.numel;
      for (uint64_t pos = 0; pos < n;) {
        uint64_t end = std::min(n, pos + 1 + rng() % 7);
        ivs.push_back(TileInterval{pos, end, g.first_tile(var.ipu) + static_cast<uint32_t>(rng() % g.tiles_per_ipu()), 0});
        pos = end;
      }
      g.set_mapping(v, ivs);
      break;
    }
  }
}

// Checks that each copy stays inside the tiles' blocks it names, and, by
// replaying the copies on the mappings alone, that every destination element
// receives the source element `source_of` says it should, exactly once.
void check_copies(const Graph& g, const Exchange& ex, VarId src, VarId dst,
                  const std::function<int64_t(uint64_t)>& source_of) {
  auto flat_of = [&](VarId v) {
    std::map<std::pair<uint32_t, int64_t>, uint64_t> m;
    for (const TileInterval& iv : g.var(v).mapping)
      for (uint64_t f = iv.begin; f < iv.end; ++f) m[{iv.tile, static_cast<int64_t>(iv.local + f - iv.begin)}] = f;
    return m;
  };
  const auto sflat = flat_of(src), dflat = flat_of(dst);
  std::vector<int> written(g.var(dst).numel, 0);
  for (const Copy& c : ex.copies) {
    ASSERT_EQ(c.src, src);
    ASSERT_EQ(c.dst, dst);
    ASSERT_GT(c.count, 0u);
    ASSERT_GT(c.outer, 0u);
    for (const auto& [sl, dl] : copy_pairs(c)) {
      auto si = sflat.find({c.src_tile, sl});
      auto di = dflat.find({c.dst_tile, dl});
      ASSERT_NE(si, sflat.end()) << "copy reads outside the source's block on tile " << c.src_tile;
      ASSERT_NE(di, dflat.end()) << "copy writes outside the destination's block on tile " << c.dst_tile;
      ASSERT_EQ(static_cast<int64_t>(si->second), source_of(di->second)) << "destination element " << di->second;
      written[di->second]++;
    }
  }
  for (size_t f = 0; f < written.size(); ++f) ASSERT_EQ(written[f], 1) << "destination element " << f;
}

struct ViewCase {
  Shape base;
  View view;  // var filled in by the runner
};

// Copies view `vc.view` of an int32 tensor holding 0..n-1 into a fresh
// tensor; returns the copied values (and the number of copies made).
std::vector<int32_t> run_view(const ViewCase& vc, Layout src_layout, Layout dst_layout, uint32_t tiles, std::mt19937& rng,
                              size_t* ncopies = nullptr, uint32_t src_ipu = 0, uint32_t dst_ipu = 0) {
  auto g = std::make_unique<Graph>(tiny(tiles, 2), 2);
  Tensor x = g->add_variable("x", kI32, vc.base, VarKind::kInput, src_ipu);
  lay_out(*g, x.var, src_layout, rng);
  g->add_input_stream("x", x);
  Tensor y = g->add_variable("y", kI32, vc.view.shape, VarKind::kIntermediate, dst_ipu);
  lay_out(*g, y.var, dst_layout, rng);
  View v = vc.view;
  v.var = x.var;
  uint32_t ex = g->add_exchange("view");
  copy_view(*g, ex, v, View::of(y));
  check_copies(*g, g->exchange(ex), x.var, y.var, [&](uint64_t e) {
    auto idx = unravel(e, v.shape);
    int64_t f = v.offset;
    for (size_t d = 0; d < idx.size(); ++d) f += static_cast<int64_t>(idx[d]) * v.strides[d];
    return f;
  });
  if (ncopies) *ncopies = g->exchange(ex).copies.size();
  g->execute_exchange(ex);
  g->add_output_stream("y", y);
  std::vector<int32_t> xs(shape_numel(vc.base));
  std::iota(xs.begin(), xs.end(), 0);
  auto out = run_graph(std::move(g), {to_bytes(xs)});
  if (out.empty()) return {};
  return from_bytes<int32_t>(out[0]);
}

// What numpy gives: element e of the view is base[offset + sum(idx * stride)].
std::vector<int32_t> expected(const View& v) {
  std::vector<int32_t> out(v.numel());
  for (uint64_t e = 0; e < out.size(); ++e) {
    auto idx = unravel(e, v.shape);
    int64_t f = v.offset;
    for (size_t d = 0; d < idx.size(); ++d) f += static_cast<int64_t>(idx[d]) * v.strides[d];
    out[e] = static_cast<int32_t>(f);
  }
  return out;
}

View make_view(int64_t offset, Shape shape, std::vector<int64_t> strides) {
  View v;
  v.var = 0;
  v.offset = offset;
  v.shape = std::move(shape);
  v.strides = std::move(strides);
  return v;
}

// The whole of a row-major tensor of shape `base` with its axes in order
// `perm` (numpy's transpose).
template <class Index>
View transposed_view(const Shape& base, const std::vector<Index>& perm) {
  const auto bs = row_major_strides(base);
  Shape s;
  std::vector<int64_t> st;
  for (Index p : perm) {
    s.push_back(base[p]);
    st.push_back(bs[p]);
  }
  return make_view(0, s, st);
}

TEST(Exchange, TransposesOfEveryAxisOrder) {
  std::mt19937 rng(1);
  const Shape base = {2, 3, 4};
  std::vector<int> perm = {0, 1, 2};
  int n = 0;
  do {
    ViewCase vc{base, transposed_view(base, perm)};
    for (Layout sl : {Layout::kLinear, Layout::kRandom})
      for (Layout dl : {Layout::kLinear, Layout::kOneTile, Layout::kRandom}) {
        SCOPED_TRACE(testing::Message() << "perm " << perm[0] << perm[1] << perm[2]);
        EXPECT_EQ(run_view(vc, sl, dl, 4, rng), expected(vc.view));
      }
    ++n;
  } while (std::next_permutation(perm.begin(), perm.end()));
  EXPECT_EQ(n, 6);
}

TEST(Exchange, ViewsOfManyDimensions) {
  // Seven and ten dimensions of 2, reversed (no two merge) or shuffled:
  // below and beyond the ranks copy_view keeps on the stack.
  std::mt19937 rng(3);
  for (size_t rank : {size_t{7}, size_t{10}}) {
    const Shape base(rank, 2);
    std::vector<size_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    for (int trial = 0; trial < 3; ++trial) {
      if (trial == 0) std::reverse(perm.begin(), perm.end());
      else std::shuffle(perm.begin(), perm.end(), rng);
      ViewCase vc{base, transposed_view(base, perm)};
      for (Layout sl : {Layout::kLinear, Layout::kRandom})
        for (Layout dl : {Layout::kOneTile, Layout::kRandom}) {
          SCOPED_TRACE(testing::Message() << "rank " << rank << " trial " << trial);
          EXPECT_EQ(run_view(vc, sl, dl, 4, rng), expected(vc.view));
        }
    }
  }
}

TEST(Exchange, SlicesWithStepsAndNegativeStrides) {
  std::mt19937 rng(2);
  const Shape base = {6, 7};
  std::vector<ViewCase> cases = {
      {base, make_view(0, {3, 7}, {14, 1})},       // x[::2]
      {base, make_view(1, {6, 3}, {7, 2})},        // x[:, 1::2]
      {base, make_view(41, {6, 7}, {-7, -1})},     // x[::-1, ::-1]
      {base, make_view(6, {6, 7}, {7, -1})},       // x[:, ::-1]
      {base, make_view(40, {2, 3}, {-21, -3})},    // x[5::-3, 5::-3]
      {base, make_view(8, {2, 2}, {14, 3})},       // x[1:5:2, 1:5:3]
      {base, make_view(0, {6}, {8})},              // the diagonal
      {base, make_view(3, {1, 1, 1}, {0, 0, 0})},  // one element, rank 3
      {base, make_view(41, {42}, {-1})},           // flattened and reversed
  };
  for (const ViewCase& vc : cases)
    for (uint32_t tiles : {1u, 3u, 4u}) {
      SCOPED_TRACE(testing::Message() << shape_str(vc.view.shape) << " offset " << vc.view.offset << " on " << tiles);
      EXPECT_EQ(run_view(vc, Layout::kRandom, Layout::kLinear, tiles, rng), expected(vc.view));
      EXPECT_EQ(run_view(vc, Layout::kLinear, Layout::kRandom, tiles, rng), expected(vc.view));
    }
}

// Strided copies move elements of every width: a transpose of a bool, a
// half and an int32 tensor, whose bytes arrive where numpy puts them (the
// host copies each width with loads and stores of that width).
TEST(Exchange, TransposesOfEveryElementWidth) {
  std::mt19937 rng(3);
  const Shape base = {5, 7};
  const ViewCase vc{base, make_view(0, {7, 5}, {1, 7})};
  const std::vector<int32_t> want = expected(vc.view);
  for (DeviceType dt : {kBool, kF16, kI32}) {
    const size_t width = device_type_size(dt);
    // Element e holds the bytes of e * 97 + 1 (bool: 0 or 1).
    auto element = [&](int64_t e, size_t byte) -> uint8_t {
      const uint32_t v = static_cast<uint32_t>(e * 97 + 1);
      return dt == kBool ? (byte == 0 ? v & 1u : 0u) : static_cast<uint8_t>(v >> (8 * byte));
    };
    for (Layout sl : {Layout::kLinear, Layout::kRandom})
      for (Layout dl : {Layout::kLinear, Layout::kOneTile, Layout::kRandom}) {
        SCOPED_TRACE(testing::Message() << "width " << width);
        auto g = std::make_unique<Graph>(tiny(4, 2), 2);
        Tensor x = g->add_variable("x", dt, base, VarKind::kInput, 0);
        lay_out(*g, x.var, sl, rng);
        g->add_input_stream("x", x);
        Tensor y = g->add_variable("y", dt, vc.view.shape, VarKind::kIntermediate, 0);
        lay_out(*g, y.var, dl, rng);
        View v = vc.view;
        v.var = x.var;
        const uint32_t ex = g->add_exchange("view");
        copy_view(*g, ex, v, View::of(y));
        g->execute_exchange(ex);
        g->add_output_stream("y", y);
        std::vector<uint8_t> in(shape_numel(base) * width);
        for (size_t e = 0; e < shape_numel(base); ++e)
          for (size_t b = 0; b < width; ++b) in[e * width + b] = element(static_cast<int64_t>(e), b);
        auto out = run_graph(std::move(g), {in});
        ASSERT_EQ(out.size(), 1u);
        ASSERT_EQ(out[0].size(), want.size() * width);
        for (size_t e = 0; e < want.size(); ++e)
          for (size_t b = 0; b < width; ++b) ASSERT_EQ(out[0][e * width + b], element(want[e], b)) << e;
      }
  }
}

// A rank-0 view (one element, no dimensions) is a valid numpy view too.
TEST(Exchange, RankZeroView) {
  std::mt19937 rng(9);
  for (uint32_t tiles : {1u, 3u}) {
    ViewCase vc{{6, 7}, make_view(17, {}, {})};
    EXPECT_EQ(run_view(vc, Layout::kRandom, Layout::kLinear, tiles, rng), expected(vc.view));
    ViewCase to_many{{6, 7}, make_view(40, {2, 3}, {0, 0})};
    EXPECT_EQ(run_view(to_many, Layout::kRandom, Layout::kRandom, tiles, rng), expected(to_many.view));
  }
}

TEST(Exchange, BroadcastsRepeatElements) {
  std::mt19937 rng(3);
  std::vector<ViewCase> cases = {
      {{5}, make_view(0, {4, 5}, {0, 1})},          // row to matrix
      {{4}, make_view(0, {4, 5}, {1, 0})},          // column to matrix
      {{1}, make_view(0, {3, 4, 2}, {0, 0, 0})},    // scalar everywhere
      {{3, 1}, make_view(0, {2, 3, 6}, {0, 1, 0})}, // broadcast_view([3,1] -> [2,3,6])
      {{2, 3}, make_view(2, {3, 2, 4}, {-1, 3, 0})},// reversed, transposed and repeated
  };
  for (const ViewCase& vc : cases) {
    SCOPED_TRACE(shape_str(vc.view.shape));
    for (Layout dl : {Layout::kLinear, Layout::kRandom, Layout::kOneTile})
      EXPECT_EQ(run_view(vc, Layout::kRandom, dl, 4, rng), expected(vc.view));
  }
  // broadcast_view computes the strides numpy would.
  View b = broadcast_view(Tensor{0, {3, 1}}, {2, 3, 6});
  EXPECT_EQ(b.strides, (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(b.shape, (Shape{2, 3, 6}));
  View same = broadcast_view(Tensor{0, {2, 3}}, {2, 3});
  EXPECT_EQ(same.strides, (std::vector<int64_t>{3, 1}));
  View ones = broadcast_view(Tensor{0, {1, 1}}, {1, 1});
  EXPECT_EQ(ones.numel(), 1u);
  EXPECT_NX_ERROR(kInternal, broadcast_view(Tensor{0, {3}}, {4}), "does not broadcast");
  EXPECT_NX_ERROR(kInternal, broadcast_view(Tensor{0, {2, 3}}, {3}), "lower rank");
}

// Random compositions of slicing, transposition and broadcasting, on random
// layouts, including copies between IPUs.
TEST(Exchange, RandomViewsMatchNumpySemantics) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 120; ++trial) {
    const size_t rank = 1 + rng() % 4;
    Shape base(rank);
    for (auto& d : base) d = 1 + rng() % 5;
    const auto bs = row_major_strides(base);
    int64_t offset = 0;
    Shape shape;
    std::vector<int64_t> strides;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t n = static_cast<int64_t>(base[d]);
      int64_t step = 1 + rng() % 3;
      if (rng() % 3 == 0) step = -step;
      const int64_t pick = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
      const int64_t start = step > 0 ? pick : n - 1 - pick;
      const int64_t room = step > 0 ? n - start : start + 1;
      const int64_t len = 1 + (room - 1) / std::abs(step);
      offset += start * bs[d];
      shape.push_back(1 + rng() % static_cast<uint64_t>(len));
      strides.push_back(step * bs[d]);
    }
    // Permute the axes, then maybe insert a broadcast axis.
    std::vector<size_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    View v;
    v.offset = offset;
    for (size_t p : perm) {
      v.shape.push_back(shape[p]);
      v.strides.push_back(strides[p]);
    }
    if (rng() % 2) {
      size_t at = rng() % (v.shape.size() + 1);
      v.shape.insert(v.shape.begin() + at, 1 + rng() % 3);
      v.strides.insert(v.strides.begin() + at, 0);
    }
    ViewCase vc{base, v};
    const Layout layouts[] = {Layout::kLinear, Layout::kOneTile, Layout::kRandom};
    const uint32_t tiles = 1 + rng() % 6;
    const uint32_t src_ipu = rng() % 2, dst_ipu = rng() % 2;
    SCOPED_TRACE(testing::Message() << "trial " << trial << " base " << shape_str(base) << " view " << shape_str(v.shape));
    ASSERT_EQ(run_view(vc, layouts[rng() % 3], layouts[rng() % 3], tiles, rng, nullptr, src_ipu, dst_ipu), expected(v));
  }
}

// Destinations that are strided views too (transposed, sliced, reversed
// windows of a bigger tensor), as concat and scatter-like lowerings write them.
TEST(Exchange, RandomDestinationViews) {
  std::mt19937 rng(10);
  for (int trial = 0; trial < 80; ++trial) {
    // A destination view without repeats: slice each axis of Y, permute.
    const size_t rank = 1 + rng() % 3;
    Shape ybase(rank);
    for (auto& d : ybase) d = 1 + rng() % 6;
    const auto ys = row_major_strides(ybase);
    View dv;
    dv.offset = 0;
    Shape vshape;
    std::vector<int64_t> vstrides;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t n = static_cast<int64_t>(ybase[d]);
      int64_t step = 1 + static_cast<int64_t>(rng() % 2);
      if (rng() % 3 == 0) step = -step;
      const int64_t pick = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
      const int64_t start = step > 0 ? pick : n - 1 - pick;
      const int64_t room = step > 0 ? n - start : start + 1;
      const int64_t len = 1 + (room - 1) / std::abs(step);
      dv.offset += start * ys[d];
      vshape.push_back(1 + rng() % static_cast<uint64_t>(len));
      vstrides.push_back(step * ys[d]);
    }
    std::vector<size_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (size_t p : perm) {
      dv.shape.push_back(vshape[p]);
      dv.strides.push_back(vstrides[p]);
    }
    // The source: a contiguous tensor of the view's shape, or its transpose.
    const uint32_t tiles = 1 + rng() % 5;
    auto g = std::make_unique<Graph>(tiny(tiles), 1);
    const bool transposed_src = dv.shape.size() >= 2 && rng() % 2;
    Shape xshape = dv.shape;
    if (transposed_src) std::swap(xshape[0], xshape[1]);
    Tensor x = g->add_variable("x", kI32, xshape, VarKind::kInput, 0);
    lay_out(*g, x.var, rng() % 2 ? Layout::kRandom : Layout::kLinear, rng);
    g->add_input_stream("x", x);
    View sv = View::of(x);
    if (transposed_src) {
      std::swap(sv.shape[0], sv.shape[1]);
      std::swap(sv.strides[0], sv.strides[1]);
    }
    Tensor y = g->add_variable("y", kI32, ybase, VarKind::kIntermediate, 0);
    lay_out(*g, y.var, rng() % 2 ? Layout::kRandom : Layout::kLinear, rng);
    dv.var = y.var;
    uint32_t ex = g->add_exchange("scatter");
    copy_view(*g, ex, sv, dv);
    // Every element the view covers is written once, from the right source.
    std::vector<int64_t> want(shape_numel(ybase), -1);
    for (uint64_t e = 0; e < dv.numel(); ++e) {
      auto idx = unravel(e, dv.shape);
      int64_t yf = dv.offset, xf = sv.offset;
      for (size_t d = 0; d < idx.size(); ++d) {
        yf += static_cast<int64_t>(idx[d]) * dv.strides[d];
        xf += static_cast<int64_t>(idx[d]) * sv.strides[d];
      }
      want[static_cast<size_t>(yf)] = xf;
    }
    std::vector<int> hits(want.size(), 0);
    std::map<std::pair<uint32_t, int64_t>, uint64_t> xflat, yflat;
    for (const TileInterval& iv : g->var(x.var).mapping)
      for (uint64_t f = iv.begin; f < iv.end; ++f) xflat[{iv.tile, static_cast<int64_t>(iv.local + f - iv.begin)}] = f;
    for (const TileInterval& iv : g->var(y.var).mapping)
      for (uint64_t f = iv.begin; f < iv.end; ++f) yflat[{iv.tile, static_cast<int64_t>(iv.local + f - iv.begin)}] = f;
    for (const Copy& c : g->exchange(ex).copies)
      for (const auto& [sl, dl] : copy_pairs(c)) {
        auto si = xflat.find({c.src_tile, sl});
        auto di = yflat.find({c.dst_tile, dl});
        ASSERT_NE(si, xflat.end()) << "trial " << trial;
        ASSERT_NE(di, yflat.end()) << "trial " << trial;
        ASSERT_EQ(static_cast<int64_t>(si->second), want[di->second]) << "trial " << trial;
        hits[di->second]++;
      }
    for (size_t f = 0; f < want.size(); ++f) ASSERT_EQ(hits[f], want[f] >= 0 ? 1 : 0) << "trial " << trial << " element " << f;
    // And the engine agrees.
    g->execute_exchange(ex);
    g->add_output_stream("y", y);
    std::vector<int32_t> xs(shape_numel(xshape));
    std::iota(xs.begin(), xs.end(), 0);
    auto out = run_graph(std::move(g), {to_bytes(xs)});
    ASSERT_EQ(out.size(), 1u);
    auto yv = from_bytes<int32_t>(out[0]);
    for (size_t f = 0; f < want.size(); ++f)
      if (want[f] >= 0) {
        ASSERT_EQ(yv[f], want[f]) << "trial " << trial << " element " << f;
      }
  }
}

TEST(Exchange, ContiguousDataCoalescesIntoFewCopies) {
  std::mt19937 rng(5);
  // Same mapping on both sides: one copy per interval.
  {
    Graph g(tiny(4), 1);
    Tensor x = g.add_variable("x", kF32, {1000}, VarKind::kInput, 0);
    g.map_linearly(x.var);
    Tensor y = g.add_variable("y", kF32, {1000}, VarKind::kIntermediate, 0);
    g.clone_mapping(y.var, x.var);
    uint32_t ex = g.add_exchange("e");
    copy_view(g, ex, View::of(x), View::of(y));
    const auto& copies = g.exchange(ex).copies;
    ASSERT_EQ(copies.size(), g.var(x.var).mapping.size());
    for (size_t i = 0; i < copies.size(); ++i) {
      const TileInterval& iv = g.var(x.var).mapping[i];
      EXPECT_EQ(copies[i].src_stride, 1);
      EXPECT_EQ(copies[i].src_tile, iv.tile);
      EXPECT_EQ(copies[i].dst_tile, iv.tile);
      EXPECT_EQ(copy_elements(copies[i]), iv.end - iv.begin);
    }
    check_copies(g, g.exchange(ex), x.var, y.var, [](uint64_t e) { return static_cast<int64_t>(e); });
  }
  // Different mappings: at most one copy per piece of the overlay of the two.
  for (int trial = 0; trial < 20; ++trial) {
    Graph g(tiny(5), 1);
    Tensor x = g.add_variable("x", kI32, {300}, VarKind::kInput, 0);
    lay_out(g, x.var, Layout::kRandom, rng);
    Tensor y = g.add_variable("y", kI32, {300}, VarKind::kIntermediate, 0);
    g.map_linearly(y.var, 1 + rng() % 50);
    uint32_t ex = g.add_exchange("e");
    copy_view(g, ex, View::of(x), View::of(y));
    std::vector<uint64_t> cuts;
    for (const auto& iv : g.var(x.var).mapping) cuts.push_back(iv.begin);
    for (const auto& iv : g.var(y.var).mapping) cuts.push_back(iv.begin);
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    EXPECT_LE(g.exchange(ex).copies.size(), cuts.size());
    check_copies(g, g.exchange(ex), x.var, y.var, [](uint64_t e) { return static_cast<int64_t>(e); });
  }
  // A transpose on one tile: one strided copy per output row.
  {
    Graph g(tiny(1), 1);
    Tensor x = g.add_variable("x", kF32, {7, 9}, VarKind::kInput, 0);
    g.map_to_tile(x.var, 0);
    Tensor y = g.add_variable("y", kF32, {9, 7}, VarKind::kIntermediate, 0);
    g.map_to_tile(y.var, 0);
    uint32_t ex = g.add_exchange("e");
    copy_view(g, ex, View{x.var, 0, {9, 7}, {1, 9}}, View::of(y));
    // At most one strided descriptor per output row: each row of y gathers a
    // column of x, elements 9 apart.
    const auto& copies = g.exchange(ex).copies;
    ASSERT_GE(copies.size(), 1u);
    ASSERT_LE(copies.size(), 9u);
    for (const Copy& c : copies) {
      EXPECT_EQ(c.src_stride, 9);
      EXPECT_EQ(c.count, 7u);
    }
    check_copies(g, g.exchange(ex), x.var, y.var, [](uint64_t e) { return static_cast<int64_t>((e % 7) * 9 + e / 7); });
  }
  // Broadcasting a column: one stride-0 copy per row.
  {
    Graph g(tiny(1), 1);
    Tensor x = g.add_variable("x", kF32, {6}, VarKind::kInput, 0);
    g.map_to_tile(x.var, 0);
    Tensor y = g.add_variable("y", kF32, {6, 10}, VarKind::kIntermediate, 0);
    g.map_to_tile(y.var, 0);
    uint32_t ex = g.add_exchange("e");
    copy_view(g, ex, View{x.var, 0, {6, 10}, {1, 0}}, View::of(y));
    const auto& copies = g.exchange(ex).copies;
    ASSERT_GE(copies.size(), 1u);
    ASSERT_LE(copies.size(), 6u);
    for (const Copy& c : copies) {
      EXPECT_EQ(c.src_stride, 0);
      EXPECT_EQ(c.count, 10u);
    }
    check_copies(g, g.exchange(ex), x.var, y.var, [](uint64_t e) { return static_cast<int64_t>(e / 10); });
  }
}

// Rows of an image spread round-robin over a few tiles (as a convolution's
// output is) and gathered into one tile: each source tile's rows become one
// 2-D copy, even though consecutive rows come from different tiles.
TEST(Exchange, InterleavedSourceRowsMergeIntoTwoDimensionalCopies) {
  for (uint32_t sources : {2u, 3u, 4u, 8u}) {
    Graph g(tiny(9), 1);
    const uint64_t rows = 6 * sources, cols = 5;
    Tensor x = g.add_variable("x", kF32, {rows, cols}, VarKind::kInput, 0);
    std::vector<TileInterval> ivs;
    std::vector<uint64_t> next(sources, 0);
    for (uint64_t r = 0; r < rows; ++r) {
      const uint32_t t = static_cast<uint32_t>(r % sources);
      ivs.push_back(TileInterval{r * cols, (r + 1) * cols, t, next[t]});
      next[t] += cols;
    }
    g.set_mapping(x.var, ivs);
    Tensor y = g.add_variable("y", kF32, {rows, cols}, VarKind::kIntermediate, 0);
    g.map_to_tile(y.var, 8);
    uint32_t ex = g.add_exchange("e");
    copy_view(g, ex, View::of(x), View::of(y));
    const auto& copies = g.exchange(ex).copies;
    ASSERT_EQ(copies.size(), sources) << sources << " source tiles";
    for (const Copy& c : copies) {
      EXPECT_EQ(c.count, cols);
      EXPECT_EQ(c.outer, rows / sources);
      EXPECT_EQ(c.src_outer, static_cast<int64_t>(cols));
      EXPECT_EQ(c.dst_outer, static_cast<int64_t>(cols * sources));
    }
    check_copies(g, g.exchange(ex), x.var, y.var, [](uint64_t e) { return static_cast<int64_t>(e); });
  }
}

TEST(Exchange, CopyViewChecksShapesAndTypes) {
  Graph g(tiny(2), 1);
  Tensor x = g.add_variable("x", kF32, {4}, VarKind::kInput, 0);
  Tensor y = g.add_variable("y", kF32, {5}, VarKind::kIntermediate, 0);
  Tensor z = g.add_variable("z", kI32, {4}, VarKind::kIntermediate, 0);
  g.map_linearly(x.var);
  g.map_linearly(y.var);
  g.map_linearly(z.var);
  uint32_t ex = g.add_exchange("e");
  EXPECT_NX_ERROR(kInternal, copy_view(g, ex, View::of(x), View::of(y)), "different shapes");
  EXPECT_NX_ERROR(kInternal, copy_view(g, ex, View::of(x), View::of(z)), "different element types");
  Tensor e = g.add_variable("e", kF32, {0, 3}, VarKind::kIntermediate, 0);
  Tensor e2 = g.add_variable("e2", kF32, {0, 3}, VarKind::kIntermediate, 0);
  copy_view(g, ex, View::of(e), View::of(e2));
  EXPECT_TRUE(g.exchange(ex).copies.empty());
}

// Exchange `again` holds exactly the copies of exchange `want`, field by
// field, in the same order.
void expect_same_copies(const Graph& g, uint32_t want, uint32_t again, int trial) {
  const auto& w = g.exchanges()[want].copies;
  const auto& a = g.exchanges()[again].copies;
  ASSERT_EQ(a.size(), w.size()) << "trial " << trial;
  for (size_t i = 0; i < w.size(); ++i)
    ASSERT_TRUE(a[i].src == w[i].src && a[i].src_tile == w[i].src_tile && a[i].src_local == w[i].src_local &&
                a[i].src_stride == w[i].src_stride && a[i].dst == w[i].dst && a[i].dst_tile == w[i].dst_tile &&
                a[i].dst_local == w[i].dst_local && a[i].count == w[i].count && a[i].outer == w[i].outer &&
                a[i].src_outer == w[i].src_outer && a[i].dst_outer == w[i].dst_outer)
        << "trial " << trial << ", copy " << i;
}

// Windows of a [channels, rows, width] source that the tiles of several
// blocks all receive (a convolution's input windows): RepeatedCopies must
// make exactly the copies copy_view makes, in the same order, whether it
// repeats them (a destination that is one run of one tile) or not (a block
// split over two tiles, which copy_view builds afresh).
TEST(Exchange, RepeatedCopiesAreTheCopiesCopyViewMakes) {
  std::mt19937 rng(11);
  size_t repeated = 0;
  for (int trial = 0; trial < 40; ++trial) {
    Graph g(tiny(8), 1);
    const uint64_t c = 2 + rng() % 5, h = 3 + rng() % 6, w = 2 + rng() % 7;
    Tensor x = g.add_variable("x", kF32, {c, h, w}, VarKind::kInput, 0);
    lay_out(g, x.var, trial % 2 ? Layout::kRandom : Layout::kLinear, rng);
    // Windows: channels [c0, c0 + kc), rows [r0, r0 + kr), every column.
    struct Win {
      uint64_t c0, kc, r0, kr;
    };
    std::vector<Win> wins;
    for (int i = 0; i < 3; ++i) {
      const uint64_t kc = 1 + rng() % c, kr = 1 + rng() % h;
      wins.push_back(Win{rng() % (c - kc + 1), kc, rng() % (h - kr + 1), kr});
    }
    // Each destination block holds one window, at a random place of one
    // tile's run; some blocks straddle two tiles.
    const size_t blocks = 12;
    std::vector<size_t> which(blocks);
    std::vector<uint64_t> at(blocks);
    std::vector<TileInterval> ivs;
    uint64_t pos = 0;
    for (size_t b = 0; b < blocks; ++b) {
      which[b] = rng() % wins.size();
      const uint64_t n = wins[which[b]].kc * wins[which[b]].kr * w, lead = rng() % 3;
      const uint32_t tile = static_cast<uint32_t>(rng() % 8);
      at[b] = pos + lead;
      if (rng() % 4 == 0) {  // split over two tiles
        const uint64_t cut = at[b] + 1 + rng() % n;
        ivs.push_back(TileInterval{pos, cut, tile, 0});
        ivs.push_back(TileInterval{cut, at[b] + n, (tile + 1) % 8, 0});
      } else {
        ivs.push_back(TileInterval{pos, at[b] + n, tile, 0});
      }
      pos = at[b] + n;
    }
    Tensor y = g.add_variable("y", kF32, {pos}, VarKind::kIntermediate, 0);
    g.set_mapping(y.var, ivs);
    const uint32_t fresh = g.add_exchange("fresh"), again = g.add_exchange("again");
    RepeatedCopies rc;
    for (size_t b = 0; b < blocks; ++b) {
      const Win& wn = wins[which[b]];
      View src{x.var, static_cast<int64_t>((wn.c0 * h + wn.r0) * w), {wn.kc, wn.kr, w},
               {static_cast<int64_t>(h * w), static_cast<int64_t>(w), 1}};
      View dst{y.var, static_cast<int64_t>(at[b]), {wn.kc, wn.kr, w},
               {static_cast<int64_t>(wn.kr * w), static_cast<int64_t>(w), 1}};
      copy_view(g, fresh, src, dst);
      rc.copy(g, again, src, dst);
    }
    expect_same_copies(g, fresh, again, trial);
    if (HasFatalFailure()) return;
    repeated += rc.repeated();
  }
  EXPECT_GT(repeated, 0u);  // the repeating path ran
}

// The same on arbitrary views: sources of rank 0-4 with unit dimensions and
// negative, zero and large strides over any layout; destinations in three
// variables (two float32 on either IPU, one float16 the sources cannot be
// copied into), dense with odd strides on unit dimensions, sometimes not
// dense (reversed strides) or straddling intervals. Copies and failures must
// be copy_view's. (Fails if the destination variable is not replaced, if
// the run test ignores strides, or if the element type is not compared.)
TEST(Exchange, RepeatedCopiesMatchCopyViewOnRandomViews) {
  std::mt19937 rng(12345);
  size_t repeated = 0, throws = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Graph g(tiny(8, 2), 2);
    const uint64_t n = 60 + rng() % 200;
    Tensor x = g.add_variable("x", kF32, {n}, VarKind::kInput, rng() % 2);
    lay_out(g, x.var, static_cast<Layout>(rng() % 3), rng);
    std::vector<View> srcs;
    while (srcs.size() < 3) {
      View v{x.var, 0, {}, {}};
      const size_t rank = rng() % 5;
      int64_t lo = 0, hi = 0;
      for (size_t d = 0; d < rank; ++d) {
        const uint64_t len = rng() % 5 == 0 ? 1 : 1 + rng() % 5;
        int64_t st = static_cast<int64_t>(rng() % 9) - 3;
        if (rng() % 3 == 0) st = 1;
        if (rng() % 5 == 0) st = static_cast<int64_t>(rng() % 30) - 10;
        v.shape.push_back(len);
        v.strides.push_back(st);
        (st < 0 ? lo : hi) += st * static_cast<int64_t>(len - 1);
      }
      if (hi - lo >= static_cast<int64_t>(n)) continue;
      v.offset = -lo + static_cast<int64_t>(rng() % (n - static_cast<uint64_t>(hi - lo)));
      srcs.push_back(v);
    }
    std::vector<Tensor> ys;
    for (int k = 0; k < 3; ++k) {
      Tensor y = g.add_variable("y" + std::to_string(k), k == 2 ? kF16 : kF32, {300}, VarKind::kIntermediate, rng() % 2);
      lay_out(g, y.var, rng() % 2 ? Layout::kRandom : Layout::kOneTile, rng);
      ys.push_back(y);
    }
    const uint32_t fresh = g.add_exchange("fresh"), again = g.add_exchange("again");
    RepeatedCopies rc;
    for (int b = 0; b < 30; ++b) {
      const View& src = srcs[rng() % srcs.size()];
      const Tensor& y = ys[rng() % 10 == 0 ? 2 : rng() % 2];
      View dst{y.var, 0, src.shape, std::vector<int64_t>(src.shape.size(), 0)};
      int64_t dense = 1;
      for (size_t d = src.shape.size(); d-- > 0;) {
        dst.strides[d] = src.shape[d] == 1 ? static_cast<int64_t>(rng() % 7) - 3 : dense;
        dense *= static_cast<int64_t>(src.shape[d]);
      }
      if (rng() % 8 == 0 && src.shape.size() >= 2) std::reverse(dst.strides.begin(), dst.strides.end());
      int64_t span = 0, neg = 0;
      for (size_t d = 0; d < src.shape.size(); ++d)
        (dst.strides[d] > 0 ? span : neg) += dst.strides[d] * static_cast<int64_t>(src.shape[d] - 1);
      const int64_t room = 300 - (span - neg);  // <= 0: outside the variable, both calls fail
      dst.offset = -neg + (room > 0 ? static_cast<int64_t>(rng() % static_cast<uint64_t>(room)) : 0);
      bool failed_fresh = false, failed_again = false;
      try {
        copy_view(g, fresh, src, dst);
      } catch (const Error&) {
        failed_fresh = true;
      }
      try {
        rc.copy(g, again, src, dst);
      } catch (const Error&) {
        failed_again = true;
      }
      ASSERT_EQ(failed_fresh, failed_again) << "trial " << trial << ", call " << b;
      throws += failed_fresh;
    }
    expect_same_copies(g, fresh, again, trial);
    if (HasFatalFailure()) return;
    repeated += rc.repeated();
  }
  EXPECT_GT(repeated, 1000u);  // the repeating path ran often
  EXPECT_GT(throws, 0u);       // and so did failing calls
}

// The 32-bit limit on the repeating path: a repeat reaching past tile-local
// element 2^32 is out of memory, as copy_view's copy is; a first call that
// failed leaves the source to copy_view.
TEST(Exchange, RepeatedCopiesKeepTheThirtyTwoBitLimit) {
  Graph g(tiny(2), 1);
  const uint64_t big = (uint64_t{1} << 32) + 16;
  Tensor x = g.add_variable("x", kBool, {8}, VarKind::kIntermediate, 0);
  Tensor y = g.add_variable("y", kBool, {big}, VarKind::kIntermediate, 0);
  g.map_to_tile(x.var, 0);
  g.map_to_tile(y.var, 1);
  const uint32_t ex = g.add_exchange("e");
  RepeatedCopies rc;
  View src{x.var, 0, {2, 2}, {4, 1}};  // two rows: one 2-D copy
  rc.copy(g, ex, src, View{y.var, 0, {2, 2}, {2, 1}});
  rc.copy(g, ex, src, View{y.var, static_cast<int64_t>(UINT32_MAX) - 3, {2, 2}, {2, 1}});
  EXPECT_EQ(rc.repeated(), 1u);
  EXPECT_EQ(g.exchange(ex).copies.back().dst_local, UINT32_MAX - 3);
  EXPECT_NX_ERROR(kOutOfMemory, rc.copy(g, ex, src, View{y.var, static_cast<int64_t>(UINT32_MAX) - 2, {2, 2}, {2, 1}}),
                  "2^32");
  View src2{x.var, 4, {4}, {1}};
  EXPECT_NX_ERROR(kOutOfMemory, rc.copy(g, ex, src2, View{y.var, static_cast<int64_t>(UINT32_MAX) - 1, {4}, {1}}), "2^32");
  const size_t before = g.exchange(ex).copies.size();
  rc.copy(g, ex, src2, View{y.var, 0, {4}, {1}});
  rc.copy(g, ex, src2, View{y.var, 8, {4}, {1}});
  EXPECT_EQ(g.exchange(ex).copies.size(), before + 2);
  EXPECT_EQ(g.exchange(ex).copies.back().dst_local, 8u);
}

// Copy descriptors hold tile-local indices in 32 bits: a view reaching past
// element 2^32 of one tile's share (more than any tile holds) is reported as
// out of memory, not truncated; one just below the limit is copied exactly.
TEST(Exchange, TileLocalIndicesBeyondThirtyTwoBitsAreOutOfMemory) {
  Graph g(tiny(2), 1);
  const uint64_t big = (uint64_t{1} << 32) + 16;
  Tensor x = g.add_variable("x", kBool, {big}, VarKind::kIntermediate, 0);
  Tensor y = g.add_variable("y", kBool, {4}, VarKind::kIntermediate, 0);
  g.map_to_tile(x.var, 0);
  g.map_to_tile(y.var, 1);
  uint32_t ex = g.add_exchange("e");
  View below{x.var, static_cast<int64_t>(UINT32_MAX) - 3, {4}, {1}};
  copy_view(g, ex, below, View::of(y));
  ASSERT_EQ(g.exchange(ex).copies.size(), 1u);
  EXPECT_EQ(g.exchange(ex).copies[0].src_local, UINT32_MAX - 3);
  EXPECT_EQ(g.exchange(ex).copies[0].count, 4u);
  View across{x.var, static_cast<int64_t>(UINT32_MAX) - 2, {4}, {1}};
  EXPECT_NX_ERROR(kOutOfMemory, copy_view(g, ex, across, View::of(y)), "'x'", "tile 0", "2^32");
  // Both elements inside 32 bits, their distance not.
  View strided{x.var, 0, {2}, {static_cast<int64_t>(1) << 31}};
  EXPECT_NX_ERROR(kOutOfMemory, copy_view(g, ex, strided, View{y.var, 0, {2}, {1}}), "'x'");
  EXPECT_EQ(g.exchange(ex).copies.size(), 1u);
}

TEST(Exchange, GatherLikeTakesTheMappingOfItsModel) {
  std::mt19937 rng(6);
  auto g = std::make_unique<Graph>(tiny(4), 1);
  Tensor x = g->add_variable("x", kI32, {4, 6}, VarKind::kInput, 0);
  lay_out(*g, x.var, Layout::kRandom, rng);
  g->add_input_stream("x", x);
  Tensor like = g->add_variable("like", kF32, {6, 4}, VarKind::kIntermediate, 0);
  lay_out(*g, like.var, Layout::kRandom, rng);
  uint32_t ex = g->add_exchange("e");
  View tr{x.var, 0, {6, 4}, {1, 6}};
  Tensor t = gather_like(*g, ex, tr, kI32, like, "gathered");
  EXPECT_EQ(g->var(t.var).kind, VarKind::kTemporary);
  EXPECT_EQ(g->var(t.var).dtype, kI32);
  const auto& ml = g->var(like.var).mapping;
  const auto& mt = g->var(t.var).mapping;
  ASSERT_EQ(ml.size(), mt.size());
  for (size_t i = 0; i < ml.size(); ++i) {
    EXPECT_EQ(ml[i].begin, mt[i].begin);
    EXPECT_EQ(ml[i].tile, mt[i].tile);
  }
  for (const TileShare& s : g->var(like.var).tiles) EXPECT_TRUE(same_layout_on_tile(*g, like.var, t.var, s.tile));
  EXPECT_NX_ERROR(kInternal, gather_like(*g, ex, View{x.var, 0, {5}, {1}}, kI32, like, "bad"), "element count");
  g->execute_exchange(ex);
  g->add_output_stream("t", t);
  std::vector<int32_t> xs(24);
  std::iota(xs.begin(), xs.end(), 0);
  auto out = run_graph(std::move(g), {to_bytes(xs)});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(from_bytes<int32_t>(out[0]), expected(View{0, 0, {6, 4}, {1, 6}}));
}

TEST(Exchange, SameLayoutOnTile) {
  Graph g(tiny(3), 1);
  Tensor a = g.add_variable("a", kF32, {12}, VarKind::kIntermediate, 0);
  Tensor b = g.add_variable("b", kF16, {12}, VarKind::kIntermediate, 0);
  Tensor c = g.add_variable("c", kF32, {12}, VarKind::kIntermediate, 0);
  g.set_mapping(a.var, {{0, 4, 0, 0}, {4, 8, 1, 0}, {8, 12, 0, 0}});
  g.set_mapping(b.var, {{0, 4, 0, 0}, {4, 8, 1, 0}, {8, 12, 0, 0}});
  g.set_mapping(c.var, {{0, 4, 0, 0}, {4, 6, 1, 0}, {6, 8, 2, 0}, {8, 12, 0, 0}});
  EXPECT_TRUE(same_layout_on_tile(g, a.var, b.var, 0));
  EXPECT_TRUE(same_layout_on_tile(g, a.var, b.var, 1));
  EXPECT_TRUE(same_layout_on_tile(g, a.var, c.var, 0));
  EXPECT_FALSE(same_layout_on_tile(g, a.var, c.var, 1));
  EXPECT_FALSE(same_layout_on_tile(g, a.var, c.var, 2));
  EXPECT_TRUE(same_layout_on_tile(g, a.var, a.var, 2));
}

TEST(Exchange, FindLocalBlockHandPickedCases) {
  Graph g(tiny(3), 1);
  Tensor x = g.add_variable("x", kF32, {6, 8}, VarKind::kIntermediate, 0);
  // Rows 0-2 on tile 0, rows 3-5 on tile 1.
  g.set_mapping(x.var, {{0, 24, 0, 0}, {24, 48, 1, 0}});
  LocalBlock lb{};
  ASSERT_TRUE(find_local_block(g, x.var, 0, 0, 3, 8, 8, &lb));
  EXPECT_EQ(lb.local, 0u);
  EXPECT_EQ(lb.ld, 8u);
  ASSERT_TRUE(find_local_block(g, x.var, 0, 10, 2, 4, 8, &lb));
  EXPECT_EQ(lb.local, 10u);
  EXPECT_EQ(lb.ld, 8u);
  ASSERT_TRUE(find_local_block(g, x.var, 1, 3 * 8 + 5, 3, 3, 8, &lb));
  EXPECT_EQ(lb.local, 5u);
  EXPECT_EQ(lb.ld, 8u);
  ASSERT_TRUE(find_local_block(g, x.var, 1, 30, 1, 5, 8, &lb));
  EXPECT_EQ(lb.local, 6u);
  EXPECT_EQ(lb.ld, 5u) << "a single row is packed";
  EXPECT_FALSE(find_local_block(g, x.var, 1, 0, 3, 8, 8, &lb)) << "wrong tile";
  EXPECT_FALSE(find_local_block(g, x.var, 0, 16, 2, 8, 8, &lb)) << "spans two tiles";
  EXPECT_FALSE(find_local_block(g, x.var, 0, 0, 0, 8, 8, &lb));
  EXPECT_FALSE(find_local_block(g, x.var, 0, 0, 2, 0, 8, &lb));
  // Column blocks stored packed: the top-left 2x4 of a [4, 8] on tile 2.
  Tensor y = g.add_variable("y", kF32, {4, 8}, VarKind::kIntermediate, 0);
  g.set_mapping(y.var, {{0, 4, 2, 0}, {4, 8, 0, 0}, {8, 12, 2, 0}, {12, 32, 1, 0}});
  ASSERT_TRUE(find_local_block(g, y.var, 2, 0, 2, 4, 8, &lb));
  EXPECT_EQ(lb.local, 0u);
  EXPECT_EQ(lb.ld, 4u);
  EXPECT_FALSE(find_local_block(g, y.var, 2, 0, 2, 5, 8, &lb));
  Tensor u = g.add_variable("u", kF32, {4}, VarKind::kIntermediate, 0);
  EXPECT_FALSE(find_local_block(g, u.var, 0, 0, 1, 1, 1, &lb)) << "unmapped";
}

// Exhaustive: every block of a randomly mapped matrix, against a direct
// check that each element sits at local + r * ld + c on the tile.
TEST(Exchange, FindLocalBlockExhaustive) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 8; ++trial) {
    Graph g(tiny(3), 1);
    const uint64_t R = 2 + rng() % 4, C = 2 + rng() % 5;
    Tensor x = g.add_variable("x", kF32, {R, C}, VarKind::kIntermediate, 0);
    // Pieces of whole or partial rows, so regular blocks exist.
    std::vector<TileInterval> ivs;
    for (uint64_t pos = 0; pos < R * C;) {
      uint64_t end = std::min(R * C, pos + 1 + rng() % (2 * C));
      ivs.push_back(TileInterval{pos, end, static_cast<uint32_t>(rng() % 2), 0});
      pos = end;
    }
    g.set_mapping(x.var, ivs);
    std::vector<std::pair<uint32_t, uint64_t>> where(R * C);
    for (const auto& iv : g.var(x.var).mapping)
      for (uint64_t f = iv.begin; f < iv.end; ++f) where[f] = {iv.tile, iv.local + f - iv.begin};
    int found = 0;
    for (uint32_t tile = 0; tile < 3; ++tile)
      for (uint64_t r0 = 0; r0 < R; ++r0)
        for (uint64_t c0 = 0; c0 < C; ++c0)
          for (uint64_t rows = 1; r0 + rows <= R; ++rows)
            for (uint64_t cols = 1; c0 + cols <= C; ++cols) {
              const uint64_t start = r0 * C + c0;
              bool ok = true;
              uint64_t ld = cols;
              for (uint64_t r = 0; r < rows && ok; ++r)
                for (uint64_t c = 0; c < cols && ok; ++c) {
                  const auto& w = where[start + r * C + c];
                  if (w.first != tile) ok = false;
                  else if (r == 1 && c == 0) {
                    // Rows must follow each other in memory, not overlap or go back.
                    if (w.second < where[start].second + cols) ok = false;
                    else ld = w.second - where[start].second;
                  }
                }
              for (uint64_t r = 0; r < rows && ok; ++r)
                for (uint64_t c = 0; c < cols && ok; ++c)
                  if (where[start + r * C + c].second != where[start].second + r * ld + c) ok = false;
              LocalBlock lb{};
              const bool got = find_local_block(g, x.var, tile, start, rows, cols, C, &lb);
              ASSERT_EQ(got, ok) << "tile " << tile << " start " << start << " " << rows << "x" << cols;
              if (ok) {
                ++found;
                ASSERT_EQ(lb.local, where[start].second);
                if (rows > 1) {
                  ASSERT_EQ(lb.ld, ld);
                }
              }
            }
    EXPECT_GT(found, 0);
  }
}

TEST(Exchange, CopiesBetweenIpus) {
  std::mt19937 rng(8);
  ViewCase vc{{3, 5}, make_view(0, {5, 3}, {1, 5})};
  size_t ncopies = 0;
  EXPECT_EQ(run_view(vc, Layout::kRandom, Layout::kLinear, 3, rng, &ncopies, 0, 1), expected(vc.view));
  EXPECT_GT(ncopies, 0u);
  EXPECT_EQ(run_view(vc, Layout::kLinear, Layout::kRandom, 3, rng, &ncopies, 1, 0), expected(vc.view));
}

}  // namespace
