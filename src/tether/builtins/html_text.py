"""HTML reduced to the text a person would read: scripts, styles and markup dropped, block
elements on their own lines, links kept as ``text (href)`` so a model can follow them."""

from __future__ import annotations

import re
from html.parser import HTMLParser

_SKIPPED = frozenset({"script", "style", "noscript", "template", "svg", "head"})
_BLOCKS = frozenset({
    "p", "div", "section", "article", "header", "footer", "main", "nav", "aside", "br",
    "li", "ul", "ol", "table", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote",
    "hr", "form", "dd", "dt", "dl", "figure", "figcaption", "title",
})
_SPACES = re.compile(r"[ \t\f\v\r]+")
_BLANKS = re.compile(r"\n\s*\n+")


class _Extractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0
        self.title: list[str] = []
        self.in_title = False
        self.hrefs: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        elif tag in _SKIPPED:
            self.skipping += 1
        if tag in _BLOCKS:
            self.parts.append("\n")
        if tag == "a":
            href = dict(attrs).get("href")
            self.hrefs.append(href if href and href.startswith(("http://", "https://"))
                              else None)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        elif tag in _SKIPPED and self.skipping:
            self.skipping -= 1
        if tag == "a" and self.hrefs:
            href = self.hrefs.pop()
            if href and not self.skipping:
                self.parts.append(f" ({href})")
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        elif not self.skipping:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """The readable text of an HTML document, title first."""
    parser = _Extractor()
    parser.feed(html)
    parser.close()
    body = _SPACES.sub(" ", "".join(parser.parts))
    body = "\n".join(line.strip() for line in body.split("\n"))
    body = _BLANKS.sub("\n\n", body).strip()
    title = " ".join("".join(parser.title).split())
    return f"{title}\n\n{body}" if title and body else title or body
