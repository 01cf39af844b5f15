// Huge-page memory: aligned and zeroed mappings, and packed objects that
// never overlap and stay valid however the others around them are freed.
#include "neurenix/huge_pages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "neurenix/graph.h"

namespace {

using namespace neurenix;

TEST(HugePages, MappingsAreAlignedZeroedAndWritable) {
  for (size_t bytes : {size_t{1}, kHugePageBytes - 1, kHugePageBytes, 3 * kHugePageBytes + 5}) {
    auto* p = static_cast<uint8_t*>(map_huge_pages(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u) << bytes;
    EXPECT_TRUE(std::all_of(p, p + bytes, [](uint8_t b) { return b == 0; })) << bytes;
    std::memset(p, 0xab, bytes);
    EXPECT_EQ(p[bytes - 1], 0xab);
    release_huge_pages(p, bytes);
  }
}

// Objects of many sizes over many chunks, each filled with its own byte:
// any overlap, or a chunk handed back while an object in it lives, shows as
// a wrong byte (or a fault).
TEST(HugePages, PackedObjectsNeverOverlapAndOutliveTheirNeighbours) {
  std::mt19937 rng(7);
  struct Obj {
    uint8_t* p;
    size_t bytes;
    uint8_t fill;
  };
  std::vector<Obj> live;
  auto make = [&](size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const size_t bytes = 1 + rng() % 700;
      auto* p = static_cast<uint8_t*>(allocate_packed(bytes));
      ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u);
      const auto fill = static_cast<uint8_t>(rng());
      std::memset(p, fill, bytes);
      live.push_back({p, bytes, fill});
    }
  };
  auto intact = [&] {
    for (const Obj& o : live)
      if (!std::all_of(o.p, o.p + o.bytes, [&](uint8_t b) { return b == o.fill; })) return false;
    return true;
  };
  make(40000);  // about 14 MB: several chunks
  EXPECT_TRUE(intact());
  // Free most of them in random order (emptying whole chunks), then refill.
  std::shuffle(live.begin(), live.end(), rng);
  for (size_t i = 0; i < 36000; ++i) free_packed(live[i].p, live[i].bytes);
  live.erase(live.begin(), live.begin() + 36000);
  EXPECT_TRUE(intact());
  make(20000);
  EXPECT_TRUE(intact());
  // Objects too big to pack come from the ordinary heap and go back there.
  auto* big = static_cast<uint8_t*>(allocate_packed(kHugePageBytes));
  std::memset(big, 1, kHugePageBytes);
  EXPECT_TRUE(intact());
  free_packed(big, kHugePageBytes);
  for (const Obj& o : live) free_packed(o.p, o.bytes);
}

class Tiny : public Vertex {
 public:
  explicit Tiny(uint32_t t) { tile = t; }
  const char* name() const override { return "Tiny"; }
  void compute(uint8_t*) const override {}
  uint64_t cycles(const TargetSpec&) const override { return tile; }

 protected:
  void list_fields(std::vector<Field*>&) override {}
};

// Vertices are packed: consecutive ones share a chunk, and each keeps its
// own state.
TEST(HugePages, VerticesArePacked) {
  std::vector<std::unique_ptr<Vertex>> vs;
  for (uint32_t i = 0; i < 1000; ++i) vs.push_back(std::make_unique<Tiny>(i));
  size_t same_chunk = 0;
  for (size_t i = 1; i < vs.size(); ++i)
    same_chunk += reinterpret_cast<uintptr_t>(vs[i].get()) / kHugePageBytes ==
                  reinterpret_cast<uintptr_t>(vs[i - 1].get()) / kHugePageBytes;
  EXPECT_GE(same_chunk, vs.size() - 2);
  for (uint32_t i = 0; i < vs.size(); ++i) EXPECT_EQ(vs[i]->tile, i);
}

}  // namespace
