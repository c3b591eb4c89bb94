"""What every `tether` command shares: exit codes, the run flags, building an Agent from
them, the error line, the clean first Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import signal
import sys
from collections.abc import Iterator
from typing import Any

from tether.errors import ConfigError

EXIT_OK, EXIT_ERROR, EXIT_REFUSED, EXIT_NO_ANSWER = 0, 1, 2, 3


EXIT_INTERRUPTED = 130  # as a shell reports a process ended by Ctrl-C


EXIT_PIPE = 141  # as a shell reports a process ended by SIGPIPE: the reader left


def add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--provider", help="a [providers.NAME] entry of tether.toml")
    p.add_argument("--model", help="the model name to ask for")
    p.add_argument("--max-turns", type=int, help="bound on model turns")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--context", choices=("trim", "summarize", "off"),
                   help="how a conversation longer than the model's window is sent "
                        "([agent] context)")
    p.add_argument("--yes", "-y", action="store_true",
                   help="allow tools that need approval without asking (permission_mode=allow)")
    p.add_argument("--read-only", action="store_true",
                   help="only tools that change nothing may run (permission_mode=read-only)")
    p.add_argument("--otel", action="store_true",
                   help="trace the runs with OpenTelemetry, exported over OTLP as the "
                        "OTEL_EXPORTER_OTLP_* variables say (needs opentelemetry-sdk and an "
                        "OTLP exporter)")


def error(message: str) -> None:
    from rich.console import Console

    from tether.display import shown

    # Messages quote what servers, tools and models wrote: printed literally.
    Console(stderr=True, highlight=False).print(shown(("tether:", "red"), f" {message}"))


def overrides(args: argparse.Namespace) -> dict[str, Any]:
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
    if getattr(args, "context", None):
        out.setdefault("agent", {})["context"] = args.context
    if getattr(args, "yes", False) and getattr(args, "read_only", False):
        raise ConfigError("--yes and --read-only contradict each other; choose one")
    if getattr(args, "yes", False):
        out.setdefault("tools", {})["permission_mode"] = "allow"
    if getattr(args, "read_only", False):
        out.setdefault("tools", {})["permission_mode"] = "read-only"
    if getattr(args, "otel", False):
        out.setdefault("telemetry", {})["enabled"] = True
    return out


def make_agent(args: argparse.Namespace, **agent_kwargs: Any) -> tuple[Any, Any]:
    """(agent, config) for a command's flags; a console approver when a person is there."""
    from tether.config import agent_from_config, load_config

    cfg = load_config(args.workspace, overrides(args))
    if getattr(args, "tool_files", None):
        from tether.config.tool_files import load_tool_references

        agent_kwargs.setdefault("tools", load_tool_references(args.tool_files))
        agent_kwargs.setdefault("tool_files", list(args.tool_files))
    if "approver" not in agent_kwargs and sys.stdin.isatty():
        from tether.approval import ConsoleApprover

        agent_kwargs["approver"] = ConsoleApprover()
    agent = agent_from_config(args.workspace, config=cfg, **agent_kwargs)
    return agent, cfg


def telemetry_export(cfg: Any) -> contextlib.AbstractContextManager[None]:
    """While a command's agent runs: the OTLP export of its spans and metrics when its runs
    are traced (``--otel``, or ``[telemetry] enabled``), nothing otherwise. A command is its
    own host, so it sets up the export, and sends what is buffered before it exits."""
    if not cfg.telemetry.enabled:
        return contextlib.nullcontext()
    from tether.telemetry.export import otlp_export

    return otlp_export()


def no_provider_help(cfg: Any, error: Exception) -> str:
    name, pcfg = cfg.provider_config()
    return (f"{error}\n\nNo model server answered for provider {name!r} at {pcfg.base_url}. "
            f"Either start a local one (`tether local serve`, or `tether run --local ...`), "
            f"or point tether at a server in ./tether.toml (`tether config init` writes one):\n"
            f"  [providers.{name}]\n  kind = \"openai-chat\"\n"
            f"  base_url = \"http://127.0.0.1:8080/v1\"\n  model = \"...\"\n"
            f"and select it with default_provider or --provider.")


@contextlib.contextmanager
def graceful_interrupt() -> Iterator[asyncio.Event]:
    """The first Ctrl-C stops the run cleanly (stop cause "interrupted", the
    conversation kept valid); a second one aborts at once."""
    interrupt = asyncio.Event()
    loop = asyncio.get_running_loop()

    def first_press() -> None:
        interrupt.set()
        error("interrupting (Ctrl-C again to abort now)")
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
