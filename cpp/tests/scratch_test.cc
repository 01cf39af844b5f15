// A codelet's thread scratch (codelets/scratch.h): one object per scratch
// type and host thread, the same one at every call on that thread.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "../src/codelets/scratch.h"

namespace {

struct ScratchA {
  std::vector<float> buffer;
};
struct ScratchB {
  std::vector<float> buffer;
};

}  // namespace

TEST(ThreadScratch, OnePerTypeAndThread) {
  using neurenix::thread_scratch;
  ScratchA& a = thread_scratch<ScratchA>();
  a.buffer.assign(3, 1.0f);
  EXPECT_EQ(&thread_scratch<ScratchA>(), &a) << "the same thread, the same object";
  EXPECT_EQ(thread_scratch<ScratchA>().buffer.size(), 3u) << "kept from call to call";
  EXPECT_NE(static_cast<void*>(&thread_scratch<ScratchB>()), static_cast<void*>(&a)) << "a type, an object";
  const ScratchA* other = nullptr;
  size_t other_size = 0;
  std::thread t([&] {
    other = &thread_scratch<ScratchA>();
    other_size = other->buffer.size();
  });
  t.join();
  EXPECT_NE(other, &a) << "another thread, another object";
  EXPECT_EQ(other_size, 0u) << "another thread's starts empty";
}
