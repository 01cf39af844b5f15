"""Two builds of the native library in one process: the run time of one
against the other on the same model, free of the host's drift between
processes and hours (see docs/benchmarks.md).

    python benchmarks/compare_builds.py BEFORE.so AFTER.so
        [--models "bert-base-like b1" ...] [--precision float32] [--runs 40]

Each `.so` is a built `neurenix/_native.abi3.so` (for example a copy of
`target/release/libneurenix_native.so` from each checkout). The package is
loaded twice, under two names, each with its own library; each build
compiles the model once, the outputs are compared bit for bit, and then the
two run alternately (`--runs` each, the order swapped every round). Printed
per model: the medians, after / before (the median of the paired ratios),
and in how many rounds the second build was faster. The same file given
twice measures the method itself (see below).

With `--steps N`, a run comparison also prints the N parts of the run that
take the most host time before (the report's step times, medians over the
runs, summed by the operator type and the part of its operation, as
benchmarks/host_profile.py names them: `Add compute`, `MatMul reduce`, ...),
each before and after.

With `--compile`, what alternates is a compile of the model to a loaded
executable (in a warm process, unlike benchmarks/compile_time.py's fresh
ones: for comparing two builds' compilers, not for the compile time itself).

The build loaded second tends to look faster: the same file given twice
gave 0.973-0.997 on 2026-11-28. With `--both-orders`, a second process
loads the builds the other way round and the two ratios are combined
(sqrt(r / r_swapped), which cancels a bias common to both orders): use it
for whole runs, whose changes are often that small.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "..", "python", "neurenix")


def load_as(name: str, native: str, root: str):
    """The package, copied to `root/name` with `native` as its library and
    its own imports renamed; returns its graphcore module."""
    dst = os.path.join(root, name)
    shutil.copytree(PACKAGE, dst, ignore=shutil.ignore_patterns("__pycache__", "_native*.so"))
    shutil.copy(native, os.path.join(dst, "_native.abi3.so"))
    pattern = re.compile(r"\b(from|import) neurenix\b")
    for folder, _, files in os.walk(dst):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                with open(path) as fh:
                    text = fh.read()
                with open(path, "w") as fh:
                    fh.write(pattern.sub(rf"\1 {name}", text))
    return importlib.import_module(f"{name}.hardware.graphcore")


def print_parts(report, steps, top: int) -> None:
    """The `top` parts of a run by host time before, each before and after
    (medians over the runs of each step, summed by operator type and part)."""
    from host_profile import step_part

    before = np.median(np.array(steps["before"]), axis=0)
    after = np.median(np.array(steps["after"]), axis=0)
    op_type = {p.node: p.op_type for p in report.placement}
    parts: dict = {}
    for s, a, b in zip(report.steps, before, after):
        key = f"{op_type.get(s.node, '-') if s.node else '-'} {step_part(s)}"
        n, sa, sb = parts.get(key, (0, 0.0, 0.0))
        parts[key] = (n + 1, sa + a, sb + b)
    for key, (n, a, b) in sorted(parts.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"  {key:<28} {n:4d} steps: before {a * 1e3:7.3f} ms, after {b * 1e3:7.3f} ms, "
              f"after / before {b / a if a else float('nan'):.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--models", nargs="+", default=["bert-base-like b1"])
    ap.add_argument("--precision", default="float32")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--compile", action="store_true", help="time compiles to a loaded executable, not runs")
    ap.add_argument("--steps", type=int, default=0, help="also print the N parts of a run that take the most time")
    ap.add_argument("--both-orders", action="store_true",
                    help="also load the builds the other way round (another process) and combine the ratios")
    args = ap.parse_args()
    ratios: dict = {}
    sys.path.insert(0, HERE)
    from models import MODELS

    root = tempfile.mkdtemp(prefix="neurenix-builds-")
    sys.path.insert(0, root)
    managers = {}
    for label, native in (("before", args.before), ("after", args.after)):
        graphcore = load_as(f"neurenix_{label}", native, root)
        # Each build takes its own device locks.
        os.environ["NEURENIX_IPU_LOCK_DIR"] = os.path.join(root, f"locks-{label}")
        ipu = graphcore.GraphCoreManager(num_ipus=1, precision=args.precision)
        ipu.__enter__()
        managers[label] = ipu
    try:
        for name in args.models:
            model, feeds = MODELS[name]()
            compiled = {k: ipu.compile_model(model, feeds) for k, ipu in managers.items()}
            outs = {k: managers[k].execute_model(c, feeds) for k, c in compiled.items()}
            same = all(np.array_equal(a, b) for a, b in zip(outs["before"], outs["after"]))
            times = {"before": [], "after": []}
            steps = {"before": [], "after": []}

            def once(k):
                if args.compile:
                    managers[k].compile_model(model, feeds).load()
                else:
                    managers[k].execute_model(compiled[k], feeds)
                    steps[k].append(compiled[k].last_execution.step_seconds)

            if args.compile:
                compiled.clear()  # (the executables of the check above, not kept while compiling)
            for i in range(args.runs):
                for k in ("before", "after") if i % 2 == 0 else ("after", "before"):
                    t = time.perf_counter()
                    once(k)
                    times[k].append(time.perf_counter() - t)
            a, b = np.array(times["before"]), np.array(times["after"])
            what = "compile" if args.compile else "run"
            ratios[name] = float(np.median(b / a))
            print(f"{name} {args.precision} {what}: before {np.median(a) * 1e3:.2f} ms, after {np.median(b) * 1e3:.2f} ms, "
                  f"after / before {np.median(b / a):.3f}, after faster in {int(np.sum(b < a))} of {args.runs}, "
                  f"outputs {'bit for bit the same' if same else 'DIFFERENT'}", flush=True)
            if args.steps and not args.compile:
                print_parts(compiled["before"].report, steps, args.steps)
    finally:
        for ipu in managers.values():
            ipu.__exit__(None, None, None)
        shutil.rmtree(root, ignore_errors=True)
    if args.both_orders:
        swapped = swapped_ratios(args)
        for name, r in ratios.items():
            if name in swapped:
                print(f"{name} {args.precision}: loaded the other way round, after / before {1 / swapped[name]:.3f}; "
                      f"both orders together {math.sqrt(r / swapped[name]):.3f}", flush=True)


def swapped_ratios(args) -> dict:
    """after / before per model with the builds loaded the other way round
    (AFTER first), as that process prints it: its 'after' is our 'before'."""
    cmd = [sys.executable, os.path.abspath(__file__), args.after, args.before, "--models", *args.models,
           "--precision", args.precision, "--runs", str(args.runs)] + (["--compile"] if args.compile else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    found = {}
    for name in args.models:
        m = re.search(rf"^{re.escape(name)} \S+ \w+: .*after / before ([0-9.]+)", out, re.M)
        if m:
            found[name] = float(m.group(1))
    return found


if __name__ == "__main__":
    main()
