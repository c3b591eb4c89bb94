"""Built-in tools. Each declares its capabilities; the gate does the rest.

``select_builtins(enabled, disabled)`` picks them by name for ``[tools]`` in tether.toml.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tether.errors import ConfigError
from tether.tools import Tool

from .calculator import calculator


def _registry() -> dict[str, Callable[[], Tool]]:
    return {"calculator": lambda: calculator}


# What runs when [tools].enabled is not set. Opt-in tools (shell) are not listed here.
DEFAULT_ENABLED: tuple[str, ...] = ("calculator",)


def builtin_names() -> list[str]:
    return sorted(_registry())


def select_builtins(enabled: Sequence[str] | None, disabled: Sequence[str] = ()) -> list[Tool]:
    """The built-in tools named by ``enabled`` (None: the defaults) minus ``disabled``."""
    registry = _registry()
    names = list(DEFAULT_ENABLED if enabled is None else enabled)
    unknown = [n for n in [*names, *disabled] if n not in registry]
    if unknown:
        raise ConfigError(f"tools: unknown built-in tool(s) {', '.join(map(repr, unknown))}; "
                          f"built-ins: {', '.join(sorted(registry))}")
    return [registry[n]() for n in names if n not in set(disabled)]


__all__ = ["DEFAULT_ENABLED", "builtin_names", "calculator", "select_builtins"]
