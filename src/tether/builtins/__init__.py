"""Built-in tools. Each declares its capabilities; the gate does the rest.

``select_builtins(enabled, disabled)`` picks them by name for ``[tools]`` in tether.toml.

============  ==========================================  ==============
tool          capabilities                                approval
============  ==========================================  ==============
calculator    none                                        no
read_file     private_data                                no
list_dir      private_data                                no
grep          private_data                                no
write_file    destructive                                 yes
edit_file     destructive                                 yes
fetch_url     untrusted_input, external_send              no
shell         private_data, destructive (+ external_send  yes (opt-in)
              with the sandbox's network on, or no sandbox)
============  ==========================================  ==============

File tools are confined to the agent's workspace (see ``workspace.py``); ``fetch_url``
follows ``SecurityConfig``'s network rules (see ``fetch.py``); ``shell`` runs inside a sandbox
(``tether.sandbox``). Every failure of a built-in is
an error result (``ToolOutput(is_error=True)``, or an exception): never a success that says
"Error".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from tether.errors import ConfigError
from tether.sandbox import Sandbox
from tether.tools.tool import Tool

from .calculator import calculator
from .fetch import FetchLimits, fetch_url, make_fetch_url
from .files import edit_file, grep, list_dir, read_file, write_file
from .shell import make_shell, shell
from .workspace import WorkspaceError


def _registry(sandbox: Sandbox | None = None,
              shell_allow: Sequence[str] = ()) -> dict[str, Callable[[], Tool]]:
    return {
        "calculator": lambda: calculator,
        "read_file": lambda: read_file,
        "list_dir": lambda: list_dir,
        "grep": lambda: grep,
        "write_file": lambda: write_file,
        "edit_file": lambda: edit_file,
        "fetch_url": lambda: fetch_url,
        "shell": lambda: shell if sandbox is None and not shell_allow else make_shell(
            sandbox=sandbox, allow=shell_allow),
    }


# What runs when [tools].enabled is not set. Opt-in tools (shell) are not listed here.
DEFAULT_ENABLED: tuple[str, ...] = (
    "calculator", "read_file", "list_dir", "grep", "write_file", "edit_file", "fetch_url",
)


def builtin_names() -> list[str]:
    return sorted(_registry())


def select_builtins(enabled: Sequence[str] | None, disabled: Sequence[str] = (), *,
                    sandbox: Sandbox | None = None,
                    shell_allow: Sequence[str] = ()) -> list[Tool]:
    """The built-in tools named by ``enabled`` (None: the defaults) minus ``disabled``;
    ``shell`` runs inside ``sandbox`` (default: ``Sandbox()``), and runs the command names
    of ``shell_allow`` unasked beside its read-only list (``[tools.shell] allow``)."""
    registry = _registry(sandbox, shell_allow)
    names = list(DEFAULT_ENABLED if enabled is None else enabled)
    unknown = [n for n in [*names, *disabled] if n not in registry]
    if unknown:
        raise ConfigError(f"tools: unknown built-in tool(s) {', '.join(map(repr, unknown))}; "
                          f"built-ins: {', '.join(sorted(registry))}")
    # Marked as built-ins so `tether tools` tells them apart from the user's own tools.
    return [replace(registry[n](), origin="builtin") for n in names if n not in set(disabled)]


__all__ = [
    "DEFAULT_ENABLED",
    "FetchLimits",
    "WorkspaceError",
    "builtin_names",
    "calculator",
    "edit_file",
    "fetch_url",
    "grep",
    "list_dir",
    "make_fetch_url",
    "make_shell",
    "read_file",
    "select_builtins",
    "shell",
    "write_file",
]
