"""Confinement for the commands tools run: the ``shell`` built-in and stdio MCP servers.

A ``Sandbox`` says what a command may do (the network, more paths to read or write, more
environment variables); ``confine`` turns a command into one that runs inside bubblewrap or
Landlock (``probe.choose`` picks, once per machine); ``run_confined`` runs it bounded in time
and output. What is hidden and what each mechanism enforces: docs/security.md, "Sandbox".
"""

from __future__ import annotations

from .probe import Mechanism, choose, describe
from .run import Completed, Confined, confine, release, run_confined
from .settings import ALLOWED_ENV, HOME_SECRETS, Sandbox, SandboxMode, hidden_paths

__all__ = [
    "ALLOWED_ENV",
    "HOME_SECRETS",
    "Completed",
    "Confined",
    "Mechanism",
    "Sandbox",
    "SandboxMode",
    "choose",
    "confine",
    "describe",
    "hidden_paths",
    "release",
    "run_confined",
]
