"""Command line: ``neurenix-ipu`` (or ``python -m neurenix.hardware.graphcore``).

    neurenix-ipu info [--ipu-model SPEC]
    neurenix-ipu compile MODEL.onnx [--input NAME=DIMS[:DTYPE] ...] [options]
    neurenix-ipu run MODEL.onnx [--input ...] [options] [--seed N]

``compile`` reports whether and how the model fits (memory per IPU, matmul
plans, estimated cycles); ``run`` also executes it on the simulator with
random inputs and prints the outputs' summary and the run report.
"""

from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

from .errors import IPUError
from .manager import GraphCoreManager
from .options import PRECISIONS, IPUModel


def _parse_inputs(items: Sequence[str]) -> Dict[str, tuple]:
    out = {}
    for it in items:
        name, _, rest = it.partition("=")
        if not name or not rest:
            raise SystemExit(f"--input expects NAME=D0,D1,...[:DTYPE], got {it!r}")
        dims, _, dtype = rest.partition(":")
        try:
            shape = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            raise SystemExit(f"--input {it!r}: dimensions must be integers") from None
        out[name] = (shape, dtype or None)
    return out


def _example_inputs(manager: GraphCoreManager, model: str, given: Dict[str, tuple], seed: int):
    from . import onnx_import

    native = onnx_import.to_native(onnx_import.load(model))
    rng = np.random.default_rng(seed)
    arrays = {}
    for v in native.inputs():
        name, dims = v.name, v.dims
        shape, dt = given.get(name, (None, None))
        if shape is None:
            if dims is None or any(not isinstance(d, int) for d in dims):
                raise SystemExit(f"input {name!r} has dynamic shape {dims}; give it with --input {name}=D0,D1,...")
            shape = tuple(dims)
        dt = np.dtype(dt or onnx_import.dtype_name(v.elem_type) or "float32")
        if dt.kind == "f":
            arrays[name] = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            arrays[name] = rng.integers(0, 2, shape).astype(dt)
        else:
            arrays[name] = rng.integers(0, 10, shape).astype(dt)
    return arrays


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="neurenix-ipu", description="Compile and run models on (simulated) IPUs.")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp):
        sp.add_argument("--ipu-model", help="simulated system, e.g. version=ipu2,num_ipus=4,tiles_per_ipu=64")
        sp.add_argument("--num-ipus", type=int, default=1)
        sp.add_argument("--precision", choices=PRECISIONS, default="float16")
        sp.add_argument("--memory-proportion", type=float, default=0.6)
        sp.add_argument("--no-half-partials", action="store_true")

    sp = sub.add_parser("info", help="describe the simulated system")
    sp.add_argument("--ipu-model")
    for name in ("compile", "run"):
        sp = sub.add_parser(name, help=f"{name} an ONNX model")
        sp.add_argument("model")
        sp.add_argument("--input", action="append", default=[], metavar="NAME=DIMS[:DTYPE]")
        sp.add_argument("--seed", type=int, default=0)
        common(sp)
    args = p.parse_args(argv)

    try:
        ipu_model = IPUModel.from_spec(args.ipu_model) if args.ipu_model else None
        if args.command == "info":
            m = GraphCoreManager(num_ipus=1, compile_only=True, ipu_model=ipu_model)
            for i in m.get_ipu_info():
                print(f"IPU {i['id']}: {i['version']} {i['chip']}, {i['tiles']} tiles x {i['bytes_per_tile']:,} B, "
                      f"{i['clock_hz'] / 1e9:.2f} GHz, {i['target']}, {i['status']}"
                      + (f" (pid {i['holder_pid']})" if i["holder_pid"] else ""))
            return 0
        manager = GraphCoreManager(
            num_ipus=args.num_ipus,
            precision=args.precision,
            memory_proportion=args.memory_proportion,
            enable_half_partials=not args.no_half_partials,
            compile_only=args.command == "compile",
            ipu_model=ipu_model,
        )
        with manager:
            inputs = _example_inputs(manager, args.model, _parse_inputs(args.input), args.seed)
            compiled = manager.compile_model(args.model, inputs)
            print(compiled.report)
            if args.command == "run":
                outs = manager.execute_model(compiled, inputs)
                for spec, o in zip(compiled.outputs, outs):
                    print(f"output {spec.name}: {o.dtype}{list(o.shape)} mean {float(np.mean(o)):.6g} "
                          f"min {float(np.min(o)):.6g} max {float(np.max(o)):.6g}")
                print(manager.last_execution_report)
        return 0
    except IPUError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
