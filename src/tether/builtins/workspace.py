"""Workspace confinement: every path a file tool touches resolves inside the workspace.

A path from the model is joined to the workspace (absolute paths are taken as they are),
then resolved with every symlink followed. Only a result inside the resolved workspace is
used, and the tools open that resolved path (never the model's spelling), with
``O_NOFOLLOW`` on the last component, so a symlink cannot be slipped in afterwards at the
end of the path.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
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


def confine_read(workspace: Path, requested: str, readable: Sequence[Path] = ()) -> Confined:
    """``requested`` resolved inside ``workspace`` (``confine``), or, for a read only, given
    as an absolute path inside one of the ``readable`` folders (a skill's: named as it is,
    whole); else the workspace's refusal."""
    try:
        return confine(workspace, requested)
    except WorkspaceError:
        if not readable or not Path(requested).is_absolute():
            raise
        for root in readable:
            try:
                inside = confine(root, requested)
            except WorkspaceError:
                continue
            return Confined(inside.path, str(inside.path))
        raise


# Paths inside the workspace that no tool may change: the agent's own configuration (its
# security policy: a write there would let the model widen its own tether), and git's
# internals (hooks are code that runs later, outside the gate). tether's files elsewhere
# come in as ``protected`` paths.
def refuse_protected(confined: Confined, protected: Sequence[Path] = ()) -> None:
    """``WorkspaceError`` when a write would change a protected path: the workspace's own
    ``tether.toml``, anything in ``.git``, and every path in ``protected`` (tether's own
    files, ``SecurityConfig.protected_paths``: passed in, never looked up here)."""
    for path in protected:
        if _covers(path, confined.path):
            raise WorkspaceError(f"{confined.shown} is one of tether's own files (its "
                                 f"configuration, sessions, cache or tool definitions); tools "
                                 f"may not change it.")
    parts = Path(confined.shown).parts
    if _names_equal(confined.shown, "tether.toml", confined.path.parent):
        raise WorkspaceError(f"{confined.shown} holds the agent's own configuration, including "
                             f"its security policy; tools may not change it. Ask the user to "
                             f"edit it.")
    if any(_names_equal(part, ".git", confined.path.parent) for part in parts):
        raise WorkspaceError(f"{confined.shown} is inside .git; tools may not change git's "
                             f"internals (hooks there run as code).")


def _covers(protected: Path, target: Path) -> bool:
    """Whether ``target`` (resolved) is ``protected`` or inside it, as the file system sees
    it: by spelling (case-folded where the file system ignores case), and for what exists,
    by identity (same device and inode: another spelling, a hard link, a bind mount)."""
    try:
        root = protected.expanduser().resolve()
    except (OSError, RuntimeError):
        root = Path(os.path.abspath(protected.expanduser()))
    if target.is_relative_to(root):
        return True
    try:
        marker = root.stat()
    except OSError:
        marker = None
    if marker is not None:
        for candidate in (target, *target.parents):
            try:
                if os.path.samestat(candidate.stat(), marker):
                    return True
            except OSError:
                continue
    if _case_insensitive(root) or _case_insensitive(target):
        folded_root, folded = str(root).casefold(), str(target).casefold()
        return folded == folded_root or folded.startswith(folded_root.rstrip(os.sep) + os.sep)
    return False


def _names_equal(name: str, protected_name: str, where: Path) -> bool:
    if name == protected_name:
        return True
    return name.casefold() == protected_name.casefold() and _case_insensitive(where)


def _case_insensitive(path: Path) -> bool:
    """Whether the file system holding ``path`` ignores case: found by looking up the
    nearest existing name that has letters under its other case."""
    for candidate in (path, *path.parents):
        name = candidate.name
        if not name or name.swapcase() == name:
            continue
        try:
            if not candidate.exists():
                continue
            other = candidate.with_name(name.swapcase())
            return other.exists() and os.path.samefile(candidate, other)
        except OSError:
            continue
    return os.path.normcase("A") == "a"  # no letters to try: the platform's rule


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
