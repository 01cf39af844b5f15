"""The short fuzz run: a few hundred mutated ONNX models (tests/fuzz_models.py)
through compile_model/execute_model in a worker process. Every case must end in
success or an IPUError: a crash (signal), a hang (no answer within
NEURENIX_FUZZ_TIMEOUT seconds), a host-memory hog or any other exception fails
the test, and hypothesis shrinks the failing case to a small one whose report
(mutations, options, traceback or signal, worker stderr, and a replay snippet)
is the failure message. The long run is benchmarks/fuzz.py.

Knobs: NEURENIX_FUZZ_EXAMPLES (default 300), NEURENIX_FUZZ_TIMEOUT (5 s),
NEURENIX_FUZZ_SHRINK_SECONDS (60: after that much time spent on failures, only
cases already run are replayed, so shrinking a hang cannot take forever).
"""

import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzz_models as fm

EXAMPLES = int(os.environ.get("NEURENIX_FUZZ_EXAMPLES", "300"))
TIMEOUT = float(os.environ.get("NEURENIX_FUZZ_TIMEOUT", "5"))
SHRINK_SECONDS = float(os.environ.get("NEURENIX_FUZZ_SHRINK_SECONDS", "60"))


class FuzzCrash(AssertionError):
    """The worker died by a signal."""


class FuzzHang(AssertionError):
    """The worker did not answer in time."""


class FuzzNonIPUError(AssertionError):
    """The library raised something that is not an IPUError."""


class FuzzMemoryHog(AssertionError):
    """The case made the worker's resident memory pass the hog limit."""


class FuzzHarnessError(AssertionError):
    """The harness itself failed (a bug in tests/fuzz_models.py)."""


FAILURES = {"crash": FuzzCrash, "hang": FuzzHang, "bug": FuzzNonIPUError, "hog": FuzzMemoryHog,
            "harness": FuzzHarnessError}


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    r = fm.Runner(timeout=TIMEOUT, log_dir=str(tmp_path_factory.mktemp("fuzz-worker")))
    yield r
    r.close()


def _case(form, **options):
    return fm.Case("selftest", "none", [], b"", options, form, None, False, "exact", 0, 1)


def test_runner_detects_crash_hang_and_foreign_exceptions(tmp_path):
    with fm.Runner(timeout=2, memory_limit=2 << 30, hog_limit=256 << 20, log_dir=str(tmp_path)) as r:
        crash = r.run(_case("selftest:abort"))
        assert (crash.outcome, crash.exc_type, crash.phase) == ("crash", "SIGABRT", "compile")
        t0 = time.monotonic()
        hang = r.run(_case("selftest:hang"))
        assert hang.outcome == "hang" and time.monotonic() - t0 < 10
        assert "in run_case_here" in hang.stderr  # faulthandler showed where it hung
        bug = r.run(_case("selftest:exception"))
        assert (bug.outcome, bug.exc_type) == ("bug", "ValueError")
        hog = r.run(_case("selftest:memory", bytes=512 << 20))
        assert hog.outcome == "hog"
        over = r.run(_case("selftest:memory", bytes=3 << 30))  # past RLIMIT_AS
        assert (over.outcome, over.exc_type) == ("bug", "MemoryError")
        assert r.run(fm.seed_case("mlp")).outcome == "ok"  # a fresh worker took over


@pytest.mark.parametrize("seed", sorted(fm.SEEDS))
def test_seed_models_run(runner, seed):
    """The unmutated seeds compile and run: the mutations start from working models."""
    res = runner.run(fm.seed_case(seed, precision="float16"))
    assert res.outcome == "ok", res.report()


def test_generation_is_reproducible():
    a, b = fm.random_case(7, 42), fm.random_case(7, 42)
    assert a.to_dict() == b.to_dict()
    assert fm.Case.from_dict(a.to_dict()).to_dict() == a.to_dict()


def test_mutated_models_fail_cleanly(runner):
    cache = {}
    first_failure = []

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def case_fails_cleanly(data):
        case = fm.generate_case(fm.HypothesisDraw(data), case_id="hypothesis")
        key = case.fingerprint()
        if key not in cache:
            if first_failure and time.monotonic() - first_failure[0] > SHRINK_SECONDS:
                return  # shrink budget spent: only replay cases already run
            cache[key] = runner.run(case)
        res = cache[key]
        if res.is_failure:
            if not first_failure:
                first_failure.append(time.monotonic())
            raise FAILURES[res.outcome](res.report())

    case_fails_cleanly()


@pytest.mark.parametrize("name", [f.name for f in __import__("fuzz_findings").FINDINGS])
def test_catalogued_findings_end_cleanly(runner, name):
    """Every failure the harness ever found, reduced to a small model, now ends
    in success or an IPUError that is not an internal one (in the worker, so a
    regression that crashes or hangs fails this test, not the run)."""
    import fuzz_findings

    finding = next(f for f in fuzz_findings.FINDINGS if f.name == name)
    res = runner.run(fuzz_findings.to_case(finding))
    assert not res.is_failure and res.klass() != "ipu:IPUInternalError", res.report()
