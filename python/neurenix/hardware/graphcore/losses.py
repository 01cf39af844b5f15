"""Built-in losses for training: each adds its loss, and its label input, to
the model's graph (the model then needs no loss of its own).

>>> from neurenix.hardware.graphcore import losses
>>> loss = losses.CrossEntropy(logits="logits", labels="labels")
"""

from __future__ import annotations

from typing import Tuple

from .errors import InvalidOptionTypeError

__all__ = ["Loss", "CrossEntropy", "MSE"]


class Loss:
    """The base of the built-in losses."""

    #: The label input the loss adds: ``execute_model`` takes it with the
    #: model's inputs.
    label_input: str = ""

    def native(self) -> Tuple[str, str, str]:
        raise NotImplementedError


def _name(what: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidOptionTypeError(f"{what} must be a value name (a non-empty string), got {value!r}", what)
    return value


class CrossEntropy(Loss):
    """Mean cross entropy of ``logits`` (a model value of shape [N, C]) against
    integer class ``labels`` (a new input of shape [N], int64 or int32), as
    ``torch.nn.CrossEntropyLoss()``."""

    def __init__(self, logits: str, labels: str = "labels"):
        self.logits = _name("logits", logits)
        self.label_input = _name("labels", labels)

    def native(self) -> Tuple[str, str, str]:
        return ("cross_entropy", self.logits, self.label_input)

    def __repr__(self) -> str:
        return f"CrossEntropy(logits={self.logits!r}, labels={self.label_input!r})"


class MSE(Loss):
    """Mean squared error of ``output`` against ``target`` (a new input of the
    output's shape), as ``torch.nn.MSELoss()``."""

    def __init__(self, output: str, target: str = "target"):
        self.output = _name("output", output)
        self.label_input = _name("target", target)

    def native(self) -> Tuple[str, str, str]:
        return ("mse", self.output, self.label_input)

    def __repr__(self) -> str:
        return f"MSE(output={self.output!r}, target={self.label_input!r})"
