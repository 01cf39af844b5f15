// Shadowed temporaries: a temporary that a fused exchange writes and only the
// next compute step reads is kept by the host in a region its range of
// tiles reuses; the results stay those of the same program with the bytes
// in the tiles' arenas, under every thread count and floating-point option.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "neurenix/exchange.h"
#include "neurenix/half.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

// out[i] = 1 / in[i], float32 in, stored as binary16 (rounded
// stochastically when the run asks for it).
class ReciprocalVertex : public Vertex {
 public:
  ReciprocalVertex(Field in, Field out) : in_(in), out_(out) {
    in_.access = Access::kRead;
    out_.access = Access::kWrite;
    tile = out.tile;
  }
  const char* name() const override { return "TestReciprocal"; }
  void compute(uint8_t* mem) const override {
    const float* a = reinterpret_cast<const float*>(mem + in_.address);
    std::vector<float> r(in_.count);
    for (uint64_t i = 0; i < in_.count; ++i) r[i] = 1.0f / a[i];
    float_to_half_n(r.data(), reinterpret_cast<half_bits*>(mem + out_.address), r.size());
  }
  uint64_t cycles(const TargetSpec&) const override { return out_.count; }

 protected:
  void list_fields(std::vector<Field*>& out) override { out = {&in_, &out_}; }

 private:
  Field in_, out_;
};

constexpr uint64_t kPer = 6;  // elements per tile

// What ruled a variable out, in the variants of the program below.
enum class Variant { kShadowed, kIntermediate, kReadTwice, kCopiedOn };

// b on tile t gathers the first half of a's elements on tile t + 1 and the
// second half of those on tile t + 2, backwards (two senders: no receive
// alias; a strided copy), and the same exchange gives an intermediate k on
// tile t the first half of a's elements on tile t + 3 and the second half of
// those on tile t + 4, its copies to each tile between b's; then c = 1 / b
// and k2 = 1 / k on every tile. b is a temporary (kShadowed), or what keeps
// it in the arenas: an intermediate variable, a second compute set reading
// it, or a later exchange copying it on (to d).
struct Program {
  std::shared_ptr<Executable> exe;
  size_t exchange_step = 0;
  VarId b = 0;
};

Program program(uint32_t tiles, Variant variant) {
  auto g = std::make_unique<Graph>(tiny(tiles), 1);
  const uint64_t n = tiles * kPer;
  Tensor a = g->add_variable("a", kF32, {n}, VarKind::kInput, 0);
  Tensor b = g->add_variable("b", kF32, {n}, variant == Variant::kIntermediate ? VarKind::kIntermediate : VarKind::kTemporary, 0);
  Tensor c = g->add_variable("c", kF16, {n}, VarKind::kIntermediate, 0);
  Tensor d = g->add_variable("d", kF16, {n}, VarKind::kIntermediate, 0);
  Tensor k = g->add_variable("k", kF32, {n}, VarKind::kIntermediate, 0);
  Tensor k2 = g->add_variable("k2", kF16, {n}, VarKind::kIntermediate, 0);
  for (Tensor t : {a, b, c, d, k, k2}) g->map_linearly(t.var, kPer);
  g->add_input_stream("a", a);
  const uint32_t ex = g->add_exchange("gather");
  for (uint32_t t = 0; t < tiles; ++t)
    for (uint32_t half = 0; half < 2; ++half) {
      const int64_t to = static_cast<int64_t>(t * kPer + half * kPer / 2);
      const uint64_t from_b = (t + 1 + half) % tiles * kPer + (half ? kPer - 1 : 0);
      copy_view(*g, ex, View{a.var, static_cast<int64_t>(from_b), {kPer / 2}, {half ? -1 : 1}},
                View{b.var, to, {kPer / 2}, {1}});
      const uint64_t from_k = (t + 3 + half) % tiles * kPer + half * kPer / 2;
      copy_view(*g, ex, View{a.var, static_cast<int64_t>(from_k), {kPer / 2}, {1}}, View{k.var, to, {kPer / 2}, {1}});
    }
  g->execute_exchange(ex);
  const uint32_t cs = g->add_compute_set("reciprocal");
  for (uint32_t t = 0; t < tiles; ++t) {
    g->add_vertex(cs, std::make_unique<ReciprocalVertex>(Field{b.var, t, 0, kPer}, Field{c.var, t, 0, kPer}));
    g->add_vertex(cs, std::make_unique<ReciprocalVertex>(Field{k.var, t, 0, kPer}, Field{k2.var, t, 0, kPer}));
  }
  g->execute(cs);
  if (variant == Variant::kReadTwice) {
    const uint32_t again = g->add_compute_set("again");
    for (uint32_t t = 0; t < tiles; ++t)
      g->add_vertex(again, std::make_unique<ReciprocalVertex>(Field{b.var, t, 0, kPer}, Field{d.var, t, 0, kPer}));
    g->execute(again);
    g->add_output_stream("d", d);
  }
  if (variant == Variant::kCopiedOn) {
    Tensor e = g->add_variable("e", kF32, {n}, VarKind::kIntermediate, 0);
    g->map_linearly(e.var, kPer);
    const uint32_t on = g->add_exchange("on");
    copy_view(*g, on, View::of(b), View::of(e));
    g->execute_exchange(on);
    const uint32_t again = g->add_compute_set("again");
    for (uint32_t t = 0; t < tiles; ++t)
      g->add_vertex(again, std::make_unique<ReciprocalVertex>(Field{e.var, t, 0, kPer}, Field{d.var, t, 0, kPer}));
    g->execute(again);
    g->add_output_stream("d", d);
  }
  // a stays live to the end: c does not take its bytes, which copies to
  // other tiles read (that would hold the vertices back, fused_late).
  g->add_output_stream("a", a);
  g->add_output_stream("k2", k2);
  g->add_output_stream("c", c);
  Program p;
  p.exe = compile(std::move(g));
  check_host_layout(*p.exe);
  p.b = b.var;
  for (size_t s = 0; s < p.exe->program().size(); ++s)
    if (p.exe->program()[s].kind == StepKind::kExchange && p.exe->program()[s].index == ex) p.exchange_step = s;
  return p;
}

// Every output's bytes: d when there is one, a, k2, c.
std::vector<std::vector<uint8_t>> run(const Program& p, EngineOptions o, const std::vector<float>& a) {
  Engine e(p.exe, o);
  e.write_input(0, reinterpret_cast<const uint8_t*>(a.data()), a.size() * 4);
  e.run();
  return read_outputs(e);
}

// 1 / x rounded to half, as bytes.
std::vector<uint8_t> reciprocals(const std::vector<float>& x) {
  std::vector<uint8_t> out(x.size() * 2);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t h = ref_double_to_half(static_cast<double>(1.0f / x[i]));
    std::memcpy(&out[i * 2], &h, 2);
  }
  return out;
}

std::vector<float> inputs(uint32_t tiles, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.5f, 3.0f);
  std::vector<float> a(tiles * kPer);
  for (float& x : a) x = u(rng);
  return a;
}

// Fewer tiles than ranges, and ranges of several tiles that take turns on
// their region.
TEST(ShadowTemporaries, ResultsAreThoseOfTheArenasUnderEveryThreadCountAndOption) {
  for (uint32_t tiles : {5u, 8u, 130u}) {
    const Program shadowed = program(tiles, Variant::kShadowed);
    const Program plain = program(tiles, Variant::kIntermediate);
    ASSERT_TRUE(shadowed.exe->shadowed(shadowed.exchange_step)) << tiles;
    ASSERT_FALSE(plain.exe->shadowed(plain.exchange_step)) << tiles;
    // Every tile's copies of b are shadowed, those of k not; one region
    // holds a tile's b.
    for (const auto& ft : shadowed.exe->fused(shadowed.exchange_step)) {
      EXPECT_EQ(ft.shadow_end - ft.begin, 2u) << ft.tile;
      EXPECT_EQ(ft.end - ft.shadow_end, 2u) << ft.tile;
    }
    EXPECT_EQ(shadowed.exe->shadow_region_bytes(), 64u);  // 6 floats, a cache line
    EXPECT_EQ(shadowed.exe->shadow_offset(0) % 64, 0u);
    EXPECT_LE(shadowed.exe->shadow_block_bytes(), (Executable::kShadowRanges + 1) * 64u);
    for (const auto& v : shadowed.exe->graph().compute_sets()[0].vertices)
      for (const Field* f : v->fields()) EXPECT_EQ(f->shadow, f->var == shadowed.b);
    const std::vector<float> a = inputs(tiles, tiles);
    // The reference: b[t] from tiles t + 1 and t + 2 (backwards), k[t] from
    // tiles t + 3 and t + 4.
    std::vector<float> b(tiles * kPer), k(tiles * kPer);
    for (uint32_t t = 0; t < tiles; ++t)
      for (uint64_t i = 0; i < kPer; ++i) {
        const uint64_t half = i < kPer / 2 ? 0 : 1;
        b[t * kPer + i] = a[(t + 1 + half) % tiles * kPer + (half ? kPer - 1 - (i - kPer / 2) : i)];
        k[t * kPer + i] = a[(t + 3 + half) % tiles * kPer + i];
      }
    const std::vector<uint8_t> want_c = reciprocals(b), want_k2 = reciprocals(k);
    for (unsigned threads : {1u, 2u, 3u, 5u}) {
      for (bool checked : {false, true}) {
        const auto out = run(shadowed, EngineOptions{threads, checked}, a);
        EXPECT_EQ(out[2], want_c) << tiles << " tiles, " << threads << " thread(s)";
        EXPECT_EQ(out[1], want_k2) << tiles << " tiles, " << threads << " thread(s)";
      }
      // Stochastic rounding draws per tile in the same order either way.
      EngineOptions sr{threads, false};
      sr.stochastic_rounding = true;
      sr.seed = 7;
      const auto got = run(shadowed, sr, a);
      EXPECT_EQ(got, run(plain, sr, a)) << tiles << " tiles, " << threads << " thread(s)";
      EXPECT_NE(got[2], want_c) << "stochastic rounding left every value at its nearest";
    }
  }
}

// A division by zero in a shadowed step stops the run naming its tile, as it
// would with the bytes in the arenas.
TEST(ShadowTemporaries, FloatingPointExceptionsNameTheTile) {
  const uint32_t tiles = 130;
  const Program shadowed = program(tiles, Variant::kShadowed);
  const Program plain = program(tiles, Variant::kIntermediate);
  std::vector<float> a = inputs(tiles, 3);
  a[77 * kPer + 1] = 0.0f;  // first half of tile 77: b on tile 76, k on tile 74
  a[99 * kPer + 4] = 0.0f;  // second half of tile 99: b on tile 97
  for (unsigned threads : {1u, 2u}) {
    EngineOptions o{threads, false};
    o.fp_exceptions = true;
    // The lowest tile, as the compute step alone reports it.
    EXPECT_NX_ERROR(kFloatingPoint, run(shadowed, o, a), "division by zero", "compute set 'reciprocal'", "tile 74;");
    EXPECT_NX_ERROR(kFloatingPoint, run(plain, o, a), "division by zero", "compute set 'reciprocal'", "tile 74;");
  }
}

// What keeps a temporary in the arenas: a second reader, or a later copy.
TEST(ShadowTemporaries, OnlyTemporariesOneStepReadsAreShadowed) {
  for (Variant v : {Variant::kReadTwice, Variant::kCopiedOn}) {
    const Program p = program(8, v);
    EXPECT_FALSE(p.exe->shadowed(p.exchange_step));
    EXPECT_EQ(p.exe->shadow_block_bytes(), 0u);
    const std::vector<float> a = inputs(8, 5);
    const auto got = run(p, EngineOptions{2, true}, a);
    const Program ref = program(8, Variant::kShadowed);
    EXPECT_EQ(got.back(), run(ref, EngineOptions{2, true}, a).back());
  }
}

// Checked mode verifies where a shadowed field is read and that the
// shadowed copies land in its region.
TEST(ShadowTemporaries, CheckedModeCatchesAShadowedFieldOutOfPlace) {
  auto find = [](Executable& exe, VarId b) -> Field* {
    for (auto& v : exe.graph().compute_sets()[0].vertices)
      for (Field* f : v->all_fields())
        if (f->var == b) return f;
    return nullptr;
  };
  {
    Program p = program(8, Variant::kShadowed);
    EXPECT_NO_THROW(verify_memory_bounds(*p.exe));
    Field* f = find(*p.exe, p.b);
    ASSERT_NE(f, nullptr);
    f->address += 4;
    EXPECT_NX_ERROR(kInternal, verify_memory_bounds(*p.exe), "not where its copies put it");
  }
  {
    Program p = program(8, Variant::kShadowed);
    Field* f = find(*p.exe, p.b);
    f->shadow = false;  // its address still in the region
    EXPECT_NX_ERROR(kInternal, verify_memory_bounds(*p.exe), "are at 24 of the host block but the vertex reads them at");
  }
  {
    Program p = program(8, Variant::kIntermediate);
    Field* f = find(*p.exe, p.b);
    f->shadow = true;
    EXPECT_NX_ERROR(kInternal, verify_memory_bounds(*p.exe), "outside a shadowed step");
  }
}

}  // namespace
