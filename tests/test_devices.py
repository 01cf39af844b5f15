"""Attach is exclusive per IPU, across managers and processes; a holder that
dies frees its IPUs; the lifecycle is idempotent and exception-safe."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from neurenix.hardware.graphcore import DeviceUnavailableError, GraphCoreManager, IPUModel
from onnx_models import mlp

SYSTEM = IPUModel(num_ipus=4, tiles_per_ipu=2)


def test_two_managers_cannot_attach_the_same_ipu():
    with GraphCoreManager(device_id=0, ipu_model=SYSTEM) as a:
        assert a.device == {"id": 0, "ipus": [0]}
        b = GraphCoreManager(device_id=0, ipu_model=SYSTEM)
        with pytest.raises(DeviceUnavailableError) as e:
            b.initialize()
        assert e.value.ipus == [0] and e.value.pids == [os.getpid()]
        assert "IPU 0" in str(e.value) and str(os.getpid()) in str(e.value)
        # The pair (device 4 = IPUs 0 and 1) overlaps: busy too.
        with pytest.raises(DeviceUnavailableError):
            GraphCoreManager(num_ipus=2, device_id=4, ipu_model=SYSTEM).initialize()
        # Any free single IPU is found instead when no id is asked for.
        with GraphCoreManager(ipu_model=SYSTEM) as c:
            assert c.device["ipus"] == [1]
        assert not b.is_initialized
    # Released: b can attach now and is fully usable.
    with b:
        assert b.device["ipus"] == [0]


def test_waiting_for_a_busy_device_times_out():
    with GraphCoreManager(num_ipus=4, ipu_model=SYSTEM):
        m = GraphCoreManager(ipu_model=SYSTEM, wait_for_device=True, attach_timeout=0.3)
        t0 = time.monotonic()
        with pytest.raises(DeviceUnavailableError, match="gave up after waiting"):
            m.initialize()
        assert 0.25 < time.monotonic() - t0 < 5


def test_ipu_info_reports_attached_busy_and_free():
    with GraphCoreManager(num_ipus=2, device_id=5, ipu_model=SYSTEM) as a, \
            GraphCoreManager(device_id=0, ipu_model=SYSTEM) as b:
        info = a.get_ipu_info()
        assert [i["id"] for i in info] == [0, 1, 2, 3]
        assert [i["status"] for i in info] == ["busy", "free", "attached", "attached"]
        assert info[0]["holder_pid"] == os.getpid()
        assert {i["target"] for i in info} == {"simulator"}
        assert info[0]["tiles"] == 2 and info[0]["bytes_per_tile"] == 638976
        assert a.get_ipu_count() == 4
        assert [i["status"] for i in b.get_ipu_info()][:1] == ["attached"]


def test_initialize_and_finalize_are_idempotent(recwarn):
    m = GraphCoreManager(ipu_model=SYSTEM)
    m.initialize()
    dev = m.device
    m.initialize()
    assert m.device == dev
    m.finalize()
    m.finalize()
    assert m.device is None and not m.is_initialized
    assert len(recwarn) == 0
    # Re-initialising attaches again.
    m.initialize()
    assert m.is_initialized
    m.finalize()


def test_context_manager_detaches_on_exceptions():
    with pytest.raises(RuntimeError, match="boom"):
        with GraphCoreManager(num_ipus=4, ipu_model=SYSTEM) as m:
            assert m.is_initialized
            raise RuntimeError("boom")
    assert not m.is_initialized
    with GraphCoreManager(num_ipus=4, ipu_model=SYSTEM) as again:
        assert again.device["ipus"] == [0, 1, 2, 3]


HOLDER = textwrap.dedent(
    """
    import sys, time
    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel
    m = GraphCoreManager(num_ipus=2, device_id=4, ipu_model=IPUModel(num_ipus=4, tiles_per_ipu=2))
    m.initialize()
    print("attached", flush=True)
    time.sleep(120)
    """
)


def test_another_process_holds_the_ipus_until_it_is_killed():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert holder.stdout.readline().strip() == "attached"
        m = GraphCoreManager(ipu_model=SYSTEM, device_id=1)
        with pytest.raises(DeviceUnavailableError) as e:
            m.initialize()
        assert e.value.ipus == [1] and e.value.pids == [holder.pid]
        info = m.get_ipu_info()
        assert info[0]["status"] == "busy" and info[0]["holder_pid"] == holder.pid
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        # The OS released the lock with the process.
        m.initialize()
        assert m.device["ipus"] == [1]
        m.finalize()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_loaded_model_is_freed_by_finalize():
    rng = np.random.default_rng(1)
    model, _ = mlp([8, 4], rng)
    x = np.zeros((1, 8), np.float32)
    m = GraphCoreManager(ipu_model=SYSTEM)
    compiled = m.compile_model(model, x)
    m.execute_model(compiled, x)
    assert compiled.loaded
    m.finalize()
    assert not compiled.loaded
