"""Files given to the model with a prompt: images, text files, PDFs.

``Agent.run(prompt, attachments=[...])``, ``tether run -a FILE`` and ``/attach FILE`` in
``tether chat`` all end here. An attachment becomes message parts before the prompt:

- an image (PNG, JPEG, GIF, WebP, known by its first bytes) an ``Image`` part: every wire
  encodes it in the user's message; a wire or model that cannot take one refuses the
  request before it is sent (Chat Completions' ``accepts_images`` profile flag, Ollama's
  ``vision`` capability). An image makes the conversation untrusted as well as private
  (the loop's rule for any picture: its words can ask for anything, and no value in it
  traces), whether or not the attachment is ``trusted``;
- a text file its text, inlined;
- a PDF its text (``pypdf``, the ``pdf`` extra): no wire is sent the PDF itself.

An attached file is outside text, as text piped to ``tether run`` is: the model sees it
delimited as data (``tether.trust.outside_text``), the conversation counts as untrusted
from the start, and no call may act on a value found only there, unless the user vouches
for it (``trusted=True``, ``--trust-input``): then its text joins the prompt as the
user's own words.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tether.errors import ConfigError, TetherError
from tether.messages import Image, Part, Text
from tether.trust import outside_text

MAX_ATTACHMENT_BYTES = 20 * 1024 * 1024
"""The largest file attached (an image a wire takes is at most a few megabytes; a text
that long would not fit any window anyway)."""

# An image by its first bytes: a file's name or a server's word is not what it holds.
_IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
_PDF_MAGIC = b"%PDF-"
# What of a file's name goes into the delimiter the model sees: no quotes, brackets or
# line breaks (a name is written by whoever made the file).
_UNSAFE_NAME = re.compile(r"[^\w .,()+@-]")


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file given with a prompt: its ``name`` (for the model), its bytes, and whether the
    user vouches for it (``trusted``: its text joins the prompt as the user's words)."""

    name: str
    data: bytes
    trusted: bool = False

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], *, trusted: bool = False) -> Attachment:
        """The file at ``path`` (a ``TetherError`` when it cannot be read or is too large)."""
        file = Path(path).expanduser()
        try:
            size = file.stat().st_size
            if size > MAX_ATTACHMENT_BYTES:
                raise TetherError(f"cannot attach {file}: it is {size} bytes, more than "
                                  f"{MAX_ATTACHMENT_BYTES} (MAX_ATTACHMENT_BYTES)")
            data = file.read_bytes()
        except OSError as e:
            raise TetherError(f"cannot attach {file}: {e.strerror or e}") from None
        return cls(file.name, data, trusted)

    @property
    def media_type(self) -> str:
        """``image/...``, ``application/pdf`` or ``text/plain``, read from the bytes."""
        for magic, media_type in _IMAGE_MAGIC:
            if self.data.startswith(magic):
                return media_type
        if self.data[:4] == b"RIFF" and self.data[8:12] == b"WEBP":
            return "image/webp"
        if self.data.startswith(_PDF_MAGIC):
            return "application/pdf"
        return "text/plain"

    def parts(self) -> list[Part]:
        """The message parts this file becomes (see the module's docstring)."""
        media_type = self.media_type
        if media_type.startswith("image/"):
            return [Image(media_type, self.data)]
        text = pdf_text(self.data, self.name) if media_type == "application/pdf" \
            else self._text()
        label = f"attached file {safe_name(self.name)}"
        if self.trusted:
            return [Text(f"{label}:\n{text.rstrip()}\n\n")]
        return [outside_text(text, label)]

    def _text(self) -> str:
        if len(self.data) > MAX_ATTACHMENT_BYTES:
            raise TetherError(f"cannot attach {self.name}: more than {MAX_ATTACHMENT_BYTES} "
                              f"bytes")
        try:
            return self.data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise TetherError(
                f"cannot attach {safe_name(self.name)}: it is not an image (PNG, JPEG, GIF, "
                f"WebP), a PDF or UTF-8 text (byte 0x{self.data[e.start]:02x} at offset "
                f"{e.start})") from None


def safe_name(name: str) -> str:
    """A file's name as it may appear inside tether's delimiters: its last component, with
    anything but letters, digits and plain punctuation replaced, at most 80 characters."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1] or "file"
    return _UNSAFE_NAME.sub("_", base)[:80]


def pdf_text(data: bytes, name: str) -> str:
    """The text of a PDF's pages, one after another (``pypdf``, from the ``pdf`` extra)."""
    try:
        import pypdf  # a third-party extra: loaded only when a PDF is attached
    except ImportError:
        raise ConfigError(f"attaching a PDF ({safe_name(name)}) needs pypdf to read its text: "
                          f"pip install 'tether[pdf]'") from None
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except Exception as e:  # pypdf raises many kinds on a broken file
        raise TetherError(f"cannot read the PDF {safe_name(name)}: {e}") from None
    text = "\n\n".join(p.strip() for p in pages if p.strip())
    if not text:
        raise TetherError(f"the PDF {safe_name(name)} has no text to read (a scan? attach "
                          f"its pages as images)")
    return text


def attachment_parts(attachments: Iterable[Attachment | str | os.PathLike[str]],
                     *, trusted: bool = False) -> list[Part]:
    """The parts of ``attachments`` in order; a path is read as an ``Attachment``,
    ``trusted`` as given."""
    parts: list[Part] = []
    for item in attachments:
        attachment = item if isinstance(item, Attachment) else \
            Attachment.from_path(item, trusted=trusted)
        parts.extend(attachment.parts())
    return parts


__all__ = ["MAX_ATTACHMENT_BYTES", "Attachment", "attachment_parts", "pdf_text", "safe_name"]
