// Benchmark of the host's memory, not of the simulator: the rate at which two
// threads copy, each its half of a source into its half of a destination,
// as the bytes they touch grow from what their caches hold to what only the
// host's memory does. A simulated run touches the tiles' data and what
// describes the program (vertex objects, copy descriptors): the more of
// both, the further down this curve it runs.
//
//   cmake -S cpp -B build/cpp && cmake --build build/cpp --target neurenix_footprint_bench
//   build/cpp/neurenix_footprint_bench
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

int main() {
  std::printf("%-14s %12s\n", "touched (MiB)", "copy GB/s");
  for (size_t mib : {1, 2, 4, 8, 12, 16, 24, 32, 48, 128}) {
    const size_t half = (mib << 20) / 2;  // source and destination
    std::vector<uint8_t> src(half, 1), dst(half, 0);
    // Each pass copies every byte once; enough passes for ~0.5 GB a repetition.
    const int passes = static_cast<int>(std::max<size_t>(2, (512u << 20) / half));
    double best = 1e9;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      std::thread workers[2];
      for (int w = 0; w < 2; ++w)
        workers[w] = std::thread([&, w] {
          const size_t n = half / 2, at = w * n;
          for (int p = 0; p < passes; ++p) std::memcpy(dst.data() + at, src.data() + at, n);
        });
      for (auto& t : workers) t.join();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (dst[half / 3] != 1) return 1;
    std::printf("%-14zu %12.1f\n", mib, static_cast<double>(half) * passes / best / 1e9);
  }
  return 0;
}
