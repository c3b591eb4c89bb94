"""`tether run PROMPT`: one prompt, the answer streamed, the exit code says how it ended."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from tether.cli.common import (
    EXIT_ERROR,
    EXIT_NO_ANSWER,
    EXIT_OK,
    add_run_flags,
    error,
    exit_code,
    graceful_interrupt,
    make_agent,
    no_provider_help,
    telemetry_export,
)
from tether.cli.temporal import add_engine_flag
from tether.errors import ConfigError, OutputFailure, ProviderConnectionError


def add_cli(sub: Any) -> None:
    run = sub.add_parser("run", help="run one prompt and stream the answer")
    run.add_argument("prompt", help="what the agent should do")
    add_run_flags(run)
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
    add_engine_flag(run)
    run.set_defaults(handler=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    if getattr(args, "engine", "local") == "temporal":
        from tether.cli.temporal import run_on_temporal

        return run_on_temporal(args)
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    if getattr(args, "local", False):
        from tether.cli.local import serving_for_run

        async with serving_for_run(args):
            return await _run_agent(args)
    return await _run_agent(args)


async def _run_agent(args: argparse.Namespace) -> int:
    agent, cfg = make_agent(args)
    with telemetry_export(cfg):
        return await _run_made(agent, cfg, args)


async def _run_made(agent: Any, cfg: Any, args: argparse.Namespace) -> int:
    from tether.cli.render import EventRenderer

    quiet = bool(args.json)
    renderer = EventRenderer(show_text=not quiet and not args.output_schema)
    async with agent:
        session = None
        if getattr(args, "session", None):
            from tether.cli.sessions import session_for_run

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
        error(no_provider_help(cfg, result.error))
        return EXIT_ERROR
    return exit_code(result)


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
            error(no_provider_help(cfg, failure.result.error))
            return EXIT_ERROR
        error(f"no valid answer ({failure.reason}): {failure.message}")
        return EXIT_ERROR if failure.reason == "provider" else EXIT_NO_ANSWER
    from tether.display import json_dumps

    print(json_dumps(report.value if not hasattr(report.value, "model_dump")
                     else report.value.model_dump(mode="json"), indent=2))
    return EXIT_OK
