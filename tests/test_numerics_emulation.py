"""The engine against an independent numpy emulation of the rounding points of
docs/precision.md (tests/numerics_emulation.py), on a tiny simulated IPU (one
IPU of 4 tiles), over random shapes and values (hypothesis).

What is compared bit for bit, and what within which bound:

- Element-wise operators and fused chains of them (Add, Sub, Mul, Div, Max,
  Min, Sum, Pow, Relu, Neg, Abs, Sqrt, Reciprocal, Exp, Tanh, Sigmoid,
  Where/Greater), in float32, float16 (every operation rounds to half, also
  inside a fused expression) and mixed: bit for bit, infinities and signed
  zeros included (NaNs are compared as NaNs: their payload is the host's).
  Exp, Tanh, Sigmoid and Pow compute what the host C library's float
  functions (expf, tanhf, powf) return, which the emulation calls too; numpy's
  own float32 exp differs from expf by an ulp at times, so a numpy-only
  emulation could not be bit-exact there.
- Casts (float -> float16 -> float, float16 -> float) and the host's rounding
  of float32 inputs to half: bit for bit.
- MatMul and Conv in float32, in float16 with float partials and with half
  partials, and MatMul in mixed: bit for bit. The emulation reproduces the
  order: every block sums its exact products in k order in float32 (for
  convolutions k runs over (input channel, kernel row, kernel column), as
  in a product with im2col's matrix); a K split, read from the plan in the
  compile report, sums its blocks' partials in order in a second stage
  (rounding to half after each addition with half partials); half partials
  round every 16-product chunk (amp.h). Conv bias is added to the float32
  sum before its one rounding.
- ReduceMax/ReduceMin: bit for bit. ReduceSum/ReduceMean/ReduceSumSquare:
  the order of a float32 sum is the tile mapping's, which the documentation
  leaves open, so
  - on values whose float32 sum is exact in every order (halves on a coarse
    grid), bit for bit, in every precision: the exact sum rounded once to the
    output type (the mean: the sum times float32(1/n) in float32, then
    rounded to the output type);
  - on any values, the result lies between the results of the smallest and
    the largest float32 sum any order can give (|S' - S| <= (n-1) u sum|x|,
    u = 2^-24, then the monotone final step), which in float16 is almost
    always a single half.
- Softmax (float32, float16, mixed): the max, the subtraction, the exp and the
  division are emulated exactly; only the row sum's order is open, so every
  row must equal, bit for bit, the emulation with one of the row sums that
  some float32 summation order gives (enumerated: in float16 nearly always
  exactly one).
- LayerNormalization (float32, float16, mixed): the mean and 1/sqrt(var + eps)
  (outputs 1 and 2) within the bounds above (the two sums' orders are open),
  and the normalised output bit for bit against the emulation fed with the
  engine's own mean and 1/sqrt(var + eps).

- Stochastic rounding: every rounded result is one of the two halves either
  side of the float32 result (itself when it is a half), and the host's
  conversion of the inputs still rounds to nearest even.

Convolutions whose every output row reads only padding are included (they
once failed to compile; test_conv_whose_rows_read_only_padding).

The float32 products are bit-exact for this build of the simulator, whose
float32 accumulation uses fused multiply-adds (each exact product added with
one rounding), which is what "sum exact float32 products in float32" in
docs/precision.md says; half operands' products are exact in float32 anyway.
"""

import re
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest
from hypothesis import assume, event, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper, numpy_helper

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel
from numerics_emulation import (
    F16,
    F32,
    dot_half_partials,
    dot_seq,
    expf,
    floats_between,
    h,
    k_ranges,
    powf,
    rows_along,
    rsqrtf,
    same_bits,
    sigmoidf,
    sum_bounds,
    sum_partials,
    tanhf,
)
from onnx_models import make_model

# -- the engine -----------------------------------------------------------------------


class Engine:
    """One manager of a one-IPU, 4-tile simulated system at a time, reused by
    the examples of a test (asking for another configuration replaces it:
    the IPU is exclusive)."""

    def __init__(self):
        self._key = None
        self._mgr: Optional[GraphCoreManager] = None

    def run(self, model, feeds, precision: str, half_partials: bool = False, **options):
        """(outputs, compile report)."""
        key = (precision, half_partials, tuple(sorted(options.items())))
        if key != self._key:
            self.close()
            self._mgr = GraphCoreManager(
                num_ipus=1,
                ipu_model=IPUModel(num_ipus=1, tiles_per_ipu=4),
                precision=precision,
                enable_half_partials=half_partials,
                **options,
            ).initialize()
            self._key = key
        compiled = self._mgr.compile_model(model, feeds)
        return self._mgr.execute_model(compiled, feeds), compiled.report

    def close(self):
        if self._mgr is not None:
            self._mgr.finalize()
        self._mgr, self._key = None, None


@pytest.fixture
def engine():
    e = Engine()
    yield e
    e.close()


def value(name: str, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, list(shape))


def device_values(x: np.ndarray, precision: str) -> np.ndarray:
    """A float32 model input as the device holds it: rounded to half (nearest
    even) on the way in, except in float32."""
    return np.asarray(x, F32) if precision == "float32" else h(x)


def assert_bits(actual, expected, what: str, dtype=F32):
    actual = np.asarray(actual)
    expected = np.asarray(expected, dtype)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    same = same_bits(actual, expected, dtype)
    if not same.all():
        i = tuple(np.argwhere(~same)[0])
        raise AssertionError(
            f"{what}: {int((~same).sum())} of {same.size} elements differ; first at {i}: "
            f"engine {actual[i]!r} vs emulation {expected[i]!r}"
        )


def plan_of(report, kind: str) -> str:
    plans = [p.plan for p in report.plans if p.kind == kind]
    assert len(plans) == 1, [(p.kind, p.plan) for p in report.plans]
    return plans[0]


# Random arrays too large for hypothesis to draw element by element come from
# a seeded generator; hypothesis draws the seed and the kind of values.
SCALES = [2.0**-6, 1.0, 2.0**6]
KINDS = ["normal", "positive", "grid"]


def random_values(seed: int, shape, kind: str, scale: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "normal":
        v = rng.standard_normal(shape) * scale
    elif kind == "positive":  # no cancellation
        v = rng.uniform(0.25, 1.0, shape) * scale
    else:  # small integers times a power of two: many ties and exact sums
        v = rng.integers(-8, 9, shape) * scale / 4
    return np.asarray(v, F32)


values_kind = st.tuples(st.integers(0, 2**32 - 1), st.sampled_from(KINDS), st.sampled_from(SCALES))


# -- element-wise operators and fused chains ------------------------------------------------

UNARY = ["Relu", "Neg", "Abs", "Sqrt", "Reciprocal", "Exp", "Tanh", "Sigmoid"]
BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"]
TERNARY = ["Where", "Sum"]  # Where(Greater(x, y), y, z); Sum(x, y, z) = (x + y) + z

expressions = st.recursive(
    st.sampled_from(["a", "b", "c"]),
    lambda kids: st.one_of(
        st.tuples(st.sampled_from(UNARY), kids),
        st.tuples(st.sampled_from(BINARY), kids, kids),
        st.tuples(st.sampled_from(TERNARY), kids, kids, kids),
    ),
    max_leaves=8,
)

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, 1e-3, -2.5e-5, 6e-8, 65504.0, -70000.0, np.inf, -np.inf, np.nan]
elementwise_values = st.one_of(
    st.floats(-40.0, 40.0, width=32),
    st.floats(-1e4, 1e4, width=32),
    st.integers(-1024, 2048).map(lambda k: 1 + k * 2.0**-10),  # halves near 1: their products need rounding
    st.sampled_from(SPECIAL),
)


def emulate_expr(tree, env: Dict[str, np.ndarray], rnd) -> np.ndarray:
    """Each operation computed in float32 (the C library's functions for the
    transcendentals), its result rounded by `rnd`."""
    if isinstance(tree, str):
        return env[tree]
    op, *args = tree
    v = [emulate_expr(a, env, rnd) for a in args]
    with np.errstate(all="ignore"):
        if op == "Relu":  # x > 0 ? x : (x == x ? +0 : x)
            r = np.where(v[0] > 0, v[0], np.where(v[0] == v[0], F32(0), v[0]))
        elif op == "Neg":
            r = -v[0]
        elif op == "Abs":
            r = np.abs(v[0])
        elif op == "Sqrt":
            r = np.sqrt(v[0])
        elif op == "Reciprocal":
            r = F32(1) / v[0]
        elif op == "Exp":
            r = expf(v[0])
        elif op == "Tanh":
            r = tanhf(v[0])
        elif op == "Sigmoid":
            r = sigmoidf(v[0])
        elif op == "Add":
            r = v[0] + v[1]
        elif op == "Sub":
            r = v[0] - v[1]
        elif op == "Mul":
            r = v[0] * v[1]
        elif op == "Div":
            r = v[0] / v[1]
        elif op == "Pow":
            r = powf(v[0], v[1])
        elif op == "Max":  # b > a or b is NaN ? b : a
            a, b = np.broadcast_arrays(v[0], v[1])
            r = np.where((b > a) | np.isnan(b), b, a)
        elif op == "Min":
            a, b = np.broadcast_arrays(v[0], v[1])
            r = np.where((b < a) | np.isnan(b), b, a)
        elif op == "Where":
            r = np.where(v[0] > v[1], v[1], v[2])
        elif op == "Sum":
            r = rnd(np.asarray(v[0] + v[1], F32)) + v[2]
        else:
            raise AssertionError(op)
    return rnd(np.asarray(r, F32))


def expr_model(tree, shapes: Dict[str, Tuple[int, ...]], out_shape):
    nodes: List = []
    used: List[str] = []

    def emit(t) -> str:
        if isinstance(t, str):
            if t not in used:
                used.append(t)
            return t
        op, *args = t
        names = [emit(a) for a in args]
        out = f"t{len(nodes)}"
        if op == "Where":
            cond = f"t{len(nodes)}_cond"
            nodes.append(helper.make_node("Greater", names[:2], [cond]))
            nodes.append(helper.make_node("Where", [cond, names[1], names[2]], [out]))
        else:
            nodes.append(helper.make_node(op, names, [out]))
        return out

    y = emit(tree)
    nodes.append(helper.make_node("Identity", [y], ["y"]))
    return make_model(nodes, [value(n, shapes[n]) for n in used], [value("y", out_shape)]), used


@st.composite
def expression_cases(draw):
    tree = draw(expressions)
    if isinstance(tree, str):
        tree = ("Neg", tree)
    base = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    # b broadcasts along some axes; c is a suffix of the shape (maybe a scalar).
    b = tuple(d if draw(st.booleans()) else 1 for d in base)
    c = base[len(base) - draw(st.integers(0, len(base))) :]
    shapes = {"a": base, "b": b, "c": c}
    arrays = {k: draw(hnp.arrays(F32, s, elements=elementwise_values)) for k, s in shapes.items()}
    return tree, shapes, arrays


def leaves(tree) -> set:
    return {tree} if isinstance(tree, str) else set().union(*(leaves(a) for a in tree[1:]))


@pytest.mark.parametrize("precision", ["float32", "float16", "mixed"])
@given(case=expression_cases())
def test_fused_elementwise_chains_round_after_every_operation(engine, precision, case):
    tree, shapes, arrays = case
    used = sorted(leaves(tree))
    out_shape = np.broadcast_shapes(*(shapes[k] for k in used))
    model, inputs = expr_model(tree, shapes, out_shape)
    feeds = {k: arrays[k] for k in inputs}
    rnd = (lambda x: x) if precision == "float32" else h
    env = {k: device_values(v, precision) for k, v in arrays.items()}
    expected = emulate_expr(tree, env, rnd)
    (y,), _ = engine.run(model, feeds, precision)
    assert_bits(y, np.broadcast_to(expected, out_shape), f"{tree} in {precision}")


@st.composite
def shared_cases(draw):
    """An expression over a, b, c and s, where s = op(x, y) is one node that
    every place s appears in reads (a bias added to a product, read twice
    by an exact GELU); a division is not cheap enough to compute twice."""
    shared = (draw(st.sampled_from(["Add", "Sub", "Mul", "Div"])), draw(st.sampled_from("abc")), draw(st.sampled_from("abc")))
    tree = draw(st.recursive(
        st.sampled_from(["s", "s", "a", "b"]),
        lambda kids: st.one_of(st.tuples(st.sampled_from(UNARY), kids), st.tuples(st.sampled_from(BINARY), kids, kids)),
        max_leaves=6,
    ))
    if isinstance(tree, str):
        tree = ("Neg", tree)
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    arrays = {k: draw(hnp.arrays(F32, shape, elements=elementwise_values)) for k in "abc"}
    return shared, tree, shape, arrays


def shared_model(shared, tree, shape, s_is_output: bool):
    nodes = [helper.make_node(shared[0], list(shared[1:]), ["s"], name="shared")]

    def emit(t) -> str:
        if isinstance(t, str):
            return t
        op, *args = t
        names = [emit(a) for a in args]
        out = f"t{len(nodes)}"
        nodes.append(helper.make_node(op, names, [out]))
        return out

    y = emit(tree)
    nodes.append(helper.make_node("Identity", [y], ["y"]))
    outputs = [value("y", shape)] + ([value("s", shape)] if s_is_output else [])
    return make_model(nodes, [value(n, shape) for n in "abc"], outputs)


_GELU_LIKE = ("Mul", "s", ("Tanh", ("Div", "s", "c")))  # s read twice
_ABC = {k: np.array([0.5, -1.25, 3.0, 1 + 3 * 2.0**-10], F32) * (i + 1) for i, k in enumerate("abc")}


@pytest.mark.parametrize("precision", ["float32", "float16", "mixed"])
@settings(max_examples=40)
@example(case=(("Add", "a", "b"), _GELU_LIKE, (4,), _ABC), s_is_output=False)
@example(case=(("Div", "a", "b"), _GELU_LIKE, (4,), _ABC), s_is_output=False)
@example(case=(("Mul", "a", "c"), _GELU_LIKE, (4,), _ABC), s_is_output=True)
@given(case=shared_cases(), s_is_output=st.booleans())
def test_a_cheap_value_read_by_several_elementwise_nodes_is_computed_in_each(engine, precision, case, s_is_output):
    """The same bits as storing s and reading it back; and a cheap s (an
    addition, subtraction or multiplication) is stored only when something
    else needs it (here: it is a graph output), a division always."""
    shared, tree, shape, arrays = case
    model = shared_model(shared, tree, shape, s_is_output)
    rnd = (lambda x: x) if precision == "float32" else h
    env = {k: device_values(v, precision) for k, v in arrays.items()}
    env["s"] = emulate_expr(shared, env, rnd)
    outs, report = engine.run(model, {k: arrays[k] for k in "abc"}, precision)
    assert_bits(outs[0], np.broadcast_to(emulate_expr(tree, env, rnd), shape), f"{shared}, {tree} in {precision}")
    stored = any(step.node == "shared" for step in report.steps)
    readers = str(tree).count("'s'")
    if s_is_output or (readers > 1 and shared[0] == "Div"):
        assert stored, f"s = {shared} read {readers} times was not stored"
    elif readers > 1:
        assert not stored, f"s = {shared} read {readers} times was stored: {[st_.name for st_ in report.steps]}"


def test_a_cheap_value_whose_readers_end_in_different_results_is_stored_once(engine):
    """s = a + b read by two chains that end in different outputs (a forward
    activation that a training step's backward pass reads again): stored
    once, not computed in each, and the same bits either way."""
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="shared"), helper.make_node("Neg", ["s"], ["y"]),
             helper.make_node("Mul", ["s", "c"], ["z"])]
    model = make_model(nodes, [value(n, (4,)) for n in "abc"], [value("y", (4,)), value("z", (4,))])
    (y, z), report = engine.run(model, _ABC, "float32")
    s = _ABC["a"] + _ABC["b"]
    assert_bits(y, -s, "Neg(a + b)")
    assert_bits(z, s * _ABC["c"], "(a + b) * c")
    assert [step.node for step in report.steps].count("shared") >= 1, [step.node for step in report.steps]


def test_a_cheap_value_a_reader_broadcasts_is_stored_once(engine):
    """s = a + b read twice within one expression, once by a node whose
    result is larger than s (s broadcast over two rows): computing s in the
    readers would compute it once per row, so it is stored once."""
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="shared"), helper.make_node("Mul", ["s", "d"], ["t"]),
             helper.make_node("Neg", ["s"], ["u"]), helper.make_node("Add", ["t", "u"], ["y"])]
    d = np.stack([_ABC["c"], -2 * _ABC["c"]])
    model = make_model(nodes, [value(n, (4,)) for n in "ab"] + [value("d", (2, 4))], [value("y", (2, 4))])
    (y,), report = engine.run(model, {"a": _ABC["a"], "b": _ABC["b"], "d": d}, "float32")
    s = _ABC["a"] + _ABC["b"]
    assert_bits(y, s * d + -s, "(a + b) * d + -(a + b)")
    assert "shared" in [step.node for step in report.steps]


def test_the_chain_emulation_discriminates():
    """Rounding once at the end instead of after every operation gives other
    bits: (a * a) - 1 with a = 1 + 3 * 2^-10."""
    a = b = np.array([1 + 3 * 2.0**-10], F32)
    c = np.array([-1.0], F32)
    tree = ("Add", ("Mul", "a", "b"), "c")
    per_op = emulate_expr(tree, {"a": a, "b": b, "c": c}, h)
    once = h(emulate_expr(tree, {"a": a, "b": b, "c": c}, lambda x: x))
    assert per_op[0] != once[0]


# -- casts and the input conversion ------------------------------------------------------


def near_half_values():
    """Finite halves, the midpoints between neighbouring halves (ties; above
    65504, the overflow boundary 65520), and float32 values one ulp either
    side of those."""

    def make(bits, negative, where, nudge):
        lo = np.float64(np.array([bits], np.uint16).view(F16)[0])
        hi = 65536.0 if bits == 0x7BFF else np.float64(np.nextafter(F16(lo), F16(np.inf)))
        v = F32(lo if where == "at" else (lo + hi) / 2)
        if nudge:
            v = np.nextafter(v, F32(np.inf) if nudge > 0 else F32(-np.inf))
        return float(-v if negative else v)

    return st.builds(
        make, st.integers(0, 0x7BFF), st.booleans(), st.sampled_from(["at", "mid"]), st.sampled_from([-1, 0, 1])
    )


cast_values = st.one_of(st.floats(width=32), near_half_values())


@pytest.mark.parametrize("precision", ["float32", "float16", "mixed"])
@given(x=hnp.arrays(F32, st.integers(1, 24), elements=cast_values),
       u=hnp.arrays(np.uint16, st.integers(1, 8)).map(lambda b: b.view(F16)))
def test_casts_and_the_input_conversion(engine, precision, x, u):
    """Cast float -> float16 rounds to nearest even (in every precision, also
    where floats stay float32), float16 -> float widens exactly; in float16
    and mixed the float32 input is rounded the same way on its way in."""
    model = make_model(
        [
            helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
            helper.make_node("Cast", ["x16"], ["x32"], to=TensorProto.FLOAT),
            helper.make_node("Cast", ["u"], ["u32"], to=TensorProto.FLOAT),
        ],
        [value("x", x.shape), value("u", u.shape, TensorProto.FLOAT16)],
        [value("x16", x.shape, TensorProto.FLOAT16), value("x32", x.shape), value("u32", u.shape)],
    )
    (x16, x32, u32), _ = engine.run(model, {"x": x, "u": u}, precision)
    assert x16.dtype == F16
    with np.errstate(over="ignore"):
        assert_bits(x16, x.astype(F16), "Cast(float -> float16)", F16)
    assert_bits(x32, h(x), "Cast(Cast(float -> float16) -> float)")
    assert_bits(u32, u.astype(F32), "Cast(float16 -> float)")


# -- matrix products -------------------------------------------------------------------------


def product(a: np.ndarray, b: np.ndarray, k_split: int, half_partials: bool, out_half: bool) -> np.ndarray:
    """The engine's product, given the plan's K split: each block of K (grain
    16) summed by the accumulator, the blocks' partials summed in order, the
    result rounded to the output type."""
    parts = [
        (dot_half_partials if half_partials else dot_seq)(a[..., k0:k1], b[..., k0:k1, :])
        for k0, k1 in k_ranges(a.shape[-1], k_split, 16)
    ]
    r = parts[0] if k_split == 1 else sum_partials(parts, half_partials)
    return h(r) if out_half else r


PRODUCT_CONFIGS = [("float32", False), ("float16", False), ("float16", True), ("mixed", True)]


@pytest.mark.parametrize("precision,half_partials", PRODUCT_CONFIGS)
# K split 4 ways in every configuration, and the split shows in the bits.
@example(batch=(), m=32, k=200, n=8, const_b=True, vals=(1, "normal", 1.0))
@given(
    batch=st.sampled_from([(), (), (2,), (3,)]),
    m=st.integers(1, 32),
    k=st.one_of(st.integers(1, 48), st.integers(100, 300)),  # long ones are split across tiles
    n=st.integers(1, 32),
    const_b=st.booleans(),
    vals=values_kind,
)
def test_matmul_accumulates_as_documented(engine, precision, half_partials, batch, m, k, n, const_b, vals):
    seed, kind, scale = vals
    a = random_values(seed, batch + (m, k), kind, scale)
    b = random_values(seed + 1, (k, n), kind, scale)
    inputs = [value("a", a.shape)] + ([] if const_b else [value("b", b.shape)])
    model = make_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        inputs,
        [value("y", batch + (m, n))],
        [numpy_helper.from_array(b, "b")] if const_b else [],
    )
    feeds = {"a": a} if const_b else {"a": a, "b": b}
    (y,), report = engine.run(model, feeds, precision, half_partials)
    k_split = int(re.search(r"K/(\d+)", plan_of(report, "matmul")).group(1))
    event(f"K split {k_split} ways")
    half = precision != "float32"
    expected = product(
        device_values(a, precision), device_values(b, precision), k_split, half and half_partials, half
    )
    assert_bits(y, expected, f"[{batch}x{m}x{k}] x [{k}x{n}] ({kind} x{scale}), K/{k_split}")


def test_the_product_emulations_discriminate():
    """The three accumulators give other bits on the same halves (the test
    above could not pass with the wrong one)."""
    rng = np.random.default_rng(3)
    a = h(rng.uniform(0.5, 1.5, (4, 96)))
    b = h(rng.uniform(0.5, 1.5, (96, 5)))
    floats = product(a, b, 1, False, True)
    halves = product(a, b, 1, True, True)
    split = product(a, b, 3, True, True)
    assert not same_bits(floats, halves, F32).all()
    assert not same_bits(halves, split, F32).all()
    exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(F32)
    assert not same_bits(product(a, b, 1, False, False), exact, F32).all()


# -- convolutions ------------------------------------------------------------------------------


def conv_emulation(x, w, bias, strides, pads, dilations, groups, k_split, half_partials, out_half):
    """NCHW x OIHW with the engine's accumulation, given the plan's split of
    the input channels (grain 8)."""
    n, c, hh, ww = x.shape
    co, cg, kh, kw = w.shape
    sh, sw = strides
    pt, pl, pb, pr = pads
    dh, dw = dilations
    xp = np.zeros((n, c, hh + pt + pb, ww + pl + pr), F32)
    xp[:, :, pt : pt + hh, pl : pl + ww] = x
    ho = (hh + pt + pb - (kh - 1) * dh - 1) // sh + 1
    wo = (ww + pl + pr - (kw - 1) * dw - 1) // sw + 1
    cog = co // groups
    out = np.zeros((n, co, ho, wo), F32)
    for g in range(groups):
        xs = xp[:, g * cg : (g + 1) * cg]
        # taps[n, ci, a, b, ho * wo]: the input value tap (a, b) of each output reads.
        taps = np.zeros((n, cg, kh, kw, ho * wo), F32)
        for ta in range(kh):
            for tb in range(kw):
                win = xs[:, :, ta * dh : ta * dh + (ho - 1) * sh + 1 : sh, tb * dw : tb * dw + (wo - 1) * sw + 1 : sw]
                taps[:, :, ta, tb] = win.reshape(n, cg, ho * wo)
        wg = w[g * cog : (g + 1) * cog]
        parts = []
        for c0, c1 in k_ranges(cg, k_split, 8):
            cin = c1 - c0
            # In (channel, kernel row, kernel column) order.
            wk = wg[None, :, c0:c1].reshape(1, cog, cin * kh * kw)
            tk = taps[:, c0:c1].reshape(n, cin * kh * kw, ho * wo)
            parts.append((dot_half_partials if half_partials else dot_seq)(wk, tk))
        s = parts[0] if k_split == 1 else sum_partials(parts, half_partials)
        if bias is not None:
            s = (s + bias[g * cog : (g + 1) * cog][None, :, None]).astype(F32)
            if half_partials:
                s = h(s)
        if out_half:
            s = h(s)
        out[:, g * cog : (g + 1) * cog] = s.reshape(n, cog, ho, wo)
    return out


@st.composite
def conv_cases(draw):
    deep = draw(st.booleans())  # many input channels on a small image: split across tiles
    groups = 1 if deep else draw(st.sampled_from([1, 1, 2]))
    cg = draw(st.integers(32, 160) if deep else st.integers(1, 20))
    cog = draw(st.integers(1, 8))
    kmax = 2 if deep else 3
    kh, kw = draw(st.integers(1, kmax)), draw(st.integers(1, kmax))
    sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = [draw(st.integers(0, 1)) for _ in range(4)]
    hmax = 4 if deep else 8
    hh = draw(st.integers((kh - 1) * dh + 1, max(hmax, (kh - 1) * dh + 1)))
    ww = draw(st.integers((kw - 1) * dw + 1, max(hmax, (kw - 1) * dw + 1)))
    n = draw(st.integers(1, 2))
    bias = draw(st.booleans())
    return dict(n=n, c=cg * groups, h=hh, w=ww, co=cog * groups, cg=cg, kh=kh, kw=kw,
                strides=[sh, sw], dilations=[dh, dw], pads=pads, groups=groups, bias=bias)


def conv_model(p, w, bias):
    ho = (p["h"] + p["pads"][0] + p["pads"][2] - (p["kh"] - 1) * p["dilations"][0] - 1) // p["strides"][0] + 1
    wo = (p["w"] + p["pads"][1] + p["pads"][3] - (p["kw"] - 1) * p["dilations"][1] - 1) // p["strides"][1] + 1
    inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(bias, "bias")] if bias is not None else [])
    node = helper.make_node(
        "Conv", ["x", "w"] + (["bias"] if bias is not None else []), ["y"],
        strides=p["strides"], pads=p["pads"], dilations=p["dilations"], group=p["groups"],
    )
    return make_model([node], [value("x", (p["n"], p["c"], p["h"], p["w"]))],
                      [value("y", (p["n"], p["co"], ho, wo))], inits)


@pytest.mark.parametrize("precision,half_partials", PRODUCT_CONFIGS[:3])
# Input channels split 4 ways in every configuration, and the split shows in
# the bits with float32 data and with half partials.
@example(p=dict(n=1, c=128, h=3, w=3, co=2, cg=128, kh=2, kw=2, strides=[1, 1], dilations=[1, 1],
                pads=[0, 0, 0, 0], groups=1, bias=True), vals=(5, "normal", 1.0))
@given(p=conv_cases(), vals=values_kind)
def test_conv_accumulates_as_documented(engine, precision, half_partials, p, vals):
    seed, kind, scale = vals
    x = random_values(seed, (p["n"], p["c"], p["h"], p["w"]), kind, scale)
    w = random_values(seed + 1, (p["co"], p["cg"], p["kh"], p["kw"]), kind, scale)
    bias = random_values(seed + 2, (p["co"],), kind, scale * 8) if p["bias"] else None
    (y,), report = engine.run(conv_model(p, w, bias), {"x": x}, precision, half_partials)
    k_split = int(re.search(r"in-channels/(\d+)", plan_of(report, "conv")).group(1))
    event(f"input channels split {k_split} ways")
    half = precision != "float32"
    dv = lambda v: None if v is None else device_values(v, precision)  # noqa: E731
    expected = conv_emulation(dv(x), dv(w), dv(bias), p["strides"], p["pads"], p["dilations"], p["groups"],
                              k_split, half and half_partials, half)
    assert_bits(y, expected, f"conv {p} ({kind} x{scale}), in-channels/{k_split}")


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_conv_whose_rows_read_only_padding(engine, precision):
    # One output row, at input row -1: no input row is exchanged into the
    # window (this once failed to compile, the empty field taken for a read).
    p = dict(n=1, c=1, h=1, w=3, co=1, cg=1, kh=1, kw=1, strides=[2, 1], dilations=[1, 1],
             pads=[1, 0, 0, 0], groups=1, bias=False)
    x = np.arange(1, 4, dtype=F32).reshape(1, 1, 1, 3)
    (y,), _ = engine.run(conv_model(p, np.ones((1, 1, 1, 1), F32), None), {"x": x}, precision)
    assert_bits(y, np.zeros((1, 1, 1, 3), F32), "padding-only conv")


# -- pooling ---------------------------------------------------------------------------------


def pool_emulation(x, op, k, s, pads, d, include_pad, out_hw):
    """Max and average pooling as documented: each window's cells in row-major
    order, padding skipped; max keeps the first of equal values (so the sign
    of a zero is the first zero's) and the last NaN; average sums in float32
    in that order and divides by the cells inside the image, or (with
    count_include_pad) by those inside the padded extent."""
    n, c, hh, ww = x.shape
    ph, pw = hh + pads[0] + pads[2], ww + pads[1] + pads[3]
    out = np.zeros((n, c) + tuple(out_hw), F32)
    for i in np.ndindex(n, c):
        for ho in range(out_hw[0]):
            for wo in range(out_hw[1]):
                acc = F32(-np.inf) if op == "MaxPool" else F32(0)
                count = padded = 0
                for a in range(k[0]):
                    hi = ho * s[0] - pads[0] + a * d[0]
                    for b in range(k[1]):
                        wi = wo * s[1] - pads[1] + b * d[1]
                        if 0 <= hi + pads[0] < ph and 0 <= wi + pads[1] < pw:
                            padded += 1
                        if not (0 <= hi < hh and 0 <= wi < ww):
                            continue
                        v = x[i + (hi, wi)]
                        count += 1
                        if op == "MaxPool":
                            if v > acc or v != v:
                                acc = v
                        else:
                            acc = F32(acc + v)
                if op == "AveragePool":
                    den = padded if include_pad else count
                    acc = F32(acc / F32(den)) if den else F32(0)
                out[i + (ho, wo)] = acc
    return out


@st.composite
def pool_cases(draw):
    op = draw(st.sampled_from(["MaxPool", "AveragePool"]))
    k = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    s = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    d = [draw(st.integers(1, 2)), draw(st.integers(1, 2))] if op == "MaxPool" else [1, 1]
    pads = [draw(st.integers(0, k[i % 2] - 1)) for i in range(4)]
    hw = [draw(st.integers(max(1, (k[i] - 1) * d[i] + 1 - pads[i] - pads[i + 2]), 12)) for i in range(2)]
    c = draw(st.integers(1, 3))
    return dict(op=op, k=k, s=s, d=d, pads=pads, hw=hw, c=c, ceil=draw(st.booleans()),
                include_pad=op == "AveragePool" and draw(st.booleans()))


@pytest.mark.parametrize("precision", ["float32", "float16"])
@example(p=dict(op="MaxPool", k=[3, 3], s=[1, 1], d=[1, 1], pads=[1, 1, 1, 1], hw=[9, 12], c=2, ceil=False,
                include_pad=False), vals=(3, "normal", 1.0), specials=0.3)
@example(p=dict(op="AveragePool", k=[3, 3], s=[2, 2], d=[1, 1], pads=[1, 1, 1, 1], hw=[12, 12], c=1, ceil=True,
                include_pad=True), vals=(4, "normal", 1.0), specials=0.0)
@given(p=pool_cases(), vals=values_kind, specials=st.sampled_from([0.0, 0.1, 0.3]))
def test_pooling_as_documented(engine, precision, p, vals, specials):
    """Bit for bit against the emulation, with NaNs, signed zeros and ties in
    the windows, on windows that cross the padding and windows inside the
    image (computed on the device a row at a time)."""
    import onnxruntime as ort

    seed, kind, scale = vals
    x = random_values(seed, (1, p["c"]) + tuple(p["hw"]), kind, scale)
    rng = np.random.default_rng(seed)
    pick = rng.random(x.shape)
    x[pick < specials / 3] = np.nan
    x[(pick >= specials / 3) & (pick < 2 * specials / 3)] = -0.0
    x[(pick >= 2 * specials / 3) & (pick < specials)] = 0.0
    attrs = dict(kernel_shape=p["k"], strides=p["s"], pads=p["pads"], ceil_mode=int(p["ceil"]))
    if p["op"] == "MaxPool":
        attrs["dilations"] = p["d"]
    else:
        attrs["count_include_pad"] = int(p["include_pad"])
    node = helper.make_node(p["op"], ["x"], ["y"], **attrs)
    # The output shape as onnxruntime computes it (ceil mode drops a last
    # window that would start in the right padding, as PyTorch does).
    shape_model = helper.make_model(
        helper.make_graph([node], "pool", [value("x", x.shape)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 19)])
    shape_model.ir_version = 9
    so = ort.SessionOptions()
    so.log_severity_level = 3
    (reference,) = ort.InferenceSession(shape_model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    out_shape = reference.shape
    model = make_model([node], [value("x", x.shape)], [value("y", out_shape)], opset=19)
    (y,), _ = engine.run(model, {"x": x}, precision)
    expected = pool_emulation(device_values(x, precision), p["op"], p["k"], p["s"], p["pads"], p["d"],
                              p["include_pad"], out_shape[2:])
    if precision != "float32":
        expected = h(expected)
    assert_bits(y, expected, f"{p} ({kind} x{scale}, specials {specials})")


# -- reductions ------------------------------------------------------------------------------


@st.composite
def reduce_cases(draw, max_elements=256):
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    assume(int(np.prod(shape)) <= max_elements)
    axes = sorted(draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
    return shape, axes, draw(st.booleans())


def reduce_model(op: str, shape, axes, keepdims: bool):
    out = tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes)
    return make_model(
        [helper.make_node(op, ["x", "axes"], ["y"], keepdims=int(keepdims))],
        [value("x", shape)],
        [value("y", out)],
        [numpy_helper.from_array(np.array(axes, np.int64), "axes")],
        opset=18,
    ), out


def out_rounding(precision: str):
    """The rounding of a reduction's float32 result: half in float16 only
    (mixed reduces in float32)."""
    return h if precision == "float16" else (lambda v: np.asarray(v, F32))


def mean_of(s, n: int) -> np.ndarray:
    """The mean's final step: the float32 sum times float32(1/n)."""
    return (np.asarray(s, F32) * F32(1.0 / n)).astype(F32)


@pytest.mark.parametrize("precision", ["float32", "float16", "mixed"])
@given(case=reduce_cases(), seed=st.integers(0, 2**32 - 1), exponent=st.integers(-24, 5))
def test_reductions_round_the_float32_result_once(engine, precision, case, seed, exponent):
    """Bit for bit on values whose float32 sum is exact in every order:
    integers below 2^10 times 2^exponent, -24 <= exponent <= 5 (halves,
    subnormal ones included, and with at most 256 terms every partial sum
    holds in 19 bits). The one rounding of the result (to half in float16,
    overflowing to infinity) is what is left to see: a half accumulator
    would round partial sums too."""
    shape, axes, keep = case
    x = (np.random.default_rng(seed).integers(-1023, 1024, shape) * 2.0**exponent).astype(F32)
    v = device_values(x, precision)
    assert same_bits(v, x, F32).all()
    n = int(np.prod([shape[a] for a in axes]))
    s = rows_along(v.astype(np.float64), axes).sum(-1).astype(F32)  # exact
    rnd = out_rounding(precision)
    expected = {
        "ReduceSum": rnd(s),
        "ReduceMean": rnd(mean_of(s, n)),
        "ReduceMax": rows_along(v, axes).max(-1),
        "ReduceMin": rows_along(v, axes).min(-1),
    }
    for op, e in expected.items():
        model, out_shape = reduce_model(op, shape, axes, keep)
        (y,), _ = engine.run(model, {"x": x}, precision)
        assert_bits(y, e.reshape(out_shape), f"{op} over {axes} of {shape}, {precision}")


@pytest.mark.parametrize("precision", ["float32", "float16", "mixed"])
@given(case=reduce_cases(), vals=values_kind)
def test_reductions_within_every_summation_order(engine, precision, case, vals):
    """On any values: between the results of the smallest and largest float32
    sum an order can give (the final steps are monotone)."""
    shape, axes, keep = case
    seed, kind, scale = vals
    x = random_values(seed, shape, kind, scale) * F32(1 + 2**-7)  # not on a grid
    v = device_values(x, precision)
    n = int(np.prod([shape[a] for a in axes]))
    rnd = out_rounding(precision)
    lo, hi = sum_bounds(v, axes)
    v64 = v.astype(np.float64)
    sq_lo, sq_hi = sum_bounds(v64 * v64, axes, rounded_terms=precision == "float32")
    bounds = {
        "ReduceSum": (rnd(lo), rnd(hi)),
        "ReduceMean": (rnd(mean_of(lo, n)), rnd(mean_of(hi, n))),
        "ReduceSumSquare": (rnd(sq_lo), rnd(sq_hi)),
    }
    one = same_bits(bounds["ReduceSum"][0], bounds["ReduceSum"][1], F32).all()
    event(f"ReduceSum's bounds: {'one value' if one else 'several'}")
    for op, (blo, bhi) in bounds.items():
        model, out_shape = reduce_model(op, shape, axes, keep)
        (y,), _ = engine.run(model, {"x": x}, precision)
        y = np.asarray(y, F32).reshape(blo.shape)
        ok = (blo <= y) & (y <= bhi)
        assert ok.all(), f"{op} over {axes} of {shape}, {precision}: {y[~ok]} outside [{blo[~ok]}, {bhi[~ok]}]"


# -- softmax ---------------------------------------------------------------------------------


def softmax_candidates(v: np.ndarray, axis: int, precision: str):
    """(e, sums): the row's exp(x - max) exactly as the engine computes it, and
    for every row the float values its sum can take in some float32 order."""
    half = precision == "float16"
    rnd = h if half else (lambda t: np.asarray(t, F32))
    m = v.max(axis=axis, keepdims=True)
    e = rnd(expf(rnd(v - m)))
    lo, hi = sum_bounds(e, axis)
    lo, hi = rnd(lo), rnd(hi)
    t = F16 if half else F32
    sums = [floats_between(t(a), t(b), t).astype(F32) for a, b in zip(lo.ravel(), hi.ravel())]
    return e, sums, rnd


@pytest.mark.parametrize("precision", ["float32", "float16", "mixed"])
@given(shape=st.lists(st.integers(1, 12), min_size=1, max_size=3), axis_pick=st.integers(0, 2), vals=values_kind)
def test_softmax_is_the_emulation_with_some_summation_order(engine, precision, shape, axis_pick, vals):
    shape = tuple(shape)
    axis = axis_pick % len(shape)
    seed, kind, scale = vals
    x = random_values(seed, shape, kind, scale * 4)
    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], [value("x", shape)],
                       [value("y", shape)], opset=13)
    (y,), _ = engine.run(model, {"x": x}, precision)
    v = device_values(x, precision)
    e, sums, rnd = softmax_candidates(v, axis, precision)
    event(f"row sums possible in some order: {'one' if max(len(c) for c in sums) == 1 else 'several'}")
    e_rows = rows_along(e, axis).reshape(-1, shape[axis])
    y_rows = rows_along(np.asarray(y, F32), axis).reshape(-1, shape[axis])
    for r, (er, yr, cands) in enumerate(zip(e_rows, y_rows, sums)):
        with np.errstate(all="ignore"):
            ok = [same_bits(yr, rnd(er / s), F32).all() for s in cands]
        assert any(ok), f"row {r} of softmax over axis {axis} of {shape}: {yr} is the emulation with no sum of {cands}"


# -- layer normalisation ----------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["float32", "float16", "mixed"])
@given(
    shape=st.lists(st.integers(1, 10), min_size=1, max_size=3),
    axis_pick=st.integers(0, 2),
    affine=st.sampled_from(["scale", "both"]),
    vals=values_kind,
)
def test_layer_normalization(engine, precision, shape, axis_pick, affine, vals):
    shape = tuple(shape)
    axis = axis_pick % len(shape)
    axes = tuple(range(axis, len(shape)))
    seed, kind, scale = vals
    x = random_values(seed, shape, kind, scale) + F32(scale)  # a mean that is not 0
    norm_shape = shape[axis:]
    gamma = random_values(seed + 1, norm_shape, "normal", 1.0)
    beta = random_values(seed + 2, norm_shape, "normal", 1.0)
    eps = 1e-5
    inputs = ["x", "gamma"] + (["beta"] if affine == "both" else [])
    inits = [numpy_helper.from_array(gamma, "gamma")]
    if affine == "both":
        inits.append(numpy_helper.from_array(beta, "beta"))
    stat = shape[:axis] + (1,) * len(norm_shape)
    model = make_model(
        [helper.make_node("LayerNormalization", inputs, ["y", "mean", "inv_std"], axis=axis, epsilon=eps)],
        [value("x", shape)],
        [value("y", shape), value("mean", stat), value("inv_std", stat)],
        inits,
        opset=17,
    )
    (y, mean, inv_std), _ = engine.run(model, {"x": x}, precision)
    half = precision == "float16"  # mixed normalises in float32
    rnd = h if half else (lambda t: np.asarray(t, F32))
    v = device_values(x, precision)  # the input is rounded on its way in in mixed too
    gamma, beta = rnd(gamma), rnd(beta)  # constants in the normalisation's own type
    n = int(np.prod(norm_shape))
    mean = np.asarray(mean, F32)
    inv_std = np.asarray(inv_std, F32)

    # The mean: the float32 sum in some order, times float32(1/n), rounded.
    lo, hi = sum_bounds(v, axes)
    m_lo, m_hi = rnd(mean_of(lo, n)).reshape(stat), rnd(mean_of(hi, n)).reshape(stat)
    assert ((m_lo <= mean) & (mean <= m_hi)).all(), f"mean {mean} outside [{m_lo}, {m_hi}]"

    # Deviations from the engine's mean, then the variance (squares summed in
    # float32 in some order, times 1/n, rounded) and 1/sqrt(var + eps).
    with np.errstate(all="ignore"):
        d = rnd(v - mean)
        d64 = d.astype(np.float64)
        s_lo, s_hi = sum_bounds(d64 * d64, axes, rounded_terms=not half)
        var_lo, var_hi = rnd(mean_of(s_lo, n)).ravel(), rnd(mean_of(s_hi, n)).ravel()
        eps_c = rnd(F32(eps))
        t = F16 if half else F32
        for i, (a, b, got) in enumerate(zip(var_lo, var_hi, inv_std.ravel())):
            cands = rnd(rsqrtf(rnd(floats_between(t(a), t(b), t).astype(F32) + eps_c)))
            assert same_bits(cands, np.full_like(cands, got), F32).any(), (
                f"row {i}: 1/sqrt(var + eps) {got!r} is none of {cands} (var in [{a}, {b}])"
            )

        # The normalised output, given the engine's statistics: bit for bit.
        e = rnd(rnd(d * inv_std) * gamma)
        if affine == "both":
            e = rnd(e + beta)
    assert_bits(y, e, f"LayerNormalization over {axes} of {shape}, {precision}, {affine}")


# -- stochastic rounding ------------------------------------------------------------------------


def half_neighbours(r: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The halves either side of float32 values (both the value itself when it
    is a half); between 65504 and 65536: 65504 and infinity, beyond:
    infinity (docs/precision.md)."""
    r = np.asarray(r, F32)
    with np.errstate(over="ignore"):
        n = r.astype(F16)
        up = np.nextafter(n, F16(np.inf))
        down = np.nextafter(n, F16(-np.inf))
    lo = np.where(n.astype(F32) > r, down, n)
    hi = np.where(n.astype(F32) < r, up, n)
    big = np.abs(r) >= 65536
    lo = np.where(big, n, lo)
    hi = np.where(big, n, hi)
    return lo.astype(F32), hi.astype(F32)


@pytest.mark.parametrize("precision", ["float32", "float16"])
@given(
    x=hnp.arrays(F32, st.integers(1, 16), elements=elementwise_values),
    y=hnp.arrays(F32, st.integers(1, 16), elements=elementwise_values),
)
def test_stochastic_rounding_picks_a_neighbour(engine, precision, x, y):
    """With stochastic rounding, each operation's float32 result becomes one of
    the two halves either side of it (itself when it is a half), and the
    host's conversion of the inputs still rounds to nearest even. In float32
    only the Cast to float16 rounds (stochastically: it runs on the device)."""
    n = min(x.size, y.size)
    x, y = x[:n], y[:n]
    ops = ["Add", "Sub", "Mul", "Div"]
    nodes = [helper.make_node(op, ["x", "y"], [op.lower()]) for op in ops]
    nodes.append(helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16))
    nodes.append(helper.make_node("Cast", ["x16"], ["cast"], to=TensorProto.FLOAT))
    names = [op.lower() for op in ops] + ["cast"]
    model = make_model(nodes, [value("x", (n,)), value("y", (n,))], [value(k, (n,)) for k in names])
    outs, _ = engine.run(model, {"x": x, "y": y}, precision, stochastic_rounding=True, seed=7)
    vx, vy = device_values(x, precision), device_values(y, precision)
    with np.errstate(all="ignore"):
        exact = dict(add=vx + vy, sub=vx - vy, mul=vx * vy, div=vx / vy, cast=vx)
    for name, got in zip(names, outs):
        r = exact[name]
        if precision == "float32" and name != "cast":
            assert_bits(got, r, f"{name} in float32 with stochastic rounding")
            continue
        lo, hi = half_neighbours(r)
        ok = same_bits(got, lo, F32) | same_bits(got, hi, F32)
        assert ok.all(), f"{name}: {got[~ok]} is neither {lo[~ok]} nor {hi[~ok]} (float32 result {r[~ok]})"
