// Benchmark of the host's memory, not of the simulator: the time to write
// and then read one variable whose shares lie one per tile arena (as the
// engine lays the tiles' memories out, each share at the same offset of its
// tile's arena) against the same bytes with the shares side by side. Two
// threads, each over its half of the tiles in order, as the engine's home
// tiles run; the caches are flushed before each pass pair.
//
//   cmake -S cpp -B build/cpp && cmake --build build/cpp --target neurenix_arena_layout_bench
//   build/cpp/neurenix_arena_layout_bench
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace {

constexpr size_t kTiles = 1472;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs passes on two threads kept alive between them (a thread started per
// pass costs more than the small passes themselves): the caller takes the
// second half of the tiles, a worker the first, both spinning in between.
class TwoThreads {
 public:
  TwoThreads() : worker_([this] { loop(); }) {}
  ~TwoThreads() {
    stop_ = true;
    gen_.fetch_add(1, std::memory_order_release);
    worker_.join();
  }
  // fn(tile) for every tile; the wall time.
  template <class Fn>
  double run(Fn fn) {
    fn_ = [&fn](size_t t) { fn(t); };
    done_.store(0, std::memory_order_relaxed);
    const auto t0 = std::chrono::steady_clock::now();
    gen_.fetch_add(1, std::memory_order_release);
    for (size_t t = kTiles / 2; t < kTiles; ++t) fn(t);
    while (done_.load(std::memory_order_acquire) == 0) {
    }
    return seconds_since(t0);
  }

 private:
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g;
      while ((g = gen_.load(std::memory_order_acquire)) == seen) {
      }
      seen = g;
      if (stop_) return;
      for (size_t t = 0; t < kTiles / 2; ++t) fn_(t);
      done_.store(1, std::memory_order_release);
    }
  }
  std::function<void(size_t)> fn_;
  std::atomic<uint64_t> gen_{0};
  std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
  std::thread worker_;
};

}  // namespace

int main() {
  const size_t kMaxShare = 8192;
  // Arena sizes met in the models: SqueezeNet b1 (278 tiles of 26,368 bytes,
  // the commonest), ResNet-50 b1 (103,104), and 256 KiB.
  const std::vector<size_t> spacings = {26368, 103104, 256 * 1024};
  const std::vector<size_t> shares = {256, 512, 2048, 8192};
  std::vector<uint8_t> by_tile(kTiles * spacings.back() + 4096, 1);
  std::vector<uint8_t> side_by_side(kTiles * kMaxShare, 1);
  std::vector<uint8_t> flush(64u << 20, 1);
  TwoThreads threads;
  volatile uint32_t sink = 0;
  std::printf("%-10s %-24s %10s %10s %10s\n", "share", "layout", "write ms", "read ms", "read GB/s");
  for (size_t spacing : spacings)
    for (size_t share : shares)
      for (int layout = 0; layout < 2; ++layout) {
        if (layout == 1 && spacing != spacings.front()) continue;  // the same for every spacing
        uint8_t* const base = layout == 0 ? by_tile.data() : side_by_side.data();
        const size_t step = layout == 0 ? spacing : share;
        double write = 1e9, read = 1e9;
        for (int rep = 0; rep < 15; ++rep) {
          for (size_t i = 0; i < flush.size(); i += 64) flush[i]++;
          write = std::min(write, threads.run([&](size_t t) {
                    auto* p = reinterpret_cast<uint32_t*>(base + t * step);
                    for (size_t i = 0; i < share / 4; ++i) p[i] = static_cast<uint32_t>(i + t);
                  }));
          read = std::min(read, threads.run([&](size_t t) {
                   const auto* p = reinterpret_cast<const uint32_t*>(base + t * step);
                   uint32_t x = 0;
                   for (size_t i = 0; i < share / 4; ++i) x ^= p[i];
                   if (x == 0x9e3779b9u) sink = x;
                 }));
        }
        char where[32];
        if (layout == 0) std::snprintf(where, sizeof where, "by tile, %zu B apart", spacing);
        else std::snprintf(where, sizeof where, "side by side");
        std::printf("%-10zu %-24s %10.3f %10.3f %10.1f\n", share, where, write * 1e3, read * 1e3,
                    static_cast<double>(share * kTiles) / read / 1e9);
      }
  return 0;
}
