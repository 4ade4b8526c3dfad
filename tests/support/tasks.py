"""Running an async context manager in a task of its own, for fixtures.

pytest-asyncio runs an async fixture's setup and teardown in different tasks, and an anyio task
group (the Runtime's lifespan holds one) must be left in the task that entered it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

T = TypeVar("T")


@contextlib.asynccontextmanager
async def running_in_own_task(manager: AbstractAsyncContextManager[T]) -> AsyncIterator[T]:
    entered: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    release = asyncio.Event()

    async def hold() -> None:
        try:
            async with manager as value:
                entered.set_result(value)
                await release.wait()
        except BaseException as exc:
            if not entered.done():
                entered.set_exception(exc)
            raise

    task = asyncio.create_task(hold())
    try:
        yield await entered
    finally:
        release.set()
        await task
