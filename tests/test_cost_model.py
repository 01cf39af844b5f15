"""Closed-form properties of the cost model and of the compile report: what
must hold whatever the constants are, checked against the target table and
against the engine, not against the estimate itself."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel
from neurenix.hardware.graphcore.errors import IPUOutOfMemoryError
from onnx_models import make_model, mlp


def matmul_model(m, k, n, seed=0):
    w = np.random.default_rng(seed).standard_normal((k, n)).astype(np.float32)
    return make_model(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "W")],
    )


def compile_only(model, inputs, ipu_model, **options):
    with GraphCoreManager(num_ipus=1, compile_only=True, ipu_model=ipu_model, **options) as ipu:
        return ipu.compile_model(model, inputs).report


def device_cycles(report):
    return sum(s.cycles for s in report.steps if s.kind in ("compute", "exchange"))


@pytest.mark.parametrize("precision", ["float16", "float32"])
def test_a_matmul_never_beats_the_peak_and_approaches_it_as_it_grows(precision):
    tiles = 16
    rates, compute_rates = [], []
    for size in (32, 64, 128, 256, 512):
        r = compile_only(matmul_model(size, size, size), {"x": np.zeros((size, size), np.float32)},
                         IPUModel(num_ipus=1, tiles_per_ipu=tiles), precision=precision)
        per_tile = r.system.fp16_flops_per_cycle if precision == "float16" else r.system.fp32_flops_per_cycle
        peak = tiles * per_tile  # flops per cycle of the whole (tiny) IPU
        flops = 2.0 * size ** 3
        rates.append(flops / device_cycles(r) / peak)
        compute_rates.append(flops / sum(s.cycles for s in r.steps if s.kind == "compute") / peak)
    assert all(0 < x <= 1 for x in rates + compute_rates), (rates, compute_rates)
    # Bigger products amortise syncs, launches and operand exchange better.
    assert rates == sorted(rates), rates
    assert compute_rates[-1] > 0.9, compute_rates
    assert rates[-1] > 0.6, rates
    assert rates[0] < 0.25, rates


def test_half_inputs_make_the_amp_faster_by_the_ratio_of_its_rates():
    # One tile, so both precisions run the same single block; the product is
    # large enough that the per-row set-up is a small part of the vertex.
    m, k, n = 64, 512, 128
    terms = {}
    for precision in ("float16", "float32"):
        r = compile_only(matmul_model(m, k, n), {"x": np.zeros((m, k), np.float32)},
                         IPUModel(num_ipus=1, tiles_per_ipu=1), precision=precision)
        (step,) = [s for s in r.steps if s.kind == "compute" and s.node == "mm"]
        (term,) = [t for t in step.terms if "MatMul" in t.name]
        terms[precision] = term.cycles
        ratio = r.system.fp16_flops_per_cycle / r.system.fp32_flops_per_cycle
    measured = terms["float32"] / terms["float16"]
    assert ratio * 0.97 <= measured <= ratio, (terms, ratio)


@given(
    m=st.integers(1, 48),
    k=st.integers(1, 96),
    n=st.integers(1, 96),
)
def test_halving_the_memory_proportion_never_makes_the_chosen_plan_faster(m, k, n):
    # Tiny tiles, so that the proportion binds.
    system = IPUModel(num_ipus=1, tiles_per_ipu=4, bytes_per_tile=32768)
    cycles = []
    for proportion in (0.8, 0.4, 0.2, 0.1, 0.05):
        try:
            r = compile_only(matmul_model(m, k, n), {"x": np.zeros((m, k), np.float32)}, system,
                             precision="float32", memory_proportion=proportion)
        except IPUOutOfMemoryError:
            continue
        (plan,) = [p for p in r.plans if p.kind == "matmul"]
        cycles.append((proportion, plan.estimated_cycles))
    for (p_hi, c_hi), (p_lo, c_lo) in zip(cycles, cycles[1:]):
        assert c_lo >= c_hi, f"memory_proportion {p_lo}: {c_lo} cycles < {c_hi} cycles at {p_hi}"


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory):
    import os

    os.environ["NEURENIX_IPU_LOCK_DIR"] = str(tmp_path_factory.mktemp("locks"))
    model, params = mlp([24, 64, 48, 10], np.random.default_rng(1))
    x = np.random.default_rng(2).standard_normal((8, 24)).astype(np.float32)
    with GraphCoreManager(num_ipus=1, precision="float16", ipu_model=IPUModel(num_ipus=1, tiles_per_ipu=8)) as ipu:
        compiled = ipu.compile_model(model, {"x": x})
        ipu.execute_model(compiled, {"x": x})
        return model, params, compiled.report, ipu.last_execution_report


def test_tile_memory_bounds_what_the_engine_allocated(mlp_run):
    model, params, report, run = mlp_run
    # The host lays the tiles' variables out by variable, placed by their
    # lives as each tile places its own: about the bytes the tiles' allocators
    # placed, at most 1.2 times them. The shadow regions of shadowed
    # temporaries come on top, 64 of them (one per range of tiles), none
    # larger than the fullest tile, with alignment.
    placed = sum(t.variables for t in report.tiles)
    host_variables = run.host_memory_bytes - run.host_shadow_bytes
    assert 0 < host_variables <= 1.2 * placed
    assert 0 < run.host_shadow_bytes <= 64 * (max(t.variables for t in report.tiles) + 64) + 64
    for t in report.tiles:
        assert t.total == t.variables + t.vertex_state + t.code + t.exchange_code + t.control_code
        assert 0 <= t.constants <= t.variables
        sizes = [x.bytes for x in t.largest]
        assert sizes == sorted(sizes, reverse=True) and sum(sizes) <= t.variables
    # Always-live bytes hold at least every weight (as float16 on the device),
    # and not much more than that (alignment only).
    weights = sum(p.size * 2 for p in params)
    constants = sum(t.constants for t in report.tiles)
    assert weights <= constants <= weights + 8 * 2 * len(params) * len(report.tiles)


def test_largest_tensors_name_the_node_that_owns_them(mlp_run):
    model, _, report, _ = mlp_run
    nodes = {n.name for n in model.graph.node}
    owners = {x.name: x.node for t in report.tiles for x in t.largest}
    assert owners.get("W0") == "dense0" and owners.get("W1") == "dense1", owners
    assert all(node in nodes or node == "" for node in owners.values())


def test_liveness_lies_between_the_constants_and_the_tiles_peaks(mlp_run):
    _, _, report, _ = mlp_run
    constants = sum(t.constants for t in report.tiles)
    peaks = sum(t.variables for t in report.tiles)
    live = [s.live_bytes for s in report.steps]
    assert all(constants <= b <= peaks for b in live), (constants, peaks, live)
    assert max(live) > constants  # activations come and go


def test_every_step_explains_its_cycles(mlp_run):
    model, _, report, _ = mlp_run
    sysi = report.system
    nodes = {n.name for n in model.graph.node}
    for s in report.steps:
        assert sum(t.cycles for t in s.terms) == s.cycles, s
        if s.kind in ("compute", "exchange"):
            assert s.node in nodes, s
            assert 0 <= s.tile < sysi.tiles_per_ipu
            assert s.terms[-1].name == "sync" and s.terms[-1].cycles == sysi.sync_cycles
        else:
            assert s.node == "" and s.tile is None
            # Host streams: a fixed latency and the bytes at the host link's rate.
            per_cycle = sysi.host_link_bytes_per_sec / sysi.clock_hz
            assert s.cycles == sysi.host_transfer_latency_cycles + int(s.bytes / per_cycle)


@pytest.mark.parametrize("version,link", [("ipu1", 15.75e9), ("ipu2", 25e9), ("bow", 25e9), ("ipu21", 31.5e9)])
def test_host_streams_use_each_systems_host_link(version, link):
    model, _ = mlp([256, 8], np.random.default_rng(0))
    x = np.zeros((64, 256), np.float32)
    r = compile_only(model, {"x": x}, IPUModel(version=version, num_ipus=1, tiles_per_ipu=4), precision="float32")
    (inp,) = [s for s in r.steps if s.kind == "host_to_device"]
    assert r.system.host_link_bytes_per_sec == link
    assert inp.bytes == x.nbytes
    stream = inp.cycles - r.system.host_transfer_latency_cycles
    assert stream == int(x.nbytes / (link / r.system.clock_hz))


def test_cycles_by_term_kind_sum_to_the_run(mlp_run):
    _, _, report, _ = mlp_run
    by_term = report.cycles_by_term()
    assert sum(by_term.values()) == report.cycles_per_run
    syncs = sum(1 for s in report.steps if s.kind in ("compute", "exchange"))
    assert by_term["sync"] == syncs * report.system.sync_cycles
    hosts = sum(1 for s in report.steps if s.kind.endswith("host") or s.kind.startswith("host"))
    assert by_term["host_latency"] == hosts * report.system.host_transfer_latency_cycles
    assert set(by_term) <= {"vertex", "launch", "sync", "exchange", "descriptors", "ipu_link", "host_latency",
                            "host_link"}
