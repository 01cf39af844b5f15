// Fused exchanges: the host runs an exchange and the compute set after it
// tile by tile, and the results stay those of the two BSP steps in turn.
#include <gtest/gtest.h>

#include <vector>

#include "neurenix/exchange.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

// out[i] = in[i] + 1, in int32.
class IncrementVertex : public Vertex {
 public:
  IncrementVertex(Field in, Field out) : in_(in), out_(out) {
    in_.access = Access::kRead;
    out_.access = Access::kWrite;
    tile = out.tile;
  }
  const char* name() const override { return "TestIncrement"; }
  void compute(uint8_t* mem) const override {
    const int32_t* a = reinterpret_cast<const int32_t*>(mem + in_.address);
    int32_t* o = reinterpret_cast<int32_t*>(mem + out_.address);
    for (uint64_t i = 0; i < out_.count; ++i) o[i] = a[i] + 1;
  }
  uint64_t cycles(const TargetSpec&) const override { return out_.count; }

 protected:
  void list_fields(std::vector<Field*>& out) override { out = {&in_, &out_}; }

 private:
  Field in_, out_;
};

constexpr uint32_t kTiles = 4;
constexpr uint64_t kPer = 3;  // elements per tile

size_t step_of_exchange(const Executable& exe, uint32_t exchange) {
  for (size_t s = 0; s < exe.program().size(); ++s)
    if (exe.program()[s].kind == StepKind::kExchange && exe.program()[s].index == exchange) return s;
  ADD_FAILURE() << "exchange not in the program";
  return 0;
}

// b[tile t] = a[tile t + 1 (mod 4)], then on tiles below `overwriting`
// a = b + 1 (in place: the exchange's source, which the copies to the
// tile before read) and on the others c = b + 1. Streams a and c out.
struct Rotation {
  std::shared_ptr<Executable> exe;
  size_t exchange_step = 0;
};

Rotation rotation(uint32_t overwriting) {
  auto g = std::make_unique<Graph>(tiny(kTiles), 1);
  Tensor a = g->add_variable("a", kI32, {kTiles * kPer}, VarKind::kInput, 0);
  Tensor b = g->add_variable("b", kI32, {kTiles * kPer}, VarKind::kIntermediate, 0);
  Tensor c = g->add_variable("c", kI32, {kTiles * kPer}, VarKind::kIntermediate, 0);
  for (Tensor t : {a, b, c}) g->map_linearly(t.var, kPer);
  g->add_input_stream("a", a);
  const uint32_t ex = g->add_exchange("rotate");
  for (uint32_t t = 0; t < kTiles; ++t) {
    const uint32_t from = (t + 1) % kTiles;
    copy_view(*g, ex, View{a.var, static_cast<int64_t>(from * kPer), {kPer}, {1}},
              View{b.var, static_cast<int64_t>(t * kPer), {kPer}, {1}});
  }
  g->execute_exchange(ex);
  const uint32_t cs = g->add_compute_set("increment");
  for (uint32_t t = 0; t < kTiles; ++t) {
    const Field in{b.var, t, 0, kPer};
    const Field out{t < overwriting ? a.var : c.var, t, 0, kPer};
    g->add_vertex(cs, std::make_unique<IncrementVertex>(in, out));
  }
  g->execute(cs);
  g->add_output_stream("a", a);
  if (overwriting < kTiles) g->add_output_stream("c", c);
  Rotation r;
  r.exe = compile(std::move(g));
  r.exchange_step = step_of_exchange(*r.exe, ex);
  return r;
}

std::vector<std::vector<int32_t>> run(const Rotation& r, unsigned threads, const std::vector<int32_t>& a) {
  Engine e(r.exe, EngineOptions{threads, false});
  e.write_input(0, reinterpret_cast<const uint8_t*>(a.data()), a.size() * 4);
  e.run();
  std::vector<std::vector<int32_t>> out(e.num_outputs(), std::vector<int32_t>(kTiles * kPer));
  for (uint32_t i = 0; i < out.size(); ++i) e.read_output(i, reinterpret_cast<uint8_t*>(out[i].data()), kTiles * kPer * 4);
  return out;
}

// Tiles 0 and 1 overwrite what the copies to tiles 3 and 0 read: they run
// their vertices only after every copy; tiles 2 and 3 run theirs at once.
TEST(FusedExchange, ATileOverwritingAnotherTilesSourceRunsAfterEveryCopy) {
  const Rotation r = rotation(2);
  std::vector<int32_t> a(kTiles * kPer);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>(10 * i);
  // The BSP result: every copy reads the a of before the compute set.
  std::vector<int32_t> want_a = a, want_c(kTiles * kPer, 0);
  for (uint32_t t = 0; t < kTiles; ++t)
    for (uint64_t i = 0; i < kPer; ++i) {
      const int32_t b = a[((t + 1) % kTiles) * kPer + i];
      (t < 2 ? want_a : want_c)[t * kPer + i] = b + 1;
    }
  for (unsigned threads : {1u, 2u, 4u})
    for (int repeat = 0; repeat < 3; ++repeat) {
      const auto out = run(r, threads, a);
      EXPECT_EQ(out[0], want_a) << threads << " thread(s)";
      // c's tiles 0 and 1 are never written: compare the written part.
      EXPECT_EQ(std::vector<int32_t>(out[1].begin() + 2 * kPer, out[1].end()),
                std::vector<int32_t>(want_c.begin() + 2 * kPer, want_c.end()))
          << threads << " thread(s)";
    }
  const auto& fused = r.exe->fused(r.exchange_step);
  const auto& late = r.exe->fused_late(r.exchange_step);
  ASSERT_EQ(fused.size(), kTiles);
  ASSERT_EQ(late.size(), 2u);
  EXPECT_EQ(late[0].tile, 0u);
  EXPECT_EQ(late[1].tile, 1u);
  for (uint32_t t = 0; t < kTiles; ++t) {
    EXPECT_EQ(fused[t].tile, t);
    EXPECT_EQ(fused[t].vertices.size(), t < 2 ? 0u : 1u) << t;
  }
  // Tiles 0 and 3 read an a that is overwritten: the host copies theirs
  // (tiles 1 and 2 may read theirs where it was sent from).
  EXPECT_EQ(fused[0].end - fused[0].begin, 1u);
  EXPECT_EQ(fused[3].end - fused[3].begin, 1u);
}

// Nothing overwritten: every tile runs its vertices right after its copies.
TEST(FusedExchange, IndependentStepsFuseWholly) {
  const Rotation r = rotation(0);
  EXPECT_EQ(r.exe->fused(r.exchange_step).size(), kTiles);
  EXPECT_TRUE(r.exe->fused_late(r.exchange_step).empty());
  std::vector<int32_t> a(kTiles * kPer);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>(7 * i + 1);
  const auto out = run(r, 2, a);
  EXPECT_EQ(out[0], a);
  for (uint32_t t = 0; t < kTiles; ++t)
    for (uint64_t i = 0; i < kPer; ++i) EXPECT_EQ(out[1][t * kPer + i], a[((t + 1) % kTiles) * kPer + i] + 1);
}

// Every tile overwrites a source: nothing would run early, and the pair is
// not fused at all.
TEST(FusedExchange, NotFusedWhenEveryTileMustWait) {
  const Rotation r = rotation(kTiles);
  EXPECT_TRUE(r.exe->fused(r.exchange_step).empty());
  std::vector<int32_t> a(kTiles * kPer);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>(i);
  const auto out = run(r, 1, a);
  for (uint32_t t = 0; t < kTiles; ++t)
    for (uint64_t i = 0; i < kPer; ++i) EXPECT_EQ(out[0][t * kPer + i], a[((t + 1) % kTiles) * kPer + i] + 1);
}

// A staged exchange (it reads what it writes) keeps its own step.
TEST(FusedExchange, StagedExchangesAreNotFused) {
  auto g = std::make_unique<Graph>(tiny(2), 1);
  Tensor a = g->add_variable("a", kI32, {4}, VarKind::kInput, 0);
  Tensor b = g->add_variable("b", kI32, {4}, VarKind::kInput, 0);
  Tensor c = g->add_variable("c", kI32, {4}, VarKind::kIntermediate, 0);
  g->map_to_tile(a.var, 0);
  g->map_to_tile(b.var, 1);
  g->map_to_tile(c.var, 1);
  g->add_input_stream("a", a);
  g->add_input_stream("b", b);
  const uint32_t ex = g->add_exchange("swap");
  copy_view(*g, ex, View::of(a), View::of(b));
  copy_view(*g, ex, View::of(b), View::of(a));
  g->execute_exchange(ex);
  const uint32_t cs = g->add_compute_set("increment");
  g->add_vertex(cs, std::make_unique<IncrementVertex>(Field{b.var, 1, 0, 4}, Field{c.var, 1, 0, 4}));
  g->execute(cs);
  g->add_output_stream("c", c);
  std::shared_ptr<Executable> exe;
  auto out = run_graph(std::move(g), {to_bytes(std::vector<int32_t>{1, 2, 3, 4}), to_bytes(std::vector<int32_t>{5, 6, 7, 8})},
                       2, &exe);
  EXPECT_TRUE(exe->staged(ex));
  EXPECT_TRUE(exe->fused(step_of_exchange(*exe, ex)).empty());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(from_bytes<int32_t>(out[0]), (std::vector<int32_t>{2, 3, 4, 5}));
}

}  // namespace
