"""The device's floating-point behaviour: stochastic rounding (reproducible
per seed, unbiased, and what makes small fp16 updates add up) and
floating-point exceptions (the first overflow, division by zero or invalid
operation stops the run, naming where)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel
from neurenix.hardware.graphcore.errors import (
    InvalidOptionError,
    InvalidOptionTypeError,
    IPUError,
    IPUFloatingPointError,
)
from onnx_models import make_model

TINY = IPUModel(num_ipus=2, tiles_per_ipu=4)


def scale_model(n, factor, op="Mul"):
    """y = x op factor (factor an initializer), one node named "scale"."""
    return make_model(
        [helper.make_node(op, ["x", "c"], ["y"], name="scale")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
        [numpy_helper.from_array(np.array([factor], np.float32), "c")],
    )


def run(model, x, **options):
    with GraphCoreManager(num_ipus=1, ipu_model=TINY, **options) as ipu:
        compiled = ipu.compile_model(model, {"x": x})
        return ipu.execute_model(compiled, {"x": x})[0]


def half_neighbours(p):
    """The binary16 values just below and above float32 value(s) p > 0."""
    lo = np.float16(p)
    lo = np.where(lo.astype(np.float32) > p, np.nextafter(lo, np.float16(0)), lo)
    hi = np.nextafter(lo, np.float16(np.inf))
    return lo.astype(np.float32), hi.astype(np.float32)


# -- stochastic rounding ---------------------------------------------------------

N = 4096
X = np.full(N, 5.0, np.float32)  # exact in float16; 5 x half(1/3) is not
FACTOR = np.float32(np.float16(1 / 3))  # the constant as the device stores it
P = np.float32(X[0] * FACTOR)  # the float32 product the device rounds


def test_round_to_nearest_is_the_default():
    y = run(scale_model(N, 1 / 3), X, precision="float16")
    assert np.all(y == np.float16(P).astype(np.float32))


def test_stochastic_rounding_picks_a_neighbour_without_bias():
    y = run(scale_model(N, 1 / 3), X, precision="float16", stochastic_rounding=True, seed=7)
    lo, hi = (float(v) for v in half_neighbours(P))
    assert set(np.unique(y).tolist()) == {lo, hi}
    gap = hi - lo
    # P(up) = (P - lo) / gap; with 4096 draws the mean is within a few
    # percent of a spacing of P (4 standard deviations: 0.03 of a gap).
    assert abs(float(y.mean()) - float(P)) < 0.03 * gap
    up = float((y == hi).mean())
    assert abs(up - (float(P) - lo) / gap) < 0.03


def test_same_seed_same_bits_other_seed_other_bits():
    model = scale_model(N, 1 / 3)
    a = run(model, X, precision="float16", stochastic_rounding=True, seed=1)
    b = run(model, X, precision="float16", stochastic_rounding=True, seed=1)
    c = run(model, X, precision="float16", stochastic_rounding=True, seed=2)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert not np.array_equal(a, c)


def test_the_generators_carry_on_from_run_to_run_and_replay_from_the_seed():
    model = scale_model(N, 1 / 3)

    def two_runs(seed=None):
        with GraphCoreManager(num_ipus=1, ipu_model=TINY, precision="float16", stochastic_rounding=True,
                              seed=seed) as ipu:
            compiled = ipu.compile_model(model, {"x": X})
            return [ipu.execute_model(compiled, {"x": X})[0] for _ in range(2)], ipu.effective_seed

    (first, second), seed = two_runs()
    assert not np.array_equal(first, second)  # fresh random bits for the second run
    (again_first, again_second), _ = two_runs(seed)
    assert np.array_equal(first, again_first) and np.array_equal(second, again_second)


def test_float32_precision_is_not_rounded():
    x = np.linspace(0.1, 10, N).astype(np.float32)
    y = run(scale_model(N, 1 / 3), x, precision="float32", stochastic_rounding=True, seed=3)
    np.testing.assert_array_equal(y, x * np.float32(1 / 3))


def test_small_updates_stall_under_round_to_nearest_and_add_up_stochastically():
    # 10,000 increments of 1e-4 to a weight of 1: float16's spacing at 1 is
    # 2^-10 (~9.8e-4), so round to nearest loses every increment.
    steps_per_run, runs, n = 100, 100, 64
    nodes, prev = [], "x"
    for k in range(steps_per_run):
        out = "y" if k == steps_per_run - 1 else f"w{k}"
        nodes.append(helper.make_node("Add", [prev, "d"], [out], name=f"update{k}"))
        prev = out
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
        [numpy_helper.from_array(np.array([1e-4], np.float32), "d")],
    )
    delta = np.float32(np.float16(1e-4))
    exact = np.float32(1.0)
    for _ in range(steps_per_run * runs):
        exact = np.float32(exact + delta)
    results = {}
    for sr in (False, True):
        with GraphCoreManager(num_ipus=1, ipu_model=TINY, precision="float16", stochastic_rounding=sr,
                              seed=11) as ipu:
            w = np.ones(n, np.float32)
            compiled = ipu.compile_model(model, {"x": w})
            for _ in range(runs):
                w = ipu.execute_model(compiled, {"x": w})[0]
        results[sr] = w
    assert np.all(results[False] == 1.0)
    assert abs(float(results[True].mean()) - float(exact)) < 0.02 * float(exact - 1.0), (results[True].mean(), exact)


# -- floating-point exceptions --------------------------------------------------


def test_an_overflow_stops_the_run_and_names_where():
    model = scale_model(8, 1000.0)
    x = np.full(8, 100.0, np.float32)  # 1e5 overflows float16
    with GraphCoreManager(num_ipus=1, ipu_model=TINY, precision="float16", fp_exceptions=True) as ipu:
        compiled = ipu.compile_model(model, {"x": x})
        with pytest.raises(IPUFloatingPointError) as e:
            ipu.execute_model(compiled, {"x": x})
        msg = str(e.value)
        assert "overflow" in msg and "'scale'" in msg and "IPU 0 tile" in msg
        assert isinstance(e.value, FloatingPointError) and isinstance(e.value, IPUError)
        # The manager stays usable: a run that does not overflow goes through.
        ok = ipu.execute_model(compiled, {"x": np.full(8, 2.0, np.float32)})[0]
        assert np.all(ok == 2000.0)
    # Without exceptions, the infinity propagates as IEEE says.
    assert np.all(np.isposinf(run(model, x, precision="float16")))


def test_division_by_zero_and_invalid_operations_are_named():
    x = np.array([1.0, 0.0, 2.0, 4.0], np.float32)
    with pytest.raises(IPUFloatingPointError, match="division by zero"):
        run(scale_model(4, 0.0, op="Div"), x, precision="float32", fp_exceptions=True)
    sqrt = make_model(
        [helper.make_node("Sqrt", ["x"], ["y"], name="root")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    with pytest.raises(IPUFloatingPointError, match=r"invalid operation.*'root'"):
        run(sqrt, np.array([1.0, -1.0, 4.0, 9.0], np.float32), precision="float32", fp_exceptions=True)
    assert np.isnan(run(sqrt, np.array([1.0, -1.0, 4.0, 9.0], np.float32), precision="float32")[1])


def test_an_input_that_overflows_float16_on_its_way_in():
    x = np.array([1.0, 70000.0, 2.0, 3.0], np.float32)
    with pytest.raises(IPUFloatingPointError, match=r"input 'x'.*element 1"):
        run(scale_model(4, 1.0), x, precision="float16", fp_exceptions=True)
    assert np.isposinf(run(scale_model(4, 1.0), x, precision="float16")[1])


def test_non_finite_inputs_propagate_without_an_exception():
    x = np.array([1.0, np.inf, np.nan, 3.0], np.float32)
    y = run(scale_model(4, 2.0), x, precision="float32", fp_exceptions=True)
    assert y[0] == 2.0 and np.isposinf(y[1]) and np.isnan(y[2])


# -- options --------------------------------------------------------------------


@pytest.mark.parametrize(
    "options,error",
    [
        ({"stochastic_rounding": 1}, InvalidOptionTypeError),
        ({"fp_exceptions": "yes"}, InvalidOptionTypeError),
        ({"seed": 1.5}, InvalidOptionTypeError),
        ({"seed": -1}, InvalidOptionError),
        ({"seed": 2**64}, InvalidOptionError),
    ],
)
def test_bad_options_are_refused(options, error):
    with pytest.raises(error):
        GraphCoreManager(num_ipus=1, ipu_model=TINY, **options)


def test_options_from_the_environment(monkeypatch):
    from neurenix.hardware.graphcore.options import options_from_env

    monkeypatch.setenv("NEURENIX_STOCHASTIC_ROUNDING", "1")
    monkeypatch.setenv("NEURENIX_SEED", "42")
    monkeypatch.setenv("NEURENIX_FP_EXCEPTIONS", "true")
    opts = options_from_env()
    assert opts["stochastic_rounding"] is True and opts["seed"] == 42 and opts["fp_exceptions"] is True
    m = GraphCoreManager(**opts, ipu_model=TINY)
    assert m.effective_seed == 42
