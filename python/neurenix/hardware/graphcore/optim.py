"""Optimizers for training on the (simulated) IPU, with PyTorch's update rules
(as PopTorch's optimizers follow them). Each runs on the device as part of
the training step, in float32 on float32 master weights; its
hyperparameters are streamed with every step, so
:meth:`TrainingModel.set_optimizer` changes them without recompiling.

>>> from neurenix.hardware.graphcore import optim
>>> opt = optim.SGD(lr=0.05, momentum=0.9)

Common arguments: ``loss_scaling`` (static: the backward pass starts from
this value and the update divides it out), ``max_grad_norm`` (clip the
gradients by their global norm, as ``torch.nn.utils.clip_grad_norm_``) and
``accum_type`` (``"float32"`` or ``"float16"``: the type of the optimizer's
state, momenta and moments). See docs/training.md.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Dict, Optional, Tuple

from .errors import InvalidOptionError, InvalidOptionTypeError

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "LAMB"]


def _number(name: str, value: Any, low: float = 0.0, low_open: bool = False, high: Optional[float] = None) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidOptionTypeError(f"{name} must be a number, got {value!r}", name)
    v = float(value)
    bad = not math.isfinite(v) or v < low or (low_open and v == low) or (high is not None and v >= high)
    if bad:
        rng = f"({low:g}, " if low_open else f"[{low:g}, "
        rng += f"{high:g})" if high is not None else "inf)"
        raise InvalidOptionError(f"{name} must be in {rng}, got {value!r}", name)
    return v


class Optimizer:
    """The base of the optimizers; not used directly."""

    #: The name the native compiler knows the update rule by.
    kind: str = ""

    def __init__(self, loss_scaling: float = 1.0, max_grad_norm: Optional[float] = None,
                 accum_type: str = "float32"):
        self.loss_scaling = _number("loss_scaling", loss_scaling, 0.0, low_open=True)
        self.max_grad_norm = None if max_grad_norm is None else _number(
            "max_grad_norm", max_grad_norm, 0.0, low_open=True)
        if accum_type not in ("float32", "float16"):
            raise InvalidOptionError(f"accum_type must be 'float32' or 'float16', got {accum_type!r}", "accum_type")
        self.accum_type = accum_type

    def structure(self) -> Tuple[Any, ...]:
        """What the compiled program depends on: optimizers with the same
        structure can replace each other without recompiling."""
        return (type(self).__name__, self.kind, self.loss_scaling, self.max_grad_norm is not None, self.accum_type)

    def _values(self, step: int) -> Dict[str, float]:
        raise NotImplementedError

    def hyperparameters(self, step: int) -> Dict[str, float]:
        """The values streamed with optimizer step ``step`` (1 for the first),
        by input name."""
        v = {f"optimizer/{k}": float(x) for k, x in self._values(step).items()}
        if self.max_grad_norm is not None:
            v["optimizer/max_grad_norm"] = self.max_grad_norm
        return v

    def _common(self) -> str:
        extra = [f"loss_scaling={self.loss_scaling:g}"] if self.loss_scaling != 1.0 else []
        if self.max_grad_norm is not None:
            extra.append(f"max_grad_norm={self.max_grad_norm:g}")
        if self.accum_type != "float32":
            extra.append(f"accum_type={self.accum_type!r}")
        return "".join(", " + e for e in extra)


class SGD(Optimizer):
    """``torch.optim.SGD``: ``d = g + weight_decay * w``; with momentum
    ``buf = momentum * buf + (1 - dampening) * d`` (``buf = d`` at the first
    step), ``d = d + momentum * buf`` (nesterov) or ``d = buf``;
    ``w -= lr * d``."""

    def __init__(self, lr: float, momentum: float = 0.0, dampening: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, **common: Any):
        super().__init__(**common)
        self.lr = _number("lr", lr, 0.0)
        self.momentum = _number("momentum", momentum, 0.0)
        self.dampening = _number("dampening", dampening, 0.0)
        self.weight_decay = _number("weight_decay", weight_decay, 0.0)
        if not isinstance(nesterov, bool):
            raise InvalidOptionTypeError(f"nesterov must be True or False, got {nesterov!r}", "nesterov")
        if nesterov and (self.momentum == 0.0 or self.dampening != 0.0):
            raise InvalidOptionError("nesterov momentum needs momentum > 0 and dampening = 0 (as PyTorch)", "nesterov")
        self.nesterov = nesterov
        self.kind = "sgd" if self.momentum == 0.0 else ("sgd_nesterov" if nesterov else "sgd_momentum")

    def _values(self, step: int) -> Dict[str, float]:
        first = step <= 1
        return {
            "lr": self.lr,
            "weight_decay": self.weight_decay,
            "momentum": self.momentum,
            "buffer_decay": 0.0 if first else self.momentum,
            "gradient_coefficient": 1.0 if first else 1.0 - self.dampening,
        }

    def __repr__(self) -> str:
        return (f"SGD(lr={self.lr:g}, momentum={self.momentum:g}, dampening={self.dampening:g}, "
                f"nesterov={self.nesterov}, weight_decay={self.weight_decay:g}{self._common()})")


class _AdamBase(Optimizer):
    def __init__(self, lr: float, betas: Tuple[float, float], eps: float, weight_decay: float, **common: Any):
        super().__init__(**common)
        self.lr = _number("lr", lr, 0.0)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise InvalidOptionTypeError(f"betas must be a pair of numbers, got {betas!r}", "betas")
        self.betas = (_number("betas[0]", betas[0], 0.0, high=1.0), _number("betas[1]", betas[1], 0.0, high=1.0))
        self.eps = _number("eps", eps, 0.0)
        self.weight_decay = _number("weight_decay", weight_decay, 0.0)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(lr={self.lr:g}, betas=({self.betas[0]:g}, {self.betas[1]:g}), "
                f"eps={self.eps:g}, weight_decay={self.weight_decay:g}{self._common()})")


class Adam(_AdamBase):
    """``torch.optim.Adam`` (no amsgrad): ``g += weight_decay * w``;
    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``;
    ``w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``."""

    kind = "adam"

    def __init__(self, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, **common: Any):
        super().__init__(lr, betas, eps, weight_decay, **common)

    def _values(self, step: int) -> Dict[str, float]:
        b1, b2 = self.betas
        return {
            "step_size": self.lr / (1.0 - b1 ** step),
            "beta1": b1,
            "beta2": b2,
            "eps": self.eps,
            "sqrt_bias_correction2": math.sqrt(1.0 - b2 ** step),
            "weight_decay": self.weight_decay,
            "decay": 1.0,
        }


class AdamW(_AdamBase):
    """``torch.optim.AdamW``: as :class:`Adam`, with decoupled weight decay
    ``w *= 1 - lr * weight_decay`` before the update."""

    kind = "adamw"

    def __init__(self, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, **common: Any):
        super().__init__(lr, betas, eps, weight_decay, **common)

    def _values(self, step: int) -> Dict[str, float]:
        b1, b2 = self.betas
        return {
            "step_size": self.lr / (1.0 - b1 ** step),
            "beta1": b1,
            "beta2": b2,
            "eps": self.eps,
            "sqrt_bias_correction2": math.sqrt(1.0 - b2 ** step),
            "weight_decay": 0.0,
            "decay": 1.0 - self.lr * self.weight_decay,
        }


class LAMB(_AdamBase):
    """LAMB (You et al., 2019), as PopTorch's: Adam's moments with bias
    correction, ``r = m_hat / (sqrt(v_hat) + eps) + weight_decay * w``,
    ``w -= lr * (|w| / |r|) * r`` (trust ratio 1 when either norm is 0)."""

    kind = "lamb"

    def __init__(self, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, bias_correction: bool = True, **common: Any):
        super().__init__(lr, betas, eps, weight_decay, **common)
        if not isinstance(bias_correction, bool):
            raise InvalidOptionTypeError(f"bias_correction must be True or False, got {bias_correction!r}",
                                         "bias_correction")
        self.bias_correction = bias_correction

    def _values(self, step: int) -> Dict[str, float]:
        b1, b2 = self.betas
        return {
            "lr": self.lr,
            "beta1": b1,
            "beta2": b2,
            "eps": self.eps,
            "bias_correction1": (1.0 - b1 ** step) if self.bias_correction else 1.0,
            "bias_correction2": (1.0 - b2 ** step) if self.bias_correction else 1.0,
            "weight_decay": self.weight_decay,
        }
