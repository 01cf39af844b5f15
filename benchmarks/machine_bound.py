"""The machine's own limit for a simulated run: the host's copy bandwidth and
float32 GEMM rate, measured on a given number of threads, and a model's
multiply-add work.

A simulated run cannot be faster than copying the bytes it moves between tile
memories at the host's copy bandwidth plus doing the model's matrix-product
flops at the rate of the host's BLAS on the same threads:

    bound = copied bytes / copy bandwidth + flops / GEMM rate

where the copied bytes are those the device exchanges less what the
simulator's vertices read where it was sent from (receive aliases; the run's
`copied_bytes`). With every exchange copied, it is the exchanged bytes.

(element-wise work, reductions and the onnxruntime-style fusion it would allow
are left out, so the bound is a floor, not an estimate).

    python benchmarks/machine_bound.py [--threads 2]

prints the two machine figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_PROBE = r"""
import json, sys, threading, time
import numpy as np
threads = int(sys.argv[1])

def best(fn, n=7):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return min(ts)

# Copy bandwidth: `threads` threads each copying its own 64 MiB block (numpy
# releases the GIL while copying), bytes copied per second.
block = 64 << 20
srcs = [np.ones(block, np.uint8) for _ in range(threads)]
dsts = [np.zeros(block, np.uint8) for _ in range(threads)]
def copy_all():
    ts = [threading.Thread(target=np.copyto, args=(d, s)) for d, s in zip(dsts, srcs)]
    for t in ts: t.start()
    for t in ts: t.join()
copy_bw = threads * block / best(copy_all)

# Float32 GEMM rate of numpy's BLAS limited to `threads` threads.
from threadpoolctl import threadpool_limits
n = 1024
a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
b = a.T.copy()
with threadpool_limits(limits=threads):
    a @ b
    gemm = 2.0 * n ** 3 / best(lambda: a @ b)
print(json.dumps({"copy_bytes_per_s": copy_bw, "gemm_flops_per_s": gemm}))
"""


def measure_machine(threads: int) -> dict:
    """Copy bandwidth (bytes/s) and float32 GEMM rate (flop/s) on `threads`
    threads, measured in a fresh process so that no other runtime's threads
    are around."""
    out = subprocess.run([sys.executable, "-c", _PROBE, str(threads)], check=True, capture_output=True,
                         text=True, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def model_flops(model, feeds) -> float:
    """Flops (2 per multiply-add) of the model's Conv, ConvTranspose, MatMul and
    Gemm nodes, with shapes taken from an onnxruntime run that exposes every
    intermediate value (shape inference alone cannot see through the Shape ->
    Reshape chains exporters write)."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    known = {o.name for o in m.graph.output}
    inits = {t.name: t for t in m.graph.initializer}
    for node in m.graph.node:
        for name in node.output:
            if name and name not in known:
                m.graph.output.append(onnx.ValueInfoProto(name=name))
                known.add(name)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    shapes = {n: np.shape(v) for n, v in zip(names, sess.run(None, feeds))}
    shapes.update({k: np.shape(v) for k, v in feeds.items()})
    shapes.update({k: tuple(t.dims) for k, t in inits.items()})
    flops = 0.0
    for node in m.graph.node:
        out = shapes.get(node.output[0])
        if out is None:
            continue
        if node.op_type in ("Conv", "ConvTranspose"):
            w = shapes[node.input[1]]
            per_out = int(np.prod(w[1:]))  # input channels per group x kernel
            if node.op_type == "ConvTranspose":
                flops += 2.0 * np.prod(shapes[node.input[0]]) * w[1] * int(np.prod(w[2:]))
            else:
                flops += 2.0 * np.prod(out) * per_out
        elif node.op_type == "MatMul":
            flops += 2.0 * np.prod(out) * shapes[node.input[0]][-1]
        elif node.op_type == "Gemm":
            a = shapes[node.input[0]]
            trans_a = any(at.name == "transA" and at.i for at in node.attribute)
            flops += 2.0 * np.prod(out) * (a[0] if trans_a else a[1])
    return float(flops)


def bound_seconds(machine: dict, copied_bytes: float, flops: float) -> float:
    return copied_bytes / machine["copy_bytes_per_s"] + flops / machine["gemm_flops_per_s"]


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    m = measure_machine(a.threads)
    print(f"threads={a.threads}: copy {m['copy_bytes_per_s'] / 1e9:.1f} GB/s, "
          f"float32 GEMM {m['gemm_flops_per_s'] / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
