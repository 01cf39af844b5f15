// Checked mode: real programs pass it, and fields or copies that reach
// outside their tile's arena or their variable's slice are caught at load,
// named, before anything runs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "expr_util.h"
#include "neurenix/codelets/map.h"
#include "neurenix/ops/conv.h"
#include "neurenix/ops/gather.h"
#include "neurenix/ops/map.h"
#include "neurenix/ops/matmul.h"
#include "neurenix/ops/pool.h"
#include "neurenix/ops/reduce.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

// Restores an environment variable when it goes out of scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

std::vector<uint8_t> zeros_for(const Engine& e, uint32_t input) { return std::vector<uint8_t>(e.input_bytes(input), 0); }

// Every op on a few tiles of two IPUs: conv with a K split, pooling, matmul
// with a K split, a gather, element-wise maps and a two-stage reduction.
std::shared_ptr<Executable> every_op() {
  auto g = std::make_unique<Graph>(tiny(8, 1, 65536), 1);
  Tensor x = g->add_variable("x", kF32, {1, 16, 6, 6}, VarKind::kInput, 0);
  g->add_input_stream("x", x);
  Tensor w = g->add_variable("w", kF32, {16, 16, 3, 3}, VarKind::kInput, 0);
  g->add_input_stream("w", w);
  ops::ConvOptions co;
  co.kh = co.kw = 3;
  co.pad_top = co.pad_left = co.pad_bottom = co.pad_right = 1;
  co.memory_proportion = 0.02;
  Tensor y = ops::conv(*g, x, w, nullptr, co);
  ops::PoolOptions po;
  po.kh = po.kw = po.sh = po.sw = 2;
  po.out_h = po.out_w = 3;
  Tensor p = ops::pool(*g, y, po);
  Tensor flat{p.var, {1, 16, 9}};
  Tensor m = g->add_variable("m", kF32, {1, 9, 40}, VarKind::kInput, 0);
  g->add_input_stream("m", m);
  ops::MatMulOptions mo;
  mo.memory_proportion = 0.002;
  Tensor z = ops::matmul(*g, flat, m, mo);
  Tensor idx = g->add_variable("idx", kI32, {5}, VarKind::kInput, 0);
  g->add_input_stream("idx", idx);
  Tensor rows = ops::gather_rows(*g, Tensor{z.var, {16, 40}}, idx, 0, "rows");
  Tensor a = ops::map(*g, {in(0), op(E::kTanh)}, {rows}, kF32, rows.shape, 0, "act");
  Tensor s = ops::reduce(*g, a, {0}, ReduceOp::kSum, ReduceFinal::kNone, 1, kF32, 0, "sum");
  g->add_output_stream("s", s);
  return compile(std::move(g));
}

TEST(EngineChecked, RealProgramsPassAndRunAsUnchecked) {
  std::shared_ptr<Executable> exe = every_op();
  ASSERT_TRUE(exe->fits());
  EXPECT_NO_THROW(verify_memory_bounds(*exe));
  Engine checked(exe, EngineOptions{2, true});
  Engine plain(exe, EngineOptions{2, false});
  EXPECT_TRUE(checked.checked());
  EXPECT_FALSE(plain.checked());
  std::vector<std::vector<uint8_t>> outs;
  for (Engine* e : {&checked, &plain}) {
    for (uint32_t i = 0; i < e->num_inputs(); ++i) {
      std::vector<uint8_t> data = zeros_for(*e, i);
      for (size_t b = 0; b < data.size(); b += 4) data[b + 3] = 0x3f;  // 0.5 and the like; small indices
      e->write_input(i, data.data(), data.size());
    }
    e->run();
    outs.emplace_back(e->output_bytes(0));
    e->read_output(0, outs.back().data(), outs.back().size());
  }
  EXPECT_EQ(outs[0], outs[1]);
}

TEST(EngineChecked, TheEnvironmentTurnsItOn) {
  std::shared_ptr<Executable> exe = every_op();
  for (const auto& [value, on] : std::vector<std::pair<const char*, bool>>{
           {"1", true}, {"yes", true}, {"0", false}, {"", false}, {nullptr, false}}) {
    ScopedEnv env("NEURENIX_SIM_CHECKED", value);
    EXPECT_EQ(Engine(exe, 1).checked(), on) << (value ? value : "(unset)");
    EXPECT_TRUE(Engine(exe, EngineOptions{1, true}).checked());
  }
}

// A map over two tiles: 'src' and 'dst' hold 16 float32 each, 8 per tile.
std::shared_ptr<Executable> small_map() {
  auto g = std::make_unique<Graph>(tiny(2), 1);
  Tensor src = g->add_variable("src", kF32, {16}, VarKind::kInput, 0);
  g->map_linearly(src.var, 8);
  g->add_input_stream("src", src);
  Tensor dst = ops::map(*g, {in(0), op(E::kNeg)}, {src}, kF32, {16}, 0, "neg");
  g->add_output_stream("dst", dst);
  return compile(std::move(g));
}

Field& first_field(Executable& exe, size_t field) {
  for (ComputeSet& cs : exe.graph().compute_sets())
    if (!cs.vertices.empty()) return *cs.vertices[0]->all_fields().at(field);
  throw std::runtime_error("no vertex");
}

// A codelet reads its own copy of a field's address, count and pieces
// (FieldRef), taken when compile() ends: a field changed after that is one
// the codelet would not see, even where the field itself is valid (here one
// element shorter, inside its slice), and checked mode says so.
TEST(EngineChecked, AFieldChangedAfterCompileIsCaught) {
  std::shared_ptr<Executable> exe = small_map();
  EXPECT_NO_THROW(Engine(exe, EngineOptions{1, true}));
  Field& f = first_field(*exe, 1);
  f.count -= 1;
  EXPECT_NX_ERROR(kInternal, Engine(exe, EngineOptions{1, true}), "checked mode", "vertex Map #0",
                  "compute set 'neg'", "field changed after the program was compiled");
  f.count += 1;
  EXPECT_NO_THROW(Engine(exe, EngineOptions{1, true})) << "as the codelet reads it again";
}

TEST(EngineChecked, FieldsOutsideTheirSliceAreCaught) {
  // A field shifted off the offset the compiler assigned.
  {
    std::shared_ptr<Executable> exe = small_map();
    Field& f = first_field(*exe, 1);
    const std::string at = std::to_string(f.byte_offset), end = std::to_string(f.byte_offset + 32);
    f.byte_offset += 4;
    EXPECT_NX_ERROR(kInternal, Engine(exe, EngineOptions{1, true}), "checked mode", "vertex Map #0", "compute set 'neg'",
                    "IPU 0 tile", "field 1", "'neg' elements [0, 8) belong at bytes [" + at + ", " + end + ")",
                    "the field points at bytes [" + std::to_string(f.byte_offset) + ", ",
                    "the slice is bytes [" + at + ", " + end + ")");
    EXPECT_NO_THROW(Engine(exe, EngineOptions{1, false})) << "unchecked engines do not look";
  }
  // A field longer than the variable's share of its tile.
  {
    std::shared_ptr<Executable> exe = small_map();
    first_field(*exe, 0).count += 1;
    EXPECT_NX_ERROR(kInternal, Engine(exe, EngineOptions{1, true}), "field 0", "elements [0, 9) of 'src'",
                    "outside its slice on that tile, bytes [0, 32)");
  }
  // Elements past the end of the share, at their would-be offset.
  {
    std::shared_ptr<Executable> exe = small_map();
    Field& f = first_field(*exe, 0);
    f.local = 4;
    f.byte_offset += 16;
    EXPECT_NX_ERROR(kInternal, Engine(exe, EngineOptions{1, true}), "elements [4, 12) of 'src'", "bytes [16, 48)");
  }
  // A field naming another tile's memory.
  {
    std::shared_ptr<Executable> exe = small_map();
    Field& f = first_field(*exe, 0);
    f.tile = f.tile == 0 ? 1 : 0;
    EXPECT_NX_ERROR(kInternal, Engine(exe, EngineOptions{1, true}), "names memory of IPU 0 tile");
  }
  // A field naming a variable that has nothing on the tile.
  {
    std::shared_ptr<Executable> exe = small_map();
    Field& f = first_field(*exe, 0);
    f.var = static_cast<VarId>(exe->graph().num_vars() + 5);
    EXPECT_NX_ERROR(kInternal, Engine(exe, EngineOptions{1, true}), "does not exist");
  }
}

// Two variables of 16 int32 on tiles 0 and 1 and one hand-made copy between
// them (the compiler resolves copies without judging them).
std::shared_ptr<Executable> hand_copy(const Copy& proto) {
  auto g = std::make_unique<Graph>(tiny(2), 1);
  Tensor a = g->add_variable("a", kI32, {16}, VarKind::kInput, 0);
  g->map_to_tile(a.var, 0);
  g->add_input_stream("a", a);
  Tensor b = g->add_variable("b", kI32, {16}, VarKind::kIntermediate, 0);
  g->map_to_tile(b.var, 1);
  uint32_t ex = g->add_exchange("move");
  Copy c = proto;
  c.src = a.var;
  c.src_tile = 0;
  c.dst = b.var;
  c.dst_tile = 1;
  g->exchange(ex).copies.push_back(c);
  g->execute_exchange(ex);
  g->add_output_stream("b", b);
  return compile(std::move(g));
}

Copy pattern(uint64_t src_local, int64_t stride, uint64_t dst_local, uint64_t count, uint64_t outer = 1,
             int64_t src_outer = 0, int64_t dst_outer = 0) {
  return Copy{0,
              0,
              static_cast<uint32_t>(src_local),
              static_cast<int32_t>(stride),
              0,
              0,
              static_cast<uint32_t>(dst_local),
              static_cast<uint32_t>(count),
              static_cast<uint32_t>(outer),
              static_cast<int32_t>(src_outer),
              static_cast<int32_t>(dst_outer)};
}

TEST(EngineChecked, CopiesOutsideTheirSlicesAreCaught) {
  const std::string where = "copy 0 of exchange 'move' from IPU 0 tile 0 to IPU 0 tile 1";
  // Reads past the end of the source.
  EXPECT_NX_ERROR(kInternal, Engine(hand_copy(pattern(10, 1, 0, 8)), EngineOptions{1, true}), where,
                  "reads bytes [40, 72) of the host block but 'a' on IPU 0 tile 0 is bytes [0, 64) there");
  // A negative stride that walks before the start of the source.
  EXPECT_NX_ERROR(kInternal, Engine(hand_copy(pattern(2, -1, 0, 4)), EngineOptions{1, true}), where,
                  "reads bytes [-4, 12)");
  // A strided row whose last element is past the end.
  EXPECT_NX_ERROR(kInternal, Engine(hand_copy(pattern(1, 5, 0, 4)), EngineOptions{1, true}), "reads bytes [4, 68)");
  // A 2-D pattern whose last row lands past the end of the destination.
  EXPECT_NO_THROW(Engine(hand_copy(pattern(0, 1, 0, 4, 3, 4, 6)), EngineOptions{1, true})) << "rows end at element 16";
  EXPECT_NX_ERROR(kInternal, Engine(hand_copy(pattern(0, 1, 0, 4, 3, 4, 7)), EngineOptions{1, true}),
                  "writes bytes [64, 136) of the host block but 'b' on IPU 0 tile 1 is bytes [64, 128) there");
  // Rows that step backwards before the start of the source.
  EXPECT_NX_ERROR(kInternal, Engine(hand_copy(pattern(4, 1, 0, 4, 3, -4, 4)), EngineOptions{1, true}),
                  "reads bytes [-16, 32)");
}

// The compact form the host runs a copy in (Executable::host_copies) must
// be that copy: one moved, lengthened or turned into a pattern is caught.
TEST(EngineChecked, HostCopiesMustBeTheirByteCopies) {
  const std::string where = "copy 0 of exchange 'move' from IPU 0 tile 0 to IPU 0 tile 1";
  EXPECT_NO_THROW(Engine(hand_copy(pattern(0, 1, 0, 16)), EngineOptions{1, true}));
  for (int how = 0; how < 4; ++how) {
    std::shared_ptr<Executable> exe = hand_copy(pattern(0, 1, 0, 16));
    auto& host = const_cast<std::vector<std::vector<Executable::HostCopy>>&>(exe->host_copies())[0][0];
    if (how == 0) host.src += 4;
    if (how == 1) host.dst_byte += 4;
    if (how == 2) host.bytes -= 4;
    if (how == 3) host.src = Executable::kPatternCopy;
    EXPECT_NX_ERROR(kInternal, Engine(exe, EngineOptions{1, true}), where, "is run by the host as another copy");
  }
}

// Rows read one after the other and written a step apart are run from
// their 16-byte form: the result is the copy's, and a form that moves them
// elsewhere, more or fewer of them, is caught.
TEST(EngineChecked, RowsCopiesRunAndMustBeTheirByteCopies) {
  // 2 rows of 4 int32 from a[0, 8) to b[0, 4) and b[8, 12).
  const Copy rows = pattern(0, 1, 0, 4, 2, 4, 8);
  {
    std::shared_ptr<Executable> exe = hand_copy(rows);
    const Executable::HostCopy& h = exe->host_copies()[0][0];
    ASSERT_TRUE(h.rows());
    ASSERT_NE(h.src, Executable::kPatternCopy);
    EXPECT_EQ(h.outer(), 2u);
    EXPECT_EQ(h.row_bytes(), 16u);
    EXPECT_EQ(h.dst_outer(), 32u);
    Engine e(exe, EngineOptions{1, true});
    std::vector<int32_t> a(16), b(16, -1);
    for (int i = 0; i < 16; ++i) a[i] = 100 + i;
    e.write_input(0, reinterpret_cast<const uint8_t*>(a.data()), 64);
    e.run();
    e.read_output(0, reinterpret_cast<uint8_t*>(b.data()), 64);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(b[i], 100 + i);
      EXPECT_EQ(b[8 + i], 104 + i);
      EXPECT_EQ(b[4 + i], 0);  // between the rows and after them: the zeros tile memory starts with
      EXPECT_EQ(b[12 + i], 0);
    }
  }
  const std::string where = "copy 0 of exchange 'move' from IPU 0 tile 0 to IPU 0 tile 1";
  for (int how = 0; how < 5; ++how) {
    std::shared_ptr<Executable> exe = hand_copy(rows);
    auto& host = const_cast<std::vector<std::vector<Executable::HostCopy>>&>(exe->host_copies())[0][0];
    if (how == 0) host.src += uint64_t{4} << Executable::HostCopy::kRowsShift;  // a wider step
    if (how == 1) host.bytes += 1u << Executable::HostCopy::kRowBits;          // a third row
    if (how == 2) host.bytes -= 4;                                             // shorter rows
    if (how == 3) host.src &= Executable::HostCopy::kSrcMask;                  // one run instead
    if (how == 4) host.src = Executable::kPatternCopy;                         // the slower path
    EXPECT_NX_ERROR(kInternal, Engine(exe, EngineOptions{1, true}), where, "is run by the host as another copy");
  }
}

TEST(EngineChecked, CopiesInsideTheirSlicesPassAndRun) {
  // A transposing 2-D copy (4 rows of 4, read down the columns) and a
  // broadcast of one element, both in bounds: checked mode lets them run.
  for (const Copy& c : {pattern(0, 4, 0, 4, 4, 1, 4), pattern(15, 0, 0, 16)}) {
    std::shared_ptr<Executable> exe = hand_copy(c);
    Engine e(exe, EngineOptions{1, true});
    std::vector<int32_t> a(16);
    for (int i = 0; i < 16; ++i) a[i] = i;
    e.write_input(0, reinterpret_cast<const uint8_t*>(a.data()), 64);
    e.run();
    std::vector<int32_t> b(16);
    e.read_output(0, reinterpret_cast<uint8_t*>(b.data()), 64);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(b[i], c.src_stride == 0 ? 15 : (i % 4) * 4 + i / 4) << i;
  }
}

}  // namespace
