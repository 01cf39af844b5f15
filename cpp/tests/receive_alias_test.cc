// Receive aliases: a vertex reading data an exchange delivered reads it at
// the sender only while nothing can change it there, and the results are
// those of performing every copy.
#include <gtest/gtest.h>

#include <vector>

#include "neurenix/exchange.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

// out[i] = in[i] + add, in float32: the smallest reader and writer.
class AddVertex : public Vertex {
 public:
  AddVertex(Field in, Field out, float add) : in_(in), out_(out), add_(add) {
    in_.access = Access::kRead;
    out_.access = Access::kWrite;
    tile = out.tile;
  }
  const char* name() const override { return "TestAdd"; }
  void compute(uint8_t* mem) const override {
    const float* a = reinterpret_cast<const float*>(mem + in_.address);
    float* o = reinterpret_cast<float*>(mem + out_.address);
    for (uint64_t i = 0; i < out_.count; ++i) o[i] = a[i] + add_;
  }
  uint64_t cycles(const TargetSpec&) const override { return out_.count; }

 protected:
  void list_fields(std::vector<Field*>& out) override { out = {&in_, &out_}; }

  Field in_, out_;
  float add_;
};

// The same, reading its input piecewise (load_field_floats).
class PiecewiseAddVertex : public AddVertex {
 public:
  PiecewiseAddVertex(Field in, Field out, float add) : AddVertex(in, out, add) { in_.piecewise = true; }
  void compute(uint8_t* mem) const override {
    std::vector<float> a(in_.count);
    load_field_floats(mem, in_, DeviceType::kFloat32, 0, in_.count, a.data());
    float* o = reinterpret_cast<float*>(mem + out_.address);
    for (uint64_t i = 0; i < out_.count; ++i) o[i] = a[i] + add_;
  }
};

constexpr uint64_t kN = 8;

Field whole(const Tensor& t, uint32_t tile) { return Field{t.var, tile, 0, t.numel()}; }

// A float32 variable of n elements, all on `tile`.
Tensor on_tile(Graph& g, const std::string& name, uint64_t n, uint32_t tile, VarKind kind = VarKind::kIntermediate) {
  Tensor t = g.add_variable(name, kF32, {n}, kind, 0);
  g.map_to_tile(t.var, tile);
  return t;
}

// Where the sender's data changes after the exchange, if at all.
enum class Overwrite { kNever, kInBetween, kWithTheReader };

// x (host, tile 0) -> a = x + 1 (tile 0) -> exchange a to b (tile 1) ->
// c = b + 0 (tile 1), with `a` overwritten by a = x + 100 as asked.
std::shared_ptr<Executable> pipeline(Overwrite overwrite) {
  auto g = std::make_unique<Graph>(tiny(2), 1);
  Tensor x = on_tile(*g, "x", kN, 0, VarKind::kInput);
  g->add_input_stream("x", x);
  Tensor a = on_tile(*g, "a", kN, 0);
  Tensor b = on_tile(*g, "b", kN, 1);
  Tensor c = on_tile(*g, "c", kN, 1);
  const uint32_t first = g->add_compute_set("first");
  g->add_vertex(first, std::make_unique<AddVertex>(whole(x, 0), whole(a, 0), 1.0f));
  g->execute(first);
  const uint32_t ex = g->add_exchange("send");
  copy_view(*g, ex, View::of(a), View::of(b));
  g->execute_exchange(ex);
  auto overwrite_a = [&](uint32_t cs) { g->add_vertex(cs, std::make_unique<AddVertex>(whole(x, 0), whole(a, 0), 100.0f)); };
  if (overwrite == Overwrite::kInBetween) {
    const uint32_t mid = g->add_compute_set("overwrite");
    overwrite_a(mid);
    g->execute(mid);
  }
  const uint32_t read = g->add_compute_set("read");
  g->add_vertex(read, std::make_unique<AddVertex>(whole(b, 1), whole(c, 1), 0.0f));
  if (overwrite == Overwrite::kWithTheReader) overwrite_a(read);
  g->execute(read);
  g->add_output_stream("c", c);
  g->add_output_stream("a", a);
  std::shared_ptr<Executable> exe = compile(std::move(g));
  check_host_layout(*exe);
  return exe;
}

std::vector<float> run(const std::shared_ptr<Executable>& exe, bool checked = false) {
  EngineOptions o;
  o.threads = 1;  // tiles in order: a reader that aliased would see the overwrite
  o.checked = checked;
  Engine e(exe, o);
  std::vector<float> x(kN);
  for (uint64_t i = 0; i < kN; ++i) x[i] = 0.5f * static_cast<float>(i) - 1.0f;
  e.write_input(0, reinterpret_cast<const uint8_t*>(x.data()), kN * 4);
  e.run();
  std::vector<float> c(kN);
  e.read_output(0, reinterpret_cast<uint8_t*>(c.data()), kN * 4);
  for (uint64_t i = 0; i < kN; ++i) EXPECT_EQ(c[i], x[i] + 1.0f) << "element " << i;
  return c;
}

TEST(ReceiveAlias, AReaderOfUnchangedDataReadsTheSender) {
  auto exe = pipeline(Overwrite::kNever);
  ASSERT_EQ(exe->aliased_copies().size(), 1u);
  EXPECT_EQ(exe->aliased_copies()[0].size(), exe->graph().exchanges()[0].copies.size());
  EXPECT_TRUE(exe->byte_copies()[0].empty());
  EXPECT_EQ(exe->aliased_bytes(), kN * 4);
  EXPECT_EQ(exe->aliased_fields(), 1u);
  const Field& f = *exe->graph().compute_sets()[1].vertices[0]->fields()[0];
  EXPECT_EQ(f.alias_tile, 0u);
  EXPECT_NE(f.address, static_cast<int64_t>(f.byte_offset));
  run(exe);
  run(exe, /*checked=*/true);
  // The device still moves the bytes: the estimate is the plan's.
  EXPECT_EQ(exe->step_costs()[2].bytes, kN * 4);
}

TEST(ReceiveAlias, DataOverwrittenAfterTheExchangeIsCopied) {
  for (Overwrite o : {Overwrite::kInBetween, Overwrite::kWithTheReader}) {
    auto exe = pipeline(o);
    EXPECT_TRUE(exe->aliased_copies()[0].empty());
    EXPECT_EQ(exe->aliased_bytes(), 0u);
    EXPECT_EQ(exe->aliased_fields(), 0u);
    run(exe);
  }
}

TEST(ReceiveAlias, CheckedModeRejectsAnAliasOutsideTheSendersSlice) {
  auto exe = pipeline(Overwrite::kNever);
  Field& f = *exe->graph().compute_sets()[1].vertices[0]->all_fields()[0];
  f.address += 4;  // one element past the sender's variable at its end
  EngineOptions o;
  o.checked = true;
  EXPECT_NX_ERROR(kInternal, Engine e(exe, o), "field 0 aliases bytes [", "of the host block but 'a' on IPU 0 tile 0 is bytes [");
}

// x (host, tiles 0 and 1, half each) -> a = x + 1 on each -> exchange a to
// b (tile 2) -> c = b + 0 (tile 2) read piecewise; `overwrite_tile` (0, 1 or
// none) then overwrites its half of `a` in the reader's step.
std::shared_ptr<Executable> two_senders(int overwrite_tile, bool piecewise) {
  auto g = std::make_unique<Graph>(tiny(3), 1);
  const uint64_t h = kN / 2;
  Tensor x = g->add_variable("x", kF32, {kN}, VarKind::kInput, 0);
  g->set_mapping(x.var, {TileInterval{0, h, 0, 0}, TileInterval{h, kN, 1, 0}});
  g->add_input_stream("x", x);
  Tensor a = g->add_variable("a", kF32, {kN}, VarKind::kIntermediate, 0);
  g->set_mapping(a.var, {TileInterval{0, h, 0, 0}, TileInterval{h, kN, 1, 0}});
  Tensor b = on_tile(*g, "b", kN, 2);
  Tensor c = on_tile(*g, "c", kN, 2);
  const uint32_t first = g->add_compute_set("first");
  for (uint32_t t = 0; t < 2; ++t)
    g->add_vertex(first, std::make_unique<AddVertex>(Field{x.var, t, 0, h}, Field{a.var, t, 0, h}, 1.0f));
  g->execute(first);
  const uint32_t ex = g->add_exchange("send");
  copy_view(*g, ex, View::of(a), View::of(b));
  g->execute_exchange(ex);
  const uint32_t read = g->add_compute_set("read");
  if (piecewise)
    g->add_vertex(read, std::make_unique<PiecewiseAddVertex>(whole(b, 2), whole(c, 2), 0.0f));
  else
    g->add_vertex(read, std::make_unique<AddVertex>(whole(b, 2), whole(c, 2), 0.0f));
  if (overwrite_tile >= 0) {
    const uint32_t t = static_cast<uint32_t>(overwrite_tile);
    g->add_vertex(read, std::make_unique<AddVertex>(Field{x.var, t, 0, h}, Field{a.var, t, 0, h}, 100.0f));
  }
  g->execute(read);
  g->add_output_stream("c", c);
  g->add_output_stream("a", a);
  std::shared_ptr<Executable> exe = compile(std::move(g));
  check_host_layout(*exe);
  return exe;
}

TEST(ReceiveAlias, APiecewiseReaderAliasesEachSenderThatKeepsItsData) {
  // Both senders unchanged: no copy performed, each half read at its
  // sender; the two shares of `a` lie back to back in the host block, so
  // the two pieces are one, read from sender 0's share on into sender 1's.
  auto both = two_senders(-1, true);
  const Field& f = *both->graph().compute_sets()[1].vertices[0]->fields()[0];
  ASSERT_EQ(f.pieces.size(), 1u);
  EXPECT_EQ(f.pieces[0].begin, 0u);
  EXPECT_EQ(f.pieces[0].tile, 0u);
  EXPECT_EQ(both->aliased_bytes(), kN * 4);
  EXPECT_TRUE(both->byte_copies()[0].empty());
  run(both, /*checked=*/true);
  // Sender 0 overwrites its half with the reader: that half is copied and
  // read in the field's own bytes; sender 1's is still aliased. The reader
  // runs after tile 0's overwrite (one thread, tiles in order).
  for (int t : {0, 1}) {
    auto one = two_senders(t, true);
    const Field& g = *one->graph().compute_sets()[1].vertices[0]->fields()[0];
    ASSERT_EQ(g.pieces.size(), 2u);
    EXPECT_EQ(g.pieces[t].tile, UINT32_MAX);
    EXPECT_EQ(g.pieces[1 - t].tile, static_cast<uint32_t>(1 - t));
    EXPECT_EQ(one->aliased_bytes(), kN / 2 * 4);
    run(one, true);
  }
  // A reader that needs its field whole cannot alias two senders.
  auto whole_field = two_senders(-1, false);
  EXPECT_EQ(whole_field->aliased_bytes(), 0u);
  EXPECT_TRUE(whole_field->graph().compute_sets()[1].vertices[0]->fields()[0]->pieces.empty());
  run(whole_field);
}

// Checked mode follows a piece from its sender's share into the next ones
// where they lie back to back, and no further.
TEST(ReceiveAlias, CheckedModeFollowsAPieceIntoTheNextSharesOnly) {
  auto both = two_senders(-1, true);
  Field& f = *both->graph().compute_sets()[1].vertices[0]->all_fields()[0];
  ASSERT_EQ(f.pieces.size(), 1u);
  std::vector<Field::Piece> moved(f.pieces.begin(), f.pieces.end());
  moved[0].address += 4;  // one element past the last share of 'a'
  f.pieces = moved;
  EngineOptions o;
  o.checked = true;
  EXPECT_NX_ERROR(kInternal, Engine e(both, o), "field 0 aliases bytes [", "of the host block but 'a' on IPU 0 tile 0 is bytes [");
}

// A copy in rows (a 2-D pattern) whose second row alone is read: the reader
// cannot alias it and the copy is performed, rows and all.
TEST(ReceiveAlias, ARowOfATwoDimensionalCopyIsDelivered) {
  auto g = std::make_unique<Graph>(tiny(2), 1);
  Tensor x = on_tile(*g, "x", kN, 0, VarKind::kInput);
  g->add_input_stream("x", x);
  Tensor a = on_tile(*g, "a", kN, 0);
  Tensor b = on_tile(*g, "b", 2 * kN, 1);
  Tensor c = on_tile(*g, "c", kN / 2, 1);
  const uint32_t first = g->add_compute_set("first");
  g->add_vertex(first, std::make_unique<AddVertex>(whole(x, 0), whole(a, 0), 1.0f));
  g->execute(first);
  // a's two halves to b[0:4] and b[8:12].
  const uint32_t ex = g->add_exchange("send");
  const int64_t h = kN / 2;
  copy_view(*g, ex, View{a.var, 0, {2, kN / 2}, {h, 1}}, View{b.var, 0, {2, kN / 2}, {static_cast<int64_t>(kN), 1}});
  g->execute_exchange(ex);
  const uint32_t read = g->add_compute_set("read");
  g->add_vertex(read, std::make_unique<AddVertex>(Field{b.var, 1, kN, kN / 2}, whole(c, 1), 0.0f));
  g->execute(read);
  g->add_output_stream("c", c);
  std::shared_ptr<Executable> exe = compile(std::move(g));
  check_host_layout(*exe);
  ASSERT_EQ(exe->graph().exchanges()[0].copies.size(), 1u);  // one copy, in two rows
  EXPECT_EQ(exe->graph().exchanges()[0].copies[0].outer, 2u);
  EXPECT_EQ(exe->aliased_bytes(), 0u);
  Engine e(exe, 1);
  std::vector<float> in(kN), out(kN / 2);
  for (uint64_t i = 0; i < kN; ++i) in[i] = static_cast<float>(i);
  e.write_input(0, reinterpret_cast<const uint8_t*>(in.data()), kN * 4);
  e.run();
  e.read_output(0, reinterpret_cast<uint8_t*>(out.data()), out.size() * 4);
  for (uint64_t i = 0; i < kN / 2; ++i) EXPECT_EQ(out[i], in[kN / 2 + i] + 1.0f) << i;
}

}  // namespace
