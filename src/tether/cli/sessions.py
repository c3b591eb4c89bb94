"""`tether sessions list|show|resume|rm`, `tether run --session`, and the store's doctor check.

A session is picked up where it stopped: a run paused for approval gets its decisions
(``--allow``/``--deny`` CALL_ID, or the person at the terminal); a run killed mid-way
continues from its last recorded message; the taint comes back with it, never cleaner.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigError, TetherError

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.approval import Decision
    from tether.config.schema import Config
    from tether.conversation import PendingCall
    from tether.result import RunResult
    from tether.store.base import SessionInfo, SessionStore
    from tether.store.postgres import PostgresStore
    from tether.store.session import Session
    from tether.store.sqlite import SQLiteStore


class SessionPaused(TetherError):
    """The session waits for approval decisions before it can take a new prompt."""


class SessionAmbiguous(TetherError):
    """A session id prefix that more than one session's id starts with."""


def add_cli(sub: Any) -> None:
    """Register ``tether sessions``."""
    from tether.cli.actions import add_actions
    from tether.cli.common import add_limit_flag, add_run_flags

    p = sub.add_parser("sessions", help="stored conversations: list, show, resume, rm")
    actions = add_actions(p, "sessions_command")

    ls = actions.add_parser("list", help="sessions, most recent first")
    add_limit_flag(ls, 20, "sessions")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(handler=cmd_list)

    show = actions.add_parser("show", help="a session's transcript, taint and runs")
    show.add_argument("id")
    show.add_argument("--json", action="store_true", help="messages, taint, outcomes as JSON")
    show.add_argument("--events", action="store_true", help="also list the stored events")
    show.set_defaults(handler=cmd_show)

    resume = actions.add_parser(
        "resume", help="continue a session: decide paused approvals, finish a killed run, "
                       "or run a new prompt on it")
    resume.add_argument("id")
    resume.add_argument("prompt", nargs="?", help="a new prompt to run on the session")
    resume.add_argument("--allow", action="append", default=[], metavar="CALL_ID",
                        help="allow this paused call (repeatable)")
    resume.add_argument("--deny", action="append", default=[], metavar="CALL_ID",
                        help="deny this paused call (repeatable)")
    resume.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    add_run_flags(resume)
    resume.set_defaults(handler=cmd_resume)

    rm = actions.add_parser("rm", help="delete sessions")
    rm.add_argument("ids", nargs="+", metavar="ID")
    rm.set_defaults(handler=cmd_rm)



# --- shared helpers -------------------------------------------------------------------------


def store_for(workspace: str) -> SessionStore:
    """The store ``tether`` uses here: TETHER_STORE_URL or [store] url (PostgreSQL), else
    TETHER_STORE, [store] path, or the user's data dir (SQLite)."""
    from tether.config.layers import load_config

    return configured_store(load_config(workspace))


def configured_store(cfg: Config) -> SessionStore:
    """The store ``cfg`` chooses (the environment winning), opened once per process."""
    from tether.store.default import default_store_url, open_store
    from tether.store.sqlite import default_store_path

    url = default_store_url(cfg.store.url)
    if url is not None:
        return open_store(url=url)
    return open_store(default_store_path(cfg.store.path))


def prefer_session_provider(args: argparse.Namespace, store: SessionStore) -> None:
    """Continue a session on the provider it was created with, unless a flag says otherwise."""
    from tether.config.layers import load_config
    from tether.store.base import SessionNotFound

    if getattr(args, "provider", None) or getattr(args, "local", False) \
            or not getattr(args, "session_id", None):
        return
    try:
        provider = store.load(args.session_id).info.provider
    except SessionNotFound:
        return
    if provider and provider in load_config(args.workspace).providers:
        args.provider = provider


def open_session(args: argparse.Namespace, cfg: Config, session_id: str | None,
                 store: SessionStore, title: str = "") -> Session:
    """Session ``session_id`` (created with that id when new), or a new one."""
    from tether.store.session import Session

    name, pcfg = cfg.provider_config(getattr(args, "provider", None))
    meta = {"provider": name, "model": pcfg.model,
            "workspace": str(Path(cfg.tools.workspace or args.workspace).resolve()),
            "title": title}
    if session_id:
        return Session.open(session_id, store, **meta)
    return Session.create(store, **meta)


def resolve_id(store: SessionStore, key: str) -> str:
    """The id of the session ``key`` names: its whole id, or a prefix of exactly one id.
    A prefix several ids share is an error listing them; no match is ``SessionNotFound``."""
    from tether.store.base import SessionNotFound

    try:
        return store.load(key).info.id
    except SessionNotFound:
        pass
    matches = [i.id for i in store.list(limit=1_000_000_000) if i.id.startswith(key)] \
        if key else []
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(matches[:10]) + (f" and {len(matches) - 10} more"
                                           if len(matches) > 10 else "")
        raise SessionAmbiguous(f"{key!r} starts {len(matches)} session ids: {shown}; give "
                               f"more of the id")
    raise SessionNotFound(f"no session {key!r} in {where(store)} (`tether sessions list` shows "
                          f"them)")


def latest_session(store: SessionStore, workspace: str | Path) -> str:
    """The id of this workspace's most recently updated session (``-c``): another
    folder's sessions are continued by id (``--session ID``), never by accident."""
    here = str(Path(workspace).resolve())
    limit = 50
    while True:
        infos = store.list(limit=limit)
        for info in infos:
            if info.workspace == here:
                return info.id
        if len(infos) < limit:
            break
        limit *= 8  # the store lists newest first: read further back only when needed
    elsewhere = " (another folder's session is continued with --session ID)" if infos else ""
    raise ConfigError(f"there is no session of {here} to continue in {where(store)}"
                      f"{elsewhere}; run without -c to start one")


def refuse_if_paused(session: Session) -> None:
    pending = session.pending
    if pending is not None:
        from tether.display import inline

        calls = ", ".join(f"{inline(c.call_id)} ({inline(c.tool)})" for c in pending.calls)
        raise SessionPaused(f"session {session.id} is paused waiting for approval of {calls}; "
                            f"decide first: tether sessions resume {session.id} "
                            f"--allow CALL_ID | --deny CALL_ID")


def session_for_run(args: argparse.Namespace, cfg: Config) -> Session:
    """The session ``tether run`` is logged to: the one ``--session ID`` names (created with
    that id when new), the most recent one (``-c``), or a new one titled with the prompt."""
    store = store_for(args.workspace)
    session_id = args.session
    if getattr(args, "continue_last", False):
        session_id = latest_session(store, cfg.tools.workspace or args.workspace)
    session = open_session(args, cfg, session_id, store, title=args.prompt)
    refuse_if_paused(session)
    return session


def where(store: SessionStore) -> str:
    """Where a store keeps its sessions, fit to print (a file, or a URL without password)."""
    return str(getattr(store, "where", None) or type(store).__name__)


def _when(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def _taint_words(taint: Any) -> str:
    flags = [n for n, v in (("private", taint.private), ("untrusted", taint.untrusted)) if v]
    return "+".join(flags) or "clean"


def _info_dict(info: SessionInfo) -> dict[str, Any]:
    return {"id": info.id, "created": info.created, "updated": info.updated,
            "provider": info.provider, "model": info.model, "workspace": info.workspace,
            "title": info.title, "messages": info.message_count,
            "taint": info.taint.to_dict(), "last_stop": info.last_stop, "paused": info.paused}


# --- list / show / rm -----------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    from tether.cli.common import fetch_count, say_more, shown_of
    from tether.display import inline, json_dumps, literal, plain

    store = store_for(args.workspace)
    infos, more = shown_of(store.list(fetch_count(args.limit)), args.limit)
    if args.json:
        print(json_dumps([_info_dict(i) for i in infos], indent=2))
        if more:
            say_more(len(infos))
        return 0
    if not infos:
        print(literal(f"no sessions in {where(store)}"))
        return 0
    table = Table()
    widest = max(len(literal(i.id)) for i in infos)
    for col in ("id", "updated", "model", "msgs", "taint", "last run", "title"):
        if col == "id":  # in full: an id is what the other commands take
            table.add_column(col, no_wrap=True, min_width=widest)
        else:
            table.add_column(col, overflow="fold" if col == "title" else "ellipsis")
    for i in infos:
        last = "paused" if i.paused else (i.last_stop or "-")
        # Titles are the prompts people and hosts wrote; ids and models came from outside.
        table.add_row(plain(inline(i.id)), _when(i.updated), plain(inline(i.model)),
                      str(i.message_count), _taint_words(i.taint), plain(inline(last)),
                      plain(inline(i.title)))
    from tether.cli.render import print_table, stdout_console

    console = stdout_console()
    # The store's location on a line of its own: a table's title would wrap a long path.
    console.print(plain(f"sessions ({where(store)})"), soft_wrap=True)
    print_table(table, console)
    if more:
        say_more(len(infos))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from tether.cli.render import stdout_console
    from tether.conversation import pending_call_to_dict
    from tether.display import inline, json_dumps, json_text, shown
    from tether.messages import message_to_dict
    from tether.store.session import Session

    store = store_for(args.workspace)
    session = Session.load(resolve_id(store, args.id), store)
    pending = session.pending
    if args.json:
        out = {**_info_dict(session.info), "taint": session.taint.to_dict(),
               "messages": [message_to_dict(m) for m in session.messages],
               "outcomes": session.outcomes,
               "pending": [pending_call_to_dict(c) for c in pending.calls] if pending else [],
               **({"events": session.events()} if args.events else {})}
        print(json_dumps(out, indent=2))
        return 0
    con = stdout_console()
    info = session.info
    con.print(shown((f"session {info.id}", "bold"), f" {info.title}"))
    con.print(shown((f"created {_when(info.created)} · updated {_when(info.updated)} · "
                     f"{info.provider}/{info.model} · {info.workspace}", "dim")))
    con.print(shown("taint: ", (_taint_words(session.taint), "bold"),
                    f" · {info.message_count} messages · {len(session.outcomes)} run(s)"))
    con.print()
    for message in session.messages:
        _print_message(con, message)
    if pending is not None:
        con.print()
        con.print(shown(("paused, waiting for decisions:", "yellow")))
        for c in pending.calls:
            # Ids, names and the explanation quote what a model wrote: each on one line.
            con.print(shown(f"  #{c.position} {inline(c.call_id)}  {inline(c.tool)} "
                            f"{json_text(c.arguments)}  ", (inline(c.explanation), "dim")))
        con.print(shown((f"decide with: tether sessions resume {info.id} --allow ID | "
                         f"--deny ID (or '#N' for the call at position N)", "dim")))
    if args.events:
        con.print()
        for e in session.events():
            path = "/".join(map(str, e.get("path") or ()))
            con.print(shown((inline(e["run_id"]), "dim"), f" {inline(e['kind'])}",
                            *((" ", (inline(path), "dim")) if path else ())))
    return 0


def _print_message(con: Any, message: Any) -> None:
    from tether.cli.render import excerpt
    from tether.display import inline, shown
    from tether.messages import Text, ToolCall, ToolResult
    from tether.trust import untrusted_content

    style = {"user": "bold cyan", "assistant": "bold green", "tool": "bold magenta"}
    for part in message.parts:
        if isinstance(part, ToolCall):
            con.print(shown(("assistant", style["assistant"]), f" → {inline(part.name)} "
                            f"{excerpt(part.arguments, 160)} ", (f"({inline(part.id)})", "dim")))
        elif isinstance(part, ToolResult):
            flags: list[tuple[str, str]] = []
            if part.is_error:
                flags.append((" (error)", "red"))
            content = part.content
            if part.trust == "untrusted":
                flags.append((" (untrusted)", "yellow"))
                # A person reads the data; the notice around it was written for the model.
                content = untrusted_content(content) or content
            con.print(shown((inline(part.name), style["tool"]), *flags,
                            f" {excerpt(content, 300)}"))
        elif isinstance(part, Text) and part.origin is not None:
            # Outside text given with the prompt: its data, marked as not the user's words.
            data = untrusted_content(part.text.rstrip("\n")) or part.text
            con.print(shown((message.role, style.get(message.role, "bold")),
                            (f" (outside text, {inline(part.origin)}: untrusted)", "yellow"),
                            f" {excerpt(data, 300)}"))
        elif getattr(part, "kind", "") == "text" and part.text.strip():
            con.print(shown((message.role, style.get(message.role, "bold")),
                            f" {excerpt(part.text, 300)}"))


def cmd_rm(args: argparse.Namespace) -> int:
    from tether.cli.common import error as _error
    from tether.store.base import SessionNotFound

    store = store_for(args.workspace)
    missing: list[str] = []
    failed = False
    for key in args.ids:
        try:
            session_id = resolve_id(store, key)
        except SessionNotFound:
            missing.append(key)
            continue
        except SessionAmbiguous as e:
            _error(str(e))
            failed = True
            continue
        if store.delete(session_id):
            print(f"deleted {session_id}")
        else:
            missing.append(key)
    if missing:
        _error(f"no session {', '.join(missing)} in {where(store)}")
    return 1 if missing or failed else 0


# --- resume ---------------------------------------------------------------------------------


def cmd_resume(args: argparse.Namespace) -> int:
    return asyncio.run(_resume(args))


async def _resume(args: argparse.Namespace) -> int:
    from tether.approval import Decision
    from tether.cli.common import local_serving, make_agent, prepare_local
    from tether.display import inline, literal
    from tether.store.session import Session

    store = store_for(args.workspace)
    args.id = args.session_id = resolve_id(store, args.id)
    prefer_session_provider(args, store)
    session = Session.load(args.id, store)
    pending = session.pending
    calls = list(pending.calls) if pending else []
    decisions: dict[PendingCall, Decision] = {}
    for word, given in (("allow", args.allow), ("deny", args.deny)):
        for key in given:
            call = _paused_call(session.id, calls, key)
            if call in decisions:
                raise ConfigError(f"{key} is both allowed and denied (or named twice); "
                                  f"choose one")
            decisions[call] = Decision.allow() if word == "allow" else \
                Decision.deny("denied with tether sessions resume --deny")
    undecided = [c for c in calls if c not in decisions]
    if undecided and not sys.stdin.isatty() and not args.yes:
        for c in undecided:
            # Ids, names and explanations a model wrote into: one line per call.
            print(f"#{c.position} {inline(c.call_id)}  {inline(c.tool)} "
                  f"{literal(json.dumps(c.arguments, ensure_ascii=False, default=str))}  "
                  f"({inline(c.explanation)})", file=sys.stderr)
        raise SessionPaused(f"session {session.id} waits for decisions on "
                            f"{', '.join(inline(c.call_id) for c in undecided)}: pass --allow "
                            f"CALL_ID or --deny CALL_ID (nobody is at a terminal to ask)")

    prepare_local(args)
    agent, cfg = make_agent(args)  # built, and so checked, before --local starts a server
    async with local_serving(args):
        return await _resumed(args, agent, cfg, session, pending, decisions)


async def _resumed(args: argparse.Namespace, agent: Agent, cfg: Any, session: Session,
                   pending: Any, decisions: dict[PendingCall, Decision]) -> int:
    from tether.cli.common import exit_code, telemetry_export
    from tether.cli.render import EventRenderer
    from tether.result import final_result

    renderer = EventRenderer(show_text=not args.json)
    session.listeners.append(renderer)
    result: RunResult | None = None
    with telemetry_export(cfg):
        async with agent:
            conv = session.conversation()  # closes calls a killed process left unanswered
            in_flight = pending is not None or (
                bool(conv.messages) and conv.messages[-1].role in ("user", "tool"))
            if in_flight:
                result = await _continue(agent, session, decisions)
            if args.prompt and (result is None or result.stop_cause == "completed"):
                result = await final_result(agent.stream(args.prompt, session=session))
    if result is None:
        print(f"session {session.id}: nothing to resume (its last run "
              f"{session.info.last_stop or 'did not start'}); give a prompt to continue it: "
              f"tether sessions resume {session.id} \"...\", or tether chat --session "
              f"{session.id}", file=sys.stderr)
        return 0
    if args.json:
        from tether.display import json_dumps

        print(json_dumps(result.to_dict(), indent=2))
    return exit_code(result)


def _paused_call(session_id: str, calls: list[PendingCall], key: str) -> PendingCall:
    """The paused call ``--allow``/``--deny`` names: ``#N`` (its position in the paused
    turn, as ``sessions show`` lists it) or its call id, which must name one call."""
    from tether.display import inline
    from tether.errors import PendingStateError

    waiting = ", ".join(f"{inline(c.call_id)} (#{c.position})" for c in calls) or "none"
    if key.startswith("#") and key[1:].isdigit():
        match = [c for c in calls if c.position == int(key[1:])]
    else:
        match = [c for c in calls if c.call_id == key]
        if len(match) > 1:
            raise PendingStateError(
                f"session {session_id}: paused calls {', '.join(f'#{c.position}' for c in match)}"
                f" share the id {inline(repr(key))}; name each by its position instead (--allow "
                f"'#{match[0].position}')")
    if not match:
        raise PendingStateError(f"session {session_id} has no paused call {inline(key)}; "
                                f"waiting: {waiting}")
    return match[0]


async def _continue(agent: Agent, session: Session,
                    decisions: Mapping[PendingCall, Decision]) -> RunResult:
    from tether.errors import ProviderError
    from tether.result import RunResult

    try:
        return await agent.resume(session, decisions)
    except ProviderError as e:  # resume raises where stream reports; the CLI reports alike
        if not isinstance(e.result, RunResult):  # None, or (errors name it) a RunResult
            raise
        return e.result


# --- doctor ---------------------------------------------------------------------------------


async def check_store(cfg: Config) -> list[tuple[bool, str, str]]:
    """`tether doctor`: can the configured session store be opened and written? Names the
    store (a PostgreSQL URL without its password), its schema version and its sessions."""
    from tether.store.base import SessionInfo, new_session_id
    from tether.store.default import default_store_url
    from tether.store.sqlite import default_store_path

    label = "session store"
    try:
        url = default_store_url(cfg.store.url)
        opened: SQLiteStore | PostgresStore
        if url is not None:
            from tether.store.postgres import PostgresStore

            opened = PostgresStore(url, connect_timeout=5, timeout=5, max_size=1)
            kind = f"PostgreSQL {opened.server_version}"
        else:
            from tether.store.sqlite import SQLiteStore

            opened = SQLiteStore(default_store_path(cfg.store.path), busy_timeout_ms=2000,
                                 retries=1)
            kind = "SQLite"
        with opened as store:
            probe = f"doctor-{new_session_id()}"
            store.create_session(SessionInfo(probe, 0.0, 0.0, title="tether doctor probe"))
            store.delete(probe)
            count = len(store.list(limit=100_000))
            version = store.schema_version
            shown = where(store)
    except TetherError as e:
        return [(False, label, str(e))]
    return [(True, label, f"{shown} ({kind}) writable (schema v{version}, {count} session(s))")]


__all__ = ["SessionAmbiguous", "SessionPaused", "add_cli", "check_store", "configured_store",
           "latest_session", "open_session", "resolve_id", "session_for_run", "store_for",
           "where"]
