"""The host's side of a speed benchmark: onnxruntime on the same threads
(the reference every ratio is taken against) and the CPU accounting that
says how the host behaved while the simulator ran."""

from __future__ import annotations


def ort_session(model, threads: int):
    """An onnxruntime CPU session limited to `threads` intra-op threads and
    one inter-op thread, as the simulator is limited to `threads` host
    threads."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3  # the light ResNet carries an unused initializer ORT warns about
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def cpu_seconds() -> float:
    """The process's CPU time so far (user and system, all threads): time a
    thread held a core, working or spin-waiting; time the hypervisor took
    from the machine (steal) is not counted where the kernel accounts it."""
    import resource  # (Unix only: imported where used)

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_ticks():
    """The machine's (steal, total) CPU ticks from /proc/stat, or None where
    there is none (not Linux)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 8:
        return None
    return fields[7], sum(fields[:8])


def steal_share(before, after):
    """The share of the machine's CPU time the hypervisor took between two
    cpu_ticks() readings (None where unknown)."""
    if before is None or after is None or after[1] == before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])
