"""Workspace confinement: every path a file tool touches resolves inside the workspace.

A path from the model is joined to the workspace (absolute paths are taken as they are),
then resolved with every symlink followed. Only a result inside the resolved workspace is
used, and the tools open that resolved path (never the model's spelling), with
``O_NOFOLLOW`` on the last component, so a symlink cannot be slipped in afterwards at the
end of the path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tether.errors import TetherError


class WorkspaceError(TetherError):
    """A path the file tools will not touch; the message says why, for the model."""


@dataclass(frozen=True, slots=True)
class Confined:
    """A path known to be inside the workspace: ``path`` is resolved, ``shown`` is how the
    tools name it (relative to the workspace, ``.`` for the workspace itself)."""

    path: Path
    shown: str


def confine(workspace: Path, requested: str) -> Confined:
    """``requested`` resolved inside ``workspace``, or ``WorkspaceError`` saying why not.

    Refused: ``..`` that climbs out, absolute paths outside the workspace, and paths whose
    symlinks resolve to a place outside it. ``..`` that stays inside (``a/../b``) is fine.
    """
    if not isinstance(requested, str) or not requested.strip():
        raise WorkspaceError("the path is empty; give a path relative to the workspace")
    if "\x00" in requested:
        raise WorkspaceError("the path contains a NUL character")
    root = workspace.resolve()
    given = Path(requested)  # "~" is not expanded: it is an ordinary name here
    candidate = given if given.is_absolute() else root / given
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop, or a path the OS rejects
        raise WorkspaceError(f"{requested!r} cannot be resolved: {e}") from None
    if resolved.is_relative_to(root):
        return Confined(resolved, _shown(root, resolved))
    raise WorkspaceError(f"{requested!r} is outside the workspace: {_why(root, given)}. "
                         f"File tools only reach paths inside the workspace ({root}).")


# Paths inside the workspace that no tool may change: the agent's own configuration (its
# security policy: a write there would let the model widen its own tether), and git's
# internals (hooks are code that runs later, outside the gate).
PROTECTED_FILES = frozenset({"tether.toml"})
PROTECTED_DIRS = frozenset({".git"})


def tether_state_paths() -> list[Path]:
    """tether's own files outside any workspace: the user config folder, the session store
    (taint timelines a write could make cleaner) and the cache (the llama-server binary a
    write could replace). A workspace that contains them (your home folder) must not let a
    tool change them."""
    from tether.config import user_config_path
    from tether.local_setup import default_cache_dir
    from tether.store import default_store_path

    store = default_store_path()
    return [user_config_path().parent, default_cache_dir(), store,
            store.with_name(store.name + "-wal"), store.with_name(store.name + "-shm")]


def refuse_protected(confined: Confined) -> None:
    """``WorkspaceError`` when a write would change a protected path (see above)."""
    for state in tether_state_paths():
        try:
            inside = confined.path.is_relative_to(state.resolve())
        except OSError:
            continue
        if inside:
            raise WorkspaceError(f"{confined.shown} is one of tether's own files (its "
                                 f"configuration, sessions or cache); tools may not change it.")
    parts = Path(confined.shown).parts
    if confined.shown in PROTECTED_FILES:
        raise WorkspaceError(f"{confined.shown} holds the agent's own configuration, including "
                             f"its security policy; tools may not change it. Ask the user to "
                             f"edit it.")
    if any(part in PROTECTED_DIRS for part in parts):
        raise WorkspaceError(f"{confined.shown} is inside .git; tools may not change git's "
                             f"internals (hooks there run as code).")


def _why(root: Path, given: Path) -> str:
    if given.is_absolute():
        lexical = Path(os.path.normpath(given))
        if not lexical.is_relative_to(root):
            return "it is an absolute path to a place outside the workspace"
        return "it goes through a symlink that points outside the workspace"
    lexical = Path(os.path.normpath(root / given))
    if ".." in given.parts and not lexical.is_relative_to(root):
        return "'..' climbs out of the workspace"
    return "it goes through a symlink that points outside the workspace"


def _shown(root: Path, resolved: Path) -> str:
    rel = resolved.relative_to(root)
    return "." if rel == Path() else rel.as_posix()


def is_inside(workspace: Path, path: Path) -> bool:
    """Whether ``path`` (symlinks followed) is inside ``workspace``."""
    root = workspace.resolve()
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):
        return False
    return resolved.is_relative_to(root)


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def open_confined(confined: Confined, mode: str) -> IO[Any]:
    """Open a confined path; ``mode`` is ``"rb"``, ``"r"`` (UTF-8 text) or ``"w"`` (UTF-8,
    created or truncated). Refuses a symlink placed at the last component since it was
    resolved (``O_NOFOLLOW``)."""
    if mode in ("r", "rb"):
        flags = os.O_RDONLY
    elif mode == "w":
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    else:
        raise ValueError(f"unsupported mode {mode!r}")
    try:
        fd = os.open(confined.path, flags | _NOFOLLOW, 0o666)
    except OSError as e:
        raise WorkspaceError(f"cannot open {confined.shown}: {e.strerror or e}") from None
    if mode == "rb":
        return os.fdopen(fd, "rb")
    return os.fdopen(fd, mode, encoding="utf-8", newline="")
