"""One shape for a stage of the engine: it streams events, then gives one typed value.

An async generator cannot return a value, so a stage yields its value last; ``Staged``
passes the events on and keeps the value, and as a context manager it closes the stage
when its reader leaves early (an exception, or the reader itself closed at a ``yield``),
so no caller writes an abandon guard::

    async with Staged(ask(...), Answer, Stopped) as asked:
        async for event in asked:
            yield event
    answer = asked.value

A stage left in the middle is closed then and there (a provider's connection hung up on,
a tool's handler cancelled), not when a finalizer finds it. A stage that ran to its end
needs nothing more.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from types import TracebackType
from typing import Any, Generic, TypeVar

from tether import events as ev

T = TypeVar("T")

_UNSET: Any = object()


class Staged(Generic[T]):
    """A stage's events (iterate it), then its value (``value``: the last item the stage
    yielded whose type is one of ``kinds``)."""

    __slots__ = ("_events", "_items", "_kinds", "_value")

    def __class_getitem__(cls, item: object) -> Any:
        # ``Staged[T](...)`` names the value's type for type checkers only: at run time it
        # is the class itself, not a typing alias whose call (several per turn, on the
        # per-turn path) tries to stamp the instance with ``__orig_class__`` and fails on
        # the slots.
        return cls

    def __init__(self, items: AsyncGenerator[Any, None], *kinds: type) -> None:
        self._items = items
        self._kinds = kinds
        self._value: T = _UNSET
        self._events: AsyncGenerator[ev.Event, None] | None = None

    async def __aenter__(self) -> Staged[T]:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        if kind is not None:  # left early: the stage is closed now
            if self._events is not None:
                await self._events.aclose()
            await self._items.aclose()

    def __aiter__(self) -> AsyncIterator[ev.Event]:
        # One generator passes the events on: a resumed frame per event, not a new
        # coroutine (every streamed delta crosses a stage per floor of the turn).
        self._events = self._passed()
        return self._events

    async def _passed(self) -> AsyncGenerator[ev.Event, None]:
        # Read to the stage's own end (its value is its last item): what it does after its
        # value (a ``finally``) runs before the reader goes on.
        kinds = self._kinds
        item: Any
        async for item in self._items:
            valued = isinstance(item, kinds)  # (a flag: the item stays typed Any)
            if valued:
                self._value = item
            else:
                yield item

    @property
    def value(self) -> T:
        assert self._value is not _UNSET, "every stage ends in its value"
        return self._value
