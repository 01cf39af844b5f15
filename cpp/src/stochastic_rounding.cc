#include "neurenix/stochastic_rounding.h"

#include <atomic>
#include <cmath>

namespace neurenix {
namespace {

thread_local RoundingRng* t_active = nullptr;
thread_local RoundingRng* t_random = nullptr;
// Scopes with a generator open on any thread. While there are none (runs
// without stochastic rounding), active_rounding_rng() answers without
// reading the thread-local variable, a library call each time in a shared
// library (half conversions ask once a call, many times a vertex).
std::atomic<int> g_rounding_scopes{0};

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

RoundingRng::RoundingRng(uint64_t seed, uint32_t ipu, uint32_t tile)
    : state_(mix(mix(seed + 0x9e3779b97f4a7c15ull) ^ (static_cast<uint64_t>(ipu) << 32 | tile))) {}

RoundingRng* active_rounding_rng() {
  return g_rounding_scopes.load(std::memory_order_relaxed) == 0 ? nullptr : t_active;
}

// (A thread that opens a scope counts it before setting its generator, and
// so sees it counted when it asks.)
ScopedRounding::ScopedRounding(RoundingRng* rng) : previous_(t_active), counted_(rng != nullptr) {
  if (counted_) g_rounding_scopes.fetch_add(1, std::memory_order_relaxed);
  t_active = rng;
}
ScopedRounding::~ScopedRounding() {
  t_active = previous_;
  if (counted_) g_rounding_scopes.fetch_sub(1, std::memory_order_relaxed);
}

RoundingRng* active_random_rng() { return t_random; }
ScopedRandom::ScopedRandom(RoundingRng* rng) : previous_(t_random) { t_random = rng; }
ScopedRandom::~ScopedRandom() { t_random = previous_; }

half_bits stochastic_float_to_half(float x, uint32_t r) {
  if (!std::isfinite(x)) return float_to_half(x);
  const double a = std::fabs(static_cast<double>(x));
  const half_bits sign = std::signbit(x) ? 0x8000u : 0u;
  if (a >= 65536.0) return static_cast<half_bits>(sign | 0x7c00u);
  // The gap between binary16 neighbours around `a`: 2^-24 below the normal
  // range (2^-14), else 2^(e - 10) for a in [2^e, 2^(e + 1)).
  int e = 0;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  const double gap = a < 6.103515625e-05 ? 5.9604644775390625e-08 : std::ldexp(1.0, e - 1 - 10);
  const double lower = std::floor(a / gap) * gap;  // exact: a is a float, gap a power of two
  const double fraction = (a - lower) / gap;       // in [0, 1)
  const double up = static_cast<double>(r) < fraction * 4294967296.0 ? gap : 0.0;
  const double v = lower + up;  // a binary16 value, or 65536 (infinity)
  if (v >= 65536.0) return static_cast<half_bits>(sign | 0x7c00u);
  return static_cast<half_bits>(sign | float_to_half(static_cast<float>(v)));
}

}  // namespace neurenix
