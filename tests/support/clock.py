"""A clock a test moves forward: real time plus an offset, so servers keep running normally."""

from __future__ import annotations

import time


class MovableClock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    def advance_to(self, moment: float) -> None:
        """Forward to `moment`, unless the clock is already past it."""
        self.offset = max(self.offset, moment - time.time())
