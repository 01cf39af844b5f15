"""Element types the IPU only stores: bfloat16 and the four float8 types as
model inputs, outputs, initializers and Cast targets (converted exactly to
float on the way in, rounded to nearest-even on the way out and by Cast, as
ONNX defines), checked against ml_dtypes and onnx's reference evaluator; and
the element types neurenix refuses, with UnsupportedOperatorError naming the
type and where it is used."""

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from neurenix.hardware.graphcore import (
    GraphCoreManager,
    InputMismatchError,
    IPUModel,
    ModelFormatError,
    UnsupportedOperatorError,
)

# Overflow, NaN and infinities are what these tests are about.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F = TensorProto.FLOAT
BF16 = TensorProto.BFLOAT16
#: (ONNX code, ml_dtypes type) of the float8 types.
FLOAT8 = [
    (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
    (TensorProto.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz),
    (TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2),
    (TensorProto.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz),
]
OPSET = 21


def tiny(precision="float32"):
    return GraphCoreManager(ipu_model=IPUModel(num_ipus=1, tiles_per_ipu=4), precision=precision,
                            enable_half_partials=False)


def model(nodes, inputs, outputs, inits=(), opset=OPSET):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(*o) for o in outputs], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def run(m, feeds, precision="float32"):
    with tiny(precision) as ipu:
        return ipu.execute_model(ipu.compile_model(m, feeds), feeds)


def same(got, want):
    """Equal as values (NaN equals NaN, and zeros keep their sign), in the same type."""
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(g, w)
    assert (np.signbit(g) == np.signbit(w))[~np.isnan(w)].all()


def float32_grid(rng, extra=()):
    """Float32 values exercising rounding: random bit patterns (NaN and
    infinity included), small and large magnitudes, and `extra`."""
    bits = rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    small = rng.uniform(-600, 600, 3000).astype(np.float32)
    tiny_ = (rng.uniform(-1, 1, 1000) * 2.0 ** rng.integers(-20, 0, 1000)).astype(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, *extra], np.float32)
    return np.concatenate([bits, small, tiny_, specials])


# -- bfloat16 --------------------------------------------------------------------------------


def test_bfloat16_inputs_initializers_and_outputs_are_exact_then_rounded_to_nearest_even():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 8)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal(8).astype(ml_dtypes.bfloat16)
    m = model([helper.make_node("Mul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "x"], ["y"])],
              [("x", BF16, [4, 8])], [("y", BF16, [4, 8])], [numpy_helper.from_array(w, "w")])
    (y,) = run(m, x)
    # float32 arithmetic on the exact values, each product and sum rounded
    # to float32 as numpy does, and the result rounded once to bfloat16.
    xf, wf = x.astype(np.float32), w.astype(np.float32)
    want = (xf * wf + xf).astype(ml_dtypes.bfloat16)
    same(y, want)
    assert y.dtype == ml_dtypes.bfloat16


def test_a_bfloat16_matmul_is_within_one_bfloat16_step_of_float32_arithmetic():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 40)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((40, 5)).astype(ml_dtypes.bfloat16)
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", BF16, [3, 40])], [("y", BF16, [3, 5])],
              [numpy_helper.from_array(w, "w")])
    (y,) = run(m, x)
    exact = x.astype(np.float64) @ w.astype(np.float64)
    # The device sums in another order than numpy: one bfloat16 step at most.
    step = np.abs(exact) * 2.0 ** -7
    assert np.all(np.abs(y.astype(np.float64) - exact) <= step + 1e-6)


def test_bfloat16_in_float16_precision_is_computed_in_half():
    x = np.array([1.0, 3.140625, -250.0, 1e5, 2.0 ** -30], ml_dtypes.bfloat16)
    m = model([helper.make_node("Neg", ["x"], ["y"])], [("x", BF16, [5])], [("y", BF16, [5])])
    (y,) = run(m, x, precision="float16")
    # Stored in half on the way in: 1e5 overflows, 2^-30 underflows to zero.
    want = (-x.astype(np.float32).astype(np.float16)).astype(np.float32).astype(ml_dtypes.bfloat16)
    same(y, want)
    assert np.isinf(y.astype(np.float32)[3]) and y.astype(np.float32)[4] == 0


@pytest.mark.parametrize("on_device", [True, False])
def test_cast_to_bfloat16_rounds_to_nearest_even_and_goes_on_in_float(on_device):
    """Cast(float32 -> bfloat16) -> Mul by 3 in float32 -> Cast(float32):
    the ONNX reference evaluator rounds as ml_dtypes does; on the device
    (an input) and folded on the host (an initializer)."""
    x = float32_grid(np.random.default_rng(3), extra=[1 + 2**-8, 1 + 3 * 2**-8, 3.3961e38, 3.3963e38])
    nodes = [helper.make_node("Cast", ["x"], ["b"], to=BF16), helper.make_node("Cast", ["b"], ["f"], to=F),
             helper.make_node("Mul", ["f", "three"], ["y"])]
    three = numpy_helper.from_array(np.array(3.0, np.float32), "three")
    if on_device:
        m = model(nodes, [("x", F, [x.size])], [("y", F, [x.size])], [three])
        feeds = {"x": x}
    else:
        nodes[2].output[0] = "y0"
        m = model(nodes + [helper.make_node("Add", ["y0", "z"], ["y"])], [("z", F, [x.size])],
                  [("y", F, [x.size])], [three, numpy_helper.from_array(x, "x")])
        feeds = {"z": np.zeros_like(x)}
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    (y,) = run(m, feeds)
    same(y, want)
    expected = x.astype(ml_dtypes.bfloat16).astype(np.float32) * np.float32(3)
    same(want, expected if on_device else expected + np.float32(0))


def test_float32_results_declared_bfloat16_are_rounded_on_the_way_out():
    x = float32_grid(np.random.default_rng(4))
    x = x[np.isfinite(x)]
    m = model([helper.make_node("Cast", ["x"], ["y"], to=BF16)], [("x", F, [x.size])], [("y", BF16, [x.size])])
    (y,) = run(m, x)
    same(y, x.astype(ml_dtypes.bfloat16))


def test_bfloat16_input_data_of_another_type_is_refused_with_the_conversion():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", BF16, [3])], [("y", BF16, [3])])
    with tiny() as ipu:
        compiled = ipu.compile_model(m, np.zeros(3, ml_dtypes.bfloat16))
        with pytest.raises(InputMismatchError, match=r"must be bfloat16, got float32.*ml_dtypes\.bfloat16"):
            ipu.execute_model(compiled, np.zeros(3, np.float32))
        # Python lists take the model's type.
        (y,) = ipu.execute_model(compiled, [[-1.0, 2.5, 3.0]][0])
        same(y, np.array([0.0, 2.5, 3.0], ml_dtypes.bfloat16))


def test_bfloat16_initializers_survive_optimize_model():
    w = np.array([0.5, -1.5, 3.0078125], ml_dtypes.bfloat16)
    m = model([helper.make_node("Mul", ["x", "w"], ["y"])], [("x", BF16, [3])], [("y", BF16, [3])],
              [numpy_helper.from_array(w, "w")])
    x = np.array([2.0, 2.0, 2.0], ml_dtypes.bfloat16)
    with tiny() as ipu:
        opt = ipu.optimize_model(m, x)
    onnx.checker.check_model(opt)
    same(ReferenceEvaluator(opt).run(None, {"x": x})[0], ReferenceEvaluator(m).run(None, {"x": x})[0])


# -- float8 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("code,dt", FLOAT8, ids=[d.__name__ for _, d in FLOAT8])
def test_every_float8_value_goes_in_exactly_and_comes_back_unchanged(code, dt):
    every = np.arange(256, dtype=np.uint8).view(dt)
    m = model([helper.make_node("Cast", ["x"], ["f"], to=F), helper.make_node("Identity", ["x"], ["y"])],
              [("x", code, [256])], [("f", F, [256]), ("y", code, [256])])
    for precision in ("float32", "float16"):
        f, y = run(m, every, precision)
        # Every float8 value is exact in float32 and in float16.
        same(f, every.astype(np.float32))
        same(y, every)


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("code,dt", FLOAT8, ids=[d.__name__ for _, d in FLOAT8])
def test_cast_to_float8_rounds_to_nearest_even_and_saturates_as_onnx_defines(code, dt, saturate):
    """On the device and folded on the host, against the reference evaluator
    and against ml_dtypes directly (saturation: clip first)."""
    every = np.arange(256, dtype=np.uint8).view(dt).astype(np.float32)
    mids = (every[:-1] + np.diff(every) / 2).astype(np.float32)
    x = float32_grid(np.random.default_rng(5), extra=np.concatenate([every, mids, np.nextafter(mids, np.inf),
                                                                      np.nextafter(mids, -np.inf)]))
    x = x[np.isfinite(x) | np.isinf(x) | np.isnan(x)]
    info = ml_dtypes.finfo(dt)
    direct = (np.clip(x, info.min, info.max) if saturate else x).astype(dt)
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=code, saturate=saturate),
             helper.make_node("Cast", ["c"], ["f"], to=F), helper.make_node("Identity", ["c"], ["y"])]
    m = model(nodes, [("x", F, [x.size])], [("f", F, [x.size]), ("y", code, [x.size])])
    f, y = run(m, x)
    ref_f, ref_y = ReferenceEvaluator(m).run(None, {"x": x})
    same(y, ref_y)
    same(y, direct)
    same(f, ref_f)
    # The same cast folded at compile time (the input an initializer).
    folded = model(nodes[:1] + [helper.make_node("Cast", ["c"], ["f0"], to=F),
                                helper.make_node("Add", ["f0", "z"], ["f"])],
                   [("z", F, [x.size])], [("f", F, [x.size])], [numpy_helper.from_array(x, "x")])
    z = np.zeros_like(x)
    (ff,) = run(folded, {"z": z})
    same(ff, ReferenceEvaluator(folded).run(None, {"z": z})[0])


def test_float8_initializers_are_decoded_exactly():
    code, dt = FLOAT8[0]
    w = np.arange(256, dtype=np.uint8).view(dt)
    w = w[~np.isnan(w.astype(np.float32))]
    m = model([helper.make_node("Cast", ["w"], ["c"], to=F), helper.make_node("Add", ["c", "x"], ["y"])],
              [("x", F, [w.size])], [("y", F, [w.size])], [numpy_helper.from_array(w, "w")])
    (y,) = run(m, np.zeros(w.size, np.float32))
    same(y, w.astype(np.float32) + np.float32(0))


# -- types neurenix does not hold ---------------------------------------------------------------


def refused(m, feeds=None):
    with tiny() as ipu:
        with pytest.raises(UnsupportedOperatorError) as e:
            ipu.compile_model(m, feeds)
        assert not isinstance(e.value, ModelFormatError)
        return e.value


def test_inputs_initializers_constants_and_outputs_of_other_types_are_unsupported_naming_type_and_place():
    e = refused(model([helper.make_node("Cast", ["q"], ["y"], to=F, name="dequant")],
                      [("q", TensorProto.INT4, [4])], [("y", F, [4])]))
    assert "input 'q'" in str(e) and "INT4" in str(e) and e.op_type == "Cast" and e.node == "dequant"
    w = helper.make_tensor("w", TensorProto.UINT4, [4], [1, 2, 3, 4])
    e = refused(model([helper.make_node("Cast", ["w"], ["c"], to=F, name="widen"),
                       helper.make_node("Add", ["x", "c"], ["y"])], [("x", F, [4])], [("y", F, [4])], [w]),
                np.zeros(4, np.float32))
    assert "initializer 'w'" in str(e) and "UINT4" in str(e) and e.node == "widen"
    k = helper.make_tensor("k", TensorProto.FLOAT4E2M1, [2], [0.5, 1.0])
    e = refused(model([helper.make_node("Constant", [], ["k"], value=k, name="konst"),
                       helper.make_node("Cast", ["k"], ["y"], to=F)], [], [("y", F, [2])], opset=23))
    assert "FLOAT4E2M1" in str(e) and "'konst'" in str(e) and e.op_type == "Constant"
    e = refused(model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT4, name="quant")],
                      [("x", F, [4])], [("y", TensorProto.INT4, [4])]), np.zeros(4, np.float32))
    assert "INT4" in str(e) and e.node == "quant"
    # Every message says what neurenix does hold.
    assert "bfloat16" in str(e) and "float8_e4m3fn" in str(e)


def test_the_manager_stays_usable_after_a_refused_type():
    with tiny() as ipu:
        with pytest.raises(UnsupportedOperatorError):
            ipu.compile_model(model([helper.make_node("Identity", ["q"], ["y"])], [("q", TensorProto.INT4, [4])],
                                    [("y", TensorProto.INT4, [4])]))
        x = np.array([1.5, -2.0], ml_dtypes.float8_e4m3fn)
        m = model([helper.make_node("Identity", ["x"], ["y"])], [("x", TensorProto.FLOAT8E4M3FN, [2])],
                  [("y", TensorProto.FLOAT8E4M3FN, [2])])
        same(ipu.execute_model(ipu.compile_model(m, x), x)[0], x)
