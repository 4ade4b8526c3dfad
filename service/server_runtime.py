"""The event loop the servers run on (setting `event_loop`).

By default uvloop (libuv): measured with bench/flow.py on a 2-core machine, it cuts the server's
CPU per request by 10-20 % against asyncio's own loop (docs/performance.md). `auto` means what
uvicorn's `--loop auto` means: uvloop where it is installed (it is a dependency everywhere but on
Windows, where it has no build), else asyncio's. Naming `uvloop` where it is not installed is a
configuration error (`Settings.validate`), not a silent fallback.

The HTTP parser stays h11 (uvicorn's pure-Python one), not uvicorn's faster httptools: httptools
accepts header fields of any size (h11 stops at 16 KiB) and keeps trailing whitespace in field
values, which RFC 9110 §5.5 says a recipient excludes (docs/performance.md, "Tried and not taken").
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from typing import Literal

EventLoopChoice = Literal["auto", "uvloop", "asyncio"]


def event_loop_name(choice: EventLoopChoice) -> Literal["uvloop", "asyncio"]:
    if choice == "auto":
        return "uvloop" if _installed("uvloop") else "asyncio"
    if choice == "uvloop" and not _installed("uvloop"):
        raise ValueError("MCPUC_EVENT_LOOP is uvloop, but uvloop is not installed")
    return choice


def loop_factory(choice: EventLoopChoice) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """For `asyncio.Runner(loop_factory=...)`; None is asyncio's own loop."""
    if event_loop_name(choice) == "asyncio":
        return None
    import uvloop

    return uvloop.new_event_loop


def _installed(module: str) -> bool:
    """Whether `module` imports (present but broken counts as absent, as for uvicorn's `auto`)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True
