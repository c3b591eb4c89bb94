"""The web app: ``build_app`` makes the Starlette application ``tether serve`` runs.

Routes: the page (``/``, ``/page.js``, ``/page.css``: one static HTML file and its script
and style, shipped in the package), ``POST /agui`` (AG-UI over SSE), ``GET /api/sessions``
(this workspace's sessions), ``GET /api/sessions/{id}`` (one session's messages, taint and
the calls it waits on, as AG-UI interrupts), and ``POST /api/elicitations/{id}`` (a
person's answer to an MCP server's request for input). Every route sits behind the
``Guard`` (``tether.serve.security``). Another module mounts its own routes beside these
with ``routes=`` (and ``public=`` for paths anyone may GET without the token, ``open_paths=``
for an endpoint whose callers hold tokens of their own, not the page's: ``tether serve
--a2a``), in the same door.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from importlib.resources import files
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from tether.serve import agui
from tether.serve.history import messages_view, session_summary
from tether.serve.runs import END, Busy, Closing, Runs
from tether.serve.security import Guard

# How many sessions the page lists.
LISTED = 100
# A request body over this is refused.
MAX_BODY = 1_000_000

_PAGE = {"/": ("index.html", "text/html; charset=utf-8"),
         "/page.js": ("page.js", "text/javascript; charset=utf-8"),
         "/page.css": ("page.css", "text/css; charset=utf-8")}


def build_app(runs: Runs, *, token: str, hosts: Iterable[str],
              routes: Sequence[BaseRoute] = (), public: Iterable[str] = (),
              open_paths: Iterable[str] = ()) -> Starlette:
    """The application: the page, the AG-UI endpoint and the session API, then ``routes``
    (another module's), all behind the guard (``token``, ``hosts``: the ``Host`` values
    that name the address served; ``public``: more paths anyone may GET without the token;
    ``open_paths``: paths of ``routes`` any method reaches without the page's token, their own
    handlers judging their callers). ``ValueError`` for an open path of the page's own."""
    opened = frozenset(open_paths)
    taken = opened & {*_PAGE, "/agui"} or \
        {p for p in opened if p == "/api" or p.startswith("/api/")}
    if taken:  # the page's API is behind its token, whoever mounts what beside it
        raise ValueError(f"paths of the page cannot be open: {sorted(taken)}")
    api = _Api(runs)
    own: list[BaseRoute] = [
        *(Route(path, _page_file(name, kind), methods=["GET"])
          for path, (name, kind) in _PAGE.items()),
        Route("/agui", api.agui, methods=["POST"]),
        Route("/api/sessions", api.sessions, methods=["GET"]),
        Route("/api/sessions/{session_id}", api.session, methods=["GET"]),
        Route("/api/elicitations/{key}", api.elicitation, methods=["POST"]),
    ]
    return Starlette(routes=[*own, *routes], middleware=[
        Middleware(Guard, token=token, hosts=hosts, extra_public=public,
                   open_paths=opened)])


def _page_file(name: str, kind: str) -> Any:
    body = files("tether.serve").joinpath("page", name).read_bytes()

    async def page(request: Request) -> Response:
        return Response(body, media_type=kind)

    return page


def _refused(status: int, text: str) -> JSONResponse:
    return JSONResponse({"error": text}, status_code=status)


async def json_body(request: Request) -> Any:
    """The request's JSON, or ``InputError``."""
    body = await request.body()
    if len(body) > MAX_BODY:
        raise agui.InputError(f"the request is over {MAX_BODY} bytes")
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise agui.InputError("the request body is not JSON") from None


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone (its body was read before the stream began)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class _Api:
    """The routes' handlers, over the server's ``Runs``."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs

    async def agui(self, request: Request) -> Response:
        try:
            given = agui.parse_input(await json_body(request))
            watcher = self.runs.start(given)
        except agui.InputError as e:
            return _refused(400, str(e))
        except Busy as e:
            return _refused(409, str(e))
        except Closing as e:
            return _refused(503, str(e))

        async def stream() -> AsyncIterator[str]:
            # Nothing is sent while a run waits for a person, so a page that went away is
            # seen by its disconnect, not by a failed send.
            gone = asyncio.ensure_future(_disconnected(request))
            try:
                while True:
                    frame = asyncio.ensure_future(watcher.frames.get())
                    await asyncio.wait((frame, gone), return_when=asyncio.FIRST_COMPLETED)
                    if not frame.done():
                        frame.cancel()
                        return
                    text = frame.result()
                    if text is END:
                        return
                    yield text
            finally:  # nobody is left to answer for this run: its requests are cancelled
                gone.cancel()
                self.runs.host.elicitations.abandon(watcher)

        return StreamingResponse(stream(), media_type=agui.ENCODER.get_content_type(),
                                 headers={"x-accel-buffering": "no"})

    async def sessions(self, request: Request) -> Response:
        host = self.runs.host
        here = str(host.workspace.resolve())
        infos = [i for i in host.store.list(limit=LISTED) if i.workspace == here]
        return JSONResponse({"sessions": [session_summary(i, i.id in self.runs.busy)
                                          for i in infos]})

    async def session(self, request: Request) -> Response:
        try:
            session = self.runs.load(request.path_params["session_id"])
        except agui.InputError as e:
            return _refused(404, str(e))
        busy = session.id in self.runs.busy
        pending = session.pending
        interrupts = [agui.interrupt_of(c, self.runs.view(session, c)).model_dump(
            mode="json", by_alias=True) for c in pending.calls] if pending and not busy \
            else []
        taint = session.taint
        return JSONResponse({
            "session": session_summary(session.info, busy),
            "messages": messages_view(session.messages),
            "interrupts": interrupts,
            "taint": {"private": taint.private, "untrusted": taint.untrusted}})

    async def elicitation(self, request: Request) -> Response:
        try:
            self.runs.host.elicitations.answer(request.path_params["key"],
                                               await json_body(request))
        except agui.InputError as e:
            return _refused(400, str(e))
        return JSONResponse({"ok": True})
