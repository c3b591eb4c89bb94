"""Noticing a model that repeats itself within one run.

A small model that meets a failure often makes the very same call again, and again: the
same tool with the same arguments, refused or failing the same way each time, until
``max_turns``. ``Repeats`` counts, for one run, how often each call failed (a call is its
tool's name and its arguments as canonical JSON, so key order and spacing do not make two
calls different). The ``limit``-th failure of a call is its result with a plain note for
the model: it has failed that often, do not make it again. A call that has failed ``limit``
times and is made once more is not run: the run ends (``StopCause.REPEATED_FAILURE``).

Every way a call can fail counts (``FAILED``): the tool's error, arguments that do not fit,
an unknown tool, and the gate's refusals (a person's or the policy's). Each of these comes
back the same way when the same call is made again; a denied call repeated would ask the
person the same question again.

A successful call (written the same way: its arguments' text, which is how a model repeats
a call) that returns the same result ``limit`` times in a row is noticed too: its result
says that calling it again will most likely return the same. That run goes on (a call may
rightly be repeated, polling something until it changes); ``max_turns`` bounds it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from tether.events import ToolStatus
from tether.messages import ToolCall

FAILED: frozenset[str] = frozenset({"error", "invalid_args", "unknown_tool", "denied",
                                    "blocked"})


def call_key(call: ToolCall) -> bytes:
    """What makes two calls the same call: the tool's name and the arguments as canonical
    JSON (sorted keys, no spacing); arguments that are not JSON, as written. A digest, so a
    run keeps 16 bytes per distinct call, whatever its arguments hold."""
    try:
        arguments = json.dumps(call.parsed_arguments(), sort_keys=True, ensure_ascii=False,
                               separators=(",", ":"))
    except ValueError:
        arguments = call.arguments.strip()
    data = f"{call.name}\0{arguments}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).digest()


class Repeats:
    """One run's count of failed calls, and of successful calls returning the same result.
    ``limit`` None notices nothing."""

    __slots__ = ("_failures", "_results", "limit")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._failures: dict[bytes, int] = {}
        self._results: dict[int, tuple[int, int]] = {}

    def given_up(self, calls: Iterable[ToolCall]) -> tuple[ToolCall, int] | None:
        """The first of ``calls`` that already failed ``limit`` times (the model was told),
        with how often: the run ends before it runs."""
        if self.limit is None or not self._failures:
            return None
        for call in calls:
            failed = self._failures.get(call_key(call), 0)
            if failed >= self.limit:
                return call, failed
        return None

    def finished(self, call: ToolCall, status: ToolStatus, content: str) -> str:
        """Count what became of ``call``; its result's ``content``, with a note for the
        model added when the call has now failed, or returned this same result, ``limit``
        times (or more)."""
        if self.limit is None:
            return content
        if status in FAILED:
            self._results.pop(hash((call.name, call.arguments)), None)  # no longer in a row
            key = call_key(call)
            failed = self._failures[key] = self._failures.get(key, 0) + 1
            if failed < self.limit:
                return content
            return (f"{content}\n\n[tether: this exact call ({_named(call)} with these "
                    f"arguments) has failed {failed} times in this run. Do not make it "
                    f"again: it will fail the same way, and making it once more ends the "
                    f"run. Change the arguments, use another tool, or answer with what you "
                    f"have.]")
        # Every successful call passes here, so it is known cheaply: by its arguments as
        # written (how a model repeats a call; no JSON is parsed), and its result by the
        # string's own hash (keyed per process, computed once per string).
        written = hash((call.name, call.arguments))
        digest = hash(content)
        last, times = self._results.get(written, (0, 0))
        times = times + 1 if times and last == digest else 1
        self._results[written] = (digest, times)
        if times < self.limit:
            return content
        return (f"{content}\n\n[tether: this exact call ({_named(call)} with these arguments) "
                f"has returned this same result {times} times in a row in this run; making "
                f"it again will most likely return it again. Use the result, or answer.]")


def _named(call: ToolCall) -> str:
    """The call's tool name as the note shows it (a model may have made it up: cut short)."""
    name = call.name if len(call.name) <= 64 else call.name[:64] + "..."
    return repr(name)
