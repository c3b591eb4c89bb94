"""The `tether` command.

Exit codes: 0 answered, 1 error, 2 refused (the run ended without an answer after the gate
refused a call, or paused waiting for approval), 3 no answer, 130 interrupted (Ctrl-C: the
first press stops the run cleanly, a second aborts), 141 the reader of the output left
(``tether tools --json | head -1``), quietly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tether.errors import ConfigError, OutputFailure, ProviderConnectionError, TetherError

EXIT_OK, EXIT_ERROR, EXIT_REFUSED, EXIT_NO_ANSWER = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # as a shell reports a process ended by Ctrl-C
EXIT_PIPE = 141  # as a shell reports a process ended by SIGPIPE: the reader left

# Extra `tether doctor` checks registered by optional parts (MCP, the session store):
# each returns (ok, label, detail).
DoctorCheck = Callable[[Any], "asyncio.Future[list[tuple[bool, str, str]]] | Any"]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return _main(argv)
        finally:
            # A reader that left shows here, not in the flush at interpreter exit.
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        _reader_gone()
        return EXIT_PIPE
    except SystemExit as e:
        if isinstance(e.__context__, BrokenPipeError):  # rich's Console.on_broken_pipe
            _reader_gone()
            return EXIT_PIPE
        raise


def _reader_gone() -> None:
    """The reader of our output closed it early (``| head -1``). Whatever is still buffered
    goes nowhere: the streams are pointed at /dev/null, so the flush at interpreter exit
    cannot fail again and print a traceback. Tool sources were closed on the way out."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(AttributeError, OSError, ValueError):
                os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_ERROR
    try:
        code: int = args.handler(args)
        return code
    except ConfigError as e:
        _error(f"configuration: {e}")
        return EXIT_ERROR
    except TetherError as e:
        _error(str(e))
        return EXIT_ERROR
    except KeyboardInterrupt:
        _error("interrupted")
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tether", description="Run LLM agents on a tether: tools pass one gate.")
    parser.add_argument("--workspace", "-w", default=".",
                        help="the workspace folder (tether.toml, file tools' root)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run one prompt and stream the answer")
    run.add_argument("prompt", help="what the agent should do")
    _add_run_flags(run)
    run.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    run.add_argument("--output-schema", metavar="FILE.json",
                     help="answer in this JSON Schema; prints the validated JSON answer")
    run.add_argument("--session", metavar="ID",
                     help="continue stored session ID (created with this id when new)")
    run.add_argument("--local", action="store_true",
                     help="use a local llama-server, setting it up and starting it if needed")
    run.add_argument("--tools", dest="tool_files", action="append", metavar="FILE.py[:NAME]",
                     help="offer the @tool functions of a Python file or module:attr "
                          "(repeatable)")
    from tether.temporal import cli as temporal_cli  # no temporalio until a command runs

    temporal_cli.add_engine_flag(run)
    run.set_defaults(handler=cmd_run)

    tools = sub.add_parser("tools", help="list tools with capabilities and approval flags")
    tools.add_argument("--json", action="store_true")
    tools.set_defaults(handler=cmd_tools)

    config = sub.add_parser("config", help="show or create the configuration")
    config_sub = config.add_subparsers(dest="config_command", metavar="ACTION")
    show = config_sub.add_parser("show", help="the merged configuration and where it came from")
    show.set_defaults(handler=cmd_config_show)
    init = config_sub.add_parser("init", help="write a commented tether.toml")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(handler=cmd_config_init)

    doctor = sub.add_parser("doctor", help="check config, providers, MCP servers, the store")
    doctor.set_defaults(handler=cmd_doctor)

    from tether import batch, chat, sessions_cli

    chat.add_cli(sub, _add_run_flags)
    batch.add_cli(sub, _add_run_flags)
    sessions_cli.add_cli(sub, _add_run_flags, DOCTOR_CHECKS)

    from tether import local

    local.add_cli(sub)
    temporal_cli.add_cli(sub)
    return parser


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--provider", help="a [providers.NAME] entry of tether.toml")
    p.add_argument("--model", help="the model name to ask for")
    p.add_argument("--max-turns", type=int, help="bound on model turns")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--yes", "-y", action="store_true",
                   help="allow tools that need approval without asking (permission_mode=allow)")
    p.add_argument("--read-only", action="store_true",
                   help="only tools that change nothing may run (permission_mode=read-only)")


def _error(message: str) -> None:
    from rich.console import Console

    from tether.display import shown

    # Messages quote what servers, tools and models wrote: printed literally.
    Console(stderr=True, highlight=False).print(shown(("tether:", "red"), f" {message}"))


# --- building from flags ------------------------------------------------------------------


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    # `run --local` (tether.local.serving_for_run) points the local provider at its server.
    out: dict[str, Any] = copy.deepcopy(getattr(args, "local_config", None) or {})
    if getattr(args, "provider", None):
        out["default_provider"] = args.provider
    if getattr(args, "model", None):
        from tether.config import load_config

        name = args.provider or load_config(args.workspace).default_provider
        out.setdefault("providers", {}).setdefault(name, {})["model"] = args.model
    if getattr(args, "max_turns", None):
        out.setdefault("agent", {})["max_turns"] = args.max_turns
    if getattr(args, "system", None):
        out.setdefault("agent", {})["system_prompt"] = args.system
    if getattr(args, "yes", False) and getattr(args, "read_only", False):
        raise ConfigError("--yes and --read-only contradict each other; choose one")
    if getattr(args, "yes", False):
        out.setdefault("tools", {})["permission_mode"] = "allow"
    if getattr(args, "read_only", False):
        out.setdefault("tools", {})["permission_mode"] = "read-only"
    return out


def make_agent(args: argparse.Namespace, **agent_kwargs: Any) -> tuple[Any, Any]:
    """(agent, config) for a command's flags; a console approver when a person is there."""
    from tether.config import agent_from_config, load_config

    cfg = load_config(args.workspace, _overrides(args))
    if getattr(args, "tool_files", None):
        from tether.tool_files import load_tool_references

        agent_kwargs.setdefault("tools", load_tool_references(args.tool_files))
        agent_kwargs.setdefault("tool_files", list(args.tool_files))
    if "approver" not in agent_kwargs and sys.stdin.isatty():
        from tether.approval import ConsoleApprover

        agent_kwargs["approver"] = ConsoleApprover()
    agent = agent_from_config(args.workspace, config=cfg, **agent_kwargs)
    return agent, cfg


def _no_provider_help(cfg: Any, error: Exception) -> str:
    name, pcfg = cfg.provider_config()
    return (f"{error}\n\nNo model server answered for provider {name!r} at {pcfg.base_url}. "
            f"Either start a local one (`tether local serve`, or `tether run --local ...`), "
            f"or point tether at a server in ./tether.toml (`tether config init` writes one):\n"
            f"  [providers.{name}]\n  kind = \"openai-chat\"\n"
            f"  base_url = \"http://127.0.0.1:8080/v1\"\n  model = \"...\"\n"
            f"and select it with default_provider or --provider.")


# --- tether run ---------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    if getattr(args, "engine", "local") == "temporal":
        from tether.temporal.cli import run_on_temporal

        return run_on_temporal(args)
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    if getattr(args, "local", False):
        from tether.local import serving_for_run

        async with serving_for_run(args):
            return await _run_agent(args)
    return await _run_agent(args)


async def _run_agent(args: argparse.Namespace) -> int:
    from tether.render import EventRenderer

    agent, cfg = make_agent(args)
    quiet = bool(args.json)
    renderer = EventRenderer(show_text=not quiet and not args.output_schema)
    async with agent:
        session = None
        if getattr(args, "session", None):
            from tether.sessions_cli import session_for_run

            session = session_for_run(args, cfg)
        if args.output_schema:
            return await _run_structured(agent, args, renderer, cfg)
        from tether.events import RunFinished

        result = None
        with graceful_interrupt() as interrupt:
            async for event in agent.stream(args.prompt, session=session, interrupt=interrupt):
                if not quiet:
                    renderer(event)
                if isinstance(event, RunFinished) and not event.path:
                    result = event.result
    assert result is not None
    if args.json:
        from tether.display import json_dumps

        print(json_dumps(result.to_dict(), indent=2))
    if isinstance(result.error, ProviderConnectionError):
        _error(_no_provider_help(cfg, result.error))
        return EXIT_ERROR
    return exit_code(result)


@contextlib.contextmanager
def graceful_interrupt() -> Iterator[asyncio.Event]:
    """The first Ctrl-C stops the run cleanly (stop cause "interrupted", the
    conversation kept valid); a second one aborts at once."""
    interrupt = asyncio.Event()
    loop = asyncio.get_running_loop()

    def first_press() -> None:
        interrupt.set()
        _error("interrupting (Ctrl-C again to abort now)")
        loop.remove_signal_handler(signal.SIGINT)  # the next press raises KeyboardInterrupt

    try:
        loop.add_signal_handler(signal.SIGINT, first_press)
    except (NotImplementedError, RuntimeError):  # no signal handlers here (Windows, threads)
        yield interrupt
        return
    try:
        yield interrupt
    finally:
        loop.remove_signal_handler(signal.SIGINT)


def exit_code(result: Any) -> int:
    if result.error is not None:
        return EXIT_ERROR
    if result.stop_cause == "completed":
        return EXIT_OK
    refused = any(r.denied or r.blocked for r in result.tool_calls)
    if result.stop_cause == "paused" or refused:
        return EXIT_REFUSED
    if result.stop_cause == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_NO_ANSWER


async def _run_structured(agent: Any, args: argparse.Namespace, renderer: Any, cfg: Any) -> int:
    from tether.output import OutputSpec

    path = Path(args.output_schema)
    try:
        schema = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"--output-schema {path}: cannot read a JSON Schema: {e}") from None
    if not isinstance(schema, dict):
        raise ConfigError(f"--output-schema {path}: a JSON Schema must be an object")
    title = schema.get("title")
    name = title if isinstance(title, str) and title.strip() else path.stem
    spec = OutputSpec(name, schema.get("description") or "Give the final answer in this shape.",
                      schema)
    run = agent.prepare(args.prompt, output=spec)
    async for event in run.stream():
        if not args.json:
            renderer(event)
    try:
        report = await run.output()
    except OutputFailure as failure:
        if failure.result is not None and isinstance(failure.result.error,
                                                     ProviderConnectionError):
            _error(_no_provider_help(cfg, failure.result.error))
            return EXIT_ERROR
        _error(f"no valid answer ({failure.reason}): {failure.message}")
        return EXIT_ERROR if failure.reason == "provider" else EXIT_NO_ANSWER
    from tether.display import json_dumps

    print(json_dumps(report.value if not hasattr(report.value, "model_dump")
                     else report.value.model_dump(mode="json"), indent=2))
    return EXIT_OK


# --- tether tools -------------------------------------------------------------------------


def cmd_tools(args: argparse.Namespace) -> int:
    return asyncio.run(_tools(args))


async def _tools(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    agent, _ = make_agent(args, approver=None)
    async with agent:
        tools = list(agent.tools.values())
    for notice in agent.start_notices:  # an MCP server that did not start, a skipped tool
        _error(notice.message)
    rows: list[dict[str, Any]] = [{
        "name": t.name, "title": t.spec.display_name, "source": t.source,
        "capabilities": t.capabilities.flags(), "needs_approval": t.needs_approval,
        "read_only": t.read_only,
        # An MCP tool's server, and whether its own text (descriptions, titles) is trusted.
        "server": t.source_name if t.source == "mcp" else None,
        "server_trusted": (not t.spec_from_outside) if t.source == "mcp" else None,
    } for t in tools]
    if args.json:
        from tether.display import json_dumps

        print(json_dumps(rows, indent=2))
        return EXIT_OK
    from tether.display import plain

    table = Table(title="tools")
    for col in ("name", "title", "source", "capabilities", "approval", "read-only"):
        table.add_column(col, overflow="fold")
    for r in rows:
        source = r["source"] if r["server"] is None else \
            f"mcp {r['server']} ({'trusted' if r['server_trusted'] else 'untrusted'})"
        # Names and titles are what servers wrote: cells hold them as plain text.
        table.add_row(plain(r["name"]), plain(r["title"]), plain(source),
                      plain(", ".join(r["capabilities"]) or "-"),
                      "yes" if r["needs_approval"] else "no", "yes" if r["read_only"] else "no")
    Console().print(table)
    return EXIT_OK


# --- tether config ------------------------------------------------------------------------


def cmd_config_show(args: argparse.Namespace) -> int:
    from tether.config import load_config

    cfg = load_config(args.workspace)
    print(f"# layers: {', '.join(cfg.sources)}")
    print(json.dumps(cfg.model_dump(mode="json"), indent=2))
    return EXIT_OK


def cmd_config_init(args: argparse.Namespace) -> int:
    from tether.config import INIT_TEMPLATE

    path = Path(args.workspace) / "tether.toml"
    if path.exists() and not args.force:
        raise ConfigError(f"{path} exists; pass --force to overwrite it")
    path.write_text(INIT_TEMPLATE)
    print(f"wrote {path}")
    return EXIT_OK


# --- tether doctor ------------------------------------------------------------------------

DOCTOR_CHECKS: list[Callable[[Any], Any]] = []


def cmd_doctor(args: argparse.Namespace) -> int:
    return asyncio.run(_doctor(args))


async def _doctor(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tether.config import load_config
    from tether.doctor import check_providers

    console = Console(highlight=False)
    failures = 0

    def report(ok: bool, label: str, detail: str) -> None:
        from tether.display import shown

        nonlocal failures
        failures += not ok
        mark = ("✓", "green") if ok else ("✗", "red")
        # Details quote servers (an MCP server's stderr, an HTTP error): shown literally.
        console.print(shown(mark, f" {label}", *((" ", (detail, "dim")) if detail else ())))

    try:
        cfg = load_config(args.workspace)
    except ConfigError as e:
        report(False, "config", str(e))
        return EXIT_ERROR
    report(True, "config", ", ".join(cfg.sources))
    for ok, label, detail in await check_providers(cfg):
        report(ok, label, detail)
    checks = list(DOCTOR_CHECKS)
    if cfg.mcp:  # imported here so that `import tether.cli` never loads the MCP SDK
        from tether.mcp import check_mcp_servers

        checks.append(check_mcp_servers)
    for check in checks:
        for ok, label, detail in await check(cfg):
            report(ok, label, detail)
    return EXIT_OK if not failures else EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
