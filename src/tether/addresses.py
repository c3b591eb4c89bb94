"""Where a text points: the links, hosts, email addresses and bank accounts (IBANs) written
in it, found in every spelling a reader would follow, each named by the place it resolves to.

A reader is a mail client, a browser, a Markdown renderer, a person who copies a link. Each
decodes before it follows, so a text is read in several *views*, and what is found in any
of them counts:

- as written, split at ASCII whitespace only (a parser given the whole token);
- decoded: HTML character references (``&#58;``, ``&colon;``), Unicode compatibility forms
  (NFKC: fullwidth ``ｅｖｉｌ．ｔｅｓｔ``), the ideographic full stops as dots, invisible
  characters (soft hyphen, zero-width space, bidi controls) dropped, IDNA's deviations as
  an older reader maps them (``ß`` as ``ss``), any Unicode space a separator;
- that, percent-decoded (``%2e``, ``%40``), each decoding repeated up to three times;
- rendered: HTML tags and Markdown emphasis and escapes dropped, defanged dots and ats
  (``[.]``, ``(at)``) restored;
- the value of each HTML attribute (``href="..."``) as one token, with tabs and line breaks
  removed, as a browser parses it.

The rendered views and the attribute values invent names a text does not write, so
``places`` (what a send's content points to: reading more is safer) reads them and
``named`` (what vouches for a place: reading less is safer) does not.

In each view, every token any common parser would read as a link, a host or an address is
one, over-approximated (fail closed): a URL with any scheme followed by a slash or
backslash, or a known scheme (``https:evil.test``, ``mailto:``, ``tel:``); a scheme-relative
or UNC link (``//evil.test/x``, ``\\\\evil.test\\x``); an email address whatever its local part
(quoted, with ``'`` or ``%`` or ``!``) and its domain (international, an IP literal); a bare
host (``evil.test/reset``: dotted labels ending in a label that starts with a letter; an
IPv4 address a URL parser reads, an IPv6 literal); an IBAN with its groups split by any
spaces, dashes, dots, slashes or underscores.

Each is named by its **place**: the whole token as its parser resolves it, so two spellings
of one place compare equal and a trusted prefix never stands for the whole. A URL keeps
everything as written except its host, which is read as a WHATWG parser reads it (userinfo
up to the last ``@`` stripped, ``\\`` ending the authority of a special scheme,
percent-decoded, IDNA to ASCII, lowercase, an IPv4 address in any decimal, octal or hex form
as dotted decimal, an IPv6 literal compressed); a web host's front page is the host. An
email address keeps its local part as written and gets its domain as a host. A ``mailto:``
link is its recipients (its path and every header but the subject and body), each an
address. An IBAN is compact and uppercase, read to the length its country registers.

Every view is read in time linear in the text's length: patterns match from a word's start,
each stretch is searched once, and a word yields at most ``_MOST`` links or hosts (past
that it is one place as written).
"""

from __future__ import annotations

import html
import ipaddress
import re
import unicodedata
from collections.abc import Iterator
from encodings import idna
from functools import lru_cache
from urllib.parse import unquote

# --- views -------------------------------------------------------------------------------

# The full stops IDNA reads as dots (U+FF61 is NFKC's U+3002).
_STOPS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})
# IDNA's deviations: an older (transitional) reader maps them (to "ss", to "σ", to nothing),
# a newer one keeps them, so a name holding one reads two ways.
_DEVIATIONS = "\u00df\u1e9e\u03c2\u200c\u200d"
_TRANSITIONAL = str.maketrans({"\u00df": "ss", "\u1e9e": "ss", "\u03c2": "\u03c3", "\u200c": "",
                               "\u200d": ""})
# Default-ignorable code points but the deviations: a reader shows nothing for them and
# IDNA maps them to nothing (soft hyphen, zero-width space, bidi controls, variation
# selectors...).
_IGNORED = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b\u200e\u200f"
    "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]")
_TAG = re.compile(r"<[^<>]*>")
# Markdown's escapes and emphasis; an underscore inside a word is a letter, not emphasis.
_MARKDOWN = re.compile(r"\\(?=[^\w\s])|[*~`]|(?<![^\W_])_|_(?![^\W_])")
_DEFANGED_DOT = re.compile(r"[\[({]\s*(?:\.|dot)\s*[\])}]", re.IGNORECASE)
_DEFANGED_AT = re.compile(r"[\[({]\s*(?:@|at)\s*[\])}]", re.IGNORECASE)
_HXXP = re.compile(r"\bhxxp", re.IGNORECASE)
_ATTRIBUTE = re.compile(r"(?<![\w:-])[\w:-]++\s*+=\s*+([\"'])")
_BROKEN = re.compile(r"[\t\n\r]")
_ROUNDS = 3  # decodings of a decoding (``&amp;#58;``, ``%2540``) followed, at most


def _folded(text: str) -> str:
    """Unicode as IDNA folds it, deviations kept: compatibility forms (NFKC), full stops
    as dots, ignored characters gone."""
    if text.isascii():
        return text
    return _IGNORED.sub("", unicodedata.normalize("NFKC", text).translate(_STOPS))


def fold(text: str) -> str:
    """``text`` as a reader compares it: Unicode folded as the address scan reads it
    (compatibility forms, ignored characters gone), letter case folded, runs of white space
    one space, none around: a service that canonicalises a value (an email's case, NFC,
    trimmed) gives back the same folded text."""
    return " ".join(_normal(text).casefold().split())


def _normal(text: str) -> str:
    """Unicode as a reader sees it: folded, and the deviations as an older reader maps
    them."""
    return text if text.isascii() else _folded(text).translate(_TRANSITIONAL)


def _decoded(text: str) -> str:
    for _ in range(_ROUNDS):
        new = _normal(html.unescape(text)) if "&" in text else _normal(text)
        if new == text:
            break
        text = new
    return text


def _percent_decoded(text: str) -> str:
    for _ in range(_ROUNDS):
        if "%" not in text:
            break
        new = _decoded(unquote(text))
        if new == text:
            break
        text = new
    return text


_RENDERING = "<*_~`\\[({"


def _rendered(text: str) -> str:
    if not any(c in text for c in _RENDERING) and "hxxp" not in text.lower():
        return text  # nothing a renderer would change
    text = _MARKDOWN.sub("", _TAG.sub("", text))
    text = _DEFANGED_AT.sub("@", _DEFANGED_DOT.sub(".", text))
    return _HXXP.sub("http", text)


def _views(text: str, *, rendered: bool) -> Iterator[tuple[str, bool]]:
    """Each view of ``text`` once, with whether it splits at ASCII whitespace only. The
    rendered views (tags and Markdown dropped, defanged spellings restored) invent names a
    text does not write, so they are read only where reading more is safer: in what is
    sent, never in what vouches for it."""
    yield text, True
    decoded = _decoded(text)
    views = [decoded, _percent_decoded(decoded)]
    if rendered:
        shown = _rendered(decoded)
        views += [shown, _percent_decoded(shown)]
    # An ASCII text split at any whitespace is split as it is written.
    seen = {text} if text.isascii() else set()
    for view in views:
        if view not in seen:
            seen.add(view)
            yield view, False


# A word that can hold a place has one of these: a dot (or a full stop IDNA reads as one),
# an at sign, a colon, a slash or a backslash. Matched from a word's start only, so a long
# word is read once.
_MARKS = r"[.@:/\\\u3002\uff0e\uff61]"
_MARKED = re.compile(_MARKS)
_WORD = re.compile(rf"(?<!\S)\S*?{_MARKS}\S*")
_ASCII_WORD = re.compile(rf"(?<![^ \t\n\r\f\v])[^ \t\n\r\f\v]*?{_MARKS}[^ \t\n\r\f\v]*")


def _words(text: str, ascii_only: bool, *, attributes: bool) -> Iterator[str]:
    """The words of a view that can hold a place, and (with ``attributes``) each HTML
    attribute's value as one word (a browser removes tabs and line breaks from a URL, and
    reads it whole)."""
    yield from (m.group(0) for m in (_ASCII_WORD if ascii_only else _WORD).finditer(text))
    if not attributes:
        return
    # Where the next quote of each kind is, once looked for: each stretch is searched once.
    ends = {'"': -1, "'": -1}
    for match in _ATTRIBUTE.finditer(text):
        quote, start = match.group(1), match.end()
        if ends[quote] < start:
            found = text.find(quote, start)
            ends[quote] = found if found != -1 else len(text)
        if ends[quote] < len(text):
            yield _BROKEN.sub("", text[start:ends[quote]]).strip()


# --- hosts -------------------------------------------------------------------------------


def host(raw: str) -> str:
    """A host as a browser or mail system resolves it: percent-decoded, Unicode folded,
    lowercase, IDNA to ASCII, a numeric IPv4 address (``2130706433``, ``0x7f.1``,
    ``0177.0.0.1``) as dotted decimal, an IP literal (``[::1]``, ``[192.0.2.1]``) in its
    shortest form. A label with an IDNA deviation (``ß``) is read as a newer reader reads
    it, kept (the decoded views give the older reading). A host no parser accepts is kept
    folded as written (it resolves nowhere)."""
    h = _folded(unquote(raw)) if "%" in raw else _folded(raw)
    if h.startswith("[") and h.endswith("]"):
        inner = h[1:-1].lower()
        tagged = inner.startswith("ipv6:")
        try:
            address = ipaddress.ip_address(inner[5:] if tagged else inner)
        except ValueError:
            return f"[{inner}]"
        return f"[{'ipv6:' if tagged else ''}{address.compressed}]"
    h = h.lower()
    if h.endswith(".") and len(h) > 1:
        h = h[:-1]  # the root: "evil.test." is "evil.test"
    numeric = _ipv4(h)
    if numeric is not None:
        return numeric
    if h.isascii():
        return h
    try:
        return ".".join(_label(label) for label in h.split("."))
    except UnicodeError:
        return h


def _label(label: str) -> str:
    if label.isascii():
        return label
    if any(c in _DEVIATIONS for c in label):
        # Nameprep would map the deviation away: encode the label as it is written.
        return "xn--" + label.encode("punycode").decode("ascii")
    return idna.ToASCII(label).decode("ascii").lower()


_HEX = re.compile(r"0[xX][0-9a-fA-F]*")
_OCTAL = re.compile(r"0[0-7]+")


def _ipv4(h: str) -> str | None:
    """The WHATWG reading of a host that ends in a number: an IPv4 address of one to four
    parts, each decimal, octal (a leading 0) or hex (0x), the last filling the rest."""
    parts = h.split(".")
    if not (_number(parts[-1]) is not None) or len(parts) > 4:
        return None
    numbers = [_number(part) for part in parts]
    *head, tail = numbers
    if tail is None or any(n is None or n > 255 for n in head) or \
            tail >= 256 ** (5 - len(numbers)):
        return None
    address = tail
    for i, n in enumerate(head):
        address += (n or 0) * 256 ** (3 - i)
    return f"{address >> 24}.{address >> 16 & 255}.{address >> 8 & 255}.{address & 255}"


def _number(part: str) -> int | None:
    if len(part.lstrip("0xX")) > 12:
        return None  # past any IPv4 address (and past what int() reads quickly)
    if _HEX.fullmatch(part):
        return int(part[2:] or "0", 16)
    if _OCTAL.fullmatch(part):
        return int(part, 8)
    if part.isascii() and part.isdigit() and (part == "0" or part[0] != "0"):
        return int(part)
    return None


# --- tokens in a word --------------------------------------------------------------------

_SPECIAL = frozenset({"http", "https", "ws", "wss", "ftp", "file"})
# Schemes whose links carry no slashes and still go somewhere (or run something).
_OPAQUE = frozenset({"mailto", "tel", "sms", "mms", "callto", "facetime", "skype", "im",
                     "xmpp", "sip", "sips", "javascript", "vbscript", "data", "news", "geo",
                     "magnet", "bitcoin", "whatsapp", "intent", "market", "itms"})
_SCHEME = re.compile(r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+.\-]*):")
_SLASHES = re.compile(r"[/\\]{2,}")
_DOT = "[.\u3002\uff0e\uff61]"
_DOTS = re.compile(_DOT)
_HOSTNAME = re.compile(rf"(?<![\w-])(?:[\w-]++{_DOT})+[\w-]++")
# A host written without dots that a URL parser still reads: an IPv4 address as one hex or
# long decimal number with a path or port after it ("0xc0000201/x", "3221225985:80"), an
# IPv6 literal ("[2001:db8::1]").
_BARE_NUMBER = re.compile(r"(?<![\w.\-\[])(?:(?:0[xX][0-9a-fA-F]+|[0-9]{8,})(?=[/\\?#]|:[0-9])"
                          r"|\[[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\])")
_AFTER_HOST = re.compile(r"(?::[0-9]*)?[/\\?#].*|:[0-9]+", re.DOTALL)
_DOMAIN = re.compile(rf"\[[^\]\s\[@]*\]|[\w\-]+(?:{_DOT}+[\w\-]+)*")
_ATEXT = frozenset("!#$%&'*+/=?^`{|}~.-")
_TRAILING = frozenset(".,;:!?'\"*_~`")
_CLOSERS = {")": "(", "]": "[", "}": "{", ">": "<"}


def _trim(token: str) -> str:
    """Sentence punctuation and unbalanced closing brackets after a token are not part of
    it (as linkifiers read ``(see https://x.test/a).``)."""
    while token:
        last = token[-1]
        if last in _TRAILING or (last in _CLOSERS and
                                 token.count(_CLOSERS[last]) < token.count(last)):
            token = token[:-1]
        else:
            break
    return token


def _is_hostname(name: str, followed: bool) -> bool:
    """Whether dotted labels name a host: a domain (its last label starts with a letter),
    or an IPv4 address a URL parser reads (four parts, a hex part, or a path or port after
    it: "192.0.2.1", "0xc0.0.2.1", "10.1/x"; not "3.14" or "12.03.2024")."""
    labels = _DOTS.split(name)
    tld = labels[-1]
    if len(tld) >= 2 and tld[0].isalpha():
        return True
    if not (len(labels) == 4 or followed or any(_HEX.fullmatch(label) for label in labels)):
        return False
    return _ipv4(".".join(labels)) is not None


def _split_hostport(hostport: str) -> tuple[str, str]:
    if hostport.startswith("["):
        end = hostport.find("]")
        if end != -1:
            return hostport[:end + 1], hostport[end + 1:]
    colon = hostport.rfind(":")
    if colon != -1 and hostport[colon + 1:].isdigit():
        return hostport[:colon], hostport[colon:]
    return hostport, ""


def _url(token: str, scheme: str, at: int) -> tuple[str, str]:
    """A URL's place and host. ``at`` is where its authority may start (after the
    scheme's colon, or at the slashes of a scheme-relative link)."""
    rest = token[at:]
    slashes = len(rest) - len(rest.lstrip("/\\"))
    special = scheme in _SPECIAL or not scheme
    if not slashes and not special:
        return token[:at].lower() + rest, ""
    body = rest[slashes:]
    stops = "/?#\\" if special else "/?#"
    cut = next((i for i, c in enumerate(body) if c in stops), len(body))
    authority, tail = body[:cut], body[cut:]
    userinfo, at_sign, hostport = authority.rpartition("@")
    raw_host, port = _split_hostport(hostport)
    resolved = host(raw_host) if raw_host else ""
    if resolved and scheme in ("http", "https") and not at_sign and not port \
            and tail in ("", "/"):
        return resolved, resolved  # a web host's front page is the host
    prefix = token[:at].lower() + rest[:slashes]
    return f"{prefix}{userinfo}{at_sign}{resolved}{port}{tail}", resolved


def _mailto(token: str, at: int) -> Iterator[tuple[str, str]]:
    """The recipients of a ``mailto:`` link: its path and every header but the subject
    and body (``to``, ``cc``, ``bcc`` and any other), each percent-decoded."""
    path, _, query = token[at:].partition("?")
    values = [path]
    for field in query.split("&"):
        name, _, value = field.partition("=")
        if unquote(name).strip().lower() not in ("subject", "body"):
            values.append(value)
    for value in values:
        for recipient in re.split("[,;]", _decoded(unquote(value))):
            recipient = _trim(recipient.strip())
            if "@" in recipient:
                local, _, domain = recipient.rpartition("@")
                yield f"{local}@{host(domain)}", host(domain)
            elif recipient:
                yield recipient, ""


# Places read from one word by each kind of reading, at most; a word with more (links
# joined by commas, thousands of them) is one place as written, which only a trusted text
# holding the very same word names.
_MOST = 32


def _word_places(word: str) -> list[tuple[str, str]]:
    """Every place in one word, with its host ("" for none): its links, the paths after
    slashes no link holds, its addresses, its host names. A word with more than ``_MOST``
    places of one reading is also one place as written."""
    if not _MARKED.search(_trim(word)):
        return []  # its only mark ends it ("name:", "hotel.")
    out: list[tuple[str, str]] = []
    linked: set[int] = set()
    if not _links(word, out, linked) or not _relative_paths(word, out, linked):
        return [*out, (word, "")]
    _addresses(word, out, linked)
    if not _hosts(word, out):
        return [*out, (word, "")]
    return out


def _links(word: str, out: list[tuple[str, str]], linked: set[int]) -> bool:
    """Add the word's links (a scheme and what follows it) to ``out``, where each link's
    scheme ends to ``linked``; False if there are more than ``_MOST``."""
    for match in _SCHEME.finditer(word):
        scheme = match.group(1).lower()
        after = word[match.end():match.end() + 1]
        if not (after in ("/", "\\") or scheme in _SPECIAL or scheme in _OPAQUE):
            continue
        if len(linked) == _MOST:
            return False
        token = _trim(word[match.start():])
        if len(token) <= match.end() - match.start():
            continue
        linked.add(match.end())
        if scheme == "mailto":
            out.extend(_mailto(token, match.end() - match.start()))
        else:
            out.append(_url(token, scheme, match.end() - match.start()))
    return True


def _relative_paths(word: str, out: list[tuple[str, str]], linked: set[int]) -> bool:
    """Add the places after slashes that no link holds (``//host/path``) to ``out``; False
    if there are more than ``_MOST``."""
    relative = 0
    for match in _SLASHES.finditer(word):
        if match.start() in linked:
            continue
        token = _trim(word[match.start():])
        if len(token) > match.end() - match.start():
            relative += 1
            if relative > _MOST:
                return False
            out.append(_url(token, "", 0))
    return True


def _addresses(word: str, out: list[tuple[str, str]], linked: set[int]) -> None:
    """Add the word's mail addresses (each local part it may have, at its host) to ``out``."""
    at = word.find("@")
    while at != -1:
        domain_match = _DOMAIN.match(word, at + 1)
        domain = _trim(domain_match.group(0)).rstrip("-") if domain_match else ""
        if domain:
            resolved = host(domain)
            locals_ = _locals(word, at, in_link=bool(linked) and min(linked) < at)
            out.extend((f"{local}@{resolved}", resolved) for local in locals_)
        at = word.find("@", at + 1)


def _hosts(word: str, out: list[tuple[str, str]]) -> bool:
    """Add the word's host names and bare numbers (with the path that follows one) to
    ``out``; False if there are more than ``_MOST``."""
    hosts = 0
    for match in (*_HOSTNAME.finditer(word), *_BARE_NUMBER.finditer(word)):
        name = match.group(0)
        rest = _AFTER_HOST.match(word, match.end())
        if match.re is _HOSTNAME and not _is_hostname(name, rest is not None):
            continue
        hosts += 1
        if hosts > _MOST:
            return False
        resolved = host(name)
        if word[match.start() - 1:match.start()] == "@":
            rest = None  # an address's domain: mail goes to the host, whatever follows
        path = _trim(rest.group(0)) if rest else ""
        out.append((resolved + (path if path != "/" else ""), resolved))
    return True


# Inside a link, these end a local part: the link's own parser reads them as delimiters
# (a mailto: link's recipients are read as such, any other link is one place whole).
_URI_DELIMITERS = frozenset("?&=/#")


def _locals(word: str, at: int, *, in_link: bool) -> list[str]:
    """The local parts an address ending at ``at`` may have: a quoted string, and the run
    of characters an unquoted local part allows (RFC 5322's atext, ``'``, ``%``, ``!`` and
    all: a mail system may deliver on them)."""
    out = []
    if at > 0 and word[at - 1] == '"':
        start = word.rfind('"', 0, at - 1)
        if start != -1:
            out.append(word[start:at])
    start = at
    while start > 0:
        c = word[start - 1]
        if not (c.isalnum() or c == "_" or c in _ATEXT) or (in_link and c in _URI_DELIMITERS):
            break
        start -= 1
    if start < at:
        out.append(word[start:at])
    return out


# --- IBANs -------------------------------------------------------------------------------

# The lengths the IBAN registry (ISO 13616) gives each country, and the countries that use
# IBANs outside it. A country not here is read as an IBAN of 15 to 34 characters.
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22,
    "BH": 22, "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24,
    "DE": 22, "DJ": 27, "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18,
    "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27,
    "GT": 28, "HN": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20,
    "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20,
    "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
    "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25,
    "SV": 28, "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
    "YE": 30,
}
# An IBAN starts a word, or (a registered country's, in capitals) runs on from one
# ("IBANGB29...").
_IBAN_HINT = re.compile(r"[A-Za-z]{2}[0-9]{2}")
_IBAN_START = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{2}[0-9]{2}|(?<=[A-Za-z0-9])[A-Z]{2}[0-9]{2}")
# What may stand between its groups: spaces, dashes, dots, underscores, slashes, dots set
# in the middle.
_IBAN_GAP = re.compile(r"[\s\-\u2010-\u2015\u2212\ufe58\ufe63\uff0d._/\u00b7\u2022]+")
_ALNUM = re.compile(r"[A-Za-z0-9]+")


def ibans(text: str) -> Iterator[str]:
    """The IBANs written in ``text``, compact and uppercase. Groups may be split by any
    run of spaces or dashes. A registered country's IBAN is read to its length (and, when
    the characters run on without a break, to where they end too: that is what it says);
    another country's while the next group holds a digit (prose after it is no part of
    it), up to 34 characters."""
    if not _IBAN_HINT.search(text):
        return
    covered = 0
    for match in _IBAN_START.finditer(text):
        if match.start() < covered:
            continue  # a group inside an IBAN already read
        length = _IBAN_LENGTHS.get(match.group(0)[:2].upper())
        if length is None and match.start() > 0 and text[match.start() - 1].isalnum():
            continue
        found, pos = match.group(0).upper(), match.end()
        while len(found) < (length or 34):
            gap = _IBAN_GAP.match(text, pos)
            group = _ALNUM.match(text, gap.end() if gap else pos)
            if group is None:
                break
            piece = group.group(0)
            if length is None and (len(found) + len(piece) > 34 or
                                   (gap is not None and not any(c.isdigit() for c in piece))):
                break
            piece = piece[:(length or 34) - len(found)]
            found += piece.upper()
            pos = group.start() + len(piece)
        if sum(c.isdigit() for c in found[4:]) < 4 or len(found) < (length or 15):
            continue
        covered = pos
        yield found
        run_on = _ALNUM.match(text, pos)
        if run_on is not None:
            covered = run_on.end()
            yield found + run_on.group(0).upper()


# --- a text's places ---------------------------------------------------------------------


def places(text: str) -> list[str]:
    """Every place ``text`` points to (see the module's docstring), once each, in the
    order found."""
    return list(dict.fromkeys(place for place, _ in _found(text, rendered=True)))


def _found(text: str, *, rendered: bool) -> Iterator[tuple[str, str]]:
    read: set[str] = set()
    for view, ascii_only in _views(text, rendered=rendered):
        for word in _words(view, ascii_only, attributes=rendered):
            if word not in read:  # a word reads the same in every view it appears in
                read.add(word)
                yield from _word_places(word)
        for iban in ibans(view):
            yield iban, ""


@lru_cache(maxsize=64)
def named(text: str) -> frozenset[str]:
    """What ``text`` names, for tracing a place to it: each of its places and the host of
    each (a text that links to ``https://corp.test/a`` names the host ``corp.test``).
    Remembered for the last texts asked about: a conversation's sources are asked about
    on every send."""
    out: set[str] = set()
    for place, resolved in _found(text, rendered=False):
        out.add(place)
        if resolved:
            out.add(resolved)
    return frozenset(out)
