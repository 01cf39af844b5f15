"""optimize_model: graph-level optimisation returns an equivalent ONNX model
(checked with onnxruntime on both) with fewer nodes."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel
from onnx_models import make_model, mlp


def ort_run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_optimized_model_is_equivalent_and_smaller():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    scale = np.float32(3.0)
    nodes = [
        # An initializer-only subgraph: folded away.
        helper.make_node("Transpose", ["wt"], ["w"], perm=[1, 0]),
        helper.make_node("Mul", ["w", "s"], ["w3"]),
        # A shape-computing subgraph: folded away.
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Reshape", ["x", "xs"], ["xr"]),
        helper.make_node("Identity", ["xr"], ["xi"]),
        # MatMul + Add with constant operands: fused into Gemm.
        helper.make_node("MatMul", ["xi", "w3"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["z"]),
        helper.make_node("Relu", ["z"], ["y"]),
        # A dead branch.
        helper.make_node("Sigmoid", ["x"], ["unused"]),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(w.T.copy(), "wt"), numpy_helper.from_array(scale, "s"),
         numpy_helper.from_array(b, "b")],
    )
    x = rng.standard_normal((5, 6)).astype(np.float32)
    ipu = GraphCoreManager(compile_only=True, ipu_model=IPUModel(num_ipus=1, tiles_per_ipu=2))
    opt = ipu.optimize_model(model, x)
    onnx.checker.check_model(opt)
    assert [n.op_type for n in opt.graph.node] == ["Gemm", "Relu"]
    (expected,) = ort_run(model, {"x": x})
    (got,) = ort_run(opt, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    # And the optimised model compiles and runs on the IPU to the same result.
    with GraphCoreManager(precision="float32", ipu_model=IPUModel(num_ipus=1, tiles_per_ipu=2)) as run:
        (y,) = run.execute_model(run.compile_model(opt, x), x)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_optimizing_an_mlp_keeps_it_equivalent():
    rng = np.random.default_rng(1)
    model, _ = mlp([10, 20, 5], rng, use_gemm=False)
    x = rng.standard_normal((3, 10)).astype(np.float32)
    opt = GraphCoreManager(compile_only=True, ipu_model=IPUModel(num_ipus=1)).optimize_model(model, x)
    assert len(opt.graph.node) < len(model.graph.node)
    np.testing.assert_allclose(ort_run(opt, {"x": x})[0], ort_run(model, {"x": x})[0], rtol=1e-6, atol=1e-7)
