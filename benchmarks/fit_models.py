"""Benchmark: do large models fit one IPU, and how evenly is the memory spread?

For each model: compiles it for one full `ipu2` and reports whether it fits,
the busiest and the median tile (bytes at peak), their ratio, the bytes over
capacity of the worst tile when it does not fit, and the compile time; with
``--run``, runs what fits once and compares with onnxruntime.

    python benchmarks/fit_models.py [--run]

Prints a markdown table (the one recorded in docs/benchmarks.md).
"""

from __future__ import annotations

import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from models import light_model  # noqa: E402

CASES = [
    # model, batch, precision, memory_proportion
    ("light_resnet50", 16, "float16", 0.6),
    ("light_resnet50", 32, "float16", 0.6),
    ("light_vgg19", 1, "float32", 0.6),
    ("light_vgg19", 1, "float32", 0.3),
]


def main(argv=None):
    import argparse

    import numpy as np

    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel, IPUOutOfMemoryError

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="store_true", help="run what fits once, against onnxruntime")
    args = ap.parse_args(argv)
    print("| model | batch | precision | memory_proportion | fits one ipu2 | busiest tile (KiB) | median tile (KiB) "
          "| busiest / median | compile (s) | max abs err vs ORT |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, batch, precision, proportion in CASES:
        model, feeds = light_model(name, batch)
        with GraphCoreManager(precision=precision, memory_proportion=proportion, ipu_model=IPUModel(num_ipus=16),
                              simulator_threads=2) as ipu:
            t0 = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    compiled = ipu.compile_model(model, feeds)
            except IPUOutOfMemoryError as e:
                worst = max(e.tiles, key=lambda t: t.used)
                print(f"| {name} | {batch} | {precision} | {proportion} | no: {len(e.tiles)} tiles over, worst "
                      f"{worst.used:,} B (tile {worst.tile}) | | | | {time.perf_counter() - t0:.1f} | |", flush=True)
                continue
            dt = time.perf_counter() - t0
            err = ""
            if args.run:
                import onnxruntime as ort

                got = ipu.execute_model(compiled, feeds)
                want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
                err = f"{max(float(np.max(np.abs(g.astype(np.float64) - w))) for g, w in zip(got, want)):.1e}"
            rep = compiled.report
            compiled.unload()
        totals = sorted(t.total for t in rep.tiles)
        busiest, median = totals[-1], totals[len(totals) // 2]
        print(f"| {name} | {batch} | {precision} | {proportion} | yes | {busiest / 1024:,.0f} | {median / 1024:,.0f} | "
              f"{busiest / median:.2f} | {dt:.1f} | {err} |", flush=True)


if __name__ == "__main__":
    main()
