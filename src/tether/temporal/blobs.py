"""A content-addressed folder: what a durable run passes by reference instead of inline.

A blob is named by the SHA-256 of its bytes (``ab/cdef...``), written once (to a temporary
name, then renamed into place, so a reader never sees half a blob) and checked against its
name when read: a changed or truncated file is an error, never different content. Every
worker of a task queue must reach the same folder (a shared disk when workers run on
several machines); docs/scale.md says what that means for durability.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from tether.errors import TetherError

from .payloads import digest

_NAME = re.compile(r"^[0-9a-f]{64}$")


class BlobError(TetherError):
    """A blob is missing, changed, or cannot be written."""


class BlobStore:
    """``put(data) -> name``; ``get(name) -> data``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser()

    def _path(self, name: str) -> Path:
        if not _NAME.match(name):
            raise BlobError(f"{name!r} is not a blob name (a SHA-256 in hex)")
        return self.root / name[:2] / name[2:]

    def put(self, data: bytes) -> str:
        name = digest(data)
        path = self._path(name)
        if path.exists():
            return name  # content-addressed: the same name is the same bytes
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as e:
            raise BlobError(f"cannot write blob {name} under {self.root}: {e}") from None
        return name

    def get(self, name: str) -> bytes:
        path = self._path(name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise BlobError(
                f"blob {name} is not under {self.root}: every worker must reach the same "
                f"[temporal] blob_dir (a shared folder when workers run on several machines)"
            ) from None
        except OSError as e:
            raise BlobError(f"cannot read blob {name} under {self.root}: {e}") from None
        if digest(data) != name:
            raise BlobError(f"blob {name} under {self.root} was changed: its content no "
                            f"longer has its name's hash")
        return data
