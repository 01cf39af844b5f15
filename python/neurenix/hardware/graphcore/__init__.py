"""neurenix IPU: one API for Graphcore IPUs, with a tile-level IPU simulator
as the default device.

>>> from neurenix.hardware.graphcore import GraphCoreManager, IPUModel
>>> with GraphCoreManager(num_ipus=1, ipu_model=IPUModel(num_ipus=1, tiles_per_ipu=16)) as ipu:
...     compiled = ipu.compile_model("model.onnx", example_inputs)   # doctest: +SKIP
...     outputs = ipu.execute_model(compiled, inputs)                 # doctest: +SKIP
"""

from . import losses, optim
from .compiled import CompiledModel, TensorSpec
from .errors import (
    DeviceNotAttachedError,
    DeviceUnavailableError,
    IncompatibleExecutableError,
    InputMismatchError,
    InvalidOptionError,
    InvalidOptionTypeError,
    IPUError,
    IPUInternalError,
    IPUFloatingPointError,
    IPUOutOfMemoryError,
    IPUPlanWarning,
    IPUStateError,
    ModelFormatError,
    TensorOverflow,
    TileOverflow,
    UnsupportedOperatorError,
)
from .manager import GraphCoreManager, get_graphcore_manager
from .options import IPUModel
from .planning import BatchSearch, IPUSearch, PlanTry, find_max_batch, find_min_ipus, with_batch_size
from .report import CompileReport
from .report_execution import ExecutionReport
from .training import TrainingModel


def supported_operators() -> list:
    """Names of the ONNX operators neurenix compiles."""
    from neurenix import _native

    return list(_native.supported_ops())


__all__ = [
    "GraphCoreManager",
    "TrainingModel",
    "optim",
    "losses",
    "get_graphcore_manager",
    "IPUModel",
    "CompiledModel",
    "TensorSpec",
    "CompileReport",
    "ExecutionReport",
    "supported_operators",
    "find_max_batch",
    "find_min_ipus",
    "with_batch_size",
    "BatchSearch",
    "IPUSearch",
    "PlanTry",
    "IPUError",
    "InvalidOptionError",
    "InvalidOptionTypeError",
    "DeviceUnavailableError",
    "DeviceNotAttachedError",
    "IPUOutOfMemoryError",
    "IPUPlanWarning",
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
