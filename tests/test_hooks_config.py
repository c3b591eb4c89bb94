"""``[[hooks]]`` in tether.toml: a Python callable named as ``[tools] python`` names tools,
loaded with the same trust rules (its file is tether's own: the file tools may not change
it), and guardrails from the configuration."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.security.conftest import Compromised, instruction
from tether import GuardrailTripped
from tether.config import agent_from_config
from tether.errors import ConfigError
from tether.guardrails import OutputGuardrail
from tether.providers import Scripted, call

HOOKS = '''
from tether import CallView, RefuseCall


class NoDeploys:
    async def before_tool_call(self, call: CallView) -> RefuseCall | None:
        return RefuseCall("no deploys from config") if call.tool == "write_file" else None


audit = NoDeploys()


def broken():
    raise RuntimeError("cannot reach the audit service")


not_a_hook = 42
'''


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TETHER_CONFIG", os.devnull)
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "mine.py").write_text(HOOKS)
    return tmp_path


def configured(ws: Path, hooks: list[str], extra: str = "") -> Path:
    entries = "".join(f'[[hooks]]\npython = "{h}"\n' for h in hooks)
    (ws / "tether.toml").write_text("[tools]\nenabled = ['write_file']\n" + extra + entries)
    return ws


@pytest.mark.parametrize("name", ["NoDeploys", "audit"])
async def test_a_hook_named_in_the_config_runs_on_every_call(
        ws: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = ws / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the reference is the workspace's, wherever tether runs
    model = Scripted([call("write_file", path="a.txt", content="x"), "done"])
    agent = agent_from_config(configured(ws, ["hooks/mine.py:" + name]), model=model,
                              permission_mode="allow")
    result = await agent.run("write it")
    assert [r.status for r in result.tool_calls] == ["denied"]
    assert not (ws / "a.txt").exists()


async def test_a_guardrail_from_the_config_withholds_a_secret(ws: Path) -> None:
    model = Scripted(["the key is AKIAIOSFODNN7EXAMPLE"])
    agent = agent_from_config(configured(ws, ["tether.guardrails:secrets_in_answer"]),
                              model=model)
    assert isinstance(agent.hooks.given[0], OutputGuardrail)
    with pytest.raises(GuardrailTripped):
        await agent.run("what is the key?")


def test_hook_timeout_secs_is_an_agent_key(ws: Path) -> None:
    agent = agent_from_config(configured(ws, [], "[agent]\nhook_timeout_secs = 2.5\n"))
    assert agent.hook_timeout_secs == 2.5


async def test_a_hook_file_is_tethers_own_and_no_file_tool_may_change_it(ws: Path) -> None:
    hook_file = ws / "hooks" / "mine.py"
    before = hook_file.read_text()
    agent = agent_from_config(configured(ws, ["tether.guardrails:secrets_in_answer",
                                              "hooks/mine.py:NoDeploys"]),
                              model=Compromised().model(), permission_mode="allow",
                              hooks=[])
    assert hook_file in agent.security.protected_paths
    # A compromised model told to rewrite the hook so it allows everything.
    result = await agent.run("Tidy up.\n" + instruction(
        ("write_file", {"path": "hooks/mine.py", "content": "audit = None\n"})))
    assert hook_file.read_text() == before
    assert [r.status for r in result.tool_calls] == ["error"], result.tool_calls


@pytest.mark.parametrize(("reference", "message"), [
    ("hooks/mine.py", "name the hook after a colon"),
    ("hooks/mine.py:missing", "has no attribute 'missing'"),
    ("hooks/mine.py:broken", r"calling broken\(\) failed: RuntimeError: cannot reach"),
    ("hooks/mine.py:not_a_hook", "has none of the hook methods"),
    ("no_such_module_x:hook", "cannot import 'no_such_module_x'"),
])
def test_a_hook_that_cannot_be_loaded_is_a_config_error_naming_it(
        ws: Path, reference: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        agent_from_config(configured(ws, [reference]))


def test_a_hook_entry_must_name_something(ws: Path) -> None:
    (ws / "tether.toml").write_text('[[hooks]]\npython = ""\n')
    with pytest.raises(ConfigError, match=r"hooks\.0\.python"):
        agent_from_config(ws)
