// Internal: the engine's host threads (engine.cc).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "neurenix/error.h"

namespace neurenix {

// A fixed pool: parallel_for hands out indices through atomic counters; the
// calling thread works too. Indices can be given homes: thread j first works
// through its own range, then helps with the others' (the engine gives each
// thread an equal share of each step's tiles, the same share in steps over
// the same tiles, so a tile's memory stays in the same core's cache from
// step to step), or be grouped in units each run whole by
// one thread (parallel_for_claimed: the tiles of a shadow region). BSP steps
// come in quick succession, so workers
// spin briefly for the next step before sleeping, and the caller spins for
// the stragglers: a sleep/wake per step would cost more than small steps.
// A worker joins a step only while the step is open (the gate): the caller,
// once no index is left to take, closes it and waits only for the workers
// that joined (they may still run theirs), not for one still waking up
// (waking a sleeping thread can take half a millisecond on a virtual
// machine).
// An engine whose program takes turns with others on the same cores
// (EngineOptions::shares_cores) parks its workers at the end of a run: they
// sleep at once instead of spinning for a step that does not come.
class ThreadPool {
 public:
  explicit ThreadPool(unsigned n) {
    for (unsigned i = 1; i < n; ++i) workers_.emplace_back([this, i] { loop(i); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_.store(true);
      generation_.fetch_add(1);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  size_t size() const { return workers_.size() + 1; }
  // Workers waiting for a step sleep instead of spinning until the next
  // parallel_for.
  void park() { parked_.store(true, std::memory_order_release); }

  // `home`: none, or size() + 1 ascending boundaries from 0 to n: thread j
  // first works through indices [home[j], home[j + 1]), then helps with the
  // other threads' ranges. Every index runs exactly once either way.
  void parallel_for(size_t n, const std::function<void(size_t)>& fn, const size_t* home = nullptr) {
    if (size() > kMaxRanges) home = nullptr;
    run(n, fn, home, home ? size() : 1, false);
  }
  // `units` ranges of indices, `bounds` their units + 1 ascending
  // boundaries from 0 to n: each unit is run whole, in order, by the one
  // thread that claims it. Thread j claims units from the j-th of size()
  // equal shares of the indices on, one at a time, then those the others
  // have not claimed yet (the engine's
  // shadowed steps: a unit's tiles share one host region,
  // Executable::shadowed).
  // (More than kMaxRanges threads share kMaxRanges ranges of units.)
  void parallel_for_claimed(size_t n, const std::function<void(size_t)>& fn, const uint32_t* bounds, size_t units) {
    NX_CHECK(units >= 1, "claimed units of no indices");
    if (workers_.empty() || n <= 1) {
      for (size_t i = 0; i < n; ++i) fn(i);
      return;
    }
    units_ = bounds;
    const size_t ranges = std::min(size(), kMaxRanges);
    // Each thread's home units hold about as many indices as the others'
    // (a step over part of the tiles leaves many units empty).
    size_t home[kMaxRanges + 1];
    home[0] = 0;
    for (size_t j = 1; j < ranges; ++j)
      home[j] = std::max<size_t>(home[j - 1], static_cast<size_t>(std::lower_bound(bounds, bounds + units, n * j / ranges) - bounds));
    home[ranges] = units;
    run(units, fn, home, ranges, true);
  }
  static constexpr size_t kMaxRanges = 64;

 private:
  void run(size_t n, const std::function<void(size_t)>& fn, const size_t* bounds, size_t ranges, bool claimed) {
    if (n == 0) return;
    if (!claimed && (workers_.empty() || n == 1)) {
      for (size_t i = 0; i < n; ++i) fn(i);
      return;
    }
    fn_ = &fn;
    error_ = nullptr;
    ranges_ = ranges;
    claimed_ = claimed;
    for (size_t j = 0; j < ranges_; ++j) {
      range_[j].next.store(bounds ? bounds[j] : 0, std::memory_order_relaxed);
      range_[j].end = bounds ? bounds[j + 1] : n;
    }
    parked_.store(false, std::memory_order_relaxed);
    // Only this thread (and the destructor) moves the generation.
    const uint64_t next = generation_.load(std::memory_order_relaxed) + 1;
    gate_.store(gate_tag(next), std::memory_order_release);
    {
      std::lock_guard<std::mutex> l(mu_);
      generation_.store(next, std::memory_order_release);
    }
    if (sleepers_.load(std::memory_order_acquire) > 0) cv_.notify_all();
    work(0);
    gate_.fetch_or(kClosed, std::memory_order_acq_rel);
    for (int spin = 0; (gate_.load(std::memory_order_acquire) & kInside) != 0; ++spin) {
      if (spin < (1 << 16)) {
        pause();
      } else {
        std::this_thread::yield();
      }
    }
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  // The gate: the step's generation (low 32 bits) in the high half, a closed
  // flag, and the number of workers inside.
  static constexpr uint64_t kClosed = uint64_t{1} << 31;
  static constexpr uint64_t kInside = kClosed - 1;
  static uint64_t gate_tag(uint64_t generation) { return (generation & 0xffffffffu) << 32; }
  // Joins the step of `generation` if it is still open.
  bool enter(uint64_t generation) {
    uint64_t g = gate_.load(std::memory_order_acquire);
    while ((g & ~kInside) == gate_tag(generation)) {  // this step's, not closed
      if (gate_.compare_exchange_weak(g, g + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
    }
    return false;
  }
  void call(size_t i) {
    try {
      (*fn_)(i);
    } catch (...) {
      std::lock_guard<std::mutex> l(err_mu_);
      if (!error_) error_ = std::current_exception();
    }
  }
  void work(size_t id) {
    if (claimed_) {
      // Ranges of units, one unit at a time.
      for (size_t k = 0; k < ranges_; ++k) {
        Range& r = range_[(id + k) % ranges_];
        for (size_t u; (u = r.next.fetch_add(1, std::memory_order_relaxed)) < r.end;)
          for (size_t i = units_[u]; i < units_[u + 1]; ++i) call(i);
      }
      return;
    }
    // Indices are taken in shrinking chunks (a share of what is left): few
    // bumps of the shared counter (one per tile would bounce its cache line
    // between cores on every tile), yet small chunks at the end, so that a
    // thread left with a heavy chunk does not keep the others waiting. With
    // homes, each range is shared by its owner and the threads that finished
    // their own.
    const size_t threads = size();
    for (size_t k = 0; k < ranges_; ++k) {
      Range& r = range_[(id + k) % ranges_];
      const size_t end = r.end;
      const size_t share = ranges_ == 1 ? 2 * threads : 2;
      while (true) {
        size_t i0 = r.next.load(std::memory_order_relaxed), chunk;
        do {
          if (i0 >= end) break;
          chunk = std::max<size_t>(1, (end - i0) / share);
        } while (!r.next.compare_exchange_weak(i0, i0 + chunk, std::memory_order_relaxed));
        if (i0 >= end) break;
        const size_t i1 = std::min(end, i0 + chunk);
        for (size_t i = i0; i < i1; ++i) call(i);
      }
    }
  }
  void loop(size_t id) {
    uint64_t seen = 0;
    while (true) {
      // Spin a little for the next step, then sleep. The spin yields the
      // core now and then: a worker just woken may have been placed on the
      // caller's core, and spinning there would keep the caller, which
      // brings the next step, waiting behind it.
      uint64_t gen = generation_.load(std::memory_order_acquire);
      for (int spin = 0; gen == seen && spin < (1 << 14) && !parked_.load(std::memory_order_acquire); ++spin) {
        if ((spin & 255) == 255) std::this_thread::yield();
        else pause();
        gen = generation_.load(std::memory_order_acquire);
      }
      if (gen == seen) {
        std::unique_lock<std::mutex> l(mu_);
        sleepers_.fetch_add(1, std::memory_order_acq_rel);
        cv_.wait(l, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_acq_rel);
        gen = generation_.load(std::memory_order_acquire);
      }
      seen = gen;
      if (stop_.load()) return;
      if (!enter(gen)) continue;  // the caller finished that step alone
      work(id);
      gate_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_, err_mu_;
  std::condition_variable cv_;
  const std::function<void(size_t)>* fn_ = nullptr;
  struct alignas(64) Range {
    std::atomic<size_t> next{0};
    size_t end = 0;
  };
  Range range_[kMaxRanges];
  size_t ranges_ = 1;
  bool claimed_ = false;           // ranges of claimed units (parallel_for_claimed) ...
  const uint32_t* units_ = nullptr;  // ... and the units' bounds
  std::atomic<uint64_t> gate_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> parked_{false};
  std::exception_ptr error_;
};

}  // namespace neurenix
