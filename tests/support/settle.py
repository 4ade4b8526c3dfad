"""Waiting for what another thread, process or server does: poll a condition until it holds,
rather than sleep a fixed time and hope it did. A slow machine then makes a wait longer, not a
test red, and a wait that runs out names what did not happen.

- `eventually(predicate, what)`: from synchronous code (a harness starting a process);
- `await wait_until(predicate, what)`: from a test's event loop; `predicate` may be async;
- `await quiet_for(seconds, why)`: the one fixed wait, before asserting that something did NOT
  happen (a second notification, a stray log line): no condition can say "never".
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable

import anyio

POLL_SECONDS = 0.02
WITHIN_SECONDS = 10.0


def eventually(
    predicate: Callable[[], object],
    what: str,
    *,
    within: float = WITHIN_SECONDS,
    poll: float = POLL_SECONDS,
) -> None:
    """Call `predicate` until it returns something true; fail naming `what` after `within` s.
    An exception from `predicate` (an assertion that the process is still alive) ends the wait."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:g} s waiting for {what}")
        time.sleep(poll)


async def wait_until(
    predicate: Callable[[], object | Awaitable[object]],
    what: str,
    *,
    within: float = WITHIN_SECONDS,
    poll: float = POLL_SECONDS,
) -> None:
    """`eventually` in the event loop: the loop runs (other tasks, server threads' callbacks)
    between polls."""
    deadline = time.monotonic() + within
    while True:
        answer = predicate()
        if inspect.isawaitable(answer):
            answer = await answer
        if answer:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:g} s waiting for {what}")
        await anyio.sleep(poll)


def succeeds(call: Callable[[], object], *errors: type[BaseException]) -> bool:
    """Whether `call()` returns without raising one of `errors` (a predicate for a server that
    refuses connections until it listens)."""
    try:
        call()
    except errors:
        return False
    return True


async def quiet_for(seconds: float, why: str) -> None:
    """Let what is in flight arrive for `seconds` before asserting it did not (`why` says what
    could still come): the only fixed wait the tests use outside a test of timing itself."""
    await anyio.sleep(seconds)
