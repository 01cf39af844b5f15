"""Benchmark: compile time, simulation time against onnxruntime on the same model
and inputs in the same process (both limited to the same number of threads; blocks
of runs alternate, medians reported; the ratio is the median of the rounds'
ratios, each round a block of each), and the simulator's estimate of device time
and throughput.

    python benchmarks/bench_models.py [--threads 2] [--repeat 5] [--rounds 5] [--models mlp ...]

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

from host_side import ort_session  # noqa: E402
from machine_bound import bound_seconds, measure_machine, model_flops  # noqa: E402
from models import MODELS  # noqa: E402


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def bench(name, build, threads, repeat, rounds, precision, system, machine):
    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel

    model, feeds = build()
    with GraphCoreManager(num_ipus=1, precision=precision, ipu_model=IPUModel.from_spec(system),
                          simulator_threads=threads) as ipu:
        # Compile before onnxruntime exists in the process: its idle workers spin for a while
        # after each run and would slow the compile down.
        # Compile time runs to a loaded executable: compile_model, then load (which the
        # first execution would otherwise do).
        t0 = time.perf_counter()
        compiled = ipu.compile_model(model, feeds)
        compiled.load()
        t_compile = time.perf_counter() - t0
        sess = ort_session(model, threads)
        expected = sess.run(None, feeds)  # warm-up: ORT builds its kernels on the first run
        time.sleep(0.05)
        got = ipu.execute_model(compiled, feeds)  # warm-up
        # Alternate blocks of runs (a block of each per round) so that a burst of noise on a
        # shared machine hits both alike, while each block still runs warm, as a serving loop
        # would. The pause lets ORT's spinning workers go idle before the simulator runs.
        # The ratio is taken within each round (two blocks back to back) and the median
        # of the rounds' ratios reported: this host changes speed from minute to minute
        # (docs/benchmarks.md, drift.py), and a ratio of the two sides' medians over all
        # rounds mixes blocks that met it at different speeds.
        ort_times, sim_times, compute, exchange, round_ratios = [], [], [], [], []
        for _ in range(rounds):
            ort_block = [_timed(lambda: sess.run(None, feeds))[0] for _ in range(repeat)]
            time.sleep(0.05)
            sim_block = []
            for _ in range(repeat):
                dt, got = _timed(lambda: ipu.execute_model(compiled, feeds))
                sim_block.append(dt)
                compute.append(compiled.last_execution.compute_seconds)
                exchange.append(compiled.last_execution.exchange_seconds)
            time.sleep(0.05)
            ort_times += ort_block
            sim_times += sim_block
            round_ratios.append(statistics.median(sim_block) / statistics.median(ort_block))
        t_ort = statistics.median(ort_times)
        t_sim = statistics.median(sim_times)
        rep = compiled.report
        run = compiled.last_execution
    err = max(float(np.max(np.abs(g.astype(np.float64) - e))) for g, e in zip(got, expected))
    flops = model_flops(model, feeds)
    bound = bound_seconds(machine, run.copied_bytes, flops)
    return {
        "model": name,
        "precision": precision,
        "compile_s": t_compile,
        "sim_ms": t_sim * 1e3,
        "ort_ms": t_ort * 1e3,
        "ratio": statistics.median(round_ratios),
        "round_ratio_range": (min(round_ratios), max(round_ratios)),
        "cycles": rep.cycles_per_run,
        "device_us": rep.estimated_seconds * 1e6,
        "throughput": rep.estimated_throughput,
        "max_tile_kib": rep.max_tile_memory / 1024,
        "max_abs_err": err,
        "sim_compute_ms": statistics.median(compute) * 1e3,
        "sim_exchange_ms": statistics.median(exchange) * 1e3,
        "exchanged_mib": run.exchanged_bytes / 2**20,
        "copied_mib": run.copied_bytes / 2**20,
        "gflop": flops / 1e9,
        "bound_ms": bound * 1e3,
        "bound_ratio": t_sim / bound,
        "host_memory_ratio": run.host_memory_bytes / rep.total_memory,
    }


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5, help="runs in each block")
    p.add_argument("--rounds", type=int, default=5, help="rounds of a block of each")
    p.add_argument("--precision", default="float32")
    p.add_argument("--system", default="version=ipu2,num_ipus=1")
    p.add_argument("--models", nargs="*", default=list(MODELS))
    a = p.parse_args(argv)
    for flag in ("threads", "repeat", "rounds"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag} must be at least 1")
    if not a.models:
        p.error("--models needs at least one model")
    unknown = [m for m in a.models if m not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
    machine = measure_machine(a.threads)
    rows = [bench(m, MODELS[m], a.threads, a.repeat, a.rounds, a.precision, a.system, machine) for m in a.models]
    print(f"threads={a.threads} repeat={a.repeat} rounds={a.rounds} system={a.system}: "
          f"copy {machine['copy_bytes_per_s'] / 1e9:.1f} GB/s, "
          f"float32 GEMM {machine['gemm_flops_per_s'] / 1e9:.0f} GFLOP/s")
    print("| model | precision | compile (s) | simulated run (ms) | of which compute / exchange (ms) | "
          "onnxruntime (ms) | sim / ORT | rounds' sim / ORT | machine bound (ms) | sim / bound | "
          "est. device time (us) | est. throughput (samples/s) | busiest tile (KiB) | "
          "exchanged / copied by the host (MiB) | GFLOP | host memory / placed | max abs err vs ORT |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["round_ratio_range"]
        print(f"| {r['model']} | {r['precision']} | {r['compile_s']:.2f} | {r['sim_ms']:.1f} | "
              f"{r['sim_compute_ms']:.0f} / {r['sim_exchange_ms']:.0f} | {r['ort_ms']:.2f} | "
              f"{r['ratio']:.2f}x | {lo:.2f}-{hi:.2f}x | {r['bound_ms']:.1f} | {r['bound_ratio']:.1f}x | "
              f"{r['device_us']:.1f} | "
              f"{r['throughput']:,.0f} | {r['max_tile_kib']:.1f} | {r['exchanged_mib']:,.0f} / {r['copied_mib']:,.0f} | {r['gflop']:.2f} | "
              f"{r['host_memory_ratio']:.2f} | {r['max_abs_err']:.1e} |", flush=True)


if __name__ == "__main__":
    main()
