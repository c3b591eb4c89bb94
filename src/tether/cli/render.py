"""Terminal rendering of a run's events with rich (used by `tether run` and `tether chat`).

The answer's text goes to stdout as it streams; tool activity, approvals and the usage line
go to stderr, so `tether run ... > answer.txt` keeps only the answer.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

from rich.console import Console

from tether import events as ev
from tether.display import literal, one_line, shown
from tether.tools import humanize_tool_name


def _short(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return one_line(text, limit)


def _named(display_name: str, tool: str) -> str:
    """A tool as the progress lines show it: its display title, and its machine name too
    when the title is not simply derived from it (a server's own title)."""
    return display_name if display_name == humanize_tool_name(tool) else \
        f"{display_name} ({tool})"


def context_line(event: ev.ContextFitted) -> str:
    """One line saying what a fitting sent: ``context: sent 14 of 62 messages (~1,430 of
    ~9,800 tokens, window 2,048): 48 left out, 3 tool results shortened``."""
    done = []
    if event.dropped:
        done.append(f"{event.dropped} left out" + (", summarized" if event.summarized else ""))
    if event.shortened:
        done.append(f"{event.shortened} tool result(s) shortened")
    why = {"overflow": " after the server refused the request",
           "continued": " (as before)"}.get(event.reason, "")
    line = (f"context: sent {event.messages_sent} of {event.messages_before} messages"
            f"{why} (~{event.tokens_after:,} of ~{event.tokens_before:,} tokens, window "
            f"{event.window:,}): {'; '.join(done) or 'nothing left out'}")
    return f"{line} · {event.note}" if event.note else line


class EventRenderer:
    """Feed it every event of a run; it prints as things happen."""

    def __init__(self, out: TextIO | None = None, err: Console | None = None,
                 show_text: bool = True) -> None:
        self.out = out or sys.stdout
        self.err = err or Console(stderr=True, highlight=False)
        self.show_text = show_text
        self._status: Any = None
        self._text_open = False
        self._streamed = False
        self._started = time.perf_counter()

    def _indent(self, event: ev.Event) -> str:
        return "  " * len(event.path)

    def _end_text(self) -> None:
        if self._text_open:
            self.out.write("\n")
            self.out.flush()
            self._text_open = False

    def _stop_status(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def __call__(self, event: ev.Event) -> None:
        pad = self._indent(event)
        err = self.err
        if isinstance(event, ev.TextDelta):
            if self.show_text and not event.path:
                # The answer itself, as text: escapes and hidden characters made visible.
                self.out.write(literal(event.text))
                self.out.flush()
                self._text_open = self._streamed = True
            return
        if isinstance(event, ev.TurnStarted) and not event.path:
            self._streamed = False
        if isinstance(event, ev.ModelResponded) and not event.path and not self._streamed \
                and self.show_text and event.message.text:
            # A server that answered a streamed request with one JSON body sent no deltas.
            self.out.write(literal(event.message.text))
            self.out.flush()
            self._text_open = True
        if isinstance(event, ev.ModelResponded | ev.UsageUpdated | ev.TurnStarted
                      | ev.ReasoningDelta | ev.RunStarted):
            if isinstance(event, ev.ModelResponded) and event.path and event.message.text:
                err.print(shown(pad, (f"│ {_short(event.message.text)}", "dim")))
            return
        self._end_text()
        if isinstance(event, ev.ToolStarted):
            name = _named(event.display_name, event.tool)
            err.print(shown(pad, (f"→ {name}", "cyan"), " ", (_short(event.arguments), "dim")))
            if not event.path and err.is_terminal:
                self._stop_status()
                self._status = err.status(shown(f"running {name}…"))
                self._status.start()
        elif isinstance(event, ev.ToolFinished):
            self._stop_status()
            style = {"ok": "green", "error": "red"}.get(event.status, "yellow")
            mark = "✓" if event.status == "ok" else "✗"
            err.print(shown(pad, (f"{mark} {event.tool}", style), " ",
                            (_short(event.result.content, 160), "dim")))
        elif isinstance(event, ev.TrifectaWaived):
            err.print(shown(pad, ("trifecta waived", "yellow"), f" {event.tool} ",
                            ("(security.trifecta = allow)", "dim")))
        elif isinstance(event, ev.TrifectaBlocked):
            err.print(shown(pad, ("⛔ trifecta", "bold red"), f" {event.tool}: {event.reason}"))
        elif isinstance(event, ev.ApprovalDecided):
            if event.by != "approver" or not event.allowed:
                word = "allowed" if event.allowed else "refused"
                why = f": {event.reason}" if event.reason else ""
                err.print(shown(pad, (f"approval {word}", "yellow"), f" {event.tool} ",
                                (f"({event.by}{why})", "dim")))
        elif isinstance(event, ev.SubagentStarted):
            err.print(shown(pad, (f"⇢ sub-agent {event.profile}", "magenta"), " ",
                            (_short(event.task), "dim")))
        elif isinstance(event, ev.SubagentFinished):
            trust = ("trusted", "green") if event.trusted else ("untrusted", "yellow")
            err.print(shown(pad, (f"⇠ {event.profile}", "magenta"), " ", trust, " ",
                            (f"({event.reason})", "dim")))
        elif isinstance(event, ev.ProviderRetry):
            err.print(shown(pad, (f"retrying in {event.wait_secs:.1f}s", "yellow"), " ",
                            (f"({event.error})", "dim")))
        elif isinstance(event, ev.Notice):
            style = {"info": "dim", "warning": "yellow", "error": "red"}[event.level]
            err.print(shown(pad, (event.message, style)))
        elif isinstance(event, ev.ContextFitted):
            err.print(shown(pad, (context_line(event), "yellow" if event.note else "dim")))
        elif isinstance(event, ev.RunPaused):
            err.print(shown((f"paused: waiting for decisions on "
                             f"{', '.join(event.pending_call_ids)}", "yellow")))
        elif isinstance(event, ev.RunFinished) and not event.path:
            self.finish(event)

    def finish(self, event: ev.RunFinished) -> None:
        self._stop_status()
        self._end_text()
        r = event.result
        elapsed = time.perf_counter() - self._started
        line = (f"tokens in {r.usage.input_tokens} · out {r.usage.output_tokens} · "
                f"turns {r.turns} · {len(r.tool_calls)} tool call(s) · {elapsed:.1f}s")
        if r.stop_cause != "completed":
            line += f" · stopped: {r.stop_cause}"
        if r.blocked_sends:
            line += f" · blocked sends: {r.blocked_sends}"
        if r.taint.private or r.taint.untrusted:
            flags = [n for n, v in (("private", r.taint.private),
                                    ("untrusted", r.taint.untrusted)) if v]
            line += f" · taint: {'+'.join(flags)}"
        self.err.print(shown((line, "dim")))
        if r.error is not None:
            self.err.print(shown(("error:", "red"), f" {r.error}"))
