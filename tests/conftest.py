"""Shared fixtures: every test gets its own IPU lock directory, so tests never
see IPUs held by other test runs, and tiny simulated systems."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "neurenix",
    deadline=None,
    max_examples=int(os.environ.get("NEURENIX_HYPOTHESIS_EXAMPLES", "25")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
)
settings.load_profile("neurenix")


@pytest.fixture(autouse=True)
def _isolated_locks(tmp_path, monkeypatch):
    lock_dir = tmp_path / "ipu-locks"
    monkeypatch.setenv("NEURENIX_IPU_LOCK_DIR", str(lock_dir))
    for var in ("NEURENIX_IPU_MODEL", "NEURENIX_NUM_IPUS", "NEURENIX_PRECISION", "NEURENIX_MEMORY_PROPORTION",
                "NEURENIX_HALF_PARTIALS", "NEURENIX_COMPILE_ONLY", "NEURENIX_DEVICE_ID", "NEURENIX_REPLICATION_FACTOR",
                "NEURENIX_DEVICE_ITERATIONS", "NEURENIX_EXECUTION"):
        monkeypatch.delenv(var, raising=False)
    yield lock_dir
