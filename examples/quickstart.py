"""Quickstart: train a small classifier, export it to ONNX, compile it for a
simulated IPU and run it there.

    python examples/quickstart.py

The model is a 3-layer perceptron trained (with numpy, in about a second) to
tell apart three interleaved spirals. It is compiled in float16 with half
partials for one IPU of the default simulated system, executed on the
simulator, and checked against the same model evaluated by numpy in float32.
Set NEURENIX_IPU_MODEL (e.g. "version=ipu2,num_ipus=1,tiles_per_ipu=64") to
pick another system.
"""

import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel


def spirals(n_per_class, rng):
    xs, ys = [], []
    for c in range(3):
        r = np.linspace(0.05, 1.0, n_per_class)
        t = np.linspace(c * 4.0, (c + 1) * 4.0, n_per_class) + rng.normal(0, 0.2, n_per_class)
        xs.append(np.stack([r * np.sin(t), r * np.cos(t)], axis=1))
        ys.append(np.full(n_per_class, c))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys)


def train(x, y, rng, hidden=64, steps=600, lr=0.01):
    sizes = [x.shape[1], hidden, hidden, 3]
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        params += [rng.normal(0, np.sqrt(2.0 / a), (a, b)), np.zeros(b)]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    onehot = np.eye(3)[y]
    for step in range(1, steps + 1):
        acts = [x.astype(np.float64)]
        for i in range(0, len(params), 2):
            z = acts[-1] @ params[i] + params[i + 1]
            acts.append(np.maximum(z, 0) if i < len(params) - 2 else z)
        z = acts[-1]
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        grad = (p - onehot) / len(x)
        grads = [None] * len(params)
        for i in range(len(params) - 2, -1, -2):
            grads[i] = acts[i // 2].T @ grad
            grads[i + 1] = grad.sum(0)
            if i:
                grad = (grad @ params[i].T) * (acts[i // 2] > 0)
        for k, g in enumerate(grads):  # Adam
            m[k] = 0.9 * m[k] + 0.1 * g
            v[k] = 0.999 * v[k] + 0.001 * g * g
            params[k] -= lr * (m[k] / (1 - 0.9**step)) / (np.sqrt(v[k] / (1 - 0.999**step)) + 1e-8)
    return [p.astype(np.float32) for p in params]


def to_onnx(params):
    nodes, inits = [], []
    prev = "features"
    for i in range(0, len(params), 2):
        w, b = f"W{i // 2}", f"b{i // 2}"
        inits += [numpy_helper.from_array(params[i], w), numpy_helper.from_array(params[i + 1], b)]
        out = f"z{i // 2}"
        nodes.append(helper.make_node("Gemm", [prev, w, b], [out], name=f"dense{i // 2}"))
        if i < len(params) - 2:
            nodes.append(helper.make_node("Relu", [out], [f"a{i // 2}"], name=f"relu{i // 2}"))
            prev = f"a{i // 2}"
    nodes.append(helper.make_node("Softmax", [out], ["probabilities"], axis=1, name="softmax"))
    graph = helper.make_graph(
        nodes,
        "spiral_classifier",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 2])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 3])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def numpy_forward(params, x):
    h = x
    for i in range(0, len(params), 2):
        h = h @ params[i] + params[i + 1]
        if i < len(params) - 2:
            h = np.maximum(h, 0)
    e = np.exp(h - h.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def main():
    rng = np.random.default_rng(7)
    x_train, y_train = spirals(300, rng)
    x_test, y_test = spirals(100, rng)
    params = train(x_train, y_train, rng)
    path = os.path.join(tempfile.mkdtemp(), "spiral_classifier.onnx")
    onnx.save(to_onnx(params), path)

    ipu_model = IPUModel.from_env() or IPUModel(version="ipu2", num_ipus=1)
    with GraphCoreManager(num_ipus=1, precision="float16", memory_proportion=0.6,
                          enable_half_partials=True, ipu_model=ipu_model) as ipu:
        info = ipu.get_ipu_info()[0]
        print(f"IPU 0: {info['chip']}, {info['tiles']} tiles x {info['bytes_per_tile']:,} bytes, "
              f"{info['clock_hz'] / 1e9:.2f} GHz, {info['target']}, {info['status']}")
        batch = x_test[:256]
        compiled = ipu.compile_model(path, batch)
        (probs,) = ipu.execute_model(compiled, batch)
        print()
        print(compiled.report)
        print(ipu.last_execution_report)

    reference = numpy_forward(params, batch)
    ipu_acc = float((probs.argmax(1) == y_test[:256]).mean())
    ref_acc = float((reference.argmax(1) == y_test[:256]).mean())
    print()
    print(f"outputs: {probs.shape} {probs.dtype}; first row {np.round(probs[0], 4)}")
    print(f"accuracy on the simulated IPU (float16): {ipu_acc:.3f}; numpy float32: {ref_acc:.3f}")
    print(f"largest difference from numpy: {np.abs(probs - reference).max():.2e}")
    assert np.allclose(probs, reference, atol=2e-2), "simulated IPU disagrees with numpy"


if __name__ == "__main__":
    main()
