"""File tools confined to the workspace: ``read_file``, ``list_dir``, ``grep`` (private data)
and ``write_file``, ``edit_file`` (destructive, so they pass the approval gate).

Every failure is a result the model can act on (``ToolOutput(is_error=True)``) that says
what went wrong and what to do instead.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from tether.tools.function import tool
from tether.tools.tool import Tool, ToolContext, ToolOutput
from tether.trust import Capabilities

from .workspace import (
    Confined,
    WorkspaceError,
    confine,
    confine_read,
    is_inside,
    open_confined,
    refuse_protected,
)

PRIVATE = Capabilities(private_data=True)
DESTRUCTIVE = Capabilities(destructive=True)

MAX_READ_CHARS = 100_000  # per read_file call; the model pages on with offset
MAX_LINES = 10_000
MAX_LIST_ENTRIES = 1_000
MAX_GREP_RESULTS = 1_000
MAX_GREP_LINE_CHARS = 300  # a matching line is shown cut to this
_SNIFF_BYTES = 8192
# Folders grep does not descend into unless asked for by path: tool caches and VCS data.
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv",
                          ".mypy_cache", ".ruff_cache", ".pytest_cache"})


def _error(message: str) -> ToolOutput:
    return ToolOutput(f"Error: {message}", is_error=True)


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head


# --- read_file ----------------------------------------------------------------------------


def _read_file(ctx: ToolContext, path: str, offset: int = 1, limit: int = 2000) -> ToolOutput:
    """Read a UTF-8 text file in the workspace, ``limit`` lines from line ``offset``.

    Args:
        path: the file, relative to the workspace.
        offset: the first line to return, counting from 1.
        limit: how many lines to return at most (up to 10000).
    """
    if offset < 1:
        return _error("offset counts lines from 1; use offset=1 for the start of the file")
    if limit < 1:
        return _error("limit must be at least 1")
    limit = min(limit, MAX_LINES)
    try:
        target = confine_read(ctx.workspace, path, ctx.security.readable_paths)
        if target.path.is_dir():
            return _error(f"{target.shown} is a directory; use list_dir to see what it holds")
        if not target.path.exists():
            return _error(f"{target.shown} does not exist; use list_dir to see what exists")
        with open_confined(target, "rb") as f:
            if _is_binary(f.read(_SNIFF_BYTES)):
                return _error(f"{target.shown} is a binary file; read_file shows text only")
            f.seek(0)
            return _read_lines(target, f, offset, limit)
    except WorkspaceError as e:
        return _error(str(e))


def _read_lines(target: Confined, f: IO[bytes], offset: int, limit: int) -> ToolOutput:
    out: list[str] = []
    size = 0
    number = 0
    more = False
    stopped_for_size = False
    for raw in f:
        number += 1
        if number < offset:
            continue
        if len(out) >= limit:
            more = True
            break
        line = raw.decode("utf-8", errors="replace")
        if out and size + len(line) > MAX_READ_CHARS:
            stopped_for_size = more = True
            break
        out.append(line)
        size += len(line)
    if not out:
        if number == 0:
            return ToolOutput(f"({target.shown} is empty)")
        return _error(f"{target.shown} has {number} lines; offset {offset} is past the end")
    text = "".join(out)
    if more:
        last = offset + len(out) - 1
        why = "size bound reached" if stopped_for_size else f"limit of {limit} lines"
        text += (f"\n[... {why}: showed lines {offset}-{last}; call read_file with "
                 f"offset={last + 1} to read on]")
    return ToolOutput(text)


read_file: Tool = tool(name="read_file", capabilities=PRIVATE, idempotent=True)(_read_file)


# --- list_dir -----------------------------------------------------------------------------


def _list_dir(ctx: ToolContext, path: str = ".") -> ToolOutput:
    """List a folder in the workspace: folders end in "/", symlinks in "@".

    Args:
        path: the folder, relative to the workspace ("." is the workspace itself).
    """
    try:
        target = confine_read(ctx.workspace, path, ctx.security.readable_paths)
    except WorkspaceError as e:
        return _error(str(e))
    if not target.path.is_dir():
        what = "a file; use read_file" if target.path.exists() else "not there"
        return _error(f"{target.shown} is {what}")
    try:
        with os.scandir(target.path) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as e:
        return _error(f"cannot list {target.shown}: {e.strerror or e}")
    lines = []
    for entry in entries[:MAX_LIST_ENTRIES]:
        if entry.is_symlink():
            lines.append(entry.name + "@")
        elif entry.is_dir():
            lines.append(entry.name + "/")
        else:
            lines.append(entry.name)
    if not lines:
        return ToolOutput(f"({target.shown} is empty)")
    if len(entries) > MAX_LIST_ENTRIES:
        lines.append(f"[... {len(entries) - MAX_LIST_ENTRIES} more entries not shown]")
    return ToolOutput("\n".join(lines))


list_dir: Tool = tool(name="list_dir", capabilities=PRIVATE, idempotent=True)(_list_dir)


# --- grep ---------------------------------------------------------------------------------


def _grep(ctx: ToolContext, pattern: str, path: str = ".", include: str | None = None,
          ignore_case: bool = False, max_results: int = 100) -> ToolOutput:
    """Search text files under a path in the workspace for a regular expression (Python
    syntax). Prints "file:line: text" for each matching line. Tool caches and VCS folders
    (.git, node_modules, .venv, __pycache__ ...) are skipped unless path names them.

    Args:
        pattern: a Python regular expression, searched in each line.
        path: a file or folder, relative to the workspace.
        include: only files whose name matches this glob, e.g. "*.py".
        ignore_case: match letters in either case.
        max_results: stop after this many matching lines (up to 1000).
    """
    try:
        regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as e:
        return _error(f"the pattern is not a valid Python regular expression: {e}")
    if max_results < 1:
        return _error("max_results must be at least 1")
    max_results = min(max_results, MAX_GREP_RESULTS)
    try:
        target = confine(ctx.workspace, path)
    except WorkspaceError as e:
        return _error(str(e))
    if not target.path.exists():
        return _error(f"{target.shown} does not exist")
    root = ctx.workspace.resolve()
    hits: list[str] = []
    truncated = False
    for file in _walk(root, target.path):
        if include is not None and not fnmatch.fnmatch(file.name, include):
            continue
        for number, line in _text_lines(file):
            if regex.search(line):
                if len(hits) >= max_results:
                    truncated = True
                    break
                shown = line.rstrip("\r\n")
                if len(shown) > MAX_GREP_LINE_CHARS:
                    shown = shown[:MAX_GREP_LINE_CHARS] + " [...]"
                hits.append(f"{file.relative_to(root).as_posix()}:{number}: {shown}")
        if truncated:
            break
    if not hits:
        return ToolOutput(f"no matches for {pattern!r} under {target.shown}")
    if truncated:
        hits.append(f"[... stopped at {max_results} matches; narrow the pattern or path, or "
                    f"raise max_results]")
    return ToolOutput("\n".join(hits))


def _walk(root: Path, start: Path) -> Iterator[Path]:
    """Files under ``start`` whose real location is inside the workspace, in sorted order.
    Symlinks are never followed out: a linked file is searched only if it resolves inside,
    and linked folders are not descended into (os.walk's default)."""
    if start.is_file():
        yield start
        return
    for folder, dirs, files in os.walk(start):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            file = Path(folder) / name
            if file.is_symlink() and not is_inside(root, file):
                continue
            yield file


def _text_lines(file: Path) -> Iterator[tuple[int, str]]:
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)) \
            if not file.is_symlink() else os.open(file.resolve(), os.O_RDONLY)
    except OSError:
        return  # unreadable or gone: nothing to search
    with os.fdopen(fd, "rb") as f:
        if _is_binary(f.read(_SNIFF_BYTES)):
            return
        f.seek(0)
        for number, raw in enumerate(f, 1):
            yield number, raw.decode("utf-8", errors="replace")


grep: Tool = tool(name="grep", capabilities=PRIVATE, idempotent=True)(_grep)


# --- write_file and edit_file -------------------------------------------------------------


def _write_file(ctx: ToolContext, path: str, content: str) -> ToolOutput:
    """Create or overwrite a UTF-8 text file in the workspace (missing folders are made).

    Args:
        path: the file, relative to the workspace.
        content: the whole new content of the file.
    """
    try:
        target = confine(ctx.workspace, path)
        refuse_protected(target, ctx.security.protected_paths)
        if target.path.is_dir():
            return _error(f"{target.shown} is a directory")
        existed = target.path.exists()
        target.path.parent.mkdir(parents=True, exist_ok=True)
        # mkdir may have followed nothing new, but check again: a folder swapped for a
        # symlink between confine() and here must not send the write outside.
        target = confine(ctx.workspace, target.shown)
        with open_confined(target, "w") as f:
            f.write(content)
    except WorkspaceError as e:
        return _error(str(e))
    except OSError as e:
        return _error(f"cannot write {path!r}: {e.strerror or e}")
    size = len(content.encode("utf-8"))
    return ToolOutput(f"{'Overwrote' if existed else 'Created'} {target.shown} ({size} bytes)")


# The path is control (what is changed); the text only content.
write_file: Tool = tool(name="write_file", capabilities=DESTRUCTIVE,
                        content_params=["content"])(_write_file)


def _edit_file(ctx: ToolContext, path: str, old_text: str, new_text: str) -> ToolOutput:
    """Replace one exact occurrence of old_text with new_text in a text file in the
    workspace. old_text must match exactly once: include enough surrounding lines.

    Args:
        path: the file, relative to the workspace.
        old_text: the exact text to replace (whitespace and line breaks included).
        new_text: the text to put in its place.
    """
    if not old_text:
        return _error("old_text is empty; give the exact text to replace "
                      "(use write_file to create a file)")
    try:
        target = confine(ctx.workspace, path)
        refuse_protected(target, ctx.security.protected_paths)
        if not target.path.is_file():
            return _error(f"{target.shown} is not a file; use write_file to create it")
        with open_confined(target, "r") as f:
            text = f.read()
    except WorkspaceError as e:
        return _error(str(e))
    except UnicodeDecodeError:
        return _error(f"{path!r} is not UTF-8 text; edit_file edits UTF-8 text only")
    count = text.count(old_text)
    if count == 0 and "\r\n" in text and "\r\n" not in old_text and "\n" in old_text:
        # The file uses CRLF; the model wrote LF. Same text, so match it as the file has it.
        old_text, new_text = old_text.replace("\n", "\r\n"), new_text.replace("\n", "\r\n")
        count = text.count(old_text)
    if count == 0:
        return _error(f"old_text was not found in {target.shown}; nothing was changed. "
                      f"Read the file and copy the text exactly, whitespace included.")
    if count > 1:
        lines = _match_lines(text, old_text)
        return _error(f"old_text matches {count} times in {target.shown} (at lines "
                      f"{', '.join(map(str, lines))}); nothing was changed. Include more "
                      f"surrounding text so it matches exactly once.")
    updated = text.replace(old_text, new_text, 1)
    try:
        with open_confined(target, "w") as f:
            f.write(updated)
    except WorkspaceError as e:
        return _error(str(e))
    line = text[: text.index(old_text)].count("\n") + 1
    return ToolOutput(f"Edited {target.shown}: replaced 1 occurrence at line {line}")


def _match_lines(text: str, needle: str, at_most: int = 10) -> list[int]:
    lines: list[int] = []
    start = 0
    while len(lines) < at_most:
        i = text.find(needle, start)
        if i < 0:
            break
        lines.append(text.count("\n", 0, i) + 1)
        start = i + 1
    return lines


edit_file: Tool = tool(name="edit_file", capabilities=DESTRUCTIVE,
                       content_params=["old_text", "new_text"])(_edit_file)
