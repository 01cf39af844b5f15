"""The exceptions of neurenix IPU.

Every failure is an :class:`IPUError`; each subclass also derives from the
builtin exception a Python user would expect (``ValueError`` for bad input,
``MemoryError`` for out of memory, ...), so ``except ValueError`` keeps
working. The native core raises these same classes, with their structured
data as attributes.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence, Tuple


class IPUError(Exception):
    """Base class of every neurenix IPU error."""


class InvalidOptionError(IPUError, ValueError):
    """An option or argument has a bad value (the message names it)."""

    def __init__(self, message: str, option: Optional[str] = None):
        super().__init__(message)
        self.option = option


class InvalidOptionTypeError(InvalidOptionError, TypeError):
    """An option or argument has the wrong type."""


class DeviceUnavailableError(IPUError, RuntimeError):
    """The IPUs asked for are attached by another manager or process.

    ``ipus`` lists the busy IPUs and ``pids`` the processes holding them
    (0 or -1 where unknown).
    """

    def __init__(self, message: str, ipus: Sequence[int] = (), pids: Sequence[int] = ()):
        super().__init__(message)
        self.ipus: List[int] = list(ipus)
        self.pids: List[int] = list(pids)


class DeviceNotAttachedError(IPUError, RuntimeError):
    """Execution was asked of a manager that has no attached device
    (created with ``compile_only=True``, or finalized)."""


class TileOverflow(NamedTuple):
    """One tile that does not fit."""

    ipu: int
    tile: int
    used: int
    capacity: int
    largest: Tuple[Tuple[str, int], ...]


class TensorOverflow(NamedTuple):
    """A tensor larger than one IPU's tile memory (so no plan can place it)."""

    name: str
    bytes: int
    capacity: int


class IPUOutOfMemoryError(IPUError, MemoryError):
    """The compiled model does not fit in tile memory.

    ``tiles`` lists every overflowing tile (:class:`TileOverflow`): its IPU,
    its index, the bytes it needs, its capacity and its largest consumers.
    When one tensor alone is larger than an IPU, nothing is planned:
    ``tensor`` (:class:`TensorOverflow`) names it and ``tiles`` is empty.
    """

    def __init__(self, message: str, tiles: Sequence[dict] = (), tensor: Optional[Tuple[str, int, int]] = None):
        super().__init__(message)
        self.tiles: List[TileOverflow] = [
            TileOverflow(t["ipu"], t["tile"], t["used"], t["capacity"], tuple(tuple(x) for x in t["largest"]))
            for t in tiles
        ]
        self.tensor: Optional[TensorOverflow] = None if tensor is None else TensorOverflow(*tensor)


class UnsupportedOperatorError(IPUError, NotImplementedError):
    """The model uses an operator (or an operator form) neurenix does not
    implement. ``supported`` lists the operators that are."""

    def __init__(
        self,
        message: str,
        op_type: str = "",
        node: str = "",
        domain: str = "",
        opset: int = 0,
        supported: Sequence[str] = (),
    ):
        super().__init__(message)
        self.op_type = op_type
        self.node = node
        self.domain = domain
        self.opset = opset
        self.supported: List[str] = list(supported)


class ModelFormatError(IPUError, ValueError):
    """The model is malformed or inconsistent (``node`` names where, if known)."""

    def __init__(self, message: str, node: str = ""):
        super().__init__(message)
        self.node = node


class InputMismatchError(IPUError, ValueError):
    """Inputs given to compile or execute do not match the model: which
    input (``input_name``), and expected versus given shape or type."""

    def __init__(self, message: str, input_name: str = ""):
        super().__init__(message)
        self.input_name = input_name


class IncompatibleExecutableError(IPUError, ValueError):
    """A compiled model was given to a manager whose IPUs it was not compiled for."""


class IPUStateError(IPUError, RuntimeError):
    """An operation was asked in a state that does not allow it."""


class IPUInternalError(IPUError, RuntimeError):
    """A broken invariant inside neurenix: a bug. Please report it."""


class IPUFloatingPointError(IPUError, FloatingPointError):
    """With ``fp_exceptions=True``: an operation on the device overflowed,
    divided by zero or made a NaN (invalid operation) from finite operands,
    or a float32 input overflowed float16 on its way in. The message names
    the kind, the operation (vertex and compute set), the model node, the IPU
    and the tile where it first happened; the run stops there."""


__all__ = [
    "IPUError",
    "InvalidOptionError",
    "InvalidOptionTypeError",
    "DeviceUnavailableError",
    "DeviceNotAttachedError",
    "IPUOutOfMemoryError",
    "TileOverflow",
    "TensorOverflow",
    "UnsupportedOperatorError",
    "ModelFormatError",
    "InputMismatchError",
    "IncompatibleExecutableError",
    "IPUStateError",
    "IPUInternalError",
    "IPUFloatingPointError",
]


class IPUPlanWarning(UserWarning):
    """Something the compiler chose that the user may want to change: a
    planner fallback, or a pipeline run sharded for want of device
    iterations. Issued through :mod:`warnings` by ``compile_model`` and kept
    in ``CompileReport.warnings``."""
