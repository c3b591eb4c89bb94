"""`tether chat`: talk to the agent turn by turn in the terminal.

Answers stream as they come; gated tools ask at the terminal (y once, a for the session,
n deny). Every turn is stored in a session, so closing the terminal loses nothing:
``tether chat --session ID`` picks it up with its taint. Commands: ``/taint``, ``/tools``,
``/session``, ``/help``, ``/exit``.

With stdin piped, each line is a turn (or a command), and approval prompts read the next
line: ``printf 'delete notes.txt\\ny\\n/exit\\n' | tether chat``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console

    from tether.agent import Agent, Conversation
    from tether.store import Session

COMMANDS = {
    "/taint": "what the conversation has seen (private data? untrusted text?)",
    "/tools": "the tools, their capabilities and approval flags",
    "/session": "the session id, to resume later",
    "/help": "this list",
    "/exit": "leave (the session stays stored; /quit and end of input work too)",
}


def add_cli(sub: Any) -> None:
    """Register ``tether chat``."""
    from tether.cli.common import add_run_flags

    p = sub.add_parser("chat", help="talk with the agent turn by turn (stored as a session)")
    p.add_argument("--session", metavar="ID",
                   help="continue this stored session (created with this id when new)")
    p.add_argument("--no-store", action="store_true",
                   help="keep the conversation in memory only")
    add_run_flags(p)
    p.set_defaults(handler=cmd_chat)


def cmd_chat(args: argparse.Namespace) -> int:
    from rich.console import Console

    err = Console(stderr=True, highlight=False)
    state: dict[str, Any] = {}
    try:
        return asyncio.run(chat(args, sys.stdin, err, state))
    except KeyboardInterrupt:
        session = state.get("session")
        if session is not None:
            err.print(f"\n[dim]stopped; continue with: tether chat --session {session.id}[/]")
        return 130


async def chat(args: argparse.Namespace, stdin: TextIO, err: Console,
               state: dict[str, Any] | None = None) -> int:
    """The chat loop over ``stdin``; ``state["session"]`` is set as soon as it exists."""
    from tether.agent import Conversation
    from tether.approval import ConsoleApprover
    from tether.cli.common import make_agent
    from tether.cli.sessions import open_session, prefer_session_provider, store_for

    state = state if state is not None else {}
    interactive = stdin.isatty()
    store = None if args.no_store else store_for(args.workspace)
    if store is not None and args.session:
        args.session_id = args.session
        prefer_session_provider(args, store)
    # Chat always has a person to ask: at a terminal, or the next piped line.
    agent, cfg = make_agent(args, approver=ConsoleApprover(err))
    session: Session | None = None
    conversation: Conversation
    if store is not None:
        session = open_session(args, cfg, args.session, store)
        state["session"] = session
        conversation = session.conversation()
    else:
        conversation = Conversation()

    where = f"session {session.id}" if session else "not stored"
    err.print(f"[bold]tether chat[/] [dim]· {agent.model.model} · {where} · /help for "
              f"commands[/]")
    if conversation.messages:
        err.print(f"[dim]continuing: {len(conversation.messages)} messages, taint "
                  f"{_taint_words(conversation.taint)}[/]")

    async with agent:
        if session is not None and session.pending is not None:
            err.print("[yellow]this session paused waiting for approval; deciding now[/]")
            await _resume_paused(agent, session, err)
        while True:
            line = await _read_line(stdin, err, interactive)
            if line is None:
                break
            line = line.strip()
            if not line:
                continue
            if line.startswith("/"):
                if not _command(line, agent, conversation, session, err):
                    break
                continue
            await _turn(agent, line, conversation, session, err)
    if session is not None:
        err.print(f"[dim]saved; continue with: tether chat --session {session.id}[/]")
    return 0


async def _read_line(stdin: TextIO, err: Console, interactive: bool) -> str | None:
    if interactive:
        err.print("[bold cyan]you›[/] ", end="")
    # A thread, so MCP servers and other tasks keep running while we wait for the person.
    line = await asyncio.to_thread(stdin.readline)
    return line if line else None


def _command(line: str, agent: Agent, conversation: Conversation, session: Session | None,
             err: Console) -> bool:
    """Run a /command; False means leave."""
    from tether.display import shown

    word = line.split()[0].lower()
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
            err.print(shown("  ", (tool.name, "bold"), " ",
                            (f"{tool.spec.display_name} · {flags}{gate}", "dim")))
        if not agent.tools:
            err.print("  (no tools)")
    elif word == "/session":
        err.print(f"session {session.id}" if session else "not stored (--no-store)")
    elif word == "/help":
        for name, what in COMMANDS.items():
            err.print(f"  {name:<9} {what}")
    else:
        err.print(shown((f"unknown command {word}", "yellow"), "; /help lists them"))
    return True


async def _turn(agent: Agent, prompt: str, conversation: Conversation, session: Session | None,
                err: Console) -> None:
    from tether.cli.common import graceful_interrupt
    from tether.cli.render import EventRenderer

    renderer = EventRenderer(err=err)
    # Ctrl-C during a turn stops that turn; at the prompt, it leaves.
    with graceful_interrupt() as interrupt:
        async for event in agent.stream(prompt, conversation=conversation, session=session,
                                        interrupt=interrupt):
            renderer(event)


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
