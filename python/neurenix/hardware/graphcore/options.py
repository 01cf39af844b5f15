"""Options of the IPU manager: the simulated system (:class:`IPUModel`), the
validation of every manager argument, and the ``NEURENIX_*`` environment
variables."""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Optional

from .errors import InvalidOptionError, InvalidOptionTypeError

if TYPE_CHECKING:
    from neurenix._native import SystemInfo

PRECISIONS = ("float32", "float16", "mixed", "float8")
FP8_FORMATS = ("e4m3", "e5m2")


def _native():
    from neurenix import _native

    return _native


@dataclass(frozen=True)
class IPUModel:
    """A simulated IPU system, like Poplar's ``IPUModel``.

    >>> IPUModel(version="ipu2", num_ipus=4, tiles_per_ipu=8).spec()
    'version=ipu2,num_ipus=4,tiles_per_ipu=8'

    ``tiles_per_ipu`` and ``bytes_per_tile`` default to the full chip; shrink
    them to exercise tile mapping and out-of-memory paths quickly.
    """

    version: str = "ipu2"
    num_ipus: int = 16
    tiles_per_ipu: Optional[int] = None
    bytes_per_tile: Optional[int] = None

    def __post_init__(self) -> None:
        if not isinstance(self.version, str):
            raise InvalidOptionTypeError(
                f"IPUModel version must be a string such as 'ipu2', got {type(self.version).__name__}", "version"
            )
        for name in ("num_ipus", "tiles_per_ipu", "bytes_per_tile"):
            v = getattr(self, name)
            if v is None and name != "num_ipus":
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise InvalidOptionTypeError(f"IPUModel {name} must be an integer, got {v!r}", name)
            if v < 1:
                raise InvalidOptionError(f"IPUModel {name} must be at least 1, got {v}", name)
        # The native core owns the chip table: let it judge the rest.
        self.describe()

    def spec(self) -> str:
        parts = [f"version={self.version}", f"num_ipus={self.num_ipus}"]
        if self.tiles_per_ipu is not None:
            parts.append(f"tiles_per_ipu={self.tiles_per_ipu}")
        if self.bytes_per_tile is not None:
            parts.append(f"bytes_per_tile={self.bytes_per_tile}")
        return ",".join(parts)

    def describe(self) -> "SystemInfo":
        """The system's figures (tiles, memory, clock, flops per cycle, ...)."""
        return _native().describe_system(self.spec())

    @classmethod
    def from_spec(cls, text: str) -> "IPUModel":
        """Parses ``"version=ipu2,num_ipus=16,tiles_per_ipu=8"`` (keys:
        version, num_ipus, tiles_per_ipu, bytes_per_tile)."""
        if not isinstance(text, str):
            raise InvalidOptionTypeError(f"an IPU model description must be a string, got {text!r}")
        d = _native().describe_system(text)  # raises InvalidOptionError naming the bad key
        keys = {kv.split("=", 1)[0].strip() for kv in text.split(",") if "=" in kv}
        return cls(
            version=d.version,
            num_ipus=d.num_ipus,
            tiles_per_ipu=d.tiles_per_ipu if "tiles_per_ipu" in keys else None,
            bytes_per_tile=d.bytes_per_tile if "bytes_per_tile" in keys else None,
        )

    @classmethod
    def from_env(cls) -> Optional["IPUModel"]:
        """The system in ``$NEURENIX_IPU_MODEL``, if set."""
        text = os.environ.get("NEURENIX_IPU_MODEL", "").strip()
        if not text:
            return None
        try:
            return cls.from_spec(text)
        except InvalidOptionError as e:
            raise InvalidOptionError(f"NEURENIX_IPU_MODEL: {e}", "NEURENIX_IPU_MODEL") from None


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidOptionTypeError(f"{name} must be True or False, got {value!r}", name)
    return value


def check_num_ipus(value: Any, available: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidOptionTypeError(f"num_ipus must be an integer, got {value!r}", "num_ipus")
    n = int(value)
    if n < 1 or n & (n - 1):
        raise InvalidOptionError(f"num_ipus must be a power of two (1, 2, 4, ...), got {n}", "num_ipus")
    if n > available:
        raise InvalidOptionError(
            f"num_ipus={n} but the system has only {available} IPU(s); "
            "ask for fewer or describe a bigger system with IPUModel(num_ipus=...)",
            "num_ipus",
        )
    return n


def check_precision(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidOptionTypeError(f"precision must be a string, got {value!r}", "precision")
    if value not in PRECISIONS:
        raise InvalidOptionError(
            f"unknown precision {value!r}; expected one of {', '.join(repr(p) for p in PRECISIONS)}", "precision"
        )
    return value


def check_fp8_format(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidOptionTypeError(f"fp8_format must be 'e4m3' or 'e5m2', got {value!r}", "fp8_format")
    if value not in FP8_FORMATS:
        raise InvalidOptionError(f"unknown fp8_format {value!r}; expected 'e4m3' or 'e5m2'", "fp8_format")
    return value


def check_precision_on(precision: str, version: str) -> None:
    """``float8`` needs the ipu21's float8 matrix unit."""
    if precision == "float8" and version != "ipu21":
        raise InvalidOptionError(
            f"precision='float8' needs IPUs with a float8 matrix unit: only the ipu21 (C600) has one, and this "
            f"system's IPUs are {version}. Use precision='float16' here, or IPUModel(version='ipu21')",
            "precision",
        )


def check_memory_proportion(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidOptionTypeError(f"memory_proportion must be a number in (0, 1], got {value!r}", "memory_proportion")
    v = float(value)
    if not math.isfinite(v) or not 0.0 < v <= 1.0:
        raise InvalidOptionError(f"memory_proportion must be in (0, 1], got {value!r}", "memory_proportion")
    return v


def check_device_id(value: Any) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidOptionTypeError(f"device_id must be an integer or None, got {value!r}", "device_id")
    if value < 0:
        raise InvalidOptionError(f"device_id must be >= 0, got {value}", "device_id")
    return int(value)


def check_positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidOptionTypeError(f"{name} must be a positive number, got {value!r}", name)
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise InvalidOptionError(f"{name} must be a positive number, got {value!r}", name)
    return v


def check_seed(value: Any) -> Optional[int]:
    """A seed for the device's random generators: None or an integer in [0, 2**64)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidOptionTypeError(f"seed must be an integer or None, got {value!r}", "seed")
    if not 0 <= value < 2**64:
        raise InvalidOptionError(f"seed must be between 0 and 2**64 - 1, got {value}", "seed")
    return int(value)


EXECUTIONS = ("pipelined", "sharded")


def check_replication_factor(value: Any, num_ipus: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidOptionTypeError(f"replication_factor must be an integer, got {value!r}", "replication_factor")
    r = int(value)
    if r < 1 or num_ipus % r:
        raise InvalidOptionError(
            f"replication_factor must divide num_ipus={num_ipus} (each replica gets num_ipus / replication_factor "
            f"IPUs), got {r}",
            "replication_factor",
        )
    return r


def check_device_iterations(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidOptionTypeError(f"device_iterations must be an integer, got {value!r}", "device_iterations")
    d = int(value)
    if not 1 <= d <= 1 << 20:
        raise InvalidOptionError(f"device_iterations must be between 1 and {1 << 20}, got {d}", "device_iterations")
    return d


def check_gradient_accumulation(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidOptionTypeError(f"gradient_accumulation must be an integer, got {value!r}", "gradient_accumulation")
    g = int(value)
    if not 1 <= g <= 1 << 20:
        raise InvalidOptionError(f"gradient_accumulation must be between 1 and {1 << 20}, got {g}",
                                 "gradient_accumulation")
    return g


OUTPUT_MODES = ("all", "final", "sum")


def check_output_mode(value: Any) -> str:
    if not isinstance(value, str) or value not in OUTPUT_MODES:
        raise InvalidOptionError(f"output_mode must be 'all', 'final' or 'sum', got {value!r}", "output_mode")
    return value


def check_execution(value: Any) -> Optional[str]:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidOptionTypeError(f"execution must be 'pipelined', 'sharded' or None, got {value!r}", "execution")
    if value not in EXECUTIONS:
        raise InvalidOptionError(f"unknown execution {value!r}; expected 'pipelined' or 'sharded'", "execution")
    return value


def check_sharding(value: Any, ipus_per_replica: int) -> Any:
    """``"auto"``, a list of node names at which stages 1, 2, ... begin, or a
    mapping node name -> IPU of the replica; returned as the native core
    takes it (a string, a list of names, or a list of (name, IPU) pairs)."""
    if isinstance(value, str):
        if value != "auto":
            raise InvalidOptionError(
                f"sharding must be 'auto', a list of node names at which stages begin, or a mapping of node names "
                f"to IPUs; got {value!r}",
                "sharding",
            )
        return value
    if isinstance(value, dict):
        pairs = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidOptionTypeError(f"sharding maps node names (strings) to IPUs, got key {k!r}", "sharding")
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise InvalidOptionTypeError(f"sharding maps node '{k}' to {v!r}; IPUs are integers", "sharding")
            if not 0 <= int(v) < ipus_per_replica:
                raise InvalidOptionError(
                    f"sharding maps node '{k}' to IPU {v}, but each replica has IPUs 0..{ipus_per_replica - 1}",
                    "sharding",
                )
            pairs.append((k, int(v)))
        return pairs
    if isinstance(value, (list, tuple)):
        if not all(isinstance(x, str) for x in value):
            raise InvalidOptionTypeError(
                f"sharding as a list names the nodes at which stages begin (strings), got {value!r}", "sharding"
            )
        if len(set(value)) != len(value):
            raise InvalidOptionError(f"sharding names a node twice: {list(value)!r}", "sharding")
        return list(value)
    raise InvalidOptionTypeError(
        f"sharding must be 'auto', a list of node names or a dict of node name -> IPU, got {type(value).__name__}",
        "sharding",
    )


def check_threads(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InvalidOptionTypeError(f"simulator_threads must be a positive integer or None, got {value!r}",
                                     "simulator_threads")
    return int(value)


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _env_bool(name: str) -> Optional[bool]:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise InvalidOptionError(f"{name}={raw!r} is not a boolean (use 1/0, true/false)", name)


def _env_number(name: str, kind: type) -> Any:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    try:
        return kind(raw.strip())
    except ValueError:
        raise InvalidOptionError(f"{name}={raw!r} is not a valid {kind.__name__}", name) from None


def options_from_env() -> Dict[str, Any]:
    """Manager keyword arguments from ``NEURENIX_*`` variables (only those set):
    NEURENIX_NUM_IPUS, NEURENIX_PRECISION, NEURENIX_MEMORY_PROPORTION,
    NEURENIX_HALF_PARTIALS, NEURENIX_COMPILE_ONLY, NEURENIX_DEVICE_ID,
    NEURENIX_IPU_MODEL, NEURENIX_WAIT_FOR_DEVICE, NEURENIX_ATTACH_TIMEOUT,
    NEURENIX_SIM_THREADS, NEURENIX_REPLICATION_FACTOR, NEURENIX_DEVICE_ITERATIONS,
    NEURENIX_EXECUTION, NEURENIX_STOCHASTIC_ROUNDING, NEURENIX_SEED, NEURENIX_FP_EXCEPTIONS."""
    out: Dict[str, Any] = {}
    for key, name, kind in (
        ("num_ipus", "NEURENIX_NUM_IPUS", int),
        ("memory_proportion", "NEURENIX_MEMORY_PROPORTION", float),
        ("device_id", "NEURENIX_DEVICE_ID", int),
        ("attach_timeout", "NEURENIX_ATTACH_TIMEOUT", float),
        ("simulator_threads", "NEURENIX_SIM_THREADS", int),
        ("replication_factor", "NEURENIX_REPLICATION_FACTOR", int),
        ("device_iterations", "NEURENIX_DEVICE_ITERATIONS", int),
        ("gradient_accumulation", "NEURENIX_GRADIENT_ACCUMULATION", int),
        ("seed", "NEURENIX_SEED", int),
    ):
        v = _env_number(name, kind)
        if v is not None:
            out[key] = v
    for key, name in (
        ("enable_half_partials", "NEURENIX_HALF_PARTIALS"),
        ("compile_only", "NEURENIX_COMPILE_ONLY"),
        ("wait_for_device", "NEURENIX_WAIT_FOR_DEVICE"),
        ("stochastic_rounding", "NEURENIX_STOCHASTIC_ROUNDING"),
        ("fp_exceptions", "NEURENIX_FP_EXCEPTIONS"),
    ):
        v = _env_bool(name)
        if v is not None:
            out[key] = v
    om = os.environ.get("NEURENIX_OUTPUT_MODE", "").strip()
    if om:
        out["output_mode"] = om
    e = os.environ.get("NEURENIX_EXECUTION", "").strip()
    if e:
        out["execution"] = e
    p = os.environ.get("NEURENIX_PRECISION", "").strip()
    if p:
        out["precision"] = p
    f8 = os.environ.get("NEURENIX_FP8_FORMAT", "").strip()
    if f8:
        out["fp8_format"] = f8
    model = IPUModel.from_env()
    if model is not None:
        out["ipu_model"] = model
    return out
