"""ONNX models built with onnx.helper for the tests, and their numpy references."""

from typing import List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inputs, outputs, initializers=(), opset=17, name="test"):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 9)
    onnx.checker.check_model(model)
    return model


def mlp(
    widths: Sequence[int],
    rng: np.random.Generator,
    activation: str = "Relu",
    softmax: bool = True,
    use_gemm: bool = True,
    batch_dim="N",
) -> Tuple[onnx.ModelProto, List[np.ndarray]]:
    """A perceptron widths[0] -> ... -> widths[-1]; returns the model and its
    parameters [W0, b0, W1, b1, ...]."""
    nodes, inits, params = [], [], []
    prev = "x"
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        w = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        bias = rng.standard_normal(b).astype(np.float32) * 0.1
        params += [w, bias]
        inits += [numpy_helper.from_array(w, f"W{i}"), numpy_helper.from_array(bias, f"b{i}")]
        out = f"z{i}"
        if use_gemm:
            nodes.append(helper.make_node("Gemm", [prev, f"W{i}", f"b{i}"], [out], name=f"dense{i}"))
        else:
            nodes.append(helper.make_node("MatMul", [prev, f"W{i}"], [f"m{i}"], name=f"matmul{i}"))
            nodes.append(helper.make_node("Add", [f"m{i}", f"b{i}"], [out], name=f"bias{i}"))
        last = i == len(widths) - 2
        if not last:
            nodes.append(helper.make_node(activation, [out], [f"a{i}"], name=f"act{i}"))
            prev = f"a{i}"
        else:
            prev = out
    if softmax:
        nodes.append(helper.make_node("Softmax", [prev], ["y"], axis=-1, name="softmax"))
    else:
        nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch_dim, widths[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch_dim, widths[-1]])],
        inits,
    )
    return model, params


ACTIVATIONS = {
    "Relu": lambda z: np.maximum(z, 0),
    "Sigmoid": lambda z: 1 / (1 + np.exp(-z)),
    "Tanh": np.tanh,
}


def mlp_reference(params: Sequence[np.ndarray], x: np.ndarray, activation="Relu", softmax=True) -> np.ndarray:
    """float64 numpy evaluation."""
    h = x.astype(np.float64)
    for i in range(0, len(params), 2):
        h = h @ params[i].astype(np.float64) + params[i + 1].astype(np.float64)
        if i < len(params) - 2:
            h = ACTIVATIONS[activation](h)
    if softmax:
        e = np.exp(h - h.max(-1, keepdims=True))
        h = e / e.sum(-1, keepdims=True)
    return h
