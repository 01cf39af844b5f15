// Stochastic rounding of float32 to binary16, as the IPU does it when its
// floating-point behaviour enables it.
//
// A value between two neighbouring binary16 values rounds to the one of
// larger magnitude with probability equal to its distance from the other, in
// units of the gap between them, and to the other one otherwise, so that the
// rounding is unbiased in expectation. The probability is compared with 32
// random bits. Values already representable (zeros, infinities included) are
// unchanged and NaN stays NaN; magnitudes from the largest binary16 (65504) up
// to 65536 round to 65504 or to infinity the same way, and beyond to infinity.
//
// Each tile has its own generator, seeded from the run's seed, the IPU and the
// tile, and advanced by the tile's vertices in program order, so a run is
// reproducible bit for bit whatever the host threads do. While a thread runs
// a tile's vertices, the engine makes that tile's generator the active one;
// the bulk conversions of half.h and store_element then round stochastically.
// Nothing else changes: constants compiled into the program and host
// conversions round to nearest even.
#pragma once

#include <cstdint>

#include "neurenix/half.h"

namespace neurenix {

// splitmix64: one 64-bit draw per rounding, of which 32 bits are used.
class RoundingRng {
 public:
  RoundingRng(uint64_t seed, uint32_t ipu, uint32_t tile);
  uint32_t next32() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<uint32_t>((z ^ (z >> 31)) >> 32);
  }

 private:
  uint64_t state_;
};

// The generator of the tile this thread is running vertices for, or null
// (round to nearest even).
RoundingRng* active_rounding_rng();

// Makes `rng` (or null) the active generator of this thread for its scope.
class ScopedRounding {
 public:
  explicit ScopedRounding(RoundingRng* rng);
  ~ScopedRounding();
  ScopedRounding(const ScopedRounding&) = delete;
  ScopedRounding& operator=(const ScopedRounding&) = delete;

 private:
  RoundingRng* previous_;
  bool counted_;  // a generator, counted among the open scopes
};

// The random-number generator of the tile this thread is running vertices
// for (random draws of expressions: dropout masks), or null outside a run.
// A second per-tile generator, seeded from the run's seed, the IPU and the
// tile like the rounding one but on its own stream, so that drawing random
// numbers does not change how values round.
RoundingRng* active_random_rng();

class ScopedRandom {
 public:
  explicit ScopedRandom(RoundingRng* rng);
  ~ScopedRandom();
  ScopedRandom(const ScopedRandom&) = delete;
  ScopedRandom& operator=(const ScopedRandom&) = delete;

 private:
  RoundingRng* previous_;
};

// `x` rounded stochastically to binary16 with the 32 random bits `r`.
half_bits stochastic_float_to_half(float x, uint32_t r);

}  // namespace neurenix
