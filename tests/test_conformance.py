"""A few cases of the ONNX conformance run (benchmarks/conformance.py, results
in docs/conformance.md), through the same code, so a regression in one of
them shows up in CI and not only when someone reruns the whole thing."""

import importlib.util
import os
import pathlib

import numpy as np
import pytest

_PATH = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "conformance.py"
_spec = importlib.util.spec_from_file_location("conformance", _PATH)
conformance = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conformance)

if not os.path.isdir(os.path.join(conformance.data_dir(), "pytorch-operator")):
    pytest.skip("this onnx install has no backend test data", allow_module_level=True)

PASSING = [
    ("simple", "test_single_relu_model"),
    ("simple", "test_sign_model"),
    ("pytorch-operator", "test_operator_addmm"),  # Gemm with legacy broadcast=1
    ("pytorch-operator", "test_operator_conv"),
    ("pytorch-operator", "test_operator_maxpool"),
    ("pytorch-operator", "test_operator_chunk"),  # Split, two outputs
    ("pytorch-operator", "test_operator_reduced_mean_keepdim"),
    ("pytorch-operator", "test_operator_non_float_params"),  # int64 end to end
    ("pytorch-operator", "test_operator_pow"),  # NaNs where the base is negative
    ("pytorch-operator", "test_operator_symbolic_override_nested"),  # three outputs
    ("pytorch-converted", "test_Conv2d_groups"),
    ("pytorch-converted", "test_BatchNorm2d_eval"),
    ("pytorch-converted", "test_Embedding"),
    ("pytorch-converted", "test_ReflectionPad2d"),
    ("pytorch-converted", "test_LogSoftmax"),
]


@pytest.mark.parametrize("suite,case", PASSING, ids=[c for _, c in PASSING])
def test_case_passes(suite, case):
    r = conformance.run_small_case(suite, case)
    assert r["status"] == "pass", r
    assert r["max_abs_err"] <= 1e-5


@pytest.mark.parametrize("suite,case,op", [
    ("simple", "test_shrink", "Shrink"),
    ("pytorch-operator", "test_operator_convtranspose", "ConvTranspose"),
    ("pytorch-converted", "test_Conv3d", "Conv"),  # a form (3-D windows), not the operator
])
def test_unsupported_is_reported_as_such(suite, case, op):
    r = conformance.run_small_case(suite, case)
    assert r["status"] == "unsupported" and r["op"] == op, r
    assert "bug" not in r


def test_a_wrong_result_fails(monkeypatch):
    """The harness can fail: shift one expected value past the tolerance."""
    load = conformance.load_case

    def shifted(suite, case):
        model, sets = load(suite, case)
        ins, outs = sets[0]
        outs = [o.copy() for o in outs]
        outs[0].flat[3] += 1e-3 + 2e-3 * abs(outs[0].flat[3])
        return model, [(ins, outs)] + sets[1:]

    monkeypatch.setattr(conformance, "load_case", shifted)
    r = conformance.run_small_case("pytorch-operator", "test_operator_conv")
    assert r["status"] == "fail" and "flat index 3" in r["detail"], r


def test_compare_rules():
    c = conformance.compare
    nan = np.array([1.0, np.nan, np.inf], np.float32)
    assert c(nan.copy(), nan, 1e-3, 1e-5).ok
    assert not c(np.array([1.0, 0.0, np.inf], np.float32), nan, 1e-3, 1e-5).ok
    assert not c(np.ones(3, np.float64), np.ones(3, np.float32), 1e-3, 1e-5).ok  # dtype
    assert not c(np.array([1, 2], np.int64), np.array([1, 3], np.int64), 1, 1).ok  # integers: exact
    assert c(np.array([1.04], np.float32), np.array([1.0], np.float32), 0, 0, half_tol=5e-2).ok
    assert not c(np.array([1.06], np.float32), np.array([1.0], np.float32), 0, 0, half_tol=5e-2).ok


def test_light_squeezenet_float32_float16_and_out_of_memory():
    r = conformance.run_light_case("light_squeezenet", with_float64=False)
    assert r["notes"]["replaced"] == 39 and r["notes"]["cut_at"]
    assert r["float32"]["status"] == "pass", r["float32"]
    assert r["float32"]["num_ipus"] == 1
    assert r["float16"]["status"] == "pass", r["float16"]
    assert r["float16"]["max_rel_err"] > 1e-5  # float16 really ran in half
    assert r["oom"]["status"] == "pass", r["oom"]
    assert r["status"] == "pass" and "bug" not in r
