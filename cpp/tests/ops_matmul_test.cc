// ops::matmul and its planner. Results are compared with a double-precision
// reference; half-precision paths with inputs chosen so the exact rounding
// sequence of the AMP (and of the K-split reduction) can be replayed here.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "neurenix/ops/map.h"
#include "neurenix/ops/matmul.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

struct MMCase {
  uint64_t G, M, N, K;
  uint32_t tiles = 4;
  double proportion = 0.6;
  uint64_t bytes_per_tile = 0;
  DeviceType in = kF32;
  DeviceType partials = kF32;
  DeviceType out = kF32;
  int a_mode = 0;  // 0: input left to the matmul, 1: mapped linearly, 2: random intervals, 3: made by a map
  int b_mode = 0;  // same, and 4: a constant
};

std::string describe(const MMCase& c) {
  std::ostringstream os;
  os << "[" << c.G << "," << c.M << "," << c.K << "]x[" << c.G << "," << c.K << "," << c.N << "] tiles=" << c.tiles
     << " prop=" << c.proportion << " bytes=" << c.bytes_per_tile << " in=" << device_type_name(c.in)
     << " partials=" << device_type_name(c.partials) << " out=" << device_type_name(c.out) << " a_mode=" << c.a_mode
     << " b_mode=" << c.b_mode;
  return os.str();
}

void random_layout(Graph& g, VarId v, std::mt19937& rng) {
  const uint64_t n = g.var(v).numel;
  std::vector<TileInterval> ivs;
  for (uint64_t pos = 0; pos < n;) {
    uint64_t end = std::min(n, pos + 1 + rng() % 11);
    ivs.push_back({pos, end, static_cast<uint32_t>(rng() % g.tiles_per_ipu()), 0});
    pos = end;
  }
  g.set_mapping(v, ivs);
}

Tensor make_operand(Graph& g, const std::string& name, DeviceType dt, const Shape& shape, int mode, const std::vector<double>& v,
                    std::vector<std::vector<uint8_t>>& inputs, std::mt19937& rng) {
  if (mode == 4) return g.add_constant(name, dt, shape, 0, std::make_shared<const std::vector<uint8_t>>(encode(dt, v)));
  Tensor t = g.add_variable(name, dt, shape, VarKind::kInput, 0);
  g.add_input_stream(name, t);
  inputs.push_back(encode(dt, v));
  if (mode == 1) g.map_linearly(t.var);
  if (mode == 2 && t.numel()) random_layout(g, t.var, rng);
  if (mode == 3 && t.numel()) {
    // Through an identity map, so the operand arrives already laid out by another op.
    ExprInstr ins{ExprOpCode::kInput, 0, 0, 0, false};
    return ops::map(g, {ins}, {t}, dt, shape, 0, name + "/copy");
  }
  return t;
}

struct MMResult {
  std::vector<double> c;
  ops::MatMulPlan plan;
  std::shared_ptr<Executable> exe;
  std::vector<std::string> warnings;
};

MMResult run_matmul(const MMCase& c, const std::vector<double>& a, const std::vector<double>& b, std::mt19937& rng) {
  MMResult r;
  auto g = std::make_unique<Graph>(tiny(c.tiles, 1, c.bytes_per_tile), 1);
  std::vector<std::vector<uint8_t>> inputs;
  Tensor ta = make_operand(*g, "a", c.in, {c.G, c.M, c.K}, c.a_mode, a, inputs, rng);
  Tensor tb = make_operand(*g, "b", c.in, {c.G, c.K, c.N}, c.b_mode, b, inputs, rng);
  ops::MatMulOptions o;
  o.memory_proportion = c.proportion;
  o.partials = c.partials;
  o.out_dtype = c.out;
  o.name = "mm";
  Tensor tc = ops::matmul(*g, ta, tb, o, &r.plan);
  EXPECT_EQ(tc.shape, (Shape{c.G, c.M, c.N}));
  g->add_output_stream("c", tc);
  r.warnings = g->warnings();
  auto out = run_graph(std::move(g), inputs, 1, &r.exe);
  if (!out.empty()) r.c = decode(c.out, out[0]);
  return r;
}

// Bytes of temporaries live at once on the busiest tile, from the compiled
// program's own steps.
uint64_t peak_temp_bytes(const Executable& exe) {
  const Graph& g = exe.graph();
  const auto live = live_ranges(exe);
  uint64_t worst = 0;
  for (uint32_t tile = 0; tile < g.num_tiles(); ++tile)
    for (int64_t s = 0; s < static_cast<int64_t>(exe.program().size()); ++s) {
      uint64_t sum = 0;
      for (size_t v = 0; v < g.num_vars(); ++v) {
        const Variable& var = g.var(static_cast<VarId>(v));
        if (var.kind != VarKind::kTemporary || live[v].first > s || live[v].last < s) continue;
        sum += var.bytes_on(tile);
      }
      worst = std::max(worst, sum);
    }
  return worst;
}

void check_float(const MMCase& c, const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& got) {
  ASSERT_EQ(got.size(), c.G * c.M * c.N);
  for (uint64_t g = 0; g < c.G; ++g)
    for (uint64_t i = 0; i < c.M; ++i)
      for (uint64_t j = 0; j < c.N; ++j) {
        double ref = 0, mag = 0;
        for (uint64_t p = 0; p < c.K; ++p) {
          const double t = a[(g * c.M + i) * c.K + p] * b[(g * c.K + p) * c.N + j];
          ref += t;
          mag += std::fabs(t);
        }
        ASSERT_NEAR(got[(g * c.M + i) * c.N + j], ref, 1e-5 * mag + 1e-5 * std::fabs(ref) + 1e-30)
            << "at " << g << "," << i << "," << j;
      }
}

TEST(OpsMatMul, Float32ManyShapesTilesAndProportions) {
  std::mt19937 rng(1);
  std::normal_distribution<double> nd;
  const uint64_t Gs[] = {1, 2, 3}, Ms[] = {1, 2, 5, 13, 16}, Ns[] = {1, 3, 7, 16, 33}, Ks[] = {1, 2, 17, 31, 64};
  const uint32_t tiles[] = {1, 2, 3, 7, 16};
  const double props[] = {1.0, 0.6, 0.1, 0.01, 0.001};
  uint32_t max_split[5] = {1, 1, 1, 1, 1};
  bool unmet = false;
  for (int trial = 0; trial < 260; ++trial) {
    MMCase c{Gs[rng() % 3], Ms[rng() % 5], Ns[rng() % 5], Ks[rng() % 5]};
    c.tiles = tiles[rng() % 5];
    c.proportion = props[rng() % 5];
    c.a_mode = static_cast<int>(rng() % 4);
    c.b_mode = static_cast<int>(rng() % 5);
    SCOPED_TRACE(describe(c));
    std::vector<double> a(c.G * c.M * c.K), b(c.G * c.K * c.N);
    for (auto& v : a) v = static_cast<float>(nd(rng));
    for (auto& v : b) v = static_cast<float>(nd(rng));
    MMResult r = run_matmul(c, a, b, rng);
    ASSERT_TRUE(r.exe && r.exe->fits());
    check_float(c, a, b, r.c);
    const ops::MatMulPlan& p = r.plan;
    EXPECT_LE(p.tiles_used(), c.tiles);
    EXPECT_EQ(p.groups, c.G);
    EXPECT_EQ(p.m, c.M);
    EXPECT_EQ(p.n, c.N);
    EXPECT_EQ(p.k, c.K);
    EXPECT_LE(p.g_split, c.G);
    EXPECT_LE(p.m_split, c.M);
    EXPECT_LE(p.n_split * p.serial_split, std::max<uint64_t>(c.N, 1));
    EXPECT_LE(p.k_split, c.K);
    const double budget = c.proportion * target_for("ipu2").bytes_per_tile;
    if (p.meets_memory_target) {
      EXPECT_LE(static_cast<double>(p.temp_bytes), budget);
    } else {
      unmet = true;
      ASSERT_FALSE(r.warnings.empty());
      EXPECT_NE(r.warnings[0].find("'mm'"), std::string::npos) << r.warnings[0];
    }
    // The plan's temporaries are an upper bound on what the lowering allocates
    // at once (plus 8-byte alignment of each temporary block).
    EXPECT_LE(peak_temp_bytes(*r.exe), p.temp_bytes + 8 * 8) << p.describe();
    max_split[0] = std::max(max_split[0], p.g_split);
    max_split[1] = std::max(max_split[1], p.m_split);
    max_split[2] = std::max(max_split[2], p.n_split);
    max_split[3] = std::max(max_split[3], p.k_split);
    max_split[4] = std::max(max_split[4], p.serial_split);
    const auto& rec = r.exe->graph().op_plans();
    ASSERT_FALSE(rec.empty());
    EXPECT_EQ(rec.back().kind, "matmul");
    EXPECT_EQ(rec.back().tiles_used, p.tiles_used());
    EXPECT_EQ(rec.back().temp_bytes_per_tile, p.temp_bytes);
  }
  // The sweep must have exercised every kind of split and the fallback.
  for (int i = 0; i < 5; ++i) EXPECT_GT(max_split[i], 1u) << "split kind " << i << " never chosen";
  EXPECT_TRUE(unmet);
}

TEST(OpsMatMul, SplitsForcedBySmallTiles) {
  std::mt19937 rng(2);
  std::normal_distribution<double> nd;
  // Tiles of 4 KiB: every operand has to be spread, and the planner has to
  // split K or N serially to keep temporaries small.
  for (auto [G, M, N, K, tiles] : std::vector<std::tuple<uint64_t, uint64_t, uint64_t, uint64_t, uint32_t>>{
           {1, 16, 16, 64, 16}, {2, 8, 24, 40, 16}, {1, 31, 5, 97, 7}, {3, 4, 4, 128, 16}, {1, 1, 64, 64, 8}}) {
    for (double prop : {0.6, 0.2, 0.05}) {
      MMCase c{G, M, N, K};
      c.tiles = tiles;
      c.proportion = prop;
      c.bytes_per_tile = 16384;
      c.a_mode = 1;
      c.b_mode = 1;
      SCOPED_TRACE(describe(c));
      std::vector<double> a(G * M * K), b(G * K * N);
      for (auto& v : a) v = static_cast<float>(nd(rng));
      for (auto& v : b) v = static_cast<float>(nd(rng));
      MMResult r = run_matmul(c, a, b, rng);
      ASSERT_TRUE(r.exe && r.exe->fits());
      check_float(c, a, b, r.c);
      if (r.plan.meets_memory_target) {
        EXPECT_LE(static_cast<double>(r.plan.temp_bytes), prop * 16384);
      }
      EXPECT_LE(peak_temp_bytes(*r.exe), r.plan.temp_bytes + 64) << r.plan.describe();
    }
  }
}

TEST(OpsMatMul, DegenerateShapes) {
  std::mt19937 rng(3);
  // K = 0: the product is all zeros.
  for (DeviceType out : {kF32, kF16}) {
    MMCase c{2, 3, 4, 0};
    c.out = out;
    MMResult r = run_matmul(c, {}, {}, rng);
    EXPECT_EQ(r.c, std::vector<double>(24, 0.0));
  }
  // An empty result needs no work at all.
  Graph g(tiny(2), 1);
  Tensor a = g.add_variable("a", kF32, {1, 0, 3}, VarKind::kInput, 0);
  Tensor b = g.add_variable("b", kF32, {1, 3, 5}, VarKind::kInput, 0);
  Tensor c = ops::matmul(g, a, b, ops::MatMulOptions{});
  EXPECT_EQ(c.shape, (Shape{1, 0, 5}));
  EXPECT_TRUE(g.program().empty());
  // 1x1x1 and primes.
  for (auto [M, N, K] : std::vector<std::tuple<uint64_t, uint64_t, uint64_t>>{{1, 1, 1}, {7, 11, 13}, {1, 17, 1}, {19, 1, 23}}) {
    MMCase mc{1, M, N, K};
    mc.tiles = 3;
    std::vector<double> av(M * K), bv(K * N);
    for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<double>(i % 5) - 2;
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<double>(i % 3) + 0.5;
    MMResult r = run_matmul(mc, av, bv, rng);
    check_float(mc, av, bv, r.c);
  }
}

// Half inputs with float partials: quarter-valued inputs make every product
// and sum exact in float, so the result is the exact sum, rounded once when
// the output is half, whatever the plan.
TEST(OpsMatMul, HalfInputsFloatPartialsRoundOnce) {
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> q(-40, 40);
  for (int trial = 0; trial < 40; ++trial) {
    MMCase c{1 + rng() % 2, 1 + rng() % 9, 1 + rng() % 9, 1 + rng() % 70};
    c.tiles = 1 + rng() % 16;
    c.proportion = trial % 2 ? 0.001 : 0.6;
    c.in = kF16;
    c.partials = kF32;
    c.out = trial % 3 ? kF16 : kF32;
    c.a_mode = static_cast<int>(rng() % 4);
    c.b_mode = static_cast<int>(rng() % 5);
    SCOPED_TRACE(describe(c));
    std::vector<double> a(c.G * c.M * c.K), b(c.G * c.K * c.N);
    for (auto& v : a) v = q(rng) / 4.0;
    for (auto& v : b) v = q(rng);
    MMResult r = run_matmul(c, a, b, rng);
    ASSERT_EQ(r.c.size(), c.G * c.M * c.N);
    for (uint64_t g = 0; g < c.G; ++g)
      for (uint64_t i = 0; i < c.M; ++i)
        for (uint64_t j = 0; j < c.N; ++j) {
          double exact = 0;
          for (uint64_t p = 0; p < c.K; ++p) exact += a[(g * c.M + i) * c.K + p] * b[(g * c.K + p) * c.N + j];
          const double want = c.out == kF16 ? ref_round_half(exact) : exact;
          ASSERT_EQ(r.c[(g * c.M + i) * c.N + j], want) << g << "," << i << "," << j;
        }
  }
}

// Half partials: each K slice of the plan is a vertex that sums 16 products
// at a time in float, rounds each chunk to half and accumulates in half; the
// slices' partials are then summed in half, rounding after each.
TEST(OpsMatMul, HalfPartialsReplayTheRoundingSequence) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> q(-50, 50);
  int k_split_seen = 0, differs = 0;
  for (int trial = 0; trial < 40; ++trial) {
    MMCase c{1 + rng() % 2, 1 + rng() % 6, 1 + rng() % 6, 1 + rng() % 90};
    c.tiles = 1 + rng() % 16;
    c.proportion = trial % 2 ? 0.0005 : 0.6;
    c.in = kF16;
    c.partials = kF16;
    c.out = trial % 3 ? kF16 : kF32;
    c.a_mode = static_cast<int>(rng() % 4);
    c.b_mode = static_cast<int>(rng() % 5);
    SCOPED_TRACE(describe(c));
    std::vector<double> a(c.G * c.M * c.K), b(c.G * c.K * c.N);
    for (auto& v : a) v = q(rng) / 4.0;
    for (auto& v : b) v = q(rng) + 0.5;
    MMResult r = run_matmul(c, a, b, rng);
    ASSERT_EQ(r.c.size(), c.G * c.M * c.N);
    const uint64_t ks = r.plan.k_split;
    if (ks > 1) ++k_split_seen;
    // The planner splits K in blocks of whole multiples of 16 (the AMP's
    // channel grouping) once K exceeds 16.
    uint64_t block = (c.K + ks - 1) / ks;
    if (c.K > 16) block = (block + 15) / 16 * 16;
    for (uint64_t g = 0; g < c.G; ++g)
      for (uint64_t i = 0; i < c.M; ++i)
        for (uint64_t j = 0; j < c.N; ++j) {
          double total = 0;
          for (uint64_t s = 0; s < ks; ++s) {
            const uint64_t k0 = s * block, k1 = std::min(c.K, k0 + block);
            double acc = 0;
            for (uint64_t c0 = k0; c0 < k1; c0 += 16) {
              double chunk = 0;
              for (uint64_t p = c0; p < std::min(k1, c0 + 16); ++p)
                chunk += a[(g * c.M + i) * c.K + p] * b[(g * c.K + p) * c.N + j];
              acc = ref_round_half(acc + ref_round_half(chunk));
            }
            total = ks > 1 ? ref_round_half(total + acc) : acc;
          }
          ASSERT_EQ(r.c[(g * c.M + i) * c.N + j], total) << g << "," << i << "," << j << " plan " << r.plan.describe();
          double exact = 0;
          for (uint64_t p = 0; p < c.K; ++p) exact += a[(g * c.M + i) * c.K + p] * b[(g * c.K + p) * c.N + j];
          if (total != ref_round_half(exact)) ++differs;
        }
  }
  EXPECT_GT(k_split_seen, 0) << "no plan split K: the reduction stage went untested";
  EXPECT_GT(differs, 0) << "the data should make half partials observable";
}

TEST(OpsMatMul, PlannerInvariants) {
  std::mt19937 rng(6);
  const TargetSpec& t = target_for("ipu2");
  const double props[] = {1.0, 0.8, 0.6, 0.4, 0.2, 0.1, 0.05, 0.01, 0.002, 0.0005};
  for (int trial = 0; trial < 150; ++trial) {
    ops::MatMulProblem p{1 + rng() % 4, 1 + rng() % 300, 1 + rng() % 300, 1 + rng() % 300,
                         rng() % 2 ? kF16 : kF32, kF32, kF32,
                         static_cast<bool>(rng() % 2), static_cast<bool>(rng() % 2)};
    if (p.in_dtype == kF16 && rng() % 2) p.partials = kF16;
    const uint32_t tiles = 1 + rng() % 64;
    const uint64_t bytes = 2048 + rng() % 100000;
    uint64_t prev = UINT64_MAX;
    for (double prop : props) {
      ops::MatMulPlan plan = ops::plan_matmul(t, tiles, bytes, p, prop);
      SCOPED_TRACE(testing::Message() << "tiles " << tiles << " bytes " << bytes << " prop " << prop << ": " << plan.describe());
      EXPECT_GE(plan.tiles_used(), 1u);
      EXPECT_LE(plan.tiles_used(), tiles);
      EXPECT_LE(plan.g_split, p.groups);
      EXPECT_LE(plan.m_split, p.m);
      EXPECT_LE(plan.k_split, p.k);
      EXPECT_LE(static_cast<uint64_t>(plan.n_split) * plan.serial_split, p.n);
      EXPECT_GT(plan.cycles, 0u);
      if (plan.meets_memory_target) {
        EXPECT_LE(static_cast<double>(plan.temp_bytes), prop * bytes);
        EXPECT_LE(plan.total_bytes(), bytes) << "a plan that meets the target fits the tile";
      }
      // Less memory allowed never means more temporaries.
      EXPECT_LE(plan.temp_bytes, prev);
      prev = plan.temp_bytes;
      EXPECT_NE(plan.describe().find("tiles"), std::string::npos);
      if (!plan.meets_memory_target) {
        EXPECT_NE(plan.describe().find("above the memory target"), std::string::npos);
      }
    }
    // With the whole tile allowed, more tiles never make the plan slower.
    ops::MatMulPlan few = ops::plan_matmul(t, tiles, bytes, p, 1.0);
    ops::MatMulPlan many = ops::plan_matmul(t, tiles * 2, bytes, p, 1.0);
    if (few.meets_memory_target && many.meets_memory_target) {
      EXPECT_LE(many.cycles, few.cycles);
    }
  }
  // A big problem on a big chip uses many tiles and estimates fewer cycles
  // than running it on one.
  ops::MatMulProblem big{1, 512, 512, 512, kF16, kF32, kF32, true, true};
  ops::MatMulPlan full = ops::plan_matmul(t, 1472, t.bytes_per_tile, big, 0.6);
  ops::MatMulPlan one = ops::plan_matmul(t, 1, t.bytes_per_tile, big, 1.0);
  EXPECT_GT(full.tiles_used(), 256u);
  EXPECT_LT(full.cycles * 50, one.cycles);
  EXPECT_TRUE(full.meets_memory_target);
}

TEST(OpsMatMul, Errors) {
  Graph g(tiny(2), 1);
  Tensor a = g.add_variable("a", kF32, {1, 3, 4}, VarKind::kInput, 0);
  Tensor b = g.add_variable("b", kF32, {1, 4, 5}, VarKind::kInput, 0);
  Tensor b2 = g.add_variable("b2", kF32, {1, 3, 5}, VarKind::kInput, 0);
  Tensor bg = g.add_variable("bg", kF32, {2, 4, 5}, VarKind::kInput, 0);
  Tensor a2d = g.add_variable("a2d", kF32, {3, 4}, VarKind::kInput, 0);
  Tensor bh = g.add_variable("bh", kF16, {1, 4, 5}, VarKind::kInput, 0);
  Tensor ai = g.add_variable("ai", kI32, {1, 3, 4}, VarKind::kInput, 0);
  Tensor bi = g.add_variable("bi", kI32, {1, 4, 5}, VarKind::kInput, 0);
  ops::MatMulOptions o;
  o.name = "mm";
  EXPECT_NX_ERROR(kShapeMismatch, ops::matmul(g, a, b2, o), "'mm'", "[1, 3, 4]", "[1, 3, 5]");
  EXPECT_NX_ERROR(kShapeMismatch, ops::matmul(g, a, bg, o), "'mm'");
  EXPECT_NX_ERROR(kShapeMismatch, ops::matmul(g, a2d, b, o), "'mm'");
  EXPECT_NX_ERROR(kShapeMismatch, ops::matmul(g, a, bh, o), "float32", "float16");
  EXPECT_NX_ERROR(kShapeMismatch, ops::matmul(g, ai, bi, o), "int32");
  for (double bad : {0.0, -0.5, 1.01}) {
    o.memory_proportion = bad;
    EXPECT_NX_ERROR(kInvalidArgument, ops::matmul(g, a, b, o), "memory proportion");
  }
  EXPECT_EQ(g.num_vars(), 8u) << "a rejected matmul adds nothing";
}

// The smallest model that goes through every layer: x . w then relu.
TEST(OpsMatMul, MatMulThenRelu) {
  auto g = std::make_unique<Graph>(parse_system_spec("version=ipu2,num_ipus=1,tiles_per_ipu=4"), 1);
  const uint64_t M = 5, K = 7, N = 3;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> w(K * N), x(M * K);
  for (auto& v : w) v = nd(rng);
  for (auto& v : x) v = nd(rng);
  Tensor tx = g->add_variable("x", kF32, {1, M, K}, VarKind::kInput, 0);
  g->add_input_stream("x", tx);
  Tensor tw = g->add_constant("w", kF32, {1, K, N}, 0, shared_bytes(w));
  Tensor y = ops::matmul(*g, tx, tw, ops::MatMulOptions{});
  Tensor r = ops::map(*g, {{ExprOpCode::kInput, 0}, {ExprOpCode::kRelu}}, {y}, kF32, y.shape, 0, "relu");
  g->add_output_stream("y", r);
  std::shared_ptr<Executable> exe;
  auto out = run_graph(std::move(g), {to_bytes(x)}, 2, &exe);
  ASSERT_EQ(out.size(), 1u);
  auto ys = from_bytes<float>(out[0]);
  for (uint64_t i = 0; i < M; ++i)
    for (uint64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (uint64_t k = 0; k < K; ++k) acc += static_cast<double>(x[i * K + k]) * w[k * N + j];
      EXPECT_NEAR(ys[i * N + j], acc > 0 ? acc : 0, 1e-5);
    }
  EXPECT_GT(exe->cycles_per_run(), 0u);
}

}  // namespace

namespace {

TEST(OpsMatMul, RunsOnTheIpuItIsAskedFor) {
  std::mt19937 rng(8);
  std::normal_distribution<float> nd;
  auto g = std::make_unique<Graph>(tiny(3, 2), 2);
  const uint64_t M = 4, K = 9, N = 5;
  std::vector<float> x(M * K), w(K * N);
  for (auto& v : x) v = nd(rng);
  for (auto& v : w) v = nd(rng);
  Tensor tx = g->add_variable("x", kF32, {1, M, K}, VarKind::kInput, 1);
  g->add_input_stream("x", tx);
  Tensor tw = g->add_constant("w", kF32, {1, K, N}, 1, shared_bytes(w));
  ops::MatMulOptions o;
  o.ipu = 1;
  Tensor y = ops::matmul(*g, tx, tw, o);
  EXPECT_EQ(g->var(y.var).ipu, 1u);
  for (const Variable& v : g->vars())
    for (const TileShare& s : v.tiles) EXPECT_EQ(g->ipu_of_tile(s.tile), 1u) << v.name;
  g->add_output_stream("y", y);
  auto out = run_graph(std::move(g), {to_bytes(x)});
  ASSERT_EQ(out.size(), 1u);
  auto ys = from_bytes<float>(out[0]);
  for (uint64_t i = 0; i < M; ++i)
    for (uint64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (uint64_t k = 0; k < K; ++k) acc += static_cast<double>(x[i * K + k]) * w[k * N + j];
      EXPECT_NEAR(ys[i * N + j], acc, 1e-5);
    }
}

// An operand on another IPU than the one the matmul runs on is a caller
// error, reported as such (ops::map says kInvalidArgument for the same thing),
// not an internal invariant failure.
TEST(OpsMatMul, OperandOnAnotherIpuIsACallerError) {
  Graph g(tiny(3, 2), 2);
  Tensor a = g.add_variable("a", kF32, {1, 4, 9}, VarKind::kInput, 0);
  Tensor b = g.add_variable("b", kF32, {1, 9, 5}, VarKind::kInput, 1);
  ops::MatMulOptions o;
  o.ipu = 1;
  o.name = "mm";
  EXPECT_NX_ERROR(kInvalidArgument, ops::matmul(g, a, b, o), "'mm'", "'a'");
}

}  // namespace

namespace {

// One tensor as both operands: the first use lays it out, the second must
// find (or fetch) its blocks in that layout.
TEST(OpsMatMul, SameTensorAsBothOperands) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  for (uint32_t tiles : {1u, 4u, 16u}) {
    for (double prop : {0.6, 0.001}) {
      auto g = std::make_unique<Graph>(tiny(tiles), 1);
      const uint64_t n = 11;
      std::vector<float> x(2 * n * n);
      for (auto& v : x) v = nd(rng);
      Tensor tx = g->add_variable("x", kF32, {2, n, n}, VarKind::kInput, 0);
      g->add_input_stream("x", tx);
      ops::MatMulOptions o;
      o.memory_proportion = prop;
      Tensor y = ops::matmul(*g, tx, tx, o);
      g->add_output_stream("y", y);
      auto out = run_graph(std::move(g), {to_bytes(x)});
      ASSERT_EQ(out.size(), 1u);
      auto ys = from_bytes<float>(out[0]);
      for (uint64_t gi = 0; gi < 2; ++gi)
        for (uint64_t i = 0; i < n; ++i)
          for (uint64_t j = 0; j < n; ++j) {
            double acc = 0, mag = 0;
            for (uint64_t k = 0; k < n; ++k) {
              const double t = static_cast<double>(x[(gi * n + i) * n + k]) * x[(gi * n + k) * n + j];
              acc += t;
              mag += std::fabs(t);
            }
            ASSERT_NEAR(ys[(gi * n + i) * n + j], acc, 1e-5 * mag) << tiles << " tiles";
          }
    }
  }
}

}  // namespace
