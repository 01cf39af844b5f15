"""ONNX conformance: the model test data that ships inside the installed ``onnx``
package, run through GraphCoreManager on the simulated IPU.

    PYTHONPATH=python python benchmarks/conformance.py [--suites simple light ...]
        [--filter Conv] [--precision float32|float16|mixed] [--markdown] [--json out.json]

Suites (``<onnx>/backend/test/data/<suite>``):

- ``simple``, ``pytorch-operator``, ``pytorch-converted``: a directory per case
  with ``model.onnx`` and ``test_data_set_*/{input,output}_*.pb``. The model is
  compiled for the inputs of ``test_data_set_0`` on one ipu2 of 64 tiles (a
  full 1,472-tile ipu2 if that runs out of memory), every data set is run and
  each output is compared with the stored one.
- ``light``: nine CNNs whose weights are ``ConstantOfShape`` nodes (all 0.02,
  which makes every output equal). They get seeded random weights (see
  :func:`prepare_light_model`), are cut before the final Softmax and compared
  on the logits with onnxruntime (CPU) in float32 on one full ipu2 (more
  IPUs when one runs out of memory), then run in float16, and must fail with
  ``IPUOutOfMemoryError`` on a 16-tile IPU.

Verdicts, per case: ``pass``; ``unsupported (<op>)`` when neurenix raises
UnsupportedOperatorError; ``fail`` for anything else (a wrong result, or an
exception, shown with its class and first line). IPUInternalError, exceptions
that are not IPUError subclasses, crashes and timeouts are neurenix bugs by
its own contract and are listed separately.

Tolerances (``|got - expected| <= atol + rtol * |expected|`` element-wise):

- small suites, float32: rtol 1e-3, atol 1e-5. onnx's own backend runner uses
  rtol 1e-3, atol 1e-7; a pass that would miss that is flagged in the table.
- small suites, float16/mixed: ``max|err| <= 5e-2 * max(1, max|expected|)``.
- light models, float32: rtol 1e-4, atol 1e-5 against onnxruntime. The errors
  of neurenix and of onnxruntime against a float64 evaluation of the same
  model are reported as well, as the floor float32 arithmetic sets.
- light models, float16: ``max|err| / max|ref| <= 5e-2`` against the float32
  onnxruntime logits.
- integer and bool outputs: exact; NaN and infinities must match in place.

Every case runs in its own process (``--no-isolate`` to run in this one), so a
crash is reported against its case instead of ending the run. Each run uses a
fresh IPU lock directory (``NEURENIX_IPU_LOCK_DIR``).
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

SUITES = ("simple", "pytorch-operator", "pytorch-converted", "light")
SMALL_SUITES = SUITES[:3]

SMALL_RTOL, SMALL_ATOL = 1e-3, 1e-5
ONNX_RUNNER_ATOL = 1e-7  # what onnx's backend runner would use with rtol 1e-3
LIGHT_RTOL, LIGHT_ATOL = 1e-4, 1e-5
HALF_TOL = 5e-2

# Small cases: a 64-tile IPU compiles in milliseconds; a case that needs more
# memory than that gets a full chip before it is called out of memory.
SMALL_SYSTEMS = (dict(version="ipu2", num_ipus=1, tiles_per_ipu=64), dict(version="ipu2", num_ipus=1))
LIGHT_IPU_COUNTS = (1, 2, 4, 8)
# 16 x 624 KiB = 9.75 MiB: less than any light model needs (the smallest,
# SqueezeNet, has 4.7 MiB of weights and multi-MiB activations).
OOM_SYSTEM = dict(version="ipu2", num_ipus=1, tiles_per_ipu=16)
LIGHT_SEED = 0

SMALL_TIMEOUT_S = 600
LIGHT_TIMEOUT_S = 3600


# ---------------------------------------------------------------------------
# Test data
# ---------------------------------------------------------------------------


def data_dir() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def list_cases(suite: str) -> List[str]:
    root = os.path.join(data_dir(), suite)
    if suite == "light":
        return sorted(f[: -len(".onnx")] for f in os.listdir(root) if f.endswith(".onnx"))
    return sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "model.onnx")))


def read_pb(path: str, type_proto: Any = None) -> Any:
    """A stored value as numpy (tensors), a list (sequences), a dict (maps) or
    None/array (optionals), read as the model declares it, like onnx's runner."""
    import onnx
    from onnx import numpy_helper

    with open(path, "rb") as f:
        data = f.read()
    kind = type_proto.WhichOneof("value") if type_proto is not None else "tensor_type"
    if kind == "sequence_type":
        p = onnx.SequenceProto()
        p.ParseFromString(data)
        return numpy_helper.to_list(p)
    if kind == "optional_type":
        p = onnx.OptionalProto()
        p.ParseFromString(data)
        return numpy_helper.to_optional(p)
    if kind == "map_type":
        p = onnx.MapProto()
        p.ParseFromString(data)
        return numpy_helper.to_dict(p)
    p = onnx.TensorProto()
    p.ParseFromString(data)
    return numpy_helper.to_array(p)


def _numbered(directory: str, prefix: str) -> List[str]:
    files = glob.glob(os.path.join(directory, f"{prefix}_*.pb"))
    return sorted(files, key=lambda f: int(re.search(r"_(\d+)\.pb$", f).group(1)))


def load_case(suite: str, case: str) -> Tuple[Any, List[Tuple[Dict[str, Any], List[Any]]]]:
    """(model, [(inputs by name, expected outputs in graph order), ...])."""
    import onnx

    d = os.path.join(data_dir(), suite, case)
    model = onnx.load(os.path.join(d, "model.onnx"))
    g = model.graph
    sets = []
    for ds in sorted(glob.glob(os.path.join(d, "test_data_set_*")), key=lambda p: int(p.rsplit("_", 1)[1])):
        ins = {}
        for i, f in enumerate(_numbered(ds, "input")):
            ins[g.input[i].name] = read_pb(f, g.input[i].type)
        outs = [read_pb(f, g.output[i].type) for i, f in enumerate(_numbered(ds, "output"))]
        sets.append((ins, outs))
    return model, sets


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------


class Comparison:
    """Outcome of comparing one output array with its reference."""

    def __init__(self, ok: bool, max_abs: float = 0.0, max_rel: float = 0.0, reason: str = ""):
        self.ok, self.max_abs, self.max_rel, self.reason = ok, max_abs, max_rel, reason


def compare(got: Any, ref: Any, rtol: float, atol: float, half_tol: Optional[float] = None,
            floor_scale: bool = True) -> Comparison:
    """Element-wise ``|got - ref| <= atol + rtol * |ref|`` (or, with
    ``half_tol``, ``max|err| <= half_tol * max(1, max|ref|)``); exact for
    integers and bools; NaNs and infinities must sit in the same places.
    ``max_rel`` is ``max|err| / max|ref|``."""
    if not isinstance(ref, np.ndarray):
        return Comparison(False, reason=f"expected a {type(ref).__name__}; only tensors are compared")
    got = np.asarray(got)
    if got.shape != ref.shape:
        return Comparison(False, reason=f"shape {list(got.shape)} != expected {list(ref.shape)}")
    if got.dtype != ref.dtype:
        return Comparison(False, reason=f"dtype {got.dtype} != expected {ref.dtype}")
    if ref.size == 0:
        return Comparison(True)
    if ref.dtype.kind in "biuU" or ref.dtype == object:
        bad = int(np.count_nonzero(got != ref))
        if bad:
            i = int(np.flatnonzero(got != ref)[0])
            return Comparison(False, reason=f"{bad} of {ref.size} values differ (first at flat index {i}: "
                                            f"{ref.ravel()[i]!r} expected, {got.ravel()[i]!r} got)")
        return Comparison(True)
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    finite = np.isfinite(r) & np.isfinite(g)
    special = ~finite & ~((np.isnan(r) & np.isnan(g)) | (np.isinf(r) & (g == r)))
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: judged by `special` above
        err = np.abs(g - r)
    max_abs = float(err[finite].max()) if finite.any() else 0.0
    scale = float(np.abs(r[finite]).max()) if finite.any() else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    if special.any():
        i = int(np.flatnonzero(special)[0])
        return Comparison(False, math.inf, math.inf,
                          f"{int(special.sum())} of {ref.size} values differ in NaN/inf (first at flat index {i}: "
                          f"{r.ravel()[i]:.6g} expected, {g.ravel()[i]:.6g} got)")
    if half_tol is not None:
        bound = half_tol * (max(1.0, scale) if floor_scale else scale)
        if max_abs > bound:
            return Comparison(False, max_abs, max_rel, f"max abs err {max_abs:.3g} > {bound:.3g}")
        return Comparison(True, max_abs, max_rel)
    bad = finite & (err > atol + rtol * np.abs(r))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        return Comparison(False, max_abs, max_rel,
                          f"max abs err {max_abs:.3g} (max rel {max_rel:.2g}); {int(bad.sum())} of {ref.size} "
                          f"values outside rtol {rtol:g} / atol {atol:g} (first at flat index {i}: "
                          f"{r.ravel()[i]:.6g} expected, {g.ravel()[i]:.6g} got)")
    return Comparison(True, max_abs, max_rel)


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def unsupported_form(e: BaseException) -> str:
    """What neurenix says is missing beyond the operator itself (a form such as
    '3-D windows'), without the list of supported operators; '' if nothing."""
    msg = first_line(e).split(" Supported operators:")[0].strip()
    m = re.search(r"is not supported(.*)$", msg)
    why = m.group(1) if m else ""
    why = re.split(r";?\s*the model also uses", why)[0]
    return why.strip(" :;.")


def classify(e: BaseException) -> Dict[str, Any]:
    """A result fragment for an exception raised by neurenix."""
    from neurenix.hardware.graphcore import IPUError, IPUInternalError, UnsupportedOperatorError

    if isinstance(e, UnsupportedOperatorError):
        op = getattr(e, "op_type", "") or "?"
        # "...; the model also uses A, B." names the other missing operators:
        # the case is blocked by each of them.
        also = re.search(r"the model also uses ([A-Za-z0-9_, ]+)", first_line(e))
        ops = [op] + ([o.strip() for o in also.group(1).split(",") if o.strip()] if also else [])
        form = unsupported_form(e)
        detail = op + (f": {form}" if form else "") + (f" (also {', '.join(ops[1:])})" if ops[1:] else "")
        return {"status": "unsupported", "op": op, "ops": ops, "form": form, "detail": detail}
    r = {"status": "fail", "error": type(e).__name__, "detail": f"{type(e).__name__}: {first_line(e)}"}
    if isinstance(e, IPUInternalError):
        r["bug"] = "IPUInternalError"
    elif not isinstance(e, IPUError):
        # neurenix promises every failure is an IPUError subclass.
        r["bug"] = f"{type(e).__name__} is not an IPUError"
    return r


# ---------------------------------------------------------------------------
# Small suites
# ---------------------------------------------------------------------------


def _manager(system: Dict[str, Any], precision: str, num_ipus: int = 1):
    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel

    return GraphCoreManager(num_ipus=num_ipus, precision=precision, ipu_model=IPUModel(**system))


def _system_name(system: Dict[str, Any]) -> str:
    tiles = system.get("tiles_per_ipu")
    return f"{system['num_ipus']}x{system['version']}" + (f"/{tiles} tiles" if tiles else "")


def _out_of_range_float64(sets) -> bool:
    """Whether float64 test data holds values float32 cannot represent
    (neurenix computes float64 in float32, docs/precision.md)."""
    f32max = float(np.finfo(np.float32).max)
    for ins, outs in sets:
        for a in list(ins.values()) + list(outs):
            if isinstance(a, np.ndarray) and a.dtype == np.float64:
                fin = a[np.isfinite(a)]
                if fin.size and float(np.abs(fin).max()) > f32max:
                    return True
    return False


def run_small_case(suite: str, case: str, precision: str = "float32") -> Dict[str, Any]:
    """Compiles the case for test_data_set_0's inputs, runs every data set and
    compares; never raises for a neurenix error."""
    t0 = time.perf_counter()
    result: Dict[str, Any] = {"suite": suite, "case": case, "precision": precision}
    _run_small_case(result, precision)
    result["seconds"] = time.perf_counter() - t0
    return result


def _run_small_case(result: Dict[str, Any], precision: str) -> None:
    from neurenix.hardware.graphcore import IPUOutOfMemoryError

    model, sets = load_case(result["suite"], result["case"])
    if not sets:
        result.update(status="fail", detail="no test data sets")
        return
    result["datasets"] = len(sets)
    half = None if precision == "float32" else HALF_TOL
    for k, system in enumerate(SMALL_SYSTEMS):
        result["system"] = _system_name(system)
        try:
            with _manager(system, precision) as ipu:
                compiled: Dict[Tuple, Any] = {}
                worst = Comparison(True)
                worst_strict = True
                for n, (ins, outs) in enumerate(sets):
                    key = tuple((name, getattr(v, "shape", None)) for name, v in ins.items())
                    if key not in compiled:
                        t = time.perf_counter()
                        compiled[key] = ipu.compile_model(model, ins)
                        result.setdefault("compile_s", time.perf_counter() - t)
                    got = ipu.execute_model(compiled[key], ins)
                    if len(got) != len(outs):
                        result.update(status="fail", detail=f"data set {n}: {len(got)} outputs, {len(outs)} expected")
                        return
                    for i, (g, r) in enumerate(zip(got, outs)):
                        c = compare(g, r, SMALL_RTOL, SMALL_ATOL, half)
                        if not c.ok:
                            detail = f"data set {n}, output {i}: {c.reason}"
                            if _out_of_range_float64(sets):
                                detail += (" [float64 test data beyond float32's range; neurenix computes float64 "
                                           "in float32]")
                            result.update(status="fail", max_abs_err=c.max_abs, max_rel_err=c.max_rel,
                                          detail=detail)
                            return
                        if half is None and isinstance(r, np.ndarray) and r.dtype.kind == "f":
                            rf = r.astype(np.float64)
                            with np.errstate(invalid="ignore", over="ignore"):
                                within = np.abs(g.astype(np.float64) - rf) <= ONNX_RUNNER_ATOL + SMALL_RTOL * np.abs(rf)
                            worst_strict &= bool(np.all(within | ~np.isfinite(rf)))
                        if c.max_abs >= worst.max_abs:
                            worst = c
            result.update(status="pass", max_abs_err=worst.max_abs, max_rel_err=worst.max_rel,
                          detail=f"max abs err {worst.max_abs:.2g}")
            if half is None:
                result["onnx_runner_tol"] = worst_strict
            break
        except IPUOutOfMemoryError as e:
            if k + 1 < len(SMALL_SYSTEMS):
                continue
            result.update(classify(e))
            result["detail"] += f" ({len(e.tiles)} tile(s) over)"
        except Exception as e:  # noqa: BLE001 - every neurenix error is a verdict
            result.update(classify(e))
            break


# ---------------------------------------------------------------------------
# Light models
# ---------------------------------------------------------------------------


def _ort_session(model: Any, optimize: bool = True):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3  # the light files keep unused initializers; ORT warns about each
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _static_shapes(model: Any) -> Dict[str, List[int]]:
    from onnx import shape_inference

    inferred = shape_inference.infer_shapes(model)
    g = inferred.graph
    return {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in list(g.value_info) + list(g.input) + list(g.output)}


def _random_weight(role: Tuple[str, int], shape: List[int], fan_in: Optional[int], rng) -> np.ndarray:
    """Values for one ConstantOfShape-produced tensor, by what consumes it.

    Conv/Gemm weights: He normal, N(0, 2/fan_in), which keeps the scale of
    activations through ReLU layers. Multiplicative parameters (BN scale and
    variance, the Mul after DenseNet's BN): U(0.5, 1.5), positive. Biases and
    shifts: N(0, 0.1^2)."""
    op, k = role
    if (op, k) in (("Conv", 1), ("Gemm", 1)):
        return rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)
    if (op, k) in (("BatchNormalization", 1), ("BatchNormalization", 4), ("Mul", 0), ("Mul", 1)):
        return rng.uniform(0.5, 1.5, shape)
    return rng.standard_normal(shape) * 0.1


def _calibrate_batchnorm(model: Any, feeds: Dict[str, np.ndarray]) -> int:
    """Sets every BatchNormalization's running statistics from the input it
    sees, evaluating the model node by node with onnxruntime.

    With random conv weights, neither the files' 0.02 statistics nor the few
    real ones they keep (which belonged to the original weights) normalise
    anything: ResNet-50's logits reach 1e5 and ShuffleNet's 1e6. Each BN gets
    variance = the channel's mean square (floored at 1% of the layer's
    average, so no channel amplifies rounding noise by more than ~10x) and a
    mean of 0.1 * rms * N(0, 1) (a mean near the channel's own would cancel
    catastrophically and make float32 itself disagree with float64). This
    must go in order: each BN changes what every later one sees."""
    import onnx
    from onnx import helper, numpy_helper

    g = model.graph
    vals = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    vals.update(feeds)
    needed = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    rng = np.random.default_rng(LIGHT_SEED + 1)
    new: Dict[str, np.ndarray] = {}
    for node in g.node:
        if node.op_type == "BatchNormalization":
            x = vals[node.input[0]].astype(np.float64)
            axes = tuple(i for i in range(x.ndim) if i != 1)
            ms = (x * x).mean(axis=axes)
            ms = np.maximum(ms, max(1e-2 * float(ms.mean()), 1e-6))
            new[node.input[3]] = vals[node.input[3]] = (0.1 * np.sqrt(ms) * rng.standard_normal(ms.shape)).astype(
                np.float32)
            new[node.input[4]] = vals[node.input[4]] = ms.astype(np.float32)
        ins = list(dict.fromkeys(i for i in node.input if i))
        outs = [o for o in node.output if o in needed]
        gi = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(vals[i].dtype), vals[i].shape)
              for i in ins]
        go = [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outs]
        one = helper.make_model(helper.make_graph([node], "node", gi, go), opset_imports=model.opset_import)
        one.ir_version = model.ir_version
        for o, v in zip(outs, _ort_session(one, optimize=False).run(outs, {i: vals[i] for i in ins})):
            vals[o] = v
    inits = [numpy_helper.from_array(new[t.name], t.name) if t.name in new else t for t in g.initializer]
    del g.initializer[:]
    g.initializer.extend(inits)
    return len(new) // 2


def prepare_light_model(name: str, seed: int = LIGHT_SEED) -> Tuple[Any, Dict[str, np.ndarray], Dict[str, Any]]:
    """The light model with seeded random weights, cut before its final
    Softmax, its input (N(0, 1), seeded) and notes on what was changed.

    Every ConstantOfShape node becomes an initializer of the same shape (see
    :func:`_random_weight`), the ``*__SHAPE`` inputs that only fed them go,
    and BatchNormalization statistics are calibrated
    (:func:`_calibrate_batchnorm`). The model stays in its IR version (v3:
    initializers are listed as graph inputs too)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(os.path.join(data_dir(), "light", name + ".onnx"))
    g = model.graph
    shapes = _static_shapes(model)
    inits = {t.name: t for t in g.initializer}
    consumers: Dict[str, List[Tuple[Any, int]]] = collections.defaultdict(list)
    for node in g.node:
        for k, i in enumerate(node.input):
            consumers[i].append((node, k))
    rng = np.random.default_rng(seed)
    new_inits, dropped_nodes, dropped_names = [], set(), set()
    roles: Dict[str, int] = collections.Counter()
    for node in g.node:
        if node.op_type != "ConstantOfShape":
            continue
        shape = [int(v) for v in numpy_helper.to_array(inits[node.input[0]])]
        out = node.output[0]
        # The role of a weight is its eventual consumer: DenseNet's BN scale goes
        # through Unsqueeze into a Mul; Inception-v1's classifier through Reshape.
        (c, k), = consumers[out]
        while c.op_type in ("Unsqueeze", "Reshape") and k == 0:
            (c, k), = consumers[c.output[0]]
        role = (c.op_type, k)
        fan_in = None
        if role == ("Conv", 1):
            fan_in = int(np.prod(shape[1:]))
        elif role == ("Gemm", 1):
            a = shapes[c.input[0]]
            trans_a = any(at.name == "transA" and at.i for at in c.attribute)
            fan_in = a[0] if trans_a else a[1]
        roles[f"{role[0]}[{role[1]}]"] += 1
        value = _random_weight(role, shape, fan_in, rng).astype(np.float32)
        new_inits.append(numpy_helper.from_array(value, out))
        dropped_nodes.add(id(node))
        if len(consumers[node.input[0]]) == 1:
            dropped_names.add(node.input[0])
    nodes = [n for n in g.node if id(n) not in dropped_nodes]
    outputs = list(g.output)
    cut = None
    final = [n for n in nodes if n.op_type == "Softmax" and n.output[0] == g.output[0].name]
    if final:
        cut = final[0].input[0]
        nodes.remove(final[0])
        outputs = [helper.make_tensor_value_info(cut, onnx.TensorProto.FLOAT, shapes[cut])]
    new_names = {t.name for t in new_inits}
    initializers = [t for t in g.initializer if t.name not in dropped_names] + new_inits
    inputs = [i for i in g.input if i.name not in dropped_names and i.name not in new_names]
    inputs += [helper.make_tensor_value_info(t.name, onnx.TensorProto.FLOAT, list(t.dims)) for t in new_inits]
    graph = helper.make_graph(nodes, g.name or name, inputs, outputs, initializers)
    out_model = helper.make_model(graph, opset_imports=list(model.opset_import), producer_name="conformance")
    out_model.ir_version = model.ir_version
    init_names = {t.name for t in initializers}
    data = [i for i in inputs if i.name not in init_names]
    feeds = {}
    xrng = np.random.default_rng(seed + 2)
    for vi in data:
        feeds[vi.name] = xrng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
    calibrated = _calibrate_batchnorm(out_model, feeds)
    onnx.checker.check_model(out_model)
    weight_bytes = sum(int(np.prod(t.dims)) * 4 for t in initializers if t.data_type == onnx.TensorProto.FLOAT)
    notes = {"replaced": len(new_inits), "roles": dict(roles), "batchnorms_calibrated": calibrated,
             "cut_at": cut, "weight_mb": weight_bytes / 1e6}
    return out_model, feeds, notes


def float64_reference(model: Any, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    """The model evaluated in float64 by onnx's reference evaluator, as the
    yardstick for the float32 errors of both neurenix and onnxruntime."""
    import onnx
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    class BatchNormalization(OpRun):
        # onnx's reference BatchNormalization-9 blends the batch's own statistics
        # in (its momentum attribute has a default), which no runtime does in
        # inference: use the inference formula.
        op_domain = ""

        def _run(self, x, scale, bias, mean, var, epsilon=None, momentum=None, spatial=None, training_mode=None):
            sh = (1, -1) + (1,) * (x.ndim - 2)
            eps = 1e-5 if epsilon is None else epsilon
            y = (x - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + eps) * scale.reshape(sh) + bias.reshape(sh)
            return (y.astype(x.dtype),)

    class LRN(OpRun):
        # onnx's reference LRN (1.23) loops over the batch instead of the
        # channels, so every channel but the first gets no normalisation.
        op_domain = ""

        def _run(self, x, alpha=None, beta=None, bias=None, size=None):
            alpha = 1e-4 if alpha is None else alpha
            beta = 0.75 if beta is None else beta
            bias = 1.0 if bias is None else bias
            lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
            sq = x * x
            ssum = np.zeros_like(x)
            channels = x.shape[1]
            for c in range(channels):
                ssum[:, c] = sq[:, max(0, c - lo):min(channels, c + hi + 1)].sum(axis=1)
            return ((x / (bias + alpha / size * ssum) ** beta).astype(x.dtype),)

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = [numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name)
             if t.data_type == onnx.TensorProto.FLOAT else t for t in g.initializer]
    del g.initializer[:]
    g.initializer.extend(inits)
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    f64 = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()}
    return ReferenceEvaluator(m, new_ops=[BatchNormalization, LRN]).run(None, f64)


def _compile_on_fewest_ipus(model: Any, feeds: Dict[str, np.ndarray], precision: str,
                            counts: Sequence[int] = LIGHT_IPU_COUNTS) -> Dict[str, Any]:
    """Compiles and runs on 1, 2, 4, ... full ipu2s until the model fits.
    Returns outputs, IPUs, times and the attempts that ran out of memory; or
    the classified error."""
    from neurenix.hardware.graphcore import IPUOutOfMemoryError

    attempts = []
    for n in counts:
        t0 = time.perf_counter()
        try:
            with _manager(dict(version="ipu2", num_ipus=n), precision, num_ipus=n) as ipu:
                compiled = ipu.compile_model(model, feeds)
                t1 = time.perf_counter()
                outs = ipu.execute_model(compiled, feeds)
                t2 = time.perf_counter()
                rep = compiled.report
            return {"ok": True, "outputs": outs, "num_ipus": n, "compile_s": t1 - t0, "run_s": t2 - t1,
                    "max_tile_bytes": rep.max_tile_memory, "oom_attempts": attempts}
        except IPUOutOfMemoryError as e:
            attempts.append({"num_ipus": n, "seconds": time.perf_counter() - t0, "error": first_line(e)})
            last = e
        except Exception as e:  # noqa: BLE001
            return {"ok": False, **classify(e), "oom_attempts": attempts}
    return {"ok": False, **classify(last), "oom_attempts": attempts}


def run_light_case(name: str, with_float64: bool = True, half: bool = True, oom_check: bool = True,
                   progress: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
    """float32 against onnxruntime, float16 against the float32 logits, and
    the out-of-memory check on a 16-tile IPU. ``progress`` gets the partial
    result after each phase (so a crash keeps what went before)."""
    from neurenix.hardware.graphcore import IPUOutOfMemoryError

    t_start = time.perf_counter()
    result: Dict[str, Any] = {"suite": "light", "case": name, "precision": "float32+float16"}
    model, feeds, notes = prepare_light_model(name)
    result["notes"] = notes
    (ref,) = _ort_session(model).run(None, feeds)
    ref = ref.astype(np.float32)
    result["ref_max"] = float(np.abs(ref).max())
    if with_float64:
        t = time.perf_counter()
        (ref64,) = float64_reference(model, feeds)
        result["f64_seconds"] = time.perf_counter() - t
        result["ort_err_vs_f64"] = float(np.abs(ref.astype(np.float64) - ref64).max())
    bugs = []

    # float32
    r = _compile_on_fewest_ipus(model, feeds, "float32")
    f32: Dict[str, Any] = {k: v for k, v in r.items() if k not in ("ok", "outputs")}
    if r["ok"]:
        (y,) = r["outputs"]
        c = compare(y, ref, LIGHT_RTOL, LIGHT_ATOL)
        f32.update(status="pass" if c.ok else "fail", max_abs_err=c.max_abs, max_rel_err=c.max_rel,
                   detail=c.reason or f"max abs err {c.max_abs:.2g}")
        if with_float64:
            f32["err_vs_f64"] = float(np.abs(y.astype(np.float64) - ref64).max())
            if not c.ok and f32["err_vs_f64"] <= 2 * result["ort_err_vs_f64"]:
                # Both float32 evaluations sit about as far from the float64 one:
                # the tolerance is below what float32 arithmetic gives here.
                f32["within_float32_noise"] = True
                f32["detail"] += (f"; neurenix's error vs float64 {f32['err_vs_f64']:.2g} is within 2x "
                                  f"onnxruntime's {result['ort_err_vs_f64']:.2g} "
                                  "(float32 rounding, not a wrong result)")
    if "bug" in f32:
        bugs.append(f"float32: {f32['detail']}")
    result["float32"] = f32
    if progress:
        progress(result)

    # float16 (the manager's defaults otherwise: half partials, memory proportion 0.6)
    if half:
        r = _compile_on_fewest_ipus(model, feeds, "float16")
        f16: Dict[str, Any] = {k: v for k, v in r.items() if k not in ("ok", "outputs")}
        if r["ok"]:
            (y,) = r["outputs"]
            c = compare(y, ref, 0, 0, HALF_TOL, floor_scale=False)
            f16.update(status="pass" if c.ok else "fail", max_abs_err=c.max_abs, max_rel_err=c.max_rel,
                       detail=c.reason or f"max rel err {c.max_rel:.2g}")
        if "bug" in f16:
            bugs.append(f"float16: {f16['detail']}")
        result["float16"] = f16
        if progress:
            progress(result)

    # Out of memory on a small IPU: must be IPUOutOfMemoryError naming tiles.
    if oom_check:
        t = time.perf_counter()
        oom: Dict[str, Any] = {"system": _system_name(OOM_SYSTEM)}
        try:
            with _manager(OOM_SYSTEM, "float32") as ipu:
                ipu.compile_model(model, feeds)
            oom.update(status="fail", detail="compiled: the model fits, so the check says nothing")
        except IPUOutOfMemoryError as e:
            ok = len(e.tiles) > 0
            oom.update(status="pass" if ok else "fail",
                       detail=f"IPUOutOfMemoryError ({len(e.tiles)} tile(s) over): {first_line(e)}")
        except Exception as e:  # noqa: BLE001
            oom.update(classify(e))
            oom["status"] = "fail"
            if "bug" in oom:
                bugs.append(f"OOM check: {oom['detail']}")
        oom["seconds"] = time.perf_counter() - t
        result["oom"] = oom

    phases = [result["float32"]] + ([result["float16"]] if half else []) + ([result["oom"]] if oom_check else [])
    unsupported = [p for p in phases if p.get("status") == "unsupported"]
    if unsupported:
        result.update(status="unsupported", op=unsupported[0]["op"], detail=unsupported[0]["detail"])
    elif all(p.get("status") == "pass" for p in phases):
        result.update(status="pass", detail=f"float32 max abs err {result['float32']['max_abs_err']:.2g}")
    else:
        names = ["float32", "float16", "OOM check"]
        failed = [f"{n}: {p.get('detail', '')}" for n, p in zip(names, phases) if p.get("status") != "pass"]
        result.update(status="fail", detail="; ".join(failed))
    if "max_abs_err" in result["float32"]:
        result["max_abs_err"] = result["float32"]["max_abs_err"]
    if bugs:
        result["bug"] = "; ".join(bugs)
    result["seconds"] = time.perf_counter() - t_start
    return result


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------


def run_case(suite: str, case: str, precision: str = "float32", with_float64: bool = True,
             progress: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
    """One case in this process; a neurenix exception becomes a verdict, an
    exception of the harness itself propagates."""
    if suite == "light":
        return run_light_case(case, with_float64=with_float64, progress=progress)
    return run_small_case(suite, case, precision)


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    return str(o)


def _write_json(path: str, obj: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, default=_json_default)
    os.replace(tmp, path)


def run_isolated(suite: str, case: str, precision: str, with_float64: bool, timeout: float) -> Dict[str, Any]:
    """``run_case`` in a child process: a crash or a hang is reported against
    the case (with what the child finished before it)."""
    fd, path = tempfile.mkstemp(prefix="conformance-", suffix=".json")
    os.close(fd)
    os.unlink(path)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", suite, case, "--precision", precision,
           "--result-file", path] + ([] if with_float64 else ["--no-float64"])
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the child's own process group only
        out, err = proc.communicate()
        timed_out = True
    partial = None
    if os.path.exists(path):
        with open(path) as f:
            partial = json.load(f)
        os.unlink(path)
    if proc.returncode == 0 and partial is not None and "status" in partial:
        return partial
    r = dict(partial or {"suite": suite, "case": case, "precision": precision})
    tail = (err or "").strip().splitlines()[-1:] or [""]
    if timed_out:
        r.update(status="fail", detail=f"timeout after {timeout:.0f} s", bug="timeout")
    elif proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        r.update(status="fail", detail=f"crash ({sig}) {tail[0][:200]}".strip(), bug=f"crash ({sig})")
    else:
        # A harness error (or a native abort that exits with a status).
        r.update(status="fail", detail=f"exit status {proc.returncode}: {tail[0][:300]}",
                 bug=f"exit status {proc.returncode}")
    r["seconds"] = time.perf_counter() - t0
    return r


def totals(results: Sequence[Dict[str, Any]]) -> Dict[str, Dict[str, int]]:
    t: Dict[str, Dict[str, int]] = collections.OrderedDict()
    for r in list(results) + [dict(x, suite="all") for x in results]:
        s = t.setdefault(r["suite"], {"cases": 0, "pass": 0, "fail": 0, "unsupported": 0, "bugs": 0})
        s["cases"] += 1
        s[r["status"]] += 1
        s["bugs"] += 1 if r.get("bug") else 0
    return t


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _fmt(v: Optional[float], spec: str = ".2g") -> str:
    return "–" if v is None else format(v, spec)


def verdict(r: Dict[str, Any]) -> str:
    return f"unsupported ({r['op']})" if r["status"] == "unsupported" else r["status"]


def markdown(results: Sequence[Dict[str, Any]], precision: str) -> str:
    lines: List[str] = []
    add = lines.append
    tot = totals(results)
    add("### Totals\n")
    add("| suite | cases | pass | fail | unsupported | of the failures, neurenix bugs by contract* |")
    add("|---|---|---|---|---|---|")
    for suite, s in tot.items():
        name = "**all**" if suite == "all" else suite
        add(f"| {name} | {s['cases']} | {s['pass']} | {s['fail']} | {s['unsupported']} | {s['bugs']} |")
    add("\n\\* IPUInternalError, an exception that is not an IPUError, a crash or a timeout.\n")

    small = [r for r in results if r["suite"] != "light"]
    if small:
        add(f"### Per case ({precision})\n")
        add("| suite | case | result | system | detail |")
        add("|---|---|---|---|---|")
        for r in small:
            detail = r.get("detail", "")
            if r["status"] == "pass" and r.get("onnx_runner_tol") is False:
                detail += f" (outside onnx runner's atol {ONNX_RUNNER_ATOL:g})"
            add(f"| {r['suite']} | {r['case']} | {verdict(r)} | {r.get('system', '')} | {_cell(detail)} |")
        add("")

    light = [r for r in results if r["suite"] == "light"]
    if light:
        add("### Light models\n")
        add("| model | weights (MB) | IPUs | compile (s) | run (s) | float32 max abs err vs ORT (max \\|ref\\|) | "
            "float32 err vs float64: neurenix / ORT | float32 | IPUs f16 | compile f16 (s) | "
            "float16 max rel err | float16 | OOM check (16 tiles) |")
        add("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in light:
            f32, f16, oom = r.get("float32", {}), r.get("float16", {}), r.get("oom", {})
            mb = r.get("notes", {}).get("weight_mb")

            def ipus(p):
                tried = ", ".join(str(a["num_ipus"]) for a in p.get("oom_attempts", []))
                n = str(p["num_ipus"]) if "num_ipus" in p else "none"
                return f"{n} (OOM on {tried})" if tried else n

            def status(p):
                if not p:
                    return "not run"
                if p.get("status") == "pass":
                    return "pass"
                if p.get("status") == "unsupported":
                    return f"unsupported ({p['op']})"
                if p.get("within_float32_noise"):
                    return "fail (tolerance; as close to float64 as onnxruntime, see below)"
                return "fail (see below)"

            f64 = (f"{_fmt(f32.get('err_vs_f64'))} / {_fmt(r.get('ort_err_vs_f64'))}"
                   if "ort_err_vs_f64" in r else "–")
            err32 = (f"{_fmt(f32.get('max_abs_err'))} ({_fmt(r.get('ref_max'), '.3g')})"
                     if "max_abs_err" in f32 else "–")
            oom_cell = "pass" if oom.get("status") == "pass" else status(oom)
            add(f"| {r['case']} | {_fmt(mb, '.1f')} | {ipus(f32)} | {_fmt(f32.get('compile_s'), '.1f')} | "
                f"{_fmt(f32.get('run_s'), '.1f')} | {err32} | {f64} | {status(f32)} | {ipus(f16)} | "
                f"{_fmt(f16.get('compile_s'), '.1f')} | {_fmt(f16.get('max_rel_err'))} | {status(f16)} | "
                f"{oom_cell} |")
        add("")
        failed = [(r["case"], n, p) for r in light for n, p in (("float32", r.get("float32", {})),
                                                                 ("float16", r.get("float16", {})))
                  if p and p.get("status") != "pass"]
        if failed:
            add("Failures:\n")
            for case, n, p in failed:
                add(f"- {case}, {n}: {_cell(p.get('detail', ''))}")
            add("")
        add("OOM check details:\n")
        for r in light:
            if "oom" in r:
                add(f"- {r['case']}: {_cell(r['oom'].get('detail', ''))}")
        add("")

    blocked: Dict[str, List[Dict[str, Any]]] = collections.defaultdict(list)
    for r in results:
        if r["status"] == "unsupported":
            for op in r.get("ops", [r["op"]]):
                blocked[op].append(r)
    if blocked:
        add("### Unsupported operators\n")
        add("A case counts for every operator neurenix names as missing in it (first or 'the model also uses').\n")
        add("| operator | cases blocked | what is missing | cases |")
        add("|---|---|---|---|")
        for op, rs in sorted(blocked.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            forms = sorted({r["form"] if r["op"] == op and r.get("form") else "the operator" for r in rs})
            cases = ", ".join(f"{r['suite']}/{r['case']}" for r in rs)
            add(f"| {op} | {len(rs)} | {_cell('; '.join(forms))} | {cases} |")
        add("")

    bugs = [r for r in results if r.get("bug")]
    if bugs:
        add("### Neurenix bugs by contract (internal errors, non-IPUError exceptions, crashes, timeouts)\n")
        for r in bugs:
            add(f"- {r['suite']}/{r['case']}: {r['bug']}: {_cell(r.get('detail', ''))}")
        add("")
    return "\n".join(lines)


def select_cases(suites: Sequence[str], pattern: Optional[str]) -> List[Tuple[str, str]]:
    out = []
    for s in suites:
        for c in list_cases(s):
            if not pattern or pattern in c:
                out.append((s, c))
    return out


def _worker(argv: List[str]) -> int:
    """Child side of :func:`run_isolated`."""
    p = argparse.ArgumentParser()
    p.add_argument("suite")
    p.add_argument("case")
    p.add_argument("--precision", default="float32")
    p.add_argument("--result-file", required=True)
    p.add_argument("--no-float64", action="store_true")
    a = p.parse_args(argv)

    def progress(partial):
        _write_json(a.result_file, {k: v for k, v in partial.items() if k != "status"})

    r = run_case(a.suite, a.case, a.precision, with_float64=not a.no_float64, progress=progress)
    _write_json(a.result_file, r)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--worker":
        return _worker(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suites", nargs="+", default=list(SUITES), choices=SUITES)
    p.add_argument("--filter", default=None, help="only cases whose name contains this substring")
    p.add_argument("--precision", default="float32", choices=("float32", "float16", "mixed"),
                   help="precision of the small suites (light models always run float32 and float16)")
    p.add_argument("--markdown", action="store_true", help="print the tables docs/conformance.md records")
    p.add_argument("--json", default=None, help="also write every result to this file")
    p.add_argument("--no-isolate", action="store_true", help="run the cases in this process")
    p.add_argument("--no-float64", action="store_true", help="skip the float64 reference of the light models")
    p.add_argument("--timeout", type=float, default=None,
                   help=f"seconds per case (default {SMALL_TIMEOUT_S}, light {LIGHT_TIMEOUT_S})")
    a = p.parse_args(argv)

    # A fresh lock directory: IPUs held by other runs (or left by killed ones)
    # must not make cases fail with DeviceUnavailableError.
    lock_dir = tempfile.mkdtemp(prefix="neurenix-conformance-locks-")
    os.environ["NEURENIX_IPU_LOCK_DIR"] = lock_dir
    for var in ("NEURENIX_IPU_MODEL", "NEURENIX_NUM_IPUS", "NEURENIX_PRECISION"):
        os.environ.pop(var, None)
    try:
        return _run(a)
    finally:
        shutil.rmtree(lock_dir, ignore_errors=True)


def _run(a: argparse.Namespace) -> int:
    cases = select_cases(a.suites, a.filter)
    if not cases:
        print("no cases match", file=sys.stderr)
        return 2
    import onnx
    import onnxruntime

    print(f"onnx {onnx.__version__} ({data_dir()}), onnxruntime {onnxruntime.__version__}, "
          f"{len(cases)} cases, precision {a.precision}, {os.cpu_count()} cores", flush=True)
    results = []
    t0 = time.perf_counter()
    width = max(len(f"{s}/{c}") for s, c in cases)
    for i, (suite, case) in enumerate(cases, 1):
        if a.no_isolate:
            try:
                r = run_case(suite, case, a.precision, with_float64=not a.no_float64)
            except Exception as e:  # noqa: BLE001 - a harness error must not end the run
                traceback.print_exc()
                r = {"suite": suite, "case": case, "status": "fail", "detail": f"harness: {type(e).__name__}: {e}",
                     "bug": "harness error"}
        else:
            timeout = a.timeout or (LIGHT_TIMEOUT_S if suite == "light" else SMALL_TIMEOUT_S)
            r = run_isolated(suite, case, a.precision, not a.no_float64, timeout)
        results.append(r)
        print(f"[{i:3d}/{len(cases)}] {suite + '/' + case:{width}s}  {verdict(r):28s} {r.get('detail', '')[:240]}"
              f"{'  [BUG: ' + r['bug'] + ']' if r.get('bug') else ''}  ({r.get('seconds', 0):.1f} s)", flush=True)
    elapsed = time.perf_counter() - t0
    print(f"\ntotal time {elapsed:.0f} s")
    for suite, s in totals(results).items():
        print(f"{suite:18s} {s['cases']:4d} cases: {s['pass']:4d} pass, {s['fail']:4d} fail, "
              f"{s['unsupported']:4d} unsupported ({s['bugs']} bugs by contract)")
    if a.json:
        _write_json(a.json, {"precision": a.precision, "seconds": elapsed, "results": results})
    if a.markdown:
        print()
        print(markdown(results, a.precision))
    return 0


if __name__ == "__main__":
    sys.exit(main())
