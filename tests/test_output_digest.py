"""Simulated results do not change silently.

The simulator's speed work (kernels, exchange, thread scheduling) must leave
every result bit for bit as it was, or document and test the change. These
tests run real models on one full simulated ``ipu2`` with fixed seeds, check
them against onnxruntime (so what is recorded is a right answer) and compare
the SHA-256 of the output bytes with the digests checked in beside this file,
and the plan's estimate (cycles per run, bytes exchanged) with the recorded
one.

The host kernels use the build host's vector units (FMA contracts products
into sums), so digests are recorded per instruction-set flavour; a flavour
with no recorded digest skips with a message saying how to record one:

    NEURENIX_RECORD_DIGESTS=1 python -m pytest tests/test_output_digest.py
"""

import hashlib
import importlib.util
import json
import os
import pathlib
import sys

import numpy as np
import pytest

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel

_ROOT = pathlib.Path(__file__).resolve().parent.parent
_DIGESTS = pathlib.Path(__file__).resolve().parent / "data" / "output_digests.json"
sys.path.insert(0, str(_ROOT / "benchmarks"))


def _models():
    spec = importlib.util.spec_from_file_location("bench_models_defs", _ROOT / "benchmarks" / "models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _flavour() -> str:
    """The vector instruction sets the native build uses (see
    rust/neurenix-sys/build.rs): it builds for its own host unless
    NEURENIX_NATIVE_SIMD=0."""
    if os.environ.get("NEURENIX_NATIVE_SIMD", "1") == "0":
        return "portable"
    try:
        flags = set(next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split())
    except (OSError, StopIteration):
        return "unknown"
    if not {"avx2", "fma", "f16c"} <= flags:
        return "portable"
    return "avx512f" if "avx512f" in flags else "avx2-fma"


CASES = {
    # name: (model builder, precision, half partials, stochastic rounding, tolerance against onnxruntime)
    "resnet50-light b1 float32": (lambda m: m.light_model("light_resnet50", 1), "float32", False, False, 1e-4),
    "resnet50-light b1 float16 half partials": (lambda m: m.light_model("light_resnet50", 1), "float16", True, False,
                                                0.3),
    "bert-base-like b1 float32": (lambda m: m.bert_encoder(1, 128, **m.BERT_BENCH), "float32", False, False, 1e-4),
    # Stochastic rounding's draws follow the order in which the vertices
    # round: this pins that order over a whole float16 model (seed 7).
    "squeezenet-light b1 float16 half partials stochastic rounding": (
        lambda m: m.light_model("light_squeezenet", 1), "float16", True, True, 0.1),
}


def _digest(outputs) -> str:
    h = hashlib.sha256()
    for o in outputs:
        a = np.ascontiguousarray(o)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("case", list(CASES))
def test_outputs_match_the_recorded_digest(case):
    import onnxruntime as ort

    build, precision, half_partials, stochastic, tol = CASES[case]
    model, feeds = build(_models())
    with GraphCoreManager(num_ipus=1, precision=precision, enable_half_partials=half_partials,
                          stochastic_rounding=stochastic, seed=7 if stochastic else None,
                          ipu_model=IPUModel(version="ipu2", num_ipus=1), simulator_threads=2) as ipu:
        compiled = ipu.compile_model(model, feeds)
        got = ipu.execute_model(compiled, feeds)
        plan = f"{compiled.report.cycles_per_run} cycles, {compiled.last_execution.exchanged_bytes} bytes exchanged"
        # The generators' state carries from run to run: under stochastic
        # rounding the second run is the first run of a second load.
        again = ipu.execute_model(ipu.compile_model(model, feeds) if stochastic else compiled, feeds)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    expected = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.astype(np.float64), e, atol=tol, rtol=tol)
    digest = _digest(got)
    assert digest == _digest(again), ("two loads of one model differ" if stochastic else
                                      "two runs of one executable differ")
    flavour = _flavour()
    recorded = json.loads(_DIGESTS.read_text()) if _DIGESTS.exists() else {}
    if os.environ.get("NEURENIX_RECORD_DIGESTS"):
        recorded.setdefault(flavour, {})[case] = digest
        recorded.setdefault("plans", {})[case] = plan
        _DIGESTS.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    # The plan and its estimate do not depend on the host's vector units.
    assert plan == recorded.get("plans", {}).get(case, plan), (
        f"{case}: the plan's estimate changed ({plan}, recorded {recorded['plans'][case]})")
    if case not in recorded.get(flavour, {}):
        pytest.skip(f"no digest recorded for {case!r} on a {flavour} build; record with NEURENIX_RECORD_DIGESTS=1")
    assert digest == recorded[flavour][case], (
        f"{case}: the simulated outputs changed (digest {digest}, recorded {recorded[flavour][case]}). If the "
        "change is intended (a documented change of rounding order), record the new digests with "
        "NEURENIX_RECORD_DIGESTS=1 and say why in docs/benchmarks.md")
