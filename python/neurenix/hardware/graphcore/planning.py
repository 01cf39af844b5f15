"""Compile-only planning: which batch fits, how many IPUs a model needs.

>>> from neurenix.hardware.graphcore import find_max_batch, find_min_ipus
>>> search = find_max_batch("resnet50.onnx", num_ipus=1, precision="float16")  # doctest: +SKIP
>>> search.largest                                                               # doctest: +SKIP
64
>>> print(search)                                                                # doctest: +SKIP
>>> find_min_ipus("bert.onnx", example_inputs).smallest                          # doctest: +SKIP

Every try compiles the model with a fresh ``GraphCoreManager(compile_only=True,
**manager_options)``: nothing is attached and nothing runs, so a try costs one
compile. A try that raises :class:`IPUOutOfMemoryError` is a row that does not
fit; any other error propagates. Compile-only managers are not bounded by the
simulated system's size (see ``compile_only`` in ``docs/options.md``), so
``find_min_ipus`` can plan for more IPUs than the system has.

:func:`with_batch_size` is how a model is given another batch size; its
docstring says exactly what it changes.
"""

from __future__ import annotations

import dataclasses
import numbers
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from . import onnx_import
from .compiled import arrange_inputs
from .errors import (
    InputMismatchError,
    InvalidOptionError,
    InvalidOptionTypeError,
    IPUOutOfMemoryError,
    IPUPlanWarning,
    ModelFormatError,
)
from .report import CompileReport, _bytes, _seconds

__all__ = ["PlanTry", "BatchSearch", "IPUSearch", "find_max_batch", "find_min_ipus", "with_batch_size"]

DEFAULT_BATCH_SIZES = tuple(1 << k for k in range(11))  # 1, 2, 4, ..., 1024


# -- batch resizing ------------------------------------------------------------


def _check_batch(batch: Any, what: str = "batch") -> int:
    if isinstance(batch, bool) or not isinstance(batch, numbers.Integral):
        raise InvalidOptionTypeError(f"{what} must be a positive integer, got {batch!r}", what)
    if batch < 1:
        raise InvalidOptionError(f"{what} must be a positive integer, got {batch}", what)
    return int(batch)


def _graph_inputs(proto: Any) -> List[Tuple[Any, Optional[str], Optional[List[Any]]]]:
    """(value info, numpy dtype name, dims) of each input that is not an
    initializer; dims entries are ints, names (str) or None (unknown)."""
    g = proto.graph
    inits = {t.name for t in g.initializer}
    out = []
    for vi in g.input:
        if vi.name in inits:
            continue
        elem, dims = onnx_import._dims(vi)
        out.append((vi, onnx_import.dtype_name(elem), dims))
    return out


def _fixed(dims: Optional[List[Any]]) -> bool:
    return dims is not None and all(isinstance(d, int) for d in dims)


def with_batch_size(model: Any, batch: int, example_inputs: Any = None) -> Tuple[Any, Dict[str, np.ndarray]]:
    """``model`` (an ONNX model, bytes or path) and inputs for it with the
    first dimension of every batched input set to ``batch``. Returns
    ``(onnx.ModelProto, {input name: array})``.

    Which inputs are batched:

    - if some input's first dimension is named or unknown in the graph
      (``["N", 3, 224, 224]``), those inputs, and the model is returned
      unchanged (the same object when a ``ModelProto`` was given);
    - otherwise (every first dimension fixed) the model's batch is the first
      dimension B of its first input that is not a scalar, and the batched
      inputs are those whose first dimension is B. The model is then
      rewritten (a copy): those inputs' and the outputs' first dimension B
      becomes ``batch``, so does the first element of every constant Reshape
      target (an initializer or Constant node) that equals B, and the graph's
      intermediate shape annotations (``value_info``) are dropped. A model
      that bakes B into anything else (say a Reshape to [B * 49, 2048]) will
      then fail to compile with an error naming the node.

    The arrays: with ``example_inputs`` (one array, a sequence in input order
    or a mapping by name), a batched input's first sample repeated ``batch``
    times and the other inputs as given; without, zeros of each input's
    declared shape (every dimension but a batched input's first must then be
    fixed). Either way the batched arrays are read-only views that take no
    memory: they are meant for compiling, where only shapes and element
    types matter.

    Raises :class:`ModelFormatError` when no input has a batch dimension
    (every input a scalar, or no input at all), :class:`InputMismatchError`
    when an input's shape is not known well enough, and
    :class:`InvalidOptionError` for a batch that is not a positive integer.
    """
    batch = _check_batch(batch)
    proto = onnx_import.load(model)
    declared = _graph_inputs(proto)
    if not declared:
        raise ModelFormatError("cannot set the batch size of a model without inputs")
    names = [vi.name for vi, _, _ in declared]
    dtypes = [dt for _, dt, _ in declared]
    given: Optional[Dict[str, Any]] = None
    if example_inputs is not None:
        given = dict(zip(names, arrange_inputs(names, dtypes, example_inputs, "example_inputs")))

    # Each input's rank and first dimension (None if named or unknown).
    ranks: List[int] = []
    firsts: List[Optional[int]] = []
    for vi, _, dims in declared:
        if dims is None:
            if given is None:
                raise InputMismatchError(
                    f"input '{vi.name}' has no shape in the model; give example_inputs to set it", vi.name
                )
            ranks.append(int(np.ndim(given[vi.name])))
            firsts.append(None)
        else:
            ranks.append(len(dims))
            firsts.append(dims[0] if dims and isinstance(dims[0], int) else None)

    rewrite_from = None
    batched = {i for i in range(len(declared)) if ranks[i] and firsts[i] is None}
    if not batched:
        ranked = [i for i in range(len(declared)) if ranks[i]]
        if not ranked:
            raise ModelFormatError(
                f"cannot set the batch size of this model: none of its inputs "
                f"({', '.join(map(repr, names))}) has a batch dimension (all are scalars)"
            )
        b0 = firsts[ranked[0]]
        batched = {i for i in ranked if firsts[i] == b0}
        if b0 != batch:
            rewrite_from = b0

    arrays: Dict[str, np.ndarray] = {}
    for i, (vi, dt, dims) in enumerate(declared):
        name = vi.name
        if given is not None:
            a = np.asarray(given[name])
            if i in batched:
                if a.ndim == 0 or a.shape[0] == 0:
                    raise InputMismatchError(
                        f"example input '{name}' has shape {list(a.shape)}: it needs at least one sample to repeat",
                        name,
                    )
                a = np.broadcast_to(a[:1], (batch,) + a.shape[1:])
            arrays[name] = a
            continue
        shape = None if dims is None else list(dims)
        if shape is not None and i in batched:
            shape[0] = batch
        if shape is None or not _fixed(shape):
            shown = None if dims is None else ["?" if d is None else d for d in dims]
            raise InputMismatchError(
                f"input '{name}' has shape {shown} in the model; give example_inputs to fix its other dimensions",
                name,
            )
        arrays[name] = np.broadcast_to(np.zeros((), dtype=dt or "float32"), tuple(int(d) for d in shape))

    if rewrite_from is not None:
        proto = _rewrite_batch(proto, {declared[i][0].name for i in batched}, rewrite_from, batch)
    return proto, arrays


def _rewrite_batch(proto: Any, inputs: Iterable[str], old: int, new: int) -> Any:
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    g = out.graph
    inputs = set(inputs)
    for vi in [vi for vi in g.input if vi.name in inputs] + list(g.output):
        shape = vi.type.tensor_type.shape
        if len(shape.dim) and shape.dim[0].HasField("dim_value") and shape.dim[0].dim_value == old:
            shape.dim[0].dim_value = new
    del g.value_info[:]
    targets = {n.input[1] for n in g.node if n.op_type == "Reshape" and len(n.input) > 1}

    def resized(t: Any) -> Optional[Any]:
        v = numpy_helper.to_array(t)
        if v.ndim == 1 and v.size and int(v[0]) == old:
            v = v.copy()
            v[0] = new
            return numpy_helper.from_array(v, t.name)
        return None

    for t in g.initializer:
        if t.name in targets:
            r = resized(t)
            if r is not None:
                t.CopyFrom(r)
    for n in g.node:
        if n.op_type == "Constant" and n.output[0] in targets:
            for a in n.attribute:
                if a.name == "value" and a.HasField("t"):
                    r = resized(a.t)
                    if r is not None:
                        a.t.CopyFrom(r)
    return out


# -- results -------------------------------------------------------------------


@dataclass(frozen=True)
class PlanTry:
    """One compile of a search.

    ``max_tile_bytes``: the busiest tile's bytes when it fits; when it does
    not, the bytes the most overflowing tile would need (None if one tensor
    alone is larger than an IPU). ``latency_seconds``: one micro-batch
    through all stages; ``throughput``: samples per second in the steady
    state (both estimates of the compile report, None when it does not fit).
    ``error``: the first line of the out-of-memory diagnosis.
    """

    batch: int
    num_ipus: int
    fits: bool
    max_tile_bytes: Optional[int]
    bytes_per_tile: int
    latency_seconds: Optional[float] = None
    throughput: Optional[float] = None
    error: Optional[str] = None
    warnings: Tuple[str, ...] = ()
    report: Optional[CompileReport] = field(default=None, repr=False, compare=False)


def _table(rows: Sequence[PlanTry], first: str) -> List[str]:
    head = [first, "fits", "busiest tile", "latency", "throughput", ""]
    body = []
    for r in rows:
        tile = "-"
        if r.max_tile_bytes is not None:
            tile = f"{_bytes(r.max_tile_bytes)} ({100.0 * r.max_tile_bytes / r.bytes_per_tile:.0f}%)"
        body.append([
            str(r.batch if first == "batch" else r.num_ipus),
            "yes" if r.fits else "no",
            tile,
            "-" if r.latency_seconds is None else _seconds(r.latency_seconds),
            "-" if r.throughput is None else f"{r.throughput:,.0f} samples/s",
            r.error or ("; ".join(r.warnings) if r.warnings else ""),
        ])
    widths = [max(len(x[k]) for x in [head] + body) for k in range(len(head) - 1)]

    def line(cells: List[str]) -> str:
        out = [cells[0].rjust(widths[0])] + [c.ljust(w) for c, w in zip(cells[1:-1], widths[1:])]
        return ("  ".join(out) + "  " + cells[-1]).rstrip()

    return [line(head)] + [line(b) for b in body]


@dataclass
class BatchSearch:
    """What :func:`find_max_batch` tried: ``rows`` in batch order and the
    ``largest`` batch that fits (None if none does). ``target`` names the
    IPUs compiled for. ``str()`` is a table."""

    rows: List[PlanTry]
    largest: Optional[int]
    target: str

    def row(self, batch: int) -> Optional[PlanTry]:
        """The try at ``batch``, if there was one."""
        return next((r for r in self.rows if r.batch == batch), None)

    def __str__(self) -> str:
        head = (
            f"Largest batch that fits: {self.largest}" if self.largest is not None else "No batch size tried fits"
        ) + f" ({self.target})"
        return "\n".join([head] + _table(self.rows, "batch"))


@dataclass
class IPUSearch:
    """What :func:`find_min_ipus` tried: ``rows`` by number of IPUs and the
    ``smallest`` number that fits (None if none up to ``max_ipus`` does).
    ``str()`` is a table."""

    rows: List[PlanTry]
    smallest: Optional[int]
    target: str

    def __str__(self) -> str:
        head = (
            f"Fewest IPUs that fit: {self.smallest}" if self.smallest is not None else
            f"Does not fit on up to {self.rows[-1].num_ipus if self.rows else 0} IPUs"
        ) + f" ({self.target})"
        return "\n".join([head] + _table(self.rows, "IPUs"))


# -- searches ------------------------------------------------------------------


def _planning_options(options: Dict[str, Any]) -> Dict[str, Any]:
    options = dict(options)
    if options.pop("compile_only", True) is not True:
        raise InvalidOptionError("planning only compiles: compile_only cannot be False here", "compile_only")
    return options


def _target(manager: Any) -> str:
    d = manager.ipu_model.describe()
    return (
        f"{manager.num_ipus} x {d.version}, {d.tiles_per_ipu:,} tiles x {_bytes(d.bytes_per_tile)}, {manager.precision}"
    )


def _first_dim(proto: Any, inputs: Any) -> int:
    """The first dimension of the first input (the batch, as the compile
    report counts it), 1 for a scalar."""
    declared = _graph_inputs(proto)
    if not declared:
        return 1
    vi, dt, dims = declared[0]
    if inputs is not None:
        names = [d[0].name for d in declared]
        first = arrange_inputs(names, [d[1] for d in declared], inputs, "example_inputs")[0]
        return int(np.shape(first)[0]) if np.ndim(first) else 1
    return int(dims[0]) if dims and isinstance(dims[0], int) else 1


def _try(model: Any, inputs: Any, options: Dict[str, Any]) -> Tuple[PlanTry, str]:
    from .manager import GraphCoreManager

    manager = GraphCoreManager(compile_only=True, **options)
    bytes_per_tile = int(manager.ipu_model.describe().bytes_per_tile)
    with manager, warnings.catch_warnings():
        # Planner warnings stay in the row (and its report), not on stderr once per try.
        warnings.simplefilter("ignore", IPUPlanWarning)
        try:
            compiled = manager.compile_model(model, inputs)
        except IPUOutOfMemoryError as e:
            batch = _first_dim(model, inputs)
            over = max((t.used for t in e.tiles), default=None)
            message = str(e).strip().splitlines()[0] if str(e).strip() else "out of memory"
            if len(e.tiles) > 1:
                message += f" (and {len(e.tiles) - 1} more tile(s))"
            row = PlanTry(batch, manager.num_ipus, False, over, bytes_per_tile, error=message)
            return row, _target(manager)
    r = compiled.report
    row = PlanTry(
        r.micro_batch_size,
        manager.num_ipus,
        True,
        r.max_tile_memory,
        bytes_per_tile,
        latency_seconds=r.latency_seconds,
        throughput=r.estimated_throughput,
        warnings=tuple(r.warnings),
        report=r,
    )
    return row, _target(manager)


def find_max_batch(
    model: Any,
    example_inputs: Any = None,
    *,
    batch_sizes: Optional[Iterable[int]] = None,
    search: bool = False,
    **manager_options: Any,
) -> BatchSearch:
    """The largest batch size at which ``model`` fits, by compiling it.

    Tries ``batch_sizes`` (default 1, 2, 4, ..., 1024) in increasing order
    and stops after the first that does not fit; with ``search=True`` it then
    bisects between the last size that fits and that one, so ``largest`` is
    exact rather than a power of two (this assumes memory grows with the
    batch, as it does for the models we know). The batch is the micro-batch:
    the first dimension of the batched inputs, set as
    :func:`with_batch_size` describes (``example_inputs`` are optional when
    the model's other dimensions are fixed). ``manager_options`` are those
    of :class:`GraphCoreManager` (``num_ipus``, ``precision``,
    ``memory_proportion``, ``ipu_model``, ...); every try uses a fresh
    compile-only manager.

    Returns a :class:`BatchSearch`. Raises what compiling raises, except
    :class:`IPUOutOfMemoryError`, which makes a row that does not fit.
    """
    options = _planning_options(manager_options)
    if not isinstance(search, bool):
        raise InvalidOptionTypeError(f"search must be True or False, got {search!r}", "search")
    sizes = DEFAULT_BATCH_SIZES if batch_sizes is None else batch_sizes
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Iterable):
        raise InvalidOptionTypeError(f"batch_sizes must be a sequence of positive integers, got {sizes!r}",
                                     "batch_sizes")
    sizes = sorted({_check_batch(b, "batch_sizes") for b in sizes})
    if not sizes:
        raise InvalidOptionError("batch_sizes is empty", "batch_sizes")
    proto = onnx_import.load(model)
    rows: Dict[int, PlanTry] = {}
    target = ""

    def attempt(b: int) -> bool:
        nonlocal target
        m, inputs = with_batch_size(proto, b, example_inputs)
        row, target = _try(m, inputs, options)
        rows[b] = row = dataclasses.replace(row, batch=b)
        return row.fits

    last_fit = None
    for b in sizes:
        if not attempt(b):
            if search and last_fit is not None:
                lo, hi = last_fit, b
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if attempt(mid):
                        lo = mid
                    else:
                        hi = mid
            break
        last_fit = b
    ordered = [rows[b] for b in sorted(rows)]
    largest = max((r.batch for r in ordered if r.fits), default=None)
    return BatchSearch(ordered, largest, target)


def find_min_ipus(
    model: Any, example_inputs: Any = None, *, max_ipus: int = 64, **manager_options: Any
) -> IPUSearch:
    """The fewest IPUs ``model`` fits on, by compiling it for 1, 2, 4, ...
    up to ``max_ipus`` IPUs (powers of two, as the manager requires; with a
    ``replication_factor`` R, the multiples of R among them) and stopping at
    the first that fits. The model is split over the IPUs as ``sharding``
    says (default ``"auto"``). Compile-only managers plan for a system of
    the same chips with as many IPUs as asked, so ``max_ipus`` may exceed
    the simulated system's (up to 1024).

    ``manager_options`` are those of :class:`GraphCoreManager` except
    ``num_ipus``. Returns an :class:`IPUSearch`. Raises what compiling
    raises, except :class:`IPUOutOfMemoryError`, which makes a row that
    does not fit.
    """
    options = _planning_options(manager_options)
    if "num_ipus" in options:
        raise InvalidOptionError("find_min_ipus chooses num_ipus itself; bound it with max_ipus", "num_ipus")
    if isinstance(max_ipus, bool) or not isinstance(max_ipus, numbers.Integral) or not 1 <= max_ipus <= 1024:
        raise InvalidOptionError(f"max_ipus must be an integer from 1 to 1024, got {max_ipus!r}", "max_ipus")
    replicas = options.get("replication_factor", 1)
    candidates = [n for n in (1 << k for k in range(11)) if n <= max_ipus]
    if isinstance(replicas, numbers.Integral) and not isinstance(replicas, bool) and replicas > 1:
        candidates = [n for n in candidates if n % replicas == 0] or candidates[-1:]
    proto = onnx_import.load(model)
    rows: List[PlanTry] = []
    target = ""
    for n in candidates:
        row, target = _try(proto, example_inputs, dict(options, num_ipus=n))
        rows.append(row)
        if row.fits:
            return IPUSearch(rows, n, target)
    return IPUSearch(rows, None, target)
