"""`tether run PROMPT`: one prompt, the answer streamed, the exit code says how it ended.

Text piped in goes with the prompt as outside text (``git diff | tether run "review
this"``): delimited for the model, the conversation untrusted from the start, never a
trusted source of a call's values, unless ``--trust-input`` says the user wrote it. ``-``
reads the whole prompt from standard input: the user's own words, typed through a pipe.
Every run is logged to the session store (a session of its own, unless ``--session ID`` or
``-c`` continues one; ``--no-log`` keeps nothing), so ``tether logs`` shows it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import stat
import sys
from typing import Any

from tether.cli.common import (
    EXIT_ERROR,
    EXIT_NO_ANSWER,
    STDIN,
    add_run_flags,
    assumed_profile_notice,
    error,
    exit_code,
    graceful_interrupt,
    local_serving,
    make_agent,
    no_provider_help,
    prepare_local,
    prompt_parts,
    refuse_unsendable,
    telemetry_export,
)
from tether.cli.temporal import add_engine_flag
from tether.errors import ConfigError, OutputFailure, ProviderConnectionError, TetherError


def add_cli(sub: Any) -> None:
    run = sub.add_parser("run", help="run one prompt and stream the answer")
    run.add_argument("prompt", nargs="?",
                     help="what the agent should do; - reads it from standard input (your "
                          "own words, typed through a pipe). Text piped in beside a prompt "
                          "is outside text: the model sees it marked as data, the "
                          "conversation counts as untrusted from the start, and no call may "
                          "act on a value found only there (see --trust-input)")
    run.add_argument("-a", "--attach", metavar="FILE", action="append", default=[],
                     help="give the model this file with the prompt (repeatable; - reads "
                          "it from standard input): an image, a text file, a PDF's text. "
                          "Outside text like piped input unless --trust-input")
    run.add_argument("--trust-input", action="store_true",
                     help="vouch for the input given beside the prompt (text piped in, "
                          "files attached): you wrote it, so it joins your prompt as your "
                          "own words, trusted")
    add_run_flags(run)
    run.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    run.add_argument("--output-schema", metavar="SCHEMA",
                     help="answer in this shape: a JSON Schema file, the schema inline "
                          "('{\"type\": \"object\", ...}'), or fields ('name, age int'; "
                          "types str, int, float, bool, list[T]); prints the validated JSON "
                          "answer (with --json, the RunResult holding it)")
    run.add_argument("--session", metavar="ID",
                     help="continue stored session ID (created with this id when new)")
    run.add_argument("-c", "--continue", dest="continue_last", action="store_true",
                     help="continue this workspace's most recent session")
    run.add_argument("--no-log", action="store_true",
                     help="do not log this run to the session store")
    run.add_argument("--mcp-prompt", metavar="'SERVER:NAME [KEY=VALUE ...]'",
                     help="insert the prompt NAME of the MCP server SERVER before your own "
                          "(if any), its arguments as KEY=VALUE words with shell quoting "
                          "(docs/mcp.md). It is the server's text, not yours: untrusted "
                          "unless the server is trusted (tether mcp prompts SERVER lists "
                          "them)")
    add_engine_flag(run)
    run.set_defaults(handler=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    if args.mcp_prompt is not None:
        from tether.mcp.prompts import parse_invocation

        args.mcp_prompt = parse_invocation(args.mcp_prompt)  # a typo fails before anything
        if args.prompt is None:
            args.prompt = ""  # the server's prompt is the whole turn
    args.attached = attached(args.attach, trusted=args.trust_input)
    if "-" in args.attach:
        args.outside = None  # standard input was the attachment
        if args.prompt in (None, "-"):
            raise ConfigError("-a - reads a file from standard input: give the prompt as an "
                              "argument (tether run -a - \"describe this\")")
    else:
        args.prompt, args.outside = prompt_of(args.prompt, trusted=args.trust_input)
    if args.no_log and (args.session or args.continue_last):
        raise ConfigError("--no-log keeps nothing, so it cannot continue a session "
                          "(--session / -c); drop one of them")
    if args.session and args.continue_last:
        raise ConfigError("--session ID and -c (the most recent session) both name the "
                          "session to continue; choose one")
    if getattr(args, "engine", "local") == "temporal":
        from tether.cli.temporal import run_on_temporal

        return run_on_temporal(args)
    return asyncio.run(_run(args))


# --- the prompt -------------------------------------------------------------------------------


def attached(files: list[str], *, trusted: bool) -> list[Any]:
    """The parts of the files ``-a`` names, in order; ``-`` is standard input's bytes (once)."""
    if not files:
        return []
    from tether.attachments import Attachment, attachment_parts

    if files.count("-") > 1:
        raise ConfigError("-a - reads standard input, which can be read once")
    items: list[Attachment] = []
    for name in files:
        if name == "-":
            items.append(Attachment(STDIN, _stdin_bytes(), trusted))
        else:
            items.append(Attachment.from_path(name, trusted=trusted))
    return attachment_parts(items)


def _stdin_bytes() -> bytes:
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (AttributeError, OSError, ValueError):
        mode = 0
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        raise ConfigError("-a - attaches what is piped in, and nothing is: pipe the file "
                          "(cat photo.png | tether run -a - \"describe it\")")
    return sys.stdin.buffer.read()


def prompt_of(given: str | None, *, trusted: bool = False) -> tuple[str, str | None]:
    """The user's prompt and the outside text piped beside it (None: none). ``-`` is the
    piped text as the whole prompt (the user typing through a pipe). Piped beside a prompt,
    the text is outside text unless ``trusted`` (``--trust-input``): then it joins the
    prompt, before it, as it did before outside text existed. Piped with no prompt at all,
    it is the prompt only when vouched for: text nobody said is the user's would otherwise
    be taken as the user's instruction."""
    if given == "-":
        return _read_stdin(required=True), None
    piped = _read_stdin(required=given is None and trusted)
    if given is None:
        if trusted:
            return piped, None
        if piped.strip():
            raise ConfigError("text is piped in but no prompt says what to do with it: give "
                              "one (git diff | tether run \"review this\"), or - if the piped "
                              "text is your prompt (echo \"...\" | tether run -), or "
                              "--trust-input if you wrote it")
        raise ConfigError("give a prompt: tether run \"...\", or pipe one in: "
                          "echo \"...\" | tether run -")
    if not piped.strip():
        return given, None
    if trusted:
        return f"{piped.rstrip()}\n\n{given}", None
    return given, piped


def _read_stdin(required: bool) -> str:
    """Standard input's text, when it is piped or redirected from a file (never a terminal,
    nor a device such as /dev/null)."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (AttributeError, OSError, ValueError):  # no stdin at all
        mode = 0
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        if required:
            raise ConfigError("give a prompt: tether run \"...\", or pipe one in: "
                              "echo \"...\" | tether run -")
        return ""
    data = sys.stdin.buffer.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise TetherError(f"standard input is not UTF-8 text (byte 0x{data[e.start]:02x} at "
                          f"offset {e.start}); tether run reads text") from None
    if required and not text.strip():
        raise ConfigError("the prompt on standard input is empty: say what the agent should do")
    return text


# --- the run ----------------------------------------------------------------------------------


async def _run(args: argparse.Namespace) -> int:
    from tether.cli.output_schema import output_spec

    # Everything the command line says is checked before --local builds or starts a server:
    # the configuration, -T and --tools (building the agent), --output-schema, attachments.
    prepare_local(args)
    agent, cfg = make_agent(args)
    spec = output_spec(args.output_schema) if args.output_schema else None
    refuse_unsendable(agent, prompt_parts(args.prompt, args.outside, args.attached))
    async with local_serving(args):
        with telemetry_export(cfg):
            return await _run_made(agent, cfg, args, spec)


def _session_for(args: argparse.Namespace, cfg: Any) -> Any:
    """The session this run is logged to: the one ``--session``/``-c`` names, a new one,
    or None (``--no-log``)."""
    from tether.cli.sessions import session_for_run
    from tether.store.base import StoreError

    if args.no_log:
        return None
    if not args.prompt.strip() and args.mcp_prompt is None:
        raise TetherError("the prompt is empty: say what the agent should do")
    if args.session or args.continue_last:
        return session_for_run(args, cfg)  # asked for: a store that fails is an error
    try:
        return session_for_run(args, cfg)
    except StoreError as e:
        # Only the log is lost: the run itself needs no store.
        error(f"this run is not logged: {e} (--no-log skips logging)")
        return None


async def _run_made(agent: Any, cfg: Any, args: argparse.Namespace, spec: Any) -> int:
    from tether.cli.render import EventRenderer

    quiet = bool(args.json)
    renderer = EventRenderer(show_text=not quiet and not args.output_schema, show_error=False)
    notice = assumed_profile_notice(agent, cfg)
    if notice is not None and not quiet:
        from tether.cli.render import stderr_console
        from tether.display import shown

        stderr_console().print(shown((notice, "dim")))
    session = _session_for(args, cfg)
    async with agent:
        if spec is not None:
            return await _run_structured(agent, args, renderer, cfg, spec, session)
        from tether.result import run_finished

        result = None
        parts = await _prompt(agent, args)
        with graceful_interrupt(renderer.settle) as interrupt:
            async for event in agent.stream(parts,
                                            session=session, interrupt=interrupt):
                if not quiet:
                    renderer(event)
                result = run_finished(event) or result
    assert result is not None
    if args.json:
        from tether.display import json_dumps

        print(json_dumps(_with_session(result.to_dict(), session), indent=2))
    _report_error(result, cfg)
    return exit_code(result)


async def _prompt(agent: Any, args: argparse.Namespace) -> Any:
    """What the run is given: the MCP server's prompt (``--mcp-prompt``), then the files
    attached, the outside text piped in, and the user's own prompt."""
    own = prompt_parts(args.prompt, args.outside, args.attached)
    if args.mcp_prompt is None:
        return own
    from tether.cli.mcp_lists import fetch_prompt
    from tether.messages import Text

    server_parts = await fetch_prompt(agent, args.mcp_prompt)
    if isinstance(own, str):
        own = (Text(own),)
    # No prompt of the user's own: the server's prompt (and what came with it) is the turn.
    own = tuple(p for p in own if not (isinstance(p, Text) and not p.text.strip()))
    return (*server_parts, *own)


def _with_session(data: dict[str, Any], session: Any) -> dict[str, Any]:
    return {**data, "session_id": session.id if session is not None else None}


def _report_error(result: Any, cfg: Any) -> None:
    """A failed run's error, once, with advice when no model server answered."""
    if isinstance(result.error, ProviderConnectionError):
        error(no_provider_help(cfg, result.error))
    elif result.error is not None:
        from tether.display import inline

        # It quotes what the server said: on one line, whatever that holds.
        error(inline(result.error))


# --- --output-schema --------------------------------------------------------------------------


async def _run_structured(agent: Any, args: argparse.Namespace, renderer: Any, cfg: Any,
                          spec: Any, session: Any) -> int:
    from tether.display import json_dumps

    run = agent.prepare(await _prompt(agent, args), output=spec,
                        conversation=session.conversation() if session is not None else None)
    async for event in run.stream():
        if session is not None:
            session.record(event)  # what Agent.stream(session=...) does for a plain run
        if not args.json:
            renderer(event)
    try:
        report = await run.output()
    except OutputFailure as failure:
        result = failure.result
        if args.json and result is not None:
            print(json_dumps(_with_session(result.to_dict(), session), indent=2))
        if result is not None and result.error is not None:
            _report_error(result, cfg)
            return EXIT_ERROR
        error(f"no valid answer ({failure.reason}): {failure.message}")
        return EXIT_ERROR if failure.reason == "provider" else EXIT_NO_ANSWER
    result = report.result
    if args.json:
        print(json_dumps(_with_session(result.to_dict(), session), indent=2))
    else:
        value = report.value
        print(json_dumps(value.model_dump(mode="json") if hasattr(value, "model_dump")
                         else value, indent=2))
    return exit_code(result)
