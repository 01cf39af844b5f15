"""Compile-only planning: the batch-size and IPU-count searches, batch
resizing, and compile-only managers larger than the simulated system. Each
search's answer is checked against compiles made directly."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_models import make_model, mlp

from neurenix.hardware.graphcore import (
    DeviceNotAttachedError,
    GraphCoreManager,
    InputMismatchError,
    InvalidOptionError,
    IPUModel,
    IPUOutOfMemoryError,
    ModelFormatError,
    find_max_batch,
    find_min_ipus,
    with_batch_size,
)

pytestmark = pytest.mark.filterwarnings("ignore::neurenix.hardware.graphcore.IPUPlanWarning")

SYSTEM = IPUModel(num_ipus=1, tiles_per_ipu=4)
OPTIONS = dict(ipu_model=SYSTEM, precision="float32")


def growing_mlp():
    """Activations grow with the batch: a 4-tile IPU holds a few hundred samples."""
    model, _ = mlp([64, 256, 256, 10], np.random.default_rng(0))
    return model


def compiles(model, batch, num_ipus=1, **options):
    """Whether ``model`` fits at ``batch`` samples, by a direct compile."""
    width = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    with GraphCoreManager(num_ipus=num_ipus, compile_only=True, **dict(OPTIONS, **options)) as m:
        try:
            m.compile_model(model, np.zeros((batch, width), np.float32))
        except IPUOutOfMemoryError:
            return False
    return True


def test_find_max_batch_against_direct_compiles():
    model = growing_mlp()
    search = find_max_batch(model, np.zeros((1, 64), np.float32), **OPTIONS)
    largest = search.largest
    assert largest is not None and 1 < largest < 1024
    # Powers of two up to the first that does not fit, then stop.
    assert [r.batch for r in search.rows] == [1 << k for k in range(largest.bit_length() + 1)]
    assert all(r.fits for r in search.rows[:-1]) and not search.rows[-1].fits
    assert compiles(model, largest) and not compiles(model, 2 * largest)
    last = search.rows[-1]
    assert last.error.startswith("Out of memory on IPU 0 tile") and last.max_tile_bytes > last.bytes_per_tile
    fit = search.row(largest)
    assert fit.max_tile_bytes <= fit.bytes_per_tile and fit.latency_seconds > 0 and fit.throughput > 0
    assert fit.report.micro_batch_size == largest and fit.report.max_tile_memory == fit.max_tile_bytes
    text = str(search)
    assert text.startswith(f"Largest batch that fits: {largest} (1 x ipu2") and f"\n {2 * largest:>4}  no" in text


def test_find_max_batch_bisects_to_the_exact_size():
    model = growing_mlp()
    coarse = find_max_batch(model, np.zeros((3, 64), np.float32), batch_sizes=[16, 64, 256, 1024], **OPTIONS)
    exact = find_max_batch(model, np.zeros((3, 64), np.float32), batch_sizes=[16, 64, 256, 1024], search=True,
                           **OPTIONS)
    failing = next(r.batch for r in coarse.rows if not r.fits)
    assert coarse.largest <= exact.largest < failing
    assert compiles(model, exact.largest) and not compiles(model, exact.largest + 1)
    assert [r.batch for r in exact.rows] == sorted(r.batch for r in exact.rows)


def test_find_max_batch_when_nothing_fits_and_bad_arguments():
    model = growing_mlp()
    search = find_max_batch(model, batch_sizes=[4096, 8192], example_inputs=np.zeros((1, 64), np.float32),
                            **OPTIONS)
    assert search.largest is None and len(search.rows) == 1 and str(search).startswith("No batch size tried fits")
    with pytest.raises(InvalidOptionError, match="batch_sizes"):
        find_max_batch(model, batch_sizes=[0, 4], **OPTIONS)
    with pytest.raises(InvalidOptionError, match="compile_only"):
        find_max_batch(model, compile_only=False, **OPTIONS)


def test_find_min_ipus_against_direct_compiles():
    model, _ = mlp([128, 512, 512, 512, 512, 10], np.random.default_rng(1))
    x = np.zeros((4, 128), np.float32)
    search = find_min_ipus(model, x, max_ipus=8, **OPTIONS)
    n = search.smallest
    assert n is not None and n > 1  # the system has one IPU: the plan goes beyond it
    assert [r.num_ipus for r in search.rows] == [1 << k for k in range(n.bit_length())]
    assert [r.fits for r in search.rows] == [False] * (len(search.rows) - 1) + [True]
    for r in search.rows[:-1]:
        with pytest.raises(IPUOutOfMemoryError):
            with GraphCoreManager(num_ipus=r.num_ipus, compile_only=True, **OPTIONS) as m:
                m.compile_model(model, x)
    with GraphCoreManager(num_ipus=n, compile_only=True, **OPTIONS) as m:
        assert m.compile_model(model, x).report.num_ipus == n
    assert str(search).startswith(f"Fewest IPUs that fit: {n} ({n} x ipu2")
    too_few = find_min_ipus(model, x, max_ipus=n // 2, **OPTIONS)
    assert too_few.smallest is None and len(too_few.rows) == len(search.rows) - 1
    with pytest.raises(InvalidOptionError, match="max_ipus"):
        find_min_ipus(model, x, num_ipus=2, **OPTIONS)


# -- compile-only managers beyond the system --------------------------------------------------


def test_compile_only_manager_plans_beyond_the_system():
    model, _ = mlp([16, 32, 8], np.random.default_rng(2))
    small = IPUModel(version="bow", num_ipus=2, tiles_per_ipu=4, bytes_per_tile=65536)
    m = GraphCoreManager(num_ipus=8, compile_only=True, ipu_model=small)
    assert m.num_ipus == 8 and m.ipu_model == IPUModel("bow", 8, 4, 65536)
    with m:
        compiled = m.compile_model(model, np.zeros((2, 16), np.float32))
        assert compiled.report.num_ipus == 8 and compiled.report.system.version == "bow"
        assert compiled.report.bytes_per_tile == 65536
        with pytest.raises(DeviceNotAttachedError):
            m.execute_model(compiled, np.zeros((2, 16), np.float32))
    # The default system (16 x ipu2) too; attaching managers keep the system's bound.
    assert GraphCoreManager(num_ipus=64, compile_only=True).ipu_model.num_ipus == 64
    with pytest.raises(InvalidOptionError, match="only 2 IPU"):
        GraphCoreManager(num_ipus=8, ipu_model=small)
    with pytest.raises(InvalidOptionError, match="power of two"):
        GraphCoreManager(num_ipus=6, compile_only=True, ipu_model=small)
    with pytest.raises(InvalidOptionError, match="1024"):
        GraphCoreManager(num_ipus=2048, compile_only=True, ipu_model=small)


# -- batch resizing ----------------------------------------------------------------------------


def test_with_batch_size_of_a_dynamic_model_repeats_the_first_sample():
    model, _ = mlp([8, 4], np.random.default_rng(3))
    x = np.arange(24, dtype=np.float32).reshape(3, 8)
    same, arrays = with_batch_size(model, 5, x)
    assert same is model
    assert arrays["x"].shape == (5, 8) and not arrays["x"].flags.writeable
    np.testing.assert_array_equal(arrays["x"], np.tile(x[:1], (5, 1)))
    _, zeros = with_batch_size(model, 5)  # ["N", 8]: the batch is the only unknown
    assert zeros["x"].shape == (5, 8) and zeros["x"].dtype == np.float32 and not zeros["x"].any()
    with pytest.raises(InvalidOptionError, match="batch"):
        with_batch_size(model, 0, x)


def fixed_model(batch=2):
    """x [batch, 4, 3] -> Reshape to [batch, 12] (a constant) -> MatMul -> y [batch, 5]; a second,
    unbatched input t [5] is added to y."""
    w = np.random.default_rng(4).standard_normal((12, 5)).astype(np.float32)
    nodes = [
        helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([batch, 12], np.int64))),
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "W"], ["m"]),
        helper.make_node("Add", ["m", "t"], ["y"]),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4, 3]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 5])],
        [numpy_helper.from_array(w, "W")],
    )
    model.graph.value_info.append(helper.make_tensor_value_info("flat", TensorProto.FLOAT, [batch, 12]))
    return model, w


def test_with_batch_size_rewrites_a_fixed_batch_model():
    model, w = fixed_model(batch=2)
    resized, arrays = with_batch_size(model, 7)
    assert resized is not model and model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2
    dims = [d.dim_value for d in resized.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [7, 4, 3] and resized.graph.output[0].type.tensor_type.shape.dim[0].dim_value == 7
    assert [d.dim_value for d in resized.graph.input[1].type.tensor_type.shape.dim] == [5]  # not batched
    assert len(resized.graph.value_info) == 0
    assert arrays["x"].shape == (7, 4, 3) and arrays["t"].shape == (5,)
    onnx.checker.check_model(resized)
    # It computes the same thing at the new batch.
    x = np.random.default_rng(5).standard_normal((7, 4, 3)).astype(np.float32)
    t = np.arange(5, dtype=np.float32)
    with GraphCoreManager(num_ipus=1, precision="float32", ipu_model=IPUModel(num_ipus=1, tiles_per_ipu=4)) as m:
        (y,) = m.execute_model(m.compile_model(resized, {"x": x, "t": t}), {"x": x, "t": t})
    np.testing.assert_allclose(y, x.reshape(7, 12) @ w + t, rtol=1e-5, atol=1e-5)
    # The same batch changes nothing.
    assert with_batch_size(model, 2)[0] is model


def test_with_batch_size_refuses_what_it_cannot_resize():
    scalar = make_model([helper.make_node("Neg", ["s"], ["y"])], [helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    with pytest.raises(ModelFormatError, match="batch dimension"):
        with_batch_size(scalar, 4)
    two_dynamic = make_model([helper.make_node("Neg", ["x"], ["y"])],
                             [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S"])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "S"])])
    with pytest.raises(InputMismatchError, match="'x'"):
        with_batch_size(two_dynamic, 4)
    _, arrays = with_batch_size(two_dynamic, 4, np.zeros((1, 9), np.float32))
    assert arrays["x"].shape == (4, 9)
