"""Where tether keeps its own files, and the paths the file tools must leave alone.

A write to one of them would let a model change its own tether: the configuration (its
security policy), the session store (taint timelines made cleaner), the cache (the
llama-server binary), the Python files that define tools and their capabilities, tether's
own code. ``default_locations`` names the places every tether uses (environment
variables and defaults); ``tether.config`` adds what each configuration layer names (its
store, cache and tool files). The paths are values: they reach the built-in tools as
``SecurityConfig.protected_paths``, and the tools compare against them (see
``builtins/workspace.py``), never look them up.

A leaf: only ``os`` and ``pathlib`` (``SecurityConfig()`` calls ``default_locations``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path


def user_config_dir(env: Mapping[str, str]) -> Path:
    """``$XDG_CONFIG_HOME/tether``, else ``~/.config/tether``."""
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tether"


def default_store(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tether" / "sessions.db"


def default_blobs(env: Mapping[str, str]) -> Path:
    """Where ``tether.temporal`` keeps what it passes by reference, unless configured."""
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tether" / "temporal-blobs"


def oauth_dir(env: Mapping[str, str]) -> Path:
    """Where the tokens of MCP servers signed in to with OAuth are kept (one file each, 0600,
    in a 0700 folder)."""
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tether" / "oauth"


def default_cache(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tether"


def store_files(store: str | Path) -> list[Path]:
    """A SQLite store and the files SQLite keeps beside it."""
    path = Path(store).expanduser()
    if not path.name:  # "/" or ".": a folder, which no store opens; nothing beside it
        return [path]
    return [path, *(path.with_name(path.name + suffix) for suffix in ("-wal", "-shm",
                                                                      "-journal"))]


def default_locations(env: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """tether's files wherever the environment or the defaults put them: the user config
    folder and ``TETHER_CONFIG``, the session store (default and ``TETHER_STORE``), the cache
    (default and ``TETHER_CACHE_DIR``), MCP servers' OAuth tokens, and tether's own
    package."""
    env = os.environ if env is None else env
    paths: list[Path] = [user_config_dir(env), *store_files(default_store(env)),
                         default_cache(env), default_blobs(env), oauth_dir(env),
                         Path(__file__).resolve().parent]
    if env.get("TETHER_CONFIG"):
        paths.append(Path(env["TETHER_CONFIG"]).expanduser())
    if env.get("TETHER_STORE"):
        paths.extend(store_files(env["TETHER_STORE"]))
    if env.get("TETHER_CACHE_DIR"):
        paths.append(Path(env["TETHER_CACHE_DIR"]).expanduser())
    return unique(paths)


def unique(paths: Iterable[Path]) -> tuple[Path, ...]:
    seen: dict[str, Path] = {}
    for p in paths:
        seen.setdefault(str(p), p)
    return tuple(seen.values())
