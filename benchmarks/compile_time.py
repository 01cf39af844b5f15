"""Compile time of the benchmark models, each compile in a fresh process (as a
user's first compile is: fresh memory, nothing cached), to a loaded
executable on one full simulated `ipu2`.

    python benchmarks/compile_time.py [--models "resnet50-light b1" ...]
        [--repeat 10] [--precision float32]

For each model, `--repeat` processes each compile and load it once and
report the whole (compile and load), the compile, the load and the compile's
stages as its progress reports time them (each stage from its first report
to the next stage's); printed per process, then the median and the fastest,
and for the models with a goal (ResNet-50 b1 1.5 s, BERT-style b8 2 s) how
many processes met it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_PROBE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from models import MODELS
from neurenix.hardware.graphcore import GraphCoreManager, IPUModel
from neurenix.hardware.graphcore import progress as progress_module

# The stages' first reports, timed (the progress callback sees every report).
firsts = {}
report = progress_module.CompileProgress.__call__
def timed(self, stage, done, total):
    firsts.setdefault(stage, time.perf_counter())
    return report(self, stage, done, total)
progress_module.CompileProgress.__call__ = timed

model, feeds = MODELS[sys.argv[2]]()
with GraphCoreManager(num_ipus=1, precision=sys.argv[3], ipu_model=IPUModel(version="ipu2", num_ipus=1)) as ipu:
    t0 = time.perf_counter()
    compiled = ipu.compile_model(model, feeds)
    t1 = time.perf_counter()
    compiled.load()
    t2 = time.perf_counter()
order = sorted(firsts, key=firsts.get)
stages = {s: (firsts[order[i + 1]] if i + 1 < len(order) else t1) - firsts[s] for i, s in enumerate(order)}
print(json.dumps({"total": t2 - t0, "compile": t1 - t0, "load": t2 - t1, "stages": stages}))
"""

DEFAULT_MODELS = ["resnet50-light b1", "bert-base-like b8"]
# The compile times the models are held to (seconds, to a loaded executable).
GOALS = {"resnet50-light b1": 1.5, "bert-base-like b8": 2.0}


def measure(model: str, precision: str) -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, NEURENIX_PROGRESS="0")
    out = subprocess.run([sys.executable, "-c", _PROBE, here, model, precision], check=True, capture_output=True,
                         text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=DEFAULT_MODELS)
    ap.add_argument("--repeat", type=int, default=5, help="fresh processes per model")
    ap.add_argument("--precision", default="float32")
    args = ap.parse_args()
    for model in args.models:
        runs = []
        for _ in range(args.repeat):
            r = measure(model, args.precision)
            runs.append(r)
            stages = " ".join(f"{s} {t:.3f}" for s, t in r["stages"].items())
            print(f"{model} {args.precision}: total {r['total']:.3f} s (compile {r['compile']:.3f}, "
                  f"load {r['load']:.3f}; {stages})", flush=True)
        totals = [r["total"] for r in runs]
        goal = GOALS.get(model)
        against = f", {sum(t < goal for t in totals)} of {len(totals)} under {goal} s" if goal else ""
        print(f"{model} {args.precision}: median {statistics.median(totals):.3f} s, fastest {min(totals):.3f} s"
              f"{against}", flush=True)


if __name__ == "__main__":
    main()
