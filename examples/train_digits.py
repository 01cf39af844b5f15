"""Trains a small CNN on the handwritten digits that ship with scikit-learn
(1,797 8x8 images) on one simulated IPU, then measures its test accuracy
with the trained model compiled for inference.

    python examples/train_digits.py [--precision float32|mixed] [--epochs 10]

Prints the loss per epoch, the estimated time of one training step on the
IPU and the samples per second it implies, and the test accuracy.
"""

import argparse
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits

from neurenix.hardware.graphcore import GraphCoreManager, losses, optim

BATCH = 32


def cnn(seed: int = 0):
    """conv 3x3 (1->8) - relu - maxpool 2 - conv 3x3 (8->16) - relu - maxpool 2 - dense (64->10)."""
    rng = np.random.default_rng(seed)

    def he(shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    params = {
        "conv1.weight": he((8, 1, 3, 3), 9), "conv1.bias": np.zeros(8, np.float32),
        "conv2.weight": he((16, 8, 3, 3), 72), "conv2.bias": np.zeros(16, np.float32),
        "fc.weight": he((10, 64), 64), "fc.bias": np.zeros(10, np.float32),
    }
    pool = dict(kernel_shape=[2, 2], strides=[2, 2])
    nodes = [
        helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", **pool),
        helper.make_node("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", **pool),
        helper.make_node("Flatten", ["p2"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(v, k) for k, v in params.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def data(seed: int = 0):
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    x, y = x[order], y[order]
    cut = int(0.8 * len(y))
    return (x[:cut], y[:cut]), (x[cut:], y[cut:])


def train(precision: str = "float32", epochs: int = 15, verbose: bool = True):
    (xt, yt), (xv, yv) = data()
    model = cnn()
    # Mixed precision: half compute, float32 master weights and optimizer state, static loss scaling.
    opt = optim.AdamW(lr=0.005, weight_decay=1e-4, loss_scaling=128.0 if precision != "float32" else 1.0)
    with GraphCoreManager(num_ipus=1, precision=precision) as ipu:
        t0 = time.perf_counter()
        trainer = ipu.compile_model(model, {"image": xt[:BATCH], "labels": yt[:BATCH]},
                                    loss=losses.CrossEntropy(logits="logits"), optimizer=opt)
        compile_s = time.perf_counter() - t0
        step_s = trainer.report.estimated_seconds
        if verbose:
            print(f"{precision}: compiled the training step in {compile_s:.2f} s; estimated "
                  f"{step_s * 1e6:,.1f} us per step on the IPU ({BATCH / step_s:,.0f} samples/s)")
        rng = np.random.default_rng(1)
        curve = []
        t0 = time.perf_counter()
        for epoch in range(epochs):
            order = rng.permutation(len(yt))
            batch_losses = []
            for i in range(0, len(order) - BATCH + 1, BATCH):
                idx = order[i:i + BATCH]
                (loss,) = ipu.execute_model(trainer, {"image": xt[idx], "labels": yt[idx]})
                batch_losses.append(float(loss))
            curve.append(float(np.mean(batch_losses)))
            if verbose:
                print(f"  epoch {epoch + 1:2d}: mean loss {curve[-1]:.4f}")
        train_s = time.perf_counter() - t0
        # The trained model, compiled for inference, on the held-out images.
        infer = ipu.compile_model(trainer.to_onnx(), {"image": xv})
        (logits,) = ipu.execute_model(infer, {"image": xv})
    accuracy = float(np.mean(np.argmax(logits, axis=1) == yv))
    if verbose:
        print(f"  trained {epochs} epochs in {train_s:.1f} s on the simulator; test accuracy "
              f"{100 * accuracy:.1f}% ({len(yv)} images)")
    return accuracy, curve, step_s


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precision", choices=["float32", "mixed", "both"], default="both")
    p.add_argument("--epochs", type=int, default=15)
    args = p.parse_args()
    for precision in (["float32", "mixed"] if args.precision == "both" else [args.precision]):
        train(precision, args.epochs)


if __name__ == "__main__":
    main()
