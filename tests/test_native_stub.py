"""The native module's hand-written type stub (``neurenix/_native.pyi``)
agrees with the module itself: every class, function, attribute and
signature, checked by mypy's stubtest (as pydantic-core checks its own)."""

import subprocess
import sys

import neurenix._native


def test_the_stub_matches_the_native_module():
    r = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "neurenix._native"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_records_are_typed_values():
    info = neurenix._native.describe_system("version=ipu2,num_ipus=2,tiles_per_ipu=4")
    assert (info.version, info.num_ipus, info.tiles_per_ipu, info.bytes_per_tile) == ("ipu2", 2, 4, 638976)
    assert repr(info).startswith("SystemInfo(version=\"ipu2\", chip=")
    same = neurenix._native.describe_system("num_ipus=2,tiles_per_ipu=4,version=ipu2")
    assert info == same and info != neurenix._native.describe_system("version=ipu2,num_ipus=4,tiles_per_ipu=4")
    try:
        info.num_ipus = 3
    except AttributeError:
        pass
    else:
        raise AssertionError("records are frozen")


def test_a_panic_in_native_code_is_an_internal_error_not_a_crash():
    from neurenix.hardware.graphcore import IPUInternalError

    for _ in range(2):
        try:
            neurenix._native._panic("broken invariant 42")
        except IPUInternalError as e:
            assert "broken invariant 42" in str(e) and "please report" in str(e)
        else:
            raise AssertionError("no error")
    # The module goes on working.
    assert neurenix._native.describe_system("version=ipu2,num_ipus=1").num_ipus == 1
