"""Benchmark: compile time, simulation time against onnxruntime on the same model
and inputs in the same process (both limited to the same number of threads), and
the simulator's estimate of device time and throughput.

    python benchmarks/bench_models.py [--threads 2] [--repeat 5] [--models mlp ...]

Prints a markdown table (the one recorded in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from models import MODELS  # noqa: E402


def time_runs(fn, repeat):
    fn()  # warm-up (first run loads the executable / builds ORT's kernels)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(name, build, threads, repeat, precision, system):
    import onnxruntime as ort

    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel

    model, feeds = build()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    t_ort = time_runs(lambda: sess.run(None, feeds), repeat)
    expected = sess.run(None, feeds)

    with GraphCoreManager(num_ipus=1, precision=precision, ipu_model=IPUModel.from_spec(system),
                          simulator_threads=threads) as ipu:
        t0 = time.perf_counter()
        compiled = ipu.compile_model(model, feeds)
        t_compile = time.perf_counter() - t0
        outs = []
        t_sim = time_runs(lambda: outs.append(ipu.execute_model(compiled, feeds)), repeat)
        rep = compiled.report
        run = compiled.last_execution
    got = outs[-1]
    err = max(float(np.max(np.abs(g.astype(np.float64) - e))) for g, e in zip(got, expected))
    return {
        "model": name,
        "precision": precision,
        "compile_s": t_compile,
        "sim_ms": t_sim * 1e3,
        "ort_ms": t_ort * 1e3,
        "ratio": t_sim / t_ort,
        "cycles": rep.cycles_per_run,
        "device_us": rep.estimated_seconds * 1e6,
        "throughput": rep.estimated_throughput,
        "max_tile_kib": rep.max_tile_memory / 1024,
        "max_abs_err": err,
        "sim_compute_ms": run.compute_seconds * 1e3,
        "sim_exchange_ms": run.exchange_seconds * 1e3,
        "exchanged_mib": run.exchanged_bytes / 2**20,
    }


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--precision", default="float32")
    p.add_argument("--system", default="version=ipu2,num_ipus=1")
    p.add_argument("--models", nargs="*", default=list(MODELS))
    a = p.parse_args(argv)
    rows = [bench(m, MODELS[m], a.threads, a.repeat, a.precision, a.system) for m in a.models]
    print(f"threads={a.threads} repeat={a.repeat} system={a.system}")
    print("| model | precision | compile (s) | simulated run (ms) | of which compute / exchange (ms) | "
          "onnxruntime (ms) | sim / ORT | est. device time (us) | est. throughput (samples/s) | "
          "busiest tile (KiB) | exchanged (MiB) | max abs err vs ORT |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['precision']} | {r['compile_s']:.2f} | {r['sim_ms']:.1f} | "
              f"{r['sim_compute_ms']:.0f} / {r['sim_exchange_ms']:.0f} | {r['ort_ms']:.2f} | "
              f"{r['ratio']:.1f}x | {r['device_us']:.1f} | {r['throughput']:,.0f} | {r['max_tile_kib']:.1f} | "
              f"{r['exchanged_mib']:,.0f} | {r['max_abs_err']:.1e} |")


if __name__ == "__main__":
    main()
