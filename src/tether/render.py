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
from rich.markup import escape

from tether import events as ev


def _short(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
        if isinstance(event, ev.TextDelta):
            if self.show_text and not event.path:
                self.out.write(event.text)
                self.out.flush()
                self._text_open = self._streamed = True
            return
        if isinstance(event, ev.TurnStarted) and not event.path:
            self._streamed = False
        if isinstance(event, ev.ModelResponded) and not event.path and not self._streamed \
                and self.show_text and event.message.text:
            # A server that answered a streamed request with one JSON body sent no deltas.
            self.out.write(event.message.text)
            self.out.flush()
            self._text_open = True
        if isinstance(event, ev.ModelResponded | ev.UsageUpdated | ev.TurnStarted
                      | ev.ReasoningDelta | ev.RunStarted):
            if isinstance(event, ev.ModelResponded) and event.path and event.message.text:
                self.err.print(f"{pad}[dim]│ {escape(_short(event.message.text))}[/]")
            return
        self._end_text()
        if isinstance(event, ev.ToolStarted):
            self.err.print(f"{pad}[cyan]→ {escape(event.display_name)}[/] "
                           f"[dim]{escape(_short(event.arguments))}[/]")
            if not event.path and self.err.is_terminal:
                self._stop_status()
                self._status = self.err.status(f"running {escape(event.display_name)}…")
                self._status.start()
        elif isinstance(event, ev.ToolFinished):
            self._stop_status()
            style = {"ok": "green", "error": "red"}.get(event.status, "yellow")
            mark = "✓" if event.status == "ok" else "✗"
            self.err.print(f"{pad}[{style}]{mark} {escape(event.tool)}[/] "
                           f"[dim]{escape(_short(event.result.content, 160))}[/]")
        elif isinstance(event, ev.TrifectaWaived):
            self.err.print(f"{pad}[yellow]trifecta waived[/] {escape(event.tool)} "
                           f"[dim](security.trifecta = allow)[/]")
        elif isinstance(event, ev.TrifectaBlocked):
            self.err.print(f"{pad}[bold red]⛔ trifecta[/] {escape(event.tool)}: "
                           f"{escape(event.reason)}")
        elif isinstance(event, ev.ApprovalDecided):
            if event.by != "approver" or not event.allowed:
                word = "allowed" if event.allowed else "refused"
                why = f": {escape(event.reason)}" if event.reason else ""
                self.err.print(f"{pad}[yellow]approval {word}[/] {escape(event.tool)} "
                               f"[dim]({event.by}{why})[/]")
        elif isinstance(event, ev.SubagentStarted):
            self.err.print(f"{pad}[magenta]⇢ sub-agent {escape(event.profile)}[/] "
                           f"[dim]{escape(_short(event.task))}[/]")
        elif isinstance(event, ev.SubagentFinished):
            trust = "[green]trusted[/]" if event.trusted else "[yellow]untrusted[/]"
            self.err.print(f"{pad}[magenta]⇠ {escape(event.profile)}[/] {trust} "
                           f"[dim]({escape(event.reason)})[/]")
        elif isinstance(event, ev.ProviderRetry):
            self.err.print(f"{pad}[yellow]retrying in {event.wait_secs:.1f}s[/] "
                           f"[dim]({escape(event.error)})[/]")
        elif isinstance(event, ev.Notice):
            style = {"info": "dim", "warning": "yellow", "error": "red"}[event.level]
            self.err.print(f"{pad}[{style}]{escape(event.message)}[/]")
        elif isinstance(event, ev.RunPaused):
            self.err.print(f"[yellow]paused: waiting for decisions on "
                           f"{', '.join(event.pending_call_ids)}[/]")
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
        self.err.print(f"[dim]{line}[/]")
        if r.error is not None:
            self.err.print(f"[red]error:[/] {escape(str(r.error))}")
