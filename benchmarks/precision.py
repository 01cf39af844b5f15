"""Benchmark: what each precision setting costs and how far it moves the
outputs. For each model, every setting is compiled for one IPU, run on the
simulator, and compared with onnxruntime in float32 on the same inputs: max
absolute and relative error, busiest tile, total memory and estimated cycles.

    python benchmarks/precision.py [--models "resnet50-light b1" ...] [--system version=ipu21,num_ipus=1]

The default system is one ipu21 (C600), the one chip with float8.

Prints the markdown table recorded in docs/precision.md.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from models import MODELS  # noqa: E402

#: (label, manager options)
SETTINGS = [
    ("float32", dict(precision="float32")),
    ("float16, float partials", dict(precision="float16", enable_half_partials=False)),
    ("float16, half partials", dict(precision="float16", enable_half_partials=True)),
    ("mixed, half partials", dict(precision="mixed", enable_half_partials=True)),
    ("float8 e4m3", dict(precision="float8", fp8_format="e4m3")),
    ("float8 e5m2", dict(precision="float8", fp8_format="e5m2")),
]


def errors(got, want):
    """Max absolute error over all outputs, and the max absolute error over
    the largest magnitude of the reference (relative to the output's scale)."""
    abs_err = max(float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))) for g, w in zip(got, want))
    scale = max(float(np.max(np.abs(w))) for w in want)
    return abs_err, abs_err / scale if scale else float("nan")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="*", default=["resnet50-light b1", "bert-base-like b1"])
    p.add_argument("--system", default="version=ipu21,num_ipus=1")
    args = p.parse_args(argv)

    import onnxruntime as ort

    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel

    print("| model | setting | max abs error | max abs error / max abs output | busiest tile | memory | "
          "estimated cycles | estimated latency |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in args.models:
        model, feeds = MODELS[name]()
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        want = sess.run(None, feeds)
        del sess
        for label, options in SETTINGS:
            if options["precision"] == "float8" and "ipu21" not in args.system:
                continue
            with GraphCoreManager(num_ipus=1, ipu_model=IPUModel.from_spec(args.system), **options) as ipu:
                compiled = ipu.compile_model(model, feeds)
                got = ipu.execute_model(compiled, feeds)
            r = compiled.report
            abs_err, rel_err = errors(got, want)
            print(f"| {name} | {label} | {abs_err:.3g} | {rel_err:.2e} | {r.max_tile_memory / 1024:,.1f} KiB | "
                  f"{r.total_memory / 2**20:,.1f} MiB | {r.cycles_per_run:,} | {r.estimated_seconds * 1e6:,.1f} us |",
                  flush=True)


if __name__ == "__main__":
    main()
