"""A real MLP classifier end to end on tiny simulated IPUs, against numpy.

Tolerances (documented in docs/precision.md):
- float32: |ipu - numpy_f64| <= 1e-5 + 1e-5 * |numpy_f64|
- float16, float partials: <= 2e-2 * max|numpy_f64| on logits-scale outputs
- float16, half partials: <= 4e-2 * max|numpy_f64|
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel
from onnx_models import mlp, mlp_reference

TOL16 = {True: 4e-2, False: 2e-2}


def tiny(tiles=4, num_ipus=1, bytes_per_tile=None):
    return IPUModel(version="ipu2", num_ipus=num_ipus, tiles_per_ipu=tiles, bytes_per_tile=bytes_per_tile)


mlp_shapes = st.lists(st.integers(1, 40), min_size=2, max_size=5)


@given(
    widths=mlp_shapes,
    batch=st.integers(1, 17),
    tiles=st.sampled_from([1, 2, 3, 4, 7, 16]),
    activation=st.sampled_from(["Relu", "Sigmoid", "Tanh"]),
    use_gemm=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_mlps_match_numpy_in_float32(widths, batch, tiles, activation, use_gemm, seed):
    rng = np.random.default_rng(seed)
    model, params = mlp(widths, rng, activation=activation, use_gemm=use_gemm, softmax=seed % 2 == 0)
    x = rng.standard_normal((batch, widths[0])).astype(np.float32)
    with GraphCoreManager(precision="float32", ipu_model=tiny(tiles)) as ipu:
        compiled = ipu.compile_model(model, x)
        (y,) = ipu.execute_model(compiled, x)
    ref = mlp_reference(params, x, activation, softmax=seed % 2 == 0)
    assert y.dtype == np.float32 and y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@given(
    widths=st.lists(st.integers(4, 48), min_size=2, max_size=4),
    batch=st.integers(1, 12),
    half_partials=st.booleans(),
    precision=st.sampled_from(["float16", "mixed"]),
    seed=st.integers(0, 2**16),
)
def test_random_mlps_in_half_precision_stay_within_tolerance(widths, batch, half_partials, precision, seed):
    rng = np.random.default_rng(seed)
    model, params = mlp(widths, rng, softmax=False)
    x = rng.standard_normal((batch, widths[0])).astype(np.float32)
    with GraphCoreManager(precision=precision, enable_half_partials=half_partials, ipu_model=tiny(4)) as ipu:
        (y,) = ipu.execute_model(ipu.compile_model(model, x), x)
    ref = mlp_reference(params, x, softmax=False)
    assert y.dtype == np.float32
    scale = max(1.0, float(np.abs(ref).max()))
    assert np.abs(y - ref).max() <= TOL16[half_partials] * scale


def _run(model, x, **kw):
    with GraphCoreManager(ipu_model=tiny(4), **kw) as ipu:
        return ipu.execute_model(ipu.compile_model(model, x), x)[0]


def test_precision_really_changes_the_arithmetic():
    rng = np.random.default_rng(3)
    model, params = mlp([256, 64, 8], rng, softmax=False)
    x = rng.standard_normal((4, 256)).astype(np.float32)
    ref = mlp_reference(params, x, softmax=False)
    y32 = _run(model, x, precision="float32")
    y16 = _run(model, x, precision="float16", enable_half_partials=False)
    y16h = _run(model, x, precision="float16", enable_half_partials=True)
    err32, err16, err16h = (float(np.abs(y - ref).max()) for y in (y32, y16, y16h))
    assert err32 < 1e-5
    # Half precision is measurably coarser than float32, and half partials
    # (256-long dot products accumulated in half) coarser still.
    assert err16 > 20 * err32
    assert err16h > err16
    # Outputs of a float16 run are float16 values widened to float32.
    assert np.array_equal(y16.astype(np.float16).astype(np.float32), y16)


def test_float16_matmul_matches_an_emulation_of_the_accumulator():
    """One product of half-precision data, against numpy emulating the AMP:
    float partials sum the exact products in float32 and round once; half
    partials round every 16-product chunk to half and accumulate in half."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx_models import make_model

    rng = np.random.default_rng(11)
    k = 1024
    a = rng.uniform(0.5, 1.5, (3, k)).astype(np.float16)
    w = rng.uniform(0.5, 1.5, (k, 5)).astype(np.float16)
    model = make_model(
        [helper.make_node("MatMul", ["a", "w"], ["y"])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
        [numpy_helper.from_array(w.astype(np.float32), "w")],
    )
    x = a.astype(np.float32)
    prod = a.astype(np.float32)[:, :, None] * w.astype(np.float32)[None, :, :]  # exact
    float_partials = prod.sum(1, dtype=np.float32).astype(np.float16)
    acc = np.zeros((3, 5), np.float16)
    for c in range(0, k, 16):
        chunk = prod[:, c:c + 16, :].sum(1, dtype=np.float32).astype(np.float16)
        acc = (acc.astype(np.float32) + chunk.astype(np.float32)).astype(np.float16)
    half_partials = acc
    y_f = _run(model, x, precision="float16", enable_half_partials=False)
    y_h = _run(model, x, precision="float16", enable_half_partials=True)

    def ulps(u, v):
        return np.abs(u.astype(np.float16).view(np.int16).astype(int) - v.view(np.int16).astype(int)).max()

    assert ulps(y_f, float_partials) <= 1
    assert ulps(y_h, half_partials) <= 1
    # The two emulations differ here, so the comparison above discriminates.
    assert ulps(float_partials.astype(np.float32), half_partials) >= 3


@pytest.mark.parametrize("form", ["array", "list", "dict"])
def test_inputs_by_array_sequence_or_mapping(form):
    rng = np.random.default_rng(5)
    model, params = mlp([6, 5, 3], rng)
    x = rng.standard_normal((2, 6)).astype(np.float32)
    given_inputs = {"array": x, "list": [x], "dict": {"x": x}}[form]
    with GraphCoreManager(precision="float32", ipu_model=tiny(2)) as ipu:
        compiled = ipu.compile_model(model, given_inputs)
        (y,) = ipu.execute_model(compiled, given_inputs)
    np.testing.assert_allclose(y, mlp_reference(params, x), rtol=1e-5, atol=1e-6)


def test_model_as_bytes_and_as_path(tmp_path):
    import onnx

    rng = np.random.default_rng(6)
    model, params = mlp([4, 3], rng)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    with GraphCoreManager(precision="float32", ipu_model=tiny(2)) as ipu:
        for form in (model.SerializeToString(), str(path), path):
            (y,) = ipu.execute_model(ipu.compile_model(form, x), x)
            np.testing.assert_allclose(y, mlp_reference(params, x), rtol=1e-5, atol=1e-6)


def test_outputs_are_deterministic_run_to_run_and_across_managers():
    rng = np.random.default_rng(8)
    model, _ = mlp([32, 48, 16, 10], rng)
    x = rng.standard_normal((9, 32)).astype(np.float32)
    runs = []
    for threads in (1, 2, None):
        with GraphCoreManager(precision="float16", ipu_model=tiny(7), simulator_threads=threads) as ipu:
            compiled = ipu.compile_model(model, x)
            runs.append(ipu.execute_model(compiled, x)[0])
            runs.append(ipu.execute_model(compiled, x)[0])
    for r in runs[1:]:
        assert r.tobytes() == runs[0].tobytes()


def test_outputs_come_back_in_declared_types():
    from onnx import TensorProto, helper
    from onnx_models import make_model

    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Cast", ["r"], ["i"], to=TensorProto.INT64),
            helper.make_node("Cast", ["r"], ["h"], to=TensorProto.FLOAT16),
            helper.make_node("Greater", ["x", "r"], ["b"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, [2, 3]),
            helper.make_tensor_value_info("h", TensorProto.FLOAT16, [2, 3]),
            helper.make_tensor_value_info("b", TensorProto.BOOL, [2, 3]),
        ],
    )
    x = np.array([[-1.5, 2.7, 3.2], [40000.3, -0.2, 7.9]], np.float32)
    with GraphCoreManager(precision="float32", ipu_model=tiny(2)) as ipu:
        i, h, b = ipu.execute_model(ipu.compile_model(model, x), x)
    r = np.maximum(x, 0)
    assert i.dtype == np.int64 and np.array_equal(i, r.astype(np.int64))
    assert h.dtype == np.float16 and np.array_equal(h, r.astype(np.float16))
    assert b.dtype == np.bool_ and np.array_equal(b, x > r)


def test_each_run_has_its_own_report_and_the_manager_shows_the_latest():
    # Reports are made when first read: each must still be its own run's,
    # whichever model ran after it.
    rng = np.random.default_rng(4)
    small, _ = mlp([6, 5, 3], rng)
    big, _ = mlp([6, 64, 64, 3], rng)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    with GraphCoreManager(precision="float32", ipu_model=tiny(2)) as ipu:
        a, b = ipu.compile_model(small, x), ipu.compile_model(big, x)
        assert ipu.last_execution_report is None and a.last_execution is None
        ipu.execute_model(a, x)
        ipu.execute_model(b, x)
        rb = ipu.last_execution_report
        ra = a.last_execution  # read after b ran
        assert rb is b.last_execution and ra is not rb
        assert (ra.cycles, rb.cycles) == (a.report.cycles_per_run, b.report.cycles_per_run)
        assert ra.cycles != rb.cycles
        assert ra.ipus and ra.ipus == rb.ipus
        steps_a = list(ra.step_seconds)
        ipu.execute_model(a, x)
        ra2 = ipu.last_execution_report
        assert ra2 is a.last_execution is not ra
        # (The host times of two runs of the same model: each its own.)
        assert ra.step_seconds == steps_a and ra2.step_seconds != steps_a
        assert b.last_execution is rb and rb.cycles == b.report.cycles_per_run


def test_inputs_in_other_layouts_give_the_same_outputs_which_are_fresh_writable_arrays():
    # Arrays already of the declared type and shape go straight in; a
    # big-endian, strided or float64 copy of the same values must give the
    # same bytes out, and every output is a writable array of its own in the
    # host's byte order.
    rng = np.random.default_rng(9)
    model, params = mlp([6, 5, 3], rng)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    forms = [
        x.astype(x.dtype.newbyteorder(">")),
        np.repeat(x, 2, axis=1)[:, ::2],
        x.astype(np.float64),
        np.asfortranarray(x),
    ]
    with GraphCoreManager(precision="float32", ipu_model=tiny(2)) as ipu:
        compiled = ipu.compile_model(model, x)
        (y,) = ipu.execute_model(compiled, x)
        np.testing.assert_allclose(y, mlp_reference(params, x), rtol=1e-5, atol=1e-6)
        assert y.dtype.isnative and y.flags.writeable
        y0 = y.copy()
        y[...] = 0  # the caller's to change: the next run is not affected
        assert ipu.execute_model(compiled, x)[0].tobytes() == y0.tobytes()
        for form in forms:
            (z,) = ipu.execute_model(compiled, form)
            assert z.tobytes() == y0.tobytes()
            assert z.dtype == np.float32 and z.dtype.isnative and z.flags.writeable
