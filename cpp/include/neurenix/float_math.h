// exp and erf in float32, the same on every host.
//
// Element-wise vertices need exp (Exp, Softmax, Sigmoid, Elu, Softplus) and
// erf (Erf, GELU's exact form) for every element. The C library's expf and
// erff are scalar calls (erff 4-15 ns; expf takes a slow path with errno for
// every result that underflows, as a masked attention score's does), and what
// they return depends on the library's version. These give, bit for bit, what
// GNU libc 2.36's expf and erff return on an x86-64 host with FMA (all 2^32
// inputs of each compared): the results every recorded digest was made with,
// now independent of the host's C library. The block forms evaluate sixteen
// elements at a time in AVX2 registers where the build has AVX2 and FMA
// (exp's double-precision core eight at a time in AVX-512 registers where
// it has AVX-512F), the last few of a block in one more vector whose spare
// lanes repeat the last element; the scalar forms do the same arithmetic one
// element at a time (with std::fma, so they are exact on hosts without FMA
// units too).
//
// exp: x 32/ln2 = k + r in double, exp(x) = 2^(k/32) 2^(r/32) with 2^(k/32)
// from a 32-entry table of 2^(i/32) and 2^(r/32) a cubic, rounded once to
// float; above 0x1.62e42ep6 +inf, below -0x1.9fe368p6 +0.
//
// erf (Sun's fdlibm erff, in float32): |x| < 0.84375 a rational function of
// x^2; |x| < 1.25 a rational function of |x| - 1 around erf(1); |x| < 6
// 1 - exp(-z^2 - 0.5625) exp((z - |x|)(z + |x|) + R/S) / |x| with z = |x| cut
// to 11 significant bits, where exp is evaluated in double from a 32-entry
// table of 2^(i/32) and a cubic; |x| >= 6 gives +-1.
#pragma once

#include <cstddef>

namespace neurenix {

// exp(x) for one float.
float exp_one(float x);

// x[i] = exp(x[i]) for i < n; equals exp_one element by element.
void exp_block(float* x, size_t n);

// erf(x) for one float.
float erf_one(float x);

// x[i] = erf(x[i]) for i < n; equals erf_one element by element.
void erf_block(float* x, size_t n);

}  // namespace neurenix
