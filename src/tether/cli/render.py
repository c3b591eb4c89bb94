"""Terminal rendering of a run's events with rich (used by `tether run` and `tether chat`).

The answer's text goes to stdout as it streams; tool activity, approvals and the usage line
go to stderr, so `tether run ... > answer.txt` keeps only the answer. In a terminal a
spinner shows the model is working while it is silent, and the answer is shown as Markdown
(updated as it streams, then printed whole); piped, the answer is its plain text and no
line is wrapped.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, ClassVar, TextIO

from rich.console import Console

from tether import events as ev
from tether.display import inline, literal, one_line, shown
from tether.tools.spec import humanize_tool_name

# The live answer is drawn again at most this often: each drawing parses the whole answer as
# Markdown, so drawing it on every delta of a long answer from a fast model costs quadratic
# CPU (seconds of it for a few thousand tokens).
REDRAW_SECS = 1 / 15


PROGRESS_EVERY_SECS = 1.0  # a call's progress lines, at most this often (the last: always)


def _short(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return one_line(text, limit)


def _named(display_name: str, tool: str) -> str:
    """A tool as the progress lines show it: its display title, and its machine name too
    when the title is not simply derived from it (a server's own title)."""
    if display_name == humanize_tool_name(tool):
        return inline(display_name)
    return f"{inline(display_name)} ({inline(tool)})"


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


def stderr_console() -> Console:
    """The console for progress and messages: never wraps lines when stderr is not a
    terminal (a log file, a pipe), so a line stays one line whatever its length."""
    console = Console(stderr=True, highlight=False)
    if not console.is_terminal:
        console.soft_wrap = True
    return console


def stdout_console() -> Console:
    """``stderr_console`` for standard output (``tether doctor``, ``sessions show``)."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console.soft_wrap = True
    return console


def print_table(table: Any, console: Console | None = None) -> None:
    """A rich ``Table`` on ``console`` (standard output by default): fitted to a terminal's
    width; piped or in a file, at its own full width whatever COLUMNS says, so no cell is
    wrapped or cut and each row stays one line (``tether tools | grep NAME``)."""
    from rich.measure import Measurement

    console = console or stdout_console()
    if console.is_terminal:
        console.print(table)
        return
    wide = Measurement.get(console, console.options.update_width(_UNBOUNDED), table).maximum
    console.width = max(console.width, wide)
    console.print(table, width=console.width)


_UNBOUNDED = 1_000_000  # the width a table is measured in when nothing bounds it


def excerpt(text: object, limit: int, stream: TextIO | None = None) -> str:
    """``text`` on one line, shown literally: cut to ``limit`` characters at a terminal,
    whole when ``stream`` (standard output by default) is a pipe or a file, where a line
    is for grep and scripts to read in full."""
    return one_line(text, limit if is_terminal(stream or sys.stdout) else None)


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def markdown(text: str) -> Any:
    """Model text as Markdown for the terminal, every character of it still shown: control
    and hidden characters are made visible first (``literal``), and the Markdown rules that
    would hide or produce text are off: HTML (a comment would vanish), images (their URL
    would), entities (``&#27;`` would become an escape). Links show their target."""
    from markdown_it import MarkdownIt
    from rich.markdown import Markdown

    shown_text = literal(text)
    md = Markdown(shown_text, hyperlinks=False)
    md.parsed = MarkdownIt().enable("strikethrough").enable("table").disable(
        ["html_block", "html_inline", "image", "entity"]).parse(shown_text)
    return md


class _Tail:
    """The last lines of a renderable that fit the terminal: a live view of a long answer
    shows where it grows (the whole answer is printed when it is done)."""

    def __init__(self, renderable: Any) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: Any) -> Any:
        from rich.segment import Segment

        lines = console.render_lines(self.renderable, options, pad=False)
        for line in lines[-max(1, console.size.height - 2):]:
            yield from line
            yield Segment.line()


class EventRenderer:
    """Feed it every event of a run; it prints as things happen.

    ``markdown`` (default: stdout is a terminal) renders the answer as Markdown;
    ``show_error`` prints a failed run's error with the usage line (a command that prints
    the error itself, with advice, turns it off)."""

    def __init__(self, out: TextIO | None = None, err: Console | None = None,
                 show_text: bool = True, *, markdown: bool | None = None,
                 show_error: bool = True) -> None:
        self.out = out or sys.stdout
        self.err = err or stderr_console()
        self.show_text = show_text
        self.markdown = is_terminal(self.out) if markdown is None else markdown
        self.show_error = show_error
        self._status: Any = None
        self._live: Any = None
        self._drawn_at = 0.0  # when the live answer was last drawn (time.monotonic)
        self._text = ""
        self._text_open = False
        self._streamed = False
        self._arguments: dict[str, str] = {}  # call id -> the arguments the model sent
        self._progressed: dict[str, float] = {}  # call id -> when its progress was shown
        self._started = time.perf_counter()
        self._answered_by: str | None = None  # the fallback provider the run went on with

    def _indent(self, event: ev.Event) -> str:
        return "  " * len(event.path)

    # --- the answer's text ------------------------------------------------------------------

    def _write(self, text: str) -> None:
        self._stop_status()
        self._text += text
        self._text_open = self._streamed = True
        if not self.markdown:
            self.out.write(literal(text))
            self.out.flush()
            return
        now = time.monotonic()
        if self._live is None:
            from rich.live import Live

            self._live = Live(console=Console(file=self.out, highlight=False),
                              transient=True, auto_refresh=False, redirect_stdout=False,
                              redirect_stderr=False)
            self._live.start()
        elif now - self._drawn_at < REDRAW_SECS:
            return  # drawn a moment ago: the next delta, or the end of the text, shows this
        self._drawn_at = now
        self._live.update(_Tail(markdown(self._text)), refresh=True)

    def _end_text(self) -> None:
        if not self._text_open:
            return
        self._text_open = False
        text, self._text = self._text, ""
        if self._live is not None:
            live, self._live = self._live, None
            live.stop()
            live.console.print(markdown(text))
            return
        self.out.write("\n")
        self.out.flush()

    def settle(self) -> None:
        """Before a line of tether's own breaks into a live answer (Ctrl-C's "interrupting"):
        the answer so far printed for good and the spinner stopped, so the line goes below
        it and the answer is not drawn again under it. Text that still comes goes after."""
        self._stop_status()
        if self._live is not None:
            live, self._live = self._live, None
            live.stop()
            live.console.print(markdown(self._text))
            self._text, self._text_open = "", False
        elif self._text_open and not self._text.endswith("\n"):
            self.out.write("\n")  # the line the interruption goes on is a line of its own
            self.out.flush()
            self._text, self._text_open = "", False

    # --- the spinner --------------------------------------------------------------------------

    def _spin(self, what: str) -> None:
        if not self.err.is_terminal:
            return
        if self._status is None:
            self._status = self.err.status(shown(what))
            self._status.start()
        else:
            self._status.update(shown(what))

    def _stop_status(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    # --- events -------------------------------------------------------------------------------

    def __call__(self, event: ev.Event) -> None:
        # One dict lookup per event (this runs on every streamed delta). The events in
        # ``_ALONG`` go along with the answer's text; any other ends the text and stops the
        # spinner first, then prints its line (if its kind has one, in ``_LINES``).
        along = self._ALONG.get(type(event))
        if along is not None:
            along(self, event)
            return
        self._break_flow()
        line = self._LINES.get(type(event))
        if line is not None:
            line(self, event)

    def _break_flow(self) -> None:
        """The answer's text ended and the spinner stopped: a line of tether's own follows."""
        self._end_text()
        self._stop_status()

    # Events that go along with the answer's text (no line break before them).

    def _on_text(self, event: ev.TextDelta) -> None:
        if self.show_text and not event.path and event.text:
            # The answer itself, as text: escapes and hidden characters made visible.
            self._write(event.text)

    def _on_turn(self, event: ev.TurnStarted) -> None:
        if event.path:  # a sub-agent's turn: as any other event, the text ends
            self._break_flow()
            return
        self._streamed = False
        self._spin("thinking…")

    def _on_nothing(self, event: ev.Event) -> None:
        """Reasoning, usage so far, the run's start: nothing shown."""

    def _on_retry(self, event: ev.ProviderRetry) -> None:
        if event.fallback is not None:
            self._falling_back(event, event.fallback)
        else:
            self._resending(event)

    def _falling_back(self, event: ev.ProviderRetry, fallback: str) -> None:
        # Another provider answers: a line of its own, and the usage line names it.
        if not event.path:
            self._answered_by = fallback
        self.err.print(shown(self._indent(event),
                             (f"falling back to provider {inline(fallback)}: ", "yellow"),
                             (one_line(event.error, 200), "dim")))

    def _resending(self, event: ev.ProviderRetry) -> None:
        # Always a line of its own, at a terminal too (a spinner's text goes away): the
        # request is sent again, and what the failed attempt spent is in the usage
        # line. It says why (a status, a parse error), piped or at a terminal; the
        # run's error, if it fails, once.
        again = (f"retrying in {event.wait_secs:.1f}s" if event.wait_secs >= 0.05
                 else "resending")
        self.err.print(shown(self._indent(event), (f"{again} (attempt {event.attempt}): "
                                                   f"{event.reason or 'the request failed'}",
                                                   "yellow")))
        self._spin(f"{again} (attempt {event.attempt})")

    def _on_call_requested(self, event: ev.ToolCallRequested) -> None:
        self._arguments[event.call.id] = event.call.arguments

    def _on_responded(self, event: ev.ModelResponded) -> None:
        top = not event.path
        if top and not self._streamed and self.show_text and event.message.text:
            # A server that answered a streamed request with one JSON body sent no deltas.
            self._write(event.message.text)
        if not top and event.message.text:
            self.err.print(shown(self._indent(event),
                                 (f"│ {_short(event.message.text)}", "dim")))

    # Events shown by a line of their own (after the answer's text and the spinner end).

    def _on_tool_started(self, event: ev.ToolStarted) -> None:
        name = _named(event.display_name, event.tool)
        self.err.print(shown(self._indent(event), (f"→ {name}", "cyan"), " ",
                             (_short(event.arguments), "dim")))
        if not event.path:
            self._spin(f"running {name}…")

    def _on_tool_finished(self, event: ev.ToolFinished) -> None:
        self._progressed.pop(event.call_id, None)
        self._tool_finished(event, self._indent(event))

    def _on_progress(self, event: ev.ToolProgress) -> None:
        self._progress(event, self._indent(event))

    def _on_waived(self, event: ev.TrifectaWaived) -> None:
        self.err.print(shown(self._indent(event), ("trifecta waived", "yellow"),
                             f" {inline(event.tool)} ",
                             ("([security] trifecta = \"allow\")", "dim")))

    def _on_blocked(self, event: ev.TrifectaBlocked) -> None:
        # Named for the taint the run has: a call refused for untrusted text alone is
        # no "trifecta" (that needs private data too).
        f = event.forecast
        taint = "+".join(n for n, v in (("private", f.private), ("untrusted", f.untrusted))
                         if v) or "clean"
        word = "⛔ trifecta" if f.private and f.untrusted else "⛔ blocked"
        self.err.print(shown(self._indent(event), (word, "bold red"), f" {inline(event.tool)} ",
                             (f"(taint: {taint})", "dim"), f": {inline(event.reason)}"))

    def _on_approval(self, event: ev.ApprovalDecided) -> None:
        if event.by == "approver" and event.allowed:
            return  # the call's own lines (→, then ✓ or ✗) follow an approver's yes
        word = "allowed" if event.allowed else "refused"
        why = f": {inline(event.reason)}" if event.reason else ""
        self.err.print(shown(self._indent(event), (f"approval {word}", "yellow"),
                             f" {inline(event.tool)} ", (f"({event.by}{why})", "dim")))

    def _on_subagent_started(self, event: ev.SubagentStarted) -> None:
        self.err.print(shown(self._indent(event),
                             (f"⇢ sub-agent {inline(event.profile)}", "magenta"), " ",
                             (_short(event.task), "dim")))

    def _on_subagent_finished(self, event: ev.SubagentFinished) -> None:
        trust = ("trusted", "green") if event.trusted else ("untrusted", "yellow")
        self.err.print(shown(self._indent(event), (f"⇠ {inline(event.profile)}", "magenta"),
                             " ", trust, " ", (f"({inline(event.reason)})", "dim")))

    def _on_notice(self, event: ev.Notice) -> None:
        style = {"info": "dim", "warning": "yellow", "error": "red"}[event.level]
        self.err.print(shown(self._indent(event), (inline(event.message), style)))

    def _on_context(self, event: ev.ContextFitted) -> None:
        self.err.print(shown(self._indent(event),
                             (context_line(event), "yellow" if event.note else "dim")))

    def _on_hook(self, event: ev.HookDecided) -> None:
        why = f": {inline(event.reason)}" if event.reason else ""
        self.err.print(shown(self._indent(event),
                             (f"hook {inline(event.hook)} {event.verdict}", "yellow"),
                             why, (f" ({event.point})", "dim")))

    def _on_revealed(self, event: ev.ToolsRevealed) -> None:
        self.err.print(shown(self._indent(event), ("found tools", "cyan"), " ",
                             ", ".join(inline(n) for n in event.names), " ",
                             (f"(search: {_short(event.query)})", "dim")))

    def _on_paused(self, event: ev.RunPaused) -> None:
        self.err.print(shown((f"paused: waiting for decisions on "
                              f"{', '.join(inline(i) for i in event.pending_call_ids)}",
                              "yellow")))

    def _on_finished(self, event: ev.RunFinished) -> None:
        if not event.path:  # the run's own end: the usage line
            self.finish(event)

    # Each kind of event to its method (events are final dataclasses: the exact type is
    # the kind). A kind in neither table is shown by no line.
    _ALONG: ClassVar[dict[type, Callable[[EventRenderer, Any], None]]] = {
        ev.TextDelta: _on_text,
        ev.TurnStarted: _on_turn,
        ev.ReasoningDelta: _on_nothing,
        ev.UsageUpdated: _on_nothing,
        ev.RunStarted: _on_nothing,
        ev.ProviderRetry: _on_retry,
        ev.ToolCallRequested: _on_call_requested,
        ev.ModelResponded: _on_responded,
    }
    _LINES: ClassVar[dict[type, Callable[[EventRenderer, Any], None]]] = {
        ev.ToolStarted: _on_tool_started,
        ev.ToolFinished: _on_tool_finished,
        ev.ToolProgress: _on_progress,
        ev.TrifectaWaived: _on_waived,
        ev.TrifectaBlocked: _on_blocked,
        ev.ApprovalDecided: _on_approval,
        ev.SubagentStarted: _on_subagent_started,
        ev.SubagentFinished: _on_subagent_finished,
        ev.Notice: _on_notice,
        ev.ContextFitted: _on_context,
        ev.HookDecided: _on_hook,
        ev.ToolsRevealed: _on_revealed,
        ev.RunPaused: _on_paused,
        ev.RunFinished: _on_finished,
    }

    def _progress(self, event: ev.ToolProgress, pad: str) -> None:
        """A line per call at most each ``PROGRESS_EVERY_SECS`` (and the last): the
        server's numbers and message, its words shown literally on one line."""
        now = time.monotonic()
        last = self._progressed.get(event.call_id)
        done = event.total is not None and event.progress >= event.total
        if last is not None and now - last < PROGRESS_EVERY_SECS and not done:
            return
        self._progressed[event.call_id] = now
        of = f"/{event.total:g}" if event.total is not None else ""
        said = f" {_short(event.message)}" if event.message else ""
        self.err.print(shown(pad, (f"⋯ {inline(event.tool)} {event.progress:g}{of}", "dim"),
                             (said, "dim")))

    def _tool_finished(self, event: ev.ToolFinished, pad: str) -> None:
        from tether.trust import untrusted_content

        err = self.err
        result = event.result
        if event.status in ("invalid_args", "unknown_tool"):
            # The call never ran: what the model sent, then why it was refused.
            sent = self._arguments.get(event.call_id, "")
            err.print(shown(pad, (f"✗ {inline(event.tool)}", "red"), " ",
                            (one_line(sent, 300) or "(no arguments)", "dim")))
            err.print(shown(pad, "  ", (_short(result.content, 300), "dim")))
            return
        style = {"ok": "green", "error": "red"}.get(event.status, "yellow")
        mark = "✓" if event.status == "ok" else "✗"
        content = result.content
        flag: tuple[tuple[str, str], ...] = ()
        if result.trust == "untrusted":
            # A person reads the data; the notice wrapped around it is written for the model.
            content = untrusted_content(content) or content
            flag = ((" (untrusted)", "yellow"),)
        err.print(shown(pad, (f"{mark} {inline(event.tool)}", style), *flag, " ",
                        (_short(content, 160), "dim")))

    def finish(self, event: ev.RunFinished) -> None:
        self._stop_status()
        self._end_text()
        r = event.result
        elapsed = time.perf_counter() - self._started
        line = (f"{tokens(r.usage)} · turns {r.turns} · {len(r.tool_calls)} tool call(s) · "
                f"{elapsed:.1f}s")
        if self._answered_by is not None:
            line += f" · answered by fallback {inline(self._answered_by)}"
        if r.stop_cause != "completed":
            line += f" · stopped: {r.stop_cause}"
        if r.blocked_sends:
            line += f" · blocked sends: {r.blocked_sends}"
        if r.taint.private or r.taint.untrusted:
            flags = [n for n, v in (("private", r.taint.private),
                                    ("untrusted", r.taint.untrusted)) if v]
            line += f" · taint: {'+'.join(flags)}"
        self.err.print(shown((line, "dim")))
        if r.error is not None and self.show_error:
            self.err.print(shown(("error:", "red"), f" {inline(r.error)}"))


def tokens(usage: Any) -> str:
    """The usage line's tokens: unknown when the server reported none, never a made-up 0."""
    if usage.input_tokens is None or usage.output_tokens is None:
        return "tokens unknown (the server reported no usage)"
    text = f"tokens in {usage.input_tokens} · out {usage.output_tokens}"
    if usage.unreported_requests:
        text += f" (+ {usage.unreported_requests} request(s) that reported none)"
    return text
