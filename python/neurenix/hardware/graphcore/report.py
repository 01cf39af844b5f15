"""What compiling a model for the IPUs gives: memory per tile, plans,
estimated cycles and throughput (the run's report: ``report_execution.py``).

The records inside the reports come straight from the native core
(:class:`TileMemory`, :class:`OpPlan`, :class:`StepCost`,
:class:`SystemInfo`; see ``neurenix/_native.pyi``). One report object gives
every view of them: ``str(report)`` (a text summary), :meth:`CompileReport.to_dict`
and :meth:`~CompileReport.to_json` (plain data), :meth:`~CompileReport.to_trace`
(a Perfetto timeline, ``report_trace.py``), :meth:`~CompileReport.save_plots`
(PNG plots, ``report_plots.py``), :meth:`~CompileReport.to_html` (one
self-contained page, ``report_html.py``) and :meth:`~CompileReport.save` (all
of them in a directory). ``docs/reports.md`` describes each, field by field.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from neurenix._native import (
    CarriedTensor,
    OpPlan,
    PipelineEstimate,
    StageEstimate,
    StepCost,
    SystemInfo,
    TileMemory,
    Variable,
)

__all__ = [
    "CompileReport",
    "ExecutionReport",
    "Placement",
    "OpPlan",
    "StepCost",
    "SystemInfo",
    "TileMemory",
    "PipelineEstimate",
    "StageEstimate",
    "CarriedTensor",
]


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _seconds(s: float) -> str:
    """A duration with a unit that suits it."""
    if s < 1e-3:
        return f"{s * 1e6:,.1f} us"
    if s < 1:
        return f"{s * 1e3:,.2f} ms"
    return f"{s:,.3f} s"


def _finite(x: float) -> Optional[float]:
    """``x`` as JSON allows it: None for infinities and NaN."""
    x = float(x)
    return x if math.isfinite(x) else None


def _record(obj: Any) -> Dict[str, Any]:
    """A native record's public fields (its data attributes) as a dict."""
    out: Dict[str, Any] = {}
    for k in dir(obj):
        if k.startswith("_"):
            continue
        v = getattr(obj, k)
        if not callable(v):
            out[k] = v
    return out


def tile_always_live(t: TileMemory) -> int:
    """Bytes of tile ``t`` that are live for the whole program: constants,
    vertex state, code, exchange and control code."""
    return t.constants + t.vertex_state + t.code + t.exchange_code + t.control_code


def tile_not_always_live(t: TileMemory) -> int:
    """Bytes of tile ``t`` that are live only part of the program
    (activations and temporaries at the tile's peak)."""
    return t.variables - t.constants


def tile_largest(t: TileMemory) -> List[Dict[str, Any]]:
    """The largest variables live at tile ``t``'s peak, largest first."""
    return [{"name": x.name, "node": x.node, "bytes": int(x.bytes)} for x in t.largest]


def step_terms(step: StepCost) -> List[Dict[str, Any]]:
    """The terms of a step's cost formula; they sum to its cycles."""
    return [{"kind": x.kind, "name": x.name, "cycles": int(x.cycles)} for x in step.terms]


class Placement(NamedTuple):
    """Where the sharder put one node: its name, operator and IPU."""

    node: str
    op_type: str
    ipu: int


@dataclass
class CompileReport:
    """The compile report. ``str(report)`` is a readable summary.

    IPU numbers here are those of a replica (0 .. stages - 1), whichever
    physical IPUs the manager attaches; the :class:`ExecutionReport` names
    the physical ones. Memory figures (``tiles``, ``max_tile_memory``,
    ``total_memory``, ``memory_per_ipu``) are one replica's: every replica
    holds the same. ``steps`` are the programs' own; tensors carried between
    stages are IPU-Link copies, costed in ``estimate``. Tiles, plans and steps of pipeline stage ``s`` are on
    IPU ``s``; ``estimate`` gives each stage's cycles per micro-batch and the
    whole call's (``cycles_per_run``).
    """

    system: SystemInfo
    num_ipus: int
    precision: str
    memory_proportion: float
    enable_half_partials: bool
    compile_seconds: float
    passes: Dict[str, int]
    placement: List[Placement]
    plans: List[OpPlan]
    warnings: List[str]
    tiles: List[TileMemory]
    steps: List[StepCost]
    cycles_per_run: int
    estimate: PipelineEstimate
    #: Every variable of every stage's program, with its device element type.
    variables: List[Variable] = field(default_factory=list)
    micro_batch_size: int = 1
    replication_factor: int = 1
    device_iterations: int = 1
    #: The float8 format of matmul/conv operands (meaningful under precision "float8").
    fp8_format: str = "e4m3"

    def precision_label(self) -> str:
        """The precision as the summary and the HTML report name it, e.g.
        "float16, half partials" or "float8 (e4m3 operands, half partials)"."""
        if self.precision == "float8":
            return f"float8 ({self.fp8_format} operands, half partials)"
        if self.enable_half_partials and self.precision != "float32":
            return f"{self.precision}, half partials"
        return self.precision

    @classmethod
    def from_executable(cls, exe: Any, micro_batch_size: int) -> "CompileReport":
        """The report of a native ``Executable``."""
        p = exe.passes
        return cls(
            system=exe.system_info,
            num_ipus=exe.num_ipus,
            precision=exe.precision,
            memory_proportion=exe.memory_proportion,
            enable_half_partials=exe.enable_half_partials,
            fp8_format=exe.fp8_format,
            compile_seconds=exe.compile_seconds,
            passes={k: getattr(p, k) for k in ("nodes_in", "folded", "dead", "fused", "nodes_out")},
            placement=[Placement(x.node, x.op_type, x.ipu) for x in exe.placement],
            plans=list(exe.plans),
            warnings=list(exe.warnings),
            tiles=list(exe.tiles),
            steps=list(exe.steps),
            cycles_per_run=exe.cycles_per_run,
            estimate=exe.estimate,
            variables=list(exe.variables),
            micro_batch_size=micro_batch_size,
            replication_factor=exe.replication_factor,
            device_iterations=exe.device_iterations,
        )

    @property
    def batch_size(self) -> int:
        """Samples of one run: micro-batch x device iterations x replicas."""
        return self.micro_batch_size * self.device_iterations * self.replication_factor

    @property
    def num_stages(self) -> int:
        return len(self.estimate.stages)

    @property
    def execution(self) -> str:
        return self.estimate.execution

    @property
    def interval_cycles(self) -> int:
        """Steady state: cycles between micro-batches leaving a replica (the
        slowest stage when pipelined, all stages in turn when sharded)."""
        return self.estimate.interval_cycles

    @property
    def latency_seconds(self) -> float:
        """One micro-batch through all stages."""
        return sum(s.interval_cycles for s in self.estimate.stages) / self.clock_hz

    @property
    def bytes_per_tile(self) -> int:
        return int(self.system.bytes_per_tile)

    @property
    def clock_hz(self) -> float:
        return float(self.system.clock_hz)

    @property
    def max_tile_memory(self) -> int:
        return max((t.total for t in self.tiles), default=0)

    @property
    def total_memory(self) -> int:
        return sum(t.total for t in self.tiles)

    @property
    def estimated_seconds(self) -> float:
        """Device time of one run (one batch), from the cycle estimate."""
        return self.cycles_per_run / self.clock_hz

    @property
    def estimated_throughput(self) -> float:
        """Samples per second on the device in the steady state: every
        replica's micro-batch per interval (pipelined), or per pass over the
        stages (sharded)."""
        s = self.interval_cycles / self.clock_hz
        return self.micro_batch_size * self.replication_factor / s if s > 0 else float("inf")

    @property
    def call_throughput(self) -> float:
        """Samples per second of one call, pipeline fill and drain included."""
        s = self.estimated_seconds
        return self.batch_size / s if s > 0 else float("inf")

    @property
    def ipus_per_replica(self) -> int:
        """IPUs of one replica (the pipeline stages, and any IPU a plan leaves unused)."""
        return max(1, self.num_ipus // max(1, self.replication_factor))

    @property
    def latency_cycles(self) -> int:
        """One micro-batch through all stages."""
        return sum(s.interval_cycles for s in self.estimate.stages)

    def memory_per_ipu(self) -> List[Dict[str, Any]]:
        """One entry per IPU of a replica: tiles used, total bytes, the
        busiest tile and its headroom (capacity - used), the always-live /
        not-always-live split, bytes by category and the tile balance."""
        cap = self.bytes_per_tile
        out = []
        for ipu in range(self.ipus_per_replica):
            ts = [t for t in self.tiles if t.ipu == ipu]
            top = max(ts, key=lambda t: t.total, default=None)
            total = sum(t.total for t in ts)
            mean = total / len(ts) if ts else 0.0
            out.append(
                {
                    "ipu": ipu,
                    "tiles_used": len(ts),
                    "total_bytes": total,
                    "max_tile_bytes": top.total if top else 0,
                    "max_tile": top.tile if top else None,
                    "headroom_bytes": cap - (top.total if top else 0),
                    "always_live_bytes": sum(tile_always_live(t) for t in ts),
                    "not_always_live_bytes": sum(tile_not_always_live(t) for t in ts),
                    "by_category": {
                        k: sum(getattr(t, k) for t in ts)
                        for k in _TILE_CATEGORIES
                    },
                    "min_tile_bytes": min((t.total for t in ts), default=0),
                    "mean_tile_bytes": mean,
                    "max_over_mean": (top.total / mean) if top and mean > 0 else None,
                }
            )
        return out

    def busiest_tiles(self, per_ipu: int = 3) -> List[TileMemory]:
        """The ``per_ipu`` fullest tiles of each IPU, fullest first within an IPU."""
        out: List[TileMemory] = []
        for ipu in range(self.ipus_per_replica):
            ts = sorted((t for t in self.tiles if t.ipu == ipu), key=lambda t: (-t.total, t.tile))
            out += ts[:per_ipu]
        return out

    def cycles_by_kind(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for s in self.steps:
            out[s.kind] = out.get(s.kind, 0) + s.cycles
        return out

    def cycles_by_term(self) -> Dict[str, int]:
        """Cycles of the programs' steps by the kind of cost-formula term
        (``CostTerm.kind``): vertex work, vertex launches, syncs, exchanged
        bytes, copy descriptors, IPU-Links, host-stream latency and host-link
        bytes. Sums to the steps' cycles."""
        out: Dict[str, int] = {}
        for s in self.steps:
            for t in s.terms:
                out[t.kind] = out.get(t.kind, 0) + t.cycles
        return out

    def step_nodes(self) -> List[str]:
        """The ONNX node each step lowers, in step order (``""`` for host
        streams)."""
        return [s.node for s in self.steps]

    def cycles_per_layer(self) -> List[Dict[str, Any]]:
        """Compute and exchange cycles summed per ONNX node (one run of each
        stage's program, i.e. one micro-batch), most cycles first:
        ``{"node", "op_type", "ipu", "cycles", "by_kind": {"compute", "exchange"},
        "steps", "plans"}``. Steps of no node are in :meth:`unattributed_cycles`."""
        op_type = {p.node: (p.op_type, p.ipu) for p in self.placement}
        order = {p.node: i for i, p in enumerate(self.placement)}
        plans: Dict[str, List[str]] = {}
        for o in self.plans:
            plans.setdefault(o.name, [])
            if o.kind not in plans[o.name]:
                plans[o.name].append(o.kind)
        layers: Dict[str, Dict[str, Any]] = {}
        for s, node in zip(self.steps, self.step_nodes()):
            if not node or s.kind not in ("compute", "exchange"):
                continue
            if node not in layers:
                ot, ipu = op_type.get(node, ("", s.ipu))
                layers[node] = {
                    "node": node,
                    "op_type": ot,
                    "ipu": ipu,
                    "cycles": 0,
                    "by_kind": {"compute": 0, "exchange": 0},
                    "steps": 0,
                    "plans": plans.get(node, []),
                }
            e = layers[node]
            e["cycles"] += s.cycles
            e["by_kind"][s.kind] += s.cycles
            e["steps"] += 1
        return sorted(layers.values(), key=lambda e: (-e["cycles"], order.get(e["node"], len(order))))

    def unattributed_cycles(self) -> Dict[str, int]:
        """Compute and exchange cycles of steps that belong to no node."""
        out = {"compute": 0, "exchange": 0}
        for s, node in zip(self.steps, self.step_nodes()):
            if not node and s.kind in out:
                out[s.kind] += s.cycles
        return out

    def liveness(self) -> List[Dict[str, Any]]:
        """Bytes of variables live on each IPU during each of its steps:
        ``{"ipu", "step_index" (indices into ``steps``), "live_bytes",
        "peak_live_bytes", "peak_step"}`` per IPU of a replica."""
        out = []
        for ipu in range(self.ipus_per_replica):
            idx = [i for i, s in enumerate(self.steps) if s.ipu == ipu]
            live = [self.steps[i].live_bytes for i in idx]
            peak = max(range(len(live)), key=lambda k: live[k], default=None)
            out.append(
                {
                    "ipu": ipu,
                    "step_index": idx,
                    "live_bytes": live,
                    "peak_live_bytes": live[peak] if peak is not None else None,
                    "peak_step": idx[peak] if peak is not None else None,
                }
            )
        return out

    def to_dict(self) -> Dict[str, Any]:
        """The whole report as JSON-safe plain data (see ``docs/reports.md``).
        ``total_cycles`` is one run's cycles, exactly ``cycles_per_run``."""
        e = self.estimate
        nodes = self.step_nodes()
        return {
            "report": "compile",
            "format_version": REPORT_FORMAT_VERSION,
            "system": _record(self.system),
            "options": {
                "num_ipus": self.num_ipus,
                "ipus_per_replica": self.ipus_per_replica,
                "replication_factor": self.replication_factor,
                "device_iterations": self.device_iterations,
                "micro_batch_size": self.micro_batch_size,
                "batch_size": self.batch_size,
                "execution": e.execution,
                "precision": self.precision,
                "memory_proportion": self.memory_proportion,
                "enable_half_partials": self.enable_half_partials,
                "fp8_format": self.fp8_format,
            },
            "graph": {
                "passes": dict(self.passes),
                "compile_seconds": self.compile_seconds,
                "placement": [{"node": p.node, "op_type": p.op_type, "ipu": p.ipu} for p in self.placement],
            },
            "warnings": list(self.warnings),
            "memory": {
                "bytes_per_tile": self.bytes_per_tile,
                "total_bytes": self.total_memory,
                "max_tile_bytes": self.max_tile_memory,
                "ipus": self.memory_per_ipu(),
                "tiles": [
                    {
                        "ipu": t.ipu,
                        "tile": t.tile,
                        "total": t.total,
                        "variables": t.variables,
                        "constants": t.constants,
                        "vertex_state": t.vertex_state,
                        "code": t.code,
                        "exchange_code": t.exchange_code,
                        "control_code": t.control_code,
                        "always_live": tile_always_live(t),
                        "not_always_live": tile_not_always_live(t),
                        "headroom": self.bytes_per_tile - t.total,
                        "largest": tile_largest(t),
                    }
                    for t in self.tiles
                ],
            },
            "liveness": self.liveness(),
            "element_types": self.element_types(),
            "variables": [
                {
                    "ipu": v.ipu,
                    "name": v.name,
                    "node": v.node,
                    "kind": v.kind,
                    "device_type": v.device_type,
                    "shape": list(v.shape),
                    "tiles": v.tiles,
                }
                for v in self.variables
            ],
            "casts": self.casts(),
            "plans": [
                {
                    "name": o.name,
                    "kind": o.kind,
                    "ipu": o.ipu,
                    "plan": o.plan,
                    "tiles_used": o.tiles_used,
                    "temp_bytes_per_tile": o.temp_bytes_per_tile,
                    "estimated_cycles": o.estimated_cycles,
                }
                for o in self.plans
            ],
            "steps": [
                {
                    "index": i,
                    "ipu": s.ipu,
                    "kind": s.kind,
                    "name": s.name,
                    "node": node,
                    "cycles": s.cycles,
                    "bytes": s.bytes,
                    "items": s.items,
                    "tile": s.tile,
                    "live_bytes": s.live_bytes,
                    "terms": step_terms(s),
                }
                for i, (s, node) in enumerate(zip(self.steps, nodes))
            ],
            "cycles_by_kind": self.cycles_by_kind(),
            "cycles_by_term": self.cycles_by_term(),
            "layers": self.cycles_per_layer(),
            "unattributed_cycles": self.unattributed_cycles(),
            "estimate": {
                "execution": e.execution,
                "replicas": e.replicas,
                "device_iterations": e.device_iterations,
                "fill_cycles": e.fill_cycles,
                "interval_cycles": e.interval_cycles,
                "cycles_per_call": e.cycles_per_call,
                "attempts": e.attempts,
                "stages": [
                    {
                        "ipu": st.ipu,
                        "nodes": st.nodes,
                        "compute_cycles": st.compute_cycles,
                        "host_cycles": st.host_cycles,
                        "copy_cycles": st.copy_cycles,
                        "interval_cycles": st.interval_cycles,
                        "carried_in": [
                            {"name": c.name, "bytes": c.bytes, "from_ipu": c.from_ipu} for c in st.carried_in
                        ],
                        "max_tile_bytes": st.max_tile_bytes,
                        "memory_bytes": st.memory_bytes,
                    }
                    for st in e.stages
                ],
            },
            "total_cycles": self.cycles_per_run,
            "cycles_per_run": self.cycles_per_run,
            "seconds_per_run": self.estimated_seconds,
            "interval_cycles": self.interval_cycles,
            "latency_cycles": self.latency_cycles,
            "latency_seconds": self.latency_seconds,
            "throughput_samples_per_second": _finite(self.estimated_throughput),
            "call_throughput_samples_per_second": _finite(self.call_throughput),
        }

    def to_json(self, path: Optional[str] = None, indent: Optional[int] = 1) -> str:
        """:meth:`to_dict` as JSON text; also written to ``path`` when given."""
        return _dump_json(self.to_dict(), path, indent)

    def to_trace(self, path: Optional[str] = None) -> Dict[str, Any]:
        """A Perfetto / Chrome trace-event timeline of one run: one process per
        IPU of a replica, each step a slice, micro-batches laid out by the
        pipeline schedule (``report_trace.py``). Written to ``path`` as JSON
        when given; open it in ui.perfetto.dev."""
        from .report_trace import build_trace

        trace = build_trace(self)
        if path is not None:
            _dump_json(trace, path, None)
        return trace

    def save_plots(self, directory: str) -> List[str]:
        """Writes the PNG plots (tile memory, liveness, cycles per layer) into
        ``directory``; returns their paths. Needs matplotlib
        (``pip install neurenix-ipu[plots]``)."""
        from .report_plots import save_plots

        return save_plots(self, directory)

    def to_html(self, path: Optional[str] = None, execution: Optional["ExecutionReport"] = None) -> str:
        """One self-contained HTML page (inline plots and tables, no network,
        no scripts); also written to ``path`` when given. ``execution``: a
        run's :class:`ExecutionReport` to show beside the estimate."""
        from .report_html import render_html

        page = render_html(self, execution=execution)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(page)
        return page

    def save(self, directory: str, execution: Optional["ExecutionReport"] = None) -> List[str]:
        """Writes every export into ``directory`` (created if needed):
        ``report.json`` (with ``"execution"`` when a run is given),
        ``trace.json``, ``summary.txt``, the PNG plots when matplotlib is
        installed, and ``report.html``. Returns the paths written."""
        os.makedirs(directory, exist_ok=True)
        paths = []
        data = self.to_dict()
        if execution is not None:
            data["execution"] = execution.to_dict()
        p = os.path.join(directory, "report.json")
        _dump_json(data, p, 1)
        paths.append(p)
        p = os.path.join(directory, "trace.json")
        self.to_trace(p)
        paths.append(p)
        p = os.path.join(directory, "summary.txt")
        with open(p, "w", encoding="utf-8") as f:
            f.write(str(self) + "\n" + (str(execution) + "\n" if execution is not None else ""))
        paths.append(p)
        from .report_plots import have_matplotlib

        if have_matplotlib():
            paths += self.save_plots(directory)
        p = os.path.join(directory, "report.html")
        self.to_html(p, execution=execution)
        paths.append(p)
        return paths

    def __str__(self) -> str:
        return self.summary()

    def element_types(self) -> Dict[str, Dict[str, int]]:
        """Variables by device element type: ``{type: {"variables", "elements"}}``."""
        out: Dict[str, Dict[str, int]] = {}
        for v in self.variables:
            e = out.setdefault(v.device_type, {"variables": 0, "elements": 0})
            e["variables"] += 1
            e["elements"] += int(math.prod(v.shape))
        return out

    def casts(self) -> List[Dict[str, Any]]:
        """Where the compiler inserted element type conversions (the
        precision policy's, e.g. half to float32 in front of a softmax under
        ``mixed``, and the model's own Cast nodes): ``{"node", "ipu",
        "casts"}`` per operation that makes them."""
        out = []
        for o in self.plans:
            if o.kind == "map" and "; casts to " in o.plan:
                # The plan's text goes on after the casts ("; operand 1 repeated ...").
                casts = o.plan.split("; casts to ", 1)[1].split("; ", 1)[0]
                out.append({"node": o.name, "ipu": o.ipu, "casts": casts})
        return out

    def summary(self, top: int = 8) -> str:
        """The text summary (``str(report)``); ``top``: lines per list before
        "... and N more"."""
        s = self.system
        cap = self.bytes_per_tile
        lines = [
            f"Target: {self.num_ipus} x {s.version} ({s.chip}), {s.tiles_per_ipu} tiles x "
            f"{_bytes(s.bytes_per_tile)}, {s.clock_hz / 1e9:.2f} GHz (simulator)",
            f"Precision: {self.precision_label()}"
            + f"; memory proportion {self.memory_proportion:g}",
            f"Graph: {self.passes['nodes_in']} nodes in, {self.passes['folded']} folded, "
            f"{self.passes['fused']} fused, {self.passes['dead']} dead, {self.passes['nodes_out']} on device; "
            f"compiled in {self.compile_seconds:.2f} s",
        ]
        types = self.element_types()
        if types:
            lines.append(
                "Element types: "
                + ", ".join(f"{t} {e['variables']} variable(s) ({e['elements']:,} elements)" for t, e in types.items())
            )
        casts = self.casts()
        if casts:
            shown = ", ".join(f"{c['node']} ({c['casts']})" for c in casts[:top])
            more = f", ... and {len(casts) - top} more" if len(casts) > top else ""
            lines.append(f"Casts inserted: {shown}{more}")
        busiest = {t.ipu: t for t in self.busiest_tiles(per_ipu=1)}
        for m in self.memory_per_ipu():
            if m["tiles_used"] == 0:
                lines.append(f"IPU {m['ipu']}: unused")
                continue
            lines.append(
                f"IPU {m['ipu']}: {m['tiles_used']} tiles used, {_bytes(m['total_bytes'])} total, busiest tile "
                f"{m['max_tile']} at {_bytes(m['max_tile_bytes'])} "
                f"({100.0 * m['max_tile_bytes'] / cap:.1f}% of {_bytes(cap)})"
            )
            c = m["by_category"]
            lines.append(
                f"  always live {_bytes(m['always_live_bytes'])} (constants {_bytes(c['constants'])}, code "
                f"{_bytes(c['code'])}, vertex state {_bytes(c['vertex_state'])}, exchange and control code "
                f"{_bytes(c['exchange_code'] + c['control_code'])}), not always live "
                f"{_bytes(m['not_always_live_bytes'])}; headroom on the busiest tile "
                f"{_bytes(m['headroom_bytes'])}"
                + (f"; busiest / mean tile {m['max_over_mean']:.2f}" if m["max_over_mean"] else "")
            )
            t = busiest.get(m["ipu"])
            big = tile_largest(t) if t is not None else []
            if t is not None and big:
                shown = ", ".join(
                    f"{x['name']}" + (f" ({x['node']})" if x["node"] else "") + f" {_bytes(x['bytes'])}"
                    for x in big[:5]
                )
                more = f", ... and {len(big) - 5} more" if len(big) > 5 else ""
                lines.append(f"  tile {t.tile} at its peak: always live {_bytes(tile_always_live(t))}, "
                             f"not always live {_bytes(tile_not_always_live(t))}; largest: {shown}{more}")
        kinds = self.cycles_by_kind()
        e = self.estimate
        if self.num_stages > 1 or self.replication_factor > 1 or self.device_iterations > 1:
            lines.append(
                f"Execution: {e.execution}, {self.num_stages} stage(s) per replica x {self.replication_factor} "
                f"replica(s), {self.device_iterations} device iteration(s) of micro-batch {self.micro_batch_size}"
            )
        for st in e.stages if self.num_stages > 1 else []:
            carried = sum(c.bytes for c in st.carried_in)
            lines.append(
                f"  stage {st.ipu}: {st.nodes} nodes, {st.interval_cycles:,} cycles per micro-batch (compute "
                f"{st.compute_cycles:,}, host I/O {st.host_cycles:,}, IPU-Link copies {st.copy_cycles:,} for "
                f"{_bytes(carried)} in)"
            )
        lines.append(
            f"Estimated: {self.cycles_per_run:,} cycles per run ({self.estimated_seconds * 1e6:,.1f} us), "
            f"{self.estimated_throughput:,.0f} samples/s in the steady state ({self.batch_size} samples per run)"
        )
        lines.append(
            "  " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
        )
        lines.append(
            f"  latency of one micro-batch through {self.num_stages} stage(s): {self.latency_cycles:,} cycles "
            f"({self.latency_seconds * 1e6:,.1f} us)"
        )
        layers = self.cycles_per_layer()
        if layers:
            lines.append(f"Cycles per layer, one micro-batch (top {min(top, len(layers))} of {len(layers)}):")
            for x in layers[:top]:
                k = x["by_kind"]
                lines.append(
                    f"  {x['node']} ({x['op_type'] or '?'}, IPU {x['ipu']}): {x['cycles']:,} "
                    f"(compute {k['compute']:,}, exchange {k['exchange']:,})"
                )
            if len(layers) > top:
                rest = sum(x["cycles"] for x in layers[top:])
                lines.append(f"  ... and {len(layers) - top} more ({rest:,} cycles)")
        layer_cycles = {x["node"]: x["cycles"] for x in layers}
        by_kind: Dict[str, List[Tuple[int, OpPlan]]] = {}
        for i, o in enumerate(self.plans):
            by_kind.setdefault(o.kind, []).append((i, o))
        for kind in sorted(by_kind, key=_plan_kind_order):
            ops = sorted(
                by_kind[kind],
                key=lambda io: (-io[1].estimated_cycles, -layer_cycles.get(io[1].name, 0), io[0]),
            )
            lines.append(f"{_PLAN_TITLES.get(kind, kind.replace('_', ' ').capitalize())} plans ({len(ops)}):")
            for _, o in ops[:top]:
                lines.append(f"  {o.name} (IPU {o.ipu}): {o.plan}")
            if len(ops) > top:
                lines.append(f"  ... and {len(ops) - top} more")
        for w in self.warnings:
            lines.append(f"Warning: {w}")
        return "\n".join(lines)


REPORT_FORMAT_VERSION = 1

_TILE_CATEGORIES = ("variables", "constants", "vertex_state", "code", "exchange_code", "control_code")
_PLAN_KINDS = ("matmul", "conv", "pool", "reduce", "gather", "map", "rearrange", "ipu_copy")
_PLAN_TITLES = {"matmul": "Matmul", "conv": "Conv", "pool": "Pool", "reduce": "Reduce", "gather": "Gather",
                "map": "Map", "rearrange": "Rearrange", "ipu_copy": "IPU copy"}


def _plan_kind_order(kind: str) -> Tuple[int, str]:
    return (_PLAN_KINDS.index(kind) if kind in _PLAN_KINDS else len(_PLAN_KINDS), kind)


def _dump_json(data: Any, path: Optional[str], indent: Optional[int]) -> str:
    text = json.dumps(data, indent=indent, allow_nan=False)
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return text


# The run's report lives in its own module and uses the helpers above.
from .report_execution import ExecutionReport  # noqa: E402
