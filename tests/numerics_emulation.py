"""A numpy emulation of the rounding points docs/precision.md documents,
independent of the engine, for tests/test_numerics_emulation.py.

- half: ``np.float16`` (IEEE binary16). numpy converts float32 to half with
  round-to-nearest-even, so ``h(x)`` is the documented rounding of a computed
  float32 value.
- float32 arithmetic: numpy float32 operations (IEEE, correctly rounded).
- the float32 functions the vertices call (expf, tanhf, ...) are the host C
  library's, called through ctypes: the documented rounding points are
  *where* results are rounded; what a transcendental function returns before
  rounding is the library's.
- accumulation: ``fma32`` is one correctly rounded float32 multiply-add (the
  exact product added to the accumulator, rounded once), and ``dot_seq`` sums
  exact products in float32 in k order, as "products summed in float32"
  reads; the half-partials accumulator follows cpp/src/codelets/amp.h.
- sums in an unspecified order: ``sum_bounds`` gives an interval every float32
  summation order of the terms (any tree of float32 additions) stays in.
"""

import ctypes
import ctypes.util
import math
from typing import Callable, List, Sequence, Tuple

import numpy as np

F16, F32, F64 = np.float16, np.float32, np.float64
U = 2.0**-24  # float32 unit round-off


# -- rounding -------------------------------------------------------------------


def h(x) -> np.ndarray:
    """Round float32 values to half (nearest even) and widen back, exactly."""
    with np.errstate(over="ignore"):  # beyond 65520: infinity, as documented
        return np.asarray(x, F32).astype(F16).astype(F32)


def bits_of(x, dtype) -> np.ndarray:
    """The bits of `x` as unsigned integers (for bit-for-bit comparisons)."""
    x = np.ascontiguousarray(np.asarray(x, dtype))
    return x.view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def same_bits(a, b, dtype) -> np.ndarray:
    """Element-wise: identical bits, or both NaN (a NaN's payload and sign are
    the host's business, not a rounding point)."""
    a = np.asarray(a, dtype)
    b = np.asarray(b, dtype)
    return (bits_of(a, dtype) == bits_of(b, dtype)) | (np.isnan(a) & np.isnan(b))


def fma32(a, b, c) -> np.ndarray:
    """round_float32(a * b + c) with one rounding, for float32 a, b, c.

    The product is exact in float64 (48 bits); the sum is formed in float64
    rounded to odd (TwoSum gives the exact error), and rounding a round-to-odd
    float64 to float32 is correct rounding (53 >= 24 + 2)."""
    a = np.asarray(a, F32).astype(F64)
    b = np.asarray(b, F32).astype(F64)
    c = np.asarray(c, F32).astype(F64)
    with np.errstate(all="ignore"):
        p = a * b
        s = p + c
        bp = s - p
        err = (p - (s - bp)) + (c - bp)
        even = (s.view(np.uint64) & np.uint64(1)) == 0
        fix = (err != 0) & even & np.isfinite(s)
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(F32)


def dot_seq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[..., M, K] x [..., K, N] -> [..., M, N]: each output the float32 sum of
    the exact products in k order, from +0, with one rounding per step."""
    a = np.asarray(a, F32)
    b = np.asarray(b, F32)
    with np.errstate(all="ignore"):
        p64 = a[..., :, :, None].astype(F64) * b[..., None, :, :].astype(F64)  # [..., M, K, N]
        p32 = p64.astype(F32)
    if ((p32.astype(F64) == p64) | (np.isnan(p64) & np.isnan(p32))).all():
        # Products of halves are exact in float32: each step is then a plain
        # float32 addition, and numpy's accumulate adds in order. (+0 at the
        # end: the sum starts from +0, which only shows when it is a zero.)
        if a.shape[-1] == 0:
            return np.zeros(p32.shape[:-3] + (a.shape[-2], b.shape[-1]), F32)
        with np.errstate(all="ignore"):
            return np.add.accumulate(p32, axis=-2, dtype=F32)[..., -1, :] + F32(0)
    acc = np.zeros(np.broadcast_shapes(a.shape[:-1] + (1,), b.shape[:-2] + (1, b.shape[-1])), F32)
    for k in range(a.shape[-1]):
        acc = fma32(a[..., :, k : k + 1], b[..., k : k + 1, :], acc)
    return acc


HALF_PARTIALS_DEPTH = 16  # cpp/src/codelets/amp.h


def dot_half_partials(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The half-partials accumulator of amp.h: chunks of 16 products summed
    in float32 (k order), each chunk sum rounded to half and added to a half
    accumulator (the addition in float32, rounded to half)."""
    acc = np.zeros(a.shape[:-1] + b.shape[-1:], F32)
    for k0 in range(0, a.shape[-1], HALF_PARTIALS_DEPTH):
        chunk = dot_seq(a[..., k0 : k0 + HALF_PARTIALS_DEPTH], b[..., k0 : k0 + HALF_PARTIALS_DEPTH, :])
        with np.errstate(invalid="ignore"):  # inf - inf: NaN
            acc = h(acc + h(chunk))
    return acc


def sum_partials(parts: Sequence[np.ndarray], half: bool) -> np.ndarray:
    """The second stage of a K-split product: the partials added in order to a
    float32 accumulator from 0, rounded to half after every addition with half
    partials."""
    acc = np.zeros_like(parts[0], F32)
    for p in parts:
        with np.errstate(invalid="ignore"):
            acc = acc + np.asarray(p, F32)
        if half:
            acc = h(acc)
    return acc


# -- the planner's K ranges (cpp/src/ops/planning.h), read from the plan ---------------


def grain_block(total: int, parts: int, grain: int) -> int:
    b = -(-total // parts)
    if grain > 1 and total > grain:
        b = -(-b // grain) * grain
    return b


def k_ranges(total: int, parts: int, grain: int) -> List[Tuple[int, int]]:
    """The [begin, end) of each of `parts` grain-multiple blocks of `total`."""
    block = grain_block(total, parts, grain)
    return [(min(i * block, total), min((i + 1) * block, total)) for i in range(parts)]


# -- host C library float functions ----------------------------------------------------

_libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")


def _f1(name: str) -> Callable[[np.ndarray], np.ndarray]:
    fn = getattr(_libm, name)
    fn.restype = ctypes.c_float
    fn.argtypes = [ctypes.c_float]
    vec = np.frompyfunc(lambda v: fn(float(v)), 1, 1)
    return lambda x: np.asarray(vec(np.asarray(x, F32)), dtype=F32).reshape(np.shape(x))


def _f2(name: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    fn = getattr(_libm, name)
    fn.restype = ctypes.c_float
    fn.argtypes = [ctypes.c_float, ctypes.c_float]
    vec = np.frompyfunc(lambda u, v: fn(float(u), float(v)), 2, 1)

    def call(x, y):
        x, y = np.broadcast_arrays(np.asarray(x, F32), np.asarray(y, F32))
        return np.asarray(vec(x, y), dtype=F32).reshape(x.shape)

    return call


expf, tanhf, logf, erff = _f1("expf"), _f1("tanhf"), _f1("logf"), _f1("erff")
powf = _f2("powf")


def sigmoidf(x) -> np.ndarray:
    """The vertex's sigmoid: 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below."""
    x = np.asarray(x, F32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        pos = F32(1) / (F32(1) + expf(-x))
        ex = expf(x)
        neg = ex / (F32(1) + ex)
    return np.where(x >= 0, pos, neg).astype(F32)


def rsqrtf(x) -> np.ndarray:
    """1 / sqrt(x) as the vertex computes it: two float32 roundings."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (F32(1) / np.sqrt(np.asarray(x, F32))).astype(F32)


# -- sums whose order is not specified -------------------------------------------------


def rows_along(v: np.ndarray, axes) -> np.ndarray:
    """`v` with `axes` (an int or a sequence) moved last and flattened into
    one axis: [..., n], the rest in order."""
    v = np.asarray(v)
    axes = [int(axes)] if np.ndim(axes) == 0 else list(axes)
    axes = [a % v.ndim for a in axes]
    rest = [a for a in range(v.ndim) if a not in axes]
    t = np.transpose(v, rest + axes)
    return t.reshape(t.shape[: len(rest)] + (-1,))


def exact_sum(v: np.ndarray, axes) -> np.ndarray:
    """The exact sum of the values along `axes`, rounded once to float64
    (math.fsum); the values are float32, or float64 squares of float32 values
    (exact)."""
    r = rows_along(np.asarray(v, F64), axes)
    flat = r.reshape(-1, r.shape[-1])
    return np.array([math.fsum(x) for x in flat], F64).reshape(r.shape[:-1])


def sum_bounds(terms: np.ndarray, axes, rounded_terms: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """[lo, hi] (float32) containing every float32 sum of `terms` along
    `axes`, in any order (any tree of float32 additions): an n-term sum rounds
    n - 1 times, each error at most u times a partial sum's magnitude, itself
    at most the sum of magnitudes, so |S' - S| <= gamma(n - 1) sum|terms| with
    gamma(j) = j u / (1 - j u). `rounded_terms`: each term is itself rounded
    to float32 first (a square computed in float32): one rounding more. The
    result is in the shape of `terms` without `axes`."""
    t = rows_along(terms, axes)
    n = t.shape[-1]
    s = exact_sum(t, -1)
    mag = exact_sum(np.abs(t), -1)
    j = n if rounded_terms else n - 1
    gamma = j * U / (1 - j * U) if j > 0 else 0.0
    d = gamma * mag * (1 + 1e-9)
    return _down32(s - d), _up32(s + d)


def _down32(x: np.ndarray) -> np.ndarray:
    """The largest float32 <= x."""
    f = np.asarray(x, F64).astype(F32)
    return np.where(f.astype(F64) > x, np.nextafter(f, F32(-np.inf)), f).astype(F32)


def _up32(x: np.ndarray) -> np.ndarray:
    """The smallest float32 >= x."""
    f = np.asarray(x, F64).astype(F32)
    return np.where(f.astype(F64) < x, np.nextafter(f, F32(np.inf)), f).astype(F32)


def floats_between(lo: float, hi: float, dtype, limit: int = 4096) -> np.ndarray:
    """Every value of `dtype` in [lo, hi] (lo <= hi, both of the type)."""
    lo, hi = dtype(lo), dtype(hi)
    out = [lo]
    while out[-1] < hi:
        out.append(np.nextafter(out[-1], dtype(np.inf)))
        assert len(out) <= limit, "interval too wide to enumerate"
    return np.array(out, dtype)

