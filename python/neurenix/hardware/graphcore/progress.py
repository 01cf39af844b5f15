"""Compile progress on a terminal.

A compile reports its stages (import, passes, planning, lowering,
allocation) as it goes; once it has taken longer than about a second, a
progress bar (``tqdm``) shows the stage and how far along it is. Nothing is
shown when standard error is not a terminal, or with ``NEURENIX_PROGRESS=0``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Optional, TextIO

#: The stages of a compile, in order.
STAGES = ("import", "passes", "planning", "lowering", "allocation")

#: Seconds a compile runs before its progress bar appears.
DELAY_SECONDS = 1.0


def enabled(stream: Optional[TextIO] = None) -> bool:
    """Whether a progress bar would be shown on ``stream`` (standard error)."""
    if os.environ.get("NEURENIX_PROGRESS", "").strip() == "0":
        return False
    stream = stream if stream is not None else sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class CompileProgress:
    """Receives (stage, done, total) reports; draws a bar once the compile has
    run for :data:`DELAY_SECONDS`. Use as a context manager around a compile
    and pass the instance as the native compile's ``progress`` callback."""

    def __init__(self, name: str, stream: Optional[TextIO] = None, delay: float = DELAY_SECONDS):
        self.name = name
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self.active = enabled(self.stream)
        self.stages_seen: list = []
        self._start = time.monotonic()
        self._bar: Any = None
        self._stage: Optional[str] = None

    def __enter__(self) -> "CompileProgress":
        self._start = time.monotonic()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage not in self.stages_seen:
            self.stages_seen.append(stage)
        if not self.active:
            return
        if self._bar is None:
            if time.monotonic() - self._start < self.delay:
                return
            from tqdm import tqdm

            self._bar = tqdm(
                total=max(total, 1), file=self.stream, leave=False, unit="step", dynamic_ncols=True, mininterval=0.2
            )
            self._stage = None
        if stage != self._stage:
            self._stage = stage
            self._bar.set_description(f"compiling {self.name}: {stage}", refresh=False)
            self._bar.reset(total=max(total, 1))
        self._bar.n = min(done, max(total, 1))
        self._bar.refresh()
