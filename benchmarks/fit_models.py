"""Benchmark: do large models fit one IPU, and how evenly is the memory spread?

For each model: compiles it for one full `ipu2` and reports whether it fits,
the busiest and the median tile (bytes at peak), their ratio, the bytes over
capacity of the worst tile when it does not fit, and the compile time.

    python benchmarks/fit_models.py

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
    ("light_resnet50", 16, "float16"),
    ("light_resnet50", 32, "float16"),
    ("light_vgg19", 1, "float32"),
]


def main():
    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel, IPUOutOfMemoryError

    print("| model | batch | precision | fits one ipu2 | busiest tile (KiB) | median tile (KiB) | busiest / median "
          "| compile (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, batch, precision in CASES:
        model, feeds = light_model(name, batch)
        with GraphCoreManager(precision=precision, ipu_model=IPUModel(num_ipus=16), compile_only=True) as ipu:
            t0 = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    rep = ipu.compile_model(model, feeds).report
            except IPUOutOfMemoryError as e:
                worst = max(e.tiles, key=lambda t: t.used)
                print(f"| {name} | {batch} | {precision} | no: {len(e.tiles)} tiles over, worst {worst.used:,} B "
                      f"(tile {worst.tile}) | | | | {time.perf_counter() - t0:.1f} |", flush=True)
                continue
            dt = time.perf_counter() - t0
        totals = sorted(t.total for t in rep.tiles)
        busiest, median = totals[-1], totals[len(totals) // 2]
        print(f"| {name} | {batch} | {precision} | yes | {busiest / 1024:,.0f} | {median / 1024:,.0f} | "
              f"{busiest / median:.2f} | {dt:.1f} |", flush=True)


if __name__ == "__main__":
    main()
