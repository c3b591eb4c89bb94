"""A `tether` child process on a pseudo-terminal, for what only a terminal shows (the
spinner, Markdown, Ctrl-C at the prompt): what it writes is read until a marker appears."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


class Terminal:
    """``python -m tether.cli ARGS`` with its stdin, stdout and stderr on one terminal."""

    def __init__(self, args: list[str], env: Mapping[str, str], cwd: Path | None = None,
                 wait: float = 60.0) -> None:
        self.wait = wait
        self.screen = b""
        self._primary, secondary = pty.openpty()
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "tether.cli", *args],
                                         stdin=secondary, stdout=secondary, stderr=secondary,
                                         env=dict(env), cwd=cwd, close_fds=True)
        finally:
            os.close(secondary)

    def read_until(self, marker: bytes | None) -> None:
        """Read until ``marker`` is on the screen (None: until the terminal closes)."""
        while marker is None or marker not in self.screen:
            ready, _, _ = select.select([self._primary], [], [], self.wait)
            assert ready, f"waited for {marker!r}: {self.text}"
            try:
                data = os.read(self._primary, 4096)
            except OSError:  # the terminal closed: the process is done
                return
            if not data:
                return
            self.screen += data

    @property
    def text(self) -> str:
        return self.screen.decode(errors="replace")

    def close(self) -> None:
        """Kill the process if it still runs; close the terminal."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self._primary)
