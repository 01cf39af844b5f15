// Internal: work spread over the host's threads (the compiler's passes over
// independent exchanges, steps and compute sets).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace neurenix {

// The host threads work is spread over: the hardware's, at most 8.
inline unsigned host_thread_count() {
  const unsigned hc = std::thread::hardware_concurrency();
  return std::clamp(hc ? hc : 1u, 1u, 8u);
}

// Runs work(i, state) for every i in [0, n) on up to 8 host threads, each
// with its own default-constructed State, and returns the states (one per
// thread used). The first exception thrown is rethrown here; the items not
// yet started are then skipped.
template <class State, class Work>
std::vector<State> on_host_threads(int64_t n, Work work) {
  const unsigned nthreads =
      static_cast<unsigned>(std::clamp<int64_t>(host_thread_count(), 1, std::max<int64_t>(n, 1)));
  std::vector<State> states(nthreads);
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&](State* state) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) {
      try {
        work(i, *state);
      } catch (...) {
        std::lock_guard<std::mutex> l(error_mu);
        if (!error) error = std::current_exception();
        next.store(n);
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < nthreads; ++i) threads.emplace_back(worker, &states[i]);
  worker(&states[0]);
  for (auto& th : threads) th.join();
  if (error) std::rethrow_exception(error);
  return states;
}

}  // namespace neurenix
