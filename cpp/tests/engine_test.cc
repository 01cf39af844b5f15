// The engine: loading, host streams, run statistics, and determinism of the
// simulated BSP execution across runs and host thread counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include "expr_util.h"
#include "neurenix/exchange.h"
#include "neurenix/ops/map.h"
#include "neurenix/ops/matmul.h"
#include "neurenix/ops/rearrange.h"
#include "neurenix/ops/reduce.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

// A small model over two IPUs that touches every kind of step: matmul with a
// K split, element-wise ops in float and half, a two-stage reduction, a
// transpose and a copy between IPUs.
std::shared_ptr<Executable> model() {
  auto g = std::make_unique<Graph>(tiny(4, 2), 2);
  const uint64_t G = 2, M = 9, K = 70, N = 6;
  std::mt19937 rng(99);
  std::normal_distribution<float> nd;
  std::vector<float> w(G * K * N);
  for (auto& v : w) v = nd(rng);
  Tensor x = g->add_variable("x", kF32, {G, M, K}, VarKind::kInput, 0);
  g->add_input_stream("x", x);
  Tensor wt = g->add_constant("w", kF32, {G, K, N}, 0, shared_bytes(w));
  ops::MatMulOptions o;
  o.memory_proportion = 0.002;
  Tensor y = ops::matmul(*g, x, wt, o);
  Tensor e = ops::map(*g, {in(0), op(E::kTanh), op(E::kExp)}, {y}, kF32, y.shape, 0, "act");
  Tensor h = ops::map(*g, {in(0), op(E::kCastF16), in(0), op(E::kCastF16), op(E::kMul, true)}, {e}, kF16, y.shape,
                      0, "half");
  Tensor s = ops::reduce(*g, e, {1, 2}, ReduceOp::kSum, ReduceFinal::kLog, 1, kF32, 0, "lse");
  Tensor t = ops::rearrange(*g, View{h.var, 0, {N, M, G}, {1, static_cast<int64_t>(N), static_cast<int64_t>(M * N)}}, 0, "t");
  Tensor moved = ops::copy_to_ipu(*g, t, 1, "moved");
  Tensor z = ops::map(*g, {in(0), op(E::kNeg, true)}, {moved}, kF16, moved.shape, 1, "neg");
  g->add_output_stream("s", s);
  g->add_output_stream("z", z);
  g->add_output_stream("y", y);
  return compile(std::move(g));
}

std::vector<float> model_input(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, 0.3f);
  std::vector<float> x(2 * 9 * 70);
  for (auto& v : x) v = nd(rng);
  return x;
}

std::vector<std::vector<uint8_t>> run_once(Engine& e, const std::vector<float>& x) {
  e.write_input(0, reinterpret_cast<const uint8_t*>(x.data()), x.size() * 4);
  e.run();
  return read_outputs(e);
}

TEST(Engine, DeterministicAcrossRunsAndThreadCounts) {
  std::shared_ptr<Executable> exe = model();
  ASSERT_TRUE(exe->fits());
  const auto x = model_input(1);
  std::vector<std::vector<uint8_t>> first;
  uint64_t cycles = 0;
  for (unsigned threads : {1u, 2u, 4u}) {
    Engine e(exe, threads);
    for (int run = 0; run < 3; ++run) {
      auto out = run_once(e, x);
      if (first.empty()) {
        first = out;
        cycles = e.last_run().cycles;
      }
      EXPECT_EQ(out, first) << threads << " threads, run " << run;
      EXPECT_EQ(e.last_run().cycles, cycles);
    }
  }
  EXPECT_EQ(cycles, exe->cycles_per_run());
  // And the outputs are the model's: check the matmul output and the log-sum-exp-like reduction.
  ASSERT_EQ(first.size(), 3u);
  auto y = from_bytes<float>(first[2]);
  const Graph& g = exe->graph();
  const ConstantBytes& wbytes = g.var(1).data;
  std::vector<float> w(wbytes.size / 4);
  std::memcpy(w.data(), wbytes.data, wbytes.size);
  std::vector<double> lse(2, 0.0);
  for (int gi = 0; gi < 2; ++gi)
    for (int i = 0; i < 9; ++i)
      for (int j = 0; j < 6; ++j) {
        double acc = 0, mag = 0;
        for (int k = 0; k < 70; ++k) {
          acc += static_cast<double>(x[(gi * 9 + i) * 70 + k]) * w[(gi * 70 + k) * 6 + j];
          mag += std::fabs(static_cast<double>(x[(gi * 9 + i) * 70 + k]) * w[(gi * 70 + k) * 6 + j]);
        }
        ASSERT_NEAR(y[(gi * 9 + i) * 6 + j], acc, 1e-5 * mag);
        lse[gi] += std::exp(std::tanh(acc));
      }
  auto s = from_bytes<float>(first[0]);
  ASSERT_EQ(s.size(), 2u);
  for (int gi = 0; gi < 2; ++gi) EXPECT_NEAR(s[gi], std::log(lse[gi]), 1e-5);
  // z = -(half(e) * half(e)) transposed, in half precision.
  auto z = decode(kF16, first[1]);
  ASSERT_EQ(z.size(), 108u);
  for (int j = 0; j < 6; ++j)
    for (int i = 0; i < 9; ++i)
      for (int gi = 0; gi < 2; ++gi) {
        const double ev = std::exp(std::tanh(static_cast<double>(y[(gi * 9 + i) * 6 + j])));
        const double hv = ref_round_half(ev);
        EXPECT_NEAR(z[(j * 9 + i) * 2 + gi], -ref_round_half(hv * hv), 4 * std::ldexp(hv * hv, -10));
      }
}

TEST(Engine, StatisticsAddUp) {
  std::shared_ptr<Executable> exe = model();
  Engine e(exe, 2);
  EXPECT_EQ(e.num_inputs(), 1u);
  EXPECT_EQ(e.num_outputs(), 3u);
  EXPECT_EQ(e.input_bytes(0), 2u * 9 * 70 * 4);
  EXPECT_EQ(e.output_bytes(0), 2u * 4);
  EXPECT_EQ(e.output_bytes(1), 108u * 2);
  EXPECT_EQ(e.output_bytes(2), 108u * 4);
  // One block, laid out by variable: every tile's bytes are addressed from
  // its start, the variables first, then the shadow regions.
  ASSERT_TRUE(exe->by_variable());
  for (uint32_t t = 0; t < exe->arena_bytes().size(); ++t) EXPECT_EQ(exe->arena_offset(t), 0u);
  EXPECT_EQ(exe->block_bytes(), exe->variables_end() + exe->shadow_block_bytes());
  EXPECT_EQ(e.arena_bytes(), exe->block_bytes());
  EXPECT_EQ(&e.executable(), exe.get());
  run_once(e, model_input(2));
  const RunStats& st = e.last_run();
  EXPECT_EQ(st.cycles, st.compute_cycles + st.exchange_cycles + st.host_cycles);
  EXPECT_EQ(st.steps, exe->program().size());
  EXPECT_GT(st.compute_cycles, 0u);
  EXPECT_GT(st.exchange_cycles, 0u);
  EXPECT_GT(st.host_cycles, 0u);
  EXPECT_EQ(st.host_bytes, e.input_bytes(0) + e.output_bytes(0) + e.output_bytes(1) + e.output_bytes(2));
  uint64_t exchanged = 0;
  for (const StepCost& c : exe->step_costs())
    if (c.kind == StepKind::kExchange) exchanged += c.bytes;
  EXPECT_EQ(st.exchanged_bytes, exchanged);
  EXPECT_GT(st.exchanged_bytes, 0u);
  EXPECT_GE(st.wall_seconds, 0.0);
  // The host time by step adds up to each kind's.
  ASSERT_EQ(st.step_seconds.size(), exe->program().size());
  double by_kind[4] = {0, 0, 0, 0};
  for (size_t s = 0; s < st.step_seconds.size(); ++s) {
    EXPECT_GE(st.step_seconds[s], 0.0);
    by_kind[static_cast<int>(exe->program()[s].kind)] += st.step_seconds[s];
  }
  EXPECT_DOUBLE_EQ(by_kind[static_cast<int>(StepKind::kCompute)], st.compute_seconds);
  EXPECT_DOUBLE_EQ(by_kind[static_cast<int>(StepKind::kExchange)], st.exchange_seconds);
  EXPECT_DOUBLE_EQ(by_kind[static_cast<int>(StepKind::kHostToDevice)] + by_kind[static_cast<int>(StepKind::kDeviceToHost)],
                   st.host_io_seconds);
  EXPECT_GT(st.compute_seconds, 0.0);
  EXPECT_LE(st.compute_seconds + st.exchange_seconds + st.host_io_seconds, st.wall_seconds);
}

TEST(Engine, ProgramsTakingTurnsOnTheSameCoresAgree) {
  // Two engines run one after the other many times, as the stages of a
  // sharded model do: more threads than cores, workers parked between runs
  // (shares_cores) or spinning, steps that a caller may finish before a
  // worker wakes. Every run gives the first run's outputs.
  std::shared_ptr<Executable> exe = model();
  EngineOptions parked;
  parked.threads = 3;
  parked.shares_cores = true;
  EngineOptions spinning;
  spinning.threads = 3;
  Engine a(exe, parked), b(exe, spinning);
  const auto x = model_input(4);
  const auto want = run_once(a, x);
  for (int run = 0; run < 200; ++run) {
    ASSERT_EQ(run_once(a, x), want) << "run " << run;
    ASSERT_EQ(run_once(b, x), want) << "run " << run;
  }
}

TEST(Engine, InputsPersistAndNewInputsGiveNewOutputs) {
  std::shared_ptr<Executable> exe = model();
  Engine e(exe, 1);
  const auto a = run_once(e, model_input(3));
  e.run();  // same inputs as before
  std::vector<uint8_t> again(e.output_bytes(0));
  e.read_output(0, again.data(), again.size());
  EXPECT_EQ(again, a[0]);
  const auto b = run_once(e, model_input(4));
  EXPECT_NE(b[0], a[0]);
  EXPECT_EQ(run_once(e, model_input(3)), a) << "no state leaks from one run into the next";
}

TEST(Engine, RejectsMisuse) {
  std::shared_ptr<Executable> exe = model();
  Engine e(exe, 1);
  EXPECT_NX_ERROR(kInvalidState, e.run(), "'x'", "not written");
  std::vector<uint8_t> buf(e.input_bytes(0) + 4);
  EXPECT_NX_ERROR(kShapeMismatch, e.write_input(0, buf.data(), buf.size()), "'x'", std::to_string(e.input_bytes(0)),
                  std::to_string(buf.size()));
  EXPECT_NX_ERROR(kShapeMismatch, e.write_input(0, buf.data(), e.input_bytes(0) - 1), "'x'");
  EXPECT_NX_ERROR(kInvalidState, e.run(), "'x'");
  EXPECT_NX_ERROR(kInvalidArgument, e.write_input(1, buf.data(), 4), "input index 1");
  e.write_input(0, buf.data(), e.input_bytes(0));
  EXPECT_NO_THROW(e.run());
  std::vector<uint8_t> out(e.output_bytes(0) + 1);
  EXPECT_NX_ERROR(kShapeMismatch, e.read_output(0, out.data(), out.size()), "wrong size");
  EXPECT_NX_ERROR(kInvalidArgument, e.read_output(3, out.data(), 8), "output index 3");
}

TEST(Engine, RunRequiresEveryInput) {
  auto g = std::make_unique<Graph>(tiny(2), 1);
  Tensor a = g->add_variable("first", kI32, {3}, VarKind::kInput, 0);
  Tensor b = g->add_variable("second", kI32, {3}, VarKind::kInput, 0);
  g->add_input_stream("first", a);
  g->add_input_stream("second", b);
  Tensor c = ops::map(*g, {in(0), in(1), op(E::kSub)}, {a, b}, kI32, {3}, 0, "sub");
  g->add_output_stream("c", c);
  std::shared_ptr<Executable> exe = compile(std::move(g));
  Engine e(exe, 1);
  std::vector<int32_t> av = {10, 20, 30}, bv = {1, 2, 3};
  e.write_input(0, reinterpret_cast<const uint8_t*>(av.data()), 12);
  EXPECT_NX_ERROR(kInvalidState, e.run(), "'second'");
  e.write_input(1, reinterpret_cast<const uint8_t*>(bv.data()), 12);
  e.run();
  std::vector<int32_t> out(3);
  e.read_output(0, reinterpret_cast<uint8_t*>(out.data()), 12);
  EXPECT_EQ(out, (std::vector<int32_t>{9, 18, 27}));
}

TEST(Engine, NonFittingExecutableCannotBeLoaded) {
  auto g = std::make_unique<Graph>(tiny(1, 1, 1024), 1);
  Tensor x = g->add_variable("x", kF32, {1000}, VarKind::kInput, 0);
  g->add_input_stream("x", x);
  g->add_output_stream("x", x);
  std::shared_ptr<Executable> exe = compile(std::move(g));
  ASSERT_FALSE(exe->fits());
  EXPECT_NX_ERROR(kInvalidState, Engine(exe, 1), "does not fit");
}

TEST(Engine, ConstantOnlyProgramAndThreadEnvironment) {
  auto build = [] {
    auto g = std::make_unique<Graph>(tiny(3), 1);
    std::vector<float> kv(40);
    for (int i = 0; i < 40; ++i) kv[i] = static_cast<float>(i);
    Tensor k = g->add_constant("k", kF32, {40}, 0, shared_bytes(kv));
    Tensor y = ops::map(*g, {in(0), in(0), op(E::kMul)}, {k}, kF32, {40}, 0, "sq");
    g->add_output_stream("y", y);
    g->add_output_stream("k", k);
    return std::shared_ptr<Executable>(compile(std::move(g)));
  };
  const char* old = std::getenv("NEURENIX_SIM_THREADS");
  const std::string saved = old ? old : "";
  for (const char* env : {"3", "not-a-number", "0", ""}) {
    setenv("NEURENIX_SIM_THREADS", env, 1);
    std::shared_ptr<Executable> exe = build();
    Engine e(exe, 0);
    e.run();
    std::vector<float> y(40), k(40);
    e.read_output(0, reinterpret_cast<uint8_t*>(y.data()), 160);
    e.read_output(1, reinterpret_cast<uint8_t*>(k.data()), 160);
    for (int i = 0; i < 40; ++i) {
      EXPECT_EQ(y[i], static_cast<float>(i * i)) << env;
      EXPECT_EQ(k[i], static_cast<float>(i)) << env;
    }
  }
  if (old) {
    setenv("NEURENIX_SIM_THREADS", saved.c_str(), 1);
  } else {
    unsetenv("NEURENIX_SIM_THREADS");
  }
}

// BSP: every copy of an exchange reads memory as it was before the exchange
// began, so two tensors can trade contents in one exchange, and the result
// cannot depend on the order (or thread) in which tiles are served.
TEST(Engine, ExchangeReadsThePreExchangeState) {
  for (unsigned threads : {1u, 2u}) {
    auto g = std::make_unique<Graph>(tiny(2), 1);
    Tensor a = g->add_variable("a", kI32, {4}, VarKind::kInput, 0);
    Tensor b = g->add_variable("b", kI32, {4}, VarKind::kInput, 0);
    g->map_to_tile(a.var, 0);
    g->map_to_tile(b.var, 1);
    g->add_input_stream("a", a);
    g->add_input_stream("b", b);
    uint32_t ex = g->add_exchange("swap");
    copy_view(*g, ex, View::of(a), View::of(b));
    copy_view(*g, ex, View::of(b), View::of(a));
    g->execute_exchange(ex);
    g->add_output_stream("a", a);
    g->add_output_stream("b", b);
    auto out = run_graph(std::move(g), {to_bytes(std::vector<int32_t>{1, 2, 3, 4}), to_bytes(std::vector<int32_t>{5, 6, 7, 8})},
                         threads);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(from_bytes<int32_t>(out[0]), (std::vector<int32_t>{5, 6, 7, 8})) << threads << " thread(s)";
    EXPECT_EQ(from_bytes<int32_t>(out[1]), (std::vector<int32_t>{1, 2, 3, 4})) << threads << " thread(s)";
  }
}

// Copies of every length from 1 to 70 bytes (the host moves short ones
// inline, longer ones through memmove), each from its own place on one tile
// to a shuffled place on another: every byte must arrive where its copy
// says, and nothing else be written.
TEST(Engine, CopiesOfEveryLengthArriveWhole) {
  constexpr uint32_t kLongest = 70, kTotal = kLongest * (kLongest + 1) / 2;
  std::mt19937 rng(31);
  std::vector<uint32_t> order(kLongest);
  for (uint32_t i = 0; i < kLongest; ++i) order[i] = i + 1;
  std::shuffle(order.begin(), order.end(), rng);
  for (unsigned threads : {1u, 2u}) {
    auto g = std::make_unique<Graph>(tiny(2), 1);
    Tensor a = g->add_variable("a", kBool, {kTotal}, VarKind::kInput, 0);
    Tensor b = g->add_variable("b", kBool, {kTotal + 1}, VarKind::kInput, 0);
    g->map_to_tile(a.var, 0);
    g->map_to_tile(b.var, 1);
    g->add_input_stream("a", a);
    g->add_input_stream("b", b);
    const uint32_t ex = g->add_exchange("lengths");
    std::vector<uint32_t> want(kTotal + 1, UINT32_MAX);  // the byte of `a` each byte of `b` receives
    // The runs laid out in `b` in shuffled order of their lengths.
    std::vector<uint32_t> dst_of(kLongest + 1);
    for (uint32_t i = 0, at = 0; i < kLongest; at += order[i], ++i) dst_of[order[i]] = at;
    for (uint32_t len = 1, src = 0; len <= kLongest; src += len, ++len) {
      g->exchange(ex).copies.push_back(Copy{a.var, 0, src, 1, b.var, 1, dst_of[len], len});
      for (uint32_t j = 0; j < len; ++j) want[dst_of[len] + j] = src + j;
    }
    g->execute_exchange(ex);
    g->add_output_stream("b", b);
    std::vector<uint8_t> av(kTotal), bv(kTotal + 1, 0xee);
    for (auto& x : av) x = static_cast<uint8_t>(rng());
    auto out = run_graph(std::move(g), {av, bv}, threads);
    ASSERT_EQ(out.size(), 1u);
    for (uint32_t i = 0; i <= kTotal; ++i)
      ASSERT_EQ(out[0][i], want[i] == UINT32_MAX ? 0xee : av[want[i]]) << "byte " << i << ", " << threads << " thread(s)";
  }
}

TEST(Engine, ManyTilesRunInParallelCorrectly) {
  // 16 tiles x 2 IPUs of independent work with 4 threads: every tile's result
  // must land, whichever thread computed it.
  auto g = std::make_unique<Graph>(tiny(16, 2), 2);
  Tensor x = g->add_variable("x", kF32, {32, 100}, VarKind::kInput, 1);
  g->map_linearly(x.var, 100);
  g->add_input_stream("x", x);
  Tensor y = ops::map(*g, {in(0), op(E::kSqrt)}, {x}, kF32, {32, 100}, 1, "sqrt");
  Tensor s = ops::reduce(*g, y, {1}, ReduceOp::kMax, ReduceFinal::kNone, 1, kF32, 1, "max");
  g->add_output_stream("s", s);
  std::vector<float> xs(3200);
  for (int i = 0; i < 3200; ++i) xs[i] = static_cast<float>(i);
  auto out = run_graph(std::move(g), {to_bytes(xs)}, 4);
  ASSERT_EQ(out.size(), 1u);
  auto sv = from_bytes<float>(out[0]);
  for (int r = 0; r < 32; ++r) EXPECT_EQ(sv[r], std::sqrt(static_cast<float>(r * 100 + 99))) << r;
}

}  // namespace

namespace {

TEST(Engine, SegmentsRunSeparatelyAndStreamOutputsAtTheBoundary) {
  // Segment 0: y = 2x (streamed out); segment 1: the constant `acc` += y.
  auto g = std::make_unique<Graph>(tiny(2), 1);
  Tensor x = g->add_variable("x", kF32, {4}, VarKind::kInput, 0);
  g->add_input_stream("x", x);
  std::vector<float> zeros(4, 0.0f);
  Tensor acc = g->add_constant("acc", kF32, {4}, 0, shared_bytes(zeros));
  Tensor y = ops::map(*g, {in(0), in(0), op(E::kAdd)}, {x}, kF32, {4}, 0, "double");
  g->add_output_stream("y", y);
  g->begin_segment();
  Tensor s = ops::map(*g, {in(0), in(1), op(E::kAdd)}, {acc, y}, kF32, {4}, 0, "add");
  ops::assign(*g, acc, s, "acc/assign");
  std::shared_ptr<Executable> exe = compile(std::move(g));
  ASSERT_EQ(exe->num_segments(), 2u);
  Engine e(exe, 1);
  const std::vector<float> in{1, 2, 3, 4};
  e.write_input(0, reinterpret_cast<const uint8_t*>(in.data()), 16);
  std::vector<float> out(4), a(4);
  e.run_segment(0);  // the output, and nothing added yet
  e.read_output(0, reinterpret_cast<uint8_t*>(out.data()), 16);
  EXPECT_EQ(out, (std::vector<float>{2, 4, 6, 8}));
  e.read_constant("acc", reinterpret_cast<uint8_t*>(a.data()), 16);
  EXPECT_EQ(a, zeros);
  e.run_segment(1);
  e.run_segment(1);  // the second segment alone, again
  e.read_constant("acc", reinterpret_cast<uint8_t*>(a.data()), 16);
  EXPECT_EQ(a, (std::vector<float>{4, 8, 12, 16}));
  EXPECT_NX_ERROR(kInvalidArgument, e.run_segment(2), "2 segment(s)");
}

}  // namespace
