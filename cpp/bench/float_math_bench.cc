// Benchmark of float_math.h against the C library: time per element of
// exp_block and erf_block next to expf and erff on the inputs the models
// give them, and (--exhaustive) the comparison of every float32 input.
//
//   cmake -S cpp -B build/cpp && cmake --build build/cpp --target neurenix_float_math_bench
//   build/cpp/neurenix_float_math_bench [--exhaustive]
#include <gnu/libc-version.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "neurenix/float_math.h"
#include "neurenix/half.h"  // float_to_bits

namespace {

using neurenix::erf_block;
using neurenix::erf_one;
using neurenix::exp_block;
using neurenix::exp_one;
using neurenix::bits_to_float;
using neurenix::float_to_bits;

// Best time per element of `fn` over blocks of 256 copies of `xs`.
template <class Fn>
double ns_per_element(const std::vector<float>& xs, Fn fn) {
  std::vector<float> y;
  double best = 1e9;
  for (int r = 0; r < 4000; ++r) {
    y = xs;
    const auto t = std::chrono::steady_clock::now();
    fn(y.data(), y.size());
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  }
  return best / static_cast<double>(xs.size()) * 1e9;
}

template <class Dist>
std::vector<float> draw(Dist d, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<float> xs(256);
  for (float& x : xs) x = d(g);
  return xs;
}

void timings() {
  struct Case {
    const char* what;
    bool erf;
    std::vector<float> xs;
  };
  const Case cases[] = {
      {"erf, N(0, 0.23) (the encoder's GELU inputs)", true, draw(std::normal_distribution<float>(0.0f, 0.23f), 2)},
      {"erf, uniform [0.1, 5]", true, draw(std::uniform_real_distribution<float>(0.1f, 5.0f), 1)},
      {"erf, uniform [1.3, 5] (the tail)", true, draw(std::uniform_real_distribution<float>(1.3f, 5.0f), 1)},
      {"exp, uniform [-10, 0]", false, draw(std::uniform_real_distribution<float>(-10.0f, 0.0f), 1)},
      {"exp, uniform [-10020, -10000] (masked scores)", false,
       draw(std::uniform_real_distribution<float>(-10020.0f, -10000.0f), 1)},
  };
  std::printf("| input | C library | ours |\n|---|---|---|\n");
  for (const Case& c : cases) {
    const double lib = ns_per_element(c.xs, [&](float* y, size_t n) {
      for (size_t i = 0; i < n; ++i) y[i] = c.erf ? erff(y[i]) : expf(y[i]);
    });
    const double ours = ns_per_element(c.xs, [&](float* y, size_t n) { c.erf ? erf_block(y, n) : exp_block(y, n); });
    std::printf("| %s | %.2f ns | %.2f ns |\n", c.what, lib, ours);
  }
}

// Every float32 input through both forms of both functions against the C
// library; returns the number of differing results.
uint64_t exhaustive() {
  std::printf("comparing with GNU libc %s on all 2^32 inputs ...\n", gnu_get_libc_version());
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<float> in(kChunk), e(kChunk), r(kChunk);
  uint64_t differ[4] = {0, 0, 0, 0};
  for (uint64_t base = 0; base < (uint64_t{1} << 32); base += kChunk) {
    for (size_t i = 0; i < kChunk; ++i) {
      in[i] = bits_to_float(static_cast<uint32_t>(base + i));
    }
    e = in;
    r = in;
    exp_block(e.data(), kChunk);
    erf_block(r.data(), kChunk);
    for (size_t i = 0; i < kChunk; ++i) {
      const uint32_t want_e = float_to_bits(expf(in[i])), want_r = float_to_bits(erff(in[i]));
      differ[0] += float_to_bits(exp_one(in[i])) != want_e;
      differ[1] += float_to_bits(e[i]) != want_e;
      differ[2] += float_to_bits(erf_one(in[i])) != want_r;
      differ[3] += float_to_bits(r[i]) != want_r;
    }
  }
  std::printf("differing results: exp_one %llu, exp_block %llu, erf_one %llu, erf_block %llu\n",
              static_cast<unsigned long long>(differ[0]), static_cast<unsigned long long>(differ[1]),
              static_cast<unsigned long long>(differ[2]), static_cast<unsigned long long>(differ[3]));
  return differ[0] + differ[1] + differ[2] + differ[3];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--exhaustive") return exhaustive() == 0 ? 0 : 1;
  timings();
  return 0;
}
