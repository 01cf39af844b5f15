"""The compile and execution reports' exports: plain data (to_dict/to_json),
the Perfetto timeline (to_trace), the text summary, PNG plots, the
self-contained HTML page and save(). Every figure is checked against the
native records or the schedule's arithmetic, computed here on their own."""

import collections
import json
import os
import re
import sys
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel, IPUPlanWarning
from onnx_models import make_model, mlp

TINY = dict(ipu_model=IPUModel(num_ipus=2, tiles_per_ipu=8), precision="float32")
COMPUTE = ("compute", "exchange")


def cnn(rng):
    """x [N, 2, 6, 6] -> Conv, Relu, MaxPool, Flatten, Gemm, Softmax: plans of
    kinds conv, map, pool, matmul and reduce."""

    def f32(name, a):
        return numpy_helper.from_array(a.astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w", "b"], ["z"], name="fc"),
        helper.make_node("Softmax", ["z"], ["y"], axis=-1, name="softmax"),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
        [f32("cw", rng.standard_normal((4, 2, 3, 3)) * 0.3), f32("cb", rng.standard_normal(4) * 0.1),
         f32("w", rng.standard_normal((36, 5)) / 6), f32("b", rng.standard_normal(5) * 0.1)],
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Compile reports (and runs) of a few configurations, made once."""
    rng = np.random.default_rng(0)
    model, _ = mlp([8, 16, 16, 4], rng)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NEURENIX_IPU_LOCK_DIR", str(tmp_path_factory.mktemp("locks")))
        configs = {
            "one": dict(num_ipus=1),
            "one_d3": dict(num_ipus=1, device_iterations=3),
            "one_r2": dict(num_ipus=2, replication_factor=2, device_iterations=2),
            "pipelined": dict(num_ipus=2, device_iterations=3, execution="pipelined"),
            "sharded": dict(num_ipus=2, device_iterations=2, execution="sharded"),
        }
        for name, opts in configs.items():
            with GraphCoreManager(**opts, **TINY) as ipu:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", IPUPlanWarning)
                    compiled = ipu.compile_model(model, x)
                k = opts.get("replication_factor", 1) * opts.get("device_iterations", 1)
                ipu.execute_model(compiled, np.concatenate([x] * k))
                out[name] = (compiled.report, ipu.last_execution_report)
        with GraphCoreManager(num_ipus=1, compile_only=True, **TINY) as ipu:
            out["cnn"] = (ipu.compile_model(cnn(rng), rng.standard_normal((2, 2, 6, 6)).astype(np.float32)).report,
                          None)
    return out


def _node_of(st, placed):
    """A compute or exchange step's node: the core's, else (a step it names
    none for) the placed node its name starts with ("fc/matmul" is fc's)."""
    if st.node:
        return st.node
    return next((n for n in placed if st.name == n or st.name.startswith(n + "/")), "")


def _native_always_live(t):
    return t.constants + t.vertex_state + t.code + t.exchange_code + t.control_code


# -- to_dict / to_json -------------------------------------------------------------


@pytest.mark.parametrize("name", ["one", "pipelined", "cnn"])
def test_to_dict_round_trips_through_json_and_matches_the_native_records(runs, name, tmp_path):
    rep, _ = runs[name]
    d = rep.to_dict()
    text = json.dumps(d, allow_nan=False)
    assert json.loads(text) == d
    path = tmp_path / "report.json"
    assert json.loads(rep.to_json(str(path))) == d and json.loads(path.read_text()) == d

    assert d["total_cycles"] == d["cycles_per_run"] == rep.cycles_per_run == rep.estimate.cycles_per_call
    s = rep.system
    assert d["system"]["clock_hz"] == s.clock_hz and d["system"]["tiles_per_ipu"] == s.tiles_per_ipu == 8
    assert d["system"]["bytes_per_tile"] == s.bytes_per_tile
    assert d["options"]["precision"] == "float32" and d["options"]["num_ipus"] == rep.num_ipus

    # Per tile: the split, against the native fields.
    assert len(d["memory"]["tiles"]) == len(rep.tiles)
    for e, t in zip(d["memory"]["tiles"], rep.tiles):
        assert (e["ipu"], e["tile"], e["total"]) == (t.ipu, t.tile, t.total)
        assert e["always_live"] == _native_always_live(t)
        assert e["not_always_live"] == t.variables - t.constants
        assert e["always_live"] + e["not_always_live"] == t.total
        assert e["headroom"] == s.bytes_per_tile - t.total
        assert [(x["name"], x["node"], x["bytes"]) for x in e["largest"]] == [(x.name, x.node, x.bytes)
                                                                             for x in t.largest]
        sizes = [x["bytes"] for x in e["largest"]]
        assert sizes == sorted(sizes, reverse=True) and sum(sizes) <= t.variables
    # Per IPU: sums over the native tiles, headroom of the busiest.
    ipus = d["memory"]["ipus"]
    assert [m["ipu"] for m in ipus] == list(range(rep.num_stages))
    for m in ipus:
        ts = [t for t in rep.tiles if t.ipu == m["ipu"]]
        assert m["total_bytes"] == sum(t.total for t in ts) > 0
        assert m["always_live_bytes"] + m["not_always_live_bytes"] == m["total_bytes"]
        assert m["always_live_bytes"] == sum(_native_always_live(t) for t in ts)
        assert m["headroom_bytes"] == s.bytes_per_tile - max(t.total for t in ts)
        assert m["max_over_mean"] == pytest.approx(max(t.total for t in ts) / (sum(t.total for t in ts) / len(ts)))
    assert sum(m["total_bytes"] for m in ipus) == d["memory"]["total_bytes"] == sum(t.total for t in rep.tiles)

    # Liveness: each IPU's steps in order, with their live bytes.
    for lv in d["liveness"]:
        steps = [(i, st) for i, st in enumerate(rep.steps) if st.ipu == lv["ipu"]]
        assert lv["step_index"] == [i for i, _ in steps]
        assert lv["live_bytes"] == [st.live_bytes for _, st in steps]
        assert lv["peak_live_bytes"] == max(st.live_bytes for _, st in steps)

    # Steps, with their terms.
    assert len(d["steps"]) == len(rep.steps)
    for e, st in zip(d["steps"], rep.steps):
        assert (e["ipu"], e["kind"], e["name"], e["cycles"], e["bytes"]) == (st.ipu, st.kind, st.name, st.cycles,
                                                                            st.bytes)
        assert e["tile"] == st.tile
        assert [(t["name"], t["cycles"]) for t in e["terms"]] == [(t.name, t.cycles) for t in st.terms]
        assert sum(t["cycles"] for t in e["terms"]) == st.cycles
        if st.node:
            assert e["node"] == st.node
        if st.kind not in COMPUTE:
            assert e["node"] == ""

    # Rates at the clock, from the estimate's own figures.
    e = rep.estimate
    assert d["latency_seconds"] == pytest.approx(sum(x.interval_cycles for x in e.stages) / s.clock_hz)
    assert d["throughput_samples_per_second"] == pytest.approx(
        rep.micro_batch_size * rep.replication_factor * s.clock_hz / e.interval_cycles)
    assert len(d["estimate"]["stages"]) == rep.num_stages
    assert [x["interval_cycles"] for x in d["estimate"]["stages"]] == [x.interval_cycles for x in e.stages]


def test_one_stage_total_is_the_sum_of_its_steps(runs):
    rep, _ = runs["one"]
    assert rep.to_dict()["total_cycles"] == sum(s.cycles for s in rep.steps) == rep.cycles_per_run


def test_every_plan_is_exported_with_its_kind(runs):
    rep, _ = runs["cnn"]
    d = rep.to_dict()
    got = collections.Counter((p["name"], p["kind"], p["ipu"], p["plan"], p["estimated_cycles"]) for p in d["plans"])
    want = collections.Counter((p.name, p.kind, p.ipu, p.plan, p.estimated_cycles) for p in rep.plans)
    assert got == want
    assert {"conv", "pool", "matmul", "map", "reduce"} <= {p["kind"] for p in d["plans"]}


@pytest.mark.parametrize("name", ["one", "pipelined", "cnn"])
def test_per_layer_totals_add_up_to_the_node_steps(runs, name):
    rep, _ = runs[name]
    d = rep.to_dict()
    placed = {p.node: p for p in rep.placement}
    want = collections.defaultdict(lambda: {"compute": 0, "exchange": 0})
    orphan = {"compute": 0, "exchange": 0}
    for st in rep.steps:
        if st.kind not in COMPUTE:
            continue
        node = _node_of(st, placed)
        if node:
            want[node][st.kind] += st.cycles
        else:
            orphan[st.kind] += st.cycles
    layers = {x["node"]: x for x in d["layers"]}
    assert {n: x["by_kind"] for n, x in layers.items()} == dict(want)
    for x in d["layers"]:
        assert x["cycles"] == x["by_kind"]["compute"] + x["by_kind"]["exchange"]
        assert x["op_type"] == placed[x["node"]].op_type and x["ipu"] == placed[x["node"]].ipu
    assert d["unattributed_cycles"] == orphan
    assert sum(x["cycles"] for x in d["layers"]) + sum(orphan.values()) == sum(
        st.cycles for st in rep.steps if st.kind in COMPUTE)
    cycles = [x["cycles"] for x in d["layers"]]
    assert cycles == sorted(cycles, reverse=True)


def test_execution_report_to_dict(runs, tmp_path):
    rep, run = runs["pipelined"]
    d = run.to_dict()
    assert json.loads(run.to_json(str(tmp_path / "run.json"))) == d
    assert d["total_cycles"] == d["cycles"] == run.cycles
    assert d["ipus"] == run.ipus == [0, 1]
    assert d["samples_per_second"] == pytest.approx(run.batch_size * run.clock_hz / run.cycles)
    assert d["compute_cycles"] == run.compute_cycles and d["batch_size"] == 6


# -- the trace ---------------------------------------------------------------------


def _check_trace_format(trace, rep):
    assert set(trace) >= {"traceEvents", "displayTimeUnit"}
    json.loads(json.dumps(trace, allow_nan=False))
    names = {}
    for ev in trace["traceEvents"]:
        assert {"ph", "pid", "tid", "name", "ts", "args"} <= set(ev), ev
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int) and isinstance(ev["args"], dict)
        # Perfetto's JSON importer refuses an event with an array-valued key.
        assert not any(isinstance(v, list) for v in ev.values()), ev
        if ev["ph"] == "X":
            assert ev["dur"] >= 0 and ev["ts"] >= 0
        elif ev["ph"] == "M" and ev["name"] == "process_name":
            names[ev["pid"]] = ev["args"]["name"]
        else:
            assert ev["ph"] in ("M", "C"), ev
    assert sorted(names.values()) == [f"IPU {i}" for i in range(rep.num_ipus // rep.replication_factor)]
    return names


def _tracks(trace, names):
    """Step slices and micro-batch slices per IPU name, in time order."""
    steps, mbs = collections.defaultdict(list), collections.defaultdict(list)
    tid_of = {(ev["pid"], ev["tid"]): ev["args"]["name"] for ev in trace["traceEvents"]
              if ev["ph"] == "M" and ev["name"] == "thread_name"}
    for ev in trace["traceEvents"]:
        if ev["ph"] == "X":
            which = tid_of[(ev["pid"], ev["tid"])]
            (steps if which == "steps" else mbs)[names[ev["pid"]]].append(ev)
    for d in (steps, mbs):
        for v in d.values():
            v.sort(key=lambda ev: ev["args"]["start_cycle"])
    return steps, mbs


def _no_overlap(evs, clock):
    for a, b in zip(evs, evs[1:]):
        assert a["args"]["start_cycle"] + a["args"]["dur_cycles"] <= b["args"]["start_cycle"], (a, b)
        # The microsecond times say the same, to the nanosecond.
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-6
    for ev in evs:
        assert ev["ts"] == pytest.approx(ev["args"]["start_cycle"] / clock * 1e6, abs=1e-3)
        assert ev["dur"] == pytest.approx(ev["args"]["dur_cycles"] / clock * 1e6, abs=2e-3)


@pytest.mark.parametrize("name", ["one", "one_d3", "one_r2"])
def test_trace_of_one_stage_is_back_to_back_and_sums_to_the_total(runs, name, tmp_path):
    rep, _ = runs[name]
    path = tmp_path / "trace.json"
    trace = rep.to_trace(str(path))
    assert json.loads(path.read_text()) == trace
    names = _check_trace_format(trace, rep)
    steps, _ = _tracks(trace, names)
    assert list(steps) == ["IPU 0"]
    evs = steps["IPU 0"]
    _no_overlap(evs, rep.clock_hz)
    assert evs[0]["args"]["start_cycle"] == 0
    for a, b in zip(evs, evs[1:]):
        assert a["args"]["start_cycle"] + a["args"]["dur_cycles"] == b["args"]["start_cycle"]
    assert sum(ev["args"]["dur_cycles"] for ev in evs) == rep.cycles_per_run
    # Each micro-batch runs the program once, its steps in order, with their own cycles.
    d = rep.device_iterations
    assert [ev["args"]["step"] for ev in evs] == list(range(len(rep.steps))) * d
    assert [ev["args"]["cycles"] for ev in evs] == [s.cycles for s in rep.steps] * d
    assert [ev["name"] for ev in evs] == [s.name for s in rep.steps] * d
    if rep.replication_factor == 1:
        assert sum(s.cycles for s in rep.steps) * d == rep.cycles_per_run
    first = evs[1]["args"]
    st = rep.steps[1]
    assert first["kind"] == st.kind and first["busiest_tile"] == st.tile and first["live_bytes"] == st.live_bytes
    assert first["terms"] == {t.name: t.cycles for t in st.terms}


def test_trace_of_two_pipelined_stages_follows_the_schedule_and_ends_at_the_estimate(runs):
    rep, _ = runs["pipelined"]
    assert rep.num_stages == 2 and rep.execution == "pipelined" and rep.device_iterations == 3
    trace = rep.to_trace()
    names = _check_trace_format(trace, rep)
    steps, mbs = _tracks(trace, names)
    assert sorted(steps) == ["IPU 0", "IPU 1"]
    for track in list(steps.values()) + list(mbs.values()):
        _no_overlap(track, rep.clock_hz)
    t = [x.interval_cycles for x in rep.estimate.stages]
    d = rep.device_iterations
    end = max(ev["args"]["start_cycle"] + ev["args"]["dur_cycles"] for v in steps.values() for ev in v)
    assert end == sum(t) + (d - 1) * max(t) == rep.estimate.cycles_per_call == rep.cycles_per_run
    # The schedule itself, from the micro-batch slices.
    start = {(names_ipu, ev["args"]["micro_batch"]): ev["args"]["start_cycle"]
             for names_ipu, v in mbs.items() for ev in v}
    fin = {}
    for i in range(d):
        for s in range(2):
            want = max(fin.get((s, i - 1), 0), fin.get((s - 1, i), 0))
            assert start[(f"IPU {s}", i)] == want
            fin[(s, i)] = want + t[s]
    for s in range(2):
        assert all(ev["args"]["dur_cycles"] == t[s] for ev in mbs[f"IPU {s}"])
        # A micro-batch's step slices fill its micro-batch slice exactly.
        assert sum(ev["args"]["dur_cycles"] for ev in steps[f"IPU {s}"]) == d * t[s]
    # Pipelining: IPU 0 works on micro-batch 1 while IPU 1 works on micro-batch 0.
    assert start[("IPU 0", 1)] < fin[(1, 0)]
    # The receiving stage's IPU-Link copies are drawn, with the estimate's cycles.
    copies = [ev for ev in steps["IPU 1"] if ev["cat"] == "ipu_link"]
    assert len(copies) == d and all(ev["args"]["dur_cycles"] == rep.estimate.stages[1].copy_cycles for ev in copies)


def test_trace_of_sharded_stages_takes_turns(runs):
    rep, _ = runs["sharded"]
    assert rep.execution == "sharded" and rep.num_stages == 2
    trace = rep.to_trace()
    names = _check_trace_format(trace, rep)
    steps, mbs = _tracks(trace, names)
    both = sorted((ev for v in mbs.values() for ev in v), key=lambda ev: ev["args"]["start_cycle"])
    _no_overlap(both, rep.clock_hz)  # one IPU at a time
    assert [(names[ev["pid"]], ev["args"]["micro_batch"]) for ev in both] == [
        ("IPU 0", 0), ("IPU 1", 0), ("IPU 0", 1), ("IPU 1", 1)]
    t = [x.interval_cycles for x in rep.estimate.stages]
    end = both[-1]["args"]["start_cycle"] + both[-1]["args"]["dur_cycles"]
    assert end == rep.device_iterations * sum(t) == rep.cycles_per_run


# -- the text summary -----------------------------------------------------------------


def test_summary_lists_plans_of_every_kind_memory_split_and_layers(runs):
    rep, _ = runs["cnn"]
    text = str(rep)
    for line in ("Target: 1 x ipu2", "Precision: float32", "IPU 0: 8 tiles used", "cycles per run",
                 "Matmul plans (1):"):
        assert line in text
    kinds = collections.Counter(p.kind for p in rep.plans)
    titles = {"matmul": "Matmul", "conv": "Conv", "pool": "Pool", "reduce": "Reduce", "map": "Map"}
    for kind, n in kinds.items():
        assert f"{titles[kind]} plans ({n}):" in text
    for p in rep.plans:
        assert f"  {p.name} (IPU {p.ipu}): {p.plan}" in text
    assert "always live" in text and "not always live" in text and "headroom on the busiest tile" in text
    busiest = max(rep.tiles, key=lambda t: t.total)
    assert f"tile {busiest.tile} at its peak" in text
    assert busiest.largest[0].name in text
    layers = collections.Counter()
    placed = {p.node for p in rep.placement}
    for st in rep.steps:
        if st.kind in COMPUTE and _node_of(st, placed):
            layers[_node_of(st, placed)] += st.cycles
    top_node, top_cycles = layers.most_common(1)[0]
    assert re.search(rf"Cycles per layer.*\n  {top_node} \(\w+, IPU 0\): {top_cycles:,} ", text)


def test_summary_cuts_long_lists(runs):
    rep, _ = runs["cnn"]
    text = rep.summary(top=1)
    n_map = sum(p.kind == "map" for p in rep.plans)
    block = re.search(rf"Map plans \({n_map}\):\n((?:  .*(?:\n|$))*)", text).group(1).splitlines()
    maps = [p for p in rep.plans if p.kind == "map"]
    assert block[-1] == f"  ... and {n_map - 1} more" and len(block) == 2
    assert block[0] in [f"  {p.name} (IPU {p.ipu}): {p.plan}" for p in maps]
    placed = {p.node for p in rep.placement}
    n_layers = len({_node_of(s, placed) for s in rep.steps if s.kind in COMPUTE} - {""})
    assert f"top 1 of {n_layers}" in text


# -- plots -------------------------------------------------------------------------------


def test_plots_are_pngs(runs, tmp_path):
    pytest.importorskip("matplotlib")
    had_pyplot = "matplotlib.pyplot" in sys.modules
    rep, _ = runs["pipelined"]
    paths = rep.save_plots(str(tmp_path / "plots"))
    assert [os.path.basename(p) for p in paths] == ["tile_memory.png", "liveness.png", "layer_cycles.png"]
    for p in paths:
        with open(p, "rb") as f:
            data = f.read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert had_pyplot or "matplotlib.pyplot" not in sys.modules, "plots must not go through pyplot"


def test_without_matplotlib_plots_say_how_to_install_it_and_html_still_draws(runs, monkeypatch, tmp_path):
    rep, run = runs["one"]
    for mod in ("matplotlib", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, mod, None)  # import fails
    with pytest.raises(ImportError, match=r"pip install neurenix-ipu\[plots\]"):
        rep.save_plots(str(tmp_path))
    page = rep.to_html()
    fig = re.search(r'<figure class="plot" id="tile-memory-plot">(.*?)</figure>', page, re.S).group(1)
    bars = {m[0]: (float(m[1]), float(m[2])) for m in re.findall(
        r'<rect id="(tm-ipu\d+-tile\d+-(?:not-)?always)" x="([\d.]+)" y="[\d.]+" width="[\d.]+" '
        r'height="([\d.]+)"', fig)}
    assert len(bars) == 2 * len(rep.tiles)
    scale = None
    for t in rep.tiles:
        (xa, ha), (xn, hn) = bars[f"tm-ipu{t.ipu}-tile{t.tile}-always"], bars[f"tm-ipu{t.ipu}-tile{t.tile}-not-always"]
        assert xa == xn
        # Bar heights in proportion to the native bytes, on one scale.
        scale = scale or ha / _native_always_live(t)
        assert ha == pytest.approx(scale * _native_always_live(t), abs=2e-3)
        assert hn == pytest.approx(scale * (t.variables - t.constants), abs=2e-3)
    # Fullest tile first.
    order = sorted(rep.tiles, key=lambda t: bars[f"tm-ipu{t.ipu}-tile{t.tile}-always"][0])
    assert [t.total for t in order] == sorted((t.total for t in rep.tiles), reverse=True)
    paths = rep.save(str(tmp_path / "out"), execution=run)
    assert not any(p.endswith(".png") for p in paths)


# -- HTML and save() ---------------------------------------------------------------------


def test_html_is_self_contained_and_complete(runs, tmp_path):
    rep, run = runs["pipelined"]
    path = tmp_path / "r.html"
    page = rep.to_html(str(path), execution=run)
    assert path.read_text(encoding="utf-8") == page
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page, re.I), "nothing is fetched"
    assert "@import" not in page and "url(http" not in page
    assert "Content-Security-Policy" in page
    for pid in ("tile-memory-plot", "liveness-plot", "layer-cycles-plot"):
        assert page.count(f'id="{pid}"') == 1
    for p in rep.plans:
        assert f"<td>{p.plan}</td>" in page.replace("&gt;", ">")
    for st in rep.steps:
        assert f"<td>{st.name.replace('>', '&gt;')}</td>" in page
    assert f"{run.cycles:,}" in page and f"{rep.cycles_per_run:,}" in page
    busiest = max(rep.tiles, key=lambda t: t.total)
    assert all(x.name in page for x in busiest.largest)


def test_save_writes_every_export(runs, tmp_path):
    rep, run = runs["pipelined"]
    out = tmp_path / "exports"
    paths = rep.save(str(out), execution=run)
    names = [os.path.basename(p) for p in paths]
    want = ["report.json", "trace.json", "summary.txt", "report.html"]
    try:
        import matplotlib  # noqa: F401

        want[3:3] = ["tile_memory.png", "liveness.png", "layer_cycles.png"]
    except ImportError:
        pass
    assert names == want and all(os.path.getsize(p) > 0 for p in paths)
    data = json.loads((out / "report.json").read_text())
    assert data["total_cycles"] == rep.cycles_per_run and data["execution"]["total_cycles"] == run.cycles
    assert json.loads((out / "trace.json").read_text())["traceEvents"]
    assert (out / "summary.txt").read_text() == str(rep) + "\n" + str(run) + "\n"
