"""Shape-family operators on a tiny simulated IPU against onnxruntime:
Concat, Split, Slice, Expand, Tile, ConstantOfShape, Range, Gather, Pad,
across the opset forms where their signatures differ, and constant folding
of shape-computing subgraphs.

Tolerances. These operators only move elements:
- float32: compared at rtol 1e-5 / atol 1e-6 (they are in fact bit-exact);
- float16 precision: inputs are rounded to half on the way in and nothing
  else happens to them, so each output must equal onnxruntime's output for
  the half-rounded inputs exactly (which is within 2**-11 relative of the
  float32 result).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from neurenix.hardware.graphcore import UnsupportedOperatorError
from onnx_models import make_model
from op_harness import Arg, Ipus, feeds_of, half_rounded, op_model, placed_ops, run_ort

RTOL, ATOL = 1e-5, 1e-6

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4)


@pytest.fixture
def ipus():
    i = Ipus(tiles=4)
    yield i
    i.close()


def i64(*v):
    return np.array(v, dtype=np.int64)


def check(ipus, op, args, n_out=1, opset=18, **attrs):
    """Runs one op on the IPU (on the device: its data is a graph input) and
    on onnxruntime, and compares every output."""
    model, ref = op_model(op, args, n_out=n_out, opset=opset, **attrs)
    outs, report = ipus.run(model, feeds_of(args))
    assert op in placed_ops(report), report.placement
    assert len(outs) == len(ref)
    for y, r in zip(outs, ref):
        assert y.dtype == r.dtype and y.shape == r.shape, (y.dtype, y.shape, r.dtype, r.shape)
        np.testing.assert_allclose(y, r, rtol=RTOL, atol=ATOL)
    return outs


def data(rng, shape, dtype=np.float32):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-50, 50, shape).astype(dtype)


# ---------------------------------------------------------------------------
# Concat


@given(
    base=shapes,
    axis_pick=st.integers(0, 3),
    sizes=st.lists(st.integers(0, 3), min_size=1, max_size=4),
    consts=st.lists(st.booleans(), min_size=4, max_size=4),
    negative=st.booleans(),
    dtype=st.sampled_from([np.float32, np.int64]),
    opset=st.sampled_from([11, 13, 18]),
    seed=st.integers(0, 2**16),
)
def test_concat(ipus, base, axis_pick, sizes, consts, negative, dtype, opset, seed):
    rng = np.random.default_rng(seed)
    axis = axis_pick % len(base)
    if all(s == 0 for s in sizes):
        sizes[0] = 1
    consts[0] = False  # at least one operand computed on the device
    args = []
    for i, n in enumerate(sizes):
        shape = list(base)
        shape[axis] = n
        args.append(Arg(f"x{i}", data(rng, shape, dtype), consts[i] and n > 0))
    check(ipus, "Concat", args, opset=opset, axis=axis - len(base) if negative else axis)


# ---------------------------------------------------------------------------
# Split


@given(
    shape=shapes,
    axis_pick=st.integers(0, 3),
    form=st.sampled_from(["attr11", "input13", "num_outputs18", "even13"]),
    n_out=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_split(ipus, shape, axis_pick, form, n_out, seed):
    rng = np.random.default_rng(seed)
    axis = axis_pick % len(shape)
    dim = shape[axis]
    x = Arg("x", data(rng, shape))
    if form == "even13":
        n_out = min(n_out, dim)
        while dim % n_out:
            n_out -= 1
        check(ipus, "Split", [x], n_out=n_out, opset=13, axis=axis)
        return
    if form == "num_outputs18":
        n_out = min(n_out, dim)
        chunk = -(-dim // n_out)
        if chunk * (n_out - 1) >= dim:  # no last chunk (onnxruntime rejects an empty one)
            n_out = 1
        check(ipus, "Split", [x], n_out=n_out, opset=18, axis=axis - len(shape), num_outputs=n_out)
        return
    cuts = np.sort(rng.integers(0, dim + 1, n_out - 1))
    split = np.diff(np.concatenate([[0], cuts, [dim]])).astype(np.int64)
    if form == "attr11":
        check(ipus, "Split", [x], n_out=n_out, opset=11, axis=axis, split=[int(s) for s in split])
    else:
        check(ipus, "Split", [x, Arg("split", split, True)], n_out=n_out, opset=13, axis=axis)


def test_split_uneven_num_outputs_gives_a_smaller_last_chunk(ipus):
    x = Arg("x", np.arange(10, dtype=np.float32).reshape(5, 2))
    outs = check(ipus, "Split", [x], n_out=3, opset=18, num_outputs=3)
    assert [o.shape[0] for o in outs] == [2, 2, 1]


# ---------------------------------------------------------------------------
# Slice

bounds = st.one_of(st.integers(-7, 7), st.sampled_from([2**63 - 1, -(2**63), 1000, -1000]))


@given(
    shape=shapes,
    picks=st.lists(st.tuples(st.integers(0, 3), bounds, bounds, st.integers(-3, 3)), min_size=1, max_size=4),
    form=st.sampled_from([9, 10, 13, "13-no-axes"]),
    negative_axes=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_slice(ipus, shape, picks, form, negative_axes, seed):
    rng = np.random.default_rng(seed)
    rank = len(shape)
    seen, axes, starts, ends, steps = set(), [], [], [], []
    for a, s, e, step in picks:
        a %= rank
        if a in seen:
            continue
        seen.add(a)
        axes.append(a - rank if negative_axes and form in (13, "13-no-axes") else a)
        starts.append(s)
        ends.append(e)
        steps.append(step or 1)
    x = Arg("x", data(rng, shape))
    if form == 9:
        check(ipus, "Slice", [x], opset=9, starts=starts, ends=ends, axes=axes)
        return
    args = [x, Arg("starts", i64(*starts), True), Arg("ends", i64(*ends), True)]
    if form == "13-no-axes":
        args[1:] = [Arg("starts", i64(*starts[:1]), True), Arg("ends", i64(*ends[:1]), True)]
        check(ipus, "Slice", args, opset=13)
        return
    args += [Arg("axes", i64(*axes), True), Arg("steps", i64(*steps), True)]
    check(ipus, "Slice", args, opset=form if form == 10 else 13)


def test_slice_reverses_with_one_rearrange(ipus):
    x = Arg("x", np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    args = [x, Arg("s", i64(-1, 3), True), Arg("e", i64(-(2**63), 0), True), Arg("a", i64(-1, 1), True),
            Arg("st", i64(-1, -2), True)]
    model, ref = op_model("Slice", args, opset=13)
    (y,), report = ipus.run(model, feeds_of(args))
    np.testing.assert_array_equal(y, x.value[:, :0:-2, ::-1])
    np.testing.assert_array_equal(y, ref[0])
    assert [p.kind for p in report.plans].count("rearrange") == 1


# ---------------------------------------------------------------------------
# Expand and Tile


@given(
    shape=shapes,
    extra=st.lists(st.integers(1, 3), max_size=2),
    ones=st.lists(st.booleans(), min_size=4, max_size=4),
    keep=st.lists(st.booleans(), min_size=4, max_size=4),
    grow=st.lists(st.integers(1, 3), min_size=4, max_size=4),
    drop_lead=st.integers(0, 2),
    seed=st.integers(0, 2**16),
)
def test_expand(ipus, shape, extra, ones, keep, grow, drop_lead, seed):
    rng = np.random.default_rng(seed)
    in_shape = [1 if o else d for d, o in zip(shape, ones)]
    # Target: dims to grow where the input has 1, 1 where the input's dim is
    # kept (bidirectional broadcasting), possibly of lower rank.
    target = [(g if d == 1 else d) if not k else 1 for d, k, g in zip(in_shape, keep, grow)]
    target = list(extra) + target
    target = target[min(drop_lead, len(target) - 1):]
    x = Arg("x", data(rng, in_shape))
    check(ipus, "Expand", [x, Arg("shape", np.array(target, np.int64), True)], opset=13)


@given(shape=shapes, reps=st.lists(st.integers(1, 3), min_size=4, max_size=4),
       dtype=st.sampled_from([np.float32, np.int32]), seed=st.integers(0, 2**16))
def test_tile(ipus, shape, reps, dtype, seed):
    rng = np.random.default_rng(seed)
    x = Arg("x", data(rng, shape, dtype))
    check(ipus, "Tile", [x, Arg("r", np.array(reps[: len(shape)], np.int64), True)], opset=13)


# ---------------------------------------------------------------------------
# Gather with constant indices


@given(
    shape=shapes,
    axis_pick=st.integers(0, 3),
    ind_shape=st.lists(st.integers(1, 4), max_size=2),
    kind=st.sampled_from(["random", "progression", "single"]),
    negative_axis=st.booleans(),
    ind_dtype=st.sampled_from([np.int64, np.int32]),
    seed=st.integers(0, 2**16),
)
def test_gather(ipus, shape, axis_pick, ind_shape, kind, negative_axis, ind_dtype, seed):
    rng = np.random.default_rng(seed)
    axis = axis_pick % len(shape)
    d = shape[axis]
    n = int(np.prod(ind_shape))
    if kind == "random":
        ind = rng.integers(-d, d, ind_shape)
    elif kind == "progression":
        start, step = int(rng.integers(0, d)), int(rng.integers(-2, 3))
        ind = np.array([(start + i * step) % d for i in range(n)]).reshape(ind_shape)
        if n > 1 and step != 0 and any((start + i * step) not in range(d) for i in range(n)):
            ind = np.array([start] * n).reshape(ind_shape)
    else:
        ind = np.array(int(rng.integers(-d, d)))
    x = Arg("x", data(rng, shape))
    args = [x, Arg("i", ind.astype(ind_dtype), True)]
    check(ipus, "Gather", args, opset=13, axis=axis - len(shape) if negative_axis else axis)


def test_gather_progressions_are_one_rearrange(ipus):
    x = Arg("x", np.arange(40, dtype=np.float32).reshape(4, 10))
    args = [x, Arg("i", i64(8, 6, 4, 2), True)]
    model, ref = op_model("Gather", args, opset=13, axis=1)
    (y,), report = ipus.run(model, feeds_of(args))
    np.testing.assert_array_equal(y, ref[0])
    assert [p.kind for p in report.plans].count("rearrange") == 1


@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    idx_shape=st.lists(st.integers(1, 4), min_size=0, max_size=2),
    data=st.data(),
)
def test_gather_with_indices_known_only_at_run_time(ipus, shape, idx_shape, data):
    """Embedding-style lookups: indices are a graph input (negative ones
    count from the end), data a constant or an input, on any axis."""
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    dim = shape[axis]
    rng = np.random.default_rng(len(shape) * 7 + dim)
    idx = rng.integers(-dim, dim, idx_shape).astype(np.int64)
    x = rng.standard_normal(shape).astype(np.float32)
    const = data.draw(st.booleans())
    args = [Arg("x", x, const), Arg("i", idx)]
    model, ref = op_model("Gather", args, opset=13, axis=axis)
    (y,), rep = ipus.run(model, feeds_of(args))
    np.testing.assert_array_equal(y, ref[0])
    assert "Gather" in placed_ops(rep)


def test_embedding_lookup_in_float16(ipus):
    rng = np.random.default_rng(3)
    table = rng.standard_normal((50, 8)).astype(np.float32)
    idx = rng.integers(0, 50, (2, 5)).astype(np.int64)
    args = [Arg("t", table, True), Arg("i", idx)]
    model, ref = op_model("Gather", args, opset=13)
    (y,), _ = ipus.run(model, feeds_of(args), precision="float16")
    # Looking up moves values: the only error is the table's rounding to half.
    np.testing.assert_array_equal(y, ref[0].astype(np.float16).astype(np.float32))


# ---------------------------------------------------------------------------
# Pad


@st.composite
def pad_cases(draw):
    shape = draw(shapes)
    mode = draw(st.sampled_from(["constant", "reflect", "edge", "wrap"]))
    pads_b, pads_e = [], []
    for d in shape:
        # onnxruntime crops first, then extends what is left; reflect needs
        # two elements left and pads smaller than that.
        crop_b = draw(st.integers(0, min(1, d - 1)))
        crop_e = draw(st.integers(0, min(1, d - 1 - crop_b)))
        m = d - crop_b - crop_e
        hi = {"reflect": m - 1, "constant": 3}.get(mode, 4)
        b = -crop_b if crop_b else draw(st.integers(0, max(hi, 0)))
        e = -crop_e if crop_e else draw(st.integers(0, max(hi, 0)))
        pads_b.append(b)
        pads_e.append(e)
    form = draw(st.sampled_from(["attr10", "input11", "input13", "axes18"] if mode != "wrap" else ["input19"]))
    return shape, mode, pads_b, pads_e, form


@given(case=pad_cases(), value=st.sampled_from([0.0, 1.5, -3.0]), seed=st.integers(0, 2**16))
def test_pad(ipus, case, value, seed):
    shape, mode, pb, pe, form = case
    rng = np.random.default_rng(seed)
    x = Arg("x", data(rng, shape))
    if form == "attr10":
        check(ipus, "Pad", [x], opset=10, mode=mode, pads=pb + pe, value=value)
        return
    opset = {"input11": 11, "input13": 13, "axes18": 18, "input19": 19}[form]
    cval = Arg("v", np.array(value, np.float32), True) if mode == "constant" else None
    args = [x, Arg("p", np.array(pb + pe, np.int64), True), cval]
    if form == "axes18":
        # Pad a subset of the axes, named from the back.
        axes = [a for a in range(len(shape)) if (pb[a], pe[a]) != (0, 0)] or [0]
        pads = [pb[a] for a in axes] + [pe[a] for a in axes]
        args = [x, Arg("p", np.array(pads, np.int64), True), cval,
                Arg("axes", np.array([a - len(shape) for a in axes], np.int64), True)]
    while args and args[-1] is None:
        args.pop()
    check(ipus, "Pad", args, opset=opset, mode=mode)


def test_pad_int_and_bool_data(ipus):
    xi = Arg("x", np.arange(6, dtype=np.int32).reshape(2, 3))
    check(ipus, "Pad", [xi, Arg("p", i64(1, 0, 0, 2), True), Arg("v", np.array(-7, np.int32), True)], opset=13)
    check(ipus, "Pad", [xi, Arg("p", i64(0, 2, 1, 2), True)], opset=13, mode="reflect")
    xb = Arg("x", np.array([[True, False, True]]))
    check(ipus, "Pad", [xb, Arg("p", i64(0, 2, 1, 1), True)], opset=13, mode="edge")


# ---------------------------------------------------------------------------
# ConstantOfShape and Range: folded when small, filled on the device when not


def test_constant_of_shape_small_is_folded_large_is_a_fill(ipus):
    for shape, value, folded in (((2, 3), 2.5, True), ((80, 64), -1.25, False)):
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        nodes = [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("ConstantOfShape", ["s"], ["c"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [value])),
            helper.make_node("Add", ["x", "c"], ["y"]),
        ]
        model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], opset=13)
        (y,), report = ipus.run(model, {"x": x})
        np.testing.assert_allclose(y, run_ort(model, {"x": x})[0], rtol=RTOL, atol=ATOL)
        assert ("ConstantOfShape" in placed_ops(report)) != folded
        assert "Shape" not in placed_ops(report)


def test_constant_of_shape_default_and_int_values(ipus):
    x = np.ones((2, 2), np.int64)
    for value, elem in ((None, TensorProto.FLOAT), (helper.make_tensor("v", TensorProto.INT64, [1], [7]), TensorProto.INT64)):
        kw = {} if value is None else {"value": value}
        nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["y"], **kw)]
        model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.INT64, [2, 2])],
                           [helper.make_tensor_value_info("y", elem, [2, 2])], opset=13)
        (y,), _ = ipus.run(model, {"x": x})
        ref = run_ort(model, {"x": x})[0]
        assert y.dtype == ref.dtype
        np.testing.assert_array_equal(y, ref)


@given(
    start=st.sampled_from([0, 3, -2, 0.5]),
    delta=st.sampled_from([1, 2, -1, 0.25, -0.75]),
    count=st.integers(1, 9),
    dtype=st.sampled_from([np.float32, np.int64, np.int32]),
)
def test_range_is_always_folded(ipus, start, delta, count, dtype):
    if np.dtype(dtype).kind == "i":
        start, delta = int(start), int(delta) or 1
    limit = start + delta * count
    consts = [numpy_helper.from_array(np.array(v, dtype), n) for v, n in ((start, "a"), (limit, "b"), (delta, "d"))]
    n = len(np.arange(start, limit, delta))
    x = np.arange(n).astype(dtype)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [helper.make_node("Range", ["a", "b", "d"], ["r"]), helper.make_node("Add", ["x", "r"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", elem, [n])],
                       [helper.make_tensor_value_info("y", elem, [n])], consts, opset=11)
    (y,), report = ipus.run(model, {"x": x})
    np.testing.assert_allclose(y, run_ort(model, {"x": x})[0], rtol=RTOL, atol=ATOL)
    assert report.passes["folded"] == 1 and placed_ops(report) == ["Add"]


def test_range_from_a_graph_input_is_an_error(ipus):
    nodes = [helper.make_node("Range", ["a", "b", "d"], ["y"])]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])],
        [numpy_helper.from_array(np.array(0, np.float32), "a"), numpy_helper.from_array(np.array(1, np.float32), "d")],
        opset=11,
    )
    with pytest.raises(UnsupportedOperatorError, match="compile time"):
        ipus.run(model, {"b": np.array(4, np.float32)})


# ---------------------------------------------------------------------------
# Constant folding


def test_shape_gather_concat_reshape_folds_completely(ipus):
    """The shape arithmetic of a flatten written the exporter's way folds
    away; only the reshape itself (free) and the real work remain."""
    x = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["b"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["bu"], name="unsqueeze"),
        helper.make_node("Concat", ["bu", "minus1"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
        helper.make_node("Relu", ["flat"], ["y"], name="relu"),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 5])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 20])], inits, opset=13)
    (y,), report = ipus.run(model, {"x": x})
    np.testing.assert_allclose(y, run_ort(model, {"x": x})[0], rtol=RTOL, atol=ATOL)
    assert report.passes["folded"] == 4
    placed = placed_ops(report)
    assert not {"Shape", "Gather", "Unsqueeze", "Concat"} & set(placed), placed


def test_initializer_only_subgraph_is_folded(ipus):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((4, 6)).astype(np.float32)
    x = rng.standard_normal((6, 6)).astype(np.float32)
    nodes = [
        helper.make_node("Slice", ["w", "s0", "e0", "a0", "st0"], ["ws"], name="slice"),  # [2, 6]
        helper.make_node("Pad", ["ws", "pads"], ["wp"], name="pad", mode="reflect"),  # [4, 6]
        helper.make_node("Tile", ["wp", "reps"], ["wt"], name="tile"),  # [4, 6]
        helper.make_node("Split", ["wt"], ["w0", "w1"], name="split", axis=0, num_outputs=2),  # [2, 6] x2
        helper.make_node("Concat", ["w1", "w0", "w1"], ["wc"], name="concat", axis=0),  # [6, 6]
        helper.make_node("Expand", ["wc", "shape"], ["we"], name="expand"),
        helper.make_node("Gather", ["we", "idx"], ["wg"], name="gather", axis=1),
        helper.make_node("Add", ["x", "wg"], ["y"], name="add"),
    ]
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(i64(3), "s0"), numpy_helper.from_array(i64(0), "e0"),
        numpy_helper.from_array(i64(0), "a0"), numpy_helper.from_array(i64(-2), "st0"),
        numpy_helper.from_array(i64(1, 0, 1, 0), "pads"),
        numpy_helper.from_array(i64(1, 1), "reps"),
        numpy_helper.from_array(i64(6, 6), "shape"),
        numpy_helper.from_array(i64(5, 4, 3, 2, 1, 0), "idx"),
    ]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 6])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 6])], inits, opset=18)
    (y,), report = ipus.run(model, {"x": x})
    np.testing.assert_allclose(y, run_ort(model, {"x": x})[0], rtol=RTOL, atol=ATOL)
    assert report.passes["folded"] == 7
    assert placed_ops(report) == ["Add"]


# ---------------------------------------------------------------------------
# float16 precision: one case per operator

F16_CASES = {
    # The constant is exact in half, so only graph inputs are rounded.
    "Concat": lambda x: ([Arg("x", x), Arg("c", np.float32([[0.5], [-2], [3.25], [1024]]), True)], {"axis": -1}, 1, 13),
    "Split": lambda x: ([Arg("x", x)], {"axis": 1, "num_outputs": 2}, 2, 18),
    "Slice": lambda x: ([Arg("x", x), Arg("s", i64(-1), True), Arg("e", i64(-100), True), Arg("a", i64(1), True),
                         Arg("st", i64(-2), True)], {}, 1, 13),
    "Expand": lambda x: ([Arg("x", x[:, :1]), Arg("s", i64(2, 4, 5), True)], {}, 1, 13),
    "Tile": lambda x: ([Arg("x", x), Arg("r", i64(2, 3), True)], {}, 1, 13),
    "Gather": lambda x: ([Arg("x", x), Arg("i", i64(4, 0, 0, 2), True)], {"axis": 1}, 1, 13),
    "Pad": lambda x: ([Arg("x", x), Arg("p", i64(1, 2, 2, 3), True)], {"mode": "reflect"}, 1, 13),
}


@pytest.mark.parametrize("op", sorted(F16_CASES))
def test_float16_precision(ipus, op):
    x = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32) * 10
    args, attrs, n_out, opset = F16_CASES[op](x)
    model, _ = op_model(op, args, n_out=n_out, opset=opset, **attrs)
    feeds = feeds_of(args)
    outs, report = ipus.run(model, feeds, precision="float16")
    assert op in placed_ops(report)
    ref16 = run_ort(model, half_rounded(feeds))
    ref32 = run_ort(model, feeds)
    for y, r16, r32 in zip(outs, ref16, ref32):
        assert y.dtype == np.float32
        np.testing.assert_array_equal(y, r16)
        np.testing.assert_allclose(y, r32, rtol=2**-11, atol=0)
