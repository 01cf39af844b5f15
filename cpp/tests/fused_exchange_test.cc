// Fused exchanges: the host runs an exchange and the compute set after it
// tile by tile, and the results stay those of the two BSP steps in turn.
#include <gtest/gtest.h>

#include <random>
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

// b[tile t] = a[tile t + 1 (mod 4)] (read backwards when `reversed`), then
// on tiles below `overwriting` a = b + 1 (in place: the exchange's source,
// which the copies to the tile before read; only a's first element on each
// of those tiles when `reversed`, the byte a reversed copy reads last, below
// where it starts) and on the others c = b + 1. Streams a and c out.
struct Rotation {
  std::shared_ptr<Executable> exe;
  size_t exchange_step = 0;
};

Rotation rotation(uint32_t overwriting, bool reversed = false) {
  auto g = std::make_unique<Graph>(tiny(kTiles), 1);
  Tensor a = g->add_variable("a", kI32, {kTiles * kPer}, VarKind::kInput, 0);
  Tensor b = g->add_variable("b", kI32, {kTiles * kPer}, VarKind::kIntermediate, 0);
  Tensor c = g->add_variable("c", kI32, {kTiles * kPer}, VarKind::kIntermediate, 0);
  for (Tensor t : {a, b, c}) g->map_linearly(t.var, kPer);
  g->add_input_stream("a", a);
  const uint32_t ex = g->add_exchange("rotate");
  for (uint32_t t = 0; t < kTiles; ++t) {
    const uint32_t from = (t + 1) % kTiles;
    const View src = reversed ? View{a.var, static_cast<int64_t>(from * kPer + kPer - 1), {kPer}, {-1}}
                              : View{a.var, static_cast<int64_t>(from * kPer), {kPer}, {1}};
    copy_view(*g, ex, src, View{b.var, static_cast<int64_t>(t * kPer), {kPer}, {1}});
  }
  g->execute_exchange(ex);
  const uint32_t cs = g->add_compute_set("increment");
  for (uint32_t t = 0; t < kTiles; ++t) {
    const uint64_t n = t < overwriting && reversed ? 1 : kPer;
    g->add_vertex(cs, std::make_unique<IncrementVertex>(Field{b.var, t, 0, n},
                                                        Field{t < overwriting ? a.var : c.var, t, 0, n}));
  }
  g->execute(cs);
  g->add_output_stream("a", a);
  if (overwriting < kTiles) g->add_output_stream("c", c);
  Rotation r;
  r.exe = compile(std::move(g));
  check_host_layout(*r.exe);
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

// The same with each copy reading its source backwards, and tiles 0 and 1
// overwriting only the first element of their a.
TEST(FusedExchange, ReversedSourcesCountWhollyAsRead) {
  const Rotation r = rotation(2, true);
  std::vector<int32_t> in(kTiles * kPer);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(10 * i + 1);
  std::vector<int32_t> want_a = in, want_c(kTiles * kPer, 0);
  for (uint32_t t = 0; t < kTiles; ++t)
    for (uint64_t i = 0; i < kPer; ++i) {
      const int32_t bv = in[((t + 1) % kTiles) * kPer + kPer - 1 - i];
      if (t >= 2) want_c[t * kPer + i] = bv + 1;
      else if (i == 0) want_a[t * kPer] = bv + 1;
    }
  for (unsigned threads : {1u, 2u}) {
    const auto out = run(r, threads, in);
    EXPECT_EQ(out[0], want_a) << threads << " thread(s)";
    EXPECT_EQ(std::vector<int32_t>(out[1].begin() + 2 * kPer, out[1].end()),
              std::vector<int32_t>(want_c.begin() + 2 * kPer, want_c.end()))
        << threads << " thread(s)";
  }
  ASSERT_EQ(r.exe->fused_late(r.exchange_step).size(), 2u);
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

// out[i] = a hash of its inputs (each read cyclically) and, when it is
// read-write, of its own value: any input or ordering change shows.
class MixVertex : public Vertex {
 public:
  MixVertex(uint32_t t, std::vector<Field> ins, Field out, Access access, int32_t k)
      : ins_(std::move(ins)), out_(out), k_(k) {
    for (auto& f : ins_) f.access = Access::kRead;
    out_.access = access;
    tile = t;
  }
  const char* name() const override { return "TestMix"; }
  void compute(uint8_t* mem) const override {
    int32_t* o = reinterpret_cast<int32_t*>(mem + out_.address);
    for (uint64_t i = 0; i < out_.count; ++i) {
      int32_t acc = out_.access == Access::kReadWrite ? o[i] * 3 : k_;
      for (const auto& f : ins_) acc = acc * 31 + reinterpret_cast<const int32_t*>(mem + f.address)[i % f.count];
      o[i] = acc;
    }
  }
  uint64_t cycles(const TargetSpec&) const override { return out_.count; }

 protected:
  void list_fields(std::vector<Field*>& out) override {
    for (auto& f : ins_) out.push_back(&f);
    out.push_back(&out_);
  }

 private:
  std::vector<Field> ins_;
  Field out_;
  int32_t k_;
};

// Random programs on 2-5 tiles of 1-2 IPUs: variables scattered over tiles
// (so the allocator reuses dead variables' bytes), exchanges with forward,
// reversed, strided and broadcast sources, within tiles and across IPUs,
// compute sets writing and updating in place, receive aliases, sometimes two
// segments. Each runs fused (the default) and with stochastic rounding on,
// which runs every step on its own and leaves int32 data as it is: the
// outputs must match on 1, 2 and 3 threads.
TEST(FusedExchange, RandomProgramsGiveTheResultsOfStepsRunApart) {
  size_t fused_pairs = 0, late_tiles = 0, runs = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    std::mt19937_64 rng(seed);
    auto R = [&](uint64_t n) { return n ? rng() % n : 0; };
    const uint32_t tiles = 2 + static_cast<uint32_t>(R(4)), ipus = 1 + static_cast<uint32_t>(R(2));
    auto g = std::make_unique<Graph>(tiny(tiles, ipus), ipus);
    struct Var {
      VarId id;
      uint64_t n;
      uint32_t ipu;
    };
    std::vector<Var> vars;
    std::vector<bool> written;
    auto new_var = [&](VarKind kind) {
      const uint64_t n = 1 + R(24);
      const uint32_t ipu = static_cast<uint32_t>(R(ipus));
      Tensor t = g->add_variable("v" + std::to_string(vars.size()), kI32, {n}, kind, ipu);
      std::vector<TileInterval> ivs;
      for (uint64_t at = 0; at < n;) {
        const uint64_t len = 1 + R(n - at);
        ivs.push_back(TileInterval{at, at + len, ipu * tiles + static_cast<uint32_t>(R(tiles)), 0});
        at += len;
      }
      g->set_mapping(t.var, ivs);
      vars.push_back({t.var, n, ipu});
      written.push_back(kind == VarKind::kInput);
      return vars.size() - 1;
    };
    std::vector<size_t> inputs;
    for (int i = 0; i < 3; ++i) {
      inputs.push_back(new_var(VarKind::kInput));
      g->add_input_stream("in" + std::to_string(i), Tensor{vars.back().id, {vars.back().n}});
    }
    auto pick_written = [&]() -> int64_t {
      std::vector<size_t> w;
      for (size_t i = 0; i < vars.size(); ++i)
        if (written[i]) w.push_back(i);
      if (w.empty()) return -1;
      return static_cast<int64_t>(R(2) ? w[w.size() - 1 - R(std::min<size_t>(w.size(), 4))] : w[R(w.size())]);
    };
    auto pick_any = [&]() -> size_t { return R(3) == 0 ? new_var(VarKind::kIntermediate) : R(vars.size()); };
    const int nsteps = 4 + static_cast<int>(R(12));
    std::vector<bool> written_before_segment;
    bool segmented = false;
    for (int s = 0; s < nsteps; ++s) {
      if (s == nsteps / 2 && R(2)) {
        g->begin_segment();
        written_before_segment = written;
        segmented = true;
      }
      if (R(2)) {
        const uint32_t ex = g->add_exchange("e" + std::to_string(s));
        for (int c = 0, copies = 1 + static_cast<int>(R(4)); c < copies; ++c) {
          const int64_t si = pick_written();
          const size_t di = R(2) ? new_var(VarKind::kIntermediate) : pick_any();
          if (si < 0) continue;
          const Var& sv = vars[static_cast<size_t>(si)];
          const Var& dv = vars[di];
          const uint64_t m = 1 + R(std::min(sv.n, dv.n));
          View src{sv.id, static_cast<int64_t>(R(sv.n - m + 1)), {m}, {1}};
          switch (R(4)) {
            case 1:  // reversed
              src.offset = static_cast<int64_t>(m - 1 + R(sv.n - m + 1));
              src.strides = {-1};
              break;
            case 2:  // one element repeated
              src.offset = static_cast<int64_t>(R(sv.n));
              src.strides = {0};
              break;
            case 3:  // every other element, backwards
              if (m > 1 && (m - 1) * 2 < sv.n) {
                src.offset = static_cast<int64_t>((m - 1) * 2 + R(sv.n - (m - 1) * 2));
                src.strides = {-2};
              }
              break;
            default: break;
          }
          View dst{dv.id, static_cast<int64_t>(R(dv.n - m + 1)), {m}, {1}};
          if (R(3) == 0) {
            dst.offset = static_cast<int64_t>(m - 1 + R(dv.n - m + 1));
            dst.strides = {-1};
          }
          copy_view(*g, ex, src, dst);
          written[di] = true;
        }
        g->execute_exchange(ex);
      } else {
        const uint32_t cs = g->add_compute_set("c" + std::to_string(s));
        for (int k = 0, nv = 1 + static_cast<int>(R(6)); k < nv; ++k) {
          const size_t oi = R(2) ? new_var(VarKind::kIntermediate) : pick_any();
          const Variable& ov = g->var(vars[oi].id);
          const TileShare& sh = ov.tiles[R(ov.tiles.size())];
          const uint64_t count = 1 + R(sh.count);
          const Field out{vars[oi].id, sh.tile, R(sh.count - count + 1), count};
          std::vector<Field> ins;
          for (int j = 0, nin = static_cast<int>(R(3)); j < nin; ++j) {
            std::vector<std::pair<size_t, const TileShare*>> on_tile;
            for (size_t i = 0; i < vars.size(); ++i)
              if (written[i])
                for (const TileShare& s2 : g->var(vars[i].id).tiles)
                  if (s2.tile == sh.tile) on_tile.push_back({i, &s2});
            if (on_tile.empty()) break;
            const auto [ii, s2] = on_tile[R(on_tile.size())];
            const uint64_t c2 = 1 + R(s2->count);
            ins.push_back(Field{vars[ii].id, sh.tile, R(s2->count - c2 + 1), c2});
          }
          const Access access = written[oi] && R(3) == 0 ? Access::kReadWrite : Access::kWrite;
          g->add_vertex(cs, std::make_unique<MixVertex>(sh.tile, ins, out, access, static_cast<int32_t>(R(100))));
          written[oi] = true;
        }
        g->execute(cs);
      }
    }
    for (size_t i = 0; i < vars.size(); ++i)
      if ((segmented ? i < written_before_segment.size() && written_before_segment[i] : written[i]) && R(2))
        g->add_output_stream("o" + std::to_string(i), Tensor{vars[i].id, {vars[i].n}});
    std::shared_ptr<Executable> exe = compile(std::move(g));
    ASSERT_TRUE(exe->fits()) << "seed " << seed;
    check_host_layout(*exe);
    for (size_t s = 0; s < exe->program().size(); ++s)
      if (!exe->fused(s).empty()) {
        ++fused_pairs;
        late_tiles += exe->fused_late(s).size();
      }
    std::vector<std::vector<int32_t>> in(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      in[i].resize(vars[inputs[i]].n);
      for (auto& x : in[i]) x = static_cast<int32_t>(R(1000));
    }
    auto run = [&](bool apart, unsigned threads) {
      EngineOptions o;
      o.threads = threads;
      o.checked = true;
      o.stochastic_rounding = apart;
      Engine e(exe, o);
      for (size_t i = 0; i < in.size(); ++i)
        e.write_input(static_cast<uint32_t>(i), reinterpret_cast<const uint8_t*>(in[i].data()), in[i].size() * 4);
      e.run();
      EXPECT_EQ(e.last_run().steps, exe->program().size()) << "seed " << seed;
      std::vector<std::vector<uint8_t>> out(e.num_outputs());
      for (size_t i = 0; i < out.size(); ++i) {
        out[i].resize(e.output_bytes(static_cast<uint32_t>(i)));
        e.read_output(static_cast<uint32_t>(i), out[i].data(), out[i].size());
      }
      return out;
    };
    const auto apart = run(true, 1);
    for (unsigned threads : {1u, 2u, 3u}) EXPECT_EQ(run(false, threads), apart) << "seed " << seed << ", " << threads << " thread(s)";
    ++runs;
  }
  // The programs did exercise the fused path, deferred tiles included.
  EXPECT_EQ(runs, 300u);
  EXPECT_GT(fused_pairs, 100u);
  EXPECT_GT(late_tiles, 10u);
}

}  // namespace
