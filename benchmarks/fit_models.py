"""Does a model fit one IPU, and how evenly is its memory spread over the tiles?

    python benchmarks/fit_models.py [--run] [--memory-proportion 0.6] [--configs vgg19-f32-b1 ...]

For each configuration: compile on one full ``ipu2`` (1,472 tiles x 624 KiB) and
print the compile time, the busiest and the median tile (over the tiles the program
uses) and their ratio. With ``--run``, also execute it once and give the largest
absolute difference from onnxruntime on the float32 model. A model that does not fit
prints the overflowing tiles instead. Prints a markdown table (the one recorded in
docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from host_side import ort_session  # noqa: E402
from models import light_model  # noqa: E402

CONFIGS = {
    "vgg19-f32-b1": ("light_vgg19", "float32", 1),
    "resnet50-f16-b16": ("light_resnet50", "float16", 16),
    "resnet50-f16-b32": ("light_resnet50", "float16", 32),
}


def fit(name, run, proportion, system, threads):
    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel
    from neurenix.hardware.graphcore.errors import IPUOutOfMemoryError

    onnx_name, precision, batch = CONFIGS[name]
    model, feeds = light_model(onnx_name, batch)
    row = {"config": name, "model": onnx_name, "precision": precision, "batch": batch}
    with GraphCoreManager(num_ipus=1, precision=precision, memory_proportion=proportion,
                          ipu_model=IPUModel.from_spec(system), simulator_threads=threads,
                          compile_only=not run) as ipu:
        t0 = time.perf_counter()
        try:
            compiled = ipu.compile_model(model, feeds)
        except IPUOutOfMemoryError as e:
            row["compile_s"] = time.perf_counter() - t0
            row["fits"] = False
            row["overflow"] = e.tiles
            return row
        row["compile_s"] = time.perf_counter() - t0
        row["fits"] = True
        rep = compiled.report
        totals = [t.total for t in rep.tiles]
        row["busiest_kib"] = max(totals) / 1024
        row["median_kib"] = statistics.median(totals) / 1024
        row["tiles"] = len(totals)
        row["warnings"] = len(rep.warnings)
        row["device_us"] = rep.estimated_seconds * 1e6
        if run:
            t0 = time.perf_counter()
            got = ipu.execute_model(compiled, feeds)
            row["run_s"] = time.perf_counter() - t0
    if run:
        sess = ort_session(model, threads)
        expected = sess.run(None, feeds)
        row["max_abs_err"] = max(float(np.max(np.abs(g.astype(np.float64) - e))) for g, e in zip(got, expected))
    return row


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--configs", nargs="*", default=list(CONFIGS))
    p.add_argument("--run", action="store_true", help="execute once and compare with onnxruntime")
    p.add_argument("--memory-proportion", type=float, default=0.6)
    p.add_argument("--system", default="version=ipu2,num_ipus=1")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    print(f"system={a.system} memory_proportion={a.memory_proportion} run={a.run}")
    print("| model | precision | batch | fits | compile (s) | busiest tile (KiB) | median tile (KiB) | busiest / median "
          "| est. device time (us) | run (s) | max abs err vs ORT |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for c in a.configs:
        r = fit(c, a.run, a.memory_proportion, a.system, a.threads)
        if not r["fits"]:
            worst = max(r["overflow"], key=lambda t: t.used)
            print(f"| {r['model']} | {r['precision']} | {r['batch']} | **no**: {len(r['overflow'])} tiles overflow, "
                  f"worst tile {worst.tile} {worst.used / 1024:.1f} KiB of {worst.capacity / 1024:.0f} | "
                  f"{r['compile_s']:.2f} | | | | | | |", flush=True)
            continue
        run_s = f"{r['run_s']:.1f}" if "run_s" in r else ""
        err = f"{r['max_abs_err']:.1e}" if "max_abs_err" in r else ""
        print(f"| {r['model']} | {r['precision']} | {r['batch']} | yes | {r['compile_s']:.2f} | "
              f"{r['busiest_kib']:.1f} | {r['median_kib']:.1f} | {r['busiest_kib'] / r['median_kib']:.2f} | "
              f"{r['device_us']:.0f} | {run_s} | {err} |", flush=True)


if __name__ == "__main__":
    main()
