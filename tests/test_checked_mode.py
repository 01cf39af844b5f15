"""The simulator's checked mode (NEURENIX_SIM_CHECKED=1, docs/options.md):
before a program runs, the engine verifies that every vertex field and every
exchange copy stays inside its tile's memory and its variable's slice, and
every receive alias inside its sender's. A set of
models covering every vertex kind and exchange pattern (matmul, conv with
groups/strides/dilations, pooling, reductions, gather, rearrangements, fused
element-wise maps, copies between IPUs) must load and run in that mode, and
still match onnxruntime."""

import pathlib
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel
from onnx_models import make_model, mlp, mlp_reference

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
from models import bert_encoder  # noqa: E402


@pytest.fixture(autouse=True)
def checked(monkeypatch):
    monkeypatch.setenv("NEURENIX_SIM_CHECKED", "1")


def run(model, feeds, precision="float32", tiles=8, num_ipus=1):
    with GraphCoreManager(num_ipus=num_ipus, precision=precision,
                          ipu_model=IPUModel(num_ipus=num_ipus, tiles_per_ipu=tiles)) as ipu:
        compiled = ipu.compile_model(model, feeds)
        outs = ipu.execute_model(compiled, feeds)
        assert compiled.last_execution.checked, "the run was not in checked mode"
        run.last = compiled.last_execution
        return outs


def ort_run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_unchecked_runs_say_so(monkeypatch):
    monkeypatch.setenv("NEURENIX_SIM_CHECKED", "0")
    model, _ = mlp([4, 3], np.random.default_rng(0))
    with GraphCoreManager(precision="float32", ipu_model=IPUModel(num_ipus=1, tiles_per_ipu=2)) as ipu:
        compiled = ipu.compile_model(model, np.zeros((2, 4), np.float32))
        ipu.execute_model(compiled, np.zeros((2, 4), np.float32))
        assert not compiled.last_execution.checked


@pytest.mark.parametrize("num_ipus", [1, 2])
def test_an_mlp_over_one_or_two_ipus(num_ipus):
    rng = np.random.default_rng(1)
    model, params = mlp([24, 40, 16, 5], rng)
    x = rng.standard_normal((6, 24)).astype(np.float32)
    (y,) = run(model, x, tiles=4, num_ipus=num_ipus)
    np.testing.assert_allclose(y, mlp_reference(params, x), rtol=1e-5, atol=1e-6)


def matches_onnxruntime_with_aliases(model, x, precision, tiles, half_tolerance, relative=False):
    """The model's one output in checked mode matches onnxruntime's (to 1e-5
    in float32, `half_tolerance` in float16; also relative to the output
    when `relative`), and some receives were read at their senders (receive
    aliases), verified at load."""
    (want,) = ort_run(model, {"x": x})
    (got,) = run(model, {"x": x}, precision=precision, tiles=tiles)
    tol = 1e-5 if precision == "float32" else half_tolerance
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol if relative else 1e-7)
    assert 0 < run.last.copied_bytes < run.last.exchanged_bytes


def small_cnn(rng):
    """Conv (stride, pads, dilation), grouped and depthwise conv, BatchNorm,
    Relu, max and average pooling, Pad, Slice, Concat, Transpose, a global
    pool, Gemm and Softmax."""
    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    inits = [
        w("w1", 8, 3, 3, 3), w("b1", 8),
        w("w2", 8, 2, 3, 3),
        w("w3", 8, 1, 3, 3),
        numpy_helper.from_array(np.abs(rng.standard_normal(8)).astype(np.float32) + 0.5, "scale"),
        w("bias", 8), w("mean", 8),
        numpy_helper.from_array(np.abs(rng.standard_normal(8)).astype(np.float32) + 0.5, "var"),
        w("fc", 16, 5), w("fcb", 5),
        numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
        numpy_helper.from_array(np.array([1, 2], np.int64), "starts"),
        numpy_helper.from_array(np.array([9, 10], np.int64), "ends"),
        numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[1, 1], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c1", "w2"], ["c2"], group=4, strides=[2, 1], pads=[2, 2, 2, 2], dilations=[2, 2]),
        helper.make_node("Conv", ["c2", "w3"], ["c3"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c3", "scale", "bias", "mean", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("Pad", ["r", "pads"], ["p"], mode="reflect"),
        helper.make_node("MaxPool", ["p"], ["mp"], kernel_shape=[3, 3], strides=[1, 1]),
        helper.make_node("AveragePool", ["p"], ["ap"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        helper.make_node("Slice", ["mp", "starts", "ends", "axes"], ["sl"]),
        helper.make_node("Transpose", ["sl"], ["t"], perm=[0, 1, 3, 2]),
        helper.make_node("GlobalAveragePool", ["t"], ["g1"]),
        helper.make_node("GlobalMaxPool", ["ap"], ["g2"]),
        helper.make_node("Concat", ["g1", "g2"], ["cat"], axis=1),
        helper.make_node("Flatten", ["cat"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["y"]),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
        inits,
        opset=17,
    )


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_a_small_cnn(precision):
    rng = np.random.default_rng(2)
    model = small_cnn(rng)
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    matches_onnxruntime_with_aliases(model, x, precision, tiles=8, half_tolerance=2e-2)


def pointwise_cnn(rng):
    """A 3x3 convolution spread over 64 tiles, then two 1x1 convolutions:
    a 1x1 window gathers its channels from several tiles and reads them
    where they were sent from (in pieces), in float32 and in float16 (the
    half rows read in place)."""
    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["y"]),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])],
        [w("w1", 256, 64, 3, 3), w("w2", 64, 256, 1, 1), w("b2", 64), w("w3", 8, 64, 1, 1)],
        opset=17,
    )


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_pointwise_convolutions_read_their_windows_in_pieces(precision):
    rng = np.random.default_rng(5)
    model = pointwise_cnn(rng)
    x = rng.standard_normal((1, 64, 4, 4)).astype(np.float32)
    matches_onnxruntime_with_aliases(model, x, precision, tiles=64, half_tolerance=3e-2, relative=True)


def test_a_bert_style_encoder_with_gather_and_reductions():
    model, feeds = bert_encoder(2, 8, vocab=50, hidden=32, heads=4, layers=2, ffn=64, init_std=32 ** -0.5)
    want = ort_run(model, feeds)
    got = run(model, feeds, tiles=16)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert 0 < run.last.copied_bytes < run.last.exchanged_bytes
