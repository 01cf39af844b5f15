"""A fuzz harness for neurenix IPU: mutates small ONNX models at random and runs
them through ``GraphCoreManager.compile_model`` / ``execute_model`` in a
persistent worker process, classifying what happens.

Pieces:

- **Draw**: the only source of randomness of a case. :class:`RandomDraw` wraps a
  seeded ``random.Random`` (the long run, ``benchmarks/fuzz.py``: fast and
  reproducible by case id); :class:`HypothesisDraw` wraps hypothesis' ``st.data()``
  (the short run, ``tests/test_fuzz.py``: hypothesis shrinks a failing case).
  Every choice is ordered "benign first", so shrinking leads to the smallest and
  least mutated model that still fails.
- **Seed models** (:data:`SEEDS`): small valid models (MLP, conv net, a
  transformer-ish block, a shape subgraph, Range, Expand, Tile, Pad, Slice,
  ConstantOfShape, Split/Concat, reshapes, reductions, Cast).
- **Mutations** (:data:`MUTATIONS`): declared dims, attributes, shape-carrying
  initializers, element types, wiring, node order, op types, opset/IR version,
  and, last, corruption of the serialized bytes (flips, inserts, deletes,
  invalid UTF-8 in strings).
- :func:`generate_case` draws one :class:`Case`: a seed, 0-4 mutations, the
  manager options (IPUs, tiles, precision, ...), how the model and the example
  inputs are given, and how it is executed (matching inputs, NaN/inf, extreme
  integers, float64 for float32, int32 for int64, wrong shapes, ...).
- :func:`run_case_here` runs a case in this process and lets the library's
  exception through; :class:`Runner` runs cases in a persistent worker
  (forked from a multiprocessing forkserver that has imported numpy, onnx and
  neurenix once, so a restart costs milliseconds) that has ``RLIMIT_AS`` set
  (default 8 GiB) and core dumps off. A worker that dies is a **crash** (its
  signal and the tail of its stderr are recorded), one that does not answer
  within the per-case timeout is a **hang** (it is killed); either way a fresh
  worker takes the next case. A case after which the worker's peak RSS passed
  ``hog_limit`` (default 1 GiB) is a **hog** (and the worker is restarted so the
  next measurement is clean).

Outcome classes (:func:`Result.klass`): ``ok``; ``ipu:<IPUError subclass>``
(fine: the library refused cleanly); ``bug:<type>`` (an exception that is not
an IPUError, e.g. ``PanicException``, ``UnicodeDecodeError``, ``MemoryError``);
``crash:<SIGNAL>``; ``hang``; ``hog``; ``harness:<type>`` (the harness's own
fault, a bug in this file).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import multiprocessing
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

# --------------------------------------------------------------------------------------
# draws


class Draw:
    """The randomness of a case. Subclasses implement :meth:`integer`."""

    def integer(self, lo: int, hi: int) -> int:  # inclusive
        raise NotImplementedError

    def choice(self, seq: Sequence[Any]) -> Any:
        seq = list(seq)
        return seq[self.integer(0, len(seq) - 1)]

    def chance(self, p: float) -> bool:
        """True with probability about p; shrinks to False."""
        return self.integer(0, 999) >= 1000 - int(round(p * 1000))

    def weighted(self, pairs: Sequence[Tuple[Any, float]]) -> Any:
        """One value of (value, weight) pairs; shrinks to the first."""
        total = sum(w for _, w in pairs)
        x = self.integer(0, 9999) * total / 10000.0
        acc = 0.0
        for v, w in pairs:
            acc += w
            if x < acc:
                return v
        return pairs[-1][0]

    def shuffle(self, items: List[Any]) -> List[Any]:
        items = list(items)
        for i in range(len(items) - 1, 0, -1):
            j = self.integer(0, i)
            items[i], items[j] = items[j], items[i]
        return items


class RandomDraw(Draw):
    def __init__(self, rng: random.Random):
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p


class HypothesisDraw(Draw):
    def __init__(self, data: Any):
        from hypothesis import strategies as st

        self.data = data
        self.st = st

    def integer(self, lo: int, hi: int) -> int:
        return self.data.draw(self.st.integers(lo, hi))


# --------------------------------------------------------------------------------------
# seed models


def _onnx():
    import onnx

    return onnx


def _model(nodes, inputs, outputs, inits=(), opset=17, name="seed"):
    onnx = _onnx()
    h = onnx.helper
    g = h.make_graph(nodes, name, inputs, outputs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="fuzz")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _vi(name, elem, shape):
    return _onnx().helper.make_tensor_value_info(name, elem, shape)


def _init(name, arr):
    return _onnx().numpy_helper.from_array(np.asarray(arr), name)


def _f(shape, rng, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def seed_mlp(rng):
    h = _onnx().helper
    F = _onnx().TensorProto.FLOAT
    nodes = [
        h.make_node("Gemm", ["input_x", "W0"], ["hidden_0"], name="dense_0", transB=0),
        h.make_node("Add", ["hidden_0", "bias_0"], ["hidden_1"], name="bias_add"),
        h.make_node("Relu", ["hidden_1"], ["act_0"], name="relu_0"),
        h.make_node("MatMul", ["act_0", "W1"], ["logits"], name="matmul_1"),
        h.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    inits = [_init("W0", _f((8, 16), rng)), _init("bias_0", _f((16,), rng)), _init("W1", _f((16, 4), rng))]
    return _model(nodes, [_vi("input_x", F, ["batch", 8])], [_vi("probs", F, ["batch", 4])], inits)


def seed_convnet(rng):
    h = _onnx().helper
    F = _onnx().TensorProto.FLOAT
    nodes = [
        h.make_node("Conv", ["image", "conv_w", "conv_b"], ["conv_out"], name="conv",
                    kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1),
        h.make_node("BatchNormalization", ["conv_out", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn_out"],
                    name="batchnorm", epsilon=1e-5),
        h.make_node("Relu", ["bn_out"], ["relu_out"], name="relu"),
        h.make_node("MaxPool", ["relu_out"], ["pool_out"], name="maxpool", kernel_shape=[2, 2], strides=[2, 2]),
        h.make_node("GlobalAveragePool", ["pool_out"], ["gap_out"], name="gap"),
        h.make_node("Flatten", ["gap_out"], ["flat"], name="flatten", axis=1),
        h.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["scores"], name="fc", transB=1, alpha=1.0, beta=1.0),
    ]
    inits = [
        _init("conv_w", _f((4, 3, 3, 3), rng)), _init("conv_b", _f((4,), rng)),
        _init("bn_scale", np.ones(4, np.float32)), _init("bn_bias", np.zeros(4, np.float32)),
        _init("bn_mean", _f((4,), rng, 0.1)), _init("bn_var", np.ones(4, np.float32)),
        _init("fc_w", _f((5, 4), rng)), _init("fc_b", _f((5,), rng)),
    ]
    return _model(nodes, [_vi("image", F, ["batch", 3, 8, 8])], [_vi("scores", F, ["batch", 5])], inits)


def seed_transformer(rng):
    h = _onnx().helper
    T = _onnx().TensorProto
    d, s, v = 8, 4, 16
    nodes = [
        h.make_node("Gather", ["embedding", "token_ids"], ["embedded"], name="embed", axis=0),
        h.make_node("LayerNormalization", ["embedded", "ln_gamma", "ln_beta"], ["normed"], name="layernorm",
                    axis=-1, epsilon=1e-5),
        h.make_node("MatMul", ["normed", "w_query"], ["query"], name="q_proj"),
        h.make_node("MatMul", ["normed", "w_key"], ["key"], name="k_proj"),
        h.make_node("MatMul", ["normed", "w_value"], ["value"], name="v_proj"),
        h.make_node("Transpose", ["key"], ["key_t"], name="k_transpose", perm=[0, 2, 1]),
        h.make_node("MatMul", ["query", "key_t"], ["scores_raw"], name="qk"),
        h.make_node("Mul", ["scores_raw", "attn_scale"], ["scores_scaled"], name="scale"),
        h.make_node("Where", ["causal_mask", "scores_scaled", "neg_large"], ["scores_masked"], name="mask"),
        h.make_node("Softmax", ["scores_masked"], ["attn"], name="attn_softmax", axis=-1),
        h.make_node("MatMul", ["attn", "value"], ["context"], name="attn_v"),
        h.make_node("Add", ["context", "embedded"], ["block_out"], name="residual"),
    ]
    inits = [
        _init("embedding", _f((v, d), rng)),
        _init("ln_gamma", np.ones(d, np.float32)), _init("ln_beta", np.zeros(d, np.float32)),
        _init("w_query", _f((d, d), rng)), _init("w_key", _f((d, d), rng)), _init("w_value", _f((d, d), rng)),
        _init("attn_scale", np.array(1 / math.sqrt(d), np.float32)),
        _init("causal_mask", np.tril(np.ones((s, s), bool))),
        _init("neg_large", np.array(-1e4, np.float32)),
    ]
    return _model(nodes, [_vi("token_ids", T.INT64, ["batch", s])], [_vi("block_out", T.FLOAT, ["batch", s, d])],
                  inits)


def seed_shape_subgraph(rng):
    h = _onnx().helper
    F = _onnx().TensorProto.FLOAT
    nodes = [
        h.make_node("Shape", ["data_in"], ["data_shape"], name="shape"),
        h.make_node("Gather", ["data_shape", "index_zero"], ["batch_dim"], name="gather_batch", axis=0),
        h.make_node("Unsqueeze", ["batch_dim", "unsq_axes"], ["batch_dim_1d"], name="unsqueeze"),
        h.make_node("Concat", ["batch_dim_1d", "rest_dims"], ["new_shape"], name="concat_shape", axis=0),
        h.make_node("Reshape", ["data_in", "new_shape"], ["reshaped"], name="reshape"),
        h.make_node("Relu", ["reshaped"], ["flat_out"], name="relu"),
    ]
    inits = [_init("index_zero", np.array(0, np.int64)), _init("unsq_axes", np.array([0], np.int64)),
             _init("rest_dims", np.array([24], np.int64))]
    return _model(nodes, [_vi("data_in", F, ["batch", 4, 6])], [_vi("flat_out", F, ["batch", 24])], inits)


def seed_range(rng):
    h = _onnx().helper
    T = _onnx().TensorProto
    nodes = [
        h.make_node("Range", ["range_start", "range_limit", "range_delta"], ["range_out"], name="range"),
        h.make_node("Cast", ["range_out"], ["range_float"], name="cast", to=T.FLOAT),
        h.make_node("Add", ["values_in", "range_float"], ["sum_out"], name="add"),
    ]
    inits = [_init("range_start", np.array(0, np.int64)), _init("range_limit", np.array(8, np.int64)),
             _init("range_delta", np.array(1, np.int64))]
    return _model(nodes, [_vi("values_in", T.FLOAT, [8])], [_vi("sum_out", T.FLOAT, [8])], inits)


def seed_range_float(rng):
    h = _onnx().helper
    T = _onnx().TensorProto
    nodes = [
        h.make_node("Range", ["range_start", "range_limit", "range_delta"], ["range_out"], name="range"),
        h.make_node("Mul", ["values_in", "range_out"], ["prod_out"], name="mul"),
    ]
    inits = [_init("range_start", np.array(0.5, np.float32)), _init("range_limit", np.array(4.5, np.float32)),
             _init("range_delta", np.array(0.5, np.float32))]
    return _model(nodes, [_vi("values_in", T.FLOAT, [8])], [_vi("prod_out", T.FLOAT, [8])], inits)


def seed_expand(rng):
    h = _onnx().helper
    F = _onnx().TensorProto.FLOAT
    nodes = [
        h.make_node("Expand", ["small_in", "expand_shape"], ["expanded"], name="expand"),
        h.make_node("Sigmoid", ["expanded"], ["expand_out"], name="sigmoid"),
    ]
    inits = [_init("expand_shape", np.array([2, 3, 4], np.int64))]
    return _model(nodes, [_vi("small_in", F, [1, 4])], [_vi("expand_out", F, [2, 3, 4])], inits)


def seed_tile(rng):
    h = _onnx().helper
    F = _onnx().TensorProto.FLOAT
    nodes = [
        h.make_node("Tile", ["tile_in", "tile_repeats"], ["tiled"], name="tile"),
        h.make_node("Neg", ["tiled"], ["tile_out"], name="neg"),
    ]
    inits = [_init("tile_repeats", np.array([2, 3], np.int64))]
    return _model(nodes, [_vi("tile_in", F, [2, 3])], [_vi("tile_out", F, [4, 9])], inits)


def seed_pad(rng):
    h = _onnx().helper
    F = _onnx().TensorProto.FLOAT
    nodes = [
        h.make_node("Pad", ["pad_in", "pad_amounts", "pad_value"], ["padded"], name="pad", mode="constant"),
        h.make_node("Abs", ["padded"], ["pad_out"], name="abs"),
    ]
    inits = [_init("pad_amounts", np.array([0, 1, 2, 0, 1, 2], np.int64)),
             _init("pad_value", np.array(0.5, np.float32))]
    return _model(nodes, [_vi("pad_in", F, ["batch", 3, 4])], [_vi("pad_out", F, ["batch", 5, 8])], inits)


def seed_slice(rng):
    h = _onnx().helper
    F = _onnx().TensorProto.FLOAT
    nodes = [
        h.make_node("Slice", ["slice_in", "slice_starts", "slice_ends", "slice_axes", "slice_steps"], ["sliced"],
                    name="slice"),
        h.make_node("Exp", ["sliced"], ["slice_out"], name="exp"),
    ]
    inits = [_init("slice_starts", np.array([0, 1], np.int64)), _init("slice_ends", np.array([4, 6], np.int64)),
             _init("slice_axes", np.array([0, 1], np.int64)), _init("slice_steps", np.array([2, 2], np.int64))]
    return _model(nodes, [_vi("slice_in", F, [4, 6])], [_vi("slice_out", F, [2, 3])], inits)


def seed_constant_of_shape(rng):
    onnx = _onnx()
    h = onnx.helper
    F = onnx.TensorProto.FLOAT
    nodes = [
        h.make_node("ConstantOfShape", ["fill_shape"], ["filled"], name="const_of_shape",
                    value=h.make_tensor("fill_value", F, [1], [1.5])),
        h.make_node("Constant", [], ["const_two"], name="constant", value=h.make_tensor("two", F, [], [2.0])),
        h.make_node("Mul", ["filled", "const_two"], ["doubled"], name="mul"),
        h.make_node("Add", ["doubled", "addend_in"], ["cos_out"], name="add"),
    ]
    inits = [_init("fill_shape", np.array([2, 3], np.int64))]
    return _model(nodes, [_vi("addend_in", F, [2, 3])], [_vi("cos_out", F, [2, 3])], inits)


def seed_split_concat(rng):
    h = _onnx().helper
    F = _onnx().TensorProto.FLOAT
    nodes = [
        h.make_node("Split", ["split_in", "split_sizes"], ["part_a", "part_b"], name="split", axis=1),
        h.make_node("Relu", ["part_a"], ["part_a_relu"], name="relu"),
        h.make_node("Tanh", ["part_b"], ["part_b_tanh"], name="tanh"),
        h.make_node("Concat", ["part_b_tanh", "part_a_relu"], ["joined"], name="concat", axis=1),
        h.make_node("ReduceSum", ["joined", "reduce_axes"], ["reduced"], name="reduce_sum", keepdims=1),
    ]
    inits = [_init("split_sizes", np.array([2, 4], np.int64)), _init("reduce_axes", np.array([0], np.int64))]
    return _model(nodes, [_vi("split_in", F, ["batch", 6])],
                  [_vi("joined", F, ["batch", 6]), _vi("reduced", F, [1, 6])],
                  inits)


def seed_reshape_chain(rng):
    h = _onnx().helper
    F = _onnx().TensorProto.FLOAT
    nodes = [
        h.make_node("Reshape", ["chain_in", "target_shape"], ["as_matrix"], name="reshape"),
        h.make_node("Transpose", ["as_matrix"], ["transposed"], name="transpose", perm=[1, 0]),
        h.make_node("Unsqueeze", ["transposed", "unsqueeze_axes"], ["unsqueezed"], name="unsqueeze"),
        h.make_node("Squeeze", ["unsqueezed", "unsqueeze_axes"], ["squeezed"], name="squeeze"),
        h.make_node("Flatten", ["squeezed"], ["chain_out"], name="flatten", axis=1),
    ]
    inits = [_init("target_shape", np.array([6, -1], np.int64)), _init("unsqueeze_axes", np.array([0], np.int64))]
    return _model(nodes, [_vi("chain_in", F, [2, 3, 4])], [_vi("chain_out", F, [4, 6])], inits)


def seed_reduce_cast(rng):
    h = _onnx().helper
    T = _onnx().TensorProto
    nodes = [
        h.make_node("Clip", ["reduce_in", "clip_min", "clip_max"], ["clipped"], name="clip"),
        h.make_node("ReduceMean", ["clipped"], ["mean_out"], name="reduce_mean", axes=[1], keepdims=0),
        h.make_node("ArgMax", ["clipped"], ["argmax_out"], name="argmax", axis=1, keepdims=0),
        h.make_node("Cast", ["argmax_out"], ["argmax_f"], name="cast", to=T.FLOAT),
        h.make_node("Add", ["mean_out", "argmax_f"], ["combined"], name="add"),
        h.make_node("Greater", ["combined", "threshold"], ["flags"], name="greater"),
    ]
    inits = [_init("clip_min", np.array(-1.0, np.float32)), _init("clip_max", np.array(1.0, np.float32)),
             _init("threshold", np.array(0.5, np.float32))]
    return _model(nodes, [_vi("reduce_in", T.FLOAT, ["batch", 5])],
                  [_vi("combined", T.FLOAT, ["batch"]), _vi("flags", T.BOOL, ["batch"])], inits)


SEEDS: Dict[str, Callable] = {
    "mlp": seed_mlp,
    "convnet": seed_convnet,
    "transformer": seed_transformer,
    "shape_subgraph": seed_shape_subgraph,
    "range": seed_range,
    "range_float": seed_range_float,
    "expand": seed_expand,
    "tile": seed_tile,
    "pad": seed_pad,
    "slice": seed_slice,
    "constant_of_shape": seed_constant_of_shape,
    "split_concat": seed_split_concat,
    "reshape_chain": seed_reshape_chain,
    "reduce_cast": seed_reduce_cast,
}

_SEED_BYTES: Dict[str, bytes] = {}


def seed_model(name: str):
    """A fresh copy of a seed model (built once, deterministically)."""
    onnx = _onnx()
    if name not in _SEED_BYTES:
        _SEED_BYTES[name] = SEEDS[name](np.random.default_rng(1234)).SerializeToString()
    m = onnx.ModelProto()
    m.ParseFromString(_SEED_BYTES[name])
    return m


# --------------------------------------------------------------------------------------
# mutation values

# Benign first: hypothesis shrinks towards the front.
INT_VALUES = [1, 0, 2, -1, 3, 7, -2, 2**31 - 1, 2**31, 2**32, 2**40, 10**12, 2**62, 2**63 - 1, -(2**31), -(2**63),
              -(10**12)]
DIM_VALUES = [1, 0, 2, 3, -1, 2**31 - 1, 2**31, 2**32, 2**40, 10**12, 2**62, 2**63 - 1, -(2**31), "sym", "N2", "",
              None]
FLOAT_VALUES = [1.0, 0.0, -1.0, 0.5, 1e-30, -1e-30, 1e30, -1e30, 3.4e38, float("inf"), float("-inf"), float("nan"),
                1e12, 2.0**31, 2.0**63, 5e-324]
STRING_VALUES = [b"constant", b"", b"reflect", b"edge", b"wrap", b"NOTSET", b"SAME_UPPER", b"SAME_LOWER", b"VALID",
                 b"linear", b"nearest", b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"a" * 300]
KNOWN_ATTRS = ["axis", "axes", "perm", "keepdims", "kernel_shape", "pads", "strides", "dilations", "group", "transA",
               "transB", "alpha", "beta", "epsilon", "mode", "auto_pad", "ceil_mode", "to", "split", "num_outputs",
               "value", "select_last_index", "noop_with_empty_axes", "batch_dims", "storage_order", "allowzero",
               "stash_type", "approximate", "blocksize", "saturate", "count_include_pad", "fmod", "seed"]
OP_TYPES = ["Identity", "Relu", "Add", "MatMul", "Reshape", "Expand", "Tile", "Pad", "Slice", "Range",
            "ConstantOfShape", "Gather", "Concat", "Split", "Transpose", "Squeeze", "Unsqueeze", "Conv", "MaxPool",
            "Cast", "Where", "Softmax", "ReduceSum", "Gemm", "Flatten", "Shape", "Size", "Resize", "Loop", "If",
            "FooBarOp", "", "Constant", "LayerNormalization", "BatchNormalization", "GlobalAveragePool", "ArgMax",
            "Mod", "Pow", "Clip", "Einsum", "NonZero", "TopK"]


def all_dtypes() -> List[int]:
    onnx = _onnx()
    return [v for _, v in onnx.TensorProto.DataType.items()] + [99, -1]


def _dtype_choice(draw: Draw) -> int:
    T = _onnx().TensorProto
    common = [T.FLOAT, T.FLOAT16, T.INT64, T.INT32, T.DOUBLE, T.BOOL, T.UINT8, T.INT8, T.BFLOAT16]
    return draw.choice(common) if draw.chance(0.5) else draw.choice(all_dtypes())


def _graph_value_names(m) -> List[str]:
    g = m.graph
    names = [vi.name for vi in g.input] + [t.name for t in g.initializer]
    for n in g.node:
        names += [o for o in n.output]
    return [x for x in names if x]


# --------------------------------------------------------------------------------------
# mutations: each takes (model, draw) and returns a description, or None if it did nothing


def mut_dims(m, draw: Draw) -> Optional[str]:
    g = m.graph
    vis = list(g.input) + list(g.output) + list(g.value_info)
    if not vis:
        return None
    vi = draw.choice(vis)
    tt = vi.type.tensor_type
    action = draw.weighted([("set", 6), ("add", 1), ("remove", 1), ("clear_shape", 0.5), ("set_all", 1)])
    shape = tt.shape
    if action == "clear_shape":
        tt.ClearField("shape")
        return f"dims: {vi.name} shape removed"
    if action == "add":
        d = shape.dim.add()
        d.dim_value = 1
        idx = len(shape.dim) - 1
    elif action == "remove":
        if not len(shape.dim):
            return None
        idx = draw.integer(0, len(shape.dim) - 1)
        del shape.dim[idx]
        return f"dims: {vi.name} dim {idx} removed"
    else:
        if not len(shape.dim):
            shape.dim.add().dim_value = 1
        idx = draw.integer(0, len(shape.dim) - 1)
    value = draw.choice(DIM_VALUES)
    targets = range(len(shape.dim)) if action == "set_all" else [idx]
    for i in targets:
        d = shape.dim[i]
        if value is None:
            d.ClearField("dim_value")
            d.ClearField("dim_param")
        elif isinstance(value, str):
            d.dim_param = value
        else:
            d.dim_value = value
    return f"dims: {vi.name}[{'*' if action == 'set_all' else idx}] = {value!r}"


def _set_attr_value(a, draw: Draw) -> str:
    onnx = _onnx()
    A = onnx.AttributeProto
    if a.type == A.INT:
        a.i = draw.choice(INT_VALUES)
        return f"{a.i}"
    if a.type == A.FLOAT:
        a.f = draw.choice(FLOAT_VALUES)
        return f"{a.f}"
    if a.type == A.STRING:
        a.s = draw.choice(STRING_VALUES)
        return f"{a.s!r}"
    if a.type == A.INTS:
        vals = list(a.ints)
        how = draw.weighted([("element", 4), ("longer", 1), ("shorter", 1), ("empty", 0.5), ("all", 1)])
        if how == "element" and vals:
            vals[draw.integer(0, len(vals) - 1)] = draw.choice(INT_VALUES)
        elif how == "longer":
            vals.append(draw.choice(INT_VALUES))
        elif how == "shorter" and vals:
            vals.pop()
        elif how == "empty":
            vals = []
        else:
            v = draw.choice(INT_VALUES)
            vals = [v] * max(1, len(vals))
        del a.ints[:]
        a.ints.extend(vals)
        return f"{vals}"
    if a.type == A.FLOATS:
        vals = list(a.floats) or [1.0]
        vals[draw.integer(0, len(vals) - 1)] = draw.choice(FLOAT_VALUES)
        del a.floats[:]
        a.floats.extend(vals)
        return f"{vals}"
    if a.type == A.TENSOR:
        return "tensor " + _mutate_tensor(a.t, draw)
    return "unchanged"


def mut_attribute(m, draw: Draw) -> Optional[str]:
    onnx = _onnx()
    A = onnx.AttributeProto
    nodes = list(m.graph.node)
    if not nodes:
        return None
    n = draw.choice(nodes)
    action = draw.weighted([("value", 6), ("add", 2), ("retype", 1), ("remove", 1)])
    if action == "add" or not len(n.attribute):
        name = draw.choice(KNOWN_ATTRS)
        kind = draw.choice(["int", "ints", "float", "string", "floats"])
        for old in list(n.attribute):
            if old.name == name:
                n.attribute.remove(old)
        if kind == "int":
            a = onnx.helper.make_attribute(name, int(draw.choice(INT_VALUES)))
        elif kind == "ints":
            a = onnx.helper.make_attribute(name, [int(draw.choice(INT_VALUES)) for _ in range(draw.integer(0, 5))],
                                           attr_type=A.INTS)
        elif kind == "float":
            a = onnx.helper.make_attribute(name, float(draw.choice(FLOAT_VALUES)))
        elif kind == "floats":
            a = onnx.helper.make_attribute(name, [float(draw.choice(FLOAT_VALUES))], attr_type=A.FLOATS)
        else:
            a = onnx.helper.make_attribute(name, draw.choice(STRING_VALUES))
        n.attribute.append(a)
        return f"attr: {n.name}.{name} added ({kind})"
    a = draw.choice(list(n.attribute))
    if action == "remove":
        n.attribute.remove(a)
        return f"attr: {n.name}.{a.name} removed"
    if action == "retype":
        new_type = draw.choice([A.INT, A.FLOAT, A.STRING, A.INTS, A.FLOATS, A.STRINGS, A.TENSOR, A.GRAPH])
        name = a.name
        n.attribute.remove(a)
        if new_type == A.INT:
            b = onnx.helper.make_attribute(name, 1)
        elif new_type == A.FLOAT:
            b = onnx.helper.make_attribute(name, 1.0)
        elif new_type == A.STRING:
            b = onnx.helper.make_attribute(name, b"1")
        elif new_type == A.INTS:
            b = onnx.helper.make_attribute(name, [1, 1])
        elif new_type == A.FLOATS:
            b = onnx.helper.make_attribute(name, [1.0])
        elif new_type == A.STRINGS:
            b = onnx.helper.make_attribute(name, [b"a", b"\xff"])
        elif new_type == A.TENSOR:
            b = onnx.helper.make_attribute(name, onnx.helper.make_tensor("t", onnx.TensorProto.INT64, [2], [1, 2]))
        else:
            b = onnx.helper.make_attribute(name, onnx.helper.make_graph([], "sub", [], []))
        n.attribute.append(b)
        return f"attr: {n.name}.{name} retyped to {A.AttributeType.Name(new_type)}"
    return f"attr: {n.name}.{a.name} = {_set_attr_value(a, draw)}"


def _tensors(m) -> List[Tuple[str, Any]]:
    """Every TensorProto of the model: initializers and tensor attributes."""
    out = [(f"initializer {t.name}", t) for t in m.graph.initializer]
    for n in m.graph.node:
        for a in n.attribute:
            if a.type == _onnx().AttributeProto.TENSOR:
                out.append((f"{n.name}.{a.name}", a.t))
    return out


def _mutate_tensor(t, draw: Draw) -> str:
    onnx = _onnx()
    nh = onnx.numpy_helper
    try:
        arr = np.array(nh.to_array(t))
    except Exception:
        arr = np.zeros(0, np.float32)
    how = draw.weighted([("element", 5), ("all", 2), ("longer", 1), ("shorter", 1), ("scalar", 1), ("reshape", 1),
                         ("raw_truncate", 0.5)])
    if how == "raw_truncate":
        raw = t.raw_data or nh.from_array(arr).raw_data
        t.ClearField("float_data")
        t.ClearField("int64_data")
        t.ClearField("int32_data")
        t.raw_data = raw[: draw.integer(0, max(0, len(raw) - 1))]
        return f"raw data truncated to {len(t.raw_data)} bytes"
    if arr.dtype.kind in "iu":
        values = INT_VALUES
    elif arr.dtype.kind == "f":
        values = FLOAT_VALUES + INT_VALUES[:12]
    elif arr.dtype.kind == "b":
        values = [True, False]
    else:
        values = [0]
    flat = arr.reshape(-1).astype(object) if arr.size else np.array([values[0]], dtype=object)
    if how == "element":
        flat[draw.integer(0, flat.size - 1)] = draw.choice(values)
    elif how == "all":
        flat[:] = draw.choice(values)
    elif how == "longer":
        flat = np.concatenate([flat, np.array([draw.choice(values)], dtype=object)])
    elif how == "shorter":
        flat = flat[:-1]
    shape = list(flat.shape)
    if how == "scalar":
        flat, shape = flat[:1], []
    elif how == "reshape" and flat.size:
        shape = [1] * draw.integer(0, 3) + [flat.size]
    elif how not in ("element", "all"):
        shape = [flat.size]
    elif arr.ndim:
        shape = list(arr.shape)
    else:
        shape = []
    code = t.data_type
    dt = arr.dtype if arr.size or arr.dtype != np.float32 else None
    try:
        if dt is not None and dt.kind in "iu":
            info = np.iinfo(dt)
            vals = [int(min(max(int(v), info.min), info.max)) for v in flat]
            new = np.array(vals, dtype=dt).reshape(shape)
        elif dt is not None and dt.kind == "f":
            with np.errstate(all="ignore"):
                new = np.array([float(v) for v in flat], dtype=dt).reshape(shape)
        else:
            new = np.array(list(flat)).reshape(shape)
        fresh = nh.from_array(new, t.name)
        if code in (onnx.TensorProto.BFLOAT16,) or dt is None:
            fresh = onnx.helper.make_tensor(t.name, code, shape, [float(v) for v in flat])
        t.CopyFrom(fresh)
    except Exception as e:
        return f"{how} (not applied: {type(e).__name__})"
    return f"{how} -> {new.reshape(-1)[:8].tolist()}{'...' if new.size > 8 else ''} shape {shape}"


def mut_tensor(m, draw: Draw) -> Optional[str]:
    ts = _tensors(m)
    if not ts:
        return None
    # Prefer integer (shape-carrying) tensors.
    ints = [x for x in ts if x[1].data_type in (6, 7)]
    what, t = draw.choice(ints) if ints and draw.chance(0.7) else draw.choice(ts)
    return f"tensor: {what}: {_mutate_tensor(t, draw)}"


def mut_dtype(m, draw: Draw) -> Optional[str]:
    onnx = _onnx()
    g = m.graph
    where = draw.choice(["input", "output", "initializer", "cast", "tensor_attr"])
    new = _dtype_choice(draw)
    if where == "input" and len(g.input):
        vi = draw.choice(list(g.input))
        vi.type.tensor_type.elem_type = new
        return f"dtype: input {vi.name} -> {new}"
    if where == "output" and len(g.output):
        vi = draw.choice(list(g.output))
        vi.type.tensor_type.elem_type = new
        return f"dtype: output {vi.name} -> {new}"
    if where == "cast":
        casts = [n for n in g.node if n.op_type in ("Cast",)]
        if casts:
            n = draw.choice(casts)
            for a in n.attribute:
                if a.name == "to":
                    a.i = new
            return f"dtype: {n.name}.to -> {new}"
    ts = _tensors(m) if where == "tensor_attr" else [(f"initializer {t.name}", t) for t in g.initializer]
    if not ts:
        return None
    what, t = draw.choice(ts)
    if draw.chance(0.5):
        t.data_type = new  # relabel: data fields no longer match
        return f"dtype: {what} relabelled {new}"
    try:
        arr = onnx.numpy_helper.to_array(t)
        flat = np.asarray(arr).reshape(-1)
        if new == onnx.TensorProto.STRING:
            vals = [str(v).encode() for v in flat]
        elif new in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128):
            vals = [complex(v) for v in flat]
        elif new == onnx.TensorProto.BOOL:
            vals = [bool(v) for v in flat]
        elif new in (2, 3, 4, 5, 6, 7, 12, 13, 21, 22, 25, 26):
            vals = [int(v) if np.isfinite(v) else 0 for v in flat.astype(np.float64)]
        else:
            vals = [float(v) for v in flat]
        fresh = onnx.helper.make_tensor(t.name, new, list(t.dims), vals)
        t.CopyFrom(fresh)
        return f"dtype: {what} re-encoded as {new}"
    except Exception as e:
        t.data_type = new
        return f"dtype: {what} relabelled {new} (re-encode failed: {type(e).__name__})"


def mut_wiring(m, draw: Draw) -> Optional[str]:
    g = m.graph
    nodes = list(g.node)
    if not nodes:
        return None
    names = _graph_value_names(m)
    n = draw.choice(nodes)
    action = draw.weighted([("rewire", 5), ("drop_input", 2), ("extra_input", 1), ("empty_input", 1),
                            ("dup_output", 2), ("dangling", 2), ("self_loop", 1), ("output_rename", 1),
                            ("output_is_input", 1), ("drop_node", 2), ("dup_node", 1), ("drop_init", 1),
                            ("dup_graph_input", 1), ("extra_output", 1)])
    if action == "rewire" and len(n.input):
        i = draw.integer(0, len(n.input) - 1)
        new = draw.choice(names)
        old, n.input[i] = n.input[i], new
        return f"wiring: {n.name}.input[{i}] {old} -> {new}"
    if action == "drop_input" and len(n.input):
        i = draw.integer(0, len(n.input) - 1)
        old = n.input[i]
        del n.input[i]
        return f"wiring: {n.name}.input[{i}] ({old}) dropped"
    if action == "extra_input":
        new = draw.choice(names)
        n.input.append(new)
        return f"wiring: {n.name} gets extra input {new}"
    if action == "empty_input" and len(n.input):
        i = draw.integer(0, len(n.input) - 1)
        n.input[i] = ""
        return f"wiring: {n.name}.input[{i}] = ''"
    if action == "dup_output" and len(n.output):
        new = draw.choice(names)
        i = draw.integer(0, len(n.output) - 1)
        n.output[i] = new
        return f"wiring: {n.name}.output[{i}] = {new} (duplicate)"
    if action == "dangling" and len(n.input):
        i = draw.integer(0, len(n.input) - 1)
        n.input[i] = "no_such_value"
        return f"wiring: {n.name}.input[{i}] = no_such_value"
    if action == "self_loop" and len(n.input) and len(n.output):
        n.input[draw.integer(0, len(n.input) - 1)] = n.output[0]
        return f"wiring: {n.name} consumes its own output"
    if action == "output_rename" and len(g.output):
        vi = draw.choice(list(g.output))
        vi.name = draw.choice(["no_such_output"] + names)
        return f"wiring: graph output renamed {vi.name}"
    if action == "output_is_input" and len(g.output) and len(g.input):
        g.output[0].name = g.input[0].name
        return f"wiring: graph output = graph input {g.input[0].name}"
    if action == "drop_node" and len(nodes) > 1:
        g.node.remove(n)
        return f"wiring: node {n.name} removed"
    if action == "dup_node":
        g.node.append(n)
        return f"wiring: node {n.name} duplicated"
    if action == "drop_init" and len(g.initializer):
        t = draw.choice(list(g.initializer))
        g.initializer.remove(t)
        return f"wiring: initializer {t.name} removed"
    if action == "dup_graph_input" and len(g.input):
        g.input.append(g.input[0])
        return f"wiring: graph input {g.input[0].name} duplicated"
    if action == "extra_output":
        new = draw.choice(names)
        vi = g.output.add()
        vi.name = new
        vi.type.tensor_type.elem_type = 1
        return f"wiring: extra graph output {new}"
    return None


def mut_order(m, draw: Draw) -> Optional[str]:
    g = m.graph
    nodes = list(g.node)
    if len(nodes) < 2:
        return None
    how = draw.choice(["reverse", "shuffle", "last_first"])
    if how == "reverse":
        new = nodes[::-1]
    elif how == "shuffle":
        new = draw.shuffle(nodes)
    else:
        new = nodes[-1:] + nodes[:-1]
    del g.node[:]
    g.node.extend(new)
    return f"order: {how}"


def mut_op(m, draw: Draw) -> Optional[str]:
    nodes = list(m.graph.node)
    if not nodes:
        return None
    n = draw.choice(nodes)
    if draw.chance(0.2):
        n.domain = draw.choice(["com.microsoft", "ai.onnx.ml", "ai.onnx", "bogus"])
        return f"op: {n.name}.domain = {n.domain}"
    old, n.op_type = n.op_type, draw.choice(OP_TYPES)
    return f"op: {n.name} {old} -> {n.op_type}"


def mut_opset(m, draw: Draw) -> Optional[str]:
    how = draw.choice(["opset", "ir_version", "extra_domain", "remove"])
    if how == "opset":
        v = draw.choice([13, 11, 0, 1, 6, 7, 9, 99, 2**31, -1, 18, 21, 23])
        for imp in m.opset_import:
            if imp.domain in ("", "ai.onnx"):
                imp.version = v
        return f"opset: default opset = {v}"
    if how == "ir_version":
        v = draw.choice([3, 0, 1, 7, 10, 11, 99, -1])
        m.ir_version = v
        return f"opset: ir_version = {v}"
    if how == "extra_domain":
        imp = m.opset_import.add()
        imp.domain, imp.version = draw.choice([("", 11), ("com.microsoft", 1), ("ai.onnx", 17)])
        return f"opset: extra import {imp.domain}:{imp.version}"
    del m.opset_import[:]
    return "opset: no opset import"


MUTATIONS: Dict[str, Callable] = {
    "dims": mut_dims,
    "attribute": mut_attribute,
    "tensor": mut_tensor,
    "dtype": mut_dtype,
    "wiring": mut_wiring,
    "order": mut_order,
    "op": mut_op,
    "opset": mut_opset,
}
MUTATION_WEIGHTS = [("tensor", 5), ("dims", 4), ("attribute", 4), ("dtype", 3), ("wiring", 3), ("op", 1.5),
                    ("order", 1), ("opset", 1)]


def corrupt_bytes(blob: bytes, names: Sequence[str], draw: Draw) -> Tuple[bytes, str]:
    b = bytearray(blob)
    how = draw.weighted([("utf8", 3), ("flip", 2), ("set", 2), ("insert", 1), ("delete", 1), ("truncate", 1)])
    if how == "utf8":
        cands = [n for n in names if len(n) >= 3 and blob.count(n.encode()) >= 1]
        if cands:
            name = draw.choice(cands).encode()
            starts = [mt.start() for mt in re.finditer(re.escape(name), bytes(b))]
            pos = draw.choice(starts) + draw.integer(0, len(name) - 1)
            bad = draw.choice([b"\xff", b"\xc3", b"\x80", b"\xfe"])
            b[pos:pos + 1] = bad
            return bytes(b), f"bytes: invalid UTF-8 in {name.decode()!r} at {pos}"
        how = "flip"
    if not b:
        return bytes(b), "bytes: empty"
    pos = draw.integer(0, len(b) - 1)
    if how == "flip":
        bit = draw.integer(0, 7)
        b[pos] ^= 1 << bit
        return bytes(b), f"bytes: flip bit {bit} at {pos}"
    if how == "set":
        v = draw.choice([0xFF, 0x00, 0x80, 0x7F, 0x01])
        b[pos] = v
        return bytes(b), f"bytes: byte {pos} = {v:#x}"
    if how == "insert":
        v = draw.choice([0xFF, 0x00, 0x80, 0x0A])
        b.insert(pos, v)
        return bytes(b), f"bytes: insert {v:#x} at {pos}"
    if how == "delete":
        del b[pos]
        return bytes(b), f"bytes: delete byte {pos}"
    return bytes(b[:pos]), f"bytes: truncated to {pos}"


# --------------------------------------------------------------------------------------
# cases

INPUT_MODES = [("exact", 10), ("nan_inf", 2), ("extreme", 2), ("float64", 1), ("int32", 1), ("wrong_shape", 1),
               ("wrong_rank", 1), ("missing", 0.5), ("extra", 0.5), ("dict", 1), ("python_list", 0.5),
               ("noncontig", 0.5), ("big_endian", 0.5), ("empty", 0.5)]


@dataclasses.dataclass
class Case:
    """Everything needed to run one case, JSON-serializable (model as base64)."""

    case_id: str
    seed_model: str
    mutations: List[str]
    model: bytes
    options: Dict[str, Any]  # GraphCoreManager and IPUModel arguments
    model_form: str  # bytes | proto | path
    example: Optional[List[Tuple[str, str, List[int]]]]  # None: compile without example_inputs
    example_as_dict: bool
    input_mode: str
    input_seed: int
    runs: int  # executions (1 or 2)

    def to_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d["model"] = base64.b64encode(self.model).decode()
        return d

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Case":
        d = dict(d)
        d["model"] = base64.b64decode(d["model"])
        d["example"] = None if d["example"] is None else [tuple(x) for x in d["example"]]
        return cls(**d)

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict() | {"case_id": ""}, sort_keys=True).encode()).hexdigest()[:16]

    def describe(self) -> str:
        muts = "; ".join(self.mutations) or "no mutation"
        return (f"case {self.case_id}: seed {self.seed_model}; {muts}; options {self.options}; model as "
                f"{self.model_form}; example {self.example}; inputs {self.input_mode} (seed {self.input_seed}); "
                f"runs {self.runs}")

    def snippet(self) -> str:
        """A Python script that replays this case in the current process."""
        return (
            "import json, sys; sys.path.insert(0, 'tests')  # run from the repository root\n"
            "from fuzz_models import Case, run_case_here\n"
            f"case = Case.from_dict(json.loads({json.dumps(self.to_dict())!r}))\n"
            "run_case_here(case, verbose=True)\n"
        )


def _example_spec(m, draw: Draw) -> Optional[List[Tuple[str, str, List[int]]]]:
    onnx = _onnx()
    init_names = {t.name for t in m.graph.initializer}
    sym = draw.integer(1, 3)
    spec = []
    for vi in m.graph.input:
        if vi.name in init_names:
            continue
        tt = vi.type.tensor_type
        try:
            dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)).name
        except Exception:
            dt = "float32"
        dims = []
        for d in tt.shape.dim:
            dims.append(int(d.dim_value) if d.HasField("dim_value") else sym)
        spec.append((vi.name, dt, dims))
    return spec


def generate_case(draw: Draw, case_id: str = "") -> Case:
    onnx = _onnx()
    seed = draw.choice(list(SEEDS))
    m = seed_model(seed)
    names = _graph_value_names(m) + [n.name for n in m.graph.node]
    mutations = []
    for _ in range(draw.weighted([(0, 1), (1, 10), (2, 4), (3, 1), (4, 0.5)])):
        kind = draw.weighted(MUTATION_WEIGHTS)
        try:
            desc = MUTATIONS[kind](m, draw)
        except Exception as e:  # a mutation that cannot apply to this model
            desc = f"{kind}: not applied ({type(e).__name__}: {e})"
        if desc:
            mutations.append(desc)
    example = None if draw.chance(0.15) else _example_spec(m, draw)
    try:
        blob = m.SerializeToString()
    except Exception as e:  # e.g. an attribute the protobuf refuses to encode
        blob = b""
        mutations.append(f"serialize failed: {type(e).__name__}")
    model_form = draw.weighted([("bytes", 3), ("proto", 3), ("path", 1)])
    if draw.chance(0.12):
        blob, desc = corrupt_bytes(blob, names, draw)
        mutations.append(desc)
        if model_form == "proto":
            model_form = "bytes"
    system_ipus = draw.weighted([(1, 3), (2, 1)])
    options = {
        "system_ipus": system_ipus,
        "tiles_per_ipu": draw.choice([4, 8, 16]),
        "num_ipus": draw.weighted([(1, 4), (system_ipus, 1)]),
        "precision": draw.choice(["float32", "float16", "mixed"]),
        "memory_proportion": draw.weighted([(0.6, 8), (0.1, 1), (1.0, 1)]),
        "enable_half_partials": draw.weighted([(True, 1), (False, 1)]),
        "simulator_threads": draw.weighted([(1, 2), (None, 1), (2, 1)]),
    }
    return Case(
        case_id=case_id,
        seed_model=seed,
        mutations=mutations,
        model=blob,
        options=options,
        model_form=model_form,
        example=example,
        example_as_dict=draw.chance(0.3),
        input_mode=draw.weighted(INPUT_MODES),
        input_seed=draw.integer(0, 2**31 - 1),
        runs=draw.weighted([(1, 9), (2, 1)]),
    )


def seed_case(name: str, precision: str = "float32") -> Case:
    """An unmutated seed model with matching inputs (expected to run)."""
    m = seed_model(name)
    return Case(f"seed-{name}", name, [], m.SerializeToString(),
                {"system_ipus": 1, "tiles_per_ipu": 4, "num_ipus": 1, "precision": precision,
                 "memory_proportion": 0.6, "enable_half_partials": True, "simulator_threads": 1},
                "bytes", _example_spec(m, RandomDraw(random.Random(0))), False, "exact", 0, 1)


def random_case(seed: int, index: int) -> Case:
    """Case ``index`` of the run with ``seed`` (reproducible on its own)."""
    return generate_case(RandomDraw(random.Random(f"{seed}:{index}")), case_id=f"{seed}:{index}")


# --------------------------------------------------------------------------------------
# running one case (in the worker, or here)

BIG = 1 << 20  # elements: above this, arrays are broadcast views of one element (no memory)


class HarnessError(Exception):
    """The harness failed to set up a case (not the library's fault)."""


class ImpossibleShape(Exception):
    """compile_model succeeded for a model with an input or output too big to
    exist (a library bug: it should raise IPUOutOfMemoryError or similar)."""


def _elements(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= max(int(d), 0)
    return n


def _array(dtype: str, shape: Sequence[int], rng: np.random.Generator, mode: str) -> np.ndarray:
    dt = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    n = 1
    for s in shape:
        n *= max(s, 0)
    if n > BIG:
        return np.broadcast_to(np.zeros((), dt), shape)
    if dt.kind == "f":
        a = rng.standard_normal(shape).astype(dt)
        if mode == "nan_inf" and a.size:
            flat = a.reshape(-1)
            for v in (np.nan, np.inf, -np.inf):
                flat[rng.integers(0, flat.size)] = v
        elif mode == "extreme" and a.size:
            fi = np.finfo(dt)
            a.reshape(-1)[rng.integers(0, a.size)] = fi.max
            a.reshape(-1)[rng.integers(0, a.size)] = fi.min
        return a
    if dt.kind in "iu":
        if mode == "extreme":
            info = np.iinfo(dt)
            return rng.choice(np.array([info.min, info.max, 0, -1 if dt.kind == "i" else 1], dt), size=shape)
        return rng.integers(0, 4, size=shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j).astype(dt)
    if dt.name in ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"):
        return rng.standard_normal(shape).astype(dt)  # ml_dtypes' storage types
    return np.zeros(shape, dt)


def make_example_inputs(case: Case) -> Any:
    if case.example is None:
        return None
    rng = np.random.default_rng(case.input_seed)
    arrays = {}
    for name, dt, dims in case.example:
        try:
            arrays[name] = _array(dt, dims, rng, "exact")
        except Exception:  # negative or absurd dims numpy cannot even describe
            return None
    return arrays if case.example_as_dict else list(arrays.values())


def make_execute_inputs(case: Case, compiled: Any) -> Any:
    rng = np.random.default_rng(case.input_seed + 1)
    mode = case.input_mode
    arrays = {}
    specs = list(compiled.inputs)
    for s in specs:
        dtype, shape = s.dtype, list(s.shape)
        if mode == "float64" and dtype == "float32":
            dtype = "float64"
        if mode == "int32" and dtype == "int64":
            dtype = "int32"
        if mode == "wrong_shape" and shape:
            i = int(rng.integers(0, len(shape)))
            shape[i] = shape[i] + 1
        if mode == "wrong_rank":
            shape = shape + [1] if rng.integers(0, 2) else shape[1:]
        if mode == "empty":
            shape = [0] + shape[1:] if shape else [0]
        try:
            a = _array(dtype, shape, rng, mode)
        except TypeError:
            a = np.zeros(tuple(shape), np.float32) if np.prod(shape) <= BIG else np.broadcast_to(np.float32(0), shape)
        if mode == "noncontig" and a.ndim and a.size and a.size <= BIG:
            a = np.repeat(a, 2, axis=-1)[..., ::2]
        if mode == "big_endian" and a.size <= BIG and a.dtype.itemsize > 1:
            a = a.astype(a.dtype.newbyteorder(">"))
        arrays[s.name] = a
    if mode == "missing" and arrays:
        arrays.pop(next(iter(arrays)))
    if mode == "extra":
        arrays["fuzz_extra_input"] = np.zeros(2, np.float32)
    if mode == "python_list":
        return [a.tolist() if a.size <= 4096 else a for a in arrays.values()]
    if mode in ("dict", "missing", "extra"):
        return arrays
    return list(arrays.values())


def run_case_here(case: Case, verbose: bool = False, phase: Optional[List[str]] = None) -> None:
    """Runs a case in this process; the library's exceptions go through.
    ``phase`` (a one-element list) is kept up to date for the caller."""
    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel

    phase = phase if phase is not None else [""]
    o = case.options

    def say(msg):
        if verbose:
            print(msg, flush=True)

    phase[0] = "setup"
    if case.model_form.startswith("selftest:"):  # the harness's own tests: a crash, a hang, a foreign exception
        phase[0] = "compile"
        what = case.model_form.split(":", 1)[1]
        if what == "abort":
            os.abort()
        if what == "hang":
            while True:
                time.sleep(1)
        if what == "memory":
            return bytearray(int(case.options.get("bytes", 1 << 31))).count(1)
        raise ValueError("self-test exception")
    if case.model_form == "proto":
        import onnx

        model: Any = onnx.ModelProto()
        try:
            model.ParseFromString(case.model)
        except Exception:
            model = case.model
    elif case.model_form == "path":
        fd, path = tempfile.mkstemp(suffix=".onnx", prefix="fuzz-")
        with os.fdopen(fd, "wb") as f:
            f.write(case.model)
        model = path
    else:
        model = case.model
    example = make_example_inputs(case)
    try:
        phase[0] = "manager"
        say(f"GraphCoreManager(num_ipus={o['num_ipus']}, precision={o['precision']!r}, ...)")
        ipu = GraphCoreManager(
            num_ipus=o["num_ipus"],
            precision=o["precision"],
            memory_proportion=o["memory_proportion"],
            enable_half_partials=o["enable_half_partials"],
            simulator_threads=o["simulator_threads"],
            ipu_model=IPUModel(num_ipus=o["system_ipus"], tiles_per_ipu=o["tiles_per_ipu"]),
        )
        with ipu:
            phase[0] = "compile"
            say("compile_model(...)")
            compiled = ipu.compile_model(model, example)
            say(f"compiled: {compiled!r}")
            for r in range(case.runs):
                phase[0] = "inputs"
                for s in list(compiled.inputs) + list(compiled.outputs):
                    if _elements(s.shape) >= 2**62:
                        raise ImpossibleShape(
                            f"compile_model accepted '{s.name}' of shape {list(s.shape)} ({s.dtype}): more elements "
                            f"than any host or IPU can hold, yet it raised no IPUOutOfMemoryError"
                        )
                    if _elements([max(int(d), 1) for d in s.shape]) * 16 >= 2**63:
                        raise ImpossibleShape(
                            f"compile_model accepted '{s.name}' of shape {list(s.shape)} ({s.dtype}): numpy cannot "
                            f"make an array of that shape ('array is too big'), so it cannot be fed or returned"
                        )
                try:
                    inputs = make_execute_inputs(case, compiled)
                except Exception as e:
                    raise HarnessError(f"cannot make inputs for {compiled!r}: {type(e).__name__}: {e}") from e
                phase[0] = "execute"
                say(f"execute_model(...) with {case.input_mode} inputs")
                outs = ipu.execute_model(compiled, inputs)
                phase[0] = "outputs"
                for x in outs:
                    np.asarray(x).sum() if np.asarray(x).dtype.kind in "fiub" else None
                say(f"outputs: {[(np.asarray(x).dtype.name, np.asarray(x).shape) for x in outs]}")
            phase[0] = "finalize"
    finally:
        if case.model_form == "path":
            try:
                os.unlink(model)
            except OSError:
                pass


def _maxrss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class _Phase(list):
    """A one-element list whose value is mirrored into shared memory, so the
    runner knows the phase of a worker that died or hangs."""

    def __init__(self, shared=None):
        super().__init__([""])
        self.shared = shared

    def __setitem__(self, i, value):
        super().__setitem__(i, value)
        if self.shared is not None:
            self.shared.value = value.encode()[:31]


def run_case_classified(case: Case, shared_phase=None) -> Dict[str, Any]:
    """Runs a case here and classifies how it ended (no crash/hang detection)."""
    from neurenix.hardware.graphcore import IPUError

    phase = _Phase(shared_phase)
    t0 = time.perf_counter()
    res: Dict[str, Any] = {"outcome": "ok", "exc_type": "", "message": "", "traceback": "", "phase": ""}
    try:
        run_case_here(case, phase=phase)
    except HarnessError as e:
        res.update(outcome="harness", exc_type=type(e.__cause__ or e).__name__, message=str(e))
        res["traceback"] = traceback.format_exc()
    except IPUError as e:
        res.update(outcome="ipu", exc_type=type(e).__name__, message=str(e)[:2000])
    except BaseException as e:  # noqa: B902 - PanicException derives from BaseException
        if isinstance(e, KeyboardInterrupt):
            raise
        if phase[0] == "setup":
            res.update(outcome="harness")
        else:
            res.update(outcome="bug")
        res.update(exc_type=f"{type(e).__module__}.{type(e).__qualname__}".replace("builtins.", ""),
                   message=str(e)[:2000], traceback=traceback.format_exc()[-6000:])
    res["phase"] = phase[0]
    res["seconds"] = time.perf_counter() - t0
    return res


# --------------------------------------------------------------------------------------
# the worker and its runner

DEFAULT_MEMORY_LIMIT = 8 << 30
DEFAULT_HOG_LIMIT = 1 << 30


def _worker_main(conn, log_path: str, memory_limit: int, hog_limit: int, shared_phase=None) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    import faulthandler

    faulthandler.enable(all_threads=True)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_limit:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    os.environ["NEURENIX_IPU_LOCK_DIR"] = tempfile.mkdtemp(prefix="fuzz-locks-")
    os.environ.setdefault("RUST_BACKTRACE", "1")  # a panic that aborts names where it happened
    for var in ("NEURENIX_IPU_MODEL", "NEURENIX_NUM_IPUS", "NEURENIX_PRECISION"):
        os.environ.pop(var, None)
    import neurenix.hardware.graphcore  # noqa: F401

    conn.send("ready")
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        case = Case.from_dict(msg)
        print(f"=== case {case.case_id}", flush=True)
        before = _maxrss_kb()
        res = run_case_classified(case, shared_phase)
        after = _maxrss_kb()
        res["maxrss_kb"] = after
        restart = False
        if after * 1024 > hog_limit and after > before:
            res["hog_kb"] = after
            restart = True
        res["restart"] = restart
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send(res)
        if restart:
            return


_CTX = None
_START_LOCK = threading.Lock()


def _context():
    global _CTX
    if _CTX is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["numpy", "onnx", "neurenix.hardware.graphcore", __name__])
        _CTX = ctx
    return _CTX


@dataclasses.dataclass
class Result:
    case: Case
    outcome: str  # ok | ipu | bug | crash | hang | hog | harness
    exc_type: str = ""
    message: str = ""
    traceback: str = ""
    phase: str = ""
    seconds: float = 0.0
    stderr: str = ""
    maxrss_kb: int = 0

    def klass(self) -> str:
        if self.outcome in ("ok", "hang", "hog"):
            return self.outcome
        return f"{self.outcome}:{self.exc_type}"

    @property
    def is_failure(self) -> bool:
        return self.outcome in ("bug", "crash", "hang", "hog", "harness")

    def where(self) -> str:
        """Where in neurenix it failed, as far as the output tells: the
        innermost neurenix frame of a native backtrace (panic, abort, or gdb's
        stacks of a hang), else the panic location, else the innermost frame of
        the Python traceback inside the neurenix package."""
        text = self.stderr or ""
        for line in text.splitlines():
            if line.startswith("#"):  # a gdb frame: "#2  0x... in neurenix::ops::gather_rows(...) () from ..."
                mt = re.search(r" in ((?:[\w:~<>]|\(anonymous namespace\))+)", line)
                if mt and re.match(r"<?neurenix", mt.group(1)) and "cxxbridge" not in mt.group(1):
                    return re.sub(r"::h[0-9a-f]{16}$", "", mt.group(1))
                continue
            mt = re.search(r"\b(neurenix(?:_core|_sys|_py)?::[A-Za-z0-9_:<>]+)", line)
            if mt and not re.search(r"panic|alloc::|rust_begin_unwind|core::result", line):
                return re.sub(r"::h[0-9a-f]{16}$", "", mt.group(1))
        mt = re.search(r"panicked at ([^\s:]+:\d+)", text)
        if mt:
            return mt.group(1)
        frames = re.findall(r'File "([^"]*neurenix/hardware/graphcore/[^"]+)", line (\d+), in (\w+)', self.traceback)
        if frames:
            f, line, fn = frames[-1]
            return f"{os.path.basename(f)}:{line} {fn}"
        return ""

    def signature(self) -> str:
        """Deduplication key: outcome, phase, location, normalised message."""
        msg = self.message or _crash_line(self.stderr)
        msg = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", msg)
        msg = re.sub(r"0x[0-9a-fA-F]+|\d+", "N", msg)
        msg = re.sub(r"\s+", " ", msg)[:160]
        return f"{self.klass()} | {self.phase} | {self.where()} | {msg}"

    def report(self) -> str:
        lines = [f"{self.klass()} in {self.phase or '?'} ({self.seconds:.2f} s)", self.case.describe()]
        if self.message:
            lines.append(f"message: {self.message[:1000]}")
        if self.traceback:
            lines.append(self.traceback[-3000:])
        if self.stderr:
            lines.append("worker stderr:\n" + self.stderr)
        lines.append("reproduce with:\n" + self.case.snippet())
        return "\n".join(lines)


def _crash_line(stderr: str) -> str:
    pats = [r"panicked at[^\n]*\n[^\n]*", r"terminate called[^\n]*\n?[^\n]*", r"memory allocation of[^\n]*",
            r"Fatal Python error:[^\n]*", r"Assertion[^\n]*", r"[^\n]*Error[^\n]*"]
    for p in pats:
        mt = re.search(p, stderr)
        if mt:
            return mt.group(0).strip().replace("\n", " ")
    return ""


def _native_stacks(pid: int) -> str:
    """Every thread's native stack of a hanging worker, by gdb (the neurenix
    frames are what tell where it loops)."""
    try:
        out = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off",
                              "-ex", "thread apply all bt 40"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    blocks: List[List[str]] = []
    for ln in out.stdout.splitlines():
        if ln.startswith("Thread"):
            blocks.append([ln])
        elif ln.startswith("#") and blocks:
            blocks[-1].append(ln)
    blocks.sort(key=lambda b: not b[0].startswith("Thread 1 "))  # the main thread first
    return "native stacks (gdb):\n" + "\n".join(ln for b in blocks for ln in b)[:6000] + "\n"


def _replay_main(case_path: str, memory_limit: int) -> None:
    """Entry point of a replay under gdb (see :func:`_crash_stacks`)."""
    import warnings

    warnings.simplefilter("ignore")
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_limit:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    os.environ["NEURENIX_IPU_LOCK_DIR"] = tempfile.mkdtemp(prefix="fuzz-locks-")
    with open(case_path) as f:
        case = Case.from_dict(json.load(f))
    try:
        run_case_here(case)
    except BaseException:
        pass


def _crash_stacks(case: Case, memory_limit: int, timeout: float) -> str:
    """The native stack where a case crashes, by replaying it under gdb (for
    crashes that print no backtrace of their own: SIGSEGV, SIGFPE, C++ aborts)."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="fuzz-case-")
    with os.fdopen(fd, "w") as f:
        json.dump(case.to_dict(), f)
    code = (f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
            f"import fuzz_models; fuzz_models._replay_main({path!r}, {memory_limit})")
    try:
        out = subprocess.run(["gdb", "-batch", "-nx", "-ex", "set pagination off", "-ex", "run", "-ex", "bt 40",
                              "--args", sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
        text = out.stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    finally:
        os.unlink(path)
    frames = [ln for ln in text.splitlines() if ln.startswith("#") or "received signal" in ln]
    if not any("received signal" in ln for ln in frames):
        return ""
    return "native stack of a replay under gdb:\n" + "\n".join(frames)[:6000] + "\n"


class Runner:
    """Runs cases in a persistent worker; restarts it after a crash, a hang or a hog."""

    def __init__(self, timeout: float = 10.0, memory_limit: int = DEFAULT_MEMORY_LIMIT,
                 hog_limit: int = DEFAULT_HOG_LIMIT, log_dir: Optional[str] = None, gdb: bool = True):
        self.timeout = timeout
        self.gdb = gdb and shutil.which("gdb") is not None
        self.memory_limit = memory_limit
        self.hog_limit = hog_limit
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="fuzz-worker-")
        os.makedirs(self.log_dir, exist_ok=True)
        fd, self.log_path = tempfile.mkstemp(prefix="worker-", suffix=".log", dir=self.log_dir)
        os.close(fd)
        self.proc = None
        self.conn = None
        self.restarts = 0

    def _start(self) -> None:
        ctx = _context()
        parent, child = ctx.Pipe()
        self.phase = ctx.Array("c", 32, lock=False)
        self.proc = ctx.Process(target=_worker_main,
                                args=(child, self.log_path, self.memory_limit, self.hog_limit, self.phase), daemon=True)
        # The worker must not re-import the caller's __main__ (a script, pytest, stdin): hide it while starting.
        with _START_LOCK:
            main = sys.modules.get("__main__")
            sys.modules["__main__"] = types.ModuleType("__main__")
            try:
                self.proc.start()
            finally:
                sys.modules["__main__"] = main
        child.close()
        self.conn = parent
        if not parent.poll(120) or parent.recv() != "ready":
            raise RuntimeError(f"the fuzz worker did not start; see {self.log_path}")
        self.restarts += 1

    def _stop(self, kill: bool) -> None:
        if self.proc is None:
            return
        if kill and self.proc.is_alive():
            self.proc.kill()
        self.proc.join(10)
        try:
            self.conn.close()
        except Exception:
            pass
        self.proc = None
        self.conn = None

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
            except Exception:
                pass
            self.proc.join(5)
        self._stop(kill=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run(self, case: Case) -> Result:
        if self.proc is None or not self.proc.is_alive():
            self._stop(kill=True)
            self._start()
        if os.path.getsize(self.log_path) > (8 << 20):
            os.truncate(self.log_path, 0)
        offset = os.path.getsize(self.log_path)
        t0 = time.perf_counter()
        self.phase.value = b""
        self.conn.send(case.to_dict())
        res = None
        if self.conn.poll(self.timeout):
            try:
                res = self.conn.recv()
            except (EOFError, ConnectionResetError):
                res = None
            if res is None:  # the worker died
                self.proc.join(10)
                code = self.proc.exitcode
                stderr = self._stderr(offset)
                self._stop(kill=True)
                if code is not None and code < 0:
                    what = signal.Signals(-code).name
                else:
                    what = f"exit{code}"
                r = Result(case, "crash", what, seconds=time.perf_counter() - t0, stderr=stderr, phase=self._phase())
                if self.gdb and not r.where():
                    r.stderr = _crash_stacks(case, self.memory_limit, max(60.0, 3 * self.timeout)) + r.stderr
                return r
        else:
            native = _native_stacks(self.proc.pid) if self.gdb else ""
            # SIGABRT makes faulthandler print every thread's Python stack (where it hangs).
            try:
                os.kill(self.proc.pid, signal.SIGABRT)
                self.proc.join(3)
            except OSError:
                pass
            phase = self._phase()
            self._stop(kill=True)
            return Result(case, "hang", "timeout", f"no answer within {self.timeout:g} s",
                          seconds=time.perf_counter() - t0, stderr=native + self._stderr(offset), phase=phase)
        r = Result(case, res["outcome"], res["exc_type"], res["message"], res["traceback"], res["phase"],
                   res["seconds"], maxrss_kb=res.get("maxrss_kb", 0))
        if r.outcome in ("bug", "harness"):
            r.stderr = self._stderr(offset)  # a panic's message and backtrace
        if res.get("hog_kb"):
            r.stderr = f"peak RSS {res['hog_kb'] // 1024} MiB (limit {self.hog_limit >> 20} MiB)"
            if r.outcome in ("ok", "ipu"):
                r.message = f"{r.klass()}: {r.message[:300]}"
                r.outcome = "hog"
        if res.get("restart"):
            self._stop(kill=False)
        return r

    def _phase(self) -> str:
        return self.phase.value.decode(errors="replace")

    def _stderr(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            return ""
        text = data.decode("utf-8", "replace")
        if len(text) > 14000:  # the first lines say what failed, the last ones where (faulthandler)
            text = text[:8000] + "\n[...]\n" + text[-6000:]
        return text


def save_failure(result: Result, out_dir: str) -> str:
    """Writes a failing case (model, case, report, replay script) to its own folder."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{result.klass()}_{result.case.case_id}")[:120]
    d = os.path.join(out_dir, safe)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(result.case.model)
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(result.case.to_dict(), f, indent=1)
    with open(os.path.join(d, "report.txt"), "w") as f:
        f.write(f"signature: {result.signature()}\n" + result.report())
    with open(os.path.join(d, "replay.py"), "w") as f:
        f.write(
            "# Replays this case in-process (run from the repository root): python <this file>\n"
            "import json, os, sys\n"
            "sys.path.insert(0, 'tests')\n"
            "from fuzz_models import Case, run_case_here\n"
            "here = os.path.dirname(os.path.abspath(__file__))\n"
            "run_case_here(Case.from_dict(json.load(open(os.path.join(here, 'case.json')))), verbose=True)\n"
        )
    return d
