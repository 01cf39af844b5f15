"""ResNet-50 as an ONNX model with random weights, for the quickstart and the
command line.

    python examples/models/resnet50_onnx.py [resnet50.onnx] [--batch N]
    neurenix-ipu compile resnet50.onnx --max-batch

The architecture is the ONNX model zoo's ResNet-50 (v1, exported from
Caffe2), which the ``onnx`` package ships without its weights among its
backend test data (``onnx/backend/test/data/light/light_resnet50.onnx``:
every weight there is a ConstantOfShape placeholder). :func:`resnet50` fills
the placeholders with random weights -- He-normal convolution and classifier
weights, batch-norm scales in [0.5, 1.5) and shifts N(0, 0.1^2) -- and sets
each batch norm's statistics to those of the values it sees for one random
image (mean 0, variance their mean square per channel), so activations keep
unit scale through all 50 layers, as trained weights keep them. The final
softmax is left out: the output is the 1000 logits. 25.6 M parameters, about
4 G multiply-adds per 224 x 224 image.

Input ``images`` [N, 3, 224, 224] float32; output ``logits`` [N, 1000].
With ``stages`` < 4 only the stem and the first ``stages`` of the four
stages of bottleneck blocks are kept, and the output is the feature map
``features`` of the last one kept (stage 1: [N, 256, 56, 56]).
"""

import argparse
import functools
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SOURCE = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_resnet50.onnx")
OPSET = 17  # every operator here means the same from opset 9 (the file's) to 17


@functools.lru_cache(maxsize=1)
def _source():
    """The source's nodes (without the ConstantOfShape placeholders and the
    final Softmax; input renamed ``images``, output ``logits``) and the shape
    of every weight."""
    if not os.path.exists(SOURCE):
        raise FileNotFoundError(
            f"{SOURCE} is missing: this onnx installation has no backend test data; reinstall the onnx package"
        )
    g = onnx.load(SOURCE).graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    shapes = {k: list(v.shape) for k, v in consts.items()}
    for n in g.node:
        if n.op_type == "ConstantOfShape":
            shapes[n.output[0]] = [int(v) for v in consts[n.input[0]]]
    nodes = [n for n in g.node if n.op_type not in ("ConstantOfShape", "Softmax")]
    names = {g.input[0].name: "images", nodes[-1].output[0]: "logits"}
    return [_renamed(n, names) for n in nodes], shapes


def _kept(stages):
    """The nodes of the stem and the first ``stages`` stages (stage k's
    weights are named res{k + 1}_*): all of them for 4."""
    nodes, _ = _source()
    if stages == 4:
        return nodes
    stop = next(i for i, n in enumerate(nodes) if any(f"/res{stages + 2}_" in x for x in n.input))
    kept = nodes[:stop]
    return kept[:-1] + [_renamed(kept[-1], {kept[-1].output[0]: "features"})]


def parameter_count(stages=4):
    """Parameters of :func:`resnet50` (without building it)."""
    _, shapes = _source()
    weights = {i for n in _kept(stages) if n.op_type in ("Conv", "BatchNormalization", "Gemm") for i in n.input[1:]}
    return sum(int(np.prod(shapes[w])) for w in weights)


@functools.lru_cache(maxsize=4)
def _weights(seed, stages):
    """Random weights for the kept nodes, batch norms calibrated. The weights
    are drawn in node order, so a prefix of the network gets the same ones
    whatever is cut after it."""
    _, shapes = _source()
    nodes = _kept(stages)
    rng = np.random.default_rng(seed)
    weights = {}
    for n in nodes:
        if n.op_type == "Conv":
            w = shapes[n.input[1]]
            weights[n.input[1]] = rng.standard_normal(w) * np.sqrt(2.0 / np.prod(w[1:]))
        elif n.op_type == "BatchNormalization":
            c = shapes[n.input[1]][0]
            weights[n.input[1]] = rng.uniform(0.5, 1.5, c)
            weights[n.input[2]] = rng.normal(0.0, 0.1, c)
            weights[n.input[3]] = np.zeros(c)
            weights[n.input[4]] = np.ones(c)  # set by _calibrate
        elif n.op_type == "Gemm":
            w = shapes[n.input[1]]
            weights[n.input[1]] = rng.standard_normal(w) * np.sqrt(2.0 / w[1])
            weights[n.input[2]] = rng.normal(0.0, 0.1, w[0])
    weights = {k: v.astype(np.float32) for k, v in weights.items()}
    _calibrate(nodes, weights, np.random.default_rng(seed + 1), _output(stages))
    return weights


def _output(stages):
    if stages == 4:
        return "logits", (1000,)
    size = 56 >> (stages - 1)
    return "features", (256 << (stages - 1), size, size)


def _renamed(node, names):
    n = onnx.NodeProto()
    n.CopyFrom(node)
    n.input[:] = [names.get(i, i) for i in n.input]
    n.output[:] = [names.get(o, o) for o in n.output]
    return n


def _calibrate(nodes, weights, rng, output):
    """Sets each batch norm's variance to the mean square per channel of what
    it sees for one random image, in order (each changes what the later ones
    see), evaluating with onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    class BatchNormalization(OpRun):
        op_domain = ""

        def _run(self, x, scale, bias, mean, var, epsilon=1e-5, momentum=None, training_mode=None):
            ms = np.mean(np.square(x, dtype=np.float64), axis=(0, 2, 3))
            ms = np.maximum(ms, max(1e-2 * ms.mean(), 1e-6)).astype(np.float32)
            weights[self.onnx_node.input[4]][...] = ms
            shape = (1, -1, 1, 1)
            y = (x - mean.reshape(shape)) / np.sqrt(ms.reshape(shape) + epsilon) * scale.reshape(shape)
            return ((y + bias.reshape(shape)).astype(x.dtype),)

    image = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    model = _model(nodes, weights, 1, *output)
    ReferenceEvaluator(model, new_ops=[BatchNormalization]).run(None, {"images": image})


def _model(nodes, weights, batch, output, output_shape=(1000,)):
    used = {i for n in nodes for i in n.input}
    arrays = dict(weights, OC2_DUMMY_1=np.array([batch, 2048], dtype=np.int64))  # the Reshape before the classifier
    graph = helper.make_graph(
        nodes,
        "resnet50",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, 224, 224])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, [batch, *output_shape])],
        [numpy_helper.from_array(v, k) for k, v in arrays.items() if k in used],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="neurenix-examples")
    model.ir_version = 8
    return model


def resnet50(batch=1, seed=0, stages=4):
    """ResNet-50 with random, calibrated weights (see the module's
    docstring) for ``batch`` images; ``stages`` < 4 keeps the stem and the
    first ``stages`` stages only."""
    if stages not in (1, 2, 3, 4):
        raise ValueError(f"stages must be 1, 2, 3 or 4, got {stages}")
    return _model(_kept(stages), _weights(seed, stages), batch, *_output(stages))


def images(batch, seed=1):
    """Random inputs: N(0, 1) per pixel, like ImageNet-normalised images."""
    return np.random.default_rng(seed).standard_normal((batch, 3, 224, 224)).astype(np.float32)


def main():
    p = argparse.ArgumentParser(description="Write ResNet-50 with random weights as an ONNX file.")
    p.add_argument("path", nargs="?", default="resnet50.onnx")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    model = resnet50(args.batch, args.seed)
    onnx.save(model, args.path)
    print(f"wrote {args.path}: ResNet-50, {parameter_count() / 1e6:.1f} M parameters, input images "
          f"[{args.batch}, 3, 224, 224], output logits [{args.batch}, 1000]")
    print(f"try: neurenix-ipu compile {args.path} --max-batch")


if __name__ == "__main__":
    main()
