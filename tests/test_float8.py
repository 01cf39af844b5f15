"""precision="float8" (the ipu21's float8 matrix unit): matmul and convolution
operands as float8 with power-of-two scales, half partials, against a numpy
emulation that uses ml_dtypes for the float8 conversions (docs/precision.md)."""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel
from neurenix.hardware.graphcore.errors import InvalidOptionError

F8 = {"e4m3": (ml_dtypes.float8_e4m3fnuz, 240.0), "e5m2": (ml_dtypes.float8_e5m2fnuz, 57344.0)}
TINY_IPU21 = IPUModel(version="ipu21", num_ipus=1, tiles_per_ipu=4)


def scale_for(amax: float, fmax: float) -> float:
    """The documented scale: the smallest power of two s with amax / s <= fmax,
    within 2^-32..2^31; 1 for zero or non-finite amax."""
    if not (amax > 0) or math.isinf(amax):
        return 1.0
    k = -40
    while amax / 2.0**k > fmax:
        k += 1
    return 2.0 ** min(max(k, -32), 31)


def to_f8(x: np.ndarray, fmt: str):
    """(values of the codes, scale): x / s rounded to the format by ml_dtypes."""
    dt, fmax = F8[fmt]
    x = np.asarray(x, np.float32)
    s = scale_for(float(np.max(np.abs(x))) if x.size else 0.0, fmax)
    codes = (x / np.float32(s)).astype(dt).astype(np.float32)
    return codes, s


def amp_f8(a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    """[M, K] x [K, N] of decoded codes on the float8 AMP: chunks of 32 along
    K summed in float (float64 here, then float32), times the scale, rounded
    to half and accumulated in half."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float16)
    for k0 in range(0, a.shape[1], 32):
        chunk = (a[:, k0:k0 + 32].astype(np.float64) @ b[k0:k0 + 32].astype(np.float64)).astype(np.float32)
        chunk = (chunk * np.float32(scale)).astype(np.float16)
        acc = (acc.astype(np.float32) + chunk.astype(np.float32)).astype(np.float16)
    return acc.astype(np.float32)


def close_to_emulation(got: np.ndarray, want: np.ndarray) -> None:
    """Within one half ulp of the emulation (the order of float32 additions
    inside a chunk is the kernel's), and exact for nearly every element."""
    ulp = np.spacing(np.abs(want).astype(np.float16)).astype(np.float32)
    assert np.all(np.abs(got - want) <= ulp + 1e-30), np.max(np.abs(got - want) / ulp)
    assert np.mean(got == want) >= 0.95


def matmul_model(m: int, k: int, n: int, w: np.ndarray):
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def run(model, inputs, fmt="e4m3", precision="float8", ipu_model=TINY_IPU21):
    with GraphCoreManager(precision=precision, fp8_format=fmt, ipu_model=ipu_model) as ipu:
        compiled = ipu.compile_model(model, inputs)
        return ipu.execute_model(compiled, inputs), compiled.report


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 12), k=st.integers(1, 80), n=st.integers(1, 24),
       fmt=st.sampled_from(["e4m3", "e5m2"]), magnitude=st.sampled_from([1e-3, 1.0, 50.0, 3e3]),
       seed=st.integers(0, 2**16))
def test_matmul_matches_an_emulation_of_the_float8_amp(m, k, n, fmt, magnitude, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, k)) * magnitude).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    (y,), _ = run(matmul_model(m, k, n, w), {"x": x}, fmt)
    xh = x.astype(np.float16).astype(np.float32)  # inputs stream in as half
    a, sa = to_f8(xh, fmt)
    b, sb = to_f8(w, fmt)  # weights: from float32, on the host
    close_to_emulation(y, amp_f8(a, b, sa * sb))


def conv_model(w: np.ndarray, x_shape, pads, strides):
    co = w.shape[0]
    n, _, hh, ww = x_shape
    ho = (hh + pads[0] + pads[2] - w.shape[2]) // strides[0] + 1
    wo = (ww + pads[1] + pads[3] - w.shape[3]) // strides[1] + 1
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["y"], name="conv", pads=list(pads), strides=list(strides))], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, co, ho, wo])],
        [numpy_helper.from_array(w, "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), (ho, wo)


@settings(max_examples=15, deadline=None)
@given(c=st.integers(1, 6), co=st.integers(1, 8), hw=st.integers(3, 9), kk=st.sampled_from([1, 3]),
       pad=st.integers(0, 1), stride=st.integers(1, 2), fmt=st.sampled_from(["e4m3", "e5m2"]),
       seed=st.integers(0, 2**16))
def test_conv_matches_an_emulation_of_the_float8_amp(c, co, hw, kk, pad, stride, fmt, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    w = rng.standard_normal((co, c, kk, kk)).astype(np.float32)
    model, (ho, wo) = conv_model(w, x.shape, (pad, pad, pad, pad), (stride, stride))
    (y,), _ = run(model, {"x": x}, fmt)
    a, sa = to_f8(x.astype(np.float16).astype(np.float32), fmt)
    b, sb = to_f8(w, fmt)
    # im2col: rows (ci, ky, kx) in the weights' order, columns (oy, ox).
    xp = np.pad(a[0], ((0, 0), (pad, pad), (pad, pad)))
    cols = np.stack([xp[:, oy * stride:oy * stride + kk, ox * stride:ox * stride + kk].reshape(-1)
                     for oy in range(ho) for ox in range(wo)], axis=1)
    want = amp_f8(b.reshape(co, -1), cols, sa * sb).reshape(1, co, ho, wo)
    close_to_emulation(y, want)


def test_scaling_keeps_tiny_and_huge_activations_accurate():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((64, 16)).astype(np.float32)
    for magnitude in (1e-4, 1.0, 500.0):  # outputs stay within half
        x = (rng.standard_normal((8, 64)) * magnitude).astype(np.float32)
        (y,), _ = run(matmul_model(8, 64, 16, w), {"x": x})
        ref = x.astype(np.float64) @ w
        rel = np.max(np.abs(y - ref)) / np.max(np.abs(ref))
        # e4m3 keeps 4 significant bits per operand: a few percent, at every magnitude.
        assert rel < 0.08, (magnitude, rel)


def test_the_formats_really_differ_and_float8_is_coarser_than_float16():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 128)).astype(np.float32)
    w = rng.standard_normal((128, 32)).astype(np.float32)
    model = matmul_model(16, 128, 32, w)
    ref = x.astype(np.float64) @ w
    err = {}
    for name, kw in (("float16", dict(precision="float16")), ("e4m3", dict(fmt="e4m3")), ("e5m2", dict(fmt="e5m2"))):
        (y,), _ = run(model, {"x": x}, **kw)
        err[name] = float(np.max(np.abs(y - ref)) / np.max(np.abs(ref)))
    # One mantissa bit fewer: e5m2's error is about twice e4m3's.
    assert err["float16"] * 10 < err["e4m3"] < err["e5m2"], err


def test_weights_and_operands_take_one_byte_and_the_report_says_so():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((256, 128)).astype(np.float32)
    x = rng.standard_normal((4, 256)).astype(np.float32)
    reports = {}
    for precision in ("float16", "float8"):
        _, reports[precision] = run(matmul_model(4, 256, 128, w), {"x": x}, precision=precision)
    f8 = reports["float8"]
    (wv,) = [v for v in f8.variables if v.name == "W"]
    assert wv.device_type == "float8_e4m3fnuz"
    assert "float8_e4m3fnuz" in f8.element_types()
    (w16,) = [v for v in reports["float16"].variables if v.name == "W"]
    assert w16.device_type == "float16"
    # The weights dominate: half the bytes.
    assert f8.total_memory < 0.75 * reports["float16"].total_memory
    assert "float8 (e4m3 operands" in f8.summary()
    # The activation's conversion is listed where it happens.
    assert any(c["node"].startswith("mm/to_float8") and "float8_e4m3fnuz" in c["casts"] for c in f8.casts()), f8.casts()


def test_the_amp_runs_float8_at_twice_the_half_rate():
    m, k, n = 64, 512, 128
    rng = np.random.default_rng(2)
    model = matmul_model(m, k, n, rng.standard_normal((k, n)).astype(np.float32))
    cycles = {}
    for precision in ("float16", "float8"):
        with GraphCoreManager(precision=precision, compile_only=True,
                              ipu_model=IPUModel(version="ipu21", num_ipus=1, tiles_per_ipu=1)) as ipu:
            r = ipu.compile_model(model, {"x": np.zeros((m, k), np.float32)}).report
        cycles[precision] = sum(t.cycles for s in r.steps if s.kind == "compute" for t in s.terms
                                if "MatMul" in t.name)
        rate = r.system.fp8_flops_per_cycle / r.system.fp16_flops_per_cycle
    assert rate == 2
    measured = cycles["float16"] / cycles["float8"]
    assert 1.9 <= measured <= 2.0, cycles


def test_float8_is_refused_where_there_is_no_float8_unit():
    for version in ("ipu1", "ipu2", "bow"):
        with pytest.raises(InvalidOptionError, match="only the ipu21"):
            GraphCoreManager(precision="float8", ipu_model=IPUModel(version=version, num_ipus=1, tiles_per_ipu=4))
    with pytest.raises(InvalidOptionError, match="fp8_format"):
        GraphCoreManager(precision="float8", fp8_format="e3m4", ipu_model=TINY_IPU21)
