"""Models the benchmarks run: name -> builder returning (onnx model, feeds)."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def _mlp(widths, batch, seed=0):
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    prev = "x"
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        inits += [numpy_helper.from_array((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), f"W{i}"),
                  numpy_helper.from_array(rng.standard_normal(b).astype(np.float32) * 0.1, f"b{i}")]
        nodes.append(helper.make_node("Gemm", [prev, f"W{i}", f"b{i}"], [f"z{i}"]))
        if i < len(widths) - 2:
            nodes.append(helper.make_node("Relu", [f"z{i}"], [f"a{i}"]))
            prev = f"a{i}"
    nodes.append(helper.make_node("Softmax", [f"z{len(widths) - 2}"], ["y"], axis=-1))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, widths[0]])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, widths[-1]])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model, {"x": rng.standard_normal((batch, widths[0])).astype(np.float32)}


MODELS = {
    "mlp-784-1024-1024-10 b1": lambda: _mlp([784, 1024, 1024, 10], 1),
    "mlp-784-1024-1024-10 b64": lambda: _mlp([784, 1024, 1024, 10], 64),
}
