"""Failures the fuzz harness found (tests/fuzz_models.py, benchmarks/fuzz.py),
each reduced by hand to a small model built with onnx.helper; all fixed, and
kept as regression tests (tests/test_fuzz.py runs every one).

Every finding is a function returning ``(model, example_inputs)`` (model: an
``onnx.ModelProto`` or serialized bytes; example_inputs: a list of arrays or
None), registered with what it did when found (``observed``), where the fault
was (``location``), and the manager options it needs. The contract each
one breaks: compile_model/execute_model either succeed or raise an IPUError
subclass; no crash, no hang, no other exception, no absurd host memory.

    python tests/fuzz_findings.py            # each in a worker: crash/hang-safe
    python tests/fuzz_findings.py --list
    python tests/fuzz_findings.py range_1e12 --here   # in this process

As regression tests: for each finding, run it (in a worker, as ``main`` does)
and require the outcome to be ``ok`` or ``ipu:<IPUError subclass>`` other than
IPUInternalError (which says "please report" itself; ``main`` counts it as
failing too).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

F, I64 = TensorProto.FLOAT, TensorProto.INT64


class Finding(NamedTuple):
    name: str
    build: Callable[[], tuple]
    observed: str  # outcome class today: crash:SIGABRT, hang, bug:<type>, hog, ... ("a|b": either, by machine speed)
    message: str  # what it says (or does)
    location: str  # suspected root cause
    options: Dict[str, Any]


FINDINGS: List[Finding] = []
HANG = "compile_model does not return within 10 s, or returns after growing the host process past 1 GiB"
DEFAULT_OPTIONS = {"num_ipus": 1, "system_ipus": 1, "tiles_per_ipu": 4, "precision": "float32"}


def finding(observed: str, message: str, location: str, **options):
    def register(fn):
        FINDINGS.append(Finding(fn.__name__, fn, observed, message, location, {**DEFAULT_OPTIONS, **options}))
        return fn

    return register


def model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "finding", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.array(value, dtype), name)


def zeros(*shape, dtype=np.float32):
    return np.zeros(shape, dtype)


def corrupt(m: onnx.ModelProto, name: str, occurrence: Optional[int] = None, bad: bytes = b"\xff") -> bytes:
    """The serialized model with the first byte of ``name`` replaced by ``bad``
    (same length, so the protobuf stays well formed): in every occurrence, or
    only in the given one (0-based)."""
    blob = m.SerializeToString()
    key = name.encode()
    starts = [i for i in range(len(blob)) if blob.startswith(key, i)]
    assert starts
    out = bytearray(blob)
    for k, i in enumerate(starts):
        if occurrence is None or k == occurrence:
            out[i:i + len(bad)] = bad
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# Range


def _range(start, limit, delta, dtype=np.int64, elem=I64):
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=F),
             helper.make_node("Add", ["x", "rf"], ["y"])]
    inits = [const("start", start, dtype), const("limit", limit, dtype), const("delta", delta, dtype)]
    if elem == F:
        nodes[1] = helper.make_node("Identity", ["r"], ["rf"])
    return model(nodes, [vi("x", F, [8])], [vi("y", F, [8])], inits), [zeros(8)]


@finding("crash:SIGABRT", "memory allocation of 8000000000000 bytes failed (Rust aborts: 8 TB reservation)",
         "rust/neurenix-core/src/ops/shape_ops.rs Range::value: Vec::with_capacity/collect of n elements with no "
         "limit on n, during shape inference (passes::infer_and_fold)")
def range_1e12():
    """Range(0, 1e12, 1): the issue's example. Range(0, 2**31 - 1, 1) is the same
    bug at 16 GiB (an abort under an 8 GiB RLIMIT_AS, a 16 GiB hog without)."""
    return _range(0, 10**12, 1)


@finding("bug:pyo3_runtime.PanicException", "capacity overflow",
         "rust/neurenix-core/src/ops/shape_ops.rs Range::value: n = ceil((limit - start) / delta) as usize "
         "unchecked, Vec::with_capacity(n) panics")
def range_capacity_overflow():
    return _range(0, 2**62, 1)


@finding("bug:pyo3_runtime.PanicException", "called `Result::unwrap()` on an `Err` value: ShapeError/Overflow",
         "rust/neurenix-core/src/ops/shape_ops.rs Range::value: ArrayD::from_shape_vec(..).unwrap() (and "
         "start + i * delta overflows i64)")
def range_from_int64_min():
    return _range(-(2**63), 8, 1)


@finding("bug:pyo3_runtime.PanicException", "capacity overflow",
         "rust/neurenix-core/src/ops/shape_ops.rs Range::value (float branch): n from a float count unchecked")
def range_float_1e30():
    return _range(0.5, 1e30, 0.5, np.float32, F)


# ---------------------------------------------------------------------------------------------
# Pad


def _pad(x_shape, pads, example=True):
    nodes = [helper.make_node("Pad", ["x", "pads", "v"], ["p"], mode="constant"),
             helper.make_node("Abs", ["p"], ["y"])]
    inits = [const("pads", pads), const("v", 0.5, np.float32)]
    ex = [zeros(*x_shape)] if example else None
    return model(nodes, [vi("x", F, x_shape)], [vi("y", F, ["a", "b", "c"])], inits), ex


@finding("crash:SIGABRT", "memory allocation of 34359738384 bytes failed",
         "rust/neurenix-core/src/ops/shape_ops.rs Pad::indices: builds an index vector per output position "
         "(O(padded size) host memory) during shape inference, no limit on pads")
def pad_2_31():
    return _pad([2, 3, 4], [0, 1, 2, 2**31 - 1, 1, 2])


@finding("bug:pyo3_runtime.PanicException", "capacity overflow",
         "rust/neurenix-core/src/ops/shape_ops.rs Pad::indices: (-before..m + after).collect() with pads near "
         "i64::MAX")
def pad_int64_max():
    return _pad([2, 3, 4], [0, 2**63 - 1, 2, 0, 1, 2])


@finding("crash:SIGABRT", "memory allocation of 34359738368 bytes failed",
         "rust/neurenix-core/src/ops/shape_ops.rs Pad::indices again, reached through a declared input dim "
         "(2**31): declared dims are taken as they are, with no bound, in python/neurenix/hardware/graphcore/"
         "onnx_import.py _dims and the Rust IR")
def pad_declared_dim_2_31():
    return _pad([2**31, 3, 4], [0, 1, 2, 0, 1, 2], example=False)


# ---------------------------------------------------------------------------------------------
# Tile / Expand


def _tile(repeats, x_shape=(2, 3)):
    nodes = [helper.make_node("Tile", ["x", "repeats"], ["t"]), helper.make_node("Neg", ["t"], ["y"])]
    return model(nodes, [vi("x", F, list(x_shape))], [vi("y", F, [4, 9])], [const("repeats", repeats)]), \
        [zeros(*x_shape)]


def _expand(shape, x_shape=(1, 4)):
    nodes = [helper.make_node("Expand", ["x", "shape"], ["e"]), helper.make_node("Sigmoid", ["e"], ["y"])]
    return model(nodes, [vi("x", F, list(x_shape))], [vi("y", F, [2, 3, 4])], [const("shape", shape)]), \
        [zeros(*x_shape)]


@finding("bug:pyo3_runtime.PanicException",
         "ndarray: Shape too large, product of non-zero axis lengths overflows isize",
         "rust/neurenix-core/src/tensor.rs HostTensor::full (ndarray), called while lowering a Tile whose "
         "output numel overflows; Tile::infer multiplies dims unchecked (shape_ops.rs)")
def tile_2_32_squared():
    return _tile([2**32, 2**32])


@finding("bug:pyo3_runtime.PanicException",
         "ndarray: Shape too large, product of non-zero axis lengths overflows isize",
         "rust/neurenix-core/src/tensor.rs HostTensor::full via Expand lowering; shape_ops.rs numel() is an "
         "unchecked product, so FOLD_LIMIT checks are bypassed")
def expand_2_40_squared():
    """The issue's Expand to [2**40, 2**40]."""
    return _expand([2**40, 2**40], x_shape=(1, 1))


@finding("hang|hog", HANG + "; native stack in neurenix::copy_view / "
         "neurenix::Graph::locate",
         "cpp/src/graph.cc:182 Graph::locate, cpp/src/exchange.cc:9 copy_view: lowering walks every element "
         "of a 10**12-element "
         "view; nothing rejects an output far larger than the IPUs' memory before lowering "
         "(rust/neurenix-core/src/ops/shape_ops.rs Tile::lower)")
def tile_1e12():
    return _tile([10**12, 3])


@finding("hang|hog", HANG + "; native stack in neurenix::Graph::locate",
         "cpp/src/graph.cc Graph::locate via LowerCx::expand (rust/neurenix-core/src/lower.rs): per-element "
         "work on a 1.2e13-element tensor before any memory check")
def expand_1e12():
    return _expand([10**12, 3, 4])


@finding("crash:SIGFPE", "Floating point exception (integer division by zero)",
         "cpp/src/graph.cc:134 Graph::map_linearly (from cpp/src/ops/rearrange.cc): numel of [2**63-1, 3, 4] "
         "wraps, chunks = (numel + grain - 1) / grain becomes 0, so ntiles = 0 and (chunks + ntiles - 1) / ntiles "
         "divides by zero; with precision float16 (float32: a hang or a "
         "host-memory hog instead)", precision="float16")
def expand_int64_max():
    return _expand([2**63 - 1, 3, 4])


@finding("crash:SIGFPE", "Floating point exception (integer division by zero)",
         "cpp/src/graph.cc:134 Graph::map_linearly (divide by ntiles = 0, as above) from Tile lowering; the "
         "repeated size wraps; with "
         "precision float16", precision="float16")
def tile_int64_max():
    return _tile([2, 2**63 - 1])


# ---------------------------------------------------------------------------------------------
# declared input dims


@finding("crash:SIGABRT", "memory allocation of ... bytes failed",
         "rust/neurenix-core/src/ops/shape_ops.rs Split (infer/indices per axis position) with a declared "
         "dim of 2**31")
def split_declared_dim_2_31():
    nodes = [helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1),
             helper.make_node("Concat", ["b", "a"], ["y"], axis=1)]
    return model(nodes, [vi("x", F, [2**31, 6])], [vi("y", F, [2**31, 6])], [const("sizes", [2, 4])]), None


@finding("bug:pyo3_runtime.PanicException", "capacity overflow",
         "rust/neurenix-core/src/ops/shape_ops.rs Slice (index vectors per axis) with a declared dim of 2**62")
def slice_declared_dim_2_62():
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["s"]),
             helper.make_node("Exp", ["s"], ["y"])]
    inits = [const("starts", [0, 1]), const("ends", [4, 6]), const("axes", [0, 1]), const("steps", [2, 2])]
    return model(nodes, [vi("x", F, [4, 6, 2**62])], [vi("y", F, [2, 3, 2**62])], inits), None


@finding("bug:pyo3_runtime.PanicException", "capacity overflow",
         "rust/neurenix-core/src/ops/shape_ops.rs Split with a declared dim of 2**63-1")
def split_declared_dim_int64_max():
    nodes = [helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1),
             helper.make_node("Concat", ["b", "a"], ["y"], axis=1)]
    return model(nodes, [vi("x", F, [2**63 - 1, 6])], [vi("y", F, [2**63 - 1, 6])], [const("sizes", [2, 4])]), None


@finding("crash:SIGABRT", "memory allocation of ... bytes failed",
         "rust/neurenix-core/src/ops/shape_ops.rs Slice (index vectors per axis) with a declared dim of 10**12")
def slice_declared_dim_1e12():
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["s"]),
             helper.make_node("Exp", ["s"], ["y"])]
    inits = [const("starts", [0, 1]), const("ends", [4, 6]), const("axes", [0, 1]), const("steps", [2, 2])]
    return model(nodes, [vi("x", F, [4, 6, 10**12])], [vi("y", F, [2, 3, 10**12])], inits), None


@finding("crash:SIGABRT", "memory allocation of ... bytes failed",
         "rust/neurenix-core/src/ops/reduce.rs ArgReduce with a declared reduced dim of 10**12")
def argmax_declared_dim_1e12():
    nodes = [helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)]
    return model(nodes, [vi("x", F, [2, 10**12])], [vi("y", I64, [2])]), None


@finding("hang|hog", "compile_model does not return (or, on a fast machine, returns after growing the host "
         "process past 1 GiB); native stack in neurenix::ops::reduce",
         "cpp/src/ops/reduce.cc:17 reduce() planning a 2**31 x 5 reduction element by element; no size check "
         "before lowering")
def reduce_declared_dim_2_31():
    nodes = [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=0)]
    return model(nodes, [vi("x", F, [2**31 - 1, 5])], [vi("y", F, [2**31 - 1])]), None


@finding("hang|hog", HANG + "; native stack in neurenix::ops::gather_rows",
         "cpp/src/ops/pool.cc:180 gather_rows (from rust/neurenix-core/src/ops/gather.rs lower_dynamic) builds one "
         "TileInterval per row of a 2**31-row gather")
def gather_declared_dim_2_31():
    emb = numpy_helper.from_array(np.ones((16, 8), np.float32), "emb")
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["y"], axis=0)]
    return model(nodes, [vi("ids", I64, [2**31, 4])], [vi("y", F, [2**31, 4, 8])], [emb]), None


@finding("hang|hog", "compile_model does not return (or, on a fast machine, returns after growing the host "
         "process past 1 GiB); native stack in neurenix::ops::matmul",
         "cpp/src/ops/matmul.cc (with planning.cc) for a 10**12-row operand: no up-front memory bound")
def matmul_declared_dim_1e12():
    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    return model(nodes, [vi("x", F, [10**12, 8])], [vi("y", F, [10**12, 4])], [w]), None


@finding("hang|hog", "compile_model does not return (or, on a fast machine, returns after growing the host "
         "process past 1 GiB); native stack in neurenix::ops::pool",
         "cpp/src/ops/pool.cc pooling lowering with a 2**31-1 high image")
def maxpool_declared_dim_2_31():
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    return model(nodes, [vi("x", F, [1, 3, 2**31 - 1, 8])], [vi("y", F, [1, 3, 2**30 - 1, 4])]), None


@finding("hang|hog", HANG + "; native stack in neurenix::copy_view / neurenix::Graph::locate",
         "cpp/src/exchange.cc:9 copy_view, cpp/src/graph.cc:182 Graph::locate for the Transpose of a "
         "1.2e13-element tensor: per-element "
         "work before any memory check")
def reshape_declared_dim_1e12():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
             helper.make_node("Flatten", ["t"], ["y"], axis=1)]
    return model(nodes, [vi("x", F, [10**12, 3, 4])], [vi("y", F, [2 * 10**12, 6])], [const("shape", [6, -1])]), None


@finding("hang|hog", "compile_model does not return (native stack in neurenix::ops::(anonymous namespace)::"
         "segments), or returns after growing the host process past 1 GiB",
         "cpp/src/ops/conv.cc:49 segments() (convolution lowering) for a batch of 10**12 images")
def conv_declared_batch_1e12():
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["y"])]
    return model(nodes, [vi("x", F, [10**12, 3, 8, 8])], [vi("y", F, [10**12, 4, 1, 1])], [w]), None


@finding("hang|hog", "compile_model does not return (native stack in neurenix::ops::split_candidates), or "
         "returns after growing the host process past 1 GiB",
         "cpp/src/ops/planning.cc:10 split_candidates (conv/matmul planner) enumerating splits of a 2**63-1 "
         "batch")
def conv_declared_batch_int64_max():
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["y"])]
    return model(nodes, [vi("x", F, [2**63 - 1, 3, 8, 8])], [vi("y", F, [2**63 - 1, 4, 1, 1])], [w]), None


@finding("ipu:IPUInternalError", "internal error (please report): reshape [1, 4, 0, 8] -> [1, 4, 4294967296, 8] "
         "(an IPUError, but a bug by its own name)",
         "convolution lowering (rust/neurenix-core/src/ops/conv.rs -> cpp/src/ops conv) keeps a spatial dim in "
         "32 bits: 2**32 becomes 0 (10**12 becomes 3567587328)")
def conv_declared_dim_2_32_truncated():
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    return model(nodes, [vi("x", F, [1, 3, 2**32, 8])], [vi("y", F, [1, 4, 2**32, 8])], [w]), None


@finding("ipu:IPUInternalError", "internal error (please report): cannot create std::vector larger than "
         "max_size() (an IPUError, but a bug by its own name)",
         "cpp/src (graph building) sizes a std::vector by the element count of a 2**62-row tensor; "
         "std::length_error is caught at the bridge")
def mlp_declared_dim_2_62_vector():
    inits = [numpy_helper.from_array(np.ones((8, 16), np.float32), "w0"),
             numpy_helper.from_array(np.ones((16,), np.float32), "b0"),
             numpy_helper.from_array(np.ones((16, 4), np.float32), "w1")]
    nodes = [helper.make_node("Gemm", ["x", "w0"], ["h"]), helper.make_node("Add", ["h", "b0"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["a"]), helper.make_node("MatMul", ["a", "w1"], ["z"]),
             helper.make_node("Softmax", ["z"], ["y"], axis=-1)]
    return model(nodes, [vi("x", F, [2**62, 8])], [vi("y", F, [2**62, 4])], inits), None


@finding("hang|hog", HANG + "; native stack in neurenix::copy_view, later neurenix::Graph::~Graph",
         "cpp/src/graph.cc: lowering a Tile of a 10**12-row input builds per-element structures (copy_view), and "
         "tearing that graph down on the error path (Graph::~Graph) takes minutes too")
def tile_declared_dim_1e12():
    nodes = [helper.make_node("Tile", ["x", "repeats"], ["t"]), helper.make_node("Neg", ["t"], ["y"])]
    return model(nodes, [vi("x", F, [10**12, 3])], [vi("y", F, [2 * 10**12, 9])], [const("repeats", [2, 3])]), None


@finding("hang|hog", "hang, or IPUInternalError: internal error (please report): std::bad_alloc -- after "
         "growing the host "
         "process past 1 GiB (up to the RLIMIT_AS)",
         "cpp/src (graph/compiler) allocating host structures proportional to a 2**63-1-row input; the error "
         "is only an IPUInternalError because std::bad_alloc is caught at the bridge")
def mlp_declared_dim_int64_max():
    w = numpy_helper.from_array(np.ones((8, 16), np.float32), "w")
    nodes = [helper.make_node("Gemm", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    return model(nodes, [vi("x", F, [2**63 - 1, 8])], [vi("y", F, [2**63 - 1, 16])], [w]), None


@finding("bug:ImpossibleShape", "compile_model succeeds: the CompiledModel's input is float32[2, 2**62, 4] "
         "(2**65 elements, which wraps to 0 bytes), so no IPUOutOfMemoryError",
         "rust/neurenix-core (shape inference, numel/bytes products unchecked: ops/shape_ops.rs numel, "
         "lower.rs numel) -- sizes wrap around instead of failing")
def declared_dim_2_62_accepted():
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    return model(nodes, [vi("x", F, [2, 2**62, 4])], [vi("y", F, [2, 2**62, 4])]), None


# ---------------------------------------------------------------------------------------------
# strings and wiring


def _mlp(node_name="relu_node", value_name="hidden_value"):
    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "weights")
    nodes = [helper.make_node("MatMul", ["input_x", "weights"], [value_name], name="matmul_node"),
             helper.make_node("Relu", [value_name], ["output_y"], name=node_name)]
    return model(nodes, [vi("input_x", F, [2, 8])], [vi("output_y", F, [2, 4])], [w])


@finding("bug:UnicodeDecodeError", "'utf-8' codec can't decode byte 0xff in position ...: invalid start byte",
         "python/neurenix/hardware/graphcore/onnx_import.py load: onnx.checker.check_model raises "
         "UnicodeDecodeError on an invalid UTF-8 value name, and only ValidationError is caught")
def invalid_utf8_value_name():
    """Only the Relu's input is corrupted, so the checker fails and its message,
    which quotes the name, cannot be decoded."""
    return corrupt(_mlp(), "hidden_value", occurrence=1), [zeros(2, 8)]


@finding("bug:TypeError", "'bytes' object is not an instance of 'str' / while processing 'nodes'",
         "python/neurenix/hardware/graphcore/onnx_import.py to_native: an invalid UTF-8 node name (the "
         "checker lets it through) comes back from protobuf as bytes and goes to _native.Model.from_parts "
         "(rust/neurenix-py/src/model.rs) which expects str")
def invalid_utf8_node_name():
    return corrupt(_mlp(), "relu_node"), [zeros(2, 8)]


@finding("bug:pyo3_runtime.PanicException", "index out of bounds: the len is N but the index is N",
         "rust/neurenix-core/src/lower.rs:205 LowerCx::node (&self.graph.nodes[self.current_node]), via "
         "LowerCx::map_now -> name(): with precision 'mixed' the output is cast back to float32, but the only "
         "node was removed as dead (the graph output is the graph input), so there is no current node to name "
         "the cast after", precision="mixed")
def graph_output_is_graph_input():
    w = numpy_helper.from_array(np.ones((8,), np.float32), "w")
    nodes = [helper.make_node("Add", ["x", "w"], ["unused"])]
    return model(nodes, [vi("x", F, [8])], [vi("x", F, [8])], [w]), [zeros(8)]


# ---------------------------------------------------------------------------------------------
# running them


def to_case(f: Finding):
    """The finding as a fuzz Case (model bytes, options, example spec), so the
    harness's worker can run it with crash, hang and memory detection."""
    import fuzz_models as fm

    m, example = f.build()
    blob = m if isinstance(m, (bytes, bytearray)) else m.SerializeToString()
    if example is None:
        spec = None
    else:
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(bytes(blob))
            names = [i.name for i in proto.graph.input]
        except Exception:
            names = [f"input{i}" for i in range(len(example))]
        spec = [(n, a.dtype.name, list(a.shape)) for n, a in zip(names, example)]
    o = f.options
    options = {"system_ipus": o["system_ipus"], "tiles_per_ipu": o["tiles_per_ipu"], "num_ipus": o["num_ipus"],
               "precision": o["precision"], "memory_proportion": 0.6, "enable_half_partials": True,
               "simulator_threads": 1}
    return fm.Case(f.name, "finding", [f.name], bytes(blob), options, "bytes", spec, False, "exact", 0, 1)


def run_here(f: Finding) -> None:
    """Runs a finding in this process, the way a user would (this may abort or hang it)."""
    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel

    m, example = f.build()
    o = f.options
    with GraphCoreManager(num_ipus=o["num_ipus"], precision=o["precision"],
                          ipu_model=IPUModel(num_ipus=o["system_ipus"], tiles_per_ipu=o["tiles_per_ipu"])) as ipu:
        compiled = ipu.compile_model(m, example)
        print(compiled)
        inputs = [np.zeros(s.shape, s.dtype) for s in compiled.inputs]
        print(ipu.execute_model(compiled, inputs))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="findings to run (default: all)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--here", action="store_true", help="run in this process (a crash ends it)")
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--memory-limit-gib", type=float, default=8.0)
    args = ap.parse_args(argv)
    chosen = [f for f in FINDINGS if not args.names or f.name in args.names]
    if args.list:
        for f in chosen:
            print(f"{f.name:32} {f.observed:36} {f.location}")
        return 0
    if args.here:
        for f in chosen:
            print(f"== {f.name} (today: {f.observed}: {f.message})")
            run_here(f)
        return 0
    import warnings

    import fuzz_models as fm

    warnings.simplefilter("ignore")
    failing = 0
    with fm.Runner(timeout=args.timeout, memory_limit=int(args.memory_limit_gib * (1 << 30))) as runner:
        for f in chosen:
            r = runner.run(to_case(f))
            got = r.klass().replace("bug:fuzz_models.", "bug:")
            bad = r.is_failure or got == "ipu:IPUInternalError"
            failing += bad
            same = "as catalogued" if got in f.observed.split("|") else f"catalogued: {f.observed}"
            print(f"{f.name:32} {got:40} {'FAIL' if bad else 'ok  '} ({same}) {r.where()}")
    print(f"{failing} of {len(chosen)} findings still fail")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
