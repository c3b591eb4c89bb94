"""What answers on the local port, before ``--local`` reuses it: the bundled llama-server
with the expected model, checked, never assumed from a port that happens to answer.

A server that answers is asked ``GET /props`` (llama-server's own description: the model
file it serves, its build). Only a llama-server serving the expected model file is reused;
anything else (another program, a llama-server with another model or one serving a folder
of models) is a one-line error naming the port and what answered, never its page. A busy
server that is slow to answer is waited for (``answer_timeout``), not taken for "port in
use"; a server still loading its model (503) is waited for until ``ready_timeout``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path

import httpx

from tether.display import inline
from tether.errors import LocalSetupError
from tether.providers.http.bodies import ResponseTooLarge, decode_json, read_body

HOST = "127.0.0.1"

# /props holds the chat templates: some kilobytes; more is not llama-server's answer.
PROPS_MAX_BYTES = 1024 * 1024

# How long a server on the port may take to answer before tether says it does not: a
# llama-server busy with another answer on two cores takes seconds, not minutes.
ANSWER_TIMEOUT = 30.0

_WHERE_ELSE = "stop it, or give --local another port ([local] port in tether.toml)"


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        return s.connect_ex((HOST, port)) == 0


async def reusable(port: int, model: Path, *, answer_timeout: float = ANSWER_TIMEOUT,
                   ready_timeout: float = 120.0) -> bool:
    """Whether the bundled llama-server serving ``model`` answers on ``port`` (False when
    nothing listens there). Anything else listening is a ``LocalSetupError`` naming it."""
    if not await asyncio.to_thread(_listening, port):
        return False
    where = f"port {port} on {HOST}"
    deadline = time.monotonic() + ready_timeout
    while True:
        too_large = False
        try:
            async with httpx.AsyncClient(timeout=answer_timeout, trust_env=False) as client, \
                    client.stream("GET", f"http://{HOST}:{port}/props") as response:
                try:
                    body = await read_body(response, PROPS_MAX_BYTES)
                except ResponseTooLarge:
                    body, too_large = b"", True
        except httpx.TimeoutException:
            raise LocalSetupError(
                f"the server on {where} accepts connections but did not answer within "
                f"{answer_timeout:g} s; if it is a busy llama-server, run again when it is "
                f"done; else {_WHERE_ELSE}") from None
        except httpx.HTTPError as e:
            raise LocalSetupError(
                f"something listens on {where} but does not answer HTTP "
                f"({type(e).__name__}); {_WHERE_ELSE}") from None
        if response.status_code == 503 and time.monotonic() < deadline:
            # A llama-server still loading its model: its /props answers once it is ready.
            await asyncio.sleep(0.2)
            continue
        props = None
        if response.status_code == 200 and not too_large:
            try:
                props = decode_json(body)
            except ValueError:
                props = None
        what = _answered(response)
        if not isinstance(props, dict) or not isinstance(props.get("model_path"), str) \
                or "build_info" not in props:
            raise LocalSetupError(f"{where} is taken by a server that is not llama-server "
                                  f"(GET /props answered {what}); {_WHERE_ELSE}")
        served = props["model_path"]
        if props.get("role") == "router":
            raise LocalSetupError(f"{where} is taken by a llama-server serving a folder of "
                                  f"models (tether local serve --models-dir), not {model.name} "
                                  f"alone; {_WHERE_ELSE}")
        if not _same_file(served, model):
            raise LocalSetupError(f"{where} is taken by a llama-server serving another model "
                                  f"({inline(served)[:200]}), not {model}; {_WHERE_ELSE}")
        return True


def _answered(response: httpx.Response) -> str:
    """What a server answered, in a few words (status, content type, server name): never
    its page."""
    kind = inline(response.headers.get("content-type", "no content type"))[:60]
    server = response.headers.get("server")
    return (f"HTTP {response.status_code}, {kind}"
            + (f", server {inline(server)[:60]}" if server else ""))


def _same_file(served: str, model: Path) -> bool:
    try:
        return os.path.samefile(served, model)
    except OSError:
        return os.path.realpath(served) == os.path.realpath(model)


__all__ = ["ANSWER_TIMEOUT", "reusable"]
