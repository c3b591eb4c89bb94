"""A `tether` child process on a pseudo-terminal, for what only a terminal shows (the
spinner, Markdown, Ctrl-C at the prompt): what it writes is read until a marker appears.

The terminal is the child's controlling terminal, the child a session of its own in the
terminal's foreground, so keys typed there act as they do for a person: ``press(b"\\x03")``
is a Ctrl-C (the terminal sends SIGINT, echoes ``^C`` and drops the line being typed)."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

_TAKE_TERMINAL = """
import fcntl, runpy, sys, termios
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
sys.argv[0] = "tether"
runpy.run_module("tether.cli", run_name="__main__", alter_sys=True)
"""


class Terminal:
    """``python -m tether.cli ARGS`` with its stdin, stdout and stderr on one terminal."""

    def __init__(self, args: list[str], env: Mapping[str, str], cwd: Path | None = None,
                 wait: float = 60.0) -> None:
        self.wait = wait
        self.screen = b""
        self._after = 0  # where the next marker is looked for
        self._primary, secondary = pty.openpty()
        try:
            # A new session (setsid, done by subprocess in C) that takes the terminal as its
            # controlling one before tether starts.
            self.proc = subprocess.Popen([sys.executable, "-c", _TAKE_TERMINAL, *args],
                                         stdin=secondary, stdout=secondary, stderr=secondary,
                                         env=dict(env), cwd=cwd, close_fds=True,
                                         start_new_session=True)
        finally:
            os.close(secondary)

    def press(self, keys: bytes) -> None:
        """Type ``keys`` at the terminal (``b"y\\r"``, ``b"\\x03"`` for Ctrl-C)."""
        os.write(self._primary, keys)

    def read_until(self, marker: bytes | None) -> None:
        """Read until ``marker`` is on the screen after the previous marker found (None:
        until the terminal closes), so waiting for a prompt twice waits for the second."""
        while marker is None or marker not in self.screen[self._after:]:
            ready, _, _ = select.select([self._primary], [], [], self.wait)
            assert ready, f"waited for {marker!r}: {self.text}"
            try:
                data = os.read(self._primary, 4096)
            except OSError:  # the terminal closed: the process is done
                return
            if not data:
                return
            self.screen += data
        if marker is not None:
            self._after = self.screen.index(marker, self._after) + len(marker)

    @property
    def text(self) -> str:
        return self.screen.decode(errors="replace")

    @property
    def visible(self) -> str:
        """What a person sees once it is all written: the text with the line editing rich
        does (carriage return, erase line, cursor up) applied and colours dropped."""
        lines: list[list[str]] = [[]]
        row = col = 0
        for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|\r|\n|[^\x1b\r\n]",
                                self.text):
            if token == "\r":
                col = 0
            elif token == "\n":
                row += 1
                col = 0
                if row == len(lines):
                    lines.append([])
            elif token.startswith("\x1b["):
                if token.endswith("K"):
                    lines[row] = lines[row][:col] if token[2:-1] in ("", "0") else []
                elif token.endswith("A"):
                    row = max(0, row - int(token[2:-1] or 1))
            else:
                line = lines[row]
                line.extend(" " * (col - len(line)))
                line[col:col + 1] = [token]
                col += 1
        return "\n".join("".join(line).rstrip() for line in lines)

    def close(self) -> None:
        """Kill the process if it still runs; close the terminal."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self._primary)
