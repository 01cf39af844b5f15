"""Command line: ``neurenix-ipu`` (or ``python -m neurenix.hardware.graphcore``).

    neurenix-ipu info [--ipu-model SPEC] [--ipu-version V]
    neurenix-ipu compile MODEL.onnx [options] [--max-batch [--refine]] [--min-ipus [--max-ipus N]]
    neurenix-ipu run MODEL.onnx [options] [--inputs FILE.npz | --input-file NAME=FILE.npy ...] [--seed N]
                     [--output FILE.npz]

``info`` describes the simulated system and every IPU version it can
simulate. ``compile`` says whether and how the model fits (memory per IPU and
on the busiest tile, estimated latency and throughput, the full compile
report); with ``--max-batch`` it searches the largest batch that fits, with
``--min-ipus`` the fewest IPUs (compile-only, see ``planning.py``).
``run`` also executes the model on the simulator, on inputs read from files
or drawn at random, prints a summary of the outputs and the run's report,
and can save the outputs.

Options shared by ``compile`` and ``run``: ``--num-ipus``, ``--precision``,
``--memory-proportion``, ``--half-partials/--no-half-partials``,
``--replication-factor``, ``--device-iterations``, the system
(``--ipu-model SPEC``, ``--ipu-version``), the inputs' shapes
(``--input NAME=DIMS[:DTYPE]``, ``--batch N``) and ``--report-dir DIR``.

Errors are one line on stderr, ``neurenix-ipu: error: ...``. Exit status:
0 on success; 1 when the model does not fit (its out-of-memory diagnosis is
printed on stdout first) or the device fails (busy IPUs, an internal error);
2 when something given is wrong: arguments, files, the model, its inputs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .compiled import STORAGE_TYPES
from .errors import (
    DeviceUnavailableError,
    IPUError,
    IPUInternalError,
    IPUOutOfMemoryError,
    IPUPlanWarning,
    IPUStateError,
)
from .options import FP8_FORMATS, PRECISIONS, IPUModel
from .report import _bytes, _seconds

PROG = "neurenix-ipu"
VERSIONS = ("ipu1", "ipu2", "bow", "ipu21")


class UsageError(Exception):
    """Something given on the command line cannot be used (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line like every other error here."""

    def error(self, message: str) -> None:  # type: ignore[override]
        hint = f"; see '{self.prog} --help'"
        print(f"{PROG}: error: {message}{hint}", file=sys.stderr)
        sys.exit(2)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


# -- arguments -------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _parse_shapes(items: Sequence[str]) -> Dict[str, Tuple[Optional[Tuple[int, ...]], Optional[np.dtype]]]:
    """``--input NAME=D0,D1,...[:DTYPE]`` (DIMS may be empty for a scalar,
    or left out with ``NAME=:DTYPE`` to change only the type)."""
    out = {}
    for item in items:
        name, eq, rest = item.partition("=")
        if not name or not eq:
            raise UsageError(f"--input expects NAME=D0,D1,...[:DTYPE], got {item!r}")
        dims, _, dtype = rest.partition(":")
        shape = None
        if dims.strip() or not dtype:
            try:
                shape = tuple(int(d) for d in dims.split(",") if d.strip())
            except ValueError:
                raise UsageError(f"--input {item!r}: dimensions must be integers separated by commas") from None
            if any(d < 0 for d in shape):
                raise UsageError(f"--input {item!r}: dimensions must not be negative")
        dt = None
        if dtype:
            try:
                dt = np.dtype(dtype)
            except TypeError:
                raise UsageError(f"--input {item!r}: unknown element type {dtype!r} (e.g. float32, int64)") from None
        if name in out:
            raise UsageError(f"--input gives '{name}' twice")
        out[name] = (shape, dt)
    return out


def _load_array_file(path: str, what: str) -> Any:
    if not os.path.exists(path):
        raise UsageError(f"{what}: no such file '{path}'")
    try:
        return np.load(path, allow_pickle=False)
    except Exception as e:  # zipfile, pickle and format errors are not all OSError/ValueError
        raise UsageError(f"{what}: '{path}' is not a numpy .npy/.npz file ({_one_line(e)})") from None


def _read_data(args: argparse.Namespace) -> Dict[str, np.ndarray]:
    data: Dict[str, np.ndarray] = {}
    if getattr(args, "inputs", None):
        npz = _load_array_file(args.inputs, "--inputs")
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise UsageError(f"--inputs: '{args.inputs}' is a single .npy array; give a .npz with one array per "
                             "input name, or use --input-file NAME=FILE.npy")
        try:
            with npz:
                for k in npz.files:
                    data[k] = npz[k]
        except Exception as e:
            raise UsageError(f"--inputs: cannot read '{args.inputs}' ({_one_line(e)})") from None
    for item in getattr(args, "input_file", None) or []:
        name, eq, path = item.partition("=")
        if not name or not eq or not path:
            raise UsageError(f"--input-file expects NAME=FILE.npy, got {item!r}")
        a = _load_array_file(path, f"--input-file {name}")
        if not isinstance(a, np.ndarray):
            raise UsageError(f"--input-file {name}: '{path}' is an .npz archive; give one .npy array per input")
        data[name] = a
    return data


def _ipu_model(args: argparse.Namespace) -> Optional[IPUModel]:
    model = IPUModel.from_spec(args.ipu_model) if args.ipu_model else None
    if args.ipu_version:
        base = model or IPUModel.from_env() or IPUModel()
        model = dataclasses.replace(base, version=args.ipu_version)
    return model


# -- inputs ----------------------------------------------------------------------


def _declared_inputs(proto: Any) -> List[Tuple[str, Optional[str], Optional[List[Any]]]]:
    from .planning import _graph_inputs

    return [(vi.name, dt, dims) for vi, dt, dims in _graph_inputs(proto)]


def _prepare(
    args: argparse.Namespace, proto: Any, data: Dict[str, np.ndarray], micro_batches: int = 1,
    placeholder_batch: Optional[int] = None,
) -> Tuple[Any, Dict[str, np.ndarray]]:
    """The model (its batch changed if ``--batch`` asks) and example inputs
    of one micro-batch for compiling it. ``data``: arrays read from files,
    each a whole run's samples (``micro_batches`` micro-batches); their first
    micro-batch is the example. Other inputs take their shape from
    ``--input``, ``--batch`` and the model (``placeholder_batch`` stands in
    for a dynamic first dimension), as read-only zeros."""
    from .planning import with_batch_size

    declared = _declared_inputs(proto)
    names = [n for n, _, _ in declared]
    shapes = _parse_shapes(args.input)
    for what, keys in (("--input", shapes), ("the input files", data)):
        unknown = [k for k in keys if k not in names]
        if unknown:
            raise UsageError(
                f"{what} name {', '.join(map(repr, unknown))}, which the model does not have; its inputs are "
                f"{', '.join(map(repr, names)) or 'none'}"
            )
    batch = args.batch
    examples: Dict[str, np.ndarray] = {}
    for name, dt, dims in declared:
        shape, given_dt = shapes.get(name, (None, None))
        if name in data:
            a = data[name]
            if dt in STORAGE_TYPES and a.dtype.kind == "V" and a.dtype.itemsize == np.dtype(dt).itemsize:
                # numpy's .npy format keeps ml_dtypes arrays as raw bytes.
                a = data[name] = a.view(dt)
            if given_dt is not None and a.dtype != given_dt:
                a = data[name] = a.astype(given_dt)
            if micro_batches > 1:
                if a.ndim == 0 or a.shape[0] % micro_batches:
                    raise UsageError(
                        f"input '{name}': the file's array has shape {list(a.shape)}, but a run takes "
                        f"{micro_batches} micro-batches (device iterations x replicas) along the first axis"
                    )
                a = a[: a.shape[0] // micro_batches]
            if shape is not None and tuple(a.shape) != shape:
                raise UsageError(
                    f"input '{name}': the file's array has {list(a.shape)} per micro-batch but --input says "
                    f"{list(shape)}"
                )
            if batch is not None and (a.ndim == 0 or a.shape[0] != batch):
                raise UsageError(
                    f"input '{name}': the file's array has {list(a.shape)} per micro-batch, not a batch of {batch}"
                )
            examples[name] = a
            continue
        if shape is None:
            if dims is None:
                raise UsageError(f"input '{name}' has no shape in the model; give it with --input {name}=D0,D1,...")
            known = list(dims)
            first = batch if batch is not None else placeholder_batch
            if known and not isinstance(known[0], int) and first is not None:
                known[0] = first
            if not all(isinstance(d, int) for d in known):
                shown = ["?" if d is None else d for d in dims]
                hint = " (or its batch with --batch N)" if all(isinstance(d, int) for d in dims[1:]) else ""
                raise UsageError(
                    f"input '{name}' has a dynamic shape {shown}; give it with --input {name}=D0,D1,...{hint}"
                )
            shape = tuple(known)
        dtype = np.dtype(given_dt or dt or "float32")
        examples[name] = np.broadcast_to(np.zeros((), dtype=dtype), shape)
    if batch is None:
        return proto, examples
    model, resized = with_batch_size(proto, batch, examples)
    return model, {k: (examples[k] if k in data else v) for k, v in resized.items()}


def _random_inputs(specs: Sequence[Any], seed: int) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for spec in specs:
        dt = np.dtype(spec.dtype)
        if dt.kind == "f" or spec.dtype in STORAGE_TYPES:
            out[spec.name] = rng.standard_normal(spec.shape).astype(dt)
        elif dt.kind == "b":
            out[spec.name] = rng.integers(0, 2, spec.shape).astype(dt)
        else:
            out[spec.name] = rng.integers(0, 10, spec.shape).astype(dt)
    return out


def _options(args: argparse.Namespace) -> Dict[str, Any]:
    """GraphCoreManager's options from the command line."""
    return dict(
        num_ipus=args.num_ipus,
        precision=args.precision,
        memory_proportion=args.memory_proportion,
        enable_half_partials=args.half_partials,
        fp8_format=args.fp8_format,
        replication_factor=args.replication_factor,
        device_iterations=args.device_iterations,
        ipu_model=_ipu_model(args),
    )


# -- commands ----------------------------------------------------------------------


def _cmd_info(args: argparse.Namespace) -> int:
    from neurenix import _native

    from .manager import GraphCoreManager

    m = GraphCoreManager(num_ipus=1, compile_only=True, ipu_model=_ipu_model(args))
    d = m.ipu_model.describe()
    print(f"Simulated system: {d.num_ipus} x {d.version} ({d.chip}), {d.tiles_per_ipu:,} tiles x "
          f"{_bytes(d.bytes_per_tile)} = {_bytes(d.tiles_per_ipu * d.bytes_per_tile)} per IPU, "
          f"{d.clock_hz / 1e9:.2f} GHz")
    groups: Dict[str, List[int]] = {}
    for i in m.get_ipu_info():
        key = i["status"] + (f" (pid {i['holder_pid']})" if i["holder_pid"] else "")
        groups.setdefault(key, []).append(i["id"])
    print("; ".join(f"{_ranges(ids)}: {status}" for status, ids in groups.items()))
    print()
    print("Targets (per IPU; flops per tile per cycle):")
    head = ["version", "chip", "tiles", "bytes/tile", "clock", "FP16", "FP32", "FP8", "peak FP16", "exchange",
            "IPU-Links", "host link"]
    rows = []
    for v in VERSIONS:
        t = _native.describe_system(f"version={v}")
        host = f"{t.host_link}, {t.host_link_bytes_per_sec / 1e9:.2f} GB/s"
        rows.append([
            t.version, t.chip, f"{t.tiles_per_ipu:,}", f"{t.bytes_per_tile:,}", f"{t.clock_hz / 1e9:.2f} GHz",
            f"{t.fp16_flops_per_cycle}",
            f"{t.fp32_flops_per_cycle}",
            f"{t.fp8_flops_per_cycle}" if t.fp8_flops_per_cycle else "-",
            f"{t.tiles_per_ipu * t.fp16_flops_per_cycle * t.clock_hz / 1e12:.1f} TFLOPS",
            f"{t.exchange_bytes_per_cycle} B/cycle/tile",
            f"{t.ipu_links} x {t.ipu_link_bytes_per_sec / 1e9:.0f} GB/s",
            host,
        ])
    widths = [max(len(r[k]) for r in [head] + rows) for k in range(len(head))]
    for r in [head] + rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


def _ranges(ids: List[int]) -> str:
    out, start = [], ids[0]
    for k, a in enumerate(ids):
        if k + 1 == len(ids) or ids[k + 1] != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            if k + 1 < len(ids):
                start = ids[k + 1]
    return ("IPU " if len(ids) == 1 else "IPUs ") + ", ".join(out)


def _fits_line(report: Any) -> str:
    per_ipu = report.memory_per_ipu()
    busiest = max(per_ipu, key=lambda m: m["max_tile_bytes"])
    capacity = report.system.tiles_per_ipu * report.bytes_per_tile
    used = ", ".join(f"IPU {m['ipu']} {_bytes(m['total_bytes'])} of {_bytes(capacity)}" for m in per_ipu[:4])
    if len(per_ipu) > 4:
        used += f", ... ({len(per_ipu)} IPUs)"
    return (
        f"Fits: yes, on {report.num_ipus} x {report.system.version}: {used}; busiest tile {busiest['max_tile']} "
        f"(IPU {busiest['ipu']}) at {_bytes(busiest['max_tile_bytes'])} of {_bytes(report.bytes_per_tile)} "
        f"({100.0 * busiest['max_tile_bytes'] / report.bytes_per_tile:.1f}%)"
    )


def _estimate_line(report: Any) -> str:
    return (
        f"Estimated: latency {_seconds(report.latency_seconds)} per micro-batch of {report.micro_batch_size}, "
        f"throughput {report.estimated_throughput:,.0f} samples/s"
    )


def _save_reports(args: argparse.Namespace, compiled: Any, execution: Any = None) -> None:
    if not args.report_dir:
        return
    paths = compiled.report.save(args.report_dir, execution=execution)
    print(f"Report files in {args.report_dir}:")
    for p in paths:
        print(f"  {p}")


def _compile(manager: Any, model: Any, examples: Dict[str, np.ndarray]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IPUPlanWarning)  # the report lists them
        try:
            compiled = manager.compile_model(model, examples)
        except IPUOutOfMemoryError as e:
            print("Fits: no")
            print(str(e))
            raise
    print(_fits_line(compiled.report))
    print(_estimate_line(compiled.report))
    print()
    print(compiled.report)
    return compiled


def _cmd_compile(args: argparse.Namespace) -> int:
    from . import onnx_import
    from .manager import GraphCoreManager
    from .planning import find_max_batch, find_min_ipus

    if args.refine and not args.max_batch:
        raise UsageError("--refine only applies with --max-batch")
    if args.batch_sizes and not args.max_batch:
        raise UsageError("--batch-sizes only applies with --max-batch")
    proto = onnx_import.load(args.model)
    model, examples = _prepare(args, proto, {}, placeholder_batch=1 if args.max_batch else None)
    options = _options(args)
    if not (args.max_batch or args.min_ipus):
        with GraphCoreManager(compile_only=True, **options) as manager:
            compiled = _compile(manager, model, examples)
        _save_reports(args, compiled)
        return 0
    status = 0
    if args.min_ipus:
        ipus = find_min_ipus(model, examples, max_ipus=args.max_ipus,
                             **{k: v for k, v in options.items() if k != "num_ipus"})
        print(ipus)
        status = status or (0 if ipus.smallest is not None else 1)
    if args.max_batch:
        if args.min_ipus:
            print()
        batches = _parse_batches(args.batch_sizes)
        batch = find_max_batch(model, examples, batch_sizes=batches, search=args.refine, **options)
        print(batch)
        status = status or (0 if batch.largest is not None else 1)
    if args.report_dir:
        print(f"{PROG}: warning: --report-dir is not written by --max-batch/--min-ipus searches", file=sys.stderr)
    return status


def _parse_batches(text: Optional[str]) -> Optional[List[int]]:
    if not text:
        return None
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--batch-sizes expects positive integers separated by commas, got {text!r}") from None
    if not out or any(b < 1 for b in out):
        raise UsageError(f"--batch-sizes expects positive integers separated by commas, got {text!r}")
    return out


def _cmd_run(args: argparse.Namespace) -> int:
    from . import onnx_import
    from .manager import GraphCoreManager

    proto = onnx_import.load(args.model)
    data = _read_data(args)
    micro_batches = args.device_iterations * args.replication_factor
    model, examples = _prepare(args, proto, data, micro_batches)
    with GraphCoreManager(compile_only=False, **_options(args)) as manager:
        compiled = _compile(manager, model, examples)
        print()
        drawn = _random_inputs([s for s in compiled.inputs if s.name not in data], args.seed)
        outs = manager.execute_model(compiled, dict(data, **drawn))
        execution = manager.last_execution_report
    for spec in compiled.inputs:
        how = f"random (seed {args.seed})" if spec.name in drawn else "from file"
        print(f"input {spec.name}: {spec.dtype}{list(spec.shape)} {how}")
    for spec, o in zip(compiled.outputs, outs):
        stats = ""
        if o.size:
            v = o.astype(np.float64)
            finite = np.isfinite(v)
            if finite.any():
                w = v[finite]
                stats = f" mean {float(np.mean(w)):.6g} min {float(np.min(w)):.6g} max {float(np.max(w)):.6g}"
            if not finite.all():
                stats += f"; {int(v.size - finite.sum())} not finite"
        print(f"output {spec.name}: {o.dtype}{list(o.shape)}{stats}")
    print(execution)
    if args.output:
        path = args.output if args.output.endswith(".npz") else args.output + ".npz"
        np.savez(path, **{spec.name: o for spec, o in zip(compiled.outputs, outs)})  # type: ignore[arg-type]
        print(f"Outputs written to {path}")
    _save_reports(args, compiled, execution)
    return 0


# -- entry point ---------------------------------------------------------------------


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Compile and run ONNX models on (simulated) Graphcore IPUs.")
    sub = p.add_subparsers(dest="command", required=True, metavar="{info,compile,run}", parser_class=_Parser)

    def system(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--ipu-model", metavar="SPEC",
                        help="the simulated system, e.g. version=ipu2,num_ipus=4,tiles_per_ipu=64 "
                             "(default: $NEURENIX_IPU_MODEL, else 16 x ipu2)")
        sp.add_argument("--ipu-version", choices=VERSIONS, help="the IPU version of the simulated system")

    sp = sub.add_parser("info", help="describe the simulated system and the IPU versions")
    system(sp)
    for name, what in (("compile", "compile an ONNX model (compile-only: nothing runs) and report how it fits"),
                       ("run", "compile an ONNX model and run it on the simulator")):
        sp = sub.add_parser(name, help=what, description=what)
        sp.add_argument("model", help="the ONNX model file")
        system(sp)
        sp.add_argument("--num-ipus", type=_positive_int, default=1, metavar="N",
                        help="IPUs to use, a power of two (default 1)"
                        + ("; may exceed the system's, for planning" if name == "compile" else ""))
        sp.add_argument("--precision", choices=PRECISIONS, default="float16",
                        help="default float16; float8 needs --ipu-version ipu21")
        sp.add_argument("--fp8-format", choices=FP8_FORMATS, default="e4m3",
                        help="float8 format of matmul/conv operands under --precision float8 (default e4m3)")
        sp.add_argument("--memory-proportion", type=float, default=0.6, metavar="P",
                        help="fraction of tile memory for matmul/conv temporaries, in (0, 1] (default 0.6)")
        sp.add_argument("--half-partials", action=argparse.BooleanOptionalAction, default=True,
                        help="accumulate matmul/conv partial sums in half (default: yes)")
        sp.add_argument("--replication-factor", type=_positive_int, default=1, metavar="R",
                        help="replicas of the model, each on num_ipus / R IPUs (default 1)")
        sp.add_argument("--device-iterations", type=_positive_int, default=1, metavar="D",
                        help="micro-batches per run (default 1); a run takes micro-batch x D x R samples")
        sp.add_argument("--input", action="append", default=[], metavar="NAME=DIMS[:DTYPE]",
                        help="shape (and element type) of an input, e.g. x=8,3,224,224 or ids=1,128:int64")
        sp.add_argument("--batch", type=_positive_int, metavar="N",
                        help="first dimension of every input that has a batch dimension (the micro-batch)")
        sp.add_argument("--report-dir", metavar="DIR",
                        help="write the report files (JSON, trace, summary, plots, HTML) into DIR")
        if name == "compile":
            sp.add_argument("--max-batch", action="store_true",
                            help="search the largest batch that fits (powers of two up to 1024)")
            sp.add_argument("--batch-sizes", metavar="B1,B2,...", help="batch sizes --max-batch tries")
            sp.add_argument("--refine", action="store_true",
                            help="with --max-batch: bisect between the last power of two that fits and the next")
            sp.add_argument("--min-ipus", action="store_true", help="search the fewest IPUs the model fits on")
            sp.add_argument("--max-ipus", type=_positive_int, default=64, metavar="N",
                            help="the most IPUs --min-ipus tries (default 64)")
        else:
            sp.add_argument("--inputs", metavar="FILE.npz", help="input arrays by name")
            sp.add_argument("--input-file", action="append", default=[], metavar="NAME=FILE.npy",
                            help="one input's array")
            sp.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
            sp.add_argument("--output", metavar="FILE.npz", help="write the outputs, by name, into FILE.npz")
    return p


_EXIT_FAILED = (IPUOutOfMemoryError, DeviceUnavailableError, IPUInternalError, IPUStateError)


def main(argv: Optional[List[str]] = None) -> int:
    args = _build_parser().parse_args(argv)
    try:
        if args.command == "info":
            return _cmd_info(args)
        if args.command == "compile":
            return _cmd_compile(args)
        return _cmd_run(args)
    except IPUOutOfMemoryError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else "out of memory"
        print(f"{PROG}: error: the model does not fit: {_one_line(first)} (diagnosis above)", file=sys.stderr)
        return 1
    except IPUError as e:
        print(f"{PROG}: error: {type(e).__name__}: {_one_line(e)}", file=sys.stderr)
        return 1 if isinstance(e, _EXIT_FAILED) else 2
    except UsageError as e:
        print(f"{PROG}: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"{PROG}: error: {type(e).__name__}: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
