// The error function in float32, the same on every host.
//
// Element-wise vertices (Erf, and GELU's exact form) need erf for every
// element. The C library's erff is a scalar call of 4-15 ns, and what it
// returns depends on the library's version. This one gives, bit for bit, what
// GNU libc 2.36's erff returns (all 2^32 inputs compared): the results every
// recorded digest of a model with Erf or GELU was made with, now independent
// of the host's C library. The block form evaluates sixteen elements at a time
// in AVX2 registers where the build has AVX2 and FMA; the scalar form does the
// same arithmetic one element at a time (with std::fma, so it is exact on
// hosts without FMA units too).
//
// Method (Sun's fdlibm erff, in float32): |x| < 0.84375 a rational function of
// x^2; |x| < 1.25 a rational function of |x| - 1 around erf(1); |x| < 6
// 1 - exp(-z^2 - 0.5625) exp((z - |x|)(z + |x|) + R/S) / |x| with z = |x| cut
// to 11 significant bits, where exp is evaluated in double from a 32-entry
// table of 2^(i/32) and a cubic; |x| >= 6 gives +-1.
#pragma once

#include <cstddef>

namespace neurenix {

// erf(x) for one float.
float erf_one(float x);

// x[i] = erf(x[i]) for i < n; equals erf_one element by element.
void erf_block(float* x, size_t n);

}  // namespace neurenix
