"""One-operator ONNX models run on a tiny simulated IPU and on onnxruntime.

An operand is ``Arg(name, array, const)``: a graph input (lowered on the
device) or an initializer (a compile-time constant), or ``None`` for an
omitted optional input.
"""

from typing import Dict, List, NamedTuple, Optional, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel


class Arg(NamedTuple):
    name: str
    value: np.ndarray
    const: bool = False


def _elem(dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def feeds_of(args: Sequence[Optional[Arg]]) -> Dict[str, np.ndarray]:
    return {a.name: a.value for a in args if a is not None and not a.const}


def op_model(op: str, args: Sequence[Optional[Arg]], n_out: int = 1, opset: int = 18, out_dtypes=None, **attrs):
    """The model, with output shapes taken from onnxruntime (the checker the
    importer runs wants them), and onnxruntime's outputs."""
    out_dtypes = out_dtypes or [next(a.value.dtype for a in args if a is not None)] * n_out
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, [a.name if a is not None else "" for a in args], outs, name=op.lower(), **attrs)
    inputs = [
        helper.make_tensor_value_info(a.name, _elem(a.value.dtype), a.value.shape)
        for a in args
        if a is not None and not a.const
    ]
    inits = [numpy_helper.from_array(a.value, a.name) for a in args if a is not None and a.const]

    def build(shapes):
        outputs = [helper.make_tensor_value_info(o, _elem(t), s) for o, t, s in zip(outs, out_dtypes, shapes)]
        graph = helper.make_graph([node], "op", inputs, outputs, inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = min(m.ir_version, 9)
        return m

    ref = run_ort(build([None] * n_out), feeds_of(args))
    return build([r.shape for r in ref]), ref


def run_ort(model: onnx.ModelProto, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


class Ipus:
    """A manager of a tiny one-IPU system, reused across the examples of a
    test; asking for another precision replaces it (the IPU is exclusive)."""

    def __init__(self, tiles: int = 4):
        self.tiles = tiles
        self._managers: Dict[str, GraphCoreManager] = {}

    def manager(self, precision: str) -> GraphCoreManager:
        if precision not in self._managers:
            self.close()
            m = GraphCoreManager(
                precision=precision,
                enable_half_partials=False,
                ipu_model=IPUModel(version="ipu2", num_ipus=1, tiles_per_ipu=self.tiles),
            )
            self._managers[precision] = m.initialize()
        return self._managers[precision]

    def run(self, model: onnx.ModelProto, feeds: Dict[str, np.ndarray], precision: str = "float32"):
        """(outputs, compile report)."""
        ipu = self.manager(precision)
        compiled = ipu.compile_model(model, feeds)
        return ipu.execute_model(compiled, feeds), compiled.report

    def close(self):
        for m in self._managers.values():
            m.finalize()
        self._managers.clear()


def half_rounded(feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Float inputs as the device sees them in float16 precision."""
    return {k: (v.astype(np.float16).astype(v.dtype) if v.dtype.kind == "f" else v) for k, v in feeds.items()}


def placed_ops(report) -> List[str]:
    return [op for _, op, _ in report.placement]
