"""What one run on the simulated IPUs did: its estimated device cycles, the
bytes it moved, and the simulation's own host time (by kind of step and by
step). ``docs/reports.md`` describes each field; :class:`CompileReport`
(``report.py``) is the compiled model's side.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from .report import REPORT_FORMAT_VERSION, _bytes, _dump_json, _finite

if TYPE_CHECKING:  # pragma: no cover
    from .report import CompileReport

__all__ = ["ExecutionReport"]


@dataclass
class ExecutionReport:
    """One run on the simulated IPUs."""

    cycles: int
    compute_cycles: int
    exchange_cycles: int
    host_cycles: int
    steps: int
    exchanged_bytes: int
    host_bytes: int
    wall_seconds: float
    host_memory_bytes: int
    clock_hz: float
    batch_size: int = 1
    # Host time of the simulation by kind of step (an exchange the simulator
    # fuses with the compute set after it counts as compute).
    compute_seconds: float = 0.0
    exchange_seconds: float = 0.0
    host_io_seconds: float = 0.0
    # The program's memory bounds were verified at load (checked mode).
    checked: bool = False
    # The physical IPUs of the attached device (replica r's stage s on
    # ipus[r * num_ipus / replication_factor + s]).
    ipus: Optional[List[int]] = None
    # Of exchanged_bytes, what the simulator itself copied between tile
    # memories; its vertices read the rest where it was sent from (receive
    # aliases, docs/architecture.md). Simulator work, not device traffic.
    copied_bytes: int = 0
    # Host time by step of the compile report's ``steps`` (summed over the
    # run's micro-batches and replicas; a fused exchange's time is its
    # compute step's): where the simulation spends its time.
    step_seconds: List[float] = field(default_factory=list)
    # Of host_memory_bytes, the shadow regions: where the simulator keeps the
    # temporaries a fused exchange delivers to one compute step, reused
    # by a range of tiles (docs/architecture.md). Host memory, not device.
    host_shadow_bytes: int = 0

    @classmethod
    def from_run_stats(cls, s: Any, clock_hz: float, batch_size: int) -> "ExecutionReport":
        """The report of a native ``RunStats``."""
        return cls(
            cycles=s.cycles,
            compute_cycles=s.compute_cycles,
            exchange_cycles=s.exchange_cycles,
            host_cycles=s.host_cycles,
            steps=s.steps,
            exchanged_bytes=s.exchanged_bytes,
            host_bytes=s.host_bytes,
            wall_seconds=s.wall_seconds,
            host_memory_bytes=s.host_memory_bytes,
            clock_hz=clock_hz,
            batch_size=batch_size,
            compute_seconds=s.compute_seconds,
            exchange_seconds=s.exchange_seconds,
            host_io_seconds=s.host_io_seconds,
            checked=s.checked,
            copied_bytes=s.copied_bytes,
            step_seconds=list(s.step_seconds),
            host_shadow_bytes=s.host_shadow_bytes,
        )

    @classmethod
    def combined(cls, runs: List["ExecutionReport"]) -> "ExecutionReport":
        """Runs one after another (a training call's micro-batches) as one:
        cycles, bytes and times summed, batch sizes added."""
        first = runs[0]
        if len({len(r.step_seconds) for r in runs}) > 1:
            raise ValueError("runs of different programs cannot be combined: their steps differ")
        total = lambda f: sum(getattr(r, f) for r in runs)  # noqa: E731
        return cls(
            cycles=total("cycles"), compute_cycles=total("compute_cycles"), exchange_cycles=total("exchange_cycles"),
            host_cycles=total("host_cycles"), steps=total("steps"), exchanged_bytes=total("exchanged_bytes"),
            host_bytes=total("host_bytes"), wall_seconds=total("wall_seconds"),
            host_memory_bytes=max(r.host_memory_bytes for r in runs), clock_hz=first.clock_hz,
            batch_size=total("batch_size"), compute_seconds=total("compute_seconds"),
            exchange_seconds=total("exchange_seconds"), host_io_seconds=total("host_io_seconds"),
            checked=all(r.checked for r in runs), ipus=first.ipus, copied_bytes=total("copied_bytes"),
            step_seconds=[sum(t) for t in zip(*(r.step_seconds for r in runs))] if runs[0].step_seconds else [],
            host_shadow_bytes=max(r.host_shadow_bytes for r in runs),
        )

    @property
    def estimated_seconds(self) -> float:
        return self.cycles / self.clock_hz

    def host_seconds_per_layer(self, report: "CompileReport") -> List[Dict[str, Any]]:
        """The simulation's host time summed per ONNX node (``report``: the
        compiled model's), most first: ``{"node", "op_type", "seconds",
        "by_kind": {"compute", "exchange"}, "steps"}``. Host streams and
        steps of no node are left out (``host_io_seconds`` has the streams)."""
        if len(self.step_seconds) != len(report.steps):
            raise ValueError(
                f"this run has host times for {len(self.step_seconds)} steps, the report lists "
                f"{len(report.steps)}: pass the report of the model that ran"
            )
        op_type = {p.node: p.op_type for p in report.placement}
        layers: Dict[str, Dict[str, Any]] = {}
        for s, t in zip(report.steps, self.step_seconds):
            if not s.node or s.kind not in ("compute", "exchange"):
                continue
            e = layers.setdefault(s.node, {"node": s.node, "op_type": op_type.get(s.node, ""), "seconds": 0.0,
                                           "by_kind": {"compute": 0.0, "exchange": 0.0}, "steps": 0})
            e["seconds"] += t
            e["by_kind"][s.kind] += t
            e["steps"] += 1
        return sorted(layers.values(), key=lambda e: -e["seconds"])

    @property
    def samples_per_second(self) -> float:
        s = self.estimated_seconds
        return self.batch_size / s if s > 0 else float("inf")

    def to_dict(self) -> Dict[str, Any]:
        """The run as JSON-safe plain data: every field, plus ``total_cycles``
        (exactly ``cycles``), ``estimated_seconds`` and ``samples_per_second``."""
        d: Dict[str, Any] = {"report": "execution", "format_version": REPORT_FORMAT_VERSION}
        d.update(dataclasses.asdict(self))
        d["ipus"] = list(self.ipus) if self.ipus is not None else None
        d["total_cycles"] = self.cycles
        d["estimated_seconds"] = self.estimated_seconds
        d["samples_per_second"] = _finite(self.samples_per_second)
        return d

    def to_json(self, path: Optional[str] = None, indent: Optional[int] = 1) -> str:
        """:meth:`to_dict` as JSON text; also written to ``path`` when given."""
        return _dump_json(self.to_dict(), path, indent)

    def __str__(self) -> str:
        return (
            f"Run: {self.cycles:,} cycles ({self.estimated_seconds * 1e6:,.1f} us on the device, "
            f"{self.samples_per_second:,.0f} samples/s): compute {self.compute_cycles:,}, exchange "
            f"{self.exchange_cycles:,}, host I/O {self.host_cycles:,}; {self.steps} BSP steps, "
            f"{_bytes(self.exchanged_bytes)} exchanged; simulated in {self.wall_seconds * 1e3:,.1f} ms "
            f"(compute {self.compute_seconds * 1e3:,.1f}, exchange {self.exchange_seconds * 1e3:,.1f}, "
            f"host I/O {self.host_io_seconds * 1e3:,.1f}) using {_bytes(self.host_memory_bytes)} of host memory "
            "for tiles"
            + (f"; on IPU{'s' if len(self.ipus) > 1 else ''} {', '.join(map(str, self.ipus))}" if self.ipus else "")
        )
