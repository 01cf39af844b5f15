"""The long fuzz run: mutated ONNX models through compile_model/execute_model.

    PYTHONPATH=python python benchmarks/fuzz.py --cases 100000 --seed 1 [--jobs 2]
        [--timeout 10] [--memory-limit-gib 8] [--hog-limit-gib 1] [--out fuzz-out]
        [--start 0] [--max-failures-per-signature 5] [--json summary.json]
    python benchmarks/fuzz.py --seed 1 --replay 1234        # case 1:1234 in this process
    python benchmarks/fuzz.py --replay-dir fuzz-out/<case>   # a saved case, in this process

Case ``i`` of seed ``N`` is generated from ``random.Random("N:i")`` alone (see
``tests/fuzz_models.py``), so any case can be regenerated from its id. Cases run
in ``--jobs`` persistent worker processes (each with ``RLIMIT_AS`` set and core
dumps off); a worker that dies by a signal is a crash, one that does not answer
within ``--timeout`` seconds is a hang (it is killed), one whose peak RSS passes
``--hog-limit-gib`` is a hog; a fresh worker takes over after each. Every failing
case (crash, hang, hog, exception that is not an IPUError, harness error) is
written to ``--out/<class>_<seed>_<i>/``: ``model.onnx``, ``case.json`` (options,
mutations, inputs), ``report.txt`` (traceback or signal and the worker's stderr)
and ``replay.py``. At the end (and on Ctrl-C) it prints the outcomes by class
and the distinct failure signatures with a count and an example case each.
Exit status: 0 when no case failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import threading
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import fuzz_models as fm  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first case index")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per case before it counts as a hang")
    ap.add_argument("--memory-limit-gib", type=float, default=8.0, help="RLIMIT_AS of a worker (0: none)")
    ap.add_argument("--hog-limit-gib", type=float, default=1.0, help="peak worker RSS that makes a case a hog")
    ap.add_argument("--out", default="fuzz-out", help="where failing cases are written")
    ap.add_argument("--max-failures-per-signature", type=int, default=5,
                    help="failing cases saved per distinct signature")
    ap.add_argument("--json", help="write the summary (counts, signatures) here")
    ap.add_argument("--replay", type=int, help="run case <seed>:<replay> in this process and show what happens")
    ap.add_argument("--replay-dir", help="run the case saved in this folder in this process")
    ap.add_argument("--log-all", help="append one JSON line per case (id, class, phase, message, mutations) here")
    ap.add_argument("--progress", type=float, default=30.0, help="seconds between progress lines")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")

    if args.replay is not None or args.replay_dir:
        if args.replay_dir:
            with open(os.path.join(args.replay_dir, "case.json")) as f:
                case = fm.Case.from_dict(json.load(f))
        else:
            case = fm.random_case(args.seed, args.replay)
        print(case.describe())
        fm.run_case_here(case, verbose=True)
        print("finished without an exception")
        return 0

    os.makedirs(args.out, exist_ok=True)
    lock = threading.Lock()
    counts: collections.Counter = collections.Counter()
    signatures: "collections.OrderedDict[str, list]" = collections.OrderedDict()
    saved: collections.Counter = collections.Counter()
    done = [0]
    stop = threading.Event()
    t0 = time.perf_counter()
    ids = list(range(args.start, args.start + args.cases))
    log_all = open(args.log_all, "a") if args.log_all else None

    def record(res: fm.Result) -> None:
        with lock:
            counts[res.klass()] += 1
            done[0] += 1
            if log_all:
                log_all.write(json.dumps({"id": res.case.case_id, "class": res.klass(), "phase": res.phase,
                                          "seconds": round(res.seconds, 4), "message": res.message[:300],
                                          "seed_model": res.case.seed_model, "mutations": res.case.mutations,
                                          "input_mode": res.case.input_mode}) + "\n")
            if res.is_failure:
                sig = res.signature()
                entry = signatures.setdefault(sig, [0, res.case.case_id, ", ".join(res.case.mutations)[:200]])
                entry[0] += 1
                if saved[sig] < args.max_failures_per_signature:
                    saved[sig] += 1
                    d = fm.save_failure(res, args.out)
                    print(f"[{done[0]}] {res.klass()} case {res.case.case_id} -> {d}", flush=True)

    def job(j: int) -> None:
        runner = fm.Runner(timeout=args.timeout, memory_limit=int(args.memory_limit_gib * (1 << 30)),
                           hog_limit=int(args.hog_limit_gib * (1 << 30)), log_dir=os.path.join(args.out, "logs"))
        try:
            for i in ids[j::args.jobs]:
                if stop.is_set():
                    return
                case = fm.random_case(args.seed, i)
                record(runner.run(case))
        finally:
            runner.close()

    import signal

    def on_term(signum, frame):  # a background run ignores SIGINT: SIGTERM stops it with a summary
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    threads = [threading.Thread(target=job, args=(j,), daemon=True) for j in range(args.jobs)]
    for t in threads:
        t.start()
    last = time.perf_counter()
    try:
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(1.0)
            if time.perf_counter() - last >= args.progress:
                last = time.perf_counter()
                with lock:
                    bad = sum(v for k, v in counts.items() if not (k == "ok" or k.startswith("ipu:")))
                    print(f"... {done[0]}/{args.cases} cases, {done[0] / (last - t0):.1f}/s, {bad} failing, "
                          f"{len(signatures)} distinct", flush=True)
    except KeyboardInterrupt:
        stop.set()
        print("interrupted; waiting for the running cases", flush=True)
        for t in threads:
            t.join(args.timeout + 15)
    elapsed = time.perf_counter() - t0
    return summarize(args, counts, signatures, done[0], elapsed)


def summarize(args, counts, signatures, done, elapsed) -> int:
    def group(k: str) -> str:
        if k == "ok":
            return "ok"
        if k.startswith("ipu:IPUInternalError"):
            return "IPUError (internal: a bug by its own name)"
        if k.startswith("ipu:"):
            return "IPUError"
        if k.startswith("bug:"):
            return "non-IPUError exception"
        if k.startswith("crash:"):
            return "crash (signal)"
        return {"hang": "hang (timeout)", "hog": "host memory hog"}.get(k, "harness error")

    groups: collections.Counter = collections.Counter()
    for k, v in counts.items():
        groups[group(k)] += v
    print()
    print(f"seed {args.seed}, cases {args.start}..{args.start + done - 1}: {done} cases in {elapsed:.0f} s "
          f"({done / max(elapsed, 1e-9):.1f} cases/s, {args.jobs} job(s))")
    print()
    print(f"| {'outcome':<44} | {'cases':>7} |")
    print(f"|{'-' * 46}|{'-' * 9}|")
    for g in ["ok", "IPUError", "IPUError (internal: a bug by its own name)", "non-IPUError exception",
              "crash (signal)", "hang (timeout)", "host memory hog", "harness error"]:
        print(f"| {g:<44} | {groups.get(g, 0):>7} |")
    print()
    print("by class:")
    for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {v:>7}  {k}")
    failing = sum(v[0] for v in signatures.values())
    print()
    print(f"{failing} failing case(s), {len(signatures)} distinct signature(s):")
    for sig, (n, example, muts) in sorted(signatures.items(), key=lambda kv: -kv[1][0]):
        print(f"  {n:>6}  {sig}\n          e.g. case {example}: {muts}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "start": args.start, "cases": done, "seconds": elapsed,
                       "counts": dict(counts), "groups": dict(groups),
                       "signatures": {s: {"count": v[0], "example": v[1], "mutations": v[2]}
                                      for s, v in signatures.items()}}, f, indent=1)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
