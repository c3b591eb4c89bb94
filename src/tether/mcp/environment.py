"""The environment of a stdio MCP server: only what tether chooses to pass."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

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
