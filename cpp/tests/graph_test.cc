// The graph's bookkeeping: variables, tile mappings and their invariants
// (every element on exactly one tile of the variable's IPU, tile-local
// indices in flat order), tile reservation, and program construction.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "neurenix/codelets/map.h"
#include "neurenix/graph.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

// Checks a mapping's invariants independently of how it was made: the
// intervals cover [0, numel) once in order, tiles lie in the IPU, each tile's
// intervals are numbered back to back in flat order, and `tiles` agrees.
void check_mapping(const Graph& g, VarId id) {
  const Variable& v = g.var(id);
  ASSERT_TRUE(v.mapped);
  uint64_t pos = 0;
  std::map<uint32_t, uint64_t> next_local;
  for (const TileInterval& iv : v.mapping) {
    ASSERT_EQ(iv.begin, pos);
    ASSERT_LT(iv.begin, iv.end);
    ASSERT_GE(iv.tile, g.first_tile(v.ipu));
    ASSERT_LT(iv.tile, g.first_tile(v.ipu) + g.tiles_per_ipu());
    ASSERT_EQ(iv.local, next_local[iv.tile]);
    next_local[iv.tile] += iv.end - iv.begin;
    pos = iv.end;
  }
  ASSERT_EQ(pos, v.numel);
  ASSERT_EQ(v.tiles.size(), next_local.size());
  uint32_t prev = 0;
  for (size_t i = 0; i < v.tiles.size(); ++i) {
    const TileShare& s = v.tiles[i];
    if (i) {
      ASSERT_GT(s.tile, prev);
    }
    prev = s.tile;
    ASSERT_EQ(s.count, next_local[s.tile]);
    uint64_t last_begin = 0;
    for (size_t k = 0; k < s.intervals.size(); ++k) {
      const TileInterval& iv = v.mapping.at(s.intervals[k]);
      ASSERT_EQ(iv.tile, s.tile);
      if (k) {
        ASSERT_GT(iv.begin, last_begin);
      }
      last_begin = iv.begin;
    }
    ASSERT_EQ(v.share(s.tile), &s);
    ASSERT_EQ(v.bytes_on(s.tile), s.count * device_type_size(v.dtype));
  }
}

// The (tile, local) of every element, from the intervals alone.
std::vector<std::pair<uint32_t, uint64_t>> reference_locations(const Variable& v) {
  std::vector<std::pair<uint32_t, uint64_t>> out(v.numel);
  for (const TileInterval& iv : v.mapping)
    for (uint64_t f = iv.begin; f < iv.end; ++f) out[f] = {iv.tile, iv.local + (f - iv.begin)};
  return out;
}

TEST(Graph, VariablesAndConstants) {
  Graph g(tiny(4, 2), 2);
  Tensor a = g.add_variable("a", kF16, {2, 3, 4}, VarKind::kInput, 1);
  EXPECT_EQ(a.var, 0u);
  EXPECT_EQ(a.numel(), 24u);
  const Variable& va = g.var(a.var);
  EXPECT_EQ(va.name, "a");
  EXPECT_EQ(va.numel, 24u);
  EXPECT_EQ(va.ipu, 1u);
  EXPECT_EQ(va.kind, VarKind::kInput);
  EXPECT_FALSE(va.mapped);
  Tensor z = g.add_variable("z", kF32, {3, 0}, VarKind::kIntermediate, 0);
  EXPECT_TRUE(g.var(z.var).mapped) << "an empty variable has nothing to place";
  EXPECT_NX_ERROR(kInvalidArgument, g.add_variable("far", kF32, {1}, VarKind::kInput, 2), "'far'", "IPU 2");
  auto data = shared_bytes(std::vector<int32_t>{1, 2, 3});
  Tensor c = g.add_constant("c", kI32, {3}, 0, data);
  EXPECT_EQ(g.var(c.var).kind, VarKind::kConstant);
  // Kept, not copied: the graph holds the vector itself.
  EXPECT_EQ(g.var(c.var).data.owner, data);
  EXPECT_EQ(g.var(c.var).data.data, data->data());
  EXPECT_EQ(g.var(c.var).data.size, 12u);
  EXPECT_NX_ERROR(kInvalidArgument, g.add_constant("bad", kI32, {4}, 0, data), "'bad'", "12", "16");
  EXPECT_NX_ERROR(kInvalidArgument, g.add_constant("null", kI32, {4}, 0, nullptr), "'null'");
  EXPECT_EQ(g.num_vars(), 3u);
  EXPECT_EQ(shape_numel({}), 1u);
  EXPECT_EQ(shape_numel({2, 0, 5}), 0u);
  EXPECT_EQ(shape_str({2, 3}), "[2, 3]");
  EXPECT_EQ(shape_str({}), "[]");
}

TEST(Graph, ViewOfIsRowMajor) {
  Tensor t{3, {2, 3, 4}};
  View v = View::of(t);
  EXPECT_EQ(v.var, 3u);
  EXPECT_EQ(v.offset, 0);
  EXPECT_EQ(v.shape, (Shape{2, 3, 4}));
  EXPECT_EQ(v.strides, (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(v.numel(), 24u);
  EXPECT_TRUE(View::of(Tensor{0, {}}).strides.empty());
}

TEST(Graph, SetMappingAcceptsAnyOrderAndMerges) {
  Graph g(tiny(4), 1);
  Tensor t = g.add_variable("t", kF32, {10}, VarKind::kIntermediate, 0);
  // Out of order, with an empty interval and two touching pieces on tile 2.
  g.set_mapping(t.var, {{6, 10, 1, 0}, {0, 3, 2, 0}, {3, 3, 0, 0}, {3, 6, 2, 0}});
  check_mapping(g, t.var);
  const Variable& v = g.var(t.var);
  ASSERT_EQ(v.mapping.size(), 2u);
  EXPECT_EQ(v.mapping[0].begin, 0u);
  EXPECT_EQ(v.mapping[0].end, 6u);
  EXPECT_EQ(v.mapping[0].tile, 2u);
  EXPECT_EQ(v.share(0), nullptr);
  EXPECT_EQ(v.bytes_on(0), 0u);
  EXPECT_EQ(v.bytes_on(2), 24u);
  // Interleaved pieces on one tile are numbered in flat order.
  Tensor u = g.add_variable("u", kI32, {8}, VarKind::kIntermediate, 0);
  g.set_mapping(u.var, {{4, 6, 3, 0}, {0, 2, 3, 0}, {2, 4, 1, 0}, {6, 8, 1, 0}});
  check_mapping(g, u.var);
  const Variable& vu = g.var(u.var);
  std::vector<uint64_t> local;
  for (const auto& iv : vu.mapping) local.push_back(iv.local);
  EXPECT_EQ(local, (std::vector<uint64_t>{0, 0, 2, 2}));
}

// A tile's share is found whatever the tiles a variable holds: one run of
// consecutive tiles, two (a run wrapping past the last tile), gaps, or
// runs whose first or last share sits where a run's distance points.
TEST(Graph, ShareOfEveryTileMatchesAScan) {
  const std::vector<std::vector<uint32_t>> layouts = {
      {}, {3}, {0, 1, 2, 3}, {4, 5, 6}, {0, 1, 6, 7}, {1, 2, 5, 6, 9}, {0, 4, 5, 6, 7}, {2, 3, 4, 8}, {0, 2, 4, 6, 8}};
  for (const auto& held : layouts) {
    Variable v;
    for (uint32_t t : held) v.tiles.push_back(TileShare{t, t + 1u, {}});
    for (uint32_t tile = 0; tile < 12; ++tile) {
      const auto it = std::find(held.begin(), held.end(), tile);
      const TileShare* expected = it == held.end() ? nullptr : &v.tiles[static_cast<size_t>(it - held.begin())];
      EXPECT_EQ(v.share(tile), expected) << "tile " << tile << " of a variable on " << held.size() << " tiles";
    }
  }
}

TEST(Graph, SetMappingRejectsBadCover) {
  Graph g(tiny(4, 2), 2);
  Tensor t = g.add_variable("t", kF32, {10}, VarKind::kIntermediate, 0);
  EXPECT_NX_ERROR(kInternal, g.set_mapping(t.var, {{0, 6, 0, 0}, {5, 10, 1, 0}}), "'t'", "exactly once");  // overlap
  EXPECT_NX_ERROR(kInternal, g.set_mapping(t.var, {{0, 5, 0, 0}, {0, 5, 1, 0}, {5, 10, 1, 0}}), "'t'");   // duplicate
  EXPECT_NX_ERROR(kInternal, g.set_mapping(t.var, {{0, 4, 0, 0}, {5, 10, 1, 0}}), "'t'");                 // gap
  EXPECT_NX_ERROR(kInternal, g.set_mapping(t.var, {{0, 4, 0, 0}, {4, 9, 1, 0}}), "'t'", "cover");         // short
  EXPECT_NX_ERROR(kInternal, g.set_mapping(t.var, {{0, 4, 0, 0}, {4, 11, 1, 0}}), "'t'");                 // too long
  EXPECT_NX_ERROR(kInternal, g.set_mapping(t.var, {{1, 10, 0, 0}}), "'t'");                               // no start
  EXPECT_NX_ERROR(kInternal, g.set_mapping(t.var, {}), "'t'");
  // Tile 4 belongs to IPU 1; the variable lives on IPU 0.
  EXPECT_NX_ERROR(kInternal, g.set_mapping(t.var, {{0, 10, 4, 0}}), "'t'", "outside its IPU");
  EXPECT_FALSE(g.var(t.var).mapped) << "a rejected mapping must not stick";
  Tensor u = g.add_variable("u", kF32, {3}, VarKind::kIntermediate, 1);
  EXPECT_NX_ERROR(kInternal, g.set_mapping(u.var, {{0, 3, 3, 0}}), "outside its IPU");
  EXPECT_NO_THROW(g.set_mapping(u.var, {{0, 3, 7, 0}}));
  check_mapping(g, u.var);
}

TEST(Graph, MapLinearlyCoversEveryElementOnceWithinTheIpu) {
  for (uint32_t tiles : {1u, 3u, 4u, 7u, 16u}) {
    for (DeviceType dt : {kF32, kF16, kBool}) {
      for (uint64_t n : {1ull, 2ull, 7ull, 8ull, 9ull, 31ull, 100ull, 1000ull, 4099ull}) {
        for (uint64_t grain : {0ull, 1ull, 5ull, 64ull}) {
          SCOPED_TRACE(testing::Message() << tiles << " tiles, " << device_type_name(dt) << ", n=" << n << ", grain=" << grain);
          Graph g(tiny(tiles, 2), 2);
          Tensor t = g.add_variable("t", dt, {n}, VarKind::kIntermediate, 1);
          g.map_linearly(t.var, grain);
          check_mapping(g, t.var);
          const Variable& v = g.var(t.var);
          std::vector<int> hits(n, 0);
          size_t hint = 0;
          for (uint64_t f = 0; f < n; ++f) {
            uint32_t tile;
            uint64_t local;
            g.locate(t.var, f, &tile, &local, &hint);
            ASSERT_EQ(g.ipu_of_tile(tile), 1u);
            hits[f]++;
          }
          for (int h : hits) ASSERT_EQ(h, 1);
          const uint64_t eff = grain ? grain : std::max<uint64_t>(1, 32 / device_type_size(dt));
          // Contiguous chunks, one per tile, each a multiple of the grain but
          // the last; no more tiles than the IPU has, balanced to one grain.
          ASSERT_LE(v.tiles.size(), tiles);
          ASSERT_EQ(v.mapping.size(), v.tiles.size());
          const uint64_t chunks = (n + eff - 1) / eff;
          const uint64_t want_tiles = std::min<uint64_t>(tiles, chunks);
          const uint64_t per = (chunks + want_tiles - 1) / want_tiles * eff;
          for (size_t i = 0; i < v.mapping.size(); ++i) {
            const uint64_t len = v.mapping[i].end - v.mapping[i].begin;
            if (i + 1 < v.mapping.size()) {
              ASSERT_EQ(len, per);
            } else {
              ASSERT_LE(len, per);
            }
          }
        }
      }
    }
  }
}

TEST(Graph, MapLinearlyRotatesSoSmallTensorsSpread) {
  Graph g(tiny(4), 1);
  std::vector<uint32_t> first;
  for (int i = 0; i < 6; ++i) {
    Tensor t = g.add_variable("s", kF32, {3}, VarKind::kIntermediate, 0);
    g.map_linearly(t.var);
    ASSERT_EQ(g.var(t.var).tiles.size(), 1u);
    first.push_back(g.var(t.var).tiles[0].tile);
  }
  EXPECT_EQ(first, (std::vector<uint32_t>{0, 1, 2, 3, 0, 1}));
  // A tensor spanning three tiles starting at tile 2 wraps to tiles 2, 3, 0.
  Tensor w = g.add_variable("w", kF32, {24}, VarKind::kIntermediate, 0);
  g.map_linearly(w.var, 8);
  std::vector<uint32_t> order;
  for (const auto& iv : g.var(w.var).mapping) order.push_back(iv.tile);
  EXPECT_EQ(order, (std::vector<uint32_t>{2, 3, 0}));
  check_mapping(g, w.var);
}

TEST(Graph, ReserveTilesWrapsAroundPerIpu) {
  Graph g(tiny(4, 2), 2);
  EXPECT_EQ(g.reserve_tiles(0, 3), 0u);
  EXPECT_EQ(g.reserve_tiles(0, 3), 3u);
  EXPECT_EQ(g.reserve_tiles(0, 2), 2u);  // 6 mod 4
  EXPECT_EQ(g.reserve_tiles(0, 4), 0u);
  EXPECT_EQ(g.reserve_tiles(0, 9), 0u);
  EXPECT_EQ(g.reserve_tiles(0, 0), 1u);
  EXPECT_EQ(g.reserve_tiles(1, 1), 0u) << "each IPU rotates on its own";
  EXPECT_EQ(g.reserve_tiles(1, 1), 1u);
  EXPECT_EQ(g.window_tile(0, 3, 0), 3u);
  EXPECT_EQ(g.window_tile(0, 3, 2), 1u);
  EXPECT_EQ(g.window_tile(1, 3, 2), 5u);
  EXPECT_EQ(g.window_tile(1, 0, 7), 7u);
  EXPECT_NX_ERROR(kInternal, g.reserve_tiles(2, 1), "missing IPU");
}

TEST(Graph, LocateFindsEveryElementInAnyOrder) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 30; ++trial) {
    Graph g(tiny(5, 2), 2);
    const uint64_t n = 1 + rng() % (trial < 15 ? 200 : 3000);
    const uint32_t ipu = rng() % 2;
    Tensor t = g.add_variable("t", kF32, {n}, VarKind::kIntermediate, ipu);
    // Random cut points (in later trials, a few long intervals among short
    // ones, so the lookup's buckets hold many intervals or lie inside one),
    // random tiles.
    std::vector<TileInterval> ivs;
    uint64_t pos = 0;
    while (pos < n) {
      uint64_t len = trial >= 15 && rng() % 10 == 0 ? 1 + rng() % 700 : 1 + rng() % 17;
      uint64_t end = std::min(n, pos + len);
      ivs.push_back(TileInterval{pos, end, g.first_tile(ipu) + static_cast<uint32_t>(rng() % 5), 0});
      pos = end;
    }
    std::shuffle(ivs.begin(), ivs.end(), rng);
    g.set_mapping(t.var, ivs);
    check_mapping(g, t.var);
    const auto ref = reference_locations(g.var(t.var));
    std::vector<uint64_t> order(n);
    for (uint64_t i = 0; i < n; ++i) order[i] = i;
    for (int pass = 0; pass < 3; ++pass) {
      if (pass == 1) std::reverse(order.begin(), order.end());
      if (pass == 2) std::shuffle(order.begin(), order.end(), rng);
      size_t hint = pass == 2 ? 12345 : 0;  // a stale hint is harmless
      for (uint64_t f : order) {
        uint32_t tile;
        uint64_t local;
        g.locate(t.var, f, &tile, &local, &hint);
        ASSERT_EQ(tile, ref[f].first) << f;
        ASSERT_EQ(local, ref[f].second) << f;
      }
    }
    // Tile-local indices are a bijection onto [0, count) per tile.
    std::map<uint32_t, std::set<uint64_t>> seen;
    for (const auto& [tile, local] : ref) ASSERT_TRUE(seen[tile].insert(local).second);
    for (const auto& [tile, locals] : seen) {
      ASSERT_EQ(locals.size(), g.var(t.var).share(tile)->count);
      ASSERT_EQ(*locals.rbegin(), locals.size() - 1);
    }
    uint32_t tile;
    uint64_t local;
    size_t hint = 0;
    EXPECT_NX_ERROR(kInternal, g.locate(t.var, n, &tile, &local, &hint), "outside the mapping");
  }
}

TEST(Graph, CloneMappingWithinAndAcrossIpus) {
  Graph g(tiny(4, 2), 2);
  Tensor a = g.add_variable("a", kF32, {2, 5}, VarKind::kIntermediate, 0);
  g.set_mapping(a.var, {{0, 3, 2, 0}, {3, 7, 0, 0}, {7, 10, 2, 0}});
  Tensor b = g.add_variable("b", kF16, {10}, VarKind::kIntermediate, 0);
  g.clone_mapping(b.var, a.var);
  check_mapping(g, b.var);
  Tensor c = g.add_variable("c", kI32, {5, 2}, VarKind::kIntermediate, 1);
  g.clone_mapping(c.var, a.var);
  check_mapping(g, c.var);
  const auto& ma = g.var(a.var).mapping;
  const auto& mb = g.var(b.var).mapping;
  const auto& mc = g.var(c.var).mapping;
  ASSERT_EQ(ma.size(), mc.size());
  for (size_t i = 0; i < ma.size(); ++i) {
    EXPECT_EQ(mb[i].tile, ma[i].tile);
    EXPECT_EQ(mc[i].tile, ma[i].tile + 4);
    EXPECT_EQ(mc[i].begin, ma[i].begin);
    EXPECT_EQ(mc[i].local, ma[i].local);
  }
  Tensor wrong = g.add_variable("wrong", kF32, {11}, VarKind::kIntermediate, 0);
  EXPECT_NX_ERROR(kInternal, g.clone_mapping(wrong.var, a.var), "different sizes");
  Tensor unmapped = g.add_variable("unmapped", kF32, {10}, VarKind::kIntermediate, 0);
  EXPECT_NX_ERROR(kInternal, g.clone_mapping(b.var, unmapped.var), "unmapped");
  g.map_to_tile(unmapped.var, 3);
  check_mapping(g, unmapped.var);
  EXPECT_EQ(g.var(unmapped.var).tiles.size(), 1u);
  EXPECT_EQ(g.var(unmapped.var).tiles[0].tile, 3u);
  // ensure_mapped leaves an existing mapping alone.
  g.ensure_mapped(unmapped.var);
  EXPECT_EQ(g.var(unmapped.var).tiles[0].tile, 3u);
}

TEST(Graph, VerticesMayOnlyNameTheirOwnTilesMemory) {
  Graph g(tiny(4), 1);
  Tensor t = g.add_variable("t", kF32, {8}, VarKind::kIntermediate, 0);
  g.set_mapping(t.var, {{0, 5, 1, 0}, {5, 8, 2, 0}});
  uint32_t cs = g.add_compute_set("cs");
  EXPECT_NO_THROW(g.add_vertex(cs, std::make_unique<FillVertex>(1, Field{t.var, 1, 0, 5}, kF32, 1.0)));
  EXPECT_NO_THROW(g.add_vertex(cs, std::make_unique<FillVertex>(2, Field{t.var, 2, 1, 2}, kF32, 1.0)));
  // Past the end of the tile's block.
  EXPECT_NX_ERROR(kInternal, g.add_vertex(cs, std::make_unique<FillVertex>(2, Field{t.var, 2, 1, 3}, kF32, 1.0)),
                  "outside 't'");
  // On a tile that holds none of the variable.
  EXPECT_NX_ERROR(kInternal, g.add_vertex(cs, std::make_unique<FillVertex>(0, Field{t.var, 0, 0, 1}, kF32, 1.0)),
                  "outside 't'");
  // A vertex on tile 3 naming tile 1's memory.
  EXPECT_NX_ERROR(kInternal, g.add_vertex(cs, std::make_unique<FillVertex>(3, Field{t.var, 1, 0, 1}, kF32, 1.0)),
                  "another tile");
  EXPECT_EQ(g.compute_sets()[cs].vertices.size(), 2u);
}

TEST(Graph, ProgramSkipsEmptyStepsAndPutsInputsFirst) {
  Graph g(tiny(2), 1);
  Tensor x = g.add_variable("x", kF32, {4}, VarKind::kInput, 0);
  Tensor y = g.add_variable("y", kF32, {4}, VarKind::kIntermediate, 0);
  g.map_to_tile(x.var, 0);
  g.map_to_tile(y.var, 0);
  uint32_t empty_cs = g.add_compute_set("empty");
  uint32_t empty_ex = g.add_exchange("empty");
  g.execute(empty_cs);
  g.execute_exchange(empty_ex);
  EXPECT_TRUE(g.program().empty());
  uint32_t cs = g.add_compute_set("fill");
  g.add_vertex(cs, std::make_unique<FillVertex>(0, Field{y.var, 0, 0, 4}, kF32, 2.0));
  g.execute(cs);
  uint32_t ex = g.add_exchange("copy");
  g.exchange(ex).copies.push_back(Copy{x.var, 0, 0, 1, y.var, 0, 0, 4});
  g.execute_exchange(ex);
  // Input streams come first, in the order they were added, whenever added.
  EXPECT_EQ(g.add_input_stream("x", x), 0u);
  Tensor x2 = g.add_variable("x2", kF32, {1}, VarKind::kInput, 0);
  EXPECT_EQ(g.add_input_stream("x2", x2), 1u);
  ASSERT_EQ(g.program().size(), 4u);
  EXPECT_EQ(g.program()[0].kind, StepKind::kHostToDevice);
  EXPECT_EQ(g.program()[0].index, 0u);
  EXPECT_EQ(g.program()[1].kind, StepKind::kHostToDevice);
  EXPECT_EQ(g.program()[1].index, 1u);
  EXPECT_EQ(g.program()[2].kind, StepKind::kCompute);
  EXPECT_EQ(g.program()[3].kind, StepKind::kExchange);
  EXPECT_NX_ERROR(kInternal, g.add_input_stream("y", y), "non-input");
  EXPECT_EQ(g.add_output_stream("y", y), 0u);
  EXPECT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.program().size(), 4u) << "output streams are appended by the compiler, not here";
  g.warn("careful");
  EXPECT_EQ(g.warnings(), (std::vector<std::string>{"careful"}));
}

// A field in pieces (each at its own address) is visited run by run, in
// order, for any range of its elements; so is one not in pieces.
TEST(Graph, FieldRunsCoverAnyRangeOfAFieldInPieces) {
  // Element i of the field has value i; the pieces lie out of order in `mem`.
  constexpr uint64_t n = 23;
  std::vector<float> mem(200, -1.0f);
  const std::vector<std::pair<uint64_t, uint64_t>> cuts = {{0, 120}, {5, 10}, {6, 60}, {15, 150}};  // (begin, slot)
  Field f{0, 0, 0, n};
  f.address = 180 * 4;  // its own bytes (only used when not in pieces)
  std::vector<Field::Piece> pieces;
  for (size_t k = 0; k < cuts.size(); ++k) {
    const uint64_t b = cuts[k].first, e = k + 1 < cuts.size() ? cuts[k + 1].first : n;
    for (uint64_t i = b; i < e; ++i) mem[cuts[k].second + (i - b)] = static_cast<float>(i);
    pieces.push_back(Field::Piece{b, static_cast<int64_t>(cuts[k].second * 4), static_cast<uint32_t>(k), 0});
  }
  f.pieces = std::move(pieces);
  const auto* base = reinterpret_cast<const uint8_t*>(mem.data());
  for (uint64_t first = 0; first <= n; ++first)
    for (uint64_t len = 0; first + len <= n; ++len) {
      std::vector<float> got;
      uint64_t expect_at = 0;
      for_each_field_run(base, f, first, len, 4, [&](const uint8_t* run, uint64_t at, uint64_t count) {
        ASSERT_EQ(at, expect_at);
        ASSERT_GT(count, 0u);
        const float* r = reinterpret_cast<const float*>(run);
        got.insert(got.end(), r, r + count);
        expect_at += count;
      });
      ASSERT_EQ(got.size(), len) << first << "+" << len;
      for (uint64_t i = 0; i < len; ++i) ASSERT_EQ(got[i], static_cast<float>(first + i)) << first << "+" << len;
      std::vector<float> loaded(len);
      load_field_floats(base, f, DeviceType::kFloat32, first, len, loaded.data());
      EXPECT_EQ(loaded, got);
    }
  // Not in pieces: one run at the field's address.
  Field whole{0, 0, 0, 5};
  whole.address = 40;
  int calls = 0;
  for_each_field_run(base, whole, 2, 3, 4, [&](const uint8_t* run, uint64_t at, uint64_t count) {
    ++calls;
    EXPECT_EQ(run, base + 40 + 8);
    EXPECT_EQ(at, 0u);
    EXPECT_EQ(count, 3u);
  });
  EXPECT_EQ(calls, 1);
}

}  // namespace

// A FieldRef holds what its codelet reads (address, count, pieces) as they
// were when it was made or last refreshed; its whole field lies apart, is
// its own per copy, and survives moves. Many of them (more than one of the
// store's chunks) come and go without loss (ASan checks the store).
TEST(Graph, AFieldRefHoldsWhatItsFieldHadWhenRefreshed) {
  Field f{3, 0, 4, 10};
  f.address = 64;
  FieldRef r(f);
  EXPECT_EQ(r.address, 64);
  EXPECT_EQ(r.count, 10u);
  EXPECT_TRUE(r.pieces.empty());
  EXPECT_EQ(r.field().var, 3u);
  EXPECT_EQ(r.field().local, 4u);
  r.field().address = 128;
  r.field().pieces = std::vector<Field::Piece>{{0, 128, UINT32_MAX, 0}, {5, 512, 1, 7}};
  EXPECT_EQ(r.address, 64) << "not seen before refresh";
  EXPECT_FALSE(r.current());
  r.refresh();
  EXPECT_TRUE(r.current());
  EXPECT_EQ(r.address, 128);
  ASSERT_EQ(r.pieces.size(), 2u);
  EXPECT_EQ(r.pieces[1].address, 512);
  EXPECT_EQ(r.pieces.begin(), r.field().pieces.begin()) << "a view of the field's own pieces";

  FieldRef c(r);  // a field of its own
  EXPECT_NE(&c.field(), &r.field());
  c.field().address = 1;
  EXPECT_EQ(r.field().address, 128);
  Field* whole = &r.field();
  FieldRef m(std::move(r));
  EXPECT_EQ(&m.field(), whole);
  EXPECT_EQ(m.address, 128);

  std::vector<FieldRef> many;
  for (uint32_t i = 0; i < 10000; ++i) many.emplace_back(Field{i, 0, 0, i});
  for (uint32_t i = 0; i < 10000; i += 997) EXPECT_EQ(many[i].field().var, i);
  many.erase(many.begin(), many.begin() + 5000);
  EXPECT_EQ(many.front().count, 5000u);
  EXPECT_EQ(many.front().field().var, 5000u);
}
