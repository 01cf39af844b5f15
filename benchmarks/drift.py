"""Benchmark: how the simulator/onnxruntime ratio moves with the host.

One model, compiled once for one full `ipu2`; then `--blocks` rounds, each a
block of `--runs` onnxruntime runs followed by a block of as many simulated
runs (the same threads for both). For each round it prints both medians,
their ratio and the process's CPU time over the wall time of the simulator's
block (near the thread count when the simulator's threads were busy
throughout). On a shared machine whose cores slow down for stretches of
seconds, the rounds show how much of a single ratio is the host's.

    python benchmarks/drift.py [--model "squeezenet-light b1"] [--precision float32]
                               [--blocks 30] [--runs 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from models import MODELS  # noqa: E402


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="squeezenet-light b1")
    ap.add_argument("--precision", default="float32")
    ap.add_argument("--blocks", type=int, default=30)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    import onnxruntime as ort

    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel

    model, feeds = MODELS[a.model]()
    with GraphCoreManager(num_ipus=1, precision=a.precision, ipu_model=IPUModel.from_spec("version=ipu2,num_ipus=1"),
                          simulator_threads=a.threads) as ipu:
        compiled = ipu.compile_model(model, feeds)
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        sess.run(None, feeds)
        ipu.execute_model(compiled, feeds)
        print(f"{a.model} ({a.precision}), {a.threads} threads, blocks of {a.runs} runs")
        print("| round | onnxruntime (ms) | simulated (ms) | sim / ORT | simulator CPU / wall |")
        print("|---|---|---|---|---|")
        ratios = []
        for b in range(a.blocks):
            ort_t = []
            for _ in range(a.runs):
                t = time.perf_counter()
                sess.run(None, feeds)
                ort_t.append(time.perf_counter() - t)
            time.sleep(0.05)  # onnxruntime's idle workers spin for a while after a run
            sim_t, cpu0, t0 = [], _cpu_seconds(), time.perf_counter()
            for _ in range(a.runs):
                t = time.perf_counter()
                ipu.execute_model(compiled, feeds)
                sim_t.append(time.perf_counter() - t)
            busy = (_cpu_seconds() - cpu0) / (time.perf_counter() - t0)
            o, s = statistics.median(ort_t), statistics.median(sim_t)
            ratios.append(s / o)
            print(f"| {b} | {o * 1e3:.2f} | {s * 1e3:.2f} | {s / o:.2f}x | {busy:.2f} |", flush=True)
        print(f"\nsim / ORT over the rounds: median {statistics.median(ratios):.2f}x, "
              f"{min(ratios):.2f}-{max(ratios):.2f}x")


if __name__ == "__main__":
    main()
