"""One shape for a stage of the engine: it streams events, then gives one typed value.

An async generator cannot return a value, so a stage is handed its ``Staged`` first and
gives its value to it (``give``) before it ends; its reader iterates the events, then reads
``value``. As a context manager ``Staged`` closes the stage when its reader leaves early (an
exception, or the reader itself closed at a ``yield``), so no caller writes an abandon
guard::

    async def ask(staged: Staged[Answer | Stopped], request: Request):
        yield ev.TextDelta("...")
        staged.give(Answer(...))

    async with Staged(ask, request) as asked:
        async for event in asked:
            yield event
    answer = asked.value

The reader iterates the stage's own generator (nothing stands between them: every streamed
delta crosses a stage per floor of the turn, and a wrapper generator per stage cost a
resumed frame per event), and reads it to its end: what the stage does after giving its
value (a ``finally``) runs before the reader goes on. A stage left in the middle is closed
then and there (a provider's connection hung up on, a tool's handler cancelled), not when a
finalizer finds it. A stage that ran to its end needs nothing more.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from tether import events as ev

T = TypeVar("T")
P = ParamSpec("P")

_UNSET: Any = object()


class Staged(Generic[T]):
    """A stage's events (iterate it), then its value (``value``: what the stage gave)."""

    __slots__ = ("_events", "_value")

    def __init__(self, stage: Callable[Concatenate[Staged[T], P], AsyncGenerator[ev.Event, None]],
                 /, *args: P.args, **kwargs: P.kwargs) -> None:
        self._value: T = _UNSET
        self._events = stage(self, *args, **kwargs)

    def give(self, value: T) -> None:
        """The stage's value (the stage's last word: it gives it once, then ends)."""
        self._value = value

    async def __aenter__(self) -> Staged[T]:
        return self

    def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                  trace: TracebackType | None) -> Awaitable[None]:
        # The stage's own ``aclose()`` is what ``async with`` awaits: it closes a stage left
        # early now, and costs nothing to one that ran to its end (no coroutine of ours).
        return self._events.aclose()

    def __aiter__(self) -> AsyncGenerator[ev.Event, None]:
        return self._events

    @property
    def value(self) -> T:
        assert self._value is not _UNSET, "every stage ends in its value"
        return self._value
