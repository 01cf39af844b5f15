"""What compiling and running a model on the IPUs did: memory per tile, plans,
estimated cycles and throughput.

The records inside the reports come straight from the native core
(:class:`TileMemory`, :class:`OpPlan`, :class:`StepCost`,
:class:`SystemInfo`; see ``neurenix/_native.pyi``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, NamedTuple, Optional

from neurenix._native import CarriedTensor, OpPlan, PipelineEstimate, StageEstimate, StepCost, SystemInfo, TileMemory

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
    micro_batch_size: int = 1
    replication_factor: int = 1
    device_iterations: int = 1

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
            compile_seconds=exe.compile_seconds,
            passes={k: getattr(p, k) for k in ("nodes_in", "folded", "dead", "fused", "nodes_out")},
            placement=[Placement(x.node, x.op_type, x.ipu) for x in exe.placement],
            plans=list(exe.plans),
            warnings=list(exe.warnings),
            tiles=list(exe.tiles),
            steps=list(exe.steps),
            cycles_per_run=exe.cycles_per_run,
            estimate=exe.estimate,
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

    def memory_per_ipu(self) -> List[Dict[str, Any]]:
        """One entry per IPU of a replica."""
        out = []
        for ipu in range(self.num_ipus // self.replication_factor):
            ts = [t for t in self.tiles if t.ipu == ipu]
            top = max(ts, key=lambda t: t.total, default=None)
            out.append(
                {
                    "ipu": ipu,
                    "tiles_used": len(ts),
                    "total_bytes": sum(t.total for t in ts),
                    "max_tile_bytes": top.total if top else 0,
                    "max_tile": top.tile if top else None,
                }
            )
        return out

    def cycles_by_kind(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for s in self.steps:
            out[s.kind] = out.get(s.kind, 0) + s.cycles
        return out

    def __str__(self) -> str:
        s = self.system
        lines = [
            f"Target: {self.num_ipus} x {s.version} ({s.chip}), {s.tiles_per_ipu} tiles x "
            f"{_bytes(s.bytes_per_tile)}, {s.clock_hz / 1e9:.2f} GHz (simulator)",
            f"Precision: {self.precision}"
            + (", half partials" if self.enable_half_partials and self.precision != "float32" else "")
            + f"; memory proportion {self.memory_proportion:g}",
            f"Graph: {self.passes['nodes_in']} nodes in, {self.passes['folded']} folded, "
            f"{self.passes['fused']} fused, {self.passes['dead']} dead, {self.passes['nodes_out']} on device; "
            f"compiled in {self.compile_seconds:.2f} s",
        ]
        for m in self.memory_per_ipu():
            if m["tiles_used"] == 0:
                lines.append(f"IPU {m['ipu']}: unused")
                continue
            lines.append(
                f"IPU {m['ipu']}: {m['tiles_used']} tiles used, {_bytes(m['total_bytes'])} total, busiest tile "
                f"{m['max_tile']} at {_bytes(m['max_tile_bytes'])} "
                f"({100.0 * m['max_tile_bytes'] / self.bytes_per_tile:.1f}% of {_bytes(self.bytes_per_tile)})"
            )
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
        mm = [o for o in self.plans if o.kind == "matmul"]
        if mm:
            lines.append(f"Matmul plans ({len(mm)}):")
            for o in mm[:8]:
                lines.append(f"  {o.name} (IPU {o.ipu}): {o.plan}")
            if len(mm) > 8:
                lines.append(f"  ... and {len(mm) - 8} more")
        for w in self.warnings:
            lines.append(f"Warning: {w}")
        return "\n".join(lines)


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
    # Host time of the simulation by kind of step.
    compute_seconds: float = 0.0
    exchange_seconds: float = 0.0
    host_io_seconds: float = 0.0
    # The program's memory bounds were verified at load (checked mode).
    checked: bool = False
    # The physical IPUs of the attached device (replica r's stage s on
    # ipus[r * num_ipus / replication_factor + s]).
    ipus: Optional[List[int]] = None

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
        )

    @property
    def estimated_seconds(self) -> float:
        return self.cycles / self.clock_hz

    @property
    def samples_per_second(self) -> float:
        s = self.estimated_seconds
        return self.batch_size / s if s > 0 else float("inf")

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
