"""The timeline of one run as a Chrome trace-event / Perfetto JSON trace.

Built from a :class:`~neurenix.hardware.graphcore.report.CompileReport`
(``report.to_trace()``): one process per IPU of a replica, named "IPU n";
on it a "steps" thread with one complete ("X") slice per program step and a
"micro-batches" thread with one slice per micro-batch the stage handles, and
a "live bytes" counter where the native module reports liveness.

Times: ``ts``/``dur`` are microseconds at the target clock (every slice
boundary is a whole cycle, turned into whole nanoseconds, so adjacent
slices share their boundary exactly); each slice's ``args`` give the exact
cycles (``start_cycle``, ``dur_cycles``, and the step's own ``cycles``).

Layout (the same arithmetic as the core's pipeline estimate):

- One micro-batch on stage ``s`` takes ``StageEstimate.interval_cycles``:
  the IPU-Link copies of the tensors it receives (one slice, first), then
  its program's steps in order. The host streams take their own cycles plus
  their share of a host link shared with other replicas (the estimate's
  ``host_cycles`` minus the streams' own; spread over the streams by bytes).
- ``pipelined``: stage ``s`` starts micro-batch ``i`` when it has finished
  micro-batch ``i - 1`` and stage ``s - 1`` has finished micro-batch ``i``.
  The last slice then ends at ``sum(interval) + (d - 1) * max(interval)``,
  which is exactly the estimate's ``cycles_per_call`` (``cycles_per_run``).
- ``sharded``: the stages take each micro-batch strictly in turn; the end is
  ``d * sum(interval)``, again exactly ``cycles_per_call``.
- Replicas run the same timeline at the same time; one replica is drawn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Tuple

from .report import step_terms

if TYPE_CHECKING:
    from .report import CompileReport

__all__ = ["build_trace", "stage_slices", "schedule"]

STEPS_TID = 1
MICRO_BATCHES_TID = 2
_HOST_KINDS = ("host_to_device", "device_to_host")


def _pid(ipu: int) -> int:
    # Process ids start at 1: some viewers treat pid 0 as the idle process.
    return ipu + 1


def stage_slices(report: "CompileReport", stage_index: int) -> List[Dict[str, Any]]:
    """The slices of one micro-batch on stage ``stage_index``, in order:
    ``{"name", "cat", "dur_cycles", "args"}``; their durations sum to the
    stage's ``interval_cycles`` (unless its steps alone take longer)."""
    st = report.estimate.stages[stage_index]
    nodes = report.step_nodes()
    steps = [(i, s, nodes[i]) for i, s in enumerate(report.steps) if s.ipu == st.ipu]
    out: List[Dict[str, Any]] = []
    if st.copy_cycles > 0 or st.carried_in:
        names = ", ".join(c.name for c in st.carried_in)
        out.append(
            {
                "name": f"IPU-Link copies in: {names}" if names else "IPU-Link copies in",
                "cat": "ipu_link",
                "dur_cycles": int(st.copy_cycles),
                "args": {
                    "kind": "ipu_link",
                    "cycles": int(st.copy_cycles),
                    "carried_in": {c.name: {"bytes": int(c.bytes), "from_ipu": int(c.from_ipu)}
                                   for c in st.carried_in},
                },
            }
        )
    host = [k for k, (_, s, _) in enumerate(steps) if s.kind in _HOST_KINDS]
    own = sum(s.cycles for _, s, _ in steps) + int(st.copy_cycles)
    share = _spread(max(0, int(st.interval_cycles) - own), [steps[k][1].bytes for k in host])
    extra = dict(zip(host, share))
    for k, (i, s, node) in enumerate(steps):
        dur = int(s.cycles) + extra.get(k, 0)
        args: Dict[str, Any] = {
            "kind": s.kind,
            "node": node,
            "step": i,
            "cycles": int(s.cycles),
            "bytes": int(s.bytes),
            "items": int(s.items),
            "busiest_tile": -1 if s.tile is None else s.tile,
            "live_bytes": s.live_bytes,
        }
        terms = step_terms(s)
        if terms:
            args["terms"] = _term_args(terms)
        if extra.get(k):
            args["host_link_sharing_cycles"] = extra[k]
        out.append({"name": s.name, "cat": s.kind, "dur_cycles": dur, "args": args})
    if not host and int(st.interval_cycles) > own:
        # Nothing to charge the estimate's remainder to: show it as such.
        rest = int(st.interval_cycles) - own
        out.append({"name": "host link (shared)", "cat": "host_link", "dur_cycles": rest,
                    "args": {"kind": "host_link", "cycles": rest}})
    return out


def _spread(total: int, weights: List[int]) -> List[int]:
    """``total`` split over ``weights`` proportionally, in whole cycles that
    sum to ``total`` exactly (largest remainders first)."""
    if not weights or total <= 0:
        return [0] * len(weights)
    w = [max(0, int(x)) for x in weights]
    if sum(w) == 0:
        w = [1] * len(w)
    exact = [total * x / sum(w) for x in w]
    base = [int(e) for e in exact]
    left = total - sum(base)
    for k in sorted(range(len(w)), key=lambda k: base[k] - exact[k])[:left]:
        base[k] += 1
    return base


def _term_args(terms: List[Dict[str, Any]]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for t in terms:
        name, n = t["name"], 2
        while name in out:
            name, n = f"{t['name']} ({n})", n + 1
        out[name] = t["cycles"]
    return out


def schedule(lengths: List[int], micro_batches: int, execution: str) -> List[List[int]]:
    """Start cycle of micro-batch ``i`` on stage ``s`` (``[s][i]``) for stages
    taking ``lengths`` cycles per micro-batch."""
    d = max(1, int(micro_batches))
    start = [[0] * d for _ in lengths]
    if execution == "sharded":
        t = 0
        for i in range(d):
            for s, n in enumerate(lengths):
                start[s][i] = t
                t += n
        return start
    finish = [[0] * d for _ in lengths]
    for i in range(d):
        for s, n in enumerate(lengths):
            t = max(finish[s][i - 1] if i else 0, finish[s - 1][i] if s else 0)
            start[s][i] = t
            finish[s][i] = t + n
    return start


def build_trace(report: "CompileReport") -> Dict[str, Any]:
    """The trace object (``{"traceEvents": [...], "displayTimeUnit": "ns",
    "otherData": {...}}``) of one run of ``report``'s program."""
    clock = report.clock_hz
    est = report.estimate

    def ns(cycle: int) -> int:
        return int(round(cycle * 1e9 / clock))

    def span(start: int, dur: int) -> Tuple[float, float]:
        a, b = ns(start), ns(start + dur)
        return a / 1000.0, (b - a) / 1000.0

    events: List[Dict[str, Any]] = []
    stage_ipus = {st.ipu: k for k, st in enumerate(est.stages)}
    for ipu in range(report.ipus_per_replica):
        pid = _pid(ipu)
        label = f"IPU {ipu}" + ("" if ipu in stage_ipus else " (unused)")
        events += [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0, "args": {"name": label}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 0, "args": {"sort_index": ipu}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": STEPS_TID, "ts": 0, "args": {"name": "steps"}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": MICRO_BATCHES_TID, "ts": 0,
             "args": {"name": "micro-batches"}},
        ]
    slices = [stage_slices(report, k) for k in range(len(est.stages))]
    lengths = [sum(x["dur_cycles"] for x in sl) for sl in slices]
    d = max(1, int(est.device_iterations))
    starts = schedule(lengths, d, est.execution)
    end = 0
    for k, st in enumerate(est.stages):
        pid = _pid(st.ipu)
        for i in range(d):
            t = starts[k][i]
            ts, dur = span(t, lengths[k])
            events.append(
                {"ph": "X", "name": f"micro-batch {i}", "cat": "micro_batch", "pid": pid, "tid": MICRO_BATCHES_TID,
                 "ts": ts, "dur": dur,
                 "args": {"micro_batch": i, "stage": k, "start_cycle": t, "dur_cycles": lengths[k]}}
            )
            for x in slices[k]:
                ts, dur = span(t, x["dur_cycles"])
                args = dict(x["args"], micro_batch=i, stage=k, start_cycle=t, dur_cycles=x["dur_cycles"])
                events.append({"ph": "X", "name": x["name"], "cat": x["cat"], "pid": pid, "tid": STEPS_TID,
                               "ts": ts, "dur": dur, "args": args})
                if "live_bytes" in args:
                    events.append({"ph": "C", "name": "live bytes", "pid": pid, "tid": STEPS_TID, "ts": ts,
                                   "args": {"bytes": args["live_bytes"]}})
                t += x["dur_cycles"]
            end = max(end, t)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "generator": "neurenix-ipu",
            "clock_hz": clock,
            "total_cycles": int(report.cycles_per_run),
            "timeline_end_cycles": end,
            "execution": est.execution,
            "stages": len(est.stages),
            "device_iterations": d,
            "replicas": int(est.replicas),
            "interval_cycles": int(est.interval_cycles),
            "note": "every replica runs this timeline at the same time; ts and dur are microseconds at the "
                    "target clock, args give exact cycles",
        },
    }
