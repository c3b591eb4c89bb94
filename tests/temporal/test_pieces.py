"""The pieces of tether.temporal that need no server: the binding of a decision signal,
the payloads, the blob store, workflow ids, the converter, the [temporal] section, the blob
folder as one of tether's own files."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tether import Decision
from tether.approval import ApprovalRequest
from tether.conversation import Conversation, PendingCall
from tether.errors import ConfigError, RateLimitError
from tether.messages import FieldLabel, Image, Message, ToolCall, Usage
from tether.provenance import Source
from tether.providers.base import ModelRequest, ModelResponse, NamedToolChoice
from tether.temporal.approvals import SignalApprover, bind_signal, signal_payload
from tether.temporal.blobs import BlobError, BlobStore
from tether.temporal.payloads import (
    error_from_dict,
    error_to_dict,
    output_from_dict,
    output_to_dict,
    request_from_dict,
    request_to_dict,
    response_from_dict,
    response_to_dict,
    source_from_dict,
    source_to_dict,
)
from tether.tools.spec import ToolSpec
from tether.tools.tool import ToolOutput
from tether.trust import Taint

CALL = PendingCall("c1", "launch", {"target": "moon", "speed": 2}, "needs_approval",
                   "Launch needs approval before it runs.", 0)


def test_a_decision_binds_to_the_call_it_names_exactly() -> None:
    bound = bind_signal([CALL], signal_payload(CALL, Decision.allow()))
    assert not isinstance(bound, str)
    assert bound.call is CALL and bound.decision == Decision.allow()


def test_a_decision_in_the_older_shape_binds_too() -> None:
    payload = {**signal_payload(CALL, Decision.allow()),
               "decision": {"scope": "session", "reason": None}}
    bound = bind_signal([CALL], payload)
    assert not isinstance(bound, str) and bound.decision == Decision.allow_for_session()


@pytest.mark.parametrize("change", [
    {"arguments": {"target": "mars", "speed": 2}},
    {"arguments": {"target": "moon"}},
    {"arguments": {"target": "moon", "speed": 2.5}},
    {"position": 1}, {"position": "0"}, {"position": None},
    {"call_id": "c2"}, {"tool": "Launch"},
    {"decision": {"verdict": "defer"}}, {"decision": {"verdict": "always"}},
    {"decision": {"scope": "defer"}}, {"decision": {"verdict": None, "scope": "once"}},
    {"decision": "allow"}, {"decision": {"verdict": "deny", "reason": ["x"]}},
    {"arguments": float("nan")},
])
def test_a_decision_that_names_anything_else_is_refused_with_the_waiting_calls(
        change: dict[str, Any]) -> None:
    payload = {**signal_payload(CALL, Decision.allow()), **change}
    refused = bind_signal([CALL], payload)
    assert isinstance(refused, str)


@pytest.mark.parametrize("payload", [None, "allow", 1, [], {"position": 0}])
def test_a_malformed_signal_is_refused_not_raised(payload: Any) -> None:
    assert isinstance(bind_signal([CALL], payload), str)


def test_arguments_are_compared_as_json_whatever_their_key_order() -> None:
    payload = {**signal_payload(CALL, Decision.deny("no")),
               "arguments": {"speed": 2, "target": "moon"}}
    bound = bind_signal([CALL], payload)
    assert not isinstance(bound, str) and bound.decision.reason == "no"


def test_two_calls_that_share_an_id_are_told_apart_by_position() -> None:
    conversation = Conversation([Message("assistant", (
        ToolCall("x", "launch", '{"target": "a"}'), ToolCall("x", "launch", '{"target": "b"}')))])
    waits: list[Any] = []

    async def wait(condition: Any) -> None:  # as workflow.wait_condition: until it holds
        waits.append(condition)
        while not condition():
            await asyncio.sleep(0)  # a turn of the loop, not a wait for time

    approver = SignalApprover(conversation, wait, lambda: None, lambda: False)

    async def ask(target: str) -> tuple[int | None, Decision]:
        request = ApprovalRequest("x", "launch", "Launch", {"target": target},
                                  "needs_approval", "", Taint())
        task = asyncio.ensure_future(approver.approve(request))
        await asyncio.sleep(0)
        (waiting,) = approver.waiting
        # A decision for the other position does not bind.
        other = dataclasses.replace(waiting, position=1 - (waiting.position or 0))
        assert approver.decide(signal_payload(other, Decision.allow())) is not None
        assert approver.decide(signal_payload(waiting, Decision.deny(target))) is None
        return waiting.position, await task

    async def both() -> list[tuple[int | None, Decision]]:
        return [await ask("a"), await ask("b")]

    assert asyncio.run(both()) == [(0, Decision.deny("a")), (1, Decision.deny("b"))]


def test_an_interrupted_wait_is_a_denial() -> None:
    conversation = Conversation([Message("assistant", (ToolCall("c1", "launch", "{}"),))])

    async def wait(condition: Any) -> None:
        assert condition()

    approver = SignalApprover(conversation, wait, lambda: None, lambda: True)
    request = ApprovalRequest("c1", "launch", "Launch", {}, "needs_approval", "", Taint())
    decision = asyncio.run(approver.approve(request))
    assert decision.verdict == "deny" and "interrupted" in (decision.reason or "")


def test_requests_responses_and_outputs_read_back_the_same() -> None:
    spec = ToolSpec("add", "Add.", {"type": "object", "properties": {"b": {}, "a": {}}})
    request = ModelRequest((Message.user("hi"),), "sys", [spec], NamedToolChoice("add"), 10,
                           0.5, True)
    assert request_from_dict(request_to_dict(request), request.messages) == request
    response = ModelResponse(Message("assistant", (ToolCall("1", "add", '{"a": 1}'),)),
                             "tool_calls", Usage(3, 4, requests=1, details={"r": 1}), "m", "id")
    assert response_from_dict(response_to_dict(response)) == response
    output = ToolOutput("x", True, {"k": [1]}, False, Usage(1, 2), Taint(untrusted=True))
    assert output_from_dict(output_to_dict(output)) == output
    # An MCP tool's images travel with its output through history, as JSON.
    pictured = ToolOutput("[image 1: image/png]", images=(Image("image/png", b"\x89PNG"),))
    assert output_from_dict(json.loads(json.dumps(output_to_dict(pictured)))) == pictured

    labelled = ToolOutput("id: 7", fields=(FieldLabel(".id", "7", "service"),
                                           FieldLabel(".pin", "9911", secret=True)),
                          written=("a draft",))
    assert output_from_dict(output_to_dict(labelled)) == labelled


def test_a_childs_inherited_sources_keep_their_trusted_fields_in_history() -> None:
    source = Source("the result of ls (c1)", "", False, True,
                    (FieldLabel(".owner", "me@corp.test", "user"),))
    assert source_from_dict(json.loads(json.dumps(source_to_dict(source)))) == source
    hostile = {"name": "x", "text": "", "fields": [{"path": ".a", "value": "v", "by": 3}, 9]}
    assert source_from_dict(hostile).fields == (FieldLabel(".a", "v", "others"),)


def test_a_provider_error_is_rebuilt_only_as_a_provider_error_kind() -> None:
    error = error_from_dict(error_to_dict(RateLimitError("slow down", retry_after=3,
                                                         provider="p", status=429)), "w")
    assert isinstance(error, RateLimitError) and error.retry_after == 3.0
    assert error.status == 429 and str(error) == "slow down"
    forged = error_from_dict({"type": "SystemExit", "message": "bye"}, "w")
    assert type(forged).__name__ == "ProviderError" and str(forged) == "bye"


def test_a_blob_reads_back_and_a_changed_one_is_refused(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    name = store.put(b"hello")
    assert store.get(name) == b"hello" and store.put(b"hello") == name
    (tmp_path / name[:2] / name[2:]).write_bytes(b"HELLO")
    with pytest.raises(BlobError, match="was changed"):
        store.get(name)
    with pytest.raises(BlobError, match="blob_dir"):
        store.get("0" * 64)
    with pytest.raises(BlobError, match="not a blob name"):
        store.get("../../etc/passwd")


def test_an_item_id_makes_one_workflow_id_readable_when_plain_hashed_when_not() -> None:
    from tether.temporal.batch import workflow_id

    assert workflow_id("b1", "q-1.a_b") == "tether-batch-b1-q-1.a_b"
    odd = {workflow_id("b1", i) for i in ("a/b", "a b", "a\nb", "é", "x" * 500, "h:zz")}
    assert len(odd) == 6 and all(len(w) < 100 for w in odd)


def test_an_items_log_is_replayed_into_the_session_made_for_it_and_a_bad_one_makes_none(
        tmp_path: Path) -> None:
    from tether.batch import BatchItem
    from tether.store.journal import JournalError
    from tether.store.session import Session
    from tether.store.sqlite import SQLiteStore
    from tether.temporal.batch import logged

    store = SQLiteStore(tmp_path / "s.db")
    item = BatchItem("q1", ("Hi",))

    def session_for(item: BatchItem) -> Session:
        return Session.create(store, title=item.turns[0], batch="b", batch_item=item.id)

    from tether.messages import Text, message_to_dict

    message = message_to_dict(Message("user", (Text("Hi"),)))
    sid = logged(item, {"log": [["message", 0, message, {}]]}, session_for)
    assert sid is not None and [m.text for m in Session.load(sid, store).messages] == ["Hi"]
    # No log (a worker of an older tether), or not asked: nothing is made.
    assert logged(item, {}, session_for) is None
    assert logged(item, {"log": []}, None) is None
    with pytest.raises(JournalError):
        logged(item, {"log": [["message", 0, "<script>", {}]]}, session_for)
    assert [i.id for i in store.list(batch="b")] == [sid]


def test_payloads_keep_the_order_of_keys() -> None:
    from tether.temporal.converter import DATA_CONVERTER

    (payload,) = DATA_CONVERTER.payload_converter.to_payloads([{"b": 1, "a": {"d": 2, "c": 3}}])
    assert payload.data == b'{"b":1,"a":{"d":2,"c":3}}'
    assert DATA_CONVERTER.payload_converter.from_payloads([payload]) == \
        [{"b": 1, "a": {"d": 2, "c": 3}}]


def test_the_temporal_section_has_defaults_and_refuses_unknown_keys(tmp_path: Path) -> None:
    from tether.config import load_config

    cfg = load_config(tmp_path, env={})
    assert (cfg.temporal.address, cfg.temporal.namespace, cfg.temporal.task_queue) == \
        ("127.0.0.1:7233", "default", "tether")
    (tmp_path / "tether.toml").write_text('[temporal]\naddress = "h:1"\ntask_queu = "x"\n')
    with pytest.raises(ConfigError, match=r"unknown key temporal\.task_queu"):
        load_config(tmp_path, env={})


@pytest.mark.parametrize("flag", [["--session", "s1"], ["--output-schema", "x.json"],
                                  ["--tools", "t.py"], ["--local"], ["--no-tools"],
                                  ["-T", "calculator"]])
def test_flags_a_durable_run_cannot_honour_are_refused_before_anything_runs(
        tmp_path: Path, flag: list[str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.cli import main

    monkeypatch.setenv("TETHER_CONFIG", str(tmp_path / "none.toml"))
    assert main(["-w", str(tmp_path), "run", "--engine", "temporal", *flag, "hi"]) == 1
    err = capsys.readouterr().err
    assert f"{flag[0]} is not available with --engine temporal" in err


@pytest.mark.parametrize("flag", [["--local"], ["--tools", "t.py"], ["-T", "calculator"]])
def test_flags_a_durable_batch_cannot_honour_are_refused_before_anything_runs(
        tmp_path: Path, flag: list[str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.cli import main

    monkeypatch.setenv("TETHER_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "in.jsonl").write_text('"hi"\n')
    assert main(["-w", str(tmp_path), "batch", str(tmp_path / "in.jsonl"), "-o",
                 str(tmp_path / "out.jsonl"), "--engine", "temporal", *flag]) == 1
    err = capsys.readouterr().err
    assert f"{flag[0]} is not available with --engine temporal" in err


@pytest.mark.parametrize("configured", [True, False])
async def test_the_blob_folder_is_one_of_tethers_own_files_an_approved_write_is_refused(
        tmp_path: Path, configured: bool) -> None:
    from tether.builtins import write_file
    from tether.config import agent_from_config, load_config
    from tether.tools.tool import ToolContext
    from tether.trust import CLEAN

    blobs = tmp_path / ("shared-blobs" if configured else "data/tether/temporal-blobs")
    blobs.mkdir(parents=True)
    (tmp_path / "tether.toml").write_text(
        '[tools]\npermission_mode = "allow"\n'
        + (f'[temporal]\nblob_dir = "{blobs}"\n' if configured else ""))
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "TETHER_CONFIG": os.devnull}
    # The default folder is named by the environment, as SecurityConfig() reads it.
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        cfg = load_config(tmp_path, env=env)
        agent = agent_from_config(tmp_path, config=cfg, approver=None)
    ctx = ToolContext("c", "write_file", CLEAN, tmp_path, agent.security)
    out = await write_file.handler({"path": str(blobs.relative_to(tmp_path) / "ab" / "cd"),
                                    "content": "forged"}, ctx)
    assert isinstance(out, ToolOutput) and out.is_error and "tether's own files" in out.content
    assert list(blobs.iterdir()) == []


@pytest.mark.parametrize("bridge", [True, False])
def test_a_process_that_used_temporal_exits_with_its_code_and_its_output_flushed(
        bridge: bool) -> None:
    # Once temporalio's core is loaded the process ends without finalizing the interpreter
    # (temporalio/sdk-python#300): what it printed, to a pipe (buffered), still arrives.
    import subprocess
    import sys

    load = "import temporalio.bridge.client; " if bridge else ""
    program = (f"{load}import logging, sys; from tether.temporal import exit_process; "
               "print('out', end=''); print('err', end='', file=sys.stderr); "
               "logging.basicConfig(stream=sys.stderr); logging.error('logged'); "
               "exit_process(3)")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stdout) == (3, "out")
    assert done.stderr.startswith("err") and "logged" in done.stderr


# --- what shapes the gate crosses into the workflow whole -------------------------------------


def test_a_tool_crosses_into_the_workflow_with_everything_the_gate_reads() -> None:
    from tether import Capabilities, Tool
    from tether.temporal.payloads import tool_entry
    from tether.temporal.standins import Timing, activity_tool

    async def handler(arguments: dict[str, Any], ctx: Any) -> str:
        return "x"

    # Every field off its default: a field added to Tool and not carried fails here.
    tool = Tool(ToolSpec("send", "Send.", {"type": "object"}, "Send it", needs_approval=True),
                handler, Capabilities(True, True, True, True), None, cache_approval=False,
                origin="mcp", read_only_hint=False, server="mail", spec_from_outside=True,
                idempotent=True, content_params=["body"], destination_params=["to", "cc"],
                closed_destinations=True, returns_secrets=True)
    entry = json.loads(json.dumps(tool_entry(tool)))  # as history holds it
    made = activity_tool(entry, None, Timing(1.0, None, 100, 100))
    # The handler runs on the worker; the validator and the correction wording are the
    # worker's own tool's (local_validator), never data.
    not_carried = {"handler", "validator", "on_invalid"}
    for f in dataclasses.fields(Tool):
        if f.name not in not_carried:
            assert getattr(made, f.name) == getattr(tool, f.name), f.name
    assert [made.parameter_role(n) for n in ("body", "to", "cc", "other")] == \
        ["content", "destination", "destination", "control"]


def test_a_tool_entry_recorded_without_roles_has_only_control_parameters() -> None:
    from tether.temporal.standins import Timing, activity_tool

    entry = {"spec": {"name": "send", "description": "", "schema_json": {"type": "object"}},
             "capabilities": {"external_send": True}}
    made = activity_tool(entry, None, Timing(1.0, None, 100, 100))
    assert (made.content_params, made.destination_params) == ((), ())


def test_security_settings_cross_into_the_workflow_whole() -> None:
    from tether.temporal.payloads import security_from_dict, security_to_dict
    from tether.trust import SecurityConfig

    changed = SecurityConfig(trifecta="ask", block_private_ips=False,
                             allowed_domains=("a.example",), blocked_domains=("b.example",),
                             mark_untrusted_output=False, max_result_chars=123,
                             protected_paths=(Path("/srv/own"),), rule="interlock",
                             endorse_destructive=True, readable_paths=(Path("/srv/skills"),))
    default = SecurityConfig(protected_paths=())
    # Every field off its default: a field added to SecurityConfig must be set here.
    assert [f.name for f in dataclasses.fields(SecurityConfig)
            if getattr(changed, f.name) == getattr(default, f.name)] == []
    assert security_from_dict(json.loads(json.dumps(security_to_dict(changed)))) == changed
    # A plan recorded by an older tether: the defaults, and no paths of this process's.
    old = security_from_dict({"trifecta": "block", "mark_untrusted_output": True,
                              "max_result_chars": 50_000})
    assert old == default


async def test_a_durable_run_has_the_settings_of_a_run_in_process_of_the_same_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether import from_config
    from tether.config import load_config
    from tether.subagents import SubagentProfile
    from tether.temporal.worker import WorkerRuntime
    from tether.temporal.workflow import run_settings

    monkeypatch.setenv("TETHER_CONFIG", os.devnull)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    (tmp_path / "tether.toml").write_text(
        'default_provider = "m"\n[providers.m]\nkind = "openai-chat"\n'
        'base_url = "http://127.0.0.1:9/v1"\nmodel = "x"\n'
        '[agent]\nsystem_prompt = "Be brief."\nmax_turns = 7\ntemperature = 0.25\n'
        '[tools]\npermission_mode = "read-only"\n'
        '[security]\nrule = "interlock"\ntrifecta = "ask"\nblock_private_ips = false\n'
        'allowed_domains = ["a.example"]\nblocked_domains = ["b.example"]\n'
        'mark_untrusted_output = false\nmax_result_chars = 500\n'
        '[[subagents]]\nname = "r"\ndescription = "R."\nsystem_prompt = "Rate."\n'
        'max_turns = 3\n')
    runtime = await WorkerRuntime.start(tmp_path, load_config(tmp_path))
    try:
        durable = run_settings(runtime.plan({}))
    finally:
        await runtime.aclose()
    local = from_config(tmp_path).settings
    # Results are cut on the worker, to max_result_chars: the workflow must not cut them
    # again. The timeouts are Temporal's and the worker's; the context strategy is the
    # default (it fits requests; it judges no call).
    assert durable.security == dataclasses.replace(local.security, max_result_chars=sys.maxsize)
    assert (durable.security.rule, durable.security.trifecta) == ("interlock", "ask")
    for f in dataclasses.fields(local):
        if f.name not in ("security", "context", "approval_timeout_secs", "tool_timeout_secs"):
            assert getattr(durable, f.name) == getattr(local, f.name), f.name
    profile = SubagentProfile("r", "R.", system_prompt="Rate.", max_turns=3)
    child = profile.child_settings(durable)
    assert (child.system_prompt, child.max_turns, child.security, child.permission_mode) == \
        ("Rate.", 3, durable.security, "read-only")


def test_a_durable_child_starts_as_one_in_process_does() -> None:
    from tether.provenance import Source
    from tether.subagents import child_conversation
    from tether.temporal.payloads import source_from_dict, source_to_dict

    seen = (Source("the user's prompt", "mail bob@example.com", True),
            Source("the result of read_notes (c1)", "code 42", True, private=True),
            Source("the result of read_page (c2)", "mail evil@example.com", False))
    crossed = [source_from_dict(json.loads(json.dumps(source_to_dict(s)))) for s in seen]
    assert crossed == list(seen)
    tainted = child_conversation(Taint(untrusted=True), crossed)
    assert not tainted.prompts_trusted and tainted.taint == Taint(untrusted=True)
    assert tainted.inherited_sources == seen[:2]  # the untrusted text stays behind
    assert child_conversation(Taint(private=True), crossed).prompts_trusted


async def test_a_workers_tool_calls_get_the_deps_its_factory_builds(tmp_path: Path) -> None:
    """A durable run carries no ``deps`` through history: the worker's factory makes them
    for each call its tools run (here through the tool activity, in temporalio's own
    activity environment)."""
    from temporalio.testing import ActivityEnvironment

    from tether.config import load_config
    from tether.temporal.activities import TetherActivities
    from tether.temporal.worker import WorkerRuntime

    (tmp_path / "tools.py").write_text(
        "from tether import ToolContext, tool\n\n"
        "@tool\ndef whoami(ctx: ToolContext[dict]) -> str:\n"
        "    \"\"\"Who runs this call.\"\"\"\n    return ctx.deps['user']\n")
    (tmp_path / "tether.toml").write_text("[tools]\nenabled = []\npython = ['tools.py']\n")
    made: list[int] = []

    def factory() -> dict[str, str]:
        made.append(1)
        return {"user": "ada"}

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TETHER_CONFIG", os.devnull)
        cfg = load_config(tmp_path, env={"TETHER_CONFIG": os.devnull})
        runtime = await WorkerRuntime.start(tmp_path, cfg, deps=factory)
    try:
        call = {"tool": "whoami", "arguments": {}, "call_id": "c1", "taint": {},
                "path": [], "timeout_secs": 10, "max_result_chars": 1000}
        out = await ActivityEnvironment().run(TetherActivities(runtime).tool, call)
    finally:
        await runtime.aclose()
    assert out["content"] == "ada" and made == [1]
