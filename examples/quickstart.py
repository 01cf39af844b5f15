"""Quickstart: ResNet-50 on a simulated Graphcore IPU.

    python examples/quickstart.py [--batch 16] [--output-dir DIR]

Builds ResNet-50 with random weights (the architecture from the ``onnx``
package's test data, see ``models/resnet50_onnx.py``), compiles it
for one IPU in float16 with half partials, runs a batch of random 224 x 224
images on the simulator, and prints what there is to know: whether it fits,
the memory of the IPU and of its busiest tile, the estimated latency and
throughput, and how the simulated outputs compare with onnxruntime's (float32
on the host; without onnxruntime, with onnx's reference evaluator on the
first two images). The report files -- ``report.html``, ``report.json``, a
``trace.json`` timeline, plots -- go to ``--output-dir`` (default: a new
temporary directory).

The system is the default simulated IPU-POD16 (16 x ipu2, GC200), or
``$NEURENIX_IPU_MODEL``. When ResNet-50 does not fit one of its IPUs, the
example shows the out-of-memory diagnosis and falls back, first to one image,
then to ResNet-50's stem and first stage (conv1 and res2: 0.2 M parameters);
on IPUs smaller than its weights (49 MiB in float16; the test suite's 64-tile
IPUs have 39 MiB) it goes straight to the stem and first stage. 15 to 30 s
on two cores, most of it simulating the run and compiling.
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np

from neurenix.hardware.graphcore import GraphCoreManager, IPUOutOfMemoryError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))  # models/resnet50_onnx.py
from resnet50_onnx import images, parameter_count, resnet50  # noqa: E402


def mib(n):
    return f"{n / 2**20:,.1f} MiB"


def kib(n):
    return f"{n / 2**10:,.1f} KiB"


def milliseconds(s):
    return f"{s * 1e3:,.2f} ms"


def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


def compile_first_that_fits(ipu, batch):
    """ResNet-50 for ``batch`` images, else for one, else its stem and first
    stage; returns the model, its inputs and the compiled model."""
    d = ipu.ipu_model.describe()
    tries = [("ResNet-50", 4, batch)] + ([("ResNet-50", 4, 1)] if batch > 1 else [])
    weights = 2 * parameter_count()  # bytes in float16
    if weights > d.tiles_per_ipu * d.bytes_per_tile:
        print(f"ResNet-50's weights alone ({mib(weights)} in float16) exceed one IPU of this system "
              f"({mib(d.tiles_per_ipu * d.bytes_per_tile)}), so this runs its stem and first stage.")
        tries = []
    tries.append(("ResNet-50's stem and first stage", 1, 1))
    for k, (name, stages, b) in enumerate(tries):
        model, x = resnet50(b, stages=stages), images(b)
        t = time.perf_counter()
        try:
            compiled = ipu.compile_model(model, x)
        except IPUOutOfMemoryError as e:
            if k == len(tries) - 1:
                raise
            print(f"{name} for {plural(b, 'image')} does not fit one IPU of this system:")
            print("\n".join("  " + line for line in str(e).splitlines()[:2]))
            if len(e.tiles) > 1:
                print(f"  ... {len(e.tiles)} tiles overflow in all")
            print(f"so trying {tries[k + 1][0]} for {plural(tries[k + 1][2], 'image')}.")
            continue
        params = parameter_count(stages)
        print(f"Model: {name}, {params / 1e6:.1f} M parameters (random weights), {plural(b, 'image')} of "
              f"3 x 224 x 224; compiled in {time.perf_counter() - t:.1f} s")
        return model, x, compiled


def reference(model, x):
    """The model's outputs by onnxruntime, else by onnx's reference evaluator
    (slow: the first two images only); and what computed them."""
    try:
        import onnxruntime as ort
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        from neurenix.hardware.graphcore import with_batch_size

        n = min(2, len(x))
        small, _ = with_batch_size(model, n)
        (y,) = ReferenceEvaluator(small).run(None, {"images": x[:n]})
        which = f"the same {plural(n, 'image')}" if n == len(x) else f"the first {plural(n, 'image')}"
        return y, f"onnx's reference evaluator (float32; onnxruntime is not installed) on {which}"
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"images": x})
    return y, f"onnxruntime {ort.__version__} (float32 on the host) on the same {plural(len(x), 'image')}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=16, help="images per batch (default 16)")
    p.add_argument("--output-dir", help="where the report files go (default: a new temporary directory)")
    args = p.parse_args()
    start = time.perf_counter()

    with GraphCoreManager(num_ipus=1, precision="float16", enable_half_partials=True) as ipu:
        d = ipu.ipu_model.describe()
        print(f"System: {d.num_ipus} x {d.version} ({d.chip}), simulated; this example uses IPU "
              f"{ipu.device['ipus'][0]}: {d.tiles_per_ipu:,} tiles x {kib(d.bytes_per_tile)}, "
              f"{d.clock_hz / 1e9:.2f} GHz")
        print("Building ResNet-50 (random weights, batch norms calibrated on a random image) ...")
        model, x, compiled = compile_first_that_fits(ipu, args.batch)
        report = compiled.report
        (m,) = report.memory_per_ipu()
        print(f"Fits: yes, in float16 with half partials. The IPU holds {mib(m['total_bytes'])} of its "
              f"{mib(d.tiles_per_ipu * d.bytes_per_tile)} on {m['tiles_used']:,} tiles; busiest tile "
              f"{m['max_tile']}: {kib(m['max_tile_bytes'])} of {kib(d.bytes_per_tile)} "
              f"({100 * m['max_tile_bytes'] / d.bytes_per_tile:.1f}%)")
        print(f"Estimated on the IPU: latency {milliseconds(report.latency_seconds)} per batch of "
              f"{report.micro_batch_size}, throughput {report.estimated_throughput:,.0f} images/s")
        (y,) = ipu.execute_model(compiled, x)
        run = ipu.last_execution_report
        print(f"Ran on the simulator: {run.cycles:,} cycles = {milliseconds(run.estimated_seconds)} on the IPU, "
              f"simulated in {run.wall_seconds:.1f} s on this host")

    ref, by = reference(model, x)
    got = y[: len(ref)].astype(np.float64)
    err = np.abs(got - ref)
    scale = float(np.abs(ref).max())
    print(f"Compared with {by}:")
    print(f"  max abs error {err.max():.4g} ({100 * err.max() / scale:.2f}% of the largest |output| {scale:.4g}), "
          f"mean abs error {err.mean():.3g}")
    if y.ndim == 2:
        same = int((got.argmax(1) == ref.argmax(1)).sum())
        print(f"  same top-1 class for {same} of {plural(len(ref), 'image')}")
    assert err.max() <= 0.05 * scale, "the simulated IPU disagrees with the reference"

    out_dir = args.output_dir or tempfile.mkdtemp(prefix="neurenix-quickstart-")
    save = getattr(report, "save", None)
    if save is not None:
        paths = save(out_dir, execution=run)
        html = next((q for q in paths if q.endswith(".html")), None)
        print(f"Report: {html or out_dir} (open it in a browser); also "
              + ", ".join(os.path.basename(q) for q in paths if q != html))
    else:
        path = os.path.join(out_dir, "summary.txt")
        with open(path, "w") as f:
            f.write(f"{report}\n{run}\n")
        print(f"Report: {path} (this version of neurenix writes no HTML report)")
    print(f"Done in {time.perf_counter() - start:.0f} s. Next: python examples/models/resnet50_onnx.py resnet50.onnx; "
          "neurenix-ipu compile resnet50.onnx --max-batch")


if __name__ == "__main__":
    main()
