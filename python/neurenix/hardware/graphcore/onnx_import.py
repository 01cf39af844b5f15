"""ONNX front end: reads models with the ``onnx`` package and translates them
into the native IR (and back, for :meth:`GraphCoreManager.optimize_model`)."""

from __future__ import annotations

import math
import os
from typing import Any, List, Optional, Tuple

import numpy as np

from .compiled import STORAGE_TYPES
from .errors import InvalidOptionTypeError, ModelFormatError, UnsupportedOperatorError


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
        onnx.checker.check_model(_without_payloads(proto))
    except onnx.checker.ValidationError as e:
        msg = str(e).strip().splitlines()
        raise ModelFormatError("the ONNX model is invalid: " + " ".join(m.strip() for m in msg[:6])) from None
    except Exception as e:
        # The checker itself can fail on corrupted data (its message quoting
        # a name that is not UTF-8, say).
        raise ModelFormatError(f"the ONNX model is invalid: {type(e).__name__}: {e}") from None
    return proto


def dtype_name(elem_type: int) -> Optional[str]:
    """numpy's name for an ONNX element type code (None for 0, "not given",
    or a type models may not declare): the core's name, so "bfloat16" and
    "float8_e4m3fn" whatever numpy and onnx make of them."""
    if not elem_type:
        return None
    from neurenix import _native

    return _native.elem_type_name(int(elem_type))


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
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(str(d.dim_param))
        else:
            dims.append(None)  # unknown (some exporters write -1)
    return tt.elem_type, dims


# Initializers of more elements than this are checked here rather than by
# the ONNX checker, which would otherwise serialize every weight.
_PAYLOAD_ELEMENTS = 256
_VALUE_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def _without_payloads(proto: "onnx.ModelProto") -> "onnx.ModelProto":
    """The model for the ONNX checker: the same model, but each large
    initializer held inline is replaced by an empty tensor of its name and
    element type, after the checks the checker would make of it (a defined
    element type, no negative dimension, exactly one field holding values;
    the core checks the data's length against the dims when it reads it).
    The checker sees every name, node and type; it no longer serializes
    hundreds of megabytes of weights to do so."""
    onnx = _onnx()
    g = proto.graph
    large = [t.data_location != onnx.TensorProto.EXTERNAL and math.prod(t.dims) > _PAYLOAD_ELEMENTS
             for t in g.initializer]
    if not any(large):
        return proto
    for t, big in zip(g.initializer, large):
        if not big:
            continue
        what = f"initializer '{t.name}'"
        if t.data_type == onnx.TensorProto.UNDEFINED:
            raise ModelFormatError(f"the ONNX model is invalid: {what} has no element type")
        if any(d < 0 for d in t.dims):
            raise ModelFormatError(f"the ONNX model is invalid: {what} has a negative dimension {list(t.dims)}")
        fields = [f for f in _VALUE_FIELDS if len(getattr(t, f))] + (["raw_data"] if t.HasField("raw_data") else [])
        if len(fields) != 1:
            raise ModelFormatError(f"the ONNX model is invalid: {what} must hold its values in exactly one field, "
                                   f"it uses {len(fields)}" + (f" ({', '.join(fields)})" if fields else ""))
    light = onnx.ModelProto()
    for field, value in proto.ListFields():
        if field.name != "graph":
            _copy_field(light, field, value)
    for field, value in g.ListFields():
        if field.name != "initializer":
            _copy_field(light.graph, field, value)
    for t, big in zip(g.initializer, large):
        if big:
            stub = light.graph.initializer.add(name=t.name, data_type=t.data_type)
            stub.dims.append(0)
        else:
            light.graph.initializer.add().CopyFrom(t)
    return light


def _copy_field(dst: Any, field: Any, value: Any) -> None:
    # (`label` is gone from newer protobuf releases, `is_repeated` absent
    # from older ones.)
    repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
    if repeated:
        getattr(dst, field.name).extend(value)
    elif field.type == field.TYPE_MESSAGE:
        getattr(dst, field.name).CopyFrom(value)
    else:
        setattr(dst, field.name, value)


def _array_parts(name: str, arr: np.ndarray, what: str):
    from neurenix import _native

    onnx = _onnx()
    if arr.dtype.kind in "OUS":
        raise UnsupportedOperatorError(f"{what} holds strings; string tensors are not supported", op_type="string")
    try:
        code = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
    except Exception:
        raise ModelFormatError(f"{what} has an element type ({arr.dtype}) neurenix cannot read") from None
    le = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
    return _native.TensorParts(name, int(code), [int(d) for d in arr.shape], le.tobytes())


def _bits(t: Any, size: int, what: str) -> bytes:
    """The little-endian bit patterns of a tensor of 1- or 2-byte elements:
    its raw data, or its int32_data, which ONNX fills with the patterns."""
    onnx = _onnx()
    if t.data_location == onnx.TensorProto.EXTERNAL:
        try:
            arr = np.asarray(onnx.numpy_helper.to_array(t))
        except Exception as e:
            raise ModelFormatError(f"{what} cannot be read: {e}") from None
        return np.ascontiguousarray(arr).view(np.uint8).tobytes()
    raw = t.raw_data  # (each read of the field copies it)
    if raw:
        return raw
    words = np.asarray(t.int32_data, dtype=np.int64)
    return (words & (0xFFFF if size == 2 else 0xFF)).astype("<u2" if size == 2 else "u1").tobytes()


def _tensor(t: Any, what: str):
    from neurenix import _native

    onnx = _onnx()
    code = int(t.data_type)
    dims = [int(d) for d in t.dims]
    name = _native.elem_type_name(code)
    if name in STORAGE_TYPES:
        # Read as bit patterns, whatever numpy and onnx make of the type.
        return _native.TensorParts(t.name, code, dims, _bits(t, np.dtype(name).itemsize, what))
    if name is None:
        # A type the core refuses by name (UnsupportedOperatorError) or as
        # undefined (ModelFormatError): its data is not needed for that.
        return _native.TensorParts(t.name, code, dims, b"")
    if t.data_location != onnx.TensorProto.EXTERNAL and t.HasField("raw_data"):
        # Raw data is already the little-endian bytes the core takes (the
        # core checks its length against the dims): no numpy round trip.
        # Read once: each read of the field copies it (100 MB for ResNet-50).
        raw = t.raw_data
        if raw:
            return _native.TensorParts(t.name, code, dims, raw)
    try:
        arr = onnx.numpy_helper.to_array(t)
    except Exception as e:
        raise ModelFormatError(f"{what} cannot be read: {e}") from None
    return _array_parts(t.name, np.asarray(arr), what)


def _attribute(node_name: str, a: Any):
    from neurenix import _native

    onnx = _onnx()
    T = onnx.AttributeProto
    what = f"attribute '{a.name}' of node '{node_name}'"
    if a.type == T.FLOAT:
        kind, value = "f", float(a.f)
    elif a.type == T.INT:
        kind, value = "i", int(a.i)
    elif a.type == T.STRING:
        kind, value = "s", a.s.decode("utf-8", "replace")
    elif a.type == T.FLOATS:
        kind, value = "floats", [float(x) for x in a.floats]
    elif a.type == T.INTS:
        kind, value = "ints", [int(x) for x in a.ints]
    elif a.type == T.STRINGS:
        kind, value = "strings", [s.decode("utf-8", "replace") for s in a.strings]
    elif a.type == T.TENSOR:
        kind, value = "t", _tensor(a.t, what)
    elif a.type in (T.GRAPH, T.GRAPHS):
        kind, value = "g", None
    else:
        kind, value = T.AttributeType.Name(a.type).lower() if a.type in T.AttributeType.values() else "unknown", None
    return _native.AttrParts(a.name, kind, value)


def to_native(proto: "onnx.ModelProto"):
    """The native IR of an ONNX model. Names and checks (operator set,
    element types, wiring) are the core's; this reads the protobuf."""
    from neurenix import _native

    g = proto.graph
    try:
        for s in g.sparse_initializer:
            raise UnsupportedOperatorError(
                f"sparse initializer '{s.values.name}' is not supported; densify the model first",
                op_type="SparseTensor",
            )
        inits = [_tensor(t, f"initializer '{t.name}'") for t in g.initializer]
        inputs = [_native.ValueParts(vi.name, *_dims(vi)) for vi in g.input]
        outputs = [_native.ValueParts(vi.name, *_dims(vi)) for vi in g.output]
        nodes = [
            _native.NodeParts(
                n.name,
                n.op_type,
                n.domain,
                list(n.input),
                list(n.output),
                [_attribute(n.name or f"#{i} ({n.op_type}, unnamed)", a) for a in n.attribute],
            )
            for i, n in enumerate(g.node)
        ]
        opsets = [(imp.domain, int(imp.version)) for imp in proto.opset_import]
        parts = _native.ModelParts(g.name or "model", opsets, inputs, outputs, inits, nodes)
    except (UnicodeError, TypeError, OverflowError, ValueError) as e:
        if isinstance(e, ModelFormatError):
            raise
        # Corrupted protobuf strings and values outside the IR's ranges.
        raise ModelFormatError(f"the ONNX model holds data neurenix cannot read: {type(e).__name__}: {e}") from None
    return _native.Model.from_parts(parts)


def from_native(native: Any, original: "onnx.ModelProto") -> "onnx.ModelProto":
    """An ONNX model from the native IR (after graph optimisation)."""
    onnx = _onnx()
    h = onnx.helper
    parts = native.to_parts()

    def value_info(v: Any):
        return h.make_tensor_value_info(v.name, v.elem_type or onnx.TensorProto.FLOAT, v.dims)

    def tensor(t: Any, name: Optional[str] = None):
        return h.make_tensor(t.name if name is None else name, t.elem_type, t.dims, vals=t.data, raw=True)

    nodes = []
    for n in parts.nodes:
        kwargs = {a.name: tensor(a.value, "") if a.kind == "t" else a.value for a in n.attrs}
        nodes.append(h.make_node(n.op_type, n.inputs, n.outputs, name=n.name, domain=n.domain or None, **kwargs))
    graph = h.make_graph(
        nodes,
        original.graph.name or parts.name,
        [value_info(v) for v in parts.inputs],
        [value_info(v) for v in parts.outputs],
        initializer=[tensor(t) for t in parts.initializers],
    )
    model = h.make_model(graph, opset_imports=list(original.opset_import), producer_name="neurenix")
    model.ir_version = original.ir_version
    return model
