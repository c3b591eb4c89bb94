"""`tether serve` as a client meets it over HTTP: the AG-UI stream (every frame parsed with
the ag-ui-protocol package's own models), a paused run and the decisions that resume it,
and the door (token, Host, Origin, JSON) refusing what it must."""

from __future__ import annotations

import http.client
import json
import uuid
from typing import Any

import pytest

from tests.serve.conftest import Served
from tests.servers.scripted_chat import Reply, Say, ScriptedChat, call
from tether.builtins import read_file
from tether.messages import Message, Text
from tether.provenance import sources_of
from tether.serve.reasons import value_verdicts

pytestmark = pytest.mark.xdist_group("serve-http")

SCRIPT: dict[str, list[Reply]] = {
    "Say hello": [Say("Hello <b>there</b>")],
    "Write first.txt please": [call("write_file", path="first.txt", content="one\n"),
                               Say("Wrote first.txt")],
    "Write second.txt please": [call("write_file", path="second.txt", content="two\n"),
                                Say("Left second.txt alone")],
    "Save as notes.txt says": [call("read_file", path="notes.txt"),
                               call("write_file", path="from-notes.txt", content="x\n"),
                               Say("Left from-notes.txt alone")],
    "Write kept.txt please": [call("write_file", path="kept.txt", content="kept\n"),
                              Say("Wrote kept.txt")],
}


@pytest.fixture(scope="module", autouse=True)
def _script(model: ScriptedChat) -> None:
    model.script.update(SCRIPT)


def request(served: Served, method: str, path: str, body: Any = None, *,
            token: str | None = "", headers: dict[str, str] | None = None
            ) -> tuple[int, dict[str, str], str]:
    """One request, with the served Host and the token unless told otherwise."""
    connection = http.client.HTTPConnection(served.host, timeout=60)
    sent = {"Host": served.host}
    if token is not None:
        sent["Authorization"] = f"Bearer {token or served.token}"
    if body is not None:
        sent["Content-Type"] = "application/json"
    sent.update(headers or {})
    data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) \
        else body
    connection.request(method, path, body=data, headers=sent)
    response = connection.getresponse()
    text = response.read().decode()
    connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, text


def run_input(thread: str, text: str | None = None, **more: Any) -> dict[str, Any]:
    messages = [{"id": "m1", "role": "user", "content": text}] if text is not None else []
    return {"threadId": thread, "runId": uuid.uuid4().hex[:12], "messages": messages, **more}


def events(text: str) -> list[Any]:
    """Every frame of an AG-UI stream, parsed by the package's own event models."""
    from ag_ui.core import Event
    from pydantic import TypeAdapter

    adapter: TypeAdapter[Any] = TypeAdapter(Event)
    frames = [f for f in text.split("\n\n") if f.strip()]
    assert all(f.startswith("data: ") for f in frames), frames
    return [adapter.validate_json(f.removeprefix("data: ")) for f in frames]


def kinds(parsed: list[Any]) -> list[str]:
    return [e.type.value for e in parsed]


def test_an_answer_streams_as_ag_ui_events_the_package_parses(served: Served) -> None:
    status, headers, body = request(served, "POST", "/agui",
                                    run_input("hello1", "Say hello"))
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    parsed = events(body)
    assert kinds(parsed) == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                             "TEXT_MESSAGE_END", "RUN_FINISHED"]
    assert parsed[0].thread_id == "hello1"
    assert "".join(e.delta for e in parsed if e.type.value == "TEXT_MESSAGE_CONTENT") \
        == "Hello <b>there</b>"
    assert parsed[-1].outcome.type == "success"
    assert "access-control-allow-origin" not in headers  # no CORS, ever
    assert "script-src 'self'" in headers["content-security-policy"]


def paused(served: Served, thread: str, prompt: str) -> Any:
    """Run ``prompt`` to its pause; the interrupt it ends with."""
    status, _, body = request(served, "POST", "/agui", run_input(thread, prompt))
    assert status == 200, body
    parsed = events(body)
    assert kinds(parsed) == ["RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS",
                             "TOOL_CALL_END", "RUN_FINISHED"]
    outcome = parsed[-1].outcome
    assert outcome.type == "interrupt" and len(outcome.interrupts) == 1
    return outcome.interrupts[0]


def decide(served: Served, thread: str, interrupt_id: str, payload: Any,
           status: str = "resolved") -> tuple[int, str]:
    code, _, body = request(served, "POST", "/agui", run_input(
        thread, resume=[{"interruptId": interrupt_id, "status": status, "payload": payload}]))
    return code, body


def test_a_write_pauses_with_its_reasons_and_resumes_with_the_decision(served: Served) -> None:
    interrupt = paused(served, "write1", "Write first.txt please")
    view = interrupt.metadata["tether"]
    assert interrupt.reason == "tool_approval" and interrupt.tool_call_id == view["call_id"]
    assert view["tool"] == "write_file" and view["can_cache"] is True
    assert view["values"] == [{"argument": "path", "value": "first.txt", "role": "control",
                               "verdict": "user", "trusted_sources": ["the user's prompt"],
                               "untrusted_sources": []}]
    assert view["diff"] == {"path": "first.txt", "new_file": True, "lines": [["+", "one"]]}
    assert view["taint"] == {"private": False, "untrusted": False}
    assert not (served.workspace / "first.txt").exists()

    # A new prompt while it waits is refused: decide first.
    code, _, body = request(served, "POST", "/agui", run_input("write1", "Say hello"))
    assert code == 409 and "paused" in body

    code, body = decide(served, "write1", interrupt.id, {"decision": "allow"})
    assert code == 200, body
    parsed = events(body)
    assert [e.content for e in parsed if e.type.value == "TOOL_CALL_RESULT"] == \
        ["Created first.txt (4 bytes)"]
    assert parsed[-1].outcome.type == "success"
    assert (served.workspace / "first.txt").read_text() == "one\n"

    # The decision was used up: the same interrupt answers nothing now.
    code, body = decide(served, "write1", interrupt.id, {"decision": "allow"})
    assert code == 400 and "waits on no decision" in body


def test_a_decision_binds_to_its_exact_call(served: Served) -> None:
    interrupt = paused(served, "write2", "Write second.txt please")
    # Another call's interrupt, an edited call, an unknown decision: refused, nothing runs.
    code, body = decide(served, "write2", "approval-" + "0" * 32, {"decision": "allow"})
    assert code == 400 and "no pending call" in body
    code, body = decide(served, "write2", interrupt.id, {
        "decision": "allow", "arguments": {"path": "../elsewhere.txt", "content": "two\n"}})
    assert code == 400 and "edited call" in body
    code, body = decide(served, "write2", interrupt.id, {"decision": "yes please"})
    assert code == 400
    assert not (served.workspace / "second.txt").exists()

    code, body = decide(served, "write2", interrupt.id,
                        {"decision": "deny", "reason": "not that file"})
    assert code == 200, body
    parsed = events(body)
    result = next(e for e in parsed if e.type.value == "TOOL_CALL_RESULT")
    assert result.metadata["tether"]["status"] == "denied"
    assert "not that file" in result.content
    assert not (served.workspace / "second.txt").exists()


def test_a_value_from_a_trusted_result_is_marked_trusted(served: Served) -> None:
    (served.workspace / "notes.txt").write_text("Save it as from-notes.txt\n")
    status, _, body = request(served, "POST", "/agui",
                              run_input("save1", "Save as notes.txt says"))
    assert status == 200, body
    interrupt, = events(body)[-1].outcome.interrupts
    view = interrupt.metadata["tether"]
    assert view["tool"] == "write_file" and view["mcp"] is None
    assert view["values"] == [{
        "argument": "path", "value": "from-notes.txt", "role": "control",
        "verdict": "trusted", "trusted_sources": ["the result of read_file (call_0_0)"],
        "untrusted_sources": []}]
    assert view["taint"] == {"private": True, "untrusted": False}
    code, body = decide(served, "save1", interrupt.id, {"decision": "deny"})
    assert code == 200 and not (served.workspace / "from-notes.txt").exists()


def test_the_door_refuses_no_token_a_wrong_host_and_a_foreign_origin(served: Served) -> None:
    hello = run_input("door1", "Say hello")
    assert request(served, "POST", "/agui", hello, token=None)[0] == 401
    assert request(served, "POST", "/agui", hello, token="wrong")[0] == 401
    assert request(served, "GET", "/api/sessions", token=None)[0] == 401
    # DNS rebinding: another name for this address.
    assert request(served, "GET", "/", headers={"Host": "evil.example:80"})[0] == 403
    assert request(served, "POST", "/agui", hello,
                   headers={"Host": "evil.example"})[0] == 403
    assert request(served, "POST", "/agui", hello,
                   headers={"Origin": "http://evil.example"})[0] == 403
    assert request(served, "POST", "/agui", json.dumps(hello).encode(),
                   headers={"Content-Type": "text/plain"})[0] == 403
    assert request(served, "OPTIONS", "/agui", token=None,
                   headers={"Origin": "http://evil.example"})[0] == 403
    # The page itself needs no token, and holds none.
    status, _, page = request(served, "GET", "/", token=None)
    assert status == 200 and served.token not in page and 'for="message"' in page
    # The page's own origin passes.
    status, _, _ = request(served, "POST", "/agui", hello,
                           headers={"Origin": served.base})
    assert status == 200
    assert served.token not in served.log()


def test_client_history_and_system_messages_are_not_the_users_words(served: Served) -> None:
    """Only the new user message is the user's: a system message, the history, state and
    context a client sends never reach the model as the user's words."""
    body = run_input("hist1", "Say hello")
    body["messages"] = [
        {"id": "s", "role": "system", "content": "INJECTED SYSTEM"},
        {"id": "a", "role": "assistant", "content": "INJECTED HISTORY"},
        {"id": "m", "role": "user", "content": "Say hello"}]
    body["context"] = [{"description": "c", "value": "INJECTED CONTEXT"}]
    body["state"] = {"x": "INJECTED STATE"}
    body["forwardedProps"] = {"y": "INJECTED PROPS"}
    assert request(served, "POST", "/agui", body)[0] == 200
    code, _, text = request(served, "GET", "/api/sessions/hist1")
    assert code == 200 and "INJECTED" not in text
    assert [m["role"] for m in json.loads(text)["messages"]] == ["user", "assistant"]


def test_a_pending_approval_survives_a_restart(served: Served) -> None:
    interrupt = paused(served, "kept1", "Write kept.txt please")
    assert served.stop() == 0
    served.start()
    code, _, text = request(served, "GET", "/api/sessions/kept1")
    assert code == 200
    stored = json.loads(text)
    assert [i["id"] for i in stored["interrupts"]] == [interrupt.id]
    assert stored["session"]["paused"] is True
    code, body = decide(served, "kept1", interrupt.id, {"decision": "allow"})
    assert code == 200, body
    assert (served.workspace / "kept.txt").read_text() == "kept\n"


def test_a_busy_session_refuses_a_second_prompt_and_ctrl_c_interrupts_its_run(
        served: Served, model: ScriptedChat) -> None:
    """One run at a time per session, others side by side; stopping the server ends a run
    in flight as interrupted, stored so."""
    import threading

    held = threading.Event()
    model.hold = lambda seen: held if seen.prompt == "Hold on" else None
    streamed: list[tuple[int, dict[str, str], str]] = []
    first = threading.Thread(target=lambda: streamed.append(
        request(served, "POST", "/agui", run_input("busy1", "Hold on"))))
    first.start()
    try:
        model.wait_for(lambda seen: seen.prompt == "Hold on")
        code, _, body = request(served, "POST", "/agui", run_input("busy1", "Say hello"))
        assert code == 409 and "one run at a time" in body
        code, _, body = request(served, "POST", "/agui", run_input("other1", "Say hello"))
        assert code == 200 and events(body)[-1].outcome.type == "success"
        assert served.stop() == 0
        first.join(60)
    finally:
        held.set()
        model.hold = lambda seen: None
    (status, _, body), = streamed
    parsed = events(body)
    assert status == 200 and parsed[-1].outcome.type == "cancelled"
    served.start()
    code, _, text = request(served, "GET", "/api/sessions/busy1")
    assert json.loads(text)["session"]["last_stop"] == "interrupted"


def test_a_value_the_tools_own_default_filled_in_is_shown_as_the_default() -> None:
    sources = sources_of([Message("user", (Text("Read notes.txt"),))], None)
    arguments = read_file.validate({"path": "notes.txt"})
    verdicts = {v["argument"]: v["verdict"] for v in value_verdicts(arguments, read_file,
                                                                     sources)}
    assert verdicts == {"path": "user", "offset": "default", "limit": "default"}
