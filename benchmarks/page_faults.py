"""Benchmark: what a page fault on fresh memory costs this host around a compile.

Touches 100 MiB of fresh private anonymous memory (as the C library's large
blocks are, without huge pages), one write per page, at points of
a process that compiles and loads a model (one full `ipu2`), and prints the
time per page: on a virtual machine whose freed memory goes back to the
hypervisor, pages the guest hands out again can cost several times more to
fault in than at other moments, and a compile faults in hundreds of
megabytes.

    python benchmarks/page_faults.py [--model "resnet50-light b1"]
"""

import argparse
import mmap
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from models import MODELS  # noqa: E402

_BYTES = 100 << 20


def touch(label: str) -> None:
    """Faults in _BYTES of fresh memory and prints the time per page."""
    page = mmap.PAGESIZE
    region = mmap.mmap(-1, _BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region.madvise(mmap.MADV_NOHUGEPAGE)
    view = np.frombuffer(region, dtype=np.uint8)
    start = time.perf_counter()
    view[::page] = 1
    seconds = time.perf_counter() - start
    del view
    region.close()
    print(f"{label:<28} {seconds * 1e3:7.1f} ms for {_BYTES >> 20} MiB, {seconds / (_BYTES // page) * 1e6:.2f} us a page")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50-light b1", choices=sorted(MODELS))
    args = parser.parse_args()
    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel

    touch("before the model is built")
    model, feeds = MODELS[args.model]()
    with GraphCoreManager(num_ipus=1, ipu_model=IPUModel(version="ipu2", num_ipus=1)) as ipu:
        touch("before the compile")
        compiled = ipu.compile_model(model, feeds)
        touch("right after the compile")
        touch("then once more")
        compiled.load()
        touch("right after the load")
        time.sleep(1)
        touch("a second later")


if __name__ == "__main__":
    main()
