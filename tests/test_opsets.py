"""Operator-set versions: every supported operator at the newest operator set
the installed onnx defines (and at every version of it past 21), compiled for
a tiny simulated IPU and compared with onnx's reference evaluator; the
versions whose semantics changed (Mod 28, Range 27, the Reduce*Log* types at
28, Cast's new element types); and the boundary of the accepted range."""

from typing import Callable, Dict, List, NamedTuple, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, defs, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import neurenix
from neurenix.hardware.graphcore import GraphCoreManager, IPUModel, UnsupportedOperatorError, ModelFormatError

FIRST, LAST = neurenix._native.supported_opsets()
#: The newest operator set both the installed onnx and neurenix know.
NEWEST = min(defs.onnx_opset_version(), LAST)
F = TensorProto.FLOAT


def versions(op: str) -> List[int]:
    """The versions at which the installed onnx (re)defines ``op``."""
    return sorted({s.since_version for s in defs.get_all_schemas_with_history() if s.name == op and s.domain == ""})


class Case(NamedTuple):
    """A one-node model (or a few nodes around one operator): its nodes,
    graph inputs with example values, and initializers."""

    nodes: List[onnx.NodeProto]
    inputs: Dict[str, np.ndarray]
    inits: Dict[str, np.ndarray] = {}
    outputs: Tuple[str, ...] = ("y",)


rng = np.random.default_rng(7)


def x(*shape, lo=-2.0, hi=2.0) -> np.ndarray:
    return rng.uniform(lo, hi, shape).astype(np.float32)


def i64(*v) -> np.ndarray:
    return np.array(v, dtype=np.int64)


def n(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), name=op.lower(), **attrs)


def unary(op, lo=-2.0, hi=2.0, **attrs) -> Callable[[], Case]:
    return lambda: Case([n(op, ["a"], **attrs)], {"a": x(2, 3, lo=lo, hi=hi)})


def binary(op, lo=-2.0, hi=2.0, **attrs) -> Callable[[], Case]:
    return lambda: Case([n(op, ["a", "b"], **attrs)], {"a": x(2, 3, lo=lo, hi=hi), "b": x(3, lo=lo, hi=hi)})


def compare(op) -> Callable[[], Case]:
    return lambda: Case([n(op, ["a", "b"])], {"a": np.array([[1, 2, 3], [3, 2, 1]], np.float32),
                                              "b": np.array([2, 2, 2], np.float32)})


def logic(op) -> Callable[[], Case]:
    return lambda: Case([n(op, ["a", "b"])], {"a": np.array([[True, False, True], [False, False, True]]),
                                              "b": np.array([True, False, False])})


def reduce(op, lo=-2.0, hi=2.0) -> Callable[[], Case]:
    return lambda: Case([n(op, ["a", "axes"], keepdims=0)], {"a": x(2, 3, 4, lo=lo, hi=hi)}, {"axes": i64(1)})


def pool(op, **attrs) -> Callable[[], Case]:
    return lambda: Case([n(op, ["a"], **attrs)], {"a": x(1, 2, 5, 5)})


CASES: Dict[str, Callable[[], Case]] = {
    # element-wise
    "Abs": unary("Abs"), "Ceil": unary("Ceil"), "Cos": unary("Cos"), "Elu": unary("Elu", alpha=0.7),
    "Erf": unary("Erf"), "Exp": unary("Exp"), "Floor": unary("Floor"), "Gelu": unary("Gelu"),
    "HardSigmoid": unary("HardSigmoid"), "HardSwish": unary("HardSwish"), "Identity": unary("Identity"),
    "LeakyRelu": unary("LeakyRelu", alpha=0.2), "Log": unary("Log", lo=0.1), "Neg": unary("Neg"),
    "Reciprocal": unary("Reciprocal", lo=0.5), "Relu": unary("Relu"), "Round": unary("Round"),
    "Selu": unary("Selu"), "Sigmoid": unary("Sigmoid"), "Sign": unary("Sign"), "Sin": unary("Sin"),
    "Softplus": unary("Softplus"), "Softsign": unary("Softsign"), "Sqrt": unary("Sqrt", lo=0.0),
    "Tanh": unary("Tanh"), "ThresholdedRelu": unary("ThresholdedRelu", alpha=0.5), "Dropout": unary("Dropout"),
    "IsInf": lambda: Case([n("IsInf", ["a"])], {"a": np.array([1.0, np.inf, -np.inf, np.nan], np.float32)}),
    "IsNaN": lambda: Case([n("IsNaN", ["a"])], {"a": np.array([1.0, np.inf, np.nan], np.float32)}),
    "Not": lambda: Case([n("Not", ["a"])], {"a": np.array([True, False])}),
    "Add": binary("Add"), "Sub": binary("Sub"), "Mul": binary("Mul"), "Div": binary("Div", lo=0.5),
    "Pow": binary("Pow", lo=0.5), "Max": binary("Max"), "Min": binary("Min"), "Mean": binary("Mean"),
    "Sum": binary("Sum"), "Mod": binary("Mod", fmod=1), "PRelu": binary("PRelu"),
    "And": logic("And"), "Or": logic("Or"), "Xor": logic("Xor"),
    "Equal": compare("Equal"), "Greater": compare("Greater"), "GreaterOrEqual": compare("GreaterOrEqual"),
    "Less": compare("Less"), "LessOrEqual": compare("LessOrEqual"),
    "Where": lambda: Case([n("Where", ["c", "a", "b"])], {"c": np.array([True, False, True]), "a": x(2, 3),
                                                          "b": x(3)}),
    "Clip": lambda: Case([n("Clip", ["a", "lo", "hi"])], {"a": x(2, 3)},
                         {"lo": np.float32(-0.5), "hi": np.float32(0.75)}),
    "Cast": lambda: Case([n("Cast", ["a"], to=TensorProto.INT32)], {"a": x(2, 3, lo=-9, hi=9)}),
    "CastLike": lambda: Case([n("CastLike", ["a", "like"])], {"a": x(2, 3)},
                             {"like": np.zeros(1, np.float16)}),
    # generators and shapes
    "Constant": lambda: Case([n("Constant", [], ["k"], value=numpy_helper.from_array(x(3), "k")),
                              n("Add", ["a", "k"])], {"a": x(2, 3)}),
    "ConstantOfShape": lambda: Case([n("ConstantOfShape", ["s"], ["k"],
                                       value=numpy_helper.from_array(np.array([1.5], np.float32))),
                                     n("Add", ["a", "k"])], {"a": x(2, 3)}, {"s": i64(2, 3)}),
    "Range": lambda: Case([n("Range", ["s", "l", "d"], ["r"]), n("Add", ["a", "r"])], {"a": x(2, 4)},
                          {"s": np.float32(0.5), "l": np.float32(4.0), "d": np.float32(1.0)}),
    "Shape": lambda: Case([n("Shape", ["a"])], {"a": x(2, 3)}),
    # An empty range is deterministic: its low end (random draws: tests/test_training.py).
    "RandomUniformLike": lambda: Case([n("RandomUniformLike", ["a"], ["r"], low=2.0, high=2.0), n("Add", ["a", "r"])],
                                      {"a": x(2, 3)}),
    "Size": lambda: Case([n("Size", ["a"])], {"a": x(2, 3)}),
    "Concat": lambda: Case([n("Concat", ["a", "b"], axis=1)], {"a": x(2, 3), "b": x(2, 2)}),
    "Expand": lambda: Case([n("Expand", ["a", "s"])], {"a": x(3, 1)}, {"s": i64(2, 3, 4)}),
    "Flatten": lambda: Case([n("Flatten", ["a"], axis=2)], {"a": x(2, 3, 4)}),
    "Gather": lambda: Case([n("Gather", ["a", "i"], axis=0)], {"a": x(5, 3)}, {"i": i64(4, 0, 2, 2)}),
    "Pad": lambda: Case([n("Pad", ["a", "p", "v"], mode="constant")], {"a": x(2, 3)},
                        {"p": i64(1, 0, 0, 2), "v": np.float32(0.5)}),
    "Reshape": lambda: Case([n("Reshape", ["a", "s"])], {"a": x(2, 3, 4)}, {"s": i64(4, -1)}),
    "Slice": lambda: Case([n("Slice", ["a", "st", "en", "ax", "sp"])], {"a": x(4, 6)},
                          {"st": i64(1, 5), "en": i64(4, 0), "ax": i64(0, 1), "sp": i64(1, -2)}),
    "Split": lambda: Case([n("Split", ["a", "s"], ["y", "z"], axis=1)], {"a": x(2, 5)}, {"s": i64(2, 3)},
                          outputs=("y", "z")),
    "Squeeze": lambda: Case([n("Squeeze", ["a", "ax"])], {"a": x(2, 1, 3)}, {"ax": i64(1)}),
    "Unsqueeze": lambda: Case([n("Unsqueeze", ["a", "ax"])], {"a": x(2, 3)}, {"ax": i64(0, -1)}),
    "Tile": lambda: Case([n("Tile", ["a", "r"])], {"a": x(2, 3)}, {"r": i64(2, 1)}),
    "Transpose": lambda: Case([n("Transpose", ["a"], perm=[2, 0, 1])], {"a": x(2, 3, 4)}),
    # reductions, normalisations, softmax
    "ArgMax": lambda: Case([n("ArgMax", ["a"], axis=1)], {"a": x(3, 4)}),
    "ArgMin": lambda: Case([n("ArgMin", ["a"], axis=0, keepdims=0)], {"a": x(3, 4)}),
    "ReduceL1": reduce("ReduceL1"), "ReduceL2": reduce("ReduceL2"), "ReduceLogSum": reduce("ReduceLogSum", lo=0.1),
    "ReduceLogSumExp": reduce("ReduceLogSumExp"), "ReduceMax": reduce("ReduceMax"),
    "ReduceMean": reduce("ReduceMean"), "ReduceMin": reduce("ReduceMin"), "ReduceProd": reduce("ReduceProd"),
    "ReduceSum": reduce("ReduceSum"), "ReduceSumSquare": reduce("ReduceSumSquare"),
    "Softmax": unary("Softmax"), "LogSoftmax": unary("LogSoftmax", axis=0),
    "BatchNormalization": lambda: Case([n("BatchNormalization", ["a", "s", "b", "m", "v"])], {"a": x(2, 3, 2, 2)},
                                       {"s": x(3), "b": x(3), "m": x(3), "v": x(3, lo=0.5)}),
    "InstanceNormalization": lambda: Case([n("InstanceNormalization", ["a", "s", "b"])], {"a": x(2, 3, 2, 2)},
                                          {"s": x(3), "b": x(3)}),
    "LayerNormalization": lambda: Case([n("LayerNormalization", ["a", "s", "b"])], {"a": x(2, 3, 4)},
                                       {"s": x(4), "b": x(4)}),
    "LRN": lambda: Case([n("LRN", ["a"], size=3)], {"a": x(1, 4, 2, 2)}),
    # matmul, convolution, pooling
    "MatMul": lambda: Case([n("MatMul", ["a", "w"])], {"a": x(2, 3, 4)}, {"w": x(4, 5)}),
    "Gemm": lambda: Case([n("Gemm", ["a", "w", "c"], transB=1, alpha=0.5)], {"a": x(2, 4)},
                         {"w": x(3, 4), "c": x(3)}),
    "Conv": lambda: Case([n("Conv", ["a", "w", "b"], pads=[1, 1, 1, 1], strides=[2, 2])], {"a": x(1, 2, 5, 5)},
                         {"w": x(3, 2, 3, 3), "b": x(3)}),
    "AveragePool": pool("AveragePool", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1, pads=[0, 0, 1, 1]),
    "MaxPool": pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, pads=[1, 1, 1, 1]),
    "GlobalAveragePool": pool("GlobalAveragePool"), "GlobalMaxPool": pool("GlobalMaxPool"),
}


def lrn(a: np.ndarray, size: int, alpha=1e-4, beta=0.75, bias=1.0) -> np.ndarray:
    """LRN as ONNX defines it. (onnx's reference evaluator sums over the
    window of the batch index instead of the channel's.)"""
    sq = np.zeros_like(a, dtype=np.float64)
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    for c in range(a.shape[1]):
        sq[:, c] = (a[:, max(0, c - lo):c + hi + 1].astype(np.float64) ** 2).sum(axis=1)
    return (a / (bias + alpha / size * sq) ** beta).astype(a.dtype)


#: Operators whose reference result is computed here instead.
OWN_REFERENCE = {"LRN": lambda case: [lrn(case.inputs["a"], size=3)]}


def build(case: Case, opset: int) -> Tuple[onnx.ModelProto, List[np.ndarray]]:
    """The model at ``opset``, its outputs declared as the reference
    evaluator computes them, and those outputs."""
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in case.inputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in case.inits.items()]

    def model(outs):
        g = helper.make_graph(case.nodes, "op", inputs, outs, inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])

    untyped = model([helper.make_value_info(o, onnx.TypeProto()) for o in case.outputs])
    ref = ReferenceEvaluator(untyped).run(None, case.inputs)
    outs = [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(r.dtype), r.shape)
            for o, r in zip(case.outputs, ref)]
    return model(outs), ref


@pytest.fixture(scope="module")
def ipu():
    with GraphCoreManager(ipu_model=IPUModel(num_ipus=1, tiles_per_ipu=4), precision="float32") as m:
        yield m


def check(ipu, op: str, case: Case, opset: int) -> None:
    model, ref = build(case, opset)
    if op in OWN_REFERENCE:
        ref = OWN_REFERENCE[op](case)
    compiled = ipu.compile_model(model, case.inputs)
    got = ipu.execute_model(compiled, case.inputs)
    compiled.unload()
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape
        if r.dtype.kind == "f":
            np.testing.assert_allclose(g, r, rtol=2e-6, atol=2e-6)
        else:
            np.testing.assert_array_equal(g, r)


def test_the_table_covers_every_supported_operator():
    assert sorted(CASES) == sorted(neurenix._native.supported_ops())


def test_the_accepted_range_reaches_the_newest_operator_set_onnx_defines():
    assert (FIRST, LAST) == (1, 28)
    if defs.onnx_opset_version() > LAST:
        pytest.skip(f"onnx {onnx.__version__} defines operator sets up to {defs.onnx_opset_version()}; "
                    f"neurenix has been checked up to {LAST}")
    for op in CASES:
        assert versions(op)[-1] <= LAST, op


@pytest.mark.parametrize("op", sorted(CASES))
def test_every_operator_at_the_newest_operator_set_matches_the_reference(ipu, op):
    check(ipu, op, CASES[op](), NEWEST)


# Each version past 21 at which an operator changed, at that operator set.
CHANGES = [(op, v) for op in sorted(CASES) for v in versions(op) if 21 < v < NEWEST]


@pytest.mark.parametrize("op,version", CHANGES)
def test_every_version_past_21_of_every_operator_matches_the_reference(ipu, op, version):
    check(ipu, op, CASES[op](), version)


def test_mod_defines_fmod_0_for_floats_from_opset_28(ipu):
    a = np.array([5.5, -5.5, 5.5, -5.5, 0.0, -0.0, 3.0, -7.0, 2.0, -2.0], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, -1.5, np.inf, -np.inf, np.inf], np.float32)
    case = Case([n("Mod", ["a", "b"])], {"a": a, "b": b})
    if NEWEST >= 28:
        model, ref = build(case, 28)
        got = ipu.execute_model(ipu.compile_model(model, case.inputs), case.inputs)[0]
        np.testing.assert_array_equal(got, ref[0])
        # Zeros take the divisor's sign, as numpy's (and Python's) % does.
        assert list(np.signbit(got)) == list(np.signbit(ref[0]))
    earlier = helper.make_model(
        helper.make_graph(case.nodes, "m", [helper.make_tensor_value_info("a", F, [10]),
                                            helper.make_tensor_value_info("b", F, [10])],
                          [helper.make_tensor_value_info("y", F, [10])]),
        opset_imports=[helper.make_opsetid("", 27)])
    with pytest.raises(ModelFormatError, match="fmod=1 at opset 27"):
        ipu.compile_model(earlier, case.inputs)


@pytest.mark.skipif(NEWEST < 27, reason="Range takes float16 from opset 27")
@pytest.mark.parametrize("stash_type", [None, 1])
def test_range_counts_float16_in_float32_from_opset_27(ipu, stash_type):
    """Counting from 2048 by 1 in float16 would stick at 2048 (2049 is not
    a half): stash_type 1 (the default) counts in float32 and rounds."""
    attrs = {} if stash_type is None else {"stash_type": stash_type}
    inits = {"s": np.float16(2040), "l": np.float16(2060), "d": np.float16(1)}
    case = Case([n("Range", ["s", "l", "d"], ["r"], **attrs), n("Add", ["a", "r"])],
                {"a": np.zeros(20, np.float16)}, inits)
    model, ref = build(case, 27)
    got = ipu.execute_model(ipu.compile_model(model, case.inputs), case.inputs)[0]
    np.testing.assert_array_equal(got, ref[0])
    assert len(set(got.tolist())) > 10


@pytest.mark.skipif(NEWEST < 28, reason="opset 28 drops integers from ReduceLogSum")
def test_reduce_log_sum_refuses_integers_from_opset_28(ipu):
    case = Case([n("ReduceLogSum", ["a"])], {"a": np.ones((2, 3), np.int32)})
    g = helper.make_graph(case.nodes, "m", [helper.make_tensor_value_info("a", TensorProto.INT32, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 28)])
    with pytest.raises(ModelFormatError, match="from opset 28"):
        ipu.compile_model(model, case.inputs)


# Element types the newer Cast versions add, which the IPU does not hold.
NEW_CAST_TYPES = [(23, "FLOAT4E2M1"), (24, "FLOAT8E8M0"), (25, "INT2"), (25, "UINT2"), (28, "FLOAT6E2M3")]


@pytest.mark.parametrize("version,type_name", [c for c in NEW_CAST_TYPES if c[0] <= NEWEST])
def test_casts_to_the_new_small_types_are_unsupported_naming_type_and_node(ipu, version, type_name):
    to = getattr(TensorProto, type_name)
    g = helper.make_graph([helper.make_node("Cast", ["a"], ["c"], to=to, name="narrow"),
                           helper.make_node("Cast", ["c"], ["y"], to=F, name="back")], "m",
                          [helper.make_tensor_value_info("a", F, [3])], [helper.make_tensor_value_info("y", F, [3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", version)])
    with pytest.raises(UnsupportedOperatorError) as e:
        ipu.compile_model(model, np.ones(3, np.float32))
    assert e.value.op_type == "Cast" and e.value.node == "narrow" and e.value.opset == version
    assert type_name in str(e.value) and "'narrow'" in str(e.value)


@pytest.mark.parametrize("mask_is_output", [True, False])
def test_dropouts_mask_is_made_only_when_something_reads_it(ipu, mask_is_output):
    """In inference Dropout keeps every element; its mask is all true when
    the model reads it, and no step makes it when nothing does."""
    outs = ["y", "mask"] if mask_is_output else ["y"]
    case = Case([n("Dropout", ["a"], ["d", "mask"]), n("Relu", ["d"])],
                {"a": x(3, 5)}, outputs=outs)
    model, ref = build(case, NEWEST)
    compiled = ipu.compile_model(model, case.inputs)
    got = ipu.execute_model(compiled, case.inputs)
    np.testing.assert_array_equal(got[0], ref[0])
    fills = [s.name for s in compiled.report.steps if s.name.endswith("/fill")]
    if mask_is_output:
        assert got[1].dtype == np.bool_ and got[1].all() and got[1].shape == (3, 5)
        assert fills
    else:
        assert len(got) == 1 and fills == []
