"""Benchmark: models split over several IPUs.

For each model and configuration (IPUs, replication factor, device
iterations), compiles with the automatic sharder and with an even split by
node count (stages of equal numbers of nodes, as a user placing stages by
hand without measuring might), and reports the stage boundaries chosen,
memory per IPU, the bottleneck stage's cycles, the estimated throughput, the
compile time and the simulated wall time of one call.

    python benchmarks/multi_ipu.py [--models resnet50-light bert-base-like bert-large-like]
                                   [--ipus 1 2 4 8] [--replicas 2 4] [--threads 2] [--no-run]

Prints markdown tables (the ones recorded in docs/multi-ipu.md).

    python benchmarks/multi_ipu.py --sharded [--threads 2]

instead times calls of a small model whose stages take turns (sharded
execution: one call, one micro-batch) on tiny IPUs of 16 tiles, as a test
suite runs one: the median of 50 calls on 1, 2 and 4 IPUs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from models import bert_encoder, light_model  # noqa: E402

BERT_BASE = dict(vocab=8000, hidden=256, heads=4, layers=4, ffn=1024)
BERT_LARGE = dict(vocab=30522, hidden=1024, heads=16, layers=24, ffn=4096)

MODELS = {
    # name: (builder, precision, simulate runs)
    "resnet50-light b8": (lambda: light_model("light_resnet50", 8), "float16", True),
    "bert-base-like b8": (lambda: bert_encoder(8, 128, **BERT_BASE), "float16", True),
    # 335 M parameters: compiled only (a simulated run takes minutes).
    "bert-large-like b1": (lambda: bert_encoder(1, 128, **BERT_LARGE), "float16", False),
}


def _even_starts(order, stages):
    n = len(order)
    return [order[(k * n) // stages] for k in range(1, stages)]


def _release_memory():
    """Hands freed heap back to the OS between configurations (glibc keeps it
    otherwise, and the large model's compiles would add up)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _node_order(model, feeds, precision):
    """The prepared graph's nodes in program order (what stage starts name)."""
    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel

    with GraphCoreManager(precision=precision, ipu_model=IPUModel(num_ipus=16), compile_only=True) as ipu:
        return [n.name for n in ipu.optimize_model(model, feeds).graph.node]


def _kib(n):
    return f"{n / 1024:,.0f}"


def compile_one(model, feeds, precision, ipus, replicas, iterations, sharding, threads):
    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel, IPUOutOfMemoryError

    mgr = GraphCoreManager(num_ipus=ipus, replication_factor=replicas, device_iterations=iterations,
                           precision=precision, sharding=sharding, ipu_model=IPUModel(num_ipus=16),
                           simulator_threads=threads, compile_only=True)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = mgr.compile_model(model, feeds)
    except IPUOutOfMemoryError as e:
        first = str(e).splitlines()[0]
        return None, time.perf_counter() - t0, first.split(". ")[0]
    return compiled, time.perf_counter() - t0, None


def run_once(compiled, feeds, precision, ipus, replicas, iterations, threads):
    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel

    k = replicas * iterations
    host = {name: np.concatenate([a] * k) for name, a in feeds.items()}
    with GraphCoreManager(num_ipus=ipus, replication_factor=replicas, device_iterations=iterations,
                          precision=precision, ipu_model=IPUModel(num_ipus=16), simulator_threads=threads) as ipu:
        ipu.execute_model(compiled, host)  # loads the programs
        t0 = time.perf_counter()
        ipu.execute_model(compiled, host)
        wall = time.perf_counter() - t0
        compiled.unload()
    return wall


def sharded_calls(threads, calls=50):
    """Median wall time of a call of a 5-layer MLP (64-256-256-256-10, batch 8)
    on 1, 2 and 4 tiny IPUs, sharded."""
    from onnx import TensorProto, helper, numpy_helper

    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel

    rng = np.random.default_rng(0)
    widths = [64, 256, 256, 256, 10]
    nodes, inits, prev = [], [], "x"
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        inits += [numpy_helper.from_array((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), f"W{i}"),
                  numpy_helper.from_array(np.zeros(b, np.float32), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [prev, f"W{i}", f"b{i}"], [f"z{i}"]))
        prev = f"z{i}"
        if i < len(widths) - 2:
            nodes.append(helper.make_node("Relu", [prev], [f"h{i}"]))
            prev = f"h{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [8, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((8, 64)).astype(np.float32)
    print("| IPUs | execution | call (ms, median of %d) |" % calls)
    print("|---|---|---|")
    for n in (1, 2, 4):
        with GraphCoreManager(num_ipus=n, execution="sharded" if n > 1 else None, precision="float32",
                              ipu_model=IPUModel(num_ipus=4, tiles_per_ipu=16), simulator_threads=threads) as ipu:
            compiled = ipu.compile_model(model, x)
            for _ in range(5):
                ipu.execute_model(compiled, x)
            times = []
            for _ in range(calls):
                t0 = time.perf_counter()
                ipu.execute_model(compiled, x)
                times.append(time.perf_counter() - t0)
        print(f"| {n} | {compiled.report.execution} | {np.median(times) * 1e3:.3f} |", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--ipus", nargs="*", type=int, default=[1, 2, 4, 8])
    ap.add_argument("--replicas", nargs="*", type=int, default=[2, 4])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-run", action="store_true", help="compile only (no simulated runs)")
    ap.add_argument("--sharded", action="store_true", help="time calls of a small sharded model instead")
    args = ap.parse_args(argv)
    if args.sharded:
        sharded_calls(args.threads)
        return
    for name in args.models:
        build, precision, simulate = MODELS[name]
        model, feeds = build()
        print(f"\n### {name} ({precision})\n")
        print("| IPUs | replicas | device iterations | execution | sharding | stage starts | busiest tile per IPU (KiB) "
              "| bottleneck (cycles) | est. throughput (samples/s) | compile (s) | simulated call (s) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        micro = next(iter(feeds.values())).shape[0]
        configs = [(n, 1) for n in args.ipus] + [(r, r) for r in args.replicas] + [(8, 2)]
        if not simulate:
            configs = [(n, 1) for n in args.ipus] + [(8, 2)]
        order = _node_order(model, feeds, precision)
        for ipus, replicas in configs:
            stages = ipus // replicas
            iterations = max(2 * stages, 4) if stages > 1 else 4
            plans = [("auto", "auto")]
            if stages > 1:
                plans.append(("even by nodes", _even_starts(order, stages)))
            for label, sharding in plans:
                compiled, t_compile, oom = compile_one(model, feeds, precision, ipus, replicas, iterations,
                                                       sharding, args.threads)
                if compiled is None:
                    print(f"| {ipus} | {replicas} | {iterations} | | {label} | | does not fit: {oom} | | | "
                          f"{t_compile:.1f} | |", flush=True)
                    _release_memory()
                    continue
                rep = compiled.report
                starts = []
                for p in rep.placement:
                    if p.ipu >= len(starts) + 1:
                        starts.append(p.node)
                tiles = " / ".join(_kib(m["max_tile_bytes"]) for m in rep.memory_per_ipu())
                wall = ""
                if simulate and not args.no_run:
                    wall = f"{run_once(compiled, feeds, precision, ipus, replicas, iterations, args.threads):.2f}"
                print(f"| {ipus} | {replicas} | {iterations} | {rep.execution} | {label} | "
                      f"{', '.join(starts) or '-'} | {tiles} | {rep.interval_cycles:,} | "
                      f"{rep.estimated_throughput:,.0f} | {t_compile:.1f} | {wall} |", flush=True)
                del compiled, rep
                _release_memory()
        del model, feeds
        print(f"\nmicro-batch {micro}; bottleneck = the slowest stage's cycles per micro-batch (compute, host "
              "streams and IPU-Link copies received)")


if __name__ == "__main__":
    main()
