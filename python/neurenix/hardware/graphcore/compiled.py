"""A model compiled for a set of IPUs, and the conversion of user inputs to
what it was compiled for."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

try:
    # Registers bfloat16 and the float8 types with numpy: the arrays of the
    # storage types (docs/precision.md) are ml_dtypes arrays, as in onnx.
    import ml_dtypes
except ImportError:  # pragma: no cover - a dependency of neurenix (and of onnx >= 1.19)
    ml_dtypes = None

from .errors import InputMismatchError
from .report import CompileReport
from .report_execution import ExecutionReport


class TensorSpec(NamedTuple):
    """Name, element type (numpy name) and shape of a model input or output."""

    name: str
    dtype: str
    shape: Tuple[int, ...]


class LatestRun:
    """A run's native statistics, made into its :class:`ExecutionReport` when
    the report is first read (most runs are never asked for theirs: making
    it costs more than a small model's exchange). One report per run,
    whichever threads read it."""

    __slots__ = ("_stats", "_clock_hz", "_batch", "_ipus", "_report")
    _making = threading.Lock()

    def __init__(self, stats: Any, clock_hz: float, batch: int):
        self._stats, self._clock_hz, self._batch = stats, clock_hz, batch
        self._ipus: Optional[List[int]] = None
        self._report: Optional[ExecutionReport] = None

    @property
    def ipus(self) -> Optional[List[int]]:
        """The physical IPUs of the device the run used (set by its manager,
        also on a report already made)."""
        return self._ipus

    @ipus.setter
    def ipus(self, ipus: Optional[List[int]]) -> None:
        with LatestRun._making:
            self._ipus = ipus
            if self._report is not None:
                self._report.ipus = ipus

    @classmethod
    def of_report(cls, report: ExecutionReport) -> "LatestRun":
        run = cls(None, report.clock_hz, report.batch_size)
        run._report = report
        return run

    @property
    def report(self) -> ExecutionReport:
        report = self._report
        if report is None:
            with LatestRun._making:
                if self._report is None:
                    made = ExecutionReport.from_run_stats(self._stats, self._clock_hz, self._batch)
                    made.ipus = self._ipus
                    self._report, self._stats = made, None
                report = self._report
        return report


class CompiledModel:
    """A model compiled for the simulated IPUs of one manager.

    ``inputs``/``outputs`` describe what :meth:`GraphCoreManager.execute_model`
    takes and returns; ``report`` is the :class:`CompileReport`;
    ``last_execution`` the :class:`ExecutionReport` of the latest run.
    The compiled program is loaded into (simulated) device memory by its
    first run, and freed by :meth:`unload` or when its manager finalizes.
    """

    def __init__(self, executable: Any, name: str):
        self._executable = executable
        self.name = name
        self.system: str = executable.system
        self.num_ipus: int = executable.num_ipus
        self.replication_factor: int = executable.replication_factor
        self.device_iterations: int = executable.device_iterations
        #: Micro-batches one run takes: device iterations x replicas.
        self.micro_batches: int = self.replication_factor * self.device_iterations
        #: One micro-batch, as compiled (the example inputs' shapes).
        self.micro_batch_inputs: List[TensorSpec] = [
            TensorSpec(s.name, s.dtype, tuple(s.shape)) for s in executable.inputs
        ]
        self.micro_batch_outputs: List[TensorSpec] = [
            TensorSpec(s.name, s.dtype, tuple(s.shape)) for s in executable.outputs
        ]
        #: What execute_model takes and returns: the micro-batches of one run
        #: concatenated along the first axis (stacked for scalars).
        self.inputs: List[TensorSpec] = [self._host(s) for s in self.micro_batch_inputs]
        self.outputs: List[TensorSpec] = [self._host(s) for s in self.micro_batch_outputs]
        # The little-endian element types the native runs read and write
        # (one per input and output), made once rather than on every run.
        self._wire_inputs: List[np.dtype] = [np.dtype(s.dtype).newbyteorder("<") for s in self.inputs]
        self._wire_outputs: List[np.dtype] = [np.dtype(s.dtype).newbyteorder("<") for s in self.outputs]
        first = self.micro_batch_inputs[0].shape if self.micro_batch_inputs else ()
        micro = first[0] if first else 1
        self.report = CompileReport.from_executable(executable, micro_batch_size=micro)
        self.latest_run: Optional[LatestRun] = None

    @property
    def last_execution(self) -> Optional[ExecutionReport]:
        """The :class:`ExecutionReport` of the latest run (None before one)."""
        return self.latest_run.report if self.latest_run is not None else None

    @last_execution.setter
    def last_execution(self, report: Optional[ExecutionReport]) -> None:
        self.latest_run = LatestRun.of_report(report) if report is not None else None

    def _host(self, s: TensorSpec) -> TensorSpec:
        k = self.micro_batches
        if k == 1:
            return s
        shape = (s.shape[0] * k,) + tuple(s.shape[1:]) if s.shape else (k,)
        return TensorSpec(s.name, s.dtype, shape)

    def describe_shape_mismatch(self, spec: TensorSpec, got: Tuple[int, ...]) -> str:
        """Why an input of shape ``got`` is not what a run takes, with the
        batch arithmetic spelled out."""
        micro = next(m for m in self.micro_batch_inputs if m.name == spec.name)
        if self.micro_batches == 1:
            return (
                f"input '{spec.name}' must have shape {list(spec.shape)} (as compiled), got {list(got)}; "
                "compile the model again for other shapes"
            )
        mb = micro.shape[0] if micro.shape else 1
        return (
            f"input '{spec.name}' must have shape {list(spec.shape)}, got {list(got)}: the host batch is the "
            f"micro-batch ({mb}, from the example inputs) x device_iterations ({self.device_iterations}) x "
            f"replication_factor ({self.replication_factor}) = {mb * self.micro_batches}"
            + ("" if not micro.shape or tuple(got[1:]) == tuple(micro.shape[1:]) else
               f", and each sample must have shape {list(micro.shape[1:])}")
        )

    @property
    def loaded(self) -> bool:
        """Whether the program occupies (simulated) device memory."""
        return self._executable.loaded

    def load(
        self, threads: int = 0, stochastic_rounding: bool = False, seed: int = 0, fp_exceptions: bool = False
    ) -> None:
        """Loads the program into fresh device memory (``threads``: host
        threads of the simulator, 0 = default) with the floating-point
        behaviour of its runs (see the manager's options of the same names)."""
        self._executable.load(threads, stochastic_rounding, seed, fp_exceptions)

    def unload(self) -> None:
        """Frees the program's device memory; the next run loads it again."""
        self._executable.unload()

    def run(self, inputs: Sequence[bytes]) -> List[bytearray]:
        """Runs once on raw little-endian bytes of each input in its declared
        type (input order); returns the outputs' bytes (fresh, writable).
        Records the run in ``last_execution``."""
        outs = self._executable.run(list(inputs))
        stats = self._executable.last_run()
        self.latest_run = (
            LatestRun(stats, self.report.clock_hz, self.report.micro_batch_size * self.micro_batches)
            if stats is not None else None
        )
        return outs

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self.inputs)
        outs = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self.outputs)
        extra = ""
        if self.micro_batches > 1:
            extra = f" x {self.device_iterations} device iteration(s) x {self.replication_factor} replica(s)"
        return f"<CompiledModel {self.name!r} ({ins}) -> ({outs}) on {self.num_ipus} IPU(s){extra}>"


def _as_array(value: Any, spec_name: str, declared: Optional[str]) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, (list, tuple, int, float, bool)):
        # Python data has no element type of its own: take the model's.
        try:
            return np.asarray(value, dtype=declared) if declared else np.asarray(value)
        except (ValueError, TypeError) as e:
            raise InputMismatchError(f"input '{spec_name}' cannot be read as an array: {e}", spec_name) from None
    if hasattr(value, "__array__"):
        return np.asarray(value)
    raise InputMismatchError(
        f"input '{spec_name}' must be a numpy array (or array-like), got {type(value).__name__}", spec_name
    )


def arrange_inputs(
    names: Sequence[str], declared: Sequence[Optional[str]], inputs: Any, what: str
) -> List[np.ndarray]:
    """Inputs given as one array, a sequence in input order, or a mapping by
    name, as a list of arrays in input order."""
    n = len(names)
    if isinstance(inputs, Mapping):
        unknown = [k for k in inputs if k not in names]
        if unknown:
            raise InputMismatchError(
                f"{what}: unknown input name(s) {', '.join(map(repr, unknown))}; the model's inputs are "
                f"{', '.join(map(repr, names))}",
                str(unknown[0]),
            )
        missing = [k for k in names if k not in inputs]
        if missing:
            raise InputMismatchError(f"{what}: missing input(s) {', '.join(map(repr, missing))}", missing[0])
        return [_as_array(inputs[k], k, d) for k, d in zip(names, declared)]
    if isinstance(inputs, (list, tuple)) and not (n == 1 and _looks_like_data(inputs)):
        if len(inputs) != n:
            raise InputMismatchError(
                f"{what}: the model has {n} input(s) ({', '.join(map(repr, names))}) but {len(inputs)} were given",
                names[0] if names else "",
            )
        return [_as_array(x, k, d) for x, k, d in zip(inputs, names, declared)]
    if n != 1:
        raise InputMismatchError(
            f"{what}: the model has {n} inputs ({', '.join(map(repr, names))}); pass a list in that order or a "
            "dict by name",
            names[0] if names else "",
        )
    return [_as_array(inputs, names[0], declared[0])]


# Host arrays of these types are converted to the declared type on the way in,
# as PopTorch converts doubles: (given, declared).
_HOST_CASTS = {("float64", "float32"), ("int32", "int64")}
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def conform_input(name: str, declared: Optional[str], a: np.ndarray) -> np.ndarray:
    """``a`` in the declared element type when a lossless-enough host cast
    exists (float64 -> float32, int32 -> int64); otherwise unchanged (the
    caller reports the mismatch). Finite float64 values beyond float32's range
    raise :class:`InputMismatchError`."""
    if declared is None or (a.dtype.name, declared) not in _HOST_CASTS:
        return a
    if a.dtype == np.float64 and a.size:
        finite = np.isfinite(a)
        big = finite & (np.abs(np.where(finite, a, 0.0)) > _FLOAT32_MAX)
        if big.any():
            i = int(np.flatnonzero(big.ravel())[0])
            raise InputMismatchError(
                f"input '{name}' is float64 and element {i} is {float(a.ravel()[i])!r}, beyond float32's range "
                f"(+-{_FLOAT32_MAX:.6g}) that the model declares; scale the data or declare the input float64",
                name,
            )
    return a.astype(declared)


#: Element types the IPU only stores (docs/precision.md): their arrays are
#: ml_dtypes arrays.
STORAGE_TYPES = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")


def conversion_hint(dtype: str) -> str:
    """How to convert an array to element type ``dtype``."""
    if dtype in STORAGE_TYPES:
        return f".astype(ml_dtypes.{dtype})"
    return f".astype(np.{dtype})"


def _looks_like_data(seq: Sequence[Any]) -> bool:
    """A list of numbers (one input given as nested lists), not a list of inputs."""
    return len(seq) > 0 and all(isinstance(x, (int, float, bool, list, tuple)) for x in seq) and not any(
        isinstance(x, np.ndarray) for x in seq
    )
