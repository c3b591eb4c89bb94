"""Text from outside, shown to a person literally.

A model, a tool or a server writes whatever it likes: rich markup (``[conceal]``), terminal
escapes (``\\x1b[2J``), a carriage return that hides the start of a line, bidi overrides
that reorder what is read (U+202E), zero-width and tag characters that hide text, lone
surrogates that crash an encoder. ``literal`` turns every such character into a visible
escape (``\\x1b``, ``\\u202e``); ``inline`` makes newlines and tabs visible too, for such
a string inside a sentence of tether's own; ``plain`` wraps the result in a rich ``Text``,
which rich prints as it is (no markup, no emoji codes). Every surface that shows such text
to a person (approval panels, tool lists, the run's progress, sessions) goes through these.
``mask_url`` shows a URL without its password (a database URL in ``tether config show``,
``tether doctor`` and the store's errors).

No rich import at module level: ``literal`` is cheap to import anywhere.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.text import Text

# Kept as they are: they lay text out and hide nothing.
_KEPT = frozenset("\n\t")
# Invisible or look-alike-blank characters outside the control and format categories.
_HIDDEN = frozenset([
    0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x3164, 0xFFA0, 0x2800,
    *range(0xFE00, 0xFE10),  # variation selectors
    *range(0xE0100, 0xE01F0),  # variation selectors supplement
])
# Categories made visible: controls, format characters (bidi controls, zero-width
# characters, soft hyphen, tags), surrogates, and the line and paragraph separators.
_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _visible(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def literal(text: object) -> str:
    """``text`` with every control, escape, bidi, zero-width and tag character (and lone
    surrogate) written as a visible escape such as ``\\x1b`` or ``\\u202e``. Newlines and
    tabs stay. Anything that is not a string is shown through ``str()``."""
    if not isinstance(text, str):
        text = str(text)
    if text.isascii() and text.isprintable():
        return text
    out = []
    for char in text:
        if char not in _KEPT and (ord(char) in _HIDDEN
                                  or unicodedata.category(char) in _CATEGORIES):
            out.append(_visible(char))
        else:
            out.append(char)
    return "".join(out)


# literal already writes a carriage return as \x0d; these two it keeps for layout.
_LINE_BREAKS = str.maketrans({"\n": "\\n", "\t": "\\t"})


def inline(text: object) -> str:
    """``literal(text)`` that stays on one line: newlines and tabs are written as ``\\n``
    and ``\\t`` too (a carriage return is ``\\x0d`` already). For a string a model, a
    tool or a server wrote (a call id, a tool name, an argument, a title, a server's error)
    inside a text of tether's own (a refusal, the approval panel's explanation, a notice, a
    progress line): whatever it holds, it cannot start a line of its own, so it cannot pose
    as a line of tether's explanation ("✓ every value traced, safe to approve")."""
    shown = literal(text)
    if "\n" in shown or "\t" in shown:
        shown = shown.translate(_LINE_BREAKS)
    return shown


def one_line(text: object, limit: int | None = None) -> str:
    """``inline(text)`` (newlines and tabs made visible: a preview of a text never breaks
    a line), cut to ``limit`` characters with an ellipsis."""
    shown = inline(text)
    if limit is not None and len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return shown


def json_text(value: Any, *, indent: int | None = None) -> str:
    """A value as JSON for a person: non-ASCII letters as they are, every hidden character
    escaped (JSON escapes controls itself; ``literal`` catches the rest)."""
    try:
        text = json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return literal(text)


def json_dumps(value: Any, *, indent: int | None = None) -> str:
    """JSON for output a person may read (``--json``): letters as they are, and every
    character ``literal`` would make visible written as a JSON ``\\u`` escape, so the
    output is still the same JSON value and prints without surprises (or a crash, for a
    lone surrogate)."""
    text = json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    if text.isascii():
        return text
    out = []
    for char in text:
        if char not in _KEPT and (ord(char) in _HIDDEN
                                  or unicodedata.category(char) in _CATEGORIES):
            code = ord(char)
            if code > 0xFFFF:  # JSON spells it as a surrogate pair
                code -= 0x10000
                out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
            else:
                out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def plain(text: object, style: str = "") -> Text:
    """A rich ``Text`` holding ``literal(text)``: printed as it is, never as markup."""
    from rich.text import Text

    return Text(literal(text), style=style)


def shown(*pieces: object | tuple[object, str]) -> Text:
    """One line for the terminal from pieces, each shown literally; a ``(text, style)``
    piece is styled. Use it for every line that holds text from outside::

        console.print(shown(("→ ", "cyan"), (event.display_name, "cyan"), " ", args))
    """
    from rich.text import Text

    line = Text()
    for piece in pieces:
        if isinstance(piece, tuple) and len(piece) == 2 and isinstance(piece[1], str):
            line.append(literal(piece[0]), style=piece[1])
        else:
            line.append(literal(piece))
    return line


_URL_SECRET = re.compile(r"(?i)((?:^|[?&])(?:ssl)?password=)[^&#]*")


def mask_url(url: str) -> str:
    """``url`` fit to print: a password (``user:PASSWORD@``, ``?password=``) shown as
    ``***``. ``postgresql://app:s3cret@db/tether`` -> ``postgresql://app:***@db/tether``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _URL_SECRET.sub(r"\1***", url)
    # The authority ends at the first "/", "?" or "#"; its user info at its last "@".
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        userinfo, host = authority.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        authority = f"{userinfo}@{host}"
    return f"{scheme}{sep}{authority}" + _URL_SECRET.sub(r"\1***", tail)


__all__ = ["inline", "json_dumps", "json_text", "literal", "mask_url", "one_line", "plain",
           "shown"]
