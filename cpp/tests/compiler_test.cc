// Graph compilation: liveness-based allocation, out-of-memory diagnosis,
// address resolution and step costs. Allocation invariants are checked
// against live ranges re-derived here from the compiled program.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "expr_util.h"
#include "neurenix/codelets/map.h"
#include "neurenix/exchange.h"
#include "neurenix/ops/map.h"
#include "neurenix/ops/matmul.h"
#include "neurenix/ops/rearrange.h"
#include "neurenix/ops/reduce.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

// Every block lies inside its tile's arena, and blocks of variables that
// are live at the same time never overlap.
void check_allocation(const Executable& exe) {
  const Graph& g = exe.graph();
  const auto live = live_ranges(exe);
  struct Block {
    VarId var;
    uint64_t begin, end;
  };
  std::map<uint32_t, std::vector<Block>> by_tile;
  for (size_t v = 0; v < g.num_vars(); ++v) {
    const Variable& var = g.var(static_cast<VarId>(v));
    if (live[v].first < 0) continue;
    for (size_t si = 0; si < var.tiles.size(); ++si) {
      const uint64_t off = exe.var_offset(static_cast<VarId>(v), si);
      const uint64_t len = var.tiles[si].count * device_type_size(var.dtype);
      EXPECT_EQ(off % 8, 0u) << var.name << ": blocks are 8-byte aligned";
      EXPECT_LE(off + len, exe.arena_bytes()[var.tiles[si].tile]) << var.name << " past the arena";
      by_tile[var.tiles[si].tile].push_back({static_cast<VarId>(v), off, off + len});
    }
  }
  for (const auto& [tile, blocks] : by_tile)
    for (size_t i = 0; i < blocks.size(); ++i)
      for (size_t j = i + 1; j < blocks.size(); ++j) {
        const Block& a = blocks[i];
        const Block& b = blocks[j];
        if (!live[a.var].overlaps(live[b.var])) continue;
        const bool disjoint = a.end <= b.begin || b.end <= a.begin || a.begin == a.end || b.begin == b.end;
        EXPECT_TRUE(disjoint) << "tile " << tile << ": '" << g.var(a.var).name << "' [" << a.begin << "," << a.end
                              << ") and '" << g.var(b.var).name << "' [" << b.begin << "," << b.end
                              << ") are live together";
      }
}

// Every field and copy names bytes inside its variable's block on its tile.
void check_addresses(const Executable& exe) {
  const Graph& g = exe.graph();
  auto block = [&](VarId v, uint32_t tile, uint64_t* begin, uint64_t* end) {
    const Variable& var = g.var(v);
    const TileShare* s = var.share(tile);
    ASSERT_NE(s, nullptr);
    *begin = exe.var_offset(v, static_cast<size_t>(s - var.tiles.data()));
    *end = *begin + s->count * device_type_size(var.dtype);
  };
  for (const ComputeSet& cs : g.compute_sets())
    for (const auto& v : cs.vertices)
      for (Field* f : const_cast<Vertex&>(*v).all_fields()) {
        if (f->count == 0) continue;
        uint64_t b = 0, e = 0;
        block(f->var, f->tile, &b, &e);
        const uint64_t es = device_type_size(g.var(f->var).dtype);
        EXPECT_EQ(f->byte_offset, b + f->local * es) << cs.name;
        EXPECT_LE(f->byte_offset + f->count * es, e) << cs.name;
        EXPECT_LE(e, exe.arena_bytes()[f->tile]);
      }
  // Where a variable's share on a tile is in the host block.
  auto host = [&](VarId v, uint32_t tile) {
    const Variable& var = g.var(v);
    return exe.host_offset(v, static_cast<size_t>(var.share(tile) - var.tiles.data()));
  };
  // The copies into shadow regions (their destinations are bytes in the tile).
  std::vector<std::set<size_t>> to_region(g.exchanges().size());
  for (size_t s = 0; s < exe.program().size(); ++s)
    if (exe.shadowed(s))
      for (const auto& ft : exe.fused(s))
        for (uint32_t k = ft.begin; k < ft.shadow_end; ++k) to_region[exe.program()[s].index].insert(k);
  for (size_t ei = 0; ei < g.exchanges().size(); ++ei) {
    const Exchange& ex = g.exchanges()[ei];
    // The byte copies the engine performs (those not aliased away) start
    // at their copies' first elements, where the host block holds them.
    ASSERT_EQ(exe.byte_copies()[ei].size(), exe.copy_order()[ei].size());
    for (size_t k = 0; k < exe.byte_copies()[ei].size(); ++k) {
      const Copy& c = ex.copies.at(exe.copy_order()[ei][k]);
      const Executable::ByteCopy& bc = exe.byte_copies()[ei][k];
      const uint64_t es = device_type_size(g.var(c.src).dtype);
      uint64_t sb = 0, se = 0, db = 0, de = 0;
      block(c.src, c.src_tile, &sb, &se);
      block(c.dst, c.dst_tile, &db, &de);
      EXPECT_EQ(bc.src_tile, c.src_tile);
      EXPECT_EQ(exe.arena_offset(c.src_tile) + bc.src_byte, host(c.src, c.src_tile) + c.src_local * es);
      if (to_region[ei].count(k))
        EXPECT_EQ(bc.dst_byte, db + c.dst_local * es);
      else
        EXPECT_EQ(exe.arena_offset(c.dst_tile) + bc.dst_byte, host(c.dst, c.dst_tile) + c.dst_local * es);
    }
    for (const Copy& c : ex.copies) {
      const uint64_t es = device_type_size(g.var(c.src).dtype);
      uint64_t sb = 0, se = 0, db = 0, de = 0;
      block(c.src, c.src_tile, &sb, &se);
      block(c.dst, c.dst_tile, &db, &de);
      for (const auto& [sl, dl] : copy_pairs(c)) {
        const int64_t sbyte = static_cast<int64_t>(sb) + sl * static_cast<int64_t>(es);
        const int64_t dbyte = static_cast<int64_t>(db) + dl * static_cast<int64_t>(es);
        ASSERT_GE(sbyte, static_cast<int64_t>(sb)) << ex.name;
        ASSERT_LE(sbyte + static_cast<int64_t>(es), static_cast<int64_t>(se)) << ex.name;
        ASSERT_GE(dbyte, static_cast<int64_t>(db)) << ex.name;
        ASSERT_LE(dbyte + static_cast<int64_t>(es), static_cast<int64_t>(de)) << ex.name;
      }
    }
  }
}

std::unique_ptr<Graph> chain_graph(uint32_t tiles, uint64_t n) {
  auto g = std::make_unique<Graph>(tiny(tiles), 1);
  Tensor x = g->add_variable("x", kF32, {n}, VarKind::kInput, 0);
  g->add_input_stream("x", x);
  Tensor a = ops::map(*g, {in(0), cf(1), op(E::kAdd)}, {x}, kF32, {n}, 0, "a");
  Tensor b = ops::map(*g, {in(0), cf(2), op(E::kMul)}, {a}, kF32, {n}, 0, "b");
  Tensor c = ops::map(*g, {in(0), cf(3), op(E::kSub)}, {b}, kF32, {n}, 0, "c");
  g->add_output_stream("c", c);
  return g;
}

TEST(Compiler, DisjointLifetimesShareMemory) {
  const uint64_t n = 1000;
  std::shared_ptr<Executable> exe = compile(chain_graph(1, n));
  ASSERT_TRUE(exe->fits());
  // x, a, b, c: only two are ever live at once.
  const uint64_t block = n * 4;
  EXPECT_EQ(exe->arena_bytes()[0], 2 * block);
  EXPECT_LT(exe->arena_bytes()[0], 4 * block);
  check_allocation(*exe);
  check_addresses(*exe);
  check_host_layout(*exe);
  Engine e(exe, 1);
  std::vector<float> xs(n);
  for (uint64_t i = 0; i < n; ++i) xs[i] = static_cast<float>(i) - 500;
  e.write_input(0, reinterpret_cast<const uint8_t*>(xs.data()), n * 4);
  e.run();
  std::vector<float> out(n);
  e.read_output(0, reinterpret_cast<uint8_t*>(out.data()), n * 4);
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], (xs[i] + 1) * 2 - 3);
}

TEST(Compiler, AHostBlockPastFourGiBKeepsEachTileWhole) {
  // Five full IPUs whose variables all live at once: 4.4 GB laid out by
  // variable would pass the copies' 32-bit offsets, so each tile's memory
  // stays whole, at its arena offset (tile-major).
  const uint32_t ipus = 5, tiles = 1472;
  const uint64_t per_tile = 150000;
  auto g = std::make_unique<Graph>(tiny(tiles, ipus), ipus);
  for (uint32_t ipu = 0; ipu < ipus; ++ipu) {
    Tensor x = g->add_variable("x" + std::to_string(ipu), kF32, {tiles * per_tile}, VarKind::kInput, ipu);
    g->map_linearly(x.var);
    g->add_input_stream("x" + std::to_string(ipu), x);
    g->add_output_stream("y" + std::to_string(ipu), x);
  }
  std::shared_ptr<Executable> exe = compile(std::move(g));
  ASSERT_TRUE(exe->fits());
  EXPECT_FALSE(exe->by_variable());
  uint64_t at = 0;
  for (uint32_t t = 0; t < ipus * tiles; ++t) {
    EXPECT_EQ(exe->arena_offset(t), at);
    at += exe->arena_bytes()[t];
  }
  EXPECT_GT(at, uint64_t{1} << 32);
  EXPECT_EQ(exe->variables_end(), at);
  EXPECT_EQ(exe->block_bytes(), at);
  const Graph& cg = exe->graph();
  for (size_t v = 0; v < cg.num_vars(); ++v)
    for (size_t si = 0; si < cg.var(static_cast<VarId>(v)).tiles.size(); ++si)
      ASSERT_EQ(exe->host_offset(static_cast<VarId>(v), si),
                exe->arena_offset(cg.var(static_cast<VarId>(v)).tiles[si].tile) + exe->var_offset(static_cast<VarId>(v), si));
  EXPECT_NO_THROW(verify_memory_bounds(*exe));
}

TEST(Compiler, TemporariesWithDisjointLifetimesReuseOneBlock) {
  auto g = std::make_unique<Graph>(tiny(1), 1);
  const uint64_t n = 64;
  Tensor t1 = g->add_variable("t1", kF32, {n}, VarKind::kTemporary, 0);
  Tensor t2 = g->add_variable("t2", kF32, {n}, VarKind::kTemporary, 0);
  Tensor o1 = g->add_variable("o1", kF32, {n}, VarKind::kIntermediate, 0);
  Tensor o2 = g->add_variable("o2", kF32, {n}, VarKind::kIntermediate, 0);
  for (const Tensor& t : {t1, t2, o1, o2}) g->map_to_tile(t.var, 0);
  auto fill = [&](const Tensor& t, double v) {
    uint32_t cs = g->add_compute_set("fill");
    g->add_vertex(cs, std::make_unique<FillVertex>(0, Field{t.var, 0, 0, n}, kF32, v));
    g->execute(cs);
  };
  auto neg = [&](const Tensor& src, const Tensor& dst) {
    uint32_t cs = g->add_compute_set("neg");
    auto expr = std::make_shared<const std::vector<ExprInstr>>(std::vector<ExprInstr>{in(0), op(E::kNeg)});
    g->add_vertex(cs, std::make_unique<MapVertex>(0, expr, std::vector<MapVertex::Operand>{{Field{src.var, 0, 0, n}, kF32, false}},
                                                  Field{dst.var, 0, 0, n}, kF32));
    g->execute(cs);
  };
  fill(t1, 1.5);
  neg(t1, o1);
  fill(t2, -2.5);
  neg(t2, o2);
  g->add_output_stream("o1", o1);
  g->add_output_stream("o2", o2);
  std::shared_ptr<Executable> exe;
  auto out = run_graph(std::move(g), {}, 1, &exe);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(from_bytes<float>(out[0]), std::vector<float>(n, -1.5f));
  EXPECT_EQ(from_bytes<float>(out[1]), std::vector<float>(n, 2.5f));
  EXPECT_EQ(exe->var_offset(t1.var, 0), exe->var_offset(t2.var, 0)) << "t2 should take t1's freed block";
  EXPECT_EQ(exe->arena_bytes()[0], 3 * n * 4) << "arena smaller than the sum of the four blocks";
  check_allocation(*exe);
}

TEST(Compiler, AllocationInvariantsOnRealGraphs) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 12; ++trial) {
    const uint32_t tiles = 1 + rng() % 6;
    auto g = std::make_unique<Graph>(tiny(tiles, 2), 2);
    const uint64_t M = 1 + rng() % 9, K = 1 + rng() % 40, N = 1 + rng() % 9;
    Tensor x = g->add_variable("x", kF32, {1, M, K}, VarKind::kInput, 0);
    g->add_input_stream("x", x);
    std::vector<float> wv(K * N, 0.5f);
    Tensor w = g->add_constant("w", kF32, {1, K, N}, 0, shared_bytes(wv));
    ops::MatMulOptions o;
    o.memory_proportion = trial % 2 ? 0.001 : 0.6;
    Tensor y = ops::matmul(*g, x, w, o);
    Tensor r = ops::map(*g, {in(0), op(E::kRelu)}, {y}, kF32, y.shape, 0, "relu");
    Tensor s = ops::reduce(*g, r, {2}, ReduceOp::kSum, ReduceFinal::kNone, 1, kF32, 0, "sum");
    Tensor t = ops::rearrange(*g, View{r.var, 0, {N, M}, {1, static_cast<int64_t>(N)}}, 0, "t");
    Tensor c = ops::concat(*g, {t, t}, 0, 0, "cat");
    Tensor moved = ops::copy_to_ipu(*g, c, 1, "moved");
    g->add_output_stream("s", s);
    g->add_output_stream("moved", moved);
    std::shared_ptr<Executable> exe = compile(std::move(g));
    ASSERT_TRUE(exe->fits());
    check_allocation(*exe);
    check_addresses(*exe);
    check_host_layout(*exe);
    // The schedules hold every vertex and copy once, grouped by tile.
    const Graph& cg = exe->graph();
    for (size_t ci = 0; ci < cg.compute_sets().size(); ++ci) {
      size_t count = 0;
      std::set<uint32_t> seen;
      for (const auto& tv : exe->compute_schedule()[ci]) {
        EXPECT_TRUE(seen.insert(tv.tile).second);
        for (const Vertex* v : tv.vertices) EXPECT_EQ(v->tile, tv.tile);
        count += tv.vertices.size();
      }
      EXPECT_EQ(count, cg.compute_sets()[ci].vertices.size());
    }
    for (size_t ei = 0; ei < cg.exchanges().size(); ++ei) {
      size_t count = 0;
      std::set<uint32_t> tiles, resolved;
      for (const auto& tb : exe->byte_schedule()[ei]) {
        EXPECT_TRUE(tiles.insert(tb.dst_tile).second);
        for (uint32_t k = tb.begin; k < tb.end; ++k) {
          const Copy& c = cg.exchanges()[ei].copies.at(exe->copy_order()[ei][k]);
          EXPECT_EQ(c.dst_tile, tb.dst_tile);
          EXPECT_EQ(exe->byte_copies()[ei][k].src_tile, c.src_tile);
          EXPECT_TRUE(resolved.insert(exe->copy_order()[ei][k]).second);
        }
        count += tb.end - tb.begin;
      }
      // The rest are receive aliases the host skips.
      for (uint32_t k : exe->aliased_copies()[ei]) EXPECT_TRUE(resolved.insert(k).second);
      EXPECT_EQ(count + exe->aliased_copies()[ei].size(), cg.exchanges()[ei].copies.size());
    }
  }
}

TEST(Compiler, OutOfMemoryNamesTheTileAndTheLargestConsumers) {
  auto g = std::make_unique<Graph>(tiny(4, 2, 4096), 2);
  Tensor x = g->add_variable("big_input", kF32, {2000}, VarKind::kInput, 1);
  g->map_to_tile(x.var, g->first_tile(1) + 2);
  g->add_input_stream("x", x);
  Tensor y = ops::map(*g, {in(0), op(E::kNeg)}, {x}, kF32, {2000}, 1, "negated");
  Tensor z = g->add_variable("small", kF32, {10}, VarKind::kInput, 0);
  g->map_to_tile(z.var, 0);
  g->add_input_stream("z", z);
  g->add_output_stream("y", y);
  g->add_output_stream("z", z);
  std::shared_ptr<Executable> exe = compile(std::move(g));
  EXPECT_FALSE(exe->fits());
  ASSERT_EQ(exe->overflows().size(), 1u);
  const TileOverflow& o = exe->overflows()[0];
  EXPECT_EQ(o.ipu, 1u);
  EXPECT_EQ(o.tile, 2u) << "the tile index within its IPU";
  EXPECT_EQ(o.capacity, 4096u);
  EXPECT_GT(o.used, o.capacity);
  EXPECT_GE(o.used, 2 * 8000u);
  ASSERT_GE(o.largest.size(), 2u);
  std::set<std::string> names;
  for (size_t i = 0; i < o.largest.size(); ++i) {
    names.insert(o.largest[i].name);
    if (i) {
      EXPECT_GE(o.largest[i - 1].bytes, o.largest[i].bytes) << "largest first";
    }
  }
  EXPECT_TRUE(names.count("big_input"));
  EXPECT_TRUE(names.count("negated"));
  EXPECT_EQ(o.largest[0].bytes, 8000u);
  // The tile's memory report agrees with the overflow.
  bool reported = false;
  for (const TileMemory& m : exe->tile_memory())
    if (m.ipu == 1 && m.tile == 2) {
      EXPECT_EQ(m.global_tile, 4u + 2u);
      EXPECT_EQ(m.total(), o.used);
      EXPECT_EQ(m.total(), m.variables + m.vertex_state + m.code + m.exchange_code + m.control_code);
      reported = true;
    }
  EXPECT_TRUE(reported);
  EXPECT_NX_ERROR(kInvalidState, Engine(exe, 1), "does not fit");
}

TEST(Compiler, TightBudgetFitsWhenLarger) {
  // The same graph fits once the tiles are big enough for what it reported.
  auto build = [](uint64_t bytes) {
    auto g = std::make_unique<Graph>(tiny(2, 1, bytes), 1);
    Tensor x = g->add_variable("x", kF32, {500}, VarKind::kInput, 0);
    g->add_input_stream("x", x);
    Tensor y = ops::map(*g, {in(0), op(E::kExp)}, {x}, kF32, {500}, 0, "exp");
    g->add_output_stream("y", y);
    return compile(std::move(g));
  };
  auto small = build(1024);
  ASSERT_FALSE(small->fits());
  uint64_t worst = 0;
  for (const TileOverflow& o : small->overflows()) worst = std::max(worst, o.used);
  auto enough = build(worst);
  EXPECT_TRUE(enough->fits());
  auto short_by_one = build(worst - 1);
  EXPECT_FALSE(short_by_one->fits());
}

TEST(Compiler, StepCostsArePositiveAndGrowWithWork) {
  auto costs = [](uint64_t n, bool exchange) {
    auto g = std::make_unique<Graph>(tiny(2), 1);
    Tensor x = g->add_variable("x", kF32, {n}, VarKind::kInput, 0);
    g->map_to_tile(x.var, 0);
    g->add_input_stream("x", x);
    Tensor y = g->add_variable("y", kF32, {n}, VarKind::kIntermediate, 0);
    g->map_to_tile(y.var, exchange ? 1 : 0);
    Tensor z = ops::map(*g, {in(0), op(E::kTanh)}, {x}, kF32, {n}, 0, "tanh");
    uint32_t ex = g->add_exchange("move");
    copy_view(*g, ex, View::of(z), View::of(y));
    g->execute_exchange(ex);
    g->add_output_stream("y", y);
    return std::shared_ptr<Executable>(compile(std::move(g)));
  };
  auto small = costs(100, true), big = costs(10000, true);
  for (auto* exe : {small.get(), big.get()}) {
    ASSERT_EQ(exe->step_costs().size(), exe->program().size());
    uint64_t sum = 0;
    for (size_t s = 0; s < exe->program().size(); ++s) {
      const StepCost& c = exe->step_costs()[s];
      EXPECT_EQ(c.kind, exe->program()[s].kind);
      EXPECT_EQ(c.index, exe->program()[s].index);
      EXPECT_GT(c.cycles, 0u) << c.name;
      EXPECT_FALSE(c.name.empty());
      sum += c.cycles;
    }
    EXPECT_EQ(exe->cycles_per_run(), sum);
    // Output streams are appended after the graph's own steps.
    EXPECT_EQ(exe->program().back().kind, StepKind::kDeviceToHost);
    EXPECT_EQ(exe->program().size(), exe->graph().program().size() + 1);
    EXPECT_EQ(exe->step_costs().front().name, "host->device x");
    EXPECT_EQ(exe->step_costs().back().name, "device->host y");
  }
  auto cost_of = [](const Executable& exe, StepKind kind) {
    for (const StepCost& c : exe.step_costs())
      if (c.kind == kind) return c;
    return StepCost{};
  };
  for (StepKind k : {StepKind::kCompute, StepKind::kExchange, StepKind::kHostToDevice, StepKind::kDeviceToHost})
    EXPECT_GT(cost_of(*big, k).cycles, cost_of(*small, k).cycles) << static_cast<int>(k);
  EXPECT_EQ(cost_of(*big, StepKind::kExchange).bytes, 40000u);
  EXPECT_EQ(cost_of(*big, StepKind::kHostToDevice).bytes, 40000u);
  EXPECT_EQ(cost_of(*big, StepKind::kCompute).bytes, 0u);
  EXPECT_EQ(cost_of(*big, StepKind::kCompute).name, "tanh");
  // At scale, a tile-to-tile copy costs about bytes / 4 cycles, and a copy
  // within one tile is cheaper than one across tiles.
  const TargetSpec& t = target_for("ipu2");
  EXPECT_NEAR(static_cast<double>(cost_of(*big, StepKind::kExchange).cycles), 40000.0 / 4 + t.sync_cycles, 10);
  auto local = costs(10000, false);
  EXPECT_LT(cost_of(*local, StepKind::kExchange).cycles, cost_of(*big, StepKind::kExchange).cycles);
  // A compute step costs at least the sync plus its busiest tile's vertices.
  EXPECT_GT(cost_of(*big, StepKind::kCompute).cycles, t.sync_cycles + 10000 / 2);
}

TEST(Compiler, UnusedVariablesTakeNoMemory) {
  auto build = [](bool extra) {
    auto g = chain_graph(1, 100);
    if (extra) {
      Tensor u = g->add_variable("unused", kF32, {5000}, VarKind::kIntermediate, 0);
      g->map_to_tile(u.var, 0);
    }
    return compile(std::move(g));
  };
  EXPECT_EQ(build(true)->arena_bytes()[0], build(false)->arena_bytes()[0]);
}

TEST(Compiler, ConstantsStayLiveForTheWholeProgram) {
  auto g = std::make_unique<Graph>(tiny(1), 1);
  std::vector<float> kv(50, 3.0f);
  Tensor k = g->add_constant("k", kF32, {50}, 0, shared_bytes(kv));
  Tensor x = g->add_variable("x", kF32, {50}, VarKind::kInput, 0);
  g->add_input_stream("x", x);
  Tensor a = ops::map(*g, {in(0), in(1), op(E::kMul)}, {x, k}, kF32, {50}, 0, "a");
  Tensor b = ops::map(*g, {in(0), op(E::kNeg)}, {a}, kF32, {50}, 0, "b");
  Tensor c = ops::map(*g, {in(0), op(E::kNeg)}, {b}, kF32, {50}, 0, "c");
  g->add_output_stream("c", c);
  std::shared_ptr<Executable> exe;
  std::vector<float> xs(50, 2.0f);
  // Two runs: the constant must still be intact for the second one.
  exe = compile(std::move(g));
  check_allocation(*exe);
  Engine e(exe, 1);
  for (int run = 0; run < 2; ++run) {
    e.write_input(0, reinterpret_cast<const uint8_t*>(xs.data()), 200);
    e.run();
    std::vector<float> out(50);
    e.read_output(0, reinterpret_cast<uint8_t*>(out.data()), 200);
    EXPECT_EQ(out, std::vector<float>(50, 6.0f)) << "run " << run;
  }
}

TEST(Compiler, RejectsReadsOfUnwrittenData) {
  {
    auto g = std::make_unique<Graph>(tiny(1), 1);
    Tensor t = g->add_variable("garbage", kF32, {4}, VarKind::kIntermediate, 0);
    Tensor o = g->add_variable("o", kF32, {4}, VarKind::kIntermediate, 0);
    g->map_to_tile(t.var, 0);
    g->map_to_tile(o.var, 0);
    uint32_t cs = g->add_compute_set("reader");
    auto expr = std::make_shared<const std::vector<ExprInstr>>(std::vector<ExprInstr>{in(0)});
    g->add_vertex(cs, std::make_unique<MapVertex>(0, expr, std::vector<MapVertex::Operand>{{Field{t.var, 0, 0, 4}, kF32, false}},
                                                  Field{o.var, 0, 0, 4}, kF32));
    g->execute(cs);
    g->add_output_stream("o", o);
    EXPECT_NX_ERROR(kInternal, compile(std::move(g)), "'reader'", "'garbage'");
  }
  {
    auto g = std::make_unique<Graph>(tiny(2), 1);
    Tensor t = g->add_variable("garbage", kF32, {4}, VarKind::kIntermediate, 0);
    Tensor o = g->add_variable("o", kF32, {4}, VarKind::kIntermediate, 0);
    g->map_to_tile(t.var, 0);
    g->map_to_tile(o.var, 1);
    uint32_t ex = g->add_exchange("mover");
    copy_view(*g, ex, View::of(t), View::of(o));
    g->execute_exchange(ex);
    g->add_output_stream("o", o);
    EXPECT_NX_ERROR(kInternal, compile(std::move(g)), "'mover'", "'garbage'");
  }
  {
    auto g = std::make_unique<Graph>(tiny(1), 1);
    Tensor o = g->add_variable("never", kF32, {4}, VarKind::kIntermediate, 0);
    g->add_output_stream("out", o);
    EXPECT_NX_ERROR(kInternal, compile(std::move(g)), "'out'", "never written");
  }
}

TEST(Compiler, FixedOverheadsPerTile) {
  std::shared_ptr<Executable> exe = compile(chain_graph(3, 300));
  ASSERT_FALSE(exe->tile_memory().empty());
  for (const TileMemory& m : exe->tile_memory()) {
    EXPECT_EQ(m.global_tile, m.ipu * exe->graph().tiles_per_ipu() + m.tile);
    EXPECT_EQ(m.variables, exe->arena_bytes()[m.global_tile]);
    EXPECT_GT(m.code, 0u) << "map codelets live on every tile that runs them";
    EXPECT_GT(m.vertex_state, 0u);
    EXPECT_GE(m.control_code, 6u * 64) << "worker stacks";
  }
  // More steps on a tile mean more control code and vertex state, but the
  // same codelet is stored once however often it runs.
  auto longer_graph = [] {
    auto g = std::make_unique<Graph>(tiny(1), 1);
    Tensor x = g->add_variable("x", kF32, {16}, VarKind::kInput, 0);
    g->add_input_stream("x", x);
    Tensor t = x;
    for (int i = 0; i < 6; ++i) t = ops::map(*g, {in(0), op(E::kNeg)}, {t}, kF32, {16}, 0, "neg");
    g->add_output_stream("t", t);
    return compile(std::move(g));
  };
  auto shorter_graph = [] {
    auto g = std::make_unique<Graph>(tiny(1), 1);
    Tensor x = g->add_variable("x", kF32, {16}, VarKind::kInput, 0);
    g->add_input_stream("x", x);
    Tensor t = ops::map(*g, {in(0), op(E::kNeg)}, {x}, kF32, {16}, 0, "neg");
    g->add_output_stream("t", t);
    return compile(std::move(g));
  };
  auto longer = longer_graph(), shorter = shorter_graph();
  ASSERT_EQ(longer->tile_memory().size(), 1u);
  ASSERT_EQ(shorter->tile_memory().size(), 1u);
  const TileMemory& l = longer->tile_memory()[0];
  const TileMemory& s = shorter->tile_memory()[0];
  EXPECT_GT(l.control_code, s.control_code);
  EXPECT_GT(l.vertex_state, s.vertex_state);
  EXPECT_EQ(l.code, s.code);
}

// The host's form of a byte copy (Executable::host_copy_of): runs and rows
// up to the packed fields' limits, the general path past them.
TEST(Compiler, HostCopyFormsAndTheirLimits) {
  using B = Executable::ByteCopy;
  using H = Executable::HostCopy;
  // rows of `row` bytes (float elements), `outer` of them, read one after the
  // other and written dst_outer bytes apart.
  auto rows = [](uint32_t row, uint32_t outer, int32_t dst_outer, int32_t src_outer = -1) {
    return B{3, 64, 128, row / 4, outer, 4, src_outer < 0 ? static_cast<int32_t>(row) : src_outer, dst_outer, 4};
  };
  auto pattern = [](const H& h) { return h.src == Executable::kPatternCopy; };
  // A plain run.
  H run = Executable::host_copy_of(rows(64, 1, 0), 1000);
  EXPECT_FALSE(run.rows());
  EXPECT_EQ(run.src, 1000u);
  EXPECT_EQ(run.dst_byte, 128u);
  EXPECT_EQ(run.bytes, 64u);
  EXPECT_TRUE(pattern(Executable::host_copy_of(rows(64, 1, 0), uint64_t{1} << 40)));  // source past the field
  // Rows at the limits, and one past each.
  const uint32_t max_row = (1u << 20) - 4;  // whole floats under 1 MiB
  for (auto [row, outer, step] : {std::tuple{64u, 2u, 96}, std::tuple{max_row, 4096u, (1 << 23) - 1}}) {
    H h = Executable::host_copy_of(rows(row, outer, step), 1000);
    ASSERT_TRUE(h.rows());
    EXPECT_FALSE(pattern(h));
    EXPECT_EQ(h.rows_src(), 1000u);
    EXPECT_EQ(h.dst_byte, 128u);
    EXPECT_EQ(h.row_bytes(), row);
    EXPECT_EQ(h.outer(), outer);
    EXPECT_EQ(h.dst_outer(), static_cast<uint32_t>(step));
  }
  EXPECT_TRUE(pattern(Executable::host_copy_of(rows(1u << 20, 2, 1 << 21), 1000)));   // a row of 1 MiB
  EXPECT_TRUE(pattern(Executable::host_copy_of(rows(64, 4097, 96), 1000)));           // 4,097 rows
  EXPECT_TRUE(pattern(Executable::host_copy_of(rows(64, 2, 1 << 23), 1000)));         // a step of 8 MiB
  EXPECT_TRUE(pattern(Executable::host_copy_of(rows(64, 2, 0), 1000)));               // rows on top of each other
  EXPECT_TRUE(pattern(Executable::host_copy_of(rows(64, 2, -96), 1000)));             // written backwards
  EXPECT_TRUE(pattern(Executable::host_copy_of(rows(64, 2, 96, 128), 1000)));         // read with gaps
  EXPECT_TRUE(pattern(Executable::host_copy_of(rows(64, 2, 96), uint64_t{1} << 40)));  // source past the field
  EXPECT_TRUE(pattern(Executable::host_copy_of(rows(64, 0, 96), 1000)));              // no rows
  B strided = rows(64, 2, 96);
  strided.src_stride = 8;  // every other float
  EXPECT_TRUE(pattern(Executable::host_copy_of(strided, 1000)));
}

}  // namespace
