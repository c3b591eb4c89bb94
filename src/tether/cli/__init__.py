"""The `tether` command: one module per command, each with ``add_cli(sub)``.

Exit codes: 0 answered, 1 error (a usage error too), 2 refused (the gate refused a call the
model asked for: denied, blocked, nobody to approve it; even if the model then answered; or
the run paused waiting for approval), 3 no answer, 130 interrupted (Ctrl-C: the
first press stops the run cleanly, a second aborts), 141 the reader of the output left
(``tether tools --json | head -1``), quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from tether.cli.common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_PIPE, error
from tether.errors import ConfigError, TetherError


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


def entry() -> NoReturn:
    """The `tether` program (``python -m tether.cli`` too): :func:`main`, then exit (a
    process that used Temporal in a way that survives temporalio's threads, see
    ``tether.temporal.exit_process``)."""
    code = main()
    if "tether.temporal" in sys.modules:
        from tether.temporal import exit_process
        exit_process(code)
    raise SystemExit(code)


def _reader_gone() -> None:
    """The reader of our output closed it early (``| head -1``). Whatever is still buffered
    goes nowhere: the streams are pointed at /dev/null, so the flush at interpreter exit
    cannot fail again and print a traceback. Toolsets were closed on the way out."""
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
        error(f"configuration: {e}")
        return EXIT_ERROR
    except TetherError as e:
        error(str(e))
        return EXIT_ERROR
    except KeyboardInterrupt:
        error("interrupted")
        return EXIT_INTERRUPTED


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors exit 1 (an error), not 2: 2 means the gate refused."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


class _CommandParser(_Parser):
    """A command's parser (``tether run``, ``tether sessions list``): an argument it does not
    know is its own error, shown with its own usage, not ``tether``'s."""

    def parse_known_args(  # type: ignore[override]
            self, args: Sequence[str] | None = None,
            namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    from tether import __version__
    from tether.cli import (
        approvals,
        batch,
        chat,
        config,
        doctor,
        eval,
        local,
        logs,
        mcp,
        run,
        serve,
        sessions,
        skills,
        tools,
        worker,
    )

    parser = _Parser(
        prog="tether", description="Run LLM agents on a tether: tools pass one gate.")
    parser.add_argument("--version", action="version", version=f"tether {__version__}")
    parser.add_argument("--workspace", "-w", default=".",
                        help="the workspace folder (tether.toml, file tools' root)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND",
                                parser_class=_CommandParser)
    for command in (run, tools, config, doctor, chat, batch, eval, sessions, logs, local,
                    worker, approvals, mcp, serve, skills):
        command.add_cli(sub)
    return parser


__all__ = ["build_parser", "entry", "main"]
