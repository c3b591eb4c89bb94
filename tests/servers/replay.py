"""Replays a recorded cassette (vcrpy-style YAML, see ../shared/fixtures/cassettes/README.md)
from a real HTTP server on 127.0.0.1: the recorded responses, in order, byte for byte for
streams."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml  # type: ignore[import-untyped]  # pyyaml comes without types

from tests.servers.http import Canned, LoopbackServer

CASSETTES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "cassettes"

# Headers that describe the recorded transfer, not the content: the replay sets its own.
_HOP_HEADERS = {"content-length", "transfer-encoding", "connection", "content-encoding"}


@dataclass
class Interaction:
    method: str
    uri: str
    request_body: Any
    status: int
    headers: dict[str, str]
    body: bytes
    response_json: Any

    @property
    def path(self) -> str:
        parts = urlsplit(self.uri)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    @property
    def host(self) -> str:
        return urlsplit(self.uri).netloc

    @property
    def streamed(self) -> bool:
        return "text/event-stream" in self.headers.get("content-type", "")


def load(name: str, host: str | None = None) -> list[Interaction]:
    """The interactions of ``name`` (a file in the cassettes folder), optionally only those
    sent to ``host`` (a substring of the recorded host)."""
    data = yaml.safe_load((CASSETTES / name).read_text())
    out = []
    for item in data["interactions"]:
        req, resp = item["request"], item["response"]
        headers = {k.lower(): (v[0] if isinstance(v, list) else v)
                   for k, v in (resp.get("headers") or {}).items()
                   if k.lower() not in _HOP_HEADERS}
        if "parsed_body" in resp:
            response_json = resp["parsed_body"]
            body = json.dumps(response_json).encode()
            headers.setdefault("content-type", "application/json")
        else:
            raw = (resp.get("body") or {}).get("string", "")
            body = raw.encode() if isinstance(raw, str) else bytes(raw)
            response_json = None
        request_body = req.get("parsed_body")
        if request_body is None and req.get("body"):
            try:
                request_body = json.loads(req["body"])
            except (TypeError, ValueError):
                request_body = req["body"]
        interaction = Interaction(req["method"], req["uri"], request_body,
                                  resp["status"]["code"], headers, body, response_json)
        if host is None or host in interaction.host:
            out.append(interaction)
    return out


class ReplayServer(LoopbackServer):
    """Serves ``interactions`` in order; ``requests`` records what the adapter sent."""

    def __init__(self, interactions: list[Interaction]) -> None:
        super().__init__()
        self.interactions = interactions
        for i in interactions:
            body: Any = i.body
            if i.streamed:
                # Keep the recorded event text verbatim, delivered event by event.
                text = i.body.decode()
                # Events end at a blank line, whichever line ending the server used.
                body = [chunk + "\n\n" for chunk in re.split(r"\r?\n\r?\n", text)
                        if chunk.strip()]
            self.queue(Canned(i.status, body, dict(i.headers)))


def available() -> bool:
    return CASSETTES.is_dir()
