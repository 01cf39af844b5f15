"""The compile report names the element type of every tensor on the device
and where conversions were inserted, as docs/precision.md's policy says."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel
from onnx_models import make_model, mlp


def report_of(model, x, precision):
    with GraphCoreManager(num_ipus=1, compile_only=True, precision=precision,
                          ipu_model=IPUModel(num_ipus=1, tiles_per_ipu=4)) as ipu:
        return ipu.compile_model(model, {"x": x}).report


MLP, _ = mlp([8, 16, 4], np.random.default_rng(0))  # Gemm, Relu, Gemm, Softmax
X = np.zeros((2, 8), np.float32)


@pytest.mark.parametrize("precision,expected", [("float32", {"float32"}), ("float16", {"float16"})])
def test_one_float_type_everywhere(precision, expected):
    r = report_of(MLP, X, precision)
    assert {v.device_type for v in r.variables if v.kind != "temporary"} == expected
    # Reductions (here softmax's) accumulate their partial sums in float32.
    assert all(v.device_type in expected or v.name.endswith(("/partials", "/partials_in", "/group_partials",
                                                              "/group_partials_in"))
               for v in r.variables if v.kind == "temporary")
    assert r.casts() == []
    weights = {v.name: v for v in r.variables if v.kind == "constant"}
    assert {"W0", "b0", "W1", "b1"} <= set(weights) and weights["W0"].node == "dense0"
    assert [v.shape for v in r.variables if v.name == "W0"] == [[8, 16]]


def test_mixed_computes_softmax_in_float32_and_says_where_it_converts():
    r = report_of(MLP, X, "mixed")
    by_node = {}
    for v in r.variables:
        if v.node:
            by_node.setdefault(v.node, set()).add(v.device_type)
    assert by_node["dense0"] == {"float16"} and by_node["act0"] == {"float16"}
    assert by_node["softmax"] == {"float32"}
    assert [v.device_type for v in r.variables if v.kind == "input"] == ["float16"]
    assert [c["node"] for c in r.casts()] == ["softmax"] and "float32" in r.casts()[0]["casts"]
    d = r.to_dict()
    assert d["casts"] == r.casts()
    assert sum(e["variables"] for e in d["element_types"].values()) == len(r.variables)
    assert "Casts inserted: softmax" in str(r)


def test_a_models_own_cast_is_listed():
    model = make_model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Cast", ["r"], ["h"], to=TensorProto.FLOAT16, name="to_half"),
         helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT, name="back")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
    )
    r = report_of(model, X, "float32")
    assert any("float16" in c["casts"] for c in r.casts()), r.casts()


def test_casts_are_listed_alone_when_the_plan_says_more():
    # x * scale with scale [3, 1, 1] over [2, 3, 4, 10]: the scale is a
    # repeated operand, which the map's plan names after its casts.
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [3, 1, 1], [0.5, 2.0, -1.0])
    model = make_model(
        [helper.make_node("Mul", ["x", "scale"], ["m"], name="scale_it"),
         helper.make_node("Cast", ["m"], ["y"], to=TensorProto.FLOAT16, name="to_half")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 3, 4, 10])],
        [scale],
    )
    r = report_of(model, np.zeros((2, 3, 4, 10), np.float32), "float32")
    maps = [o.plan for o in r.plans if o.kind == "map"]
    assert any("repeated over stretches of 40" in p and "; casts to float16 x1" in p for p in maps), maps
    assert [c["node"] for c in r.casts()] == ["to_half"], r.casts()
    casts = r.casts()[0]["casts"]
    assert casts.startswith("float16 x1") and ";" not in casts and "repeated" not in casts, casts
