"""What compiling and running a model on the IPUs did: memory per tile, plans,
estimated cycles and throughput."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Tuple


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


@dataclass(frozen=True)
class TileMemory:
    """Peak memory of one tile, by category (bytes)."""

    ipu: int
    tile: int
    variables: int
    vertex_state: int
    code: int
    exchange_code: int
    control_code: int

    @property
    def total(self) -> int:
        return self.variables + self.vertex_state + self.code + self.exchange_code + self.control_code


@dataclass(frozen=True)
class OpPlan:
    """How the op library laid out one operation."""

    name: str
    kind: str
    ipu: int
    plan: str
    tiles_used: int
    temp_bytes_per_tile: int
    estimated_cycles: int


@dataclass(frozen=True)
class ProgramStep:
    kind: str  # "compute", "exchange", "host_to_device", "device_to_host"
    name: str
    cycles: int
    bytes: int
    items: int  # vertices of a compute step, copy descriptors of an exchange


@dataclass
class CompileReport:
    """The compile report. ``str(report)`` is a readable summary."""

    system: Dict[str, Any]
    num_ipus: int
    precision: str
    memory_proportion: float
    half_partials: bool
    compile_seconds: float
    passes: Dict[str, int]
    placement: List[Tuple[str, str, int]]
    ops: List[OpPlan]
    warnings: List[str]
    tiles: List[TileMemory]
    steps: List[ProgramStep]
    cycles_per_run: int
    batch_size: int = 1

    @classmethod
    def from_native(cls, d: Dict[str, Any], batch_size: int) -> "CompileReport":
        tpi = d["system"]["tiles_per_ipu"]
        return cls(
            system=dict(d["system"]),
            num_ipus=d["num_ipus"],
            precision=d["precision"],
            memory_proportion=d["memory_proportion"],
            half_partials=d["half_partials"],
            compile_seconds=d["compile_seconds"],
            passes=dict(d["passes"]),
            placement=[tuple(p) for p in d["placement"]],
            ops=[OpPlan(*o) for o in d["ops"]],
            warnings=list(d["warnings"]),
            tiles=[TileMemory(t[0] // tpi, t[0] % tpi, *t[1:]) for t in d["tiles"]],
            steps=[ProgramStep(*s) for s in d["steps"]],
            cycles_per_run=d["cycles_per_run"],
            batch_size=batch_size,
        )

    @property
    def bytes_per_tile(self) -> int:
        return int(self.system["bytes_per_tile"])

    @property
    def clock_hz(self) -> float:
        return float(self.system["clock_hz"])

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
        """Samples per second on the device (batch / estimated time)."""
        s = self.estimated_seconds
        return self.batch_size / s if s > 0 else float("inf")

    def memory_per_ipu(self) -> List[Dict[str, Any]]:
        out = []
        for ipu in range(self.num_ipus):
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
            f"Target: {self.num_ipus} x {s['version']} ({s['chip']}), {s['tiles_per_ipu']} tiles x "
            f"{_bytes(s['bytes_per_tile'])}, {s['clock_hz'] / 1e9:.2f} GHz (simulator)",
            f"Precision: {self.precision}"
            + (f", half partials" if self.half_partials and self.precision != "float32" else "")
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
        lines.append(
            f"Estimated: {self.cycles_per_run:,} cycles per run ({self.estimated_seconds * 1e6:,.1f} us), "
            f"{self.estimated_throughput:,.0f} samples/s at batch {self.batch_size}"
        )
        lines.append(
            "  " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
        )
        mm = [o for o in self.ops if o.kind == "matmul"]
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
    arena_bytes: int
    clock_hz: float
    batch_size: int = 1
    # Host time of the simulation by kind of step.
    compute_seconds: float = 0.0
    exchange_seconds: float = 0.0
    host_io_seconds: float = 0.0

    @classmethod
    def from_native(cls, d: Dict[str, Any], clock_hz: float, batch_size: int) -> "ExecutionReport":
        return cls(
            cycles=d["cycles"],
            compute_cycles=d["compute_cycles"],
            exchange_cycles=d["exchange_cycles"],
            host_cycles=d["host_cycles"],
            steps=d["steps"],
            exchanged_bytes=d["exchanged_bytes"],
            host_bytes=d["host_bytes"],
            wall_seconds=d["wall_seconds"],
            arena_bytes=d["arena_bytes"],
            clock_hz=clock_hz,
            batch_size=batch_size,
            compute_seconds=d["compute_seconds"],
            exchange_seconds=d["exchange_seconds"],
            host_io_seconds=d["host_io_seconds"],
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
            f"host I/O {self.host_io_seconds * 1e3:,.1f}) using {_bytes(self.arena_bytes)} of host memory for tiles"
        )
