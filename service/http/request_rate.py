"""Requests a second per key, with a burst: the generic cell rate algorithm (GCRA).

The token bucket kept as one number per key, the time at which its bucket is full again (the
"theoretical arrival time"): a request is admitted when that time is at most `burst - 1`
intervals ahead of now, and moves it one interval on. A key whose time has passed holds nothing
a fresh key would not, so it is forgotten: the map holds only the keys that sent a request within
the last `burst` intervals. Written by hand (about twenty lines): the maintained limiters either
need a store round trip per request or sweep their memory from a thread of their own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable


class RequestRate:
    """At most `per_second` requests a second per key on average, `burst` at once."""

    def __init__(self, per_second: float, burst: int, clock: Callable[[], float]) -> None:
        if not per_second > 0 or burst < 1:
            raise ValueError("a request rate needs per_second > 0 and burst >= 1")
        self.per_second = per_second
        self.burst = burst
        self._interval = 1.0 / per_second
        self._tolerance = (burst - 1) * self._interval
        self._clock = clock
        # key -> when its bucket is full again; in order of the last admitted request (re-inserted
        # on each), so the oldest entries are the first to have expired.
        self._full_at: dict[Hashable, float] = {}

    def admit(self, key: Hashable) -> float:
        """0.0 when a request of `key` is admitted now (and counted); else the seconds until one
        would be (nothing counted)."""
        now = self._clock()
        self._forget_idle(now)
        full_at = max(self._full_at.pop(key, now), now)
        wait = full_at - now - self._tolerance
        if wait > 0:
            self._full_at[key] = full_at
            return wait
        self._full_at[key] = full_at + self._interval
        return 0.0

    def retry_after(self, wait: float) -> int:
        """A Retry-After value (whole seconds, at least 1) for a refusal that must wait `wait`."""
        return max(1, math.ceil(wait))

    def tracked(self) -> int:
        return len(self._full_at)

    def _forget_idle(self, now: float) -> None:
        # Amortized O(1): each entry is removed once. The oldest entry not yet expired was written
        # within the last `burst` intervals, and so was every entry after it.
        while self._full_at:
            oldest = next(iter(self._full_at))
            if self._full_at[oldest] > now:
                return
            del self._full_at[oldest]
