"""Benchmark: what a training step costs on one IPU, estimated by the cost
model, for the digits CNN of examples/train_digits.py (batch 32) and the
BERT-style encoder (batch 1, sequence 128, MSE loss on the pooled output; every
weight trains, the word-embedding table included), in float32, mixed precision and float16 with
loss scaling (AdamW, float32 master weights and optimizer state).

    python benchmarks/training.py [--system version=ipu2,num_ipus=1]

Prints the markdown table recorded in docs/training.md.
"""

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

from models import BERT_BENCH, bert_encoder  # noqa: E402
from train_digits import BATCH, cnn, data  # noqa: E402

SETTINGS = [("float32", "float32", 1.0), ("mixed", "mixed", 1.0), ("float16, loss scaling 1024", "float16", 1024.0)]


def cases():
    (xt, yt), _ = data()
    yield ("digits CNN b32", cnn(), {"image": xt[:BATCH], "labels": yt[:BATCH]},
           dict(loss_kind="ce", frozen=None), BATCH)
    model, feeds = bert_encoder(1, 128, **BERT_BENCH)
    feeds["target"] = np.zeros((1, BERT_BENCH["hidden"]), np.float32)
    yield "BERT-style b1", model, feeds, dict(loss_kind="mse", frozen=None), 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--system", default="version=ipu2,num_ipus=1")
    args = p.parse_args(argv)
    from neurenix.hardware.graphcore import GraphCoreManager, IPUModel, losses, optim

    print("| model | setting | compile | step (estimated) | samples/s | busiest tile | weights | optimizer state "
          "| activations | gradients |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, model, feeds, how, batch in cases():
        loss = losses.CrossEntropy("logits") if how["loss_kind"] == "ce" else losses.MSE("pooler_output")
        for label, precision, scale in SETTINGS:
            with GraphCoreManager(num_ipus=1, precision=precision, compile_only=True,
                                  ipu_model=IPUModel.from_spec(args.system)) as ipu:
                t0 = time.perf_counter()
                t = ipu.compile_model(model, feeds, loss=loss, frozen=how["frozen"],
                                      optimizer=optim.AdamW(lr=1e-3, loss_scaling=scale))
                seconds = time.perf_counter() - t0
            r = t.report
            roles = t.memory_by_role()
            mib = lambda b: f"{b / 2**20:,.2f} MiB"  # noqa: E731
            print(f"| {name} | {label} | {seconds:.1f} s | {r.estimated_seconds * 1e6:,.1f} us | "
                  f"{batch / r.estimated_seconds:,.0f} | {r.max_tile_memory / 1024:,.1f} KiB | {mib(roles['weights'])} | "
                  f"{mib(roles['optimizer state'])} | {mib(roles['activations'])} | {mib(roles['gradients'])} |",
                  flush=True)


if __name__ == "__main__":
    main()
