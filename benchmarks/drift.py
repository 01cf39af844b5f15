"""Benchmark: how the simulator/onnxruntime ratio moves with the host.

One model, compiled once for one full `ipu2`; then `--blocks` rounds, each a
block of `--runs` onnxruntime runs followed by a block of as many simulated
runs (the same number of threads for both, a pause after each block for the
other's idle workers to stop spinning). For each round it prints both
medians, their ratio, the process's CPU time over the wall time of the
simulator's block (near the thread count when every simulator thread held
a core throughout, working or spin-waiting; onnxruntime's workers, idle by
then, count too if they still spin) and the share of the machine's CPU
time the hypervisor took (steal) meanwhile. On a shared machine whose
cores slow down for stretches of seconds, the rounds show how much of a
single ratio is the host's.

    python benchmarks/drift.py [--model "squeezenet-light b1"] [--precision float32]
                               [--blocks 30] [--runs 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from host_side import cpu_seconds, cpu_ticks, ort_session, steal_share  # noqa: E402
from models import MODELS  # noqa: E402

PAUSE = 0.05  # seconds after a block: the other runtime's idle workers stop spinning


def _positive(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} is not a positive count")
    return v


def _median_seconds(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="squeezenet-light b1", choices=list(MODELS))
    ap.add_argument("--precision", default="float32")
    ap.add_argument("--blocks", type=_positive, default=30)
    ap.add_argument("--runs", type=_positive, default=20)
    ap.add_argument("--threads", type=_positive, default=2)
    a = ap.parse_args()

    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel

    model, feeds = MODELS[a.model]()
    with GraphCoreManager(num_ipus=1, precision=a.precision, ipu_model=IPUModel.from_spec("version=ipu2,num_ipus=1"),
                          simulator_threads=a.threads) as ipu:
        # Compiled before onnxruntime exists in the process, as bench_models.py does.
        compiled = ipu.compile_model(model, feeds)
        sess = ort_session(model, a.threads)
        sess.run(None, feeds)  # warm-ups
        time.sleep(PAUSE)
        ipu.execute_model(compiled, feeds)
        time.sleep(PAUSE)
        print(f"{a.model} ({a.precision}), {a.threads} threads, blocks of {a.runs} runs")
        print("| round | onnxruntime (ms) | simulated (ms) | sim / ORT | process CPU / wall | steal |")
        print("|---|---|---|---|---|---|")
        ratios = []
        for b in range(a.blocks):
            o = _median_seconds(lambda: sess.run(None, feeds), a.runs)
            time.sleep(PAUSE)
            ticks0, cpu0, t0 = cpu_ticks(), cpu_seconds(), time.perf_counter()
            s = _median_seconds(lambda: ipu.execute_model(compiled, feeds), a.runs)
            busy = (cpu_seconds() - cpu0) / (time.perf_counter() - t0)
            steal = steal_share(ticks0, cpu_ticks())
            time.sleep(PAUSE)
            ratios.append(s / o)
            steal_text = "-" if steal is None else f"{100 * steal:.1f}%"
            print(f"| {b} | {o * 1e3:.2f} | {s * 1e3:.2f} | {s / o:.2f}x | {busy:.2f} | {steal_text} |", flush=True)
        print(f"\nsim / ORT over the rounds: median {statistics.median(ratios):.2f}x, "
              f"{min(ratios):.2f}-{max(ratios):.2f}x")


if __name__ == "__main__":
    main()
