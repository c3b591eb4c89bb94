"""The environment of a stdio MCP server: only what tether chooses to pass."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence

# The variables a stdio server inherits from tether's environment unless more are named
# (env_passthrough): enough to find programs and format text, nothing that holds secrets.
ALLOWED_ENV: tuple[str, ...] = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")


def child_environment(
    env: Mapping[str, str] | None = None,
    passthrough: Iterable[str] = (),
    parent: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment a stdio server gets: ``ALLOWED_ENV`` and the ``passthrough`` names
    that are set in ``parent`` (default: ``os.environ``), then ``env`` over them."""
    parent = os.environ if parent is None else parent
    out = {k: parent[k] for k in (*ALLOWED_ENV, *passthrough) if k in parent}
    out.update(env or {})
    return out


def exact_env_command(command: str, args: Sequence[str],
                      env: Mapping[str, str]) -> tuple[str, list[str]]:
    """The command line that gives the child exactly ``env``.

    The SDK's ``stdio_client`` always merges its own default set (HOME, LOGNAME, PATH,
    SHELL, TERM, USER) under the ``env`` it is given; ``env -u NAME`` removes the ones
    tether did not choose. Values never appear on the command line, only names. Where there
    is no ``env`` program (Windows) the SDK's defaults stay.
    """
    from mcp.client.stdio import get_default_environment

    extra = sorted(k for k in get_default_environment() if k not in env)
    env_program = shutil.which("env") if sys.platform != "win32" else None
    if not extra or env_program is None:
        return command, list(args)
    unset = [flag for name in extra for flag in ("-u", name)]
    return env_program, [*unset, "--", command, *args]
