"""The approver that asks the person at the terminal, and what it shows them.

``ConsoleApprover`` prints a turn's approval panel (each call's ``approval_text``: every
piece of it literal, a file write as a diff against the file as it is now) and reads y, a
or n for each call. It is the command line's: the core knows only the ``Approver`` and
``TurnApprover`` protocols (``tether.approval``).
"""

from __future__ import annotations

import asyncio
import difflib
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from tether.approval import (
    ApprovalRequest,
    Decision,
    ElicitationAnswer,
    ElicitationRequest,
    TurnApprovalRequest,
)
from tether.builtins.workspace import WorkspaceError, confine
from tether.cli.elicit import ask_form, elicitation_text, url_text
from tether.display import inline, json_text, literal, one_line, shown


class ConsoleApprover:
    """Asks the person at the terminal: y (once), a (always, this session), n (deny). A
    denial may carry the person's reason on the same line (``n not that file``), which the
    model is told. ``workspace`` lets a file write show what it changes: a diff against the
    file as it is now.

    A turn's calls come as one prompt (``approve_turn``): one panel shows every call, then
    each call is decided on its own line, in order; ``all`` allows the call and every one
    after it once, ``none`` denies them (a reason may follow, as after ``n``).

    At a terminal the answer is read in the event loop, not in a thread blocked on
    ``input()``, so the run's interrupt (the CLI's Ctrl-C) ends the prompt at once and
    nothing is left reading the terminal. Off a terminal (``tether chat`` with piped
    lines) it is the next line of standard input."""

    def __init__(self, console: Any = None, *, workspace: str | Path | None = None) -> None:
        self._console = console
        self.workspace = Path(workspace) if workspace is not None else None
        self._lock = asyncio.Lock()  # one prompt at a time when calls run concurrently

    async def approve(self, request: ApprovalRequest) -> Decision:
        return (await self.approve_turn(TurnApprovalRequest((request,))))[0]

    async def approve_turn(self, turn: TurnApprovalRequest) -> list[Decision]:
        async with self._lock:
            return await self._prompt(turn.requests)

    async def _prompt(self, requests: tuple[ApprovalRequest, ...]) -> list[Decision]:
        console: Console = self._console or Console(stderr=True)
        many = len(requests) > 1
        body = Text()
        for number, request in enumerate(requests, 1):
            if many:
                if number > 1:
                    body.append("\n\n")
                body.append(f"#{number} of {len(requests)}", style="bold yellow")
                body.append("\n")
            current = _current_text(self.workspace, request)
            body.append_text(approval_text(request, current=current))
        title = f"Approval needed: {len(requests)} calls" if many else "Approval needed"
        if console.is_terminal:
            console.print(Panel(body, title=title, border_style="yellow"))
        else:  # a log or a pipe: the same lines, none wrapped at a made-up width
            console.print(Text(f"{title}:", style="yellow"), soft_wrap=True)
            console.print(body, soft_wrap=True)
        decisions: list[Decision] = []
        for number, request in enumerate(requests, 1):
            left = len(requests) - number
            word, reason = await _choose(console, request, f"#{number} " if many else "",
                                         rest=left > 0)
            if word in ("all", "none"):
                decision = Decision.allow() if word == "all" else \
                    Decision.deny(_reason(reason) or "the user said no to every call")
                return decisions + [decision] * (left + 1)
            if word == "y":
                decisions.append(Decision.allow())
            elif word == "a":
                decisions.append(Decision.allow_for_session())
            else:
                decisions.append(Decision.deny(_reason(reason) or "the user said no"))
        return decisions

    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer:
        """An MCP server's request for input, asked field by field, at a terminal only:
        piped input was written before the request existed, so it cannot answer it (the
        request is declined). Ctrl-C (the run's interrupt) ends the prompt: cancelled."""
        if not _at_terminal():
            return ElicitationAnswer.decline("no terminal to ask a person at")
        async with self._lock:
            console: Console = self._console or Console(stderr=True)
            text = elicitation_text(request)
            console.print(Panel(text, title="Input requested", border_style="yellow"))
            if request.url is not None:  # unframed and unwrapped: copied whole
                console.print(url_text(request.url), soft_wrap=True)
            return await ask_form(request, lambda prompt: _answer(console, prompt),
                                  lambda line: console.print(line))


async def _choose(console: Any, request: ApprovalRequest, label: str,
                  rest: bool) -> tuple[str, str]:
    """One call's answer: the word (y, a, n; with ``rest``, all or none too) and what
    follows it (a denial's reason). An empty line is n."""
    choices = ["y", "a", "n"] if request.can_cache else ["y", "n"]
    question = ("Allow? y=once" + (", a=always this session" if request.can_cache else "")
                + ", n=deny (n REASON tells the model why)")
    if rest:
        choices += ["all", "none"]
        question += ", all=this and the rest once, none=deny this and the rest"
    if label:
        question = f"{label}{inline(request.display_name)}: {question}"
    while True:
        line = await _answer(console, Text(f"{question} [{'/'.join(choices)}] (n): "))
        word, _, reason = line.strip().partition(" ")
        word = word.lower() or "n"
        if word in choices:
            return word, reason
        console.print(Text("Please answer " + ", ".join(choices)))


async def _answer(console: Any, prompt: Any) -> str:
    """The line a person types after ``prompt``. At a terminal it is read when the terminal
    has a whole line (its own line editing: backspace, Ctrl-U), by a reader on the event
    loop that a cancellation removes; elsewhere (a pipe, a loop without readers) by
    ``console.input`` in a thread. The end of input raises ``EOFError``, as ``input()``."""
    loop = asyncio.get_running_loop()
    try:
        fd = sys.stdin.fileno()
        terminal = os.isatty(fd)
    except (AttributeError, OSError, ValueError):  # no standard input, or a stand-in
        terminal = False
    got: asyncio.Future[str] = loop.create_future()
    typed = bytearray()

    def readable() -> None:
        error: OSError | None = None
        try:
            data = os.read(fd, 4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:  # the terminal went away
            data, error = b"", e
        if got.done():
            return
        if not data:
            got.set_exception(EOFError(f"end of input{f' ({error})' if error else ''}"))
            return
        typed.extend(data)
        if b"\n" in typed:
            line = typed.split(b"\n", 1)[0].decode(sys.stdin.encoding or "utf-8", "replace")
            got.set_result(line)

    if terminal:
        try:
            loop.add_reader(fd, readable)
        except (NotImplementedError, RuntimeError, ValueError, OSError):
            terminal = False  # a loop without readers (Windows' proactor)
    if not terminal:
        line: str = await asyncio.to_thread(console.input, prompt)
        return line
    try:
        console.print(prompt, end="")
        console.file.flush()
        return await got
    finally:
        loop.remove_reader(fd)


def _at_terminal() -> bool:
    try:
        return os.isatty(sys.stdin.fileno())
    except (AttributeError, OSError, ValueError):
        return False


def _reason(text: str) -> str:
    """A person's reason as the model reads it: one line, hidden characters made visible."""
    return one_line(text, 500)


# A file bigger than this is not read to show a diff (its new content is still shown whole).
_DIFF_LIMIT = 1_000_000


def _current_text(workspace: Path | None, request: ApprovalRequest) -> str | None:
    """The text of the file a ``write_file`` call would replace, for the diff: only a
    regular UTF-8 file inside the workspace, not too big; None otherwise (a new file)."""
    arguments = request.arguments
    if workspace is None or request.tool != "write_file" or not isinstance(arguments, dict):
        return None
    path, content = arguments.get("path"), arguments.get("content")
    if not isinstance(path, str) or not isinstance(content, str):
        return None
    try:
        target = confine(workspace, path).path
        if not target.is_file() or target.stat().st_size > _DIFF_LIMIT:
            return None
        return target.read_bytes().decode("utf-8")
    except (WorkspaceError, OSError, UnicodeDecodeError):
        return None


def approval_text(request: ApprovalRequest, *, current: str | None = None) -> Text:
    """What a person is shown before they decide (a rich ``Text``), every piece literal: the
    display title with the machine name beside it, and the exact arguments that will run,
    each in full. A text the tool declares as content is shown as its lines, each behind a
    gutter (``│ ``; ``- `` and ``+ `` in a diff): an edit (``old_text`` -> ``new_text``) as
    the lines it removes and adds, a file write over an existing file (``current``, its text
    now) as a diff against it. Every other value, key, name and the explanation is on one
    line, newlines and hidden characters made visible: no line a model or a server wrote
    can stand outside a gutter and pass for one of tether's. Nothing is shortened."""
    # Every name, key and sentence here is on one line (``inline``): a title, a key or a
    # call id can hold a newline, and must not pose as a line of its own.
    body = Text()
    body.append_text(shown((inline(request.display_name), "bold"), " ",
                           (f"({inline(request.tool)})", "dim")))
    flags = request.capabilities.flags()
    body.append("\n")
    body.append_text(shown(("can: ", "dim"), ", ".join(flags) or "nothing declared"))
    arguments = request.arguments
    body.append("\n")
    if not isinstance(arguments, dict):
        body.append_text(shown(("arguments: ", "dim"), json_text(arguments)))
        arguments = {}
    elif not arguments:
        body.append("(no arguments)", style="dim")
    content = set(request.content_params)
    edit = {"old_text", "new_text"} <= content and isinstance(arguments.get("old_text"), str) \
        and isinstance(arguments.get("new_text"), str)
    for key, value in arguments.items():
        if edit and key == "new_text":
            continue
        if edit and key == "old_text":
            body.append_text(shown(("change (- removed, + added):", "dim")))
            body.append("\n")
            _diff(body, arguments["old_text"], arguments["new_text"])
            continue
        if key not in content or not isinstance(value, str):
            # JSON on one line: a newline in a string is written \n, as is one in a key.
            body.append_text(shown((f"{inline(key)}: ", "dim"), json_text(value)))
            body.append("\n")
            continue
        if key == "content" and current is not None:
            if value == current:
                body.append_text(shown((f"{inline(key)}: the same as the file's text now "
                                        f"({len(value)} characters)", "dim")))
                body.append("\n")
                continue
            body.append_text(shown((f"{inline(key)}: replaces the file; against its text now "
                                    f"(- removed, + added):", "dim")))
            body.append("\n")
            _diff(body, current, value)
            continue
        if "\n" in value or len(value) > 60:
            body.append_text(shown((f"{inline(key)}:", "dim"),
                                   (f" ({len(value)} characters)", "dim")))
            body.append("\n")
            _lines(body, value, "│ ", "")
            continue
        body.append_text(shown((f"{inline(key)}: ", "dim"), json_text(value)))
        body.append("\n")
    body.append("\n")
    body.append_text(shown((inline(request.explanation), "yellow")))
    return body


def _lines(body: Text, text: str, gutter: str, style: str, *, marker: bool = True) -> None:
    lines = text.split("\n")
    ends_with_newline = marker and len(lines) > 1 and lines[-1] == ""
    if ends_with_newline:
        lines.pop()
    for line in lines:
        body.append(gutter, style=style or "dim")
        body.append(literal(line), style=style)
        body.append("\n")
    if marker and not ends_with_newline and len(lines) > 1:
        body.append("  (no newline at the end)\n", style="dim")


def _diff(body: Text, old: str, new: str) -> None:
    """``old`` -> ``new`` line by line: every removed and added line, and the unchanged lines
    between them, each in full."""
    before, after = old.split("\n"), new.split("\n")
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            _lines(body, "\n".join(before[i1:i2]), "│ ", "", marker=False)
            continue
        if i2 > i1:
            _lines(body, "\n".join(before[i1:i2]), "- ", "red", marker=False)
        if j2 > j1:
            _lines(body, "\n".join(after[j1:j2]), "+ ", "green", marker=False)
