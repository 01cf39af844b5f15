"""Estimated device performance: what the simulator's cost model predicts for
real IPUs, and how that compares with published measurements.

Compile only (nothing is simulated), one IPU unless a model does not fit:

- ``models``: ResNet-50 (the onnx package's ``light_resnet50`` with random
  weights) at batch 1, 4 and 32 and the BERT-style encoder of
  ``bench_models.py`` (``BERT_BENCH``) at batch 1 and 8, on ``ipu2``, ``bow``
  and ``ipu21``, float16 with half partials and with float partials.
- ``bert-base``: the same encoder at BERT-Base's size (12 layers, hidden 768,
  12 heads, FFN 3072, vocabulary 30,522), sequence 128 at batch 1, 4 and 8,
  half partials, on the three systems; and sequence 384 at batch 1 on ``ipu21``
  (the configuration of the published C600 figure below).
- ``matmul``: square MatMul [n, n] x [n, n] (weights an initializer, x an
  input) on one full IPU, float16 (half and float partials) and float32:
  TFLOPS = 2 n^3 / time, over the device's compute and exchange steps and over
  all steps (host streams included), and the device figure as a fraction of the
  peak (tiles x flops per cycle x clock of ``report.system``).
- ``published``: measured figures of real IPUs from public sources beside the
  matching estimates of the run, with the ratio estimate / measured.

A model that does not fit one IPU is recorded with the error's first line and,
unless ``--no-fallback``, compiled again on 2 and then 4 IPUs, pipelined
(``device_iterations`` = number of IPUs), until it fits.

    python benchmarks/estimates.py [--sections models bert-base matmul published]
                                   [--systems ipu2 bow ipu21] [--json PATH]

Prints markdown tables (the ones recorded in docs/benchmarks.md); progress goes
to stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from models import BERT_BENCH, bert_encoder, light_model  # noqa: E402

SYSTEMS = ["ipu2", "bow", "ipu21"]
BERT_BASE = dict(vocab=30522, hidden=768, heads=12, layers=12, ffn=3072)
MATMUL_SIZES = [128, 256, 512, 1024, 2048, 3072, 4096]
MATMUL_SYSTEMS = ["ipu2", "bow", "ipu1"]
# (label, precision, enable_half_partials)
MATMUL_TYPES = [("float16, half partials", "float16", True),
                ("float16, float partials", "float16", False),
                ("float32", "float32", False)]
KIND_ORDER = ["compute", "exchange", "host_to_device", "device_to_host"]
KIND_LABEL = {"compute": "compute", "exchange": "exchange", "host_to_device": "host->dev",
              "device_to_host": "dev->host"}


def _log(msg):
    print(msg, file=sys.stderr, flush=True)


def _release_memory():
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def compile_once(model, feeds, version, half_partials, precision="float16", num_ipus=1):
    """Compiles for ``num_ipus`` IPUs of ``version``; returns (report or None,
    wall seconds, first line of the out-of-memory error or None)."""
    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel
    from neurenix.hardware.graphcore.errors import IPUOutOfMemoryError

    kw = dict(num_ipus=num_ipus, compile_only=True, precision=precision, enable_half_partials=half_partials,
              ipu_model=IPUModel(version=version, num_ipus=num_ipus))
    if num_ipus > 1:
        kw.update(device_iterations=num_ipus, execution="pipelined")
    t0 = time.perf_counter()
    with GraphCoreManager(**kw) as ipu:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compiled = ipu.compile_model(model, feeds)
        except IPUOutOfMemoryError as e:
            return None, time.perf_counter() - t0, str(e).splitlines()[0]
        report = compiled.report
        del compiled
    return report, time.perf_counter() - t0, None


def device_cycles(report):
    """Cycles of the compute and exchange steps (no host streams)."""
    return sum(s.cycles for s in report.steps if s.kind in ("compute", "exchange"))


def model_row(name, batch, version, half_partials, report, seconds, oom, num_ipus, seq=None):
    row = {"model": name, "batch": batch, "seq": seq, "system": version, "num_ipus": num_ipus,
           "partials": "half" if half_partials else "float", "compile_s": seconds, "fits": report is not None}
    if report is None:
        row["error"] = oom
        return row
    kinds = report.cycles_by_kind()
    total = sum(kinds.values())
    row.update(
        cycles_per_run=report.cycles_per_run,
        clock_hz=report.clock_hz,
        latency_us=report.latency_seconds * 1e6,
        call_us=report.estimated_seconds * 1e6,
        throughput=report.estimated_throughput,
        max_tile_kib=report.max_tile_memory / 1024,
        cycles_by_kind=kinds,
        share_by_kind={k: v / total for k, v in kinds.items()} if total else {},
        micro_batch=report.micro_batch_size,
        device_iterations=report.device_iterations,
        execution=report.execution,
    )
    if num_ipus == 1:
        dev = device_cycles(report)
        row["device_us"] = dev / report.clock_hz * 1e6
        row["device_throughput"] = batch / (dev / report.clock_hz) if dev else float("inf")
    return row


def run_model(name, build, batch, version, half_partials, fallback, seq=None):
    model, feeds = build()
    rows = []
    for n in (1, 2, 4) if fallback else (1,):
        _log(f"  {name} b{batch} {version} {'half' if half_partials else 'float'} partials, {n} IPU(s) ...")
        report, seconds, oom = compile_once(model, feeds, version, half_partials, num_ipus=n)
        rows.append(model_row(name, batch, version, half_partials, report, seconds, oom, n, seq))
        del report
        _release_memory()
        if rows[-1]["fits"]:
            break
    del model, feeds
    _release_memory()
    return rows


def _shares(row):
    s = row.get("share_by_kind", {})
    keys = [k for k in KIND_ORDER if k in s] + sorted(k for k in s if k not in KIND_ORDER)
    return " / ".join(f"{100 * s[k]:.0f}" for k in keys), " / ".join(KIND_LABEL.get(k, k) for k in keys)


def print_model_table(rows, title):
    print(f"\n### {title}\n")
    labels = next((_shares(r)[1] for r in rows if r["fits"]), "compute / exchange / host->dev / dev->host")
    print("| model | batch | system | partials | IPUs | fits | cycles per run | latency (us) | throughput (samples/s) "
          "| on-device latency (us) | on-device throughput (samples/s) | busiest tile (KiB) "
          f"| cycles by kind, % ({labels}) | compile (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        model = r["model"] + (f" seq {r['seq']}" if r.get("seq") else "")
        head = f"| {model} | {r['batch']} | {r['system']} | {r['partials']} | {r['num_ipus']} |"
        if not r["fits"]:
            print(f"{head} **no**: {r['error']} | | | | | | | | {r['compile_s']:.1f} |")
            continue
        dev_us = f"{r['device_us']:,.1f}" if "device_us" in r else "-"
        dev_tp = f"{r['device_throughput']:,.0f}" if "device_throughput" in r else "-"
        note = ""
        if r["num_ipus"] > 1:
            note = (f" (pipelined, {r['device_iterations']} micro-batches per call of "
                    f"{r['call_us']:,.0f} us)")
        print(f"{head} yes{note} | {r['cycles_per_run']:,} | {r['latency_us']:,.1f} | {r['throughput']:,.0f} | "
              f"{dev_us} | {dev_tp} | {r['max_tile_kib']:.1f} | {_shares(r)[0]} | {r['compile_s']:.1f} |")


# ---------------------------------------------------------------------------
# matmul
# ---------------------------------------------------------------------------


def matmul_model(n, seed=0):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "matmul",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model, {"x": rng.standard_normal((n, n)).astype(np.float32)}


def run_matmul(n, version, label, precision, half_partials):
    model, feeds = matmul_model(n)
    _log(f"  matmul {n} {version} {label} ...")
    report, seconds, oom = compile_once(model, feeds, version, half_partials, precision=precision)
    row = {"n": n, "system": version, "type": label, "precision": precision,
           "partials": "half" if half_partials else "float", "compile_s": seconds, "fits": report is not None}
    if report is None:
        row["error"] = oom
    else:
        s = report.system
        flops = 2.0 * n ** 3
        dev = device_cycles(report)
        per_cycle = s.fp16_flops_per_cycle if precision == "float16" else s.fp32_flops_per_cycle
        peak = s.tiles_per_ipu * per_cycle * s.clock_hz
        row.update(
            device_cycles=dev,
            all_cycles=report.cycles_per_run,
            clock_hz=s.clock_hz,
            tflops_device=flops / (dev / s.clock_hz) / 1e12,
            tflops_all=flops / (report.cycles_per_run / s.clock_hz) / 1e12,
            peak_tflops=peak / 1e12,
            max_tile_kib=report.max_tile_memory / 1024,
            plan=next((p.plan for p in report.plans if p.kind == "matmul"), ""),
        )
        row["fraction_of_peak"] = row["tflops_device"] / row["peak_tflops"]
    del report, model, feeds
    _release_memory()
    return row


def print_matmul_tables(rows):
    for version in dict.fromkeys(r["system"] for r in rows):
        sub = [r for r in rows if r["system"] == version]
        peaks = {r["precision"]: r["peak_tflops"] for r in sub if r["fits"]}
        print(f"\n### MatMul [n, n] x [n, n] on one `{version}` "
              f"(peak {', '.join(f'{k} {v:.1f}' for k, v in peaks.items())} TFLOPS)\n")
        types = list(dict.fromkeys(r["type"] for r in sub))
        print("| n | " + " | ".join(f"{t}: TFLOPS device / incl. host I/O / % of peak" for t in types) + " |")
        print("|---|" + "---|" * len(types))
        for n in dict.fromkeys(r["n"] for r in sub):
            cells = []
            for t in types:
                r = next(x for x in sub if x["n"] == n and x["type"] == t)
                if not r["fits"]:
                    cells.append("does not fit")
                else:
                    cells.append(f"{r['tflops_device']:.1f} / {r['tflops_all']:.1f} / "
                                 f"{100 * r['fraction_of_peak']:.0f}%")
            print(f"| {n} | " + " | ".join(cells) + " |")


# ---------------------------------------------------------------------------
# published measurements
# ---------------------------------------------------------------------------

SOURCES = {
    "bytemlperf-resnet50": (
        "ByteDance, ByteMLPerf inference benchmark, Graphcore C600 backend report "
        "`resnet50-torch-fp32/result-fp16.json` "
        "(commit of 2023-08-16), https://github.com/bytedance/ByteMLPerf/blob/"
        "80b7ce9ff31386d1f97f9f5ce50db24fe5ea0214/byte_mlperf/reports/IPU/resnet50-torch-fp32/result-fp16.json"),
    "bytemlperf-bert": (
        "ByteDance, ByteMLPerf inference benchmark, Graphcore C600 backend report "
        "`bert-torch-fp32/result-fp16.json` "
        "(commit of 2023-08-22), https://github.com/bytedance/ByteMLPerf/blob/"
        "b9e78e82788830de01ce89359219bfed332a7842/byte_mlperf/reports/IPU/bert-torch-fp32/result-fp16.json"),
}

# Each entry: what was measured, the matching estimate of this run (family,
# seq, batch, system) and its source. "metric": throughput (samples/s) or
# latency (us).
PUBLISHED = [
    dict(figure="ResNet-50 v1.5, C600, FP16, batch 4: throughput", metric="throughput", value=7062,
         unit="samples/s", key=("resnet50", None, 4, "ipu21"), ours="light ResNet-50, `ipu21`, batch 4",
         source="bytemlperf-resnet50"),
    dict(figure="ResNet-50 v1.5, C600, FP16, batch 4: mean latency", metric="latency", value=2240,
         unit="us", key=("resnet50", None, 4, "ipu21"), ours="light ResNet-50, `ipu21`, batch 4",
         source="bytemlperf-resnet50"),
    dict(figure="ResNet-50 v1.5, C600, FP16, batch 32: throughput", metric="throughput", value=13542,
         unit="samples/s", key=("resnet50", None, 32, "ipu21"), ours="light ResNet-50, `ipu21`, batch 32",
         source="bytemlperf-resnet50"),
    dict(figure="ResNet-50 v1.5, C600, FP16, batch 32: mean latency", metric="latency", value=9330,
         unit="us", key=("resnet50", None, 32, "ipu21"), ours="light ResNet-50, `ipu21`, batch 32",
         source="bytemlperf-resnet50"),
    dict(figure="BERT-Base SQuAD 1.1 (sequences packed into rows of 384), C600, FP16, 40 rows per batch: throughput",
         metric="throughput", value=3134, unit="sequences/s", key=("bert-base", 384, 1, "ipu21"),
         ours="BERT-Base-sized encoder, `ipu21`, one padded sequence of 384", source="bytemlperf-bert"),
]


def _find(rows, key, partials):
    model, seq, batch, system = key
    for r in rows:
        if (r.get("family") == model and r.get("seq") == seq and r["batch"] == batch and r["system"] == system
                and r["partials"] == partials and r["fits"]):
            return r
    return None


def published_rows(model_rows):
    out = []
    for p in PUBLISHED:
        row = dict(p)
        row["key"] = list(p["key"])
        for partials in ("half", "float"):
            r = _find(model_rows, p["key"], partials)
            if r is None:
                continue
            if p["metric"] == "throughput":
                est, est_dev = r["throughput"], r.get("device_throughput")
            else:
                est, est_dev = r["latency_us"], r.get("device_us")
            row[f"estimate_{partials}"] = est
            row[f"ratio_{partials}"] = est / p["value"]
            if est_dev is not None:
                row[f"estimate_device_{partials}"] = est_dev
                row[f"ratio_device_{partials}"] = est_dev / p["value"]
        out.append(row)
    return out


def print_published(rows):
    print("\n### Published measurements beside the estimates\n")
    print("| measured on a real IPU | measured | our estimate for | estimate, half partials (ratio) | "
          "on-device estimate, half partials (ratio) | estimate, float partials (ratio) | source |")
    print("|---|---|---|---|---|---|---|")
    ids = list(dict.fromkeys(r["source"] for r in rows))

    def cell(r, key):
        if key not in r:
            return "-"
        return f"{r[key]:,.0f} ({r[key.replace('estimate', 'ratio')]:.2f})"

    for r in rows:
        print(f"| {r['figure']} | {r['value']:,} {r['unit']} | {r['ours']} | {cell(r, 'estimate_half')} | "
              f"{cell(r, 'estimate_device_half')} | {cell(r, 'estimate_float')} | [{ids.index(r['source']) + 1}] |")
    print()
    for i, sid in enumerate(ids):
        print(f"[{i + 1}] {SOURCES[sid]}  ")


# ---------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", nargs="*", default=["models", "bert-base", "matmul", "published"],
                    choices=["models", "bert-base", "matmul", "published"])
    ap.add_argument("--systems", nargs="*", default=SYSTEMS)
    ap.add_argument("--matmul-systems", nargs="*", default=MATMUL_SYSTEMS)
    ap.add_argument("--matmul-sizes", nargs="*", type=int, default=MATMUL_SIZES)
    ap.add_argument("--no-fallback", action="store_true", help="do not retry models that do not fit on 2 and 4 IPUs")
    ap.add_argument("--json", help="also write every row to this JSON file")
    args = ap.parse_args(argv)
    fallback = not args.no_fallback
    t_start = time.perf_counter()
    out = {"models": [], "bert_base": [], "matmul": [], "published": []}

    if "models" in args.sections:
        _log("models")
        specs = [("resnet50", "ResNet-50 (light)", b, (lambda b=b: light_model("light_resnet50", b)))
                 for b in (1, 4, 32)]
        specs += [("bert-bench", "BERT-style encoder (BERT_BENCH) seq 128", b,
                   (lambda b=b: bert_encoder(b, 128, **BERT_BENCH))) for b in (1, 8)]
        for family, name, b, build in specs:
            for version in args.systems:
                for half in (True, False):
                    for r in run_model(name, build, b, version, half, fallback):
                        r["family"] = family
                        out["models"].append(r)
        print_model_table(out["models"], "ResNet-50 and the BERT-style encoder, float16, one IPU")

    if "bert-base" in args.sections:
        _log("bert-base")
        for b in (1, 4, 8):
            for version in args.systems:
                for r in run_model("BERT-Base-sized encoder", lambda b=b: bert_encoder(b, 128, **BERT_BASE), b,
                                   version, True, fallback, seq=128):
                    r["family"] = "bert-base"
                    out["bert_base"].append(r)
        if "ipu21" in args.systems:
            for r in run_model("BERT-Base-sized encoder", lambda: bert_encoder(1, 384, **BERT_BASE), 1, "ipu21",
                               True, fallback, seq=384):
                r["family"] = "bert-base"
                out["bert_base"].append(r)
        print_model_table(out["bert_base"], "BERT-Base-sized encoder (12 layers, hidden 768), float16, half partials")

    if "matmul" in args.sections:
        _log("matmul")
        for version in args.matmul_systems:
            for n in args.matmul_sizes:
                for label, precision, half in MATMUL_TYPES:
                    out["matmul"].append(run_matmul(n, version, label, precision, half))
        print_matmul_tables(out["matmul"])

    if "published" in args.sections:
        out["published"] = published_rows(out["models"] + out["bert_base"])
        print_published(out["published"])

    elapsed = time.perf_counter() - t_start
    _log(f"done in {elapsed:.0f} s")
    if args.json:
        out["elapsed_s"] = elapsed
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=float)


if __name__ == "__main__":
    main()
