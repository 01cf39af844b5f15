"""ONNX front end: reads models with the ``onnx`` package and translates them
into the native IR (and back, for :meth:`GraphCoreManager.optimize_model`)."""

from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple, Union

import numpy as np

from .errors import InvalidOptionTypeError, ModelFormatError, UnsupportedOperatorError

ModelLike = Union["onnx.ModelProto", bytes, bytearray, memoryview, str, "os.PathLike[str]"]


def _onnx():
    import onnx

    return onnx


def load(model: Any) -> "onnx.ModelProto":
    """An ``onnx.ModelProto`` from a ModelProto, serialized bytes, or a path."""
    onnx = _onnx()
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray, memoryview)):
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as e:  # protobuf's DecodeError and friends
            raise ModelFormatError(f"the bytes given are not a serialized ONNX model: {e}") from None
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise ModelFormatError(f"no ONNX model at '{path}': the file does not exist")
        if os.path.isdir(path):
            raise ModelFormatError(f"'{path}' is a directory, not an ONNX model file")
        try:
            proto = onnx.load(path)
        except Exception as e:
            raise ModelFormatError(f"'{path}' is not a readable ONNX model: {e}") from None
    else:
        raise InvalidOptionTypeError(
            f"model must be an onnx.ModelProto, serialized model bytes or a path to a .onnx file, "
            f"got {type(model).__name__}",
            "model",
        )
    if not proto.HasField("graph") or (len(proto.graph.node) == 0 and len(proto.graph.output) == 0):
        raise ModelFormatError("the ONNX model has an empty graph")
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        msg = str(e).strip().splitlines()
        raise ModelFormatError("the ONNX model is invalid: " + " ".join(m.strip() for m in msg[:6])) from None
    return proto


def default_opset(proto: "onnx.ModelProto") -> int:
    for imp in proto.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    raise ModelFormatError("the ONNX model imports no version of the default operator set")


def _dims(vi: Any) -> Tuple[int, Optional[List[Any]]]:
    t = vi.type
    if t.WhichOneof("value") != "tensor_type":
        kind = t.WhichOneof("value") or "unknown"
        raise UnsupportedOperatorError(
            f"graph value '{vi.name}' is a {kind.replace('_', ' ')}; only tensors are supported", op_type=kind
        )
    tt = t.tensor_type
    if tt.elem_type == _onnx().TensorProto.STRING:
        raise UnsupportedOperatorError(
            f"graph value '{vi.name}' holds strings; string tensors are not supported on the IPU", op_type="string"
        )
    if not tt.HasField("shape"):
        return tt.elem_type, None
    dims: List[Any] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(str(d.dim_param))
        else:
            dims.append(-1)
    return tt.elem_type, dims


def _array_parts(arr: np.ndarray, what: str) -> Tuple[int, List[int], bytes]:
    onnx = _onnx()
    if arr.dtype.kind in "OUS":
        raise UnsupportedOperatorError(f"{what} holds strings; string tensors are not supported", op_type="string")
    try:
        code = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
    except Exception:
        raise ModelFormatError(f"{what} has an element type ({arr.dtype}) neurenix cannot read") from None
    le = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
    return int(code), [int(d) for d in arr.shape], le.tobytes()


def _tensor(t: Any, what: str) -> Tuple[int, List[int], bytes]:
    onnx = _onnx()
    try:
        arr = onnx.numpy_helper.to_array(t)
    except Exception as e:
        raise ModelFormatError(f"{what} cannot be read: {e}") from None
    if t.data_type == onnx.TensorProto.BFLOAT16:
        # numpy has no bfloat16: keep the raw 16-bit patterns.
        return int(t.data_type), [int(d) for d in t.dims], np.asarray(arr).astype("<u2").tobytes()
    return _array_parts(np.asarray(arr), what)


def _attribute(node_name: str, a: Any) -> Tuple[str, str, Any]:
    onnx = _onnx()
    T = onnx.AttributeProto
    what = f"attribute '{a.name}' of node '{node_name}'"
    if a.type == T.FLOAT:
        return a.name, "f", float(a.f)
    if a.type == T.INT:
        return a.name, "i", int(a.i)
    if a.type == T.STRING:
        return a.name, "s", a.s.decode("utf-8", "replace")
    if a.type == T.FLOATS:
        return a.name, "floats", [float(x) for x in a.floats]
    if a.type == T.INTS:
        return a.name, "ints", [int(x) for x in a.ints]
    if a.type == T.STRINGS:
        return a.name, "strings", [s.decode("utf-8", "replace") for s in a.strings]
    if a.type == T.TENSOR:
        return a.name, "t", _tensor(a.t, what)
    if a.type in (T.GRAPH, T.GRAPHS):
        return a.name, "g", None
    return a.name, "other", None


def to_native(proto: "onnx.ModelProto"):
    """The native IR of an ONNX model."""
    from neurenix import _native

    g = proto.graph
    opset = default_opset(proto)
    inits = [(t.name, *_tensor(t, f"initializer '{t.name}'")) for t in g.initializer]
    for s in g.sparse_initializer:
        raise UnsupportedOperatorError(
            f"sparse initializer '{s.values.name}' is not supported; densify the model first", op_type="SparseTensor"
        )
    inputs = [(vi.name, *_dims(vi)) for vi in g.input]
    outputs = [(vi.name, *_dims(vi)) for vi in g.output]
    nodes = []
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        attrs = [_attribute(name, a) for a in n.attribute]
        nodes.append((name, n.op_type, n.domain, list(n.input), list(n.output), attrs))
    return _native.Model.from_parts(g.name or "model", opset, inputs, outputs, inits, nodes)


def from_native(native: Any, original: "onnx.ModelProto") -> "onnx.ModelProto":
    """An ONNX model from the native IR (after graph optimisation)."""
    onnx = _onnx()
    h = onnx.helper
    parts = native.to_parts()

    def value_info(name: str, code: int, dims: Optional[List[Any]]):
        shape = None if dims is None else [d if d is not None else None for d in dims]
        return h.make_tensor_value_info(name, code or onnx.TensorProto.FLOAT, shape)

    def tensor(name: str, code: int, shape: List[int], raw: bytes):
        return h.make_tensor(name, code, shape, vals=raw, raw=True)

    nodes = []
    for name, op_type, domain, ins, outs, attrs in parts["nodes"]:
        kwargs = {}
        for aname, kind, value in attrs:
            kwargs[aname] = tensor("", *value) if kind == "t" else value
        nodes.append(h.make_node(op_type, ins, outs, name=name, domain=domain or None, **kwargs))
    graph = h.make_graph(
        nodes,
        original.graph.name or parts["name"],
        [value_info(*i) for i in parts["inputs"]],
        [value_info(*o) for o in parts["outputs"]],
        initializer=[tensor(n, c, s, b) for n, c, s, b in parts["initializers"]],
    )
    model = h.make_model(graph, opset_imports=list(original.opset_import), producer_name="neurenix")
    model.ir_version = original.ir_version
    return model
