"""Benchmark: where the simulator's host time goes, from the execution
report's host time by step (`ExecutionReport.step_seconds`).

For each model: compiled for one full `ipu2`, run `--repeat` times after a
warm-up run, each step's median over the runs; then the time by operator
type, by part of an operation (the step's name after its node: a
convolution's `conv` products, its `reduce` partial sums, a product's
operand `fetch`, ...; an element-wise or pooling operation's steps carry the
node's name alone) and the layers that take the most. The header line also
gives the process's CPU time over the wall time of the timed runs (Python
included): near the thread count when every simulator thread held a core
throughout, working or spin-waiting between steps; a slow run with the
figure near the thread count was not kept off the cores.

    python benchmarks/host_profile.py [--models "bert-base-like b1" ...] [--repeat 20]
                                      [--threads 2] [--precision float32] [--top 8]

Prints markdown tables (the ones recorded in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from host_side import cpu_seconds  # noqa: E402
from models import MODELS  # noqa: E402


def step_part(step) -> str:
    """What part of its operation a step is: the name after the node's
    (`n62/conv` -> `conv`), the step's kind when the name is the node's."""
    if step.kind in ("host_to_device", "device_to_host"):
        return "host streams"
    if step.node and step.name.startswith(step.node + "/"):
        return step.name[len(step.node) + 1:].split("/")[0]
    return step.kind


def profile(name, threads, repeat, precision):
    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel

    model, feeds = MODELS[name]()
    with GraphCoreManager(num_ipus=1, precision=precision, ipu_model=IPUModel.from_spec("version=ipu2,num_ipus=1"),
                          simulator_threads=threads) as ipu:
        compiled = ipu.compile_model(model, feeds)
        ipu.execute_model(compiled, feeds)  # warm-up: first touches of tile memory
        runs = []
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        for _ in range(repeat):
            ipu.execute_model(compiled, feeds)
            runs.append(compiled.last_execution)
        cpu, elapsed = cpu_seconds() - cpu0, time.perf_counter() - t0
    steps = compiled.report.steps
    seconds = np.median(np.array([r.step_seconds for r in runs]), axis=0)
    wall = float(np.median([r.wall_seconds for r in runs]))
    op_type = {p.node: p.op_type for p in compiled.report.placement}
    by_op, by_part = defaultdict(float), defaultdict(float)
    for s, t in zip(steps, seconds):
        if s.kind in ("host_to_device", "device_to_host"):
            by_op["(host streams)"] += t
        else:
            by_op[op_type.get(s.node, "(no node)") if s.node else "(no node)"] += t
        by_part[step_part(s)] += t
    # The layers from the same per-step medians.
    layers = dataclasses.replace(runs[-1], step_seconds=[float(t) for t in seconds]).host_seconds_per_layer(
        compiled.report)
    return wall, float(seconds.sum()), cpu / elapsed, by_op, by_part, layers


def table(title, rows, total):
    lines = [f"| {title} | host time (ms) | share |", "|---|---|---|"]
    for k, t in sorted(rows.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {k or '(no node)'} | {t * 1e3:.2f} | {100 * t / total:.1f}% |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=["bert-base-like b1", "resnet50-light b1", "squeezenet-light b1"])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="float32")
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    for name in args.models:
        wall, steps_total, busy, by_op, by_part, layers = profile(name, args.threads, args.repeat, args.precision)
        print(f"#### {name} ({args.precision}): {wall * 1e3:.2f} ms a run (median of {args.repeat}), "
              f"{steps_total * 1e3:.2f} ms of it in steps; CPU time / wall time over the runs {busy:.2f} "
              f"with {args.threads} thread(s)\n")
        print(table("operator", by_op, steps_total) + "\n")
        print(table("part of the operation", by_part, steps_total) + "\n")
        lines = ["| layer | operator | host time (ms) | steps |", "|---|---|---|---|"]
        for e in layers[:args.top]:
            lines.append(f"| {e['node']} | {e['op_type']} | {e['seconds'] * 1e3:.2f} | {e['steps']} |")
        print("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
