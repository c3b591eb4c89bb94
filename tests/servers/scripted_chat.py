"""A Chat Completions server on 127.0.0.1 that answers from a script, for runs in other
processes (Temporal workers): the reply to a request is the script's entry for the
conversation's first user message, at the turn the conversation is in (how many assistant
messages it holds). An entry is a ``Say``, or a function of the request that makes one:
``obey`` is a compromised model, which does whatever instruction it has just read. Every
request is recorded; a request can be held (``hold``) until an event is set, as a model
that is still thinking.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Say:
    """One scripted model turn: text, or tool calls ``(name, arguments)`` (with the ids in
    ``ids`` when given, as a hostile model writes them; else ``call_TURN_N``); ``finish`` the
    ``finish_reason`` when not the usual one (``"length"``: the limit cut the answer)."""

    text: str = ""
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    usage: tuple[int, int] = (20, 5)
    finish: str | None = None
    ids: tuple[str, ...] = ()


def call(name: str, **arguments: Any) -> Say:
    return Say(calls=((name, arguments),))




@dataclass
class Seen:
    worker: str
    prompt: str
    turn: int
    body: dict[str, Any]


# --- a compromised model ------------------------------------------------------------------

# The grammar of tests/security's ``Compromised`` model, plus an answer: a line
# ``INSTRUCTION: call NAME {json}`` (several calls joined by `` && `` in one turn), or
# ``INSTRUCTION: answer TEXT``.
_INSTRUCTION = re.compile(r"INSTRUCTION:\s*(.+)$", re.MULTILINE)
_CALL = re.compile(r"\s*call\s+(\w+)\s+")
_AND = re.compile(r"\s*&&")
_ANSWER = re.compile(r"^\s*answer\s+(.*)$")


def instruction(*steps: tuple[str, dict[str, Any]]) -> str:
    """One injected line: these calls, in one turn."""
    return "INSTRUCTION: " + " && ".join(f"call {name} {json.dumps(arguments)}"
                                         for name, arguments in steps)


def answer_instruction(text: str) -> str:
    """One injected line: answer ``text``."""
    return f"INSTRUCTION: answer {text}"


def _steps(line: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    """The calls of an instruction line (a call's JSON may hold another instruction)."""
    steps, at, decoder = [], 0, json.JSONDecoder()
    while True:
        match = _CALL.match(line, at)
        assert match, f"the compromised model cannot read {line[at:]!r}"
        arguments, at = decoder.raw_decode(line, match.end())
        steps.append((match.group(1), arguments))
        more = _AND.match(line, at)
        if more is None:
            assert not line[at:].strip(), f"the compromised model cannot read {line[at:]!r}"
            return tuple(steps)
        at = more.end()


def obey(seen: Seen) -> Say:
    """What a model that obeys every instruction it reads says next: the first instruction
    in what it read since its last turn (the user's message, or the results of its calls),
    marked as untrusted data or not; "Done." when there is none."""
    read: list[str] = []
    for message in reversed(seen.body.get("messages", [])):
        if message.get("role") == "assistant":
            break
        if isinstance(message.get("content"), str):
            read.insert(0, message["content"])
    for text in read:
        for line in _INSTRUCTION.findall(text):
            said = _ANSWER.match(line)
            return Say(said.group(1)) if said else Say(calls=_steps(line))
    return Say("Done.")


Reply = Say | Callable[[Seen], Say]


@dataclass
class ScriptedChat:
    script: dict[str, list[Reply]]
    requests: list[Seen] = field(default_factory=list)
    # What tools posted to /notify (``{"note": ...}``), in order: how a tool in a worker
    # process tells the test it started.
    notes: list[str] = field(default_factory=list)
    # Called for each request before it is answered: an Event to wait on, or None.
    hold: Callable[[Seen], threading.Event | None] = lambda seen: None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.received = threading.Condition(self._lock)
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def handle(self) -> None:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    super().handle()

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if self.path.endswith("/notify"):
                    with server.received:
                        server.notes.append(str(body.get("note")))
                        server.received.notify_all()
                    self.send_response(204)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                seen = server._seen(self.headers.get("x-worker", ""), body)
                gate = server.hold(seen)
                with server.received:
                    server.requests.append(seen)
                    server.received.notify_all()
                if gate is not None:
                    while not gate.wait(0.05):
                        if server._stopping.is_set():
                            return
                data = json.dumps(server._answer(seen)).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        assert isinstance(host, str)
        return f"http://{host}:{port}/v1"

    def _seen(self, worker: str, body: dict[str, Any]) -> Seen:
        messages = body.get("messages", [])
        prompt = next((m["content"] for m in messages if m.get("role") == "user"), "")
        turn = sum(m.get("role") == "assistant" for m in messages)
        return Seen(worker, prompt if isinstance(prompt, str) else json.dumps(prompt), turn,
                    body)

    def _answer(self, seen: Seen) -> dict[str, Any]:
        replies = self.script.get(seen.prompt) or self.script.get("*") or [Say("ok")]
        reply = replies[min(seen.turn, len(replies) - 1)]
        say = reply if isinstance(reply, Say) else reply(seen)
        text = say.text.replace("{prompt}", seen.prompt)
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if say.calls:
            message["tool_calls"] = [
                {"id": say.ids[n] if n < len(say.ids) else f"call_{seen.turn}_{n}",
                 "type": "function",
                 "function": {"name": name, "arguments": json.dumps(
                     {k: v.replace("{prompt}", seen.prompt) if isinstance(v, str) else v
                      for k, v in arguments.items()})}}
                for n, (name, arguments) in enumerate(say.calls)]
        prompt_tokens, completion_tokens = say.usage
        return {"id": "chatcmpl-1", "object": "chat.completion", "model": "scripted",
                "choices": [{"index": 0, "message": message,
                             "finish_reason": say.finish
                             or ("tool_calls" if say.calls else "stop")}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}

    def wait_for(self, predicate: Callable[[Seen], bool], timeout: float = 60.0) -> Seen:
        """The first request (seen or still to come) that ``predicate`` accepts."""
        with self.received:
            found: list[Seen] = []

            def check() -> bool:
                found[:] = [s for s in self.requests if predicate(s)][:1]
                return bool(found)

            if not self.received.wait_for(check, timeout):
                raise TimeoutError("the model server never saw such a request")
            return found[0]

    def wait_for_note(self, note: str, timeout: float = 60.0) -> None:
        with self.received:
            if not self.received.wait_for(lambda: note in self.notes, timeout):
                raise TimeoutError(f"no tool ever posted {note!r}")

    @property
    def notify_url(self) -> str:
        return self.url + "/notify"

    def __enter__(self) -> ScriptedChat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
