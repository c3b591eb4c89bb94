"""How a streamable HTTP server is reached: its URL, its headers (some from the
environment, so no secret sits in a file), and its OAuth sign-in."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from tether.mcp.oauth import OAuth
from tether.mcp.protocol import StartFailure


@dataclass(frozen=True, slots=True)
class HttpTransport:
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    headers_env: Mapping[str, str] = field(default_factory=dict)
    oauth: OAuth | None = None

    def describe(self) -> str:
        return f"http: {self.url}" + (", oauth" if self.oauth is not None else "")

    def resolved_headers(self) -> dict[str, str]:
        """The headers to send: the given ones, and each ``headers_env`` one read from its
        variable (``StartFailure`` when it is not set)."""
        out = dict(self.headers)
        for header, variable in self.headers_env.items():
            value = os.environ.get(variable)
            if value is None:
                raise StartFailure(f"header {header} comes from the environment variable "
                                   f"{variable}, which is not set")
            out[header] = value
        return out
