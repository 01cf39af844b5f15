// CopyList: an exchange's copies, on the heap while small, then a mapping of
// its own grown in place with its new pages faulted in on a helper thread.
// Every list is checked element by element against a std::vector built from
// the same copies.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "neurenix/graph.h"

namespace {

using neurenix::Copy;
using neurenix::CopyList;

// A copy whose every field depends on i (no two alike).
Copy nth(size_t i) {
  const auto u = static_cast<uint32_t>(i);
  return Copy{u, u ^ 0x5a5a5a5au, u * 3 + 1, -static_cast<int32_t>(u % 1000), u + 7, u * 5, u ^ 0xffffu, u + 1,
              u % 9 + 1, static_cast<int32_t>(u % 77), -static_cast<int32_t>(u % 55)};
}

bool same(const Copy& a, const Copy& b) { return std::memcmp(&a, &b, sizeof(Copy)) == 0; }

size_t page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// Whether the page holding `p` is resident, within two seconds.
bool becomes_resident(const void* p) {
  const auto start = std::chrono::steady_clock::now();
  void* at = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) / page() * page());
  for (;;) {
    unsigned char in = 0;
    if (mincore(at, page(), &in) == 0 && (in & 1)) return true;
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(2)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void expect_holds(const CopyList& list, const std::vector<Copy>& want) {
  ASSERT_EQ(list.size(), want.size());
  ASSERT_EQ(list.empty(), want.empty());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_TRUE(same(list[i], want[i])) << "copy " << i;
  size_t i = 0;
  for (const Copy& c : list) ASSERT_TRUE(same(c, want[i++])) << "copy " << i - 1 << " in a range for";
  ASSERT_EQ(i, want.size());
}

// Past kMappedBytes several times over: the heap, the switch to a mapping,
// then growth of the mapping (mremap may move it).
constexpr size_t kMany = 8 * CopyList::kMappedBytes / sizeof(Copy) + 123;

TEST(CopyList, GrowsFromTheHeapIntoAMappingKeepingEveryCopy) {
  CopyList list;
  std::vector<Copy> want;
  bool was_mapped = false;
  for (size_t i = 0; i < kMany; ++i) {
    list.push_back(nth(i));
    want.push_back(nth(i));
    if (i + 1 == 64) {
      EXPECT_FALSE(list.mapped()) << "a small list is on the heap";
    }
    was_mapped = was_mapped || list.mapped();
  }
  EXPECT_TRUE(was_mapped);
  EXPECT_GE(list.capacity(), list.size());
  expect_holds(list, want);
  EXPECT_TRUE(same(list.back(), want.back()));
  EXPECT_TRUE(same(list.at(17), want[17]));
  EXPECT_THROW(list.at(list.size()), std::out_of_range);
}

TEST(CopyList, CopiesAndMovesAreWholeAndIndependent) {
  for (size_t n : {size_t{0}, size_t{5}, kMany}) {
    CopyList a;
    std::vector<Copy> want;
    for (size_t i = 0; i < n; ++i) {
      a.push_back(nth(i));
      want.push_back(nth(i));
    }
    CopyList b(a);
    expect_holds(b, want);
    b.push_back(nth(n));  // b grows alone
    expect_holds(a, want);
    CopyList c(std::move(b));
    EXPECT_EQ(b.size(), 0u);  // NOLINT(bugprone-use-after-move): a moved-from list is empty
    want.push_back(nth(n));
    expect_holds(c, want);
    CopyList d;
    d.push_back(nth(999));
    d = c;  // copy-assigned over a list of its own
    expect_holds(d, want);
    d = std::move(c);
    expect_holds(d, want);
    CopyList& self = d;
    d = self;  // assigned to itself
    expect_holds(d, want);
  }
}

TEST(CopyList, NewTailsAreFaultedInWithoutBeingWritten) {
  if (!neurenix::copies_prefaulted()) GTEST_SKIP() << "this kernel cannot populate pages (Linux 5.14 on)";
  CopyList list;
  while (!list.mapped()) list.push_back(nth(list.size()));
  // The last page of the mapping: nothing has written it.
  const Copy* last = list.begin() + list.capacity() - 1;
  EXPECT_TRUE(becomes_resident(last)) << "the helper thread faults the tail in";
}

TEST(CopyList, ShrunkListsGrowAgain) {
  CopyList list;
  std::vector<Copy> want;
  for (size_t i = 0; i < kMany; ++i) {
    list.push_back(nth(i));
    want.push_back(nth(i));
  }
  ASSERT_TRUE(list.mapped());
  const size_t before = list.capacity();
  list.shrink_to_fit();
  EXPECT_LE(list.capacity(), before);
  EXPECT_LT(list.capacity() - list.size(), page() / sizeof(Copy) + 1) << "at most a page past the last copy";
  expect_holds(list, want);
  // Still a mapping, grown again by remapping (not as a heap block).
  for (size_t i = kMany; i < kMany + 5000; ++i) {
    list.push_back(nth(i));
    want.push_back(nth(i));
  }
  EXPECT_TRUE(list.mapped());
  expect_holds(list, want);

  CopyList small;
  small.push_back(nth(1));
  small.shrink_to_fit();  // nothing to give back on the heap
  expect_holds(small, {nth(1)});
}

TEST(CopyList, AForkedChildGrowsListsOfItsOwn) {
  // The helper thread does not cross fork(): the child starts its own, which
  // faults in its lists' tails, and its lists hold what it wrote.
  const bool prefaulted = neurenix::copies_prefaulted();  // the parent's helper runs
  CopyList parent;
  for (size_t i = 0; i < kMany; ++i) parent.push_back(nth(i));
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    CopyList child;
    for (size_t i = 0; i < kMany; ++i) child.push_back(nth(i + 1));
    bool ok = child.size() == kMany && parent.size() == kMany;
    for (size_t i = 0; ok && i < kMany; ++i) ok = same(child[i], nth(i + 1)) && same(parent[i], nth(i));
    if (ok && prefaulted) {
      CopyList tail;
      while (!tail.mapped()) tail.push_back(nth(tail.size()));
      ok = becomes_resident(tail.begin() + tail.capacity() - 1);
    }
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
