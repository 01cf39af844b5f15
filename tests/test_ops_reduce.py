"""Reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp) and
ArgMax/ArgMin on a tiny simulated IPU against onnxruntime, with `axes` as an
attribute (ReduceSum before opset 13, the others before 18) and as an input,
`keepdims` and `noop_with_empty_axes`.

Tolerances:
- float32: rtol 1e-5, atol 1e-6 (both sides sum in float32, in different
  orders: the device sums eight interleaved partials per tile, then combines
  tiles);
- integers and ArgMax/ArgMin: exact;
- float16 precision: inputs are rounded to half on the way in, reduced with
  float32 accumulators and the result rounded to half once, so the output is
  within rtol 2**-10 (two half ulps) of onnxruntime's float32 result on the
  half-rounded inputs (LogSumExp's exponentials are half too: still within);
- mixed precision: reductions are precision-sensitive and run in float32, so
  the result matches onnxruntime on the half-rounded inputs at the float32
  tolerance.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnx_models import make_model
from op_harness import Arg, Ipus, feeds_of, half_rounded, op_model, placed_ops, run_ort

RTOL, ATOL = 1e-5, 1e-6

REDUCE_OPS = [
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
    "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
]


def axes_input_since(op):
    return 13 if op == "ReduceSum" else 18


@pytest.fixture
def ipus():
    i = Ipus(tiles=4)
    yield i
    i.close()


def float_data(op, rng, shape):
    """Well-conditioned data for each op: positive where the result would
    otherwise cancel (sums) or be undefined (log of a sum), near 1 for
    products."""
    if op in ("ReduceSum", "ReduceMean", "ReduceLogSum", "ReduceSumSquare", "ReduceL2"):
        return rng.uniform(0.5, 2.0, shape).astype(np.float32)
    if op == "ReduceProd":
        return rng.uniform(0.8, 1.25, shape).astype(np.float32)
    return (rng.standard_normal(shape) * 3).astype(np.float32)


def reduce_args(op, x, axes, form, empty_as_input, rank, negative):
    """Operands and attributes for `axes` in the chosen opset form."""
    axes = [a - rank if negative else a for a in axes]
    if form == "attr":
        return [x], ({"axes": axes} if axes else {})
    if axes or empty_as_input:
        return [x, Arg("axes", np.array(axes, np.int64), True)], {}
    return [x], {}


def run_and_compare(ipus, model, ref, feeds, op, exact=False):
    (y,), report = ipus.run(model, feeds)
    assert op in placed_ops(report)
    assert y.dtype == ref[0].dtype and y.shape == ref[0].shape, (y.dtype, y.shape, ref[0].dtype, ref[0].shape)
    if exact:
        np.testing.assert_array_equal(y, ref[0])
    else:
        np.testing.assert_allclose(y, ref[0], rtol=RTOL, atol=ATOL)
    return y


@pytest.mark.parametrize("op", REDUCE_OPS)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    picks=st.lists(st.integers(0, 3), max_size=4),
    keepdims=st.sampled_from([None, 0, 1]),
    form=st.sampled_from(["attr", "input"]),
    noop=st.booleans(),
    empty_as_input=st.booleans(),
    negative=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_reduce_float32(ipus, op, shape, picks, keepdims, form, noop, empty_as_input, negative, seed):
    rng = np.random.default_rng(seed)
    rank = len(shape)
    axes = sorted({p % rank for p in picks})
    x = Arg("x", float_data(op, rng, shape))
    args, attrs = reduce_args(op, x, axes, form, empty_as_input, rank, negative)
    if keepdims is not None:
        attrs["keepdims"] = keepdims
    if form == "input":
        opset = axes_input_since(op)
        if noop:
            attrs["noop_with_empty_axes"] = 1
    else:
        opset = 11 if op == "ReduceSum" else 13
    model, ref = op_model(op, args, opset=opset, **attrs)
    run_and_compare(ipus, model, ref, feeds_of(args), op)


@pytest.mark.parametrize("op", [o for o in REDUCE_OPS if o != "ReduceLogSum"] + ["ReduceLogSum"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_reduce_integers(ipus, op, dtype):
    rng = np.random.default_rng(7)
    lo, hi = {"ReduceProd": (-2, 3), "ReduceLogSum": (1, 9), "ReduceLogSumExp": (-3, 4)}.get(op, (-9, 10))
    x = Arg("x", rng.integers(lo, hi, (3, 4, 2)).astype(dtype))
    for axes, keep in (([1], 1), ([0, 2], 0), ([], 1)):
        args, attrs = reduce_args(op, x, axes, "input", False, 3, False)
        model, ref = op_model(op, args, opset=axes_input_since(op), keepdims=keep, **attrs)
        run_and_compare(ipus, model, ref, feeds_of(args), op, exact=True)


def test_log_sum_exp_is_stable_on_the_device(ipus):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 7)).astype(np.float32) + np.float32([[500.0], [-500.0], [0.0]])
    x[2, :] = -np.inf
    args = [Arg("x", x), Arg("axes", np.array([1], np.int64), True)]
    model, ref = op_model("ReduceLogSumExp", args, opset=18)
    y = run_and_compare(ipus, model, ref, feeds_of(args), "ReduceLogSumExp")
    assert np.isfinite(y[:2]).all() and y[2, 0] == -np.inf


def test_reduce_over_an_initializer_is_folded(ipus):
    rng = np.random.default_rng(5)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    x = rng.standard_normal((1, 3)).astype(np.float32)
    nodes = [
        helper.make_node("ReduceMean", ["w", "ax"], ["m"], keepdims=1),
        helper.make_node("ReduceLogSumExp", ["w", "ax"], ["l"], keepdims=1),
        helper.make_node("Sub", ["x", "m"], ["d"]),
        helper.make_node("Add", ["d", "l"], ["y"]),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([0], np.int64), "ax")],
        opset=18,
    )
    (y,), report = ipus.run(model, {"x": x})
    np.testing.assert_allclose(y, run_ort(model, {"x": x})[0], rtol=RTOL, atol=ATOL)
    assert report.passes["folded"] == 2
    assert not {"ReduceMean", "ReduceLogSumExp"} & set(placed_ops(report))


# ---------------------------------------------------------------------------
# ArgMax / ArgMin


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    axis_pick=st.integers(0, 3),
    negative=st.booleans(),
    keepdims=st.sampled_from([None, 0, 1]),
    last=st.sampled_from([None, 0, 1]),
    dtype=st.sampled_from([np.float32, np.int32, np.int64]),
    seed=st.integers(0, 2**16),
)
def test_arg_max_min(ipus, op, shape, axis_pick, negative, keepdims, last, dtype, seed):
    rng = np.random.default_rng(seed)
    axis = axis_pick % len(shape)
    # Few distinct values, so ties are common.
    x = Arg("x", rng.integers(-3, 4, shape).astype(dtype))
    attrs = {"axis": axis - len(shape) if negative else axis}
    if keepdims is not None:
        attrs["keepdims"] = keepdims
    if last is not None:
        attrs["select_last_index"] = last
    model, ref = op_model(op, [x], opset=13, out_dtypes=[np.int64], **attrs)
    run_and_compare(ipus, model, ref, feeds_of([x]), op, exact=True)


# ---------------------------------------------------------------------------
# Half and mixed precision


@pytest.mark.parametrize("op", REDUCE_OPS + ["ArgMax", "ArgMin"])
def test_float16_precision(ipus, op):
    rng = np.random.default_rng(6)
    x = Arg("x", rng.uniform(0.5, 2.0, (3, 4, 5)).astype(np.float32))
    if op.startswith("Arg"):
        args, attrs, out = [x], {"axis": 2, "keepdims": 0}, [np.int64]
    else:
        args, attrs, out = [x, Arg("axes", np.array([0, -1], np.int64), True)], {}, None
    opset = 13 if op in ("ReduceSum", "ArgMax", "ArgMin") else 18
    model, _ = op_model(op, args, opset=opset, out_dtypes=out, **attrs)
    feeds = feeds_of(args)
    (y,), report = ipus.run(model, feeds, precision="float16")
    assert op in placed_ops(report)
    (r,) = run_ort(model, half_rounded(feeds))
    if op.startswith("Arg"):
        np.testing.assert_array_equal(y, r)
    else:
        assert np.array_equal(y.astype(np.float16).astype(np.float32), y)  # a half result
        np.testing.assert_allclose(y, r, rtol=2**-10, atol=0)


def test_mixed_precision_reduces_in_float32(ipus):
    """In mixed precision a reduction of half activations accumulates and
    returns float32; in float16 its result is rounded to half."""
    rng = np.random.default_rng(8)
    x = rng.uniform(0.5, 2.0, (6, 50)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("ReduceSum", ["r", "ax"], ["y"], keepdims=0)]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 50])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])],
        [numpy_helper.from_array(np.array([1], np.int64), "ax")],
        opset=13,
    )
    (r,) = run_ort(model, half_rounded({"x": x}))
    (y_mixed,), _ = ipus.run(model, {"x": x}, precision="mixed")
    (y_half,), _ = ipus.run(model, {"x": x}, precision="float16")
    np.testing.assert_allclose(y_mixed, r, rtol=RTOL, atol=ATOL)
    assert not np.array_equal(y_mixed.astype(np.float16).astype(np.float32), y_mixed)
    assert np.array_equal(y_half.astype(np.float16).astype(np.float32), y_half)
    np.testing.assert_allclose(y_half, r, rtol=2**-11, atol=0)
