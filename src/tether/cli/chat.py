"""`tether chat`: talk to the agent turn by turn in the terminal.

Answers stream as they come; gated tools ask at the terminal (y once, a for the session,
n deny, n REASON to tell the model why). Every turn is stored in a session (created with
the first message, titled with it: a chat that says nothing stores nothing), so closing
the terminal loses nothing: ``tether chat --session ID`` picks it up with its taint.
Commands: ``/model``, ``/system``, ``/clear``, ``/taint``, ``/tools``, ``/session``,
``/help``, ``/exit``.

At a terminal the prompt has line editing and history (readline; the history is kept in
tether's cache folder); Ctrl-C at the prompt leaves, during a turn it stops the turn. A
message spans lines when a line ends with ``\\`` or between two lines of three double
quotes; a pasted block stays one message (bracketed paste).

With stdin piped, each line is a turn (or a command), and approval prompts read the next
line: ``printf 'delete notes.txt\\ny\\n/exit\\n' | tether chat``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console

    from tether.agent import Agent
    from tether.conversation import Conversation
    from tether.store.session import Session

COMMANDS = {
    "/attach": "/attach FILE gives the model a file with your next message (an image, a "
               "text file, a PDF's text; outside text, untrusted); /attach lists them",
    "/model": "the model; /model NAME switches it, /model PROVIDER:NAME the provider too",
    "/system": "the system prompt; /system TEXT sets it, /system - removes it",
    "/clear": "start a new conversation (a new session; the old one stays stored)",
    "/taint": "what the conversation has seen (private data? untrusted text?)",
    "/tools": "the tools, their capabilities and approval flags",
    "/session": "the session id, to resume later",
    "/prompt": "/prompt SERVER:NAME [KEY=VALUE ...] sends an MCP server's prompt (the "
               "server's text: untrusted unless the server is trusted)",
    "/help": "this list",
    "/exit": "leave (the session stays stored; /quit, Ctrl-C and end of input work too)",
}

MULTILINE_HELP = ("a message spans lines: end a line with \\ to go on, or put it between "
                  'two lines of """')
FENCE = '"""'


def add_cli(sub: Any) -> None:
    """Register ``tether chat``."""
    from tether.cli.common import add_run_flags

    p = sub.add_parser("chat", help="talk with the agent turn by turn (stored as a session)")
    p.add_argument("--session", metavar="ID",
                   help="continue this stored session (created with this id when new)")
    p.add_argument("-c", "--continue", dest="continue_last", action="store_true",
                   help="continue this workspace's most recent session")
    p.add_argument("--no-store", action="store_true",
                   help="keep the conversation in memory only")
    add_run_flags(p)
    p.set_defaults(handler=cmd_chat)


def cmd_chat(args: argparse.Namespace) -> int:
    from tether.cli.render import stderr_console
    err = stderr_console()
    state: dict[str, Any] = {}
    try:
        return asyncio.run(chat(args, sys.stdin, err, state))
    except KeyboardInterrupt:
        session = state.get("session")
        if session is not None:
            err.print(f"\n[dim]stopped; continue with: tether chat --session {session.id}[/]")
        return 130


class _Chat:
    """What a chat holds while it runs: the agent, the conversation, and its session once
    the first message made one."""

    def __init__(self, args: argparse.Namespace, agent: Agent, cfg: Any, store: Any,
                 session: Session | None, conversation: Conversation) -> None:
        self.args, self.agent, self.cfg, self.store = args, agent, cfg, store
        self.session, self.conversation = session, conversation
        # Files /attach named, given with the next message (tether.attachments.Attachment).
        self.attached: list[Any] = []


async def chat(args: argparse.Namespace, stdin: TextIO, err: Console,
               state: dict[str, Any] | None = None) -> int:
    """The chat loop over ``stdin``; ``state["session"]`` is set as soon as it exists."""
    from tether.cli.common import prepare_local
    from tether.errors import ConfigError

    if args.continue_last and args.no_store:
        raise ConfigError("--no-store keeps nothing, so there is no session to continue (-c); "
                          "drop one of them")
    if args.continue_last and args.session:
        raise ConfigError("--session ID and -c (the most recent session) both name the "
                          "session to continue; choose one")
    prepare_local(args)  # the agent is built, and so checked, before a server starts
    return await _chat(args, stdin, err, state if state is not None else {})


async def _chat(args: argparse.Namespace, stdin: TextIO, err: Console,
                state: dict[str, Any]) -> int:
    from tether.cli.common import local_serving, telemetry_export

    talk = _open(args, err, state)
    _greet(talk, err)
    reader = _Reader(stdin, stdin.isatty())
    try:
        async with local_serving(args):
            with telemetry_export(talk.cfg):
                async with talk.agent:
                    if talk.session is not None and talk.session.pending is not None:
                        err.print("[yellow]this session paused waiting for approval; "
                                  "deciding now[/]")
                        await _resume_paused(talk.agent, talk.session, err)
                    await _converse(reader, talk, err, state)
    finally:
        reader.close()
    if talk.session is not None:
        err.print(f"[dim]saved; continue with: tether chat --session {talk.session.id}[/]")
    elif talk.store is not None:
        err.print("[dim]nothing said: no session stored[/]")
    return 0


def _open(args: argparse.Namespace, err: Console, state: dict[str, Any]) -> _Chat:
    """The chat's store, agent and config, and the stored session it continues, if any."""
    from tether.cli.approver import ConsoleApprover
    from tether.cli.common import make_agent, workspace_of
    from tether.cli.sessions import open_session, store_for
    from tether.conversation import Conversation

    store = None if args.no_store else store_for(args.workspace)
    session_id = _session_id(args, store)
    # Chat always has a person to ask: at a terminal, or the next piped line.
    approver = ConsoleApprover(err)
    agent, cfg = make_agent(args, approver=approver)
    approver.workspace = Path(workspace_of(args, cfg))  # a write shows its diff
    session: Session | None = None
    if store is not None and session_id and _stored(store, session_id):
        session = open_session(args, cfg, session_id, store)
        state["session"] = session
    conversation = session.conversation() if session is not None else Conversation()
    talk = _Chat(args, agent, cfg, store, session, conversation)
    talk.args.session = session_id
    return talk


def _session_id(args: argparse.Namespace, store: Any) -> str | None:
    """The session to continue: ``--session ID``, or with ``-c`` the workspace's latest.
    Its provider is preferred (``args.session_id`` set) when there is one to store in."""
    from tether.cli.sessions import latest_session, prefer_session_provider

    session_id: str | None = args.session
    if store is not None and args.continue_last:
        from tether.config.layers import load_config

        session_id = latest_session(store, load_config(args.workspace).tools.workspace
                                    or args.workspace)
    if store is not None and session_id:
        # The exact id, as `tether run --session`: a new id names the session the first
        # message creates, so it cannot mean a session whose id it happens to begin.
        args.session_id = session_id
        prefer_session_provider(args, store)
    return session_id


def _greet(talk: _Chat, err: Console) -> None:
    """The first line: the model, where the chat is stored; and a continued chat's size."""
    session, conversation = talk.session, talk.conversation
    where = (f"session {session.id}" if session else
             "not stored" if talk.store is None else "stored from the first message")
    err.print(f"[bold]tether chat[/] [dim]· {_model_name(talk.agent)} · {where} · /help for "
              f"commands[/]")
    if conversation.messages:
        err.print(f"[dim]continuing: {len(conversation.messages)} messages, taint "
                  f"{_taint_words(conversation.taint)}[/]")


async def _converse(reader: _Reader, talk: _Chat, err: Console, state: dict[str, Any]) -> None:
    """Message after message, until the end of input or ``/exit``: a command is done at
    once; a message (or a server's prompt) is a turn, stored in the session the first one
    opens (titled with it)."""
    from tether.cli.sessions import open_session

    while True:
        message = await reader.message(err)
        if message is None:
            break
        if not message.strip():
            continue
        said: Any = message
        if message.split(" ", 1)[0].lower() == "/prompt" and "\n" not in message:
            said = await _server_prompt(message, talk, err)
            if said is None:
                continue
        elif message.startswith("/") and "\n" not in message:
            if not await _command(message.strip(), talk, err):
                break
            continue
        if talk.session is None and talk.store is not None:
            talk.session = open_session(talk.args, talk.cfg, talk.args.session, talk.store,
                                        title=_title(message))
            talk.conversation = talk.session.conversation()
            state["session"] = talk.session
        await _turn(talk.agent, said, talk.conversation, talk.session, err, talk)


def _stored(store: Any, session_id: str) -> bool:
    from tether.store.base import SessionNotFound

    try:
        store.load(session_id)
    except SessionNotFound:
        return False
    return True


def _title(message: str) -> str:
    """A chat's title: its first message, its runs of whitespace one space (data, stored as
    written; every surface that shows it makes hidden characters visible)."""
    title = " ".join(message.split())
    return title if len(title) <= 80 else title[:79] + "…"


def _model_name(agent: Agent) -> str:
    return str(getattr(agent.model, "model", "") or type(agent.model).__name__)


class _Reader:
    """The person's messages: lines from a terminal (readline: editing, history, bracketed
    paste) or from a pipe, joined into one message across ``\\`` line ends and blocks
    between two lines of three double quotes. Lines are read on a daemon thread, so MCP
    servers and other tasks keep running while the person thinks, and Ctrl-C at the prompt
    can leave at once."""

    def __init__(self, stdin: TextIO, interactive: bool) -> None:
        self.stdin = stdin
        self.interactive = interactive
        self._history: str | None = None
        self._terminal: Any = None
        if interactive:
            self._setup_terminal()

    def _setup_terminal(self) -> None:
        with contextlib.suppress(ImportError, OSError, ValueError):
            import termios

            # Restored when the chat ends: a Ctrl-C leaves readline mid-line.
            self._terminal = termios.tcgetattr(self.stdin.fileno())
        try:
            import readline
        except ImportError:  # no line editing on this Python: plain lines still work
            return
        from tether.paths import default_cache

        folder = os.environ.get("TETHER_CACHE_DIR") or str(default_cache(os.environ))
        self._history = os.path.join(folder, "chat_history")
        with contextlib.suppress(OSError):
            readline.read_history_file(self._history)
        readline.set_history_length(1000)
        # A pasted block arrives as one line of input: it stays one message.
        readline.parse_and_bind("set enable-bracketed-paste on")

    def close(self) -> None:
        if self._terminal is not None:
            with contextlib.suppress(ImportError, OSError, ValueError):
                import termios

                termios.tcsetattr(self.stdin.fileno(), termios.TCSADRAIN, self._terminal)
        if self._history is not None:
            import readline

            with contextlib.suppress(OSError):
                os.makedirs(os.path.dirname(self._history), mode=0o700, exist_ok=True)
                readline.write_history_file(self._history)
                os.chmod(self._history, 0o600)  # what a person typed: theirs alone

    async def _line(self, prompt: str) -> str | None:
        """One line without its newline; None at the end of input or on Ctrl-C."""
        loop = asyncio.get_running_loop()
        got: asyncio.Future[str | None] = loop.create_future()

        def give(value: str | None) -> None:
            if not got.done():
                got.set_result(value)

        def read() -> None:
            try:
                if self.interactive:
                    # The prompt goes where the person looks: stdout may be a file.
                    if not sys.stdout.isatty():
                        sys.stderr.write(prompt)
                        sys.stderr.flush()
                    line: str | None = input(prompt if sys.stdout.isatty() else "")
                else:
                    raw = self.stdin.readline()
                    line = raw.removesuffix("\n") if raw else None
            except (EOFError, OSError, ValueError):
                line = None
            except KeyboardInterrupt:
                line = None
            loop.call_soon_threadsafe(give, line)

        handled = False
        if self.interactive:
            # Ctrl-C at the prompt leaves: handled before the prompt shows, so no press can
            # fall between the two.
            try:
                loop.add_signal_handler(signal.SIGINT, give, None)
                handled = True
            except (NotImplementedError, RuntimeError):
                pass
        threading.Thread(target=read, name="tether-chat-input", daemon=True).start()
        try:
            return await got
        finally:
            if handled:
                loop.remove_signal_handler(signal.SIGINT)

    async def message(self, err: Console) -> str | None:
        """The next message (lines joined), or None to leave."""
        first = await self._line("you› ")
        if first is None:
            if self.interactive:
                err.print()
            return None
        if first.strip() == FENCE:
            lines: list[str] = []
            while (line := await self._line("   … ")) is not None and line.strip() != FENCE:
                lines.append(line)
            return "\n".join(lines)
        lines = [first]
        while lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1]
            line = await self._line("   … ")
            if line is None:
                break
            lines.append(line)
        return "\n".join(lines)


async def _command(line: str, talk: _Chat, err: Console) -> bool:
    """Run a /command; False means leave."""
    from tether.display import inline, shown

    agent, conversation, session = talk.agent, talk.conversation, talk.session
    word, _, rest = line.partition(" ")
    word, rest = word.lower(), rest.strip()
    if word in ("/exit", "/quit"):
        return False
    if word == "/taint":
        t = conversation.taint
        err.print(f"taint: [bold]{_taint_words(t)}[/]")
        err.print(f"  private data seen: {'yes' if t.private else 'no'}")
        err.print(f"  untrusted text seen: {'yes' if t.untrusted else 'no'}")
        if t.armed:
            err.print("  [red]both: tools that can send data out are blocked or asked "
                      "(trifecta)[/]")
    elif word == "/tools":
        for tool in agent.tools.values():
            flags = ", ".join(tool.capabilities.flags()) or "-"
            gate = " · needs approval" if tool.needs_approval else ""
            err.print(shown("  ", (inline(tool.name), "bold"), " ",
                            (f"{inline(tool.spec.display_name)} · {flags}{gate}", "dim")))
        if not agent.tools:
            err.print("  (no tools)")
    elif word == "/session":
        err.print(shown(f"session {session.id}" if session else
                        "not stored (--no-store)" if talk.store is None else
                        "not stored yet: the first message stores it"))
    elif word == "/attach":
        _attach(talk, rest, err)
    elif word == "/model":
        await _switch_model(talk, rest, err)
    elif word == "/system":
        _system(talk, rest, err)
    elif word == "/clear":
        from tether.conversation import Conversation

        if session is not None:
            err.print(shown((f"session {session.id} stays stored (tether chat --session "
                             f"{session.id}); ", "dim")))
        talk.session, talk.conversation = None, Conversation()
        talk.args.session = None
        err.print(shown(("a new conversation: nothing said yet", "dim")))
    elif word == "/help":
        for name, what in COMMANDS.items():
            err.print(shown(f"  {name:<9} {what}"))
        err.print(shown((f"  {MULTILINE_HELP}", "dim")))
    else:
        err.print(shown((f"unknown command {word}", "yellow"), "; /help lists them"))
    return True


def _attach(talk: _Chat, path: str, err: Console) -> None:
    """``/attach FILE``: read the file now (a mistake shows at once), give it with the next
    message; ``/attach`` alone lists what is waiting."""
    from tether.attachments import Attachment, safe_name
    from tether.display import inline, shown
    from tether.errors import TetherError

    if not path:
        names = ", ".join(safe_name(a.name) for a in talk.attached) or "nothing"
        err.print(shown((f"attached for the next message: {names}", "dim")))
        return
    try:
        attachment = Attachment.from_path(path)
        attachment.parts()  # a file that cannot be read as any kind fails here, not later
    except TetherError as e:
        err.print(shown(("error:", "red"), f" {inline(e)}"))
        return
    talk.attached.append(attachment)
    err.print(shown((f"attached {safe_name(attachment.name)} ({attachment.media_type}, "
                     f"{len(attachment.data)} bytes): it goes with your next message, as "
                     f"outside text", "dim")))


async def _switch_model(talk: _Chat, wanted: str, err: Console) -> None:
    """``/model``: show the model; ``/model NAME`` asks the same provider for another
    model, ``/model PROVIDER:NAME`` (a configured provider) switches the provider too."""
    from tether.config.build import build_provider
    from tether.display import inline, shown
    from tether.errors import ConfigError

    agent, cfg = talk.agent, talk.cfg
    current = getattr(talk.args, "provider", None)
    name, pcfg = cfg.provider_config(current)
    if not wanted:
        err.print(shown(f"model {_model_name(agent)} (provider {name}); configured "
                        f"providers: {', '.join(sorted(cfg.providers))}"))
        return
    prefix, sep, model = wanted.partition(":")
    if sep and model and prefix in cfg.providers:
        name, pcfg = cfg.provider_config(prefix)
    else:
        model = wanted
    try:
        provider = build_provider(name, pcfg.model_copy(update={"model": model}))
    except ConfigError as e:
        err.print(shown(("cannot switch: ", "red"), inline(e)))
        return
    old = agent.model
    agent.model = provider
    talk.args.provider = name
    if all(old is not p for p in agent.providers.values()):
        await old.aclose()  # one /model made; the configured ones close with the agent
    err.print(shown((f"now model {model} (provider {name})", "dim")))


def _system(talk: _Chat, text: str, err: Console) -> None:
    from tether.display import shown

    agent = talk.agent
    if not text:
        err.print(shown(f"system prompt: {agent.system_prompt}" if agent.system_prompt
                        else "no system prompt (/system TEXT sets one)"))
        return
    agent.system_prompt = None if text == "-" else text
    err.print(shown(("system prompt removed" if agent.system_prompt is None
                     else "system prompt set for the next turns", "dim")))


async def _server_prompt(line: str, talk: _Chat, err: Console) -> Any:
    """``/prompt SERVER:NAME [KEY=VALUE ...]``: the parts of the turn the server's prompt
    makes, or None (what went wrong is said)."""
    from tether.cli.mcp_lists import fetch_prompt
    from tether.display import inline, shown
    from tether.errors import TetherError
    from tether.mcp.prompts import parse_invocation

    try:
        parts = await fetch_prompt(talk.agent, parse_invocation(line.split(" ", 1)[1]
                                                                 if " " in line else ""),
                                   taint=talk.conversation.taint)
    except TetherError as e:
        err.print(shown(("error:", "red"), f" {inline(e)}"))
        return None
    return parts


async def _turn(agent: Agent, prompt: Any, conversation: Conversation, session: Session | None,
                err: Console, talk: _Chat) -> None:
    from tether.cli.common import graceful_interrupt, no_provider_help
    from tether.cli.render import EventRenderer
    from tether.display import inline, shown
    from tether.errors import ProviderConnectionError
    from tether.result import run_finished

    renderer = EventRenderer(err=err, show_error=False)
    failed: Exception | None = None
    # Ctrl-C during a turn stops that turn; at the prompt, it leaves.
    attached, talk.attached = talk.attached, []
    with graceful_interrupt(renderer.settle) as interrupt:
        async for event in agent.stream(prompt, conversation=conversation, session=session,
                                        interrupt=interrupt, attachments=attached):
            renderer(event)
            finished = run_finished(event)
            if finished is not None:
                failed = finished.error
    if isinstance(failed, ProviderConnectionError):
        # What `tether run` advises, for the provider this chat talks to now (/model).
        failed_text = no_provider_help(talk.cfg, failed, getattr(talk.args, "provider", None))
        err.print(shown(("error:", "red"), f" {inline(failed_text)}"))
    elif failed is not None:
        err.print(shown(("error:", "red"), f" {inline(failed)}"))


async def _resume_paused(agent: Agent, session: Session, err: Console) -> None:
    from tether.cli.render import EventRenderer
    from tether.cli.sessions import _continue

    renderer = EventRenderer(err=err)
    session.listeners.append(renderer)
    try:
        await _continue(agent, session, {})  # undecided calls go to the console approver
    finally:
        session.listeners.remove(renderer)


def _taint_words(taint: Any) -> str:
    flags = [n for n, v in (("private", taint.private), ("untrusted", taint.untrusted)) if v]
    return "+".join(flags) or "clean"


__all__ = ["COMMANDS", "add_cli", "chat", "cmd_chat"]
