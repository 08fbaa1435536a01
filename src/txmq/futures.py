"""Answers built from futures with callbacks, not tasks: on the hot paths (a send waiting for its group's flush)
a task per request costs more than the work it waits for."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def then(source: Awaitable[T], fn: Callable[[T], R], errors: tuple[type[BaseException], ...] = (),
         on_error: Callable[[BaseException], R] | None = None) -> asyncio.Future[R]:
    """A future of ``fn(result of source)``; an exception of ``source`` that is one of ``errors`` becomes
    ``on_error(exc)``, any other is passed on. A future ``source`` costs one callback; anything else awaitable (a
    coroutine: tests' stand-ins) runs as a task."""
    src = asyncio.ensure_future(source)
    out: asyncio.Future[R] = src.get_loop().create_future()

    def done(f: asyncio.Future[T]) -> None:
        if out.done():
            return
        if f.cancelled():
            out.cancel()
            return
        exc = f.exception()
        try:
            if exc is None:
                out.set_result(fn(f.result()))
            elif on_error is not None and isinstance(exc, errors):
                out.set_result(on_error(exc))
            else:
                out.set_exception(exc)
        except Exception as failure:  # fn itself failed: the waiter sees it, as an awaiting coroutine would
            out.set_exception(failure)

    src.add_done_callback(done)
    return out
