// What the product benchmarks share: a product's shape and the best time of
// a call, taken the same way in each (hot in the caches).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace neurenix_bench {

struct ProductShape {
  uint32_t m, n, k;  // C[m x n] = A[m x k] . B[k x n]
  const char* from;  // which model's tile share it is
};

// The best of seven timings of `calls` calls of fn, in seconds a call.
template <class Fn>
double best_seconds(Fn fn, int calls = 20000) {
  double best = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) {
      fn();
      asm volatile("" ::: "memory");
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls);
  }
  return best;
}

}  // namespace neurenix_bench
